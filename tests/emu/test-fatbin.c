/* test-fatbin.c — the pieces the emulator needs to run NVIDIA's runtime, tested alone: MD2 and
 * HMAC-MD2 (the integrity answer; RFC 1319 test suite), the fatbin reader on nvcc 13 output
 * (zstd, plain, LZ4, SASS only, truncated), and PTX module variables with initializers.
 * The nvcc 13 seeds in tests/fuzz/corpus are checked as committed; the `nvcc_now` cases read what
 * the pinned nvcc (scripts/cuda-wheels.txt) makes of tests/runtime/rt-prog.cu at build time,
 * in $NVCC_OUT_DIR (tests/emu/meson.build), so a new nvcc that changes the format fails here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"
#include "md2.h"
#include "ptx.h"
#include "tap.h"

static void hex(const uint8_t *d, char *out)
{
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

TEST(md2_rfc1319_suite)
{
    static const struct {
        const char *msg, *digest;
    } v[] = {
        {"", "8350e5a3e24c153df2275c9f80692773"},
        {"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"},
        {"abc", "da853b0d3f88d99b30283a69e6ded6bb"},
        {"message digest", "ab4f496bfb2a530b219ff33031fe06b0"},
        {"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"},
        {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
         "da33def2a42df13975352846c30338cd"},
        {"1234567890123456789012345678901234567890123456789012345678901234567890123456789"
         "0",
         "d5976f79d83d3a0dc9806c3c66f3efd8"},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t d[16];
        char h[33];
        md2(v[i].msg, strlen(v[i].msg), d);
        hex(d, h);
        CHECK_EQ_STR(h, v[i].digest);
        /* the same fed in pieces */
        struct md2_ctx c;
        md2_init(&c);
        for (size_t k = 0; k < strlen(v[i].msg); k++)
            md2_update(&c, v[i].msg + k, 1);
        md2_final(&c, d);
        hex(d, h);
        CHECK_EQ_STR(h, v[i].digest);
    }
}

/* RFC 2104's construction, spelled out: H(K ^ opad, H(K ^ ipad, text)); a long key is hashed. */
TEST(hmac_md2_construction)
{
    uint8_t key[16], ipad[16 + 5], opad[32], inner[16], want[16], got[16];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 16; i++)
        ipad[i] = key[i] ^ 0x36, opad[i] = key[i] ^ 0x5c;
    memcpy(ipad + 16, "hello", 5);
    md2(ipad, sizeof(ipad), inner);
    memcpy(opad + 16, inner, 16);
    md2(opad, sizeof(opad), want);
    md2_hmac(key, 16, "hello", 5, got);
    CHECK(memcmp(got, want, 16) == 0);
    /* a 20-byte key is first hashed to 16 */
    uint8_t long_key[20] = {1, 2, 3}, hk[16];
    md2(long_key, 20, hk);
    md2_hmac(hk, 16, "x", 1, want);
    md2_hmac(long_key, 20, "x", 1, got);
    CHECK(memcmp(got, want, 16) == 0);
}

static uint8_t *slurp_in(const char *dir, const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

static uint8_t *slurp(const char *name, size_t *len)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/fuzz/corpus", tap_srcdir());
    return slurp_in(dir, name, len);
}

/* where this build's nvcc output is; NULL (the case skipped) where there is no nvcc */
static const char *nvcc_out_dir(void)
{
    const char *dir = getenv("NVCC_OUT_DIR");
    if (dir && *dir)
        return dir;
    tap_skip_case("no CUDA 13 toolkit (-Dnvcc_root): run scripts/cuda-wheels.sh");
    return NULL;
}

/* The PTX of the fatbin in b: for compute_90, with rt-prog.cu's kernels spin and add_one (in
 * that order, and the only ones where `only` is set); returned (malloc'd) when ret_text. */
