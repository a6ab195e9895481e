/* gen-grpc-corpus — writes the seed corpora of fuzz-grpc-server and
 * fuzz-grpc-client under DIR/grpc-server and DIR/grpc-client.
 *   grpc-server: what a client (nghttp2 in client mode) sends for each
 *     DevicePlugin method with a valid request, plus bad inputs the server
 *     must survive.
 *   grpc-client: what our server answers to the calls fuzz-grpc-client opens
 *     (grpc-fuzz-calls.h), successful and failing.
 * Each file is one chunk-size byte (see the targets) followed by the bytes of
 * one direction of a connection.   gen-grpc-corpus DIR */
#include "deviceplugin.pb-c.h"
#include "grpc-fuzz-calls.h"
#include "grpc-internal.h"

#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct out {
    struct grpc_buf buf;
};

struct body {
    const uint8_t *p;
    size_t len;
    size_t step; /* bytes per DATA frame (0: as much as allowed) */
};

static ssize_t body_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    struct body *b = src->ptr;
    size_t n = b->len < len ? b->len : len;
    if (b->step && n > b->step)
        n = b->step;
    if (n)
        memcpy(buf, b->p, n);
    b->p += n;
    b->len -= n;
    if (b->len == 0)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static nghttp2_session *session_new(void)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_session *s;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_client_new(&s, cbs, NULL);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0);
    return s;
}

/* Queues one request; body is the DATA payload verbatim. */
static void request(nghttp2_session *s, const char *path, struct body *b)
{
    nghttp2_nv nva[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
        {(uint8_t *)":authority", (uint8_t *)"/var/lib/kubelet/device-plugins/accel.sock", 10, 42,
         0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
        {(uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0},
    };
    nghttp2_data_provider prd = {.source.ptr = b, .read_callback = body_read};
    nghttp2_submit_request(s, NULL, nva, sizeof(nva) / sizeof(nva[0]), &prd, NULL);
}

static void drain(nghttp2_session *s, struct grpc_buf *out)
{
    const uint8_t *data;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(s, &data)) > 0)
        grpc_buf_append(out, data, (size_t)n);
}

static void save(const char *dir, const char *name, uint8_t chunk, const struct grpc_buf *b)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(&chunk, 1, 1, f);
    fwrite(grpc_buf_head(b), 1, b->len, f);
    fclose(f);
}

/* A prefixed message from a packed protobuf. */
static size_t framed(const ProtobufCMessage *m, uint8_t *out)
{
    size_t len = protobuf_c_message_pack(m, out + 5);
    grpc_msg_prefix(out, (uint32_t)len);
    return len + 5;
}

static void one(const char *dir, const char *name, uint8_t chunk, const char *path,
                const uint8_t *wire, size_t len, size_t step)
{
    nghttp2_session *s = session_new();
    struct grpc_buf out = {0};
    struct body b = {wire, len, step};
    request(s, path, &b);
    drain(s, &out);
    save(dir, name, chunk, &out);
    grpc_buf_clear(&out);
    nghttp2_session_del(s);
}

/* ------------------------------------------------- client-side seeds */

static bool fail_mode;

static void srv_allocate(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    if (fail_mode) {
        grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "unknown device GPU-9: 100% sure");
        return;
    }
    V1beta1__ContainerAllocateResponse__EnvsEntry env =
        V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
    V1beta1__ContainerAllocateResponse__EnvsEntry *penv = &env;
    env.key = "NVIDIA_VISIBLE_DEVICES";
    env.value = "GPU-0";
    V1beta1__DeviceSpec spec = V1BETA1__DEVICE_SPEC__INIT, *pspec = &spec;
    spec.container_path = spec.host_path = "/dev/nvidia0";
    spec.permissions = "rw";
    V1beta1__CDIDevice cdi = V1BETA1__CDIDEVICE__INIT, *pcdi = &cdi;
    cdi.name = "nvidia.com/gpu=GPU-0";
    V1beta1__ContainerAllocateResponse cr = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT, *pcr = &cr;
    cr.n_envs = 1;
    cr.envs = &penv;
    cr.n_devices = 1;
    cr.devices = &pspec;
    cr.n_cdi_devices = 1;
    cr.cdi_devices = &pcdi;
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    resp.n_container_responses = 1;
    resp.container_responses = &pcr;
    grpc_call_reply_msg(call, &resp.base);
}

