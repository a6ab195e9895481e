/*
 * podres.c — the kubelet's pod-resources List, decoded into a (GPU, container) table
 * (podres.h). Message layout: proto/podresources/v1/api.proto (the kubelet's API,
 * k8s.io/kubelet/pkg/apis/podresources/v1).
 */
#include "podres.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grpc.h"
#include "podresources.pb-c.h"

#define LIST_METHOD "/v1.PodResourcesLister/List"

/* Copies src (NULL = "") of length n into dst; 0, or -1 when it does not fit. */
static int copy(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
    return 0;
}

int podres_same_container(const struct podres_entry *a, const struct podres_entry *b)
{
    return !strcmp(a->namespace_, b->namespace_) && !strcmp(a->pod, b->pod) &&
           !strcmp(a->container, b->container);
}

/* acceld's vGPU resources (its default names): their device IDs are units, "<uuid>-<k>"
 * (src/modes/vgpu.c), one per core percent or memory unit, hundreds per container. They name
 * no GPU and say nothing the exporter uses (a vGPU container's GPU and cores come from
 * acceld's vgpu/status.json, cost.c), and kept they would fill the table and push out the
 * holders of GPUs listed after them. */
static bool vgpu_units(const char *resource)
{
    return resource && (!strcmp(resource, "tencent.com/vcuda-core") ||
                        !strcmp(resource, "tencent.com/vcuda-memory"));
}

static void add(struct podres *pr, const char *id, const char *resource,
                const V1__PodResources *pod, const V1__ContainerResources *ct)
{
    struct podres_entry *x;
    const char *sep;

    if (!id || pr->n == PODRES_MAX || vgpu_units(resource))
        return;
    x = &pr->e[pr->n];
    sep = strstr(id, "::");
    if (copy(x->gpu_uuid, sizeof(x->gpu_uuid), id, sep ? (size_t)(sep - id) : strlen(id)) < 0 ||
        !x->gpu_uuid[0] ||
        copy(x->namespace_, sizeof(x->namespace_), pod->namespace_,
             pod->namespace_ ? strlen(pod->namespace_) : 0) < 0 ||
        copy(x->pod, sizeof(x->pod), pod->name, pod->name ? strlen(pod->name) : 0) < 0 ||
        copy(x->container, sizeof(x->container), ct->name, ct->name ? strlen(ct->name) : 0) < 0 ||
        copy(x->resource, sizeof(x->resource), resource, resource ? strlen(resource) : 0) < 0)
        return;
    /* one container holding two replicas of one GPU is still one holder (counting both) */
    for (size_t k = 0; k < pr->n; k++)
        if (!strcmp(pr->e[k].gpu_uuid, x->gpu_uuid) && podres_same_container(&pr->e[k], x)) {
            pr->e[k].ids++;
            return;
        }
    x->ids = 1;
    x->replica = sep != NULL;
    pr->n++;
}

int podres_parse(const uint8_t *msg, size_t len, struct podres *ret)
{
    V1__ListPodResourcesResponse *r = v1__list_pod_resources_response__unpack(NULL, len, msg);

    if (!r)
        return -EPROTO;
    ret->n = 0;
    for (size_t p = 0; p < r->n_pod_resources; p++) {
        const V1__PodResources *pod = r->pod_resources[p];
        for (size_t c = 0; c < pod->n_containers; c++) {
            const V1__ContainerResources *ct = pod->containers[c];
            for (size_t d = 0; d < ct->n_devices; d++)
                for (size_t i = 0; i < ct->devices[d]->n_device_ids; i++)
                    add(ret, ct->devices[d]->device_ids[i], ct->devices[d]->resource_name, pod, ct);
        }
    }
    v1__list_pod_resources_response__free_unpacked(r, NULL);
    return 0;
}

int podres_list(const char *socket_path, unsigned int timeout_ms, struct podres *ret)
{
    V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
    uint8_t buf[16];
    size_t len = v1__list_pod_resources_request__pack(&req, buf);
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    char *message = NULL;
    int status = -1, r;

    r = grpc_blocking_unary(socket_path, LIST_METHOD, buf, len, (uint64_t)timeout_ms * 1000000u,
                            &status, &message, &resp, &resp_len);
    if (r < 0)
        return r;
    if (status != 0)
        r = -EIO;
    else
        r = podres_parse(resp ? resp : buf, resp_len, ret);
    free(message);
    free(resp);
    return r;
}

size_t podres_holders(const struct podres *pr, const char *gpu_uuid,
                      const struct podres_entry **ret_first)
{
    size_t n = 0;

    if (ret_first)
        *ret_first = NULL;
    for (size_t k = 0; k < pr->n; k++)
        if (!strcmp(pr->e[k].gpu_uuid, gpu_uuid) && n++ == 0 && ret_first)
            *ret_first = &pr->e[k];
    return n;
}
