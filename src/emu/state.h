/* state.h — the emulated machine shared by every process that uses accel-emu.
 *
 * One file, named by $ACCEL_EMU_STATE, holds the whole machine: its GPUs (identity, memory,
 * sensors, links), the memory each process has charged to each GPU, one kernel timeline per
 * GPU, and one event ring per GPU (XIDs and other NVML events). Every process maps it
 * MAP_SHARED: the emulated libcuda.so.1 and libnvidia-ml.so.1, `accel-emu` and the emulated
 * nvidia-cuda-mps-control.
 *
 * The file is an ABI between processes (and between part A and part B of the emulator): a
 * header with magic, version and size, then fixed-width fields only, no pointers. Everything
 * mutable is guarded by one process-shared robust mutex in the header (a process killed with
 * -9 while holding it never wedges the others: the next locker sees EOWNERDEAD, marks it
 * consistent and goes on, because every update below leaves the fields valid at every step).
 * The event sequence word is also a futex so that waiters block without polling.
 *
 * Time: all timestamps are CLOCK_MONOTONIC nanoseconds (emu_state_now_ns()), comparable across
 * processes on one machine. NVML's wall-clock microsecond timestamps are converted by the
 * caller.
 *
 * Threads: every function may be called from any thread of any process. Pointers returned by
 * emu_state_gpu() point into the mapping: read fields freely (they are naturally aligned and
 * read whole); write only between emu_state_lock() and emu_state_unlock(). Processes are
 * known by (pid namespace, pid): see struct emu_proc. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mig-profiles.h"

#define EMU_STATE_MAGIC 0x3154534d45434341ull /* "ACCEMST1" little-endian */
#define EMU_STATE_VERSION 4u

#define EMU_MAX_GPUS 16
#define EMU_MAX_PROCS 128
#define EMU_EVENT_RING 256            /* per GPU, power of two */
#define EMU_TIMELINE_RING 16384       /* busy intervals kept per GPU, power of two */
#define EMU_TIMESLICE_DEFAULT_US 2000 /* time slice between processes (docs/emulator-cuda.md) */
#define EMU_TIMESLICE_MAX_US 1000000
/* per GPU: MPS servers (and processes without a slot) whose clock lag is kept */
#define EMU_MPS_LANES 8

#define EMU_MEMORY_MIN (64ull << 20) /* a GPU's memory: 64 MiB .. 1 PiB */
#define EMU_MEMORY_MAX (1ull << 50)
#define EMU_UUID_LEN 41 /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL */
#define EMU_NAME_LEN 96
#define EMU_BUSID_LEN 32 /* "00000000:18:00.0" */

/* PCIe relationship between two GPUs; the values are NVML's nvmlGpuTopologyLevel_t. */
enum emu_topo_level {
    EMU_TOPO_INTERNAL = 0,    /* same board */
    EMU_TOPO_SINGLE = 10,     /* one PCIe switch between them */
    EMU_TOPO_MULTIPLE = 20,   /* several switches, no host bridge */
    EMU_TOPO_HOSTBRIDGE = 30, /* same host bridge */
    EMU_TOPO_NODE = 40,       /* same NUMA node, different host bridges */
    EMU_TOPO_SYSTEM = 50,     /* across NUMA nodes (SMP interconnect) */
};

enum emu_nvlink_mode {
    EMU_NVLINK_NONE = 0,
    EMU_NVLINK_ALL = 1,   /* every pair linked (an NVSwitch system) */
    EMU_NVLINK_PAIRS = 2, /* 0-1, 2-3, ... linked */
};

/* Event types in the ring; the values are NVML's nvmlEventType bits. */
#define EMU_EVENT_SINGLE_BIT_ECC 0x0001ull
#define EMU_EVENT_DOUBLE_BIT_ECC 0x0002ull
#define EMU_EVENT_PSTATE 0x0004ull
#define EMU_EVENT_XID 0x0008ull
#define EMU_EVENT_CLOCK 0x0010ull
#define EMU_EVENT_POWER_SOURCE 0x0080ull

