/* accel-emu.c — the emulator's control command: creates an emulated machine (`init`), shows it
 * (`status`), and acts on it the way hardware and its driver would (`xid`, `ecc`, `set`,
 * `lose`, `restore`, `reset`; MIG instances with `mig`; the vfio-pci binding with `vfio`).
 *
 * Every value is checked before anything changes: a bad argument exits 2 with a message that
 * names it and leaves the machine (state file and fixture tree) as it was. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "accel-config.h"
#include "emu-args.h"
#include "fixtures.h"
#include "fs.h"
#include "state-mig.h"
#include "state-mps.h"
#include "state-nvml.h"
#include "state.h"
#include "util.h"

#define PROG "accel-emu"
#define EXIT_USAGE 2

/* Utilization shown by `status`: busy fraction over this last window (NVML's is ~1 s too). */
#define STATUS_WINDOW_NS 1000000000ull

/* snprintf for paths and messages whose truncation is harmless (an over-long path then
 * fails to open with a clear error); vsnprintf keeps the compiler's truncation warning quiet. */
static void strf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void strf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (see accel-emu --help)\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static void help(FILE *f)
{
    fprintf(f,
            "usage: accel-emu [--state FILE] COMMAND [ARGS]\n"
            "An emulated NVIDIA GPU machine for running accel without GPUs (docs/emulator.md).\n"
            "\n"
            "  init [--gpus N] [--model NAME] [--memory SIZE] [--numa 0,0,1,1]\n"
            "       [--nvlink all|none|pairs] [--proc-info-stride 16|24|32] [--seed N]\n"
            "       [--mode 0600] [--timeslice US] [--iommu-groups per-gpu|shared]\n"
            "                       create the machine (default: 4 x H100, NVLink all; the\n"
            "                       state file is 0600: --mode 0660/0666 to share it; the\n"
            "                       time slice between processes: 2000 us)\n"
            "  status [--json]      GPUs, memory, processes, utilization, sensors, MPS\n"
            "  xid GPU XID          inject an XID error event\n"
            "  ecc GPU single|double\n"
            "                       count one ECC error and post its event\n"
            "  set GPU KEY=VALUE... change sensors and modes; keys:\n"
            "                       %s\n"
            "  lose GPU             the GPU falls off the bus (XID 79; NVML: GPU_IS_LOST)\n"
            "  restore GPU          the GPU is back\n"
            "  reset GPU            a GPU reset: a pending MIG mode becomes current (the GPU\n"
            "                       must be idle); MIG instances are lost\n"
            "  mig GPU create PROFILE[,PROFILE...]\n"
            "                       GPU instances with a compute instance each (nvidia-smi\n"
            "                       mig -cgi ... -C), e.g. 1g.10gb,3g.40gb; all or none\n"
            "  mig GPU destroy      every MIG instance of the GPU (refused while one is used)\n"
            "  mig GPU list [--json]\n"
            "                       MIG mode, GPU and compute instances, MIG device UUIDs\n"
            "  vfio GPU bind|unbind bind the GPU to vfio-pci (NVML and CUDA lose it) or back\n"
            "  vfio GPU audio|bridge on|off\n"
            "                       put an audio function or a PCIe bridge in its IOMMU group\n"
            "  models               the GPU models init knows\n"
            "\n"
            "GPU is an index, a UUID or a PCI bus id. The state file is FILE, else\n"
            "$ACCEL_EMU_STATE. Bad arguments exit 2 and change nothing.\n",
            emu_args_set_keys);
}

/* ------------------------------------------------------------------ helpers */

static const char *state_path(const char *opt)
{
    if (opt)
        return opt;
    const char *e = getenv("ACCEL_EMU_STATE");
    return e && *e ? e : NULL;
}

static int open_state(const char *path, struct emu_state **ret)
{
    if (!path)
        return usage_error("no emulated machine: set ACCEL_EMU_STATE or pass --state FILE "
                           "(create one with `accel-emu init`)");
    char err[512];
    int r = emu_state_open_err(path, ret, err, sizeof(err));
    if (r == -ENOENT)
        return usage_error("no emulated machine at %s: create it with `accel-emu init`", path);
    if (r == -EPROTO)
        return usage_error("not an emulated machine of this version, or a damaged one: %s", err);
    if (r < 0)
        return fail("cannot open %s", err);
    return 0;
}

static int resolve_gpu(struct emu_state *st, const char *s, unsigned *ret)
{
    char err[256];
    int r = emu_args_gpu_index(s, emu_state_gpu_count(st), ret, err, sizeof(err));
    if (r == 0)
        return 0;
    if (r == -ENOENT) {
        r = emu_state_find_gpu(st, s);
        if (r >= 0) {
            *ret = (unsigned)r;
            return 0;
        }
        snprintf(err, sizeof(err), "no GPU '%s': want an index (0-%u), a UUID or a PCI bus id", s,
                 emu_state_gpu_count(st) - 1);
    }
    return usage_error("%s", err);
}

/* Directory holding this program (the build or install dir of the emulator's libraries). */
static void self_dir(char *buf, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0) {
        snprintf(buf, len, ".");
        return;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    snprintf(buf, len, "%s", exe);
}

/* ------------------------------------------------------------------ init */

/* "<absolute state path>.d": where the fixture trees live. */
static void fixture_base(const char *statep, char *buf, size_t len)
{
    char abs[PATH_MAX];
    if (!realpath(statep, abs))
        snprintf(abs, sizeof(abs), "%s", statep);
    strf(buf, len, "%s.d", abs);
}

