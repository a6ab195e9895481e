/* test-mig — MIG and VFIO on the emulator through the emulated libnvidia-ml.so.1 and
 * libcuda.so.1: GPU instance profiles and placements as NVIDIA documents them, the mode (pending
 * while processes run, current after the reset), GPU and compute instances created, listed and
 * destroyed with the driver's errors (MIG mode off, no room, in use), MIG device handles and
 * UUIDs, per-instance memory, CUDA on a MIG device named by CUDA_VISIBLE_DEVICES (its memory and
 * SMs, the process seen on its instance), a GPU bound to vfio-pci vanishing from NVML and
 * CUDA, and a container's view (ACCEL_EMU_DEV_ROOT: only the GPUs with a device node). The facts
 * and their sources: docs/emulator.md, "MIG", "VFIO" and "Containers".
 *
 * Machines are made with accel-emu (its path from $ACCEL_BUILD_ROOT); CUDA runs in child
 * processes (a probe forked here, or tests/emu/emu-hold for a process holding memory). */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_api.h"
#include "emu-cli.h"
#include "nvml_api.h"
#include "tap.h"

#define MiB (1024ull * 1024ull)

static char hold_bin[4096];
static const char *state_path;

#define emu_out(out, len, ...) emu_cli_run(state_path, out, len, __VA_ARGS__)
#define EMU(...) emu_cli_run(state_path, NULL, 0, __VA_ARGS__, (const char *)NULL)

/* A fresh machine made the current one; NVML initialized on it. */
#define machine(...) ((state_path = emu_cli_machine(__VA_ARGS__)) && nvmlInit_v2() == NVML_SUCCESS)

static nvmlDevice_t dev(unsigned i)
{
    nvmlDevice_t d = NULL;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(i, &d), NVML_SUCCESS);
    return d;
}

static void mig_on(nvmlDevice_t d)
{
    nvmlReturn_t act = NVML_ERROR_UNKNOWN;
    REQUIRE_EQ_INT(nvmlDeviceSetMigMode(d, NVML_DEVICE_MIG_ENABLE, &act), NVML_SUCCESS);
    REQUIRE_EQ_INT(act, NVML_SUCCESS);
}

/* ---- a CUDA process holding memory (tests/emu/emu-hold) ---- */

struct hold {
    pid_t pid;
    int to, from;
};

/* emu-hold DEVICE MIB with CUDA_VISIBLE_DEVICES=cvd (NULL: unset); false when it did not get
 * ready (its CUDA setup failed). */
