/* cuda_export.c — cuGetExportTable: the undocumented tables NVIDIA's CUDA runtime (libcudart,
 * static or shared) asks the driver for, found by 16-byte UUID. A table is an array of slots;
 * most begin with their own size in bytes (slot 0), then function pointers. The runtime 13.0
 * refuses to start without the six answered here (error 500; CUDART_INTERFACE: 801).
 *
 * Sources: the layouts and UUIDs follow the ZLUDA project's public descriptions of these
 * tables and traces of the 13.0 runtime against a prototype driver; docs/emulator-cuda.md
 * tells what each slot does and how the emulator answers it.
 *
 * Every slot the emulator does not model is a stub that fails with CUDA_ERROR_NOT_SUPPORTED and
 * says so once on stderr, and an unknown UUID is answered CUDA_ERROR_NOT_FOUND and logged once:
 * a new CUDA release that needs more shows up as a named table/slot, not a crash or a silent
 * success. With ACCEL_EMU_DEBUG_LOG=<file>, each table asked for and each slot's first call
 * append one line there (tests/runtime checks the list against what 13.0 is known to use).
 *
 * The small tables live here, one section each; context-local storage is cuda_cls.c, the
 * integrity answer cuda_export_integrity.c. */
#define _GNU_SOURCE
#include "cuda_export.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_cls.h"

unsigned char cuda_export_seen_flags[CUDA_EXPORT_N][CUDA_EXPORT_SLOTS_MAX];
static unsigned char unanswered_said[CUDA_EXPORT_N][CUDA_EXPORT_SLOTS_MAX];

static const char *const table_names[CUDA_EXPORT_N] = {
    [CUDA_EXPORT_CUDART] = "CUDART_INTERFACE", [CUDA_EXPORT_HOOKS] = "TOOLS_RUNTIME_CALLBACK_HOOKS",
    [CUDA_EXPORT_TLS] = "TOOLS_TLS",           [CUDA_EXPORT_CLS] = "CONTEXT_LOCAL_STORAGE",
    [CUDA_EXPORT_CHECKS] = "CONTEXT_CHECKS",   [CUDA_EXPORT_INTEGRITY] = "INTEGRITY_CHECK",
};

void cuda_debug_log(const char *fmt, ...)
{
    const char *path = getenv("ACCEL_EMU_DEBUG_LOG");
    if (!path || !*path)
        return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = sizeof(line) - 2;
    line[n++] = '\n';
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n); /* one write: lines of processes never interleave */
    (void)w;
    close(fd);
}

void cuda_export_seen_slow(enum cuda_export_id t, int slot)
{
    if (__atomic_exchange_n(&cuda_export_seen_flags[t][slot], 1, __ATOMIC_RELAXED))
        return;
    cuda_debug_log("export-slot %s %d answered", table_names[t], slot);
}

