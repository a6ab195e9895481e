/* state.c — the shared emulated machine (see state.h): creating and mapping the state file,
 * the robust lock, the model table, memory accounting per process, the per-GPU kernel
 * timeline and the per-GPU event rings. libc only: linked into the emulator's libcuda.so.1 and
 * libnvidia-ml.so.1, which are loaded into arbitrary processes. */
#include "state.h"
#include "state-mig.h"
#include "state-mps.h"

#include "proc.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct emu_state {
    struct emu_shared *sh;
    size_t len;
    /* validated at open; a later write to the file's count cannot move an index out of
     * the mapping */
    unsigned gpu_count;
};

#define MiB (1024ull * 1024ull)

/* Figures as the real boards report them (memory as nvidia-smi shows it). The last two columns
 * are the memory the driver keeps back (nvidia-smi's total less the total CUDA reports on that
 * board, rounded to MiB) and what one context costs (a process's used memory in nvidia-smi
 * after creating a context and nothing else, rounded to 2 MiB pages). NVIDIA publishes no table
 * of either: they are representative observed sizes, not documented ones
 * (docs/emulator-cuda.md). */
/* The last column is the board's PCI device id with NVIDIA's vendor id (the PCI ID
 * Repository's entries for these boards). The H200's context is what this project measured on
 * one (518 MiB, docs/vcuda.md); its reserve and the A100 40GB's context and reserve are not
 * observed: the figures of their siblings (H100, A100 80GB) stand in. */
static const struct emu_model models[] = {
    {"NVIDIA H100 80GB HBM3", "H100", 81559 * MiB, 132, 1980, 2619, 9, 0, 700000, 18, 5120,
     459 * MiB, 480 * MiB, 0x233010deu},
    {"NVIDIA A100-SXM4-80GB", "A100", 81920 * MiB, 108, 1410, 1593, 8, 0, 400000, 12, 5120,
     768 * MiB, 410 * MiB, 0x20b210deu},
    {"NVIDIA A100-SXM4-40GB", "A100-40", 40960 * MiB, 108, 1410, 1215, 8, 0, 400000, 12, 5120,
     768 * MiB, 410 * MiB, 0x20b010deu},
    {"NVIDIA H200", "H200", 143771 * MiB, 132, 1980, 3201, 9, 0, 700000, 18, 6144, 459 * MiB,
     518 * MiB, 0x233510deu},
    {"NVIDIA L4", "L4", 23034 * MiB, 58, 2040, 6251, 8, 9, 72000, 0, 192, 475 * MiB, 290 * MiB,
     0x27b810deu},
    {"Tesla T4", "T4", 15360 * MiB, 40, 1590, 5001, 7, 5, 70000, 0, 256, 256 * MiB, 160 * MiB,
     0x1eb810deu},
};

const struct emu_model *emu_model_table(size_t *ret_n)
{
    if (ret_n)
        *ret_n = sizeof(models) / sizeof(models[0]);
    return models;
}

const struct emu_model *emu_model_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
        if (strcasecmp(name, models[i].name) == 0 || strcasecmp(name, models[i].alias) == 0)
            return &models[i];
    return NULL;
}

void emu_config_init(struct emu_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->gpus = 4;
    cfg->model = NULL;
    cfg->nvlink = EMU_NVLINK_ALL;
}

uint64_t emu_state_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* splitmix64: a fixed, well-mixed sequence from the seed, so UUIDs are reproducible. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* PCI buses of an 8-GPU HGX board; further GPUs continue past them. */
static const uint8_t pci_buses[] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

static void fill_gpu(struct emu_gpu *g, unsigned i, const struct emu_config *cfg,
                     const struct emu_model *m)
{
    g->index = i;
    g->minor = i;
    g->numa_node = cfg->numa_count ? cfg->numa[i] : 0;
    g->cc_major = m->cc_major;
    g->cc_minor = m->cc_minor;
    g->sm_count = m->sm_count;
    g->sm_clock_mhz = m->sm_clock_mhz;
    g->sm_clock_max_mhz = m->sm_clock_mhz;
    g->mem_clock_mhz = m->mem_clock_mhz;
    g->mem_bus_bits = m->mem_bus_bits;
    g->memory_total = cfg->memory_bytes ? cfg->memory_bytes : m->memory_bytes;
    /* a custom size is a custom board: all of it is the processes' */
    g->memory_reserved = cfg->memory_bytes ? 0 : m->reserved_bytes;
    g->ctx_cost = m->ctx_bytes;

    uint64_t s = cfg->seed * 0x100000001b3ull + i + 1;
    uint64_t a = mix64(&s), b = mix64(&s);
    for (int k = 0; k < 8; k++) {
        g->uuid_bytes[k] = (uint8_t)(a >> (8 * k));
        g->uuid_bytes[8 + k] = (uint8_t)(b >> (8 * k));
    }
    g->uuid_bytes[6] = (uint8_t)((g->uuid_bytes[6] & 0x0f) | 0x40); /* looks like a v4 UUID */
    g->uuid_bytes[8] = (uint8_t)((g->uuid_bytes[8] & 0x3f) | 0x80);
    const uint8_t *u = g->uuid_bytes;
    snprintf(g->uuid, sizeof(g->uuid),
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    snprintf(g->name, sizeof(g->name), "%s", m->name);
    g->pci_domain = 0;
    g->pci_bus = i < sizeof(pci_buses) ? pci_buses[i] : 0xe0 + (i - sizeof(pci_buses));
    g->pci_device = 0;
    snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "%08X:%02X:%02X.0", g->pci_domain, g->pci_bus,
             g->pci_device);
    g->pci_device_id = m->pci_device_id;
    g->iommu_group = EMU_IOMMU_GROUP_BASE + (cfg->iommu_shared ? i / 2 : i);
    snprintf(g->serial, sizeof(g->serial), "%013llu",
             (unsigned long long)((a ^ b) % 10000000000000ull));

    g->temperature_c = 33;
    g->power_limit_mw = m->power_limit_mw;
    g->power_mw = m->power_limit_mw / 10;
    g->fan_percent = 0;
    g->pstate = 0;
    g->compute_mode = 0;
    g->timeslice_us = cfg->timeslice_us;
}

static void fill_links(struct emu_shared *sh, const struct emu_config *cfg,
                       const struct emu_model *m)
{
    unsigned n = cfg->gpus;
    uint32_t links = m->nvlinks ? m->nvlinks : 4; /* a model with none still gets links asked for */
    for (unsigned i = 0; i < n; i++) {
        struct emu_gpu *g = &sh->gpus[i];
        for (unsigned j = 0; j < n; j++) {
            if (i == j) {
                g->topo[j] = EMU_TOPO_INTERNAL;
                continue;
            }
            if (g->numa_node != sh->gpus[j].numa_node)
                g->topo[j] = EMU_TOPO_SYSTEM;
            else if (i / 2 == j / 2)
                g->topo[j] = EMU_TOPO_SINGLE; /* two GPUs behind one PCIe switch */
            else
                g->topo[j] = EMU_TOPO_NODE;
            uint32_t l = 0;
            if (cfg->nvlink == EMU_NVLINK_ALL)
                l = links / (n - 1) ? links / (n - 1) : 1;
            else if (cfg->nvlink == EMU_NVLINK_PAIRS && i / 2 == j / 2)
                l = links;
            g->nvlinks[j] = (uint8_t)(l > 255 ? 255 : l);
        }
    }
}

static int init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int r = pthread_mutexattr_init(&a);
    if (r)
        return -r;
    r = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!r)
        r = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!r)
        r = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -r;
}

int emu_state_create(const char *path, const struct emu_config *cfg)
{
    if (!path || !*path || !cfg || cfg->gpus < 1 || cfg->gpus > EMU_MAX_GPUS)
        return -EINVAL;
    if (cfg->nvlink != EMU_NVLINK_NONE && cfg->nvlink != EMU_NVLINK_ALL &&
        cfg->nvlink != EMU_NVLINK_PAIRS)
        return -EINVAL;
    if (cfg->numa_count && cfg->numa_count != cfg->gpus)
        return -EINVAL;
    for (unsigned i = 0; i < cfg->numa_count; i++)
        if (cfg->numa[i] < -1 || cfg->numa[i] > 1023)
            return -EINVAL;
    const struct emu_model *m = cfg->model ? emu_model_find(cfg->model) : &models[0];
    if (!m)
        return -EINVAL;
    if (cfg->memory_bytes &&
        (cfg->memory_bytes < EMU_MEMORY_MIN || cfg->memory_bytes > EMU_MEMORY_MAX))
        return -EINVAL;
    if (cfg->mode > 0777 || (cfg->mode && (cfg->mode & 0600) != 0600))
        return -EINVAL;
    if (cfg->timeslice_us > EMU_TIMESLICE_MAX_US)
        return -EINVAL;

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp)
        return -ENOMEM;
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int r = -errno;
        free(tmp);
        return r;
    }
    size_t len = sizeof(struct emu_shared);
    int r = 0;
    struct emu_shared *sh = MAP_FAILED;
    /* explicit, so the umask has no say (mkstemp made it 0600 already) */
    if (fchmod(fd, cfg->mode ? cfg->mode : 0600) < 0 || ftruncate(fd, (off_t)len) < 0) {
        r = -errno;
        goto out;
    }
    sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sh == MAP_FAILED) {
        r = -errno;
        goto out;
    }
    /* the file is fresh (zeroes); fill it, then publish it by rename */
    sh->version = EMU_STATE_VERSION;
    sh->gpu_count = cfg->gpus;
    sh->size = len;
    sh->seed = cfg->seed;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    sh->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    snprintf(sh->model, sizeof(sh->model), "%s", m->name);
    sh->nvlink_mode = cfg->nvlink;
    r = init_mutex(&sh->mutex);
    if (r < 0)
        goto out;
    for (unsigned i = 0; i < cfg->gpus; i++)
        fill_gpu(&sh->gpus[i], i, cfg, m);
    fill_links(sh, cfg, m);
    __atomic_store_n(&sh->magic, EMU_STATE_MAGIC, __ATOMIC_RELEASE);
    if (msync(sh, len, MS_SYNC) < 0 || rename(tmp, path) < 0)
        r = -errno;
out:
    if (sh != MAP_FAILED)
        munmap(sh, len);
    close(fd);
    if (r < 0)
        unlink(tmp);
    free(tmp);
    return r;
}

/* ---- validation ---- */

#define BAD(...) (errbuf_printf(err, errlen, __VA_ARGS__), -EPROTO)

