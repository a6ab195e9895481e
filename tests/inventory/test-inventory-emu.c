/*
 * test-inventory-emu — the inventory and the process query against the emulator
 * (build/src/emu/libnvidia-ml.so.1 + accel-emu): counts, UUIDs, bus IDs, NUMA from the
 * emulator's sysfs fixture, NVLink pairs, a lost GPU, and the process-info stride detected
 * for each stride the emulator can be told to write, with a live process (cuda-hold) holding
 * memory through the emulated libcuda. Skipped when the emulator is not built.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "inventory.h"
#include "nvml.h"
#include "tap.h"

static char emu_nvml[4096], emu_cuda[4096], emu_cmd[4096], hold_cmd[4096];

struct emu {
    char state[4096];
    char sysfs[4200];
    int gpus;
    char uuid[8][96];
    char bus[8][32];
    int numa[8];
};

/* Runs accel-emu with args (NULL-terminated) and its state; stdout into out. Returns exit. */
static int run_emu(const struct emu *e, char *out, size_t outlen, const char *const *args)
{
    int pipefd[2], status;
    size_t len = 0;
    pid_t pid;

    REQUIRE(pipe(pipefd) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const char *argv[32];
        int n = 0;
        argv[n++] = emu_cmd;
        argv[n++] = "--state";
        argv[n++] = e->state;
        for (int i = 0; args[i] && n < 31; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        execv(emu_cmd, (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    for (;;) {
        ssize_t r = read(pipefd[0], out + len, outlen - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == outlen - 1)
            break;
    }
    out[len] = '\0';
    close(pipefd[0]);
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* Copies the JSON string value of "key" found in [p, end) into buf; returns false if absent. */
static bool json_str(const char *p, const char *end, const char *key, char *buf, size_t len)
{
    char pat[64];
    const char *v, *q;

    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    v = strstr(p, pat);
    if (!v || v >= end)
        return false;
    v += strlen(pat);
    q = strchr(v, '"');
    if (!q || q >= end || (size_t)(q - v) >= len)
        return false;
    memcpy(buf, v, (size_t)(q - v));
    buf[q - v] = '\0';
    return true;
}

/* accel-emu init, then what the emulator says about its GPUs (status --json: its machine
 * interface) for the inventory to be compared with. */
static void emu_init(struct emu *e, const char *name, const char *const *opts)
{
    static char out[65536];
    static const char *const status[] = {"status", "--json", NULL};
    const char *args[16] = {"init"};
    const char *p;
    int n = 1;

    memset(e, 0, sizeof(*e));
    snprintf(e->state, sizeof(e->state), "%s/%s", tap_tmpdir(), name);
    snprintf(e->sysfs, sizeof(e->sysfs), "%s.d/sysfs", e->state);
    for (int i = 0; opts[i] && n < 15; i++)
        args[n++] = opts[i];
    args[n] = NULL;
    REQUIRE_EQ_INT(run_emu(e, out, sizeof(out), args), 0);
    REQUIRE_EQ_INT(run_emu(e, out, sizeof(out), status), 0);
    p = strstr(out, "\"gpus\":[");
    REQUIRE(p != NULL);
    while ((p = strstr(p, "{\"index\":")) != NULL && e->gpus < 8) {
        const char *next = strstr(p + 1, "{\"index\":");
        const char *end = next ? next : p + strlen(p);
        const char *numa = strstr(p, "\"numa_node\":");
        int idx = atoi(p + strlen("{\"index\":"));
        REQUIRE(idx == e->gpus);
        REQUIRE(json_str(p, end, "uuid", e->uuid[idx], sizeof(e->uuid[idx])));
        REQUIRE(json_str(p, end, "pci_bus_id", e->bus[idx], sizeof(e->bus[idx])));
        REQUIRE(numa != NULL && numa < end);
        e->numa[idx] = atoi(numa + strlen("\"numa_node\":"));
        e->gpus++;
        p = end;
    }
    REQUIRE(e->gpus > 0);
    setenv("ACCEL_EMU_STATE", e->state, 1);
}

static struct gpu_inventory *load(const struct emu *e, const char *sysfs)
{
    struct gpu_inventory_options o = {.nvml_path = emu_nvml, .sysfs_root = sysfs};
    struct gpu_inventory *inv = NULL;
    char err[512] = "";

    setenv("ACCEL_EMU_STATE", e->state, 1);
    if (gpu_inventory_load(&o, NULL, &inv, err, sizeof(err)) < 0)
        tap_diag("load: %s", err);
    return inv;
}

TEST(four_gpus_uuids_bus_ids_numa_links)
{
    struct emu e;
    static const char *const opts[] = {"--gpus",   "4",     "--numa", "0,0,1,1",
                                       "--nvlink", "pairs", NULL};
    emu_init(&e, "four", opts);
    REQUIRE_EQ_INT(e.gpus, 4);

    struct gpu_inventory *inv = load(&e, e.sysfs);
    REQUIRE(inv != NULL);
    REQUIRE_EQ_INT(inv->count, 4);
    for (int i = 0; i < 4; i++) {
        const struct gpu_device *d = &inv->devices[i];
        char bus[32];
        CHECK(d->healthy);
        CHECK_EQ_STR(d->uuid, e.uuid[i]);
        REQUIRE_EQ_INT(gpu_pci_bus_id_normalize(e.bus[i], bus, sizeof(bus)), 0);
        CHECK_EQ_STR(d->pci_bus_id, bus);
        CHECK_EQ_INT(d->numa_node, i < 2 ? 0 : 1);
        CHECK_EQ_INT(d->numa_node, e.numa[i]);
        CHECK(d->memory_total_bytes > 0);
        CHECK(d->name[0] != '\0');
        CHECK(gpu_inventory_find_uuid(inv, e.uuid[i]) == d);
    }
    CHECK(gpu_inventory_link(inv, 0, 1)->nvlinks > 0);
    CHECK(gpu_inventory_link(inv, 2, 3)->nvlinks > 0);
    CHECK_EQ_INT(gpu_inventory_link(inv, 0, 2)->nvlinks, 0);
    CHECK_EQ_INT(gpu_inventory_link(inv, 1, 1)->pcie, GPU_LINK_SELF);
    CHECK(inv->driver_version[0] != '\0');
    gpu_inventory_free(inv);
}

/* --nvlink all (the default): every GPU has links to every other, none to itself; --nvlink
 * none: no pair has a link. */
TEST(nvlink_all_and_none)
{
    struct emu e;
    static const char *const all[] = {"--gpus", "4", "--nvlink", "all", NULL};
    static const char *const none[] = {"--gpus", "3", "--nvlink", "none", NULL};

    emu_init(&e, "links-all", all);
    struct gpu_inventory *inv = load(&e, e.sysfs);
    REQUIRE(inv != NULL);
    REQUIRE_EQ_INT(inv->count, 4);
    for (unsigned a = 0; a < 4; a++)
        for (unsigned b = 0; b < 4; b++) {
            if (a == b)
                CHECK_EQ_INT(gpu_inventory_link(inv, a, b)->pcie, GPU_LINK_SELF);
            else if (!CHECK(gpu_inventory_link(inv, a, b)->nvlinks > 0))
                tap_diag("no NVLink between GPU %u and GPU %u", a, b);
        }
    gpu_inventory_free(inv);

    emu_init(&e, "links-none", none);
    inv = load(&e, e.sysfs);
    REQUIRE(inv != NULL);
    REQUIRE_EQ_INT(inv->count, 3);
    for (unsigned a = 0; a < 3; a++)
        for (unsigned b = 0; b < 3; b++)
            if (a != b)
                CHECK_EQ_INT(gpu_inventory_link(inv, a, b)->nvlinks, 0);
    gpu_inventory_free(inv);
}

TEST(numa_falls_back_to_nvml_without_sysfs)
{
    struct emu e;
    static const char *const opts[] = {"--gpus", "2", "--numa", "1,0", NULL};
    emu_init(&e, "nosysfs", opts);

    struct gpu_inventory *inv = load(&e, "/nonexistent-sysfs");
    REQUIRE(inv != NULL);
    REQUIRE_EQ_INT(inv->count, 2);
    /* No sysfs entry: the emulated NVML's nvmlDeviceGetNumaNodeId answers. */
    CHECK_EQ_INT(inv->devices[0].numa_node, 1);
    CHECK_EQ_INT(inv->devices[1].numa_node, 0);
    gpu_inventory_free(inv);
}

TEST(lost_gpu_is_unhealthy_rest_load)
{
    struct emu e;
    char out[4096];
    static const char *const opts[] = {"--gpus", "4", NULL};
    static const char *const lose[] = {"lose", "2", NULL};
    emu_init(&e, "lost", opts);
    REQUIRE_EQ_INT(run_emu(&e, out, sizeof(out), lose), 0);

    struct gpu_inventory *inv = load(&e, e.sysfs);
    REQUIRE(inv != NULL);
    REQUIRE_EQ_INT(inv->count, 4);
    CHECK(!inv->devices[2].healthy);
    tap_diag("lost GPU: %s", inv->devices[2].error);
    CHECK(inv->devices[2].error[0] != '\0');
    for (int i = 0; i < 4; i++)
        if (i != 2) {
            CHECK(inv->devices[i].healthy);
            CHECK_EQ_STR(inv->devices[i].uuid, e.uuid[i]);
        }
    gpu_inventory_free(inv);
}

/* Starts cuda-hold on GPU 0: two processes with mib MiB each (the stride detection learns
 * nothing from one). Fills pids[2]; returns the holder's pid, *ret_fd its stdin. */
static pid_t start_holder(int mib, pid_t pids[2], int *ret_fd)
{
    int in[2], out[2], lines = 0;
    char m[16], buf[256];
    size_t len = 0;
    pid_t pid;

    snprintf(m, sizeof(m), "%d", mib);
    REQUIRE(pipe(in) == 0 && pipe(out) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        setenv("ACCEL_CUDA_LIBRARY", emu_cuda, 1);
        execl(hold_cmd, hold_cmd, "0", m, "2", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    /* Two "ready <pid>" lines: read blocks until both hold their memory (or exit). */
    while (lines < 2 && len < sizeof(buf) - 1) {
        ssize_t r = read(out[0], buf + len, sizeof(buf) - 1 - len);
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            lines += buf[len + (size_t)i] == '\n';
        len += (size_t)r;
    }
    buf[len] = '\0';
    close(out[0]);
    if (lines < 2 || sscanf(buf, "ready %d\nready %d", &pids[0], &pids[1]) != 2) {
        tap_fail(__FILE__, __LINE__, "cuda-hold did not start: '%s'", buf);
        close(in[1]);
        waitpid(pid, NULL, 0);
        tap_abort_case();
    }
    *ret_fd = in[1];
    return pid;
}

static void stride_case(const char *stride)
{
    struct emu e;
    char name[32];
    const char *opts[] = {"--gpus", "2", "--proc-info-stride", stride, NULL};
    struct gpu_nvml *nvml = NULL;
    struct gpu_process procs[16];
    nvmlDevice_t dev;
    size_t n = 0;
    char err[512];
    int fd, found = 0;
    pid_t pid, pids[2];

    snprintf(name, sizeof(name), "stride%s", stride);
    emu_init(&e, name, opts);
    pid = start_holder(64, pids, &fd);
    REQUIRE_EQ_INT(gpu_nvml_open(emu_nvml, &nvml, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(nvml->nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    CHECK_EQ_INT(gpu_nvml_running_processes(nvml, dev, procs, 16, &n), 0);
    CHECK_EQ_INT(gpu_nvml_process_stride(nvml), atoi(stride));
    for (size_t i = 0; i < n; i++)
        if (procs[i].pid == (unsigned int)pids[0] || procs[i].pid == (unsigned int)pids[1]) {
            found++;
            CHECK_GE_U64(procs[i].used_memory_bytes, 64ull << 20);
        }
    CHECK_EQ_INT(found, 2);
    gpu_nvml_free(nvml);
    close(fd); /* the holder exits when its stdin closes */
    CHECK(waitpid(pid, NULL, 0) == pid);
}

TEST(process_stride_16)
{
    stride_case("16");
}

TEST(process_stride_24)
{
    stride_case("24");
}

TEST(process_stride_32)
{
    stride_case("32");
}

/* Without a machine, the emulator's reason is our loader's one error line: no second line of
 * the emulator's own on stderr, no "is the NVIDIA driver loaded?" that points the wrong way. */
TEST(no_machine_is_one_clear_error)
{
    struct gpu_nvml *nvml = NULL;
    char err[512] = "", path[4096], out[1024];
    int fd, saved, r;
    ssize_t n;

    unsetenv("ACCEL_EMU_STATE");
    snprintf(path, sizeof(path), "%s/stderr", tap_tmpdir());
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    fflush(stderr);
    saved = dup(2);
    REQUIRE(saved >= 0);
    dup2(fd, 2);
    r = gpu_nvml_open(emu_nvml, &nvml, err, sizeof(err));
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    n = pread(fd, out, sizeof(out) - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);

    CHECK_EQ_INT(r, -EIO);
    CHECK(nvml == NULL);
    tap_diag("error: %s", err);
    CHECK(strstr(err, "the GPU emulator") != NULL);
    CHECK(strstr(err, "set ACCEL_EMU_STATE to a file made by `accel-emu init`") != NULL);
    CHECK(strstr(err, "NVIDIA driver") == NULL);
    CHECK_EQ_STR(out, "");
}

int main(int argc, char **argv)
{
    const char *root = getenv("ACCEL_BUILD_ROOT");

    if (!root)
        root = ".";
    snprintf(emu_nvml, sizeof(emu_nvml), "%s/src/emu/libnvidia-ml.so.1", root);
    snprintf(emu_cuda, sizeof(emu_cuda), "%s/src/emu/libcuda.so.1", root);
    snprintf(emu_cmd, sizeof(emu_cmd), "%s/src/emu/accel-emu", root);
    snprintf(hold_cmd, sizeof(hold_cmd), "%s/tests/inventory/cuda-hold", root);
    if (access(emu_nvml, R_OK) != 0 || access(emu_cmd, X_OK) != 0)
        tap_skip_all("the emulator (src/emu/libnvidia-ml.so.1, accel-emu) is not built yet");
    signal(SIGPIPE, SIG_IGN);
    return tap_main(argc, argv);
}
