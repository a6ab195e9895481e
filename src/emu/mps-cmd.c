/* mps-cmd.c — parsing of nvidia-cuda-mps-control commands; see mps-cmd.h. */
#include "mps-cmd.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MAX_WORDS 8
#define MAX_WORD 64

struct words {
    int n;
    char w[MAX_WORDS][MAX_WORD];
};

/* Splits on blanks. Control characters other than the line end are refused
 * so that an error message that quotes a word stays one printable line. */
static int split(const char *line, struct words *ret, char *err, size_t errlen)
{
    struct words ws = {0};
    size_t len = strnlen(line, MPS_CMD_MAX_LINE + 1);
    if (len > MPS_CMD_MAX_LINE)
        return errbuf_printf(err, errlen, "command longer than %d bytes", MPS_CMD_MAX_LINE);
    /* One trailing "\n" or "\r\n" ends the line; any other control byte is refused. */
    if (len > 0 && line[len - 1] == '\n')
        len--;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    size_t i = 0;
    for (;;) {
        while (i < len && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i == len)
            break;
        if (ws.n == MAX_WORDS)
            return errbuf_printf(err, errlen, "too many words (at most %d)", MAX_WORDS);
        size_t k = 0;
        for (; i < len && line[i] != ' ' && line[i] != '\t'; i++) {
            unsigned char ch = (unsigned char)line[i];
            if (iscntrl(ch) || ch >= 0x7f)
                return errbuf_printf(err, errlen, "non-printable byte 0x%02x in command", ch);
            if (k + 1 >= MAX_WORD)
                return errbuf_printf(err, errlen, "word longer than %d bytes", MAX_WORD - 1);
            ws.w[ws.n][k++] = (char)ch;
        }
        ws.w[ws.n][k] = '\0';
        ws.n++;
    }
    *ret = ws;
    return 0;
}