static bool has_nul(const char *s, size_t n)
{
    return memchr(s, 0, n) != NULL;
}

static bool topo_level_ok(uint8_t v)
{
    return v == EMU_TOPO_INTERNAL || v == EMU_TOPO_SINGLE || v == EMU_TOPO_MULTIPLE ||
           v == EMU_TOPO_HOSTBRIDGE || v == EMU_TOPO_NODE || v == EMU_TOPO_SYSTEM;
}

static int validate_gpu(const struct emu_gpu *g, unsigned i, unsigned n, char *err, size_t errlen)
{
    if (g->index != i || g->minor > 255)
        return BAD("GPU %u: index %u, minor %u (want %u, 0-255)", i, g->index, g->minor, i);
    if (!has_nul(g->uuid, sizeof(g->uuid)) || !has_nul(g->name, sizeof(g->name)) ||
        !has_nul(g->pci_bus_id, sizeof(g->pci_bus_id)) || !has_nul(g->serial, sizeof(g->serial)))
        return BAD("GPU %u: an identity string (UUID, name, bus id, serial) is not terminated", i);
    if (g->memory_total < EMU_MEMORY_MIN || g->memory_total > EMU_MEMORY_MAX)
        return BAD("GPU %u: memory total %" PRIu64 " bytes (want 64 MiB to 1 PiB)", i,
                   g->memory_total);
    /* processes get memory_total - memory_reserved: the difference must not wrap */
    if (g->memory_reserved >= g->memory_total || g->ctx_cost > EMU_MEMORY_MAX)
        return BAD("GPU %u: reserved memory %" PRIu64 " bytes of %" PRIu64 ", context cost %" PRIu64
                   " bytes (want less than the total, a cost up to 1 PiB)",
                   i, g->memory_reserved, g->memory_total, g->ctx_cost);
    if (g->numa_node < -1 || g->numa_node > 1023)
        return BAD("GPU %u: NUMA node %d (want -1 to 1023)", i, g->numa_node);
    if (g->sm_count < 1 || g->sm_count > 4096 || g->cc_major < 1 || g->cc_major > 99 ||
        g->cc_minor > 9)
        return BAD("GPU %u: %u SMs, compute capability %u.%u (want 1-4096 SMs, 1.0-99.9)", i,
                   g->sm_count, g->cc_major, g->cc_minor);
    if (g->sm_clock_max_mhz < 1 || g->sm_clock_max_mhz > 10000 || g->sm_clock_mhz < 1 ||
        g->sm_clock_mhz > g->sm_clock_max_mhz || g->mem_clock_mhz < 1 || g->mem_clock_mhz > 10000)
        return BAD("GPU %u: clocks SM %u of %u MHz, memory %u MHz (want 1-10000, SM up to its "
                   "maximum)",
                   i, g->sm_clock_mhz, g->sm_clock_max_mhz, g->mem_clock_mhz);
    if (g->temperature_c > 200 || g->power_mw > 2000000 || g->power_limit_mw > 2000000 ||
        g->fan_percent > 100 || g->pstate > 15)
        return BAD("GPU %u: a sensor is out of range (temperature %u C, power %u/%u mW, fan %u "
                   "%%, P-state %u)",
                   i, g->temperature_c, g->power_mw, g->power_limit_mw, g->fan_percent, g->pstate);
    if (g->lost > 1 || g->mig_mode > 1 || g->mig_mode_pending > 1 ||
        (g->compute_mode != 0 && g->compute_mode != 2 && g->compute_mode != 3))
        return BAD("GPU %u: lost %u, MIG %u/%u, compute mode %u (want 0/1 flags, modes 0, 2, 3)", i,
                   g->lost, g->mig_mode, g->mig_mode_pending, g->compute_mode);
    for (unsigned j = 0; j < n; j++)
        if (!topo_level_ok(g->topo[j]))
            return BAD("GPU %u: topology level %u towards GPU %u", i, g->topo[j], j);
    /* events: each filled entry sits where its sequence number puts it, none from the future */
    for (unsigned k = 0; k < EMU_EVENT_RING; k++) {
        uint64_t seq = g->events[k].seq;
        if (seq && (seq > g->event_seq || (seq - 1) % EMU_EVENT_RING != k))
            return BAD("GPU %u: event ring entry %u holds sequence %" PRIu64 " (last %" PRIu64 ")",
                       i, k, seq, g->event_seq);
    }
    if (g->timeslice_us > EMU_TIMESLICE_MAX_US)
        return BAD("GPU %u: time slice %u us (want at most %u)", i, g->timeslice_us,
                   EMU_TIMESLICE_MAX_US);
    if (g->vfio > 1 || g->iommu_group < EMU_IOMMU_GROUP_BASE ||
        g->iommu_group > EMU_IOMMU_GROUP_MAX ||
        (g->pci_functions & ~(EMU_PCI_FN_AUDIO | EMU_PCI_FN_BRIDGE)))
        return BAD("GPU %u: vfio %u, IOMMU group %u, functions 0x%x (want 0/1, %u-%u, bits 0x3)", i,
                   g->vfio, g->iommu_group, g->pci_functions, EMU_IOMMU_GROUP_BASE,
                   EMU_IOMMU_GROUP_MAX);
    if (g->mps_fault_n > EMU_MPS_FAULT_MAX)
        return BAD("GPU %u: %u MPS fault entries (at most %d)", i, g->mps_fault_n,
                   EMU_MPS_FAULT_MAX);
    /* intervals: in order, never reversed, owners' slots within the table */
    uint64_t cnt = g->interval_count, kept = cnt < EMU_TIMELINE_RING ? cnt : EMU_TIMELINE_RING;
    uint64_t prev_end = 0;
    for (uint64_t k = cnt - kept; k < cnt; k++) {
        const struct emu_interval *iv = &g->intervals[k % EMU_TIMELINE_RING];
        if (iv->end_ns < iv->start_ns || iv->start_ns < prev_end || iv->slot > EMU_MAX_PROCS ||
            iv->lag_ns > iv->start_ns || iv->wait_ns > iv->lag_ns || iv->flags_pad ||
            (iv->flags & ~(EMU_IV_CLOCK | EMU_IV_CONT)) ||
            ((iv->flags & EMU_IV_CONT) && !(iv->flags & EMU_IV_CLOCK)))
            return BAD("GPU %u: timeline interval %" PRIu64 " is malformed", i, k);
        prev_end = iv->end_ns;
    }
    if (cnt && g->busy_until_ns < prev_end)
        return BAD("GPU %u: busy until %" PRIu64 " ns, before its last interval ends", i,
                   g->busy_until_ns);
    return 0;
}

int emu_state_validate(const struct emu_shared *sh, size_t len, char *err, size_t errlen)
{
    if (!sh || len != sizeof(struct emu_shared))
        return BAD("%zu bytes, want %zu: not a state file of this accel-emu version", len,
                   sizeof(struct emu_shared));
    if (sh->magic != EMU_STATE_MAGIC)
        return BAD("not an accel-emu state file (bad magic)");
    if (sh->version != EMU_STATE_VERSION || sh->size != len)
        return BAD("state file version %u, size %" PRIu64 " (want version %u, %zu bytes)",
                   sh->version, sh->size, EMU_STATE_VERSION, len);
    unsigned n = sh->gpu_count;
    if (n < 1 || n > EMU_MAX_GPUS)
        return BAD("GPU count %u (want 1-%d)", n, EMU_MAX_GPUS);
    if (!has_nul(sh->model, sizeof(sh->model)))
        return BAD("model name not terminated");
    if (sh->nvlink_mode > EMU_NVLINK_PAIRS)
        return BAD("NVLink mode %u (want 0-2)", sh->nvlink_mode);
    if (sh->proc_info_stride != 0 && sh->proc_info_stride != 16 && sh->proc_info_stride != 24 &&
        sh->proc_info_stride != 32)
        return BAD("process-info stride %u (want 16, 24 or 32)", sh->proc_info_stride);
    for (unsigned i = 0; i < n; i++) {
        int r = validate_gpu(&sh->gpus[i], i, n, err, errlen);
        if (r == 0)
            r = emu_mig_validate_gpu(&sh->gpus[i], i, sh->mig_serial_last, err, errlen);
        if (r < 0)
            return r;
    }
    uint64_t used[EMU_MAX_GPUS] = {0};
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++) {
        const struct emu_proc *p = &sh->procs[i];
        if (p->pid < 0)
            return BAD("process slot %u: pid %d", i, p->pid);
        if (!p->pid)
            continue;
        for (unsigned gi = 0; gi < EMU_MAX_GPUS; gi++) {
            if (gi >= n && p->mem[gi])
                return BAD("process slot %u: memory on GPU %u, which does not exist", i, gi);
            if (gi < n &&
                p->mem[gi] > sh->gpus[gi].memory_total - sh->gpus[gi].memory_reserved - used[gi])
                return BAD("process slot %u: charges on GPU %u exceed its memory", i, gi);
            used[gi] += p->mem[gi];
        }
    }
    for (unsigned i = 0; i < EMU_MPS_MAX_DAEMONS; i++) {
        const struct emu_mps_daemon *d = &sh->mps[i];
        if (d->pid < 0 || d->server_count > EMU_MPS_MAX_SERVERS ||
            !has_nul(d->pipe_dir, sizeof(d->pipe_dir)) || d->default_thread_pct_x10 > 1000)
            return BAD("MPS slot %u: pid %d, %u servers, thread percentage %u/10 (want at most "
                       "%d servers, 100 %%, a terminated pipe directory)",
                       i, d->pid, d->server_count, d->default_thread_pct_x10, EMU_MPS_MAX_SERVERS);
        for (unsigned k = 0; k < d->server_count; k++)
            if (d->servers[k].thread_pct_x10 > 1000 || d->servers[k].pid < 0)
                return BAD("MPS slot %u: server %u: pid %d, thread percentage %u/10", i, k,
                           d->servers[k].pid, d->servers[k].thread_pct_x10);
    }
    return 0;
}

#undef BAD

/* Validates a mapping other processes may be changing: the fields that are fixed at create
 * first, then the whole file under its lock (writers keep every field valid between lock and
 * unlock, not at each store). The lock is taken with a bound: in a corrupt file it may look
 * held forever. */
