/*
 * regions.c — accel-exporter's reader of acceld's vGPU assignments (status.json) and of the
 * containers' usage regions, and the accel_vgpu_* families; see regions.h.
 *
 * The region layout is src/vcuda/region.h's (header) and pace.h's (the compute-share block
 * inside it); fields are little-endian, as is every host this runs on (x86-64, arm64).
 */
#include "regions.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "pace.h"
#include "region.h"

#define PACE_AT offsetof(struct vc_region_header, core_limit)

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#define HDR32(f) rd32(buf + offsetof(struct vc_region_header, f))
#define HDR64(f) rd64(buf + offsetof(struct vc_region_header, f))

int exporter_region_parse(const unsigned char *buf, size_t len, const char *gpu_uuid,
                          struct exporter_region_usage *ret)
{
    if (len < VC_REGION_HEADER_SIZE || HDR64(magic) != VC_REGION_MAGIC ||
        HDR32(abi_version) != VC_REGION_ABI || HDR32(header_size) != VC_REGION_HEADER_SIZE ||
        HDR64(region_size) != VC_REGION_SIZE || HDR32(slot_count) != VC_REGION_SLOTS ||
        HDR32(slot_size) != VC_REGION_SLOT_SIZE || HDR32(slot_offset) != VC_REGION_HEADER_SIZE ||
        HDR32(device_count) != VC_REGION_DEVICES)
        return -EPROTO;
    /* the high-water mark is the tenant's word: bounded, and only what was read is summed */
    uint32_t hwm = HDR32(slot_hwm);
    if (hwm > VC_REGION_SLOTS)
        return -EPROTO;
    if ((len - VC_REGION_HEADER_SIZE) / VC_REGION_SLOT_SIZE < hwm)
        return -EPROTO;
    struct exporter_region_usage u = {0};
    unsigned dev = VC_REGION_DEVICES;
    size_t ulen = strlen(gpu_uuid);
    for (unsigned d = 0; d < VC_REGION_DEVICES && dev == VC_REGION_DEVICES; d++) {
        const char *id =
            (const char *)buf + offsetof(struct vc_region_header, device_uuid) + 64u * d;
        /* NUL padded: equal only with the NUL right after (a full 64 bytes never matches);
         * case ignored, as libvcuda compares UUIDs */
        if (ulen && ulen < 64 && strncasecmp(id, gpu_uuid, ulen) == 0 && id[ulen] == '\0')
            dev = d;
    }
    u.gpu_time_ns = rd64(buf + PACE_AT + offsetof(struct pace_shared, measured_ns));
    u.throttled_ns = rd64(buf + PACE_AT + offsetof(struct pace_shared, throttled_ns));
    if (dev < VC_REGION_DEVICES) {
        u.has_device = true;
        u.first_device = dev == 0;
        for (uint32_t i = 0; i < hwm; i++) {
            const unsigned char *slot =
                buf + VC_REGION_HEADER_SIZE + (size_t)i * VC_REGION_SLOT_SIZE;
            if (!rd64(slot + offsetof(struct vc_region_slot, owner)))
                continue;
            uint64_t b = rd64(slot + offsetof(struct vc_region_slot, used) + 8u * dev);
            u.memory_used = u.memory_used + b < u.memory_used ? UINT64_MAX : u.memory_used + b;
        }
    }
    *ret = u;
    return 0;
}

/* A label value: printable ASCII, bounded. path: also a safe path component. */
static bool good_name(const char *s, bool path)
{
    size_t n = strlen(s);
    if (!n || n >= EXPORTER_VGPU_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e || (path && s[i] == '/'))
            return false;
    return !path || (strcmp(s, ".") && strcmp(s, ".."));
}

static int str_field(json_t *o, const char *key, bool path, char *out, size_t outlen, size_t i,
                     char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || strlen(json_string_value(v)) >= outlen ||
        !good_name(json_string_value(v), path)) {
        snprintf(err, errlen, "assignments[%zu].%s: want a non-empty printable string%s", i, key,
                 path ? " without '/'" : "");
        return -EINVAL;
    }
    snprintf(out, outlen, "%s", json_string_value(v));
    return 0;
}

