#!/usr/bin/env bash
# vcuda-memory.sh — libvcuda's memory quota on a real NVIDIA GPU (docs/vcuda.md, "Real GPU").
# Needs the NVIDIA driver and gcc; nvcc and PyTorch are used when present (their checks are
# reported SKIP otherwise). No Debian -dev libraries: libvcuda and the driver-API test program are
# built with gcc alone (python3 writes the linker version script from hooks.def).
#
# Under a 4 GiB quota:
#   1. a program built by nvcc against NVIDIA's static cudart (every driver call then reaches
#      libvcuda through dlopen/dlsym/cuGetProcAddress): cudaMemGetInfo total = 4 GiB, a 5 GiB
#      cudaMalloc and cudaMallocAsync fail with out-of-memory, 3 GiB succeeds;
#   2. PyTorch: torch.cuda.mem_get_info() total = 4 GiB, a 5 GiB tensor raises OutOfMemoryError,
#      with the default caching allocator and with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync;
#   3. the driver-API cases of tests/vcuda/test-vcuda-emu.c on the real driver (VCUDA_TEST_REAL=1),
#      under a quota of their own: 28 MiB + 9 contexts, a context's cost measured first by the
#      program's launcher (tests/vcuda/vcuda-launch.h); its diagnostics (what a context and a
#      pool took there) are printed indented. Among them, issue 22's: VMM memory exported to a
#      file descriptor and imported back stays charged while mapped, and graph memory (a
#      captured cuMemAllocAsync) is charged when graph launches map it.
# Prints one line per check and a record line for docs/gpu-validation.md. Exit 0 = all ran
# checks passed, 1 = a check failed, 77 = no GPU here.
#
#   tests/gpu/vcuda-memory.sh
#
# Dry run without a GPU (checks the script, the gcc-only build, step 1 when nvcc is installed
# — NVIDIA's runtime runs on accel-emu since issue 9 — and step 3 on accel-emu; make check runs
# the same cudart checks as tests/runtime/test-runtime.py):
#   build/src/emu/accel-emu --state /tmp/gpus init --gpus 1
#   ACCEL_EMU_STATE=/tmp/gpus LD_LIBRARY_PATH=build/src/emu tests/gpu/vcuda-memory.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dry=0
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    if [ -z "${ACCEL_EMU_STATE:-}" ]; then
        echo "SKIP: no NVIDIA GPU here (nvidia-smi -L failed); see the header for a dry run"
        exit 77
    fi
    dry=1
    echo "DRY RUN on accel-emu ($ACCEL_EMU_STATE): not a GPU validation, do not record"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }
skip() { echo "SKIP $*"; }

# ---- build libvcuda.so and the driver-API test program with gcc ---------------------------
cflags=(-std=gnu17 -O2 -g -Wall -Wextra -Wno-unused-parameter -fPIC
        -I"$root/src/vcuda" -I"$root/src/common" -I"$root/src/gpu" -I"$out")