static int cmd_init(const char *statep, int argc, char **argv)
{
    struct emu_config cfg;
    emu_config_init(&cfg);
    const char *numa = NULL;
    unsigned stride = 24;
    char err[512];
    uint64_t v;

    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            help(stdout);
            return 0;
        }
        if (strncmp(o, "--", 2) != 0)
            return usage_error("init: unexpected argument '%s'", o);
        /* --opt=value or --opt value */
        const char *val;
        char name[64];
        const char *eq = strchr(o, '=');
        if (eq) {
            snprintf(name, sizeof(name), "%.*s", (int)(eq - o), o);
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", o);
            if (i + 1 >= argc)
                return usage_error("init: %s needs a value", o);
            val = argv[++i];
        }
        if (strcmp(name, "--gpus") == 0) {
            if (parse_u64(val, &v) < 0 || v < 1 || v > EMU_MAX_GPUS)
                return usage_error("bad --gpus '%s': want 1-%d", val, EMU_MAX_GPUS);
            cfg.gpus = (unsigned)v;
        } else if (strcmp(name, "--model") == 0) {
            if (!emu_model_find(val))
                return usage_error("unknown --model '%s' (see accel-emu models)", val);
            cfg.model = val;
        } else if (strcmp(name, "--memory") == 0) {
            if (parse_size(val, &v) < 0 || v < EMU_MEMORY_MIN || v > EMU_MEMORY_MAX)
                return usage_error("bad --memory '%s': want a size such as 16Gi, 64Mi-1Pi", val);
            cfg.memory_bytes = v;
        } else if (strcmp(name, "--numa") == 0) {
            numa = val;
        } else if (strcmp(name, "--nvlink") == 0) {
            if (emu_args_nvlink(val, &cfg.nvlink, err, sizeof(err)) < 0)
                return usage_error("bad --nvlink: %s", err);
        } else if (strcmp(name, "--proc-info-stride") == 0) {
            if (parse_u64(val, &v) < 0 || (v != 16 && v != 24 && v != 32))
                return usage_error("bad --proc-info-stride '%s': want 16, 24 or 32", val);
            stride = (unsigned)v;
        } else if (strcmp(name, "--mode") == 0) {
            if (emu_args_mode(val, &cfg.mode, err, sizeof(err)) < 0)
                return usage_error("%s", err);
        } else if (strcmp(name, "--timeslice") == 0) {
            if (parse_u64(val, &v) < 0 || v < 1 || v > EMU_TIMESLICE_MAX_US)
                return usage_error("bad --timeslice '%s': want microseconds, 1-%u", val,
                                   EMU_TIMESLICE_MAX_US);
            cfg.timeslice_us = (unsigned)v;
        } else if (strcmp(name, "--iommu-groups") == 0) {
            if (emu_args_iommu_groups(val, &cfg.iommu_shared, err, sizeof(err)) < 0)
                return usage_error("%s", err);
        } else if (strcmp(name, "--seed") == 0) {
            if (parse_u64(val, &v) < 0)
                return usage_error("bad --seed '%s': want a non-negative integer", val);
            cfg.seed = v;
        } else {
            return usage_error("init: unknown option '%s'", name);
        }
    }
    if (numa) {
        if (emu_args_numa(numa, cfg.gpus, cfg.numa, err, sizeof(err)) < 0)
            return usage_error("bad --numa: %s", err);
        cfg.numa_count = cfg.gpus;
    }
    if (!statep)
        return usage_error("init: where? set ACCEL_EMU_STATE or pass --state FILE");

    /* Build the machine under a temporary name, set what emu_state_create does not know
     * (the process-info stride), then rename: a reader sees the old machine or the whole new
     * one. */
    size_t plen = strlen(statep);
    if (plen + 16 > PATH_MAX)
        return usage_error("state path too long");
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.new", statep);
    int r = emu_state_create(tmp, &cfg);
    if (r == -EINVAL)
        return usage_error("init: the configuration was refused");
    if (r < 0)
        return fail("cannot create %s: %s", statep, strerror(-r));
    struct emu_state *st = NULL;
    r = emu_state_open(tmp, &st);
    if (r < 0) {
        unlink(tmp);
        return fail("cannot open the new state %s: %s", tmp, strerror(-r));
    }
    emu_state_set_proc_info_stride(st, stride);
    if (rename(tmp, statep) < 0) {
        r = -errno;
        unlink(tmp);
        emu_state_close(st);
        return fail("cannot create %s: %s", statep, strerror(-r));
    }

    char abs[PATH_MAX], base[PATH_MAX + 8];
    if (!realpath(statep, abs))
        snprintf(abs, sizeof(abs), "%s", statep);
    strf(base, sizeof(base), "%s.d", abs);
    r = emu_fixtures_init(st, base, err, sizeof(err));
    if (r < 0) {
        emu_state_close(st);
        return fail("%s", err);
    }

    const struct emu_gpu *g0 = emu_state_gpu(st, 0);
    char mem[32], dir[PATH_MAX];
    format_bytes(g0->memory_total, mem, sizeof(mem));
    self_dir(dir, sizeof(dir));
    printf("accel-emu: created an emulated machine: %u x %s (%s each), NVLink %s\n",
           emu_state_gpu_count(st), g0->name, mem,
           cfg.nvlink == EMU_NVLINK_ALL     ? "all"
           : cfg.nvlink == EMU_NVLINK_PAIRS ? "pairs"
                                            : "none");
    for (unsigned i = 0; i < emu_state_gpu_count(st); i++) {
        const struct emu_gpu *g = emu_state_gpu(st, i);
        printf("  GPU %u  %s  %s  NUMA %d\n", i, g->uuid, g->pci_bus_id, g->numa_node);
    }
    printf("  state:  %s\n", abs);
    printf("  sysfs:  %s/sysfs (bus/pci/devices/<bus>: numa_node, driver, iommu_group)\n", base);
    printf("  dev:    %s/dev (nvidia0..%u, nvidiactl, nvidia-uvm, nvidia-uvm-tools, vfio/vfio)\n",
           base, emu_state_gpu_count(st) - 1);
    printf("  IOMMU groups: %s\n", cfg.iommu_shared ? "shared by GPUs 2k and 2k+1" : "one per GPU");
    printf("  process-info stride: %u bytes\n", stride);
    printf("Use it with:\n");
    printf("  export ACCEL_EMU_STATE=%s\n", abs);
    printf("  export LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n", dir);
    printf("  export PATH=%s:$PATH\n", dir);
    emu_state_close(st);
    return 0;
}

