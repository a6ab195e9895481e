/* cgroup.c — owns the mapping from /proc/<pid>/cgroup text to a pod UID and container id.
 *
 * The kubelet names a pod's cgroup after the pod UID (facts from the kubelet's cgroup manager,
 * pkg/kubelet/cm in kubernetes/kubernetes, and the runtimes' documented scope names):
 *   systemd driver: /kubepods.slice/kubepods-burstable.slice/
 *                   kubepods-burstable-pod<uid with '_' for '-'>.slice/cri-containerd-<id>.scope
 *                   (guaranteed pods: kubepods-pod<uid>.slice; CRI-O: crio-<id>.scope;
 *                   cri-dockerd: docker-<id>.scope)
 *   cgroupfs driver: /kubepods/burstable/pod<uid>/<id>  (guaranteed: /kubepods/pod<uid>/<id>)
 * cgroup v1 prints one such line per hierarchy ("4:memory:/kubepods/..."), cgroup v2 one
 * line "0::/...". The pod segment is searched anywhere in the path, so nested layouts (kind:
 * /kubelet.slice/kubelet-kubepods.slice/...-kubelet-kubepods-pod<uid>.slice; a node inside
 * docker: /docker/<id>/kubepods/...) work too. CRI-O's monitor (crio-conmon-<id>.scope) is not the
 * container. */
#include "cgroup.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

#define UID_LEN 36
#define CID_LEN 64

static bool is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static char lower(char c)
{
    return (c >= 'A' && c <= 'F') ? (char)(c - 'A' + 'a') : c;
}

/* A UUID at s (exactly UID_LEN chars, '-' or '_' as separators) → out (dashed, lower). */
static bool take_uid(const char *s, size_t n, char out[UID_LEN + 1])
{
    if (n != UID_LEN)
        return false;
    for (size_t i = 0; i < UID_LEN; i++) {
        bool sep = i == 8 || i == 13 || i == 18 || i == 23;
        if (sep) {
            if (s[i] != '-' && s[i] != '_')
                return false;
            out[i] = '-';
        } else {
            if (!is_hex(s[i]))
                return false;
            out[i] = lower(s[i]);
        }
    }
    out[UID_LEN] = 0;
    return true;
}

static bool take_cid(const char *s, size_t n, char out[CID_LEN + 1])
{
    if (n != CID_LEN)
        return false;
    for (size_t i = 0; i < CID_LEN; i++) {
        if (!is_hex(s[i]))
            return false;
        out[i] = lower(s[i]);
    }
    out[CID_LEN] = 0;
    return true;
}

static bool has_prefix(const char *s, size_t n, const char *p, size_t *plen)
{
    size_t l = strlen(p);
    if (n < l || memcmp(s, p, l) != 0)
        return false;
    *plen = l;
    return true;
}

static bool has_suffix(const char *s, size_t n, const char *p)
{
    size_t l = strlen(p);
    return n >= l && memcmp(s + n - l, p, l) == 0;
}

/* A pod segment: "pod<uid>" (cgroupfs) or "kubepods[-<qos>]-pod<uid>.slice" (systemd). */
static bool segment_pod(const char *s, size_t n, char out[UID_LEN + 1])
{
    size_t pl;
    if (has_prefix(s, n, "pod", &pl))
        return take_uid(s + pl, n - pl, out);
    /* "kubepods-" at the start, or after a parent slice's prefix ("kubelet-kubepods-..."
     * under a kubelet whose cgroup root is itself a slice, as kind runs it) */
    bool kube = has_prefix(s, n, "kubepods-", &pl);
    for (size_t i = 0; !kube && i + 10 <= n; i++)
        kube = memcmp(s + i, "-kubepods-", 10) == 0;
    if (!kube || !has_suffix(s, n, ".slice"))
        return false;
    n -= strlen(".slice");
    if (n < UID_LEN + 4 || memcmp(s + n - UID_LEN - 3, "pod", 3) != 0)
        return false;
    /* kubepods-pod<uid> or kubepods-<qos>-pod<uid>: the byte before "pod" is '-' */
    if (s[n - UID_LEN - 4] != '-')
        return false;
    return take_uid(s + n - UID_LEN, UID_LEN, out);
}

/* A container segment: "<id>", "cri-containerd-<id>.scope", "crio-<id>.scope",
 * "docker-<id>.scope". */