static int validate_live(struct emu_shared *sh, size_t len, char *err, size_t errlen)
{
    if (__atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) != EMU_STATE_MAGIC ||
        sh->version != EMU_STATE_VERSION || sh->size != len)
        return emu_state_validate(sh, len, err, errlen);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    int r = pthread_mutex_timedlock(&sh->mutex, &until);
    if (r == EOWNERDEAD)
        pthread_mutex_consistent(&sh->mutex);
    else if (r) {
        errbuf_printf(err, errlen, "its lock cannot be taken (%s)",
                      r == ETIMEDOUT ? "held for over 5 s" : strerror(r));
        return -EPROTO;
    }
    r = emu_state_validate(sh, len, err, errlen);
    pthread_mutex_unlock(&sh->mutex);
    return r;
}

int emu_state_open_err(const char *path, struct emu_state **ret, char *err, size_t errlen)
{
    if (!path || !*path || !ret)
        return -EINVAL;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        int r = -errno;
        struct stat sb;
        char who[96] = "a directory above it is closed to this user too";
        if (r == -EACCES && stat(path, &sb) == 0)
            snprintf(who, sizeof(who), "mode %04o, owner uid %u, gid %u",
                     (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid, (unsigned)sb.st_gid);
        if (r == -EACCES)
            errbuf_printf(err, errlen,
                          "%s: permission denied (%s; this process runs as uid %u, gid %u): run "
                          "as the user who made it, or recreate it with `accel-emu init --mode "
                          "0660` (group) or `--mode 0666` (anyone) in a directory this user can "
                          "reach",
                          path, who, (unsigned)geteuid(), (unsigned)getegid());
        else
            errbuf_printf(err, errlen, "%s: %s", path, strerror(-r));
        return r;
    }
    struct stat stbuf;
    if (fstat(fd, &stbuf) < 0) {
        int r = -errno;
        close(fd);
        errbuf_printf(err, errlen, "%s: %s", path, strerror(-r));
        return r;
    }
    size_t len = sizeof(struct emu_shared);
    if ((uint64_t)stbuf.st_size != len) {
        close(fd);
        errbuf_printf(err, errlen,
                      "%s: %" PRIu64 " bytes, want %zu: not a state file of this accel-emu "
                      "version (recreate it with `accel-emu init`)",
                      path, (uint64_t)stbuf.st_size, len);
        return -EPROTO;
    }
    struct emu_shared *sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (sh == MAP_FAILED) {
        errbuf_printf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    char why[256];
    int r = validate_live(sh, len, why, sizeof(why));
    if (r < 0) {
        munmap(sh, len);
        errbuf_printf(err, errlen, "%s: %s (recreate it with `accel-emu init`)", path, why);
        return r;
    }
    struct emu_state *st = calloc(1, sizeof(*st));
    if (!st) {
        munmap(sh, len);
        errbuf_printf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    st->sh = sh;
    st->len = len;
    st->gpu_count = sh->gpu_count;
    *ret = st;
    return 0;
}

int emu_state_open(const char *path, struct emu_state **ret)
{
    return emu_state_open_err(path, ret, NULL, 0);
}

int emu_state_open_env_err(struct emu_state **ret, char *err, size_t errlen)
{
    const char *p = getenv("ACCEL_EMU_STATE");
    if (!p || !*p) {
        errbuf_printf(err, errlen, "ACCEL_EMU_STATE is not set");
        return -ENXIO;
    }
    return emu_state_open_err(p, ret, err, errlen);
}

int emu_state_open_env(struct emu_state **ret)
{
    return emu_state_open_env_err(ret, NULL, 0);
}

struct emu_state *emu_state_close(struct emu_state *st)
{
    if (!st)
        return NULL;
    munmap(st->sh, st->len);
    free(st);
    return NULL;
}

struct emu_shared *emu_state_shared(struct emu_state *st)
{
    return st->sh;
}

unsigned emu_state_gpu_count(const struct emu_state *st)
{
    return st->gpu_count;
}

struct emu_gpu *emu_state_gpu(struct emu_state *st, unsigned i)
{
    if (!st || i >= st->gpu_count)
        return NULL;
    return &st->sh->gpus[i];
}

/* A container's view (ACCEL_EMU_DEV_ROOT): NVIDIA's driver reaches a GPU through its device
 * node /dev/nvidia<minor>, and a container runtime (CDI, NVIDIA's toolkit) makes only the nodes
 * of the GPUs the container was given, so the driver in the container enumerates those alone.
 * The answer is kept per minor: a container's device nodes do not change while it runs. */
static bool dev_node_present(uint32_t minor)
{
    static uint8_t known[256]; /* 0 unknown, 1 present, 2 absent */
    const char *root = getenv("ACCEL_EMU_DEV_ROOT");
    if (!root || !*root)
        return true;
    if (minor < sizeof(known)) {
        uint8_t k = __atomic_load_n(&known[minor], __ATOMIC_RELAXED);
        if (k)
            return k == 1;
    }
    char path[PATH_MAX];
    struct stat sb;
    bool present = snprintf(path, sizeof(path), "%s/nvidia%u", root, minor) < (int)sizeof(path) &&
                   stat(path, &sb) == 0;
    if (minor < sizeof(known))
        __atomic_store_n(&known[minor], present ? 1 : 2, __ATOMIC_RELAXED);
    return present;
}

bool emu_state_gpu_hidden(const struct emu_gpu *g)
{
    return __atomic_load_n(&g->vfio, __ATOMIC_RELAXED) || !dev_node_present(g->minor);
}

int emu_state_find_gpu(struct emu_state *st, const char *key)
{
    if (!key)
        return -EINVAL;
    for (unsigned i = 0; i < st->gpu_count; i++) {
        const struct emu_gpu *g = &st->sh->gpus[i];
        if (strcasecmp(key, g->uuid) == 0 || strcasecmp(key, g->pci_bus_id) == 0)
            return (int)i;
        /* NVML's legacy bus id has a 4-digit domain: "0000:18:00.0" */
        if (strlen(key) == 12 && strcasecmp(key, g->pci_bus_id + 4) == 0)
            return (int)i;
    }
    return -ENOENT;
}

void emu_state_lock(struct emu_state *st)
{
    int r = pthread_mutex_lock(&st->sh->mutex);
    if (r == EOWNERDEAD)
        pthread_mutex_consistent(&st->sh->mutex); /* every update leaves fields valid */
}

void emu_state_unlock(struct emu_state *st)
{
    pthread_mutex_unlock(&st->sh->mutex);
}

/* ---- processes ---- */

/* Inode of this process's pid namespace, 0 when unknown. */
static uint64_t self_pidns(void)
{
    static uint64_t ns;
    static bool done;
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        return ns;
    char buf[64];
    ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
    uint64_t v = 0;
    if (n > 0) {
        buf[n] = 0;
        const char *b = strchr(buf, '[');
        if (b)
            v = strtoull(b + 1, NULL, 10); /* "pid:[4026531836]" */
    }
    __atomic_store_n(&ns, v, __ATOMIC_RELAXED);
    __atomic_store_n(&done, true, __ATOMIC_RELEASE);
    return v;
}

/* ---- processes of other pid namespaces (containers) ----
 *
 * NVIDIA's kernel driver knows each process by its pid in the initial pid namespace, so NVML
 * reports host pids whoever runs it, and a node agent with the host's pids (hostPID) maps them
 * to pods through /proc/<pid>/cgroup. The emulator has no kernel part: a process records itself
 * as it sees itself, (its pid namespace's inode, its pid there). A reader in another namespace
 * translates through its own /proc: the process whose /proc/<pid>/ns/pid is that inode and whose
 * innermost NSpid (/proc/<pid>/status, Linux 4.1+) is that pid, at that start time. A reader in
 * the initial pid namespace sees every process, so a recorded process it cannot find is gone. */
#define INIT_PIDNS 4026531836ull /* PROC_PID_INIT_INO, include/linux/proc_ns.h */

struct foreign_pid {
    uint64_t ns;
    int32_t inner; /* as its own namespace sees it */
    uint64_t born; /* its start time as it recorded it (0: unknown) */
    int32_t outer; /* as this process sees it; 0 = not found */
};

/* The innermost NSpid of /proc/<dir>/status (Linux 4.1+; readable by every user), 0 when the
 * file cannot be read (*ret_err: its errno) or has none; *ret_nested: the line has more than
 * one field, i.e. the process is in a pid namespace below this /proc's. */
static int32_t innermost_nspid(const char *dir, bool *ret_nested, int *ret_err)
{
    char path[64], buf[4096];
    *ret_nested = false;
    *ret_err = 0;
    snprintf(path, sizeof(path), "/proc/%s/status", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *ret_err = errno;
        return 0;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    *ret_err = n < 0 ? errno : 0;
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *l = strstr(buf, "\nNSpid:");
    if (!l)
        return 0;
    l += 7;
    char *end = strchr(l, '\n');
    if (end)
        *end = 0;
    char *last = strrchr(l, '\t');
    *ret_nested = last && last != strchr(l, '\t');
    long v = strtol(last ? last + 1 : l, NULL, 10);
    return v > 0 && v <= INT32_MAX ? (int32_t)v : 0;
}

/* The inode of /proc/<dir>/ns/pid, 0 when it cannot be read (another user's needs ptrace
 * access). */
static uint64_t pidns_of(const char *dir)
{
    char path[64], link[64];
    snprintf(path, sizeof(path), "/proc/%s/ns/pid", dir);
    ssize_t l = readlink(path, link, sizeof(link) - 1);
    if (l <= 0)
        return 0;
    link[l] = 0;
    const char *b = strchr(link, '[');
    return b ? strtoull(b + 1, NULL, 10) : 0;
}

/* Fills each want[].outer in one pass over /proc: the process of a pid namespace below this
 * /proc's whose innermost pid is want.inner and whose start time (/proc/<pid>/stat, the same
 * in every namespace) is want.born — both readable by every user, so an unprivileged reader
 * (the exporter) finds it too; a want without a start time is matched by its namespace's
 * inode instead. Entries not found stay 0. Returns whether every process could be looked at
 * (a status hidden from this reader, or a namespace link needed and unreadable, may hide a
 * wanted one). */
static bool foreign_lookup(struct foreign_pid *want, size_t n)
{
    for (size_t k = 0; k < n; k++)
        want[k].outer = 0;
    if (!n)
        return true;
    DIR *d = opendir("/proc");
    if (!d)
        return false;
    bool complete = true;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || strlen(e->d_name) > 10)
            continue;
        bool nested;
        int err;
        int32_t inner = innermost_nspid(e->d_name, &nested, &err);
        if (!inner) {
            complete = complete && (err == 0 || err == ENOENT || err == ESRCH); /* gone */
            continue;
        }
        if (!nested)
            continue; /* a process of this /proc's own namespace */
        pid_t pid = (pid_t)strtol(e->d_name, NULL, 10);
        uint64_t born = 0, ns = 0;
        bool have_born = false, have_ns = false;
        for (size_t k = 0; k < n; k++) {
            if (want[k].outer || want[k].inner != inner)
                continue;
            bool match;
            if (want[k].born) {
                if (!have_born)
                    have_born = proc_start_time(pid, &born) == 0;
                match = have_born && born == want[k].born;
            } else {
                if (!have_ns) {
                    ns = pidns_of(e->d_name);
                    have_ns = true;
                    complete = complete && ns; /* it may be the one: not ours to tell */
                }
                match = ns && ns == want[k].ns;
            }
            if (match)
                want[k].outer = pid;
        }
    }
    closedir(d);
    return complete;
}

/* Whether pid namespace ns is another than this process's (and both are known). */
static bool foreign_ns(uint64_t ns)
{
    uint64_t self = self_pidns();
    return ns && self && ns != self;
}

/* Rewrites pids[i] (recorded in namespace nss[i], started at borns[i]) as this process sees
 * them, where it can. */
static void pids_as_seen_here(int32_t *pids, const uint64_t *nss, const uint64_t *borns, size_t n)
{
    struct foreign_pid want[EMU_MAX_PROCS];
    size_t nw = 0;
    for (size_t i = 0; i < n && nw < EMU_MAX_PROCS; i++)
        if (foreign_ns(nss[i]))
            want[nw++] = (struct foreign_pid){.ns = nss[i], .inner = pids[i], .born = borns[i]};
    if (!nw)
        return;
    foreign_lookup(want, nw);
    for (size_t i = 0, k = 0; i < n && k < nw; i++)
        if (foreign_ns(nss[i])) {
            if (want[k].outer)
                pids[i] = want[k].outer;
            k++;
        }
}

/* From the initial pid namespace (every process visible), at most once a second: frees the
 * slots of other namespaces' processes that are gone (not found, or a reused pid), when every
 * process's namespace could be read. Others cannot judge them: their own namespace's next
 * reader does. */
#define FOREIGN_RECLAIM_NS 1000000000ull
static void reap_slot_locked(struct emu_shared *sh, unsigned i, uint64_t now);
static int reclaim_foreign_locked(struct emu_shared *sh, uint64_t now, bool force)
{
    static uint64_t last;
    if (self_pidns() != INIT_PIDNS ||
        (!force && last && now - last < FOREIGN_RECLAIM_NS && now >= last))
        return 0;
    last = now;
    struct foreign_pid want[EMU_MAX_PROCS];
    unsigned slot[EMU_MAX_PROCS];
    size_t nw = 0;
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++) {
        const struct emu_proc *p = &sh->procs[i];
        if (p->pid && foreign_ns(p->pidns)) {
            want[nw] = (struct foreign_pid){.ns = p->pidns, .inner = p->pid, .born = p->start_time};
            slot[nw++] = i;
        }
    }
    /* only a reader that could look at every process may call one gone; the start time in the
     * match makes a reused pid another process */
    if (!nw || !foreign_lookup(want, nw))
        return 0;
    int reaped = 0;
    for (size_t k = 0; k < nw; k++) {
        if (!want[k].outer) {
            reap_slot_locked(sh, slot[k], now);
            reaped++;
        }
    }
    return reaped;
}

