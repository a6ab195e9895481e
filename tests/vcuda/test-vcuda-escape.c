/* test-vcuda-escape.c — the quota escapes of issue 8, each tried the way a tenant would, on the
 * emulated driver, with libvcuda set up as the agent will set it up: an agent's config file at
 * the library's built-in path (here libvcuda-agenttest.so, whose path lies in the build tree),
 * a shared usage region, and a tenant environment that tries to loosen everything.
 *
 *   1. environment over the agent's file (VCUDA_CONFIG, VCUDA_MEMORY_LIMIT, a file of one's own);
 *      a broken agent file fails closed;
 *   2. VMM: cuMemCreate → cuMemMap → cuMemRelease keeps the charge until the unmap;
 *   3. glibc's real dlsym/dlvsym through dlvsym, by every version glibc exports them under, and
 *      the driver's entry points by dlvsym, by RTLD_DEFAULT/RTLD_NEXT and a second dlopen;
 *   4. zeroed region counters: the process still stops at its quota and puts its slot back;
 *      vc_region_audit flags an under-reporting region against NVML's per-process memory;
 * and the context's charge measured on the emulator for two context overheads.
 *
 * Run without VCUDA_TEST_CHILD, the program is its own launcher (as test-vcuda-emu.c). */
#define _GNU_SOURCE
#include "cuda_api.h"
#include "nvml_api.h"
#include "region.h"
#include "state.h"
#include "tap.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define QUOTA (64 * MiB)
#define CTX_MEM (4 * MiB)

#define FN(n) __typeof__(n) *n
static struct {
    FN(cuInit);
    FN(cuDeviceGet);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuCtxSetCurrent);
    FN(cuMemGetInfo_v2);
    FN(cuMemAlloc_v2);
    FN(cuMemFree_v2);
    FN(cuMemCreate);
    FN(cuMemRelease);
    FN(cuMemMap);
    FN(cuMemUnmap);
    FN(cuMemAddressReserve);
    FN(cuMemAddressFree);
} cu;
static void *libcuda;
static CUcontext ctx;

