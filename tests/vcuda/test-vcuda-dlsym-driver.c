/* test-vcuda-dlsym-driver.c — a driver whose cuGetProcAddress finds its own entry points
 * through dlsym(RTLD_DEFAULT) (fake-dlsym-cuda.c, build/tests/vcuda/libcuda.so.1) hands out
 * libvcuda's preloaded wrapper. libvcuda's cuGetProcAddress must pass that wrapper on as it is
 * (calls through it are accounted) and must not warn that they are not.
 *
 * Without VCUDA_TEST_CHILD the program re-executes itself with libvcuda (the ASan runtime
 * first in the sanitizer build) in LD_PRELOAD and the fake driver on LD_LIBRARY_PATH. */
#define _GNU_SOURCE
#include "cuda_api.h"
#include "tap.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char libvcuda[PATH_MAX];

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

/* Runs fn with stderr sent to a file; returns what it wrote there (owned), or NULL. */
static char *stderr_of(void (*fn)(void *), void *arg)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/stderr", tap_tmpdir());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return NULL;
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    fn(arg);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *buf = calloc(1, 4096);
    if (buf && pread(fd, buf, 4095, 0) < 0)
        buf[0] = '\0';
    close(fd);
    return buf;
}

struct lookup {
    const char *symbol;
    CUresult r;
    void *fn;
};

static void do_lookup(void *arg)
{
    struct lookup *l = arg;
    getproc_fn getproc = (getproc_fn)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
    l->r = getproc ? getproc(l->symbol, &l->fn, 12000, 0, NULL) : CUDA_ERROR_NOT_FOUND;
}

TEST(libvcuda_is_preloaded)
{
    REQUIRE(dlopen(libvcuda, RTLD_NOW | RTLD_NOLOAD) != NULL);
}

TEST(wrapper_from_a_dlsym_driver_is_passed_on_without_a_warning)
{
    void *wrapper = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    REQUIRE(wrapper != NULL);
    Dl_info info;
    REQUIRE(dladdr(wrapper, &info) != 0);
    /* the program's lookup finds libvcuda's export first, not the fake driver's */
    CHECK(info.dli_fname && strstr(info.dli_fname, "libvcuda.so") != NULL);

    struct lookup l = {"cuMemAlloc_v2", CUDA_ERROR_UNKNOWN, NULL};
    char *err = stderr_of(do_lookup, &l);
    REQUIRE(err != NULL);
    CHECK_EQ_INT(l.r, CUDA_SUCCESS);
    CHECK(l.fn == wrapper);
    if (strstr(err, "not accounted"))
        tap_diag("libvcuda said: %s", err);
    CHECK(strstr(err, "not accounted") == NULL);
    free(err);
}

/* Issue 8, cuGetProcAddress's two paths. Looks (name, version, flags) up with the fake driver
 * in mode; the caller must get libvcuda's wrapper named want, and calling it must reach the
 * driver's export of that same variant. */
static void check_variant(const char *mode, const char *name, cuuint64_t flags, const char *want)
{
    setenv("FAKE_CUDA_MODE", mode, 1);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!drv)
        drv = dlopen("libcuda.so.1", RTLD_NOW);
    REQUIRE(drv);
    const char **last = (const char **)dlsym(drv, "fake_cuda_last_call");
    REQUIRE(last);
    getproc_fn getproc = (getproc_fn)dlsym(drv, "cuGetProcAddress_v2");
    REQUIRE(getproc);
    void *fn = NULL;
    REQUIRE_EQ_INT(getproc(name, &fn, 12000, flags, NULL), CUDA_SUCCESS);
    Dl_info info;
    REQUIRE(fn && dladdr(fn, &info));
    bool ours = info.dli_fname && strstr(info.dli_fname, "libvcuda.so");
    CHECK(ours);
    CHECK(info.dli_sname && strcmp(info.dli_sname, want) == 0);
    if (!ours || !info.dli_sname || strcmp(info.dli_sname, want) != 0)
        tap_diag("%s %s: got %s in %s, want libvcuda's %s", mode, name,
                 info.dli_sname ? info.dli_sname : "?", info.dli_fname, want);
    *last = NULL;
    CUdeviceptr p;
    if (strcmp(want, "cuMemAlloc_v2") == 0)
        ((__typeof__(cuMemAlloc_v2) *)fn)(&p, 4096);
    else
        ((__typeof__(cuMemAllocAsync) *)fn)(&p, 4096, NULL);
    CHECK(*last && strcmp(*last, want) == 0);
    unsetenv("FAKE_CUDA_MODE");
}

TEST(driver_pointers_that_are_its_exports_map_to_the_same_variant)
{
    check_variant("exports", "cuMemAlloc", 0, "cuMemAlloc_v2");
    check_variant("exports", "cuMemAllocAsync", 0, "cuMemAllocAsync");
    check_variant("exports", "cuMemAllocAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                  "cuMemAllocAsync_ptsz");
}

TEST(private_trampolines_map_to_the_variant_by_name_version_and_flags)
{
    check_variant("trampolines", "cuMemAlloc", 0, "cuMemAlloc_v2");
    check_variant("trampolines", "cuMemAllocAsync", 0, "cuMemAllocAsync");
    check_variant("trampolines", "cuMemAllocAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                  "cuMemAllocAsync_ptsz");
    /* a name we do not hook: the driver's own pointer, untouched */
    setenv("FAKE_CUDA_MODE", "trampolines", 1);
    void *drv = dlopen("libcuda.so.1", RTLD_NOW);
    REQUIRE(drv);
    getproc_fn getproc = (getproc_fn)dlsym(drv, "cuGetProcAddress_v2");
    void *fn = NULL;
    REQUIRE_EQ_INT(getproc("cuMemcpyHtoD", &fn, 12000, 0, NULL), CUDA_SUCCESS);
    Dl_info info;
    CHECK(fn && dladdr(fn, &info) && info.dli_fname && !strstr(info.dli_fname, "libvcuda"));
    unsetenv("FAKE_CUDA_MODE");
}

int main(int argc, char **argv)
{
    const char *build = getenv("ACCEL_BUILD_ROOT");
    if (!build) {
        printf("1..0 # SKIP ACCEL_BUILD_ROOT is not set (run through meson test)\n");
        return 77;
    }
    snprintf(libvcuda, sizeof(libvcuda), "%s/src/vcuda/libvcuda.so", build);
    if (getenv("VCUDA_TEST_CHILD"))
        return tap_main(argc, argv);
    char preload[PATH_MAX * 2], libdir[PATH_MAX];
    const char *asan = getenv("VCUDA_TEST_ASAN_RT");
    snprintf(preload, sizeof(preload), "%s%s%s", asan ? asan : "", asan ? ":" : "", libvcuda);
    snprintf(libdir, sizeof(libdir), "%s/tests/vcuda", build);
    setenv("LD_PRELOAD", preload, 1);
    setenv("LD_LIBRARY_PATH", libdir, 1);
    setenv("VCUDA_TEST_CHILD", "1", 1);
    setenv("VCUDA_LOG", "warn", 1);
    /* no quota configured: only the driver lookups are exercised */
    setenv("VCUDA_CONFIG", "/nonexistent/vcuda-config", 1);
    unsetenv("VCUDA_MEMORY_LIMIT");
    unsetenv("VCUDA_CORE_LIMIT");
    execv("/proc/self/exe", argv);
    perror("execv");
    return 1;
}
