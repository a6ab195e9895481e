/* dra-plugin.c — the DRA kubelet plugin's sockets on the event loop: the
 * registration service (pluginregistration.Registration) on
 * <registry_dir>/<driver>-reg.sock and the DRAPlugin service, v1 and v1beta1
 * (same messages), on <plugin_dir>/dra.sock; inotify on the registry dir
 * re-creates the registration socket when it is removed. See dra.h. */
#include "dra.h"

#include "dra.pb-c.h"
#include "drahealth.pb-c.h"
#include "grpc.h"
#include "log.h"
#include "pluginregistration.pb-c.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#define DRA_ERR_LEN 512

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim Claim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest PrepareReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry
    PrepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device Device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest UnprepareReq;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry
    UnprepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse UnprepareOne;

struct dra_plugin {
    struct ev_loop *loop;
    struct dra_plugin_config cfg;
    struct grpc_server *server;
    char endpoint[PATH_MAX];
    char reg_path[PATH_MAX];
    char reg_name[NAME_MAX + 1];
    int ino_fd;
    bool registered;
    struct pending *pending; /* prepare calls waiting for the API server */
    struct waiting *waiting; /* prepare replies waiting for MPS daemons */
    /* resource-health streams (NodeWatchResources), and per device its last
     * reported health and when it was determined (Unix seconds) */
    struct grpc_call **watchers;
    size_t n_watchers, cap_watchers;
    bool *last_healthy;
    int64_t *changed_at;
};

/* ---------------------------------------------------------- registration */

static void on_get_info(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    (void)req;
    struct dra_plugin *p = ud;
    /* the service names the kubelet looks for (k8s.io/kubelet/pkg/apis/dra/
     * {v1,v1beta1} DRAPluginService); it picks the newest it knows */
    static char *versions[] = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
    Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    info.type = "DRAPlugin";
    info.name = (char *)p->cfg.driver_name;
    info.endpoint = p->endpoint;
    info.n_supported_versions = 2;
    info.supported_versions = versions;
    grpc_call_reply_msg(call, &info.base);
}

static void on_notify(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct dra_plugin *p = ud;
    const Pluginregistration__RegistrationStatus *st = (const void *)req->msg;
    p->registered = st->plugin_registered;
    if (p->cfg.on_registration)
        p->cfg.on_registration(p->cfg.on_change_data, st->plugin_registered);
    if (st->plugin_registered)
        log_info("dra: the kubelet registered driver %s", p->cfg.driver_name);
    else
        log_error("dra: the kubelet refused driver %s: %s", p->cfg.driver_name,
                  st->error[0] ? st->error : "(no reason given)");
    Pluginregistration__RegistrationStatusResponse r =
        PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    grpc_call_reply_msg(call, &r.base);
}

/* ------------------------------------------------------------ DRA service */

static void free_prepare_resp(PrepareResp *resp)
{
    for (size_t i = 0; i < resp->n_claims; i++) {
        PrepareEntry *e = resp->claims[i];
        if (!e)
            continue;
        if (e->value) {
            for (size_t j = 0; j < e->value->n_devices; j++) {
                free(e->value->devices[j]->cdi_device_ids);
                free(e->value->devices[j]);
            }
            free(e->value->devices);
            if (e->value->error != protobuf_c_empty_string)
                free(e->value->error);
            free(e->value);
        }
        free(e);
    }
    free(resp->claims);
}

/* One claim of a NodePrepareResources call being read from the API server. */
struct pending_claim {
    struct pending *pd;
    const char *ns, *name, *uid; /* copies, in pd->strings */
    void *handle;                /* the fetch in flight, NULL when done */
    struct dra_claim *claim;     /* what the fetch got (NULL: prepared already or failed) */
    int error;                   /* the fetch's -errno, 0 if none */
    char *message;
};

