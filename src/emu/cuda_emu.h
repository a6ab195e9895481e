/* cuda_emu.h — internals of the emulated libcuda.so.1 (cuda_*.c): the objects behind the
 * driver's handles (contexts, streams, events, modules, arrays, pools, graphs) and the helpers
 * the files share. The API's types and prototypes come from src/gpu/cuda_api.h.
 *
 * Locking: one process-wide mutex (cuda_lock) guards every object list and field below; it is
 * never held while sleeping for emulated GPU time. The shared machine (state.h) has its own. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state.h"

#define EMU_API __attribute__((visibility("default")))

/* The CUDA version the emulated driver is (cuDriverGetVersion): CUDA 13.0's driver branch. */
#define EMU_CUDA_DRIVER_VERSION 13000

/* Thread-local variables of the emulated driver use the initial-exec model: their offsets are
 * fixed when the library is loaded, so an access is a plain %fs-relative load. The default
 * (global-dynamic) model calls __tls_get_addr, and in a statically linked program that dlopens
 * libcuda.so.1 that call binds to the second, never-initialized ld.so that libc.so.6 brings in,
 * whose TLS tables know nothing of the running threads: it crashed there (issue 8, item 10;
 * the same failure and remedy for NSS modules in static programs: htop-dev/htop#503).
 * Initial-exec variables of a dlopened library come from the static TLS surplus glibc reserves
 * for this (1664 bytes shared by all such libraries); ours take 360 (readelf -l: PT_TLS). */
#define EMU_TLS __thread __attribute__((tls_model("initial-exec")))

/* The driver API as cuda_api.h declares it; every CU* handle is a pointer to one of the structs
 * below (the tags are the driver's). Enum values the header names are used by name. */
#include "cuda_api.h"

/* ---- emulator objects ---- */

#define EMU_MAGIC_CTX 0x43545831u
#define EMU_MAGIC_STREAM 0x53545231u
#define EMU_MAGIC_EVENT 0x45564e31u
#define EMU_MAGIC_MODULE 0x4d4f4431u
#define EMU_MAGIC_ARRAY 0x41525231u
#define EMU_MAGIC_POOL 0x504f4f31u
#define EMU_MAGIC_GRAPH 0x47524131u
#define EMU_MAGIC_EXEC 0x47455831u

struct CUgraph_st;

struct CUstream_st {
    uint32_t magic;
    unsigned long long id;
    unsigned flags;
    int priority;
    struct CUctx_st *ctx;
    uint64_t last_end_ns; /* completion time of its last queued work */
    /* stream capture */
    struct CUgraph_st *capture;
    uint64_t capture_id;
    /* events recorded on it and not yet bound to a time (see cuda_exec.c) */
    struct CUevent_st *pending;
    bool work_since_event;    /* the last thing queued was work, not an event record */
    struct CUstream_st *next; /* ctx's list */
};

struct CUctx_st {
    uint32_t magic;
    unsigned long long id;
    int dev;
    unsigned flags;
    bool primary;
    bool active;                    /* false: a primary context not retained (or reset) */
    int refs;                       /* primary: retain count */
    struct cuda_cls *cls;           /* context-local storage (cuda_cls.c) */
    uint64_t charged;               /* context overhead charged to the GPU */
    uint64_t last_end_ns;           /* completion of all work queued in it, any stream or thread */
    struct CUstream_st null_stream; /* the legacy default stream */
    struct CUstream_st *streams;
    size_t limits[10];
    struct CUctx_st *next;
};

struct CUevent_st {
    uint32_t magic;
    unsigned flags;
    bool recorded;
    bool at_start;                   /* bound to the start of the work queued after it */
    int dev;                         /* the GPU of the stream it was recorded on */
    uint64_t time_ns;                /* completion time, on its owner's clock (state.h) */
    struct CUstream_st *pend_stream; /* non-NULL while its time may still move to the start of
                                      * the next work queued on that stream */
    struct CUevent_st *pend_next;
};

struct CUfunc_st {
    uint32_t magic;
    struct CUmod_st *mod;
    char name[128];
    unsigned nparams;
    uint32_t param_size[64];
    uint32_t param_offset[64]; /* in the device-side parameter layout (cuFuncGetParamInfo) */
    bool spin; /* name starts with "spin": runs for its first u64 parameter's cycles */
};
#define EMU_MAGIC_FUNC 0x46554e31u

struct CUmod_st {
    uint32_t magic;
    struct CUctx_st *ctx; /* NULL: loaded by cuLibraryLoadData with no context current */
    size_t nfuncs;
    struct CUfunc_st *funcs;
    size_t nglobals; /* __device__ / __constant__ variables (cuda_module.c) */
    struct ptx_global *globals;
    struct emu_module_global *gmem;
};

