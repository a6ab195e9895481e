/* fuzz-exporter-regions.c — libFuzzer target for accel-exporter's vGPU readers
 * (src/exporter/regions.c): an input starting with '{' goes to the status.json parser
 * (acceld's assignments), any other to the usage-region parser (bytes a tenant can write).
 * Checks, region: 0 or -EPROTO only, *ret untouched on failure, no memory counted for a GPU
 * the region does not list, the first device only when listed. status.json: 0, -EINVAL or
 * -E2BIG only (with a message), *ret_n untouched on failure; on success at most cap entries,
 * every name NUL-terminated, non-empty and printable, pod UID and container without '/' and
 * not "." or "..", cores at most 100, no (pod UID, container, GPU) twice. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "regions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s, size_t max, int path)
{
    const char *end = memchr(s, 0, max);
    if (!end || end == s)
        abort();
    for (const char *p = s; p < end; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e || (path && *p == '/'))
            abort();
    if (path && (!strcmp(s, ".") || !strcmp(s, "..")))
        abort();
}

static void fuzz_status(const uint8_t *data, size_t size)
{
    static struct exporter_vgpu_assign a[8];
    char err[400] = "";
    size_t n = 77;
    int r = exporter_vgpu_status_parse((const char *)data, size, a, 8, &n, err, sizeof err);
    if (r != 0 && r != -EINVAL && r != -E2BIG)
        abort();
    if (r < 0) {
        if (n != 77 || !err[0])
            abort();
        return;
    }
    if (n > 8)
        abort();
    for (size_t i = 0; i < n; i++) {
        check_name(a[i].ns, sizeof a[i].ns, 0);
        check_name(a[i].pod, sizeof a[i].pod, 0);
        check_name(a[i].pod_uid, sizeof a[i].pod_uid, 1);
        check_name(a[i].container, sizeof a[i].container, 1);
        check_name(a[i].gpu_uuid, sizeof a[i].gpu_uuid, 0);
        if (a[i].cores > 100 || a[i].memory_bytes > INT64_MAX)
            abort();
        for (size_t k = 0; k < i; k++)
            if (!strcmp(a[k].pod_uid, a[i].pod_uid) && !strcmp(a[k].container, a[i].container) &&
                !strcmp(a[k].gpu_uuid, a[i].gpu_uuid))
                abort();
    }
}

static void fuzz_region(const uint8_t *data, size_t size)
{
    struct exporter_region_usage u, before;
    memset(&u, 0x5a, sizeof u);
    before = u;
    int r = exporter_region_parse(data, size, "GPU-fuzz-0", &u);
    if (r != 0 && r != -EPROTO)
        abort();
    if (r < 0) {
        if (memcmp(&u, &before, sizeof u))
            abort();
        return;
    }
    if ((!u.has_device && (u.memory_used || u.first_device)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    if (size && data[0] == '{')
        fuzz_status(data, size);
    else
        fuzz_region(data, size);
    return 0;
}
