/* cuda-visible.h — CUDA_VISIBLE_DEVICES, read the way CUDA documents it (CUDA C++ Programming
 * Guide, "CUDA Environment Variables"): "A comma-separated sequence of GPU identifiers", each an
 * integer index, a GPU UUID ("GPU-8932f937-..."; "abbreviated forms are allowed: simply specify
 * enough digits from the beginning of the GPU UUID to uniquely identify that GPU"), or a MIG device
 * ("MIG-<UUID>" as current drivers print it, or the older "MIG-GPU-<UUID>/<GPU instance
 * ID>/<compute instance ID>"); "If one of the indices is invalid, only the devices whose index
 * precedes the invalid index are visible". This file only splits and classifies the text (pure:
 * a fuzz target's entry, tests/fuzz/fuzz-emu-args.c); the emulated libcuda resolves the entries
 * against the machine (cuda_ctx.c). */
#pragma once

#include <stddef.h>

enum emu_visible_kind {
    EMU_VISIBLE_INDEX,      /* index */
    EMU_VISIBLE_GPU_UUID,   /* uuid: "GPU-" and at least one more character, a prefix */
    EMU_VISIBLE_MIG_UUID,   /* uuid: "MIG-" and at least one more character, a prefix */
    EMU_VISIBLE_MIG_LEGACY, /* uuid: "GPU-..." (a prefix), gi and ci */
};

#define EMU_VISIBLE_MAX 16
#define EMU_VISIBLE_UUID_LEN 48

struct emu_visible_entry {
    enum emu_visible_kind kind;
    unsigned index;
    unsigned gi, ci;
    char uuid[EMU_VISIBLE_UUID_LEN]; /* NUL-terminated */
};

/* Splits s into at most max entries (spaces around an entry are ignored); stops at the first
 * entry that is none of the forms above, as CUDA stops at an invalid one. Returns how many were
 * read. */
size_t emu_visible_parse(const char *s, struct emu_visible_entry *out, size_t max);
