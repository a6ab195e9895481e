/* httpguard.c — accel-exporter's deadline on request headers (httpguard.h). */
#include "httpguard.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "util.h"

struct conn {
    struct conn *prev, *next;
    MHD_socket fd;
    uint64_t since_ns; /* the current request's wait for its headers began */
    bool in_request;   /* headers done, the request not yet completed */
    bool shut;
};

struct exporter_httpguard {
    uint64_t timeout_ns;
    struct conn head; /* circular list of open connections */
    unsigned open;
    uint64_t cut_total;
};

int exporter_httpguard_new(uint64_t header_timeout_ns, struct exporter_httpguard **ret)
{
    struct exporter_httpguard *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->timeout_ns = header_timeout_ns;
    g->head.prev = g->head.next = &g->head;
    *ret = g;
    return 0;
}

struct exporter_httpguard *exporter_httpguard_free(struct exporter_httpguard *g)
{
    if (!g)
        return NULL;
    while (g->head.next != &g->head) {
        struct conn *c = g->head.next;
        g->head.next = c->next;
        free(c);
    }
    free(g);
    return NULL;
}

void exporter_httpguard_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                                      enum MHD_ConnectionNotificationCode toe)
{
    struct exporter_httpguard *g = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *c = calloc(1, sizeof(*c));
        if (!c || !fd) {
            /* untracked: only the idle timeout applies to it */
            free(c);
            *socket_context = NULL;
            return;
        }
        c->fd = fd->connect_fd;
        c->since_ns = mono_ns();
        c->next = g->head.next;
        c->prev = &g->head;
        g->head.next->prev = c;
        g->head.next = c;
        g->open++;
        *socket_context = c;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct conn *c = *socket_context;
        if (!c)
            return;
        c->prev->next = c->next;
        c->next->prev = c->prev;
        g->open--;
        free(c);
        *socket_context = NULL;
    }
}

static struct conn *conn_of(struct MHD_Connection *mc)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return i ? i->socket_context : NULL;
}

void exporter_httpguard_headers_done(struct MHD_Connection *mc)
{
    struct conn *c = conn_of(mc);
    if (c)
        c->in_request = true;
}

void exporter_httpguard_on_completed(void *cls, struct MHD_Connection *mc, void **req_cls,
                                     enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)req_cls;
    (void)toe;
    struct conn *c = conn_of(mc);
    if (c) { /* a kept-alive connection now waits for its next request's headers */
        c->in_request = false;
        c->since_ns = mono_ns();
    }
}

unsigned exporter_httpguard_cut(struct exporter_httpguard *g, uint64_t now_ns)
{
    unsigned n = 0;
    for (struct conn *c = g->head.next; c != &g->head; c = c->next) {
        if (c->in_request || c->shut || now_ns - c->since_ns < g->timeout_ns)
            continue;
        /* libmicrohttpd sees the end of the stream at its next run and closes it */
        shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
        n++;
    }
    g->cut_total += n;
    return n;
}

unsigned exporter_httpguard_open(const struct exporter_httpguard *g)
{
    return g->open;
}

uint64_t exporter_httpguard_cut_total(const struct exporter_httpguard *g)
{
    return g->cut_total;
}