/* A NodePrepareResources call whose claims are being read. */
struct pending {
    struct dra_plugin *p;
    struct grpc_call *call;
    struct pending *next;
    size_t n, left;
    struct pending_claim *c;
    uint64_t arrived_ns; /* when the kubelet's call came (cfg.on_prepared) */
};

/* A claim source that hands out the one claim a fetch got. */
static int source_fetched(void *ctx, const char *ns, const char *name, const char *uid,
                          struct dra_claim **ret, char *err, size_t errlen)
{
    (void)ns;
    (void)name;
    (void)uid;
    struct pending_claim *pc = ctx;
    if (!pc->claim) {
        snprintf(err, errlen, "%s", pc->message ? pc->message : "claim not read");
        return pc->error ? pc->error : -EIO;
    }
    *ret = pc->claim;
    pc->claim = NULL;
    return 0;
}

/* A NodePrepareResources reply whose claims are prepared but not all usable
 * yet: an MPS claim's daemon is still starting (cfg.mps.ready). The reply
 * is built from the state when it goes out, so nothing borrowed can dangle. */
struct waiting {
    struct dra_plugin *p;
    struct grpc_call *call;
    struct waiting *next;
    size_t n;
    char **uid;
    char **err;  /* NULL: prepared */
    bool *fresh; /* prepared by this call (undone if its daemon never comes up) */
    uint64_t timer;
    uint64_t arrived_ns; /* when the kubelet's call came (cfg.on_prepared) */
};

/* Fills one claim's entry from the state (or its error); the strings of a
 * prepared claim are borrowed from the state, which outlives the reply. */
static int fill_entry(struct dra_plugin *p, const char *uid, const char *error, PrepareEntry *e)
{
    PrepareOne *one = malloc(sizeof(*one));
    if (!one)
        return -ENOMEM;
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init(one);
    e->value = one;
    const struct dra_prepared *pr = error ? NULL : dra_state_find(p->cfg.state, uid);
    if (!pr) {
        one->error = strdup(error ? error : "the claim was unprepared meanwhile");
        return one->error ? 0 : -ENOMEM;
    }
    one->devices = pr->n_devices ? calloc(pr->n_devices, sizeof(Device *)) : NULL;
    if (pr->n_devices && !one->devices)
        return -ENOMEM;
    for (size_t i = 0; i < pr->n_devices; i++) {
        Device *d = malloc(sizeof(*d));
        if (!d)
            return -ENOMEM;
        k8s__io__kubelet__pkg__apis__dra__v1__device__init(d);
        one->devices[one->n_devices++] = d;
        d->n_request_names = pr->devices[i].n_requests;
        d->request_names = pr->devices[i].requests;
        d->pool_name = pr->devices[i].pool;
        d->device_name = pr->devices[i].device;
        d->cdi_device_ids = malloc(sizeof(char *));
        if (!d->cdi_device_ids)
            return -ENOMEM;
        d->cdi_device_ids[0] = pr->devices[i].cdi_id;
        d->n_cdi_device_ids = 1;
    }
    return 0;
}

/* Answers the call: each claim's devices from the state, or its error. */
static void send_reply(struct dra_plugin *p, struct grpc_call *call, size_t n, char *const *uid,
                       char *const *err, uint64_t arrived_ns)
{
    PrepareResp resp = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
    int r = 0;
    resp.claims = n ? calloc(n, sizeof(PrepareEntry *)) : NULL;
    if (n && !resp.claims)
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++) {
        PrepareEntry *e = malloc(sizeof(*e));
        if (!e) {
            r = -ENOMEM;
            break;
        }
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init(
            e);
        resp.claims[resp.n_claims++] = e;
        e->key = uid[i];
        r = fill_entry(p, uid[i], err[i], e);
    }
    if (r < 0)
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    else
        grpc_call_reply_msg(call, &resp.base);
    free_prepare_resp(&resp);
    uint64_t took = mono_ns() - arrived_ns;
    for (size_t i = 0; p->cfg.on_prepared && i < n; i++)
        p->cfg.on_prepared(p->cfg.on_change_data, r == 0 && !err[i], took);
    if (p->cfg.on_change)
        p->cfg.on_change(p->cfg.on_change_data);
}