struct CUarray_st {
    uint32_t magic;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    size_t row_bytes;
    CUdeviceptr base;
    uint64_t bytes;
};

struct CUmipmappedArray_st {
    uint32_t magic;
    unsigned levels;
    CUdeviceptr base;
    uint64_t bytes;
};

struct CUmemPoolHandle_st {
    uint32_t magic;
    int dev;
    uint64_t release_threshold;
    uint64_t held;     /* bytes of the pool's blocks (handed out and cached) */
    uint64_t reserved; /* what the pool reserves on the GPU (charged): held in whole chunks of
                        * cuda_pool_granularity; RESERVED_MEM_CURRENT */
    uint64_t extra;    /* reserved - held: charged for the chunks beyond the blocks' pages */
    uint64_t in_use;   /* bytes handed out */
    uint64_t held_high, used_high;
    struct emu_pool_block *free_blocks; /* cached, still charged */
    struct CUmemPoolHandle_st *next;
};

struct emu_pool_block {
    CUdeviceptr ptr;
    uint64_t size;
    struct emu_pool_block *next;
};

/* ---- devices (cuda_ctx.c) ---- */
/* A CUDA device of this process: a whole GPU of the machine, or a MIG device (a compute instance
 * of a GPU in MIG mode), as CUDA_VISIBLE_DEVICES made them visible when cuInit ran
 * (docs/emulator-cuda.md, "Devices: CUDA_VISIBLE_DEVICES, MIG and VFIO"). CUdevice values are
 * indexes into this process's list; the machine's GPU index is `gpu`. */
struct cuda_device {
    unsigned gpu;        /* the machine's GPU index */
    uint64_t mig_serial; /* its compute instance (state-mig.h); 0: the whole GPU */
    unsigned gi, ci;     /* the instance's slots in the GPU's MIG table */
    uint32_t sms;        /* its SMs: the compute instance's, or the GPU's */
    uint64_t mem_bytes;  /* memory CUDA may use: the GPU instance's, or the GPU's less reserve */
    char name[EMU_NAME_LEN + 72];
    uint8_t uuid[16];
};
/* Device dev (NULL when not a device of this process). */
const struct cuda_device *cuda_dev(int dev);
/* The machine's GPU index of device dev (0 for an invalid dev: check cuda_dev_valid first). */
unsigned cuda_dev_gpu(int dev);
/* Its SMs (the MIG compute instance's for a MIG device), before any MPS share. */
uint32_t cuda_dev_sms(int dev);
/* true for a MIG device. */
bool cuda_dev_mig(int dev);

/* ---- shared helpers (cuda_ctx.c) ---- */
extern pthread_mutex_t cuda_lock;
extern struct emu_state *cuda_state;
extern uint64_t cuda_kernel_ns; /* ACCEL_EMU_KERNEL_US */
/* ACCEL_EMU_POOL_GRANULARITY: the chunk a memory pool reserves device memory in (a multiple of
 * 2 MiB; 2 MiB by default) */
extern uint64_t cuda_pool_granularity;
/* True when the program is statically linked (its program headers have no PT_INTERP): pthread
 * keys of our libc.so.6 then share the thread's key slots with the program's own libc, so the
 * emulator registers no key destructors there. */
bool cuda_static_program(void);

CUresult cuda_check_init(void);
/* The calling thread's current context, or NULL. */
struct CUctx_st *cuda_current(void);
/* Current context or an error (NOT_INITIALIZED / INVALID_CONTEXT). */
CUresult cuda_need_ctx(struct CUctx_st **ret);
bool cuda_dev_valid(CUdevice dev);
/* dev is marked lost (`accel-emu lose`): calls needing it fail CUDA_ERROR_DEVICE_UNAVAILABLE. */
bool cuda_dev_lost(int dev);

/* ---- memory (cuda_mem.c) ---- */
/* Allocates device memory on dev, charged. kind: 0 device, 1 managed. */
CUresult cuda_dev_alloc(int dev, uint64_t bytes, int kind, struct CUmemPoolHandle_st *pool,
                        CUdeviceptr *ret);
CUresult cuda_dev_free(CUdeviceptr p);
/* cuda_mps.c, cuda_lock held: counts bytes of device memory against this process's MPS pinned
 * memory limit on dev; false (nothing counted) when they would pass it. */