static bool hold_start(struct hold *h, const char *cvd, int device, unsigned mib)
{
    int in[2], out[2];
    if (pipe(in) < 0 || pipe(out) < 0)
        return false;
    char dv[16], mb[16];
    snprintf(dv, sizeof(dv), "%d", device);
    snprintf(mb, sizeof(mb), "%u", mib);
    h->pid = fork();
    if (h->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        if (cvd)
            setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        execl(hold_bin, hold_bin, dv, mb, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    h->to = in[1];
    h->from = out[0];
    char buf[64] = "";
    ssize_t n = read(h->from, buf, sizeof(buf) - 1);
    return n > 0 && strncmp(buf, "ready ", 6) == 0;
}

/* One "alloc MIB" line: 0 when the child got it, else the CUresult. */
static int hold_alloc(struct hold *h, unsigned mib)
{
    char line[32], buf[64] = "";
    int n = snprintf(line, sizeof(line), "alloc %u\n", mib);
    if (write(h->to, line, (size_t)n) != n || read(h->from, buf, sizeof(buf) - 1) <= 0)
        return -1;
    return strncmp(buf, "ok", 2) == 0 ? 0 : atoi(buf + 6);
}

static void hold_stop(struct hold *h)
{
    close(h->to);
    close(h->from);
    int st;
    waitpid(h->pid, &st, 0);
}

/* ---- a CUDA probe: what the emulated libcuda shows this process ---- */

#define LOAD(h, name) __typeof__(name) *p_##name = (__typeof__(name) *)dlsym(h, #name)

/* In a child with CUDA_VISIBLE_DEVICES=cvd (NULL: unset): "init R count N" then, per device,
 * "dev I name=NAME mem=MIB sms=S uuid=HEX bus=BUSID" lines, into out. */
static bool cuda_probe(const char *cvd, char *out, size_t len)
{
    int p[2];
    if (pipe(p) < 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        FILE *f = fdopen(p[1], "w");
        if (cvd)
            setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        if (!h || !f)
            _exit(10);
        LOAD(h, cuInit);
        LOAD(h, cuDeviceGetCount);
        LOAD(h, cuDeviceGetName);
        LOAD(h, cuDeviceTotalMem_v2);
        LOAD(h, cuDeviceGetAttribute);
        LOAD(h, cuDeviceGetUuid);
        LOAD(h, cuDeviceGetPCIBusId);
        int n = 0;
        CUresult r = p_cuInit(0);
        if (r == CUDA_SUCCESS)
            p_cuDeviceGetCount(&n);
        fprintf(f, "init %d count %d\n", (int)r, n);
        for (int i = 0; i < n; i++) {
            char name[256], bus[32];
            size_t mem = 0;
            int sms = 0;
            CUuuid u;
            p_cuDeviceGetName(name, sizeof(name), i);
            p_cuDeviceTotalMem_v2(&mem, i);
            p_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, i);
            p_cuDeviceGetUuid(&u, i);
            p_cuDeviceGetPCIBusId(bus, sizeof(bus), i);
            fprintf(f, "dev %d name=%s mem=%llu sms=%d uuid=", i, name,
                    (unsigned long long)(mem / MiB), sms);
            for (int k = 0; k < 16; k++)
                fprintf(f, "%02x", (unsigned char)u.bytes[k]);
            fprintf(f, " bus=%s\n", bus);
        }
        fclose(f);
        _exit(0);
    }
    close(p[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < len && (r = read(p[0], out + got, len - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(p[0]);
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* "MIG-xxxxxxxx-xxxx-..." → the 32 hex digits CUDA's CUuuid holds. */
static void uuid_hex(const char *uuid, char *hex)
{
    size_t n = 0;
    for (const char *p = strchr(uuid, '-') + 1; *p && n < 32; p++)
        if (*p != '-')
            hex[n++] = *p;
    hex[n] = '\0';
}

/* ---- profiles and placements ---- */

TEST(profiles_and_placements_of_an_h100)
{
    REQUIRE(machine("profiles", "--gpus", "1", "--model", "H100", NULL));
    nvmlDevice_t d = dev(0);
    unsigned cur = 9, pend = 9;
    CHECK_EQ_INT(nvmlDeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
    CHECK_EQ_INT(cur, NVML_DEVICE_MIG_DISABLE);
    CHECK_EQ_INT(pend, NVML_DEVICE_MIG_DISABLE);

    /* nvidia-smi mig -lgip of an H100 80GB HBM3: ID, instances, SMs, memory (MiB), engines;
     * the unversioned call answers with MIG mode off */
    static const struct {
        unsigned profile, id, slices, count, sms, ce, dec, jpeg, ofa;
        unsigned long long mib;
    } want[] = {
        {NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, 1, 7, 16, 1, 1, 1, 0, 9984},
        {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, 1, 1, 16, 1, 1, 1, 1, 9984},
        {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, 1, 4, 26, 1, 1, 1, 0, 20096},
        {NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, 3, 32, 2, 2, 2, 0, 20096},
        {NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, 2, 60, 3, 3, 3, 0, 40448},
        {NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, 1, 64, 4, 4, 4, 0, 40448},
        {NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, 1, 132, 8, 7, 7, 1, 81152},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        nvmlGpuInstanceProfileInfo_t info;
        CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfo(d, want[i].profile, &info), NVML_SUCCESS);
        CHECK_EQ_INT(info.id, want[i].id);
        CHECK_EQ_INT(info.sliceCount, want[i].slices);
        CHECK_EQ_INT(info.instanceCount, want[i].count);
        CHECK_EQ_INT(info.multiprocessorCount, want[i].sms);
        CHECK_EQ_INT(info.copyEngineCount, want[i].ce);
        CHECK_EQ_INT(info.decoderCount, want[i].dec);
        CHECK_EQ_INT(info.jpegCount, want[i].jpeg);
        CHECK_EQ_INT(info.ofaCount, want[i].ofa);
        CHECK_EQ_U64(info.memorySizeMB, want[i].mib);
        CHECK_EQ_INT(info.isP2pSupported, 0);
    }
    nvmlGpuInstanceProfileInfo_t info;
    /* a profile the board lacks; the end of the profile list (the documented enumeration) */
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfo(d, NVML_GPU_INSTANCE_PROFILE_8_SLICE, &info),
                 NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfo(d, NVML_GPU_INSTANCE_PROFILE_COUNT, &info),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfo(d, 0, NULL), NVML_ERROR_INVALID_ARGUMENT);
    /* the versioned call wants MIG mode on */
    nvmlGpuInstanceProfileInfo_v2_t v2 = {.version = nvmlGpuInstanceProfileInfo_v2};
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfoV(d, 0, &v2), NVML_ERROR_NOT_SUPPORTED);

    /* placements "regardless of whether MIG is enabled": 3g on halves, 1g on slices 0-6, 1g
     * with twice the memory on even slices */
    unsigned n = 0;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 9, NULL, &n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 2);
    nvmlGpuInstancePlacement_t pl[8];
    n = 8;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 9, pl, &n), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 2);
    CHECK(pl[0].start == 0 && pl[0].size == 4 && pl[1].start == 4 && pl[1].size == 4);
    n = 8;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 19, pl, &n), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 7);
    for (unsigned k = 0; k < n; k++)
        CHECK(pl[k].start == k && pl[k].size == 1);
    n = 8;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 15, pl, &n), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 4);
    CHECK(pl[3].start == 6 && pl[3].size == 2);
    n = 1;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 14, pl, &n),
                 NVML_ERROR_INSUFFICIENT_SIZE);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 3, pl, &n),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 9, pl, NULL),
                 NVML_ERROR_INVALID_ARGUMENT);

    /* MIG mode off: nothing can be created or counted */
    nvmlGpuInstance_t gi;
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstance(d, 19, &gi), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceRemainingCapacity(d, 19, &n), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceById(d, 0, &gi), NVML_ERROR_NOT_SUPPORTED);
    unsigned max = 99;
    CHECK_EQ_INT(nvmlDeviceGetMaxMigDeviceCount(d, &max), NVML_SUCCESS);
    CHECK_EQ_INT(max, 0);
    nvmlDevice_t m;
    CHECK_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 0, &m), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

