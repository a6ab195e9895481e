/* kubeclaim.c — ResourceClaims read from the API server for
 * NodePrepareResources, asynchronously, with a bounded wait. See dra-kube.h. */
#include "dra-kube.h"

#include "client.h"
#include "kubeconfig.h"
#include "evloop.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETRY_MIN_NS (100ull * 1000000ull)
#define RETRY_MAX_NS (1000ull * 1000000ull)

struct fetch {
    struct dra_kube_claims *k;
    struct fetch *next;
    char *ns, *name, *uid;
    dra_fetch_done_fn done;
    void *user_data;
    struct kube_request *req;
    uint64_t retry_timer, deadline_timer;
    uint64_t delay_ns;
    unsigned attempts;
    char why[512]; /* why the last attempt did not give the claim */
};

struct dra_kube_claims {
    struct ev_loop *loop;
    struct kube_client *client;
    uint64_t wait_ns;
    struct fetch *fetches;
};

static void fetch_free(struct fetch *f)
{
    struct dra_kube_claims *k = f->k;
    for (struct fetch **q = &k->fetches; *q; q = &(*q)->next) {
        if (*q == f) {
            *q = f->next;
            break;
        }
    }
    if (f->req)
        kube_request_cancel(k->client, f->req);
    ev_loop_cancel_timer(k->loop, f->retry_timer);
    ev_loop_cancel_timer(k->loop, f->deadline_timer);
    free(f->ns);
    free(f->name);
    free(f->uid);
    free(f);
}

/* Calls done once and frees the read. */
static void fetch_end(struct fetch *f, struct dra_claim *c, int error, const char *msg)
{
    dra_fetch_done_fn done = f->done;
    void *ud = f->user_data;
    f->req = NULL; /* finished or cancelled by the caller */
    fetch_free(f);
    done(ud, c, error, msg);
}

static int fetch_send(struct fetch *f);

static void on_retry(struct ev_loop *loop, void *ud)
{
    (void)loop;
    struct fetch *f = ud;
    f->retry_timer = 0;
    int r = fetch_send(f);
    if (r < 0) {
        char msg[600];
        snprintf(msg, sizeof(msg), "ResourceClaim %s/%s: cannot send the request: %s", f->ns,
                 f->name, strerror(-r));
        fetch_end(f, NULL, r, msg);
    }
}

static void on_deadline(struct ev_loop *loop, void *ud)
{
    (void)loop;
    struct fetch *f = ud;
    f->deadline_timer = 0;
    if (f->req) {
        kube_request_cancel(f->k->client, f->req);
        f->req = NULL;
    }
    char msg[800];
    snprintf(msg, sizeof(msg), "ResourceClaim %s/%s not usable after %.1f s (%u request(s)): %s",
             f->ns, f->name, (double)f->k->wait_ns / 1e9, f->attempts,
             f->why[0] ? f->why : "the API server did not answer");
    fetch_end(f, NULL, -ETIMEDOUT, msg);
}

static void on_response(struct kube_client *c, const struct kube_response *resp, void *ud)
{
    (void)c;
    struct fetch *f = ud;
    f->req = NULL;
    if (resp->status == 200) {
        struct dra_claim *claim = NULL;
        char err[512];
        int r = dra_claim_parse(resp->body, resp->body_len, &claim, err, sizeof(err));
        if (r == 0 && strcmp(claim->uid, f->uid) == 0) {
            fetch_end(f, claim, 0, NULL);
            return;
        }
        if (r == 0)
            snprintf(f->why, sizeof(f->why),
                     "the API server has uid %s for it, the kubelet asked for %s", claim->uid,
                     f->uid);
        else
            snprintf(f->why, sizeof(f->why), "%s", err);
        dra_claim_free(claim);
        if (r == -ENOMEM) {
            fetch_end(f, NULL, r, "out of memory");
            return;
        }
    } else if (resp->status == 404) {
        snprintf(f->why, sizeof(f->why), "not found on the API server (yet)");
    } else {
        snprintf(f->why, sizeof(f->why), "%s", resp->error ? resp->error : "no answer");
    }
    log_debug("dra: ResourceClaim %s/%s: %s; asking again in %llu ms", f->ns, f->name, f->why,
              (unsigned long long)(f->delay_ns / 1000000));
    if (ev_loop_add_timer(f->k->loop, f->delay_ns, on_retry, f, &f->retry_timer) < 0) {
        fetch_end(f, NULL, -ENOMEM, "out of memory");
        return;
    }
    f->delay_ns = f->delay_ns * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : f->delay_ns * 2;
}

static int fetch_send(struct fetch *f)
{
    char path[1024];
    if (snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s",
                 f->ns, f->name) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    f->attempts++;
    return kube_client_request(f->k->client, "GET", path, NULL, NULL, on_response, f, &f->req);
}

/* Namespaces and names are DNS labels/subdomains: nothing to escape in a
 * path, and anything else is refused rather than sent. */
static bool name_ok(const char *s)
{
    if (!s[0] || strlen(s) > 253)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            return false;
    return true;
}

static int start(void *ctx, const char *ns, const char *name, const char *uid,
                 dra_fetch_done_fn done, void *user_data, void **ret_handle)
{
    struct dra_kube_claims *k = ctx;
    if (!name_ok(ns) || !name_ok(name))
        return -EINVAL;
    struct fetch *f = calloc(1, sizeof(*f));
    if (!f)
        return -ENOMEM;
    f->k = k;
    f->next = k->fetches;
    k->fetches = f;
    f->done = done;
    f->user_data = user_data;
    f->delay_ns = RETRY_MIN_NS;
    int r = -ENOMEM;
    if (!(f->ns = strdup(ns)) || !(f->name = strdup(name)) || !(f->uid = strdup(uid)))
        goto fail;
    if ((r = ev_loop_add_timer(k->loop, k->wait_ns, on_deadline, f, &f->deadline_timer)) < 0)
        goto fail;
    if ((r = fetch_send(f)) < 0)
        goto fail;
    *ret_handle = f;
    return 0;
fail:
    fetch_free(f);
    return r;
}

static void cancel(void *ctx, void *handle)
{
    (void)ctx;
    fetch_free(handle);
}

int dra_kube_claims_new(struct ev_loop *loop, struct kube_client *client, uint64_t wait_ns,
                        struct dra_kube_claims **ret)
{
    struct dra_kube_claims *k = calloc(1, sizeof(*k));
    if (!k)
        return -ENOMEM;
    k->loop = loop;
    k->client = client;
    k->wait_ns = wait_ns;
    *ret = k;
    return 0;
}

struct dra_kube_claims *dra_kube_claims_free(struct dra_kube_claims *k)
{
    if (!k)
        return NULL;
    while (k->fetches)
        fetch_free(k->fetches);
    free(k);
    return NULL;
}

struct dra_claim_fetcher dra_kube_claims_fetcher(struct dra_kube_claims *k)
{
    return (struct dra_claim_fetcher){start, cancel, k};
}

int dra_kube_client_new(struct ev_loop *loop, const char *kubeconfig, struct kube_client **ret,
                        char *err, size_t errlen)
{
    struct kube_config *kc = NULL;
    int r = kubeconfig && kubeconfig[0] ? kube_config_load_kubeconfig(kubeconfig, &kc, err, errlen)
                                        : kube_config_in_cluster(NULL, &kc, err, errlen);
    if (r < 0)
        return r;
    r = kube_client_new(loop, kc, ret);
    kube_config_free(kc);
    if (r < 0)
        snprintf(err, errlen, "cannot start the API client: %s", strerror(-r));
    return r;
}
