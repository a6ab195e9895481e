/* fuzz-dra-slices.c — libFuzzer target for the ResourceSliceList reader
 * (src/dra/slicelist.c): any bytes in, a clean error or a plan out: every
 * stale name non-empty, ours described completely (and only when asked
 * for), its canonical spec a fixed point, every item of the pool complete;
 * and for the check of an API server's answer to a partitioned slice
 * (src/dra/partition.c, dra_slice_kept_partitions): any answer, a verdict. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char name[] = "node-a-gpu.accel.dev";
    for (int keep = 0; keep < 2; keep++) {
        struct dra_slice_list l;
        char err[256] = "";
        int r = dra_slice_list_parse((const char *)data, size, "gpu.accel.dev", "node-a", name,
                                     keep, &l, err, sizeof(err));
        if (r < 0) {
            if (err[0] == '\0')
                abort();
            continue;
        }
        for (size_t i = 0; i < l.n_stale; i++)
            if (!l.stale[i] || !l.stale[i][0])
                abort();
        if (l.have_ours && (!keep || !l.ours_rv || !l.ours_spec || l.ours_generation < 0))
            abort();
        if (l.have_ours) {
            /* the canonical form is a fixed point */
            char *doc = malloc(strlen(l.ours_spec) + 16);
            char *again = NULL;
            if (!doc)
                abort();
            strcpy(doc, "{\"spec\":");
            strcat(doc, l.ours_spec);
            strcat(doc, "}");
            if (dra_slice_spec_canonical(doc, strlen(doc), &again) < 0 ||
                strcmp(again, l.ours_spec) != 0)
                abort();
            free(again);
            free(doc);
        }
        for (size_t i = 0; i < l.n_items; i++)
            if (!l.items[i].name || !l.items[i].name[0] || !l.items[i].rv || !l.items[i].spec ||
                l.items[i].generation < 0)
                abort();
        dra_slice_list_clear(&l);
    }
    /* the answer to a write of a counter slice: kept only when it says the same */
    static const char sent[] =
        "{\"spec\":{\"sharedCounters\":[{\"name\":\"gpu-0-counters\",\"counters\":{"
        "\"compute-slices\":{\"value\":\"7\"}}}]}}";
    bool kept = dra_slice_kept_partitions(sent, (const char *)data, size);
    if (kept && !memmem(data, size, "gpu-0-counters", 14))
        abort();
    return 0;
}
