/* vcuda-launch.h — the launcher of the libvcuda-on-emulator test programs: creates an emulated
 * machine (1 GPU of gpu_bytes) and a temp dir, sets the quota environment (quota, context
 * memory 4 MiB), LD_LIBRARY_PATH (the emulator) and LD_PRELOAD (the ASan runtime first in the
 * sanitizer build, then libvcuda.so), re-executes the program with VCUDA_TEST_CHILD=1 and
 * returns its exit status. VCUDA_TEST_REAL=1 keeps the caller's driver (tests/gpu) and its
 * context cost. VCUDA_TEST_EMU_MODEL=NAME (e.g. H100) makes the emulated GPU that model, with
 * its memory and its context cost (state.c's model table) instead of gpu_bytes and 4 MiB. */
#pragma once

#include <stdint.h>

int vcuda_test_launch(char **argv, const char *quota, uint64_t gpu_bytes);

/* The same, with a quota sized to what a context costs where the program runs (a real GPU's
 * context takes hundreds of MiB, the emulator's 4 MiB unless a model says otherwise): first the
 * program is run once as `argv[0] --role ctx-cost` under a 16 GiB quota of its own, and must print
 * `ctx=BYTES`, the bytes one context takes off the quota as cuMemGetInfo shows them (total - free
 * right after the context exists); then the quota is work + contexts × that cost. The program
 * finds the quota in VCUDA_MEMORY_LIMIT (bytes) and the probe's figure in VCUDA_TEST_CTX_COST. */
int vcuda_test_launch_sized(char **argv, uint64_t work, unsigned contexts, uint64_t gpu_bytes);
