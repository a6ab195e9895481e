/* cuda_ctx.c — emulated libcuda.so.1: initialization, devices and their attributes, primary
 * and created contexts (with the context memory overhead charged to the GPU; destroying one
 * frees what was allocated in it), error strings, and process-exit release of this process's
 * charges. */
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "cuda_cls.h"
#include "cuda_emu.h"
#include "cuda_export.h"
#include "state-mig.h"
#include "cuda-visible.h"

pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
struct emu_state *cuda_state;
uint64_t cuda_kernel_ns = 10000;

static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static bool init_done;
uint64_t cuda_pool_granularity = 2ull << 20; /* ACCEL_EMU_POOL_GRANULARITY */
static uint64_t ctx_overhead = UINT64_MAX;   /* ACCEL_EMU_CTX_OVERHEAD; UINT64_MAX: the model's */
static struct CUctx_st *primary[EMU_MAX_GPUS];
/* This process's devices, fixed by cuInit (devices_build) */
static struct cuda_device devices[EMU_MAX_GPUS];
static int ndevices;
static struct CUctx_st *contexts; /* created with cuCtxCreate */

#define CTX_STACK 32
static EMU_TLS struct CUctx_st *ctx_stack[CTX_STACK];
static EMU_TLS int ctx_depth;

static uint64_t env_u64(const char *name, uint64_t def, uint64_t mul)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end)
        return def;
    return x * mul;
}

static uint64_t env_size(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno)
        return def;
    uint64_t mul = 1;
    if (!strcasecmp(end, "Ki"))
        mul = 1ull << 10;
    else if (!strcasecmp(end, "Mi"))
        mul = 1ull << 20;
    else if (!strcasecmp(end, "Gi"))
        mul = 1ull << 30;
    else if (*end)
        return def;
    return x * mul;
}

/* ---- devices: CUDA_VISIBLE_DEVICES, MIG, VFIO ---- */

static bool add_device(const struct cuda_device *d)
{
    for (int i = 0; i < ndevices; i++)
        if (devices[i].gpu == d->gpu && devices[i].mig_serial == d->mig_serial)
            return true; /* named twice: once */
    if (ndevices == EMU_MAX_GPUS)
        return false;
    devices[ndevices++] = *d;
    return true;
}

static void whole_gpu(unsigned i, struct cuda_device *d)
{
    const struct emu_gpu *g = emu_state_gpu(cuda_state, i);
    memset(d, 0, sizeof(*d));
    d->gpu = i;
    d->sms = g->sm_count;
    d->mem_bytes = g->memory_total - g->memory_reserved;
    snprintf(d->name, sizeof(d->name), "%s", g->name);
    memcpy(d->uuid, g->uuid_bytes, 16);
}

/* MIG device k (in NVML's order) of GPU i; false when it has none such. The device's name is
 * the parent's with its profile ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", as CUDA names a MIG
 * device), its memory its GPU instance's, its SMs its compute instance's. */
static bool mig_device(unsigned i, unsigned k, struct cuda_device *d)
{
    const struct emu_gpu *g = emu_state_gpu(cuda_state, i);
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    unsigned gis[EMU_MIG_MAX_GI * EMU_MIG_MAX_CI], cis[EMU_MIG_MAX_GI * EMU_MIG_MAX_CI];
    const struct emu_mig_board *b = emu_state_mig_board(g);
    if (!b || !g->mig_mode || emu_state_mig_snapshot(cuda_state, i, tab) < 0 ||
        k >= emu_mig_order(tab, gis, cis, EMU_MIG_MAX_GI * EMU_MIG_MAX_CI))
        return false;
    const struct emu_mig_gi *gi = &tab[gis[k]];
    const struct emu_mig_ci *ci = &gi->ci[cis[k]];
    const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, gi->profile);
    if (!p)
        return false;
    char n[64];
    emu_mig_ci_name(p, ci->size, n, sizeof(n));
    memset(d, 0, sizeof(*d));
    d->gpu = i;
    d->mig_serial = ci->serial;
    d->gi = gis[k];
    d->ci = cis[k];
    d->sms = emu_mig_ci_sms(p, ci->size);
    d->mem_bytes = emu_mig_gi_bytes(b, p, g->memory_total);
    snprintf(d->name, sizeof(d->name), "%s MIG %s", g->name, n);
    memcpy(d->uuid, ci->uuid_bytes, 16);
    return true;
}

