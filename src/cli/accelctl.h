/*
 * accelctl.h — the operator CLI's subcommands. Each lives in src/cli/cmd-<name>.c and takes
 * the arguments after its name (argv[0] is the subcommand). It returns the process exit
 * status: 0 ok, 1 failure (one message on stderr), 2 usage error.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define ACCELCTL_EXIT_OK 0
#define ACCELCTL_EXIT_FAILURE 1
#define ACCELCTL_EXIT_USAGE 2

int accelctl_cmd_gpus(int argc, char **argv);
/* src/cli/cmd-plugin.c: device-plugin debugging client */
int accelctl_cmd_plugin(int argc, char **argv);
/* src/cli/cmd-mps.c: MPS control daemons' state, defaults, servers, clients */
int accelctl_cmd_mps(int argc, char **argv);
/* src/cli/cmd-dra.c: the DRA driver's slice, devices' health and prepared claims */
int accelctl_cmd_dra(int argc, char **argv);
/* src/cli/cmd-vgpu.c: vGPU shares, quotas, usage and findings (acceld's status file) */
int accelctl_cmd_vgpu(int argc, char **argv);
/* src/cli/cmd-agent.c: acceld's SLI file: up, each resource's readiness, GPUs' health */
int accelctl_cmd_agent(int argc, char **argv);
/* src/cli/cmd-top.c: live per-GPU and per-process view (--once: one frame) */
int accelctl_cmd_top(int argc, char **argv);
/* The device list a plugin serves now (its first ListAndWatch message): every
 * ID (owned, NULL-terminated array) and whether the plugin calls it Healthy
 * (owned). Waits a few seconds for the socket. On failure says why on stderr
 * and returns -errno. */
int accelctl_plugin_health(const char *socket, char ***ret_ids, bool **ret_healthy, size_t *ret_n);

/* The options of the commands that read acceld's state dir (dra, vgpu, agent): --state-dir DIR
 * (*dir keeps its default without it), --json, --help; no operands. Returns -1 when the
 * command goes on, else the exit status, usage(stdout) or usage(stderr) printed. */
int accelctl_state_options(int argc, char **argv, void (*usage)(FILE *f), const char **dir,
                           bool *json);
