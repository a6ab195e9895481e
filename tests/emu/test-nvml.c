/* test-nvml — the emulated libnvidia-ml.so.1 against machines made by `accel-emu init`: every
 * query the suite uses, NVML's buffer-size and argument rules, the process-info record stride,
 * utilization from the timeline, sensors changed by `accel-emu set`, ECC, events in one
 * process, and a lost GPU. (Events across processes: test-xid.c; processes through the
 * emulated libcuda: test-nvml-procs.c.)
 *
 * The test links the emulated NVML directly and reaches the shared machine through the state
 * API too (to charge memory and queue timeline work as libcuda would). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emu-cli.h"
#include "nvml_api.h"
#include "state-mps.h"
#include "state-nvml.h"
#include "state.h"
#include "tap.h"

#define MiB (1024ull * 1024ull)
/* The per-process utilization calls: the size NVIDIA's NVML on an H200 asked for with no
 * buffer (its own sample buffer, idle or busy), and the size the project's callers use. */
#define DRIVER_SAMPLES 72
#define SAMPLES 256

#define emu(state, ...) emu_cli_run(state, NULL, 0, __VA_ARGS__)
#define machine emu_cli_machine

static struct emu_state *open_machine(const char *path)
{
    struct emu_state *st = NULL;
    return emu_state_open(path, &st) == 0 ? st : NULL;
}

static nvmlDevice_t dev(unsigned i)
{
    nvmlDevice_t d = NULL;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(i, &d), NVML_SUCCESS);
    return d;
}

TEST(init_fails_cleanly_without_a_machine)
{
    unsigned n;
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
    CHECK_EQ_INT(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);

    unsetenv("ACCEL_EMU_STATE");
    CHECK_EQ_INT(nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);

    char junk[4096];
    snprintf(junk, sizeof(junk), "%s/junk", tap_tmpdir());
    FILE *f = fopen(junk, "w");
    REQUIRE(f != NULL);
    fputs("not a machine\n", f);
    fclose(f);
    setenv("ACCEL_EMU_STATE", junk, 1);
    CHECK_EQ_INT(nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
    setenv("ACCEL_EMU_STATE", "/nonexistent/state", 1);
    CHECK_EQ_INT(nvmlInitWithFlags(0), NVML_ERROR_DRIVER_NOT_LOADED);
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
    CHECK_EQ_STR(nvmlErrorString(NVML_ERROR_DRIVER_NOT_LOADED), "Driver Not Loaded");
    CHECK_EQ_STR(nvmlErrorString(NVML_ERROR_GPU_IS_LOST), "GPU is lost");
}

TEST(init_is_counted)
{
    REQUIRE(machine("count", "--gpus", "2", NULL) != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlInitWithFlags(0), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlInitWithFlags(0x100), NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS); /* one init still open */
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

TEST(system_versions_and_buffer_sizes)
{
    REQUIRE(machine("sys", "--gpus", "1", NULL) != NULL);
    char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    CHECK_EQ_INT(nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_ERROR_UNINITIALIZED);
    /* NVIDIA's NVML needs init for the CUDA version too (driver 580.159.04, emulator.md) */
    int v = -1;
    CHECK_EQ_INT(nvmlSystemGetCudaDriverVersion(&v), NVML_ERROR_UNINITIALIZED);
    CHECK_EQ_INT(nvmlSystemGetCudaDriverVersion_v2(&v), NVML_ERROR_UNINITIALIZED);
    CHECK_EQ_INT(v, -1);
    CHECK_EQ_INT(nvmlSystemGetNVMLVersion(buf, sizeof(buf)), NVML_SUCCESS); /* needs none */
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlSystemGetDriverVersion(buf, sizeof(buf)), NVML_SUCCESS);
    CHECK_EQ_STR(buf, "580.65.06");
    CHECK_EQ_INT(nvmlSystemGetDriverVersion(buf, 9), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(nvmlSystemGetDriverVersion(buf, 10), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlSystemGetDriverVersion(NULL, 80), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlSystemGetNVMLVersion(buf, sizeof(buf)), NVML_SUCCESS);
    CHECK_EQ_STR(buf, "13.580.65.06");
    CHECK_EQ_INT(nvmlSystemGetCudaDriverVersion(&v), NVML_SUCCESS);
    CHECK_EQ_INT(v, 13000);
    CHECK_EQ_INT(nvmlSystemGetCudaDriverVersion_v2(&v), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlSystemGetCudaDriverVersion(NULL), NVML_ERROR_INVALID_ARGUMENT);
    nvmlShutdown();
}

TEST(handles_by_index_uuid_and_bus_id)
{
    REQUIRE(machine("handles", "--gpus", "4", "--seed", "7", NULL) != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    unsigned n = 0;
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);
    nvmlDevice_t d = NULL, d2 = NULL;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(4, &d), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < 4; i++) {
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        nvmlPciInfo_t pci;
        unsigned idx = 99;
        REQUIRE_EQ_INT(nvmlDeviceGetHandleByIndex_v2(i, &d), NVML_SUCCESS);
        CHECK_EQ_INT(nvmlDeviceGetIndex(d, &idx), NVML_SUCCESS);
        CHECK_EQ_INT(idx, i);
        REQUIRE_EQ_INT(nvmlDeviceGetUUID(d, uuid, sizeof(uuid)), NVML_SUCCESS);
        CHECK_EQ_INT(strlen(uuid), 40);
        CHECK(strncmp(uuid, "GPU-", 4) == 0);
        CHECK_EQ_INT(nvmlDeviceGetHandleByUUID(uuid, &d2), NVML_SUCCESS);
        CHECK(d2 == d);
        REQUIRE_EQ_INT(nvmlDeviceGetPciInfo_v3(d, &pci), NVML_SUCCESS);
        CHECK_EQ_INT(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &d2), NVML_SUCCESS);
        CHECK(d2 == d);
        CHECK_EQ_INT(nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &d2), NVML_SUCCESS);
        CHECK(d2 == d);
        for (char *p = pci.busId; *p; p++) /* NVML accepts lower case too */
            *p = (char)tolower((unsigned char)*p);
        CHECK_EQ_INT(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &d2), NVML_SUCCESS);
        CHECK(d2 == d);
    }
    CHECK_EQ_INT(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d2),
                 NVML_ERROR_NOT_FOUND);
    CHECK_EQ_INT(nvmlDeviceGetHandleByUUID(NULL, &d2), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetHandleByPciBusId_v2("00000000:77:00.0", &d2), NVML_ERROR_NOT_FOUND);
    /* a handle that is not one of ours */
    unsigned idx;
    int junk;
    CHECK_EQ_INT(nvmlDeviceGetIndex((nvmlDevice_t)&junk, &idx), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetIndex(NULL, &idx), NVML_ERROR_INVALID_ARGUMENT);
    nvmlShutdown();
}

