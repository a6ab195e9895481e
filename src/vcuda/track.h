/* track.h — this process's live device-memory objects: what each allocation,
 * array, VMM handle and context was charged, so frees give back exactly that.
 *
 * Process-local (plain heap, not shared): sharded open-addressing hash tables,
 * one mutex per shard held only around a few loads and stores (never across a
 * driver call). After fork the child starts empty (vc_track_reset): a child
 * does not own its parent's allocations. Thread-safe. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

enum vc_track_kind {
    VC_TRACK_DPTR = 1,    /* device pointer: cuMemAlloc*, managed, async, from pool */
    VC_TRACK_VMM = 2,     /* CUmemGenericAllocationHandle from cuMemCreate or an import */
    VC_TRACK_ARRAY = 3,   /* CUarray */
    VC_TRACK_MIPMAP = 4,  /* CUmipmappedArray */
    VC_TRACK_CTX = 5,     /* a context's own memory, keyed by CUcontext */
    VC_TRACK_VMM_MAP = 6, /* a cuMemMap'ed range, keyed by its address; link = the handle */
};

struct vc_track_entry {
    uint64_t key;
    uint64_t size;
    uint64_t ctx;   /* owning context (its destruction frees the object), 0 = none */
    uint64_t pool;  /* memory pool of a stream-ordered allocation, 0 = none */
    uint64_t link;  /* VMM: references holding the memory (handle + mappings);
                     * VMM_MAP: the handle mapped */
    uint32_t kind;  /* enum vc_track_kind; 0 = empty slot */
    uint32_t dev;   /* region device index */
    uint32_t flags; /* VMM: VC_TRACK_VMM_* */
};

/* A VMM handle that cuMemImportFromShareableHandle made: its size is what its mappings reach
 * (the driver does not tell an import's size), charged as they reach it. */
#define VC_TRACK_VMM_IMPORTED 0x1u
/* Exported to a shareable handle: one reference that is never given back (the driver keeps
 * the memory while any copy of the shareable handle lives, and those copies are not seen). */
#define VC_TRACK_VMM_EXPORTED 0x2u

/* Records an object. -ENOMEM when the table cannot grow, -EEXIST when the key
 * is already there (the old entry is kept). */
int vc_track_put(const struct vc_track_entry *e);
/* Removes (kind, key) and returns its entry. -ENOENT when unknown. */
int vc_track_take(uint32_t kind, uint64_t key, struct vc_track_entry *ret);
/* Removes every entry whose ctx is ctx and calls fn for each (outside the
 * shard lock). Returns how many were removed. */
int vc_track_take_ctx(uint64_t ctx, void (*fn)(const struct vc_track_entry *e, void *u), void *u);
/* Forgets everything (after fork in the child; the memory is dropped). */
void vc_track_reset(void);
/* Live entries (for tests). */
uint64_t vc_track_count(void);
