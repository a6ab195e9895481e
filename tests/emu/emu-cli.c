/* emu-cli.c — see emu-cli.h. */
#include "emu-cli.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"

#define MAX_ARGS 24

const char *emu_cli_path(void)
{
    static char path[4096];
    if (!path[0]) {
        const char *root = getenv("ACCEL_BUILD_ROOT");
        snprintf(path, sizeof(path), "%s/src/emu/accel-emu", root ? root : ".");
    }
    return access(path, X_OK) == 0 ? path : NULL;
}

static int run(const char *state, char *out, size_t len, const char *verb, va_list ap)
{
    const char *argv[MAX_ARGS + 5];
    int n = 0, p[2] = {-1, -1};
    const char *exe = emu_cli_path();
    if (!exe)
        return -1;
    argv[n++] = exe;
    argv[n++] = "--state";
    argv[n++] = state;
    if (verb)
        argv[n++] = verb;
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < MAX_ARGS + 4)
        argv[n++] = a;
    argv[n] = NULL;
    if (out && pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int to = out ? p[1] : open("/dev/null", O_WRONLY);
        dup2(to, 1);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    if (out) {
        close(p[1]);
        size_t got = 0;
        ssize_t r;
        char sink[256];
        while ((r = read(p[0], got + 1 < len ? out + got : sink,
                         got + 1 < len ? len - 1 - got : sizeof(sink))) > 0)
            if (got + 1 < len)
                got += (size_t)r;
        out[got < len ? got : len - 1] = '\0';
        close(p[0]);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int emu_cli_run(const char *state, char *out, size_t len, ...)
{
    va_list ap;
    va_start(ap, len);
    int r = run(state, out, out ? len : 0, NULL, ap);
    va_end(ap);
    return r;
}

const char *emu_cli_machine(const char *name, ...)
{
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s", tap_tmpdir(), name);
    va_list ap;
    va_start(ap, name);
    int r = run(path, NULL, 0, "init", ap);
    va_end(ap);
    if (r != 0)
        return NULL;
    setenv("ACCEL_EMU_STATE", path, 1);
    return path;
}
