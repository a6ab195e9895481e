/* Bad input against the gRPC server over real sockets: garbage preface,
 * truncated and illegal frames, bad message prefixes (oversized, compressed,
 * truncated, unknown flag, two messages on a unary call), a non-gRPC
 * content-type, and a peer that stops reading while we stream. After each,
 * the server must still serve a normal client.
 *
 * The server runs on its own thread; this thread plays the peer with a
 * blocking socket and an nghttp2 client session used only to write frames
 * and read the answer, so the request bytes are exactly what we choose. */
#include "grpc-internal.h"
#include "tap.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static struct {
    struct ev_loop *loop;
    struct grpc_server *server;
    pthread_t thread;
    char path[256];
    int flood_result; /* what grpc_call_send said when it stopped */
    bool flood_done;
    pthread_mutex_t lock;
} g;

static void h_echo(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    grpc_call_reply(call, req->data, req->len);
}

static void h_conns(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    char m[16];
    int n = snprintf(m, sizeof(m), "%u", grpc_server_connection_count(g.server));
    grpc_call_reply(call, (const uint8_t *)m, (size_t)n);
}

struct flood {
    struct grpc_call *call;
    uint8_t *chunk;
};

static void flood_step(struct ev_loop *loop, void *ud);

static void flood_cancel(struct grpc_call *call, void *ud)
{
    /* The peer left before we hit the cap: the timer chain notices. */
}

static void flood_step(struct ev_loop *loop, void *ud)
{
    struct flood *f = ud;
    int r = 0;
    for (int i = 0; i < 8 && r == 0; i++)
        r = grpc_call_send(f->call, f->chunk, 1 << 20);
    if (r == 0) {
        ev_loop_add_timer(loop, 0, flood_step, f, NULL);
        return;
    }
    pthread_mutex_lock(&g.lock);
    g.flood_result = r;
    g.flood_done = true;
    pthread_mutex_unlock(&g.lock);
    grpc_call_finish(f->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "peer stopped reading");
    free(f->chunk);
    free(f);
}

/* Streams 1 MiB messages until the call's queue is full. */
static void h_flood(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    struct flood *f = calloc(1, sizeof(*f));
    f->call = call;
    f->chunk = calloc(1, 1 << 20);
    grpc_call_set_cancel_cb(call, flood_cancel, f);
    ev_loop_add_timer(g.loop, 0, flood_step, f, NULL);
}

static void quit_cb(struct ev_loop *loop, void *ud)
{
    ev_loop_quit(loop);
}

static void h_quit(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    grpc_call_reply(call, NULL, 0);
    ev_loop_add_timer(g.loop, 0, quit_cb, NULL, NULL);
}

static void *serve(void *arg)
{
    ev_loop_run(g.loop);
    return NULL;
}

/* Asks the server (on its thread) how many connections it has. */
static int server_conns(void)
{
    int status = -1;
    uint8_t *resp = NULL;
    size_t len = 0;
    if (grpc_blocking_unary(g.path, "/t/Conns", NULL, 0, 5000000000ull, &status, NULL, &resp,
                            &len) < 0 ||
        status != 0) {
        free(resp);
        return -1;
    }
    char buf[16] = "";
    snprintf(buf, sizeof(buf), "%.*s", (int)len, (const char *)resp);
    free(resp);
    return atoi(buf) - 1; /* minus the asking connection */
}

/* The server still answers a well-behaved client. */
static bool still_serving(void)
{
    int status = -1;
    uint8_t *resp = NULL;
    size_t len = 0;
    int r = grpc_blocking_unary(g.path, "/t/Echo", (const uint8_t *)"alive", 5, 5000000000ull,
                                &status, NULL, &resp, &len);
    bool ok = r == 0 && status == 0 && len == 5 && memcmp(resp, "alive", 5) == 0;
    free(resp);
    return ok;
}

