/* cuda_ctx.c — emulated libcuda.so.1: initialization, devices and their attributes, primary
 * and created contexts (with the context memory overhead charged to the GPU), error strings,
 * and process-exit release of this process's charges. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cuda_emu.h"

pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
struct emu_state *cuda_state;
uint64_t cuda_kernel_ns = 10000;

static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static bool init_done;
static uint64_t ctx_overhead = 32ull << 20;
static struct CUctx_st *primary[EMU_MAX_GPUS];
static struct CUctx_st *contexts; /* created with cuCtxCreate */

#define CTX_STACK 32
static __thread struct CUctx_st *ctx_stack[CTX_STACK];
static __thread int ctx_depth;

static uint64_t env_u64(const char *name, uint64_t def, uint64_t mul)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end)
        return def;
    return x * mul;
}

static uint64_t env_size(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno)
        return def;
    uint64_t mul = 1;
    if (!strcasecmp(end, "Ki"))
        mul = 1ull << 10;
    else if (!strcasecmp(end, "Mi"))
        mul = 1ull << 20;
    else if (!strcasecmp(end, "Gi"))
        mul = 1ull << 30;
    else if (*end)
        return def;
    return x * mul;
}

EMU_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    if (!init_done) {
        init_done = true;
        int r = emu_state_open_env(&cuda_state);
        if (r < 0) {
            const char *p = getenv("ACCEL_EMU_STATE");
            fprintf(stderr,
                    "accel-emu libcuda: no emulated GPUs (%s%s%s): run `accel-emu init` and set "
                    "ACCEL_EMU_STATE to its state file\n",
                    p && *p ? p : "ACCEL_EMU_STATE is not set", p && *p ? ": " : "",
                    p && *p ? strerror(-r) : "");
            init_result = CUDA_ERROR_NO_DEVICE;
        } else {
            cuda_kernel_ns = env_u64("ACCEL_EMU_KERNEL_US", 10, 1000);
            ctx_overhead = env_size("ACCEL_EMU_CTX_OVERHEAD", 32ull << 20);
            init_result = CUDA_SUCCESS;
        }
    }
    CUresult r = init_result;
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

CUresult cuda_check_init(void)
{
    return __atomic_load_n(&init_result, __ATOMIC_ACQUIRE);
}

bool cuda_dev_valid(CUdevice dev)
{
    return cuda_state && dev >= 0 && (unsigned)dev < emu_state_gpu_count(cuda_state);
}

#define NEED_INIT()                                                                                \
    do {                                                                                           \
        CUresult r_ = cuda_check_init();                                                           \
        if (r_)                                                                                    \
            return r_;                                                                             \
    } while (0)

#define NEED_DEV(d)                                                                                \
    do {                                                                                           \
        NEED_INIT();                                                                               \
        if (!cuda_dev_valid(d))                                                                    \
            return CUDA_ERROR_INVALID_DEVICE;                                                      \
    } while (0)

static struct emu_gpu *gpu_of(CUdevice d)
{
    return emu_state_gpu(cuda_state, (unsigned)d);
}

/* Process exit: give back what this process holds, so the memory "comes back" at once
 * (a killed process is reclaimed by whoever notices instead). */
__attribute__((destructor)) static void cuda_fini(void)
{
    if (cuda_state)
        emu_state_proc_release(cuda_state);
}

EMU_API CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    *count = (int)emu_state_gpu_count(cuda_state);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(ordinal);
    *dev = ordinal;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    snprintf(name, (size_t)len, "%s", gpu_of(dev)->name);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    memcpy(uuid->bytes, gpu_of(dev)->uuid_bytes, 16);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}