/* ------------------------------------------------------------------ status */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

struct gpu_status {
    uint64_t used, total;
    struct emu_proc_mem procs[EMU_MAX_PROCS];
    size_t nprocs;
    unsigned util_pct;
};

static void gather(struct emu_state *st, unsigned i, struct gpu_status *s)
{
    memset(s, 0, sizeof(*s));
    emu_state_mem_info(st, i, &s->used, &s->total);
    emu_state_procs(st, i, s->procs, EMU_MAX_PROCS, &s->nprocs);
    if (s->nprocs > EMU_MAX_PROCS)
        s->nprocs = EMU_MAX_PROCS;
    uint64_t now = emu_state_now_ns(), busy = 0;
    emu_state_busy_ns(st, i, now - STATUS_WINDOW_NS, now, 0, &busy, NULL);
    s->util_pct = (unsigned)((busy * 100 + STATUS_WINDOW_NS / 2) / STATUS_WINDOW_NS);
}

/* The MIG instances of GPU i as a JSON array: each GPU instance with its profile, placement,
 * memory and compute instances (UUID, profile, placement, the pids on it). */
static void json_mig(struct emu_state *st, unsigned i, const struct gpu_status *s)
{
    const struct emu_gpu *g = emu_state_gpu(st, i);
    const struct emu_mig_board *b = emu_state_mig_board(g);
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    emu_state_mig_snapshot(st, i, tab);
    printf("[");
    bool first = true;
    for (unsigned gid = 0; gid < 16; gid++)
        for (unsigned k = 0; b && k < EMU_MIG_MAX_GI; k++) {
            const struct emu_mig_gi *gi = &tab[k];
            const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, gi->profile);
            if (!gi->used || gi->id != gid || !p)
                continue;
            printf("%s{\"gpu_instance_id\":%u,\"profile\":", first ? "" : ",", gi->id);
            json_str(stdout, p->name);
            printf(",\"profile_id\":%u,\"placement\":{\"start\":%u,\"size\":%u}", p->id, gi->start,
                   gi->size);
            printf(",\"memory_total_bytes\":%" PRIu64 ",\"memory_used_bytes\":%" PRIu64,
                   emu_mig_gi_bytes(b, p, g->memory_total), emu_state_mig_gi_used(st, i, k));
            printf(",\"compute_instances\":[");
            bool cfirst = true;
            for (unsigned cid = 0; cid < EMU_MIG_MAX_CI; cid++)
                for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++) {
                    const struct emu_mig_ci *ci = &gi->ci[c];
                    if (!ci->used || ci->id != cid)
                        continue;
                    char name[64];
                    emu_mig_ci_name(p, ci->size, name, sizeof(name));
                    printf("%s{\"compute_instance_id\":%u,\"profile\":", cfirst ? "" : ",", ci->id);
                    json_str(stdout, name);
                    printf(",\"profile_id\":%u,\"uuid\":", ci->profile);
                    json_str(stdout, ci->uuid);
                    printf(",\"placement\":{\"start\":%u,\"size\":%u},\"processes\":[", ci->start,
                           ci->size);
                    bool pfirst = true;
                    for (size_t q = 0; q < s->nprocs; q++)
                        if (s->procs[q].mig_serial == ci->serial) {
                            printf("%s%d", pfirst ? "" : ",", (int)s->procs[q].pid);
                            pfirst = false;
                        }
                    printf("]}");
                    cfirst = false;
                }
            printf("]}");
            first = false;
        }
    printf("]");
}

