/* test-kube-client.c — src/kube's client, pod watch and objects against
 * tests/kube/fake-apiserver.py (HTTPS, bearer token, the real API's JSON): list + watch sync,
 * relist after 410 (as an ERROR event and as an HTTP status), a rejected token, a server that
 * is down, a watch broken mid-stream, PATCH and Event bodies as the server sees them, and the
 * kubeconfig / in-cluster variants. The test drives the fake through its /_fake/ controls with
 * blocking libcurl calls (test code only; the agent's code never blocks). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client.h"
#include "kubeconfig.h"
#include "evloop.h"
#include "fs.h"
#include "objects.h"
#include "podwatch.h"
#include "tap.h"
#include "util.h"

#define TOKEN "t0ken-for-tests"
#define NODE "node-a"
#define WAIT_MS 20000

static pid_t fake_pid;
static char fake_dir[512];
static char server[64];
static char ca_path[600];

static void stop_fake(void)
{
    if (fake_pid > 0) {
        kill(fake_pid, SIGTERM);
        waitpid(fake_pid, NULL, 0);
        fake_pid = 0;
    }
}

static void start_fake(void)
{
    snprintf(fake_dir, sizeof(fake_dir), "%s/fake", tap_tmpdir());
    mkdir(fake_dir, 0700);
    char script[600];
    snprintf(script, sizeof(script), "%s/kube/fake-apiserver.py", tap_srcdir());
    if (access("/usr/bin/python3", X_OK) != 0)
        tap_skip_all("needs /usr/bin/python3 for the fake API server");
    if (system("openssl version >/dev/null 2>&1") != 0)
        tap_skip_all("needs the openssl CLI to make the test certificates");
    fake_pid = fork();
    if (fake_pid == 0) {
        execl("/usr/bin/python3", "python3", script, "--dir", fake_dir, "--token", TOKEN, "--node",
              NODE, (char *)NULL);
        _exit(127);
    }
    atexit(stop_fake);
    char port_file[600];
    snprintf(port_file, sizeof(port_file), "%s/port", fake_dir);
    if (!TAP_WAIT_UNTIL(access(port_file, R_OK) == 0, WAIT_MS))
        tap_skip_all("the fake API server did not start");
    char *port = NULL;
    size_t len;
    if (fs_read_all(port_file, 64, &port, &len) < 0)
        tap_skip_all("cannot read the fake's port");
    snprintf(server, sizeof(server), "https://127.0.0.1:%s", port);
    snprintf(ca_path, sizeof(ca_path), "%s/ca.crt", fake_dir);
    free(port);
}

/* A blocking call to the fake's controls. Returns the parsed answer (caller decrefs). */
struct buf {
    char *p;
    size_t n;
};
static size_t buf_write(char *d, size_t s, size_t n, void *ud)
{
    struct buf *b = ud;
    char *p = realloc(b->p, b->n + s * n + 1);
    if (!p)
        return 0;
    memcpy(p + b->n, d, s * n);
    b->n += s * n;
    p[b->n] = 0;
    b->p = p;
    return s * n;
}

static json_t *ctl(const char *what, const char *body)
{
    CURL *e = curl_easy_init();
    char url[256];
    snprintf(url, sizeof(url), "%s/_fake/%s", server, what);
    struct curl_slist *h = curl_slist_append(NULL, "Authorization: Bearer " TOKEN);
    struct buf b = {0};
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CAINFO, ca_path);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 20L);
    if (body)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(e);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    json_t *j = rc == CURLE_OK && b.p ? json_loads(b.p, 0, NULL) : NULL;
    if (!j)
        tap_fail(__FILE__, __LINE__, "fake control %s failed: %s: %.200s", what,
                 curl_easy_strerror(rc), b.p ? b.p : "");
    free(b.p);
    return j;
}

static void ctl0(const char *what, const char *body)
{
    json_decref(ctl(what, body));
}

/* ---- a client on a loop, with a pod watch recording what it reports ---- */

struct rig {
    struct ev_loop *loop;
    struct kube_client *client;
    struct kube_podwatch *watch;
    int added, modified, deleted, states;
    char last_error[1024];
    char last_deleted[64];
};

