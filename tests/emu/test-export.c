/* test-export.c — cuGetExportTable of the emulated libcuda.so.1 (src/emu/cuda_export.c,
 * cuda_cls.c, cuda_export_integrity.c), reached as NVIDIA's runtime reaches it: the tables by
 * UUID, context-local storage with its destructors on destroy and reset, the primary context
 * handle that outlives cudaDeviceReset, the integrity answer, and an unknown UUID refused and
 * reported once. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_api.h"
#include "md2.h"
#include "state.h"
#include "tap.h"

static void *lib;
#define FN(name) static __typeof__(name) *p_##name
FN(cuInit);
FN(cuGetExportTable);
FN(cuDevicePrimaryCtxRetain);
FN(cuDevicePrimaryCtxRelease_v2);
FN(cuDevicePrimaryCtxReset_v2);
FN(cuDevicePrimaryCtxGetState);
FN(cuCtxSetCurrent);
FN(cuCtxCreate_v2);
FN(cuCtxDestroy_v2);
FN(cuDriverGetVersion);
FN(cuDeviceGetUuid);
FN(cuDeviceGetAttribute);

static const uint8_t U_CUDART[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                     0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
static const uint8_t U_CLS[16] = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                  0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
static const uint8_t U_INTEGRITY[16] = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                        0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};
static const uint8_t U_HOOKS[16] = {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                    0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66};

static void *const *table(const uint8_t *u)
{
    CUuuid id;
    memcpy(id.bytes, u, 16);
    const void *t = NULL;
    if (p_cuGetExportTable(&t, &id) != CUDA_SUCCESS)
        return NULL;
    return (void *const *)t;
}

static void up(void)
{
    if (lib)
        return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/export.state", tap_tmpdir());
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 2;
    REQUIRE_EQ_INT(emu_state_create(path, &cfg), 0);
    setenv("ACCEL_EMU_STATE", path, 1);
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib);
#define GET(n, s) REQUIRE((p_##n = (__typeof__(p_##n))dlsym(lib, s)) != NULL)
    GET(cuInit, "cuInit");
    GET(cuGetExportTable, "cuGetExportTable");
    GET(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    GET(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease_v2");
    GET(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset_v2");
    GET(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState");
    GET(cuCtxSetCurrent, "cuCtxSetCurrent");
    GET(cuCtxCreate_v2, "cuCtxCreate_v2");
    GET(cuCtxDestroy_v2, "cuCtxDestroy_v2");
    GET(cuDriverGetVersion, "cuDriverGetVersion");
    GET(cuDeviceGetUuid, "cuDeviceGetUuid");
    GET(cuDeviceGetAttribute, "cuDeviceGetAttribute");
    REQUIRE_EQ_INT(p_cuInit(0), CUDA_SUCCESS);
}

TEST(unknown_uuid_refused_and_reported_once)
{
    up();
    char path[4096];
    snprintf(path, sizeof(path), "%s/stderr", tap_tmpdir());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    int saved = dup(2);
    dup2(fd, 2);
    CUuuid id;
    memset(id.bytes, 0x5a, 16);
    const void *t = (void *)1;
    CUresult r1 = p_cuGetExportTable(&t, &id);
    const void *t1 = t;
    CUresult r2 = p_cuGetExportTable(&t, &id);
    dup2(saved, 2);
    close(saved);
    CHECK_EQ_INT(r1, CUDA_ERROR_NOT_FOUND);
    CHECK_EQ_INT(r2, CUDA_ERROR_NOT_FOUND);
    CHECK(t1 == NULL);
    char buf[4096] = {0};
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    CHECK(n > 0);
    const char *first = strstr(buf, "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a");
    CHECK(first != NULL);
    CHECK(first && strstr(first + 1, "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a") == NULL);
}

typedef CUresult (*cls_put_fn)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));
typedef CUresult (*cls_del_fn)(CUcontext, void *);
typedef CUresult (*cls_get_fn)(void **, CUcontext, void *);

static int dtor_calls;
static CUcontext dtor_ctx;
static void *dtor_key, *dtor_value;

static void dtor(CUcontext c, void *key, void *value)
{
    dtor_calls++;
    dtor_ctx = c;
    dtor_key = key;
    dtor_value = value;
}

TEST(context_local_storage)
{
    up();
    void *const *t = table(U_CLS);
    REQUIRE(t);
    cls_put_fn put = (cls_put_fn)t[0];
    cls_del_fn del = (cls_del_fn)t[1];
    cls_get_fn get = (cls_get_fn)t[2];
    CUcontext c;
    REQUIRE_EQ_INT(p_cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS);
    static int keys[100];
    void *v = NULL;
    CHECK_EQ_INT(get(&v, c, &keys[0]), CUDA_ERROR_INVALID_HANDLE); /* 400: absent */
    for (int i = 0; i < 100; i++)
        REQUIRE_EQ_INT(put(NULL, &keys[i], (void *)(uintptr_t)(1000 + i), dtor), CUDA_SUCCESS);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ_INT(get(&v, c, &keys[i]), CUDA_SUCCESS);
        CHECK(v == (void *)(uintptr_t)(1000 + i));
    }
    CHECK_EQ_INT(del(c, &keys[5]), CUDA_SUCCESS);
    CHECK_EQ_INT(get(&v, NULL, &keys[5]), CUDA_ERROR_INVALID_HANDLE);
    CHECK_EQ_INT(put(c, &keys[7], (void *)7, dtor), CUDA_SUCCESS); /* replaced */
    CHECK_EQ_INT(get(&v, c, &keys[7]), CUDA_SUCCESS);
    CHECK(v == (void *)7);
    CHECK_EQ_INT(dtor_calls, 0);
    REQUIRE_EQ_INT(p_cuCtxDestroy_v2(c), CUDA_SUCCESS);
    CHECK_EQ_INT(dtor_calls, 99); /* every live value once; the deleted one not */
    CHECK(dtor_ctx == c);
    /* no current context: nothing to store in */
    CHECK_EQ_INT(put(NULL, &keys[0], NULL, NULL), CUDA_ERROR_INVALID_CONTEXT);
}