EMU_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    *bytes = gpu_of(dev)->memory_total;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    *major = (int)gpu_of(dev)->cc_major;
    *minor = (int)gpu_of(dev)->cc_minor;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetPCIBusId(char *busid, int len, CUdevice dev)
{
    if (!busid || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    /* the driver's form has a 4-digit domain: "0000:18:00.0" */
    const struct emu_gpu *g = gpu_of(dev);
    snprintf(busid, (size_t)len, "%04x:%02x:%02x.0", g->pci_domain, g->pci_bus, g->pci_device);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *busid)
{
    if (!dev || !busid)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    for (unsigned i = 0; i < emu_state_gpu_count(cuda_state); i++) {
        char b[32];
        cuDeviceGetPCIBusId(b, sizeof(b), (CUdevice)i);
        const char *g = gpu_of((CUdevice)i)->pci_bus_id;
        if (!strcasecmp(b, busid) || !strcasecmp(g, busid)) {
            *dev = (CUdevice)i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

static int attribute(const struct emu_gpu *g, int a, int *ret)
{
    int v;
    switch (a) {
    case 1: v = 1024; break;                                  /* max threads per block */
    case 2: case 3: v = 1024; break;                          /* block dim x, y */
    case 4: v = 64; break;                                    /* block dim z */
    case 5: v = 2147483647; break;                            /* grid dim x */
    case 6: case 7: v = 65535; break;
    case 8: v = 48 * 1024; break;                             /* shared memory per block */
    case 9: v = 64 * 1024; break;                             /* constant memory */
    case 10: v = 32; break;                                   /* warp size */
    case 11: v = 2147483647; break;                           /* max pitch */
    case 12: v = 65536; break;                                /* registers per block */
    case 13: v = (int)g->sm_clock_mhz * 1000; break;          /* clock rate, kHz */
    case 14: v = 512; break;                                  /* texture alignment */
    case 15: v = 1; break;                                    /* gpu overlap */
    case 16: v = (int)g->sm_count; break;
    case 17: v = 0; break;                                    /* kernel exec timeout */
    case 18: v = 0; break;                                    /* integrated */
    case 19: v = 1; break;                                    /* can map host memory */
    case 20: v = (int)g->compute_mode; break;
    case 30: v = 512; break;                                  /* surface alignment */
    case 31: v = 1; break;                                    /* concurrent kernels */
    case 32: v = 1; break;                                    /* ECC */
    case 33: v = (int)g->pci_bus; break;
    case 34: v = (int)g->pci_device; break;
    case 35: v = 0; break;                                    /* TCC */
    case 36: v = (int)g->mem_clock_mhz * 1000; break;         /* memory clock, kHz */
    case 37: v = (int)g->mem_bus_bits; break;
    case 38: v = 50 * 1024 * 1024; break;                     /* L2 */
    case 39: v = 2048; break;                                 /* threads per SM */
    case 40: v = 2; break;                                    /* async engines */
    case 41: v = 1; break;                                    /* unified addressing */
    case 50: v = (int)g->pci_domain; break;
    case 51: v = 32; break;                                   /* texture pitch alignment */
    case 75: v = (int)g->cc_major; break;
    case 76: v = (int)g->cc_minor; break;
    case 78: v = 1; break;                                    /* stream priorities */
    case 79: case 80: v = 1; break;                           /* L1 caches */
    case 81: v = 228 * 1024; break;                           /* shared memory per SM */
    case 82: v = 65536; break;                                /* registers per SM */
    case 83: v = 1; break;                                    /* managed memory */
    case 84: v = 0; break;
    case 85: v = (int)g->index; break;
    case 86: v = 0; break;
    case 87: v = 2; break;
    case 88: v = 0; break;                                    /* pageable memory access */
    case 89: v = 1; break;                                    /* concurrent managed access */
    case 90: v = 1; break;
    case 91: v = 0; break;
    case 95: v = 1; break;                                    /* cooperative launch */
    case 96: v = 0; break;
    case 97: v = 227 * 1024; break;                           /* shared memory optin */
    case 98: v = 0; break;
    case 99: v = 1; break;                                    /* host register */
    case 100: v = 0; break;
    case 101: v = 0; break;
    case 102: v = 1; break;                                   /* virtual memory management */
    case 103: v = 1; break;                                   /* POSIX fd handles */
    case 104: case 105: v = 0; break;
    case 106: v = 32; break;                                  /* blocks per SM */
    case 107: v = 0; break;
    case 108: v = 0; break;
    case 109: v = 0; break;
    case 110: v = 0; break;
    case 111: v = 1024; break;
    case 112: v = 0; break;
    case 113: v = 1; break;
    case 114: v = 0; break;
    case 115: v = 1; break;                                   /* memory pools */
    case 116: v = 0; break;
    case 119: v = 1; break;                                   /* mempool handle types: fd */
    case 120: v = g->cc_major >= 9; break;                    /* cluster launch */
    case 124: v = 0; break;
    case 125: v = 1; break;
    case 130: v = 0; break;
    case 131: v = -1; break;
    case 133: v = 0; break;
    case 134: v = g->numa_node; break;                        /* host NUMA id */
    default:
        if (a >= 21 && a <= 74) {
            v = 65536; /* texture and surface limits: generous, not modelled */
            break;
        }
        if (a > 0 && a < 150) {
            v = 0;
            break;
        }
        return -1;
    }
    *ret = v;
    return 0;
}

EMU_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    return attribute(gpu_of(dev), (int)attrib, pi) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    if (!cuda_dev_valid(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    /* peers on one NUMA node or linked by NVLink */
    const struct emu_gpu *g = gpu_of(dev);
    *can = dev != peer && (g->nvlinks[peer] > 0 || g->topo[peer] < EMU_TOPO_SYSTEM);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetP2PAttribute(int *value, int attrib, CUdevice src, CUdevice dst)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(src);
    if (!cuda_dev_valid(dst) || src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    int can;
    cuDeviceCanAccessPeer(&can, src, dst);
    switch (attrib) {
    case 1: /* performance rank */
        *value = gpu_of(src)->nvlinks[dst] ? 0 : 1;
        break;
    case 2: /* access supported */
    case 3: /* native atomics */
    case 4: /* cuda array access */
        *value = can;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

struct CUctx_st *cuda_current(void)
{
    return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

CUresult cuda_need_ctx(struct CUctx_st **ret)
{
    CUresult r = cuda_check_init();
    if (r)
        return r;
    struct CUctx_st *c = cuda_current();
    if (!c || c->magic != EMU_MAGIC_CTX)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ret = c;
    return CUDA_SUCCESS;
}

static CUresult ctx_new(CUdevice dev, unsigned flags, bool prim, struct CUctx_st **ret)
{
    struct CUctx_st *c = calloc(1, sizeof(*c));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (ctx_overhead && emu_state_mem_charge(cuda_state, (unsigned)dev, ctx_overhead) < 0) {
        free(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->magic = EMU_MAGIC_CTX;
    c->dev = dev;
    c->flags = flags;
    c->primary = prim;
    c->charged = ctx_overhead;
    c->null_stream.magic = EMU_MAGIC_STREAM;
    c->null_stream.ctx = c;
    c->limits[0] = 1024;            /* stack size */
    c->limits[1] = 1 << 20;         /* printf fifo */
    c->limits[2] = 8 << 20;         /* malloc heap */
    *ret = c;
    return CUDA_SUCCESS;
}

/* Drops every reference any thread's stack of this thread has; other threads' stacks are
 * theirs (as with the real driver, using a destroyed context there is an error). */
static void ctx_unstack(struct CUctx_st *c)
{
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == c)
            ctx_stack[i] = NULL;
    while (ctx_depth && !ctx_stack[ctx_depth - 1])
        ctx_depth--;
}

static void ctx_free(struct CUctx_st *c)
{
    cuda_ctx_sync(c);
    if (c->charged)
        emu_state_mem_uncharge(cuda_state, (unsigned)c->dev, c->charged);
    cuda_stream_list_free(c);
    c->magic = 0;
    free(c);
}

EMU_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    CUresult r = CUDA_SUCCESS;
    if (!primary[dev])
        r = ctx_new(dev, 0, true, &primary[dev]);
    if (!r) {
        primary[dev]->refs++;
        *pctx = primary[dev];
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

EMU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    struct CUctx_st *c = primary[dev];
    if (!c || c->refs <= 0) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->refs == 0) {
        primary[dev] = NULL;
        ctx_unstack(c);
        pthread_mutex_unlock(&cuda_lock);
        ctx_free(c);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

EMU_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    struct CUctx_st *c = primary[dev];
    primary[dev] = NULL;
    if (c)
        ctx_unstack(c);
    pthread_mutex_unlock(&cuda_lock);
    if (c)
        ctx_free(c);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

EMU_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    *active = primary[dev] != NULL;
    *flags = primary[dev] ? primary[dev]->flags : 0;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    NEED_DEV(dev);
    if (flags & ~0xffu)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    if (primary[dev])
        primary[dev]->flags = flags;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!pctx || (flags & ~0xffu))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    struct CUctx_st *c;
    CUresult r = ctx_new(dev, flags, false, &c);
    if (r)
        return r;
    pthread_mutex_lock(&cuda_lock);
    c->next = contexts;
    contexts = c;
    pthread_mutex_unlock(&cuda_lock);
    if (ctx_depth == CTX_STACK) {
        *pctx = c;
        return CUDA_SUCCESS;
    }
    ctx_stack[ctx_depth++] = c; /* a created context becomes current */
    *pctx = c;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *affinity, int naffinity,
                                unsigned int flags, CUdevice dev)
{
    if (naffinity < 0 || (naffinity > 0 && !affinity))
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED_INIT();
    pthread_mutex_lock(&cuda_lock);
    struct CUctx_st **pp = &contexts;
    while (*pp && *pp != ctx)
        pp = &(*pp)->next;
    if (!*pp) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_CONTEXT; /* unknown, or a primary context */
    }
    *pp = ctx->next;
    ctx_unstack(ctx);
    pthread_mutex_unlock(&cuda_lock);
    ctx_free(ctx);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

static bool ctx_known(struct CUctx_st *c)
{
    return c && c->magic == EMU_MAGIC_CTX;
}

EMU_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    NEED_INIT();
    if (!ctx_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx) {
        if (ctx_depth)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth)
        ctx_stack[ctx_depth - 1] = ctx;
    else
        ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    *pctx = cuda_current();
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetDevice(CUdevice *dev)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    *dev = c->dev;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (!ctx)
        ctx = cuda_current();
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSynchronize(void)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    return cuda_ctx_sync(c);
}

EMU_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    if ((int)limit < 0 || (int)limit >= 10)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    c->limits[limit] = value;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    if ((int)limit < 0 || (int)limit >= 10)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *value = c->limits[limit];
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    NEED_INIT();
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetCacheConfig(int *config)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    *config = 0;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetCacheConfig(int config)
{
    return config >= 0 && config <= 3 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    if (!ctx_known(peer) || flags)
        return CUDA_ERROR_INVALID_VALUE;
    int can = 0;
    cuDeviceCanAccessPeer(&can, c->dev, peer->dev);
    return can ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

EMU_API CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    return ctx_known(peer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- memory info (charges of every process on this GPU) ---- */

EMU_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    uint64_t used = 0, tot = 0;
    emu_state_mem_info(cuda_state, (unsigned)c->dev, &used, &tot);
    if (free_bytes)
        *free_bytes = used < tot ? tot - used : 0;
    if (total)
        *total = tot;
    return CUDA_SUCCESS;
}

/* ---- errors ---- */

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not initiated in this stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

EMU_API CUresult cuGetErrorName(CUresult e, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == (int)e) {
            *str = errors[i].name;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuGetErrorString(CUresult e, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == (int)e) {
            *str = errors[i].text;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* NVIDIA's runtime asks for undocumented tables here; the emulator has none. */
EMU_API CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    if (table)
        *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
