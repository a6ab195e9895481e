/* dp-service.c — the DevicePlugin service for one resource (any number of
 * these run side by side, one per provider), its watchers, and the
 * registration state machine with inotify on the plugin dir; see dp-service.h.
 * Messages go to and from the provider through dp-wire.c. */
#include "dp-service.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deviceplugin.pb-c.h"
#include "fs.h"
#include "grpc.h"
#include "log.h"
#include "acceld-stats.h"
#include "util.h"
#include "dp-wire.h"

#define KUBELET_SOCKET "kubelet.sock"
#define DIR_POLL_NS (100ull * 1000000ull)

enum reg_state {
    REG_IDLE,      /* not registering (no_register) */
    REG_WAITING,   /* retry timer armed */
    REG_IN_FLIGHT, /* Register call outstanding */
    REG_REGISTERED,
};

/* What the last log line said about registration; a line is logged only when
 * this changes, so a long kubelet outage is one line, not one per retry. */
enum reg_report {
    REPORT_NONE,
    REPORT_REGISTERED,
    REPORT_ABSENT,
    REPORT_REFUSED,
};

struct acceld_plugin {
    struct ev_loop *loop;
    struct acceld_config cfg;
    struct acceld_wire *wire;
    bool has_prefer; /* the provider answers GetPreferredAllocation */
    struct grpc_server *server;
    char sock_name[ACCELD_NAME_MAX + 16];
    char sock_path[ACCELD_PATH_MAX + ACCELD_NAME_MAX + 32];
    char kubelet_path[ACCELD_PATH_MAX + 32];
    bool serving;

    struct grpc_call **watchers;
    size_t n_watchers, cap_watchers;

    /* registration */
    enum reg_state reg;
    enum reg_report report;
    struct grpc_client *client;
    bool freeing_client; /* the done callback of a call we cancel is ignored */
    uint64_t retry_timer;
    uint64_t free_timer;
    uint64_t backoff_ns;
    unsigned attempts; /* since start, for debug logs */

    /* Allocates waiting for the provider's data (allocateWait) */
    struct parked *parked;
    struct acceld_stats *stats; /* SLI counters (borrowed; NULL: not counted) */

    /* inotify */
    int ino_fd;
    int ino_wd;
    uint64_t dir_timer;
};

static void reg_schedule(struct acceld_plugin *p, uint64_t delay_ns);
static void reg_restart(struct acceld_plugin *p);
static bool path_exists(const char *path);

/* ------------------------------------------------------------ watchers */

static void watcher_remove(struct acceld_plugin *p, struct grpc_call *call)
{
    for (size_t i = 0; i < p->n_watchers; i++) {
        if (p->watchers[i] == call) {
            p->watchers[i] = p->watchers[--p->n_watchers];
            return;
        }
    }
}

static void watcher_cancelled(struct grpc_call *call, void *user_data)
{
    struct acceld_plugin *p = user_data;
    watcher_remove(p, call);
    log_debug("ListAndWatch stream closed by the peer (%zu left)", p->n_watchers);
    grpc_call_finish(call, GRPC_STATUS_CANCELLED, NULL);
}

/* Sends the current list to one stream; drops the stream when it cannot take
 * it (peer gone, or not reading). Returns false when dropped. */
static bool watcher_send(struct acceld_plugin *p, struct grpc_call *call)
{
    const uint8_t *data;
    size_t len;
    int r = acceld_wire_list_bytes(p->wire, &data, &len);
    if (r == 0)
        r = grpc_call_send(call, data, len);
    if (r == 0)
        return true;
    watcher_remove(p, call);
    const char *why = r == -ENOMEM     ? "out of memory"
                      : r == -EMSGSIZE ? "the device list is over the gRPC message size limit"
                      : r == -ENOBUFS  ? "peer not reading"
                                       : strerror(-r);
    if (r != -ECONNRESET)
        log_warn("ListAndWatch stream dropped: %s", why);
    grpc_call_finish(call, r == -ENOMEM ? GRPC_STATUS_INTERNAL : GRPC_STATUS_RESOURCE_EXHAUSTED,
                     why);
    return false;
}