static void waiting_free(struct waiting *w)
{
    if (w->timer)
        ev_loop_cancel_timer(w->p->loop, w->timer);
    for (size_t i = 0; i < w->n; i++) {
        free(w->uid[i]);
        free(w->err[i]);
    }
    free(w->uid);
    free(w->err);
    free(w->fresh);
    free(w);
}

static void waiting_unlink(struct waiting *w)
{
    for (struct waiting **q = &w->p->waiting; *q; q = &(*q)->next) {
        if (*q == w) {
            *q = w->next;
            break;
        }
    }
}

/* Whether every prepared claim of w is usable. final: the wait is over, a
 * claim still not usable gets an error (and is undone when this call
 * prepared it: nothing half-made stays). */
static bool waiting_check(struct waiting *w, bool final)
{
    struct dra_plugin *p = w->p;
    bool all = true;
    for (size_t i = 0; i < w->n; i++) {
        if (w->err[i] || !dra_state_find(p->cfg.state, w->uid[i]))
            continue;
        char why[256] = "";
        if (p->cfg.mps.ready(p->cfg.mps.ctx, w->uid[i], why, sizeof(why)) > 0)
            continue;
        if (!final) {
            all = false;
            continue;
        }
        char msg[DRA_ERR_LEN];
        snprintf(msg, sizeof(msg), "claim %s: its MPS control daemon is not up after %.1f s%s%s",
                 w->uid[i], (double)p->cfg.mps_ready_wait_ns / 1e9, why[0] ? ": " : "", why);
        log_warn("dra: prepare %s", msg);
        w->err[i] = strdup(msg);
        char uerr[DRA_ERR_LEN];
        if (w->fresh[i] && dra_unprepare(p->cfg.state, w->uid[i], uerr, sizeof(uerr)) < 0)
            log_warn("dra: %s", uerr);
    }
    return all;
}

static void waiting_finish(struct waiting *w)
{
    waiting_unlink(w);
    w->timer = 0;
    send_reply(w->p, w->call, w->n, w->uid, w->err, w->arrived_ns);
    waiting_free(w);
}

static void on_waiting_deadline(struct ev_loop *loop, void *ud)
{
    (void)loop;
    struct waiting *w = ud;
    w->timer = 0;
    waiting_check(w, true);
    waiting_finish(w);
}

void dra_plugin_claims_changed(struct dra_plugin *p)
{
    struct waiting *w = p->waiting;
    while (w) {
        struct waiting *next = w->next;
        if (waiting_check(w, false)) {
            if (w->timer)
                ev_loop_cancel_timer(p->loop, w->timer);
            w->timer = 0;
            waiting_finish(w);
        }
        w = next;
    }
}

/* Prepares claims (each with its source) and answers the call, once every
 * prepared claim is usable or the wait for it is over. */