static bool proc_alive(const struct emu_proc *p)
{
    if (p->pid <= 0)
        return false;
    if (foreign_ns(p->pidns))
        return true; /* another namespace's pid: reclaim_foreign_locked judges it */
    if (kill(p->pid, 0) < 0 && errno == ESRCH)
        return false;
    uint64_t st = 0; /* stays 0 when /proc is unreadable (another pid namespace): trust kill() */
    proc_start_time(p->pid, &st);
    return st == 0 || p->start_time == 0 || st == p->start_time;
}

/* getpid() is a system call; the hot paths (every launch, every charge) use this cache,
 * which a fork resets in the child. */
static pid_t cached_pid;

static void pid_cache_reset(void)
{
    __atomic_store_n(&cached_pid, 0, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void pid_cache_init(void)
{
    pthread_atfork(NULL, NULL, pid_cache_reset);
}

static pid_t my_pid(void)
{
    pid_t p = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
    if (!p) {
        p = getpid();
        __atomic_store_n(&cached_pid, p, __ATOMIC_RELAXED);
    }
    return p;
}

/* Cached per process: our own slot's start time never changes. */
static pid_t self_pid;
static uint64_t self_start;

static uint64_t self_start_time(void)
{
    pid_t pid = my_pid();
    if (__atomic_load_n(&self_pid, __ATOMIC_ACQUIRE) != pid) {
        uint64_t st = 0; /* 0 = unknown, which every check accepts */
        /* /proc/self, not /proc/<pid>: a /proc of another pid namespace than ours (unshare
         * without a new /proc) has some other process at our pid */
        char buf[1024];
        int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
        if (fd >= 0)
            close(fd);
        if (n > 0)
            proc_parse_start_time(buf, (size_t)n, &st);
        __atomic_store_n(&self_start, st, __ATOMIC_RELAXED);
        __atomic_store_n(&self_pid, pid, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&self_start, __ATOMIC_RELAXED);
}

static int reschedule_locked(struct emu_gpu *g, uint64_t t, const struct emu_interval *extra,
                             uint64_t extra_ns, uint64_t extra_ready, uint64_t extra_run_from,
                             uint32_t drop_tag);

/* Removes the work of process slot i from every GPU's timeline that had not run by now and
 * cuts the one running at now, as the driver does with a dying context's work; the other
 * owners' pending work is rescheduled without it. Only the intervals ending after now are
 * looked at: they are the newest ones (the ring is in start order and intervals never
 * overlap), so the cost is the pending work, not the history. */
static void drop_pending_locked(struct emu_shared *sh, unsigned i, uint64_t now)
{
    uint32_t tag = i + 1;
    for (unsigned gi = 0; gi < sh->gpu_count && gi < EMU_MAX_GPUS; gi++) {
        struct emu_gpu *g = &sh->gpus[gi];
        g->pending_slots[i / 64] &= ~(1ull << (i % 64));
        if (g->busy_until_ns > now) {
            bool has = false;
            uint64_t n = g->interval_count;
            for (uint64_t k = 0; k < n && k < EMU_TIMELINE_RING && !has; k++) {
                const struct emu_interval *iv = &g->intervals[(n - 1 - k) % EMU_TIMELINE_RING];
                if (iv->end_ns <= now)
                    break;
                has = iv->slot == tag;
            }
            if (has)
                reschedule_locked(g, now, NULL, 0, 0, 0, tag);
        }
        g->lane_lag[i] = 0;
    }
}

/* Frees slot i (its owner is gone or leaving): charges, pending work, then the pid. */
static void reap_slot_locked(struct emu_shared *sh, unsigned i, uint64_t now)
{
    struct emu_proc *p = &sh->procs[i];
    drop_pending_locked(sh, i, now);
    /* pid last: a half-cleared slot is still a valid (empty) slot of that pid */
    memset(p->mem, 0, sizeof(p->mem));
    memset(p->mig_serial, 0, sizeof(p->mig_serial));
    p->start_time = 0;
    p->pidns = 0;
    p->mps_group = 0;
    p->pid = 0;
}

/* force: the other namespaces' processes too, however recently they were looked for */
static int reclaim_locked(struct emu_shared *sh, bool force)
{
    int n = 0;
    pid_t self = my_pid();
    uint64_t now = emu_state_now_ns();
    sh->last_reclaim_ns = now;
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++) {
        struct emu_proc *p = &sh->procs[i];
        if (p->pid && !(p->pid == self && p->pidns == self_pidns()) && !proc_alive(p)) {
            reap_slot_locked(sh, i, now);
            n++;
        }
    }
    return n + reclaim_foreign_locked(sh, now, force);
}

/* Reclaims unless that was done less than EMU_RECLAIM_INTERVAL_NS ago. */
static void reclaim_lazily_locked(struct emu_shared *sh)
{
    uint64_t now = emu_state_now_ns();
    if (now - sh->last_reclaim_ns >= EMU_RECLAIM_INTERVAL_NS || now < sh->last_reclaim_ns)
        reclaim_locked(sh, false);
}

static uint64_t used_locked(struct emu_shared *sh, unsigned gpu)
{
    uint64_t used = 0;
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++)
        if (sh->procs[i].pid)
            used += sh->procs[i].mem[gpu];
    return used;
}

static struct emu_proc *self_slot_locked(struct emu_shared *sh, bool create)
{
    pid_t pid = my_pid();
    uint64_t start = self_start_time(), ns = self_pidns();
    struct emu_proc *fre = NULL;
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++) {
        struct emu_proc *p = &sh->procs[i];
        if (p->pid == pid && p->pidns == ns) {
            if (p->start_time == start)
                return p;
            /* a dead process with our pid: its charges and its work are not ours */
            drop_pending_locked(sh, i, emu_state_now_ns());
            memset(p->mem, 0, sizeof(p->mem));
            memset(p->mig_serial, 0, sizeof(p->mig_serial));
            p->start_time = start;
            return p;
        }
        if (!p->pid && !fre)
            fre = p;
    }
    if (!create)
        return NULL;
    if (!fre) {
        if (reclaim_locked(sh, true) == 0)
            return NULL;
        for (unsigned i = 0; i < EMU_MAX_PROCS && !fre; i++)
            if (!sh->procs[i].pid)
                fre = &sh->procs[i];
        if (!fre)
            return NULL;
    }
    memset(fre->mem, 0, sizeof(fre->mem));
    memset(fre->mig_serial, 0, sizeof(fre->mig_serial));
    fre->start_time = start;
    fre->pidns = ns;
    fre->pid = pid;
    return fre;
}

void emu_state_set_mps_group(struct emu_state *st, int32_t group)
{
    emu_state_lock(st);
    struct emu_proc *p = self_slot_locked(st->sh, true);
    if (p)
        p->mps_group = group;
    emu_state_unlock(st);
}

int emu_state_mem_charge(struct emu_state *st, unsigned gpu, uint64_t bytes)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count)
        return -EINVAL;
    emu_state_lock(st);
    int r = 0;
    struct emu_proc *mine = self_slot_locked(sh, false);
    if (mine && mine->mig_serial[gpu]) {
        /* on a MIG device: its GPU instance's memory is the limit (state-mig.c) */
        reclaim_lazily_locked(sh);
        r = emu_mig_room_locked(sh, gpu, mine->mig_serial[gpu], bytes);
        if (r == 0)
            mine->mem[gpu] += bytes;
        goto out;
    }
    uint64_t total = sh->gpus[gpu].memory_total - sh->gpus[gpu].memory_reserved;
    uint64_t used = used_locked(sh, gpu);
    if (bytes > total || used > total - bytes) {
        reclaim_locked(sh, true);
        used = used_locked(sh, gpu);
        if (bytes > total || used > total - bytes) {
            r = -ENOMEM;
            goto out;
        }
    }
    struct emu_proc *p = self_slot_locked(sh, true);
    if (!p) {
        r = -ENOSPC;
        goto out;
    }
    p->mem[gpu] += bytes;