void acceld_plugin_devices_changed(struct acceld_plugin *p)
{
    /* watcher_send may remove the entry at i (swap with the last) */
    for (size_t i = 0; i < p->n_watchers;)
        if (watcher_send(p, p->watchers[i]))
            i++;
}

/* ------------------------------------------------------------ handlers */

static void on_options(struct grpc_call *call, const struct grpc_request *req, void *user_data)
{
    struct acceld_plugin *p = user_data;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.pre_start_required = 0;
    o.get_preferred_allocation_available = p->has_prefer;
    grpc_call_reply_msg(call, &o.base);
}

static void on_list_and_watch(struct grpc_call *call, const struct grpc_request *req,
                              void *user_data)
{
    struct acceld_plugin *p = user_data;
    if (p->n_watchers == p->cap_watchers) {
        size_t cap = p->cap_watchers ? p->cap_watchers * 2 : 16;
        struct grpc_call **w = realloc(p->watchers, cap * sizeof(*w));
        if (!w) {
            grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        p->watchers = w;
        p->cap_watchers = cap;
    }
    p->watchers[p->n_watchers++] = call;
    grpc_call_set_cancel_cb(call, watcher_cancelled, p);
    if (watcher_send(p, call))
        log_debug("ListAndWatch stream opened (%zu open)", p->n_watchers);
}

static void on_prefer(struct grpc_call *call, const struct grpc_request *req, void *user_data)
{
    struct acceld_plugin *p = user_data;
    const V1beta1__PreferredAllocationRequest *m = (const void *)req->msg;
    V1beta1__PreferredAllocationResponse *resp = NULL;
    char err[512];
    int r = acceld_wire_prefer(p->wire, m, &resp, err, sizeof(err));
    if (r < 0) {
        log_warn("GetPreferredAllocation refused: %s", r == -ENOMEM ? "out of memory" : err);
        grpc_call_finish(
            call, r == -ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT,
            r == -ENOMEM ? "out of memory" : err);
        return;
    }
    grpc_call_reply_msg(call, &resp->base);
    acceld_wire_prefer_free(resp);
}

/* An Allocate the provider cannot answer yet (-EAGAIN: for vGPU, the pod is
 * not in the watch cache yet): kept, with its request bytes, and tried again
 * every ALLOCATE_RETRY_NS on the loop until it is answered or allocateWait
 * has passed. Nothing blocks meanwhile. */
#define ALLOCATE_RETRY_NS (20ull * 1000000ull)
struct parked {
    struct parked *next;
    struct acceld_plugin *p;
    struct grpc_call *call;
    uint8_t *data;
    size_t len;
    uint64_t deadline_ns;
    uint64_t timer;
    uint64_t arrived_ns; /* for the latency histogram */
};

static void parked_drop(struct parked *k)
{
    for (struct parked **pp = &k->p->parked; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    ev_loop_cancel_timer(k->p->loop, k->timer);
    if (k->call)
        grpc_call_set_cancel_cb(k->call, NULL, NULL);
    free(k->data);
    free(k);
}

static void count_allocate(struct acceld_plugin *p, bool ok, uint64_t arrived_ns)
{
    if (p->stats)
        acceld_stats_allocate(p->stats, p->cfg.resource_name, ok, mono_ns() - arrived_ns);
}

/* Answers call from m; returns false (call untouched) when the provider said
 * -EAGAIN and park is true. arrived_ns: when the kubelet's request came. */
static bool answer_allocate(struct acceld_plugin *p, struct grpc_call *call,
                            const V1beta1__AllocateRequest *m, bool park, uint64_t arrived_ns)
{
    V1beta1__AllocateResponse *resp = NULL;
    char err[1024];
    int r = acceld_wire_allocate(p->wire, m, &resp, err, sizeof(err));
    if (r == -EAGAIN && park)
        return false;
    if (r < 0) {
        count_allocate(p, false, arrived_ns);
        log_warn("Allocate refused: %s", r == -ENOMEM ? "out of memory" : err);
        grpc_call_finish(
            call, r == -ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT,
            r == -ENOMEM ? "out of memory" : err);
        return true;
    }
    grpc_call_reply_msg(call, &resp->base);
    count_allocate(p, true, arrived_ns);
    if (log_enabled(LOG_LEVEL_INFO)) {
        for (size_t c = 0; c < m->n_container_requests; c++) {
            char ids[1024];
            size_t n = 0;
            ids[0] = '\0';
            const V1beta1__ContainerAllocateRequest *cr = m->container_requests[c];
            for (size_t i = 0; i < cr->n_devices_ids && n < sizeof(ids); i++) {
                int k =
                    snprintf(ids + n, sizeof(ids) - n, "%s%s", i ? "," : "", cr->devices_ids[i]);
                if (k > 0)
                    n += (size_t)k;
            }
            log_info("allocated %s: %s", p->cfg.resource_name, ids);
        }
    }
    return true;
}

static void on_parked_cancel(struct grpc_call *call, void *user_data)
{
    struct parked *k = user_data;
    count_allocate(k->p, false, k->arrived_ns);
    parked_drop(k);
    grpc_call_finish(call, GRPC_STATUS_CANCELLED, "the kubelet went away");
}

static void on_parked_retry(struct ev_loop *loop, void *user_data)
{
    struct parked *k = user_data;
    k->timer = 0;
    V1beta1__AllocateRequest *m = v1beta1__allocate_request__unpack(NULL, k->len, k->data);
    struct grpc_call *call = k->call;
    if (!m) { /* it unpacked before: only memory can fail */
        count_allocate(k->p, false, k->arrived_ns);
        parked_drop(k);
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* answering frees the call: no cancel callback may point at k by then */
    grpc_call_set_cancel_cb(call, NULL, NULL);
    bool last = mono_ns() >= k->deadline_ns;
    if (answer_allocate(k->p, call, m, !last, k->arrived_ns)) {
        k->call = NULL; /* finished */
        parked_drop(k);
    } else {
        grpc_call_set_cancel_cb(call, on_parked_cancel, k);
        ev_loop_add_timer(loop, ALLOCATE_RETRY_NS, on_parked_retry, k, &k->timer);
    }
    v1beta1__allocate_request__free_unpacked(m, NULL);
}

static void on_allocate(struct grpc_call *call, const struct grpc_request *req, void *user_data)
{
    struct acceld_plugin *p = user_data;
    const V1beta1__AllocateRequest *m = (const void *)req->msg;
    bool wait = p->cfg.allocate_wait_ns > 0;
    uint64_t arrived = mono_ns();
    if (answer_allocate(p, call, m, wait, arrived))
        return;
    struct parked *k = calloc(1, sizeof(*k));
    uint8_t *data = k ? malloc(req->len ? req->len : 1) : NULL;
    if (!data) {
        free(k);
        answer_allocate(p, call, m, false, arrived);
        return;
    }
    memcpy(data, req->data, req->len);
    *k = (struct parked){.next = p->parked,
                         .p = p,
                         .call = call,
                         .data = data,
                         .len = req->len,
                         .deadline_ns = arrived + p->cfg.allocate_wait_ns,
                         .arrived_ns = arrived};
    p->parked = k;
    log_info("an Allocate of %s waits for its pod (up to allocateWait)", p->cfg.resource_name);
    grpc_call_set_cancel_cb(call, on_parked_cancel, k);
    ev_loop_add_timer(p->loop, ALLOCATE_RETRY_NS, on_parked_retry, k, &k->timer);
}

static void on_prestart(struct grpc_call *call, const struct grpc_request *req, void *user_data)
{
    V1beta1__PreStartContainerResponse r = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    grpc_call_reply_msg(call, &r.base);
}

static int server_setup(struct acceld_plugin *p)
{
    static const struct {
        const char *path;
        enum grpc_method_kind kind;
        const ProtobufCMessageDescriptor *desc;
        grpc_handler_fn fn;
    } methods[] = {
        {"/v1beta1.DevicePlugin/GetDevicePluginOptions", GRPC_METHOD_UNARY,
         &v1beta1__empty__descriptor, on_options},
        {"/v1beta1.DevicePlugin/ListAndWatch", GRPC_METHOD_SERVER_STREAMING,
         &v1beta1__empty__descriptor, on_list_and_watch},
        {"/v1beta1.DevicePlugin/GetPreferredAllocation", GRPC_METHOD_UNARY,
         &v1beta1__preferred_allocation_request__descriptor, on_prefer},
        {"/v1beta1.DevicePlugin/Allocate", GRPC_METHOD_UNARY,
         &v1beta1__allocate_request__descriptor, on_allocate},
        {"/v1beta1.DevicePlugin/PreStartContainer", GRPC_METHOD_UNARY,
         &v1beta1__pre_start_container_request__descriptor, on_prestart},
    };
    struct grpc_limits lim = {.max_message_size = ACCELD_MAX_MESSAGE,
                              .handshake_timeout_ns = p->cfg.handshake_timeout_ns,
                              .idle_timeout_ns = p->cfg.idle_timeout_ns};
    int r = grpc_server_new(p->loop, &lim, &p->server);
    if (r < 0)
        return r;
    for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
        r = grpc_server_add_method(p->server, methods[i].path, methods[i].kind, methods[i].desc,
                                   methods[i].fn, p);
        if (r < 0)
            return r;
    }
    return 0;
}

static void set_paths(struct acceld_plugin *p)
{
    acceld_config_socket_name(&p->cfg, p->sock_name, sizeof(p->sock_name));
    snprintf(p->sock_path, sizeof(p->sock_path), "%s/%s", p->cfg.plugin_dir, p->sock_name);
    snprintf(p->kubelet_path, sizeof(p->kubelet_path), "%s/%s", p->cfg.plugin_dir, KUBELET_SOCKET);
}

/* (Re)binds our socket in the plugin dir. */
static int serve(struct acceld_plugin *p)
{
    grpc_server_close_listeners(p->server, false);
    p->serving = false;
    int r = grpc_server_listen_unix(p->server, p->sock_path);
    if (r == -EADDRINUSE) {
        log_error("cannot serve on %s: another process is serving on it (a second acceld?); "
                  "stop it first, or give this one another --device-plugin-dir or --resource-name",
                  p->sock_path);
        return r;
    }
    if (r == -EEXIST) {
        log_error("cannot serve on %s: a file that is not a socket is in the way; remove it",
                  p->sock_path);
        return r;
    }
    if (r < 0) {
        log_error("cannot serve on %s: %s", p->sock_path, strerror(-r));
        return r;
    }
    p->serving = true;
    log_info("serving %s on %s", p->cfg.resource_name, p->sock_path);
    return 0;
}

/* ------------------------------------------------------------ registration */

static void report(struct acceld_plugin *p, enum reg_report what, const char *detail)
{
    if (p->report == what)
        return;
    p->report = what;
    switch (what) {
    case REPORT_REGISTERED:
        log_info("registered %s with the kubelet (endpoint %s)", p->cfg.resource_name,
                 p->sock_name);
        break;
    case REPORT_ABSENT:
        log_warn("kubelet not reachable at %s (%s): retrying with backoff up to %llus",
                 p->kubelet_path, detail,
                 (unsigned long long)(ACCELD_REGISTER_BACKOFF_MAX_NS / 1000000000ull));
        break;
    case REPORT_REFUSED:
        log_error("kubelet refused to register %s: %s: retrying with backoff", p->cfg.resource_name,
                  detail);
        break;
    case REPORT_NONE:
        break;
    }
}

static void client_drop(struct acceld_plugin *p)
{
    if (!p->client)
        return;
    p->freeing_client = true;
    p->client = grpc_client_free(p->client);
    p->freeing_client = false;
}

static void on_free_client(struct ev_loop *loop, void *user_data)
{
    struct acceld_plugin *p = user_data;
    p->free_timer = 0;
    if (p->reg != REG_IN_FLIGHT)
        client_drop(p);
}

static void backoff_next(struct acceld_plugin *p)
{
    uint64_t d = p->backoff_ns ? p->backoff_ns : ACCELD_REGISTER_BACKOFF_MIN_NS;
    reg_schedule(p, d);
    p->backoff_ns = d * 2 > ACCELD_REGISTER_BACKOFF_MAX_NS ? ACCELD_REGISTER_BACKOFF_MAX_NS : d * 2;
}

static void on_register_done(int status, const char *message, const uint8_t *resp, size_t len,
                             void *user_data)
{
    struct acceld_plugin *p = user_data;
    if (p->freeing_client)
        return;
    /* The client cannot be freed from its own callback: later, on a timer. */
    if (!p->free_timer)
        ev_loop_add_timer(p->loop, 0, on_free_client, p, &p->free_timer);
    if (p->stats)
        acceld_stats_registration(p->stats, p->cfg.resource_name, status == GRPC_STATUS_OK);
    if (status == GRPC_STATUS_OK) {
        p->reg = REG_REGISTERED;
        p->backoff_ns = 0;
        report(p, REPORT_REGISTERED, NULL);
        return;
    }
    p->reg = REG_WAITING;
    char detail[1024];
    snprintf(detail, sizeof(detail), "%s%s%s", grpc_status_name(status),
             message && *message ? ": " : "", message ? message : "");
    if (status == GRPC_STATUS_DEADLINE_EXCEEDED)
        snprintf(detail, sizeof(detail),
                 "no answer to Register within %llus (the kubelet calls GetDevicePluginOptions "
                 "on %s first: is that socket reachable from the kubelet?)",
                 (unsigned long long)(ACCELD_REGISTER_TIMEOUT_NS / 1000000000ull), p->sock_path);
    report(p, status == GRPC_STATUS_UNAVAILABLE ? REPORT_ABSENT : REPORT_REFUSED, detail);
    backoff_next(p);
}

static void reg_attempt(struct acceld_plugin *p)
{
    client_drop(p);
    if (p->ino_wd < 0 && p->dir_timer && !path_exists(p->cfg.plugin_dir)) {
        /* no dir, no kubelet: on_dir_poll serves and registers once it is back */
        p->reg = REG_WAITING;
        return;
    }
    log_debug("registering with the kubelet at %s (attempt %u)", p->kubelet_path, ++p->attempts);
    if (!p->serving && serve(p) < 0) {
        p->reg = REG_WAITING;
        backoff_next(p);
        return;
    }
    int r = grpc_client_new(p->loop, p->kubelet_path, NULL, &p->client);
    if (r < 0) {
        if (p->stats)
            acceld_stats_registration(p->stats, p->cfg.resource_name, false);
        p->reg = REG_WAITING;
        report(p, REPORT_ABSENT, strerror(-r));
        backoff_next(p);
        return;
    }
    V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    opts.get_preferred_allocation_available = p->has_prefer;
    V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
    req.version = "v1beta1";
    req.endpoint = p->sock_name;
    req.resource_name = p->cfg.resource_name;
    req.options = &opts;
    p->reg = REG_IN_FLIGHT;
    r = grpc_client_unary_msg(p->client, "/v1beta1.Registration/Register", &req.base,
                              ACCELD_REGISTER_TIMEOUT_NS, on_register_done, p, NULL);
    if (r < 0) {
        if (p->stats)
            acceld_stats_registration(p->stats, p->cfg.resource_name, false);
        p->reg = REG_WAITING;
        report(p, REPORT_ABSENT, strerror(-r));
        client_drop(p);
        backoff_next(p);
    }
}

static void on_retry(struct ev_loop *loop, void *user_data)
{
    struct acceld_plugin *p = user_data;
    p->retry_timer = 0;
    reg_attempt(p);
}

static void reg_schedule(struct acceld_plugin *p, uint64_t delay_ns)
{
    ev_loop_cancel_timer(p->loop, p->retry_timer);
    p->retry_timer = 0;
    if (ev_loop_add_timer(p->loop, delay_ns, on_retry, p, &p->retry_timer) < 0)
        log_error("cannot arm the registration timer: out of memory");
}

/* A new kubelet (or our socket gone): start over now, without backoff. */
static void reg_restart(struct acceld_plugin *p)
{
    if (p->cfg.no_register)
        return;
    ev_loop_cancel_timer(p->loop, p->retry_timer);
    p->retry_timer = 0;
    client_drop(p);
    p->backoff_ns = 0;
    p->reg = REG_WAITING;
    p->report = REPORT_NONE; /* a restart is a state change worth a line */
    reg_attempt(p);
}

/* ------------------------------------------------------------ inotify */

static void watch_dir(struct acceld_plugin *p);

static void on_dir_poll(struct ev_loop *loop, void *user_data)
{
    struct acceld_plugin *p = user_data;
    p->dir_timer = 0;
    watch_dir(p);
    if (p->ino_wd < 0)
        return;
    log_info("plugin dir %s is back", p->cfg.plugin_dir);
    serve(p);
    reg_restart(p);
}

/* Watches the plugin dir; if it does not exist, polls until it does. */
static void watch_dir(struct acceld_plugin *p)
{
    p->ino_wd = inotify_add_watch(p->ino_fd, p->cfg.plugin_dir,
                                  IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM |
                                      IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
    if (p->ino_wd < 0 && !p->dir_timer)
        ev_loop_add_timer(p->loop, DIR_POLL_NS, on_dir_poll, p, &p->dir_timer);
}

static bool path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void on_inotify(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    struct acceld_plugin *p = user_data;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool kubelet_new = false, ours_gone = false, dir_gone = false, overflow = false;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (char *q = buf; q < buf + n;) {
            const struct inotify_event *e = (const void *)q;
            q += sizeof(*e) + e->len;
            log_debug("inotify: wd %d mask 0x%x %s", e->wd, e->mask, e->len ? e->name : "");
            if (e->mask & IN_Q_OVERFLOW)
                overflow = true;
            if (e->wd != p->ino_wd)
                continue;
            if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
                dir_gone = true;
                continue;
            }
            if (!e->len)
                continue;
            if ((e->mask & (IN_CREATE | IN_MOVED_TO)) && strcmp(e->name, KUBELET_SOCKET) == 0)
                kubelet_new = true;
            if ((e->mask & (IN_DELETE | IN_MOVED_FROM)) && strcmp(e->name, p->sock_name) == 0)
                ours_gone = true;
        }
    }
    if (dir_gone) {
        log_warn("plugin dir %s removed: waiting for it to come back", p->cfg.plugin_dir);
        if (p->ino_wd >= 0)
            inotify_rm_watch(p->ino_fd, p->ino_wd);
        p->ino_wd = -1;
        p->serving = false;
        watch_dir(p);
        if (p->ino_wd >= 0) /* already back */
            on_dir_poll(loop, p);
        return;
    }
    /* Events were dropped (the queue overflowed): what they said is unknown,
     * so look at the dir itself and register again, as after a restart. */
    if (overflow) {
        log_warn("inotify queue overflowed on %s: checking the socket and registering again",
                 p->cfg.plugin_dir);
        if (!path_exists(p->sock_path))
            serve(p);
        reg_restart(p);
        return;
    }
    /* Our own re-bind also unlinks the old file: only a socket that is really
     * missing now counts. */
    if (ours_gone && !path_exists(p->sock_path)) {
        log_info("socket %s was removed (kubelet restart?): serving again", p->sock_path);
        serve(p);
        reg_restart(p);
        return;
    }
    if (kubelet_new) {
        log_info("kubelet socket %s created: registering again", p->kubelet_path);
        reg_restart(p);
    }
}

static int inotify_setup(struct acceld_plugin *p)
{
    p->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (p->ino_fd < 0)
        return -errno;
    int r = ev_loop_add_io(p->loop, p->ino_fd, EPOLLIN, on_inotify, p);
    if (r < 0)
        return r;
    watch_dir(p);
    return 0;
}

/* ------------------------------------------------------------ lifecycle */

int acceld_plugin_new(struct ev_loop *loop, const struct acceld_config *cfg, const char *resource,
                      const struct acceld_provider *prov, struct acceld_plugin **ret)
{
    if (strlen(resource) >= sizeof(cfg->resource_name))
        return -ENAMETOOLONG;
    struct acceld_plugin *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->loop = loop;
    p->cfg = *cfg;
    snprintf(p->cfg.resource_name, sizeof(p->cfg.resource_name), "%s", resource);
    p->has_prefer = prov->ops->prefer != NULL;
    p->ino_fd = -1;
    p->ino_wd = -1;
    set_paths(p);
    int r = acceld_wire_new(prov, &p->wire);
    if (r == 0)
        r = server_setup(p);
    if (r < 0)
        goto fail;
    /* Without a kubelet nobody else makes the plugin dir: make it (0750, the
     * owner serves, its group may look). With one, the dir is the kubelet's:
     * one not there yet (acceld started before the kubelet made it) is
     * waited for, like one removed later: inotify_setup polls. */
    if (cfg->no_register && !path_exists(p->cfg.plugin_dir)) {
        if ((r = fs_mkdir_p(p->cfg.plugin_dir, ACCELD_PLUGIN_DIR_MODE)) < 0) {
            log_error("cannot create the plugin dir %s: %s; create it, or give "
                      "--device-plugin-dir a directory this user can write",
                      p->cfg.plugin_dir, strerror(-r));
            goto fail;
        }
        log_info("created the plugin dir %s (noRegister: no kubelet makes it)", p->cfg.plugin_dir);
    }
    if (!path_exists(p->cfg.plugin_dir))
        log_warn("plugin dir %s does not exist (yet): serving once it is made; is the kubelet "
                 "running, and is the dir mounted into this container?",
                 p->cfg.plugin_dir);
    else if ((r = serve(p)) < 0)
        goto fail;
    if ((r = inotify_setup(p)) < 0)
        goto fail;
    if (cfg->no_register)
        log_info("not registering with the kubelet (noRegister)");
    else
        reg_attempt(p);
    *ret = p;
    return 0;
fail:
    acceld_plugin_free(p);
    return r;
}

struct acceld_plugin *acceld_plugin_free(struct acceld_plugin *p)
{
    if (!p)
        return NULL;
    ev_loop_cancel_timer(p->loop, p->retry_timer);
    ev_loop_cancel_timer(p->loop, p->free_timer);
    ev_loop_cancel_timer(p->loop, p->dir_timer);
    client_drop(p);
    while (p->n_watchers) {
        struct grpc_call *c = p->watchers[--p->n_watchers];
        grpc_call_set_cancel_cb(c, NULL, NULL);
        grpc_call_finish(c, GRPC_STATUS_UNAVAILABLE, "acceld is shutting down");
    }
    while (p->parked) {
        struct grpc_call *c = p->parked->call;
        parked_drop(p->parked);
        grpc_call_finish(c, GRPC_STATUS_UNAVAILABLE, "acceld is shutting down");
    }
    free(p->watchers);
    if (p->ino_fd >= 0) {
        ev_loop_del_io(p->loop, p->ino_fd);
        close(p->ino_fd);
    }
    /* grpc_server_free unlinks the socket it bound */
    grpc_server_free(p->server);
    acceld_wire_free(p->wire);
    free(p);
    return NULL;
}

int acceld_plugin_reconfigure(struct acceld_plugin *p, const struct acceld_config *in,
                              const char *resource)
{
    if (strlen(resource) >= sizeof(in->resource_name))
        return -ENAMETOOLONG;
    struct acceld_config c = *in;
    const struct acceld_config *cfg = &c;
    snprintf(c.resource_name, sizeof(c.resource_name), "%s", resource);
    bool moved = strcmp(cfg->plugin_dir, p->cfg.plugin_dir) != 0 ||
                 strcmp(cfg->resource_name, p->cfg.resource_name) != 0;
    bool was_registering = !p->cfg.no_register;
    struct acceld_config old = p->cfg;
    p->cfg = *cfg;
    grpc_server_set_timeouts(p->server, cfg->handshake_timeout_ns, cfg->idle_timeout_ns);
    if (moved) {
        grpc_server_close_listeners(p->server, true);
        p->serving = false;
        set_paths(p);
        if (serve(p) < 0) {
            /* keep serving where we were */
            p->cfg = old;
            set_paths(p);
            serve(p);
            return -EADDRNOTAVAIL;
        }
        if (p->ino_wd >= 0)
            inotify_rm_watch(p->ino_fd, p->ino_wd);
        p->ino_wd = -1;
        watch_dir(p);
    }
    if (cfg->no_register) {
        ev_loop_cancel_timer(p->loop, p->retry_timer);
        p->retry_timer = 0;
        client_drop(p);
        p->reg = REG_IDLE;
    } else if (moved || !was_registering) {
        reg_restart(p);
    }
    return 0;
}

void acceld_plugin_set_stats(struct acceld_plugin *p, struct acceld_stats *stats)
{
    p->stats = stats;
}

bool acceld_plugin_registered(const struct acceld_plugin *p)
{
    return p->reg == REG_REGISTERED;
}

unsigned acceld_plugin_watcher_count(const struct acceld_plugin *p)
{
    return (unsigned)p->n_watchers;
}

const char *acceld_plugin_socket_path(const struct acceld_plugin *p)
{
    return p->sock_path;
}
