/* acceld-config.c — acceld's settings: defaults, per-key validation, the YAML file
 * walker (libyaml events, so every error can name its line). See acceld-config.h. */
#include "acceld-config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "fs.h"
#include "util.h"

/* Every key of acceld's config file, in the order --help and --print-config list them: a
 * section's keys ("vgpu.", "dra." …) stand together (--print-config writes a section's header
 * where its first key is; interop-acceld-hardening reads its output back). */
const struct acceld_config_key acceld_config_keys[] = {
    {"devicePluginDir", "device-plugin-dir", "kubelet device plugin directory"},
    {"resourceName", "resource-name", "extended resource name advertised to the kubelet"},
    {"nvmlLibrary", "nvml-library", "NVML library path (default $ACCEL_NVML_LIBRARY or soname)"},
    {"sysfsRoot", "sysfs-root", "sysfs mount point used for PCI/NUMA topology"},
    {"devRoot", "dev-root", "where the /dev/nvidia* nodes are looked up"},
    {"stateDir", "state-dir", "agent state directory"},
    {"logLevel", "log-level", "error|warn|info|debug"},
    {"noRegister", "no-register", "serve the socket but never register with the kubelet"},
    {"deviceListStrategy", "device-list-strategy", "envvar|cdi"},
    {"cdi.dir", "cdi-dir", "where CDI specs are written"},
    {"cdi.vendor", "cdi-vendor", "CDI vendor (kind = VENDOR/CLASS)"},
    {"cdi.class", "cdi-class", "CDI device class"},
    {"health.ignoredXids", "ignored-xids", "comma-separated XIDs that never mark a GPU unhealthy"},
    {"health.recoverAfter", "recover-after",
     "quiet period before an unhealthy GPU recovers (0 = never)"},
    {"server.handshakeTimeout", "handshake-timeout",
     "a connection that has not finished its HTTP/2 preface by then is closed"},
    {"server.idleTimeout", "idle-timeout", "a connection with no call open this long is closed"},
    {"mode", "mode", "pgpu|vgpu|dra|vfio: how this node's GPUs are served (default pgpu)"},
    {"gpuModes", "gpu-modes",
     "per-GPU modes overriding mode: SEL=MODE,... with SEL a GPU index, UUID or PCI address"},
    {"nodeName", "node-name", "this node's name for the API server (default $NODE_NAME)"},
    {"kubeconfig", "kubeconfig", "kubeconfig file for the API server (default: in-cluster)"},
    {"vcudaLibrary", "vcuda-library", "host path of the libvcuda.so that vGPU containers get"},
    {"procRoot", "proc-root", "where /proc is (the host's, for the vGPU host-side check)"},
    {"podResourcesSocket", "pod-resources-socket",
     "the kubelet's pod-resources socket (vGPU restart safety)"},
    {"vgpu.coreResource", "vgpu-core-resource", "vGPU compute resource (100 = one GPU)"},
    {"vgpu.memoryResource", "vgpu-memory-resource", "vGPU memory resource"},
    {"vgpu.memoryUnit", "vgpu-memory-unit", "bytes per vGPU memory unit (e.g. 256Mi)"},
    {"vgpu.policy", "vgpu-policy", "binpack|spread: how containers are placed on GPUs"},
    {"vgpu.overQuotaAction", "vgpu-over-quota-action",
     "none|kill: what the host-side check does to a process over its container's memory quota"},
    {"vgpu.checkInterval", "vgpu-check-interval",
     "how often the host-side check reads NVML's per-process memory (0 = never)"},
    {"vgpu.computeAction", "vgpu-compute-action",
     "none|freeze: what the host-side check does to a container above its vcuda-core share"},
    {"vgpu.freezePeriod", "vgpu-freeze-period",
     "the period of the freeze duty cycle (vgpu.computeAction freeze)"},
    {"vgpu.cgroupRoot", "vgpu-cgroup-root", "where the host's cgroup v2 tree is mounted"},
    {"vgpu.reconcileInterval", "vgpu-reconcile-interval",
     "how often vGPU's books are settled with the kubelet's pod-resources List while they hold "
     "shares (0 = only at start and when a pod ends)"},
    {"dra.registryDir", "plugin-registry-dir",
     "DRA mode: the kubelet's plugin registration directory"},
    {"dra.pluginDir", "dra-plugin-dir",
     "DRA mode: where the DRA socket goes (default /var/lib/kubelet/plugins/gpu.accel.dev)"},
    {"dra.sharing", "dra-sharing",
     "DRA mode: exclusive|shared|mps (shared, mps: consumable capacity, enforced by libvcuda "
     "or a per-claim MPS daemon)"},
    {"dra.gpuSharing", "dra-gpu-sharing",
     "DRA mode: per-GPU exceptions to dra.sharing: SEL=exclusive|shared|mps,... (SEL: index or "
     "UUID)"},
    {"dra.taintEffect", "dra-taint-effect",
     "DRA mode: NoSchedule|NoExecute|None: the taint of an unhealthy GPU's device"},
    {"dra.fatalTaintEffect", "dra-fatal-taint-effect",
     "DRA mode: NoSchedule|NoExecute|None: the taint after a fatal XID (79, 48) or a lost GPU"},
    {"dra.claimWait", "dra-claim-wait",
     "DRA mode: how long a prepare waits for its ResourceClaim on the API server"},
    {"dra.mig", "dra-mig",
     "DRA mode: publish the GPUs in MIG mode as MIG partitions (partitionable devices, KEP-4815)"},
    {"dra.overQuotaAction", "dra-over-quota-action",
     "DRA mode: none|kill: what the host-side check does to a process of a shared claim's pod "
     "over the claim's memory, or on a GPU the claim does not hold"},
    {"dra.checkInterval", "dra-check-interval",
     "DRA mode: how often the host-side check of shared claims runs (0 = never)"},
    {"mpsProbeInterval", "mps-probe-interval",
     "how often each MPS control daemon is asked for its defaults (a dead one is seen at once)"},
    {"mpsControl", "mps-control",
     "the nvidia-cuda-mps-control binary for MPS sharing (default: found on PATH)"},
    {"allocateWait", "allocate-wait",
     "how long an Allocate waits for its pod to reach the watch cache (vGPU; 0 = not at all)"},
    {"migStrategy", "mig-strategy",
     "none|single|mixed: how MIG devices are served (NVIDIA's strategies, docs/mig.md)"},
    {"vfio.bind", "vfio-bind",
     "all|PCI address,...: bind these vfio-mode GPUs to vfio-pci at start (disruptive; default "
     "none)"},
    {"vfio.resourceNames", "vfio-resource-names",
     "DEVICEID=NAME,...: the resource of a GPU model in vfio mode (default nvidia.com/<PCI name>)"},
    {NULL, NULL, NULL},
};

