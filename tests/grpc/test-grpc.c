/* Unit tests for src/grpc: our client against our server on one event loop
 * (unary, streaming, async answers, cancel and deadline, limits, a server
 * calling out while serving), the blocking wrappers against a server on
 * another thread, and the framing / percent-encoding helpers. The
 * independent peer (python3-grpcio) is in test_interop.py. */
#include "deviceplugin.pb-c.h"
#include "grpc-fuzz-calls.h"
#include "grpc-internal.h"
#include "tap.h"
#include "util.h"

#include <errno.h>
#include <sys/un.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Runs the loop until cond holds or ms pass; the bound is a failure limit. */
#define RUN_UNTIL(loop, cond, ms)                                                                  \
    ({                                                                                             \
        uint64_t end_ = mono_ns() + (uint64_t)(ms)*1000000ull;                                     \
        while (!(cond) && mono_ns() < end_)                                                        \
            ev_loop_run_once((loop), 10);                                                          \
        (bool)(cond);                                                                              \
    })

static char *sock_path(const char *name)
{
    static char buf[4][256];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, 256, "%s/%s", tap_tmpdir(), name);
    return p;
}

/* ----------------------------------------------------------- the server */

struct srv {
    struct ev_loop *loop;
    struct grpc_server *server;
    int handled;
    int cancelled;
    struct grpc_call *held[64];
    int n_held;
};

static void h_echo(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct srv *s = ud;
    s->handled++;
    grpc_call_reply(call, req->data, req->len);
}

/* Request "N": N messages "m0".."m(N-1)", then OK with a message. */
static void h_count(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct srv *s = ud;
    s->handled++;
    int n = 0;
    for (size_t i = 0; i < req->len; i++)
        n = n * 10 + (req->data[i] - '0');
    for (int i = 0; i < n; i++) {
        char m[16];
        int len = snprintf(m, sizeof(m), "m%d", i);
        CHECK_EQ_INT(grpc_call_send(call, (const uint8_t *)m, (size_t)len), 0);
    }
    grpc_call_finish(call, GRPC_STATUS_OK, "done");
}

static void on_cancel(struct grpc_call *call, void *ud)
{
    struct srv *s = ud;
    s->cancelled++;
    for (int i = 0; i < s->n_held; i++)
        if (s->held[i] == call)
            s->held[i] = s->held[--s->n_held];
    CHECK(grpc_call_is_cancelled(call));
    CHECK_EQ_INT(grpc_call_send(call, (const uint8_t *)"x", 1), -ECONNRESET);
    CHECK_EQ_INT(grpc_call_finish(call, GRPC_STATUS_OK, NULL), -ECONNRESET);
}

/* Keeps the call open (a watcher): one hello now, more later. */
static void h_hold(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct srv *s = ud;
    s->handled++;
    grpc_call_set_cancel_cb(call, on_cancel, s);
    REQUIRE(s->n_held < 64);
    s->held[s->n_held++] = call;
    grpc_call_send(call, (const uint8_t *)"hello", 5);
}

static void h_big_reply(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    size_t n = 2048;
    uint8_t *buf = calloc(1, n);
    CHECK_EQ_INT(grpc_call_send(call, buf, n), -EMSGSIZE);
    CHECK_EQ_INT(grpc_call_reply(call, buf, n), -EMSGSIZE);
    free(buf);
}

static void h_allocate(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct srv *s = ud;
    s->handled++;
    const V1beta1__AllocateRequest *ar = (const V1beta1__AllocateRequest *)req->msg;
    REQUIRE(ar);
    char msg[64];
    snprintf(msg, sizeof(msg), "containers=%zu first=%s", ar->n_container_requests,
             ar->n_container_requests && ar->container_requests[0]->n_devices_ids
                 ? ar->container_requests[0]->devices_ids[0]
                 : "-");
    grpc_call_finish(call, GRPC_STATUS_NOT_FOUND, msg);
}

static void srv_start(struct srv *s, const struct grpc_limits *lim, const char *path)
{
    memset(s, 0, sizeof(*s));
    REQUIRE_EQ_INT(ev_loop_new(&s->loop), 0);
    REQUIRE_EQ_INT(grpc_server_new(s->loop, lim, &s->server), 0);
    REQUIRE_EQ_INT(
        grpc_server_add_method(s->server, "/t.S/Echo", GRPC_METHOD_UNARY, NULL, h_echo, s), 0);
    REQUIRE_EQ_INT(grpc_server_add_method(s->server, "/t.S/Count", GRPC_METHOD_SERVER_STREAMING,
                                          NULL, h_count, s),
                   0);
    REQUIRE_EQ_INT(grpc_server_add_method(s->server, "/t.S/Hold", GRPC_METHOD_SERVER_STREAMING,
                                          NULL, h_hold, s),
                   0);
    REQUIRE_EQ_INT(
        grpc_server_add_method(s->server, "/t.S/Big", GRPC_METHOD_UNARY, NULL, h_big_reply, s), 0);
    REQUIRE_EQ_INT(grpc_server_add_method(s->server, "/v1beta1.DevicePlugin/Allocate",
                                          GRPC_METHOD_UNARY, &v1beta1__allocate_request__descriptor,
                                          h_allocate, s),
                   0);
    REQUIRE_EQ_INT(grpc_server_listen_unix(s->server, path), 0);
}

static void srv_stop(struct srv *s)
{
    s->server = grpc_server_free(s->server);
    s->loop = ev_loop_free(s->loop);
}

/* ----------------------------------------------------------- the client */

struct result {
    bool done;
    int status;
    char message[256];
    uint8_t resp[4096];
    size_t len;
    bool had_resp;
    int msgs;
    char last[64];
};

static void done_cb(int status, const char *message, const uint8_t *resp, size_t len, void *ud)
{
    struct result *r = ud;
    CHECK(!r->done); /* exactly once */
    r->done = true;
    r->status = status;
    snprintf(r->message, sizeof(r->message), "%s", message);
    r->had_resp = resp != NULL;
    if (resp && len <= sizeof(r->resp)) {
        memcpy(r->resp, resp, len);
        r->len = len;
    }
}

static void msg_cb(const uint8_t *msg, size_t len, void *ud)
{
    struct result *r = ud;
    snprintf(r->last, sizeof(r->last), "%.*s", (int)len, (const char *)msg);
    r->msgs++;
}