out:
    emu_state_unlock(st);
    return r;
}

void emu_state_mem_uncharge(struct emu_state *st, unsigned gpu, uint64_t bytes)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count)
        return;
    emu_state_lock(st);
    struct emu_proc *p = self_slot_locked(sh, false);
    if (p)
        p->mem[gpu] -= bytes < p->mem[gpu] ? bytes : p->mem[gpu];
    emu_state_unlock(st);
}

void emu_state_proc_release(struct emu_state *st)
{
    struct emu_shared *sh = st->sh;
    emu_state_lock(st);
    struct emu_proc *p = self_slot_locked(sh, false);
    if (p)
        reap_slot_locked(sh, (unsigned)(p - sh->procs), emu_state_now_ns());
    emu_state_unlock(st);
}

int emu_state_mem_info(struct emu_state *st, unsigned gpu, uint64_t *ret_used, uint64_t *ret_total)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count)
        return -EINVAL;
    emu_state_lock(st);
    reclaim_lazily_locked(sh);
    uint64_t used = used_locked(sh, gpu);
    uint64_t total = sh->gpus[gpu].memory_total;
    emu_state_unlock(st);
    if (ret_used)
        *ret_used = used;
    if (ret_total)
        *ret_total = total;
    return 0;
}

void emu_state_reclaim_lazily_locked(struct emu_state *st)
{
    reclaim_lazily_locked(st->sh);
}

struct emu_proc *emu_state_self_slot_locked(struct emu_state *st, bool create)
{
    return self_slot_locked(st->sh, create);
}

int emu_state_reclaim(struct emu_state *st)
{
    emu_state_lock(st);
    int n = reclaim_locked(st->sh, true);
    emu_state_unlock(st);
    return n;
}

int emu_state_procs(struct emu_state *st, unsigned gpu, struct emu_proc_mem *out, size_t max,
                    size_t *ret_n)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count || (max && !out))
        return -EINVAL;
    size_t n = 0;
    int32_t pids[EMU_MAX_PROCS];
    uint64_t nss[EMU_MAX_PROCS], borns[EMU_MAX_PROCS];
    emu_state_lock(st);
    reclaim_lazily_locked(sh);
    for (unsigned i = 0; i < EMU_MAX_PROCS; i++) {
        const struct emu_proc *p = &sh->procs[i];
        if (!p->pid || !p->mem[gpu])
            continue;
        if (n < max)
            out[n] = (struct emu_proc_mem){
                .pid = p->pid, .bytes = p->mem[gpu], .mig_serial = p->mig_serial[gpu]};
        pids[n] = p->pid;
        nss[n] = p->pidns;
        borns[n] = p->start_time;
        n++;
    }
    emu_state_unlock(st);
    /* as NVML reports them: the pids this process sees (the /proc scan outside the lock) */
    size_t m = n < max ? n : max;
    pids_as_seen_here(pids, nss, borns, m);
    for (size_t i = 0; i < m; i++)
        out[i].pid = pids[i];
    if (ret_n)
        *ret_n = n;
    return 0;
}

/* ---- timeline ---- */

#define RING EMU_TIMELINE_RING

static struct emu_interval *ring_at(struct emu_gpu *g, uint64_t k)
{
    return &g->intervals[k % RING];
}

static struct emu_interval *ring_tail(struct emu_gpu *g)
{
    return g->interval_count ? ring_at(g, g->interval_count - 1) : NULL;
}

static bool owned_by(const struct emu_interval *iv, int32_t pid, uint32_t tag)
{
    return iv->pid == pid && iv->slot == tag;
}

static uint64_t slice_ns(const struct emu_gpu *g)
{
    uint32_t us = g->timeslice_us ? g->timeslice_us : EMU_TIMESLICE_DEFAULT_US;
    return (uint64_t)us * 1000u;
}

/* The word holding an owner's final lag: its process slot's, else an MPS lane's (create: claim
 * one; when all are taken, the one at pid % EMU_MPS_LANES is reused and its owner's lag is
 * forgotten). NULL: none. */
static uint64_t *lane_lag_word(struct emu_gpu *g, int32_t pid, uint32_t tag, bool create)
{
    if (tag)
        return tag <= EMU_MAX_PROCS ? &g->lane_lag[tag - 1] : NULL;
    unsigned fre = EMU_MPS_LANES;
    for (unsigned i = 0; i < EMU_MPS_LANES; i++) {
        int32_t p = __atomic_load_n(&g->mps_lane_pid[i], __ATOMIC_RELAXED);
        if (p == pid)
            return &g->mps_lane_lag[i];
        if (!p && fre == EMU_MPS_LANES)
            fre = i;
    }
    if (!create || pid <= 0)
        return NULL;
    if (fre == EMU_MPS_LANES)
        fre = (unsigned)pid % EMU_MPS_LANES;
    g->mps_lane_lag[fre] = 0;
    __atomic_store_n(&g->mps_lane_pid[fre], pid, __ATOMIC_RELAXED);
    return &g->mps_lane_lag[fre];
}

static uint64_t lane_lag_final(struct emu_gpu *g, int32_t pid, uint32_t tag)
{
    uint64_t *w = lane_lag_word(g, pid, tag, false);
    return w ? __atomic_load_n(w, __ATOMIC_RELAXED) : 0;
}

/* Where an owner stands at GPU time t (at or after it queued its pending work), from its
 * intervals that end after t: its lag at t, how long it has been waiting for its next slice,
 * and on its clock where its queued work ends and where the run of it pending at t began.
 * The wait before an interval is the last part of the gap before it, so an owner waiting at t
 * has the next interval's lag less the wait still ahead of it. */
struct lane_pos {
    uint64_t lag, waited, end, run;
    uint64_t last_from, last_end, last_lag; /* its newest interval (GPU time) and lag */
};

static bool lane_at_locked(struct emu_gpu *g, int32_t pid, uint32_t tag, uint64_t t,
                           struct lane_pos *ret)
{
    bool pending = false;
    uint64_t n = g->interval_count;
    *ret = (struct lane_pos){0};
    for (uint64_t k = 0; k < n && k < RING; k++) {
        const struct emu_interval *iv = ring_at(g, n - 1 - k);
        if (iv->end_ns <= t)
            break;
        if (!owned_by(iv, pid, tag))
            continue;
        if (!pending) {
            ret->end = iv->end_ns - iv->lag_ns;
            ret->last_from = iv->start_ns;
            ret->last_end = iv->end_ns;
            ret->last_lag = iv->lag_ns;
        }
        pending = true;
        ret->run = iv->start_ns - iv->lag_ns;
        if (iv->start_ns <= t) { /* running at t: nothing older is pending */
            ret->lag = iv->lag_ns;
            ret->waited = 0;
            break;
        }
        uint64_t ahead = iv->start_ns - t, w = iv->wait_ns;
        if (ahead > w)
            ahead = w;
        ret->lag = iv->lag_ns - ahead;
        ret->waited = w - ahead;
    }
    if (!pending)
        ret->lag = lane_lag_final(g, pid, tag);
    return pending;
}

/* Appends (or extends the tail with) [s, e) of an owner at lag, after a wait of `wait`, with
 * the EMU_IV_* flags. Work of one kind extends the tail it follows; a completion mark (zero
 * length) is never extended, so that it stays where its item completed. */
static void emit_locked(struct emu_gpu *g, int32_t pid, uint32_t tag, uint64_t s, uint64_t e,
                        uint64_t lag, uint64_t wait, uint32_t flags)
{
    struct emu_interval *tail = ring_tail(g);
    if (tail && owned_by(tail, pid, tag) && tail->end_ns == s && tail->lag_ns == lag && !wait &&
        tail->end_ns > tail->start_ns && !((tail->flags ^ flags) & EMU_IV_CLOCK)) {
        tail->end_ns = e;
    } else {
        *ring_at(g, g->interval_count) = (struct emu_interval){.start_ns = s,
                                                               .end_ns = e,
                                                               .pid = pid,
                                                               .slot = tag,
                                                               .lag_ns = lag,
                                                               .wait_ns = wait,
                                                               .flags = flags};
        g->interval_count++;
    }
    if (tag && tag <= EMU_MAX_PROCS)
        g->pending_slots[(tag - 1) / 64] |= 1ull << ((tag - 1) % 64);
    if (e > g->busy_until_ns)
        g->busy_until_ns = e;
    g->busy_total_ns += e - s;
}

/* Removes the newest interval. When the ring has wrapped, the slot it leaves becomes the
 * oldest one kept: it gets an empty interval where its successor starts, so the ring stays in
 * order (that history was overwritten anyway). */
static void ring_pop_locked(struct emu_gpu *g)
{
    uint64_t n = --g->interval_count;
    if (n >= RING) {
        uint64_t s = ring_at(g, n + 1)->start_ns; /* index n - RING + 1 */
        *ring_at(g, n) = (struct emu_interval){.start_ns = s, .end_ns = s};
    }
}

/* An owner's pending work in reschedule_locked: its items in order, each work-bound or
 * clock-bound (see EMU_IV_CLOCK), consecutive work-bound ones as one. */
struct sim_piece {
    uint64_t len; /* what it has left to run, on its owner's clock */
    uint32_t next;
    bool clock;
};

#define SIM_NONE UINT32_MAX
#define SIM_PIECES (RING + 8)

/* One table for all the pieces of a rescheduling (too big for a stack), used under the state
 * lock; its own mutex covers two state files used at once by one process. */
static struct sim_piece sim_pool[SIM_PIECES];
static unsigned sim_pool_n;
static pthread_mutex_t sim_pool_lock = PTHREAD_MUTEX_INITIALIZER;

struct lane_sim {
    int32_t pid;
    uint32_t tag;
    uint64_t rem;        /* all its pending work, on its clock */
    uint32_t head, tail; /* its pieces (SIM_NONE: none) */
    bool started;        /* its first piece, clock-bound, has been resident: its clock runs */
    bool seen;           /* reconstruction: an interval of it was read */
    uint64_t seen_end;   /* reconstruction: where the last one read ends */
    uint64_t lag, waited;
    uint64_t turn;  /* when its next slice was due (0: running; UINT64_MAX: newly come) */
    uint64_t ready; /* GPU time from which it has work to run */
};

