/* grpc-frame.c — gRPC's wire details that are not HTTP/2: the 5-byte message
 * prefix and its reassembly, grpc-message percent-encoding, grpc-status
 * parsing and names, the HTTP→gRPC status mapping, the byte buffer and the
 * resource-limit defaults. Everything here parses peer data: it is reached by
 * the fuzz target through the server. */
#include "grpc-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
    [GRPC_STATUS_OK] = "OK",
    [GRPC_STATUS_CANCELLED] = "CANCELLED",
    [GRPC_STATUS_UNKNOWN] = "UNKNOWN",
    [GRPC_STATUS_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
    [GRPC_STATUS_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
    [GRPC_STATUS_NOT_FOUND] = "NOT_FOUND",
    [GRPC_STATUS_ALREADY_EXISTS] = "ALREADY_EXISTS",
    [GRPC_STATUS_PERMISSION_DENIED] = "PERMISSION_DENIED",
    [GRPC_STATUS_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
    [GRPC_STATUS_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
    [GRPC_STATUS_ABORTED] = "ABORTED",
    [GRPC_STATUS_OUT_OF_RANGE] = "OUT_OF_RANGE",
    [GRPC_STATUS_UNIMPLEMENTED] = "UNIMPLEMENTED",
    [GRPC_STATUS_INTERNAL] = "INTERNAL",
    [GRPC_STATUS_UNAVAILABLE] = "UNAVAILABLE",
    [GRPC_STATUS_DATA_LOSS] = "DATA_LOSS",
    [GRPC_STATUS_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

const char *grpc_status_name(int status)
{
    if (status < 0 || (size_t)status >= sizeof(status_names) / sizeof(status_names[0]))
        return "UNKNOWN_STATUS";
    return status_names[status];
}

int grpc_status_parse(const uint8_t *s, size_t len)
{
    if (len == 0 || len > 2)
        return GRPC_STATUS_UNKNOWN;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return GRPC_STATUS_UNKNOWN;
        v = v * 10 + (s[i] - '0');
    }
    return v <= GRPC_STATUS_UNAUTHENTICATED ? v : GRPC_STATUS_UNKNOWN;
}

int grpc_status_from_http(int http_status)
{
    switch (http_status) {
    case 400:
        return GRPC_STATUS_INTERNAL;
    case 401:
        return GRPC_STATUS_UNAUTHENTICATED;
    case 403:
        return GRPC_STATUS_PERMISSION_DENIED;
    case 404:
        return GRPC_STATUS_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return GRPC_STATUS_UNAVAILABLE;
    default:
        return GRPC_STATUS_UNKNOWN;
    }
}

void grpc_limits_resolve(const struct grpc_limits *limits, struct grpc_limits *lim)
{
    *lim = limits ? *limits : (struct grpc_limits){0};
    if (lim->max_message_size == 0)
        lim->max_message_size = GRPC_DEFAULT_MAX_MESSAGE;
    /* The prefix has 32 bits of length. */
    if (lim->max_message_size > UINT32_MAX)
        lim->max_message_size = UINT32_MAX;
    if (lim->max_concurrent_streams == 0)
        lim->max_concurrent_streams = GRPC_DEFAULT_MAX_STREAMS;
    if (lim->max_connections == 0)
        lim->max_connections = GRPC_DEFAULT_MAX_CONNECTIONS;
    if (lim->handshake_timeout_ns == 0)
        lim->handshake_timeout_ns = GRPC_DEFAULT_HANDSHAKE_TIMEOUT_NS;
    if (lim->idle_timeout_ns == 0)
        lim->idle_timeout_ns = GRPC_DEFAULT_IDLE_TIMEOUT_NS;
}

/* ------------------------------------------------------------- buffer */

int grpc_buf_reserve(struct grpc_buf *b, size_t len, uint8_t **ret)
{
    if (b->off + b->len + len > b->cap) {
        if (b->off > 0) {
            memmove(b->data, b->data + b->off, b->len);
            b->off = 0;
        }
        if (b->len + len > b->cap) {
            if (len > SIZE_MAX / 4 - b->len)
                return -ENOMEM;
            size_t cap = b->cap ? b->cap : 256;
            while (cap < b->len + len)
                cap *= 2;
            uint8_t *d = realloc(b->data, cap);
            if (!d)
                return -ENOMEM;
            b->data = d;
            b->cap = cap;
        }
    }
    *ret = b->data + b->off + b->len;
    b->len += len;
    return 0;
}

int grpc_buf_append(struct grpc_buf *b, const void *data, size_t len)
{
    uint8_t *p;
    if (len == 0)
        return 0;
    int r = grpc_buf_reserve(b, len, &p);
    if (r < 0)
        return r;
    memcpy(p, data, len);
    return 0;
}

void grpc_buf_consume(struct grpc_buf *b, size_t n)
{
    if (n >= b->len) {
        b->off = b->len = 0;
        return;
    }
    b->off += n;
    b->len -= n;
}

void grpc_buf_clear(struct grpc_buf *b)
{
    free(b->data);
    *b = (struct grpc_buf){0};
}

/* ------------------------------------------------------------- framing */

void grpc_msgparser_init(struct grpc_msgparser *p, size_t max)
{
    *p = (struct grpc_msgparser){.max = max};
}

void grpc_msgparser_done(struct grpc_msgparser *p)
{
    grpc_buf_clear(&p->body);
}

void grpc_msg_prefix(uint8_t out[5], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

int grpc_msgparser_feed(struct grpc_msgparser *p, const uint8_t *data, size_t len, grpc_msg_fn cb,
                        void *user_data)
{
    while (p->error == 0 && len > 0) {
        if (p->hdr_len < 5) {
            size_t n = 5 - p->hdr_len < len ? 5 - p->hdr_len : len;
            memcpy(p->hdr + p->hdr_len, data, n);
            p->hdr_len += n;
            data += n;
            len -= n;
            if (p->hdr_len < 5)
                break;
            if (p->hdr[0] == 1) {
                p->error = -ENOTSUP;
                break;
            }
            if (p->hdr[0] != 0) {
                p->error = -EPROTO;
                break;
            }
            p->need = (uint32_t)p->hdr[1] << 24 | (uint32_t)p->hdr[2] << 16 |
                      (uint32_t)p->hdr[3] << 8 | p->hdr[4];
            if (p->need > p->max) {
                p->error = -EMSGSIZE;
                break;
            }
        }
        size_t take = p->need - p->body.len < len ? p->need - p->body.len : len;
        /* A message that arrives whole in one chunk is handed over in place. */
        if (p->body.len == 0 && take == p->need) {
            p->hdr_len = 0;
            p->count++;
            int r = cb ? cb(data, take, user_data) : 0;
            data += take;
            len -= take;
            if (r != 0)
                p->error = r;
            continue;
        }
        int r = grpc_buf_append(&p->body, data, take);
        if (r < 0) {
            p->error = r;
            break;
        }
        data += take;
        len -= take;
        if (p->body.len == p->need) {
            p->hdr_len = 0;
            p->count++;
            r = cb ? cb(grpc_buf_head(&p->body), p->body.len, user_data) : 0;
            grpc_buf_consume(&p->body, p->body.len);
            if (r != 0)
                p->error = r;
        }
    }
    return p->error;
}

bool grpc_msgparser_partial(const struct grpc_msgparser *p)
{
    return p->hdr_len > 0;
}

/* ------------------------------------------------------ percent-encoding */

static bool pct_plain(unsigned char c)
{
    return c >= 0x20 && c <= 0x7e && c != '%';
}

char *grpc_percent_encode(const char *s)
{
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        n += pct_plain(*c) ? 1 : 3;
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (pct_plain(*c)) {
            *o++ = (char)*c;
        } else {
            *o++ = '%';
            *o++ = hex[*c >> 4];
            *o++ = hex[*c & 15];
        }
    }
    *o = 0;
    return out;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

char *grpc_percent_decode(const uint8_t *s, size_t len)
{
    char *out = malloc(len + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        int hi, lo;
        if (s[i] == '%' && i + 2 < len && (hi = hexval(s[i + 1])) >= 0 &&
            (lo = hexval(s[i + 2])) >= 0) {
            *o++ = (char)(hi << 4 | lo);
            i += 2;
        } else {
            *o++ = (char)s[i];
        }
    }
    *o = 0;
    return out;
}