CUresult cuda_export_unanswered(enum cuda_export_id t, int slot)
{
    if (!__atomic_exchange_n(&unanswered_said[t][slot], 1, __ATOMIC_RELAXED)) {
        fprintf(stderr,
                "accel-emu libcuda: the CUDA runtime called slot %d of export table %s, which "
                "the emulator does not answer (CUDA_ERROR_NOT_SUPPORTED); see "
                "docs/emulator-cuda.md\n",
                slot, table_names[t]);
        cuda_debug_log("export-slot %s %d unanswered", table_names[t], slot);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* One stub per unanswered slot, so the log can name it. */
#define STUB(t, s)                                                                                 \
    static CUresult stub_##t##_##s(void)                                                           \
    {                                                                                              \
        return cuda_export_unanswered(t, s);                                                       \
    }
#define TABLE_SIZE(n) ((const void *)(uintptr_t)((n) * sizeof(void *)))

/* ---- CUDART_INTERFACE (6bd5fb6c-…): 13 slots, size header. Slot 2 hands the runtime the
 * device's primary context (inactive, not retained: the runtime retains it itself). ---- */
static CUresult cudart_primary_ctx(CUcontext *ret, CUdevice dev)
{
    cuda_export_seen(CUDA_EXPORT_CUDART, 2);
    if (!ret)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuda_check_init();
    if (r)
        return r;
    struct CUctx_st *c;
    r = cuda_primary_get(dev, &c);
    if (!r)
        *ret = c;
    return r;
}

STUB(CUDA_EXPORT_CUDART, 1)
STUB(CUDA_EXPORT_CUDART, 3)
STUB(CUDA_EXPORT_CUDART, 4)
STUB(CUDA_EXPORT_CUDART, 5)
STUB(CUDA_EXPORT_CUDART, 6)
STUB(CUDA_EXPORT_CUDART, 7)
STUB(CUDA_EXPORT_CUDART, 8)
STUB(CUDA_EXPORT_CUDART, 9)
STUB(CUDA_EXPORT_CUDART, 10)
STUB(CUDA_EXPORT_CUDART, 11)
STUB(CUDA_EXPORT_CUDART, 12)

const void *const cuda_export_cudart_table[] = {
    TABLE_SIZE(13),
    (const void *)stub_CUDA_EXPORT_CUDART_1,
    (const void *)cudart_primary_ctx,
    (const void *)stub_CUDA_EXPORT_CUDART_3,
    (const void *)stub_CUDA_EXPORT_CUDART_4,
    (const void *)stub_CUDA_EXPORT_CUDART_5,
    (const void *)stub_CUDA_EXPORT_CUDART_6,
    (const void *)stub_CUDA_EXPORT_CUDART_7,
    (const void *)stub_CUDA_EXPORT_CUDART_8,
    (const void *)stub_CUDA_EXPORT_CUDART_9,
    (const void *)stub_CUDA_EXPORT_CUDART_10,
    (const void *)stub_CUDA_EXPORT_CUDART_11,
    (const void *)stub_CUDA_EXPORT_CUDART_12,
};

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS (a094798c-…): 7 slots, size header. The runtime reports
 * its API calls to profiling tools through buffers the driver hands out; no tool is attached
 * here, so the buffers stay zeroed (slot 2: 1024 bytes, slot 6: 14 bytes) and the callback
 * registrations (slots 1 and 4; slot 1's first argument is a CUPTI runtime callback id) are
 * accepted and never fire. ---- */
static unsigned char hooks_buf2[1024], hooks_buf6[14];

static CUresult hooks_register1(void)
{
    cuda_export_seen(CUDA_EXPORT_HOOKS, 1);
    return CUDA_SUCCESS;
}

static CUresult hooks_register4(void)
{
    cuda_export_seen(CUDA_EXPORT_HOOKS, 4);
    return CUDA_SUCCESS;
}

static CUresult hooks_buffer(int slot, void *buf, size_t len, void **ret_buf, size_t *ret_len)
{
    cuda_export_seen(CUDA_EXPORT_HOOKS, slot);
    if (ret_buf)
        *ret_buf = buf;
    if (ret_len)
        *ret_len = len;
    return CUDA_SUCCESS;
}

static CUresult hooks_buffer2(void **ret_buf, size_t *ret_len)
{
    return hooks_buffer(2, hooks_buf2, sizeof(hooks_buf2), ret_buf, ret_len);
}

static CUresult hooks_buffer6(void **ret_buf, size_t *ret_len)
{
    return hooks_buffer(6, hooks_buf6, sizeof(hooks_buf6), ret_buf, ret_len);
}

STUB(CUDA_EXPORT_HOOKS, 3)
STUB(CUDA_EXPORT_HOOKS, 5)

static const void *const hooks_table[] = {
    TABLE_SIZE(7),
    (const void *)hooks_register1,
    (const void *)hooks_buffer2,
    (const void *)stub_CUDA_EXPORT_HOOKS_3,
    (const void *)hooks_register4,
    (const void *)stub_CUDA_EXPORT_HOOKS_5,
    (const void *)hooks_buffer6,
};

/* ---- TOOLS_TLS (42d85a81-…): 4 slots, size header. Slot 2 is a per-thread tools query the
 * runtime makes a few times at start; with no tool attached it has nothing to report. ---- */
static CUresult tls_query(void)
{
    cuda_export_seen(CUDA_EXPORT_TLS, 2);
    return CUDA_SUCCESS;
}

STUB(CUDA_EXPORT_TLS, 1)
STUB(CUDA_EXPORT_TLS, 3)

static const void *const tls_table[] = {
    TABLE_SIZE(4),
    (const void *)stub_CUDA_EXPORT_TLS_1,
    (const void *)tls_query,
    (const void *)stub_CUDA_EXPORT_TLS_3,
};

/* ---- CONTEXT_CHECKS (263e8860-…): slot 2 (ctx, uint32_t *out, void **out2) reports a
 * context property the runtime checks before using a context (0: nothing special); slot 3 ()
 * is a check that passes. ---- */
static CUresult checks_ctx(CUcontext ctx, uint32_t *out, void **out2)
{
    cuda_export_seen(CUDA_EXPORT_CHECKS, 2);
    if (out)
        *out = 0;
    return CUDA_SUCCESS;
}

static CUresult checks_ok(void)
{
    cuda_export_seen(CUDA_EXPORT_CHECKS, 3);
    return CUDA_SUCCESS;
}

STUB(CUDA_EXPORT_CHECKS, 1)

static const void *const checks_table[] = {
    TABLE_SIZE(4),
    (const void *)stub_CUDA_EXPORT_CHECKS_1,
    (const void *)checks_ctx,
    (const void *)checks_ok,
};

/* ---- the registry ---- */

struct export_table {
    unsigned char uuid[16]; /* bytes in memory order */
    int id;                 /* enum cuda_export_id, or -1: known and refused */
    const char *name;
    const void *const *table;
};

static const struct export_table tables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d,
      0xf9},
     CUDA_EXPORT_CUDART,
     "CUDART_INTERFACE",
     cuda_export_cudart_table},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a,
      0x66},
     CUDA_EXPORT_HOOKS,
     "TOOLS_RUNTIME_CALLBACK_HOOKS",
     hooks_table},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec,
      0xdc},
     CUDA_EXPORT_TLS,
     "TOOLS_TLS",
     tls_table},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95,
      0x93},
     CUDA_EXPORT_CLS,
     "CONTEXT_LOCAL_STORAGE",
     cuda_export_cls_table},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa,
      0x7e},
     CUDA_EXPORT_CHECKS,
     "CONTEXT_CHECKS",
     checks_table},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1,
      0xf2},
     CUDA_EXPORT_INTEGRITY,
     "INTEGRITY_CHECK",
     cuda_export_integrity_table},
    /* asked for first by 13.0, which goes on without it (13.2 is reported to need slot 25) */
    {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d,
      0xd9},
     -1,
     "REQUIREMENTS",
     NULL},
};

