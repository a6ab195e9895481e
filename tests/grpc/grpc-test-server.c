/* grpc-test-server — our gRPC server with canned, deterministic behaviour, for
 * tests that use an independent client (python3-grpcio) and for raw-socket
 * bad-input tests.
 *
 *   grpc-test-server SOCKET [--max-streams N]
 *
 * Prints "READY" on stdout once listening; exits on SIGTERM/SIGINT or when
 * stdin reaches EOF (so it never outlives the test that started it).
 *
 * Services:
 *   /v1beta1.DevicePlugin/...  two fake GPUs "GPU-0" (NUMA 0) and "GPU-1" (NUMA 1):
 *     GetDevicePluginOptions, ListAndWatch (the list, then held open),
 *     GetPreferredAllocation, Allocate (unknown IDs → INVALID_ARGUMENT),
 *     PreStartContainer.
 *   /accel.test.Echo/Unary   echoes the request bytes
 *   /accel.test.Echo/Count   request "N": N messages "msg-<i>", then OK "counted N"
 *   /accel.test.Echo/Hold    one "hello", then held open until cancelled
 *   /accel.test.Echo/Big     request "N": one reply of N bytes
 *   /accel.test.Echo/Stats   "held=H cancelled=C conns=K"
 *   /accel.test.Echo/Release finishes every held call with OK */
#include "deviceplugin.pb-c.h"
#include "grpc.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define MAX_HELD 4096

static struct {
    struct ev_loop *loop;
    struct grpc_server *server;
    struct grpc_call *held[MAX_HELD];
    int n_held;
    int cancelled;
} g;

static void hold_drop(struct grpc_call *call)
{
    for (int i = 0; i < g.n_held; i++) {
        if (g.held[i] == call) {
            g.held[i] = g.held[--g.n_held];
            return;
        }
    }
}

static void on_cancel(struct grpc_call *call, void *ud)
{
    g.cancelled++;
    hold_drop(call);
    grpc_call_finish(call, GRPC_STATUS_CANCELLED, NULL);
}

static void hold(struct grpc_call *call)
{
    if (g.n_held == MAX_HELD) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "test server: too many held");
        return;
    }
    grpc_call_set_cancel_cb(call, on_cancel, NULL);
    g.held[g.n_held++] = call;
}

static long parse_n(const struct grpc_request *req)
{
    char buf[24];
    if (req->len == 0 || req->len >= sizeof(buf))
        return -1;
    memcpy(buf, req->data, req->len);
    buf[req->len] = 0;
    uint64_t v;
    return parse_u64(buf, &v) == 0 && v < (1ull << 31) ? (long)v : -1;
}

/* ------------------------------------------------------------ echo service */

static void echo_unary(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    grpc_call_reply(call, req->data, req->len);
}

static void echo_count(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    long n = parse_n(req);
    if (n < 0) {
        grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "want a count");
        return;
    }
    for (long i = 0; i < n; i++) {
        char m[32];
        int len = snprintf(m, sizeof(m), "msg-%ld", i);
        if (grpc_call_send(call, (const uint8_t *)m, (size_t)len) < 0)
            break;
    }
    grpc_call_finishf(call, GRPC_STATUS_OK, "counted %ld", n);
}

static void echo_hold(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    grpc_call_send(call, (const uint8_t *)"hello", 5);
    hold(call);
}

static void echo_big(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    long n = parse_n(req);
    if (n < 0) {
        grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "want a size");
        return;
    }
    uint8_t *buf = calloc(1, (size_t)n + 1);
    if (!buf) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "no memory");
        return;
    }
    memset(buf, 'b', (size_t)n);
    grpc_call_reply(call, buf, (size_t)n);
    free(buf);
}

static void echo_stats(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    char m[128];
    int len = snprintf(m, sizeof(m), "held=%d cancelled=%d conns=%u", g.n_held, g.cancelled,
                       grpc_server_connection_count(g.server));
    grpc_call_reply(call, (const uint8_t *)m, (size_t)len);
}

static void echo_release(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    int n = g.n_held;
    while (g.n_held > 0)
        grpc_call_finish(g.held[--g.n_held], GRPC_STATUS_OK, "released");
    char m[32];
    int len = snprintf(m, sizeof(m), "released=%d", n);
    grpc_call_reply(call, (const uint8_t *)m, (size_t)len);
}

/* ---------------------------------------------------- device plugin API */

static const char *const gpu_ids[] = {"GPU-0", "GPU-1"};