TEST(boards_without_mig_and_other_tables)
{
    REQUIRE(machine("l4", "--gpus", "1", "--model", "L4", NULL));
    nvmlDevice_t d = dev(0);
    unsigned cur, pend, n;
    nvmlReturn_t act;
    nvmlGpuInstanceProfileInfo_t info;
    CHECK_EQ_INT(nvmlDeviceGetMigMode(d, &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceSetMigMode(d, NVML_DEVICE_MIG_ENABLE, &act), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfo(d, 0, &info), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstancePossiblePlacements_v2(d, 19, NULL, &n),
                 NVML_ERROR_NOT_SUPPORTED);
    CHECK_NE_INT(EMU("set", "0", "mig=on"), 0);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);

    /* the A100s' and the H200's tables (MIG User Guide): names come from the memory size */
    static const struct {
        const char *model;
        unsigned sms_7g;
        unsigned long long mib_1g;
    } boards[] = {{"A100", 98, 81920 / 8}, {"A100-40", 98, 40960 / 8}, {"H200", 132, 143771 / 8}};
    for (size_t b = 0; b < 3; b++) {
        REQUIRE(machine("board", "--gpus", "1", "--model", boards[b].model, NULL));
        CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfo(dev(0), 4, &info), NVML_SUCCESS);
        CHECK_EQ_INT(info.multiprocessorCount, boards[b].sms_7g);
        CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfo(dev(0), 0, &info), NVML_SUCCESS);
        CHECK_EQ_U64(info.memorySizeMB, boards[b].mib_1g);
        CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
    }
    char out[4096];
    REQUIRE(machine("a100", "--gpus", "1", "--model", "A100-40", NULL));
    CHECK_EQ_INT(EMU("set", "0", "mig=on"), 0);
    CHECK_EQ_INT(emu_out(out, sizeof(out), "mig", "0", "create", "1g.5gb,2g.10gb,4g.20gb", NULL),
                 0);
    /* the MIG User Guide's own example: -cgi 19,14,5 on an empty A100 gave GPU instances 13, 5
     * and 1 */
    CHECK(strstr(out, "GPU instance ID 13 on GPU  0 using profile MIG 1g.5gb (ID 19)") != NULL);
    CHECK(strstr(out, "GPU instance ID  5 on GPU  0 using profile MIG 2g.10gb (ID 14)") != NULL);
    CHECK(strstr(out, "GPU instance ID  1 on GPU  0 using profile MIG 4g.20gb (ID  5)") != NULL);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

/* ---- mode ---- */

