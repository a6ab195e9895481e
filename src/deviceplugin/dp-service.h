/* dp-service.h — one kubelet device-plugin endpoint: the DevicePlugin gRPC
 * service on `<plugin dir>/<socket>` for one resource served by one provider
 * (provider.h), its ListAndWatch watchers, and its registration with the
 * kubelet. acceld runs one per resource (pGPU: one; vGPU: cores and memory).
 *
 * Lifecycle: serve first, then Register (v1beta1, bare socket name, resource
 * name, options). Kubelet absent or refusing: retry with capped backoff,
 * logging once per state change. Kubelet restart, seen with inotify on the
 * plugin dir (kubelet.sock created, our socket deleted, the dir removed and
 * made again): re-serve and re-register at once. Free: sockets removed.
 *
 * Threads: the event loop thread only. */
#pragma once

#include <stdbool.h>

#include "acceld-config.h"
#include "evloop.h"
#include "provider.h"

/* Backoff between registration attempts: doubles from MIN to MAX. */
#define ACCELD_REGISTER_BACKOFF_MIN_NS (100ull * 1000000ull)
#define ACCELD_REGISTER_BACKOFF_MAX_NS (5ull * 1000000000ull)
/* The kubelet answers Register after calling GetDevicePluginOptions back. */
#define ACCELD_REGISTER_TIMEOUT_NS (10ull * 1000000000ull)
/* Largest request (and reply) on the plugin socket. The kubelet's requests
 * are a few hundred bytes and its own limit is 4 MiB; unpacking a 4 MiB
 * request of ~100,000 IDs held the loop for ~20 ms (ASan: ~100 ms), 1 MiB
 * (~25,000 IDs) a quarter of that; anything larger is refused on its length
 * prefix, before it is buffered. Replies stay far below it (a device list
 * is ~100 bytes a device). */
#define ACCELD_MAX_MESSAGE (1u << 20)
/* Mode of a plugin dir acceld makes itself (noRegister and the dir missing). */
#define ACCELD_PLUGIN_DIR_MODE 0750

struct acceld_plugin;

/* Serves prov (its self borrowed; must outlive the plugin) for resource (the
 * socket is named after it) on loop with cfg's plugin dir and timeouts, and
 * starts registering (unless cfg->no_register). Returns 0 or -errno (the
 * socket could not be bound: nothing is left behind). */
int acceld_plugin_new(struct ev_loop *loop, const struct acceld_config *cfg, const char *resource,
                      const struct acceld_provider *prov, struct acceld_plugin **ret);
/* Ends every stream, closes the server and removes the socket. NULL ok. */
struct acceld_plugin *acceld_plugin_free(struct acceld_plugin *p);

/* The device list changed (health): sends it to every ListAndWatch stream. */
void acceld_plugin_devices_changed(struct acceld_plugin *p);

/* Takes the settings that can change at run time (SIGHUP). Changing the plugin
 * dir or the resource name re-serves and re-registers. Returns 0 or -errno
 * (then the old socket keeps serving). */
int acceld_plugin_reconfigure(struct acceld_plugin *p, const struct acceld_config *cfg,
                              const char *resource);

/* Counts registrations and Allocates (results, latency) in stats (borrowed; must
 * outlive the plugin; NULL: stop counting). */
struct acceld_stats;
void acceld_plugin_set_stats(struct acceld_plugin *p, struct acceld_stats *stats);

bool acceld_plugin_registered(const struct acceld_plugin *p);
unsigned acceld_plugin_watcher_count(const struct acceld_plugin *p);
/* The full socket path served. Borrowed. */
const char *acceld_plugin_socket_path(const struct acceld_plugin *p);