static void on_pod(struct kube_podwatch *w, enum kube_watch_type t, const struct kube_pod *p,
                   void *ud)
{
    struct rig *g = ud;
    if (t == KUBE_WATCH_ADDED)
        g->added++;
    else if (t == KUBE_WATCH_MODIFIED)
        g->modified++;
    else if (t == KUBE_WATCH_DELETED) {
        g->deleted++;
        snprintf(g->last_deleted, sizeof(g->last_deleted), "%s", p->name);
    }
}

static void on_state(struct kube_podwatch *w, const char *error, void *ud)
{
    struct rig *g = ud;
    g->states++;
    if (error)
        snprintf(g->last_error, sizeof(g->last_error), "%s", error);
}

static struct kube_config *token_config(const char *srv, const char *token)
{
    struct kube_config *c = calloc(1, sizeof(*c));
    c->server = strdup(srv);
    c->ca_file = strdup(ca_path);
    c->token = strdup(token);
    return c;
}

static void rig_open_cfg(struct rig *g, const struct kube_config *cfg, bool watch)
{
    memset(g, 0, sizeof(*g));
    REQUIRE_EQ_INT(ev_loop_new(&g->loop), 0);
    REQUIRE_EQ_INT(kube_client_new(g->loop, cfg, &g->client), 0);
    if (watch) {
        struct kube_podwatch_ops ops = {.on_pod = on_pod, .on_state = on_state};
        REQUIRE_EQ_INT(kube_podwatch_new(g->loop, g->client, NODE, &ops, g, &g->watch), 0);
        /* short retries, so the test's bounds are not spent waiting */
        kube_podwatch_set_backoff(g->watch, 10 * 1000000ull, 50 * 1000000ull);
        REQUIRE_EQ_INT(kube_podwatch_start(g->watch), 0);
    }
}

static void rig_open(struct rig *g, const char *token)
{
    struct kube_config *cfg = token_config(server, token);
    rig_open_cfg(g, cfg, true);
    kube_config_free(cfg);
}

static void rig_close(struct rig *g)
{
    g->watch = kube_podwatch_free(g->watch);
    g->client = kube_client_free(g->client);
    g->loop = ev_loop_free(g->loop);
}

/* Runs the loop until cond holds, at most WAIT_MS. */
#define RUN_UNTIL(g, cond)                                                                         \
    ({                                                                                             \
        uint64_t end_ = mono_ns() + WAIT_MS * 1000000ull;                                          \
        while (!(cond) && mono_ns() < end_)                                                        \
            ev_loop_run_once((g)->loop, 10);                                                       \
        (cond);                                                                                    \
    })

static const struct kube_pod *pod_named(struct rig *g, const char *name)
{
    size_t n;
    const struct kube_pod *const *pods = kube_podwatch_pods(g->watch, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(pods[i]->name, name) == 0)
            return pods[i];
    return NULL;
}

static uint64_t stat_of(struct rig *g, int which)
{
    struct kube_podwatch_stats s;
    kube_podwatch_stats(g->watch, &s);
    return which == 0 ? s.lists : which == 1 ? s.watches : which == 2 ? s.gone : s.failures;
}

static int watchers(void)
{
    json_t *j = ctl("state", NULL);
    int n = (int)json_integer_value(json_object_get(j, "watchers"));
    json_decref(j);
    return n;
}

static void add_pod(const char *name, const char *node, const char *extra)
{
    char body[1024];
    snprintf(body, sizeof(body), "{\"op\":\"add\",\"name\":\"%s\",\"node\":\"%s\"%s%s}", name, node,
             extra ? "," : "", extra ? extra : "");
    ctl0("pod", body);
}

/* ---- cases ---- */

