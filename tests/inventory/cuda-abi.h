/*
 * cuda-abi.h — the tables the CUDA ABI conformance test compares. One table is built from
 * NVIDIA's cuda.h (cuda-abi-real.c), one from ours (cuda-abi-ours.c), both from the same
 * generated list, so entry i of one is entry i of the other.
 */
#ifndef ACCEL_TEST_CUDA_ABI_H
#define ACCEL_TEST_CUDA_ABI_H

#include <stddef.h>

enum cuda_abi_kind { CUDA_ABI_CONST, CUDA_ABI_SIZE, CUDA_ABI_OFFSET, CUDA_ABI_FUNC };

struct cuda_abi_entry {
    enum cuda_abi_kind kind;
    const char *name;
    long long value; /* the constant, sizeof, offsetof; 1 for a declared function */
};

const struct cuda_abi_entry *cuda_abi_real(size_t *ret_n);
const struct cuda_abi_entry *cuda_abi_ours(size_t *ret_n);

/* Shared expansion of the generated list; each TU includes its header(s) first. */
#define ABI_CONST(c) {CUDA_ABI_CONST, #c, (long long)(intptr_t)(c)},
#define ABI_SIZE(t) {CUDA_ABI_SIZE, #t, (long long)sizeof(t)},
#define ABI_OFFSET(t, m) {CUDA_ABI_OFFSET, #t "." #m, (long long)offsetof(t, m)},
#define ABI_FUNC(f) {CUDA_ABI_FUNC, #f, (long long)(sizeof(&f) > 0)},

#endif
