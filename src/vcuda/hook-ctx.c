/* hook-ctx.c — a context's own device memory: charged (config
 * context_memory) when a context is created or a device's primary context is
 * first retained, released when it is destroyed, with everything allocated in
 * it (the driver frees those with the context). */
#include "vcuda.h"

#include "track.h"

#include <pthread.h>
#include <string.h>

#define MAX_ORDINALS 64

/* Our own view of each primary context's retain count: the first retain
 * charges, the last release (or a reset) gives back. */
static pthread_mutex_t prim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int refs;
    bool charged;
    unsigned index;
    CUcontext ctx;
} prim[MAX_ORDINALS];

void vc_ctx_atfork_child(void)
{
    pthread_mutex_init(&prim_lock, NULL);
    memset(prim, 0, sizeof(prim));
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxRetain);
    unsigned index;
    if (dev < 0 || dev >= MAX_ORDINALS || vc_device_index(dev, &index) < 0)
        return vc_real.cuDevicePrimaryCtxRetain(pctx, dev);
    uint64_t bytes = vc.cfg.context_memory;
    bool charged_now = false;
    /* The first retain charges the context's memory. The reservation is made
     * outside the lock (it may refresh pools, a driver call); a racer that
     * charged first makes us give ours back and count a reference. */
    for (;;) {
        pthread_mutex_lock(&prim_lock);
        if (prim[dev].charged || !bytes) {
            prim[dev].refs++;
            pthread_mutex_unlock(&prim_lock);
            break;
        }
        pthread_mutex_unlock(&prim_lock);
        if (vc_mem_reserve(index, bytes) < 0)
            return vc_mem_oom(index, bytes, "cuDevicePrimaryCtxRetain (context memory)");
        pthread_mutex_lock(&prim_lock);
        if (!prim[dev].charged) {
            prim[dev].charged = true;
            prim[dev].index = index;
            prim[dev].refs++;
            charged_now = true;
            pthread_mutex_unlock(&prim_lock);
            break;
        }
        pthread_mutex_unlock(&prim_lock);
        vc_mem_release(index, bytes);
    }

    CUresult r = vc_real.cuDevicePrimaryCtxRetain(pctx, dev);

    pthread_mutex_lock(&prim_lock);
    if (r != CUDA_SUCCESS) {
        prim[dev].refs--;
        if (charged_now && prim[dev].refs == 0) {
            vc_mem_release(index, bytes);
            prim[dev].charged = false;
        }
    } else {
        prim[dev].ctx = *pctx;
    }
    pthread_mutex_unlock(&prim_lock);
    return r;
}

static void primary_released(CUdevice dev, bool reset)
{
    if (dev < 0 || dev >= MAX_ORDINALS)
        return;
    CUcontext gone = NULL;
    pthread_mutex_lock(&prim_lock);
    if (!reset && prim[dev].refs > 0)
        prim[dev].refs--;
    if (prim[dev].refs == 0 || reset) {
        gone = prim[dev].ctx;
        /* After a reset a still-retained primary context comes back on next
         * use, so its own memory stays charged while references remain. */
        if (prim[dev].refs == 0 && prim[dev].charged) {
            vc_mem_release(prim[dev].index, vc.cfg.context_memory);
            prim[dev].charged = false;
        }
    }
    pthread_mutex_unlock(&prim_lock);
    if (gone)
        vc_ctx_gone(gone);
}

/* After the driver released (reset = false) or reset a primary context: on
 * success, give back what it held. Returns the driver's result. */
static CUresult primary_done(CUresult r, CUdevice dev, bool reset)
{
    if (r == CUDA_SUCCESS)
        primary_released(dev, reset);
    return r;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxRelease_v2);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxRelease_v2(dev), dev, false);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxRelease);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxRelease(dev), dev, false);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxReset_v2);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxReset_v2(dev), dev, true);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    VC_PREAMBLE(cuDevicePrimaryCtxReset);
    vc_launch_ctx_closing(NULL);
    return primary_done(vc_real.cuDevicePrimaryCtxReset(dev), dev, true);
}

/* Context creation: reserve before, track the context (keyed by itself, so
 * vc_ctx_gone releases it along with its allocations). */
static int ctx_begin(CUdevice dev, unsigned *ret_index)
{
    if (vc_device_index(dev, ret_index) < 0)
        return 1; /* not ours to account: pass through */
    if (vc.cfg.context_memory && vc_mem_reserve(*ret_index, vc.cfg.context_memory) < 0)
        return -1;
    return 0;
}

static CUresult ctx_end(CUresult r, unsigned index, CUcontext *pctx)
{
    if (r != CUDA_SUCCESS) {
        vc_mem_release(index, vc.cfg.context_memory);
        return r;
    }
    struct vc_track_entry e = {
        .key = (uint64_t)(uintptr_t)*pctx,
        .size = vc.cfg.context_memory,
        .ctx = (uint64_t)(uintptr_t)*pctx,
        .kind = VC_TRACK_CTX,
        .dev = index,
    };
    if (vc.cfg.context_memory)
        vc_track_put(&e);
    return r;
}

#define CTX_CREATE(fn, dev, ...)                                                                   \
    do {                                                                                           \
        unsigned index;                                                                            \
        int b = ctx_begin(dev, &index);                                                            \
        if (b > 0)                                                                                 \
            return vc_real.fn(__VA_ARGS__);                                                        \
        if (b < 0)                                                                                 \
            return vc_mem_oom(index, vc.cfg.context_memory, #fn " (context memory)");              \
        return ctx_end(vc_real.fn(__VA_ARGS__), index, pctx);                                      \
    } while (0)

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate_v2);
    CTX_CREATE(cuCtxCreate_v2, dev, pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate);
    CTX_CREATE(cuCtxCreate, dev, pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate_v3);
    CTX_CREATE(cuCtxCreate_v3, dev, pctx, paramsArray, numParams, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    VC_PREAMBLE(cuCtxCreate_v4);
    CTX_CREATE(cuCtxCreate_v4, dev, pctx, ctxCreateParams, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    VC_PREAMBLE(cuCtxDestroy_v2);
    vc_launch_ctx_closing(ctx);
    CUresult r = vc_real.cuCtxDestroy_v2(ctx);
    if (r == CUDA_SUCCESS && ctx)
        vc_ctx_gone(ctx);
    return r;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    VC_PREAMBLE(cuCtxDestroy);
    vc_launch_ctx_closing(ctx);
    CUresult r = vc_real.cuCtxDestroy(ctx);
    if (r == CUDA_SUCCESS && ctx)
        vc_ctx_gone(ctx);
    return r;
}