TEST(identity_strings_pci_and_capabilities)
{
    const char *path = machine("ident", "--gpus", "2", "--model", "A100", NULL);
    REQUIRE(path != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t d = dev(1);
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
    CHECK_EQ_INT(nvmlDeviceGetName(d, name, sizeof(name)), NVML_SUCCESS);
    CHECK_EQ_STR(name, "NVIDIA A100-SXM4-80GB");
    CHECK_EQ_INT(nvmlDeviceGetName(d, name, (unsigned)strlen("NVIDIA A100-SXM4-80GB")),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(nvmlDeviceGetUUID(d, uuid, 40), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(nvmlDeviceGetUUID(d, uuid, 41), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlDeviceGetUUID(d, NULL, 41), NVML_ERROR_INVALID_ARGUMENT);

    unsigned minor = 99;
    CHECK_EQ_INT(nvmlDeviceGetMinorNumber(d, &minor), NVML_SUCCESS);
    CHECK_EQ_INT(minor, 1);
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    CHECK_EQ_INT(nvmlDeviceGetSerial(d, serial, sizeof(serial)), NVML_SUCCESS);
    CHECK(strlen(serial) > 0);
    char vbios[NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE];
    CHECK_EQ_INT(nvmlDeviceGetVbiosVersion(d, vbios, sizeof(vbios)), NVML_SUCCESS);
    CHECK_EQ_INT(strlen(vbios), 14);
    CHECK_EQ_INT(nvmlDeviceGetVbiosVersion(d, vbios, 4), NVML_ERROR_INSUFFICIENT_SIZE);

    int major = 0, minor_cc = 0;
    CHECK_EQ_INT(nvmlDeviceGetCudaComputeCapability(d, &major, &minor_cc), NVML_SUCCESS);
    CHECK_EQ_INT(major, 8);
    CHECK_EQ_INT(minor_cc, 0);
    CHECK_EQ_INT(nvmlDeviceGetCudaComputeCapability(d, NULL, &minor_cc),
                 NVML_ERROR_INVALID_ARGUMENT);

    nvmlPciInfo_t pci;
    CHECK_EQ_INT(nvmlDeviceGetPciInfo_v3(d, &pci), NVML_SUCCESS);
    CHECK_EQ_STR(pci.busId, "00000000:2A:00.0");
    CHECK_EQ_STR(pci.busIdLegacy, "0000:2A:00.0");
    CHECK_EQ_INT(pci.bus, 0x2a);
    CHECK_EQ_INT(pci.domain, 0);
    CHECK_EQ_INT(pci.pciDeviceId & 0xffff, 0x10de);
    CHECK_EQ_INT(nvmlDeviceGetPciInfo_v3(d, NULL), NVML_ERROR_INVALID_ARGUMENT);

    unsigned cur = 9, pend = 9;
    CHECK_EQ_INT(nvmlDeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
    CHECK_EQ_INT(cur, NVML_DEVICE_MIG_DISABLE);
    CHECK_EQ_INT(emu(path, "set", "1", "mig=on", NULL), 0);
    CHECK_EQ_INT(nvmlDeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
    CHECK_EQ_INT(cur, NVML_DEVICE_MIG_ENABLE);
    CHECK_EQ_INT(pend, NVML_DEVICE_MIG_ENABLE);

    nvmlEnableState_t pm;
    CHECK_EQ_INT(nvmlDeviceGetPersistenceMode(d, &pm), NVML_SUCCESS);
    CHECK_EQ_INT(pm, NVML_FEATURE_ENABLED);
    nvmlShutdown();

    /* a T4 has no MIG */
    REQUIRE(machine("t4", "--gpus", "1", "--model", "T4", NULL) != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlDeviceGetMigMode(dev(0), &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetName(dev(0), name, sizeof(name)), NVML_SUCCESS);
    CHECK_EQ_STR(name, "Tesla T4");
    nvmlShutdown();
}

TEST(memory_info_v1_v2_follows_charges)
{
    const char *path = machine("mem", "--gpus", "2", "--memory", "16Gi", NULL);
    REQUIRE(path != NULL);
    struct emu_state *st = open_machine(path);
    REQUIRE(st != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t d = dev(1);
    nvmlMemory_t m;
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo(d, &m), NVML_SUCCESS);
    CHECK_EQ_U64(m.total, 16ull << 30);
    CHECK_EQ_U64(m.used, 0);
    CHECK_EQ_U64(m.free, 16ull << 30);

    REQUIRE_EQ_INT(emu_state_mem_charge(st, 1, 300 * MiB), 0);
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo(d, &m), NVML_SUCCESS);
    CHECK_EQ_U64(m.used, 300 * MiB);
    CHECK_EQ_U64(m.free, (16ull << 30) - 300 * MiB);
    CHECK_EQ_U64(m.used + m.free, m.total);

    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo_v2(d, &m2), NVML_SUCCESS);
    CHECK_EQ_U64(m2.total, 16ull << 30);
    CHECK_EQ_U64(m2.used, 300 * MiB);
    CHECK_EQ_U64(m2.reserved, 0);
    CHECK_EQ_U64(m2.free, m2.total - m2.used);
    /* a wrong version: FUNCTION_NOT_FOUND, as NVIDIA's NVML answers this call (emulator.md) */
    m2.version = 1;
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo_v2(d, &m2), NVML_ERROR_FUNCTION_NOT_FOUND);
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo_v2(d, NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo(d, NULL), NVML_ERROR_INVALID_ARGUMENT);

    /* the other GPU is untouched; giving back shows at once */
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo(dev(0), &m), NVML_SUCCESS);
    CHECK_EQ_U64(m.used, 0);
    emu_state_mem_uncharge(st, 1, 100 * MiB);
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo(d, &m), NVML_SUCCESS);
    CHECK_EQ_U64(m.used, 200 * MiB);
    emu_state_proc_release(st);
    REQUIRE_EQ_INT(nvmlDeviceGetMemoryInfo(d, &m), NVML_SUCCESS);
    CHECK_EQ_U64(m.used, 0);
    nvmlShutdown();
    emu_state_close(st);
}

/* Checks one running-process call that writes `stride`-byte records. */
static void check_records(nvmlReturn_t (*call)(nvmlDevice_t, unsigned int *, void *),
                          nvmlDevice_t d, unsigned stride, uint64_t bytes)
{
    unsigned char buf[4 * 32];
    unsigned n = 0;
    CHECK_EQ_INT(call(d, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(call(d, NULL, buf), NVML_ERROR_INVALID_ARGUMENT);
    n = 4;
    CHECK_EQ_INT(call(d, &n, NULL), NVML_ERROR_INVALID_ARGUMENT);
    memset(buf, 0xA5, sizeof(buf));
    n = 4;
    REQUIRE_EQ_INT(call(d, &n, buf), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 1);
    uint32_t pid, gi, ci;
    uint64_t used;
    memcpy(&pid, buf, 4);
    memcpy(&used, buf + 8, 8);
    CHECK_EQ_INT(pid, getpid());
    CHECK_EQ_U64(used, bytes);
    CHECK_EQ_INT(buf[4], 0); /* padding written as a struct copy writes it */
    if (stride >= 24) {
        memcpy(&gi, buf + 16, 4);
        memcpy(&ci, buf + 20, 4);
        CHECK_EQ_U64(gi, 0xFFFFFFFFu);
        CHECK_EQ_U64(ci, 0xFFFFFFFFu);
    }
    /* exactly one record of `stride` bytes was written: the next byte is untouched */
    CHECK(buf[stride - 1] != 0xA5);
    CHECK_EQ_INT(buf[stride], 0xA5);
}

static nvmlReturn_t call_v1(nvmlDevice_t d, unsigned int *n, void *b)
{
    return nvmlDeviceGetComputeRunningProcesses(d, n, b);
}
static nvmlReturn_t call_v2(nvmlDevice_t d, unsigned int *n, void *b)
{
    return nvmlDeviceGetComputeRunningProcesses_v2(d, n, b);
}
static nvmlReturn_t call_v3(nvmlDevice_t d, unsigned int *n, void *b)
{
    return nvmlDeviceGetComputeRunningProcesses_v3(d, n, b);
}

TEST(running_processes_each_stride)
{
    static const char *const strides[] = {"16", "24", "32"};
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof(name), "procs%s", strides[k]);
        const char *path = machine(name, "--gpus", "2", "--proc-info-stride", strides[k], NULL);
        REQUIRE(path != NULL);
        struct emu_state *st = open_machine(path);
        REQUIRE(st != NULL);
        CHECK_EQ_INT(emu_state_proc_info_stride(st), atoi(strides[k]));
        REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
        nvmlDevice_t d = dev(1);
        unsigned n = 0;
        CHECK_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL), NVML_SUCCESS);
        CHECK_EQ_INT(n, 0);
        REQUIRE_EQ_INT(emu_state_mem_charge(st, 1, 5 * MiB), 0);
        unsigned stride = (unsigned)atoi(strides[k]);
        check_records(call_v1, d, 16, 5 * MiB);
        check_records(call_v2, d, stride, 5 * MiB);
        check_records(call_v3, d, stride, 5 * MiB);
        n = 0; /* GPU 0 has none */
        CHECK_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(dev(0), &n, NULL), NVML_SUCCESS);
        CHECK_EQ_INT(n, 0);
        emu_state_proc_release(st);
        n = 0;
        CHECK_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL), NVML_SUCCESS);
        CHECK_EQ_INT(n, 0);
        nvmlShutdown();
        emu_state_close(st);
    }
}