#define SIM_LANES (EMU_MAX_PROCS + EMU_MPS_LANES + 8)

/* An owner's entry (new ones zeroed). When the table is full (more owners with work pending
 * on one GPU than there are process slots and MPS lanes), the last entry takes it in. */
static struct lane_sim *sim_lane(struct lane_sim *ls, unsigned *n, int32_t pid, uint32_t tag)
{
    for (unsigned i = 0; i < *n; i++)
        if (ls[i].pid == pid && ls[i].tag == tag)
            return &ls[i];
    if (*n == SIM_LANES)
        return &ls[SIM_LANES - 1];
    ls[*n] = (struct lane_sim){
        .pid = pid, .tag = tag, .turn = UINT64_MAX, .head = SIM_NONE, .tail = SIM_NONE};
    return &ls[(*n)++];
}

/* Appends len of work of a kind to l's pieces (work-bound after work-bound: one piece; a full
 * table: added to its last piece). */
static void sim_push(struct lane_sim *l, uint64_t len, bool clock)
{
    l->rem += len;
    if (l->tail != SIM_NONE && ((!clock && !sim_pool[l->tail].clock) || sim_pool_n == SIM_PIECES)) {
        sim_pool[l->tail].len += len;
        return;
    }
    unsigned i = sim_pool_n++;
    sim_pool[i] = (struct sim_piece){.len = len, .next = SIM_NONE, .clock = clock};
    if (l->tail == SIM_NONE)
        l->head = i;
    else
        sim_pool[l->tail].next = i;
    l->tail = i;
}

static void sim_pop(struct lane_sim *l)
{
    l->head = sim_pool[l->head].next;
    if (l->head == SIM_NONE)
        l->tail = SIM_NONE;
    l->started = false;
}

/* Queues (at the tail of rq) the owners with work that are ready by `now` and not queued yet,
 * in the order they became ready (ties: their order in `order`). Returns when the next one not
 * yet ready will be (UINT64_MAX: none). */
static uint64_t sim_enqueue(struct lane_sim *ls, const unsigned *order, unsigned m, unsigned *rq,
                            unsigned *qh, unsigned *qn, bool *in_q, uint64_t now)
{
    for (;;) {
        int best = -1;
        uint64_t next = UINT64_MAX;
        for (unsigned j = 0; j < m; j++) {
            const struct lane_sim *o = &ls[order[j]];
            if (o->head == SIM_NONE || in_q[order[j]])
                continue;
            if (o->ready <= now && (best < 0 || o->ready < ls[best].ready))
                best = (int)order[j];
            else if (o->ready > now && o->ready < next)
                next = o->ready;
        }
        if (best < 0)
            return next;
        in_q[best] = true;
        rq[(*qh + (*qn)++) % SIM_LANES] = (unsigned)best;
    }
}

/* Where the slice of the owner of interval k (running, or ending where its queue grows) began:
 * back over its intervals that run on without a gap (items of different kinds are intervals
 * of their own). */
static uint64_t run_start_locked(struct emu_gpu *g, uint64_t k)
{
    uint64_t cnt = g->interval_count;
    const struct emu_interval *iv = ring_at(g, k);
    uint64_t from = iv->start_ns;
    while (k > 0 && cnt - k < RING && !iv->wait_ns) {
        const struct emu_interval *p = ring_at(g, k - 1);
        if (!owned_by(p, iv->pid, iv->slot) || p->end_ns != from)
            break;
        from = p->start_ns;
        iv = p;
        k--;
    }
    return from;
}

static int reschedule_pieces_locked(struct emu_gpu *g, uint64_t t, const struct emu_interval *extra,
                                    uint64_t extra_ns, uint64_t extra_ready,
                                    uint64_t extra_run_from, uint32_t drop_tag);

/* Recomputes g's schedule from t on: every owner's work pending after t (plus extra_ns of work
 * for the owner in extra, ready at GPU time extra_ready, with the lag and wait in extra when it
 * had none pending after t — or, extra_run_from not 0, running at t since then: its queue ran
 * out at t and grows; none of drop_tag's) runs in turn, a time slice each, in the order the
 * turns had (the one running at t first, finishing its slice), newcomers last; an owner alone
 * runs until its work is done or another's becomes ready. The timeline before t does not
 * change. Each owner's lag grows while it is ready and waits for another's slice — except
 * while a clock-bound item of it that has been resident waits: its clock (and the item) runs
 * on; once the item's time is up it completes at the owner's next slice. */
static int reschedule_locked(struct emu_gpu *g, uint64_t t, const struct emu_interval *extra,
                             uint64_t extra_ns, uint64_t extra_ready, uint64_t extra_run_from,
                             uint32_t drop_tag)
{
    pthread_mutex_lock(&sim_pool_lock);
    sim_pool_n = 0;
    int r = reschedule_pieces_locked(g, t, extra, extra_ns, extra_ready, extra_run_from, drop_tag);
    pthread_mutex_unlock(&sim_pool_lock);
    return r;
}

