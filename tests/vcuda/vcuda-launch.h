/* vcuda-launch.h — the launcher of the libvcuda-on-emulator test programs: creates an emulated
 * machine (1 GPU of gpu_bytes) and a temp dir, sets the quota environment (quota, context
 * memory 4 MiB), LD_LIBRARY_PATH (the emulator) and LD_PRELOAD (the ASan runtime first in the
 * sanitizer build, then libvcuda.so), re-executes the program with VCUDA_TEST_CHILD=1 and
 * returns its exit status. VCUDA_TEST_REAL=1 keeps the caller's driver (tests/gpu). */
#pragma once

#include <stdint.h>

int vcuda_test_launch(char **argv, const char *quota, uint64_t gpu_bytes);
