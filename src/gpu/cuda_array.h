/* cuda_array.h — how many device bytes a CUDA array takes: bytes per element of each
 * CUarray_format and the layout rule (rows padded to the 512-byte pitch unit, the whole in
 * 64 KiB pages). The emulated driver allocates and charges arrays by it, and libvcuda charges a
 * new array by it until the driver gives its own figure (cuArrayGetMemoryRequirements), so the
 * two agree by construction. Header only, libc only: gpu_api_dep carries no library. */
#pragma once

#include "cuda_api.h"

#include <errno.h>
#include <stdint.h>

#define GPU_CUDA_ARRAY_ROW_ALIGN 512ull   /* rows are padded to the pitch unit */
#define GPU_CUDA_ARRAY_PAGE (64ull << 10) /* arrays occupy whole 64 KiB pages */

/* Bytes of one channel element of format f; 0 for formats with no fixed element size
 * (block-compressed, planar video) and for values that are no format. */
static inline unsigned gpu_cuda_format_bytes(int f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT16X1:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT16X2:
        return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
        return 8;
    default:
        return 0;
    }
}

/* Layout of a w x h x d array (h, d of 0 mean 1) whose elements take elem_bytes each
 * (format bytes x channels): *ret_row the padded row pitch, *ret_bytes the whole pages it
 * occupies. Returns 0, -EINVAL for a zero width or element size, -EOVERFLOW when the size does
 * not fit 64 bits; the out parameters (ret_row may be NULL) are untouched on failure. */
static inline int gpu_cuda_array_bytes(uint64_t w, uint64_t h, uint64_t d, uint64_t elem_bytes,
                                       uint64_t *ret_row, uint64_t *ret_bytes)
{
    uint64_t row, n;
    if (w == 0 || elem_bytes == 0)
        return -EINVAL;
    if (__builtin_mul_overflow(w, elem_bytes, &row) ||
        __builtin_add_overflow(row, GPU_CUDA_ARRAY_ROW_ALIGN - 1, &row))
        return -EOVERFLOW;
    row = row / GPU_CUDA_ARRAY_ROW_ALIGN * GPU_CUDA_ARRAY_ROW_ALIGN;
    if (__builtin_mul_overflow(row, h ? h : 1, &n) || __builtin_mul_overflow(n, d ? d : 1, &n) ||
        __builtin_add_overflow(n, GPU_CUDA_ARRAY_PAGE - 1, &n))
        return -EOVERFLOW;
    if (ret_row)
        *ret_row = row;
    *ret_bytes = n / GPU_CUDA_ARRAY_PAGE * GPU_CUDA_ARRAY_PAGE;
    return 0;
}