static int fail(char *err, size_t errlen, int r, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static const int default_ignored_xids[] = {13, 31, 43, 45, 68, 109};

static void copy_str(char *dst, size_t len, const char *src)
{
    snprintf(dst, len, "%s", src);
}

void acceld_config_defaults(struct acceld_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    copy_str(cfg->plugin_dir, sizeof(cfg->plugin_dir), "/var/lib/kubelet/device-plugins");
    copy_str(cfg->resource_name, sizeof(cfg->resource_name), "nvidia.com/gpu");
    copy_str(cfg->sysfs_root, sizeof(cfg->sysfs_root), "/sys");
    copy_str(cfg->dev_root, sizeof(cfg->dev_root), "/dev");
    copy_str(cfg->state_dir, sizeof(cfg->state_dir), "/var/lib/accel");
    cfg->log_level = LOG_LEVEL_INFO;
    copy_str(cfg->vcuda_library, sizeof(cfg->vcuda_library), "/usr/lib/accel/libvcuda.so");
    copy_str(cfg->proc_root, sizeof(cfg->proc_root), "/proc");
    copy_str(cfg->pod_resources_socket, sizeof(cfg->pod_resources_socket),
             "/var/lib/kubelet/pod-resources/kubelet.sock");
    copy_str(cfg->vgpu_core_resource, sizeof(cfg->vgpu_core_resource), "tencent.com/vcuda-core");
    copy_str(cfg->vgpu_memory_resource, sizeof(cfg->vgpu_memory_resource),
             "tencent.com/vcuda-memory");
    cfg->vgpu_memory_unit = 256ull << 20;
    cfg->vgpu_check_interval_ns = 10ull * 1000000000ull;
    /* a quota the check only reports is no quota: a multi-tenant node kills (docs/vcuda.md,
     * "Threat model: acceld") */
    cfg->vgpu_over_quota_kill = true;
    cfg->vgpu_freeze_period_ns = 1000000000ull;
    cfg->allocate_wait_ns = 5000000000ull;
    cfg->vgpu_reconcile_interval_ns = 10ull * 1000000000ull;
    cfg->mps_probe_interval_ns = 60ull * 1000000000ull;
    copy_str(cfg->vgpu_cgroup_root, sizeof(cfg->vgpu_cgroup_root), "/sys/fs/cgroup");
    cfg->strategy = ACCELD_STRATEGY_ENVVAR;
    copy_str(cfg->cdi_dir, sizeof(cfg->cdi_dir), "/var/run/cdi");
    copy_str(cfg->cdi_vendor, sizeof(cfg->cdi_vendor), "nvidia.com");
    copy_str(cfg->cdi_class, sizeof(cfg->cdi_class), "gpu");
    memcpy(cfg->ignored_xids, default_ignored_xids, sizeof(default_ignored_xids));
    cfg->n_ignored_xids = ARRAY_SIZE(default_ignored_xids);
    cfg->handshake_timeout_ns = ACCELD_HANDSHAKE_TIMEOUT_DEFAULT_NS;
    cfg->idle_timeout_ns = ACCELD_IDLE_TIMEOUT_DEFAULT_NS;
    copy_str(cfg->dra_registry_dir, sizeof(cfg->dra_registry_dir),
             "/var/lib/kubelet/plugins_registry");
    cfg->dra_claim_wait_ns = 10ull * 1000000000ull;
    cfg->dra_check_interval_ns = 10ull * 1000000000ull;
    cfg->dra_over_quota_kill = true;
    cfg->dra_taint_effect = ACCELD_TAINT_NO_SCHEDULE;
    cfg->dra_fatal_taint_effect = ACCELD_TAINT_NO_EXECUTE;
}

/* A duration key. "0.0000001ms" parses to 0 ns, which would silently mean
 * "never" (or be refused as zero): a value that rounds to 0 is refused unless
 * it is written as zero. */
static int set_duration(uint64_t *dst, const char *key, const char *v, bool zero_ok, char *err,
                        size_t errlen)
{
    uint64_t ns;
    if (parse_duration_ns(v, &ns) < 0)
        return fail(err, errlen, -EINVAL, "%s: \"%s\" is not a duration (e.g. %s30s, 5m, 1h)", key,
                    v, zero_ok ? "0, " : "");
    if (ns == 0 && strpbrk(v, "123456789"))
        return fail(err, errlen, -EINVAL,
                    "%s: \"%s\" is below 1ns and would round to 0%s; write at least 1ns%s", key, v,
                    zero_ok ? " (= never)" : "", zero_ok ? ", or 0 for never" : "");
    if (ns == 0 && !zero_ok)
        return fail(err, errlen, -EINVAL, "%s: must be more than 0 (e.g. 10s)", key);
    *dst = ns;
    return 0;
}

/* The largest unit that loses nothing, so the text parses back exactly. */
static void format_duration(uint64_t ns, char *buf, size_t len)
{
    static const struct {
        uint64_t ns;
        const char *unit;
    } units[] = {{1000000000ull, "s"}, {1000000ull, "ms"}, {1000ull, "us"}, {1ull, "ns"}};
    size_t u = 0;
    while (u + 1 < ARRAY_SIZE(units) && ns % units[u].ns != 0)
        u++;
    snprintf(buf, len, "%llu%s", (unsigned long long)(ns / units[u].ns), units[u].unit);
}

static int fail(char *err, size_t errlen, int r, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return r;
}

static int set_abs_path(char *dst, size_t len, const char *key, const char *v, char *err,
                        size_t errlen)
{
    if (v[0] != '/')
        return fail(err, errlen, -EINVAL, "%s: \"%s\" is not an absolute path", key, v);
    if (strlen(v) >= len)
        return fail(err, errlen, -EINVAL, "%s: path longer than %zu bytes", key, len - 1);
    copy_str(dst, len, v);
    return 0;
}

/* Kubernetes extended resource names: "domain/name", both parts DNS-ish,
 * the whole ≤ 63 characters so it can also serve as a device-plugin socket name. */
static bool valid_resource_name(const char *v)
{
    const char *slash = strchr(v, '/');
    size_t n = strlen(v);
    if (!slash || slash == v || slash[1] == '\0' || strchr(slash + 1, '/') || n > 63)
        return false;
    for (const char *p = v; *p; p++) {
        if (p == slash)
            continue;
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
            return false;
    }
    return isalnum((unsigned char)v[0]) && isalnum((unsigned char)v[n - 1]);
}

/* CDI vendor ("nvidia.com") and class ("gpu") names. */
static bool valid_cdi_name(const char *v, bool vendor)
{
    if (!isalnum((unsigned char)v[0]))
        return false;
    for (const char *p = v; *p; p++) {
        if (isalnum((unsigned char)*p) || *p == '-' || *p == '.' || (!vendor && *p == '_'))
            continue;
        return false;
    }
    return isalnum((unsigned char)v[strlen(v) - 1]);
}

static int parse_bool(const char *v, bool *ret)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *ret = true;
            return 0;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *ret = false;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_xid_list(const char *v, int *xids, size_t *ret_n, char *err, size_t errlen)
{
    size_t n = 0;
    const char *p = v;
    while (*p == ' ')
        p++;
    if (*p == '\0') {
        *ret_n = 0;
        return 0;
    }
    for (;;) {
        char item[24];
        size_t k = strcspn(p, ",");
        while (k > 0 && p[k - 1] == ' ')
            k--;
        if (k == 0 || k >= sizeof(item))
            return fail(err, errlen, -EINVAL, "health.ignoredXids: bad XID list \"%s\"", v);
        memcpy(item, p, k);
        item[k] = '\0';
        int x;
        if (parse_int(item, &x) < 0 || x < 0 || x > 65535)
            return fail(err, errlen, -EINVAL, "health.ignoredXids: \"%s\" is not an XID (0-65535)",
                        item);
        if (n >= ACCELD_MAX_XIDS)
            return fail(err, errlen, -EINVAL, "health.ignoredXids: more than %d XIDs",
                        ACCELD_MAX_XIDS);
        xids[n++] = x;
        p += strcspn(p, ",");
        if (*p == '\0')
            break;
        p++;
        while (*p == ' ')
            p++;
    }
    *ret_n = n;
    return 0;
}

static const char *const mode_names[] = {"pgpu", "vgpu", "dra", "vfio"};
static const char *const mig_strategy_names[] = {"none", "single", "mixed"};

const char *acceld_mig_strategy_name(enum acceld_mig_strategy s)
{
    return (size_t)s < ARRAY_SIZE(mig_strategy_names) ? mig_strategy_names[s] : "?";
}

const char *acceld_mode_name(enum acceld_mode m)
{
    return (size_t)m < ARRAY_SIZE(mode_names) ? mode_names[m] : "?";
}

static int mode_parse(const char *v, size_t len, enum acceld_mode *ret)
{
    for (size_t i = 0; i < ARRAY_SIZE(mode_names); i++) {
        if (strlen(mode_names[i]) == len && strncmp(v, mode_names[i], len) == 0) {
            *ret = (enum acceld_mode)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* Calls fn for each item of a comma-separated list (fn returns non-zero to
 * stop); returns what fn returned last, or 0. */
static int list_walk(const char *v, int (*fn)(const char *item, size_t len, void *u), void *u)
{
    for (const char *p = v; *p;) {
        size_t len = strcspn(p, ",");
        int r = fn(p, len, u);
        if (r)
            return r;
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

struct modes_walk {
    char *err;
    size_t errlen;
    int (*fn)(const char *sel, size_t sel_len, enum acceld_mode m, void *u);
    void *u;
};

static int modes_item(const char *p, size_t len, void *u)
{
    struct modes_walk *w = u;
    const char *eq = memchr(p, '=', len);
    enum acceld_mode m;
    if (!eq || eq == p || mode_parse(eq + 1, len - (size_t)(eq + 1 - p), &m) < 0)
        return fail(w->err, w->errlen, -EINVAL,
                    "gpuModes: \"%.*s\" is not SEL=MODE (SEL a GPU index, UUID or PCI "
                    "address, MODE pgpu|vgpu|dra|vfio)",
                    (int)len, p);
    return w->fn(p, (size_t)(eq - p), m, w->u);
}

/* Walks "SEL=MODE,..."; calls fn for each entry (fn returns non-zero to
 * stop). Returns -EINVAL (message in err) on the first malformed entry. */
static int gpu_modes_walk(const char *v, char *err, size_t errlen,
                          int (*fn)(const char *sel, size_t sel_len, enum acceld_mode m, void *u),
                          void *u)
{
    struct modes_walk w = {err, errlen, fn, u};
    return list_walk(v, modes_item, &w);
}

static int gpu_modes_not_dra(const char *sel, size_t sel_len, enum acceld_mode m, void *u)
{
    (void)sel;
    (void)sel_len;
    (void)u;
    return m != ACCELD_MODE_DRA ? 1 : 0; /* 1: stop, found one */
}

static int gpu_modes_any(const char *sel, size_t sel_len, enum acceld_mode m, void *u)
{
    (void)sel, (void)sel_len, (void)m, (void)u;
    return 0;
}

bool acceld_config_dra_only(const struct acceld_config *cfg)
{
    char err[8];
    return cfg->mode == ACCELD_MODE_DRA &&
           gpu_modes_walk(cfg->gpu_modes, err, sizeof(err), gpu_modes_not_dra, NULL) == 0;
}

struct gpu_mode_find {
    char index[16];
    const char *uuid;
    const char *bdf;
    enum acceld_mode mode;
    bool found;
};

static int gpu_modes_match(const char *sel, size_t sel_len, enum acceld_mode m, void *u)
{
    struct gpu_mode_find *f = u;
    if ((strlen(f->index) == sel_len && strncmp(sel, f->index, sel_len) == 0) ||
        (f->uuid && strlen(f->uuid) == sel_len && strncmp(sel, f->uuid, sel_len) == 0) ||
        (f->bdf && strlen(f->bdf) == sel_len && strncasecmp(sel, f->bdf, sel_len) == 0)) {
        f->mode = m;
        f->found = true;
        return 1;
    }
    return 0;
}

enum acceld_mode acceld_config_gpu_mode(const struct acceld_config *cfg, int index,
                                        const char *uuid)
{
    return acceld_config_gpu_mode_at(cfg, index, uuid, NULL);
}

enum acceld_mode acceld_config_gpu_mode_at(const struct acceld_config *cfg, int index,
                                           const char *uuid, const char *bdf)
{
    struct gpu_mode_find f = {.uuid = uuid, .bdf = bdf && bdf[0] ? bdf : NULL};
    snprintf(f.index, sizeof(f.index), "%d", index);
    char err[8];
    gpu_modes_walk(cfg->gpu_modes, err, sizeof(err), gpu_modes_match, &f);
    return f.found ? f.mode : cfg->mode;
}

enum acceld_mode acceld_config_pci_mode(const struct acceld_config *cfg, const char *bdf)
{
    struct gpu_mode_find f = {.index = "", .bdf = bdf};
    char err[8];
    gpu_modes_walk(cfg->gpu_modes, err, sizeof(err), gpu_modes_match, &f);
    return f.found ? f.mode : cfg->mode;
}

static int bind_match(const char *item, size_t len, void *u)
{
    const char *bdf = u;
    return (len == 3 && strncmp(item, "all", 3) == 0) ||
           (strlen(bdf) == len && strncasecmp(item, bdf, len) == 0);
}

bool acceld_config_vfio_bind(const struct acceld_config *cfg, const char *bdf)
{
    return list_walk(cfg->vfio_bind, bind_match, (void *)bdf) != 0;
}

/* vfio.bind: "all" or PCI addresses as sysfs writes them (DDDD:BB:DD.F). */
static int bind_check(const char *item, size_t len, void *u)
{
    (void)u;
    if (len == 3 && strncmp(item, "all", 3) == 0)
        return 0;
    static const char shape[] = "xxxx:xx:xx.x";
    if (len != sizeof(shape) - 1)
        return -1;
    for (size_t i = 0; i < len; i++)
        if (shape[i] == 'x' ? !isxdigit((unsigned char)item[i]) : item[i] != shape[i])
            return -1;
    return 0;
}

struct vfio_name_find {
    unsigned device;
    char *buf;
    size_t len;
    bool bad; /* checking: a malformed entry */
};

/* "2330=GH100_H100_SXM5_80GB" or "2330=example.com/h100": a 4-digit hex PCI
 * device id and a resource name (nvidia.com/ is put in front of a bare one). */
static int vfio_name_item(const char *item, size_t len, void *u)
{
    struct vfio_name_find *f = u;
    char name[ACCELD_NAME_MAX];
    const char *eq = memchr(item, '=', len);
    size_t nlen = eq ? len - (size_t)(eq + 1 - item) : 0;
    unsigned id = 0;
    bool ok = eq && eq - item == 4 && nlen > 0 && nlen < 64;
    for (const char *p = item; ok && p < eq; p++) {
        ok = isxdigit((unsigned char)*p);
        id = id * 16 + (unsigned)(isdigit((unsigned char)*p)
                                      ? *p - '0'
                                      : tolower((unsigned char)*p) - 'a' + 10);
    }
    if (ok) {
        memchr(eq + 1, '/', nlen)
            ? snprintf(name, sizeof(name), "%.*s", (int)nlen, eq + 1)
            : snprintf(name, sizeof(name), "nvidia.com/%.*s", (int)nlen, eq + 1);
        ok = valid_resource_name(name);
    }
    if (!ok) {
        f->bad = true;
        if (f->buf)
            snprintf(f->buf, f->len, "%.*s", (int)len, item);
        return 1;
    }
    if (f->buf && id == f->device) {
        snprintf(f->buf, f->len, "%s", name);
        return 1;
    }
    return 0;
}

int acceld_config_vfio_name(const struct acceld_config *cfg, unsigned device_id, char *buf,
                            size_t len)
{
    struct vfio_name_find f = {device_id, buf, len, false};
    return list_walk(cfg->vfio_resource_names, vfio_name_item, &f) && !f.bad ? 1 : 0;
}

/* Looks the GPU (index and/or uuid, either may be NULL) up in dra.gpuSharing's
 * "SEL=exclusive|shared|mps,...": its enum acceld_dra_sharing, 3 not named,
 * -EINVAL (message in err) on a malformed entry before it. */
static int dra_gpu_sharing_find(const char *v, const char *index, const char *uuid, char *err,
                                size_t errlen)
{
    for (const char *p = v; *p;) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        size_t sl = eq ? (size_t)(eq - p) : 0, vl = eq ? len - sl - 1 : 0;
        int sharing = -1;
        if (eq && sl && vl == 6 && strncmp(eq + 1, "shared", 6) == 0)
            sharing = ACCELD_DRA_SHARED;
        else if (eq && sl && vl == 9 && strncmp(eq + 1, "exclusive", 9) == 0)
            sharing = ACCELD_DRA_EXCLUSIVE;
        else if (eq && sl && vl == 3 && strncmp(eq + 1, "mps", 3) == 0)
            sharing = ACCELD_DRA_MPS;
        if (sharing < 0)
            return fail(err, errlen, -EINVAL,
                        "dra.gpuSharing: \"%.*s\" is not SEL=exclusive|shared|mps (SEL a GPU "
                        "index or UUID)",
                        (int)len, p);
        if ((index && strlen(index) == sl && strncmp(p, index, sl) == 0) ||
            (uuid && strlen(uuid) == sl && strncmp(p, uuid, sl) == 0))
            return sharing;
        p += len + (p[len] == ',');
    }
    return 3;
}

enum acceld_dra_sharing acceld_config_dra_sharing(const struct acceld_config *cfg, int index,
                                                  const char *uuid)
{
    char idx[16], err[8];
    snprintf(idx, sizeof(idx), "%d", index);
    int r = dra_gpu_sharing_find(cfg->dra_gpu_sharing, idx, uuid, err, sizeof(err));
    return r >= 0 && r <= 2 ? (enum acceld_dra_sharing)r : cfg->dra_sharing;
}

bool acceld_config_dra_shared(const struct acceld_config *cfg, int index, const char *uuid)
{
    return acceld_config_dra_sharing(cfg, index, uuid) == ACCELD_DRA_SHARED;
}

static const char *const dra_sharing_names[] = {"exclusive", "shared", "mps"};
static const char *const taint_effect_names[] = {"None", "NoSchedule", "NoExecute"};

const char *acceld_taint_effect_name(enum acceld_taint_effect e)
{
    return (unsigned)e < ARRAY_SIZE(taint_effect_names) ? taint_effect_names[e] : "None";
}

static int set_taint_effect(enum acceld_taint_effect *dst, const char *key, const char *v,
                            char *err, size_t errlen)
{
    for (size_t i = 0; i < ARRAY_SIZE(taint_effect_names); i++) {
        if (strcmp(v, taint_effect_names[i]) == 0) {
            *dst = (enum acceld_taint_effect)i;
            return 0;
        }
    }
    return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of NoSchedule|NoExecute|None", key, v);
}

int acceld_config_set(struct acceld_config *cfg, const char *key, const char *v, char *err,
                      size_t errlen)
{
    struct acceld_config c = *cfg;
    int r = 0;

    if (!v)
        v = "";
    /* "" is meaningful for these: no ignored XIDs, the default library, no
     * per-GPU modes */
    if (strcmp(key, "health.ignoredXids") != 0 && strcmp(key, "nvmlLibrary") != 0 &&
        strcmp(key, "gpuModes") != 0 && strcmp(key, "nodeName") != 0 &&
        strcmp(key, "kubeconfig") != 0 && strcmp(key, "dra.pluginDir") != 0 &&
        strcmp(key, "dra.gpuSharing") != 0 && strcmp(key, "mpsControl") != 0 &&
        strcmp(key, "vfio.bind") != 0 && strcmp(key, "vfio.resourceNames") != 0 && v[0] == '\0')
        return fail(err, errlen, -EINVAL, "%s: empty value", key);

    if (strcmp(key, "devicePluginDir") == 0)
        r = set_abs_path(c.plugin_dir, sizeof(c.plugin_dir), key, v, err, errlen);
    else if (strcmp(key, "sysfsRoot") == 0)
        r = set_abs_path(c.sysfs_root, sizeof(c.sysfs_root), key, v, err, errlen);
    else if (strcmp(key, "devRoot") == 0)
        r = set_abs_path(c.dev_root, sizeof(c.dev_root), key, v, err, errlen);
    else if (strcmp(key, "stateDir") == 0)
        r = set_abs_path(c.state_dir, sizeof(c.state_dir), key, v, err, errlen);
    else if (strcmp(key, "cdi.dir") == 0)
        r = set_abs_path(c.cdi_dir, sizeof(c.cdi_dir), key, v, err, errlen);
    else if (strcmp(key, "nvmlLibrary") == 0) {
        if (strlen(v) >= sizeof(c.nvml_library))
            return fail(err, errlen, -EINVAL, "%s: path too long", key);
        copy_str(c.nvml_library, sizeof(c.nvml_library), v);
    } else if (strcmp(key, "resourceName") == 0) {
        if (!valid_resource_name(v))
            return fail(err, errlen, -EINVAL,
                        "%s: \"%s\" is not a resource name like vendor.com/gpu (≤ 63 chars)", key,
                        v);
        copy_str(c.resource_name, sizeof(c.resource_name), v);
    } else if (strcmp(key, "logLevel") == 0) {
        if (log_level_parse(v, &c.log_level) < 0)
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of error|warn|info|debug", key,
                        v);
    } else if (strcmp(key, "noRegister") == 0) {
        if (parse_bool(v, &c.no_register) < 0)
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not a boolean (true|false)", key, v);
    } else if (strcmp(key, "deviceListStrategy") == 0) {
        if (strcmp(v, "envvar") == 0)
            c.strategy = ACCELD_STRATEGY_ENVVAR;
        else if (strcmp(v, "cdi") == 0)
            c.strategy = ACCELD_STRATEGY_CDI;
        else
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of envvar|cdi", key, v);
    } else if (strcmp(key, "cdi.vendor") == 0 || strcmp(key, "cdi.class") == 0) {
        bool vendor = key[4] == 'v';
        char *dst = vendor ? c.cdi_vendor : c.cdi_class;
        if (strlen(v) >= ACCELD_NAME_MAX || !valid_cdi_name(v, vendor))
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not a valid CDI %s name", key, v,
                        vendor ? "vendor" : "class");
        copy_str(dst, ACCELD_NAME_MAX, v);
    } else if (strcmp(key, "health.ignoredXids") == 0) {
        r = parse_xid_list(v, c.ignored_xids, &c.n_ignored_xids, err, errlen);
    } else if (strcmp(key, "health.recoverAfter") == 0) {
        r = set_duration(&c.recover_after_ns, key, v, true, err, errlen);
    } else if (strcmp(key, "server.handshakeTimeout") == 0) {
        r = set_duration(&c.handshake_timeout_ns, key, v, false, err, errlen);
    } else if (strcmp(key, "server.idleTimeout") == 0) {
        r = set_duration(&c.idle_timeout_ns, key, v, false, err, errlen);
    } else if (strcmp(key, "nodeName") == 0) {
        if (strlen(v) > 253 || strpbrk(v, "/ \t\n"))
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not a node name", key, v);
        copy_str(c.node_name, sizeof(c.node_name), v);
    } else if (strcmp(key, "kubeconfig") == 0) {
        if (v[0])
            r = set_abs_path(c.kubeconfig, sizeof(c.kubeconfig), key, v, err, errlen);
        else
            c.kubeconfig[0] = '\0';
    } else if (strcmp(key, "vcudaLibrary") == 0) {
        r = set_abs_path(c.vcuda_library, sizeof(c.vcuda_library), key, v, err, errlen);
    } else if (strcmp(key, "procRoot") == 0) {
        r = set_abs_path(c.proc_root, sizeof(c.proc_root), key, v, err, errlen);
    } else if (strcmp(key, "podResourcesSocket") == 0) {
        r = set_abs_path(c.pod_resources_socket, sizeof(c.pod_resources_socket), key, v, err,
                         errlen);
    } else if (strcmp(key, "vgpu.coreResource") == 0 || strcmp(key, "vgpu.memoryResource") == 0) {
        if (!valid_resource_name(v))
            return fail(err, errlen, -EINVAL,
                        "%s: \"%s\" is not a resource name like vendor.com/name (≤ 63 chars)", key,
                        v);
        copy_str(key[5] == 'c' ? c.vgpu_core_resource : c.vgpu_memory_resource, ACCELD_NAME_MAX, v);
    } else if (strcmp(key, "vgpu.memoryUnit") == 0) {
        uint64_t b;
        if (parse_size(v, &b) < 0 || b < (1u << 20) || b > (1ull << 40))
            return fail(err, errlen, -EINVAL,
                        "%s: \"%s\" is not a size from 1Mi to 1Ti (e.g. 256Mi)", key, v);
        c.vgpu_memory_unit = b;
    } else if (strcmp(key, "vgpu.policy") == 0) {
        if (strcmp(v, "binpack") == 0)
            c.vgpu_policy = 0;
        else if (strcmp(v, "spread") == 0)
            c.vgpu_policy = 1;
        else
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of binpack|spread", key, v);
    } else if (strcmp(key, "vgpu.overQuotaAction") == 0) {
        if (strcmp(v, "none") == 0)
            c.vgpu_over_quota_kill = false;
        else if (strcmp(v, "kill") == 0)
            c.vgpu_over_quota_kill = true;
        else
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of none|kill", key, v);
    } else if (strcmp(key, "vgpu.checkInterval") == 0) {
        r = set_duration(&c.vgpu_check_interval_ns, key, v, true, err, errlen);
    } else if (strcmp(key, "vgpu.computeAction") == 0) {
        if (strcmp(v, "none") == 0 || strcmp(v, "freeze") == 0)
            c.vgpu_compute_freeze = v[0] == 'f';
        else
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of none|freeze", key, v);
    } else if (strcmp(key, "allocateWait") == 0) {
        r = set_duration(&c.allocate_wait_ns, key, v, true, err, errlen);
    } else if (strcmp(key, "vgpu.reconcileInterval") == 0) {
        r = set_duration(&c.vgpu_reconcile_interval_ns, key, v, true, err, errlen);
    } else if (strcmp(key, "vgpu.freezePeriod") == 0) {
        r = set_duration(&c.vgpu_freeze_period_ns, key, v, false, err, errlen);
    } else if (strcmp(key, "vgpu.cgroupRoot") == 0) {
        r = set_abs_path(c.vgpu_cgroup_root, sizeof(c.vgpu_cgroup_root), key, v, err, errlen);
    } else if (strcmp(key, "mode") == 0) {
        if (mode_parse(v, strlen(v), &c.mode) < 0)
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of pgpu|vgpu|dra|vfio", key,
                        v);
    } else if (strcmp(key, "migStrategy") == 0) {
        size_t i = 0;
        while (i < ARRAY_SIZE(mig_strategy_names) && strcmp(v, mig_strategy_names[i]) != 0)
            i++;
        if (i == ARRAY_SIZE(mig_strategy_names))
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of none|single|mixed", key, v);
        c.mig_strategy = (enum acceld_mig_strategy)i;
    } else if (strcmp(key, "vfio.bind") == 0) {
        if (strlen(v) >= sizeof(c.vfio_bind))
            return fail(err, errlen, -EINVAL, "%s: list too long", key);
        if (list_walk(v, bind_check, NULL))
            return fail(err, errlen, -EINVAL,
                        "%s: \"%s\" is not \"all\" or a list of PCI addresses as sysfs writes "
                        "them (0000:18:00.0,...)",
                        key, v);
        copy_str(c.vfio_bind, sizeof(c.vfio_bind), v);
    } else if (strcmp(key, "vfio.resourceNames") == 0) {
        char bad[128];
        struct vfio_name_find f = {0, bad, sizeof(bad), false};
        if (strlen(v) >= sizeof(c.vfio_resource_names))
            return fail(err, errlen, -EINVAL, "%s: list too long", key);
        list_walk(v, vfio_name_item, &f);
        if (f.bad)
            return fail(err, errlen, -EINVAL,
                        "%s: \"%s\" is not DEVICEID=NAME (a 4-digit hex PCI device id, a resource "
                        "name like GH100_H100_SXM5_80GB or example.com/h100)",
                        key, bad);
        copy_str(c.vfio_resource_names, sizeof(c.vfio_resource_names), v);
    } else if (strcmp(key, "dra.mig") == 0) {
        if (parse_bool(v, &c.dra_mig) < 0)
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not a boolean (true|false)", key, v);
    } else if (strcmp(key, "dra.registryDir") == 0) {
        r = set_abs_path(c.dra_registry_dir, sizeof(c.dra_registry_dir), key, v, err, errlen);
    } else if (strcmp(key, "dra.pluginDir") == 0) {
        if (v[0])
            r = set_abs_path(c.dra_plugin_dir, sizeof(c.dra_plugin_dir), key, v, err, errlen);
        else
            c.dra_plugin_dir[0] = '\0';
    } else if (strcmp(key, "dra.sharing") == 0) {
        size_t i = 0;
        while (i < ARRAY_SIZE(dra_sharing_names) && strcmp(v, dra_sharing_names[i]) != 0)
            i++;
        if (i == ARRAY_SIZE(dra_sharing_names))
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of exclusive|shared|mps", key,
                        v);
        c.dra_sharing = (enum acceld_dra_sharing)i;
    } else if (strcmp(key, "dra.taintEffect") == 0) {
        r = set_taint_effect(&c.dra_taint_effect, key, v, err, errlen);
    } else if (strcmp(key, "dra.fatalTaintEffect") == 0) {
        r = set_taint_effect(&c.dra_fatal_taint_effect, key, v, err, errlen);
    } else if (strcmp(key, "dra.gpuSharing") == 0) {
        if (strlen(v) >= sizeof(c.dra_gpu_sharing))
            return fail(err, errlen, -EINVAL, "%s: list too long", key);
        if ((r = dra_gpu_sharing_find(v, NULL, NULL, err, errlen)) < 0)
            return r;
        r = 0;
        copy_str(c.dra_gpu_sharing, sizeof(c.dra_gpu_sharing), v);
    } else if (strcmp(key, "dra.claimWait") == 0) {
        r = set_duration(&c.dra_claim_wait_ns, key, v, false, err, errlen);
    } else if (strcmp(key, "mpsProbeInterval") == 0) {
        r = set_duration(&c.mps_probe_interval_ns, key, v, false, err, errlen);
    } else if (strcmp(key, "dra.overQuotaAction") == 0) {
        if (strcmp(v, "none") == 0 || strcmp(v, "kill") == 0)
            c.dra_over_quota_kill = v[0] == 'k';
        else
            return fail(err, errlen, -EINVAL, "%s: \"%s\" is not one of none|kill", key, v);
    } else if (strcmp(key, "dra.checkInterval") == 0) {
        r = set_duration(&c.dra_check_interval_ns, key, v, true, err, errlen);
    } else if (strcmp(key, "mpsControl") == 0) {
        if (strlen(v) >= sizeof(c.mps_control))
            return fail(err, errlen, -EINVAL, "%s: path too long", key);
        copy_str(c.mps_control, sizeof(c.mps_control), v);
    } else if (strcmp(key, "gpuModes") == 0) {
        if (strlen(v) >= sizeof(c.gpu_modes))
            return fail(err, errlen, -EINVAL, "%s: list too long", key);
        if ((r = gpu_modes_walk(v, err, errlen, gpu_modes_any, NULL)) < 0)
            return r;
        copy_str(c.gpu_modes, sizeof(c.gpu_modes), v);
    } else {
        return fail(err, errlen, -ENOENT, "unknown key \"%s\"", key);
    }
    if (r < 0)
        return r;
    *cfg = c;
    return 0;
}

/* ---- YAML walker ---- */

struct walker {
    yaml_parser_t parser;
    yaml_event_t ev;
    bool have_ev;
    const char *name;
    char *err;
    size_t errlen;
    struct acceld_config *cfg;
};

static int next_event(struct walker *w)
{
    if (w->have_ev) {
        yaml_event_delete(&w->ev);
        w->have_ev = false;
    }
    if (!yaml_parser_parse(&w->parser, &w->ev)) {
        unsigned long line = (unsigned long)w->parser.problem_mark.line + 1;
        return fail(w->err, w->errlen, -EINVAL, "%s:%lu: YAML syntax error: %s", w->name, line,
                    w->parser.problem ? w->parser.problem : "unknown");
    }
    w->have_ev = true;
    return 0;
}

static unsigned long ev_line(const struct walker *w)
{
    return (unsigned long)w->ev.start_mark.line + 1;
}

static const char *ev_kind(yaml_event_type_t t)
{
    switch (t) {
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    case YAML_ALIAS_EVENT:
        return "an alias";
    default:
        return "a scalar";
    }
}

static bool is_known_section(const char *k)
{
    return strcmp(k, "cdi") == 0 || strcmp(k, "health") == 0 || strcmp(k, "server") == 0 ||
           strcmp(k, "dra") == 0 || strcmp(k, "vgpu") == 0 || strcmp(k, "vfio") == 0;
}

/* NVIDIA's device-plugin config format (version: v1, sharing:, flags:,
 * resources:) in the same file: parsed by sharing-config.c (docs/mps.md). */
static bool is_nvidia_section(const char *k)
{
    return strcmp(k, "version") == 0 || strcmp(k, "sharing") == 0 || strcmp(k, "flags") == 0 ||
           strcmp(k, "resources") == 0;
}

/* Skips the node whose first event is the current one. */
static int skip_node(struct walker *w)
{
    int depth = 0, r;
    for (;;) {
        yaml_event_type_t t = w->ev.type;
        if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT)
            depth++;
        else if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT)
            depth--;
        else if (t != YAML_SCALAR_EVENT && t != YAML_ALIAS_EVENT)
            return fail(w->err, w->errlen, -EINVAL, "%s:%lu: unexpected %s", w->name, ev_line(w),
                        ev_kind(t));
        if (depth == 0)
            return 0;
        if ((r = next_event(w)) < 0)
            return r;
    }
}