TEST(mig_mode_is_pending_while_the_gpu_is_busy)
{
    REQUIRE(machine("mode", "--gpus", "2", NULL));
    nvmlDevice_t d = dev(0);
    nvmlReturn_t act = NVML_ERROR_UNKNOWN;
    unsigned cur, pend;
    CHECK_EQ_INT(nvmlDeviceSetMigMode(d, NVML_DEVICE_MIG_ENABLE, NULL),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceSetMigMode(d, 2, &act), NVML_ERROR_INVALID_ARGUMENT);

    struct hold h;
    REQUIRE(hold_start(&h, NULL, 0, 64));
    /* the activation (a GPU reset) fails while a process is on the GPU: pending */
    CHECK_EQ_INT(nvmlDeviceSetMigMode(d, NVML_DEVICE_MIG_ENABLE, &act), NVML_SUCCESS);
    CHECK_EQ_INT(act, NVML_ERROR_IN_USE);
    CHECK_EQ_INT(nvmlDeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
    CHECK(cur == NVML_DEVICE_MIG_DISABLE && pend == NVML_DEVICE_MIG_ENABLE);
    CHECK_EQ_INT(EMU("reset", "0"), 1); /* refused: busy */
    CHECK_EQ_INT(EMU("set", "0", "mig=on"), 1);
    /* the other GPU is idle: at once */
    CHECK_EQ_INT(EMU("set", "1", "mig=on"), 0);
    CHECK_EQ_INT(nvmlDeviceGetMigMode(dev(1), &cur, &pend), NVML_SUCCESS);
    CHECK(cur == NVML_DEVICE_MIG_ENABLE && pend == NVML_DEVICE_MIG_ENABLE);
    hold_stop(&h);

    CHECK_EQ_INT(EMU("reset", "0"), 0);
    CHECK_EQ_INT(nvmlDeviceGetMigMode(d, &cur, &pend), NVML_SUCCESS);
    CHECK(cur == NVML_DEVICE_MIG_ENABLE && pend == NVML_DEVICE_MIG_ENABLE);
    /* MIG mode on: the GPU's utilization is not reported (nvmlDeviceGetUtilizationRates) */
    nvmlUtilization_t u;
    CHECK_EQ_INT(nvmlDeviceGetUtilizationRates(d, &u), NVML_ERROR_NOT_SUPPORTED);
    unsigned max = 0;
    CHECK_EQ_INT(nvmlDeviceGetMaxMigDeviceCount(d, &max), NVML_SUCCESS);
    CHECK_EQ_INT(max, 7);
    /* the mode change is a reset: the instances are gone with it */
    nvmlGpuInstance_t gi;
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstance(d, 19, &gi), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlDeviceSetMigMode(d, NVML_DEVICE_MIG_DISABLE, &act), NVML_SUCCESS);
    CHECK_EQ_INT(act, NVML_SUCCESS);
    nvmlGpuInstanceInfo_t gii;
    CHECK_EQ_INT(nvmlGpuInstanceGetInfo(gi, &gii), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

/* ---- GPU and compute instances ---- */

TEST(gpu_instances_placements_and_capacity)
{
    REQUIRE(machine("gi", "--gpus", "1", NULL));
    nvmlDevice_t d = dev(0);
    mig_on(d);
    nvmlGpuInstanceProfileInfo_v2_t v2 = {.version = nvmlGpuInstanceProfileInfo_v2};
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfoV(d, NVML_GPU_INSTANCE_PROFILE_3_SLICE, &v2),
                 NVML_SUCCESS);
    CHECK_EQ_STR(v2.name, "MIG 3g.40gb");
    CHECK_EQ_INT(v2.id, 9);
    nvmlGpuInstanceProfileInfo_v3_t v3 = {.version = nvmlGpuInstanceProfileInfo_v3};
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfoV(d, NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                                                      (nvmlGpuInstanceProfileInfo_v2_t *)&v3),
                 NVML_SUCCESS);
    CHECK_EQ_STR(v3.name, "MIG 1g.10gb");
    CHECK_EQ_U64(v3.memorySizeMB, 9984);
    v2.version = 7;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceProfileInfoV(d, 0, &v2), NVML_ERROR_INVALID_ARGUMENT);

    unsigned left = 0;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceRemainingCapacity(d, 19, &left), NVML_SUCCESS);
    CHECK_EQ_INT(left, 7);
    /* the driver's own choice: the highest free placement (1g on slice 6: ID 13) */
    nvmlGpuInstance_t a, b, c, x;
    nvmlGpuInstanceInfo_t info;
    REQUIRE_EQ_INT(nvmlDeviceCreateGpuInstance(d, 19, &a), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlGpuInstanceGetInfo(a, &info), NVML_SUCCESS);
    CHECK(info.device == d);
    CHECK_EQ_INT(info.id, 13);
    CHECK_EQ_INT(info.profileId, 19);
    CHECK(info.placement.start == 6 && info.placement.size == 1);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceRemainingCapacity(d, 19, &left), NVML_SUCCESS);
    CHECK_EQ_INT(left, 6);
    /* a 3g fits only on the first half now: ID 1 */
    REQUIRE_EQ_INT(nvmlDeviceCreateGpuInstance(d, 9, &b), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlGpuInstanceGetInfo(b, &info), NVML_SUCCESS);
    CHECK_EQ_INT(info.id, 1);
    CHECK(info.placement.start == 0 && info.placement.size == 4);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceRemainingCapacity(d, 9, &left), NVML_SUCCESS);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstance(d, 9, &x), NVML_ERROR_INSUFFICIENT_RESOURCES);
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstance(d, 0, &x), NVML_ERROR_INSUFFICIENT_RESOURCES);
    /* placements: taken, of another size, not one of the profile's */
    nvmlGpuInstancePlacement_t p = {4, 4};
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstanceWithPlacement(d, 9, &p, &x),
                 NVML_ERROR_INSUFFICIENT_RESOURCES);
    p = (nvmlGpuInstancePlacement_t){4, 2};
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstanceWithPlacement(d, 19, &p, &x),
                 NVML_ERROR_INVALID_ARGUMENT);
    p = (nvmlGpuInstancePlacement_t){7, 1};
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstanceWithPlacement(d, 19, &p, &x),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstanceWithPlacement(d, 19, NULL, &x),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstance(d, 3, &x), NVML_ERROR_INVALID_ARGUMENT);
    p = (nvmlGpuInstancePlacement_t){5, 1};
    REQUIRE_EQ_INT(nvmlDeviceCreateGpuInstanceWithPlacement(d, 19, &p, &c), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlGpuInstanceGetInfo(c, &info), NVML_SUCCESS);
    CHECK_EQ_INT(info.id, 12);
    /* +me: one at a time */
    REQUIRE_EQ_INT(nvmlDeviceCreateGpuInstance(d, 20, &x), NVML_SUCCESS);
    nvmlGpuInstance_t y;
    CHECK_EQ_INT(nvmlDeviceCreateGpuInstance(d, 20, &y), NVML_ERROR_INSUFFICIENT_RESOURCES);
    CHECK_EQ_INT(nvmlGpuInstanceDestroy(x), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlGpuInstanceGetInfo(x, &info), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlGpuInstanceDestroy(x), NVML_ERROR_INVALID_ARGUMENT);

    /* lists and look-ups */
    nvmlGpuInstance_t list[7];
    unsigned n = 0;
    CHECK_EQ_INT(nvmlDeviceGetGpuInstances(d, 19, list, &n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstances(d, 19, NULL, &n), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstances(d, 14, list, &n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceById(d, 13, &x), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlGpuInstanceGetInfo(x, &info), NVML_SUCCESS);
    CHECK_EQ_INT(info.id, 13);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceById(d, 3, &x), NVML_ERROR_NOT_FOUND);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

TEST(compute_instances_in_a_gpu_instance)
{
    REQUIRE(machine("ci", "--gpus", "1", NULL));
    nvmlDevice_t d = dev(0);
    mig_on(d);
    nvmlGpuInstance_t gi;
    REQUIRE_EQ_INT(nvmlDeviceCreateGpuInstance(d, 9, &gi), NVML_SUCCESS); /* 3g.40gb */
    nvmlComputeInstanceProfileInfo_t info;
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceProfileInfo(
                     gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                     NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info),
                 NVML_SUCCESS);
    CHECK_EQ_INT(info.id, 0);
    CHECK_EQ_INT(info.sliceCount, 1);
    CHECK_EQ_INT(info.instanceCount, 3);
    CHECK_EQ_INT(info.multiprocessorCount, 20);
    CHECK_EQ_INT(info.sharedCopyEngineCount, 3);
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceProfileInfo(
                     gi, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0, &info),
                 NVML_SUCCESS);
    CHECK_EQ_INT(info.multiprocessorCount, 60);
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceProfileInfo(
                     gi, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 0, &info),
                 NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceProfileInfo(
                     gi, NVML_COMPUTE_INSTANCE_PROFILE_COUNT, 0, &info),
                 NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 1, &info),
                 NVML_ERROR_INVALID_ARGUMENT);
    nvmlComputeInstanceProfileInfo_v2_t v2 = {.version = nvmlComputeInstanceProfileInfo_v2};
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 0, 0, &v2), NVML_SUCCESS);
    CHECK_EQ_STR(v2.name, "MIG 1c.3g.40gb");
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, 2, 0, &v2), NVML_SUCCESS);
    CHECK_EQ_STR(v2.name, "MIG 3g.40gb");

    unsigned n = 0;
    nvmlComputeInstancePlacement_t pl[8];
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 0, NULL, &n),
                 NVML_SUCCESS);
    CHECK_EQ_INT(n, 3);
    n = 8;
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 1, pl, &n), NVML_SUCCESS);
    CHECK(n == 1 && pl[0].start == 0 && pl[0].size == 2);

    nvmlComputeInstance_t c0, c1, x;
    nvmlComputeInstanceInfo_t ci;
    REQUIRE_EQ_INT(nvmlGpuInstanceCreateComputeInstance(gi, 0, &c0), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlComputeInstanceGetInfo_v2(c0, &ci), NVML_SUCCESS);
    CHECK(ci.device == d && ci.gpuInstance == gi);
    CHECK_EQ_INT(ci.id, 0);
    CHECK_EQ_INT(ci.profileId, 0);
    CHECK(ci.placement.start == 0 && ci.placement.size == 1);
    /* 2c needs slices 0-1: taken */
    CHECK_EQ_INT(nvmlGpuInstanceCreateComputeInstance(gi, 1, &x),
                 NVML_ERROR_INSUFFICIENT_RESOURCES);
    nvmlComputeInstancePlacement_t p = {2, 1};
    REQUIRE_EQ_INT(nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, &p, &c1), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlComputeInstanceGetInfo_v2(c1, &ci), NVML_SUCCESS);
    CHECK_EQ_INT(ci.id, 1);
    CHECK(ci.placement.start == 2);
    p = (nvmlComputeInstancePlacement_t){3, 1};
    CHECK_EQ_INT(nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, &p, &x),
                 NVML_ERROR_INVALID_ARGUMENT);
    unsigned left = 0;
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0, &left), NVML_SUCCESS);
    CHECK_EQ_INT(left, 1);
    nvmlComputeInstance_t list[7];
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstances(gi, 0, list, &n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceById(gi, 1, &x), NVML_SUCCESS);
    CHECK(x == c1);
    CHECK_EQ_INT(nvmlGpuInstanceGetComputeInstanceById(gi, 5, &x), NVML_ERROR_NOT_FOUND);

    /* a GPU instance with compute instances is in use; the compute instances go first */
    CHECK_EQ_INT(nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE);
    CHECK_EQ_INT(nvmlComputeInstanceDestroy(c0), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlComputeInstanceGetInfo_v2(c0, &ci), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlComputeInstanceDestroy(c1), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlGpuInstanceDestroy(gi), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

TEST(mig_device_handles_and_uuids)
{
    REQUIRE(machine("handles", "--gpus", "1", NULL));
    nvmlDevice_t d = dev(0);
    mig_on(d);
    char out[4096];
    REQUIRE_EQ_INT(emu_out(out, sizeof(out), "mig", "0", "create", "1g.10gb,3g.40gb", NULL), 0);
    /* NVML's order: by GPU instance ID (3g: 1, 1g: 13) */
    nvmlDevice_t m0, m1, m;
    REQUIRE_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 0, &m0), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 1, &m1), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 2, &m), NVML_ERROR_NOT_FOUND);
    CHECK_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 7, &m), NVML_ERROR_INVALID_ARGUMENT);
    unsigned is = 9, id = 99, idx = 9;
    CHECK_EQ_INT(nvmlDeviceIsMigDeviceHandle(m0, &is), NVML_SUCCESS);
    CHECK_EQ_INT(is, 1);
    CHECK_EQ_INT(nvmlDeviceIsMigDeviceHandle(d, &is), NVML_SUCCESS);
    CHECK_EQ_INT(is, 0);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceId(m0, &id), NVML_SUCCESS);
    CHECK_EQ_INT(id, 1);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceId(m1, &id), NVML_SUCCESS);
    CHECK_EQ_INT(id, 13);
    CHECK_EQ_INT(nvmlDeviceGetComputeInstanceId(m1, &id), NVML_SUCCESS);
    CHECK_EQ_INT(id, 0);
    CHECK_EQ_INT(nvmlDeviceGetGpuInstanceId(d, &id), NVML_ERROR_NOT_SUPPORTED);
    CHECK_EQ_INT(nvmlDeviceGetIndex(m1, &idx), NVML_SUCCESS);
    CHECK_EQ_INT(idx, 1);
    CHECK_EQ_INT(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m1, &m), NVML_SUCCESS);
    CHECK(m == d);
    CHECK_EQ_INT(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(d, &m), NVML_ERROR_INVALID_ARGUMENT);

    char uuid[96], name[96];
    CHECK_EQ_INT(nvmlDeviceGetUUID(m0, uuid, sizeof(uuid)), NVML_SUCCESS);
    CHECK(strncmp(uuid, "MIG-", 4) == 0 && strlen(uuid) == 40);
    CHECK(strstr(out, uuid) != NULL); /* the one accel-emu printed */
    CHECK_EQ_INT(nvmlDeviceGetHandleByUUID(uuid, &m), NVML_SUCCESS);
    CHECK(m == m0);
    CHECK_EQ_INT(nvmlDeviceGetName(m0, name, sizeof(name)), NVML_SUCCESS);
    CHECK_EQ_STR(name, "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
    nvmlMemory_t mem;
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo(m1, &mem), NVML_SUCCESS);
    CHECK_EQ_U64(mem.total, 9984 * MiB);
    CHECK_EQ_U64(mem.used, 0);
    nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo_v2(m0, &mem2), NVML_SUCCESS);
    CHECK_EQ_U64(mem2.total, 40448 * MiB);
    /* queries of the whole GPU: not for a MIG device */
    unsigned cur, pend;
    CHECK_EQ_INT(nvmlDeviceGetMigMode(m0, &cur, &pend), NVML_ERROR_NOT_SUPPORTED);
    /* a destroyed instance's handle is invalid */
    CHECK_EQ_INT(EMU("mig", "0", "destroy"), 0);
    CHECK_EQ_INT(nvmlDeviceGetUUID(m0, uuid, sizeof(uuid)), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 0, &m), NVML_ERROR_NOT_FOUND);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

