/* next-probe.c — a library that asks dlsym(RTLD_NEXT) for a name it defines
 * itself, as interposing libraries do (test-vcuda-next.c). */
#define _GNU_SOURCE
#include <dlfcn.h>

int vc_next_target(void);
void *vc_next_probe(void);

int vc_next_target(void)
{
    return 1;
}

void *vc_next_probe(void)
{
    void *p = dlsym(RTLD_NEXT, "vc_next_target");
    /* not a tail call: glibc must see this library as the caller */
    __asm__ volatile("" : "+r"(p)::"memory");
    return p;
}
