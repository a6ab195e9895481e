/* fake-podresources — the kubelet's pod-resources v1 List for tests, on our gRPC server:
 * serves SOCKET and answers List with one container per argument
 * NS/POD/CONTAINER=[RESOURCE@]DEVICE_ID[,DEVICE_ID...] (each argument its own pod entry, as a
 * kubelet lists two pods of one name in two namespaces; RESOURCE defaults to nvidia.com/gpu),
 * and GetAllocatableResources with one entry per argument alloc:RESOURCE=DEVICE_ID[,...].
 * Prints "ready" once listening and runs until stdin closes. Not a test itself.
 * Usage: fake-podresources SOCKET ARG... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "evloop.h"
#include "grpc.h"
#include "podresources.pb-c.h"

#define MAX 256
#define MAX_IDS 4096

static V1__ListPodResourcesResponse resp = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
static V1__PodResources pods[MAX], *pod_ptrs[MAX];
static V1__ContainerResources cts[MAX], *ct_ptrs[MAX];
static V1__ContainerDevices devs[MAX], *dev_ptrs[MAX];
static char *ids[MAX_IDS];
static size_t n_ids;
static V1__AllocatableResourcesResponse alloc = V1__ALLOCATABLE_RESOURCES_RESPONSE__INIT;
static V1__ContainerDevices alloc_devs[MAX], *alloc_ptrs[MAX];

/* Splits "a,b,c" in place into ids[]; returns the first or NULL when ids[] is full. */
static char **split_ids(char *list, size_t *ret_n)
{
    char **first = &ids[n_ids];
    *ret_n = 0;
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        if (n_ids == MAX_IDS)
            return NULL;
        ids[n_ids++] = t;
        (*ret_n)++;
    }
    return first;
}

static void on_alloc(struct grpc_call *call, const struct grpc_request *req, void *user_data)
{
    grpc_call_reply_msg(call, &alloc.base);
}

static void on_list(struct grpc_call *call, const struct grpc_request *req, void *user_data)
{
    grpc_call_reply_msg(call, &resp.base);
}

static void on_stdin(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    char b[64];
    if (read(fd, b, sizeof(b)) <= 0)
        ev_loop_quit(loop);
}

int main(int argc, char **argv)
{
    struct ev_loop *loop;
    struct grpc_server *srv;

    if (argc < 2 || argc - 2 > MAX) {
        fprintf(stderr, "usage: fake-podresources SOCKET NS/POD/CONTAINER=DEVICE_ID...\n");
        return 2;
    }
    resp.pod_resources = pod_ptrs;
    alloc.devices = alloc_ptrs;
    for (int a = 2; a < argc; a++) {
        int i = a - 2;
        if (strncmp(argv[a], "alloc:", 6) == 0) {
            char *res = argv[a] + 6, *list = strchr(res, '=');
            V1__ContainerDevices *d = &alloc_devs[alloc.n_devices];
            if (!list) {
                fprintf(stderr, "fake-podresources: bad '%s'\n", argv[a]);
                return 2;
            }
            *list++ = '\0';
            v1__container_devices__init(d);
            d->resource_name = res;
            if (!(d->device_ids = split_ids(list, &d->n_device_ids)))
                return 2;
            alloc_ptrs[alloc.n_devices++] = d;
            continue;
        }
        char *ns = argv[a], *pod = strchr(ns, '/'), *ct = pod ? strchr(pod + 1, '/') : NULL;
        char *id = ct ? strchr(ct, '=') : NULL;
        if (!id) {
            fprintf(stderr, "fake-podresources: bad '%s'\n", argv[a]);
            return 2;
        }
        *pod++ = '\0', *ct++ = '\0', *id++ = '\0';
        v1__pod_resources__init(&pods[i]);
        v1__container_resources__init(&cts[i]);
        v1__container_devices__init(&devs[i]);
        pods[i].namespace_ = ns, pods[i].name = pod;
        cts[i].name = ct;
        char *at = strchr(id, '@');
        devs[i].resource_name = at ? id : "nvidia.com/gpu";
        if (at)
            *at = '\0', id = at + 1;
        if (!(devs[i].device_ids = split_ids(id, &devs[i].n_device_ids)))
            return 2;
        dev_ptrs[i] = &devs[i];
        cts[i].n_devices = 1, cts[i].devices = &dev_ptrs[i];
        ct_ptrs[i] = &cts[i];
        pods[i].n_containers = 1, pods[i].containers = &ct_ptrs[i];
        pod_ptrs[resp.n_pod_resources++] = &pods[i];
    }
    if (ev_loop_new(&loop) < 0 || grpc_server_new(loop, NULL, &srv) < 0 ||
        grpc_server_add_method(srv, "/v1.PodResourcesLister/List", GRPC_METHOD_UNARY,
                               &v1__list_pod_resources_request__descriptor, on_list, NULL) < 0 ||
        grpc_server_add_method(srv, "/v1.PodResourcesLister/GetAllocatableResources",
                               GRPC_METHOD_UNARY, &v1__allocatable_resources_request__descriptor,
                               on_alloc, NULL) < 0 ||
        grpc_server_listen_unix(srv, argv[1]) < 0 ||
        ev_loop_add_io(loop, 0, EPOLLIN, on_stdin, NULL) < 0) {
        fprintf(stderr, "fake-podresources: cannot serve %s\n", argv[1]);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    ev_loop_run(loop);
    ev_loop_del_io(loop, 0);
    grpc_server_free(srv);
    ev_loop_free(loop);
    return 0;
}
