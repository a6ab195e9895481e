/* cuda-visible.c — CUDA_VISIBLE_DEVICES's entries; see cuda-visible.h. */
#include "cuda-visible.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

/* A UUID prefix after its "GPU-" / "MIG-": hex digits and dashes only, at least one. */
static bool uuid_tail(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)s[i]) && s[i] != '-')
            return false;
    return true;
}

/* A decimal number of at most 9 digits, the whole of [s, s + len). */
static bool number(const char *s, size_t len, unsigned *ret)
{
    unsigned v = 0;
    if (len == 0 || len > 9)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *ret = v;
    return true;
}

static bool entry(const char *s, size_t len, struct emu_visible_entry *e)
{
    while (len && s[0] == ' ')
        s++, len--;
    while (len && s[len - 1] == ' ')
        len--;
    memset(e, 0, sizeof(*e));
    if (number(s, len, &e->index)) {
        e->kind = EMU_VISIBLE_INDEX;
        return true;
    }
    if (len < 5 || len > 128)
        return false;
    if (strncasecmp(s, "GPU-", 4) == 0 && uuid_tail(s + 4, len - 4) && len < EMU_VISIBLE_UUID_LEN) {
        e->kind = EMU_VISIBLE_GPU_UUID;
        memcpy(e->uuid, s, len);
        return true;
    }
    if (strncasecmp(s, "MIG-", 4) != 0)
        return false;
    const char *slash = memchr(s, '/', len);
    if (!slash) {
        if (!uuid_tail(s + 4, len - 4) || len >= EMU_VISIBLE_UUID_LEN)
            return false;
        e->kind = EMU_VISIBLE_MIG_UUID;
        memcpy(e->uuid, s, len);
        return true;
    }
    /* MIG-GPU-<uuid>/<gi>/<ci> */
    size_t ulen = (size_t)(slash - s) - 4;
    const char *u = s + 4, *rest = slash + 1, *end = s + len;
    const char *slash2 = memchr(rest, '/', (size_t)(end - rest));
    if (!slash2 || ulen < 5 || ulen >= EMU_VISIBLE_UUID_LEN || strncasecmp(u, "GPU-", 4) != 0 ||
        !uuid_tail(u + 4, ulen - 4) || !number(rest, (size_t)(slash2 - rest), &e->gi) ||
        !number(slash2 + 1, (size_t)(end - slash2 - 1), &e->ci))
        return false;
    e->kind = EMU_VISIBLE_MIG_LEGACY;
    memcpy(e->uuid, u, ulen);
    return true;
}

size_t emu_visible_parse(const char *s, struct emu_visible_entry *out, size_t max)
{
    size_t n = 0;
    if (!s)
        return 0;
    for (const char *p = s; n < max;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (!entry(p, len, &out[n]))
            break;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    return n;
}