/* ------------------------------------------------------------------ cases */

TEST(status_names)
{
    CHECK_EQ_STR(grpc_status_name(GRPC_STATUS_OK), "OK");
    CHECK_EQ_STR(grpc_status_name(3), "INVALID_ARGUMENT");
    CHECK_EQ_STR(grpc_status_name(8), "RESOURCE_EXHAUSTED");
    CHECK_EQ_STR(grpc_status_name(12), "UNIMPLEMENTED");
    CHECK_EQ_STR(grpc_status_name(16), "UNAUTHENTICATED");
    CHECK_EQ_STR(grpc_status_name(17), "UNKNOWN_STATUS");
    CHECK_EQ_STR(grpc_status_name(-1), "UNKNOWN_STATUS");
    CHECK_EQ_INT(grpc_status_parse((const uint8_t *)"14", 2), 14);
    CHECK_EQ_INT(grpc_status_parse((const uint8_t *)"17", 2), GRPC_STATUS_UNKNOWN);
    CHECK_EQ_INT(grpc_status_parse((const uint8_t *)"1x", 2), GRPC_STATUS_UNKNOWN);
    CHECK_EQ_INT(grpc_status_parse((const uint8_t *)"", 0), GRPC_STATUS_UNKNOWN);
}

TEST(percent_encoding_round_trip)
{
    const char *in = "device GPU-1 is 100% \"gone\"\n\xc3\xa9";
    char *enc = grpc_percent_encode(in);
    REQUIRE(enc);
    CHECK_EQ_STR(enc, "device GPU-1 is 100%25 \"gone\"%0A%C3%A9");
    char *dec = grpc_percent_decode((const uint8_t *)enc, strlen(enc));
    CHECK_EQ_STR(dec, in);
    free(dec);
    free(enc);
    /* Malformed escapes stay literal, and nothing is read past the end. */
    dec = grpc_percent_decode((const uint8_t *)"a%zzb%4", 7);
    CHECK_EQ_STR(dec, "a%zzb%4");
    free(dec);
}

struct collected {
    int n;
    size_t lens[8];
    char first[32];
};

static int collect(const uint8_t *msg, size_t len, void *ud)
{
    struct collected *c = ud;
    if (c->n == 0)
        snprintf(c->first, sizeof(c->first), "%.*s", (int)len, (const char *)msg);
    if (c->n < 8)
        c->lens[c->n] = len;
    c->n++;
    return 0;
}

TEST(msgparser_reassembles_and_rejects)
{
    /* Two messages, fed one byte at a time. */
    uint8_t wire[] = {0, 0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0, 0};
    struct grpc_msgparser p;
    struct collected c = {0};
    grpc_msgparser_init(&p, 16);
    for (size_t i = 0; i < sizeof(wire); i++)
        CHECK_EQ_INT(grpc_msgparser_feed(&p, wire + i, 1, collect, &c), 0);
    CHECK_EQ_INT(c.n, 2);
    CHECK_EQ_STR(c.first, "abc");
    CHECK_EQ_U64(c.lens[1], 0);
    CHECK(!grpc_msgparser_partial(&p));
    /* A header cut short is partial (a truncated request). */
    CHECK_EQ_INT(grpc_msgparser_feed(&p, wire, 2, collect, &c), 0);
    CHECK(grpc_msgparser_partial(&p));
    grpc_msgparser_done(&p);

    uint8_t big[] = {0, 0, 0, 0, 17};
    grpc_msgparser_init(&p, 16);
    CHECK_EQ_INT(grpc_msgparser_feed(&p, big, sizeof(big), collect, &c), -EMSGSIZE);
    CHECK_EQ_INT(grpc_msgparser_feed(&p, wire, sizeof(wire), collect, &c), -EMSGSIZE);
    grpc_msgparser_done(&p);

    uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff};
    grpc_msgparser_init(&p, GRPC_DEFAULT_MAX_MESSAGE);
    CHECK_EQ_INT(grpc_msgparser_feed(&p, huge, sizeof(huge), collect, &c), -EMSGSIZE);
    grpc_msgparser_done(&p);

    uint8_t comp[] = {1, 0, 0, 0, 1, 'x'};
    grpc_msgparser_init(&p, 16);
    CHECK_EQ_INT(grpc_msgparser_feed(&p, comp, sizeof(comp), collect, &c), -ENOTSUP);
    grpc_msgparser_done(&p);

    uint8_t flag[] = {7, 0, 0, 0, 1, 'x'};
    grpc_msgparser_init(&p, 16);
    CHECK_EQ_INT(grpc_msgparser_feed(&p, flag, sizeof(flag), collect, &c), -EPROTO);
    grpc_msgparser_done(&p);
}

