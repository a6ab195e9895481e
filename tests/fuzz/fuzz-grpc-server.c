/* fuzz-grpc-server — arbitrary bytes as the input of one server connection
 * (no socket: nghttp2 mem_recv through grpc_server_mem_conn_feed), with the
 * DevicePlugin methods registered with their request decoders, so the HTTP/2
 * layer, our header checks, the message framing and protobuf-c unpacking all
 * see fuzzed input. Handlers answer like a plugin would (including packing a
 * reply built from the decoded request). The first input byte picks how the
 * rest is split into reads, to exercise reassembly across chunks. */
#include "deviceplugin.pb-c.h"
#include "grpc-internal.h"

#include <stdlib.h>
#include <string.h>

static void reply_empty(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    const ProtobufCMessageDescriptor *resp = ud;
    /* Every response type here is valid with all fields at their defaults. */
    ProtobufCMessage *m = calloc(1, resp->sizeof_message);
    if (!m) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, NULL);
        return;
    }
    resp->message_init(m);
    grpc_call_reply_msg(call, m);
    free(m);
}

static void list_and_watch(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    V1beta1__Device dev = V1BETA1__DEVICE__INIT, *pdev = &dev;
    dev.id = "GPU-fuzz";
    dev.health = "Healthy";
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    resp.n_devices = 1;
    resp.devices = &pdev;
    grpc_call_send_msg(call, &resp.base);
    grpc_call_send_msg(call, &resp.base);
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void allocate(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    const V1beta1__AllocateRequest *ar = (const V1beta1__AllocateRequest *)req->msg;
    size_t n = ar->n_container_requests;
    if (n > 64) {
        grpc_call_finishf(call, GRPC_STATUS_INVALID_ARGUMENT, "%zu containers", n);
        return;
    }
    V1beta1__ContainerAllocateResponse cr[64], *pcr[64];
    V1beta1__CDIDevice cdi[64], *pcdi[64];
    for (size_t i = 0; i < n; i++) {
        v1beta1__container_allocate_response__init(&cr[i]);
        v1beta1__cdidevice__init(&cdi[i]);
        const V1beta1__ContainerAllocateRequest *q = ar->container_requests[i];
        cdi[i].name = q->n_devices_ids ? q->devices_ids[0] : "";
        pcdi[i] = &cdi[i];
        cr[i].n_cdi_devices = 1;
        cr[i].cdi_devices = &pcdi[i];
        pcr[i] = &cr[i];
    }
    V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
    resp.n_container_responses = n;
    resp.container_responses = pcr;
    grpc_call_reply_msg(call, &resp.base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ev_loop *loop;
    struct grpc_server *server;
    struct grpc_server_conn *conn;
    if (ev_loop_new(&loop) < 0)
        return 0;
    if (grpc_server_new(loop, NULL, &server) < 0) {
        ev_loop_free(loop);
        return 0;
    }
    grpc_server_add_method(server, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                           GRPC_METHOD_UNARY, &v1beta1__empty__descriptor, reply_empty,
                           (void *)&v1beta1__device_plugin_options__descriptor);
    grpc_server_add_method(server, "/v1beta1.DevicePlugin/ListAndWatch",
                           GRPC_METHOD_SERVER_STREAMING, &v1beta1__empty__descriptor,
                           list_and_watch, NULL);
    grpc_server_add_method(server, "/v1beta1.DevicePlugin/GetPreferredAllocation",
                           GRPC_METHOD_UNARY, &v1beta1__preferred_allocation_request__descriptor,
                           reply_empty,
                           (void *)&v1beta1__preferred_allocation_response__descriptor);
    grpc_server_add_method(server, "/v1beta1.DevicePlugin/Allocate", GRPC_METHOD_UNARY,
                           &v1beta1__allocate_request__descriptor, allocate, NULL);
    grpc_server_add_method(server, "/v1beta1.DevicePlugin/PreStartContainer", GRPC_METHOD_UNARY,
                           &v1beta1__pre_start_container_request__descriptor, reply_empty,
                           (void *)&v1beta1__pre_start_container_response__descriptor);
    grpc_server_add_method(server, "/v1beta1.Registration/Register", GRPC_METHOD_UNARY,
                           &v1beta1__register_request__descriptor, reply_empty,
                           (void *)&v1beta1__empty__descriptor);
    if (grpc_server_mem_conn_new(server, NULL, NULL, &conn) == 0) {
        size_t chunk = size > 0 ? (size_t)data[0] * 7 + 1 : 1;
        if (size > 0) {
            data++;
            size--;
        }
        int r = 0;
        while (r == 0 && size > 0) {
            size_t n = chunk < size ? chunk : size;
            r = grpc_server_mem_conn_feed(conn, data, n);
            data += n;
            size -= n;
        }
        grpc_server_mem_conn_close(conn);
    }
    grpc_server_free(server);
    ev_loop_free(loop);
    return 0;
}