/* A real GPU model the emulator can pretend to be. Static table; entries are borrowed. */
struct emu_model {
    const char *name;  /* as NVML / cuDeviceGetName report it */
    const char *alias; /* short name accepted by --model ("H100") */
    uint64_t memory_bytes;
    uint32_t sm_count;
    uint32_t sm_clock_mhz; /* max (boost) SM clock; the emulated clock runs at it */
    uint32_t mem_clock_mhz;
    uint32_t cc_major, cc_minor;
    uint32_t power_limit_mw;
    uint32_t nvlinks;      /* NVLink links per GPU (0: the model has none) */
    uint32_t mem_bus_bits; /* memory bus width */
    /* memory the driver keeps back (NVML v2 `reserved`): CUDA sees memory_bytes minus this */
    uint64_t reserved_bytes;
    /* device memory a context costs while it exists (a multiple of 2 MiB) */
    uint64_t ctx_bytes;
    uint32_t pci_device_id; /* (PCI device id << 16) | NVIDIA's vendor id 0x10de */
};

/* Looks a model up by name or alias, case-insensitively. NULL when unknown. */
const struct emu_model *emu_model_find(const char *name);
/* The table, for listing (count in *ret_n). */
const struct emu_model *emu_model_table(size_t *ret_n);

/* What `accel-emu init` asks for. emu_config_init() fills the defaults: 4 GPUs of the default
 * model (H100 80GB HBM3), model memory, NUMA node 0 for all, NVLink all, seed 0. */
struct emu_config {
    unsigned gpus;          /* 1..EMU_MAX_GPUS */
    const char *model;      /* name or alias; NULL = default */
    uint64_t memory_bytes;  /* 0 = the model's */
    int numa[EMU_MAX_GPUS]; /* per GPU; -1 = none (no NUMA) */
    unsigned numa_count;    /* entries given; 0 = all 0 */
    enum emu_nvlink_mode nvlink;
    uint64_t seed;         /* UUIDs derive from it: the same seed, the same UUIDs */
    unsigned mode;         /* the state file's permission bits, whatever the umask; 0 = 0600 */
    unsigned timeslice_us; /* every GPU's time slice (1..EMU_TIMESLICE_MAX_US); 0 = default */
    bool iommu_shared;     /* GPUs 2k and 2k+1 share an IOMMU group (else one group each) */
};
void emu_config_init(struct emu_config *cfg);

/* One entry of a GPU's event ring. */
struct emu_event {
    uint64_t seq;     /* 1, 2, ... per GPU; 0 = empty slot */
    uint64_t type;    /* EMU_EVENT_* */
    uint64_t data;    /* XID number for EMU_EVENT_XID */
    uint64_t time_ns; /* emu_state_now_ns() when posted */
};

/* One busy interval on a GPU's timeline: work of pid from start to end. Back-to-back work of
 * one process is merged into one interval. slot is the owner's process slot + 1 (0: it had
 * none), so that a dead process's pending work can be found when its slot is reaped.
 * lag_ns: how far the owner's own clock is behind the GPU's during this interval: the time it
 * has spent waiting, with work pending, while other processes ran in their time slices (see
 * emu_state_submit). The owner's clock reads start_ns - lag_ns at the interval's start.
 * wait_ns: how much of lag_ns it gained waiting just before this interval (the last part of the
 * gap since its previous interval).
 * flags: EMU_IV_CLOCK: the work is clock-bound (a spin kernel: it ends when its SM clock has
 * run its cycles, and that clock runs on while the owner is switched out), else work-bound
 * (it needs its whole duration of resident time). EMU_IV_CONT: the interval goes on with the
 * owner's clock-bound item of its previous interval: the part of the gap before it that is not
 * wait_ns was that item's clock running (the owner's clock ran with it: no lag gained); a
 * zero-length interval with it marks where an item whose clock ran out while the owner was
 * switched out completed: the owner's next slice. */
#define EMU_IV_CLOCK 1u
#define EMU_IV_CONT 2u
struct emu_interval {
    uint64_t start_ns, end_ns;
    int32_t pid;
    uint32_t slot;
    uint64_t lag_ns, wait_ns;
    uint32_t flags;
    uint32_t flags_pad;
};