TEST(unary_streaming_unknown_and_bad_protobuf)
{
    struct srv s;
    const char *path = sock_path("basic.sock");
    srv_start(&s, NULL, path);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    CHECK(grpc_client_is_connected(c));

    struct result r1 = {0}, r2 = {0}, r3 = {0}, r4 = {0}, r5 = {0};
    CHECK_EQ_INT(
        grpc_client_unary(c, "/t.S/Echo", (const uint8_t *)"ping", 4, 0, done_cb, &r1, NULL), 0);
    CHECK_EQ_INT(
        grpc_client_stream(c, "/t.S/Count", (const uint8_t *)"5", 1, 0, msg_cb, done_cb, &r2, NULL),
        0);
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Nope", NULL, 0, 0, done_cb, &r3, NULL), 0);
    uint8_t junk[] = {0x0a, 0x05, 0x0a, 0x03, 'a'}; /* length runs past the end */
    CHECK_EQ_INT(grpc_client_unary(c, "/v1beta1.DevicePlugin/Allocate", junk, sizeof(junk), 0,
                                   done_cb, &r4, NULL),
                 0);
    /* A valid AllocateRequest reaches the handler decoded. */
    V1beta1__ContainerAllocateRequest creq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    char *ids[] = {"GPU-a", "GPU-b"};
    creq.n_devices_ids = 2;
    creq.devices_ids = ids;
    V1beta1__ContainerAllocateRequest *creqs[] = {&creq};
    V1beta1__AllocateRequest areq = V1BETA1__ALLOCATE_REQUEST__INIT;
    areq.n_container_requests = 1;
    areq.container_requests = creqs;
    CHECK_EQ_INT(grpc_client_unary_msg(c, "/v1beta1.DevicePlugin/Allocate", &areq.base, 0, done_cb,
                                       &r5, NULL),
                 0);
    CHECK_EQ_INT(grpc_client_unary(c, "no-slash", NULL, 0, 0, done_cb, &r1, NULL), -EINVAL);

    REQUIRE(RUN_UNTIL(s.loop, r1.done && r2.done && r3.done && r4.done && r5.done, 10000));
    CHECK_EQ_INT(r1.status, GRPC_STATUS_OK);
    CHECK(r1.had_resp);
    CHECK_EQ_U64(r1.len, 4);
    CHECK(memcmp(r1.resp, "ping", 4) == 0);

    CHECK_EQ_INT(r2.status, GRPC_STATUS_OK);
    CHECK_EQ_STR(r2.message, "done");
    CHECK_EQ_INT(r2.msgs, 5);
    CHECK_EQ_STR(r2.last, "m4");

    CHECK_EQ_INT(r3.status, GRPC_STATUS_UNIMPLEMENTED);
    CHECK(strstr(r3.message, "/t.S/Nope") != NULL);

    CHECK_EQ_INT(r4.status, GRPC_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(r4.message, "v1beta1.AllocateRequest") != NULL);

    CHECK_EQ_INT(r5.status, GRPC_STATUS_NOT_FOUND);
    CHECK_EQ_STR(r5.message, "containers=1 first=GPU-a");
    grpc_client_free(c);
    srv_stop(&s);
}

TEST(reply_over_max_is_resource_exhausted)
{
    struct srv s;
    struct grpc_limits lim = {.max_message_size = 1024};
    const char *path = sock_path("small.sock");
    srv_start(&s, &lim, path);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r1 = {0}, r2 = {0};
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Big", NULL, 0, 0, done_cb, &r1, NULL), 0);
    /* A request over the server's max: refused before any handler runs. */
    uint8_t *big = calloc(1, 4000);
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Echo", big, 4000, 0, done_cb, &r2, NULL), 0);
    free(big);
    REQUIRE(RUN_UNTIL(s.loop, r1.done && r2.done, 10000));
    CHECK_EQ_INT(r1.status, GRPC_STATUS_RESOURCE_EXHAUSTED);
    CHECK(strstr(r1.message, "2048") != NULL);
    CHECK_EQ_INT(r2.status, GRPC_STATUS_RESOURCE_EXHAUSTED);
    CHECK_EQ_INT(s.handled, 0);
    /* The connection still serves. */
    struct result r3 = {0};
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Echo", (const uint8_t *)"ok", 2, 0, done_cb, &r3, NULL),
                 0);
    REQUIRE(RUN_UNTIL(s.loop, r3.done, 10000));
    CHECK_EQ_INT(r3.status, GRPC_STATUS_OK);
    /* Our client refuses to send over its own max. */
    struct grpc_client *c2;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, &lim, &c2), 0);
    uint8_t two[2048] = {0};
    CHECK_EQ_INT(grpc_client_unary(c2, "/t.S/Echo", two, sizeof(two), 0, done_cb, &r3, NULL),
                 -EMSGSIZE);
    grpc_client_free(c2);
    grpc_client_free(c);
    srv_stop(&s);
}

TEST(cancel_and_deadline_reach_the_handler)
{
    struct srv s;
    const char *path = sock_path("cancel.sock");
    srv_start(&s, NULL, path);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r1 = {0}, r2 = {0};
    struct grpc_client_call *call1;
    CHECK_EQ_INT(grpc_client_stream(c, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &r1, &call1), 0);
    CHECK_EQ_INT(
        grpc_client_stream(c, "/t.S/Hold", NULL, 0, 50 * 1000000ull, msg_cb, done_cb, &r2, NULL),
        0);
    REQUIRE(RUN_UNTIL(s.loop, r1.msgs == 1 && r2.msgs == 1, 10000));
    CHECK_EQ_INT(s.n_held, 2);
    CHECK_EQ_INT(grpc_client_call_cancel(call1), 0);
    CHECK(r1.done);
    CHECK_EQ_INT(r1.status, GRPC_STATUS_CANCELLED);
    REQUIRE(RUN_UNTIL(s.loop, r2.done && s.cancelled == 2, 10000));
    CHECK_EQ_INT(r2.status, GRPC_STATUS_DEADLINE_EXCEEDED);
    CHECK_EQ_INT(s.n_held, 0);

    /* A held call finished later by the server arrives with its status. */
    struct result r3 = {0};
    CHECK_EQ_INT(grpc_client_stream(c, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &r3, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 1 && r3.msgs == 1, 10000));
    struct grpc_call *held = s.held[--s.n_held];
    CHECK_EQ_STR(grpc_call_method(held), "/t.S/Hold");
    CHECK_EQ_INT(grpc_call_send(held, (const uint8_t *)"later", 5), 0);
    CHECK_EQ_INT(grpc_call_finish(held, GRPC_STATUS_FAILED_PRECONDITION, "100% done\n"), 0);
    REQUIRE(RUN_UNTIL(s.loop, r3.done, 10000));
    CHECK_EQ_INT(r3.status, GRPC_STATUS_FAILED_PRECONDITION);
    CHECK_EQ_STR(r3.message, "100% done\n");
    CHECK_EQ_INT(r3.msgs, 2);
    CHECK_EQ_STR(r3.last, "later");
    grpc_client_free(c);
    srv_stop(&s);
}

