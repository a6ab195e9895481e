/* region.h — the container's shared usage region: layout (an ABI read by other
 * processes: the agent, the exporter, accelctl) and the lock-free memory
 * reservation protocol.
 *
 * One file per container, mmap'd MAP_SHARED by every process of it. Fixed
 * width little-endian fields, no pointers, 64-byte aligned blocks. The layout
 * is versioned by VC_REGION_ABI; fields are only ever appended into reserved
 * space, and a reader must check magic, abi_version and sizes first.
 *
 * Memory accounting is per process slot: a process claims one slot and only
 * ever adds to or subtracts from its own slot's counters. The container's use
 * of a device is the sum over slots, so a process killed between any two
 * stores leaves nothing inconsistent: whoever notices that the slot's owner is
 * dead zeroes the slot. See docs/vcuda.md for the argument.
 *
 * Threads: every function may be called from any thread of any process. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VC_REGION_MAGIC 0x3147455241554356ull /* "VCUAREG1" read as little-endian bytes */
#define VC_REGION_ABI 1u
#define VC_REGION_DEVICES 16u
#define VC_REGION_SLOTS 1024u
#define VC_REGION_HEADER_SIZE 4096u
#define VC_REGION_SLOT_SIZE 256u

/* owner word of a slot: 0 = free; a pid = in use by that process; with
 * VC_OWNER_RECLAIM set, the low 32 bits are the pid of the process that is
 * zeroing the slot of a dead owner (if that one dies too, another takes over). */
#define VC_OWNER_PID_MASK 0xffffffffull
#define VC_OWNER_RECLAIM (1ull << 32)

/* Policies for the compute share (core_policy), written by part 2 (pacing). */
enum vc_core_policy {
    VC_CORE_POLICY_HARD = 0,
    VC_CORE_POLICY_BURST = 1,
};

/* Header: offset 0, VC_REGION_HEADER_SIZE bytes. Offsets are asserted below. */
struct vc_region_header {
    uint64_t magic;          /* 0: VC_REGION_MAGIC, stored last at creation */
    uint32_t abi_version;    /* 8: VC_REGION_ABI */
    uint32_t header_size;    /* 12: VC_REGION_HEADER_SIZE */
    uint64_t region_size;    /* 16: bytes of the whole file layout */
    uint32_t slot_count;     /* 24: VC_REGION_SLOTS */
    uint32_t slot_size;      /* 28: VC_REGION_SLOT_SIZE */
    uint32_t slot_offset;    /* 32: offset of slot 0 (= header_size) */
    uint32_t device_count;   /* 36: VC_REGION_DEVICES (length of the per-device arrays) */
    uint32_t slot_hwm;       /* 40: 1 + highest slot index ever claimed (only grows) */
    uint32_t reserved0;      /* 44 */
    uint64_t context_memory; /* 48: bytes charged per context, as configured */
    uint64_t reserved1;      /* 56 */
    /* 64: per-device memory limit in bytes (0 = none), as configured; written
     * by every attaching process (same value from the same config). */
    uint64_t memory_limit[VC_REGION_DEVICES];
    /* 192: compute share, part 2 (pacing) owns these; part 1 only writes
     * core_limit and core_policy from the config at attach. */
    uint32_t core_limit;        /* 192: percent 1..100 (100 = unlimited), 0 = not configured */
    uint32_t core_policy;       /* 196: enum vc_core_policy */
    int64_t core_budget_ns;     /* 200: current container budget of GPU time (ns), may be < 0 */
    uint64_t core_budget_time;  /* 208: CLOCK_MONOTONIC ns of the last budget update */
    uint64_t core_period_ns;    /* 216: control period in use */
    uint64_t pace_reserved[12]; /* 224: for part 2 (pacing), zero until defined */
    /* 320: GPU UUIDs of the container's devices in device-index order, NUL padded. */
    char device_uuid[VC_REGION_DEVICES][64];
    /* 1344 .. 4095: zero, reserved for later ABI additions */
};

/* One process slot: VC_REGION_SLOT_SIZE bytes at slot_offset + i * slot_size. */
struct vc_region_slot {
    uint64_t owner;      /* 0: see VC_OWNER_* */
    uint64_t start_time; /* 8: owner's start time (/proc/<pid>/stat field 22), 0 = not yet known */
    /* 16: bytes this process holds or is reserving on each device (memory
     * from allocations, pools, arrays, VMM handles and context overhead). */
    uint64_t used[VC_REGION_DEVICES];
    uint64_t gpu_time_ns;      /* 144: pacing (part 2): GPU time measured for this process */
    uint64_t launches;         /* 152: pacing (part 2): kernel/graph launches by this process */
    uint64_t pace_reserved[6]; /* 160: for part 2 */
    uint64_t reserved[6];      /* 208 */
};

