/* emu-cli.h — for the emulator's C tests: runs the accel-emu built beside them
 * ($ACCEL_BUILD_ROOT/src/emu/accel-emu) as a user or a script would. */
#pragma once

#include <stddef.h>

/* The accel-emu to run; NULL when it is not built. */
const char *emu_cli_path(void);

/* accel-emu --state STATE ARGS... (a NULL-terminated list, at most 24): its exit status (-1 when
 * it could not run); its stdout into out when out is not NULL (else dropped), stderr left as the
 * test's. */
int emu_cli_run(const char *state, char *out, size_t len, ...) __attribute__((sentinel));

/* accel-emu init ARGS... (NULL-terminated) on a fresh machine <tap tmpdir>/name, made the
 * process's current one (ACCEL_EMU_STATE). Its path (a static buffer, overwritten by the next
 * call) or NULL when init failed. */
const char *emu_cli_machine(const char *name, ...) __attribute__((sentinel));