static void status_json(struct emu_state *st, const char *abs)
{
    struct emu_shared *sh = emu_state_shared(st);
    struct gpu_status *s = malloc(sizeof(*s));
    if (!s)
        return;
    printf("{\"state\":");
    json_str(stdout, abs);
    printf(",\"sysfs_root\":");
    char p[PATH_MAX + 16];
    strf(p, sizeof(p), "%s.d/sysfs", abs);
    json_str(stdout, p);
    printf(",\"dev_root\":");
    strf(p, sizeof(p), "%s.d/dev", abs);
    json_str(stdout, p);
    printf(",\"model\":");
    json_str(stdout, sh->model);
    printf(",\"proc_info_stride\":%u,\"gpus\":[", emu_state_proc_info_stride(st));
    for (unsigned i = 0; i < emu_state_gpu_count(st); i++) {
        const struct emu_gpu *g = emu_state_gpu(st, i);
        gather(st, i, s);
        printf("%s{\"index\":%u,\"uuid\":", i ? "," : "", i);
        json_str(stdout, g->uuid);
        printf(",\"name\":");
        json_str(stdout, g->name);
        printf(",\"pci_bus_id\":");
        json_str(stdout, g->pci_bus_id);
        printf(",\"minor\":%u,\"numa_node\":", g->minor);
        if (g->numa_node < 0)
            printf("null");
        else
            printf("%d", g->numa_node);
        printf(",\"memory_total_bytes\":%" PRIu64 ",\"memory_used_bytes\":%" PRIu64, s->total,
               s->used);
        printf(",\"utilization_gpu_percent\":%u", s->util_pct);
        printf(",\"temperature_c\":%u,\"power_mw\":%u,\"power_limit_mw\":%u", g->temperature_c,
               g->power_mw, g->power_limit_mw);
        printf(",\"sm_clock_mhz\":%u,\"sm_clock_max_mhz\":%u,\"mem_clock_mhz\":%u", g->sm_clock_mhz,
               g->sm_clock_max_mhz, g->mem_clock_mhz);
        printf(",\"fan_percent\":%u,\"pstate\":%u,\"compute_mode\":%u,\"mig_mode\":%u",
               g->fan_percent, g->pstate, g->compute_mode, g->mig_mode);
        printf(",\"mig_mode_pending\":%u,\"mig_instances\":", g->mig_mode_pending);
        json_mig(st, i, s);
        printf(",\"vfio\":%s,\"iommu_group\":%u,\"pci_functions\":[%s%s%s]",
               g->vfio ? "true" : "false", g->iommu_group,
               g->pci_functions & EMU_PCI_FN_AUDIO ? "\"audio\"" : "",
               g->pci_functions == (EMU_PCI_FN_AUDIO | EMU_PCI_FN_BRIDGE) ? "," : "",
               g->pci_functions & EMU_PCI_FN_BRIDGE ? "\"bridge\"" : "");
        printf(",\"timeslice_us\":%u",
               g->timeslice_us ? g->timeslice_us : EMU_TIMESLICE_DEFAULT_US);
        printf(",\"lost\":%s", g->lost ? "true" : "false");
        printf(",\"ecc_single_bit\":%" PRIu64 ",\"ecc_double_bit\":%" PRIu64, g->ecc_single_bit,
               g->ecc_double_bit);
        printf(",\"events\":%" PRIu64, emu_state_event_last(st, i));
        printf(",\"processes\":[");
        for (size_t k = 0; k < s->nprocs; k++)
            printf("%s{\"pid\":%d,\"memory_bytes\":%" PRIu64 "}", k ? "," : "",
                   (int)s->procs[k].pid, s->procs[k].bytes);
        printf("]}");
    }
    printf("],\"mps\":[");
    bool first = true;
    for (int m = 0; m < EMU_MPS_MAX_DAEMONS; m++) {
        struct emu_mps_daemon d;
        emu_state_lock(st);
        d = sh->mps[m];
        emu_state_unlock(st);
        if (!d.pid)
            continue;
        printf("%s{\"pid\":%d,\"pipe_dir\":", first ? "" : ",", (int)d.pid);
        d.pipe_dir[sizeof(d.pipe_dir) - 1] = '\0';
        json_str(stdout, d.pipe_dir);
        printf(",\"default_active_thread_percentage\":%u.%u,\"servers\":[",
               d.default_thread_pct_x10 / 10, d.default_thread_pct_x10 % 10);
        for (uint32_t k = 0; k < d.server_count && k < EMU_MPS_MAX_SERVERS; k++)
            printf("%s{\"pid\":%d,\"uid\":%u}", k ? "," : "", (int)d.servers[k].pid,
                   d.servers[k].uid);
        printf("]}");
        first = false;
    }
    printf("]}\n");
    free(s);
}