/* ---- CUDA on a MIG device ---- */

TEST(cuda_on_a_mig_device)
{
    REQUIRE(machine("cuda", "--gpus", "2", NULL));
    nvmlDevice_t d = dev(0);
    mig_on(d);
    REQUIRE_EQ_INT(EMU("mig", "0", "create", "1g.10gb,3g.40gb"), 0);
    nvmlDevice_t m3, m1;
    REQUIRE_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 0, &m3), NVML_SUCCESS); /* 3g */
    REQUIRE_EQ_INT(nvmlDeviceGetMigDeviceHandleByIndex(d, 1, &m1), NVML_SUCCESS); /* 1g */
    char u3[96], u1[96], gpu1[96], hex[40], cvd[512], out[4096];
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(m3, u3, sizeof(u3)), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(m1, u1, sizeof(u1)), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(dev(1), gpu1, sizeof(gpu1)), NVML_SUCCESS);

    /* CUDA_VISIBLE_DEVICES=MIG-<uuid>: that instance's memory, SMs and UUID */
    REQUIRE(cuda_probe(u3, out, sizeof(out)));
    uuid_hex(u3, hex);
    CHECK(strstr(out, "init 0 count 1\n") != NULL);
    CHECK(strstr(out, "dev 0 name=NVIDIA H100 80GB HBM3 MIG 3g.40gb mem=40448 sms=60") != NULL);
    CHECK(strstr(out, hex) != NULL);
    CHECK(strstr(out, "bus=0000:18:00.0") != NULL);
    if (!strstr(out, "mem=40448"))
        tap_diag("%s", out);
    /* the older form names the same device */
    char g0[96];
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(d, g0, sizeof(g0)), NVML_SUCCESS);
    snprintf(cvd, sizeof(cvd), "MIG-%s/1/0", g0);
    REQUIRE(cuda_probe(cvd, out, sizeof(out)));
    CHECK(strstr(out, "count 1\n") != NULL && strstr(out, hex) != NULL);
    /* one MIG device per process: the second is not enumerated; a GPU before it is */
    snprintf(cvd, sizeof(cvd), "%s,%s,%s", gpu1, u1, u3);
    REQUIRE(cuda_probe(cvd, out, sizeof(out)));
    CHECK(strstr(out, "count 2\n") != NULL);
    CHECK(strstr(out, "dev 0 name=NVIDIA H100 80GB HBM3 mem=") != NULL);
    CHECK(strstr(out, "dev 1 name=NVIDIA H100 80GB HBM3 MIG 1g.10gb mem=9984 sms=16") != NULL);
    /* unset: the whole GPUs not in MIG mode and the first MIG device */
    REQUIRE(cuda_probe(NULL, out, sizeof(out)));
    CHECK(strstr(out, "count 2\n") != NULL);
    CHECK(strstr(out, "dev 0 name=NVIDIA H100 80GB HBM3 MIG 3g.40gb") != NULL);
    CHECK(strstr(out, "dev 1 name=NVIDIA H100 80GB HBM3 mem=") != NULL);
    /* an entry naming nothing ends the list; none at all is no device */
    snprintf(cvd, sizeof(cvd), "MIG-00000000-0000-4000-8000-000000000000,%s", u3);
    REQUIRE(cuda_probe(cvd, out, sizeof(out)));
    CHECK(strstr(out, "init 100 count 0\n") != NULL);
    REQUIRE(cuda_probe("0,7,1", out, sizeof(out)));
    CHECK(strstr(out, "count 1\n") != NULL);

    /* a process on the 3g instance: its memory counts there, the instance refuses more than it
     * has, NVML lists it with the instance's IDs, and the instance is in use */
    struct hold h;
    REQUIRE(hold_start(&h, u3, 0, 1024));
    CHECK_NE_INT(hold_alloc(&h, 40000), 0); /* past the instance's 39.5 GiB */
    CHECK_EQ_INT(hold_alloc(&h, 2048), 0);
    nvmlMemory_t mem;
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo(m3, &mem), NVML_SUCCESS);
    CHECK_GE_U64(mem.used, 3072 * MiB);
    CHECK_EQ_INT(nvmlDeviceGetMemoryInfo(m1, &mem), NVML_SUCCESS);
    CHECK_EQ_U64(mem.used, 0);
    nvmlProcessInfo_t procs[8];
    unsigned n = 8;
    CHECK_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs), NVML_SUCCESS);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_INT(procs[0].pid, h.pid);
    CHECK_EQ_INT(procs[0].gpuInstanceId, 1);
    CHECK_EQ_INT(procs[0].computeInstanceId, 0);
    n = 8;
    CHECK_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(m3, &n, procs), NVML_SUCCESS);
    CHECK_EQ_INT(n, 1);
    n = 8;
    CHECK_EQ_INT(nvmlDeviceGetComputeRunningProcesses_v3(m1, &n, procs), NVML_SUCCESS);
    CHECK_EQ_INT(n, 0);
    nvmlGpuInstance_t gi;
    nvmlComputeInstance_t ci;
    REQUIRE_EQ_INT(nvmlDeviceGetGpuInstanceById(d, 1, &gi), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlGpuInstanceGetComputeInstanceById(gi, 0, &ci), NVML_SUCCESS);
    CHECK_EQ_INT(nvmlComputeInstanceDestroy(ci), NVML_ERROR_IN_USE);
    CHECK_EQ_INT(nvmlGpuInstanceDestroy(gi), NVML_ERROR_IN_USE);
    CHECK_EQ_INT(EMU("mig", "0", "destroy"), 1);
    nvmlReturn_t act;
    CHECK_EQ_INT(nvmlDeviceSetMigMode(d, NVML_DEVICE_MIG_DISABLE, &act), NVML_SUCCESS);
    CHECK_EQ_INT(act, NVML_ERROR_IN_USE);
    CHECK_EQ_INT(EMU("set", "0", "mig=on"), 0); /* back to what is current */
    hold_stop(&h);
    CHECK_EQ_INT(nvmlComputeInstanceDestroy(ci), NVML_SUCCESS);
    CHECK_EQ_INT(EMU("mig", "0", "destroy"), 0);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

