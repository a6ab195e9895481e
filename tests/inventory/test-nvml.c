/*
 * test-nvml — the NVML loader: open errors and messages, the symbol table, and the
 * process-info stride detection against fake NVML functions that write 16-, 24- and 32-byte
 * records whatever the entry point's name promises.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "nvml.h"
#include "tap.h"

/* ---- fake process queries, injected into a zeroed struct gpu_nvml ---------------------- */

static struct {
    int stride;        /* record size written */
    unsigned int n;    /* processes */
    int grow;          /* the list grows by one on every call (never stable) */
    nvmlReturn_t fail; /* returned instead of data when non-zero */
    int calls;
    unsigned long long used; /* when non-zero: every process's used memory */
    int written;             /* when non-zero: bytes of each record the driver writes */
} fk;

static nvmlReturn_t fake_write(nvmlDevice_t dev, unsigned int *count, void *infos)
{
    unsigned char *p = infos;
    unsigned int n = fk.n;

    fk.calls++;
    if (fk.fail)
        return fk.fail;
    if (fk.grow)
        fk.n++;
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int k = 0; k < n; k++) {
        unsigned char rec[32] = {0};
        unsigned int pid = 100 + k, mig = 0xffffffffu;
        unsigned long long used = fk.used ? fk.used : (unsigned long long)(k + 1) << 20;
        memcpy(rec, &pid, 4);
        memcpy(rec + 8, &used, 8);
        if (fk.stride >= 24) {
            memcpy(rec + 16, &mig, 4);
            memcpy(rec + 20, &mig, 4);
        }
        memcpy(p + (size_t)k * (size_t)fk.stride, rec,
               (size_t)(fk.written ? fk.written : fk.stride));
    }
    *count = n;
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_v1(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v1_t *i)
{
    return fake_write(d, c, i);
}

static nvmlReturn_t fake_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i)
{
    return fake_write(d, c, i);
}

static nvmlReturn_t fake_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i)
{
    return fake_write(d, c, i);
}

static nvmlReturn_t fake_mps(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i)
{
    return fake_write(d, c, i);
}

static nvmlReturn_t fake_not_found(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i)
{
    fk.calls++;
    return NVML_ERROR_FUNCTION_NOT_FOUND;
}

static void reset(struct gpu_nvml *n, int stride, unsigned int procs)
{
    memset(n, 0, sizeof(*n));
    memset(&fk, 0, sizeof(fk));
    fk.stride = stride;
    fk.n = procs;
}

static void check_procs(const struct gpu_process *p, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        CHECK_EQ_INT(p[k].pid, 100 + (long long)k);
        CHECK_EQ_U64(p[k].used_memory_bytes, (unsigned long long)(k + 1) << 20);
    }
}

static void stride_case(int stride, unsigned int procs)
{
    struct gpu_nvml n;
    struct gpu_process p[16];
    size_t got = 999;

    reset(&n, stride, procs);
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 16, &got), 0);
    CHECK_EQ_U64(got, procs);
    /* One record reads the same in every layout: nothing is learnt, nothing cached. */
    CHECK_EQ_INT(gpu_nvml_process_stride(&n), procs >= 2 ? stride : 0);
    check_procs(p, got);
}

TEST(stride_24_v3_layout)
{
    stride_case(24, 5);
}

TEST(stride_32_larger_record_without_version_bump)
{
    stride_case(32, 5);
}

TEST(stride_16_old_layout_behind_new_name)
{
    stride_case(16, 5);
}

TEST(stride_single_process_each_layout)
{
    stride_case(16, 1);
    stride_case(24, 1);
    stride_case(32, 1);
}

/* Drivers that leave trailing fields unwritten: the extent is not a multiple of the stride,
 * the range rule still finds the one consistent layout; not cached (not certain). */
TEST(stride_with_unwritten_trailing_fields)
{
    static const struct {
        int stride, written;
    } cases[] = {{24, 16}, {24, 20}, {32, 24}, {32, 16}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        struct gpu_nvml n;
        struct gpu_process p[16];
        size_t got = 0;

        reset(&n, cases[c].stride, 5);
        fk.written = cases[c].written;
        n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
        int rc = gpu_nvml_running_processes(&n, NULL, p, 16, &got);
        CHECK_EQ_INT(rc, 0);
        if (rc != 0) {
            tap_diag("stride %d, %d bytes written", cases[c].stride, cases[c].written);
            continue;
        }
        CHECK_EQ_U64(got, 5);
        CHECK_EQ_INT(gpu_nvml_process_stride(&n), 0);
        check_procs(p, got);
    }
}

