/* vcuda.h — libvcuda's internal interface shared by its files: the real
 * driver/NVML tables generated from hooks.def, the process-wide state (config,
 * region, slot) and the helpers the hooks use.
 *
 * Lifecycle: nothing runs at load except cheap constructor work (the library
 * is in every process of a container). The config and the region are set up by
 * the first hooked call (vc_ensure); the real driver is dlopen'd by the first
 * call that needs it (vc_driver_ensure). Both are idempotent, thread-safe,
 * re-entrancy-guarded and reset in a forked child. */
#pragma once

#include "vcuda-config.h"
#include "cuda_api.h"
#include "nvml_api.h"
#include "region.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define VC_EXPORT __attribute__((visibility("default")))
#define VC_LIKELY(x) __builtin_expect(!!(x), 1)
#define VC_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Exported declarations of every hooked symbol (default visibility). */
#define VC_HOOK_CU(n) extern __typeof__(n) n VC_EXPORT;
#define VC_HOOK_NVML(n) extern __typeof__(n) n VC_EXPORT;
#define VC_REAL_CU(n)
#define VC_REAL_NVML(n)
#include "hooks.def"
#undef VC_HOOK_CU
#undef VC_HOOK_NVML
#undef VC_REAL_CU
#undef VC_REAL_NVML

/* Real entry points, resolved from the real libraries by name. */
struct vc_real {
#define VC_HOOK_CU(n) __typeof__(n) *n;
#define VC_HOOK_NVML(n) __typeof__(n) *n;
#define VC_REAL_CU(n) __typeof__(n) *n;
#define VC_REAL_NVML(n) __typeof__(n) *n;
#include "hooks.def"
#undef VC_HOOK_CU
#undef VC_HOOK_NVML
#undef VC_REAL_CU
#undef VC_REAL_NVML
};
extern struct vc_real vc_real;

enum vc_lib { VC_LIB_CUDA = 0, VC_LIB_NVML = 1 };

struct vc_hook {
    const char *name;
    void *wrapper;
    void **real; /* into vc_real */
    int lib;     /* enum vc_lib */
};

/* The table generated from hooks.def (hooked entries only). */
extern const struct vc_hook vc_hooks[];
extern const unsigned vc_hook_count;

/* Hook by exported name, or NULL. */
const struct vc_hook *vc_hook_by_name(const char *name);
/* Our wrapper for a real driver/NVML address, or NULL when not hooked. */
void *vc_hook_by_real(const void *real_fn);

/* Real dlsym (glibc's), read from libc's symbol table. dlsym.c. */
void *vc_real_dlsym(void *handle, const char *name);

/* Loads libcuda.so.1 and fills vc_real's CUDA members. 0 or -errno
 * (-EDEADLK when called again from inside the load on the same thread). */
int vc_driver_ensure(void);
int vc_nvml_ensure(void);

/* Process-wide state, written once by vc_ensure (and reset after fork). */
struct vc_state {
    struct vc_config cfg;
    struct vc_region region;
    int slot;         /* our slot in the region, -1 if none */
    bool fail_closed; /* config or region unusable: deny device memory */
    uint32_t pid;
};
extern struct vc_state vc;
extern atomic_int vc_ready; /* 1 once vc is set up */

int vc_init_slow(void);
static inline int vc_ensure(void)
{
    if (VC_LIKELY(atomic_load_explicit(&vc_ready, memory_order_acquire) == 1))
        return 0;
    return vc_init_slow();
}

/* Hot-path helpers (hook-mem.c / hook-ctx.c). */
/* The region index of a device the configured list does not name: not assigned to this
 * container, so its quota is 0 (vc_mem_reserve refuses it, views show 0, no context). Never
 * an index into the region (whose functions ignore it). */
#define VC_DEVICE_UNASSIGNED VC_REGION_DEVICES
/* Region device index of CUDA ordinal dev (config UUID order, else ordinal), or
 * VC_DEVICE_UNASSIGNED when a device list is configured and does not name it. */
int vc_device_index(CUdevice dev, unsigned *ret_index);
/* CUDA ordinal dev's UUID spelt as NVML and the config spell it ("GPU-xxxxxxxx-...").
 * 0 or -ENODEV. */
int vc_device_uuid(CUdevice dev, char *buf, size_t len);
/* Current context and its region device index. CUDA error if none. */
CUresult vc_current(CUcontext *ret_ctx, unsigned *ret_index);
/* Reserves bytes on index against the quota (reaping dead processes and
 * refreshing pools before giving up). 0 or -ENOSPC. */
