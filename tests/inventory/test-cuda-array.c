/* Unit tests for src/gpu/cuda_array.h: element sizes per format and the array layout rule the
 * emulator allocates by and libvcuda charges by. */
#include "cuda_array.h"
#include "tap.h"

#include <errno.h>
#include <stdint.h>

TEST(format_bytes)
{
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_UNSIGNED_INT8), 1);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_SNORM_INT8X1), 1);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_HALF), 2);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_UNORM_INT8X2), 2);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_FLOAT), 4);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_SIGNED_INT32), 4);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_SNORM_INT16X2), 4);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_UNORM_INT16X4), 8);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_SNORM_INT16X4), 8);
    /* no fixed element size, or no format at all */
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_BC1_UNORM), 0);
    CHECK_EQ_INT(gpu_cuda_format_bytes(CU_AD_FORMAT_NV12), 0);
    CHECK_EQ_INT(gpu_cuda_format_bytes(0), 0);
    CHECK_EQ_INT(gpu_cuda_format_bytes(0x77), 0);
}

TEST(rows_padded_to_512_and_whole_64k_pages)
{
    uint64_t row = 0, bytes = 0;
    CHECK_EQ_INT(gpu_cuda_array_bytes(1, 1, 1, 4, &row, &bytes), 0);
    CHECK_EQ_U64(row, 512);
    CHECK_EQ_U64(bytes, 64 << 10);
    /* 4096 floats a row, 256 rows: no padding anywhere, exactly 4 MiB */
    CHECK_EQ_INT(gpu_cuda_array_bytes(4096, 256, 0, 4, &row, &bytes), 0);
    CHECK_EQ_U64(row, 16384);
    CHECK_EQ_U64(bytes, 4 << 20);
    /* 516 bytes a row pad to 1024; 64 rows fill one page exactly, 65 spill into a second */
    CHECK_EQ_INT(gpu_cuda_array_bytes(129, 64, 1, 4, &row, &bytes), 0);
    CHECK_EQ_U64(row, 1024);
    CHECK_EQ_U64(bytes, 64 << 10);
    CHECK_EQ_INT(gpu_cuda_array_bytes(129, 65, 1, 4, NULL, &bytes), 0);
    CHECK_EQ_U64(bytes, 128 << 10);
    /* a height and depth of 0 mean 1 (1D and 2D arrays) */
    uint64_t one = 0;
    CHECK_EQ_INT(gpu_cuda_array_bytes(3000, 0, 0, 8, NULL, &bytes), 0);
    CHECK_EQ_INT(gpu_cuda_array_bytes(3000, 1, 1, 8, NULL, &one), 0);
    CHECK_EQ_U64(bytes, one);
    /* 3D: 128 x 128 x 4 floats */
    CHECK_EQ_INT(gpu_cuda_array_bytes(128, 128, 4, 4, &row, &bytes), 0);
    CHECK_EQ_U64(row, 512);
    CHECK_EQ_U64(bytes, 256 << 10);
}

TEST(rejects_and_leaves_output)
{
    uint64_t row = 7, bytes = 7;
    CHECK_EQ_INT(gpu_cuda_array_bytes(0, 1, 1, 4, &row, &bytes), -EINVAL);
    CHECK_EQ_INT(gpu_cuda_array_bytes(1, 1, 1, 0, &row, &bytes), -EINVAL);
    CHECK_EQ_INT(gpu_cuda_array_bytes(UINT64_MAX / 2, 1, 1, 4, &row, &bytes), -EOVERFLOW);
    CHECK_EQ_INT(gpu_cuda_array_bytes(UINT64_MAX - 10, 1, 1, 1, &row, &bytes), -EOVERFLOW);
    CHECK_EQ_INT(gpu_cuda_array_bytes(1, UINT64_MAX / 256, 1, 1, &row, &bytes), -EOVERFLOW);
    CHECK_EQ_INT(gpu_cuda_array_bytes(1, 1u << 20, 1ull << 40, 1, &row, &bytes), -EOVERFLOW);
    /* rounding the total up to a page must not wrap either */
    CHECK_EQ_INT(gpu_cuda_array_bytes(1, (UINT64_MAX >> 9), 1, 1, &row, &bytes), -EOVERFLOW);
    CHECK_EQ_U64(row, 7);
    CHECK_EQ_U64(bytes, 7);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