/* 32-byte records of which only 16 bytes are written, two processes: the extent (48) is an
 * exact multiple of 24, but 24-byte records would put the second pid in unwritten bytes. */
TEST(stride_exact_match_needs_written_pids)
{
    struct gpu_nvml n;
    struct gpu_process p[4];
    size_t got = 0;

    reset(&n, 32, 2);
    fk.written = 16;
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 4, &got), 0);
    CHECK_EQ_U64(got, 2);
    CHECK_EQ_INT(gpu_nvml_process_stride(&n), 0);
    check_procs(p, got);
}

TEST(no_processes_leaves_stride_unknown)
{
    struct gpu_nvml n;
    struct gpu_process p[4];
    size_t got = 999;

    reset(&n, 24, 0);
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    CHECK_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 4, &got), 0);
    CHECK_EQ_U64(got, 0);
    CHECK_EQ_INT(gpu_nvml_process_stride(&n), 0);
}

TEST(stride_is_cached_after_detection)
{
    struct gpu_nvml n;
    struct gpu_process p[8];
    size_t got;

    reset(&n, 32, 3);
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 8, &got), 0);
    CHECK_EQ_INT(fk.calls, 2); /* two differently filled buffers */
    fk.calls = 0;
    fk.n = 4;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 8, &got), 0);
    CHECK_EQ_INT(fk.calls, 1);
    CHECK_EQ_U64(got, 4);
    check_procs(p, got);
}

TEST(falls_back_v3_to_v2_to_v1)
{
    struct gpu_nvml n;
    struct gpu_process p[8];
    size_t got;

    reset(&n, 24, 2);
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_not_found;
    n.nvmlDeviceGetComputeRunningProcesses_v2 = fake_v2;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 8, &got), 0);
    CHECK_EQ_U64(got, 2);
    CHECK_EQ_INT(n.proc_call, GPU_NVML_PROC_CALL_V2);
    check_procs(p, got);

    reset(&n, 16, 3);
    n.nvmlDeviceGetComputeRunningProcesses = fake_v1;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 8, &got), 0);
    CHECK_EQ_U64(got, 3);
    CHECK_EQ_INT(n.proc_call, GPU_NVML_PROC_CALL_V1);
    CHECK_EQ_INT(gpu_nvml_process_stride(&n), 16);
    check_procs(p, got);
}

TEST(mps_client_list)
{
    struct gpu_nvml n;
    struct gpu_process p[8];
    size_t got = 0;

    reset(&n, 32, 3);
    CHECK_EQ_INT(gpu_nvml_list_processes(&n, NULL, GPU_NVML_PROCS_MPS, p, 8, &got), -EOPNOTSUPP);
    n.nvmlDeviceGetMPSComputeRunningProcesses_v3 = fake_mps;
    REQUIRE_EQ_INT(gpu_nvml_list_processes(&n, NULL, GPU_NVML_PROCS_MPS, p, 8, &got), 0);
    CHECK_EQ_U64(got, 3);
    CHECK_EQ_INT(gpu_nvml_process_stride(&n), 32);
    check_procs(p, got);

    /* A stride learnt on the compute list serves the MPS list: one call. */
    reset(&n, 24, 2);
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    n.nvmlDeviceGetMPSComputeRunningProcesses_v3 = fake_mps;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 8, &got), 0);
    fk.calls = 0;
    REQUIRE_EQ_INT(gpu_nvml_list_processes(&n, NULL, GPU_NVML_PROCS_MPS, p, 8, &got), 0);
    CHECK_EQ_INT(fk.calls, 1);
    CHECK_EQ_U64(got, 2);
    check_procs(p, got);
}

TEST(too_many_processes_is_enospc)
{
    struct gpu_nvml n;
    struct gpu_process p[2];
    size_t got = 0;

    reset(&n, 24, 5);
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    CHECK_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 2, &got), -ENOSPC);
    CHECK_EQ_U64(got, 5);
}

TEST(unstable_process_list_is_eproto)
{
    struct gpu_nvml n;
    struct gpu_process p[64];
    size_t got = 0;

    reset(&n, 24, 2);
    fk.grow = 1;
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    CHECK_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 64, &got), -EPROTO);
    CHECK_EQ_INT(gpu_nvml_process_stride(&n), 0);
}

