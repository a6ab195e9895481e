/* dra-mode.h — `acceld --mode dra`: acceld as a DRA driver (docs/dra.md).
 * The GPUs come from the inventory, the kubelet plugin from src/dra, claims
 * and ResourceSlices go through the API server (src/dra/dra-kube.h), health
 * from the same NVML monitor as the device-plugin modes. */
#pragma once

#include "config.h"

/* The driver name DRA mode publishes and registers. */
#define ACCELD_DRA_DRIVER "gpu.accel.dev"

/* Runs DRA mode until SIGTERM/SIGINT arrives on sig_fd (a signalfd). Returns
 * the process exit status: 0 clean, 1 runtime failure, 2 config error. */
int acceld_dra_run(const struct acceld_config *cfg, int sig_fd);