static void uuid_text(const unsigned char *u, char out[37])
{
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

#define UNKNOWN_MAX 32
static pthread_mutex_t unknown_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char unknown_said[UNKNOWN_MAX][16];
static size_t nunknown;

/* True the first time this UUID is seen (a bounded memory of UUIDs already reported). */
static bool first_unknown(const unsigned char *u)
{
    pthread_mutex_lock(&unknown_lock);
    bool first = true;
    for (size_t i = 0; i < nunknown && first; i++)
        first = memcmp(unknown_said[i], u, 16) != 0;
    if (first && nunknown < UNKNOWN_MAX)
        memcpy(unknown_said[nunknown++], u, 16);
    pthread_mutex_unlock(&unknown_lock);
    return first;
}

EMU_API CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    if (!table || !id)
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned char *u = (const unsigned char *)id->bytes;
    char text[37];
    uuid_text(u, text);
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        if (memcmp(tables[i].uuid, u, 16) != 0)
            continue;
        cuda_debug_log("export-table %s %s %s", text, tables[i].name,
                       tables[i].table ? "answered" : "refused");
        *table = tables[i].table;
        return tables[i].table ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    }
    *table = NULL;
    if (first_unknown(u)) {
        fprintf(stderr,
                "accel-emu libcuda: cuGetExportTable: unknown table %s (answered "
                "CUDA_ERROR_NOT_FOUND); a CUDA release newer than the emulator knows may need "
                "it, see docs/emulator-cuda.md\n",
                text);
        cuda_debug_log("export-table %s unknown", text);
    }
    return CUDA_ERROR_NOT_FOUND;
}