TEST(client_free_and_server_free_end_calls)
{
    struct srv s;
    const char *path = sock_path("free.sock");
    srv_start(&s, NULL, path);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r1 = {0};
    CHECK_EQ_INT(grpc_client_stream(c, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &r1, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 1, 10000));
    /* The peer vanishes: the server notices. */
    grpc_client_free(c);
    CHECK(r1.done);
    CHECK_EQ_INT(r1.status, GRPC_STATUS_CANCELLED);
    REQUIRE(
        RUN_UNTIL(s.loop, s.cancelled == 1 && grpc_server_connection_count(s.server) == 0, 10000));

    /* The server goes away: the client's open call ends UNAVAILABLE. */
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r2 = {0};
    CHECK_EQ_INT(grpc_client_stream(c, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &r2, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 1, 10000));
    s.server = grpc_server_free(s.server);
    CHECK_EQ_INT(s.cancelled, 2);
    struct stat sb;
    CHECK(stat(path, &sb) < 0); /* socket removed */
    REQUIRE(RUN_UNTIL(s.loop, r2.done, 10000));
    CHECK_EQ_INT(r2.status, GRPC_STATUS_UNAVAILABLE);
    CHECK(!grpc_client_is_connected(c));
    struct result r3 = {0};
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Echo", NULL, 0, 0, done_cb, &r3, NULL), -ENOTCONN);
    grpc_client_free(c);
    struct grpc_client *c2 = NULL;
    CHECK_EQ_INT(grpc_client_new(s.loop, path, NULL, &c2), -ENOENT);
    CHECK(c2 == NULL);
    srv_stop(&s);
}

static struct grpc_call *kept;

static void h_keep(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    kept = call; /* no cancel callback: the handler finds out when it replies */
}

TEST(call_kept_past_server_free_is_safe_to_finish)
{
    struct srv s;
    const char *path = sock_path("keep.sock");
    srv_start(&s, NULL, path);
    REQUIRE_EQ_INT(
        grpc_server_add_method(s.server, "/t.S/Keep", GRPC_METHOD_UNARY, NULL, h_keep, &s), 0);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r = {0};
    kept = NULL;
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Keep", NULL, 0, 0, done_cb, &r, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, kept != NULL, 10000));
    s.server = grpc_server_free(s.server);
    CHECK(grpc_call_is_cancelled(kept));
    CHECK_EQ_INT(grpc_call_send(kept, (const uint8_t *)"x", 1), -ECONNRESET);
    CHECK_EQ_INT(grpc_call_reply(kept, (const uint8_t *)"x", 1), -ECONNRESET);
    kept = NULL;
    REQUIRE(RUN_UNTIL(s.loop, r.done, 10000));
    CHECK_EQ_INT(r.status, GRPC_STATUS_UNAVAILABLE);
    grpc_client_free(c);
    srv_stop(&s);
}

TEST(reserve_after_socket_dir_wiped)
{
    struct srv s;
    const char *path = sock_path("reserve.sock");
    srv_start(&s, NULL, path);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r1 = {0};
    CHECK_EQ_INT(grpc_client_stream(c, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &r1, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 1, 10000));
    /* The kubelet wiped the directory; someone else's file now sits there. */
    CHECK_EQ_INT(unlink(path), 0);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fclose(f);
    grpc_server_close_listeners(s.server, true);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && S_ISREG(sb.st_mode));             /* not ours: left alone */
    CHECK_EQ_INT(grpc_server_listen_unix(s.server, path), -EEXIST); /* not a socket */
    CHECK_EQ_INT(unlink(path), 0);
    CHECK_EQ_INT(grpc_server_listen_unix(s.server, path), 0);
    /* The established connection kept working; a new one is served too. */
    CHECK(!r1.done);
    struct grpc_client *c2;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c2), 0);
    struct result r2 = {0};
    CHECK_EQ_INT(
        grpc_client_unary(c2, "/t.S/Echo", (const uint8_t *)"hi", 2, 0, done_cb, &r2, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, r2.done, 10000));
    CHECK_EQ_INT(r2.status, GRPC_STATUS_OK);
    /* Several listeners at once; closing unlinks each socket that is still ours. */
    CHECK_EQ_INT(grpc_server_listen_unix(s.server, sock_path("reserve2.sock")), 0);
    grpc_server_close_listeners(s.server, true);
    CHECK(stat(path, &sb) < 0 && errno == ENOENT);
    CHECK(stat(sock_path("reserve2.sock"), &sb) < 0);
    grpc_client_free(c2);
    grpc_client_free(c);
    srv_stop(&s);
}

/* A second server on a live socket is refused and changes nothing; a socket
 * file left by a dead server is replaced. */
TEST(live_socket_refused_stale_socket_replaced)
{
    struct srv s;
    const char *path = sock_path("live.sock");
    srv_start(&s, NULL, path);
    struct stat before, after;
    REQUIRE(stat(path, &before) == 0);
    struct grpc_server *second;
    REQUIRE_EQ_INT(grpc_server_new(s.loop, NULL, &second), 0);
    CHECK_EQ_INT(grpc_server_listen_unix(second, path), -EADDRINUSE);
    REQUIRE(stat(path, &after) == 0);
    CHECK(after.st_ino == before.st_ino); /* the first server's file is untouched */
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r = {0};
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Echo", (const uint8_t *)"hi", 2, 0, done_cb, &r, NULL),
                 0);
    REQUIRE(RUN_UNTIL(s.loop, r.done, 10000));
    CHECK_EQ_INT(r.status, GRPC_STATUS_OK); /* and it still serves */
    grpc_client_free(c);
    /* the first server dies without removing its file (a crash) */
    grpc_server_close_listeners(s.server, false);
    REQUIRE(stat(path, &after) == 0 && S_ISSOCK(after.st_mode));
    CHECK_EQ_INT(grpc_server_listen_unix(second, path), 0);
    REQUIRE(stat(path, &after) == 0);
    CHECK(after.st_ino != before.st_ino);
    grpc_server_free(second);
    srv_stop(&s);
}

/* While a server starts over and over, a peer that finds the socket file must
 * always reach a listener: bind + listen happen under a temporary name renamed
 * onto the path. (A peer that looked the path up just before the server went
 * away may be refused; that is shutdown, not start, so probes overlapping a
 * stop are not counted.) */
enum { PROBE_STARTING, PROBE_UP, PROBE_STOPPING };

struct prober {
    const char *path;
    int phase; /* PROBE_*, written by the test, read by the prober */
    int stops; /* how many times the test entered PROBE_STOPPING */
    bool stop;
    int seen, refused;
};

