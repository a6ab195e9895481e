/* test-ptx.c — the PTX reader: kernels and parameter sizes from real-looking modules,
 * comments ignored, and every malformed input refused. */
#include "ptx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

static char *slurp(const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/fuzz/corpus/ptx/%s", tap_srcdir(), name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

TEST(spin_module)
{
    size_t len, n = 0;
    char *t = slurp("spin.ptx", &len);
    REQUIRE(t);
    struct ptx_kernel k[4];
    REQUIRE_EQ_INT(ptx_parse(t, len, k, 4, &n), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_STR(k[0].name, "spin");
    CHECK_EQ_INT(k[0].nparams, 1);
    CHECK_EQ_INT(k[0].param_size[0], 8);
    free(t);
}

TEST(several_kernels_and_comments)
{
    size_t len, n = 0;
    char *t = slurp("multi.ptx", &len);
    REQUIRE(t);
    struct ptx_kernel k[8];
    REQUIRE_EQ_INT(ptx_parse(t, len, k, 8, &n), 0);
    REQUIRE_EQ_INT(n, 4); /* the .entry inside the block comment is not one */
    CHECK_EQ_STR(k[0].name, "_Z4axpyfPfS_");
    CHECK_EQ_INT(k[0].nparams, 3);
    CHECK_EQ_INT(k[0].param_size[0], 4);
    CHECK_EQ_INT(k[0].param_size[1], 8);
    CHECK_EQ_INT(k[0].param_align[0], 4); /* a parameter's alignment: its type's size */
    CHECK_EQ_INT(k[0].param_align[1], 8);
    CHECK_EQ_STR(k[1].name, "noargs");
    CHECK_EQ_INT(k[1].nparams, 0);
    CHECK_EQ_STR(k[2].name, "bare");
    CHECK_EQ_INT(k[2].nparams, 0);
    CHECK_EQ_STR(k[3].name, "structs");
    CHECK_EQ_INT(k[3].nparams, 3);
    CHECK_EQ_INT(k[3].param_size[0], 48);
    CHECK_EQ_INT(k[3].param_size[1], 4);
    CHECK_EQ_INT(k[3].param_size[2], 1);
    CHECK_EQ_INT(k[3].param_align[0], 16); /* .align 16 */
    CHECK_EQ_INT(k[3].param_align[1], 4);
    /* only counting; a short output array still counts all */
    size_t n2 = 0;
    CHECK_EQ_INT(ptx_parse(t, len, NULL, 0, &n2), 0);
    CHECK_EQ_INT(n2, 4);
    CHECK_EQ_INT(ptx_parse(t, len, k, 1, &n2), 0);
    CHECK_EQ_INT(n2, 4);
    free(t);
}

TEST(malformed_refused)
{
    static const struct {
        const char *file;
        int want;
    } bad[] = {
        {"no-version.ptx", -EINVAL}, {"bad-param.ptx", -EINVAL},
        {"truncated.ptx", -EINVAL},  {"unterminated-comment.ptx", -EINVAL},
        {"empty.ptx", -EINVAL},      {"long-name.ptx", -ENAMETOOLONG},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t len, n = 77;
        char *t = slurp(bad[i].file, &len);
        REQUIRE(t);
        if (ptx_parse(t, len, NULL, 0, &n) != bad[i].want)
            tap_fail(__FILE__, __LINE__, "%s: not refused as expected", bad[i].file);
        CHECK_EQ_INT(n, 77); /* untouched on failure */
        free(t);
    }
    CHECK_EQ_INT(ptx_parse(NULL, 0, NULL, 0, NULL), -EINVAL);
}

TEST(length_is_respected)
{
    /* the text ends at len even without a NUL: the ")" past it is never seen */
    const char t[] = ".version 7.0 .target sm_70 .entry k(.param .u64 x)";
    size_t n = 0;
    CHECK_EQ_INT(ptx_parse(t, sizeof(t) - 2, NULL, 0, &n), -EINVAL);
    CHECK_EQ_INT(ptx_parse(t, sizeof(t) - 1, NULL, 0, &n), 0);
    CHECK_EQ_INT(n, 1);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