static void srv_list_and_watch(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    V1beta1__NUMANode node = V1BETA1__NUMANODE__INIT, *pnode = &node;
    V1beta1__TopologyInfo topo = V1BETA1__TOPOLOGY_INFO__INIT;
    topo.n_nodes = 1;
    topo.nodes = &pnode;
    V1beta1__Device dev = V1BETA1__DEVICE__INIT, *pdev = &dev;
    dev.id = "GPU-0";
    dev.health = "Healthy";
    dev.topology = &topo;
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    resp.n_devices = 1;
    resp.devices = &pdev;
    grpc_call_send_msg(call, &resp.base);
    dev.health = "Unhealthy";
    grpc_call_send_msg(call, &resp.base);
    grpc_call_finish(call, fail_mode ? GRPC_STATUS_UNAVAILABLE : GRPC_STATUS_OK, NULL);
}

static void srv_register(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    V1beta1__Empty e = V1BETA1__EMPTY__INIT;
    if (fail_mode)
        grpc_call_finish(call, GRPC_STATUS_UNIMPLEMENTED, "no registration here");
    else
        grpc_call_reply_msg(call, &e.base);
}

static void capture(const uint8_t *data, size_t len, void *ud)
{
    grpc_buf_append(ud, data, len);
}

static void ignore_done(int status, const char *message, const uint8_t *resp, size_t len, void *ud)
{
}

static void ignore_msg(const uint8_t *msg, size_t len, void *ud)
{
}