TEST(list_then_watch_keeps_the_cache_in_step)
{
    add_pod("vgpu-a", NODE,
            "\"containers\":[{\"name\":\"cuda\",\"requests\":{\"tencent.com/vcuda-core\":\"30\","
            "\"tencent.com/vcuda-memory\":\"16\"},\"limits\":{\"tencent.com/vcuda-core\":\"30\","
            "\"tencent.com/vcuda-memory\":\"16\"}}],\"annotations\":{\"x\":\"y\"},"
            "\"creationTimestamp\":\"2024-01-02T03:04:05Z\"");
    add_pod("other-node", "node-b", NULL);
    struct rig g;
    rig_open(&g, TOKEN);
    REQUIRE(RUN_UNTIL(&g, kube_podwatch_synced(g.watch)));
    const struct kube_pod *p = pod_named(&g, "vgpu-a");
    REQUIRE(p != NULL);
    CHECK(pod_named(&g, "other-node") == NULL);
    CHECK_EQ_STR(p->namespace, "default");
    CHECK_EQ_STR(p->phase, "Pending");
    CHECK_EQ_STR(p->node_name, NODE);
    CHECK_EQ_INT(p->creation_time, 1704164645);
    CHECK_EQ_STR(kube_pod_annotation(p, "x"), "y");
    REQUIRE_EQ_INT(p->n_containers, 1);
    CHECK_EQ_STR(kube_container_request(&p->containers[0], "tencent.com/vcuda-core"), "30");
    CHECK_EQ_STR(kube_container_limit(&p->containers[0], "tencent.com/vcuda-memory"), "16");
    CHECK(kube_podwatch_get(g.watch, p->uid) == p);
    CHECK(kube_podwatch_error(g.watch) == NULL);

    /* the watch brings what changes after the list */
    REQUIRE(RUN_UNTIL(&g, stat_of(&g, 1) >= 1 && watchers() >= 1));
    add_pod("vgpu-b", NODE, NULL);
    CHECK(RUN_UNTIL(&g, pod_named(&g, "vgpu-b") != NULL));
    ctl0("pod", "{\"op\":\"modify\",\"name\":\"vgpu-b\",\"phase\":\"Running\"}");
    CHECK(RUN_UNTIL(&g, pod_named(&g, "vgpu-b") &&
                            strcmp(pod_named(&g, "vgpu-b")->phase, "Running") == 0));
    ctl0("pod", "{\"op\":\"delete\",\"name\":\"vgpu-b\"}");
    CHECK(RUN_UNTIL(&g, pod_named(&g, "vgpu-b") == NULL));
    CHECK_EQ_STR(g.last_deleted, "vgpu-b");
    add_pod("elsewhere", "node-b", NULL); /* filtered by the server */
    add_pod("vgpu-c", NODE, NULL);
    CHECK(RUN_UNTIL(&g, pod_named(&g, "vgpu-c") != NULL));
    CHECK(pod_named(&g, "elsewhere") == NULL);
    /* a bookmark moves the resume point without changing the cache */
    int before = g.added + g.modified + g.deleted;
    ctl0("bookmark", NULL);
    json_t *st = ctl("state", NULL);
    char rv[32];
    snprintf(rv, sizeof(rv), "%lld", (long long)json_integer_value(json_object_get(st, "rv")));
    json_decref(st);
    CHECK(RUN_UNTIL(&g, strcmp(kube_podwatch_resource_version(g.watch), rv) == 0));
    CHECK_EQ_INT(g.added + g.modified + g.deleted, before);

    /* the requests carried the node's field selector */
    json_t *log = ctl("log", NULL);
    size_t i;
    json_t *e;
    int lists = 0, watches = 0;
    json_array_foreach(log, i, e)
    {
        json_t *q = json_object_get(e, "query");
        if (strcmp(json_string_value(json_object_get(e, "path")), "/api/v1/pods") != 0)
            continue;
        CHECK_EQ_STR(json_string_value(json_object_get(q, "fieldSelector")), "spec.nodeName=" NODE);
        if (json_object_get(q, "watch")) {
            watches++;
            CHECK_EQ_STR(json_string_value(json_object_get(q, "allowWatchBookmarks")), "true");
            CHECK(json_object_get(q, "resourceVersion") != NULL);
        } else {
            lists++;
        }
    }
    json_decref(log);
    CHECK_GE_INT(lists, 1);
    CHECK_GE_INT(watches, 1);
    rig_close(&g);
}