static void prepare_reply(struct dra_plugin *p, struct grpc_call *call, size_t n,
                          const char *const *ns, const char *const *name, const char *const *uid,
                          const struct dra_claim_source *srcs, uint64_t arrived_ns)
{
    struct waiting *w = calloc(1, sizeof(*w));
    if (!w || !(w->uid = calloc(n ? n : 1, sizeof(char *))) ||
        !(w->err = calloc(n ? n : 1, sizeof(char *))) ||
        !(w->fresh = calloc(n ? n : 1, sizeof(bool)))) {
        if (w) {
            free(w->uid);
            free(w->err);
        }
        free(w);
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->p = p;
    w->call = call;
    w->arrived_ns = arrived_ns;
    bool nomem = false;
    for (size_t i = 0; i < n; i++) {
        w->n = i + 1;
        char err[DRA_ERR_LEN] = "";
        const struct dra_prepared *pr = NULL;
        int r;
        if (!(w->uid[i] = strdup(uid[i]))) {
            nomem = true;
            break;
        }
        if (!uid[i][0] || !ns[i][0] || !name[i][0]) {
            snprintf(err, sizeof(err), "claim needs namespace, uid and name");
            r = -EINVAL;
        } else {
            w->fresh[i] = !dra_state_find(p->cfg.state, uid[i]);
            r = dra_prepare(p->cfg.state, &srcs[i], ns[i], name[i], uid[i], &pr, err, sizeof(err));
        }
        if (r < 0) {
            log_warn("dra: prepare %s/%s (%s): %s", ns[i], name[i], uid[i], err);
            if (!(w->err[i] = strdup(err[0] ? err : strerror(-r)))) {
                nomem = true;
                break;
            }
        }
    }
    if (nomem) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        waiting_free(w);
        return;
    }
    if (!p->cfg.mps.ready || waiting_check(w, false)) {
        send_reply(p, call, w->n, w->uid, w->err, arrived_ns);
        waiting_free(w);
        return;
    }
    /* an MPS daemon is still starting: the container must not start before it
     * answers (a client without its daemon would run uncapped) */
    w->next = p->waiting;
    p->waiting = w;
    if (ev_loop_add_timer(p->loop, p->cfg.mps_ready_wait_ns, on_waiting_deadline, w, &w->timer) <
        0) {
        w->timer = 0;
        waiting_check(w, true);
        waiting_finish(w);
    }
}

static void pending_free(struct pending *pd)
{
    for (size_t i = 0; i < pd->n; i++) {
        struct pending_claim *pc = &pd->c[i];
        if (pc->handle)
            pd->p->cfg.fetcher.cancel(pd->p->cfg.fetcher.ctx, pc->handle);
        dra_claim_free(pc->claim);
        free(pc->message);
        free((char *)pc->ns);
        free((char *)pc->name);
        free((char *)pc->uid);
    }
    free(pd->c);
    free(pd);
}

static void pending_unlink(struct pending *pd)
{
    for (struct pending **q = &pd->p->pending; *q; q = &(*q)->next) {
        if (*q == pd) {
            *q = pd->next;
            break;
        }
    }
}

/* Every claim has been read (or failed): prepare them and answer. */
static void pending_finish(struct pending *pd)
{
    size_t n = pd->n;
    const char **ns = calloc(n ? n : 1, sizeof(char *));
    const char **name = calloc(n ? n : 1, sizeof(char *));
    const char **uid = calloc(n ? n : 1, sizeof(char *));
    struct dra_claim_source *srcs = calloc(n ? n : 1, sizeof(*srcs));
    if (!ns || !name || !uid || !srcs) {
        grpc_call_finish(pd->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            ns[i] = pd->c[i].ns ? pd->c[i].ns : "";
            name[i] = pd->c[i].name ? pd->c[i].name : "";
            uid[i] = pd->c[i].uid ? pd->c[i].uid : "";
            srcs[i] = (struct dra_claim_source){source_fetched, &pd->c[i]};
        }
        prepare_reply(pd->p, pd->call, n, ns, name, uid, srcs, pd->arrived_ns);
    }
    free(ns);
    free(name);
    free(uid);
    free(srcs);
    pending_unlink(pd);
    pending_free(pd);
}

static void on_fetched(void *ud, struct dra_claim *claim, int error, const char *message)
{
    struct pending_claim *pc = ud;
    pc->handle = NULL;
    pc->claim = claim;
    pc->error = error;
    if (!claim)
        pc->message = strdup(message && message[0] ? message : strerror(-error));
    if (--pc->pd->left == 0)
        pending_finish(pc->pd);
}