static int int_field(json_t *o, const char *key, uint64_t max, uint64_t *out, size_t i, char *err,
                     size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > max) {
        snprintf(err, errlen, "assignments[%zu].%s: want an integer 0..%" PRIu64, i, key, max);
        return -EINVAL;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int exporter_vgpu_status_parse(const char *text, size_t len, struct exporter_vgpu_assign *a,
                               size_t cap, size_t *ret_n, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    int r = -EINVAL;
    size_t n = 0;
    if (!root) {
        snprintf(err, errlen, "line %d: %s", je.line, je.text);
        return -EINVAL;
    }
    json_t *ver = json_object_get(root, "version"), *arr = json_object_get(root, "assignments");
    if (!json_is_object(root) || !json_is_integer(ver) || json_integer_value(ver) != 1) {
        snprintf(err, errlen, "version: want 1");
        goto out;
    }
    if (!json_is_array(arr)) {
        snprintf(err, errlen, "assignments: want an array");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *o = json_array_get(arr, i), *whole = json_object_get(o, "whole");
        json_t *complete = json_object_get(o, "complete");
        struct exporter_vgpu_assign x;
        if (!json_is_object(o) || (whole && !json_is_boolean(whole)) ||
            (complete && !json_is_boolean(complete))) {
            snprintf(err, errlen, "assignments[%zu]: want an object (whole, complete: booleans)",
                     i);
            goto out;
        }
        if (str_field(o, "namespace", false, x.ns, sizeof x.ns, i, err, errlen) < 0 ||
            str_field(o, "pod", false, x.pod, sizeof x.pod, i, err, errlen) < 0 ||
            str_field(o, "podUID", true, x.pod_uid, sizeof x.pod_uid, i, err, errlen) < 0 ||
            str_field(o, "container", true, x.container, sizeof x.container, i, err, errlen) < 0 ||
            str_field(o, "gpu", false, x.gpu_uuid, sizeof x.gpu_uuid, i, err, errlen) < 0 ||
            int_field(o, "cores", 100, &x.cores, i, err, errlen) < 0 ||
            int_field(o, "memoryBytes", INT64_MAX, &x.memory_bytes, i, err, errlen) < 0)
            goto out;
        x.whole = json_is_true(whole);
        x.complete = !json_is_false(complete);
        for (size_t k = 0; k < n; k++)
            if (!strcmp(a[k].pod_uid, x.pod_uid) && !strcmp(a[k].container, x.container) &&
                !strcmp(a[k].gpu_uuid, x.gpu_uuid)) {
                snprintf(err, errlen, "assignments[%zu]: a second entry for %s/%s on %s", i,
                         x.pod_uid, x.container, x.gpu_uuid);
                goto out;
            }
        if (n == cap) {
            snprintf(err, errlen, "assignments: more than %zu", cap);
            r = -E2BIG;
            goto out;
        }
        a[n++] = x;
    }
    *ret_n = n;
    r = 0;
out:
    json_decref(root);
    return r;
}

struct exporter_vgpu {
    char dir[4096];      /* <state-dir>/vgpu */
    bool have;           /* a good status.json was read */
    bool status_ok;      /* the last read of it was good */
    struct stat seen;    /* the status.json last parsed (inode, size, mtime) */
    char last_err[5120]; /* the problem last logged */
    size_t n;
    struct exporter_vgpu_assign a[EXPORTER_VGPU_MAX_ASSIGN];
    struct exporter_region_usage use[EXPORTER_VGPU_MAX_ASSIGN];
    bool use_ok[EXPORTER_VGPU_MAX_ASSIGN];
    unsigned char *rbuf; /* one region's bytes, reused */
    char *sbuf;          /* status.json's text, reused */
};

int exporter_vgpu_new(const char *state_dir, struct exporter_vgpu **ret)
{
    struct exporter_vgpu *v = calloc(1, sizeof *v);
    if (!v)
        return -ENOMEM;
    v->rbuf = malloc(VC_REGION_SIZE);
    v->sbuf = malloc(EXPORTER_VGPU_MAX_STATUS);
    if (!v->rbuf || !v->sbuf) {
        exporter_vgpu_free(v);
        return -ENOMEM;
    }
    if ((size_t)snprintf(v->dir, sizeof v->dir, "%s/vgpu", state_dir) >= sizeof v->dir - 700) {
        exporter_vgpu_free(v);
        return -ENAMETOOLONG;
    }
    *ret = v;
    return 0;
}

struct exporter_vgpu *exporter_vgpu_free(struct exporter_vgpu *v)
{
    if (v) {
        free(v->rbuf);
        free(v->sbuf);
        free(v);
    }
    return NULL;
}

/* Logs msg once (until the next different problem or a good read). */
static void problem(struct exporter_vgpu *v, const char *msg)
{
    if (strcmp(msg, v->last_err)) {
        log_warn("%s", msg);
        snprintf(v->last_err, sizeof v->last_err, "%s", msg);
    }
}

/* Reads status.json when it changed since the last good parse. */
static void read_status(struct exporter_vgpu *v)
{
    static struct exporter_vgpu_assign next[EXPORTER_VGPU_MAX_ASSIGN];
    char path[4200], err[400], msg[sizeof v->last_err];
    snprintf(path, sizeof path, "%s/status.json", v->dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        if (v->have) { /* gone: acceld stopped being in vGPU mode, or the directory moved */
            snprintf(msg, sizeof msg, "%s: %s: keeping the last assignments", path,
                     strerror(errno));
            problem(v, msg);
        }
        v->status_ok = false;
        return;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > EXPORTER_VGPU_MAX_STATUS) {
        close(fd);
        snprintf(msg, sizeof msg, "%s: not a regular file of at most %u bytes: ignored", path,
                 EXPORTER_VGPU_MAX_STATUS);
        problem(v, msg);
        v->status_ok = false;
        return;
    }
    if (v->have && st.st_ino == v->seen.st_ino && st.st_size == v->seen.st_size &&
        st.st_mtim.tv_sec == v->seen.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == v->seen.st_mtim.tv_nsec) {
        close(fd);
        return; /* unchanged */
    }
    size_t len = 0;
    ssize_t k;
    while (len < EXPORTER_VGPU_MAX_STATUS &&
           (k = read(fd, v->sbuf + len, EXPORTER_VGPU_MAX_STATUS - len)) > 0)
        len += (size_t)k;
    close(fd);
    size_t n = 0;
    if (exporter_vgpu_status_parse(v->sbuf, len, next, EXPORTER_VGPU_MAX_ASSIGN, &n, err,
                                   sizeof err) < 0) {
        snprintf(msg, sizeof msg, "%s: %s: %s", path, err,
                 v->have ? "keeping the last good assignments" : "no vGPU series");
        problem(v, msg);
        v->status_ok = false;
        return;
    }
    if (v->last_err[0])
        log_info("%s reads well again", path);
    v->last_err[0] = '\0';
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!next[i].whole) /* a whole GPU: no libvcuda, no region, no limits */
            v->a[m++] = next[i];
    v->n = m;
    v->seen = st;
    v->have = true;
    v->status_ok = true;
}