/* Functions beside a GPU in its IOMMU group (emu_gpu.pci_functions). */
#define EMU_PCI_FN_AUDIO 1u  /* its HD audio function, <bus>:00.1 (as consumer boards have) */
#define EMU_PCI_FN_BRIDGE 2u /* a PCIe bridge, <bus>:01.0 */
#define EMU_IOMMU_GROUP_BASE 10u
#define EMU_IOMMU_GROUP_MAX 4095u

/* MIG instances in the shared file (state-mig.h). A compute instance's UUID is the MIG device's
 * ("MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as current drivers print it). */
struct emu_mig_ci {
    uint32_t used;        /* 1: exists */
    uint32_t id;          /* compute instance ID within its GPU instance */
    uint32_t profile;     /* NVML_COMPUTE_INSTANCE_PROFILE_* */
    uint32_t start, size; /* placement in compute slices of its GPU instance */
    uint32_t pad;
    uint64_t serial; /* never 0 */
    char uuid[EMU_UUID_LEN];
    uint8_t uuid_bytes[16];
    uint8_t pad2[7];
};
struct emu_mig_gi {
    uint32_t used;        /* 1: exists */
    uint32_t id;          /* GPU instance ID (emu_mig_gi_id of its placement) */
    uint32_t profile;     /* NVML_GPU_INSTANCE_PROFILE_* */
    uint32_t start, size; /* placement in memory slices */
    uint32_t pad;
    uint64_t serial; /* never 0 */
    struct emu_mig_ci ci[EMU_MIG_MAX_CI];
};

/* A GPU as it lives in the shared file. Identity fields are written once by create; sensor
 * fields (temperature, power, clocks, lost, MIG) by `accel-emu set` / `lose` under the lock. */
#define EMU_MPS_FAULT_MAX 32
struct emu_gpu {
    uint32_t index;
    uint32_t minor; /* /dev/nvidiaN */
    int32_t numa_node;
    uint32_t cc_major, cc_minor;
    uint32_t sm_count;
    uint32_t sm_clock_mhz; /* current SM clock: spin kernels run at it */
    uint32_t sm_clock_max_mhz;
    uint32_t mem_clock_mhz;
    uint32_t mem_bus_bits;
    uint64_t memory_total;
    char uuid[EMU_UUID_LEN];
    uint8_t uuid_bytes[16]; /* the same UUID as cuDeviceGetUuid returns it */
    char name[EMU_NAME_LEN];
    char pci_bus_id[EMU_BUSID_LEN];
    uint32_t pci_domain, pci_bus, pci_device;
    uint32_t pci_device_id; /* PCI device/vendor id, 0xDDDD10DE */
    char serial[32];

    /* sensors and modes: change with emu_state_lock() held */
    uint32_t temperature_c;
    uint32_t power_mw;
    uint32_t power_limit_mw;
    uint32_t fan_percent;
    uint32_t pstate;
    uint32_t lost;     /* 1: fell off the bus (NVML: GPU_IS_LOST) */
    uint32_t mig_mode; /* current: 0 disabled, 1 enabled */
    uint32_t mig_mode_pending;
    uint32_t compute_mode; /* NVML compute mode: 0 default, 3 exclusive process */
    /* health counters NVML reports (`accel-emu set`; taken from the reserved words) */
    uint32_t ecc_disabled;  /* nvmlDeviceGetEccMode: 0 = enabled (the default), 1 = disabled */
    uint32_t remapped_corr; /* nvmlDeviceGetRemappedRows: rows remapped for corrected errors */
    uint32_t remapped_unc;  /* ... for uncorrectable errors */
    uint32_t remap_pending; /* 1: a remap waits for the next GPU reset */
    uint32_t remap_failure; /* 1: a remap failed */
    uint32_t pcie_replays;  /* nvmlDeviceGetPcieReplayCounter */
    /* nvmlDeviceGetNvLinkErrorCounter: the counters (by nvmlNvLinkErrorCounter_t) of one
     * link, nvlink_error_link; every other link reads 0 */
    uint32_t nvlink_error_link;
    uint32_t nvlink_errors[5];
    /* PCI side (the sysfs tree accel-emu writes; docs/vfio.md): vfio 1 = bound to vfio-pci
     * (the nvidia driver, NVML and CUDA no longer see the GPU); iommu_group its IOMMU group;
     * pci_functions what else sits in that group with it (EMU_PCI_FN_*) */
    uint32_t vfio;
    uint32_t iommu_group;
    uint32_t pci_functions;
    uint32_t mig_pad;
    /* MIG (state-mig.h): the GPU instances, each with its compute instances. Slots are reused;
     * a GPU or compute instance is known by its serial (machine-wide, never reused). Changed
     * only with the lock held, by state-mig.c. */
    struct emu_mig_gi mig[EMU_MIG_MAX_GI];