static void status_text(struct emu_state *st, const char *abs)
{
    struct gpu_status *s = malloc(sizeof(*s));
    if (!s)
        return;
    printf("machine %s (%s.d/sysfs, %s.d/dev), process-info stride %u\n", abs, abs, abs,
           emu_state_proc_info_stride(st));
    printf("%-3s %-40s %-16s %-4s %21s %5s %5s %7s %6s %s\n", "GPU", "UUID", "BUS", "NUMA",
           "MEMORY USED/TOTAL", "UTIL", "TEMP", "POWER", "SM MHZ", "STATE");
    for (unsigned i = 0; i < emu_state_gpu_count(st); i++) {
        const struct emu_gpu *g = emu_state_gpu(st, i);
        gather(st, i, s);
        char used[32], total[32], mem[72], numa[16];
        format_bytes(s->used, used, sizeof(used));
        format_bytes(s->total, total, sizeof(total));
        snprintf(mem, sizeof(mem), "%s/%s", used, total);
        snprintf(numa, sizeof(numa), g->numa_node < 0 ? "-" : "%d", g->numa_node);
        printf("%-3u %-40s %-16s %-4s %21s %4u%% %4uC %6.1fW %6u %s\n", i, g->uuid, g->pci_bus_id,
               numa, mem, s->util_pct, g->temperature_c, g->power_mw / 1000.0, g->sm_clock_mhz,
               g->lost ? "LOST" : "ok");
        for (size_t k = 0; k < s->nprocs; k++) {
            char b[32];
            printf("    pid %d: %s\n", (int)s->procs[k].pid,
                   format_bytes(s->procs[k].bytes, b, sizeof(b)));
        }
        if (g->ecc_single_bit || g->ecc_double_bit)
            printf("    ECC errors: %" PRIu64 " single-bit, %" PRIu64 " double-bit\n",
                   g->ecc_single_bit, g->ecc_double_bit);
        if (g->mig_mode || g->mig_mode_pending)
            printf("    MIG mode %s (pending %s): `accel-emu mig %u list`\n",
                   g->mig_mode ? "enabled" : "disabled",
                   g->mig_mode_pending ? "enabled" : "disabled", i);
        if (g->vfio)
            printf("    bound to vfio-pci (IOMMU group %u): not seen by NVML or CUDA\n",
                   g->iommu_group);
    }
    struct emu_shared *sh = emu_state_shared(st);
    for (int m = 0; m < EMU_MPS_MAX_DAEMONS; m++) {
        struct emu_mps_daemon d;
        emu_state_lock(st);
        d = sh->mps[m];
        emu_state_unlock(st);
        if (!d.pid)
            continue;
        d.pipe_dir[sizeof(d.pipe_dir) - 1] = '\0';
        printf("MPS control daemon %d on %s: %u server(s), default active threads %u.%u%%\n",
               (int)d.pid, d.pipe_dir, d.server_count, d.default_thread_pct_x10 / 10,
               d.default_thread_pct_x10 % 10);
    }
    free(s);
}

static int cmd_status(const char *statep, int argc, char **argv)
{
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = true;
        else
            return usage_error("status: unexpected argument '%s'", argv[i]);
    }
    struct emu_state *st;
    int r = open_state(statep, &st);
    if (r)
        return r;
    char abs[PATH_MAX];
    if (!realpath(statep, abs))
        snprintf(abs, sizeof(abs), "%s", statep);
    if (json)
        status_json(st, abs);
    else
        status_text(st, abs);
    emu_state_close(st);
    return 0;
}

/* ------------------------------------------------------------------ actions */

/* A per-GPU command's work, run with the machine open and its GPU resolved; returns the exit
 * status (fail() and usage_error() say why). */
typedef int (*gpu_action)(struct emu_state *st, unsigned gpu, const void *arg);

/* Opens the emulated machine, resolves the GPU argument (an index, a UUID or a PCI bus id) and
 * runs act on it: the frame every per-GPU command shares. */
static int on_gpu(const char *statep, const char *gpu_arg, gpu_action act, const void *arg)
{
    struct emu_state *st;
    unsigned gpu;
    int r = open_state(statep, &st);
    if (r)
        return r;
    if ((r = resolve_gpu(st, gpu_arg, &gpu)) == 0)
        r = act(st, gpu, arg);
    emu_state_close(st);
    return r;
}

static int xid_on(struct emu_state *st, unsigned gpu, const void *arg)
{
    uint64_t xid = *(const uint64_t *)arg;
    int r = emu_state_inject_xid(st, gpu, xid);
    if (r < 0)
        r = fail("cannot post the event: %s", strerror(-r));
    else
        printf("GPU %u: XID %" PRIu64 " injected\n", gpu, xid);
    return r;
}

static int cmd_xid(const char *statep, int argc, char **argv)
{
    if (argc != 2)
        return usage_error("usage: accel-emu xid GPU XID");
    uint64_t xid;
    if (parse_u64(argv[1], &xid) < 0 || xid < 1 || xid > 65535)
        return usage_error("bad XID '%s': want 1-65535", argv[1]);
    return on_gpu(statep, argv[0], xid_on, &xid);
}

static int ecc_on(struct emu_state *st, unsigned gpu, const void *arg)
{
    bool dbl = *(const bool *)arg;
    int r = emu_state_inject_ecc(st, gpu, dbl);
    if (r < 0)
        r = fail("cannot post the event: %s", strerror(-r));
    else
        printf("GPU %u: one %s-bit ECC error\n", gpu, dbl ? "double" : "single");
    return r;
}

static int cmd_ecc(const char *statep, int argc, char **argv)
{
    if (argc != 2)
        return usage_error("usage: accel-emu ecc GPU single|double");
    bool dbl;
    if (strcmp(argv[1], "single") == 0)
        dbl = false;
    else if (strcmp(argv[1], "double") == 0)
        dbl = true;
    else
        return usage_error("bad ECC error kind '%s': want single or double", argv[1]);
    return on_gpu(statep, argv[0], ecc_on, &dbl);
}

/* MIG mode as nvidia-smi -mig sets it: pending, then a GPU reset makes it current; the reset
 * fails while processes use the GPU, and the mode stays pending (nvmlDeviceSetMigMode). */
static int set_mig(struct emu_state *st, unsigned gpu, bool on)
{
    bool active;
    int32_t busy;
    int r = emu_state_mig_set_mode(st, gpu, on, &active, &busy);
    if (r < 0)
        return fail("cannot set MIG mode on GPU %u: %s", gpu, strerror(-r));
    if (!active)
        return fail("GPU %u: MIG mode is pending %s: in use by process %d; the GPU reset that "
                    "makes it current needs an idle GPU: stop its processes, then run "
                    "`accel-emu reset %u`",
                    gpu, on ? "enable" : "disable", (int)busy, gpu);
    return 0;
}

