/* util.c — parsing and formatting helpers; see util.h. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int parse_u64(const char *s, uint64_t *ret)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    if (*end != '\0')
        return -EINVAL;
    *ret = v;
    return 0;
}

int parse_int(const char *s, int *ret)
{
    if (!s || !*s)
        return -EINVAL;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno == ERANGE || v > INT32_MAX || v < INT32_MIN)
        return -ERANGE;
    if (*end != '\0' || end == s)
        return -EINVAL;
    *ret = (int)v;
    return 0;
}

/* Splits "1.5Gi" into a decimal number (integer and fraction kept exact
 * enough: up to 9 fractional digits) and a suffix. */
struct unit {
    const char *suffix;
    uint64_t mult;
};

static int parse_scaled(const char *s, const struct unit *units, size_t nunits, uint64_t *ret)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    uint64_t whole = 0;
    const char *p = s;
    while (isdigit((unsigned char)*p)) {
        if (whole > (UINT64_MAX - 9) / 10)
            return -ERANGE;
        whole = whole * 10 + (uint64_t)(*p++ - '0');
    }
    uint64_t frac = 0, frac_div = 1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        while (isdigit((unsigned char)*p)) {
            if (frac_div < 1000000000ull) {
                frac = frac * 10 + (uint64_t)(*p - '0');
                frac_div *= 10;
            }
            p++;
        }
    }
    for (size_t i = 0; i < nunits; i++) {
        if (strcmp(p, units[i].suffix) != 0)
            continue;
        uint64_t m = units[i].mult;
        if (whole != 0 && m > UINT64_MAX / whole)
            return -ERANGE;
        uint64_t v = whole * m;
        /* frac/frac_div * m, without overflow for m up to 2^40*1024 */
        long double f = (long double)frac * (long double)m / (long double)frac_div;
        if ((long double)(UINT64_MAX - v) < f)
            return -ERANGE;
        *ret = v + (uint64_t)f;
        return 0;
    }
    return -EINVAL;
}

int parse_size(const char *s, uint64_t *ret_bytes)
{
    static const struct unit units[] = {
        {"", 1},
        {"B", 1},
        {"K", 1000ull},
        {"KB", 1000ull},
        {"M", 1000000ull},
        {"MB", 1000000ull},
        {"G", 1000000000ull},
        {"GB", 1000000000ull},
        {"T", 1000000000000ull},
        {"TB", 1000000000000ull},
        {"Ki", 1ull << 10},
        {"KiB", 1ull << 10},
        {"Mi", 1ull << 20},
        {"MiB", 1ull << 20},
        {"Gi", 1ull << 30},
        {"GiB", 1ull << 30},
        {"Ti", 1ull << 40},
        {"TiB", 1ull << 40},
    };
    uint64_t v;
    int r = parse_scaled(s, units, ARRAY_SIZE(units), &v);
    if (r < 0)
        return r;
    *ret_bytes = v;
    return 0;
}

int parse_duration_ns(const char *s, uint64_t *ret_ns)
{
    static const struct unit units[] = {
        {"", 1000000000ull},
        {"s", 1000000000ull},
        {"ms", 1000000ull},
        {"us", 1000ull},
        {"ns", 1ull},
        {"m", 60ull * 1000000000ull},
        {"h", 3600ull * 1000000000ull},
    };
    uint64_t v;
    int r = parse_scaled(s, units, ARRAY_SIZE(units), &v);
    if (r < 0)
        return r;
    *ret_ns = v;
    return 0;
}

char *format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    size_t i = 0;
    while (v >= 1024.0 && i + 1 < ARRAY_SIZE(names)) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.2f %s", v, names[i]);
    return buf;
}

int errbuf_printf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}
