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
