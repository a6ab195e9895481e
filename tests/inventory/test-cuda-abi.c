/*
 * test-cuda-abi — proves src/gpu/cuda_api.h matches NVIDIA's cuda.h (CUDA 13).
 *
 * Prototype types are checked at compile time (cuda-abi-real.c). Here the two tables built
 * from the generated list — every enum constant, value #define, typedef size and struct
 * member offset our header declares — are compared, and each mismatch is named.
 * Built only where the toolkit's cuda.h exists; elsewhere meson builds the skip variant.
 */
#include <stdio.h>

#include "cuda-abi.h"
#include "tap.h"

static const char *kind_name(enum cuda_abi_kind k)
{
    switch (k) {
    case CUDA_ABI_CONST:
        return "value";
    case CUDA_ABI_SIZE:
        return "sizeof";
    case CUDA_ABI_OFFSET:
        return "offsetof";
    case CUDA_ABI_FUNC:
        return "function";
    }
    return "?";
}

/* Compares entries of one kind; returns how many were compared. */
static size_t compare_kind(enum cuda_abi_kind kind)
{
    size_t nr, no, compared = 0;
    const struct cuda_abi_entry *real = cuda_abi_real(&nr);
    const struct cuda_abi_entry *ours = cuda_abi_ours(&no);

    REQUIRE_EQ_U64(nr, no);
    for (size_t i = 0; i < nr; i++) {
        if (real[i].kind != kind)
            continue;
        compared++;
        if (strcmp(real[i].name, ours[i].name) != 0) {
            tap_fail(__FILE__, __LINE__, "tables out of step at %zu: %s vs %s", i, real[i].name,
                     ours[i].name);
            continue;
        }
        if (real[i].value != ours[i].value)
            tap_fail(__FILE__, __LINE__, "%s %s: cuda.h has %lld, ours %lld", kind_name(kind),
                     real[i].name, real[i].value, ours[i].value);
    }
    return compared;
}

TEST(enum_constants_and_defines_match)
{
    CHECK_GE_U64(compare_kind(CUDA_ABI_CONST), 400);
}

TEST(typedef_sizes_match)
{
    CHECK_GE_U64(compare_kind(CUDA_ABI_SIZE), 80);
}

TEST(struct_member_offsets_match)
{
    CHECK_GE_U64(compare_kind(CUDA_ABI_OFFSET), 150);
}

/* Every function in our header was found in cuda.h at compile time (an undeclared name
 * would not have compiled); the count guards against the generator silently listing none. */
TEST(functions_declared_by_cuda_h)
{
    CHECK_GE_U64(compare_kind(CUDA_ABI_FUNC), 200);
}

/* A few hand-picked facts other components rely on, so a generator bug that empties both
 * tables in the same way cannot pass unnoticed. */
TEST(spot_checks)
{
    size_t n;
    const struct cuda_abi_entry *ours = cuda_abi_ours(&n);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ours[i].name, "CUDA_ERROR_OUT_OF_MEMORY") == 0) {
            CHECK_EQ_INT(ours[i].value, 2);
            seen++;
        } else if (strcmp(ours[i].name, "CUdeviceptr") == 0) {
            CHECK_EQ_INT(ours[i].value, 8);
            seen++;
        } else if (strcmp(ours[i].name, "CUlaunchAttribute") == 0) {
            CHECK_EQ_INT(ours[i].value, 72);
            seen++;
        }
    }
    CHECK_EQ_INT(seen, 3);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