static bool known_gpu(const char *id)
{
    for (size_t i = 0; i < ARRAY_SIZE(gpu_ids); i++)
        if (strcmp(id, gpu_ids[i]) == 0)
            return true;
    return false;
}

static void dp_options(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.get_preferred_allocation_available = true;
    grpc_call_reply_msg(call, &o.base);
}

static void dp_list_and_watch(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    V1beta1__Device devs[2], *pdevs[2];
    V1beta1__TopologyInfo topo[2];
    V1beta1__NUMANode node[2], *pnode[2];
    for (int i = 0; i < 2; i++) {
        v1beta1__device__init(&devs[i]);
        v1beta1__topology_info__init(&topo[i]);
        v1beta1__numanode__init(&node[i]);
        node[i].id = i;
        pnode[i] = &node[i];
        topo[i].n_nodes = 1;
        topo[i].nodes = &pnode[i];
        devs[i].id = (char *)gpu_ids[i];
        devs[i].health = "Healthy";
        devs[i].topology = &topo[i];
        pdevs[i] = &devs[i];
    }
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    resp.n_devices = 2;
    resp.devices = pdevs;
    grpc_call_send_msg(call, &resp.base);
    hold(call);
}

static void dp_preferred(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    const V1beta1__PreferredAllocationRequest *pr =
        (const V1beta1__PreferredAllocationRequest *)req->msg;
    size_t n = pr->n_container_requests;
    V1beta1__ContainerPreferredAllocationResponse *cr = calloc(n + 1, sizeof(*cr));
    V1beta1__ContainerPreferredAllocationResponse **pcr = calloc(n + 1, sizeof(*pcr));
    char ***ids = calloc(n + 1, sizeof(*ids));
    for (size_t i = 0; i < n; i++) {
        const V1beta1__ContainerPreferredAllocationRequest *q = pr->container_requests[i];
        v1beta1__container_preferred_allocation_response__init(&cr[i]);
        size_t want = q->allocation_size > 0 ? (size_t)q->allocation_size : 0;
        ids[i] = calloc(want + 1, sizeof(char *));
        size_t k = 0;
        for (size_t j = 0; j < q->n_must_include_deviceids && k < want; j++)
            ids[i][k++] = q->must_include_deviceids[j];
        for (size_t j = 0; j < q->n_available_deviceids && k < want; j++) {
            bool dup = false;
            for (size_t m = 0; m < k; m++)
                dup |= strcmp(ids[i][m], q->available_deviceids[j]) == 0;
            if (!dup)
                ids[i][k++] = q->available_deviceids[j];
        }
        cr[i].n_deviceids = k;
        cr[i].deviceids = ids[i];
        pcr[i] = &cr[i];
    }
    V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    resp.n_container_responses = n;
    resp.container_responses = pcr;
    grpc_call_reply_msg(call, &resp.base);
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    free(pcr);
    free(cr);
}

static void dp_allocate(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    const V1beta1__AllocateRequest *ar = (const V1beta1__AllocateRequest *)req->msg;
    for (size_t i = 0; i < ar->n_container_requests; i++) {
        const V1beta1__ContainerAllocateRequest *q = ar->container_requests[i];
        for (size_t j = 0; j < q->n_devices_ids; j++) {
            if (!known_gpu(q->devices_ids[j])) {
                grpc_call_finishf(call, GRPC_STATUS_INVALID_ARGUMENT, "unknown device %s",
                                  q->devices_ids[j]);
                return;
            }
        }
    }
    size_t n = ar->n_container_requests;
    V1beta1__ContainerAllocateResponse *cr = calloc(n + 1, sizeof(*cr));
    V1beta1__ContainerAllocateResponse **pcr = calloc(n + 1, sizeof(*pcr));
    V1beta1__ContainerAllocateResponse__EnvsEntry *env = calloc(n + 1, sizeof(*env));
    V1beta1__ContainerAllocateResponse__EnvsEntry **penv = calloc(n + 1, sizeof(*penv));
    char **vals = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const V1beta1__ContainerAllocateRequest *q = ar->container_requests[i];
        size_t len = 1;
        for (size_t j = 0; j < q->n_devices_ids; j++)
            len += strlen(q->devices_ids[j]) + 1;
        vals[i] = calloc(1, len);
        for (size_t j = 0; j < q->n_devices_ids; j++) {
            if (j)
                strcat(vals[i], ",");
            strcat(vals[i], q->devices_ids[j]);
        }
        v1beta1__container_allocate_response__envs_entry__init(&env[i]);
        env[i].key = "NVIDIA_VISIBLE_DEVICES";
        env[i].value = vals[i];
        penv[i] = &env[i];
        v1beta1__container_allocate_response__init(&cr[i]);
        cr[i].n_envs = 1;
        cr[i].envs = &penv[i];
        pcr[i] = &cr[i];
    }
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    resp.n_container_responses = n;
    resp.container_responses = pcr;
    grpc_call_reply_msg(call, &resp.base);
    for (size_t i = 0; i < n; i++)
        free(vals[i]);
    free(vals);
    free(penv);
    free(env);
    free(pcr);
    free(cr);
}

