/* test-selfbind.c — the emulated libcuda.so.1 and libnvidia-ml.so.1 bind their own symbols
 * internally, as a real driver does: with a library LD_PRELOADed that exports some of the same
 * entry points (selfbind-count.c, a stand-in for libvcuda.so), the emulator's calls from one
 * entry point to another and the pointers its cuGetProcAddress hands out never reach the
 * preloaded definitions (neither its exports nor its dlsym override), while the program's own
 * calls do.
 *
 * Run without SELFBIND_CHILD, the program is its own launcher: it makes an emulated machine
 * (2 GPUs) in a temporary directory and re-executes itself with LD_PRELOAD set (the ASan
 * runtime first in the sanitizer build). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"
#include "nvml_api.h"
#include "state.h"
#include "tap.h"

static unsigned long (*count_of)(const char *name);
/* glibc's dlsym: the stand-in overrides dlsym, as libvcuda does */
static void *(*real_dlsym)(void *h, const char *name);

static unsigned long count(const char *name)
{
    return count_of ? count_of(name) : (unsigned long)-1;
}

/* The emulated driver's own definition of name (its handle's scope has no preload in it). */
static void *own(const char *lib, const char *name)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return NULL;
    void *fn = real_dlsym ? real_dlsym(h, name) : NULL;
    dlclose(h);
    return fn;
}

static bool setup(void)
{
    static bool done, ok;
    if (done)
        return ok;
    done = true;
    count_of = (__typeof__(count_of))dlsym(RTLD_DEFAULT, "selfbind_count");
    real_dlsym = (__typeof__(real_dlsym))dlsym(RTLD_DEFAULT, "selfbind_real_dlsym");
    ok = count_of && real_dlsym && cuInit(0) == CUDA_SUCCESS;
    return ok;
}

TEST(the_preload_sees_the_programs_calls)
{
    REQUIRE(setup());
    char bus[32];
    unsigned long before = count("cuDeviceGetPCIBusId");
    CHECK_EQ_INT(cuDeviceGetPCIBusId(bus, sizeof(bus), 1), CUDA_SUCCESS);
    CHECK_EQ_U64(count("cuDeviceGetPCIBusId"), before + 1);
    CHECK_EQ_STR(bus, "0000:2a:00.0"); /* forwarded: the emulator answered */
    /* the preload's definition is what the global scope finds, not the emulator's */
    void *global = real_dlsym(RTLD_DEFAULT, "cuDeviceGetPCIBusId");
    void *emu = own("libcuda.so.1", "cuDeviceGetPCIBusId");
    REQUIRE(global && emu);
    CHECK(global != emu);
    /* and, as libvcuda's, its dlsym answers with its own function on the driver's handle */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(h);
    CHECK(dlsym(h, "cuDeviceGetPCIBusId") == global);
    CHECK(dlsym(h, "cuDeviceGetName") == own("libcuda.so.1", "cuDeviceGetName"));
    dlclose(h);
}

TEST(driver_calls_between_its_entry_points_stay_inside)
{
    REQUIRE(setup());
    /* cuDeviceGetByPCIBusId compares against cuDeviceGetPCIBusId's answers */
    unsigned long bus0 = count("cuDeviceGetPCIBusId");
    CUdevice dev = -1;
    CHECK_EQ_INT(cuDeviceGetByPCIBusId(&dev, "0000:2a:00.0"), CUDA_SUCCESS);
    CHECK_EQ_INT(dev, 1);
    CHECK_EQ_U64(count("cuDeviceGetPCIBusId"), bus0);

    /* cuDeviceGetP2PAttribute asks cuDeviceCanAccessPeer */
    typedef CUresult (*p2p_fn)(int *, int, CUdevice, CUdevice);
    p2p_fn p2p = (p2p_fn)own("libcuda.so.1", "cuDeviceGetP2PAttribute");
    REQUIRE(p2p);
    unsigned long peer0 = count("cuDeviceCanAccessPeer");
    int v = -1;
    CHECK_EQ_INT(p2p(&v, 2 /* access supported */, 0, 1), CUDA_SUCCESS);
    CHECK_EQ_INT(v, 1);
    CHECK_EQ_U64(count("cuDeviceCanAccessPeer"), peer0);

    /* the v1 names forward to their _v2 */
    unsigned long rel0 = count("cuDevicePrimaryCtxRelease_v2");
    CUcontext ctx;
    REQUIRE_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    CHECK_EQ_INT(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
    CHECK_EQ_U64(count("cuDevicePrimaryCtxRelease_v2"), rel0);

    unsigned long gpa0 = count("cuGetProcAddress_v2");
    void *fn = NULL;
    CHECK_EQ_INT(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0), CUDA_SUCCESS);
    CHECK_EQ_U64(count("cuGetProcAddress_v2"), gpa0);
    CHECK(fn == own("libcuda.so.1", "cuMemAlloc_v2"));
}

