/* config-path.c — where libvcuda looks for the agent's config. A build-time
 * constant, in a file of its own so that the test library
 * (libvcuda-agenttest.so, tests only) can be linked from the same objects with
 * a path in the build tree: no run-time input, least of all the environment of
 * the process being limited, can move it. See vcuda-config.h. */
#include "vcuda-config.h"

#ifndef VC_CONFIG_AGENT_PATH
#define VC_CONFIG_AGENT_PATH VC_CONFIG_DEFAULT_PATH
#endif

const char vc_config_agent_path[] = VC_CONFIG_AGENT_PATH;
