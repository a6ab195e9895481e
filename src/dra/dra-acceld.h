/* dra-acceld.h — acceld's DRA side (docs/dra.md): GPUs of the inventory
 * published as the node's ResourceSlice by the driver gpu.accel.dev, the
 * kubelet plugin (registration + DRAPlugin) with claims read from the API
 * server, health events turned into device taints and the kubelet's health
 * stream, per-claim MPS daemons, the host-side check of the shared claims
 * (src/hostcheck: NVML's per-process memory and utilization of their pods'
 * processes against the claim, every GPU of the node looked at), and the
 * status file for `accelctl dra`.
 *
 * It runs on a loop it is given, so one acceld serves it beside the
 * device-plugin providers (gpuModes: N=dra; acceld.c owns the loop, the
 * signals, the health monitor and the SLI file) or alone (mode: dra with no
 * per-GPU exception; acceld_dra_run owns all of that itself).
 *
 * Threads: the loop's thread only. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acceld-config.h"

/* The driver name DRA mode publishes and registers. */
#define ACCELD_DRA_DRIVER "gpu.accel.dev"

struct ev_loop;
struct gpu_inventory;
struct health_event;
struct acceld_stats;
struct acceld_dra;
struct gpu_nvml;

struct acceld_dra_options {
    struct ev_loop *loop;
    const struct acceld_config *cfg; /* copied */
    const struct gpu_inventory *inv; /* borrowed until acceld_dra_free */
    const int *gpus;                 /* inventory positions of the GPUs it publishes */
    size_t n_gpus;
    struct acceld_stats *stats; /* borrowed; NULL: no SLIs counted */
    /* borrowed; NULL: no host-side check of the shared claims (dra.checkInterval) */
    struct gpu_nvml *nvml;
};

/* The node name the DRA side publishes under (nodeName, else $NODE_NAME),
 * checked: 0, or -EINVAL with a log line (missing, not a DNS subdomain). */
int acceld_dra_node_name(const struct acceld_config *cfg, char *buf, size_t len);

/* Starts the DRA side: checkpoint (its MPS claims' daemons started again),
 * API client, slice publisher, kubelet plugin sockets. 0, -EINVAL for a
 * config error (no node name; a log line says which), other -errno when
 * something cannot start (logged). On error *ret is untouched and
 * everything it started is stopped again. */
int acceld_dra_new(const struct acceld_dra_options *o, struct acceld_dra **ret);
/* Writes the status file a last time, removes the sockets, stops the MPS
 * claims' daemons. NULL ok; returns NULL. */
struct acceld_dra *acceld_dra_free(struct acceld_dra *d);

/* Its GPUs (in the order of o->gpus, GPUs without a usable UUID left out). */
size_t acceld_dra_gpu_count(const struct acceld_dra *d);
const char *acceld_dra_gpu_uuid(const struct acceld_dra *d, size_t i);
/* The index of the GPU with this UUID, or -1. */
int acceld_dra_find(const struct acceld_dra *d, const char *uuid);

/* Restarts of the MPS daemons of the prepared claims on this GPU (the SLI
 * file's mpsRestarts; claims unprepared since are not counted). */
uint64_t acceld_dra_mps_restarts(const struct acceld_dra *d, const char *uuid);

/* A health monitor event for its GPU i (-1: every GPU of it): applied,
 * and the slice, the status file and the health stream follow. */
void acceld_dra_health_event(struct acceld_dra *d, int i, const struct health_event *ev);

/* SIGHUP: applies what the DRA side can change live (dra.sharing,
 * dra.gpuSharing, dra.*TaintEffect, health.*); the keys it reads at start
 * only keep their running value, with a log line when log_refused. */
void acceld_dra_reload(struct acceld_dra *d, const struct acceld_config *n, bool log_refused);

/* Builds the config again (defaults, file, flags) for a SIGHUP: 0, or -errno
 * with a message in err. */
typedef int (*acceld_dra_reload_fn)(void *user_data, struct acceld_config *ret_cfg, char *err,
                                    size_t errlen);

/* `mode: dra` with every GPU in it: runs the DRA side alone until
 * SIGTERM/SIGINT arrives on sig_fd (a signalfd), with its own loop, health
 * monitor and SLI file. SIGHUP calls reload (NULL: SIGHUP is logged and
 * ignored) and applies what can change live (docs/dra.md, "Reloading the
 * config"). cfg is copied. Returns the process exit status: 0 clean, 1
 * runtime failure, 2 config error. */
int acceld_dra_run(const struct acceld_config *cfg, int sig_fd, acceld_dra_reload_fn reload,
                   void *user_data);