static bool parse_uint(const char *s, uint64_t max, uint64_t *ret)
{
    if (!isdigit((unsigned char)*s))
        return false;
    uint64_t v = 0;
    for (; *s; s++) {
        if (!isdigit((unsigned char)*s))
            return false;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (max - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *ret = v;
    return true;
}

static int parse_pid(const char *s, pid_t *ret, char *err, size_t errlen)
{
    uint64_t v;
    if (!parse_uint(s, INT32_MAX, &v) || v == 0)
        return errbuf_printf(err, errlen, "bad PID '%s': want a positive integer", s);
    *ret = (pid_t)v;
    return 0;
}

static int parse_dev(const char *s, uint32_t *ret, char *err, size_t errlen)
{
    uint64_t v;
    if (!parse_uint(s, 1023, &v))
        return errbuf_printf(err, errlen, "bad device '%s': want a device index", s);
    *ret = (uint32_t)v;
    return 0;
}

/* "50", "50.5", "100.0": (0, 100] with at most one decimal that matters;
 * further decimals are refused rather than silently rounded. */
static int parse_pct(const char *s, uint32_t *ret, char *err, size_t errlen)
{
    uint64_t whole = 0, tenth = 0;
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        goto bad;
    while (isdigit((unsigned char)*p)) {
        whole = whole * 10 + (uint64_t)(*p++ - '0');
        if (whole > 100)
            goto bad;
    }
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            goto bad;
        tenth = (uint64_t)(*p++ - '0');
        while (*p == '0')
            p++;
    }
    if (*p != '\0')
        goto bad;
    uint64_t v = whole * 10 + tenth;
    if (v == 0 || v > 1000)
        goto bad;
    *ret = (uint32_t)v;
    return 0;
bad:
    return errbuf_printf(err, errlen, "bad percentage '%s': want a number in (0, 100]", s);
}

int mps_cmd_parse_bytes(const char *s, uint64_t *ret_bytes)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    uint64_t v = 0;
    const char *p = s;
    while (isdigit((unsigned char)*p)) {
        uint64_t d = (uint64_t)(*p++ - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (toupper((unsigned char)*p)) {
    case 'K':
        shift = 10;
        break;
    case 'M':
        shift = 20;
        break;
    case 'G':
        shift = 30;
        break;
    case 'T':
        shift = 40;
        break;
    default:
        break;
    }
    if (shift) {
        p++;
        if (*p == 'i')
            p++;
        if (*p == 'B' || *p == 'b')
            p++;
    } else if (*p == 'B' || *p == 'b') {
        p++;
    }
    if (*p != '\0')
        return -EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *ret_bytes = v << shift;
    return 0;
}

char *mps_cmd_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char units[] = "TGMK";
    static const unsigned shifts[] = {40, 30, 20, 10};
    if (bytes == 0) {
        snprintf(buf, len, "0");
        return buf;
    }
    for (size_t i = 0; i < 4; i++) {
        uint64_t m = (uint64_t)1 << shifts[i];
        if (bytes % m == 0) {
            snprintf(buf, len, "%" PRIu64 "%c", bytes / m, units[i]);
            return buf;
        }
    }
    snprintf(buf, len, "%" PRIu64, bytes);
    return buf;
}

char *mps_cmd_format_pct(uint32_t pct_x10, char *buf, size_t len)
{
    snprintf(buf, len, "%u.%u", pct_x10 / 10, pct_x10 % 10);
    return buf;
}

int mps_cmd_tighten_limits(const char *s, uint64_t *lim, size_t n)
{
    int bad = 0;
    while (s && *s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        char entry[64];
        const char *eq = memchr(s, '=', len);
        uint64_t dev = 0, bytes = 0;
        if (len >= sizeof(entry) || !eq || eq == s) {
            bad++;
        } else {
            memcpy(entry, s, len);
            entry[len] = '\0';
            entry[eq - s] = '\0';
            bool digits = strspn(entry, "0123456789") == strlen(entry);
            if (!digits || parse_u64(entry, &dev) < 0 || dev >= n ||
                mps_cmd_parse_bytes(entry + (eq - s) + 1, &bytes) < 0 || bytes == 0)
                bad++;
            else if (!lim[dev] || bytes < lim[dev])
                lim[dev] = bytes;
        }
        s = comma ? comma + 1 : NULL;
    }
    return bad;
}

static int parse_limit(const char *s, uint64_t *ret, char *err, size_t errlen)
{
    int r = mps_cmd_parse_bytes(s, ret);
    if (r == -ERANGE)
        return errbuf_printf(err, errlen, "pinned memory limit '%s' is too large", s);
    if (r < 0)
        return errbuf_printf(
            err, errlen, "bad pinned memory limit '%s': want bytes with an optional K/M/G/T suffix",
            s);
    return 0;
}

struct cmd_spec {
    const char *name;
    enum mps_cmd_kind kind;
    int min_args, max_args;
    const char *usage;
};

static const struct cmd_spec specs[] = {
    {"quit", MPS_CMD_QUIT, 0, 2, "quit [-t SECONDS]"},
    {"get_server_list", MPS_CMD_GET_SERVER_LIST, 0, 0, "get_server_list"},
    {"get_server_status", MPS_CMD_GET_SERVER_STATUS, 1, 1, "get_server_status PID"},
    {"start_server", MPS_CMD_START_SERVER, 2, 2, "start_server -uid UID"},
    {"shutdown_server", MPS_CMD_SHUTDOWN_SERVER, 1, 2, "shutdown_server PID [-f]"},
    {"get_client_list", MPS_CMD_GET_CLIENT_LIST, 1, 1, "get_client_list PID"},
    {"get_device_client_list", MPS_CMD_GET_DEVICE_CLIENT_LIST, 0, 1,
     "get_device_client_list [PID]"},
    {"get_default_active_thread_percentage", MPS_CMD_GET_DEFAULT_THREAD_PCT, 0, 0,
     "get_default_active_thread_percentage"},
    {"set_default_active_thread_percentage", MPS_CMD_SET_DEFAULT_THREAD_PCT, 1, 1,
     "set_default_active_thread_percentage PERCENTAGE"},
    {"get_active_thread_percentage", MPS_CMD_GET_THREAD_PCT, 1, 1,
     "get_active_thread_percentage PID"},
    {"set_active_thread_percentage", MPS_CMD_SET_THREAD_PCT, 2, 2,
     "set_active_thread_percentage PID PERCENTAGE"},
    {"get_default_device_pinned_mem_limit", MPS_CMD_GET_DEFAULT_PINNED_LIMIT, 1, 1,
     "get_default_device_pinned_mem_limit DEV"},
    {"set_default_device_pinned_mem_limit", MPS_CMD_SET_DEFAULT_PINNED_LIMIT, 2, 2,
     "set_default_device_pinned_mem_limit DEV VALUE"},
    {"get_device_pinned_mem_limit", MPS_CMD_GET_PINNED_LIMIT, 2, 2,
     "get_device_pinned_mem_limit PID DEV"},
    {"set_device_pinned_mem_limit", MPS_CMD_SET_PINNED_LIMIT, 3, 3,
     "set_device_pinned_mem_limit PID DEV VALUE"},
};

int mps_cmd_parse(const char *line, struct mps_cmd *ret_cmd, char *err, size_t errlen)
{
    if (!line || !ret_cmd)
        return errbuf_printf(err, errlen, "no command");
    struct words ws;
    int r = split(line, &ws, err, errlen);
    if (r < 0)
        return r;
    if (ws.n == 0)
        return -ENODATA;

    const struct cmd_spec *spec = NULL;
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
        if (strcmp(ws.w[0], specs[i].name) == 0)
            spec = &specs[i];
    if (!spec)
        return errbuf_printf(err, errlen, "unknown command '%s'", ws.w[0]);
    int nargs = ws.n - 1;
    if (nargs < spec->min_args || nargs > spec->max_args)
        return errbuf_printf(err, errlen, "wrong number of arguments: usage: %s", spec->usage);

    struct mps_cmd c = {.kind = spec->kind};
    const char *a1 = nargs >= 1 ? ws.w[1] : NULL;
    const char *a2 = nargs >= 2 ? ws.w[2] : NULL;
    const char *a3 = nargs >= 3 ? ws.w[3] : NULL;
    uint64_t v;
    switch (spec->kind) {
    case MPS_CMD_QUIT:
        if (nargs == 0)
            break;
        if (nargs != 2 || strcmp(a1, "-t") != 0)
            return errbuf_printf(err, errlen, "usage: %s", spec->usage);
        if (!parse_uint(a2, 86400, &v))
            return errbuf_printf(err, errlen, "bad timeout '%s': want seconds (0-86400)", a2);
        c.timeout_s = (uint32_t)v;
        break;
    case MPS_CMD_GET_SERVER_LIST:
    case MPS_CMD_GET_DEFAULT_THREAD_PCT:
        break;
    case MPS_CMD_START_SERVER:
        if (strcmp(a1, "-uid") != 0)
            return errbuf_printf(err, errlen, "unknown option '%s': usage: %s", a1, spec->usage);
        if (!parse_uint(a2, UINT32_MAX - 1, &v))
            return errbuf_printf(err, errlen, "bad uid '%s': want a numeric user id", a2);
        c.uid = (uint32_t)v;
        break;
    case MPS_CMD_SHUTDOWN_SERVER:
        if ((r = parse_pid(a1, &c.pid, err, errlen)) < 0)
            return r;
        if (a2) {
            if (strcmp(a2, "-f") != 0)
                return errbuf_printf(err, errlen, "unknown option '%s': usage: %s", a2,
                                     spec->usage);
            c.force = 1;
        }
        break;
    case MPS_CMD_GET_SERVER_STATUS:
    case MPS_CMD_GET_CLIENT_LIST:
    case MPS_CMD_GET_THREAD_PCT:
        if ((r = parse_pid(a1, &c.pid, err, errlen)) < 0)
            return r;
        break;
    case MPS_CMD_GET_DEVICE_CLIENT_LIST:
        if (a1 && (r = parse_pid(a1, &c.pid, err, errlen)) < 0)
            return r;
        break;
    case MPS_CMD_SET_DEFAULT_THREAD_PCT:
        if ((r = parse_pct(a1, &c.thread_pct_x10, err, errlen)) < 0)
            return r;
        break;
    case MPS_CMD_SET_THREAD_PCT:
        if ((r = parse_pid(a1, &c.pid, err, errlen)) < 0 ||
            (r = parse_pct(a2, &c.thread_pct_x10, err, errlen)) < 0)
            return r;
        break;
    case MPS_CMD_GET_DEFAULT_PINNED_LIMIT:
        if ((r = parse_dev(a1, &c.device, err, errlen)) < 0)
            return r;
        break;
    case MPS_CMD_SET_DEFAULT_PINNED_LIMIT:
        if ((r = parse_dev(a1, &c.device, err, errlen)) < 0 ||
            (r = parse_limit(a2, &c.bytes, err, errlen)) < 0)
            return r;
        break;
    case MPS_CMD_GET_PINNED_LIMIT:
        if ((r = parse_pid(a1, &c.pid, err, errlen)) < 0 ||
            (r = parse_dev(a2, &c.device, err, errlen)) < 0)
            return r;
        break;
    case MPS_CMD_SET_PINNED_LIMIT:
        if ((r = parse_pid(a1, &c.pid, err, errlen)) < 0 ||
            (r = parse_dev(a2, &c.device, err, errlen)) < 0 ||
            (r = parse_limit(a3, &c.bytes, err, errlen)) < 0)
            return r;
        break;
    }
    *ret_cmd = c;
    return 0;
}