/* Reads the claims not prepared yet from the API server, then answers. */
static void prepare_async(struct dra_plugin *p, struct grpc_call *call, const PrepareReq *rq)
{
    struct pending *pd = calloc(1, sizeof(*pd));
    if (!pd || !(pd->c = calloc(rq->n_claims ? rq->n_claims : 1, sizeof(*pd->c)))) {
        free(pd);
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    pd->p = p;
    pd->call = call;
    pd->arrived_ns = mono_ns();
    pd->next = p->pending;
    p->pending = pd;
    pd->left = 1; /* held until every fetch has started */
    for (size_t i = 0; i < rq->n_claims; i++) {
        const Claim *c = rq->claims[i];
        struct pending_claim *pc = &pd->c[pd->n++];
        pc->pd = pd;
        pc->ns = strdup(c->namespace_);
        pc->name = strdup(c->name);
        pc->uid = strdup(c->uid);
        if (!pc->ns || !pc->name || !pc->uid) {
            pc->error = -ENOMEM;
            continue;
        }
        if (!c->uid[0] || !c->namespace_[0] || !c->name[0] || dra_state_find(p->cfg.state, c->uid))
            continue; /* answered without a read: an error, or the checkpointed answer */
        pd->left++;
        int r = p->cfg.fetcher.start(p->cfg.fetcher.ctx, c->namespace_, c->name, c->uid, on_fetched,
                                     pc, &pc->handle);
        if (r < 0) {
            pd->left--;
            pc->handle = NULL;
            pc->error = r;
            pc->message = strdup("cannot start reading the claim from the API server");
        }
    }
    if (--pd->left == 0)
        pending_finish(pd);
}

static void on_prepare(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct dra_plugin *p = ud;
    const PrepareReq *rq = (const void *)req->msg;
    if (p->cfg.fetcher.start) {
        prepare_async(p, call, rq);
        return;
    }
    size_t n = rq->n_claims;
    const char **ns = calloc(n ? n : 1, sizeof(char *));
    const char **name = calloc(n ? n : 1, sizeof(char *));
    const char **uid = calloc(n ? n : 1, sizeof(char *));
    struct dra_claim_source *srcs = calloc(n ? n : 1, sizeof(*srcs));
    if (!ns || !name || !uid || !srcs) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            ns[i] = rq->claims[i]->namespace_;
            name[i] = rq->claims[i]->name;
            uid[i] = rq->claims[i]->uid;
            srcs[i] = p->cfg.source;
        }
        prepare_reply(p, call, n, ns, name, uid, srcs, mono_ns());
    }
    free(ns);
    free(name);
    free(uid);
    free(srcs);
}

static void on_unprepare(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct dra_plugin *p = ud;
    const UnprepareReq *rq = (const void *)req->msg;
    UnprepareResp resp =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
    size_t n = rq->n_claims;
    UnprepareEntry *entries = n ? calloc(n, sizeof(*entries)) : NULL;
    UnprepareOne *ones = n ? calloc(n, sizeof(*ones)) : NULL;
    UnprepareEntry **ptrs = n ? calloc(n, sizeof(*ptrs)) : NULL;
    char(*errs)[DRA_ERR_LEN] = n ? calloc(n, DRA_ERR_LEN) : NULL;
    if (n && (!entries || !ones || !ptrs || !errs)) {
        grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init(
            &entries[i]);
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init(&ones[i]);
        entries[i].key = rq->claims[i]->uid;
        entries[i].value = &ones[i];
        ptrs[i] = &entries[i];
        int r = dra_unprepare(p->cfg.state, rq->claims[i]->uid, errs[i], DRA_ERR_LEN);
        if (r < 0) {
            log_warn("dra: unprepare %s: %s", rq->claims[i]->uid, errs[i]);
            ones[i].error = errs[i];
        }
    }
    resp.n_claims = n;
    resp.claims = ptrs;
    grpc_call_reply_msg(call, &resp.base);
    if (p->cfg.on_change)
        p->cfg.on_change(p->cfg.on_change_data);
out:
    free(entries);
    free(ones);
    free(ptrs);
    free(errs);
}

/* ------------------------------------------------------ resource health */