int vc_mem_reserve(unsigned index, uint64_t bytes);
void vc_mem_release(unsigned index, uint64_t bytes);
/* The CUDA_ERROR_OUT_OF_MEMORY result with its one log line. */
CUresult vc_mem_oom(unsigned index, uint64_t bytes, const char *what);
/* Releases everything a destroyed context owned (its own memory included). */
void vc_ctx_gone(CUcontext ctx);
/* Lets every pool of this process give back what it no longer holds. */
void vc_pools_refresh(void);
/* The quota seen as a device: total = min(quota, real total), free = total -
 * container use (never negative, never above real_free), used = total - free.
 * Reaps dead processes (at most every 100 ms) and refreshes pools first. */
void vc_quota_view(unsigned index, uint64_t real_free, uint64_t real_total, uint64_t *ret_free,
                   uint64_t *ret_total, uint64_t *ret_used);
/* Managed memory charged by residency (hook-managed.c). */
struct managed;
extern atomic_uint vc_host_pid;        /* this process as NVML names it, 0: unknown (hook-ctx.c) */
extern atomic_uint vc_managed_live;    /* tracked managed allocations */
extern atomic_uint vc_managed_pending; /* of which with pages a touch could still bring */
/* Tracks a new managed allocation (nothing charged). False when it cannot be tracked. */
bool vc_managed_track(CUdeviceptr base, uint64_t size, CUcontext ctx, CUdevice dev, unsigned index);
/* A free in two steps: take the record (NULL: not a tracked managed allocation), call the
 * driver, then give back (success) or put the record back. */
struct managed *vc_managed_take(CUdeviceptr base);
CUresult vc_managed_free_end(struct managed *m, CUresult r);
void vc_managed_ctx_gone(CUcontext ctx);
void vc_managed_atfork_child(void);
void vc_managed_touch_slow(CUdeviceptr p, uint64_t len);
void vc_managed_launch_slow(CUfunction f, void **params, void **extra);
/* Before a launch: the managed allocations its arguments point into come to the device. */
static inline void vc_managed_launch(CUfunction f, void **params, void **extra)
{
    if (VC_UNLIKELY(atomic_load_explicit(&vc_managed_pending, memory_order_relaxed)))
        vc_managed_launch_slow(f, params, extra);
}
/* Graph memory (hook-graph.c): a launch or upload of an executable graph whose allocation
 * nodes are not mapped yet reserves what they need first (vc_graph_map_begin: 0 or the
 * CUDA_ERROR_OUT_OF_MEMORY result), and settles on what the driver then holds
 * (vc_graph_map_end, with the driver's result). */
struct vc_graph_pending {
    bool locked;
    CUgraphExec exec;
    uint64_t bytes[VC_REGION_DEVICES + 1];
};
CUresult vc_graph_map_begin(CUgraphExec e, const char *what, struct vc_graph_pending *ret);
void vc_graph_map_end(struct vc_graph_pending *p, CUresult r);
/* Settles every device's graph memory charge on what the driver says it holds. */
void vc_graph_refresh(void);
void vc_graph_atfork_child(void);
/* Resets per-process hook state in a forked child. */
void vc_mem_atfork_child(void);
void vc_ctx_atfork_child(void);
void vc_launch_atfork_child(void); /* hook-launch.c */
/* At exit: settles the launches that have finished (no waiting). hook-launch.c. */
void vc_launch_exit(void);
/* Before a context may be destroyed (ctx NULL: a primary context, any): settles finished
 * launches and drops pacing's events made in it. hook-launch.c. */
void vc_launch_ctx_closing(CUcontext ctx);

/* For wrappers: loads the driver if needed and returns from the wrapper with
 * an error when the real function n is not available. */
#define VC_NEED_REAL(n)                                                                            \
    do {                                                                                           \
        if (VC_UNLIKELY(vc_driver_ensure() < 0))                                                   \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
        if (VC_UNLIKELY(!vc_real.n))                                                               \
            return CUDA_ERROR_NOT_FOUND;                                                           \
    } while (0)

/* The start of every accounting cu* wrapper: VC_NEED_REAL, then libvcuda's own
 * setup (configuration, region slot) or CUDA_ERROR_NOT_INITIALIZED. */
#define VC_PREAMBLE(n)                                                                             \
    VC_NEED_REAL(n);                                                                               \
    if (VC_UNLIKELY(vc_ensure() < 0))                                                              \
    return CUDA_ERROR_NOT_INITIALIZED
