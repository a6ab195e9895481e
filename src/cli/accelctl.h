/*
 * accelctl.h — the operator CLI's subcommands. Each lives in src/cli/cmd-<name>.c and takes
 * the arguments after its name (argv[0] is the subcommand). It returns the process exit
 * status: 0 ok, 1 failure (one message on stderr), 2 usage error.
 */
#pragma once

#define ACCELCTL_EXIT_OK 0
#define ACCELCTL_EXIT_FAILURE 1
#define ACCELCTL_EXIT_USAGE 2

int accelctl_cmd_gpus(int argc, char **argv);
/* src/cli/cmd-plugin.c: device-plugin debugging client */
int accelctl_cmd_plugin(int argc, char **argv);