TEST(topology_and_nvlink)
{
    REQUIRE(machine("topo", "--gpus", "4", "--numa", "0,0,1,1", "--nvlink", "pairs", NULL));
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlGpuTopologyLevel_t lvl;
    CHECK_EQ_INT(nvmlDeviceGetTopologyCommonAncestor(dev(0), dev(1), &lvl), NVML_SUCCESS);
    CHECK_EQ_INT(lvl, NVML_TOPOLOGY_SINGLE);
    CHECK_EQ_INT(nvmlDeviceGetTopologyCommonAncestor(dev(0), dev(2), &lvl), NVML_SUCCESS);
    CHECK_EQ_INT(lvl, NVML_TOPOLOGY_SYSTEM);
    CHECK_EQ_INT(nvmlDeviceGetTopologyCommonAncestor(dev(2), dev(2), &lvl), NVML_SUCCESS);
    CHECK_EQ_INT(lvl, NVML_TOPOLOGY_INTERNAL);
    CHECK_EQ_INT(nvmlDeviceGetTopologyCommonAncestor(dev(0), NULL, &lvl),
                 NVML_ERROR_INVALID_ARGUMENT);

    unsigned node = 9;
    CHECK_EQ_INT(nvmlDeviceGetNumaNodeId(dev(3), &node), NVML_SUCCESS);
    CHECK_EQ_INT(node, 1);

    /* pairs: every H100 link of GPU 0 goes to GPU 1 */
    nvmlPciInfo_t peer, pci1;
    REQUIRE_EQ_INT(nvmlDeviceGetPciInfo_v3(dev(1), &pci1), NVML_SUCCESS);
    int active = 0;
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
        nvmlEnableState_t on;
        REQUIRE_EQ_INT(nvmlDeviceGetNvLinkState(dev(0), l, &on), NVML_SUCCESS);
        if (on == NVML_FEATURE_ENABLED) {
            active++;
            CHECK_EQ_INT(nvmlDeviceGetNvLinkRemotePciInfo_v2(dev(0), l, &peer), NVML_SUCCESS);
            CHECK_EQ_STR(peer.busId, pci1.busId);
        }
    }
    CHECK_EQ_INT(active, 18);
    nvmlEnableState_t on;
    CHECK_EQ_INT(nvmlDeviceGetNvLinkState(dev(0), NVML_NVLINK_MAX_LINKS, &on),
                 NVML_ERROR_INVALID_ARGUMENT);
    nvmlShutdown();

    REQUIRE(machine("nolink", "--gpus", "2", "--nvlink", "none", "--numa", "-1,-1", NULL));
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlDeviceGetNvLinkState(dev(0), 0, &on), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetNvLinkRemotePciInfo_v2(dev(0), 0, &peer), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetNumaNodeId(dev(0), &node), NVML_ERROR_NOT_SUPPORTED);
    nvmlShutdown();
}

