/* cuda_cls.c — context-local storage (see cuda_cls.h): per context, an open-addressing hash
 * table keyed by the caller's key pointer, grown at 3/4 load, with tombstones for deletes. */
#include "cuda_cls.h"

#include <stdlib.h>

#include "cuda_export.h"

struct cls_slot {
    void *key; /* NULL: empty; TOMB: deleted */
    void *value;
    cuda_cls_dtor dtor;
};

struct cuda_cls {
    size_t cap;  /* power of two */
    size_t used; /* live + tombstones */
    size_t live;
    struct cls_slot *slots;
};

#define TOMB ((void *)1)

static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t hash(const void *key, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

static struct CUctx_st *resolve(CUcontext ctx)
{
    struct CUctx_st *c = ctx ? ctx : cuda_current();
    return c && c->magic == EMU_MAGIC_CTX ? c : NULL;
}

static struct cls_slot *find(struct cuda_cls *t, const void *key)
{
    if (!t)
        return NULL;
    for (size_t i = hash(key, t->cap), n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
        if (!t->slots[i].key)
            return NULL;
        if (t->slots[i].key == key)
            return &t->slots[i];
    }
    return NULL;
}

static int grow(struct cuda_cls **pt)
{
    struct cuda_cls *t = *pt;
    size_t cap = t ? (t->live * 2 >= t->cap ? t->cap * 2 : t->cap) : 16;
    struct cls_slot *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -1;
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t) {
            free(slots);
            return -1;
        }
        *pt = t;
    }
    for (size_t i = 0; t->slots && i < t->cap; i++) {
        struct cls_slot *o = &t->slots[i];
        if (!o->key || o->key == TOMB)
            continue;
        size_t j = hash(o->key, cap);
        while (slots[j].key)
            j = (j + 1) & (cap - 1);
        slots[j] = *o;
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    t->used = t->live;
    return 0;
}

CUresult cuda_cls_put(CUcontext ctx, void *key, void *value, cuda_cls_dtor dtor)
{
    if (!key || key == TOMB)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cls_lock);
    struct CUctx_st *c = resolve(ctx);
    if (!c) {
        pthread_mutex_unlock(&cls_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct cls_slot *s = find(c->cls, key);
    if (!s) {
        if ((!c->cls || (c->cls->used + 1) * 4 > c->cls->cap * 3) && grow(&c->cls) < 0) {
            pthread_mutex_unlock(&cls_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        struct cuda_cls *t = c->cls;
        size_t i = hash(key, t->cap);
        while (t->slots[i].key && t->slots[i].key != TOMB)
            i = (i + 1) & (t->cap - 1);
        if (!t->slots[i].key)
            t->used++;
        s = &t->slots[i];
        s->key = key;
        t->live++;
    }
    s->value = value;
    s->dtor = dtor;
    pthread_mutex_unlock(&cls_lock);
    return CUDA_SUCCESS;
}

CUresult cuda_cls_delete(CUcontext ctx, void *key)
{
    pthread_mutex_lock(&cls_lock);
    struct CUctx_st *c = resolve(ctx);
    struct cls_slot *s = c && key && key != TOMB ? find(c->cls, key) : NULL;
    CUresult r = !c ? CUDA_ERROR_INVALID_CONTEXT : s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (s) {
        s->key = TOMB;
        s->value = NULL;
        s->dtor = NULL;
        c->cls->live--;
    }
    pthread_mutex_unlock(&cls_lock);
    return r;
}

CUresult cuda_cls_get(void **ret_value, CUcontext ctx, void *key)
{
    if (!ret_value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cls_lock);
    struct CUctx_st *c = resolve(ctx);
    struct cls_slot *s = c && key && key != TOMB ? find(c->cls, key) : NULL;
    CUresult r = !c ? CUDA_ERROR_INVALID_CONTEXT : s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (s)
        *ret_value = s->value;
    pthread_mutex_unlock(&cls_lock);
    return r;
}

void cuda_cls_ctx_destroy(struct CUctx_st *ctx)
{
    pthread_mutex_lock(&cls_lock);
    struct cuda_cls *t = ctx->cls;
    ctx->cls = NULL;
    pthread_mutex_unlock(&cls_lock);
    if (!t)
        return;
    for (size_t i = 0; i < t->cap; i++) {
        struct cls_slot *s = &t->slots[i];
        if (s->key && s->key != TOMB && s->dtor)
            s->dtor(ctx, s->key, s->value);
    }
    free(t->slots);
    free(t);
}

/* ---- the export table (c693336e-…, no size header): put, delete, get ---- */

static CUresult cls_slot_put(CUcontext ctx, void *key, void *value, cuda_cls_dtor dtor)
{
    cuda_export_seen(CUDA_EXPORT_CLS, 0);
    return cuda_cls_put(ctx, key, value, dtor);
}

static CUresult cls_slot_delete(CUcontext ctx, void *key)
{
    cuda_export_seen(CUDA_EXPORT_CLS, 1);
    return cuda_cls_delete(ctx, key);
}

static CUresult cls_slot_get(void **ret_value, CUcontext ctx, void *key)
{
    cuda_export_seen(CUDA_EXPORT_CLS, 2);
    return cuda_cls_get(ret_value, ctx, key);
}

const void *const cuda_export_cls_table[] = {
    (const void *)cls_slot_put,
    (const void *)cls_slot_delete,
    (const void *)cls_slot_get,
};
