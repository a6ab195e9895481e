/* cuda-abi-ours.c — our side of the CUDA ABI conformance test: the same list, our header. */
#include <stdint.h>

#include "cuda_api.h"
#include "cuda-abi.h"

static const struct cuda_abi_entry ours_table[] = {
#include "cuda-abi-list.h"
};

const struct cuda_abi_entry *cuda_abi_ours(size_t *ret_n)
{
    *ret_n = sizeof(ours_table) / sizeof(ours_table[0]);
    return ours_table;
}
