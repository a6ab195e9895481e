/* client.c — owns the agent's HTTPS traffic with the API server: one libcurl multi handle
 * whose sockets and timeout are watched by the ev_loop (CURLMOPT_SOCKETFUNCTION /
 * CURLMOPT_TIMERFUNCTION, curl_multi_socket_action), requests with their buffers, and the
 * messages made from failures.
 *
 * libcurl forbids multi-handle calls from inside its own callbacks (CURLM_RECURSIVE_API_CALL),
 * and a stream's line callback runs inside curl. So while curl is running (in_curl), a new
 * request is added from a 0-delay loop timer, and a cancelled request is only marked (its
 * callbacks stop at once) and reaped from such a timer. */
#define _GNU_SOURCE
#include "client.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel-config.h"
#include "kubeconfig.h"
#include "evloop.h"
#include "fs.h"
#include "util.h"

#define BODY_MAX (64u * 1024 * 1024) /* a PodList of a full node is a few MiB */
#define LINE_MAX_LEN (16u * 1024 * 1024)
#define TOKEN_MAX (64 * 1024)
#define CONNECT_TIMEOUT_MS 10000L
#define REQUEST_TIMEOUT_MS 30000L

struct kube_request {
    struct kube_client *c;
    struct kube_request *next;
    CURL *easy;
    struct curl_slist *headers;
    char *method, *path;
    bool stream, added, cancelled, finished;
    kube_line_cb on_line;
    kube_response_cb done;
    void *user_data;
    char *buf;
    size_t len, cap;
    char *pre_error; /* a failure before any transfer (token unreadable): reported from a timer */
    char errbuf[CURL_ERROR_SIZE];
};

struct kube_client {
    struct ev_loop *loop;
    CURLM *multi;
    struct kube_config cfg;    /* owned copies of what requests need */
    struct kube_request *reqs; /* live, in any state */
    uint64_t timer_id;         /* curl's timeout */
    uint64_t kick_id;          /* deferred adds and reaps */
    int in_curl;
};

static void kick(struct kube_client *c);

size_t kube_client_pending(const struct kube_client *c)
{
    size_t n = 0;
    for (struct kube_request *r = c->reqs; r; r = r->next)
        n += !r->cancelled && !r->finished;
    return n;
}

static void req_free(struct kube_request *r)
{
    if (r->easy) {
        if (r->added)
            curl_multi_remove_handle(r->c->multi, r->easy);
        curl_easy_cleanup(r->easy);
    }
    curl_slist_free_all(r->headers);
    free(r->method);
    free(r->path);
    free(r->buf);
    free(r->pre_error);
    free(r);
}

static void req_unlink(struct kube_request *r)
{
    for (struct kube_request **p = &r->c->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            return;
        }
}

/* ---- messages ---- */

/* The "message" of a Status body, or "". Owned by the caller. */
static char *status_message(const char *body, size_t len)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *m = json_object_get(root, "message");
    char *s = strdup(json_is_string(m) ? json_string_value(m) : "");
    json_decref(root);
    return s;
}

static char *describe(struct kube_request *r, long status, CURLcode res)
{
    struct kube_client *c = r->c;
    char *out = NULL;
    int n = 0;
    if (status == 0) {
        const char *why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(res);
        bool tls = res == CURLE_PEER_FAILED_VERIFICATION || res == CURLE_SSL_CACERT_BADFILE ||
                   res == CURLE_SSL_CONNECT_ERROR || res == CURLE_SSL_CERTPROBLEM;
        n = asprintf(&out,
                     tls ? "TLS with the API server %s failed (%s): check the cluster's "
                           "certificate-authority and the client certificate"
                         : "cannot reach the API server %s (%s): check that it is up and that "
                           "the server address is right",
                     c->cfg.server, why);
        return n < 0 ? NULL : out;
    }
    if (status >= 200 && status < 300)
        return NULL;
    char *msg = status_message(r->buf ? r->buf : "", r->len);
    const char *m = msg ? msg : "";
    if (status == 401)
        n = asprintf(&out,
                     "the API server %s rejected acceld's credentials (401 Unauthorized%s%s): "
                     "the token or client certificate is wrong or expired; check %s%s",
                     c->cfg.server, *m ? ": " : "", m,
                     c->cfg.token_file ? "the token file " : "the kubeconfig's user",
                     c->cfg.token_file ? c->cfg.token_file : "");
    else if (status == 403)
        n = asprintf(&out,
                     "the API server denied %s %s (403 Forbidden%s%s): give acceld's service "
                     "account the RBAC rules in docs/kube.md (pods get/list/watch/patch, events "
                     "create)",
                     r->method, r->path, *m ? ": " : "", m);
    else
        n = asprintf(&out, "%s %s: HTTP %ld%s%s", r->method, r->path, status, *m ? ": " : "", m);
    free(msg);
    return n < 0 ? NULL : out;
}