static int reschedule_pieces_locked(struct emu_gpu *g, uint64_t t, const struct emu_interval *extra,
                                    uint64_t extra_ns, uint64_t extra_ready,
                                    uint64_t extra_run_from, uint32_t drop_tag)
{
    struct lane_sim ls[SIM_LANES];
    unsigned n = 0;
    int cur = -1;
    uint64_t cur_from = 0, cnt = g->interval_count, pend = 0;
    while (pend < cnt && pend < RING && ring_at(g, cnt - 1 - pend)->end_ns > t)
        pend++;
    /* the pending intervals, oldest first: each owner's items */
    for (uint64_t k = cnt - pend; k < cnt; k++) {
        const struct emu_interval *iv = ring_at(g, k);
        if (drop_tag && iv->slot == drop_tag)
            continue;
        struct lane_sim *l = sim_lane(ls, &n, iv->pid, iv->slot);
        bool clock = iv->flags & EMU_IV_CLOCK, cont = iv->flags & EMU_IV_CONT;
        uint64_t len = iv->end_ns - (iv->start_ns > t ? iv->start_ns : t);
        /* the clock of its item that ran in the gap before this (after t) */
        uint64_t gap_to = iv->start_ns - iv->wait_ns, gap_from = l->seen ? l->seen_end : t;
        uint64_t ran = cont && gap_to > gap_from ? gap_to - gap_from : 0;
        if (!l->seen && iv->start_ns < t) {
            sim_push(l, len, clock);
            l->started = true;
            l->lag = iv->lag_ns;
            l->waited = 0;
            l->turn = 0;
            l->ready = 0; /* running: first in the queue */
            cur = (int)(l - ls);
            cur_from = run_start_locked(g, k);
        } else if (!l->seen) {
            uint64_t ahead = iv->start_ns - t, w = iv->wait_ns;
            if (cont) { /* its item's clock runs at t */
                sim_push(l, ran + len, true);
                l->started = true;
                l->ready = t;
            } else {
                sim_push(l, len, clock);
                l->ready = ahead > w ? iv->start_ns - w : t; /* it began waiting then */
            }
            l->turn = iv->start_ns;
            if (ahead > w)
                ahead = w;
            l->lag = iv->lag_ns - ahead;
            l->waited = w - ahead;
        } else if (cont && l->tail != SIM_NONE && sim_pool[l->tail].clock) {
            sim_pool[l->tail].len += ran + len;
            l->rem += ran + len;
        } else {
            sim_push(l, len, clock);
        }
        l->seen = true;
        l->seen_end = iv->end_ns;
    }
    if (extra && extra_ns) {
        struct lane_sim *l = sim_lane(ls, &n, extra->pid, extra->slot);
        bool clock = extra->flags & EMU_IV_CLOCK;
        if (l->head == SIM_NONE && extra_run_from) { /* goes on from its interval ending at t */
            l->lag = extra->lag_ns;
            l->waited = 0;
            l->turn = 0;
            l->ready = 0;
            cur = (int)(l - ls);
            cur_from = extra_run_from;
        } else if (l->head == SIM_NONE) {
            l->lag = extra->lag_ns;
            l->waited = extra->wait_ns;
            l->ready = extra_ready > t ? extra_ready : t;
        }
        if (clock && (extra->flags & EMU_IV_CONT) && l->tail != SIM_NONE &&
            sim_pool[l->tail].clock) { /* beside its running spin: on the same clock */
            sim_pool[l->tail].len += extra_ns;
            l->rem += extra_ns;
        } else {
            sim_push(l, extra_ns, clock);
        }
    }
    /* the past stays: cut what runs across t, drop what starts after it */
    uint64_t cut = 0;
    while (g->interval_count && ring_tail(g)->start_ns >= t && cnt - g->interval_count < RING &&
           !(ring_tail(g)->start_ns == t && ring_tail(g)->end_ns == t)) {
        cut += ring_tail(g)->end_ns - ring_tail(g)->start_ns;
        ring_pop_locked(g);
    }
    struct emu_interval *tail = ring_tail(g);
    if (tail && tail->end_ns > t) {
        cut += tail->end_ns - t;
        tail->end_ns = t;
    }
    g->busy_total_ns -= cut < g->busy_total_ns ? cut : g->busy_total_ns;
    tail = ring_tail(g);
    g->busy_until_ns = tail ? tail->end_ns : 0;

    uint64_t q = slice_ns(g), total = 0;
    unsigned active = 0;
    for (unsigned i = 0; i < n; i++)
        if (ls[i].head != SIM_NONE) {
            active++;
            total += ls[i].rem;
        }
    /* a bound on the slices recorded: a quarter of the ring (longer shared runs are recorded
     * in longer slices) */
    if (total / q > RING / 4)
        q = total / (RING / 4) + 1;
    g->multi_until_ns = t;
    if (cur >= 0 && ls[cur].head != SIM_NONE && t > cur_from && (t - cur_from) % q == 0) {
        /* its slice ends at t: to the back of the queue, behind those waiting */
        ls[cur].ready = t;
        ls[cur].turn = UINT64_MAX - 1;
        cur = -1;
    }
    /* the turns go on in the order they had (the one running first), newcomers last */
    unsigned order[SIM_LANES] = {0}, m = 0;
    for (unsigned k = 0; k < n; k++) {
        if (ls[k].head == SIM_NONE)
            continue;
        unsigned j = m++;
        for (; j > 0 && ls[order[j - 1]].turn > ls[k].turn; j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
    /* round robin: a queue of the owners ready to run; one that becomes ready joins its
     * tail, one whose slice ends goes back to it */
    unsigned rq[SIM_LANES], qh = 0, qn = 0;
    bool in_q[SIM_LANES] = {false};
    uint64_t left = q, now = t, run_from = t;
    int last = -1;
    if (cur >= 0 && ls[cur].head != SIM_NONE) {
        left = q - (t - cur_from) % q;
        run_from = cur_from;
        last = cur;
    }
    uint64_t next = sim_enqueue(ls, order, m, rq, &qh, &qn, in_q, now);
    while (active) {
        if (!qn) { /* the GPU idles until the next owner is ready */
            now = next;
            left = q;
            next = sim_enqueue(ls, order, m, rq, &qh, &qn, in_q, now);
            continue;
        }
        unsigned k = rq[qh];
        struct lane_sim *l = &ls[k];
        if ((int)k != last)
            run_from = now;
        last = (int)k;
        struct sim_piece *h = &sim_pool[l->head];
        bool done = false;
        if (h->clock && l->started && !h->len) {
            /* its clock ran out while it was switched out: the item completes now that it
             * is resident (a mark), and what follows it runs in the rest of the slice */
            emit_locked(g, l->pid, l->tag, now, now, l->lag, l->waited, EMU_IV_CLOCK | EMU_IV_CONT);
            l->waited = 0;
            sim_pop(l);
            done = l->head == SIM_NONE;
            if (!done)
                continue;
        }
        bool cut_short = false, alone = qn == 1;
        uint64_t d = 0;
        if (!done) {
            d = h->len < left ? h->len : left;
            if (alone) { /* on until done, or until another is ready */
                d = h->len;
                if (next != UINT64_MAX && d > next - now) {
                    d = next - now;
                    cut_short = true;
                }
            }
            uint32_t fl = h->clock ? EMU_IV_CLOCK | (l->started ? EMU_IV_CONT : 0) : 0;
            emit_locked(g, l->pid, l->tag, now, now + d, l->lag, l->waited, fl);
            l->waited = 0;
            l->started = true;
            for (unsigned j = 0; j < m; j++) {
                struct lane_sim *o = &ls[order[j]];
                if (order[j] == k || o->head == SIM_NONE || o->ready >= now + d)
                    continue;
                uint64_t w = now + d - (o->ready > now ? o->ready : now);
                struct sim_piece *oh = &sim_pool[o->head];
                if (oh->clock && o->started) { /* its clock runs on: no lag while it does */
                    uint64_t p = w < oh->len ? w : oh->len;
                    oh->len -= p;
                    o->rem -= p;
                    w -= p;
                }
                o->lag += w;
                o->waited += w;
            }
            now += d;
            h->len -= d;
            l->rem -= d;
            if (!h->len) {
                sim_pop(l);
                done = l->head == SIM_NONE;
            }
        }
        if (done) {
            qh = (qh + 1) % SIM_LANES;
            qn--;
            in_q[k] = false;
            if (--active == 1)
                g->multi_until_ns = now;
            next = sim_enqueue(ls, order, m, rq, &qh, &qn, in_q, now);
            left = q;
            continue;
        }
        if (alone || cut_short) {
            next = sim_enqueue(ls, order, m, rq, &qh, &qn, in_q, now);
            uint64_t at = (now - run_from) % q;
            if (qn == 1 || at) { /* still alone, or it finishes its slice */
                left = q - at;
                continue;
            }
        } else if (d < left) { /* an item done inside its slice: the next one goes on */
            left -= d;
            next = sim_enqueue(ls, order, m, rq, &qh, &qn, in_q, now);
            continue;
        }
        qh = (qh + 1) % SIM_LANES;
        qn--;
        next = sim_enqueue(ls, order, m, rq, &qh, &qn, in_q, now);
        rq[(qh + qn++) % SIM_LANES] = k;
        left = q;
    }
    for (unsigned k = 0; k < n; k++) {
        uint64_t *w = lane_lag_word(g, ls[k].pid, ls[k].tag, true);
        if (w)
            *w = ls[k].lag;
    }
    return 0;
}

/* g has work pending: reaps the slots of the processes that queued it and are gone, so that
 * new work does not wait for a dead process's. kill(pid, 0) alone (no /proc read) keeps this
 * cheap enough for every launch; slots of other pid namespaces are not ours to judge. */
static void reap_dead_owners_locked(struct emu_shared *sh, struct emu_gpu *g, uint32_t self_tag,
                                    uint64_t now)
{
    uint64_t ns = self_pidns();
    for (unsigned w = 0; w < EMU_MAX_PROCS / 64; w++) {
        uint64_t bits = g->pending_slots[w];
        while (bits) {
            unsigned i = w * 64 + (unsigned)__builtin_ctzll(bits);
            bits &= bits - 1;
            struct emu_proc *p = &sh->procs[i];
            if (i + 1 == self_tag)
                continue;
            if (!p->pid) {
                g->pending_slots[w] &= ~(1ull << (i % 64));
                continue;
            }
            if (p->pidns && ns && p->pidns != ns)
                continue;
            if (kill(p->pid, 0) < 0 && errno == ESRCH)
                reap_slot_locked(sh, i, now);
        }
    }
}

int emu_state_submit(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                     uint64_t duration_ns, uint64_t *ret_start_ns, uint64_t *ret_end_ns)
{
    return emu_state_submit_overlap(st, gpu, not_before_ns, UINT64_MAX, duration_ns, ret_start_ns,
                                    ret_end_ns);
}

int emu_state_submit_overlap(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                             uint64_t overlap_from_ns, uint64_t duration_ns, uint64_t *ret_start_ns,
                             uint64_t *ret_end_ns)
{
    return emu_state_submit_as(st, gpu, not_before_ns, overlap_from_ns, duration_ns, 0,
                               ret_start_ns, ret_end_ns);
}

/* This process's slot tag as the last submit found it (emu_state_lag_hint reads it). */
static pid_t tag_pid;
static uint32_t tag_cached;

/* The owner the caller's work belongs to: (as_pid, 0) for MPS, else (pid, slot + 1). */
static uint32_t self_tag_locked(struct emu_shared *sh, bool create)
{
    struct emu_proc *me = self_slot_locked(sh, create);
    uint32_t tag = me ? (uint32_t)(me - sh->procs) + 1 : 0;
    __atomic_store_n(&tag_cached, tag, __ATOMIC_RELAXED);
    __atomic_store_n(&tag_pid, my_pid(), __ATOMIC_RELEASE);
    return tag;
}

int emu_state_submit_as(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                        uint64_t overlap_from_ns, uint64_t duration_ns, int32_t as_pid,
                        uint64_t *ret_start_ns, uint64_t *ret_end_ns)
{
    return emu_state_submit_kind(st, gpu, not_before_ns, overlap_from_ns, duration_ns, as_pid,
                                 false, ret_start_ns, ret_end_ns);
}

int emu_state_submit_kind(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                          uint64_t overlap_from_ns, uint64_t duration_ns, int32_t as_pid,
                          bool clock_bound, uint64_t *ret_start_ns, uint64_t *ret_end_ns)
{
    struct emu_shared *sh = st->sh;
    /* an MPS server's context runs its clients' work side by side: work-bound, as before */
    uint32_t kind = clock_bound && !as_pid ? EMU_IV_CLOCK : 0;
    if (gpu >= st->gpu_count)
        return -EINVAL;
    int32_t pid = as_pid ? as_pid : (int32_t)my_pid();
    uint64_t now = emu_state_now_ns();
    emu_state_lock(st);
    uint32_t self = self_tag_locked(sh, true);
    /* 0: no slot free, or work owned by an MPS server (never dropped with a client) */
    uint32_t tag = as_pid ? 0 : self;
    struct emu_gpu *g = &sh->gpus[gpu];
    if (g->busy_until_ns > now)
        reap_dead_owners_locked(sh, g, tag, now);
    else
        memset(g->pending_slots, 0, sizeof(g->pending_slots)); /* idle: nothing pending */
    struct emu_interval *tail = ring_tail(g);
    bool busy = g->busy_until_ns > now, mine = tail && owned_by(tail, pid, tag);
    /* shared: another owner has work pending; else only ours (or none) is */
    bool shared = g->multi_until_ns > now || (busy && !mine);
    struct lane_pos pos = {0};
    bool pending;
    if (shared) {
        pending = lane_at_locked(g, pid, tag, now, &pos);
    } else {
        pos.lag = lane_lag_final(g, pid, tag);
        pending = busy && mine;
        if (pending) {
            pos.end = tail->end_ns - tail->lag_ns;
            pos.run = tail->start_ns - tail->lag_ns;
        }
    }
    uint64_t now_own = now - (pos.lag < now ? pos.lag : now); /* our clock */
    uint64_t start = not_before_ns > now_own ? not_before_ns : now_own;
    if (overlap_from_ns != UINT64_MAX && pending) {
        /* our queue has work pending: this may run beside it, from where the caller's SMs
         * allow, never before that run of ours began */
        uint64_t floor = overlap_from_ns > pos.run ? overlap_from_ns : pos.run;
        if (floor > start)
            start = floor;
    } else if (pending && pos.end > start) {
        start = pos.end;
    }
    uint64_t end = start + duration_ns;
    if (duration_ns && !shared) {
        uint64_t ws = start + pos.lag, we = end + pos.lag;
        if (mine && pending && tail->start_ns <= ws &&
            (tail->end_ns > ws || (tail->end_ns == ws && tail->end_ns > tail->start_ns &&
                                   (tail->flags & EMU_IV_CLOCK) == kind))) {
            if (we > tail->end_ns) { /* union: overlapping work of ours is one busy interval */
                g->busy_total_ns += we - tail->end_ns;
                tail->end_ns = we;
            }
        } else {
            emit_locked(g, pid, tag, ws, we, pos.lag, 0, kind);
            if (!tag)
                lane_lag_word(g, pid, tag, true);
        }
        if (we > g->busy_until_ns)
            g->busy_until_ns = we;
    } else if (duration_ns) {
        /* beside other owners' work: our queue grows by what this adds at its end, and the
         * future is dealt out again. With work pending (a gap before this counts as ours),
         * nothing changes until our queue would have run out: from then on; without, it is
         * ready at its start: from now on. */
        struct emu_interval x = {.pid = pid, .slot = tag, .flags = kind};
        if (kind && pending && start < pos.end)
            x.flags |= EMU_IV_CONT; /* beside a spin of ours: on its clock */
        if (pending && end > pos.end) {
            x.lag_ns = pos.last_lag;
            reschedule_locked(g, pos.last_end, &x, end - pos.end, pos.last_end, pos.last_from, 0);
        } else if (!pending) {
            x.lag_ns = pos.lag;
            x.wait_ns = pos.waited;
            reschedule_locked(g, now, &x, end - start, start + pos.lag, 0, 0);
        }
    }
    emu_state_unlock(st);
    if (ret_start_ns)
        *ret_start_ns = start;
    if (ret_end_ns)
        *ret_end_ns = end;
    return 0;
}

/* The owner of the caller's work: (as_pid, 0) for an MPS client, else (pid, slot + 1). */
static void owner_locked(struct emu_shared *sh, int32_t as_pid, int32_t *ret_pid, uint32_t *ret_tag)
{
    if (as_pid) {
        *ret_pid = as_pid;
        *ret_tag = 0;
    } else {
        *ret_pid = (int32_t)my_pid();
        *ret_tag = self_tag_locked(sh, false);
    }
}

uint64_t emu_state_wall_ns(struct emu_state *st, unsigned gpu, int32_t as_pid, uint64_t t_ns,
                           bool at_start)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count)
        return t_ns;
    int32_t pid;
    uint32_t tag;
    emu_state_lock(st);
    owner_locked(sh, as_pid, &pid, &tag);
    struct emu_gpu *g = &sh->gpus[gpu];
    uint64_t lag = lane_lag_final(g, pid, tag);
    if (lag) { /* it has waited: find the lag its clock had at t_ns */
        const struct emu_interval *oldest = NULL;
        bool found = false;
        uint64_t n = g->interval_count;
        for (uint64_t k = 0; k < n && k < RING && !found; k++) {
            const struct emu_interval *iv = ring_at(g, n - 1 - k);
            if (!owned_by(iv, pid, tag))
                continue;
            uint64_t own = iv->start_ns - iv->lag_ns;
            /* a mark: a clock-bound item ending at t_ns completed there, at its next slice */
            bool mark = (iv->flags & EMU_IV_CONT) && iv->end_ns == iv->start_ns;
            if (own < t_ns || ((at_start || mark) && own == t_ns)) {
                lag = iv->lag_ns;
                found = true;
            }
            oldest = iv;
        }
        if (!found && oldest)
            lag = oldest->lag_ns - oldest->wait_ns;
    }
    emu_state_unlock(st);
    return t_ns + lag;
}