static void *probe_socket(void *arg)
{
    struct prober *p = arg;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, p->path);
    while (!__atomic_load_n(&p->stop, __ATOMIC_SEQ_CST)) {
        int stops = __atomic_load_n(&p->stops, __ATOMIC_SEQ_CST);
        int before = __atomic_load_n(&p->phase, __ATOMIC_SEQ_CST);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        int e = errno;
        int after = __atomic_load_n(&p->phase, __ATOMIC_SEQ_CST);
        close(fd);
        if (before == PROBE_STOPPING || after == PROBE_STOPPING ||
            __atomic_load_n(&p->stops, __ATOMIC_SEQ_CST) != stops)
            continue;
        if (r == 0 || e == EAGAIN)
            __atomic_add_fetch(&p->seen, 1, __ATOMIC_SEQ_CST);
        else if (e == ECONNREFUSED)
            __atomic_add_fetch(&p->refused, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

TEST(socket_path_never_names_a_dead_listener)
{
    const char *path = sock_path("atomic.sock");
    struct ev_loop *loop;
    REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
    struct prober p = {.path = path, .phase = PROBE_STOPPING};
    pthread_t th;
    REQUIRE_EQ_INT(pthread_create(&th, NULL, probe_socket, &p), 0);
    for (int i = 0; i < 300; i++) {
        struct grpc_server *srv;
        REQUIRE_EQ_INT(grpc_server_new(loop, NULL, &srv), 0);
        __atomic_store_n(&p.phase, PROBE_STARTING, __ATOMIC_SEQ_CST);
        CHECK_EQ_INT(grpc_server_listen_unix(srv, path), 0);
        __atomic_store_n(&p.phase, PROBE_UP, __ATOMIC_SEQ_CST);
        /* let the prober reach this listener at least once before it stops */
        int seen = __atomic_load_n(&p.seen, __ATOMIC_SEQ_CST);
        CHECK(TAP_WAIT_UNTIL(__atomic_load_n(&p.seen, __ATOMIC_SEQ_CST) > seen, 5000));
        __atomic_store_n(&p.phase, PROBE_STOPPING, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&p.stops, 1, __ATOMIC_SEQ_CST);
        grpc_server_close_listeners(srv, true);
        grpc_server_free(srv);
    }
    __atomic_store_n(&p.stop, true, __ATOMIC_SEQ_CST);
    pthread_join(th, NULL);
    CHECK_EQ_INT(p.refused, 0);
    tap_diag("probes that reached a listener while it started or served: %d", p.seen);
    /* no temporary names left behind */
    char dir[512];
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    DIR *d = opendir(dir);
    REQUIRE(d);
    struct dirent *e;
    while ((e = readdir(d)))
        CHECK(strstr(e->d_name, ".tmp") == NULL);
    closedir(d);
    ev_loop_free(loop);
}

/* ------------------------------------------- a server that calls out */

/* Like acceld and the kubelet: "kubelet" answers Register only after calling
 * the plugin's GetDevicePluginOptions, while the plugin's Register call is
 * still waiting, all on one loop. */
struct nested {
    struct ev_loop *loop;
    const char *plugin_path;
    struct grpc_client *to_plugin;
    struct grpc_call *register_call;
    int options_calls;
};

static void kubelet_got_options(int status, const char *message, const uint8_t *resp, size_t len,
                                void *ud)
{
    struct nested *n = ud;
    CHECK_EQ_INT(status, GRPC_STATUS_OK);
    V1beta1__DevicePluginOptions *o = v1beta1__device_plugin_options__unpack(NULL, len, resp);
    REQUIRE(o);
    CHECK(o->get_preferred_allocation_available);
    v1beta1__device_plugin_options__free_unpacked(o, NULL);
    V1beta1__Empty e = V1BETA1__EMPTY__INIT;
    CHECK_EQ_INT(grpc_call_reply_msg(n->register_call, &e.base), 0);
    n->register_call = NULL;
    /* Freeing the client from its own callback is deferred, not a crash. */
    n->to_plugin = grpc_client_free(n->to_plugin);
}

static void kubelet_register(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct nested *n = ud;
    const V1beta1__RegisterRequest *rr = (const V1beta1__RegisterRequest *)req->msg;
    CHECK_EQ_STR(rr->version, "v1beta1");
    CHECK_EQ_STR(rr->resource_name, "nvidia.com/gpu");
    n->register_call = call;
    REQUIRE_EQ_INT(grpc_client_new(n->loop, n->plugin_path, NULL, &n->to_plugin), 0);
    V1beta1__Empty e = V1BETA1__EMPTY__INIT;
    CHECK_EQ_INT(grpc_client_unary_msg(n->to_plugin, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                       &e.base, 5000000000ull, kubelet_got_options, n, NULL),
                 0);
}

static void plugin_options(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct nested *n = ud;
    n->options_calls++;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.get_preferred_allocation_available = true;
    grpc_call_reply_msg(call, &o.base);
}

TEST(register_while_kubelet_calls_back_on_one_loop)
{
    struct nested n = {0};
    REQUIRE_EQ_INT(ev_loop_new(&n.loop), 0);
    n.plugin_path = sock_path("plugin.sock");
    const char *kubelet_path = sock_path("kubelet.sock");
    struct grpc_server *kubelet, *plugin;
    REQUIRE_EQ_INT(grpc_server_new(n.loop, NULL, &kubelet), 0);
    REQUIRE_EQ_INT(grpc_server_new(n.loop, NULL, &plugin), 0);
    REQUIRE_EQ_INT(grpc_server_add_method(kubelet, "/v1beta1.Registration/Register",
                                          GRPC_METHOD_UNARY, &v1beta1__register_request__descriptor,
                                          kubelet_register, &n),
                   0);
    REQUIRE_EQ_INT(grpc_server_add_method(plugin, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                          GRPC_METHOD_UNARY, &v1beta1__empty__descriptor,
                                          plugin_options, &n),
                   0);
    REQUIRE_EQ_INT(grpc_server_listen_unix(kubelet, kubelet_path), 0);
    REQUIRE_EQ_INT(grpc_server_listen_unix(plugin, n.plugin_path), 0);

    struct grpc_client *to_kubelet;
    REQUIRE_EQ_INT(grpc_client_new(n.loop, kubelet_path, NULL, &to_kubelet), 0);
    V1beta1__RegisterRequest rr = V1BETA1__REGISTER_REQUEST__INIT;
    rr.version = "v1beta1";
    rr.endpoint = "plugin.sock";
    rr.resource_name = "nvidia.com/gpu";
    struct result r = {0};
    CHECK_EQ_INT(grpc_client_unary_msg(to_kubelet, "/v1beta1.Registration/Register", &rr.base,
                                       5000000000ull, done_cb, &r, NULL),
                 0);
    REQUIRE(RUN_UNTIL(n.loop, r.done, 10000));
    CHECK_EQ_INT(r.status, GRPC_STATUS_OK);
    CHECK_EQ_INT(n.options_calls, 1);
    CHECK(n.to_plugin == NULL);
    grpc_client_free(to_kubelet);
    grpc_server_free(kubelet);
    grpc_server_free(plugin);
    ev_loop_free(n.loop);
}

/* ------------------------------------------------------------- limits */

TEST(many_concurrent_calls_one_connection)
{
    struct srv s;
    const char *path = sock_path("many.sock");
    srv_start(&s, NULL, path);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    enum { N = 200 };
    static struct result r[N];
    memset(r, 0, sizeof(r));
    for (int i = 0; i < N; i++) {
        char m[16];
        int len = snprintf(m, sizeof(m), "call-%d", i);
        REQUIRE_EQ_INT(grpc_client_unary(c, "/t.S/Echo", (const uint8_t *)m, (size_t)len, 0,
                                         done_cb, &r[i], NULL),
                       0);
    }
    int ok = 0;
    REQUIRE(RUN_UNTIL(s.loop, ({
                          int d = 0;
                          for (int i = 0; i < N; i++)
                              d += r[i].done;
                          d == N;
                      }),
                      20000));
    for (int i = 0; i < N; i++) {
        char m[16];
        int len = snprintf(m, sizeof(m), "call-%d", i);
        ok += r[i].status == 0 && r[i].len == (size_t)len && memcmp(r[i].resp, m, r[i].len) == 0;
    }
    CHECK_EQ_INT(ok, N);
    CHECK_EQ_INT(grpc_server_connection_count(s.server), 1);
    grpc_client_free(c);
    srv_stop(&s);
}

TEST(stream_and_connection_caps)
{
    struct srv s;
    struct grpc_limits lim = {.max_concurrent_streams = 4, .max_connections = 2};
    const char *path = sock_path("caps.sock");
    srv_start(&s, &lim, path);
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    /* One round trip first, so the client knows the server's SETTINGS. */
    struct result r0 = {0};
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Echo", NULL, 0, 0, done_cb, &r0, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, r0.done, 10000));
    s.handled = 0;
    /* 6 open watchers, 4 allowed at once: nghttp2's client queues the rest. */
    struct result r[6] = {0};
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(grpc_client_stream(c, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &r[i], NULL),
                     0);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 4, 10000));
    /* Give the loop a few more rounds: still 4. */
    for (int i = 0; i < 5; i++)
        ev_loop_run_once(s.loop, 10);
    CHECK_EQ_INT(s.n_held, 4);
    /* Finishing two lets the two queued ones in. */
    for (int i = 0; i < 2; i++)
        grpc_call_finish(s.held[--s.n_held], GRPC_STATUS_OK, NULL);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 4 && s.handled == 6, 10000));

    /* Connections: two allowed. c has streams open, c2 none: a third client
     * makes room by evicting c2 (GOAWAY) and is served. */
    struct grpc_client *c2, *c3, *c4;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c2), 0);
    REQUIRE(RUN_UNTIL(s.loop, grpc_server_connection_count(s.server) == 2, 10000));
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c3), 0);
    struct result r3 = {0};
    CHECK_EQ_INT(grpc_client_unary(c3, "/t.S/Echo", NULL, 0, 0, done_cb, &r3, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, r3.done, 10000));
    CHECK_EQ_INT(r3.status, GRPC_STATUS_OK);
    CHECK(RUN_UNTIL(s.loop, !grpc_client_is_connected(c2), 10000));
    CHECK_EQ_INT(grpc_server_connection_count(s.server), 2);
    CHECK(grpc_client_is_connected(c));
    /* Both connections busy (a stream open on each): a fourth is closed at once. */
    struct result h3 = {0};
    CHECK_EQ_INT(grpc_client_stream(c3, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &h3, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 5, 10000));
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c4), 0);
    struct result r4 = {0};
    CHECK_EQ_INT(grpc_client_unary(c4, "/t.S/Echo", NULL, 0, 0, done_cb, &r4, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, r4.done, 10000));
    CHECK_EQ_INT(r4.status, GRPC_STATUS_UNAVAILABLE);
    CHECK_EQ_INT(grpc_server_connection_count(s.server), 2);
    CHECK(grpc_client_is_connected(c) && grpc_client_is_connected(c3));
    grpc_client_free(c4);
    grpc_client_free(c3);
    grpc_client_free(c2);
    grpc_client_free(c);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 0, 10000));
    srv_stop(&s);
}