/* ---- VFIO ---- */

TEST(a_gpu_bound_to_vfio_leaves_nvml_and_cuda)
{
    REQUIRE(machine("vfio", "--gpus", "3", NULL));
    char u1[96], u2[96], bus2[32], out[4096];
    nvmlDevice_t g1 = dev(1);
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(g1, u1, sizeof(u1)), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(dev(2), u2, sizeof(u2)), NVML_SUCCESS);
    nvmlPciInfo_t pci;
    REQUIRE_EQ_INT(nvmlDeviceGetPciInfo_v3(dev(1), &pci), NVML_SUCCESS);
    char bus1[32];
    snprintf(bus1, sizeof(bus1), "%s", pci.busId);
    REQUIRE_EQ_INT(nvmlDeviceGetPciInfo_v3(dev(2), &pci), NVML_SUCCESS);
    snprintf(bus2, sizeof(bus2), "%s", pci.busIdLegacy);

    REQUIRE_EQ_INT(EMU("vfio", "1", "bind"), 0);
    unsigned n = 0, idx = 9;
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 2);
    char u[96];
    CHECK_EQ_INT(nvmlDeviceGetUUID(dev(1), u, sizeof(u)), NVML_SUCCESS);
    CHECK_EQ_STR(u, u2); /* NVML's index 1 is the next GPU the driver owns */
    CHECK_EQ_INT(nvmlDeviceGetIndex(dev(1), &idx), NVML_SUCCESS);
    CHECK_EQ_INT(idx, 1);
    nvmlDevice_t x;
    CHECK_EQ_INT(nvmlDeviceGetHandleByIndex_v2(2, &x), NVML_ERROR_INVALID_ARGUMENT);
    CHECK_EQ_INT(nvmlDeviceGetHandleByUUID(u1, &x), NVML_ERROR_NOT_FOUND);
    CHECK_EQ_INT(nvmlDeviceGetHandleByPciBusId_v2(bus1, &x), NVML_ERROR_NOT_FOUND);
    CHECK_EQ_INT(nvmlDeviceGetUUID(g1, u, sizeof(u)), NVML_ERROR_INVALID_ARGUMENT);
    /* CUDA's device 1 is the third GPU: its bus id, as CUDA writes it (lower case) */
    REQUIRE(cuda_probe(NULL, out, sizeof(out)));
    CHECK(strstr(out, "count 2\n") != NULL);
    for (char *p = bus2; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
    const char *line1 = strstr(out, "dev 1 ");
    CHECK(line1 && strstr(line1, bus2) != NULL);
    REQUIRE(cuda_probe(u1, out, sizeof(out)));
    CHECK(strstr(out, "init 100 count 0\n") != NULL);

    REQUIRE_EQ_INT(EMU("vfio", "1", "unbind"), 0);
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(nvmlDeviceGetUUID(g1, u, sizeof(u)), NVML_SUCCESS);
    CHECK_EQ_STR(u, u1);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

/* ---- a container's view: ACCEL_EMU_DEV_ROOT ---- */

/* NVML in a child with ACCEL_EMU_DEV_ROOT=root: exit 0 when it counts `want` GPUs and its index
 * 0 is the GPU with UUID `first` (NULL: none), and `hidden` (NULL: none) is not found by UUID. */
static bool nvml_sees(const char *root, unsigned want, const char *first, const char *hidden)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("ACCEL_EMU_DEV_ROOT", root, 1);
        unsigned n = 99;
        char u[96];
        nvmlDevice_t x;
        if (nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS || n != want)
            _exit(1);
        if (first && (nvmlDeviceGetHandleByIndex_v2(0, &x) != NVML_SUCCESS ||
                      nvmlDeviceGetUUID(x, u, sizeof(u)) != NVML_SUCCESS || strcmp(u, first) != 0))
            _exit(2);
        if (hidden && nvmlDeviceGetHandleByUUID(hidden, &x) != NVML_ERROR_NOT_FOUND)
            _exit(3);
        _exit(0);
    }
    int st;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