static void relist_after_410(bool http)
{
    struct rig g;
    rig_open(&g, TOKEN);
    REQUIRE(RUN_UNTIL(&g, kube_podwatch_synced(g.watch) && watchers() >= 1));
    uint64_t lists = stat_of(&g, 0);
    /* the history is compacted: the running watch gets ERROR 410; a watch from the old
     * version gets 410 again (as a status when http), so only a relist can catch up */
    char name[32];
    snprintf(name, sizeof(name), "after-compact-%d", http);
    ctl0("compact", http ? "{\"http410\":true}" : "{}");
    add_pod(name, NODE, NULL);
    ctl0("compact", http ? "{\"http410\":true}" : "{}");
    CHECK(RUN_UNTIL(&g, stat_of(&g, 0) > lists && pod_named(&g, name) != NULL));
    CHECK_GE_U64(stat_of(&g, 2), 1);
    /* and the watch goes on from the new list */
    REQUIRE(RUN_UNTIL(&g, watchers() >= 1));
    snprintf(name, sizeof(name), "after-relist-%d", http);
    add_pod(name, NODE, NULL);
    CHECK(RUN_UNTIL(&g, pod_named(&g, name) != NULL));
    rig_close(&g);
}

TEST(relist_after_410_error_event)
{
    relist_after_410(false);
}

TEST(relist_after_410_http_status)
{
    relist_after_410(true);
}

TEST(broken_stream_is_resumed_from_the_last_version)
{
    struct rig g;
    rig_open(&g, TOKEN);
    REQUIRE(RUN_UNTIL(&g, kube_podwatch_synced(g.watch) && watchers() >= 1));
    uint64_t lists = stat_of(&g, 0), watches = stat_of(&g, 1);
    ctl0("break", NULL);
    CHECK(RUN_UNTIL(&g, stat_of(&g, 3) >= 1));
    CHECK(RUN_UNTIL(&g, stat_of(&g, 1) > watches && watchers() >= 1));
    add_pod("after-break", NODE, NULL);
    CHECK(RUN_UNTIL(&g, pod_named(&g, "after-break") != NULL));
    CHECK_EQ_U64(stat_of(&g, 0), lists); /* resumed, not relisted */
    CHECK(kube_podwatch_error(g.watch) == NULL);
    rig_close(&g);
}

TEST(rejected_token_says_what_to_do)
{
    struct rig g;
    rig_open(&g, "wrong-token");
    /* wait for the 401 itself: on a loaded machine an earlier attempt can end otherwise
     * (a timed-out handshake), and that error would stand in the first place */
    CHECK(RUN_UNTIL(&g, strstr(g.last_error, "401") != NULL));
    tap_diag("error: %s", g.last_error);
    CHECK(strstr(g.last_error, "token") != NULL);
    CHECK(!kube_podwatch_synced(g.watch));
    /* it keeps retrying: the failures count grows */
    CHECK(RUN_UNTIL(&g, stat_of(&g, 3) >= 2));
    rig_close(&g);

    /* a token the server stops accepting mid-watch: the error comes, the cache stays */
    rig_open(&g, TOKEN);
    REQUIRE(RUN_UNTIL(&g, kube_podwatch_synced(g.watch) && watchers() >= 1));
    size_t n0;
    kube_podwatch_pods(g.watch, &n0);
    ctl0("reject", "{\"on\":true}");
    ctl0("break", NULL);
    CHECK(RUN_UNTIL(&g, strstr(g.last_error, "401") != NULL));
    size_t n1;
    kube_podwatch_pods(g.watch, &n1);
    CHECK_EQ_INT(n1, n0);
    ctl0("reject", "{\"on\":false}");
    uint64_t lists = stat_of(&g, 0);
    CHECK(RUN_UNTIL(&g, stat_of(&g, 0) > lists && kube_podwatch_error(g.watch) == NULL));
    rig_close(&g);
}

