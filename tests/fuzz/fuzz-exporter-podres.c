/* fuzz-exporter-podres.c — libFuzzer target for src/nodestate/podres.c, the decoder of the
 * kubelet's pod-resources List answer (protobuf from the kubelet's socket). Checks: 0 or
 * -EPROTO only (and *ret untouched on -EPROTO), at most PODRES_MAX pairs, every kept
 * string NUL-terminated inside its field, no empty GPU UUID or "::" left in one, each
 * (GPU, container) pair once, and the holder count agreeing with a recount. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "podres.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct podres pr;
    int r;

    if (size > 65536)
        return 0;
    memset(&pr, 0x7a, sizeof(pr));
    pr.n = 3;
    r = podres_parse(data, size, &pr);
    if (r != 0 && r != -EPROTO)
        abort();
    if (r < 0) {
        if (pr.n != 3)
            abort();
        return 0;
    }
    if (pr.n > PODRES_MAX)
        abort();
    for (size_t k = 0; k < pr.n; k++) {
        const struct podres_entry *x = &pr.e[k], *first;
        size_t same = 0;
        if (!memchr(x->gpu_uuid, 0, sizeof(x->gpu_uuid)) ||
            !memchr(x->namespace_, 0, sizeof(x->namespace_)) ||
            !memchr(x->pod, 0, sizeof(x->pod)) || !memchr(x->container, 0, sizeof(x->container)) ||
            !x->gpu_uuid[0] || strstr(x->gpu_uuid, "::"))
            abort();
        for (size_t j = 0; j < pr.n; j++)
            if (!strcmp(pr.e[j].gpu_uuid, x->gpu_uuid)) {
                same++;
                if (j != k && podres_same_container(&pr.e[j], x))
                    abort();
            }
        if (podres_holders(&pr, x->gpu_uuid, &first) != same || !first)
            abort();
    }
    return 0;
}
