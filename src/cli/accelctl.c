/*
 * accelctl.c — the operator CLI's entry point: global options and the subcommand table.
 * To add a subcommand, write src/cli/cmd-<name>.c, declare it in accelctl.h and add one line
 * to `commands` below.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "accel-config.h"
#include "accelctl.h"

struct accelctl_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

static const struct accelctl_command commands[] = {
    {"gpus", "list the node's GPUs, their health and links (--json for machines)",
     accelctl_cmd_gpus},
    {"plugin", "ask a kubelet device plugin what it serves (info|devices|prefer|allocate)",
     accelctl_cmd_plugin},
    {"mps", "show MPS control daemons: state, defaults, servers, clients", accelctl_cmd_mps},
    {"dra", "the DRA driver's slice, device health and prepared claims", accelctl_cmd_dra},
    {"vgpu", "show vGPU shares, quotas, usage and host-side check findings", accelctl_cmd_vgpu},
    {"top", "a live view of the node's GPUs and the processes (pods) on them", accelctl_cmd_top},
    {"agent", "acceld's own report: up, each resource ready (registered) or why not",
     accelctl_cmd_agent},
};

int accelctl_state_options(int argc, char **argv, void (*usage)(FILE *f), const char **dir,
                           bool *json)
{
    static const struct option opts[] = {{"state-dir", required_argument, NULL, 's'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 's') {
            *dir = optarg;
        } else if (c == 'j') {
            *json = true;
        } else if (c == 'h') {
            usage(stdout);
            return ACCELCTL_EXIT_OK;
        } else {
            usage(stderr);
            return ACCELCTL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return ACCELCTL_EXIT_USAGE;
    }
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: accelctl [--help] [--version] COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'accelctl COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    const char *cmd;

    if (argc < 2) {
        usage(stderr);
        return ACCELCTL_EXIT_USAGE;
    }
    cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return ACCELCTL_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("accelctl %s\n", ACCEL_VERSION);
        return ACCELCTL_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);

    if (cmd[0] == '-')
        fprintf(stderr, "accelctl: unknown option '%s'\n", cmd);
    else
        fprintf(stderr, "accelctl: unknown command '%s'\n", cmd);
    usage(stderr);
    return ACCELCTL_EXIT_USAGE;
}
