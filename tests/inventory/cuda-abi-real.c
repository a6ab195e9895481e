/*
 * cuda-abi-real.c — the NVIDIA side of the CUDA ABI conformance test.
 *
 * NVIDIA's cuda.h is included with __CUDA_API_VERSION_INTERNAL so that it declares every
 * entry point under its exported name (no renaming macros) plus the legacy 32-bit ones. Then
 * our cuda_api.h adds its prototypes (ACCEL_CUDA_PROTOTYPES_ONLY): C's redeclaration rules
 * make any prototype of ours with a different type a compile error, and ABI_FUNC below makes
 * any function we declare that cuda.h lacks an error too (it would be undeclared here only if
 * neither header had it, so the address check is done against cuda.h before ours is read).
 */
#include <stdint.h>

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "cuda-abi.h"

/* Before our prototypes are seen: every function we declare must exist in cuda.h. */
static const struct cuda_abi_entry real_table[] = {
#include "cuda-abi-list.h"
};

#define ACCEL_CUDA_PROTOTYPES_ONLY 1
#include "cuda_api.h"

const struct cuda_abi_entry *cuda_abi_real(size_t *ret_n)
{
    *ret_n = sizeof(real_table) / sizeof(real_table[0]);
    return real_table;
}