/* A fresh two-GPU machine with NVML initialized on it, sampling utilization in periods of
 * window_ms (NULL: the default); NULL when it cannot be made. */
static struct emu_state *nvml_machine(const char *name, const char *window_ms)
{
    const char *path = machine(name, "--gpus", "2", NULL);
    struct emu_state *st = path ? open_machine(path) : NULL;
    if (window_ms)
        setenv("ACCEL_EMU_UTIL_WINDOW_MS", window_ms, 1);
    if (st && nvmlInit_v2() != NVML_SUCCESS)
        st = emu_state_close(st);
    return st;
}

/* Undoes nvml_machine. */
static void nvml_machine_done(struct emu_state *st)
{
    nvmlShutdown();
    unsetenv("ACCEL_EMU_UTIL_WINDOW_MS");
    emu_state_close(st);
}

/* Two processes with work pending on one GPU take turns in time slices (issue 14): NVML's
 * per-process utilization shows each busy about half of a sample period (its own slices), the
 * device's the whole of it (their union). */
static bool two_halves(unsigned gpu, pid_t a, pid_t b)
{
    nvmlProcessUtilizationSample_t s[SAMPLES];
    unsigned n = SAMPLES;
    if (nvmlDeviceGetProcessUtilization(dev(gpu), s, &n, 0) != NVML_SUCCESS || n != 2)
        return false;
    bool sa = false, sb = false;
    for (unsigned i = 0; i < n; i++) {
        if (s[i].smUtil < 45 || s[i].smUtil > 55)
            return false;
        sa |= s[i].pid == (unsigned)a;
        sb |= s[i].pid == (unsigned)b;
    }
    return sa && sb;
}

TEST(time_sliced_processes_share_the_utilization)
{
    struct emu_state *st = nvml_machine("slices", "100");
    REQUIRE(st != NULL);
    int up[2], down[2];
    REQUIRE(pipe(up) == 0 && pipe(down) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        char c = emu_state_submit(st, 1, 0, 30ull * 1000000000ull, NULL, NULL) == 0 ? 'y' : 'n';
        if (write(up[1], &c, 1) != 1)
            _exit(1);
        close(down[1]);
        while (read(down[0], &c, 1) > 0) /* until the parent is done looking */
            ;
        _exit(0);
    }
    close(down[0]);
    char c = 0;
    REQUIRE(read(up[0], &c, 1) == 1);
    CHECK(c == 'y');
    uint64_t start, end;
    REQUIRE_EQ_INT(emu_state_submit(st, 1, 0, 30ull * 1000000000ull, &start, &end), 0);
    /* a bound on waiting for a whole 100 ms period after both were queued */
    CHECK(TAP_WAIT_UNTIL(two_halves(1, child, getpid()), 5000));
    nvmlUtilization_t u = {0, 0};
    CHECK_EQ_INT(nvmlDeviceGetUtilizationRates(dev(1), &u), NVML_SUCCESS);
    CHECK_EQ_INT(u.gpu, 100);
    close(down[1]);
    int status = 0;
    waitpid(child, &status, 0);
    close(up[0]);
    close(up[1]);
    emu_state_proc_release(st);
    nvml_machine_done(st);
}

TEST(utilization_from_the_timeline)
{
    struct emu_state *st = nvml_machine("util", "100");
    REQUIRE(st != NULL);
    nvmlUtilization_t u = {99, 99};
    CHECK_EQ_INT(nvmlDeviceGetUtilizationRates(dev(1), &u), NVML_SUCCESS);
    CHECK_EQ_INT(u.gpu, 0);
    CHECK_EQ_INT(u.memory, 0);
    /* the size query of an idle GPU: the driver's buffer, not the (no) busy processes */
    unsigned n = 0;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), NULL, &n, 0),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, DRIVER_SAMPLES);
    nvmlProcessUtilizationSample_t s[SAMPLES];
    n = SAMPLES;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, &n, 0), NVML_ERROR_NOT_FOUND);

    /* 30 s of work queued on GPU 1 by this process: once 100 ms of it have run, the whole
     * window is busy (a bound on waiting, not a timing assertion) */
    uint64_t start, end;
    REQUIRE_EQ_INT(emu_state_submit(st, 1, 0, 30ull * 1000000000ull, &start, &end), 0);
    CHECK(TAP_WAIT_UNTIL(nvmlDeviceGetUtilizationRates(dev(1), &u) == NVML_SUCCESS && u.gpu == 100,
                         10000));
    CHECK_EQ_INT(nvmlDeviceGetUtilizationRates(dev(0), &u), NVML_SUCCESS);
    CHECK_EQ_INT(u.gpu, 0);
    CHECK_EQ_INT(nvmlDeviceGetUtilizationRates(dev(1), NULL), NVML_ERROR_INVALID_ARGUMENT);

    /* busy: the same size, and a buffer below it (libvcuda's 64 entries once) is refused with
     * that size, though one sample would fit */
    n = 0;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), NULL, &n, 0),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, DRIVER_SAMPLES);
    n = 0;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, DRIVER_SAMPLES);
    n = 64;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, DRIVER_SAMPLES);
    n = DRIVER_SAMPLES - 1; /* the size is checked before the samples: nothing newer is found */
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, &n, ~0ull),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, DRIVER_SAMPLES);
    n = DRIVER_SAMPLES; /* exactly the driver's buffer is enough */
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, &n, 0), NVML_SUCCESS);
    CHECK_EQ_INT(n, 1);
    n = SAMPLES;
    REQUIRE_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, &n, 0), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(s[0].pid, getpid());
    CHECK(s[0].smUtil > 0 && s[0].smUtil <= 100);
    CHECK(s[0].timeStamp > 0);
    /* since that sample's timestamp the process has kept the GPU busy the whole time */
    unsigned long long seen = s[0].timeStamp;
    CHECK(TAP_WAIT_UNTIL(
        (n = SAMPLES, nvmlDeviceGetProcessUtilization(dev(1), s, &n, seen) == NVML_SUCCESS) &&
            s[0].timeStamp > seen,
        5000));
    CHECK_EQ_INT(s[0].smUtil, 100);
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, NULL, 0), NVML_ERROR_INVALID_ARGUMENT);
    n = SAMPLES;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(1), s, &n, ~0ull), NVML_ERROR_NOT_FOUND);
    n = SAMPLES;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(dev(0), s, &n, 0), NVML_ERROR_NOT_FOUND);
    nvml_machine_done(st);
}

