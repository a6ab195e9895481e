/* cmd-plugin.h — `accelctl plugin ...`, the device-plugin debugging client
 * (src/cli/cmd-plugin.c). argv[0] is "plugin". Returns the exit status:
 * 0 ok, 1 the call failed, 2 bad usage. */
#pragma once

int cmd_plugin(int argc, char **argv);