static void finish(struct kube_request *r, CURLcode res)
{
    long status = 0;
    r->finished = true;
    if (!r->pre_error && r->easy)
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    /* a transfer that broke after a 2xx (a watch cut mid-stream, an oversized answer) is a
     * transfer error: status 0 and curl's reason */
    if (res != CURLE_OK && status >= 200 && status < 300)
        status = 0;
    char *err = r->pre_error ? strdup(r->pre_error) : describe(r, status, res);
    if (!err && (res != CURLE_OK || status < 200 || status >= 300))
        err = strdup("out of memory");
    struct kube_response resp = {
        .status = r->pre_error ? 0 : status,
        .body = r->stream || !r->buf ? "" : r->buf,
        .body_len = r->stream ? 0 : r->len,
        .error = err,
    };
    if (resp.status == 0 && !resp.error)
        resp.error = "transfer failed";
    if (r->done)
        r->done(r->c, &resp, r->user_data);
    free(err);
}

/* ---- curl callbacks ---- */

static int buf_append(struct kube_request *r, const char *data, size_t n)
{
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 4096;
        while (cap < r->len + n + 1)
            cap *= 2;
        char *b = realloc(r->buf, cap);
        if (!b)
            return -ENOMEM;
        r->buf = b;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, data, n);
    r->len += n;
    r->buf[r->len] = 0;
    return 0;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *ud)
{
    struct kube_request *r = ud;
    size_t n = size * nmemb;
    if (r->cancelled)
        return 0;
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    bool lines = r->stream && status >= 200 && status < 300;
    if (r->len + n > (lines ? LINE_MAX_LEN : BODY_MAX)) {
        snprintf(r->errbuf, sizeof(r->errbuf), "answer larger than %u bytes",
                 lines ? LINE_MAX_LEN : BODY_MAX);
        return 0;
    }
    if (buf_append(r, data, n) < 0)
        return 0;
    if (!lines)
        return n;
    size_t start = 0;
    for (;;) {
        char *nl = memchr(r->buf + start, '\n', r->len - start);
        if (!nl)
            break;
        size_t ll = (size_t)(nl - (r->buf + start));
        if (ll && r->on_line(r->c, r->buf + start, ll, r->user_data) != 0) {
            snprintf(r->errbuf, sizeof(r->errbuf), "stream stopped by its reader");
            return 0;
        }
        start += ll + 1;
        if (r->cancelled)
            return 0;
    }
    memmove(r->buf, r->buf + start, r->len - start);
    r->len -= start;
    return n;
}

static void check_done(struct kube_client *c)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        struct kube_request *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        CURLcode res = m->data.result;
        curl_multi_remove_handle(c->multi, m->easy_handle);
        r->added = false;
        req_unlink(r);
        if (!r->cancelled)
            finish(r, res);
        req_free(r);
    }
}

static void on_io(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    struct kube_client *c = ud;
    int flags = 0, running;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP))
        flags |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        flags |= CURL_CSELECT_OUT;
    if (events & EPOLLERR)
        flags |= CURL_CSELECT_ERR;
    c->in_curl++;
    curl_multi_socket_action(c->multi, fd, flags, &running);
    c->in_curl--;
    check_done(c);
}

static int on_socket(CURL *e, curl_socket_t s, int what, void *ud, void *socketp)
{
    struct kube_client *c = ud;
    if (what == CURL_POLL_REMOVE) {
        ev_loop_del_io(c->loop, s);
        return 0;
    }
    uint32_t ev = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    int r = ev_loop_add_io(c->loop, s, ev, on_io, c);
    if (r == -EEXIST)
        r = ev_loop_mod_io(c->loop, s, ev);
    return r < 0 ? -1 : 0;
}

static void on_timeout(struct ev_loop *loop, void *ud)
{
    struct kube_client *c = ud;
    int running;
    c->timer_id = 0;
    c->in_curl++;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    c->in_curl--;
    check_done(c);
}

static int on_timer(CURLM *m, long timeout_ms, void *ud)
{
    struct kube_client *c = ud;
    ev_loop_cancel_timer(c->loop, c->timer_id);
    c->timer_id = 0;
    if (timeout_ms < 0)
        return 0;
    return ev_loop_add_timer(c->loop, (uint64_t)timeout_ms * 1000000ull, on_timeout, c,
                             &c->timer_id) < 0
               ? -1
               : 0;
}