static int raw_connect(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(g.path) >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, g.path, strlen(g.path) + 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static bool write_all(int fd, const void *p, size_t len)
{
    const uint8_t *b = p;
    while (len > 0) {
        ssize_t n = send(fd, b, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        b += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads until the server closes (true) or the 10 s receive timeout (false). */
static bool server_closes(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        if (n < 0)
            return false;
    }
}

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* --------------------------------------- a peer built on nghttp2 frames */

struct peer {
    nghttp2_session *sess;
    int fd;
    const uint8_t *body;
    size_t body_len;
    int grpc_status;
    int http_status;
    uint32_t rst_code;
    bool closed;
};

static ssize_t peer_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    struct peer *p = ud;
    size_t n = p->body_len < len ? p->body_len : len;
    if (n > 0) {
        memcpy(buf, p->body, n);
        p->body += n;
    }
    p->body_len -= n;
    if (p->body_len == 0)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int peer_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                       size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                       void *ud)
{
    struct peer *p = ud;
    char v[32];
    snprintf(v, sizeof(v), "%.*s", (int)valuelen, (const char *)value);
    if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        p->grpc_status = atoi(v);
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        p->http_status = atoi(v);
    return 0;
}

static int peer_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    struct peer *p = ud;
    p->closed = true;
    p->rst_code = code;
    return 0;
}

static bool peer_flush(struct peer *p)
{
    const uint8_t *data;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(p->sess, &data)) > 0)
        if (!write_all(p->fd, data, (size_t)n))
            return false;
    return n == 0;
}

/* One call whose DATA payload is body, verbatim (prefix included). Returns
 * the grpc-status the server sent, or -1 if none before the stream closed. */
static int raw_call(const char *method, const char *content_type, const void *body, size_t len,
                    int *ret_http)
{
    struct peer p = {.body = body, .body_len = len, .grpc_status = -1};
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, peer_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, peer_close);
    nghttp2_session_client_new(&p.sess, cbs, &p);
    nghttp2_session_callbacks_del(cbs);
    p.fd = raw_connect();
    if (p.fd < 0)
        return -2;
    nghttp2_submit_settings(p.sess, NGHTTP2_FLAG_NONE, NULL, 0);
    nghttp2_nv nva[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)method, 5, strlen(method), 0},
        {(uint8_t *)":authority", (uint8_t *)"x", 10, 1, 0},
        {(uint8_t *)"content-type", (uint8_t *)content_type, 12, strlen(content_type), 0},
    };
    nghttp2_data_provider prd = {.read_callback = peer_body};
    nghttp2_submit_request(p.sess, NULL, nva, ARRAY_SIZE(nva), &prd, NULL);
    bool ok = peer_flush(&p);
    uint8_t buf[16384];
    while (ok && !p.closed) {
        ssize_t n = recv(p.fd, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        if (nghttp2_session_mem_recv(p.sess, buf, (size_t)n) < 0)
            break;
        ok = peer_flush(&p);
    }
    close(p.fd);
    nghttp2_session_del(p.sess);
    if (ret_http)
        *ret_http = p.http_status;
    return p.grpc_status;
}

/* ------------------------------------------------------------------ cases */

TEST(setup_server)
{
    pthread_mutex_init(&g.lock, NULL);
    snprintf(g.path, sizeof(g.path), "%s/bad.sock", tap_tmpdir());
    REQUIRE_EQ_INT(ev_loop_new(&g.loop), 0);
    REQUIRE_EQ_INT(grpc_server_new(g.loop, NULL, &g.server), 0);
    REQUIRE_EQ_INT(
        grpc_server_add_method(g.server, "/t/Echo", GRPC_METHOD_UNARY, NULL, h_echo, NULL), 0);
    REQUIRE_EQ_INT(
        grpc_server_add_method(g.server, "/t/Conns", GRPC_METHOD_UNARY, NULL, h_conns, NULL), 0);
    REQUIRE_EQ_INT(grpc_server_add_method(g.server, "/t/Flood", GRPC_METHOD_SERVER_STREAMING, NULL,
                                          h_flood, NULL),
                   0);
    REQUIRE_EQ_INT(
        grpc_server_add_method(g.server, "/t/Quit", GRPC_METHOD_UNARY, NULL, h_quit, NULL), 0);
    REQUIRE_EQ_INT(grpc_server_listen_unix(g.server, g.path), 0);
    REQUIRE_EQ_INT(pthread_create(&g.thread, NULL, serve, NULL), 0);
    CHECK(still_serving());
}