TEST(get_proc_address_hands_out_the_drivers_own_functions)
{
    REQUIRE(setup());
    static const char *const names[] = {"cuDeviceGetPCIBusId", "cuDevicePrimaryCtxRelease",
                                        "cuGetProcAddress", "cuMemAlloc", "cuDeviceCanAccessPeer"};
    static const char *const symbols[] = {"cuDeviceGetPCIBusId", "cuDevicePrimaryCtxRelease_v2",
                                          "cuGetProcAddress_v2", "cuMemAlloc_v2",
                                          "cuDeviceCanAccessPeer"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CHECK_EQ_INT(cuGetProcAddress_v2(names[i], &fn, 13000, 0, &st), CUDA_SUCCESS);
        CHECK_EQ_INT(st, CU_GET_PROC_ADDRESS_SUCCESS);
        void *emu = own("libcuda.so.1", symbols[i]);
        if (fn != emu)
            tap_diag("%s: %p, the emulator's is %p", names[i], fn, emu);
        CHECK(fn && fn == emu);
    }

    /* a call through the answer runs the emulator's code, unseen by the preload */
    CUcontext ctx;
    REQUIRE_EQ_INT(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    void *fn = NULL;
    REQUIRE_EQ_INT(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, NULL), CUDA_SUCCESS);
    unsigned long a0 = count("cuMemAlloc_v2");
    CUdeviceptr p = 0, q = 0;
    CHECK_EQ_INT(((__typeof__(cuMemAlloc_v2) *)fn)(&p, 1 << 20), CUDA_SUCCESS);
    CHECK_EQ_U64(count("cuMemAlloc_v2"), a0);
    CHECK_EQ_INT(cuMemAlloc_v2(&q, 1 << 20), CUDA_SUCCESS); /* the program's own call */
    CHECK_EQ_U64(count("cuMemAlloc_v2"), a0 + 1);
    CHECK_EQ_INT(cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ_INT(cuMemFree_v2(q), CUDA_SUCCESS);
    CHECK_EQ_INT(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

TEST(nvml_calls_between_its_entry_points_stay_inside)
{
    REQUIRE(setup());
    unsigned long init0 = count("nvmlInit_v2"), cnt0 = count("nvmlDeviceGetCount_v2"),
                  h0 = count("nvmlDeviceGetHandleByIndex_v2");
    CHECK_EQ_INT(nvmlInit(), NVML_SUCCESS);
    CHECK_EQ_U64(count("nvmlInit_v2"), init0);
    unsigned n = 0;
    CHECK_EQ_INT(nvmlDeviceGetCount(&n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_U64(count("nvmlDeviceGetCount_v2"), cnt0);
    nvmlDevice_t d;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex(1, &d), NVML_SUCCESS);
    CHECK_EQ_U64(count("nvmlDeviceGetHandleByIndex_v2"), h0);
    /* the program's own call is seen */
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
    CHECK_EQ_U64(count("nvmlDeviceGetCount_v2"), cnt0 + 1);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

/* ---- launcher ---- */

static int launcher(char **argv)
{
    const char *preload = getenv("SELFBIND_PRELOAD");
    if (!preload) {
        printf("1..0 # SKIP SELFBIND_PRELOAD is not set (run through meson test)\n");
        return 77;
    }
    char dir[] = "/tmp/emu-selfbind-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char state[sizeof(dir) + 16], asan[4096], list[8192];
    snprintf(state, sizeof(state), "%s/state", dir);
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 2;
    cfg.model = "A100";
    int r = emu_state_create(state, &cfg);
    if (r < 0) {
        fprintf(stderr, "emu_state_create: %s\n", strerror(-r));
        rmdir(dir);
        return 1;
    }
    if (tap_find_asan_runtime(asan, sizeof(asan)))
        snprintf(list, sizeof(list), "%s:%s", asan, preload);
    else
        snprintf(list, sizeof(list), "%s", preload);
    setenv("ACCEL_EMU_STATE", state, 1);
    setenv("ACCEL_EMU_CTX_OVERHEAD", "4Mi", 1);
    setenv("LD_PRELOAD", list, 1);
    setenv("SELFBIND_CHILD", "1", 1);
    fflush(NULL);
    pid_t kid = fork();
    if (kid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int st = 0, rc = 1;
    if (kid > 0 && waitpid(kid, &st, 0) == kid)
        rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    unlink(state);
    rmdir(dir);
    return rc;
}

int main(int argc, char **argv)
{
    if (!getenv("SELFBIND_CHILD"))
        return launcher(argv);
    return tap_main(argc, argv);
}