/* What CUDA sees with CUDA_VISIBLE_DEVICES unset: every GPU the nvidia driver owns (not one bound
 * to vfio-pci) and this process has a device node of (emu_state_gpu_hidden), in PCI order; a GPU in
 * MIG mode is not usable whole, and of the MIG devices only the first is enumerated ("regardless of
 * how many MIG devices are created ..., a single CUDA process can only enumerate a single MIG
 * device", MIG User Guide, "CUDA Device Enumeration"; that note names CUDA 11/R450 and CUDA
 * 12/R525: the emulator keeps it for 13.0). */
static size_t default_devices(struct cuda_device *out, size_t max)
{
    size_t n = 0;
    bool mig = false;
    for (unsigned i = 0; i < emu_state_gpu_count(cuda_state) && n < max; i++) {
        const struct emu_gpu *g = emu_state_gpu(cuda_state, i);
        if (emu_state_gpu_hidden(g))
            continue;
        if (!g->mig_mode)
            whole_gpu(i, &out[n++]);
        else if (!mig && mig_device(i, 0, &out[n]))
            n++, mig = true;
    }
    return n;
}

/* The one GPU whose UUID starts with prefix (case-insensitive), -1 for none or several. */
static int gpu_by_prefix(const char *prefix)
{
    int found = -1;
    for (unsigned i = 0; i < emu_state_gpu_count(cuda_state); i++)
        if (strncasecmp(emu_state_gpu(cuda_state, i)->uuid, prefix, strlen(prefix)) == 0) {
            if (found >= 0)
                return -1;
            found = (int)i;
        }
    return found;
}

/* The MIG device an entry names ("MIG-<UUID>", a unique prefix of one, or the older
 * "MIG-GPU-<UUID>/<GPU instance ID>/<compute instance ID>"); false when none or several match. */
static bool mig_entry(const struct emu_visible_entry *e, struct cuda_device *ret)
{
    unsigned hits = 0;
    struct cuda_device m;
    bool legacy = e->kind == EMU_VISIBLE_MIG_LEGACY;
    int legacy_gpu = legacy ? gpu_by_prefix(e->uuid) : -1;
    for (unsigned i = 0; i < emu_state_gpu_count(cuda_state); i++) {
        const struct emu_gpu *g = emu_state_gpu(cuda_state, i);
        if (legacy && (int)i != legacy_gpu)
            continue;
        for (unsigned k = 0; mig_device(i, k, &m); k++) {
            const struct emu_mig_gi *gi = &g->mig[m.gi];
            bool match = legacy ? gi->id == e->gi && gi->ci[m.ci].id == e->ci
                                : strncasecmp(gi->ci[m.ci].uuid, e->uuid, strlen(e->uuid)) == 0;
            if (match && hits++)
                return false; /* an ambiguous prefix */
            if (match)
                *ret = m;
        }
    }
    return hits == 1;
}

/* The devices, from CUDA_VISIBLE_DEVICES (cuda-visible.h; an entry that names nothing visible ends
 * the list, as CUDA documents); a GPU bound to vfio-pci, or without a device node in this
 * container, is never one. Called once, by cuInit. */