TEST(server_down_says_so)
{
    /* a port nobody listens on: bind one, note it, close it */
    char srv[64];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    REQUIRE(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    REQUIRE(getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    snprintf(srv, sizeof(srv), "https://127.0.0.1:%d", ntohs(a.sin_port));
    close(fd);
    struct kube_config *cfg = token_config(srv, TOKEN);
    struct rig g;
    rig_open_cfg(&g, cfg, true);
    kube_config_free(cfg);
    CHECK(RUN_UNTIL(&g, g.last_error[0] != 0));
    tap_diag("error: %s", g.last_error);
    CHECK(strstr(g.last_error, "cannot reach the API server") != NULL);
    CHECK(strstr(g.last_error, srv) != NULL);
    CHECK(!kube_podwatch_synced(g.watch));
    rig_close(&g);
}

struct resp_rec {
    int done;
    long status;
    char error[1024];
    char *body;
};

static void on_resp(struct kube_client *c, const struct kube_response *r, void *ud)
{
    struct resp_rec *rec = ud;
    rec->done++;
    rec->status = r->status;
    snprintf(rec->error, sizeof(rec->error), "%s", r->error ? r->error : "");
    rec->body = strdup(r->body);
}

TEST(patch_annotations_as_merge_patch)
{
    add_pod("patched", NODE, NULL);
    struct rig g;
    rig_open(&g, TOKEN);
    REQUIRE(RUN_UNTIL(&g, pod_named(&g, "patched") != NULL && watchers() >= 1));
    const char *keys[] = {"accel.dev/vgpu-gpu", "x"};
    const char *vals[] = {"GPU-0a1b2c3d-0000-1111-2222-333344445555", NULL};
    char *patch = NULL;
    REQUIRE_EQ_INT(kube_annotation_patch(keys, vals, 2, &patch), 0);
    struct resp_rec rec = {0};
    REQUIRE_EQ_INT(kube_client_request(g.client, "PATCH", "/api/v1/namespaces/default/pods/patched",
                                       "application/merge-patch+json", patch, on_resp, &rec, NULL),
                   0);
    CHECK(RUN_UNTIL(&g, rec.done == 1));
    CHECK_EQ_INT(rec.status, 200);
    CHECK_EQ_STR(rec.error, "");
    /* the watch sees the annotation */
    CHECK(RUN_UNTIL(&g, pod_named(&g, "patched") &&
                            kube_pod_annotation(pod_named(&g, "patched"), "accel.dev/vgpu-gpu")));
    /* the server saw the content type and the body we built */
    json_t *log = ctl("log", NULL);
    json_t *last = NULL, *e;
    size_t i;
    json_array_foreach(log, i, e) if (strcmp(json_string_value(json_object_get(e, "method")),
                                             "PATCH") == 0) last = e;
    REQUIRE(last != NULL);
    CHECK_EQ_STR(json_string_value(json_object_get(last, "content_type")),
                 "application/merge-patch+json");
    CHECK_EQ_STR(json_string_value(json_object_get(last, "body")), patch);
    json_decref(log);
    free(rec.body);

    /* a content type the server does not take: 415 with its message */
    struct resp_rec bad = {0};
    REQUIRE_EQ_INT(kube_client_request(g.client, "PATCH", "/api/v1/namespaces/default/pods/patched",
                                       "application/json", patch, on_resp, &bad, NULL),
                   0);
    CHECK(RUN_UNTIL(&g, bad.done == 1));
    CHECK_EQ_INT(bad.status, 415);
    CHECK(strstr(bad.error, "HTTP 415") != NULL);
    free(bad.body);
    /* a pod that does not exist: 404 */
    struct resp_rec missing = {0};
    REQUIRE_EQ_INT(kube_client_request(g.client, "PATCH", "/api/v1/namespaces/default/pods/nope",
                                       "application/merge-patch+json", patch, on_resp, &missing,
                                       NULL),
                   0);
    CHECK(RUN_UNTIL(&g, missing.done == 1));
    CHECK_EQ_INT(missing.status, 404);
    CHECK(strstr(missing.error, "not found") != NULL);
    free(missing.body);
    free(patch);
    rig_close(&g);
}

/* on_pod runs inside libcurl's write callback (the watch stream): a request started there
 * must still go out (libcurl refuses multi calls from its callbacks; the client defers them) */
struct from_cb {
    struct rig g;
    struct resp_rec rec;
    int started;
};

static void patch_on_add(struct kube_podwatch *w, enum kube_watch_type t, const struct kube_pod *p,
                         void *ud)
{
    struct from_cb *f = ud;
    if (t != KUBE_WATCH_ADDED || strcmp(p->name, "patch-from-callback") != 0 || f->started)
        return;
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", p->namespace, p->name);
    f->started = kube_client_request(f->g.client, "PATCH", path, "application/merge-patch+json",
                                     "{\"metadata\":{\"annotations\":{\"seen\":\"yes\"}}}", on_resp,
                                     &f->rec, NULL) == 0
                     ? 1
                     : -1;
}

TEST(request_started_from_a_watch_callback)
{
    struct from_cb f = {0};
    struct kube_config *cfg = token_config(server, TOKEN);
    rig_open_cfg(&f.g, cfg, false);
    kube_config_free(cfg);
    struct kube_podwatch_ops ops = {.on_pod = patch_on_add};
    REQUIRE_EQ_INT(kube_podwatch_new(f.g.loop, f.g.client, NODE, &ops, &f, &f.g.watch), 0);
    REQUIRE_EQ_INT(kube_podwatch_start(f.g.watch), 0);
    REQUIRE(RUN_UNTIL(&f.g, kube_podwatch_synced(f.g.watch) && watchers() >= 1));
    add_pod("patch-from-callback", NODE, NULL);
    CHECK(RUN_UNTIL(&f.g, f.rec.done == 1));
    CHECK_EQ_INT(f.started, 1);
    CHECK_EQ_INT(f.rec.status, 200);
    CHECK(RUN_UNTIL(&f.g, pod_named(&f.g, "patch-from-callback") &&
                              kube_pod_annotation(pod_named(&f.g, "patch-from-callback"), "seen")));
    free(f.rec.body);
    /* freeing with a request in flight cancels it without a callback (ASan sees leaks) */
    struct resp_rec never = {0};
    REQUIRE_EQ_INT(
        kube_client_request(f.g.client, "GET", "/api/v1/pods", NULL, NULL, on_resp, &never, NULL),
        0);
    rig_close(&f.g);
    CHECK_EQ_INT(never.done, 0);
}

TEST(event_is_created)
{
    struct rig g;
    struct kube_config *cfg = token_config(server, TOKEN);
    rig_open_cfg(&g, cfg, false);
    kube_config_free(cfg);
    struct kube_event_spec spec = {
        .namespace = "default",
        .pod_name = "vgpu-a",
        .pod_uid = "0b6c4a3e-1111-2222-3333-444455556666",
        .type = KUBE_EVENT_WARNING,
        .reason = "GPUMemoryOverQuota",
        .message = "container cuda uses 5.0 GiB of GPU-x, over its 4.0 GiB quota",
        .component = "acceld",
        .host = NODE,
        .time = 1704164645,
    };
    char *ev = NULL;
    REQUIRE_EQ_INT(kube_event_json(&spec, &ev), 0);
    struct resp_rec rec = {0};
    REQUIRE_EQ_INT(kube_client_request(g.client, "POST", "/api/v1/namespaces/default/events",
                                       "application/json", ev, on_resp, &rec, NULL),
                   0);
    CHECK(RUN_UNTIL(&g, rec.done == 1));
    CHECK_EQ_INT(rec.status, 201);
    json_t *evs = ctl("events", NULL);
    json_t *last = json_array_get(evs, json_array_size(evs) - 1);
    CHECK_EQ_STR(json_string_value(json_object_get(last, "reason")), "GPUMemoryOverQuota");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(last, "involvedObject"), "uid")),
                 spec.pod_uid);
    CHECK_EQ_STR(json_string_value(json_object_get(last, "type")), "Warning");
    json_decref(evs);
    free(rec.body);
    free(ev);
    rig_close(&g);
}

