/* dp-wire.h — the protobuf side of the provider seam: turns the kubelet's
 * DevicePlugin messages into provider calls (provider.h) and the answers back
 * into messages. Holds the checks every mode shares: request caps (no more
 * IDs or containers than the provider has devices, refused before any ID is
 * looked at), unknown, unhealthy and duplicate IDs (hashed lookups through the
 * provider's find, a duplicate check with no clearing and no allocation).
 *
 * One acceld_wire per served resource; it keeps the packed device list for
 * the provider's current generation and the buffers Allocate reuses (no
 * allocation on the Allocate path once warm).
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "deviceplugin.pb-c.h"
#include "provider.h"

struct acceld_wire;

int acceld_wire_new(const struct acceld_provider *prov, struct acceld_wire **ret);
struct acceld_wire *acceld_wire_free(struct acceld_wire *w);

/* The packed ListAndWatchResponse for the provider's current generation
 * (packed once per generation). Borrowed until the list changes. 0 or -ENOMEM. */
int acceld_wire_list_bytes(struct acceld_wire *w, const uint8_t **ret_data, size_t *ret_len);

/* Allocate. *ret_resp lives in w's reused buffer and borrows from the
 * provider: valid until the next acceld_wire_allocate or a provider change;
 * pack it before. 0, -EINVAL (message in err: unknown, unhealthy or repeated
 * IDs, too many IDs, or the provider's refusal), -ENOMEM. */
int acceld_wire_allocate(struct acceld_wire *w, const V1beta1__AllocateRequest *req,
                         V1beta1__AllocateResponse **ret_resp, char *err, size_t errlen);

/* GetPreferredAllocation. *ret_resp borrows strings from the provider and
 * req: free it (acceld_wire_prefer_free) before either goes away. 0, -EINVAL
 * with a message, -ENOMEM, -ENOTSUP (the provider offers none). */
int acceld_wire_prefer(struct acceld_wire *w, const V1beta1__PreferredAllocationRequest *req,
                       V1beta1__PreferredAllocationResponse **ret_resp, char *err, size_t errlen);
void acceld_wire_prefer_free(V1beta1__PreferredAllocationResponse *resp);
