/* cuda_export.h — cuGetExportTable's tables (cuda_export.c): the undocumented interfaces
 * NVIDIA's CUDA runtime asks a driver for before anything else. Each table module defines
 * its table and calls cuda_export_seen() on entry to every answered slot, so the debug log
 * (ACCEL_EMU_DEBUG_LOG) names every table and slot a program used. */
#pragma once

#include "cuda_emu.h"

enum cuda_export_id {
    CUDA_EXPORT_CUDART,    /* CUDART_INTERFACE */
    CUDA_EXPORT_HOOKS,     /* TOOLS_RUNTIME_CALLBACK_HOOKS */
    CUDA_EXPORT_TLS,       /* TOOLS_TLS */
    CUDA_EXPORT_CLS,       /* context-local storage (cuda_cls.c) */
    CUDA_EXPORT_CHECKS,    /* CONTEXT_CHECKS */
    CUDA_EXPORT_INTEGRITY, /* INTEGRITY_CHECK (cuda_export_integrity.c) */
    CUDA_EXPORT_N
};

#define CUDA_EXPORT_SLOTS_MAX 16

/* First call of (table, slot) in this process: one debug-log line. Cheap after that. */
void cuda_export_seen_slow(enum cuda_export_id t, int slot);
extern unsigned char cuda_export_seen_flags[CUDA_EXPORT_N][CUDA_EXPORT_SLOTS_MAX];
static inline void cuda_export_seen(enum cuda_export_id t, int slot)
{
    if (!__atomic_load_n(&cuda_export_seen_flags[t][slot], __ATOMIC_RELAXED))
        cuda_export_seen_slow(t, slot);
}

/* A slot the emulator does not answer: logged once (stderr and debug log), NOT_SUPPORTED. */
CUresult cuda_export_unanswered(enum cuda_export_id t, int slot);

/* Appends one line to $ACCEL_EMU_DEBUG_LOG when set (printf format). */
void cuda_debug_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The tables as the runtime sees them (arrays of slots). */
extern const void *const cuda_export_cudart_table[];
extern const void *const cuda_export_integrity_table[];
extern const void *const cuda_export_cls_table[];

/* The device's primary context, created inactive and not retained (cuda_ctx.c); it stays the
 * same object for the life of the process, across resets and last releases. */
CUresult cuda_primary_get(CUdevice dev, struct CUctx_st **ret);