static int set_on(struct emu_state *st, unsigned gpu, const void *arg)
{
    const struct emu_set_req *req = arg;
    char err[512];
    emu_state_lock(st);
    int r = emu_args_set_apply(emu_state_gpu(st, gpu), req, err, sizeof(err));
    emu_state_unlock(st);
    if (r < 0)
        r = usage_error("%s", err);
    else if (req->mask & (EMU_SET_SM_CLOCK | EMU_SET_MEM_CLOCK))
        emu_state_event_post(st, gpu, EMU_EVENT_CLOCK, 0, NULL);
    if (r == 0 && (req->mask & EMU_SET_PSTATE))
        emu_state_event_post(st, gpu, EMU_EVENT_PSTATE, req->pstate, NULL);
    if (r == 0 && (req->mask & EMU_SET_MIG))
        r = set_mig(st, gpu, req->mig_mode);
    return r;
}

static int cmd_set(const char *statep, int argc, char **argv)
{
    if (argc < 2)
        return usage_error("usage: accel-emu set GPU KEY=VALUE... (keys: %s)", emu_args_set_keys);
    struct emu_set_req req = {0};
    char err[512];
    for (int i = 1; i < argc; i++)
        if (emu_args_set(argv[i], &req, err, sizeof(err)) < 0)
            return usage_error("%s", err);
    return on_gpu(statep, argv[0], set_on, &req);
}

static int lose_on(struct emu_state *st, unsigned gpu, const void *arg)
{
    bool lose = *(const bool *)arg;
    int r = emu_state_set_lost(st, gpu, lose);
    if (r < 0)
        r = fail("cannot change GPU %u: %s", gpu, strerror(-r));
    else
        printf("GPU %u: %s\n", gpu, lose ? "fell off the bus (XID 79)" : "restored");
    return r;
}

static int cmd_lose(const char *statep, int argc, char **argv, bool lose)
{
    if (argc != 1)
        return usage_error("usage: accel-emu %s GPU", lose ? "lose" : "restore");
    return on_gpu(statep, argv[0], lose_on, &lose);
}

/* ------------------------------------------------------------------ reset, MIG, VFIO */

static int reset_on(struct emu_state *st, unsigned gpu, const void *arg)
{
    (void)arg;
    int32_t busy;
    int r = emu_state_gpu_reset(st, gpu, &busy);
    if (r == -EBUSY)
        r = fail("GPU %u is in use by process %d: stop its processes, then reset it", gpu,
                 (int)busy);
    else if (r < 0)
        r = fail("cannot reset GPU %u: %s", gpu, strerror(-r));
    else
        printf("GPU %u: reset; MIG mode %s\n", gpu,
               emu_state_gpu(st, gpu)->mig_mode ? "enabled" : "disabled");
    return r;
}

static int cmd_reset(const char *statep, int argc, char **argv)
{
    if (argc != 1)
        return usage_error("usage: accel-emu reset GPU");
    return on_gpu(statep, argv[0], reset_on, NULL);
}

/* `mig GPU create P,...`: each a GPU instance and the compute instance that fills it, as
 * `nvidia-smi mig -cgi P,... -C`; all of them or none. */
static int mig_create(struct emu_state *st, unsigned gpu, const char *list)
{
    const struct emu_gpu *g = emu_state_gpu(st, gpu);
    const struct emu_mig_board *b = emu_state_mig_board(g);
    unsigned prof[EMU_MIG_MAX_GI], slot[EMU_MIG_MAX_GI], ci[EMU_MIG_MAX_GI];
    size_t n = 0, failed = 0;
    char err[512];
    if (!b)
        return usage_error("GPU %u (%s) does not support MIG", gpu, g->name);
    if (emu_args_mig_profiles(list, b, prof, EMU_MIG_MAX_GI, &n, err, sizeof(err)) < 0)
        return usage_error("%s", err);
    if (!g->mig_mode)
        return fail("GPU %u: MIG mode is not enabled (pending %s): run `accel-emu set %u mig=on`",
                    gpu, g->mig_mode_pending ? "enable" : "disable", gpu);
    int r = emu_state_mig_create_default(st, gpu, prof, n, slot, ci, &failed);
    const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, prof[r < 0 ? failed : 0]);
    if (r == -ENOSPC)
        return fail("GPU %u: no room for MIG %s (entry %zu of the list): insufficient "
                    "resources, nothing created; see `accel-emu mig %u list`",
                    gpu, p ? p->name : "?", failed + 1, gpu);
    if (r < 0)
        return fail("GPU %u: cannot create MIG %s: %s", gpu, p ? p->name : "?", strerror(-r));
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    emu_state_mig_snapshot(st, gpu, tab);
    for (size_t k = 0; k < n; k++) {
        const struct emu_mig_gi *gi = &tab[slot[k]];
        p = emu_mig_gi_by_index(b, gi->profile);
        if (!p)
            continue;
        printf(
            "Successfully created GPU instance ID %2u on GPU %2u using profile MIG %s (ID %2u)\n",
            gi->id, gpu, p->name, p->id);
        printf("Successfully created compute instance ID %2u on GPU %2u GPU instance ID %2u using "
               "profile MIG %s (ID %2u)\n",
               gi->ci[ci[k]].id, gpu, gi->id, p->name, gi->ci[ci[k]].profile);
        printf("  MIG device %s\n", gi->ci[ci[k]].uuid);
    }
    return 0;
}

