/* log.h — leveled logging to stderr for accel's programs.
 *
 * Only "main program" code logs (STYLE.md): libraries return -errno and let
 * the caller turn it into a message. The level is set once at start-up; the
 * check in log_enabled() is a plain load so that disabled debug lines cost
 * nothing on hot paths. Thread-safe: one write(2) per line. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>

enum log_level {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN = 1,
    LOG_LEVEL_INFO = 2,
    LOG_LEVEL_DEBUG = 3,
};

/* Program name printed before every line ("acceld", "accelctl", ...). Borrowed. */
void log_set_ident(const char *ident);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* Parses "error|warn|info|debug" (or 0-3). Returns 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *ret_level);
/* Prefix each line with an ISO-8601 UTC timestamp (daemons: on). */
void log_set_timestamps(bool on);

static inline bool log_enabled(enum log_level level)
{
    return level <= log_get_level();
}

void log_emit(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_emitv(enum log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#define log_error(...) log_emit(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_emit(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...)                                                                              \
    do {                                                                                           \
        if (log_enabled(LOG_LEVEL_INFO))                                                           \
            log_emit(LOG_LEVEL_INFO, __VA_ARGS__);                                                 \
    } while (0)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_enabled(LOG_LEVEL_DEBUG))                                                          \
            log_emit(LOG_LEVEL_DEBUG, __VA_ARGS__);                                                \
    } while (0)