TEST(used_memory_not_available_passes_through)
{
    struct gpu_nvml n;
    struct gpu_process p[4];
    size_t got;

    reset(&n, 24, 2);
    fk.used = ~0ull; /* NVML_VALUE_NOT_AVAILABLE */
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    REQUIRE_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 4, &got), 0);
    CHECK_EQ_INT(gpu_nvml_process_stride(&n), 24);
    CHECK_EQ_U64(p[1].used_memory_bytes, UINT64_MAX);
}

TEST(errors_map_to_errno)
{
    struct gpu_nvml n;
    struct gpu_process p[4];
    size_t got;

    reset(&n, 24, 2);
    CHECK_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 4, &got), -EOPNOTSUPP);
    n.nvmlDeviceGetComputeRunningProcesses_v3 = fake_v3;
    fk.fail = NVML_ERROR_GPU_IS_LOST;
    CHECK_EQ_INT(gpu_nvml_running_processes(&n, NULL, p, 4, &got), -ENODEV);
    CHECK_EQ_INT(gpu_nvml_errno(NVML_ERROR_NOT_SUPPORTED), -EOPNOTSUPP);
    CHECK_EQ_INT(gpu_nvml_errno(NVML_SUCCESS), 0);
    CHECK(strcmp(gpu_nvml_strerror(NULL, NVML_ERROR_GPU_IS_LOST), "GPU is lost") == 0);
}

/* ---- nvml_api.h layouts ------------------------------------------------------------------
 * No nvml.h exists to compare against; these are the documented sizes and offsets the
 * driver's records have (x86-64), so a slip in nvml_api.h cannot pass silently. */

TEST(nvml_struct_layouts)
{
    CHECK_EQ_INT(sizeof(nvmlPciInfo_t), 68);
    CHECK_EQ_INT(offsetof(nvmlPciInfo_t, domain), 16);
    CHECK_EQ_INT(offsetof(nvmlPciInfo_t, busId), 36);
    CHECK_EQ_INT(sizeof(nvmlMemory_t), 24);
    CHECK_EQ_INT(sizeof(nvmlMemory_v2_t), 40);
    CHECK_EQ_INT(nvmlMemory_v2, 0x02000028);
    CHECK_EQ_INT(sizeof(nvmlProcessInfo_v1_t), 16);
    CHECK_EQ_INT(sizeof(nvmlProcessInfo_v2_t), 24);
    CHECK_EQ_INT(sizeof(nvmlProcessInfo_t), 24);
    CHECK_EQ_INT(offsetof(nvmlProcessInfo_t, usedGpuMemory), 8);
    CHECK_EQ_INT(offsetof(nvmlProcessInfo_t, computeInstanceId), 20);
    CHECK_EQ_INT(sizeof(nvmlProcessUtilizationSample_t), 32);
    CHECK_EQ_INT(sizeof(nvmlEventData_t), 32);
    CHECK_EQ_INT(offsetof(nvmlEventData_t, eventData), 16);
    CHECK_EQ_INT(sizeof(nvmlUtilization_t), 8);
    CHECK_EQ_INT(NVML_ERROR_GPU_IS_LOST, 15);
    CHECK_EQ_INT(NVML_ERROR_INSUFFICIENT_SIZE, 7);
    CHECK_EQ_INT(NVML_ERROR_NOT_SUPPORTED, 3);
    CHECK_EQ_INT(nvmlEventTypeXidCriticalError, 8);
    CHECK_EQ_INT(nvmlEventTypeDoubleBitEccError, 2);
    CHECK_EQ_INT(NVML_TOPOLOGY_SYSTEM, 50);
    CHECK_EQ_INT(NVML_DEVICE_UUID_V2_BUFFER_SIZE, 96);
}

/* ---- opening libraries ------------------------------------------------------------------ */

static const char *fake_path(void)
{
    static char path[4096];
    const char *root = getenv("ACCEL_BUILD_ROOT");
    snprintf(path, sizeof(path), "%s/tests/inventory/libfake-nvml.so", root ? root : ".");
    return path;
}