static void devices_build(void)
{
    struct cuda_device deflt[EMU_MAX_GPUS], d;
    size_t nd = default_devices(deflt, EMU_MAX_GPUS);
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    ndevices = 0;
    if (!v) {
        for (size_t i = 0; i < nd; i++)
            devices[ndevices++] = deflt[i];
        return;
    }
    struct emu_visible_entry e[EMU_VISIBLE_MAX];
    size_t n = emu_visible_parse(v, e, EMU_VISIBLE_MAX);
    bool mig = false;
    for (size_t k = 0; k < n; k++) {
        memset(&d, 0, sizeof(d));
        bool ok = false;
        if (e[k].kind == EMU_VISIBLE_INDEX) {
            ok = e[k].index < nd;
            if (ok)
                d = deflt[e[k].index];
        } else if (e[k].kind == EMU_VISIBLE_GPU_UUID) {
            int i = gpu_by_prefix(e[k].uuid);
            const struct emu_gpu *g = i >= 0 ? emu_state_gpu(cuda_state, (unsigned)i) : NULL;
            ok = g && !emu_state_gpu_hidden(g);
            if (ok && !g->mig_mode)
                whole_gpu((unsigned)i, &d);
            else if (ok && !mig_device((unsigned)i, 0, &d))
                continue; /* a GPU in MIG mode without MIG devices: nothing to add */
        } else {
            ok = mig_entry(&e[k], &d) && !emu_state_gpu_hidden(emu_state_gpu(cuda_state, d.gpu));
        }
        if (!ok)
            break;
        if (d.mig_serial && mig)
            continue; /* one MIG device per process (default_devices) */
        mig |= d.mig_serial != 0;
        if (!add_device(&d))
            break;
    }
}

const struct cuda_device *cuda_dev(int dev)
{
    return dev >= 0 && dev < ndevices ? &devices[dev] : NULL;
}

unsigned cuda_dev_gpu(int dev)
{
    return dev >= 0 && dev < ndevices ? devices[dev].gpu : 0;
}

uint32_t cuda_dev_sms(int dev)
{
    return dev >= 0 && dev < ndevices && devices[dev].sms ? devices[dev].sms : 1;
}

bool cuda_dev_mig(int dev)
{
    return dev >= 0 && dev < ndevices && devices[dev].mig_serial;
}

EMU_API CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    if (!init_done) {
        init_done = true;
        char err[512];
        int r = emu_state_open_env_err(&cuda_state, err, sizeof(err));
        if (r < 0) {
            fprintf(stderr,
                    "accel-emu libcuda: no emulated GPUs (%s): run `accel-emu init` and set "
                    "ACCEL_EMU_STATE to its state file\n",
                    err);
            init_result = CUDA_ERROR_NO_DEVICE;
        } else {
            cuda_kernel_ns = env_u64("ACCEL_EMU_KERNEL_US", 10, 1000);
            ctx_overhead = env_size("ACCEL_EMU_CTX_OVERHEAD", UINT64_MAX);
            uint64_t g = env_size("ACCEL_EMU_POOL_GRANULARITY", 2ull << 20);
            /* whole 2 MiB pages, as pool blocks are; at most 1 GiB */
            g = (g + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
            cuda_pool_granularity = g == 0 || g > (1ull << 30) ? 2ull << 20 : g;
            devices_build();
            /* no device at all is what the driver answers too (e.g. every GPU bound to
             * vfio-pci, or CUDA_VISIBLE_DEVICES naming none) */
            init_result = ndevices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
        }
    }
    CUresult r = init_result;
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

bool cuda_static_program(void)
{
    static int cached = -1; /* racing first calls compute the same answer */
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
        unsigned long n = getauxval(AT_PHNUM);
        v = ph != NULL; /* unknown: assume dynamic */
        for (unsigned long i = 0; ph && i < n; i++)
            if (ph[i].p_type == PT_INTERP)
                v = 0;
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v == 1;
}

CUresult cuda_check_init(void)
{
    return __atomic_load_n(&init_result, __ATOMIC_ACQUIRE);
}

bool cuda_dev_valid(CUdevice dev)
{
    return cuda_state && dev >= 0 && dev < ndevices;
}

#define NEED_INIT()                                                                                \
    do {                                                                                           \
        CUresult r_ = cuda_check_init();                                                           \
        if (r_)                                                                                    \
            return r_;                                                                             \
    } while (0)

#define NEED_DEV(d)                                                                                \
    do {                                                                                           \
        NEED_INIT();                                                                               \
        if (!cuda_dev_valid(d))                                                                    \
            return CUDA_ERROR_INVALID_DEVICE;                                                      \
    } while (0)

static struct emu_gpu *gpu_of(CUdevice d)
{
    return emu_state_gpu(cuda_state, cuda_dev_gpu(d));
}

static const struct cuda_device *dev_of(CUdevice d)
{
    return &devices[d];
}

/* Process exit: give back what this process holds, so the memory "comes back" at once
 * (a killed process is reclaimed by whoever notices instead). */
__attribute__((destructor)) static void cuda_fini(void)
{
    if (cuda_state)
        emu_state_proc_release(cuda_state);
}

EMU_API CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = EMU_CUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    *count = ndevices;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(ordinal);
    *dev = ordinal;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    snprintf(name, (size_t)len, "%s", dev_of(dev)->name);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    memcpy(uuid->bytes, dev_of(dev)->uuid, 16); /* a MIG device's own UUID */
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}