/* Deferred work: reap cancelled requests, add new ones, report pre-transfer failures. */
static void on_kick(struct ev_loop *loop, void *ud)
{
    struct kube_client *c = ud;
    c->kick_id = 0;
    for (struct kube_request **p = &c->reqs; *p;) {
        struct kube_request *r = *p;
        if (r->cancelled) {
            *p = r->next;
            req_free(r);
            continue;
        }
        p = &r->next;
    }
    /* requests reported from here may start others: walk a snapshot of the list head */
    bool again = true;
    while (again) {
        again = false;
        for (struct kube_request *r = c->reqs; r; r = r->next) {
            if (r->pre_error && !r->finished) {
                req_unlink(r);
                finish(r, CURLE_OK);
                req_free(r);
                again = true;
                break;
            }
            if (!r->added && !r->finished && !r->cancelled && !r->pre_error) {
                if (curl_multi_add_handle(c->multi, r->easy) == CURLM_OK) {
                    r->added = true;
                } else {
                    r->pre_error = strdup("libcurl refused the request");
                    if (!r->pre_error)
                        r->cancelled = true; /* nothing to report with: drop it */
                    again = true;
                    break;
                }
            }
        }
    }
}

static void kick(struct kube_client *c)
{
    if (!c->kick_id)
        ev_loop_add_timer(c->loop, 0, on_kick, c, &c->kick_id);
}

/* ---- life cycle ---- */

static int dup_blob(const char *src, size_t len, char **dst, size_t *dlen)
{
    if (!src)
        return 0;
    if (!(*dst = malloc(len + 1)))
        return -ENOMEM;
    memcpy(*dst, src, len);
    (*dst)[len] = 0;
    *dlen = len;
    return 0;
}

static int dup_str(const char *src, char **dst)
{
    if (src && !(*dst = strdup(src)))
        return -ENOMEM;
    return 0;
}

int kube_client_new(struct ev_loop *loop, const struct kube_config *cfg, struct kube_client **ret)
{
    static bool curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
            return -EIO;
        curl_ready = true;
    }
    if (!cfg->server)
        return -EINVAL;
    struct kube_client *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->loop = loop;
    const struct kube_config *s = cfg;
    struct kube_config *d = &c->cfg;
    if (dup_str(s->server, &d->server) < 0 || dup_str(s->ca_file, &d->ca_file) < 0 ||
        dup_str(s->token, &d->token) < 0 || dup_str(s->token_file, &d->token_file) < 0 ||
        dup_str(s->cert_file, &d->cert_file) < 0 || dup_str(s->key_file, &d->key_file) < 0 ||
        dup_blob(s->ca_data, s->ca_data_len, &d->ca_data, &d->ca_data_len) < 0 ||
        dup_blob(s->cert_data, s->cert_data_len, &d->cert_data, &d->cert_data_len) < 0 ||
        dup_blob(s->key_data, s->key_data_len, &d->key_data, &d->key_data_len) < 0 ||
        !(c->multi = curl_multi_init())) {
        kube_client_free(c);
        return -ENOMEM;
    }
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    /* Over HTTP/2 (an API server's usual answer to ALPN) every request shares one connection.
     * Over HTTP/1.1 each request in flight needs its own: without a bound, a burst of PATCHes
     * opens a connection (a TLS handshake, ~1 ms of CPU on the loop) per request; bounded,
     * they queue on the connection kept open. A watch stream takes the other one. */
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)KUBE_MAX_HOST_CONNECTIONS);
    *ret = c;
    return 0;
}

struct kube_client *kube_client_free(struct kube_client *c)
{
    if (!c)
        return NULL;
    while (c->reqs) {
        struct kube_request *r = c->reqs;
        c->reqs = r->next;
        req_free(r);
    }
    ev_loop_cancel_timer(c->loop, c->timer_id);
    ev_loop_cancel_timer(c->loop, c->kick_id);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    /* kube_config_free frees the struct itself: clear the embedded copy field by field */
    struct kube_config *d = &c->cfg;
    if (d->token)
        explicit_bzero(d->token, strlen(d->token));
    if (d->key_data)
        explicit_bzero(d->key_data, d->key_data_len);
    free(d->server);
    free(d->ca_file);
    free(d->ca_data);
    free(d->token);
    free(d->token_file);
    free(d->cert_file);
    free(d->cert_data);
    free(d->key_file);
    free(d->key_data);
    free(c);
    return NULL;
}

/* The bearer token: inline, or read now from the token file (it rotates). */
static int read_token(struct kube_client *c, char **ret, char **ret_error)
{
    *ret = NULL;
    if (c->cfg.token)
        return (*ret = strdup(c->cfg.token)) ? 0 : -ENOMEM;
    if (!c->cfg.token_file)
        return 0;
    size_t len;
    int r = fs_read_all(c->cfg.token_file, TOKEN_MAX, ret, &len);
    if (r < 0) {
        if (asprintf(ret_error,
                     "cannot read the API token %s (%s): mount the service-account token or "
                     "fix tokenFile in the kubeconfig",
                     c->cfg.token_file, strerror(-r)) < 0)
            *ret_error = NULL;
        return r;
    }
    while (len && ((*ret)[len - 1] == '\n' || (*ret)[len - 1] == '\r' || (*ret)[len - 1] == ' '))
        (*ret)[--len] = 0;
    return 0;
}