TEST(garbage_preface)
{
    int fd = raw_connect();
    REQUIRE(fd >= 0);
    const char junk[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    CHECK(write_all(fd, junk, sizeof(junk) - 1));
    CHECK(server_closes(fd));
    close(fd);
    CHECK(still_serving());
    CHECK_EQ_INT(server_conns(), 0);
}

TEST(truncated_frame_then_vanish)
{
    int fd = raw_connect();
    REQUIRE(fd >= 0);
    CHECK(write_all(fd, preface, sizeof(preface) - 1));
    /* A SETTINGS frame announcing 60 bytes, of which 6 arrive. */
    const uint8_t frame[] = {0, 0, 60, 0x4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0};
    CHECK(write_all(fd, frame, sizeof(frame)));
    close(fd);
    CHECK(still_serving());
    CHECK(TAP_WAIT_UNTIL(server_conns() == 0, 5000));
}

TEST(illegal_frame_gets_goaway)
{
    int fd = raw_connect();
    REQUIRE(fd >= 0);
    CHECK(write_all(fd, preface, sizeof(preface) - 1));
    const uint8_t settings[] = {0, 0, 0, 0x4, 0, 0, 0, 0, 0};
    /* DATA on stream 0 is a connection error (PROTOCOL_ERROR). */
    const uint8_t data0[] = {0, 0, 1, 0x0, 0, 0, 0, 0, 0, 'x'};
    CHECK(write_all(fd, settings, sizeof(settings)));
    CHECK(write_all(fd, data0, sizeof(data0)));
    /* The server answers with its SETTINGS and a GOAWAY (type 7), then closes. */
    uint8_t buf[4096];
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);
        if (n <= 0 || got + (size_t)n >= sizeof(buf))
            break;
        got += (size_t)n;
    }
    bool goaway = false;
    for (size_t off = 0; off + 9 <= got;) {
        size_t len = (size_t)buf[off] << 16 | (size_t)buf[off + 1] << 8 | buf[off + 2];
        goaway |= buf[off + 3] == 7;
        off += 9 + len;
    }
    CHECK(goaway);
    close(fd);
    CHECK(still_serving());
}

TEST(bad_message_prefixes)
{
    int http = 0;
    /* Oversized: announces 4 MiB + 1 (and sends nothing more). */
    const uint8_t big[] = {0, 0, 0x40, 0, 1};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", big, sizeof(big), NULL),
                 GRPC_STATUS_RESOURCE_EXHAUSTED);
    const uint8_t huge[] = {0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", huge, sizeof(huge), NULL),
                 GRPC_STATUS_RESOURCE_EXHAUSTED);
    const uint8_t comp[] = {1, 0, 0, 0, 2, 'h', 'i'};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", comp, sizeof(comp), NULL),
                 GRPC_STATUS_UNIMPLEMENTED);
    const uint8_t flag[] = {9, 0, 0, 0, 2, 'h', 'i'};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", flag, sizeof(flag), NULL),
                 GRPC_STATUS_INTERNAL);
    const uint8_t trunc[] = {0, 0, 0, 0, 10, 'a', 'b', 'c'};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", trunc, sizeof(trunc), NULL),
                 GRPC_STATUS_INTERNAL);
    const uint8_t half_prefix[] = {0, 0};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", half_prefix, sizeof(half_prefix), NULL),
                 GRPC_STATUS_INTERNAL);
    const uint8_t two[] = {0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b'};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", two, sizeof(two), NULL),
                 GRPC_STATUS_INTERNAL);
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc", NULL, 0, NULL), GRPC_STATUS_INTERNAL);
    const uint8_t good[] = {0, 0, 0, 0, 2, 'o', 'k'};
    CHECK_EQ_INT(raw_call("/t/Echo", "application/grpc+proto", good, sizeof(good), &http),
                 GRPC_STATUS_OK);
    CHECK_EQ_INT(http, 200);
    CHECK_EQ_INT(raw_call("/t/Echo", "text/plain", good, sizeof(good), &http), -1);
    CHECK_EQ_INT(http, 415);
    CHECK_EQ_INT(raw_call("/nope", "application/grpc", good, sizeof(good), NULL),
                 GRPC_STATUS_UNIMPLEMENTED);
    CHECK(still_serving());
    CHECK(TAP_WAIT_UNTIL(server_conns() == 0, 5000));
}

static bool flood_finished(void)
{
    pthread_mutex_lock(&g.lock);
    bool d = g.flood_done;
    pthread_mutex_unlock(&g.lock);
    return d;
}