static int mig_list(struct emu_state *st, unsigned gpu, bool json)
{
    const struct emu_gpu *g = emu_state_gpu(st, gpu);
    const struct emu_mig_board *b = emu_state_mig_board(g);
    struct gpu_status *s = malloc(sizeof(*s));
    if (!s)
        return fail("out of memory");
    gather(st, gpu, s);
    if (json) {
        printf("{\"gpu\":%u,\"mig_capable\":%s,\"mig_mode\":%u,\"mig_mode_pending\":%u,"
               "\"instances\":",
               gpu, b ? "true" : "false", g->mig_mode, g->mig_mode_pending);
        json_mig(st, gpu, s);
        printf("}\n");
        free(s);
        return 0;
    }
    printf("GPU %u (%s): MIG mode %s, pending %s\n", gpu, g->name,
           g->mig_mode ? "enabled" : "disabled", g->mig_mode_pending ? "enabled" : "disabled");
    struct emu_mig_gi tab[EMU_MIG_MAX_GI];
    emu_state_mig_snapshot(st, gpu, tab);
    printf("  %-3s %-14s %-4s %-9s %-3s %-40s %s\n", "GI", "PROFILE", "ID", "PLACEMENT", "CI",
           "MIG DEVICE", "MEMORY USED/TOTAL, PROCESSES");
    for (unsigned gid = 0; gid < 16; gid++)
        for (unsigned k = 0; b && k < EMU_MIG_MAX_GI; k++) {
            const struct emu_mig_gi *gi = &tab[k];
            const struct emu_mig_gi_profile *p = emu_mig_gi_by_index(b, gi->profile);
            if (!gi->used || gi->id != gid || !p)
                continue;
            char used[32], total[32], place[16];
            format_bytes(emu_state_mig_gi_used(st, gpu, k), used, sizeof(used));
            format_bytes(emu_mig_gi_bytes(b, p, g->memory_total), total, sizeof(total));
            snprintf(place, sizeof(place), "%u:%u", gi->start, gi->size);
            printf("  %-3u MIG %-10s %-4u %-9s", gi->id, p->name, p->id, place);
            bool any = false;
            for (unsigned c = 0; c < EMU_MIG_MAX_CI; c++) {
                if (!gi->ci[c].used)
                    continue;
                printf("%s %-3u %-40s %s/%s", any ? "\n                                 " : "",
                       gi->ci[c].id, gi->ci[c].uuid, used, total);
                for (size_t q = 0; q < s->nprocs; q++)
                    if (s->procs[q].mig_serial == gi->ci[c].serial)
                        printf(", pid %d", (int)s->procs[q].pid);
                any = true;
            }
            printf("%s\n", any ? "" : " (no compute instance)");
        }
    free(s);
    return 0;
}

struct mig_cmd {
    const char *verb, *list;
    bool json;
};

static int mig_on(struct emu_state *st, unsigned gpu, const void *arg)
{
    const struct mig_cmd *m = arg;
    if (strcmp(m->verb, "create") == 0)
        return mig_create(st, gpu, m->list);
    if (strcmp(m->verb, "list") == 0)
        return mig_list(st, gpu, m->json);
    int32_t busy;
    int r = emu_state_mig_destroy_all(st, gpu, &busy);
    if (r == -EBUSY)
        return fail("GPU %u: a MIG instance is in use by process %d: nothing destroyed", gpu,
                    (int)busy);
    if (r < 0)
        return fail("cannot destroy GPU %u's MIG instances: %s", gpu, strerror(-r));
    printf("GPU %u: every MIG instance destroyed\n", gpu);
    return 0;
}

static int cmd_mig(const char *statep, int argc, char **argv)
{
    if (argc < 2)
        return usage_error("usage: accel-emu mig GPU create PROFILE[,PROFILE...] | destroy | "
                           "list [--json]");
    const char *verb = argv[1];
    bool json = false;
    if (strcmp(verb, "create") == 0) {
        if (argc != 3)
            return usage_error("usage: accel-emu mig GPU create PROFILE[,PROFILE...] (e.g. "
                               "1g.10gb,3g.40gb, or profile IDs 19,9)");
    } else if (strcmp(verb, "list") == 0) {
        if (argc > 3 || (argc == 3 && strcmp(argv[2], "--json") != 0))
            return usage_error("usage: accel-emu mig GPU list [--json]");
        json = argc == 3;
    } else if (strcmp(verb, "destroy") == 0) {
        if (argc != 2)
            return usage_error("usage: accel-emu mig GPU destroy (every instance of the GPU)");
    } else {
        return usage_error("unknown mig command '%s': want create, destroy or list", verb);
    }
    struct mig_cmd m = {verb, argc == 3 ? argv[2] : NULL, json};
    return on_gpu(statep, argv[0], mig_on, &m);
}

struct vfio_cmd {
    const char *statep;
    unsigned fn; /* 0: the GPU itself (bind/unbind), else a function of its group */
    bool on;
};

