/* fuzz-grpc-client — arbitrary bytes as what "the server" (the kubelet, for
 * acceld's Register call, or any plugin for accelctl) sends to our client,
 * with three calls open: unary Allocate (stream 1), server-streaming
 * ListAndWatch (stream 3) and unary Register (stream 5). Responses are
 * decoded with protobuf-c as the real callers do. No socket: the client's
 * memory connection. The first input byte picks the read chunk size. */
#include "deviceplugin.pb-c.h"
#include "grpc-fuzz-calls.h"
#include "grpc-internal.h"

#include <stdlib.h>

static void done_decode(int status, const char *message, const uint8_t *resp, size_t len, void *ud)
{
    const ProtobufCMessageDescriptor *desc = ud;
    if (resp && desc) {
        ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, resp);
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
    }
}

static void msg_decode(const uint8_t *msg, size_t len, void *ud)
{
    V1beta1__ListAndWatchResponse *m = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
    if (m)
        v1beta1__list_and_watch_response__free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ev_loop *loop;
    struct grpc_client *c;
    if (ev_loop_new(&loop) < 0)
        return 0;
    if (grpc_client_mem_new(loop, NULL, NULL, NULL, &c) < 0) {
        ev_loop_free(loop);
        return 0;
    }
    grpc_fuzz_start_calls(c, done_decode, msg_decode);

    size_t chunk = size > 0 ? (size_t)data[0] * 7 + 1 : 1;
    if (size > 0) {
        data++;
        size--;
    }
    int r = 0;
    while (r == 0 && size > 0) {
        size_t n = chunk < size ? chunk : size;
        r = grpc_client_mem_feed(c, data, n);
        data += n;
        size -= n;
    }
    grpc_client_free(c);
    ev_loop_free(loop);
    return 0;
}
