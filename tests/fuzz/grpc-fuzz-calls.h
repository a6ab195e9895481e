/* grpc-fuzz-calls.h — the calls fuzz-grpc-client opens before feeding input,
 * shared with gen-grpc-corpus so that the seed responses match the stream IDs:
 * 1 unary Allocate, 3 server-streaming ListAndWatch, 5 unary Register. */
#pragma once

#include "deviceplugin.pb-c.h"
#include "grpc.h"

static inline void grpc_fuzz_start_calls(struct grpc_client *c, grpc_client_done_fn done,
                                         grpc_client_msg_fn on_msg)
{
    char *ids[] = {"GPU-0"};
    V1beta1__ContainerAllocateRequest creq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest *pcreq = &creq;
    creq.n_devices_ids = 1;
    creq.devices_ids = ids;
    V1beta1__AllocateRequest areq = V1BETA1__ALLOCATE_REQUEST__INIT;
    areq.n_container_requests = 1;
    areq.container_requests = &pcreq;
    V1beta1__RegisterRequest rreq = V1BETA1__REGISTER_REQUEST__INIT;
    rreq.version = "v1beta1";
    rreq.endpoint = "accel.sock";
    rreq.resource_name = "nvidia.com/gpu";
    grpc_client_unary_msg(c, "/v1beta1.DevicePlugin/Allocate", &areq.base, 0, done,
                          (void *)&v1beta1__allocate_response__descriptor, NULL);
    grpc_client_stream(c, "/v1beta1.DevicePlugin/ListAndWatch", NULL, 0, 0, on_msg, done, NULL,
                       NULL);
    grpc_client_unary_msg(c, "/v1beta1.Registration/Register", &rreq.base, 0, done,
                          (void *)&v1beta1__empty__descriptor, NULL);
}