_Static_assert(sizeof(struct vc_region_slot) == VC_REGION_SLOT_SIZE, "slot size is ABI");
_Static_assert(sizeof(struct vc_region_header) <= VC_REGION_HEADER_SIZE, "header fits");
_Static_assert(__builtin_offsetof(struct vc_region_header, memory_limit) == 64, "ABI");
_Static_assert(__builtin_offsetof(struct vc_region_header, core_limit) == 192, "ABI");
_Static_assert(__builtin_offsetof(struct vc_region_header, device_uuid) == 320, "ABI");
_Static_assert(__builtin_offsetof(struct vc_region_slot, used) == 16, "ABI");
_Static_assert(__builtin_offsetof(struct vc_region_slot, gpu_time_ns) == 144, "ABI");

#define VC_REGION_SIZE                                                                             \
    ((size_t)VC_REGION_HEADER_SIZE + (size_t)VC_REGION_SLOTS * VC_REGION_SLOT_SIZE)

struct vc_region {
    struct vc_region_header *hdr;
    struct vc_region_slot *slots;
    size_t map_size;
    bool anonymous; /* private to this process (no region configured) */
    /* What this process itself holds per device: its own copy of its slot's
     * used[], never in shared memory. The slot can be zeroed by anyone who can
     * write the region; this cannot, so a process never takes more than the
     * limit on its own, and restores its slot when it finds it lowered. */
    uint64_t mine[VC_REGION_DEVICES];
    int mine_slot;     /* the slot mine[] mirrors: the last one claimed (-1: none) */
    uint32_t tampered; /* times this process found its slot below mine[] */
    /* Own-slot updates in progress, and completed: a heal acts only on a
     * snapshot of mine[] and the slot that no thread of ours was changing. */
    uint32_t own_busy;
    uint64_t own_gen;
};

/* Maps the region at path (created, sized and initialized when missing or
 * empty); path NULL or "" gives a private anonymous region (per-process
 * accounting, standalone use). Returns 0, -EPROTO for a file that is not a
 * compatible region, or -errno. */
int vc_region_attach(const char *path, struct vc_region *ret);
void vc_region_detach(struct vc_region *r);

/* Claims a free slot for pid (start_time may be 0 if unknown). Reaps dead
 * owners when no slot is free. Returns the slot index or -ENOSPC. */
int vc_region_claim_slot(struct vc_region *r, uint32_t pid, uint64_t start_time);
/* Frees our slot at clean exit (counters zeroed first). */
void vc_region_release_slot(struct vc_region *r, int slot, uint32_t pid);

/* Reserves bytes on dev for slot against limit (0 = unlimited): the bytes are
 * added to the slot first, then the container total is summed; over the limit,
 * the bytes are taken back. Never lets reservations that succeed together
 * exceed the limit. Returns 0 or -ENOSPC. */
int vc_region_reserve(struct vc_region *r, int slot, unsigned dev, uint64_t bytes, uint64_t limit);
/* Adds bytes without a limit check (bytes the driver already holds). */
void vc_region_charge(struct vc_region *r, int slot, unsigned dev, uint64_t bytes);
/* Gives back bytes reserved earlier by this slot (saturates at 0). */
void vc_region_release(struct vc_region *r, int slot, unsigned dev, uint64_t bytes);
/* Sum over all slots for dev (saturating). */
uint64_t vc_region_used(const struct vc_region *r, unsigned dev);

/* One process of the region as NVML sees it: pid (in the region's pid
 * namespace, i.e. the container's) and its device memory. */
struct vc_audit_proc {
    uint32_t pid;
    uint64_t used_bytes;
};

/* One finding of vc_region_audit. */
struct vc_audit_finding {
    uint32_t pid;
    int slot;              /* -1: the process has no slot at all */
    uint64_t region_bytes; /* what its slot says it holds on dev */
    uint64_t nvml_bytes;   /* what NVML says */
};

/* Tamper check for the agent (the region is writable by the tenant, so its
 * counters can be lowered): compares each process's slot on device dev with
 * NVML's per-process figure (nvmlDeviceGetComputeRunningProcesses) and reports
 * every process whose slot under-reports by more than slack bytes (the
 * driver's rounding, a context charged by a configured figure), including a
 * process NVML sees that has no slot. Reads only; writes up to max findings.
 * Returns the number of findings (possibly > max), or -EPROTO for a region
 * whose header is not one. */
int vc_region_audit(const struct vc_region *r, unsigned dev, const struct vc_audit_proc *procs,
                    size_t nprocs, uint64_t slack, struct vc_audit_finding *ret, size_t max);

/* Zeroes the slots of processes that no longer exist (or whose pid was
 * reused: start time differs). Returns how many slots were reclaimed. */
int vc_region_reap(struct vc_region *r);

/* Start time of pid from /proc/<pid>/stat (clock ticks after boot), or 0. */
uint64_t vc_proc_start_time(uint32_t pid);