    /* links: nvlinks[j] = NVLink links to GPU j; topo[j] = enum emu_topo_level */
    uint8_t nvlinks[EMU_MAX_GPUS];
    uint8_t topo[EMU_MAX_GPUS];

    /* event ring: entry for seq s lives at events[(s - 1) % EMU_EVENT_RING] */
    uint64_t event_seq; /* last posted; 0 = none yet */
    struct emu_event events[EMU_EVENT_RING];

    /* kernel timeline */
    uint64_t busy_until_ns;  /* end of the last queued work */
    uint64_t busy_total_ns;  /* all work ever queued */
    uint64_t interval_count; /* intervals ever appended; newest at (count-1) % RING */
    struct emu_interval intervals[EMU_TIMELINE_RING];

    /* ECC error counts since create (`accel-emu ecc`); volatile and aggregate alike.
     * Part B (emulated NVML) owns these two; they take two of the reserved words. */
    uint64_t ecc_single_bit;
    uint64_t ecc_double_bit;
    /* memory the driver keeps for itself (the model's; 0 with --memory): NVML v2 `reserved`,
     * counted in NVML's `used`, never available to CUDA (see docs/emulator-cuda.md) */
    uint64_t memory_reserved;
    /* device memory one context costs on this GPU (the model's; ACCEL_EMU_CTX_OVERHEAD
     * overrides it per process) */
    uint64_t ctx_cost;
    /* process slots (bit i: procs[i]) that queued work since the GPU was last idle: the only
     * owners whose death emu_state_submit must check for before queueing behind them */
    uint64_t pending_slots[EMU_MAX_PROCS / 64];
    /* Volatile ECC counts (since the last driver load: `accel-emu set GPU ecc_volatile=clear`
     * zeroes them, the aggregate ones above never go back). `accel-emu ecc` counts both. */
    uint64_t ecc_vol_single_bit;
    uint64_t ecc_vol_double_bit;
    uint64_t clocks_event_reasons; /* nvmlClocksEventReason* bits (`set clocks_event_reasons=`) */
    /* Energy: energy_mj banked at energy_stamp_ns; since then power_mw has been drawn, so
     * nvmlDeviceGetTotalEnergyConsumption = energy_mj + power_mw * (now - stamp) / 1e9.
     * stamp 0: not started (the first read starts it). */
    uint64_t energy_mj;
    uint64_t energy_stamp_ns;
    uint64_t reserved_u64[7 - EMU_MAX_PROCS / 64];
    /* MPS fault (state-mps.h): the clients a fatal XID on this GPU hit, with their server
     * (group); the fault lasts while any of them lives. */
    uint32_t mps_fault_n;
    uint32_t mps_fault_pad;
    int32_t mps_fault_pid[EMU_MPS_FAULT_MAX];
    int32_t mps_fault_group[EMU_MPS_FAULT_MAX];
    /* Time slicing (emu_state_submit). timeslice_us: the slice each process gets in turn
     * while several have work pending (0: EMU_TIMESLICE_DEFAULT_US); multi_until_ns: until
     * then the timeline's future holds slices of several owners; lane_lag: per process slot,
     * the lag of its clock at the end of its queued work (see struct emu_interval); the same
     * for MPS servers (and processes without a slot) in mps_lane_*. */
    uint32_t timeslice_us;
    uint32_t slice_pad;
    uint64_t multi_until_ns;
    uint64_t lane_lag[EMU_MAX_PROCS];
    int32_t mps_lane_pid[EMU_MPS_LANES];
    uint64_t mps_lane_lag[EMU_MPS_LANES];
};