/* The socket file is 0600 whatever the umask (umask 000 made it 0777:
 * anyone on the node could Allocate). */
TEST(socket_mode_ignores_umask)
{
    struct srv s;
    const char *path = sock_path("mode.sock");
    mode_t old = umask(0);
    srv_start(&s, NULL, path);
    umask(old);
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0);
    CHECK(S_ISSOCK(sb.st_mode));
    CHECK_EQ_INT(sb.st_mode & 07777, 0600);
    srv_stop(&s);
}

/* Connects a raw socket to path and sends bytes; returns the fd. */
static int raw_connect(const char *path, const char *bytes, size_t len)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        write(fd, bytes, len) != (ssize_t)len) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* True once the server has closed fd: EOF after whatever it sent, or
 * ECONNRESET (a unix socket closed with our bytes still unread in it). */
static bool peer_closed(int fd)
{
    char buf[256];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
        ;
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* A bare HTTP/2 preface (no SETTINGS) is closed after the handshake timeout,
 * an idle connection after the idle timeout; one with a stream open stays.
 * Timeouts are short here so the test waits on conditions, with a bound. */
TEST(handshake_and_idle_timeouts)
{
    struct srv s;
    struct grpc_limits lim = {.handshake_timeout_ns = 100 * 1000000ull,
                              .idle_timeout_ns = 300 * 1000000ull};
    const char *path = sock_path("idle.sock");
    srv_start(&s, &lim, path);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    int fd = raw_connect(path, preface, sizeof(preface) - 1);
    REQUIRE(fd >= 0);
    REQUIRE(RUN_UNTIL(s.loop, grpc_server_connection_count(s.server) == 1, 10000));
    CHECK(RUN_UNTIL(s.loop, grpc_server_connection_count(s.server) == 0, 10000));
    CHECK(peer_closed(fd));
    close(fd);

    /* h holds a stream from before i connects: if open streams did not
     * count, h would go first. */
    struct grpc_client *h, *i;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &h), 0);
    struct result rh = {0}, ri = {0};
    CHECK_EQ_INT(grpc_client_stream(h, "/t.S/Hold", NULL, 0, 0, msg_cb, done_cb, &rh, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 1, 10000));
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &i), 0);
    CHECK_EQ_INT(grpc_client_unary(i, "/t.S/Echo", NULL, 0, 0, done_cb, &ri, NULL), 0);
    REQUIRE(RUN_UNTIL(s.loop, ri.done, 10000));
    CHECK_EQ_INT(ri.status, GRPC_STATUS_OK);
    CHECK(RUN_UNTIL(s.loop, !grpc_client_is_connected(i), 10000));
    CHECK_EQ_INT(grpc_server_connection_count(s.server), 1);
    CHECK(grpc_client_is_connected(h) && !rh.done);
    grpc_client_free(i);
    grpc_client_free(h);
    REQUIRE(RUN_UNTIL(s.loop, s.n_held == 0, 10000));
    srv_stop(&s);
}