/* Sends every device's health on one stream. Returns grpc_call_send's result. */
/* The devices a GPU is published as: itself, or its MIG partitions (dra.mig). */
static size_t published_devices(const struct dra_gpu *g)
{
    size_t n = 0;
    for (size_t k = 0; k < g->n_mig_profiles; k++)
        n += g->mig_profiles[k].n_placements;
    return g->n_mig_profiles ? n : 1;
}

static int health_send(struct dra_plugin *p, struct grpc_call *call)
{
    size_t n = 0;
    for (size_t i = 0; i < p->cfg.n_gpus; i++)
        n += published_devices(&p->cfg.gpus[i]);
    V1alpha1__NodeWatchResourcesResponse resp = V1ALPHA1__NODE_WATCH_RESOURCES_RESPONSE__INIT;
    V1alpha1__DeviceHealth *h = calloc(n ? n : 1, sizeof(*h));
    V1alpha1__DeviceIdentifier *id = calloc(n ? n : 1, sizeof(*id));
    V1alpha1__DeviceHealth **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    char(*names)[64] = calloc(n ? n : 1, sizeof(*names));
    int r = -ENOMEM;
    if (h && id && ptrs && names) {
        size_t j = 0;
        for (size_t i = 0; i < p->cfg.n_gpus; i++) {
            const struct dra_gpu *g = &p->cfg.gpus[i];
            size_t first = j;
            if (!g->n_mig_profiles)
                snprintf(names[j++], sizeof(names[0]), "%s", g->name);
            /* each partition has its GPU's health */
            for (size_t k = 0; k < g->n_mig_profiles; k++)
                for (unsigned m = 0; m < g->mig_profiles[k].n_placements; m++)
                    dra_partition_name(g, &g->mig_profiles[k],
                                       g->mig_profiles[k].placements[m].start, names[j++],
                                       sizeof(names[0]));
            for (size_t d = first; d < j; d++) {
                v1alpha1__device_identifier__init(&id[d]);
                v1alpha1__device_health__init(&h[d]);
                id[d].pool_name = (char *)(p->cfg.pool_name ? p->cfg.pool_name : "");
                id[d].device_name = names[d];
                h[d].device = &id[d];
                h[d].health = g->healthy ? V1ALPHA1__HEALTH_STATUS__HEALTHY
                                         : V1ALPHA1__HEALTH_STATUS__UNHEALTHY;
                h[d].last_updated_time = p->changed_at[i];
                ptrs[d] = &h[d];
            }
        }
        resp.n_devices = n;
        resp.devices = ptrs;
        r = grpc_call_send_msg(call, &resp.base);
    }
    free(h);
    free(id);
    free(ptrs);
    free(names);
    return r;
}

static void watcher_remove(struct dra_plugin *p, size_t i)
{
    p->watchers[i] = p->watchers[--p->n_watchers];
}

static void on_watch_cancelled(struct grpc_call *call, void *ud)
{
    struct dra_plugin *p = ud;
    for (size_t i = 0; i < p->n_watchers; i++) {
        if (p->watchers[i] == call) {
            watcher_remove(p, i);
            break;
        }
    }
    grpc_call_finish(call, GRPC_STATUS_CANCELLED, NULL);
}

static void on_watch_resources(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    (void)req;
    struct dra_plugin *p = ud;
    if (p->n_watchers == p->cap_watchers) {
        size_t cap = p->cap_watchers ? p->cap_watchers * 2 : 4;
        struct grpc_call **w = realloc(p->watchers, cap * sizeof(*w));
        if (!w) {
            grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        p->watchers = w;
        p->cap_watchers = cap;
    }
    if (health_send(p, call) < 0) {
        grpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, "cannot send the device health");
        return;
    }
    p->watchers[p->n_watchers++] = call;
    grpc_call_set_cancel_cb(call, on_watch_cancelled, p);
    log_info("dra: the kubelet watches the health of %zu device(s)", p->cfg.n_gpus);
}