/* A process using the emulated GPUs. Slots are claimed on first charge and reclaimed when the
 * process is gone (kill(pid, 0) == ESRCH or a different start time: pid reuse). A process is
 * known by (pid namespace, pid): containers sharing one state file may reuse each other's pid
 * numbers; only a process in the same pid namespace can tell whether a slot's owner is gone. */
struct emu_proc {
    int32_t pid;                /* 0 = free slot; as seen in its own pid namespace */
    int32_t mps_group;          /* the MPS server (else daemon) pid it is a client of; 0 = none */
    uint64_t start_time;        /* /proc/<pid>/stat starttime (clock ticks since boot) */
    uint64_t pidns;             /* inode of /proc/<pid>/ns/pid; 0 = unknown */
    uint64_t mem[EMU_MAX_GPUS]; /* bytes charged per GPU */
    /* per GPU, the MIG compute instance (its serial) the process uses there, 0 = the whole GPU:
     * its charges on that GPU count against that instance's GPU instance (state-mig.h) */
    uint64_t mig_serial[EMU_MAX_GPUS];
};

/* MPS section: what the emulated nvidia-cuda-mps-control daemons have been told, so the
 * emulated libcuda can apply the limits later. One slot per running daemon (keyed by its pipe
 * directory); a slot whose pid is gone is free. Written whole under the lock by the daemon
 * (state-mps.c). Percentages are in tenths (1000 = 100 %); limits in bytes, 0 = none. */
#define EMU_MPS_MAX_DAEMONS 64
#define EMU_MPS_MAX_SERVERS 8
struct emu_mps_server {
    int32_t pid;
    uint32_t uid;
    uint32_t thread_pct_x10;
    uint32_t pad;
    uint64_t pinned_limit[EMU_MAX_GPUS];
};
struct emu_mps_daemon {
    int32_t pid; /* 0 = free slot */
    uint32_t default_thread_pct_x10;
    uint64_t generation; /* bumped on every change */
    char pipe_dir[256];
    uint64_t default_pinned_limit[EMU_MAX_GPUS];
    uint32_t server_count;
    uint32_t pad;
    struct emu_mps_server servers[EMU_MPS_MAX_SERVERS];
};

struct emu_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t gpu_count;
    uint64_t size; /* sizeof(struct emu_shared) of the writer */
    uint64_t seed;
    uint64_t created_ns; /* CLOCK_REALTIME ns, for `accel-emu status` */
    char model[EMU_NAME_LEN];
    uint32_t nvlink_mode;
    uint32_t pad0;
    /* bumped (and FUTEX_WAKE'd) on every event posted to any GPU: a waiter reads it, checks
     * the rings, then futex-waits for it to change */
    uint32_t event_futex;
    uint32_t pad1;
    /* Size in bytes of the process-info entries the emulated NVML writes for
     * nvmlDeviceGetComputeRunningProcesses_v2/_v3 (16, 24 or 32; 0 = 24), set by
     * `accel-emu init --proc-info-stride`, so the suite's stride detection can be tested. */
    uint32_t proc_info_stride;
    uint32_t pad2;
    uint64_t last_reclaim_ns; /* part A: when dead processes' slots were last looked for */
    uint64_t mig_serial_last; /* the last serial given to a MIG instance (state-mig.c) */
    uint64_t reserved[11];
    union {
        pthread_mutex_t mutex; /* robust, process-shared */
        char mutex_space[64];
    };
    struct emu_proc procs[EMU_MAX_PROCS];
    struct emu_gpu gpus[EMU_MAX_GPUS];
    struct emu_mps_daemon mps[EMU_MPS_MAX_DAEMONS]; /* part B: see above */
};

/* An open mapping of the state file. */
struct emu_state;

/* Creates the state file at path for cfg, atomically (a reader sees no file or a whole one);
 * replaces an existing file. Its mode is cfg->mode (0600 by default) whatever the umask: every
 * process that maps it can change the machine, so only the users meant to share the emulated
 * GPUs may open it. Returns 0 or -errno (-EINVAL: bad cfg, unknown model, a mode outside 0777
 * or without owner read and write). */