TEST(open_missing_library_says_what_to_do)
{
    struct gpu_nvml *n = (struct gpu_nvml *)0x1;
    char err[512] = "";

    CHECK_EQ_INT(gpu_nvml_open("/nonexistent/libnvidia-ml.so.1", &n, err, sizeof(err)), -ENOENT);
    CHECK(n == (struct gpu_nvml *)0x1);
    tap_diag("%s", err);
    CHECK(strstr(err, "NVML not found: /nonexistent/libnvidia-ml.so.1") == err);
    CHECK(strstr(err, "is the NVIDIA driver installed?") != NULL);
    CHECK(strstr(err, "ACCEL_NVML_LIBRARY") != NULL);
    CHECK(strchr(err, '\n') == NULL);
    /* Only the first occurrence of the path: dlerror's copy is not repeated. */
    CHECK(strstr(strstr(err, "/nonexistent") + 1, "/nonexistent/libnvidia-ml.so.1") == NULL);
}

TEST(open_uses_environment_variable)
{
    struct gpu_nvml *n = NULL;
    char err[512] = "";

    setenv("ACCEL_NVML_LIBRARY", "/nonexistent/from-env.so", 1);
    CHECK_EQ_INT(gpu_nvml_open(NULL, &n, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "/nonexistent/from-env.so") != NULL);

    setenv("ACCEL_NVML_LIBRARY", fake_path(), 1);
    setenv("FAKE_NVML_GPUS", "3", 1);
    REQUIRE_EQ_INT(gpu_nvml_open(NULL, &n, err, sizeof(err)), 0);
    unsetenv("ACCEL_NVML_LIBRARY");
    unsigned int count = 0;
    CHECK_EQ_INT(n->nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    CHECK_EQ_INT(count, 3);
    CHECK(strcmp(n->path, fake_path()) == 0);
    n = gpu_nvml_free(n);
    CHECK(n == NULL);
    unsetenv("FAKE_NVML_GPUS");
}

TEST(open_rejects_library_without_nvml)
{
    struct gpu_nvml *n = NULL;
    char err[512] = "";

    CHECK_EQ_INT(gpu_nvml_open("libm.so.6", &n, err, sizeof(err)), -ENOSYS);
    CHECK(n == NULL);
    CHECK(strstr(err, "lacks nvmlInit_v2") != NULL);
}

TEST(open_reports_init_failure)
{
    struct gpu_nvml *n = NULL;
    char err[512] = "";

    setenv("FAKE_NVML_INIT_FAIL", "1", 1);
    CHECK_EQ_INT(gpu_nvml_open(fake_path(), &n, err, sizeof(err)), -EIO);
    unsetenv("FAKE_NVML_INIT_FAIL");
    CHECK(n == NULL);
    CHECK(strstr(err, "Driver Not Loaded") != NULL);
}

TEST(open_fills_table_optional_missing_is_null)
{
    struct gpu_nvml *n = NULL;
    char err[512] = "";

    REQUIRE_EQ_INT(gpu_nvml_open(fake_path(), &n, err, sizeof(err)), 0);
    CHECK(n->nvmlDeviceGetUUID != NULL);
    CHECK(n->nvmlDeviceGetComputeRunningProcesses_v3 != NULL);
    CHECK(n->nvmlDeviceGetComputeRunningProcesses == NULL); /* the fake lacks the v1 name */
    CHECK(n->nvmlEventSetWait_v2 == NULL);
    gpu_nvml_free(n);
}

TEST(processes_through_loaded_library)
{
    struct gpu_nvml *n = NULL;
    struct gpu_process p[8];
    nvmlDevice_t dev;
    size_t got = 0;
    char err[512] = "";

    setenv("FAKE_NVML_PROCS", "3", 1);
    setenv("FAKE_NVML_STRIDE", "32", 1);
    REQUIRE_EQ_INT(gpu_nvml_open(fake_path(), &n, err, sizeof(err)), 0);
    unsetenv("FAKE_NVML_PROCS");
    unsetenv("FAKE_NVML_STRIDE");
    REQUIRE_EQ_INT(n->nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    CHECK_EQ_INT(gpu_nvml_running_processes(n, dev, p, 8, &got), 0);
    CHECK_EQ_U64(got, 3);
    CHECK_EQ_INT(gpu_nvml_process_stride(n), 32);
    CHECK_EQ_INT(p[2].pid, 4002);
    CHECK_EQ_U64(p[2].used_memory_bytes, 3ull << 20);
    gpu_nvml_free(n);
}

TEST(free_accepts_null_and_injected_tables)
{
    struct gpu_nvml n;

    CHECK(gpu_nvml_free(NULL) == NULL);
    memset(&n, 0, sizeof(n));
    CHECK(gpu_nvml_free(&n) == NULL); /* must not free stack memory */
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