static bool segment_container(const char *s, size_t n, char out[CID_LEN + 1],
                              enum kube_cgroup_runtime *rt)
{
    static const struct {
        const char *prefix;
        enum kube_cgroup_runtime rt;
    } forms[] = {
        {"cri-containerd-", KUBE_CGROUP_RUNTIME_CONTAINERD},
        {"crio-", KUBE_CGROUP_RUNTIME_CRIO},
        {"docker-", KUBE_CGROUP_RUNTIME_DOCKER},
    };
    if (take_cid(s, n, out)) {
        *rt = KUBE_CGROUP_RUNTIME_UNKNOWN;
        return true;
    }
    if (!has_suffix(s, n, ".scope"))
        return false;
    n -= strlen(".scope");
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        size_t pl;
        if (has_prefix(s, n, forms[i].prefix, &pl) && take_cid(s + pl, n - pl, out)) {
            *rt = forms[i].rt;
            return true;
        }
    }
    return false;
}

/* One cgroup path (n bytes, starts with '/'). true when it names a pod. */
static bool parse_path(const char *p, size_t n, struct kube_cgroup_ref *ref)
{
    const char *end = p + n;
    const char *seg = p;
    bool pod = false;
    *ref = (struct kube_cgroup_ref){0};
    while (seg < end) {
        const char *slash = memchr(seg, '/', (size_t)(end - seg));
        const char *se = slash ? slash : end;
        size_t sl = (size_t)(se - seg);
        if (!pod) {
            if (segment_pod(seg, sl, ref->pod_uid))
                pod = true;
        } else {
            /* the segment right under the pod; deeper ones (a container's own sub-cgroups)
             * do not change it */
            if (!segment_container(seg, sl, ref->container_id, &ref->runtime)) {
                ref->container_id[0] = 0;
                ref->runtime = KUBE_CGROUP_RUNTIME_UNKNOWN;
            }
            break;
        }
        seg = se + 1;
    }
    return pod;
}

static bool same_ref(const struct kube_cgroup_ref *a, const struct kube_cgroup_ref *b)
{
    return strcmp(a->pod_uid, b->pod_uid) == 0 && strcmp(a->container_id, b->container_id) == 0;
}

int kube_cgroup_parse(const char *text, size_t len, struct kube_cgroup_ref *ret)
{
    struct kube_cgroup_ref v1 = {0}, v2 = {0};
    bool have_v1 = false, have_v2 = false;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        /* hierarchy-ID:controllers:path — the path may itself hold ':' */
        const char *c1 = memchr(p, ':', (size_t)(le - p));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
        if (c2) {
            struct kube_cgroup_ref r;
            bool is_v2 = c1 - p == 1 && p[0] == '0' && c2 == c1 + 1;
            if (parse_path(c2 + 1, (size_t)(le - c2 - 1), &r)) {
                struct kube_cgroup_ref *slot = is_v2 ? &v2 : &v1;
                bool *have = is_v2 ? &have_v2 : &have_v1;
                if (*have && !same_ref(slot, &r))
                    return -EPROTO;
                if (!*have) {
                    *slot = r;
                    *have = true;
                }
            }
        }
        p = le + 1;
    }
    if (have_v2)
        *ret = v2;
    else if (have_v1)
        *ret = v1;
    else
        return -ENOENT;
    return 0;
}

int kube_cgroup_read(const char *proc_root, pid_t pid, struct kube_cgroup_ref *ret)
{
    if (pid <= 0)
        return -EINVAL;
    char path[4096];
    int n = snprintf(path, sizeof(path), "%s/%d/cgroup", proc_root ? proc_root : "/proc", (int)pid);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    char *text = NULL;
    size_t len = 0;
    int r = fs_read_all(path, 64 * 1024, &text, &len);
    if (r < 0)
        return r;
    r = kube_cgroup_parse(text, len, ret);
    free(text);
    return r;
}

const char *kube_cgroup_runtime_name(enum kube_cgroup_runtime rt)
{
    switch (rt) {
    case KUBE_CGROUP_RUNTIME_CONTAINERD:
        return "containerd";
    case KUBE_CGROUP_RUNTIME_CRIO:
        return "cri-o";
    case KUBE_CGROUP_RUNTIME_DOCKER:
        return "docker";
    case KUBE_CGROUP_RUNTIME_UNKNOWN:
        break;
    }
    return "";
}