int emu_state_create(const char *path, const struct emu_config *cfg);

/* Checks a mapped state file before anything reads it: size, magic, version, the GPU count,
 * and every field that is used as an index, a count, a size or a string (per GPU: index,
 * identity strings NUL-terminated, memory total, clocks, sensors and modes in the ranges
 * `accel-emu set` allows, reserved memory below the total, topology levels, event ring entries
 * in their places, intervals;
 * per process slot: pid, charges within the GPUs' totals; MPS slots: server count, pipe
 * directory string, percentages). len is the mapped length. Returns 0, or -EPROTO with one
 * line naming the first bad field in err (err may be NULL). Pure: a fuzz target's entry. */
int emu_state_validate(const struct emu_shared *sh, size_t len, char *err, size_t errlen);

/* Maps an existing state file and validates it (emu_state_validate). -ENOENT: no file;
 * -EPROTO: not a state file, another version/size, or a bad field; -EACCES: the file's mode
 * or owner keeps the caller out. The _err forms put a one-line reason in err. */
int emu_state_open(const char *path, struct emu_state **ret);
int emu_state_open_err(const char *path, struct emu_state **ret, char *err, size_t errlen);
/* Maps the file named by $ACCEL_EMU_STATE. -ENXIO when it is unset or empty. */
int emu_state_open_env(struct emu_state **ret);
int emu_state_open_env_err(struct emu_state **ret, char *err, size_t errlen);
struct emu_state *emu_state_close(struct emu_state *st);

/* The mapping itself (for fields not covered by the functions below). */
struct emu_shared *emu_state_shared(struct emu_state *st);
unsigned emu_state_gpu_count(const struct emu_state *st);
/* GPU i, or NULL when out of range. Points into the mapping (see the top comment). */
struct emu_gpu *emu_state_gpu(struct emu_state *st, unsigned i);
/* Index of the GPU with this UUID string or PCI bus id (case-insensitive), or -ENOENT. */
int emu_state_find_gpu(struct emu_state *st, const char *uuid_or_busid);
/* Whether this process's driver sees GPU g at all: not when it is bound to vfio-pci, nor, with
 * $ACCEL_EMU_DEV_ROOT set (e.g. /dev in a container), when <dev root>/nvidia<minor> does not
 * exist — a container sees only the GPUs whose device nodes its runtime made there. */
bool emu_state_gpu_hidden(const struct emu_gpu *g);

/* The shared robust mutex. lock() recovers a lock whose owner died. */
void emu_state_lock(struct emu_state *st);
void emu_state_unlock(struct emu_state *st);

uint64_t emu_state_now_ns(void);

/* ---- memory accounting (charges belong to the calling process) ---- */

/* Charges bytes on gpu to the calling process. -ENOMEM when the GPU's used memory (sum over
 * live processes, dead ones reclaimed first) plus bytes would exceed its total less the memory
 * the driver reserves (memory_reserved); -ENOSPC when
 * no process slot is free; -EINVAL for a bad gpu. Nothing changes on failure.
 * A process bound to a MIG compute instance on gpu (emu_state_mig_bind) is charged against that
 * instance's GPU instance instead: -ENOMEM past its memory, -ENODEV when it no longer exists. */
int emu_state_mem_charge(struct emu_state *st, unsigned gpu, uint64_t bytes);
/* Gives back bytes (clamped at what the process holds). */
void emu_state_mem_uncharge(struct emu_state *st, unsigned gpu, uint64_t bytes);
/* Releases every charge of the calling process (clean exit). */
void emu_state_proc_release(struct emu_state *st);
/* Used (sum over live processes) and physical total bytes on gpu (memory_reserved of it is
 * never available to processes). Dead processes' slots are reclaimed
 * first, at most every EMU_RECLAIM_INTERVAL_NS (looking costs a /proc read per process): a
 * process killed with -9 stops counting within that interval. */
