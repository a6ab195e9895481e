/* test-vcuda-next.c — libvcuda's dlsym override keeps dlsym(RTLD_NEXT, name)
 * relative to the library that called it, for every name it does not hook.
 *
 * Search order under LD_PRELOAD=libvcuda.so: the program, libvcuda, then the
 * program's libraries in link order: next-probe, next-target. Both define
 * vc_next_target. The probe's RTLD_NEXT lookup must find next-target's
 * (returns 2); had the override answered relative to itself (libvcuda), the
 * next definition would be the probe's own (returns 1), and an interposing
 * library calling "the next" would call itself. The override forwards
 * unhooked names with a tail call, so glibc sees the caller's address.
 *
 * Without VCUDA_TEST_CHILD the program re-executes itself with libvcuda (the
 * ASan runtime first in the sanitizer build) in LD_PRELOAD. */
#define _GNU_SOURCE
#include "tap.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void *vc_next_probe(void);
int vc_next_target_id(void);

static char libvcuda[PATH_MAX];

TEST(libvcuda_is_preloaded)
{
    REQUIRE(dlopen(libvcuda, RTLD_NOW | RTLD_NOLOAD) != NULL);
}

TEST(rtld_next_is_relative_to_the_caller)
{
    /* the program is linked against next-target (its id keeps it needed) */
    CHECK_EQ_INT(vc_next_target_id(), 2);
    int (*next)(void) = (int (*)(void))vc_next_probe();
    REQUIRE(next != NULL);
    CHECK_EQ_INT(next(), 2);
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
    char preload[PATH_MAX * 2];
    const char *asan = getenv("VCUDA_TEST_ASAN_RT");
    snprintf(preload, sizeof(preload), "%s%s%s", asan ? asan : "", asan ? ":" : "", libvcuda);
    setenv("LD_PRELOAD", preload, 1);
    setenv("VCUDA_TEST_CHILD", "1", 1);
    /* no quota configured: libvcuda stays out of the way of everything else */
    setenv("VCUDA_CONFIG", "/nonexistent/vcuda-config", 1);
    unsetenv("VCUDA_MEMORY_LIMIT");
    unsetenv("VCUDA_CORE_LIMIT");
    execv("/proc/self/exe", argv);
    perror("execv");
    return 1;
}
