/* tap.c — see tap.h. */
#define _GNU_SOURCE
#include "tap.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

#define TAP_MAX_CASES 512

static struct {
    const char *name;
    tap_fn fn;
} cases[TAP_MAX_CASES];
static int ncases;
static bool case_failed;
static const char *case_skip;
static jmp_buf case_jmp;
static char tmpdir[256];

void tap_register(const char *name, tap_fn fn)
{
    if (ncases == TAP_MAX_CASES) {
        fprintf(stderr, "tap: more than %d cases\n", TAP_MAX_CASES);
        abort();
    }
    cases[ncases].name = name;
    cases[ncases].fn = fn;
    ncases++;
}

void tap_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "# %s:%d: ", file, line);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
    case_failed = true;
}

void tap_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("# ", stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}

_Noreturn void tap_abort_case(void)
{
    longjmp(case_jmp, 1);
}

_Noreturn void tap_skip_all(const char *reason)
{
    printf("1..0 # SKIP %s\n", reason);
    fflush(stdout);
    exit(77);
}

void tap_skip_case(const char *reason)
{
    case_skip = reason;
}

void tap_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

const char *tap_srcdir(void)
{
    const char *s = getenv("TAP_SRCDIR");
    return s ? s : ".";
}

const char *tap_builddir(void)
{
    const char *s = getenv("TAP_BUILDDIR");
    return s ? s : ".";
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static pid_t tmp_owner;

/* Mounts below the temp dir (tmpfs region dirs acceld's code made there), innermost first. */
static void unmount_below(const char *dir)
{
    for (int pass = 0; pass < 8; pass++) {
        FILE *f = fopen("/proc/self/mountinfo", "r");
        if (!f)
            return;
        char line[4096], last[4096] = "";
        size_t len = strlen(dir);
        while (fgets(line, sizeof(line), f)) {
            char mp[4096];
            if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strncmp(mp, dir, len) == 0 &&
                mp[len] == '/')
                snprintf(last, sizeof(last), "%s", mp);
        }
        fclose(f);
        if (!last[0] || umount2(last, MNT_DETACH) < 0)
            return;
    }
}

static void tmpdir_cleanup(void)
{
    if (tmpdir[0] && getpid() == tmp_owner && !getenv("TAP_KEEP_TMP")) {
        for (int i = 0; i < 512; i++) /* bounded: a test may leave hundreds (spares) */
            unmount_below(tmpdir);
        nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    }
}

bool tap_private_mounts(void)
{
    if (geteuid() != 0 || unshare(CLONE_NEWNS) < 0)
        return false;
    return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
}

const char *tap_tmpdir(void)
{
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof(tmpdir), "%s/accel-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("tap: mkdtemp");
            abort();
        }
        tmp_owner = getpid();
        atexit(tmpdir_cleanup);
    }
    return tmpdir;
}

static bool selected(const char *name, int argc, char **argv)
{
    if (argc <= 1)
        return true;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

int tap_main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int planned = 0;
    for (int i = 0; i < ncases; i++)
        planned += selected(cases[i].name, argc, argv);
    printf("1..%d\n", planned);
    int failed = 0, n = 0;
    for (int i = 0; i < ncases; i++) {
        if (!selected(cases[i].name, argc, argv))
            continue;
        n++;
        case_failed = false;
        case_skip = NULL;
        if (setjmp(case_jmp) == 0)
            cases[i].fn();
        if (case_failed) {
            failed++;
            printf("not ok %d - %s\n", n, cases[i].name);
        } else if (case_skip) {
            printf("ok %d - %s # SKIP %s\n", n, cases[i].name, case_skip);
        } else {
            printf("ok %d - %s\n", n, cases[i].name);
        }
        fflush(stdout);
    }
    return failed ? 1 : 0;
}

bool tap_find_asan_runtime(char *buf, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        char *p = strchr(line, '/');
        if (p && strstr(p, "/libasan.so")) {
            p[strcspn(p, "\n")] = '\0';
            snprintf(buf, len, "%s", p);
            found = true;
        }
    }
    fclose(f);
    return found;
}