#define EMU_RECLAIM_INTERVAL_NS 50000000ull
int emu_state_mem_info(struct emu_state *st, unsigned gpu, uint64_t *ret_used, uint64_t *ret_total);
/* Frees the slots of processes that are gone. Returns how many were reclaimed. */
int emu_state_reclaim(struct emu_state *st);
/* For the other state files (state-mig.c), with the lock held: reclaims as emu_state_mem_info
 * does (so every slot with a pid is a live process, within EMU_RECLAIM_INTERVAL_NS), and the
 * calling process's own slot (created when asked; NULL when none / no free slot). */
void emu_state_reclaim_lazily_locked(struct emu_state *st);
struct emu_proc *emu_state_self_slot_locked(struct emu_state *st, bool create);

struct emu_proc_mem {
    int32_t pid;
    uint64_t bytes;
    uint64_t mig_serial; /* the MIG compute instance it runs on there (0: none) */
};
/* Live processes holding memory on gpu (after reclaiming dead ones, as emu_state_mem_info): up
 * to max entries in out, the number that exist in *ret_n (may exceed max). */
int emu_state_procs(struct emu_state *st, unsigned gpu, struct emu_proc_mem *out, size_t max,
                    size_t *ret_n);

/* ---- kernel timeline ---- */

/* Queues work of duration_ns on gpu for the calling process and returns where it starts and
 * ends on the caller's own clock (below). duration 0 occupies nothing and records no interval
 * (it only reports where such work would start). not_before_ns is the stream's last completion
 * (stream order), on the same clock. Returns 0 or -EINVAL.
 *
 * Time slicing. Each owner (a process; all clients of one MPS server together) has its own
 * queue on the GPU: its work runs in the order it was queued, from max(now, not_before, the
 * end of its queued work). While the work of several owners is pending, the GPU runs them in
 * turn, each for the GPU's time slice (timeslice_us), as the driver time-slices the contexts
 * of different processes; an owner alone runs without interruption. The timeline records each
 * slice as a busy interval of its owner. An owner's clock is the GPU's clock less the time it
 * spent waiting for other owners' slices with work pending (its lag, which only grows): work
 * lasting d on the owner's clock takes d plus the other owners' slices on the GPU's. Submit
 * returns times on the owner's clock, which never change; emu_state_wall_ns() turns them into
 * GPU (CLOCK_MONOTONIC) times, which do change while other processes queue work: submitting
 * reschedules the future part of the timeline (from now on; the past never changes).
 * An owner that never waited has a lag of 0: its clock is the GPU's.
 *
 * A dead process's work does not stay on the timeline, as the driver drops a dying context's
 * work: when a process slot is reaped (emu_state_proc_release at exit, reclaim of a killed
 * process), its work on every GPU that had not run is removed at that moment and the others'
 * pending work is rescheduled without it; busy_until and busy_total shrink to match. Before
 * submitting beside other processes' pending work, submit checks that those owners are alive
 * (kill(pid, 0): a pid reused since is caught by the next full reclaim instead). */
int emu_state_submit(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                     uint64_t duration_ns, uint64_t *ret_start_ns, uint64_t *ret_end_ns);
/* As emu_state_submit, for work that may run concurrently with the caller's own queued work
 * (kernels of one context on different streams): while the caller's queue has work pending,
 * this starts at max(now, not_before_ns, overlap_from_ns, that run's start) instead of after
 * it, and its busy time is merged with the run (utilization is the union of busy intervals).
 * overlap_from_ns is when the SMs it needs are free, as the caller tracks them (its clock);
 * UINT64_MAX: never overlap (plain emu_state_submit). */
int emu_state_submit_overlap(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                             uint64_t overlap_from_ns, uint64_t duration_ns, uint64_t *ret_start_ns,
                             uint64_t *ret_end_ns);
/* As emu_state_submit_overlap, with the work owned by as_pid on the timeline instead of the
 * caller: MPS clients submit as their server, whose one context is what the GPU runs, so the
 * work of all clients of one server may overlap (each on its own SMs), shares one queue and
 * clock, and shows as the server's. as_pid 0: the caller (emu_state_submit_overlap). */
int emu_state_submit_as(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                        uint64_t overlap_from_ns, uint64_t duration_ns, int32_t as_pid,
                        uint64_t *ret_start_ns, uint64_t *ret_end_ns);
