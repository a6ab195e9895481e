/* fuzz-kube-cgroup.c — libFuzzer target for src/kube/cgroup.c: /proc/<pid>/cgroup text, whose
 * paths a container's processes can shape (cgroup namespaces, nested cgroups they create).
 * Checks: no read past the text (an exact-size copy), 0 / -ENOENT / -EPROTO only, the output
 * untouched on failure, and on success a dashed lower-case UUID and an empty or 64-hex id. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cgroup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int hexchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *s = malloc(size ? size : 1);
    if (!s)
        return 0;
    if (size)
        memcpy(s, data, size);
    struct kube_cgroup_ref ref, sentinel;
    memset(&ref, 0x5a, sizeof(ref));
    sentinel = ref;
    int r = kube_cgroup_parse(s, size, &ref);
    if (r != 0 && r != -ENOENT && r != -EPROTO)
        abort();
    if (r < 0 && memcmp(&ref, &sentinel, sizeof(ref)) != 0)
        abort();
    if (r == 0) {
        if (strlen(ref.pod_uid) != 36)
            abort();
        for (int i = 0; i < 36; i++)
            if ((i == 8 || i == 13 || i == 18 || i == 23) ? ref.pod_uid[i] != '-'
                                                          : !hexchar(ref.pod_uid[i]))
                abort();
        size_t cl = strlen(ref.container_id);
        if (cl != 0 && cl != 64)
            abort();
        for (size_t i = 0; i < cl; i++)
            if (!hexchar(ref.container_id[i]))
                abort();
    }
    free(s);
    return 0;
}