/* Reads assignment i's region: the header, then the slots up to its high-water mark. */
static bool read_region(struct exporter_vgpu *v, size_t i)
{
    char path[4800];
    snprintf(path, sizeof path, "%s/%s/%s/region/usage", v->dir, v->a[i].pod_uid,
             v->a[i].container);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false; /* not started yet (libvcuda creates it), or gone */
    struct stat st;
    bool ok = false;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size >= VC_REGION_SIZE) {
        ssize_t h = pread(fd, v->rbuf, VC_REGION_HEADER_SIZE, 0);
        if (h == VC_REGION_HEADER_SIZE) {
            uint32_t hwm = rd32(v->rbuf + offsetof(struct vc_region_header, slot_hwm));
            size_t want = hwm <= VC_REGION_SLOTS ? (size_t)hwm * VC_REGION_SLOT_SIZE : 0;
            ssize_t s =
                want ? pread(fd, v->rbuf + VC_REGION_HEADER_SIZE, want, VC_REGION_HEADER_SIZE) : 0;
            ok = s >= 0 && exporter_region_parse(v->rbuf, VC_REGION_HEADER_SIZE + (size_t)s,
                                                 v->a[i].gpu_uuid, &v->use[i]) == 0;
        }
    }
    close(fd);
    return ok;
}

