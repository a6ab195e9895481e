/* fuzz-hostcheck-region.c — libFuzzer target for the host-side check's reader of a
 * container's usage region (src/hostcheck/hostcheck-region.c): bytes a tenant writes, read by
 * root. An input starting with 'T' is the file as read, however short (a truncation); any
 * other is laid over a zeroed region-sized file (the header and the first slots the fuzzer
 * makes up, the rest zero). Checks: 0, -EPROTO or -EAGAIN only (-ENOMEM aside), *ret
 * untouched on failure; on success every device's sum and an audit of made-up processes stay
 * within their bounds (ASan, UBSan). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *buf;
    size_t len;
    if (size && data[0] == 'T') {
        len = size - 1;
        buf = malloc(len ? len : 1); /* exact size: ASan sees a read past the bytes */
        if (!buf)
            return 0;
        if (len)
            memcpy(buf, data + 1, len);
    } else {
        len = VC_REGION_SIZE;
        buf = calloc(1, len);
        if (!buf)
            return 0;
        memcpy(buf, data, size < len ? size : len);
    }
    struct hostcheck_region r = {.buf = (void *)0x1};
    int e = hostcheck_region_parse(buf, len, &r);
    if (e != 0 && e != -EPROTO && e != -EAGAIN && e != -ENOMEM)
        abort();
    if (e < 0 && r.buf != (void *)0x1)
        abort();
    if (e == 0) {
        for (unsigned d = 0; d <= VC_REGION_DEVICES; d++)
            (void)vc_region_used(&r.view, d);
        struct vc_audit_proc p[3] = {{1, 1}, {0, UINT64_MAX}, {UINT32_MAX, 0}};
        struct vc_audit_finding f[3];
        int n = vc_region_audit(&r.view, 0, p, 3, 0, f, 3);
        if (n < 0 || n > 3)
            abort();
        hostcheck_region_free(&r);
    }
    free(buf);
    return 0;
}