uint64_t emu_state_lag_hint(struct emu_state *st, unsigned gpu, int32_t as_pid)
{
    if (gpu >= st->gpu_count)
        return 0;
    struct emu_gpu *g = &st->sh->gpus[gpu];
    if (as_pid)
        return lane_lag_final(g, as_pid, 0);
    if (__atomic_load_n(&tag_pid, __ATOMIC_ACQUIRE) != my_pid())
        return 0;
    uint32_t tag = __atomic_load_n(&tag_cached, __ATOMIC_RELAXED);
    if (tag)
        return __atomic_load_n(&g->lane_lag[tag - 1], __ATOMIC_RELAXED);
    return lane_lag_final(g, (int32_t)my_pid(), 0);
}

uint64_t emu_state_timeslice_ns(struct emu_state *st, unsigned gpu)
{
    if (gpu >= st->gpu_count)
        return (uint64_t)EMU_TIMESLICE_DEFAULT_US * 1000u;
    return slice_ns(&st->sh->gpus[gpu]);
}

static uint64_t overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
    uint64_t s = a0 > b0 ? a0 : b0, e = a1 < b1 ? a1 : b1;
    return e > s ? e - s : 0;
}

int emu_state_busy_ns(struct emu_state *st, unsigned gpu, uint64_t t0, uint64_t t1, int32_t pid,
                      uint64_t *ret_busy_ns, bool *ret_complete)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count || t1 < t0 || !ret_busy_ns)
        return -EINVAL;
    uint64_t busy = 0;
    bool complete = true;
    emu_state_lock(st);
    const struct emu_gpu *g = &sh->gpus[gpu];
    uint64_t n = g->interval_count, k = 0;
    /* intervals are appended in start order and never overlap: walk back from the newest */
    for (; k < n && k < EMU_TIMELINE_RING; k++) {
        const struct emu_interval *iv = &g->intervals[(n - 1 - k) % EMU_TIMELINE_RING];
        if (iv->end_ns <= t0)
            break;
        if (!pid || iv->pid == pid)
            busy += overlap(iv->start_ns, iv->end_ns, t0, t1);
    }
    if (k == EMU_TIMELINE_RING && n > EMU_TIMELINE_RING)
        complete = false;
    emu_state_unlock(st);
    *ret_busy_ns = busy;
    if (ret_complete)
        *ret_complete = complete;
    return 0;
}

int emu_state_util_by_proc(struct emu_state *st, unsigned gpu, uint64_t t0, uint64_t t1,
                           struct emu_proc_util *out, size_t max, size_t *ret_n)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count || t1 < t0 || (max && !out))
        return -EINVAL;
    /* distinct pids are few; collect into a small local table first */
    struct emu_proc_util acc[EMU_MAX_PROCS];
    uint64_t nss[EMU_MAX_PROCS] = {0}, borns[EMU_MAX_PROCS] = {0};
    size_t na = 0, dropped = 0;
    emu_state_lock(st);
    const struct emu_gpu *g = &sh->gpus[gpu];
    uint64_t n = g->interval_count;
    for (uint64_t k = 0; k < n && k < EMU_TIMELINE_RING; k++) {
        const struct emu_interval *iv = &g->intervals[(n - 1 - k) % EMU_TIMELINE_RING];
        if (iv->end_ns <= t0)
            break;
        uint64_t o = overlap(iv->start_ns, iv->end_ns, t0, t1);
        if (!o)
            continue;
        size_t j = 0;
        while (j < na && acc[j].pid != iv->pid)
            j++;
        if (j == na) {
            if (na == EMU_MAX_PROCS) {
                dropped++;
                continue;
            }
            /* the namespace of the slot that queued it, while that slot is still its own */
            const struct emu_proc *owner =
                iv->slot && iv->slot <= EMU_MAX_PROCS ? &sh->procs[iv->slot - 1] : NULL;
            bool own = owner && owner->pid == iv->pid;
            nss[na] = own ? owner->pidns : 0;
            borns[na] = own ? owner->start_time : 0;
            acc[na++] = (struct emu_proc_util){.pid = iv->pid};
        }
        acc[j].busy_ns += o;
        uint64_t last = iv->end_ns < t1 ? iv->end_ns : t1;
        if (last > acc[j].last_ns)
            acc[j].last_ns = last;
    }
    emu_state_unlock(st);
    int32_t pids[EMU_MAX_PROCS];
    for (size_t j = 0; j < na; j++)
        pids[j] = acc[j].pid;
    pids_as_seen_here(pids, nss, borns, na);
    for (size_t j = 0; j < na && j < max; j++) {
        out[j] = acc[j];
        out[j].pid = pids[j];
    }
    if (ret_n)
        *ret_n = na;
    (void)dropped;
    return 0;
}

/* ---- events ---- */

static long futex(uint32_t *uaddr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, uaddr, op, val, ts, NULL, 0);
}

int emu_state_event_post(struct emu_state *st, unsigned gpu, uint64_t type, uint64_t data,
                         uint64_t *ret_seq)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count)
        return -EINVAL;
    uint64_t now = emu_state_now_ns();
    emu_state_lock(st);
    struct emu_gpu *g = &sh->gpus[gpu];
    uint64_t seq = g->event_seq + 1;
    struct emu_event *e = &g->events[(seq - 1) % EMU_EVENT_RING];
    /* seq 0 first, so a lock-free reader never pairs the new seq with old fields */
    __atomic_store_n(&e->seq, 0, __ATOMIC_RELEASE);
    e->type = type;
    e->data = data;
    e->time_ns = now;
    __atomic_store_n(&e->seq, seq, __ATOMIC_RELEASE);
    __atomic_store_n(&g->event_seq, seq, __ATOMIC_RELEASE);
    __atomic_add_fetch(&sh->event_futex, 1, __ATOMIC_RELEASE);
    emu_state_unlock(st);
    /* shared futex (no FUTEX_PRIVATE_FLAG): the waiters are other processes */
    futex(&sh->event_futex, FUTEX_WAKE, INT_MAX, NULL);
    if (ret_seq)
        *ret_seq = seq;
    return 0;
}

uint64_t emu_state_event_last(struct emu_state *st, unsigned gpu)
{
    if (gpu >= st->gpu_count)
        return 0;
    return __atomic_load_n(&st->sh->gpus[gpu].event_seq, __ATOMIC_ACQUIRE);
}

int emu_state_event_get(struct emu_state *st, unsigned gpu, uint64_t seq, struct emu_event *ret)
{
    struct emu_shared *sh = st->sh;
    if (gpu >= st->gpu_count || seq == 0 || !ret)
        return -EINVAL;
    int r = 0;
    emu_state_lock(st);
    const struct emu_gpu *g = &sh->gpus[gpu];
    if (seq > g->event_seq)
        r = -EAGAIN;
    else if (g->event_seq - seq >= EMU_EVENT_RING)
        r = -ESTALE;
    else
        *ret = g->events[(seq - 1) % EMU_EVENT_RING];
    emu_state_unlock(st);
    return r;
}

uint32_t emu_state_event_word(struct emu_state *st)
{
    return __atomic_load_n(&st->sh->event_futex, __ATOMIC_ACQUIRE);
}

int emu_state_event_wait(struct emu_state *st, uint32_t seen, uint64_t timeout_ns)
{
    uint64_t deadline = timeout_ns == UINT64_MAX ? UINT64_MAX : emu_state_now_ns() + timeout_ns;
    for (;;) {
        if (__atomic_load_n(&st->sh->event_futex, __ATOMIC_ACQUIRE) != seen)
            return 0;
        struct timespec ts, *tsp = NULL;
        if (deadline != UINT64_MAX) {
            uint64_t now = emu_state_now_ns();
            if (now >= deadline)
                return -ETIMEDOUT;
            uint64_t left = deadline - now;
            ts.tv_sec = (time_t)(left / 1000000000ull);
            ts.tv_nsec = (long)(left % 1000000000ull);
            tsp = &ts;
        }
        /* relative timeout; EAGAIN: the word already changed; EINTR: recheck */
        long r = futex(&st->sh->event_futex, FUTEX_WAIT, seen, tsp);
        if (r == 0)
            return 0;
        if (errno == ETIMEDOUT)
            return -ETIMEDOUT;
    }
}
