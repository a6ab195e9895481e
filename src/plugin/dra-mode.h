/* dra-mode.h — `acceld --mode dra`: acceld as a DRA driver (docs/dra.md).
 * The GPUs come from the inventory, the kubelet plugin from src/dra, claims
 * and ResourceSlices go through the API server (src/dra/dra-kube.h), health
 * from the same NVML monitor as the device-plugin modes. */
#pragma once

#include "config.h"

/* The driver name DRA mode publishes and registers. */
#define ACCELD_DRA_DRIVER "gpu.accel.dev"

/* Builds the config again (defaults, file, flags) for a SIGHUP: 0, or -errno
 * with a message in err. */
typedef int (*acceld_dra_reload_fn)(void *user_data, struct acceld_config *ret_cfg, char *err,
                                    size_t errlen);

/* Runs DRA mode until SIGTERM/SIGINT arrives on sig_fd (a signalfd). SIGHUP
 * calls reload (NULL: SIGHUP is logged and ignored) and applies what can
 * change live (docs/dra.md, "Reloading the config"). cfg is copied. Returns
 * the process exit status: 0 clean, 1 runtime failure, 2 config error. */
int acceld_dra_run(const struct acceld_config *cfg, int sig_fd, acceld_dra_reload_fn reload,
                   void *user_data);