TEST(primary_handle_survives_reset)
{
    up();
    void *const *t = table(U_CUDART);
    REQUIRE(t);
    CHECK((uintptr_t)t[0] == 13 * sizeof(void *));
    CUresult (*prim)(CUcontext *, CUdevice) = (CUresult(*)(CUcontext *, CUdevice))t[2];
    CUcontext h = NULL, r = NULL, h2 = NULL;
    REQUIRE_EQ_INT(prim(&h, 1), CUDA_SUCCESS);
    unsigned flags;
    int active = -1;
    CHECK_EQ_INT(p_cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
    CHECK_EQ_INT(active, 0); /* handed out inactive, not retained */
    REQUIRE_EQ_INT(p_cuDevicePrimaryCtxRetain(&r, 1), CUDA_SUCCESS);
    CHECK(r == h);
    REQUIRE_EQ_INT(p_cuCtxSetCurrent(r), CUDA_SUCCESS);
    void *const *cls = table(U_CLS);
    cls_put_fn put = (cls_put_fn)cls[0];
    static int key;
    dtor_calls = 0;
    REQUIRE_EQ_INT(put(NULL, &key, (void *)42, dtor), CUDA_SUCCESS);
    REQUIRE_EQ_INT(p_cuDevicePrimaryCtxReset_v2(1), CUDA_SUCCESS);
    CHECK_EQ_INT(dtor_calls, 1); /* reset runs the destructors */
    CHECK(dtor_key == &key && dtor_value == (void *)42 && dtor_ctx == h);
    CHECK_EQ_INT(p_cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
    CHECK_EQ_INT(active, 0);
    REQUIRE_EQ_INT(prim(&h2, 1), CUDA_SUCCESS);
    CHECK(h2 == h); /* the same handle after reset */
    REQUIRE_EQ_INT(p_cuDevicePrimaryCtxRetain(&r, 1), CUDA_SUCCESS);
    CHECK(r == h);
    CHECK_EQ_INT(p_cuCtxSetCurrent(r), CUDA_SUCCESS);
    void *v;
    cls_get_fn get = (cls_get_fn)cls[2];
    CHECK_EQ_INT(get(&v, NULL, &key), CUDA_ERROR_INVALID_HANDLE); /* storage emptied */
    dtor_calls = 0;
    REQUIRE_EQ_INT(put(NULL, &key, (void *)43, dtor), CUDA_SUCCESS);
    CHECK_EQ_INT(p_cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS); /* the last reference */
    CHECK_EQ_INT(dtor_calls, 1);
    CHECK_EQ_INT(p_cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
}

TEST(hooks_hand_out_buffers)
{
    up();
    void *const *t = table(U_HOOKS);
    REQUIRE(t);
    CHECK((uintptr_t)t[0] == 7 * sizeof(void *));
    CUresult (*b2)(void **, size_t *) = (CUresult(*)(void **, size_t *))t[2];
    CUresult (*b6)(void **, size_t *) = (CUresult(*)(void **, size_t *))t[6];
    void *p = NULL;
    size_t n = 0;
    CHECK_EQ_INT(b2(&p, &n), CUDA_SUCCESS);
    CHECK(p != NULL && n == 1024);
    CHECK_EQ_INT(b6(&p, &n), CUDA_SUCCESS);
    CHECK(p != NULL && n == 14);
    /* a slot the emulator does not model fails, never succeeds silently */
    CUresult (*s3)(void) = (CUresult(*)(void))t[3];
    CHECK_EQ_INT(s3(), CUDA_ERROR_NOT_SUPPORTED);
}

TEST(integrity_answer)
{
    up();
    void *const *t = table(U_INTEGRITY);
    void *const *rt = table(U_CUDART);
    REQUIRE(t && rt);
    CHECK((uintptr_t)t[0] == 3 * sizeof(void *));
    CUresult (*f)(uint32_t, uint64_t, uint64_t *) =
        (CUresult(*)(uint32_t, uint64_t, uint64_t *))t[1];
    uint64_t out[2];
    CHECK_EQ_INT(f(13000, 1, out), CUDA_SUCCESS);
    CHECK(out[0] == 0x3341181C03CB675Cull && out[1] == 0x8ED383AA1F4CD1E8ull);
    CHECK_EQ_INT(f(13001, 1, out), CUDA_SUCCESS);
    CHECK(out[0] == 0x1841181C03CB675Cull && out[1] == 0x8ED383AA1F4CD1E8ull);
    /* 13002: HMAC-MD2 over the record docs/emulator-cuda.md describes, built here */
    const uint64_t secs = 1700000000;
    CHECK_EQ_INT(f(13002, secs, out), CUDA_SUCCESS);
    uint8_t msg[48 + 2 * 28], *m = msg;
    int drv = 0;
    p_cuDriverGetVersion(&drv);
    uint32_t head[4] = {(uint32_t)drv, 13002, (uint32_t)getpid(), (uint32_t)pthread_self()};
    memcpy(m, head, 16);
    uint64_t ptrs[4] = {(uint64_t)(uintptr_t)rt, (uint64_t)(uintptr_t)t, (uint64_t)(uintptr_t)t[1],
                        secs};
    memcpy(m + 16, ptrs, 32);
    m += 48;
    for (int d = 0; d < 2; d++) {
        CUuuid u;
        int v[3];
        REQUIRE_EQ_INT(p_cuDeviceGetUuid(&u, d), CUDA_SUCCESS);
        p_cuDeviceGetAttribute(&v[0], CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
        p_cuDeviceGetAttribute(&v[1], CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
        p_cuDeviceGetAttribute(&v[2], CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
        memcpy(m, u.bytes, 16);
        memcpy(m + 16, v, 12);
        m += 28;
    }
    static const uint8_t key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                    0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
    uint8_t want[16];
    md2_hmac(key, 16, msg, sizeof(msg), want);
    CHECK(memcmp(out, want, 16) == 0);
    uint64_t other[2];
    CHECK_EQ_INT(f(13002, secs + 1, other), CUDA_SUCCESS);
    CHECK(memcmp(out, other, 16) != 0);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