/* As emu_state_submit_as; clock_bound: the work is a spin kernel (or a graph of them) that
 * ends at the first moment its owner is resident once duration_ns has passed on the GPU's
 * clock since it first became resident, however many slices other owners took meanwhile (the
 * SM clock it reads runs on while its context is switched out); it is busy only while
 * resident. Otherwise (and for MPS owners, as_pid not 0) it is work-bound: it needs
 * duration_ns of resident time. Alone on the GPU the two are the same. */
int emu_state_submit_kind(struct emu_state *st, unsigned gpu, uint64_t not_before_ns,
                          uint64_t overlap_from_ns, uint64_t duration_ns, int32_t as_pid,
                          bool clock_bound, uint64_t *ret_start_ns, uint64_t *ret_end_ns);
/* The GPU (CLOCK_MONOTONIC) time at which the owner's clock (as_pid as in submit_as) reads
 * t_ns on gpu, by the schedule as it stands: a completion time of submit is done when this is
 * at or before emu_state_now_ns(). at_start: t_ns is where work begins (an event recorded
 * before it): when the owner waits there for another owner's slice, the time it resumes;
 * otherwise the time it stopped. Times before the owner last waited that the ring no longer
 * holds convert with its oldest lag known. */
uint64_t emu_state_wall_ns(struct emu_state *st, unsigned gpu, int32_t as_pid, uint64_t t_ns,
                           bool at_start);
/* The owner's lag at the end of its queued work (as_pid as in submit_as), read without the
 * lock: emu_state_now_ns() less this is at most the owner's clock now (a cheap bound for
 * bookkeeping on the owner's clock). */
uint64_t emu_state_lag_hint(struct emu_state *st, unsigned gpu, int32_t as_pid);
/* The GPU's time slice in ns (timeslice_us, or the default). */
uint64_t emu_state_timeslice_ns(struct emu_state *st, unsigned gpu);

/* Busy time of gpu within [t0, t1): the overlap of the recorded intervals with the window
 * (pid 0: all processes, else only that pid). Queued future work counts only for the part of
 * the window it covers. Intervals older than the ring are lost: *ret_complete says whether
 * the ring still reaches back to t0 (may be NULL). */
int emu_state_busy_ns(struct emu_state *st, unsigned gpu, uint64_t t0, uint64_t t1, int32_t pid,
                      uint64_t *ret_busy_ns, bool *ret_complete);

struct emu_proc_util {
    int32_t pid;
    uint64_t busy_ns; /* busy time of pid within the window */
    uint64_t last_ns; /* end of pid's most recent interval inside the window */
};
/* Per-process busy time of gpu within [t0, t1): one entry per pid with work in the window,
 * up to max in out, the count in *ret_n (may exceed max). */
int emu_state_util_by_proc(struct emu_state *st, unsigned gpu, uint64_t t0, uint64_t t1,
                           struct emu_proc_util *out, size_t max, size_t *ret_n);

/* ---- events ---- */

/* Appends an event to gpu's ring and wakes every waiter. Returns 0 or -EINVAL; its sequence
 * number in *ret_seq (may be NULL). */
int emu_state_event_post(struct emu_state *st, unsigned gpu, uint64_t type, uint64_t data,
                         uint64_t *ret_seq);
/* Sequence number of gpu's newest event (0: none yet). */
uint64_t emu_state_event_last(struct emu_state *st, unsigned gpu);
/* The event with sequence seq of gpu. -EAGAIN: not posted yet; -ESTALE: overwritten (the
 * ring wrapped); -EINVAL: bad gpu or seq 0. */
int emu_state_event_get(struct emu_state *st, unsigned gpu, uint64_t seq, struct emu_event *ret);
/* The futex word's current value; read it before checking the rings, then wait with it. */
uint32_t emu_state_event_word(struct emu_state *st);
/* Blocks until the futex word differs from seen or timeout_ns passes (UINT64_MAX: forever).
 * Returns 0 (changed, or a spurious wake: recheck the rings) or -ETIMEDOUT. */
int emu_state_event_wait(struct emu_state *st, uint32_t seen, uint64_t timeout_ns);