static void check_ptx(uint8_t *b, size_t len, enum fatbin_codec codec, bool only, char **ret_text)
{
    struct fatbin_entry e;
    REQUIRE_EQ_INT(fatbin_find_ptx(b, len, &e), 0);
    CHECK_EQ_INT(e.kind, 1);
    CHECK_EQ_INT(e.sm, 90);
    CHECK_EQ_INT(e.codec, codec);
    char *text;
    size_t tl;
    REQUIRE_EQ_INT(fatbin_ptx_text(&e, &text, &tl), 0);
    struct ptx_kernel k[8];
    size_t n = 0;
    CHECK_EQ_INT(ptx_parse(text, tl, k, 8, &n), 0);
    if (only)
        CHECK_EQ_INT(n, 2);
    REQUIRE(n >= 2);
    CHECK_EQ_STR(k[0].name, "spin");
    CHECK_EQ_STR(k[1].name, "add_one");
    if (ret_text)
        *ret_text = text;
    else
        free(text);
}

static void ptx_of(const char *file, enum fatbin_codec codec)
{
    size_t len;
    uint8_t *b = slurp(file, &len);
    REQUIRE(b);
    check_ptx(b, len, codec, true, NULL);
    free(b);
}

TEST(fatbin_nvcc13_zstd)
{
    ptx_of("fatbin/nvcc13-zstd.fatbin", FATBIN_ZSTD);
}

TEST(fatbin_nvcc13_plain)
{
    ptx_of("fatbin/nvcc13-plain.fatbin", FATBIN_PLAIN);
}

TEST(fatbin_lz4)
{
    ptx_of("fatbin/lz4.fatbin", FATBIN_LZ4);
}

/* `nvcc --fatbin` now, with its default compression (zstd in 13.0) and --no-compress: both
 * found, both decompress to the same PTX text */
TEST(fatbin_nvcc_now)
{
    const char *dir = nvcc_out_dir();
    if (!dir)
        return;
    size_t zl, pl;
    uint8_t *z = slurp_in(dir, "rt-prog-zstd.fatbin", &zl);
    uint8_t *p = slurp_in(dir, "rt-prog-plain.fatbin", &pl);
    REQUIRE(z && p);
    char *zt = NULL, *pt = NULL;
    check_ptx(z, zl, FATBIN_ZSTD, false, &zt);
    check_ptx(p, pl, FATBIN_PLAIN, false, &pt);
    REQUIRE(zt && pt);
    CHECK_EQ_STR(zt, pt);
    free(zt);
    free(pt);
    free(z);
    free(p);
}

TEST(fatbin_sass_only_and_bad)
{
    size_t len;
    uint8_t *b = slurp("fatbin/sass-only.fatbin", &len);
    REQUIRE(b);
    struct fatbin_entry e;
    CHECK_EQ_INT(fatbin_find_ptx(b, len, &e), -ENOEXEC);
    free(b);
    b = slurp("fatbin/nvcc13-zstd.fatbin", &len);
    REQUIRE(b);
    /* every truncation is refused, never read past */
    for (size_t cut = 1; cut < len; cut++) {
        uint8_t *t = malloc(cut);
        memcpy(t, b, cut);
        int r = fatbin_find_ptx(t, cut, &e);
        if (r == 0) { /* only possible when cut ends exactly after a whole fatbin */
            CHECK(e.data + e.len <= t + cut);
        } else {
            CHECK(r == -EINVAL || r == -ENODATA);
        }
        free(t);
    }
    /* a corrupted zstd stream fails cleanly */
    CHECK_EQ_INT(fatbin_find_ptx(b, len, &e), 0);
    uint8_t *c = malloc(len);
    memcpy(c, b, len);
    size_t off = (size_t)(e.data - b);
    memset(c + off + 8, 0xff, 16);
    REQUIRE_EQ_INT(fatbin_find_ptx(c, len, &e), 0);
    char *text;
    size_t tl;
    CHECK_EQ_INT(fatbin_ptx_text(&e, &text, &tl), -EINVAL);
    free(c);
    /* the wrapper nvcc emits around a fatbin */
    struct {
        uint32_t magic, version;
        const void *data, *names;
    } w = {FATBIN_WRAPPER_MAGIC, 1, b + 16, NULL};
    const uint8_t *fb;
    size_t fl;
    /* the file is the empty fatbin nvcc emits, then the real one the wrapper points at */
    CHECK_EQ_INT(fatbin_locate(b, &fb, &fl), 0);
    CHECK(fb == b && fl == 16);
    CHECK_EQ_INT(fatbin_locate(&w, &fb, &fl), 0);
    CHECK(fb == b + 16);
    CHECK_EQ_INT(fl, len - 16);
    free(b);
}