static void dp_prestart(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    V1beta1__PreStartContainerResponse resp = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    grpc_call_reply_msg(call, &resp.base);
}

/* ------------------------------------------------------------------ main */

static void on_signal(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    struct signalfd_siginfo si;
    if (read(fd, &si, sizeof(si)) > 0)
        ev_loop_quit(loop);
}

static void on_stdin(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    char buf[256];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) {
        ev_loop_del_io(loop, fd);
        ev_loop_quit(loop);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SOCKET [--max-streams N]\n", argv[0]);
        return 2;
    }
    struct grpc_limits lim = {0};
    if (argc == 4 && strcmp(argv[2], "--max-streams") == 0)
        lim.max_concurrent_streams = (uint32_t)atoi(argv[3]);
    static const struct {
        const char *path;
        enum grpc_method_kind kind;
        const ProtobufCMessageDescriptor *desc;
        grpc_handler_fn fn;
    } methods[] = {
        {"/accel.test.Echo/Unary", GRPC_METHOD_UNARY, NULL, echo_unary},
        {"/accel.test.Echo/Count", GRPC_METHOD_SERVER_STREAMING, NULL, echo_count},
        {"/accel.test.Echo/Hold", GRPC_METHOD_SERVER_STREAMING, NULL, echo_hold},
        {"/accel.test.Echo/Big", GRPC_METHOD_UNARY, NULL, echo_big},
        {"/accel.test.Echo/Stats", GRPC_METHOD_UNARY, NULL, echo_stats},
        {"/accel.test.Echo/Release", GRPC_METHOD_UNARY, NULL, echo_release},
        {"/v1beta1.DevicePlugin/GetDevicePluginOptions", GRPC_METHOD_UNARY,
         &v1beta1__empty__descriptor, dp_options},
        {"/v1beta1.DevicePlugin/ListAndWatch", GRPC_METHOD_SERVER_STREAMING,
         &v1beta1__empty__descriptor, dp_list_and_watch},
        {"/v1beta1.DevicePlugin/GetPreferredAllocation", GRPC_METHOD_UNARY,
         &v1beta1__preferred_allocation_request__descriptor, dp_preferred},
        {"/v1beta1.DevicePlugin/Allocate", GRPC_METHOD_UNARY,
         &v1beta1__allocate_request__descriptor, dp_allocate},
        {"/v1beta1.DevicePlugin/PreStartContainer", GRPC_METHOD_UNARY,
         &v1beta1__pre_start_container_request__descriptor, dp_prestart},
    };
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    int r = ev_loop_new(&g.loop);
    if (r == 0)
        r = grpc_server_new(g.loop, &lim, &g.server);
    for (size_t i = 0; r == 0 && i < ARRAY_SIZE(methods); i++)
        r = grpc_server_add_method(g.server, methods[i].path, methods[i].kind, methods[i].desc,
                                   methods[i].fn, NULL);
    if (r == 0)
        r = grpc_server_listen_unix(g.server, argv[1]);
    if (r == 0 && sfd >= 0)
        r = ev_loop_add_io(g.loop, sfd, EPOLLIN, on_signal, NULL);
    /* stdin may be a file or /dev/null (not pollable): then only signals stop us. */
    if (r == 0 && ev_loop_add_io(g.loop, 0, EPOLLIN, on_stdin, NULL) == -EPERM)
        r = 0;
    if (r < 0) {
        fprintf(stderr, "grpc-test-server: %s\n", strerror(-r));
        return 1;
    }
    printf("READY\n");
    fflush(stdout);
    r = ev_loop_run(g.loop);
    /* Held calls are finished by their cancel callbacks when the server goes. */
    grpc_server_free(g.server);
    ev_loop_free(g.loop);
    if (sfd >= 0)
        close(sfd);
    return r < 0 ? 1 : 0;
}
