/* test-cuda-abi (skip variant) — built where no CUDA 13 toolkit cuda.h was found. */
#include "tap.h"

int main(void)
{
    tap_skip_all("no CUDA 13 toolkit's cuda.h (-Dnvcc_root): the CUDA ABI conformance test "
                 "needs it; run scripts/cuda-wheels.sh (PyPI), then meson setup --reconfigure");
}