TEST(a_container_sees_only_the_gpus_it_has_device_nodes_for)
{
    REQUIRE(machine("devroot", "--gpus", "3", NULL));
    char u0[96], u2[96], bus2[32], root[] = "/tmp/emu-devroot-XXXXXX", node[64], out[4096];
    unsigned minor2 = 99;
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(dev(0), u0, sizeof(u0)), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetUUID(dev(2), u2, sizeof(u2)), NVML_SUCCESS);
    REQUIRE_EQ_INT(nvmlDeviceGetMinorNumber(dev(2), &minor2), NVML_SUCCESS);
    nvmlPciInfo_t pci;
    REQUIRE_EQ_INT(nvmlDeviceGetPciInfo_v3(dev(2), &pci), NVML_SUCCESS);
    snprintf(bus2, sizeof(bus2), "%s", pci.busIdLegacy);
    for (char *p = bus2; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
    REQUIRE(mkdtemp(root) != NULL);
    /* no device node at all: the driver sees nothing, as in a container given no GPU */
    CHECK(nvml_sees(root, 0, NULL, u0));
    setenv("ACCEL_EMU_DEV_ROOT", root, 1);
    REQUIRE(cuda_probe(NULL, out, sizeof(out)));
    CHECK(strstr(out, "init 100 count 0\n") != NULL);
    unsetenv("ACCEL_EMU_DEV_ROOT");
    /* the node of GPU 2 (the emulator looks for the node, not at its kind): GPU 2 alone, as
     * NVML's index 0 and CUDA's device 0 */
    snprintf(node, sizeof(node), "%s/nvidia%u", root, minor2);
    FILE *f = fopen(node, "w");
    REQUIRE(f != NULL);
    fclose(f);
    CHECK(nvml_sees(root, 1, u2, u0));
    setenv("ACCEL_EMU_DEV_ROOT", root, 1);
    REQUIRE(cuda_probe(NULL, out, sizeof(out)));
    CHECK(strstr(out, "count 1\n") != NULL && strstr(out, bus2) != NULL);
    REQUIRE(cuda_probe(u0, out, sizeof(out)));
    CHECK(strstr(out, "init 100 count 0\n") != NULL); /* naming a hidden GPU finds nothing */
    unsetenv("ACCEL_EMU_DEV_ROOT");
    if (!strstr(out, "count 0"))
        tap_diag("%s", out);
    /* unset: every GPU, as on the host */
    unsigned n = 0;
    CHECK_EQ_INT(nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
    CHECK_EQ_INT(n, 3);
    unlink(node);
    rmdir(root);
    CHECK_EQ_INT(nvmlShutdown(), NVML_SUCCESS);
}

int main(int argc, char **argv)
{
    const char *root = getenv("ACCEL_BUILD_ROOT");
    snprintf(hold_bin, sizeof(hold_bin), "%s/tests/emu/emu-hold", root ? root : ".");
    if (!emu_cli_path() || access(hold_bin, X_OK) != 0)
        tap_skip_all("accel-emu or emu-hold is not built");
    return tap_main(argc, argv);
}