bool cuda_mps_charge_locked(int dev, uint64_t bytes);
void cuda_mps_uncharge_locked(int dev, uint64_t bytes);
/* cuda_mps.c: the SMs of a GPU with `total` this process may use (its MPS active thread
 * percentage; all of them outside MPS), with cuda_lock held (_locked) or not; and, cuda_lock
 * held, the pid whose context its work runs in on the GPU's timeline (its MPS server, else the
 * daemon; 0 outside MPS). */
uint32_t cuda_mps_sms_locked(uint32_t total);
uint32_t cuda_mps_sms(uint32_t total);
int32_t cuda_mps_group_locked(void);
/* cuda_mps.c: the MPS server's fault state for this process on dev: a hit client's calls
 * (cuda_mps_fault, no lock needed) and a new context (cuda_lock held) fail as documented. */
CUresult cuda_mps_fault(int dev);
CUresult cuda_mps_new_client_locked(int dev);
/* Device or host pointer lookup: returns true when [p, p+len) is memory the emulator knows
 * (device allocation, host allocation, VMM mapping, IPC mapping). */
bool cuda_ptr_valid(CUdeviceptr p, size_t len);
void cuda_pools_release_to_threshold(int dev);
/* A launch's 8-byte argument values: those pointing into managed memory bring it to the GPU. */
void cuda_mem_touch_args(const uint64_t *vals, size_t n);
/* Frees everything made in ctx that a context owns (cuCtxDestroy, primary release/reset). */
void cuda_mem_ctx_destroy(struct CUctx_st *ctx);
void cuda_mem_process_exit(void);
/* Graph memory (cuda_mem.c, "graph memory"): an allocation node's block of addresses, backed
 * by memory (charged) from the launch or upload that maps it until cuDeviceGraphMemTrim. */
struct cuda_gm_block;
/* A new block of bytes on dev, its addresses reserved, held once (by its node). */
CUresult cuda_gm_block_new(int dev, uint64_t bytes, struct cuda_gm_block **ret);
CUdeviceptr cuda_gm_block_va(const struct cuda_gm_block *b);
uint64_t cuda_gm_block_bytes(const struct cuda_gm_block *b);
int cuda_gm_block_dev(const struct cuda_gm_block *b);
/* The block whose allocation starts at va, or NULL. */
struct cuda_gm_block *cuda_gm_block_find(CUdeviceptr va);
void cuda_gm_block_hold(struct cuda_gm_block *b);
/* Drops a hold; a block held by no node, unmapped and not live goes. */
void cuda_gm_block_drop(struct cuda_gm_block *b);
/* Maps every block of the list not mapped yet, or none (CUDA_ERROR_OUT_OF_MEMORY). */
CUresult cuda_gm_map(struct cuda_gm_block *const *blocks, size_t n);
/* A launch reached the block's allocation (live) or its free node (not live). */
void cuda_gm_set_live(struct cuda_gm_block *b, bool live);

/* ---- modules and libraries (cuda_module.c) ---- */
/* The device a function's launches and attributes refer to: its module's context, else the
 * current one, else 0. */
int cuda_func_dev(const struct CUfunc_st *f);

/* ---- execution (cuda_exec.c) ---- */
/* Resolves a stream handle (NULL, LEGACY, PER_THREAD, or an object) for the current ctx;
 * per_thread: NULL means the per-thread default stream (the _ptsz/_ptds entry points). */
CUresult cuda_stream_resolve(CUstream h, bool per_thread, struct CUstream_st **ret);
/* Waits (sleeping) for every stream of ctx; syncs pools to their release threshold. */
CUresult cuda_ctx_sync(struct CUctx_st *ctx);
/* Waits for the legacy stream order before a synchronous copy. */
CUresult cuda_sync_for_copy(bool per_thread);
void cuda_sleep_until(uint64_t t_ns);
/* Times of the timeline (stream and event completions) are on this process's clock of that
 * GPU (emu_state_submit): the GPU time it stands for, and waiting until then. */
uint64_t cuda_wall_of(int dev, uint64_t t_ns, bool at_start);
void cuda_wait_for(int dev, uint64_t t_ns, bool at_start);
void cuda_stream_list_free(struct CUctx_st *ctx);
/* Adds a graph memory node to a graph being captured: an allocation (alloc true) or a free
 * of the block's allocation. The node holds the block. */
CUresult cuda_graph_add_gm(struct CUgraph_st *g, struct cuda_gm_block *b, bool alloc);
/* Adds a copy (src non-NULL: n bytes) or a memset (src NULL: n elements of elem bytes set to
 * value) node to a graph being captured; it runs when the graph is launched. */
CUresult cuda_graph_add_mem(struct CUgraph_st *g, void *dst, const void *src, size_t n,
                            unsigned value, size_t elem);