static int setup_easy(struct kube_request *r, const char *content_type, const char *body)
{
    struct kube_client *c = r->c;
    const struct kube_config *cfg = &c->cfg;
    CURL *e = r->easy;
    _cleanup_free_ char *url = NULL;
    if (asprintf(&url, "%s%s", cfg->server, r->path) < 0)
        return -ENOMEM;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    if (!r->stream) {
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, REQUEST_TIMEOUT_MS);
    } else {
        /* a watch is silent between events: keepalive probes find a peer that vanished
         * without a FIN within about a minute instead of the kernel's two hours */
        curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
        curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L);
    }
    curl_easy_setopt(e, CURLOPT_USERAGENT, "acceld/" ACCEL_VERSION);
    if (cfg->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, cfg->ca_file);
    if (cfg->ca_data) {
        struct curl_blob b = {
            .data = cfg->ca_data, .len = cfg->ca_data_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b);
    }
    if (cfg->cert_file)
        curl_easy_setopt(e, CURLOPT_SSLCERT, cfg->cert_file);
    if (cfg->cert_data) {
        struct curl_blob b = {
            .data = cfg->cert_data, .len = cfg->cert_data_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &b);
    }
    if (cfg->key_file)
        curl_easy_setopt(e, CURLOPT_SSLKEY, cfg->key_file);
    if (cfg->key_data) {
        struct curl_blob b = {
            .data = cfg->key_data, .len = cfg->key_data_len, .flags = CURL_BLOB_COPY};
        curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &b);
    }
    if (strcmp(r->method, "GET") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    if (body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
        curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body);
    }
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if (!h)
        return -ENOMEM;
    r->headers = h;
    if (content_type) {
        _cleanup_free_ char *ct = NULL;
        if (asprintf(&ct, "Content-Type: %s", content_type) < 0 ||
            !(h = curl_slist_append(r->headers, ct)))
            return -ENOMEM;
        r->headers = h;
    }
    _cleanup_free_ char *token = NULL;
    if (read_token(c, &token, &r->pre_error) < 0) {
        if (!r->pre_error)
            return -ENOMEM;
    } else if (token && *token) {
        _cleanup_free_ char *auth = NULL;
        int n = asprintf(&auth, "Authorization: Bearer %s", token);
        explicit_bzero(token, strlen(token));
        if (n < 0)
            return -ENOMEM;
        h = curl_slist_append(r->headers, auth);
        explicit_bzero(auth, strlen(auth));
        if (!h)
            return -ENOMEM;
        r->headers = h;
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    return 0;
}

static int start(struct kube_client *c, const char *method, const char *path,
                 const char *content_type, const char *body, bool stream, kube_line_cb on_line,
                 kube_response_cb done, void *user_data, struct kube_request **ret_req)
{
    if (!method || !path || path[0] != '/' || (body && !content_type))
        return -EINVAL;
    struct kube_request *r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->c = c;
    r->stream = stream;
    r->on_line = on_line;
    r->done = done;
    r->user_data = user_data;
    if (!(r->method = strdup(method)) || !(r->path = strdup(path)) ||
        !(r->easy = curl_easy_init()) || setup_easy(r, content_type, body) < 0) {
        req_free(r);
        return -ENOMEM;
    }
    r->next = c->reqs;
    c->reqs = r;
    if (!c->in_curl && !r->pre_error && curl_multi_add_handle(c->multi, r->easy) == CURLM_OK)
        r->added = true;
    else
        kick(c);
    if (ret_req)
        *ret_req = r;
    return 0;
}

int kube_client_request(struct kube_client *c, const char *method, const char *path,
                        const char *content_type, const char *body, kube_response_cb done,
                        void *user_data, struct kube_request **ret_req)
{
    return start(c, method, path, content_type, body, false, NULL, done, user_data, ret_req);
}

int kube_client_stream(struct kube_client *c, const char *path, kube_line_cb on_line,
                       kube_response_cb done, void *user_data, struct kube_request **ret_req)
{
    if (!on_line)
        return -EINVAL;
    return start(c, "GET", path, NULL, NULL, true, on_line, done, user_data, ret_req);
}

void kube_request_cancel(struct kube_client *c, struct kube_request *req)
{
    if (!req)
        return;
    req->cancelled = true;
    kick(c);
}
