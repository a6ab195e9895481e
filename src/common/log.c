/* log.c — see log.h. */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_ident = "accel";
static enum log_level log_level_current = LOG_LEVEL_INFO;
static bool log_timestamps;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_ident(const char *ident)
{
    log_ident = ident ? ident : "accel";
}

void log_set_level(enum log_level level)
{
    log_level_current = level;
}

enum log_level log_get_level(void)
{
    return log_level_current;
}

void log_set_timestamps(bool on)
{
    log_timestamps = on;
}

int log_level_parse(const char *s, enum log_level *ret_level)
{
    if (!s)
        return -EINVAL;
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, level_names[i]) == 0 || (s[0] == '0' + i && s[1] == '\0')) {
            *ret_level = (enum log_level)i;
            return 0;
        }
    }
    if (strcasecmp(s, "warning") == 0) {
        *ret_level = LOG_LEVEL_WARN;
        return 0;
    }
    return -EINVAL;
}

void log_emitv(enum log_level level, const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    char line[2048];
    size_t n = 0;
    if (log_timestamps) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n += strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
        n += (size_t)snprintf(line + n, sizeof(line) - n, ".%03ldZ ", ts.tv_nsec / 1000000);
    }
    n += (size_t)snprintf(line + n, sizeof(line) - n, "%s: %s: ", log_ident, level_names[level]);
    if (n < sizeof(line)) {
        int m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
        if (m > 0)
            n += (size_t)m;
    }
    if (n >= sizeof(line) - 1)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void log_emit(enum log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_emitv(level, fmt, ap);
    va_end(ap);
}
