/* fuzz-kube-pod.c — libFuzzer target for src/kube/pod.c: what the API server sends about pods
 * (PodList bodies, watch-stream lines) and the resource quantities inside them. The first
 * byte picks the parser: 'L' a PodList, 'W' a watch line, 'Q' a quantity; the rest is the
 * input. Checks: documented return values only, nothing returned on failure, every parsed pod
 * has a uid, name and namespace and survives kube_pod_dup; leaks show under ASan. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pod.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_pod(const struct kube_pod *p)
{
    if (!p->uid[0] || !p->name || !p->namespace || !p->node_name || !p->phase)
        abort();
    for (size_t i = 0; i < p->n_containers; i++) {
        const struct kube_container *c = &p->containers[i];
        for (size_t j = 0; j < c->n_requests; j++) {
            int64_t v;
            int r = kube_quantity_parse_milli(c->requests[j].value, &v);
            if (r != 0 && r != -EINVAL && r != -ERANGE)
                abort();
        }
    }
    struct kube_pod *d = NULL;
    if (kube_pod_dup(p, &d) == 0) {
        if (strcmp(d->uid, p->uid) != 0 || d->n_containers != p->n_containers)
            abort();
        kube_pod_free(d);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 20)
        return 0;
    char mode = (char)data[0];
    data++;
    size--;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char err[256];
    if (mode == 'L') {
        struct kube_pod **pods = NULL;
        size_t n = 0;
        char *rv = NULL;
        struct kube_pod_skips skips;
        int r = kube_pod_list_parse(s, size, &pods, &n, &rv, &skips, err, sizeof(err));
        if (r != 0 && r != -EINVAL && r != -ENOMEM)
            abort();
        for (size_t i = 0; r == 0 && i < skips.n && i < KUBE_POD_SKIPS_MAX; i++)
            if (strlen(skips.e[i].why) >= sizeof(skips.e[i].why) ||
                strlen(skips.e[i].uid) >= sizeof(skips.e[i].uid))
                abort();
        if (r < 0 && (pods || rv))
            abort();
        for (size_t i = 0; r == 0 && i < n; i++) {
            check_pod(pods[i]);
            kube_pod_free(pods[i]);
        }
        free(pods);
        free(rv);
    } else if (mode == 'W') {
        struct kube_watch_event ev = {0};
        int r = kube_watch_event_parse(s, size, &ev, err, sizeof(err));
        if (r != 0 && r != -EINVAL && r != -ENOMEM)
            abort();
        if (r == 0) {
            if (ev.type != KUBE_WATCH_ERROR && ev.type != KUBE_WATCH_BOOKMARK && !ev.pod &&
                !ev.is_skipped)
                abort();
            if (ev.is_skipped && ev.pod)
                abort();
            if (ev.pod)
                check_pod(ev.pod);
            kube_watch_event_clear(&ev);
        } else if (ev.pod || ev.resource_version) {
            abort();
        }
    } else if (mode == 'Q') {
        int64_t v = 42;
        int r = kube_quantity_parse_milli(s, &v);
        if (r != 0 && r != -EINVAL && r != -ERANGE)
            abort();
        if (r < 0 && v != 42)
            abort();
    }
    free(s);
    return 0;
}