static void setup(void)
{
    if (ctx) {
        REQUIRE_EQ_INT(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        return;
    }
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!libcuda)
        tap_skip_all("libcuda.so.1 (the emulator) cannot be loaded");
#define GET(n) REQUIRE((cu.n = (__typeof__(cu.n))dlsym(libcuda, #n)) != NULL)
    GET(cuInit);
    GET(cuDeviceGet);
    GET(cuDevicePrimaryCtxRetain);
    GET(cuCtxSetCurrent);
    GET(cuMemGetInfo_v2);
    GET(cuMemAlloc_v2);
    GET(cuMemFree_v2);
    GET(cuMemCreate);
    GET(cuMemRelease);
    GET(cuMemMap);
    GET(cuMemUnmap);
    GET(cuMemAddressReserve);
    GET(cuMemAddressFree);
    REQUIRE_EQ_INT(cu.cuInit(0), CUDA_SUCCESS);
    CUdevice dev;
    REQUIRE_EQ_INT(cu.cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
}

static uint64_t emu_used(void)
{
    static struct emu_state *st;
    if (!st && emu_state_open(getenv("ACCEL_EMU_STATE"), &st) < 0)
        return UINT64_MAX;
    uint64_t used = 0, total = 0;
    emu_state_mem_info(st, 0, &used, &total);
    return used;
}

static bool in_libvcuda(void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libvcuda");
}

static int wait_exit(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- 1. the agent's file beats the environment ---------------------------- */

TEST(agent_file_beats_a_loosening_environment)
{
    /* The launcher set VCUDA_CONFIG=/nonexistent, VCUDA_MEMORY_LIMIT=1Gi and a region of the
     * tenant's own; the agent's file says 64 MiB. */
    setup();
    size_t f = 0, t = 0;
    REQUIRE_EQ_INT(cu.cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS);
    CHECK_EQ_U64(t, QUOTA);
    CUdeviceptr p;
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&p, 128 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
}

/* Role "info": total and whether 1 MiB and 128 MiB allocations work. */
static int role_info(void)
{
    libcuda = dlopen("libcuda.so.1", RTLD_NOW);
    cu.cuInit = (__typeof__(cu.cuInit))dlsym(libcuda, "cuInit");
    cu.cuDevicePrimaryCtxRetain =
        (__typeof__(cu.cuDevicePrimaryCtxRetain))dlsym(libcuda, "cuDevicePrimaryCtxRetain");
    cu.cuInit(0);
    if (cu.cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) {
        printf("total=0 small=2 big=2 (no context)\n");
        return 0;
    }
    ctx = NULL;
    setup();
    size_t f = 0, t = 0;
    cu.cuMemGetInfo_v2(&f, &t);
    CUdeviceptr p;
    CUresult small = cu.cuMemAlloc_v2(&p, MiB);
    CUresult big = cu.cuMemAlloc_v2(&p, 128 * MiB);
    printf("total=%zu free=%zu small=%d big=%d\n", t, f, (int)small, (int)big);
    return 0;
}

/* Runs role role with extra environment name=value pairs, as uid/gid as_uid when it is not 0
 * (dumpable again after the switch, as a process started as that user is), after
 * child_setup(arg) in the child when given (a nonzero result is the child's exit status,
 * without the role); stdout into out, stderr into err. Returns the child's exit status. */
static int run_role_as(const char *role, uid_t as_uid, const char *const *env,
                       int (*child_setup)(const void *), const void *arg, char *out, size_t outlen,
                       char *err, size_t errlen)
{
    int o[2], e[2];
    REQUIRE(pipe(o) == 0 && pipe(e) == 0);
    pid_t kid = fork();
    if (kid == 0) {
        dup2(o[1], 1);
        dup2(e[1], 2);
        for (; env && env[0]; env += 2)
            setenv(env[0], env[1], 1);
        if (as_uid && (setgroups(0, NULL) < 0 || setgid(as_uid) < 0 || setuid(as_uid) < 0 ||
                       prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0))
            _exit(126);
        int rc = child_setup ? child_setup(arg) : 0;
        if (rc)
            _exit(rc);
        execl("/proc/self/exe", "test-vcuda-escape", "--role", role, (char *)NULL);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    size_t ol = 0, el = 0;
    ssize_t n;
    while (ol < outlen - 1 && (n = read(o[0], out + ol, outlen - 1 - ol)) > 0)
        ol += (size_t)n;
    out[ol] = '\0';
    while (el < errlen - 1 && (n = read(e[0], err + el, errlen - 1 - el)) > 0)
        el += (size_t)n;
    err[el] = '\0';
    close(o[0]);
    close(e[0]);
    return wait_exit(kid);
}

static void run_info_as(uid_t as_uid, const char *const *env, char *out, size_t outlen, char *err,
                        size_t errlen)
{
    run_role_as("info", as_uid, env, NULL, NULL, out, outlen, err, errlen);
}

static void run_info(const char *const *env, char *out, size_t outlen, char *err, size_t errlen)
{
    run_info_as(0, env, out, outlen, err, errlen);
}

static void run_role(const char *role, const char *const *env, char *out, size_t outlen, char *err,
                     size_t errlen)
{
    run_role_as(role, 0, env, NULL, NULL, out, outlen, err, errlen);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    fclose(f);
}

TEST(a_config_file_of_the_tenants_own_is_ignored)
{
    char mine[512], out[256], err[4096];
    snprintf(mine, sizeof(mine), "%s/tenant-config", getenv("VCUDA_TEST_DIR"));
    write_text(mine, "memory_limit = 0\n");
    const char *env[] = {"VCUDA_CONFIG", mine, "VCUDA_MEMORY_LIMIT", "0", NULL};
    run_info(env, out, sizeof(out), err, sizeof(err));
    CHECK(strstr(out, "total=67108864 ") && strstr(out, " small=0 big=2"));
    CHECK(strstr(err, "VCUDA_CONFIG ignored") != NULL);
    if (!strstr(out, "total=67108864 "))
        tap_diag("got: %s / %s", out, err);
}

TEST(a_tighter_environment_is_taken)
{
    char out[256], err[4096];
    const char *env[] = {"VCUDA_MEMORY_LIMIT", "32Mi", NULL};
    run_info(env, out, sizeof(out), err, sizeof(err));
    CHECK(strstr(out, "total=33554432 ") && strstr(out, " small=0 big=2"));
}

TEST(a_broken_agent_file_fails_closed)
{
    const char *agent = getenv("VCUDA_TEST_AGENT_CONFIG");
    char keep[4096], out[256], err[4096];
    FILE *f = fopen(agent, "r");
    REQUIRE(f);
    size_t n = fread(keep, 1, sizeof(keep) - 1, f);
    keep[n] = '\0';
    fclose(f);
    write_text(agent, "memory_limit = 64Mi\nmemory_limit: 1Gi\n");
    const char *env[] = {"VCUDA_CONFIG", "/nonexistent", NULL};
    run_info(env, out, sizeof(out), err, sizeof(err));
    write_text(agent, keep);
    /* nothing at all: not even the context's memory, so no total is seen */
    CHECK(strstr(out, "small=2 big=2") != NULL);
    CHECK(strstr(err, agent) != NULL);
    CHECK(strstr(err, "line 2") != NULL);
    CHECK(strstr(err, "denying all device memory") != NULL);
    if (!strstr(out, "small=2 big=2"))
        tap_diag("got: %s / %s", out, err);
}

/* Issue 8: a process that may not open the region (another user) is denied all memory, and the
 * error says whose file it is, with which mode, and what would work. */
TEST(region_of_another_user_is_refused_with_owner_mode_and_fix)
{
    if (geteuid() != 0)
        tap_skip_case("needs root to run a process as another user");
    const char *region = getenv("VCUDA_TEST_REGION");
    REQUIRE_EQ_INT(chmod(getenv("VCUDA_TEST_DIR"), 0711), 0);
    REQUIRE_EQ_INT(chmod(region, 0600), 0);
    char out[256], err[4096];
    run_info_as(65534, NULL, out, sizeof(out), err, sizeof(err));
    chmod(getenv("VCUDA_TEST_DIR"), 0700);
    if (strstr(out, "total=") == NULL && strstr(err, "Permission denied") == NULL)
        tap_skip_case("uid 65534 cannot run the test binary here");
    CHECK(strstr(out, "small=2 big=2") != NULL);
    CHECK(strstr(err, "belongs to uid 0 gid 0 with mode 0600") != NULL);
    CHECK(strstr(err, "runs as uid 65534 gid 65534") != NULL);
    CHECK(strstr(err, "owner uid 65534 with mode 0600, or group gid 65534 with mode 0660") != NULL);
    if (!strstr(err, "belongs to uid 0"))
        tap_diag("got: %s / %s", out, err);
}

/* Issue 22, F5b: a tenant with no privilege (uid 65534) makes a user namespace of its own
 * (`unshare -Urm`), where it may mount, and bind-mounts a config of its own over the agent's
 * path. libvcuda must not obey it: outside the initial user namespace the agent's file is
 * refused, and every device memory request with it. */
/* In the child, as uid 65534: what `unshare -Urm` does, then the tenant's file (arg) mounted
 * over the agent's. 77 when this machine allows no unprivileged user namespace. */
static int enter_own_userns(const void *arg)
{
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
        return 77;
    FILE *f;
    if (!(f = fopen("/proc/self/setgroups", "w")) || fputs("deny", f) < 0 || fclose(f) ||
        !(f = fopen("/proc/self/uid_map", "w")) || fputs("0 65534 1", f) < 0 || fclose(f) ||
        !(f = fopen("/proc/self/gid_map", "w")) || fputs("0 65534 1", f) < 0 || fclose(f))
        return 125;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount(arg, getenv("VCUDA_TEST_AGENT_CONFIG"), NULL, MS_BIND, NULL) < 0)
        return 124;
    return 0;
}

TEST(a_config_mounted_from_a_user_namespace_of_the_tenants_own_is_refused)
{
    if (geteuid() != 0)
        tap_skip_case("needs root to run a process as another user");
    char mine[512], out[256] = "", err[4096] = "";
    snprintf(mine, sizeof(mine), "%s/tenant-unlimited", getenv("VCUDA_TEST_DIR"));
    write_text(mine, "memory_limit = 0\n");
    REQUIRE_EQ_INT(chmod(mine, 0644), 0);
    REQUIRE_EQ_INT(chmod(getenv("VCUDA_TEST_DIR"), 0711), 0);
    int rc = run_role_as("info", 65534, NULL, enter_own_userns, mine, out, sizeof(out), err,
                         sizeof(err));
    chmod(getenv("VCUDA_TEST_DIR"), 0700);
    if (rc == 77)
        tap_skip_case("unprivileged user namespaces are not allowed here");
    if (rc == 126 || rc == 127 || (strstr(out, "total=") == NULL && !err[0]))
        tap_skip_case("uid 65534 cannot run the test binary here");
    CHECK_EQ_INT(rc, 0);
    /* nothing at all: not even the context's memory */
    CHECK(strstr(out, "small=2 big=2") != NULL);
    CHECK(strstr(err, "is not trusted") != NULL);
    CHECK(strstr(err, "user namespace other than the initial one") != NULL);
    CHECK(strstr(err, "denying all device memory") != NULL);
    if (!strstr(out, "small=2 big=2") || !strstr(err, "is not trusted"))
        tap_diag("rc %d, got: %s / %s", rc, out, err);
}

/* Issue 22, F4: the container reaches a GPU outside its assignment (a runtime honouring
 * NVIDIA_VISIBLE_DEVICES=all). The config lists the assigned GPU only; the other must get a
 * quota of 0, not a full one of its own. Role "unassigned", on a 2-GPU emulator whose GPU 0
 * alone is listed: what device 1 offers through every route. */
static int role_unassigned(void)
{
    setup(); /* a primary context on device 0, the assigned GPU: the quota as usual */
    size_t f = 0, t = 0;
    cu.cuMemGetInfo_v2(&f, &t);
    __typeof__(cuDeviceTotalMem_v2) *total_mem =
        (__typeof__(total_mem))dlsym(libcuda, "cuDeviceTotalMem_v2");
    size_t t1 = 0;
    CUresult rt = total_mem ? total_mem(&t1, 1) : CUDA_ERROR_NOT_FOUND;
    /* VMM memory placed on device 1 from device 0's context */
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 1;
    CUmemGenericAllocationHandle h;
    CUresult rv = cu.cuMemCreate(&h, 32 * MiB, &prop, 0);
    if (rv == CUDA_SUCCESS)
        cu.cuMemRelease(h);
    /* NVML's view of device 1 */
    unsigned long long nv_total = ~0ull;
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    __typeof__(nvmlInit_v2) *init = nv ? (__typeof__(init))dlsym(nv, "nvmlInit_v2") : NULL;
    __typeof__(nvmlDeviceGetHandleByIndex_v2) *byidx =
        nv ? (__typeof__(byidx))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2") : NULL;
    __typeof__(nvmlDeviceGetMemoryInfo) *meminfo =
        nv ? (__typeof__(meminfo))dlsym(nv, "nvmlDeviceGetMemoryInfo") : NULL;
    nvmlDevice_t d1;
    nvmlMemory_t m;
    if (init && byidx && meminfo && init() == NVML_SUCCESS && byidx(1, &d1) == NVML_SUCCESS &&
        meminfo(d1, &m) == NVML_SUCCESS)
        nv_total = m.total;
    /* a context of its own on device 1, and memory there */
    CUcontext c1 = NULL;
    CUresult rc = cu.cuDevicePrimaryCtxRetain(&c1, 1);
    CUresult ra = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS && cu.cuCtxSetCurrent(c1) == CUDA_SUCCESS) {
        CUdeviceptr p;
        ra = cu.cuMemAlloc_v2(&p, 128 * MiB);
    }
    printf("dev0_total=%zu dev1_total=%d:%zu vmm1=%d nvml1_total=%llu ctx1=%d alloc1=%d\n", t,
           (int)rt, t1, (int)rv, nv_total, (int)rc, (int)ra);
    return 0;
}

TEST(a_gpu_outside_the_assignment_has_a_quota_of_zero)
{
    const char *agent = getenv("VCUDA_TEST_AGENT_CONFIG");
    char keep[4096], state[512], cfg[1024], out[512], err[4096];
    FILE *f = fopen(agent, "r");
    REQUIRE(f);
    size_t n = fread(keep, 1, sizeof(keep) - 1, f);
    keep[n] = '\0';
    fclose(f);
    snprintf(state, sizeof(state), "%s/emu-2gpus", getenv("VCUDA_TEST_DIR"));
    struct emu_config ec;
    emu_config_init(&ec);
    ec.gpus = 2;
    ec.memory_bytes = 1ull << 30;
    REQUIRE_EQ_INT(emu_state_create(state, &ec), 0);
    struct emu_state *st;
    REQUIRE_EQ_INT(emu_state_open(state, &st), 0);
    char uuid0[80];
    snprintf(uuid0, sizeof(uuid0), "%s", emu_state_gpu(st, 0)->uuid);
    emu_state_close(st);
    snprintf(cfg, sizeof(cfg),
             "memory_limit = 64Mi\ncontext_memory = 4Mi\nregion = %s/region-2gpus\n"
             "devices = %s\n",
             getenv("VCUDA_TEST_DIR"), uuid0);
    write_text(agent, cfg);
    const char *env[] = {"ACCEL_EMU_STATE", state, NULL};
    run_role("unassigned", env, out, sizeof(out), err, sizeof(err));
    write_text(agent, keep);
    CHECK(strstr(out, "dev0_total=67108864 ") != NULL);
    CHECK(strstr(out, " dev1_total=0:0 ") != NULL);
    CHECK(strstr(out, " vmm1=2 ") != NULL); /* CUDA_ERROR_OUT_OF_MEMORY */
    CHECK(strstr(out, " nvml1_total=0 ") != NULL);
    CHECK(strstr(out, " ctx1=2 ") != NULL);
    CHECK(strstr(err, "is not assigned to this container") != NULL);
    tap_diag("%s", out);
    if (!strstr(out, " ctx1=2 "))
        tap_diag("stderr: %s", err);
}

/* ---- context memory, measured --------------------------------------------- */

/* The agent's file leaves context_memory at its default (256 MiB): the context's charge is
 * measured from NVML around its creation instead, so a process sees the quota less what the
 * emulator really took (ACCEL_EMU_CTX_OVERHEAD), for two different overheads. */
static void check_context_charge(const char *overhead, uint64_t bytes)
{
    char out[256], err[4096], want[128];
    const char *env[] = {"ACCEL_EMU_CTX_OVERHEAD", overhead, NULL};
    run_info(env, out, sizeof(out), err, sizeof(err));
    snprintf(want, sizeof(want), "total=%llu free=%llu small=0", (unsigned long long)(512 * MiB),
             (unsigned long long)(512 * MiB - bytes));
    CHECK(strstr(out, want) != NULL);
    if (!strstr(out, want))
        tap_diag("want %s, got: %s / %s", want, out, err);
}

TEST(context_memory_is_measured_not_configured)
{
    const char *agent = getenv("VCUDA_TEST_AGENT_CONFIG");
    char keep[4096];
    FILE *f = fopen(agent, "r");
    REQUIRE(f);
    size_t n = fread(keep, 1, sizeof(keep) - 1, f);
    keep[n] = '\0';
    fclose(f);
    char cfg[1024];
    /* a region of its own: this process's context is charged in the main one */
    snprintf(cfg, sizeof(cfg), "memory_limit = 512Mi\nregion = %s/measure-region\n",
             getenv("VCUDA_TEST_DIR"));
    write_text(agent, cfg);
    check_context_charge("8Mi", 8 * MiB);
    check_context_charge("40Mi", 40 * MiB);
    write_text(agent, keep);
}

/* ---- 2. VMM: released while mapped ---------------------------------------- */

TEST(vmm_release_while_mapped_keeps_the_charge_until_unmapped)
{
    setup();
    const size_t size = 32 * MiB;
    uint64_t base = emu_used();
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    REQUIRE_EQ_INT(cu.cuMemCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    CUdeviceptr va;
    REQUIRE_EQ_INT(cu.cuMemAddressReserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemMap(va, size, 0, h, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemRelease(h), CUDA_SUCCESS);
    /* The mapping still holds the memory: for the emulator, and for the quota. */
    CHECK_EQ_U64(emu_used(), base + size);
    CUdeviceptr p;
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&p, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    /* The last reference goes: the memory is freed and the quota given back. */
    REQUIRE_EQ_INT(cu.cuMemUnmap(va, size), CUDA_SUCCESS);
    CHECK_EQ_U64(emu_used(), base);
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&p, 40 * MiB), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemAddressFree(va, size), CUDA_SUCCESS);

    /* Two mappings of one handle, released first: the charge goes with the last unmap. */
    REQUIRE_EQ_INT(cu.cuMemCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    CUdeviceptr va2;
    REQUIRE_EQ_INT(cu.cuMemAddressReserve(&va2, 2 * size, 0, 0, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemMap(va2, size, 0, h, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemMap(va2 + size, size, 0, h, 0), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemRelease(h), CUDA_SUCCESS);
    REQUIRE_EQ_INT(cu.cuMemUnmap(va2, size), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&p, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    REQUIRE_EQ_INT(cu.cuMemUnmap(va2 + size, size), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&p, 40 * MiB), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ_INT(cu.cuMemAddressFree(va2, 2 * size), CUDA_SUCCESS);
}

/* ---- 3. dlvsym ------------------------------------------------------------ */

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

/* An entry point a route finds must be our wrapper, and using it must be held to the quota.
 * NULL (the route finds nothing: a version the symbol does not have, a scope the driver,
 * dlopen'ed RTLD_LOCAL, is not in) is only accepted where must_find is false. */
static void check_route(void *fn, bool must_find, const char *how)
{
    if (!fn && !must_find)
        return;
    CHECK(in_libvcuda(fn));
    if (!in_libvcuda(fn))
        tap_diag("%s: %p is not libvcuda's", how, fn);
    __typeof__(cuMemAlloc_v2) *alloc = (__typeof__(cuMemAlloc_v2) *)fn;
    CUdeviceptr p;
    if (alloc)
        CHECK_EQ_INT(alloc(&p, 128 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
}

TEST(glibc_resolvers_by_version_still_hand_out_wrappers)
{
    setup();
    /* Every version glibc 2.36 exports dlsym and dlvsym under on x86_64. */
    static const char *const versions[] = {"GLIBC_2.2.5", "GLIBC_2.34"};
    void *handles[] = {libcuda, RTLD_DEFAULT, RTLD_NEXT};
    for (size_t v = 0; v < 2; v++) {
        dlsym_fn ds = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[v]);
        dlsym_fn ds_default = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", versions[v]);
        dlvsym_fn dvs = (dlvsym_fn)dlvsym(RTLD_NEXT, "dlvsym", versions[v]);
        REQUIRE(ds && ds_default && dvs);
        CHECK(in_libvcuda((void *)ds));
        CHECK(in_libvcuda((void *)ds_default));
        CHECK(in_libvcuda((void *)dvs));
        for (size_t k = 0; k < 3; k++) {
            check_route(ds(handles[k], "cuMemAlloc_v2"), handles[k] == libcuda, "dlvsym'd dlsym");
            check_route(dvs(handles[k], "cuMemAlloc_v2", versions[v]), false, "dlvsym'd dlvsym");
        }
        /* the resolvers found through the resolvers are ours too */
        CHECK(in_libvcuda(dvs(RTLD_NEXT, "dlsym", versions[v])));
    }
    /* a driver entry point by version, any version string */
    check_route(dlvsym(libcuda, "cuMemAlloc_v2", "GLIBC_2.34"), false, "dlvsym on the driver");
    /* not hooked: the driver's own */
    void *copy = dlsym(libcuda, "cuStreamQuery");
    CHECK(copy && !in_libvcuda(copy));
}

TEST(a_second_dlopen_by_full_path_is_the_same_driver)
{
    setup();
    Dl_info info;
    REQUIRE(dladdr(dlsym(libcuda, "cuStreamQuery"), &info) && info.dli_fname);
    char path[4096];
    REQUIRE(realpath(info.dli_fname, path) != NULL);
    void *again = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(again);
    check_route(dlsym(again, "cuMemAlloc_v2"), true, "second dlopen");
    check_route(dlvsym(again, "cuMemAlloc_v2", "GLIBC_2.34"), false, "second dlopen, dlvsym");
    dlclose(again);
}

/* ---- 4. the writable region ------------------------------------------------ */

static struct vc_region_slot *map_slots(void **ret_map)
{
    int fd = open(getenv("VCUDA_TEST_REGION"), O_RDWR);
    REQUIRE(fd >= 0);
    void *m = mmap(NULL, VC_REGION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(m != MAP_FAILED);
    *ret_map = m;
    return (struct vc_region_slot *)((char *)m + VC_REGION_HEADER_SIZE);
}

static int my_slot(struct vc_region_slot *slots)
{
    for (int i = 0; i < (int)VC_REGION_SLOTS; i++)
        if ((slots[i].owner & VC_OWNER_PID_MASK) == (uint64_t)getpid())
            return i;
    return -1;
}

TEST(zeroed_counters_do_not_raise_a_process_quota)
{
    setup();
    CUdeviceptr p, q;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&p, 48 * MiB), CUDA_SUCCESS);
    void *m;
    struct vc_region_slot *slots = map_slots(&m);
    int s = my_slot(slots);
    REQUIRE(s >= 0);
    uint64_t held = slots[s].used[0];
    CHECK_EQ_U64(held, 48 * MiB + CTX_MEM);
    /* The tenant zeroes every counter. */
    for (unsigned i = 0; i < VC_REGION_SLOTS; i++)
        for (unsigned d = 0; d < VC_REGION_DEVICES; d++)
            slots[i].used[d] = 0;
    /* 48 + 4 held, 32 more is over 64: refused, and the slot shows its bytes again. */
    CHECK_EQ_INT(cu.cuMemAlloc_v2(&q, 32 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_EQ_U64(slots[s].used[0], held);
    CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
    CHECK_EQ_U64(slots[s].used[0], CTX_MEM);
    munmap(m, VC_REGION_SIZE);
}

/* NVML's per-process figures, as the agent reads them. */
static int nvml_procs(struct vc_audit_proc *out, int max)
{
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    REQUIRE(nv);
    __typeof__(nvmlInit_v2) *init = (__typeof__(init))dlsym(nv, "nvmlInit_v2");
    __typeof__(nvmlDeviceGetHandleByIndex_v2) *byidx =
        (__typeof__(byidx))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
    __typeof__(nvmlDeviceGetComputeRunningProcesses) *procs =
        (__typeof__(procs))dlsym(nv, "nvmlDeviceGetComputeRunningProcesses");
    REQUIRE(init && byidx && procs);
    REQUIRE_EQ_INT(init(), NVML_SUCCESS);
    nvmlDevice_t d;
    REQUIRE_EQ_INT(byidx(0, &d), NVML_SUCCESS);
    nvmlProcessInfo_v1_t info[16];
    unsigned n = 16;
    REQUIRE_EQ_INT(procs(d, &n, (void *)info), NVML_SUCCESS);
    int k = 0;
    for (unsigned i = 0; i < n && k < max; i++, k++)
        out[k] = (struct vc_audit_proc){info[i].pid, info[i].usedGpuMemory};
    return k;
}

TEST(an_under_reporting_region_is_flagged_against_nvml)
{
    setup();
    CUdeviceptr p;
    REQUIRE_EQ_INT(cu.cuMemAlloc_v2(&p, 16 * MiB), CUDA_SUCCESS);
    struct vc_region r;
    REQUIRE_EQ_INT(vc_region_attach(getenv("VCUDA_TEST_REGION"), &r), 0);
    struct vc_audit_proc procs[16];
    int n = nvml_procs(procs, 16);
    REQUIRE(n >= 1);
    struct vc_audit_finding f[4];
    /* Honest books: nothing to report. */
    CHECK_EQ_INT(vc_region_audit(&r, 0, procs, (size_t)n, MiB, f, 4), 0);
    /* The tenant zeroes its slot: the agent sees it. */
    int s = my_slot(r.slots);
    REQUIRE(s >= 0);
    uint64_t keep = r.slots[s].used[0];
    r.slots[s].used[0] = 0;
    CHECK_EQ_INT(vc_region_audit(&r, 0, procs, (size_t)n, MiB, f, 4), 1);
    CHECK_EQ_INT(f[0].pid, getpid());
    CHECK_EQ_INT(f[0].slot, s);
    CHECK_EQ_U64(f[0].region_bytes, 0);
    CHECK_EQ_U64(f[0].nvml_bytes, keep);
    /* A process NVML sees with no slot at all (its slot freed behind our back). */
    uint64_t owner = r.slots[s].owner;
    r.slots[s].owner = 0;
    CHECK_EQ_INT(vc_region_audit(&r, 0, procs, (size_t)n, MiB, f, 4), 1);
    CHECK_EQ_INT(f[0].slot, -1);
    r.slots[s].owner = owner;
    r.slots[s].used[0] = keep;
    vc_region_detach(&r);
    CHECK_EQ_INT(cu.cuMemFree_v2(p), CUDA_SUCCESS);
}

/* ---- launcher -------------------------------------------------------------- */

static int launcher(char **argv)
{
    const char *build = getenv("ACCEL_BUILD_ROOT");
    if (!build) {
        printf("1..0 # SKIP ACCEL_BUILD_ROOT is not set (run through meson test)\n");
        return 77;
    }
    char dir[] = "/tmp/vcuda-escape-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char state[256], region[256], tenant_region[256], agent[4096], cfg[1024], preload[8192],
        libpath[4096], asan[4096];
    snprintf(state, sizeof(state), "%s/emu-state", dir);
    snprintf(region, sizeof(region), "%s/region", dir);
    snprintf(tenant_region, sizeof(tenant_region), "%s/tenant-region", dir);
    snprintf(agent, sizeof(agent), "%s/src/vcuda/agent-config", build);
    struct emu_config ec;
    emu_config_init(&ec);
    ec.gpus = 1;
    ec.memory_bytes = 1ull << 30;
    ec.mode = 0666; /* the cases that run as uid 65534 use the GPU too */
    int r = emu_state_create(state, &ec);
    if (r < 0) {
        fprintf(stderr, "emu_state_create: %s\n", strerror(-r));
        return 1;
    }
    /* The agent's file, at the test library's built-in path. */
    snprintf(cfg, sizeof(cfg), "memory_limit = 64Mi\ncontext_memory = 4Mi\nregion = %s\n", region);
    FILE *f = fopen(agent, "w");
    if (!f || fputs(cfg, f) < 0 || fclose(f) != 0) {
        perror(agent);
        return 1;
    }
    snprintf(libpath, sizeof(libpath), "%s/src/emu", build);
    if (tap_find_asan_runtime(asan, sizeof(asan)))
        snprintf(preload, sizeof(preload), "%s:%s/src/vcuda/libvcuda-agenttest.so", asan, build);
    else
        snprintf(preload, sizeof(preload), "%s/src/vcuda/libvcuda-agenttest.so", build);
    setenv("LD_LIBRARY_PATH", libpath, 1);
    setenv("ACCEL_EMU_STATE", state, 1);
    setenv("ACCEL_EMU_CTX_OVERHEAD", "4Mi", 1);
    /* The tenant's attempts to loosen the agent's file. */
    setenv("VCUDA_CONFIG", "/nonexistent", 1);
    setenv("VCUDA_MEMORY_LIMIT", "1Gi", 1);
    setenv("VCUDA_REGION", tenant_region, 1);
    setenv("VCUDA_TEST_DIR", dir, 1);
    setenv("VCUDA_TEST_REGION", region, 1);
    setenv("VCUDA_TEST_AGENT_CONFIG", agent, 1);
    setenv("VCUDA_TEST_CHILD", "1", 1);
    setenv("LD_PRELOAD", preload, 1);
    pid_t kid = fork();
    if (kid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int rc = wait_exit(kid);
    unlink(agent);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}

int main(int argc, char **argv)
{
    if (!getenv("VCUDA_TEST_CHILD"))
        return launcher(argv);
    if (argc >= 3 && strcmp(argv[1], "--role") == 0)
        return strcmp(argv[2], "info") == 0         ? role_info()
               : strcmp(argv[2], "unassigned") == 0 ? role_unassigned()
                                                    : 2;
    return tap_main(argc, argv);
}