/* MPS clients: a process holding memory counts as a client while a live server of a live
 * daemon runs for its user (state-mps.h); graphics processes: none, ever. */
TEST(mps_clients_and_graphics_processes)
{
    struct emu_state *st = nvml_machine("mpsprocs", NULL);
    REQUIRE(st != NULL);
    nvmlProcessInfo_t p[4];
    unsigned n = 4;
    REQUIRE_EQ_INT(emu_state_mem_charge(st, 1, 5 * MiB), 0);
    /* no daemon: memory holders are plain compute processes, not MPS clients */
    CHECK_EQ_INT(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);

    struct emu_mps_daemon cfg = {.pid = getpid(), .server_count = 1};
    snprintf(cfg.pipe_dir, sizeof(cfg.pipe_dir), "%s/mps-pipe", tap_tmpdir());
    cfg.servers[0] = (struct emu_mps_server){.pid = getpid(), .uid = getuid() + 1};
    int slot = -1;
    REQUIRE_EQ_INT(emu_state_mps_claim(st, &cfg, &slot), 0);
    n = 4; /* a server for another user: still not a client */
    CHECK_EQ_INT(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);

    cfg.servers[0].uid = getuid();
    emu_state_mps_publish(st, slot, &cfg);
    n = 0;
    CHECK_EQ_INT(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev(1), &n, NULL),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, 1);
    n = 4;
    REQUIRE_EQ_INT(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(p[0].pid, getpid());
    CHECK_EQ_U64(p[0].usedGpuMemory, 5 * MiB);
    CHECK_EQ_INT(p[0].gpuInstanceId, 0xFFFFFFFFu);
    n = 4; /* nothing held on GPU 0 */
    CHECK_EQ_INT(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev(0), &n, p), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev(1), NULL, p),
                 NVML_ERROR_INVALID_ARGUMENT);
    emu_state_mps_release(st, slot);
    n = 4;
    CHECK_EQ_INT(nvmlDeviceGetMPSComputeRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);

    n = 4;
    CHECK_EQ_INT(nvmlDeviceGetGraphicsRunningProcesses_v3(dev(1), &n, p), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);
    n = 0;
    CHECK_EQ_INT(nvmlDeviceGetGraphicsRunningProcesses_v3(dev(1), &n, NULL), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(nvmlDeviceGetGraphicsRunningProcesses_v3(dev(1), NULL, p),
                 NVML_ERROR_INVALID_ARGUMENT);
    emu_state_proc_release(st);
    nvmlDevice_t d1 = dev(1); /* handles outlive nvmlShutdown; the calls then fail */
    nvmlShutdown();
    CHECK_EQ_INT(nvmlDeviceGetGraphicsRunningProcesses_v3(d1, &n, p), NVML_ERROR_UNINITIALIZED);
    emu_state_close(st);
}

/* The versioned per-process utilization: version check, size query, samples from the same
 * timeline nvmlDeviceGetProcessUtilization reads. */
TEST(processes_utilization_info_v1)
{
    struct emu_state *st = nvml_machine("procutil", "100");
    REQUIRE(st != NULL);
    static nvmlProcessUtilizationInfo_v1_t s[SAMPLES];
    nvmlProcessesUtilizationInfo_t info = {.version = nvmlProcessesUtilizationInfo_v1};
    CHECK_EQ_INT(sizeof(nvmlProcessUtilizationInfo_v1_t), 40);
    CHECK_EQ_INT(sizeof(nvmlProcessesUtilizationInfo_t), 24);
    /* idle: no array asks for the driver's buffer (the H200: processSamplesCount 72) */
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(info.processSamplesCount, DRIVER_SAMPLES);
    info.procUtilArray = s;
    info.processSamplesCount = SAMPLES;
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info), NVML_ERROR_NOT_FOUND);

    uint64_t start, end;
    REQUIRE_EQ_INT(emu_state_submit(st, 1, 0, 30ull * 1000000000ull, &start, &end), 0);
    /* once a period with the work has ended: a sample for this process */
    CHECK(TAP_WAIT_UNTIL((info.processSamplesCount = SAMPLES,
                          nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info) == NVML_SUCCESS),
                         10000));
    /* size query while busy: still the driver's buffer, not the one busy process */
    info.processSamplesCount = 0;
    info.procUtilArray = NULL;
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(info.processSamplesCount, DRIVER_SAMPLES);
    info.procUtilArray = s;
    info.processSamplesCount = 64; /* too small an array, though one sample would fit */
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(info.processSamplesCount, DRIVER_SAMPLES);
    info.processSamplesCount = SAMPLES;
    memset(s, 0xff, sizeof(s));
    REQUIRE_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info), NVML_SUCCESS);
    REQUIRE_EQ_INT(info.processSamplesCount, 1);
    CHECK_EQ_INT(s[0].pid, getpid());
    CHECK(s[0].smUtil > 0 && s[0].smUtil <= 100);
    CHECK_EQ_INT(s[0].memUtil, 0);
    CHECK_EQ_INT(s[0].encUtil + s[0].decUtil + s[0].jpgUtil + s[0].ofaUtil, 0);
    CHECK(s[0].timeStamp > 0);
    /* newer samples than the last seen: the GPU has stayed busy, so 100 % */
    info.lastSeenTimeStamp = s[0].timeStamp;
    unsigned long long seen = s[0].timeStamp;
    CHECK(TAP_WAIT_UNTIL((info.processSamplesCount = SAMPLES,
                          nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info) == NVML_SUCCESS) &&
                             s[0].timeStamp > seen,
                         5000));
    CHECK_EQ_INT(s[0].smUtil, 100);
    info.lastSeenTimeStamp = ~0ull;
    info.processSamplesCount = SAMPLES;
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info), NVML_ERROR_NOT_FOUND);
    info.processSamplesCount = DRIVER_SAMPLES - 1; /* the size first, then the samples */
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(info.processSamplesCount, DRIVER_SAMPLES);
    info.lastSeenTimeStamp = 0;
    info.processSamplesCount = SAMPLES;
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(0), &info), NVML_ERROR_NOT_FOUND);
    info.version = nvmlProcessesUtilizationInfo_v1 + 1;
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), &info),
                 NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    CHECK_EQ_INT(nvmlDeviceGetProcessesUtilizationInfo(dev(1), NULL), NVML_ERROR_INVALID_ARGUMENT);
    nvml_machine_done(st);
}