/* A full cap of idle raw sockets (a preface each, as a port scanner or a
 * stuck client leaves them) does not lock out a new client. */
TEST(idle_sockets_do_not_lock_out)
{
    struct srv s;
    struct grpc_limits lim = {.max_connections = 8};
    const char *path = sock_path("full.sock");
    srv_start(&s, &lim, path);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    int fds[8];
    for (int k = 0; k < 8; k++)
        fds[k] = raw_connect(path, preface, sizeof(preface) - 1);
    REQUIRE(RUN_UNTIL(s.loop, grpc_server_connection_count(s.server) == 8, 10000));
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r = {0};
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Echo", (const uint8_t *)"hi", 2, 0, done_cb, &r, NULL),
                 0);
    REQUIRE(RUN_UNTIL(s.loop, r.done, 10000));
    CHECK_EQ_INT(r.status, GRPC_STATUS_OK);
    CHECK_EQ_INT(grpc_server_connection_count(s.server), 8);
    /* the oldest idle socket made room */
    CHECK(peer_closed(fds[0]));
    grpc_client_free(c);
    for (int k = 0; k < 8; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    srv_stop(&s);
}

/* ------------------------------------------------------------ blocking */

static void *serve_thread(void *arg)
{
    struct srv *s = arg;
    ev_loop_run(s->loop);
    return NULL;
}

static void quit_cb(struct ev_loop *loop, void *ud)
{
    ev_loop_quit(loop);
}

static void h_quit(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct srv *s = ud;
    grpc_call_reply(call, NULL, 0);
    ev_loop_add_timer(s->loop, 0, quit_cb, NULL, NULL);
}

static bool take_two(const uint8_t *msg, size_t len, void *ud)
{
    int *n = ud;
    return ++*n < 2;
}

static bool take_all(const uint8_t *msg, size_t len, void *ud)
{
    int *n = ud;
    ++*n;
    return true;
}

TEST(blocking_wrappers)
{
    struct srv s;
    const char *path = sock_path("block.sock");
    srv_start(&s, NULL, path);
    REQUIRE_EQ_INT(
        grpc_server_add_method(s.server, "/t.S/Quit", GRPC_METHOD_UNARY, NULL, h_quit, &s), 0);
    pthread_t th;
    REQUIRE_EQ_INT(pthread_create(&th, NULL, serve_thread, &s), 0);

    int status = -1;
    char *message = NULL;
    uint8_t *resp = NULL;
    size_t len = 0;
    CHECK_EQ_INT(grpc_blocking_unary(path, "/t.S/Echo", (const uint8_t *)"abc", 3, 5000000000ull,
                                     &status, &message, &resp, &len),
                 0);
    CHECK_EQ_INT(status, GRPC_STATUS_OK);
    CHECK_EQ_U64(len, 3);
    CHECK(resp && memcmp(resp, "abc", 3) == 0);
    free(resp);
    free(message);

    int n = 0;
    CHECK_EQ_INT(grpc_blocking_stream(path, "/t.S/Count", (const uint8_t *)"7", 1, 5000000000ull,
                                      take_all, &n, &status, &message),
                 0);
    CHECK_EQ_INT(status, GRPC_STATUS_OK);
    CHECK_EQ_INT(n, 7);
    CHECK_EQ_STR(message, "done");
    free(message);

    n = 0;
    CHECK_EQ_INT(
        grpc_blocking_stream(path, "/t.S/Hold", NULL, 0, 200000000ull, take_two, &n, &status, NULL),
        0);
    /* Hold sends one message and waits: the deadline ends it. */
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(status, GRPC_STATUS_DEADLINE_EXCEEDED);

    status = -1;
    CHECK_EQ_INT(grpc_blocking_unary(sock_path("nobody.sock"), "/t.S/Echo", NULL, 0, 0, &status,
                                     NULL, NULL, NULL),
                 -ENOENT);
    CHECK_EQ_INT(status, -1);

    CHECK_EQ_INT(
        grpc_blocking_unary(path, "/t.S/Quit", NULL, 0, 5000000000ull, &status, NULL, NULL, NULL),
        0);
    pthread_join(th, NULL);
    /* Calls the server still holds were cancelled when the client left. */
    while (s.n_held > 0)
        grpc_call_finish(s.held[--s.n_held], GRPC_STATUS_OK, NULL);
    srv_stop(&s);
}

/* ---------------------------------------------------------- mem conn */

static void sink_count(const uint8_t *data, size_t len, void *ud)
{
    *(size_t *)ud += len;
}