TEST(peer_that_stops_reading_is_capped)
{
    /* Open a Flood stream and never read: the server must neither block nor
     * buffer without bound. */
    struct peer p = {.grpc_status = -1};
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_client_new(&p.sess, cbs, &p);
    nghttp2_session_callbacks_del(cbs);
    p.fd = raw_connect();
    REQUIRE(p.fd >= 0);
    nghttp2_submit_settings(p.sess, NGHTTP2_FLAG_NONE, NULL, 0);
    nghttp2_nv nva[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)"/t/Flood", 5, 8, 0},
        {(uint8_t *)":authority", (uint8_t *)"x", 10, 1, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
    };
    static const uint8_t empty[] = {0, 0, 0, 0, 0};
    p.body = empty;
    p.body_len = sizeof(empty);
    nghttp2_data_provider prd = {.read_callback = peer_body};
    nghttp2_submit_request(p.sess, NULL, nva, ARRAY_SIZE(nva), &prd, NULL);
    CHECK(peer_flush(&p));
    CHECK(TAP_WAIT_UNTIL(flood_finished(), 20000));
    CHECK_EQ_INT(g.flood_result, -ENOBUFS);
    /* Others are still served while that peer sits there. */
    CHECK(still_serving());
    close(p.fd);
    nghttp2_session_del(p.sess);
    CHECK(TAP_WAIT_UNTIL(server_conns() == 0, 5000));
}

/* Many streams each sending most of a large message and never finishing it:
 * the connection's buffered request bytes are capped (4 × max message). */
struct slow_body {
    size_t left;
    bool prefix_sent;
};

struct slow_peer {
    int fd;
    int statuses; /* streams that got RESOURCE_EXHAUSTED */
    int others;
};

static ssize_t slow_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    struct slow_body *b = src->ptr;
    if (!b->prefix_sent) {
        grpc_msg_prefix(buf, 4u << 20); /* announces the max, sends 3 MiB */
        b->prefix_sent = true;
        return 5;
    }
    if (b->left == 0)
        return NGHTTP2_ERR_DEFERRED; /* never ends the request */
    size_t n = b->left < len ? b->left : len;
    memset(buf, 'z', n);
    b->left -= n;
    return (ssize_t)n;
}

static int slow_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                       size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                       void *ud)
{
    struct slow_peer *p = ud;
    if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        if (valuelen == 1 && value[0] == '8')
            p->statuses++;
        else
            p->others++;
    }
    return 0;
}

TEST(buffered_request_bytes_capped_per_connection)
{
    struct slow_peer p = {0};
    nghttp2_session_callbacks *cbs;
    nghttp2_session *sess;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, slow_header);
    nghttp2_session_client_new(&sess, cbs, &p);
    nghttp2_session_callbacks_del(cbs);
    p.fd = raw_connect();
    REQUIRE(p.fd >= 0);
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(sess, NGHTTP2_FLAG_NONE, iv, 1);
    nghttp2_nv nva[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)"/t/Echo", 5, 7, 0},
        {(uint8_t *)":authority", (uint8_t *)"x", 10, 1, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
    };
    struct slow_body bodies[8];
    for (int i = 0; i < 8; i++) {
        bodies[i] = (struct slow_body){.left = 3u << 20};
        nghttp2_data_provider prd = {.source.ptr = &bodies[i], .read_callback = slow_read};
        nghttp2_submit_request(sess, NULL, nva, ARRAY_SIZE(nva), &prd, NULL);
    }
    /* Pump both ways until the server refused at least one stream. */
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint64_t end = mono_ns() + 20000000000ull;
    uint8_t buf[65536];
    while (p.statuses == 0 && mono_ns() < end) {
        const uint8_t *data;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(sess, &data)) > 0)
            if (!write_all(p.fd, data, (size_t)n))
                break;
        n = recv(p.fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            break;
        if (n > 0 && nghttp2_session_mem_recv(sess, buf, (size_t)n) < 0)
            break;
    }
    CHECK_GE_INT(p.statuses, 1);
    CHECK_EQ_INT(p.others, 0);
    CHECK(still_serving());
    close(p.fd);
    nghttp2_session_del(sess);
    CHECK(TAP_WAIT_UNTIL(server_conns() == 0, 5000));
}

TEST(teardown_server)
{
    int status = -1;
    CHECK_EQ_INT(
        grpc_blocking_unary(g.path, "/t/Quit", NULL, 0, 5000000000ull, &status, NULL, NULL, NULL),
        0);
    CHECK_EQ_INT(status, 0);
    pthread_join(g.thread, NULL);
    g.server = grpc_server_free(g.server);
    g.loop = ev_loop_free(g.loop);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