/* ---- kubeconfig variants: each must reach the fake and list pods ---- */

static char *read_b64(const char *path)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "base64 -w0 < %s", path);
    FILE *f = popen(cmd, "r");
    char *out = NULL;
    size_t cap = 0;
    if (f && getline(&out, &cap, f) < 0) {
        free(out);
        out = NULL;
    }
    if (f)
        pclose(f);
    return out;
}

static void kubeconfig_lists(const char *user_yaml, const char *cluster_extra)
{
    char path[700], text[16384];
    snprintf(path, sizeof(path), "%s/kubeconfig", fake_dir);
    snprintf(text, sizeof(text),
             "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
             "clusters:\n- name: other\n  cluster:\n    server: https://192.0.2.1:1\n"
             "- name: fake\n  cluster:\n    server: %s/\n%s\n"
             "contexts:\n- name: test\n  context:\n    cluster: fake\n    user: tester\n"
             "users:\n- name: tester\n  user:\n%s\n",
             server, cluster_extra, user_yaml);
    REQUIRE_EQ_INT(fs_write_atomic(path, text, strlen(text), 0600), 0);
    struct kube_config *cfg = NULL;
    char err[512] = "";
    int r = kube_config_load_kubeconfig(path, &cfg, err, sizeof(err));
    if (r < 0)
        tap_diag("kubeconfig: %s\n%s", err, text);
    REQUIRE_EQ_INT(r, 0);
    struct rig g;
    rig_open_cfg(&g, cfg, false);
    kube_config_free(cfg);
    struct resp_rec rec = {0};
    REQUIRE_EQ_INT(
        kube_client_request(g.client, "GET", "/api/v1/pods", NULL, NULL, on_resp, &rec, NULL), 0);
    CHECK(RUN_UNTIL(&g, rec.done == 1));
    CHECK_EQ_INT(rec.status, 200);
    if (rec.status != 200)
        tap_diag("error: %s", rec.error);
    CHECK(rec.body && strstr(rec.body, "\"PodList\"") != NULL);
    free(rec.body);
    rig_close(&g);
}