static void client_seed(const char *dir, const char *name, uint8_t chunk, bool fail)
{
    struct ev_loop *loop;
    struct grpc_client *c;
    struct grpc_server *s;
    struct grpc_server_conn *sc;
    struct grpc_buf to_server = {0}, to_client = {0};
    fail_mode = fail;
    ev_loop_new(&loop);
    grpc_server_new(loop, NULL, &s);
    grpc_server_add_method(s, "/v1beta1.DevicePlugin/Allocate", GRPC_METHOD_UNARY, NULL,
                           srv_allocate, NULL);
    grpc_server_add_method(s, "/v1beta1.DevicePlugin/ListAndWatch", GRPC_METHOD_SERVER_STREAMING,
                           NULL, srv_list_and_watch, NULL);
    grpc_server_add_method(s, "/v1beta1.Registration/Register", GRPC_METHOD_UNARY, NULL,
                           srv_register, NULL);
    grpc_client_mem_new(loop, NULL, capture, &to_server, &c);
    grpc_fuzz_start_calls(c, ignore_done, ignore_msg);
    grpc_server_mem_conn_new(s, capture, &to_client, &sc);
    grpc_server_mem_conn_feed(sc, grpc_buf_head(&to_server), to_server.len);
    save(dir, name, chunk, &to_client);
    grpc_server_mem_conn_close(sc);
    grpc_client_free(c);
    grpc_server_free(s);
    ev_loop_free(loop);
    grpc_buf_clear(&to_server);
    grpc_buf_clear(&to_client);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    char dir[1024], cdir[1024];
    snprintf(dir, sizeof(dir), "%s/grpc-server", argv[1]);
    snprintf(cdir, sizeof(cdir), "%s/grpc-client", argv[1]);
    mkdir(dir, 0755);
    mkdir(cdir, 0755);
    client_seed(cdir, "responses-ok", 0xff, false);
    client_seed(cdir, "responses-ok-split", 2, false);
    client_seed(cdir, "responses-errors", 0xff, true);
    uint8_t w[4096];
    size_t n;

    V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
    n = framed(&empty.base, w);
    one(dir, "options", 0xff, "/v1beta1.DevicePlugin/GetDevicePluginOptions", w, n, 0);
    one(dir, "list-and-watch", 0xff, "/v1beta1.DevicePlugin/ListAndWatch", w, n, 0);
    one(dir, "unknown-method", 0xff, "/v1beta1.DevicePlugin/Nope", w, n, 0);

    char *avail[] = {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, *must[] = {"GPU-2"};
    V1beta1__ContainerPreferredAllocationRequest
        cp = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT,
        *pcp = &cp;
    cp.n_available_deviceids = 4;
    cp.available_deviceids = avail;
    cp.n_must_include_deviceids = 1;
    cp.must_include_deviceids = must;
    cp.allocation_size = 2;
    V1beta1__PreferredAllocationRequest pr = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    pr.n_container_requests = 1;
    pr.container_requests = &pcp;
    n = framed(&pr.base, w);
    one(dir, "preferred", 0xff, "/v1beta1.DevicePlugin/GetPreferredAllocation", w, n, 0);

    V1beta1__ContainerAllocateRequest ca[2] = {V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT,
                                               V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT};
    V1beta1__ContainerAllocateRequest *pca[2] = {&ca[0], &ca[1]};
    ca[0].n_devices_ids = 2;
    ca[0].devices_ids = avail;
    ca[1].n_devices_ids = 1;
    ca[1].devices_ids = must;
    V1beta1__AllocateRequest ar = V1BETA1__ALLOCATE_REQUEST__INIT;
    ar.n_container_requests = 2;
    ar.container_requests = pca;
    n = framed(&ar.base, w);
    one(dir, "allocate", 0xff, "/v1beta1.DevicePlugin/Allocate", w, n, 0);
    /* The same request in 3-byte DATA frames, read 8 bytes at a time. */
    one(dir, "allocate-split", 1, "/v1beta1.DevicePlugin/Allocate", w, n, 3);

    V1beta1__PreStartContainerRequest ps = V1BETA1__PRE_START_CONTAINER_REQUEST__INIT;
    ps.n_devices_ids = 1;
    ps.devices_ids = must;
    n = framed(&ps.base, w);
    one(dir, "prestart", 0xff, "/v1beta1.DevicePlugin/PreStartContainer", w, n, 0);

    V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    opts.get_preferred_allocation_available = true;
    V1beta1__RegisterRequest rr = V1BETA1__REGISTER_REQUEST__INIT;
    rr.version = "v1beta1";
    rr.endpoint = "accel-gpu.sock";
    rr.resource_name = "nvidia.com/gpu";
    rr.options = &opts;
    n = framed(&rr.base, w);
    one(dir, "register", 0xff, "/v1beta1.Registration/Register", w, n, 0);

    const uint8_t bad_pb[] = {0, 0, 0, 0, 3, 0x0a, 0x05, 0x0a};
    one(dir, "allocate-malformed", 0xff, "/v1beta1.DevicePlugin/Allocate", bad_pb, sizeof(bad_pb),
        0);
    const uint8_t comp[] = {1, 0, 0, 0, 1, 0};
    one(dir, "compressed", 0xff, "/v1beta1.DevicePlugin/Allocate", comp, sizeof(comp), 0);
    const uint8_t big[] = {0, 0x7f, 0xff, 0xff, 0xff};
    one(dir, "oversize-prefix", 0xff, "/v1beta1.DevicePlugin/Allocate", big, sizeof(big), 0);
    const uint8_t trunc[] = {0, 0, 0, 0, 9, 0x0a};
    one(dir, "truncated-message", 0xff, "/v1beta1.DevicePlugin/Allocate", trunc, sizeof(trunc), 0);

    /* Several streams on one connection, plus PING and WINDOW_UPDATE. */
    {
        nghttp2_session *s = session_new();
        struct grpc_buf out = {0};
        uint8_t w1[256], w2[256];
        size_t n1 = framed(&empty.base, w1), n2 = framed(&ar.base, w2);
        struct body b1 = {w1, n1, 0}, b2 = {w2, n2, 0}, b3 = {w1, n1, 0};
        request(s, "/v1beta1.DevicePlugin/ListAndWatch", &b1);
        request(s, "/v1beta1.DevicePlugin/Allocate", &b2);
        request(s, "/v1beta1.DevicePlugin/GetDevicePluginOptions", &b3);
        nghttp2_submit_ping(s, NGHTTP2_FLAG_NONE, NULL);
        nghttp2_submit_window_update(s, NGHTTP2_FLAG_NONE, 0, 1 << 20);
        drain(s, &out);
        save(dir, "multi-stream", 0xff, &out);
        grpc_buf_clear(&out);
        nghttp2_session_del(s);
    }
    struct grpc_buf junk = {0};
    grpc_buf_append(&junk, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    save(dir, "garbage-preface", 0xff, &junk);
    grpc_buf_clear(&junk);
    return 0;
}