EMU_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    /* what CUDA can use: the board's memory less what the driver keeps back, or a MIG device's
     * GPU instance's memory */
    *bytes = dev_of(dev)->mem_bytes;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    *major = (int)gpu_of(dev)->cc_major;
    *minor = (int)gpu_of(dev)->cc_minor;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetPCIBusId(char *busid, int len, CUdevice dev)
{
    if (!busid || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    /* the driver's form has a 4-digit domain: "0000:18:00.0" */
    const struct emu_gpu *g = gpu_of(dev);
    snprintf(busid, (size_t)len, "%04x:%02x:%02x.0", g->pci_domain, g->pci_bus, g->pci_device);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *busid)
{
    if (!dev || !busid)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    for (int i = 0; i < ndevices; i++) {
        char b[32];
        cuDeviceGetPCIBusId(b, sizeof(b), (CUdevice)i);
        const char *g = gpu_of((CUdevice)i)->pci_bus_id;
        if (!strcasecmp(b, busid) || !strcasecmp(g, busid)) {
            *dev = (CUdevice)i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

#define A(name) CU_DEVICE_ATTRIBUTE_##name

/* Attributes every emulated GPU reports alike (a recent data-center GPU's limits). Attributes
 * of the model or the configuration are in attribute() below; any other valid attribute
 * (Windows handles, stream memory operations, ...) reads 0. */
static const struct {
    int attr;
    int value;
} fixed_attrs[] = {
    {A(MAX_THREADS_PER_BLOCK), 1024},
    {A(MAX_BLOCK_DIM_X), 1024},
    {A(MAX_BLOCK_DIM_Y), 1024},
    {A(MAX_BLOCK_DIM_Z), 64},
    {A(MAX_GRID_DIM_X), 2147483647},
    {A(MAX_GRID_DIM_Y), 65535},
    {A(MAX_GRID_DIM_Z), 65535},
    {A(MAX_SHARED_MEMORY_PER_BLOCK), 48 * 1024},
    {A(TOTAL_CONSTANT_MEMORY), 64 * 1024},
    {A(WARP_SIZE), 32},
    {A(MAX_PITCH), 2147483647},
    {A(MAX_REGISTERS_PER_BLOCK), 65536},
    {A(TEXTURE_ALIGNMENT), 512},
    {A(GPU_OVERLAP), 1},
    {A(CAN_MAP_HOST_MEMORY), 1},
    {A(SURFACE_ALIGNMENT), 512},
    {A(CONCURRENT_KERNELS), 1},
    {A(ECC_ENABLED), 1},
    {A(L2_CACHE_SIZE), 50 * 1024 * 1024},
    {A(MAX_THREADS_PER_MULTIPROCESSOR), 2048},
    {A(ASYNC_ENGINE_COUNT), 2},
    {A(UNIFIED_ADDRESSING), 1},
    {A(TEXTURE_PITCH_ALIGNMENT), 32},
    {A(STREAM_PRIORITIES_SUPPORTED), 1},
    {A(GLOBAL_L1_CACHE_SUPPORTED), 1},
    {A(LOCAL_L1_CACHE_SUPPORTED), 1},
    {A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR), 228 * 1024},
    {A(MAX_REGISTERS_PER_MULTIPROCESSOR), 65536},
    {A(MANAGED_MEMORY), 1},
    {A(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO), 2},
    {A(CONCURRENT_MANAGED_ACCESS), 1},
    {A(COMPUTE_PREEMPTION_SUPPORTED), 1},
    {A(COOPERATIVE_LAUNCH), 1},
    {A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 227 * 1024},
    {A(HOST_REGISTER_SUPPORTED), 1},
    {A(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), 1},
    {A(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED), 1},
    {A(MAX_BLOCKS_PER_MULTIPROCESSOR), 32},
    {A(RESERVED_SHARED_MEMORY_PER_BLOCK), 1024},
    {A(READ_ONLY_HOST_REGISTER_SUPPORTED), 1},
    {A(MEMORY_POOLS_SUPPORTED), 1},
    {A(MEMPOOL_SUPPORTED_HANDLE_TYPES), 1}, /* POSIX file descriptors */
    {A(IPC_EVENT_SUPPORTED), 1},
    {A(TCC_DRIVER), 0},
    {A(CAN_TEX2D_GATHER), 1},
};

static int attribute(const struct emu_gpu *g, const struct cuda_device *d, int a, int *ret)
{
    switch (a) {
    case A(CLOCK_RATE): /* kHz */
        *ret = (int)g->sm_clock_mhz * 1000;
        return 0;
    case A(MULTIPROCESSOR_COUNT): /* a MIG device's SMs; an MPS client's its thread share */
        *ret = (int)cuda_mps_sms(d->sms);
        return 0;
    case A(COMPUTE_MODE):
        *ret = (int)g->compute_mode;
        return 0;
    case A(PCI_BUS_ID):
        *ret = (int)g->pci_bus;
        return 0;
    case A(PCI_DEVICE_ID):
        *ret = (int)g->pci_device;
        return 0;
    case A(PCI_DOMAIN_ID):
        *ret = (int)g->pci_domain;
        return 0;
    case A(MEMORY_CLOCK_RATE): /* kHz */
        *ret = (int)g->mem_clock_mhz * 1000;
        return 0;
    case A(GLOBAL_MEMORY_BUS_WIDTH):
        *ret = (int)g->mem_bus_bits;
        return 0;
    case A(COMPUTE_CAPABILITY_MAJOR):
        *ret = (int)g->cc_major;
        return 0;
    case A(COMPUTE_CAPABILITY_MINOR):
        *ret = (int)g->cc_minor;
        return 0;
    case A(MULTI_GPU_BOARD_GROUP_ID):
        *ret = (int)g->index;
        return 0;
    case A(CLUSTER_LAUNCH):
        *ret = g->cc_major >= 9;
        return 0;
    case A(NUMA_ID):
        *ret = -1; /* the GPU's memory is not a host NUMA node */
        return 0;
    case A(HOST_NUMA_ID):
        *ret = g->numa_node;
        return 0;
    }
    for (size_t i = 0; i < sizeof(fixed_attrs) / sizeof(fixed_attrs[0]); i++)
        if (fixed_attrs[i].attr == a) {
            *ret = fixed_attrs[i].value;
            return 0;
        }
    if (a >= A(MAXIMUM_TEXTURE1D_WIDTH) && a <= A(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT)) {
        *ret = 65536; /* texture and surface size limits: not modelled, generous */
        return 0;
    }
    if (a > 0 && a < 150) {
        *ret = 0;
        return 0;
    }
    return -1;
}

EMU_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    return attribute(gpu_of(dev), dev_of(dev), (int)attrib, pi) == 0 ? CUDA_SUCCESS
                                                                     : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    if (!cuda_dev_valid(peer))
        return CUDA_ERROR_INVALID_DEVICE;
    /* peers on one NUMA node or linked by NVLink; MIG devices have no peer access (`nvidia-smi
     * mig -lgip`: "P2P No") */
    const struct emu_gpu *g = gpu_of(dev);
    unsigned p = cuda_dev_gpu(peer);
    *can = dev != peer && !cuda_dev_mig(dev) && !cuda_dev_mig(peer) && p != cuda_dev_gpu(dev) &&
           (g->nvlinks[p] > 0 || g->topo[p] < EMU_TOPO_SYSTEM);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice src,
                                         CUdevice dst)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(src);
    if (!cuda_dev_valid(dst) || src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    int can;
    cuDeviceCanAccessPeer(&can, src, dst);
    switch (attrib) {
    case 1: /* performance rank */
        *value = gpu_of(src)->nvlinks[cuda_dev_gpu(dst)] ? 0 : 1;
        break;
    case 2: /* access supported */
    case 3: /* native atomics */
    case 4: /* cuda array access */
        *value = can;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- contexts ---- */

struct CUctx_st *cuda_current(void)
{
    return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

/* A GPU marked lost (`accel-emu lose`: XID 79, fallen off the bus) takes no more work. The
 * driver API documents no code for "fallen off the bus"; CUDA_ERROR_DEVICE_UNAVAILABLE (46) is
 * the one whose documented meaning fits ("the requested CUDA device is unavailable at the
 * current time", CUDA Driver API, CUresult). docs/emulator-cuda.md, "Lost GPUs", says why not
 * the sticky launch-failure codes. */
bool cuda_dev_lost(int dev)
{
    const struct emu_gpu *g = emu_state_gpu(cuda_state, cuda_dev_gpu(dev));
    return g && __atomic_load_n(&g->lost, __ATOMIC_RELAXED);
}

CUresult cuda_need_ctx(struct CUctx_st **ret)
{
    CUresult r = cuda_check_init();
    if (r)
        return r;
    struct CUctx_st *c = cuda_current();
    if (!c || c->magic != EMU_MAGIC_CTX || !c->active)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (cuda_dev_lost(c->dev))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    if ((r = cuda_mps_fault(c->dev)) != CUDA_SUCCESS)
        return r;
    *ret = c;
    return CUDA_SUCCESS;
}

/* The fields a context starts with; the memory overhead is charged by ctx_activate. */
static void ctx_init(struct CUctx_st *c, CUdevice dev, unsigned flags, bool prim)
{
    static unsigned long long ids;
    c->magic = EMU_MAGIC_CTX;
    c->id = __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED);
    c->dev = dev;
    c->flags = flags;
    c->primary = prim;
    memset(&c->null_stream, 0, sizeof(c->null_stream));
    c->null_stream.magic = EMU_MAGIC_STREAM;
    c->null_stream.ctx = c;
    c->last_end_ns = 0;
    memset(c->limits, 0, sizeof(c->limits));
    c->limits[0] = 1024;    /* stack size */
    c->limits[1] = 1 << 20; /* printf fifo */
    c->limits[2] = 8 << 20; /* malloc heap */
}

static CUresult ctx_activate(struct CUctx_st *c)
{
    CUresult f = cuda_mps_new_client_locked(c->dev);
    if (f)
        return f;
    /* on a MIG device, the process's charges on the GPU are its GPU instance's from now on;
     * an instance destroyed since cuInit is a device no longer there */
    const struct cuda_device *d = dev_of(c->dev);
    int b = d->mig_serial ? emu_state_mig_bind(cuda_state, d->gpu, d->mig_serial) : 0;
    if (b == -ENOSPC)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (b < 0)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    /* a context costs device memory: the model's (state.c), unless overridden */
    uint64_t cost = ctx_overhead != UINT64_MAX ? ctx_overhead : gpu_of(c->dev)->ctx_cost;
    if (cost && emu_state_mem_charge(cuda_state, cuda_dev_gpu(c->dev), cost) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->charged = cost;
    c->active = true;
    return CUDA_SUCCESS;
}

static CUresult ctx_new(CUdevice dev, unsigned flags, bool prim, struct CUctx_st **ret)
{
    if (cuda_dev_lost(dev))
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    struct CUctx_st *c = calloc(1, sizeof(*c));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_init(c, dev, flags, prim);
    CUresult r = ctx_activate(c);
    if (r) {
        free(c);
        return r;
    }
    *ret = c;
    return CUDA_SUCCESS;
}

/* Drops every reference any thread's stack of this thread has; other threads' stacks are
 * theirs (as with the real driver, using a destroyed context there is an error). */
static void ctx_unstack(struct CUctx_st *c)
{
    for (int i = 0; i < ctx_depth; i++)
        if (ctx_stack[i] == c)
            ctx_stack[i] = NULL;
    while (ctx_depth && !ctx_stack[ctx_depth - 1])
        ctx_depth--;
}

/* Ends what a context holds: its work, context-local storage (destructors run), memory,
 * charge and streams. A primary context's object stays (the runtime keeps its handle across
 * cudaDeviceReset), inactive until the next retain. */
static void ctx_deactivate(struct CUctx_st *c)
{
    cuda_ctx_sync(c);
    cuda_cls_ctx_destroy(c);
    cuda_mem_ctx_destroy(c); /* its allocations go with it, as on the driver */
    if (c->charged)
        emu_state_mem_uncharge(cuda_state, cuda_dev_gpu(c->dev), c->charged);
    c->charged = 0;
    cuda_stream_list_free(c);
    pthread_mutex_lock(&cuda_lock);
    c->active = false;
    ctx_init(c, c->dev, c->flags, c->primary);
    pthread_mutex_unlock(&cuda_lock);
}

static void ctx_free(struct CUctx_st *c)
{
    ctx_deactivate(c);
    c->magic = 0;
    free(c);
}

/* The primary context object of dev, made (inactive, uncharged) on first use; cuda_lock held. */
static CUresult primary_locked(CUdevice dev, struct CUctx_st **ret)
{
    if (!primary[dev]) {
        struct CUctx_st *c = calloc(1, sizeof(*c));
        if (!c)
            return CUDA_ERROR_OUT_OF_MEMORY;
        ctx_init(c, dev, 0, true);
        primary[dev] = c;
    }
    *ret = primary[dev];
    return CUDA_SUCCESS;
}

CUresult cuda_primary_get(CUdevice dev, struct CUctx_st **ret)
{
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    CUresult r = primary_locked(dev, ret);
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

EMU_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    struct CUctx_st *c;
    CUresult r = primary_locked(dev, &c);
    if (!r && !c->active)
        r = ctx_activate(c);
    if (!r) {
        c->refs++;
        *pctx = c;
    }
    pthread_mutex_unlock(&cuda_lock);
    return r;
}

EMU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    struct CUctx_st *c = primary[dev];
    if (!c || !c->active || c->refs <= 0) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->refs == 0) {
        ctx_unstack(c);
        pthread_mutex_unlock(&cuda_lock);
        ctx_deactivate(c);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

EMU_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    struct CUctx_st *c = primary[dev];
    bool was = c && c->active;
    if (was) {
        c->refs = 0;
        ctx_unstack(c);
    }
    pthread_mutex_unlock(&cuda_lock);
    if (was)
        ctx_deactivate(c);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

EMU_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    pthread_mutex_lock(&cuda_lock);
    *active = primary[dev] && primary[dev]->active;
    *flags = primary[dev] ? primary[dev]->flags : 0;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    NEED_DEV(dev);
    if (flags & ~0xffu)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&cuda_lock);
    if (primary[dev])
        primary[dev]->flags = flags;
    pthread_mutex_unlock(&cuda_lock);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    if (!pctx || (flags & ~0xffu))
        return CUDA_ERROR_INVALID_VALUE;
    NEED_DEV(dev);
    struct CUctx_st *c;
    CUresult r = ctx_new(dev, flags, false, &c);
    if (r)
        return r;
    pthread_mutex_lock(&cuda_lock);
    c->next = contexts;
    contexts = c;
    pthread_mutex_unlock(&cuda_lock);
    if (ctx_depth == CTX_STACK) {
        *pctx = c;
        return CUDA_SUCCESS;
    }
    ctx_stack[ctx_depth++] = c; /* a created context becomes current */
    *pctx = c;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *affinity, int naffinity,
                                unsigned int flags, CUdevice dev)
{
    if (naffinity < 0 || (naffinity > 0 && !affinity))
        return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

EMU_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED_INIT();
    pthread_mutex_lock(&cuda_lock);
    struct CUctx_st **pp = &contexts;
    while (*pp && *pp != ctx)
        pp = &(*pp)->next;
    if (!*pp) {
        pthread_mutex_unlock(&cuda_lock);
        return CUDA_ERROR_INVALID_CONTEXT; /* unknown, or a primary context */
    }
    *pp = ctx->next;
    ctx_unstack(ctx);
    pthread_mutex_unlock(&cuda_lock);
    ctx_free(ctx);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

static bool ctx_known(struct CUctx_st *c)
{
    return c && c->magic == EMU_MAGIC_CTX;
}

EMU_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == CTX_STACK)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    NEED_INIT();
    if (!ctx_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = c;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx) {
        if (ctx_depth)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth)
        ctx_stack[ctx_depth - 1] = ctx;
    else
        ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    *pctx = cuda_current();
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetDevice(CUdevice *dev)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    *dev = c->dev;
    return CUDA_SUCCESS;
}

/* CUDA 13: the context is named (NULL: the current one). */
EMU_API CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (!ctx)
        ctx = cuda_current();
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *dev = ctx->dev;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx)
        ctx = cuda_current();
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    return cuda_ctx_sync(ctx);
}