TEST(kubeconfig_variants_reach_the_server)
{
    char *ca64 = read_b64(ca_path);
    char p[1200], tokfile[700], extra[8192];
    REQUIRE(ca64 != NULL);
    /* certificate-authority relative to the kubeconfig's directory; inline token */
    kubeconfig_lists("    token: " TOKEN, "    certificate-authority: ca.crt");
    /* certificate-authority-data; tokenFile */
    snprintf(tokfile, sizeof(tokfile), "%s/tok", fake_dir);
    REQUIRE_EQ_INT(fs_write_atomic(tokfile, TOKEN "\n", strlen(TOKEN) + 1, 0600), 0);
    snprintf(extra, sizeof(extra), "    certificate-authority-data: %s", ca64);
    snprintf(p, sizeof(p), "    tokenFile: %s", tokfile);
    kubeconfig_lists(p, extra);
    /* client certificate and key files */
    snprintf(p, sizeof(p), "    client-certificate: %s/client.crt\n    client-key: client.key",
             fake_dir);
    kubeconfig_lists(p, extra);
    /* client certificate and key inline */
    char crt[700], key[700];
    snprintf(crt, sizeof(crt), "%s/client.crt", fake_dir);
    snprintf(key, sizeof(key), "%s/client.key", fake_dir);
    char *crt64 = read_b64(crt), *key64 = read_b64(key);
    REQUIRE(crt64 && key64);
    char *u = NULL;
    REQUIRE(asprintf(&u, "    client-certificate-data: %s\n    client-key-data: %s", crt64, key64) >
            0);
    kubeconfig_lists(u, extra);
    free(u);
    free(crt64);
    free(key64);
    free(ca64);
}

