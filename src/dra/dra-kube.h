/* dra-kube.h — the DRA driver's side of the API server (src/kube's client on
 * the event loop): ResourceClaims read for NodePrepareResources (kubeclaim.c)
 * and the node's ResourceSlice published and reconciled (publish.c).
 *
 * Threads: the loop's thread only. Nothing here blocks: every request is a
 * kube_client_request whose answer comes back through the loop. */
#pragma once

#include "dra.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct kube_client;

/* A client for the API server named by the kubeconfig file (NULL or "":
 * the in-cluster service account). Returns 0 or -errno with why in err. */
int dra_kube_client_new(struct ev_loop *loop, const char *kubeconfig, struct kube_client **ret,
                        char *err, size_t errlen);

/* ------------------------------------------------------------ claims */

struct dra_kube_claims;

/* Reads ResourceClaims with GET /apis/resource.k8s.io/v1/namespaces/NS/
 * resourceclaims/NAME. A claim that is not there yet (404), not allocated
 * yet, has another uid, or an API server that does not answer is asked again
 * (100 ms doubling to 1 s) until wait_ns after the start; then the read
 * fails with a message saying which. client and loop are borrowed. */
int dra_kube_claims_new(struct ev_loop *loop, struct kube_client *client, uint64_t wait_ns,
                        struct dra_kube_claims **ret);
/* Cancels reads in flight (their done is not called). NULL ok; returns NULL. */
struct dra_kube_claims *dra_kube_claims_free(struct dra_kube_claims *k);
struct dra_claim_fetcher dra_kube_claims_fetcher(struct dra_kube_claims *k);

/* ------------------------------------------------------------ slices */

struct dra_publisher;

struct dra_publisher_stats {
    uint64_t syncs;          /* reconciliations finished with the server in step */
    uint64_t creates;        /* POSTs that succeeded */
    uint64_t updates;        /* PUTs that succeeded */
    uint64_t deletes;        /* stale slices deleted */
    uint64_t conflicts;      /* 409 answers (each followed by a fresh LIST) */
    uint64_t failures;       /* other failures (each followed by a backoff) */
    int64_t generation;      /* spec.pool.generation last written or found in step */
    uint64_t watch_events;   /* slice watch events that started a reconciliation */
    uint64_t watch_restarts; /* slice watch streams started again after one ended */
};

/* Publishes the node's pool (dra_pool_render): the ResourceSlice "<node>-<driver>" (e.g.
 * node-a-gpu.accel.dev), and with MIG partitions or many devices more slices of the same
 * pool ("-<k>", "-counters"). Every reconciliation LISTs the slices with
 * fieldSelector spec.nodeName=<node>,spec.driver=<driver>, deletes the ones
 * not named as ours (a renamed or duplicated slice from an earlier run),
 * and when any slice differs from what is rendered (or is missing) writes every slice of
 * the pool at pool generation + 1 (PUT with its resourceVersion, POST for a new one): a
 * pool's slices must agree on its generation; a
 * 409 Conflict starts again from the LIST; other failures retry after a
 * backoff (500 ms doubling to 30 s). Once in step it watches the node's slices
 * of the driver (one stream on the client) and reconciles on every change, so a
 * slice deleted or edited by someone else — the kubelet deletes every slice of
 * its node when it starts, and a driver's 30 s after the driver is gone — is
 * written again; a stream that ends is started again (1 s doubling to 30 s)
 * with a reconciliation, since changes may have been missed meanwhile. */
int dra_publisher_new(struct ev_loop *loop, struct kube_client *client, const char *driver_name,
                      const char *node_name, struct dra_publisher **ret);
struct dra_publisher *dra_publisher_free(struct dra_publisher *p);
/* fn(user_data) after every reconciliation round ends (in step or failed). */
void dra_publisher_on_round(struct dra_publisher *p, void (*fn)(void *), void *user_data);
/* fn(user_data, reason) when the API server does not keep a slice's partitionable-device fields
 * (sharedCounters, consumesCounters): a write answered 400 naming them as unknown fields (the
 * writes carry fieldValidation=Strict), or answered without them (dropped: the
 * DRAPartitionableDevices feature gate is off). The round ends there; the owner withdraws the
 * partitions and sets the GPUs again. */
void dra_publisher_on_refused(struct dra_publisher *p, void (*fn)(void *, const char *),
                              void *user_data);
/* The GPUs to publish (borrowed until the next call or free); starts a
 * reconciliation (or queues one behind the one running). */
void dra_publisher_set(struct dra_publisher *p, const struct dra_gpu *gpus, size_t n_gpus);
/* true when the last reconciliation ended in step with the server and no
 * change is waiting. */
bool dra_publisher_synced(const struct dra_publisher *p);
/* The last failure (borrowed) or NULL. */
const char *dra_publisher_error(const struct dra_publisher *p);
void dra_publisher_stats(const struct dra_publisher *p, struct dra_publisher_stats *ret);
/* The slice's name (borrowed). */
const char *dra_publisher_slice_name(const struct dra_publisher *p);