EMU_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (!ctx)
        ctx = cuda_current();
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    NEED_INIT();
    if (!ctx)
        ctx = cuda_current();
    if (!ctx_known(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = ctx->id;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSynchronize(void)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    return cuda_ctx_sync(c);
}

EMU_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    if ((int)limit < 0 || (int)limit >= 10)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    c->limits[limit] = value;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    if ((int)limit < 0 || (int)limit >= 10)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *value = c->limits[limit];
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    NEED_INIT();
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
    if (!config)
        return CUDA_ERROR_INVALID_VALUE;
    *config = CU_FUNC_CACHE_PREFER_NONE;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    return (int)config >= 0 && config <= CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_SUCCESS
                                                                    : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    if (!ctx_known(peer) || flags)
        return CUDA_ERROR_INVALID_VALUE;
    int can = 0;
    cuDeviceCanAccessPeer(&can, c->dev, peer->dev);
    return can ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

EMU_API CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
    return ctx_known(peer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- memory info (charges of every process on this GPU) ---- */

EMU_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct CUctx_st *c;
    CUresult r = cuda_need_ctx(&c);
    if (r)
        return r;
    uint64_t used = 0, tot = 0;
    const struct cuda_device *d = dev_of(c->dev);
    if (d->mig_serial) {
        /* a MIG device: its GPU instance's memory and what is used there */
        tot = d->mem_bytes;
        used = emu_state_mig_gi_used(cuda_state, d->gpu, d->gi);
    } else {
        emu_state_mem_info(cuda_state, d->gpu, &used, &tot);
        tot -= gpu_of(c->dev)->memory_reserved; /* never CUDA's (NVML v2 `reserved`) */
    }
    if (free_bytes)
        *free_bytes = used < tot ? tot - used : 0;
    if (total)
        *total = tot;
    return CUDA_SUCCESS;
}

/* ---- errors ---- */

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not initiated in this stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

EMU_API CUresult cuGetErrorName(CUresult e, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == (int)e) {
            *str = errors[i].name;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuGetErrorString(CUresult e, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
        if (errors[i].code == (int)e) {
            *str = errors[i].text;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