void dra_plugin_health_changed(struct dra_plugin *p)
{
    int64_t now = (int64_t)time(NULL);
    for (size_t i = 0; i < p->cfg.n_gpus; i++) {
        if (p->last_healthy[i] != p->cfg.gpus[i].healthy) {
            p->last_healthy[i] = p->cfg.gpus[i].healthy;
            p->changed_at[i] = now;
        }
    }
    for (size_t i = 0; i < p->n_watchers;) {
        if (health_send(p, p->watchers[i]) < 0) {
            /* gone or not reading: end it; the kubelet opens a new one */
            struct grpc_call *c = p->watchers[i];
            grpc_call_set_cancel_cb(c, NULL, NULL);
            watcher_remove(p, i);
            grpc_call_finish(c, GRPC_STATUS_UNAVAILABLE, "stream not keeping up");
            continue;
        }
        i++;
    }
}

size_t dra_plugin_health_watchers(const struct dra_plugin *p)
{
    return p->n_watchers;
}

/* ------------------------------------------------------------ sockets */

static int listen_registration(struct dra_plugin *p)
{
    int r = grpc_server_listen_unix(p->server, p->reg_path);
    if (r < 0)
        log_error("dra: cannot serve the registration socket %s: %s", p->reg_path, strerror(-r));
    else
        log_info("dra: registration socket %s (endpoint %s)", p->reg_path, p->endpoint);
    return r;
}

static void on_inotify(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)loop;
    (void)events;
    struct dra_plugin *p = ud;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool gone = false;
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        for (char *q = buf; q < buf + n;) {
            const struct inotify_event *e = (const void *)q;
            if ((e->mask & (IN_DELETE | IN_MOVED_FROM)) && e->len &&
                strcmp(e->name, p->reg_name) == 0)
                gone = true;
            if (e->mask & IN_Q_OVERFLOW)
                gone = access(p->reg_path, F_OK) != 0;
            q += sizeof(*e) + e->len;
        }
    }
    if (gone) {
        /* The registration socket was removed: a new one is what the
         * kubelet's plugin watcher reacts to. The endpoint keeps serving. */
        log_warn("dra: registration socket %s was removed: serving it again", p->reg_path);
        p->registered = false;
        grpc_server_close_listeners(p->server, false);
        int r = grpc_server_listen_unix(p->server, p->endpoint);
        if (r < 0)
            log_error("dra: cannot serve %s again: %s", p->endpoint, strerror(-r));
        listen_registration(p);
    }
}