static int vfio_on(struct emu_state *st, unsigned gpu, const void *arg)
{
    const struct vfio_cmd *v = arg;
    unsigned fn = v->fn;
    bool on = v->on;
    const struct emu_gpu *g = emu_state_gpu(st, gpu);
    int32_t busy = 0;
    int r =
        fn ? emu_state_set_pci_function(st, gpu, fn, on) : emu_state_set_vfio(st, gpu, on, &busy);
    char base[PATH_MAX + 8], err[512], bdf[32];
    fixture_base(v->statep, base, sizeof(base));
    emu_fixtures_bdf(g, fn, bdf, sizeof(bdf));
    if (r == -EBUSY)
        r = fail("GPU %u is in use by process %d: stop its processes before binding it to "
                 "vfio-pci",
                 gpu, (int)busy);
    else if (r == -ENOTEMPTY)
        r = fail("GPU %u has MIG instances: `accel-emu mig %u destroy` first", gpu, gpu);
    else if (r < 0)
        r = fail("cannot change GPU %u: %s", gpu, strerror(-r));
    else if (emu_fixtures_sync(st, base, err, sizeof(err)) < 0)
        r = fail("%s", err);
    else if (fn)
        printf("GPU %u: %s %s IOMMU group %u (%s)\n", gpu, on ? "added" : "removed",
               fn == EMU_PCI_FN_AUDIO ? "its audio function to" : "a PCIe bridge to",
               g->iommu_group, bdf);
    else
        printf("GPU %u (%s): %s, IOMMU group %u%s\n", gpu, bdf,
               on ? "bound to vfio-pci" : "bound to nvidia", g->iommu_group,
               on ? "" : " (NVML and CUDA see it again)");
    return r;
}

static int cmd_vfio(const char *statep, int argc, char **argv)
{
    bool on = false;
    unsigned fn = 0;
    if (argc == 2 && (strcmp(argv[1], "bind") == 0 || strcmp(argv[1], "unbind") == 0)) {
        on = strcmp(argv[1], "bind") == 0;
    } else if (argc == 3 && (strcmp(argv[1], "audio") == 0 || strcmp(argv[1], "bridge") == 0) &&
               (strcmp(argv[2], "on") == 0 || strcmp(argv[2], "off") == 0)) {
        fn = strcmp(argv[1], "audio") == 0 ? EMU_PCI_FN_AUDIO : EMU_PCI_FN_BRIDGE;
        on = strcmp(argv[2], "on") == 0;
    } else {
        return usage_error("usage: accel-emu vfio GPU bind|unbind, or accel-emu vfio GPU "
                           "audio|bridge on|off");
    }
    struct vfio_cmd v = {statep, fn, on};
    return on_gpu(statep, argv[0], vfio_on, &v);
}

static int cmd_models(int argc, char **argv)
{
    if (argc != 0)
        return usage_error("models: unexpected argument '%s'", argv[0]);
    size_t n;
    const struct emu_model *m = emu_model_table(&n);
    printf("%-8s %-26s %12s %5s %8s %4s %7s\n", "ALIAS", "NAME", "MEMORY", "SMS", "SM MHZ", "CC",
           "NVLINKS");
    for (size_t i = 0; i < n; i++) {
        char mem[32];
        printf("%-8s %-26s %12s %5u %8u %u.%u %7u\n", m[i].alias, m[i].name,
               format_bytes(m[i].memory_bytes, mem, sizeof(mem)), m[i].sm_count, m[i].sm_clock_mhz,
               m[i].cc_major, m[i].cc_minor, m[i].nvlinks);
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* pull out --state FILE / --state=FILE wherever it stands */
    const char *state_opt = NULL;
    int n = 0;
    char **args = calloc((size_t)argc + 1, sizeof(char *));
    if (!args)
        return fail("out of memory");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--state") == 0) {
            if (i + 1 >= argc) {
                free(args);
                return usage_error("--state needs a file");
            }
            state_opt = argv[++i];
        } else if (strncmp(argv[i], "--state=", 8) == 0) {
            state_opt = argv[i] + 8;
        } else {
            args[n++] = argv[i];
        }
    }
    int r;
    const char *statep = state_path(state_opt);
    if (state_opt && !*state_opt) {
        r = usage_error("--state needs a file");
    } else if (n == 0) {
        help(stderr);
        r = EXIT_USAGE;
    } else if (strcmp(args[0], "--help") == 0 || strcmp(args[0], "-h") == 0 ||
               strcmp(args[0], "help") == 0) {
        help(stdout);
        r = 0;
    } else if (strcmp(args[0], "--version") == 0) {
        printf("accel-emu %s\n", ACCEL_VERSION);
        r = 0;
    } else if (strcmp(args[0], "init") == 0) {
        r = cmd_init(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "status") == 0) {
        r = cmd_status(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "xid") == 0) {
        r = cmd_xid(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "ecc") == 0) {
        r = cmd_ecc(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "set") == 0) {
        r = cmd_set(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "lose") == 0) {
        r = cmd_lose(statep, n - 1, args + 1, true);
    } else if (strcmp(args[0], "restore") == 0) {
        r = cmd_lose(statep, n - 1, args + 1, false);
    } else if (strcmp(args[0], "reset") == 0) {
        r = cmd_reset(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "mig") == 0) {
        r = cmd_mig(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "vfio") == 0) {
        r = cmd_vfio(statep, n - 1, args + 1);
    } else if (strcmp(args[0], "models") == 0) {
        r = cmd_models(n - 1, args + 1);
    } else {
        r = usage_error("unknown command '%s'", args[0]);
    }
    free(args);
    return r;
}