static bool is_known_key(const char *full)
{
    for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++)
        if (strcmp(k->key, full) == 0)
            return true;
    return false;
}

/* Applies the value event(s) of one leaf key. Sequences are accepted for
 * health.ignoredXids only and joined into its comma-separated form. */
static int walk_value(struct walker *w, const char *full, unsigned long key_line)
{
    char buf[1024];
    int r;
    if (w->ev.type == YAML_ALIAS_EVENT ||
        (w->ev.type == YAML_SCALAR_EVENT && w->ev.data.scalar.anchor) ||
        (w->ev.type == YAML_SEQUENCE_START_EVENT && w->ev.data.sequence_start.anchor))
        return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s: anchors and aliases are not supported",
                    w->name, ev_line(w), full);
    if (w->ev.type == YAML_SEQUENCE_START_EVENT && strcmp(full, "health.ignoredXids") == 0) {
        size_t n = 0;
        buf[0] = '\0';
        for (;;) {
            if ((r = next_event(w)) < 0)
                return r;
            if (w->ev.type == YAML_SEQUENCE_END_EVENT)
                break;
            if (w->ev.type != YAML_SCALAR_EVENT || w->ev.data.scalar.anchor)
                return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s: list items must be numbers",
                            w->name, ev_line(w), full);
            const char *item = (const char *)w->ev.data.scalar.value;
            if (strchr(item, ',') || item[0] == '\0')
                return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s: \"%s\" is not an XID", w->name,
                            ev_line(w), full, item);
            int m = snprintf(buf + n, sizeof(buf) - n, "%s%s", n ? "," : "", item);
            if (m < 0 || (size_t)m >= sizeof(buf) - n)
                return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s: list too long", w->name,
                            ev_line(w), full);
            n += (size_t)m;
        }
    } else if (w->ev.type == YAML_SCALAR_EVENT) {
        snprintf(buf, sizeof(buf), "%s", (const char *)w->ev.data.scalar.value);
        if (strlen((const char *)w->ev.data.scalar.value) >= sizeof(buf))
            return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s: value too long", w->name,
                        ev_line(w), full);
    } else {
        return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s: expected %s, found %s", w->name,
                    ev_line(w), full,
                    strcmp(full, "health.ignoredXids") == 0 ? "a list of XIDs" : "a scalar value",
                    ev_kind(w->ev.type));
    }
    char msg[400];
    r = acceld_config_set(w->cfg, full, buf, msg, sizeof(msg));
    if (r < 0)
        return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s", w->name, key_line, msg);
    return 0;
}