int dra_plugin_new(struct ev_loop *loop, const struct dra_plugin_config *cfg,
                   struct dra_plugin **ret)
{
    struct dra_plugin *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->loop = loop;
    p->cfg = *cfg;
    if (!p->cfg.mps_ready_wait_ns)
        p->cfg.mps_ready_wait_ns = 10000000000ull;
    p->ino_fd = -1;
    int r = -ENAMETOOLONG;
    if (snprintf(p->endpoint, sizeof(p->endpoint), "%s/dra.sock", cfg->plugin_dir) >=
            (int)sizeof(p->endpoint) ||
        snprintf(p->reg_name, sizeof(p->reg_name), "%s-reg.sock", cfg->driver_name) >=
            (int)sizeof(p->reg_name) ||
        snprintf(p->reg_path, sizeof(p->reg_path), "%s/%s", cfg->registry_dir, p->reg_name) >=
            (int)sizeof(p->reg_path))
        goto fail;
    if ((r = grpc_server_new(loop, NULL, &p->server)) < 0)
        goto fail;
    static const char *const versions[] = {"v1", "v1beta1"};
    char path[256];
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "/k8s.io.kubelet.pkg.apis.dra.%s.DRAPlugin/%s", versions[i],
                 "NodePrepareResources");
        if ((r = grpc_server_add_method(
                 p->server, path, GRPC_METHOD_UNARY,
                 &k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor,
                 on_prepare, p)) < 0)
            goto fail;
        snprintf(path, sizeof(path), "/k8s.io.kubelet.pkg.apis.dra.%s.DRAPlugin/%s", versions[i],
                 "NodeUnprepareResources");
        if ((r = grpc_server_add_method(
                 p->server, path, GRPC_METHOD_UNARY,
                 &k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor,
                 on_unprepare, p)) < 0)
            goto fail;
    }
    if ((r = grpc_server_add_method(p->server, "/v1alpha1.DRAResourceHealth/NodeWatchResources",
                                    GRPC_METHOD_SERVER_STREAMING,
                                    &v1alpha1__node_watch_resources_request__descriptor,
                                    on_watch_resources, p)) < 0)
        goto fail;
    p->last_healthy = calloc(cfg->n_gpus ? cfg->n_gpus : 1, sizeof(bool));
    p->changed_at = calloc(cfg->n_gpus ? cfg->n_gpus : 1, sizeof(int64_t));
    if (!p->last_healthy || !p->changed_at) {
        r = -ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_gpus; i++) {
        p->last_healthy[i] = cfg->gpus[i].healthy;
        p->changed_at[i] = (int64_t)time(NULL);
    }
    if ((r = grpc_server_add_method(
             p->server, "/pluginregistration.Registration/GetInfo", GRPC_METHOD_UNARY,
             &pluginregistration__info_request__descriptor, on_get_info, p)) < 0 ||
        (r = grpc_server_add_method(
             p->server, "/pluginregistration.Registration/NotifyRegistrationStatus",
             GRPC_METHOD_UNARY, &pluginregistration__registration_status__descriptor, on_notify,
             p)) < 0)
        goto fail;
    p->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (p->ino_fd < 0) {
        r = -errno;
        goto fail;
    }
    if (inotify_add_watch(p->ino_fd, cfg->registry_dir, IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR) <
        0) {
        r = -errno;
        log_error("dra: cannot watch %s: %s", cfg->registry_dir, strerror(errno));
        goto fail;
    }
    if ((r = ev_loop_add_io(loop, p->ino_fd, EPOLLIN, on_inotify, p)) < 0)
        goto fail;
    /* the endpoint first: the kubelet dials it as soon as it sees the registration socket */
    if ((r = grpc_server_listen_unix(p->server, p->endpoint)) < 0) {
        log_error("dra: cannot serve %s: %s", p->endpoint, strerror(-r));
        goto fail;
    }
    if ((r = listen_registration(p)) < 0)
        goto fail;
    *ret = p;
    return 0;
fail:
    dra_plugin_free(p);
    return r;
}

struct dra_plugin *dra_plugin_free(struct dra_plugin *p)
{
    if (!p)
        return NULL;
    if (p->ino_fd >= 0) {
        ev_loop_del_io(p->loop, p->ino_fd);
        close(p->ino_fd);
    }
    /* calls still waiting for the API server: their reads stop, they end UNAVAILABLE */
    while (p->pending) {
        struct pending *pd = p->pending;
        p->pending = pd->next;
        grpc_call_finish(pd->call, GRPC_STATUS_UNAVAILABLE, "the DRA driver is stopping");
        pending_free(pd);
    }
    while (p->waiting) {
        struct waiting *w = p->waiting;
        p->waiting = w->next;
        grpc_call_finish(w->call, GRPC_STATUS_UNAVAILABLE, "the DRA driver is stopping");
        waiting_free(w);
    }
    for (size_t i = 0; i < p->n_watchers; i++) {
        grpc_call_set_cancel_cb(p->watchers[i], NULL, NULL);
        grpc_call_finish(p->watchers[i], GRPC_STATUS_UNAVAILABLE, "the DRA driver is stopping");
    }
    free(p->watchers);
    free(p->last_healthy);
    free(p->changed_at);
    grpc_server_free(p->server);
    free(p);
    return NULL;
}

bool dra_plugin_registered(const struct dra_plugin *p)
{
    return p->registered;
}