/* Field values agree with the dedicated entry points; unknown fields are NOT_SUPPORTED per
 * entry while the others still answer. */
TEST(field_values)
{
    struct emu_state *st = nvml_machine("fields", NULL);
    REQUIRE(st != NULL);
    CHECK_EQ_INT(sizeof(nvmlFieldValue_t), 40);
    struct emu_gpu *g = emu_state_gpu(st, 1);
    emu_state_lock(st);
    g->ecc_vol_single_bit = 3;
    g->ecc_vol_double_bit = 1;
    g->ecc_single_bit = 7;
    g->ecc_double_bit = 2;
    g->pcie_replays = 5;
    g->remapped_corr = 4;
    g->remapped_unc = 6;
    g->remap_pending = 1;
    g->remap_failure = 0;
    emu_state_unlock(st);

    static const unsigned ids[] = {
        NVML_FI_DEV_ECC_CURRENT,
        NVML_FI_DEV_ECC_PENDING,
        NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
        NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
        NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
        NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        NVML_FI_DEV_REMAPPED_COR,
        NVML_FI_DEV_REMAPPED_UNC,
        NVML_FI_DEV_REMAPPED_PENDING,
        NVML_FI_DEV_REMAPPED_FAILURE,
        NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        92 /* RETIRED_PENDING_SBE: no page retirement here */,
        100000 /* no such field */,
    };
    static const unsigned long long want[] = {1, 1, 3, 1, 7, 2, 5, 4, 6, 1, 0};
    enum { N = sizeof(ids) / sizeof(ids[0]) };
    nvmlFieldValue_t v[N];
    memset(v, 0, sizeof(v));
    for (unsigned i = 0; i < N; i++)
        v[i].fieldId = ids[i];
    unsigned long long e0 = 0, e1 = 0;
    REQUIRE_EQ_INT(nvmlDeviceGetTotalEnergyConsumption(dev(1), &e0), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetFieldValues(dev(1), N, v), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetTotalEnergyConsumption(dev(1), &e1), NVML_SUCCESS);
    for (unsigned i = 0; i < 11; i++) {
        CHECK_EQ_INT(v[i].nvmlReturn, NVML_SUCCESS);
        unsigned long long got =
            v[i].valueType == NVML_VALUE_TYPE_UNSIGNED_INT ? v[i].value.uiVal : v[i].value.ullVal;
        if (got != want[i])
            tap_diag("field %u: %llu, want %llu", ids[i], got, want[i]);
        CHECK(got == want[i]);
        CHECK(v[i].timestamp > 0);
    }
    CHECK_EQ_INT(v[2].valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
    CHECK_EQ_INT(v[6].valueType, NVML_VALUE_TYPE_UNSIGNED_INT);
    CHECK_EQ_INT(v[11].nvmlReturn, NVML_SUCCESS);
    CHECK_EQ_INT(v[11].valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
    CHECK(v[11].value.ullVal >= e0 && v[11].value.ullVal <= e1);
    CHECK_EQ_INT(v[12].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(v[13].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);

    /* ECC turned off shows in the mode fields; GPU 0's counters are its own (zero) */
    __atomic_store_n(&g->ecc_disabled, 1, __ATOMIC_RELAXED);
    nvmlFieldValue_t m[2] = {{.fieldId = NVML_FI_DEV_ECC_CURRENT},
                             {.fieldId = NVML_FI_DEV_ECC_SBE_VOL_TOTAL}};
    REQUIRE_EQ_INT(nvmlDeviceGetFieldValues(dev(1), 1, m), NVML_SUCCESS);
    CHECK_EQ_INT(m[0].value.uiVal, 0);
    REQUIRE_EQ_INT(nvmlDeviceGetFieldValues(dev(0), 2, m), NVML_SUCCESS);
    CHECK_EQ_INT(m[0].value.uiVal, 1);
    CHECK_EQ_U64(m[1].value.ullVal, 0);
    CHECK_EQ_INT(nvmlDeviceGetFieldValues(dev(1), -1, m), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetFieldValues(dev(1), 1, NULL), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetFieldValues(dev(1), 0, NULL), NVML_SUCCESS);
    nvmlDevice_t d1 = dev(1);
    nvmlShutdown();
    CHECK_EQ_INT(nvmlDeviceGetFieldValues(d1, 1, m), NVML_ERROR_UNINITIALIZED);
    emu_state_close(st);
}

TEST(sensors_follow_accel_emu_set)
{
    const char *path = machine("sensors", "--gpus", "2", NULL);
    REQUIRE(path != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t d = dev(0);
    unsigned t = 0, p = 0, c = 0, cmax = 0;
    CHECK_EQ_INT(nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
    CHECK(t > 0 && t < 100);
    CHECK_EQ_INT(nvmlDeviceGetTemperature(d, (nvmlTemperatureSensors_t)1, &t),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &t),
                 NVML_SUCCESS);
    CHECK_EQ_INT(t, 89);
    CHECK_EQ_INT(nvmlDeviceGetTemperatureThreshold(d, (nvmlTemperatureThresholds_t)99, &t),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetMaxClockInfo(d, NVML_CLOCK_SM, &cmax), NVML_SUCCESS);
    CHECK_EQ_INT(cmax, 1980);

    REQUIRE_EQ_INT(emu(path, "set", "0", "temperature=71", "power=250.5", "sm_clock=1500",
                       "mem_clock=1200", "compute_mode=exclusive_process", NULL),
                   0);
    CHECK_EQ_INT(nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
    CHECK_EQ_INT(t, 71);
    CHECK_EQ_INT(nvmlDeviceGetPowerUsage(d, &p), NVML_SUCCESS);
    CHECK_EQ_INT(p, 250500);
    CHECK_EQ_INT(nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &c), NVML_SUCCESS);
    CHECK_EQ_INT(c, 1500);
    CHECK_EQ_INT(nvmlDeviceGetClockInfo(d, NVML_CLOCK_GRAPHICS, &c), NVML_SUCCESS);
    CHECK_EQ_INT(c, 1500);
    CHECK_EQ_INT(nvmlDeviceGetClockInfo(d, NVML_CLOCK_MEM, &c), NVML_SUCCESS);
    CHECK_EQ_INT(c, 1200);
    CHECK_EQ_INT(nvmlDeviceGetClockInfo(d, (nvmlClockType_t)9, &c), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetMaxClockInfo(d, NVML_CLOCK_SM, &cmax), NVML_SUCCESS);
    CHECK_EQ_INT(cmax, 1980);
    nvmlComputeMode_t mode;
    CHECK_EQ_INT(nvmlDeviceGetComputeMode(d, &mode), NVML_SUCCESS);
    CHECK_EQ_INT(mode, NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);
    /* GPU 1 unchanged */
    CHECK_EQ_INT(nvmlDeviceGetTemperature(dev(1), NVML_TEMPERATURE_GPU, &t), NVML_SUCCESS);
    CHECK(t != 71);

    unsigned long long ecc = 99;
    CHECK_EQ_INT(
        nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc),
        NVML_SUCCESS);
    CHECK_EQ_U64(ecc, 0);
    REQUIRE_EQ_INT(emu(path, "ecc", "0", "double", NULL), 0);
    REQUIRE_EQ_INT(emu(path, "ecc", "0", "single", NULL), 0);
    REQUIRE_EQ_INT(emu(path, "ecc", "0", "single", NULL), 0);
    CHECK_EQ_INT(nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                             NVML_AGGREGATE_ECC, &ecc),
                 NVML_SUCCESS);
    CHECK_EQ_U64(ecc, 1);
    CHECK_EQ_INT(
        nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &ecc),
        NVML_SUCCESS);
    CHECK_EQ_U64(ecc, 2);
    CHECK_EQ_INT(nvmlDeviceGetTotalEccErrors(d, (nvmlMemoryErrorType_t)5, NVML_VOLATILE_ECC, &ecc),
                 NVML_ERROR_INVALID_ARGUMENT);
    nvmlShutdown();
}

TEST(events_in_one_process)
{
    const char *path = machine("events", "--gpus", "2", NULL);
    REQUIRE(path != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlEventSet_t set = NULL;
    REQUIRE_EQ_INT(nvmlEventSetCreate(&set), NVML_SUCCESS);
    unsigned long long types = 0;
    CHECK_EQ_INT(nvmlDeviceGetSupportedEventTypes(dev(0), &types), NVML_SUCCESS);
    CHECK(types & nvmlEventTypeXidCriticalError);
    CHECK(types & nvmlEventTypeDoubleBitEccError);

    /* an XID posted before registering is not delivered */
    REQUIRE_EQ_INT(emu(path, "xid", "0", "13", NULL), 0);
    CHECK_EQ_INT(nvmlDeviceRegisterEvents(dev(0), 1ull << 40, set), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceRegisterEvents(dev(0), nvmlEventTypeXidCriticalError, NULL),
                 NVML_ERROR_INVALID_ARGUMENT);
    REQUIRE_EQ_INT(nvmlDeviceRegisterEvents(
                       dev(0), nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError, set),
                   NVML_SUCCESS);
    nvmlEventData_t e;
    CHECK_EQ_INT(nvmlEventSetWait_v2(set, &e, 0), NVML_ERROR_TIMEOUT);
    CHECK_EQ_INT(nvmlEventSetWait_v2(set, NULL, 0), NVML_ERROR_INVALID_ARGUMENT);

    /* GPU 1 is not registered; a single-bit ECC error is not asked for */
    REQUIRE_EQ_INT(emu(path, "xid", "1", "31", NULL), 0);
    REQUIRE_EQ_INT(emu(path, "ecc", "0", "single", NULL), 0);
    REQUIRE_EQ_INT(emu(path, "xid", "0", "43", NULL), 0);
    REQUIRE_EQ_INT(emu(path, "ecc", "0", "double", NULL), 0);
    REQUIRE_EQ_INT(nvmlEventSetWait_v2(set, &e, 5000), NVML_SUCCESS);
    CHECK(e.device == dev(0));
    CHECK_EQ_U64(e.eventType, nvmlEventTypeXidCriticalError);
    CHECK_EQ_U64(e.eventData, 43);
    CHECK_EQ_U64(e.gpuInstanceId, 0xFFFFFFFFu);
    REQUIRE_EQ_INT(nvmlEventSetWait_v2(set, &e, 5000), NVML_SUCCESS);
    CHECK_EQ_U64(e.eventType, nvmlEventTypeDoubleBitEccError);
    CHECK_EQ_INT(nvmlEventSetWait_v2(set, &e, 0), NVML_ERROR_TIMEOUT);
    CHECK_EQ_INT(nvmlEventSetFree(set), NVML_SUCCESS);
    nvmlShutdown();
    CHECK_EQ_INT(nvmlEventSetCreate(&set), NVML_ERROR_UNINITIALIZED);
}

TEST(lost_gpu_answers_gpu_is_lost_everywhere)
{
    const char *path = machine("lost", "--gpus", "3", NULL);
    REQUIRE(path != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t d = dev(2);
    nvmlEventSet_t set;
    REQUIRE_EQ_INT(nvmlEventSetCreate(&set), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
    REQUIRE_EQ_INT(emu(path, "lose", "2", NULL), 0);

    nvmlEventData_t e;
    REQUIRE_EQ_INT(nvmlEventSetWait_v2(set, &e, 5000), NVML_SUCCESS);
    CHECK_EQ_U64(e.eventData, 79);
    CHECK(e.device == d);

    char buf[128];
    unsigned u;
    int a, b;
    unsigned long long ull;
    nvmlMemory_t m;
    nvmlPciInfo_t pci;
    nvmlUtilization_t ut;
    nvmlEnableState_t en;
    nvmlGpuTopologyLevel_t lvl;
    nvmlComputeMode_t cm;
    nvmlProcessUtilizationSample_t s;
    const nvmlReturn_t L = NVML_ERROR_GPU_IS_LOST;
    CHECK_EQ_INT(nvmlDeviceGetUUID(d, buf, sizeof(buf)), L);
    CHECK_EQ_INT(nvmlDeviceGetName(d, buf, sizeof(buf)), L);
    CHECK_EQ_INT(nvmlDeviceGetSerial(d, buf, sizeof(buf)), L);
    CHECK_EQ_INT(nvmlDeviceGetVbiosVersion(d, buf, sizeof(buf)), L);
    CHECK_EQ_INT(nvmlDeviceGetIndex(d, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetMinorNumber(d, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetPciInfo_v3(d, &pci), L);
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo(d, &m), L);
    CHECK_EQ_INT(nvmlDeviceGetCudaComputeCapability(d, &a, &b), L);
    CHECK_EQ_INT(nvmlDeviceGetMigMode(d, &u, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetNumaNodeId(d, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetTopologyCommonAncestor(d, dev(0), &lvl), L);
    CHECK_EQ_INT(nvmlDeviceGetTopologyCommonAncestor(dev(0), d, &lvl), L);
    CHECK_EQ_INT(nvmlDeviceGetNvLinkState(d, 0, &en), L);
    CHECK_EQ_INT(nvmlDeviceGetNvLinkRemotePciInfo_v2(d, 0, &pci), L);
    CHECK_EQ_INT(nvmlDeviceGetUtilizationRates(d, &ut), L);
    u = 1;
    CHECK_EQ_INT(nvmlDeviceGetProcessUtilization(d, &s, &u, 0), L);
    u = 0;
    CHECK_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(d, &u, NULL), L);
    CHECK_EQ_INT(nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetPowerUsage(d, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetMaxClockInfo(d, NVML_CLOCK_SM, &u), L);
    CHECK_EQ_INT(nvmlDeviceGetComputeMode(d, &cm), L);
    CHECK_EQ_INT(nvmlDeviceGetPersistenceMode(d, &en), L);
    CHECK_EQ_INT(nvmlDeviceGetTotalEccErrors(d, 0, 0, &ull), L);
    CHECK_EQ_INT(nvmlDeviceGetSupportedEventTypes(d, &ull), L);
    CHECK_EQ_INT(nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), L);
    nvmlDevice_t h;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(2, &h), L);
    /* the others still work */
    CHECK_EQ_INT(nvmlDeviceGetName(dev(1), buf, sizeof(buf)), NVML_SUCCESS);

    REQUIRE_EQ_INT(emu(path, "restore", "2", NULL), 0);
    CHECK_EQ_INT(nvmlDeviceGetName(d, buf, sizeof(buf)), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(2, &h), NVML_SUCCESS);
    CHECK(h == d);
    nvmlEventSetFree(set);
    nvmlShutdown();
}

/* Not NVML's: the emulator's hooks for our own loader (src/emu/nvml.c). */
void accel_emu_nvml_quiet(void);
const char *accel_emu_nvml_init_error(void);

/* Runs nvmlInit_v2 with stderr sent to a file; what it wrote lands in buf. */
static nvmlReturn_t init_capturing_stderr(char *buf, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/stderr", tap_tmpdir());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    REQUIRE(saved >= 0);
    dup2(fd, 2);
    nvmlReturn_t r = nvmlInit_v2();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    return r;
}

/* A program that is not ours gets one stderr line saying what to do; our loader turns it off
 * and reads the same reason from accel_emu_nvml_init_error() instead. */
TEST(init_failure_one_line_or_quiet)
{
    char out[1024];
    unsetenv("ACCEL_EMU_STATE");
    CHECK_EQ_INT(init_capturing_stderr(out, sizeof(out)), NVML_ERROR_DRIVER_NOT_LOADED);
    CHECK_EQ_STR(out, "accel-emu: no emulated machine: set ACCEL_EMU_STATE to a file made by "
                      "`accel-emu init`\n");
    const char *why = accel_emu_nvml_init_error();
    REQUIRE(why != NULL);
    CHECK(strstr(out, why) != NULL);

    accel_emu_nvml_quiet();
    setenv("ACCEL_EMU_STATE", "/nonexistent/state", 1);
    CHECK_EQ_INT(init_capturing_stderr(out, sizeof(out)), NVML_ERROR_DRIVER_NOT_LOADED);
    CHECK_EQ_STR(out, "");
    why = accel_emu_nvml_init_error();
    REQUIRE(why != NULL);
    CHECK(strstr(why, "/nonexistent/state") != NULL);

    REQUIRE(machine("why", "--gpus", "1", NULL) != NULL);
    REQUIRE_EQ_INT(nvmlInit_v2(), NVML_SUCCESS);
    CHECK(accel_emu_nvml_init_error() == NULL);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

int main(int argc, char **argv)
{
    if (!emu_cli_path())
        tap_skip_all("accel-emu is not built");
    return tap_main(argc, argv);
}