void exporter_vgpu_refresh(struct exporter_vgpu *v)
{
    read_status(v);
    for (size_t i = 0; i < v->n; i++)
        v->use_ok[i] = read_region(v, i) && v->use[i].has_device;
}

void exporter_vgpu_render(const struct exporter_vgpu *v, const struct exporter_vgpu_out *out)
{
    static const struct {
        const char *name, *type, *help;
        int what; /* 0 limit, 1 share, 2 used, 3 GPU time, 4 throttled */
    } fams[] = {
        {"accel_vgpu_container_memory_limit_bytes", "gauge",
         "Device memory a vGPU container may use on this GPU (acceld's assignment).", 0},
        {"accel_vgpu_container_core_share_ratio", "gauge",
         "Share of this GPU's time a vGPU container may use (vcuda-core / 100).", 1},
        {"accel_vgpu_container_memory_used_bytes", "gauge",
         "Device memory a vGPU container holds on this GPU, as its usage region says.", 2},
        {"accel_vgpu_container_gpu_time_seconds_total", "counter",
         "GPU time the container's kernels used, measured by libvcuda (on its first GPU).", 3},
        {"accel_vgpu_container_throttled_seconds_total", "counter",
         "Time the container's launches waited for its core share (on its first GPU).", 4},
    };
    if (!v->have)
        return;
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        if (!out->family(out->ctx, fams[f].name, fams[f].type, fams[f].help))
            continue;
        for (size_t i = 0; i < v->n; i++) {
            const struct exporter_vgpu_assign *a = &v->a[i];
            const struct exporter_region_usage *u = &v->use[i];
            int g = out->gpu_index(out->ctx, a->gpu_uuid);
            double val;
            if (g < 0)
                continue;
            if (fams[f].what == 0)
                val = (double)a->memory_bytes;
            else if (fams[f].what == 1)
                val = (double)a->cores / 100.0;
            else if (!v->use_ok[i] || (fams[f].what > 2 && !u->first_device))
                continue;
            else if (fams[f].what == 2)
                val = (double)u->memory_used;
            else
                val = (double)(fams[f].what == 3 ? u->gpu_time_ns : u->throttled_ns) / 1e9;
            /* names were checked printable; escape what the formats require */
            char ns[2 * EXPORTER_VGPU_NAME], pod[2 * EXPORTER_VGPU_NAME];
            char ct[2 * EXPORTER_VGPU_NAME], uid[2 * EXPORTER_VGPU_NAME], id[200];
            const char *src[5] = {a->ns, a->pod, a->container, a->pod_uid, a->gpu_uuid};
            char *dst[5] = {ns, pod, ct, uid, id};
            size_t cap[5] = {sizeof ns, sizeof pod, sizeof ct, sizeof uid, sizeof id};
            for (int s = 0; s < 5; s++) {
                size_t o = 0;
                for (const char *p = src[s]; *p && o + 3 < cap[s]; p++) {
                    if (*p == '\\' || *p == '"')
                        dst[s][o++] = '\\';
                    dst[s][o++] = *p;
                }
                dst[s][o] = '\0';
            }
            out->print(out->ctx,
                       "%s{gpu=\"%d\",uuid=\"%s\",namespace=\"%s\",pod=\"%s\",container=\"%s\","
                       "pod_uid=\"%s\"} %.17g\n",
                       fams[f].name, g, id, ns, pod, ct, uid, val);
        }
    }
    if (out->family(out->ctx, "accel_vgpu_status_up", "gauge",
                    "1 when acceld's vGPU status.json was last read and valid, else 0."))
        out->print(out->ctx, "accel_vgpu_status_up %d\n", v->status_ok ? 1 : 0);
}