/* rt-prog.cu's __device__ and __constant__ variables in its PTX */
static void check_globals(const uint8_t *t, size_t len)
{
    struct ptx_global *g;
    size_t n;
    REQUIRE_EQ_INT(ptx_globals((const char *)t, len, &g, &n), 0);
    REQUIRE_EQ_INT(n, 3);
    CHECK_EQ_STR(g[0].name, "dev_counter");
    CHECK_EQ_INT(g[0].size, 4);
    CHECK_EQ_INT(g[0].init_len, 4);
    CHECK_EQ_INT(g[0].init[0], 5);
    CHECK_EQ_STR(g[1].name, "dev_big");
    CHECK_EQ_INT(g[1].size, 512);
    CHECK_EQ_INT(g[1].init_len, 0);
    CHECK_EQ_STR(g[2].name, "const_table");
    CHECK_EQ_INT(g[2].constant, 1);
    CHECK_EQ_INT(g[2].size, 16);
    float f;
    memcpy(&f, g[2].init + 4, 4);
    CHECK(f == 2.5f);
    ptx_globals_free(g, n);
}

TEST(ptx_globals_nvcc13)
{
    size_t len;
    uint8_t *t = slurp("ptx/nvcc13-globals.ptx", &len);
    REQUIRE(t);
    check_globals(t, len);
    free(t);
}

/* `nvcc --ptx` now: as written, comments and all (the fatbin's copy has them stripped) */
TEST(ptx_globals_nvcc_now)
{
    const char *dir = nvcc_out_dir();
    if (!dir)
        return;
    size_t len;
    uint8_t *t = slurp_in(dir, "rt-prog.ptx", &len);
    REQUIRE(t);
    check_globals(t, len);
    free(t);
}

TEST(ptx_globals_forms)
{
    const char *src = ".version 8.0\n.target sm_90\n"
                      ".extern .global .align 4 .u32 elsewhere;\n"
                      ".visible .global .align 8 .u64 p = generic(x);\n"
                      ".global .align 4 .f32 pi = 0f40490FDB;\n"
                      ".global .align 2 .s16 neg[2] = {-2, 3};\n"
                      ".global .align 4 .u32 open[] = {1, 2, 3};\n"
                      ".global .align 16 .v4 .u32 vec[2];\n"
                      ".entry k(.param .u64 .ptr .global .align 1 k_p)\n{\nld.global.u32 %r1, "
                      "[k_p];\nret;\n}\n";
    struct ptx_global *g;
    size_t n;
    REQUIRE_EQ_INT(ptx_globals(src, strlen(src), &g, &n), 0);
    REQUIRE_EQ_INT(n, 5);
    CHECK_EQ_STR(g[0].name, "p");
    CHECK_EQ_INT(g[0].size, 8);
    float f;
    memcpy(&f, g[1].init, 4);
    CHECK(f > 3.14159f && f < 3.1416f);
    int16_t s[2];
    memcpy(s, g[2].init, 4);
    CHECK_EQ_INT(s[0], -2);
    CHECK_EQ_INT(s[1], 3);
    CHECK_EQ_INT(g[3].size, 12);
    CHECK_EQ_INT(g[4].size, 32);
    ptx_globals_free(g, n);
    static const char *bad[] = {
        ".version 8.0\n.target sm_90\n.global .u32 x = {1, 2;\n",
        ".version 8.0\n.target sm_90\n.global .u32 x[2] = {1, 2, 3};\n",
        ".version 8.0\n.target sm_90\n.global .u32;\n",
        ".version 8.0\n.target sm_90\n.global .u32 x[0];\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ_INT(ptx_globals(bad[i], strlen(bad[i]), &g, &n), -EINVAL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
