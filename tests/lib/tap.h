/* tap.h — the project's test runner: each test program registers cases with
 * TEST(name), runs them in order and prints TAP (`ok N - name`), which
 * scripts/test-summary.py counts across the suite.
 *
 *   TEST(parse_size_suffixes) {
 *       uint64_t v;
 *       CHECK_EQ_INT(parse_size("4Ki", &v), 0);
 *       CHECK_EQ_U64(v, 4096);
 *   }
 *   int main(int argc, char **argv) { return tap_main(argc, argv); }
 *
 * CHECK* records a failure and goes on; REQUIRE* ends the case. A program
 * that cannot run here (no GPU, no tool) calls tap_skip_all(reason): exit 77,
 * which meson reports as skipped. `prog NAME...` runs only the named cases.
 * Tests never sleep to "wait enough": use TAP_WAIT_UNTIL with a bound. */
#pragma once

#include <inttypes.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef void (*tap_fn)(void);

void tap_register(const char *name, tap_fn fn);
int tap_main(int argc, char **argv);
void tap_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void tap_abort_case(void);
_Noreturn void tap_skip_all(const char *reason);
/* Marks the running case skipped (it still ends normally). */
void tap_skip_case(const char *reason);
void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Directory of the running test binary's sources/build for fixtures: from
 * $TAP_SRCDIR / $TAP_BUILDDIR (set by meson), or "." */
const char *tap_srcdir(void);
const char *tap_builddir(void);
/* A fresh temporary directory for this process, removed at exit. Borrowed. */
const char *tap_tmpdir(void);
/* As root: this process (and what it starts) gets a private mount namespace, so that mounts its
 * code makes (tmpfs region dirs) go with it; the temp dir's mounts are undone at exit anyway.
 * false when not root or refused (mounts then land in the caller's namespace). */
bool tap_private_mounts(void);
/* The ASan runtime this program was linked with, from its own mappings (a launcher puts it first
 * in a child's LD_PRELOAD, ahead of libvcuda or the emulator). false when not sanitized. */
bool tap_find_asan_runtime(char *buf, size_t len);

#define TEST(name)                                                                                 \
    static void name(void);                                                                        \
    __attribute__((constructor)) static void tap_reg_##name(void)                                  \
    {                                                                                              \
        tap_register(#name, name);                                                                 \
    }                                                                                              \
    static void name(void)

#define CHECK(cond)                                                                                \
    ((cond) ? true : (tap_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond), false))
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            tap_fail(__FILE__, __LINE__, "REQUIRE(%s) failed", #cond);                             \
            tap_abort_case();                                                                      \
        }                                                                                          \
    } while (0)

#define TAP_CMP_(type, fmt, a, b, op, fatal)                                                       \
    do {                                                                                           \
        type tap_a_ = (a), tap_b_ = (b);                                                           \
        if (!(tap_a_ op tap_b_)) {                                                                 \
            tap_fail(__FILE__, __LINE__, "%s %s %s: " fmt " vs " fmt, #a, #op, #b, tap_a_,         \
                     tap_b_);                                                                      \
            if (fatal)                                                                             \
                tap_abort_case();                                                                  \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b) TAP_CMP_(long long, "%lld", a, b, ==, 0)
#define CHECK_NE_INT(a, b) TAP_CMP_(long long, "%lld", a, b, !=, 0)
#define CHECK_LE_INT(a, b) TAP_CMP_(long long, "%lld", a, b, <=, 0)
#define CHECK_GE_INT(a, b) TAP_CMP_(long long, "%lld", a, b, >=, 0)
#define REQUIRE_EQ_INT(a, b) TAP_CMP_(long long, "%lld", a, b, ==, 1)
#define CHECK_EQ_U64(a, b) TAP_CMP_(unsigned long long, "%llu", a, b, ==, 0)
#define CHECK_LE_U64(a, b) TAP_CMP_(unsigned long long, "%llu", a, b, <=, 0)
#define CHECK_GE_U64(a, b) TAP_CMP_(unsigned long long, "%llu", a, b, >=, 0)
#define REQUIRE_EQ_U64(a, b) TAP_CMP_(unsigned long long, "%llu", a, b, ==, 1)

#define CHECK_EQ_STR(a, b)                                                                         \
    do {                                                                                           \
        const char *tap_sa_ = (a), *tap_sb_ = (b);                                                 \
        if (!tap_sa_ || !tap_sb_ || strcmp(tap_sa_, tap_sb_) != 0)                                 \
            tap_fail(__FILE__, __LINE__, "%s == %s: \"%s\" vs \"%s\"", #a, #b,                     \
                     tap_sa_ ? tap_sa_ : "(null)", tap_sb_ ? tap_sb_ : "(null)");                  \
    } while (0)

/* Polls cond every millisecond until it holds or timeout_ms passes; evaluates
 * to the final value of cond. For conditions another process or thread makes
 * true: the bound is a failure limit, never a "wait long enough". */
#define TAP_WAIT_UNTIL(cond, timeout_ms)                                                           \
    ({                                                                                             \
        bool tap_ok_ = false;                                                                      \
        for (int tap_i_ = 0; tap_i_ <= (timeout_ms); tap_i_++) {                                   \
            if ((cond)) {                                                                          \
                tap_ok_ = true;                                                                    \
                break;                                                                             \
            }                                                                                      \
            tap_sleep_ms(1);                                                                       \
        }                                                                                          \
        tap_ok_;                                                                                   \
    })

void tap_sleep_ms(int ms);
