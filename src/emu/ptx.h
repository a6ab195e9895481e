/* ptx.h — the little of PTX the emulator reads: the kernels (`.entry name(...)`) a module
 * defines and the byte size of each of their parameters. PTX text is outside data (any
 * program hands it to cuModuleLoadData): the parser never reads past len, caps every count,
 * and rejects what it cannot understand. libc only; has a fuzz target (tests/fuzz/fuzz-ptx.c). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define PTX_NAME_MAX 128  /* longest kernel name kept, NUL included */
#define PTX_PARAMS_MAX 64 /* parameters per kernel */
#define PTX_ENTRIES_MAX 4096

struct ptx_kernel {
    char name[PTX_NAME_MAX];
    unsigned nparams;
    uint32_t param_size[PTX_PARAMS_MAX];
    uint32_t param_align[PTX_PARAMS_MAX]; /* `.align N`, else the element type's size */
};

/* Parses PTX text of len bytes (need not be NUL-terminated). The kernels go to out (up to max,
 * the count found in *ret_n; NULL/0 just counts). Returns 0, or -EINVAL when the text has no
 * `.version`/`.target` directive, a malformed `.entry` or too many kernels/parameters, or
 * -ENAMETOOLONG for a kernel name longer than PTX_NAME_MAX - 1. */
int ptx_parse(const char *text, size_t len, struct ptx_kernel *out, size_t max, size_t *ret_n);

/* A module-scope variable with storage: `.global` (__device__) or `.const` (__constant__). */
struct ptx_global {
    char name[PTX_NAME_MAX];
    int constant; /* 1: .const */
    uint64_t size;
    uint8_t *init; /* init_len bytes of initial value (rest zero); malloc'ed, may be NULL */
    size_t init_len;
};

#define PTX_GLOBALS_MAX 4096
#define PTX_GLOBAL_SIZE_MAX (1ull << 36) /* larger declarations are rejected */
#define PTX_INIT_MAX (64ull << 20)       /* bytes of initializer kept per variable */

/* The variables a module defines (`.extern` declarations and other state spaces skipped),
 * with their initializers (integers, 0f/0d float bit patterns; an address initializer such as
 * `generic(sym)` reads as 0). *ret (free with ptx_globals_free) holds *ret_n entries.
 * -EINVAL for a malformed declaration, -ENOMEM. */
int ptx_globals(const char *text, size_t len, struct ptx_global **ret, size_t *ret_n);
void ptx_globals_free(struct ptx_global *g, size_t n);