echo '#define ACCEL_VERSION "gpu-test"' > "$out/accel-config.h"
python3 "$root/src/vcuda/gen-map.py" "$root/src/vcuda/hooks.def" "$out/libvcuda.map" || exit 1
srcs=()
for f in "$root"/src/vcuda/*.c "$root"/src/common/log.c "$root"/src/common/util.c \
         "$root"/src/common/fs.c "$root"/src/common/proc.c; do
    srcs+=("$f")
done
# dlsym.c: optimized, as in meson.build (an -O0 dlsym hook can recurse)
gcc "${cflags[@]}" -D_GNU_SOURCE -fvisibility=hidden -shared -o "$out/libvcuda.so" "${srcs[@]}" \
    -Wl,--version-script="$out/libvcuda.map" -ldl -lpthread || { echo "FAIL build libvcuda"; exit 1; }
gcc "${cflags[@]}" -I"$root/tests/lib" -I"$root/src/emu" -o "$out/test-vcuda-emu" \
    "$root/tests/vcuda/test-vcuda-emu.c" "$root/tests/vcuda/vcuda-launch.c" \
    "$root/tests/lib/tap.c" "$root/src/emu/state.c" "$root/src/emu/state-mig.c" \
    "$root/src/emu/mig-profiles.c" \
    "$root/src/common/proc.c" "$root/src/common/util.c" \
    -ldl -lpthread -lrt || { echo "FAIL build test-vcuda-emu"; exit 1; }

gpu=unknown driver=unknown cuda=unknown
if [ $dry = 0 ]; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
    cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)
fi
echo "GPU: $gpu, driver $driver, CUDA $cuda"
if command -v nvcc >/dev/null; then nvcc --version | sed -n 's/.*release /nvcc release /p'; fi
${PYTHON:-python3} -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null || echo "torch: not importable"

quota=$((4 << 30))
export VCUDA_CONFIG="$out/no-config" VCUDA_MEMORY_LIMIT=4Gi VCUDA_REGION="$out/region"
vc="$out/libvcuda.so"

# ---- 1. nvcc program with NVIDIA's static cudart -------------------------------------------
if command -v nvcc >/dev/null; then
    cat > "$out/quota.cu" <<'EOF'
#include <cstdio>
#include <cuda_runtime.h>
int main()
{
    size_t f = 0, t = 0;
    cudaError_t e = cudaMemGetInfo(&f, &t);
    printf("meminfo=%d total=%zu free=%zu\n", (int)e, t, f);
    void *p = nullptr;
    e = cudaMalloc(&p, 5ull << 30);
    printf("malloc5=%d\n", (int)e);
    cudaGetLastError();
    e = cudaMallocAsync(&p, 5ull << 30, 0);
    printf("mallocasync5=%d\n", (int)e);
    cudaGetLastError();
    e = cudaMalloc(&p, 3ull << 30);
    printf("malloc3=%d\n", (int)e);
    if (e == cudaSuccess)
        cudaFree(p);
    return 0;
}
EOF
    if nvcc -O2 -o "$out/quota" "$out/quota.cu" 2>"$out/nvcc.log"; then
        if ldd "$out/quota" | grep -q libcudart; then
            bad "nvcc: expected static cudart, binary links libcudart.so"
        fi
        r=$(LD_PRELOAD="$vc" "$out/quota" 2>"$out/quota.err")
        echo "$r" | sed 's/^/  /'
        grep -q "^meminfo=0 total=$quota " <<<"$r" && pass "cudart: cudaMemGetInfo total = 4 GiB" \
            || bad "cudart: cudaMemGetInfo total"
        grep -q "^malloc5=2$" <<<"$r" && pass "cudart: 5 GiB cudaMalloc -> cudaErrorMemoryAllocation" \
            || bad "cudart: 5 GiB cudaMalloc"
        grep -q "^mallocasync5=2$" <<<"$r" && pass "cudart: 5 GiB cudaMallocAsync -> out of memory" \
            || bad "cudart: 5 GiB cudaMallocAsync"
        grep -q "^malloc3=0$" <<<"$r" && pass "cudart: 3 GiB cudaMalloc succeeds" \
            || bad "cudart: 3 GiB cudaMalloc"
    else
        bad "nvcc build (see below)"; cat "$out/nvcc.log"
    fi
else
    skip "cudart checks: no nvcc"
fi

# ---- 2. PyTorch, both allocators ------------------------------------------------------------
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    cat > "$out/torch_quota.py" <<'EOF'
import sys, torch
free, total = torch.cuda.mem_get_info()
print("total=%d free=%d" % (total, free))
try:
    x = torch.empty(5 << 30, dtype=torch.uint8, device="cuda")
    print("alloc5=ok")
except torch.cuda.OutOfMemoryError:
    print("alloc5=oom")
y = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
print("alloc3=ok")
EOF
    for conf in "" "backend:cudaMallocAsync"; do
        name=${conf:-default caching allocator}
        r=$(PYTORCH_CUDA_ALLOC_CONF="$conf" LD_PRELOAD="$vc" python3 "$out/torch_quota.py" 2>"$out/torch.err")
        echo "$r" | sed 's/^/  /'
        grep -q "^total=$quota " <<<"$r" && pass "torch ($name): mem_get_info total = 4 GiB" \
            || bad "torch ($name): mem_get_info total"
        grep -q "^alloc5=oom$" <<<"$r" && pass "torch ($name): 5 GiB tensor -> OutOfMemoryError" \
            || bad "torch ($name): 5 GiB tensor"
        grep -q "^alloc3=ok$" <<<"$r" && pass "torch ($name): 3 GiB tensor fits" \
            || { bad "torch ($name): 3 GiB tensor"; tail -5 "$out/torch.err"; }
    done
else
    skip "PyTorch checks: no torch with CUDA"
fi

# ---- 3. driver-API cases on the real driver --------------------------------------------------
if ACCEL_BUILD_ROOT="$out/fake-build" ACCEL_SOURCE_ROOT="$root" VCUDA_TEST_REAL=1 \
   bash -c 'mkdir -p "$ACCEL_BUILD_ROOT/src/vcuda" && cp "'"$vc"'" "$ACCEL_BUILD_ROOT/src/vcuda/" &&
            exec "'"$out"'/test-vcuda-emu"' > "$out/api.tap" 2>&1; then
    pass "driver-API tests on the real driver ($(grep -c '^ok' "$out/api.tap") ok, of which" \
         "$(grep -c '^ok.*# SKIP' "$out/api.tap") skipped there)"
    grep -E '^ok.*# SKIP|^# ' "$out/api.tap" | sed 's/^/  /'
else
    bad "driver-API tests on the real driver:"; grep -E '^(not ok|#)' "$out/api.tap"
fi

echo
echo "record: | vcuda-memory.sh | memory quota (cudart static, PyTorch x2 allocators, driver API) |" \
     "$(date -u +%F) | $gpu | $driver | $cuda | $([ $fail = 0 ] && echo pass || echo FAIL) |"
exit $fail
