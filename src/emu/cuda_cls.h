/* cuda_cls.h — context-local storage: values NVIDIA's runtime hangs on a driver context, by
 * key, with a destructor that runs when the context is destroyed or reset. The runtime reaches
 * it through an export table (cuda_export.c); it asks for its per-context state before nearly
 * every API call, so cuda_cls_get is O(1) and takes one uncontended lock.
 *
 * Threads: any. A destructor runs on the thread destroying or resetting the context, with no
 * emulator lock held (it may call back into the driver). */
#pragma once

#include "cuda_emu.h"

/* The destructor the runtime registers: (context, key, value). */
typedef void (*cuda_cls_dtor)(CUcontext ctx, void *key, void *value);

/* Sets key's value in ctx (NULL: the current context), replacing an existing one (its
 * destructor does not run). INVALID_CONTEXT without a context, OUT_OF_MEMORY. */
CUresult cuda_cls_put(CUcontext ctx, void *key, void *value, cuda_cls_dtor dtor);
/* Forgets key in ctx without running its destructor; NOT_FOUND-style INVALID_HANDLE when
 * absent (the runtime does not check). */
CUresult cuda_cls_delete(CUcontext ctx, void *key);
/* key's value in ctx, or CUDA_ERROR_INVALID_HANDLE (400) when absent — the answer NVIDIA's
 * driver gives and the runtime expects before it creates its state. */
CUresult cuda_cls_get(void **ret_value, CUcontext ctx, void *key);
/* Runs every destructor of ctx and empties its storage (context destroy, primary reset or
 * last release). Called without cuda_lock held. */
void cuda_cls_ctx_destroy(struct CUctx_st *ctx);