/* NVIDIA's `flags:` section (its config file format): migStrategy is the same
 * setting as our top-level migStrategy (one of the two, not both); its other
 * flags are NVIDIA's plugin's and skipped. seen: the root's keys so far. */
static int walk_nvidia_flags(struct walker *w, char (*seen)[96], size_t *n_seen)
{
    int r;
    for (;;) {
        if ((r = next_event(w)) < 0)
            return r;
        if (w->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return fail(w->err, w->errlen, -EINVAL, "%s:%lu: flags: expected a key, found %s",
                        w->name, ev_line(w), ev_kind(w->ev.type));
        bool mig = strcmp((const char *)w->ev.data.scalar.value, "migStrategy") == 0;
        unsigned long key_line = ev_line(w);
        if ((r = next_event(w)) < 0)
            return r;
        if (!mig) {
            if ((r = skip_node(w)) < 0)
                return r;
            continue;
        }
        for (size_t i = 0; i < *n_seen; i++)
            if (strcmp(seen[i], "migStrategy") == 0)
                return fail(w->err, w->errlen, -EINVAL,
                            "%s:%lu: duplicate key \"migStrategy\" (flags.migStrategy and "
                            "migStrategy are the same setting: keep one)",
                            w->name, key_line);
        if (*n_seen < 32)
            copy_str(seen[(*n_seen)++], 96, "migStrategy");
        if ((r = walk_value(w, "migStrategy", key_line)) < 0)
            return r;
    }
}

/* Walks a mapping whose MAPPING_START is the current event. prefix is "" at
 * the root or "cdi." / "health." / "server." in a section. */
static int walk_mapping(struct walker *w, const char *prefix)
{
    char seen[32][96];
    size_t n_seen = 0;
    int r;
    for (;;) {
        if ((r = next_event(w)) < 0)
            return r;
        if (w->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (w->ev.type != YAML_SCALAR_EVENT)
            return fail(w->err, w->errlen, -EINVAL, "%s:%lu: expected a key, found %s", w->name,
                        ev_line(w), ev_kind(w->ev.type));
        char full[96], key[48];
        const char *k = (const char *)w->ev.data.scalar.value;
        unsigned long key_line = ev_line(w);
        if (strlen(k) >= sizeof(key))
            return fail(w->err, w->errlen, -EINVAL, "%s:%lu: unknown key \"%.40s...\"", w->name,
                        key_line, k);
        copy_str(key, sizeof(key), k); /* the event is freed by the next next_event() */
        snprintf(full, sizeof(full), "%s%s", prefix, key);
        bool section = prefix[0] == '\0' && is_known_section(key);
        bool nvidia = prefix[0] == '\0' && is_nvidia_section(key);
        if (!section && !nvidia && !is_known_key(full))
            return fail(w->err, w->errlen, -EINVAL, "%s:%lu: unknown key \"%s\"", w->name, key_line,
                        full);
        for (size_t i = 0; i < n_seen; i++)
            if (strcmp(seen[i], full) == 0)
                return fail(w->err, w->errlen, -EINVAL, "%s:%lu: duplicate key \"%s\"", w->name,
                            key_line, full);
        if (n_seen < ARRAY_SIZE(seen))
            copy_str(seen[n_seen++], sizeof(seen[0]), full);
        if ((r = next_event(w)) < 0)
            return r;
        if (nvidia) {
            /* NVIDIA's device-plugin sections: sharing-config.c parses them */
            w->cfg->nvidia_sharing = true;
            if (strcmp(key, "flags") == 0 && w->ev.type == YAML_MAPPING_START_EVENT)
                r = walk_nvidia_flags(w, seen, &n_seen);
            else
                r = skip_node(w);
            if (r < 0)
                return r;
        } else if (section) {
            if (w->ev.type == YAML_SCALAR_EVENT && w->ev.data.scalar.value[0] == '\0' &&
                w->ev.data.scalar.plain_implicit)
                continue; /* "health:" with nothing under it */
            if (w->ev.type != YAML_MAPPING_START_EVENT || w->ev.data.mapping_start.anchor)
                return fail(w->err, w->errlen, -EINVAL, "%s:%lu: %s: expected a mapping, found %s",
                            w->name, ev_line(w), full, ev_kind(w->ev.type));
            char sub[64];
            snprintf(sub, sizeof(sub), "%s.", key);
            if ((r = walk_mapping(w, sub)) < 0)
                return r;
        } else if ((r = walk_value(w, full, key_line)) < 0) {
            return r;
        }
    }
}

int acceld_config_parse(struct acceld_config *cfg, const char *data, size_t len, const char *name,
                        char *err, size_t errlen)
{
    struct acceld_config work = *cfg;
    struct walker w = {
        .name = name ? name : "<config>", .err = err, .errlen = errlen, .cfg = &work};
    int r;

    if (!yaml_parser_initialize(&w.parser))
        return fail(err, errlen, -ENOMEM, "%s: out of memory", w.name);
    yaml_parser_set_input_string(&w.parser, (const unsigned char *)data, len);

    if ((r = next_event(&w)) < 0) /* STREAM_START */
        goto out;
    if ((r = next_event(&w)) < 0)
        goto out;
    if (w.ev.type == YAML_STREAM_END_EVENT)
        goto out; /* empty file: all defaults */
    /* DOCUMENT_START, then the root node */
    if ((r = next_event(&w)) < 0)
        goto out;
    if (w.ev.type == YAML_MAPPING_START_EVENT && !w.ev.data.mapping_start.anchor) {
        if ((r = walk_mapping(&w, "")) < 0)
            goto out;
    } else if (!(w.ev.type == YAML_SCALAR_EVENT && w.ev.data.scalar.plain_implicit &&
                 (w.ev.data.scalar.value[0] == '\0' ||
                  strcmp((const char *)w.ev.data.scalar.value, "~") == 0 ||
                  strcmp((const char *)w.ev.data.scalar.value, "null") == 0))) {
        r = fail(err, errlen, -EINVAL, "%s:%lu: the config must be a mapping of keys, found %s",
                 w.name, ev_line(&w), ev_kind(w.ev.type));
        goto out;
    }
    if ((r = next_event(&w)) < 0) /* DOCUMENT_END */
        goto out;
    if ((r = next_event(&w)) < 0)
        goto out;
    if (w.ev.type != YAML_STREAM_END_EVENT) {
        r = fail(err, errlen, -EINVAL, "%s:%lu: more than one YAML document", w.name, ev_line(&w));
        goto out;
    }
out:
    if (w.have_ev)
        yaml_event_delete(&w.ev);
    yaml_parser_delete(&w.parser);
    if (r == 0)
        *cfg = work;
    return r;
}

int acceld_config_load_file(struct acceld_config *cfg, const char *path, char *err, size_t errlen)
{
    _cleanup_free_ char *data = NULL;
    size_t len;
    int r = fs_read_all(path, ACCELD_CONFIG_MAX_BYTES, &data, &len);
    if (r < 0)
        return fail(err, errlen, r, "%s: cannot read: %s", path, strerror(-r));
    if (memchr(data, '\0', len))
        return fail(err, errlen, -EINVAL, "%s: contains a NUL byte", path);
    return acceld_config_parse(cfg, data, len, path, err, errlen);
}

int acceld_config_format(const struct acceld_config *cfg, const char *key, char *buf, size_t len)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    if (strcmp(key, "devicePluginDir") == 0)
        snprintf(buf, len, "%s", cfg->plugin_dir);
    else if (strcmp(key, "resourceName") == 0)
        snprintf(buf, len, "%s", cfg->resource_name);
    else if (strcmp(key, "nvmlLibrary") == 0)
        snprintf(buf, len, "%s", cfg->nvml_library);
    else if (strcmp(key, "sysfsRoot") == 0)
        snprintf(buf, len, "%s", cfg->sysfs_root);
    else if (strcmp(key, "devRoot") == 0)
        snprintf(buf, len, "%s", cfg->dev_root);
    else if (strcmp(key, "stateDir") == 0)
        snprintf(buf, len, "%s", cfg->state_dir);
    else if (strcmp(key, "logLevel") == 0)
        snprintf(buf, len, "%s", levels[cfg->log_level & 3]);
    else if (strcmp(key, "noRegister") == 0)
        snprintf(buf, len, "%s", cfg->no_register ? "true" : "false");
    else if (strcmp(key, "deviceListStrategy") == 0)
        snprintf(buf, len, "%s", cfg->strategy == ACCELD_STRATEGY_CDI ? "cdi" : "envvar");
    else if (strcmp(key, "cdi.dir") == 0)
        snprintf(buf, len, "%s", cfg->cdi_dir);
    else if (strcmp(key, "cdi.vendor") == 0)
        snprintf(buf, len, "%s", cfg->cdi_vendor);
    else if (strcmp(key, "cdi.class") == 0)
        snprintf(buf, len, "%s", cfg->cdi_class);
    else if (strcmp(key, "health.ignoredXids") == 0) {
        size_t n = 0;
        if (len)
            buf[0] = '\0';
        for (size_t i = 0; i < cfg->n_ignored_xids && n < len; i++) {
            int m = snprintf(buf + n, len - n, "%s%d", i ? "," : "", cfg->ignored_xids[i]);
            if (m < 0)
                break;
            n += (size_t)m;
        }
    } else if (strcmp(key, "health.recoverAfter") == 0) {
        format_duration(cfg->recover_after_ns, buf, len);
    } else if (strcmp(key, "server.handshakeTimeout") == 0) {
        format_duration(cfg->handshake_timeout_ns, buf, len);
    } else if (strcmp(key, "server.idleTimeout") == 0) {
        format_duration(cfg->idle_timeout_ns, buf, len);
    } else if (strcmp(key, "mode") == 0) {
        snprintf(buf, len, "%s", acceld_mode_name(cfg->mode));
    } else if (strcmp(key, "gpuModes") == 0) {
        snprintf(buf, len, "%s", cfg->gpu_modes);
    } else if (strcmp(key, "mpsProbeInterval") == 0) {
        format_duration(cfg->mps_probe_interval_ns, buf, len);
    } else if (strcmp(key, "mpsControl") == 0) {
        snprintf(buf, len, "%s", cfg->mps_control);
    } else if (strcmp(key, "nodeName") == 0) {
        snprintf(buf, len, "%s", cfg->node_name);
    } else if (strcmp(key, "kubeconfig") == 0) {
        snprintf(buf, len, "%s", cfg->kubeconfig);
    } else if (strcmp(key, "vcudaLibrary") == 0) {
        snprintf(buf, len, "%s", cfg->vcuda_library);
    } else if (strcmp(key, "procRoot") == 0) {
        snprintf(buf, len, "%s", cfg->proc_root);
    } else if (strcmp(key, "podResourcesSocket") == 0) {
        snprintf(buf, len, "%s", cfg->pod_resources_socket);
    } else if (strcmp(key, "vgpu.coreResource") == 0) {
        snprintf(buf, len, "%s", cfg->vgpu_core_resource);
    } else if (strcmp(key, "vgpu.memoryResource") == 0) {
        snprintf(buf, len, "%s", cfg->vgpu_memory_resource);
    } else if (strcmp(key, "vgpu.memoryUnit") == 0) {
        snprintf(buf, len, "%llu", (unsigned long long)cfg->vgpu_memory_unit);
    } else if (strcmp(key, "vgpu.policy") == 0) {
        snprintf(buf, len, "%s", cfg->vgpu_policy ? "spread" : "binpack");
    } else if (strcmp(key, "vgpu.overQuotaAction") == 0) {
        snprintf(buf, len, "%s", cfg->vgpu_over_quota_kill ? "kill" : "none");
    } else if (strcmp(key, "vgpu.checkInterval") == 0) {
        format_duration(cfg->vgpu_check_interval_ns, buf, len);
    } else if (strcmp(key, "dra.registryDir") == 0) {
        snprintf(buf, len, "%s", cfg->dra_registry_dir);
    } else if (strcmp(key, "dra.pluginDir") == 0) {
        snprintf(buf, len, "%s", cfg->dra_plugin_dir);
    } else if (strcmp(key, "dra.sharing") == 0) {
        snprintf(buf, len, "%s", dra_sharing_names[cfg->dra_sharing]);
    } else if (strcmp(key, "dra.taintEffect") == 0) {
        snprintf(buf, len, "%s", acceld_taint_effect_name(cfg->dra_taint_effect));
    } else if (strcmp(key, "dra.fatalTaintEffect") == 0) {
        snprintf(buf, len, "%s", acceld_taint_effect_name(cfg->dra_fatal_taint_effect));
    } else if (strcmp(key, "dra.gpuSharing") == 0) {
        snprintf(buf, len, "%s", cfg->dra_gpu_sharing);
    } else if (strcmp(key, "dra.claimWait") == 0) {
        format_duration(cfg->dra_claim_wait_ns, buf, len);
    } else if (strcmp(key, "dra.overQuotaAction") == 0) {
        snprintf(buf, len, "%s", cfg->dra_over_quota_kill ? "kill" : "none");
    } else if (strcmp(key, "dra.checkInterval") == 0) {
        format_duration(cfg->dra_check_interval_ns, buf, len);
    } else if (strcmp(key, "vgpu.computeAction") == 0) {
        snprintf(buf, len, "%s", cfg->vgpu_compute_freeze ? "freeze" : "none");
    } else if (strcmp(key, "allocateWait") == 0) {
        format_duration(cfg->allocate_wait_ns, buf, len);
    } else if (strcmp(key, "vgpu.reconcileInterval") == 0) {
        format_duration(cfg->vgpu_reconcile_interval_ns, buf, len);
    } else if (strcmp(key, "vgpu.freezePeriod") == 0) {
        format_duration(cfg->vgpu_freeze_period_ns, buf, len);
    } else if (strcmp(key, "vgpu.cgroupRoot") == 0) {
        snprintf(buf, len, "%s", cfg->vgpu_cgroup_root);
    } else if (strcmp(key, "migStrategy") == 0) {
        snprintf(buf, len, "%s", acceld_mig_strategy_name(cfg->mig_strategy));
    } else if (strcmp(key, "vfio.bind") == 0) {
        snprintf(buf, len, "%s", cfg->vfio_bind);
    } else if (strcmp(key, "vfio.resourceNames") == 0) {
        snprintf(buf, len, "%s", cfg->vfio_resource_names);
    } else if (strcmp(key, "dra.mig") == 0) {
        snprintf(buf, len, "%s", cfg->dra_mig ? "true" : "false");
    } else
        return -ENOENT;
    return 0;
}

bool acceld_config_key_differs(const struct acceld_config *a, const struct acceld_config *b,
                               const char *key)
{
    char va[1024], vb[1024];
    if (acceld_config_format(a, key, va, sizeof(va)) < 0 ||
        acceld_config_format(b, key, vb, sizeof(vb)) < 0)
        return false;
    return strcmp(va, vb) != 0;
}

bool acceld_config_xid_ignored(const struct acceld_config *cfg, int xid)
{
    for (size_t i = 0; i < cfg->n_ignored_xids; i++)
        if (cfg->ignored_xids[i] == xid)
            return true;
    return false;
}

void acceld_config_socket_name(const struct acceld_config *cfg, char *buf, size_t len)
{
    int n = snprintf(buf, len, "accel-%s.sock", cfg->resource_name);
    for (int i = 0; i < n && (size_t)i < len; i++)
        if (buf[i] == '/')
            buf[i] = '-';
}