TEST(kubeconfig_wrong_ca_fails_tls)
{
    /* the client's own certificate is no CA for the server: TLS must fail and say so */
    char extra[700];
    snprintf(extra, sizeof(extra), "    certificate-authority: %s/client.crt", fake_dir);
    char path[700], text[4096];
    snprintf(path, sizeof(path), "%s/kubeconfig-badca", fake_dir);
    snprintf(text, sizeof(text),
             "current-context: t\nclusters:\n- name: c\n  cluster:\n    server: %s\n%s\n"
             "contexts:\n- name: t\n  context: {cluster: c, user: u}\n"
             "users:\n- name: u\n  user: {token: " TOKEN "}\n",
             server, extra);
    REQUIRE_EQ_INT(fs_write_atomic(path, text, strlen(text), 0600), 0);
    struct kube_config *cfg = NULL;
    char err[512];
    REQUIRE_EQ_INT(kube_config_load_kubeconfig(path, &cfg, err, sizeof(err)), 0);
    struct rig g;
    rig_open_cfg(&g, cfg, false);
    kube_config_free(cfg);
    struct resp_rec rec = {0};
    REQUIRE_EQ_INT(
        kube_client_request(g.client, "GET", "/api/v1/pods", NULL, NULL, on_resp, &rec, NULL), 0);
    CHECK(RUN_UNTIL(&g, rec.done == 1));
    CHECK_EQ_INT(rec.status, 0);
    tap_diag("error: %s", rec.error);
    CHECK(strstr(rec.error, "certificate-authority") != NULL);
    free(rec.body);
    rig_close(&g);
}

TEST(in_cluster_config_reaches_the_server)
{
    char sa[700];
    snprintf(sa, sizeof(sa), "%s/sa", fake_dir);
    mkdir(sa, 0700);
    char tok[760], ca[760], cmd[1600];
    snprintf(tok, sizeof(tok), "%s/token", sa);
    snprintf(ca, sizeof(ca), "%s/ca.crt", sa);
    REQUIRE_EQ_INT(fs_write_atomic(tok, TOKEN, strlen(TOKEN), 0600), 0);
    snprintf(cmd, sizeof(cmd), "cp %s %s", ca_path, ca);
    REQUIRE_EQ_INT(system(cmd), 0);
    struct kube_config *cfg = NULL;
    char err[512] = "";
    unsetenv("KUBERNETES_SERVICE_HOST");
    CHECK_EQ_INT(kube_config_in_cluster(sa, &cfg, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "--kubeconfig") != NULL);
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", strrchr(server, ':') + 1, 1);
    REQUIRE_EQ_INT(kube_config_in_cluster(sa, &cfg, err, sizeof(err)), 0);
    CHECK_EQ_STR(cfg->server, server);
    struct rig g;
    rig_open_cfg(&g, cfg, false);
    kube_config_free(cfg);
    struct resp_rec rec = {0};
    REQUIRE_EQ_INT(
        kube_client_request(g.client, "GET", "/api/v1/pods", NULL, NULL, on_resp, &rec, NULL), 0);
    CHECK(RUN_UNTIL(&g, rec.done == 1));
    CHECK_EQ_INT(rec.status, 200);
    free(rec.body);
    /* the token file is read per request (it rotates): a rotated wrong token is refused */
    REQUIRE_EQ_INT(fs_write_atomic(tok, "rotated-bad", 11, 0600), 0);
    struct resp_rec rec2 = {0};
    REQUIRE_EQ_INT(
        kube_client_request(g.client, "GET", "/api/v1/pods", NULL, NULL, on_resp, &rec2, NULL), 0);
    CHECK(RUN_UNTIL(&g, rec2.done == 1));
    CHECK_EQ_INT(rec2.status, 401);
    CHECK(strstr(rec2.error, tok) != NULL);
    free(rec2.body);
    /* a token file that vanished: reported through the callback */
    unlink(tok);
    struct resp_rec rec3 = {0};
    REQUIRE_EQ_INT(
        kube_client_request(g.client, "GET", "/api/v1/pods", NULL, NULL, on_resp, &rec3, NULL), 0);
    CHECK(RUN_UNTIL(&g, rec3.done == 1));
    CHECK_EQ_INT(rec3.status, 0);
    CHECK(strstr(rec3.error, "cannot read the API token") != NULL);
    free(rec3.body);
    rig_close(&g);
    unsetenv("KUBERNETES_SERVICE_HOST");
}

int main(int argc, char **argv)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    start_fake();
    int r = tap_main(argc, argv);
    stop_fake();
    curl_global_cleanup();
    return r;
}
