/*
 * httpguard.h — accel-exporter's guard against slow clients (issue 22, F8): every connection's
 * current request must deliver its request line and headers within a deadline, counted from
 * the connection's start or the end of its previous request; a connection that does not is
 * shut. libmicrohttpd's own connection timeout only measures silence, which a client sending
 * one header line every few seconds never reaches. The connection count and the count per
 * address are libmicrohttpd's options (docs/exporter.md, "Slow and many clients").
 *
 * Threads: everything here runs in the one thread that drives the daemon (MHD_run_wait): the
 * callbacks libmicrohttpd makes from it and exporter_httpguard_cut between its runs, so a
 * connection's socket is never shut after libmicrohttpd closed it.
 */
#pragma once

#include <microhttpd.h>
#include <stdint.h>

struct exporter_httpguard;

/* A guard cutting requests whose headers take longer than header_timeout_ns. 0 or -ENOMEM. */
int exporter_httpguard_new(uint64_t header_timeout_ns, struct exporter_httpguard **ret);
struct exporter_httpguard *exporter_httpguard_free(struct exporter_httpguard *g);

/* MHD_OPTION_NOTIFY_CONNECTION and MHD_OPTION_NOTIFY_COMPLETED callbacks (cls = the guard). */
void exporter_httpguard_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                                      enum MHD_ConnectionNotificationCode toe);
void exporter_httpguard_on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                                     enum MHD_RequestTerminationCode toe);
/* From the access handler: c's request line and headers have all arrived. */
void exporter_httpguard_headers_done(struct MHD_Connection *c);

/* Shuts every connection still waiting for its headers past the deadline at now_ns
 * (CLOCK_MONOTONIC). Returns how many it shut. */
unsigned exporter_httpguard_cut(struct exporter_httpguard *g, uint64_t now_ns);
/* Connections open now, and shut by the guard since it was made. */
unsigned exporter_httpguard_open(const struct exporter_httpguard *g);
uint64_t exporter_httpguard_cut_total(const struct exporter_httpguard *g);
