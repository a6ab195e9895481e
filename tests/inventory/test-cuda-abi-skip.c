/* test-cuda-abi (skip variant) — built where no CUDA 13 toolkit cuda.h was found. */
#include "tap.h"

int main(void)
{
    tap_skip_all("no CUDA 13 toolkit (cuda.h under /usr/local/cuda/include): "
                 "the CUDA ABI conformance test needs it");
}