TEST(garbage_preface_closes_only_that_connection)
{
    struct srv s;
    const char *path = sock_path("mem.sock");
    srv_start(&s, NULL, path);
    struct grpc_server_conn *mc;
    size_t out = 0;
    REQUIRE_EQ_INT(grpc_server_mem_conn_new(s.server, sink_count, &out, &mc), 0);
    CHECK(out > 0); /* our SETTINGS */
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(grpc_server_mem_conn_feed(mc, (const uint8_t *)junk, sizeof(junk) - 1) < 0);
    grpc_server_mem_conn_close(mc);
    /* A real client still gets served. */
    struct grpc_client *c;
    REQUIRE_EQ_INT(grpc_client_new(s.loop, path, NULL, &c), 0);
    struct result r = {0};
    CHECK_EQ_INT(grpc_client_unary(c, "/t.S/Echo", (const uint8_t *)"x", 1, 0, done_cb, &r, NULL),
                 0);
    REQUIRE(RUN_UNTIL(s.loop, r.done, 10000));
    CHECK_EQ_INT(r.status, 0);
    grpc_client_free(c);
    srv_stop(&s);
}

/* The fuzz seeds are only useful if they reach the handlers: check each. */
static void count_call(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    (*(int *)ud)++;
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

TEST(fuzz_seed_corpus_reaches_handlers)
{
    static const struct {
        const char *file;
        int calls;
    } seeds[] = {
        {"options", 1},
        {"list-and-watch", 1},
        {"preferred", 1},
        {"allocate", 1},
        {"allocate-split", 1},
        {"prestart", 1},
        {"register", 1},
        {"multi-stream", 3},
        {"allocate-malformed", 1 /* framing is valid; no decoder here */},
        {"compressed", 0},
        {"unknown-method", 0},
    };
    static const char *const paths[] = {
        "/v1beta1.DevicePlugin/GetDevicePluginOptions", "/v1beta1.DevicePlugin/ListAndWatch",
        "/v1beta1.DevicePlugin/GetPreferredAllocation", "/v1beta1.DevicePlugin/Allocate",
        "/v1beta1.DevicePlugin/PreStartContainer",      "/v1beta1.Registration/Register",
    };
    const char *src = getenv("ACCEL_SOURCE_ROOT");
    if (!src)
        src = "..";
    for (size_t i = 0; i < ARRAY_SIZE(seeds); i++) {
        char file[1024];
        snprintf(file, sizeof(file), "%s/tests/fuzz/corpus/grpc-server/%s", src, seeds[i].file);
        FILE *f = fopen(file, "rb");
        REQUIRE(f);
        uint8_t buf[8192];
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        REQUIRE(len > 1);
        struct ev_loop *loop;
        struct grpc_server *server;
        REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
        REQUIRE_EQ_INT(grpc_server_new(loop, NULL, &server), 0);
        int calls = 0;
        for (size_t p = 0; p < ARRAY_SIZE(paths); p++)
            grpc_server_add_method(server, paths[p], GRPC_METHOD_UNARY, NULL, count_call, &calls);
        struct grpc_server_conn *conn;
        REQUIRE_EQ_INT(grpc_server_mem_conn_new(server, NULL, NULL, &conn), 0);
        CHECK_EQ_INT(grpc_server_mem_conn_feed(conn, buf + 1, len - 1), 0);
        if (calls != seeds[i].calls)
            tap_diag("seed %s: %d calls, want %d", seeds[i].file, calls, seeds[i].calls);
        CHECK_EQ_INT(calls, seeds[i].calls);
        grpc_server_mem_conn_close(conn);
        grpc_server_free(server);
        ev_loop_free(loop);
    }
}

struct seed_calls {
    int done[3];
    int status[3];
    int msgs;
};

static struct seed_calls *seed_calls;

static void seed_done(int status, const char *message, const uint8_t *resp, size_t len, void *ud)
{
    /* ud is the response descriptor (Allocate, Register) or NULL (ListAndWatch). */
    int i = ud == &v1beta1__allocate_response__descriptor ? 0 : ud == NULL ? 1 : 2;
    seed_calls->done[i]++;
    seed_calls->status[i] = status;
    if (status == GRPC_STATUS_OK && ud) {
        ProtobufCMessage *m = protobuf_c_message_unpack(ud, NULL, len, resp);
        CHECK(m != NULL);
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
    }
}

static void seed_msg(const uint8_t *msg, size_t len, void *ud)
{
    seed_calls->msgs++;
}

/* The client fuzz seeds end the three calls as the generator meant. */
TEST(fuzz_client_seeds_complete_the_calls)
{
    static const struct {
        const char *file;
        int status[3];
    } seeds[] = {
        {"responses-ok", {GRPC_STATUS_OK, GRPC_STATUS_OK, GRPC_STATUS_OK}},
        {"responses-ok-split", {GRPC_STATUS_OK, GRPC_STATUS_OK, GRPC_STATUS_OK}},
        {"responses-errors",
         {GRPC_STATUS_INVALID_ARGUMENT, GRPC_STATUS_UNAVAILABLE, GRPC_STATUS_UNIMPLEMENTED}},
    };
    const char *src = getenv("ACCEL_SOURCE_ROOT");
    if (!src)
        src = "..";
    for (size_t i = 0; i < ARRAY_SIZE(seeds); i++) {
        char file[1024];
        snprintf(file, sizeof(file), "%s/tests/fuzz/corpus/grpc-client/%s", src, seeds[i].file);
        FILE *f = fopen(file, "rb");
        REQUIRE(f);
        uint8_t buf[8192];
        size_t len = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        REQUIRE(len > 1);
        struct seed_calls sc = {0};
        seed_calls = &sc;
        struct ev_loop *loop;
        struct grpc_client *c;
        REQUIRE_EQ_INT(ev_loop_new(&loop), 0);
        REQUIRE_EQ_INT(grpc_client_mem_new(loop, NULL, NULL, NULL, &c), 0);
        grpc_fuzz_start_calls(c, seed_done, seed_msg);
        CHECK_EQ_INT(grpc_client_mem_feed(c, buf + 1, len - 1), 0);
        for (int k = 0; k < 3; k++) {
            CHECK_EQ_INT(sc.done[k], 1);
            CHECK_EQ_INT(sc.status[k], seeds[i].status[k]);
        }
        CHECK_EQ_INT(sc.msgs, 2);
        grpc_client_free(c);
        ev_loop_free(loop);
    }
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
