/* grpc-server.c — the gRPC server: listeners, connections (one nghttp2
 * server session each), streams, and the call objects handed to handlers.
 *
 * Lifetimes. A stream (struct srv_stream) belongs to its connection and
 * lives until nghttp2 closes it; a call (struct grpc_call) belongs to the
 * handler from dispatch until grpc_call_finish(). They point at each other
 * while both live; whichever goes first clears the other's pointer, so a
 * handler can finish a call whose peer is long gone, and a stream can send
 * its trailers after the handler has freed the call.
 *
 * Re-entrancy. Handlers and cancel callbacks never run inside nghttp2
 * callbacks: those only queue work on the server's pending list, which runs
 * after nghttp2_session_mem_recv() returns. A connection that fails while a
 * handler is running is closed from a 0-delay timer, never under the
 * handler's feet. */
#define _GNU_SOURCE /* accept4 */
#include "grpc-internal.h"

#include "fs.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A handler that queues this much unsent data on one call gets -ENOBUFS. */
#define CALL_MAX_QUEUED (64u * 1024 * 1024)
#define MAX_PATH_LEN 1024
#define UNPACK_ARENA_SIZE (16u * 1024)
/* Bigger HTTP/2 windows than the 64 KiB default, so a 4 MiB message does not
 * take dozens of WINDOW_UPDATE round trips. */
#define STREAM_WINDOW (1 << 20)
#define CONN_WINDOW (8 << 20)

struct grpc_method {
    char *path;
    enum grpc_method_kind kind;
    const ProtobufCMessageDescriptor *desc;
    grpc_handler_fn fn;
    void *user_data;
};

struct grpc_listener {
    int fd;
    char *path; /* NULL: adopted with grpc_server_listen_fd() */
    dev_t dev;
    ino_t ino;
};

enum pend_kind { PEND_NONE, PEND_DISPATCH, PEND_CANCEL };

struct srv_stream;

struct grpc_call {
    struct grpc_server *server;
    struct srv_stream *st; /* NULL once the stream is gone */
    const struct grpc_method *method;
    bool cancelled;
    bool sent_one;
    grpc_call_cancel_fn cancel_fn;
    void *cancel_data;
    enum pend_kind pend;
    struct grpc_call *pend_prev, *pend_next;
    uint8_t *req; /* request bytes until dispatch */
    size_t req_len;
};

struct srv_stream {
    struct grpc_server_conn *conn;
    int32_t id;
    char *path;
    bool method_post, content_type_ok, bad_header;
    bool remote_closed;
    bool rst_after_send; /* reset once our END_STREAM is out (peer still sending) */
    size_t accounted;    /* request bytes held, as counted in conn->req_bytes */
    const struct grpc_method *method;
    struct grpc_msgparser parser;
    uint8_t *req;
    size_t req_len;
    bool responded; /* response headers submitted */
    bool with_body; /* ...with a data provider (not trailers-only) */
    bool finished;  /* trailers wanted after the queue drains */
    int status;
    char *message; /* percent-encoded */
    struct grpc_buf outq;
    struct grpc_call *call;
    struct srv_stream *prev, *next;
};

struct grpc_server_conn {
    struct grpc_server *server;
    struct grpc_h2io io;
    struct srv_stream *streams;
    unsigned n_streams;
    size_t req_bytes; /* request bytes buffered by all streams, capped */
    int busy;
    bool dead;
    bool closing;       /* inside conn_close */
    bool peer_settings; /* the peer's first SETTINGS arrived (handshake done) */
    /* While no stream is open: since when, and when the connection is closed
     * for it (handshake or idle timeout). 0 while a stream is open. Memory
     * connections (fd < 0) never time out and are never evicted. */
    uint64_t idle_since, idle_deadline;
    uint64_t close_timer;
    struct grpc_server_conn *prev, *next;
};

struct grpc_server {
    struct ev_loop *loop;
    struct grpc_limits lim;
    struct grpc_method *methods;
    size_t n_methods;
    struct grpc_listener *listeners;
    size_t n_listeners;
    struct grpc_server_conn *conns;
    unsigned n_conns;
    struct grpc_call *pend_head, *pend_tail;
    bool processing;
    /* One timer for every idle deadline: armed for the earliest one. */
    uint64_t sweep_timer, sweep_at;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    /* Requests are unpacked into this arena (reset after each handler), so a
     * typical request (an Allocate for a few GPUs) costs protobuf-c no
     * allocation; what does not fit falls back to malloc. */
    size_t unpack_used;
    _Alignas(16) uint8_t unpack_arena[UNPACK_ARENA_SIZE];
};

/* ------------------------------------------------------------ pending work */

static void pend_push(struct grpc_server *s, struct grpc_call *c, enum pend_kind kind)
{
    c->pend = kind;
    c->pend_next = NULL;
    c->pend_prev = s->pend_tail;
    if (s->pend_tail)
        s->pend_tail->pend_next = c;
    else
        s->pend_head = c;
    s->pend_tail = c;
}

static void pend_unlink(struct grpc_server *s, struct grpc_call *c)
{
    if (c->pend == PEND_NONE)
        return;
    if (c->pend_prev)
        c->pend_prev->pend_next = c->pend_next;
    else
        s->pend_head = c->pend_next;
    if (c->pend_next)
        c->pend_next->pend_prev = c->pend_prev;
    else
        s->pend_tail = c->pend_prev;
    c->pend = PEND_NONE;
    c->pend_prev = c->pend_next = NULL;
}

static void *unpack_alloc(void *data, size_t size)
{
    struct grpc_server *s = data;
    size_t need = (size + 15) & ~(size_t)15;
    if (need >= size && need <= UNPACK_ARENA_SIZE - s->unpack_used) {
        void *p = s->unpack_arena + s->unpack_used;
        s->unpack_used += need;
        return p;
    }
    return malloc(size);
}

static void unpack_free(void *data, void *p)
{
    struct grpc_server *s = data;
    uint8_t *b = p;
    if (b >= s->unpack_arena && b < s->unpack_arena + UNPACK_ARENA_SIZE)
        return; /* the arena is reset as a whole */
    free(p);
}

static void call_free(struct grpc_call *c)
{
    free(c->req);
    free(c);
}

static void dispatch(struct grpc_call *c)
{
    const struct grpc_method *m = c->method;
    struct grpc_request req = {.data = c->req, .len = c->req_len};
    /* The handler may free the call before returning: the request is ours. */
    uint8_t *owned = c->req;
    c->req = NULL;
    ProtobufCMessage *msg = NULL;
    struct grpc_server *s = c->server;
    ProtobufCAllocator arena = {unpack_alloc, unpack_free, s};
    if (m->desc) {
        /* dispatches never nest (process_pending), so the arena is free */
        s->unpack_used = 0;
        msg = protobuf_c_message_unpack(m->desc, &arena, req.len, req.data);
        if (!msg) {
            grpc_call_finishf(c, GRPC_STATUS_INVALID_ARGUMENT, "request does not decode as %s",
                              m->desc->name);
            free(owned);
            return;
        }
        req.msg = msg;
    }
    m->fn(c, &req, m->user_data);
    if (msg)
        protobuf_c_message_free_unpacked(msg, &arena);
    s->unpack_used = 0;
    free(owned);
}

/* Runs queued handler invocations and cancel notifications, outside nghttp2. */
static void process_pending(struct grpc_server *s)
{
    if (s->processing)
        return;
    s->processing = true;
    struct grpc_call *c;
    while ((c = s->pend_head)) {
        enum pend_kind kind = c->pend;
        pend_unlink(s, c);
        if (kind == PEND_DISPATCH)
            dispatch(c);
        else if (c->cancel_fn)
            c->cancel_fn(c, c->cancel_data);
    }
    s->processing = false;
}

/* -------------------------------------------------------------- streams */

static struct srv_stream *stream_new(struct grpc_server_conn *conn, int32_t id)
{
    struct srv_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->conn = conn;
    st->id = id;
    grpc_msgparser_init(&st->parser, conn->server->lim.max_message_size);
    st->next = conn->streams;
    if (conn->streams)
        conn->streams->prev = st;
    conn->streams = st;
    conn->n_streams++;
    conn->idle_since = conn->idle_deadline = 0;
    return st;
}

/* Keeps conn->req_bytes in step with what st buffers. Many streams each
 * sending a large message slowly must not hold unbounded memory. */
static void stream_account(struct srv_stream *st)
{
    size_t now = st->parser.body.len + (st->req ? st->req_len : 0);
    st->conn->req_bytes = st->conn->req_bytes - st->accounted + now;
    st->accounted = now;
}

static void conn_idle(struct grpc_server_conn *conn);

static size_t conn_max_req_bytes(const struct grpc_server_conn *conn)
{
    return 4 * conn->server->lim.max_message_size;
}

/* Forgets the stream; an unfinished call is told (later) that its peer went away. */
static void stream_free(struct srv_stream *st)
{
    struct grpc_server_conn *conn = st->conn;
    struct grpc_call *c = st->call;
    if (c) {
        c->st = NULL;
        if (c->pend == PEND_DISPATCH) {
            pend_unlink(conn->server, c);
            call_free(c);
        } else {
            c->cancelled = true;
            pend_push(conn->server, c, PEND_CANCEL);
        }
    }
    conn->req_bytes -= st->accounted;
    if (st->prev)
        st->prev->next = st->next;
    else
        conn->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    conn->n_streams--;
    if (conn->n_streams == 0 && !conn->closing)
        conn_idle(conn);
    grpc_msgparser_done(&st->parser);
    grpc_buf_clear(&st->outq);
    free(st->path);
    free(st->req);
    free(st->message);
    free(st);
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

/* Fills status trailers into nva (2 entries when msg is set). */
static size_t status_nv(nghttp2_nv *nva, char *code, int status, const char *enc_msg)
{
    snprintf(code, 12, "%d", status);
    nva[0] = (nghttp2_nv)NV("grpc-status", code);
    if (enc_msg && *enc_msg) {
        nva[1] = (nghttp2_nv)NV("grpc-message", enc_msg);
        return 2;
    }
    return 1;
}

/* A response with no messages: headers and status in one HEADERS frame. */
static void stream_respond_status(struct srv_stream *st, int status, const char *msg)
{
    nghttp2_session *sess = st->conn->io.session;
    if (st->responded)
        return;
    _cleanup_free_ char *enc = msg ? grpc_percent_encode(msg) : NULL;
    char code[12];
    nghttp2_nv nva[4] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    size_t n = 2 + status_nv(nva + 2, code, status, enc);
    st->responded = true;
    nghttp2_submit_response(sess, st->id, nva, n, NULL);
    /* The peer is still sending a request we will not read: tell it to stop,
     * after the status is out (a reset queued now would discard it). */
    st->rst_after_send = !st->remote_closed;
}

static ssize_t stream_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                              uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    struct srv_stream *st = source->ptr;
    size_t n = st->outq.len < length ? st->outq.len : length;
    if (n > 0) {
        memcpy(buf, grpc_buf_head(&st->outq), n);
        grpc_buf_consume(&st->outq, n);
    }
    if (st->outq.len == 0 && st->finished) {
        char code[12];
        nghttp2_nv nva[2];
        size_t nn = status_nv(nva, code, st->status, st->message);
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(sess, id, nva, nn) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return (ssize_t)n;
    }
    if (n == 0)
        return NGHTTP2_ERR_DEFERRED;
    return (ssize_t)n;
}

/* ---------------------------------------------------------- connections */

static void conn_close(struct grpc_server_conn *conn);

static void conn_close_timer_cb(struct ev_loop *loop, void *user_data)
{
    struct grpc_server_conn *conn = user_data;
    conn->close_timer = 0;
    conn_close(conn);
}

/* Closes conn soon (from the loop), never under a running handler. */
static void conn_kill(struct grpc_server_conn *conn)
{
    if (conn->dead)
        return;
    conn->dead = true;
    if (conn->busy == 0 &&
        ev_loop_add_timer(conn->server->loop, 0, conn_close_timer_cb, conn, &conn->close_timer) < 0)
        conn->close_timer = 0; /* no memory for a timer: the next I/O event closes it */
}

/* Sends what is queued, unless the I/O callback will do it when it unwinds. */
static void conn_flush_soon(struct grpc_server_conn *conn)
{
    if (conn->busy > 0 || conn->dead)
        return;
    if (grpc_h2io_flush(&conn->io) < 0)
        conn_kill(conn);
}

static void conn_close(struct grpc_server_conn *conn)
{
    struct grpc_server *s = conn->server;
    conn->closing = true;
    if (conn->close_timer)
        ev_loop_cancel_timer(s->loop, conn->close_timer);
    if (conn->io.fd >= 0) {
        ev_loop_del_io(s->loop, conn->io.fd);
        close(conn->io.fd);
    }
    nghttp2_session_del(conn->io.session);
    while (conn->streams)
        stream_free(conn->streams);
    grpc_buf_clear(&conn->io.out);
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        s->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    s->n_conns--;
    free(conn);
    process_pending(s);
}

/* Says goodbye (GOAWAY, best effort: the socket may not take it) and closes. */
static void conn_goaway_close(struct grpc_server_conn *conn)
{
    if (!conn->dead) {
        nghttp2_session_terminate_session(conn->io.session, NGHTTP2_NO_ERROR);
        (void)grpc_h2io_flush(&conn->io);
    }
    conn_close(conn);
}

static void sweep_arm(struct grpc_server *s, uint64_t deadline);

/* Closes the connections whose idle deadline has passed; re-arms for the next. */
static void sweep_cb(struct ev_loop *loop, void *user_data)
{
    struct grpc_server *s = user_data;
    s->sweep_timer = 0;
    uint64_t now = mono_ns(), next = 0;
    for (struct grpc_server_conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->io.fd < 0 || !c->idle_deadline || c->busy)
            continue;
        if (c->idle_deadline <= now)
            conn_goaway_close(c);
        else if (!next || c->idle_deadline < next)
            next = c->idle_deadline;
    }
    if (next)
        sweep_arm(s, next);
}

static void sweep_arm(struct grpc_server *s, uint64_t deadline)
{
    if (s->sweep_timer && s->sweep_at <= deadline)
        return;
    if (s->sweep_timer)
        ev_loop_cancel_timer(s->loop, s->sweep_timer);
    uint64_t now = mono_ns();
    s->sweep_at = deadline;
    if (ev_loop_add_timer(s->loop, deadline > now ? deadline - now : 0, sweep_cb, s,
                          &s->sweep_timer) < 0)
        s->sweep_timer = 0; /* no memory: the next idle connection tries again */
}

/* No stream open now: the idle (or, before the peer's SETTINGS, the
 * handshake) clock starts. */
static void conn_idle(struct grpc_server_conn *conn)
{
    if (conn->io.fd < 0)
        return;
    struct grpc_server *s = conn->server;
    conn->idle_since = mono_ns();
    conn->idle_deadline = conn->idle_since + (conn->peer_settings ? s->lim.idle_timeout_ns
                                                                  : s->lim.handshake_timeout_ns);
    sweep_arm(s, conn->idle_deadline);
}

/* The handshake is done: an idle connection now gets the idle timeout. */
static void conn_peer_settings(struct grpc_server_conn *conn)
{
    if (conn->peer_settings)
        return;
    conn->peer_settings = true;
    if (conn->io.fd >= 0 && conn->idle_since) {
        conn->idle_deadline = conn->idle_since + conn->server->lim.idle_timeout_ns;
        sweep_arm(conn->server, conn->idle_deadline);
    }
}

/* The cap is reached: closes the connection idle the longest (one already
 * failing first) to make room. False when every connection has a stream open. */
static bool conn_evict_one(struct grpc_server *s)
{
    struct grpc_server_conn *victim = NULL;
    for (struct grpc_server_conn *c = s->conns; c; c = c->next) {
        if (c->io.fd < 0 || c->busy || (!c->dead && !c->idle_since))
            continue;
        uint64_t since = c->dead ? 0 : c->idle_since;
        if (!victim || since < (victim->dead ? 0 : victim->idle_since))
            victim = c;
    }
    if (!victim)
        return false;
    conn_goaway_close(victim);
    return true;
}

/* After nghttp2 consumed input: run handlers, send, close if finished. */
static void conn_after_input(struct grpc_server_conn *conn, int r)
{
    process_pending(conn->server);
    conn->busy--;
    if (r == -EPROTO) {
        /* nghttp2 may have queued a GOAWAY: best effort, then close. */
        (void)grpc_h2io_flush(&conn->io);
        conn_close(conn);
        return;
    }
    if (r < 0 || conn->dead || grpc_h2io_flush(&conn->io) < 0 || !grpc_h2io_alive(&conn->io))
        conn_close(conn);
}

static void conn_io_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    struct grpc_server_conn *conn = user_data;
    int r = 0;
    conn->busy++;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))
        r = grpc_h2io_read(&conn->io);
    conn_after_input(conn, r);
}

/* nghttp2 callbacks ------------------------------------------------------ */

static struct srv_stream *stream_of(nghttp2_session *sess, int32_t id)
{
    return nghttp2_session_get_stream_user_data(sess, id);
}

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *frame, void *user_data)
{
    struct grpc_server_conn *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (conn->n_streams >= conn->server->lim.max_concurrent_streams) {
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    struct srv_stream *st = stream_new(conn, frame->hd.stream_id);
    if (!st) {
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_INTERNAL_ERROR);
        return 0;
    }
    nghttp2_session_set_stream_user_data(sess, frame->hd.stream_id, st);
    return 0;
}

static bool hdr_is(const uint8_t *name, size_t len, const char *lit)
{
    return len == strlen(lit) && memcmp(name, lit, len) == 0;
}

static bool content_type_ok(const uint8_t *v, size_t len)
{
    static const char ct[] = "application/grpc";
    size_t n = sizeof(ct) - 1;
    if (len < n || memcmp(v, ct, n) != 0)
        return false;
    return len == n || v[n] == '+' || v[n] == ';';
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* request trailers carry nothing we use */
    struct srv_stream *st = stream_of(sess, frame->hd.stream_id);
    if (!st)
        return 0;
    if (hdr_is(name, namelen, ":path")) {
        if (st->path || valuelen == 0 || valuelen > MAX_PATH_LEN || memchr(value, 0, valuelen)) {
            st->bad_header = true;
            return 0;
        }
        st->path = strndup((const char *)value, valuelen);
        if (!st->path)
            st->bad_header = true;
    } else if (hdr_is(name, namelen, ":method")) {
        st->method_post = hdr_is(value, valuelen, "POST");
    } else if (hdr_is(name, namelen, "content-type")) {
        st->content_type_ok = content_type_ok(value, valuelen);
    }
    return 0;
}

static const struct grpc_method *method_find(const struct grpc_server *s, const char *path)
{
    for (size_t i = 0; i < s->n_methods; i++)
        if (strcmp(s->methods[i].path, path) == 0)
            return &s->methods[i];
    return NULL;
}

static void request_headers_done(nghttp2_session *sess, struct srv_stream *st)
{
    if (st->bad_header || !st->path || !st->method_post) {
        st->responded = true;
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_PROTOCOL_ERROR);
        return;
    }
    if (!st->content_type_ok) {
        /* Not gRPC at all: an HTTP answer, as the gRPC spec asks. */
        nghttp2_nv nva[] = {NV(":status", "415")};
        st->responded = true;
        nghttp2_submit_response(sess, st->id, nva, ARRAY_SIZE(nva), NULL);
        st->rst_after_send = !st->remote_closed;
        return;
    }
    st->method = method_find(st->conn->server, st->path);
    if (!st->method) {
        char msg[MAX_PATH_LEN + 32];
        snprintf(msg, sizeof(msg), "unknown method %s", st->path);
        stream_respond_status(st, GRPC_STATUS_UNIMPLEMENTED, msg);
    }
}

/* The client half-closed: the request is complete. */
static void request_done(struct srv_stream *st)
{
    if (st->responded)
        return;
    if (grpc_msgparser_partial(&st->parser)) {
        stream_respond_status(st, GRPC_STATUS_INTERNAL, "truncated request message");
        return;
    }
    if (st->parser.count == 0) {
        stream_respond_status(st, GRPC_STATUS_INTERNAL, "no request message");
        return;
    }
    struct grpc_server_conn *conn = st->conn;
    struct grpc_call *c = calloc(1, sizeof(*c));
    if (!c) {
        stream_respond_status(st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    c->server = conn->server;
    c->st = st;
    c->method = st->method;
    c->req = st->req;
    c->req_len = st->req_len;
    st->req = NULL;
    st->call = c;
    stream_account(st);
    pend_push(conn->server, c, PEND_DISPATCH);
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *frame, void *user_data)
{
    if (frame->hd.type == NGHTTP2_SETTINGS && !(frame->hd.flags & NGHTTP2_FLAG_ACK))
        conn_peer_settings(user_data);
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    struct srv_stream *st = stream_of(sess, frame->hd.stream_id);
    if (!st)
        return 0;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        st->remote_closed = true;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        request_headers_done(sess, st);
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && !st->call)
        request_done(st);
    return 0;
}

static int store_request(const uint8_t *msg, size_t len, void *user_data)
{
    struct srv_stream *st = user_data;
    if (st->parser.count > 1)
        return -E2BIG;
    st->req = malloc(len ? len : 1);
    if (!st->req)
        return -ENOMEM;
    memcpy(st->req, msg, len);
    st->req_len = len;
    return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user_data)
{
    struct srv_stream *st = stream_of(sess, id);
    if (!st || st->responded || st->call || !st->method)
        return 0;
    int r;
    if (st->conn->req_bytes + len > conn_max_req_bytes(st->conn))
        r = -ENOSPC;
    else
        r = grpc_msgparser_feed(&st->parser, data, len, store_request, st);
    if (r != 0) {
        /* The partial message is dropped with the error. */
        grpc_msgparser_done(&st->parser);
        free(st->req);
        st->req = NULL;
    }
    stream_account(st);
    switch (r) {
    case 0:
        break;
    case -EMSGSIZE: {
        char msg[96];
        snprintf(msg, sizeof(msg), "request message larger than max (%zu bytes)",
                 st->conn->server->lim.max_message_size);
        stream_respond_status(st, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
        break;
    }
    case -ENOTSUP:
        stream_respond_status(st, GRPC_STATUS_UNIMPLEMENTED,
                              "compressed messages are not supported");
        break;
    case -E2BIG:
        stream_respond_status(st, GRPC_STATUS_INTERNAL, "more than one request message");
        break;
    case -ENOMEM:
        stream_respond_status(st, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        break;
    case -ENOSPC:
        stream_respond_status(st, GRPC_STATUS_RESOURCE_EXHAUSTED,
                              "too much request data buffered on this connection");
        break;
    default:
        stream_respond_status(st, GRPC_STATUS_INTERNAL, "bad message prefix");
        break;
    }
    return 0;
}

static int on_frame_send(nghttp2_session *sess, const nghttp2_frame *frame, void *user_data)
{
    if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct srv_stream *st = stream_of(sess, frame->hd.stream_id);
    if (st && st->rst_after_send && !st->remote_closed) {
        st->rst_after_send = false;
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *user_data)
{
    struct srv_stream *st = stream_of(sess, id);
    if (st) {
        nghttp2_session_set_stream_user_data(sess, id, NULL);
        stream_free(st);
    }
    return 0;
}

static int conn_new(struct grpc_server *s, int fd,
                    void (*sink)(const uint8_t *data, size_t len, void *user_data), void *sink_data,
                    struct grpc_server_conn **ret)
{
    if (s->n_conns >= s->lim.max_connections && (fd < 0 || !conn_evict_one(s)))
        return -EMFILE;
    struct grpc_server_conn *conn = calloc(1, sizeof(*conn));
    if (!conn)
        return -ENOMEM;
    conn->server = s;
    conn->io = (struct grpc_h2io){.loop = s->loop, .fd = fd, .sink = sink, .sink_data = sink_data};
    if (nghttp2_session_server_new2(&conn->io.session, s->cbs, conn, s->opt) != 0) {
        free(conn);
        return -ENOMEM;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->lim.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
    };
    int r = nghttp2_submit_settings(conn->io.session, NGHTTP2_FLAG_NONE, iv, ARRAY_SIZE(iv));
    if (r == 0)
        r = nghttp2_session_set_local_window_size(conn->io.session, NGHTTP2_FLAG_NONE, 0,
                                                  CONN_WINDOW);
    if (r != 0) {
        nghttp2_session_del(conn->io.session);
        free(conn);
        return -ENOMEM;
    }
    if (fd >= 0) {
        r = ev_loop_add_io(s->loop, fd, EPOLLIN | EPOLLRDHUP, conn_io_cb, conn);
        if (r < 0) {
            nghttp2_session_del(conn->io.session);
            free(conn);
            return r;
        }
    }
    conn->next = s->conns;
    if (s->conns)
        s->conns->prev = conn;
    s->conns = conn;
    s->n_conns++;
    conn_idle(conn);
    if (grpc_h2io_flush(&conn->io) < 0)
        conn_kill(conn);
    *ret = conn;
    return 0;
}

/* -------------------------------------------------------------- listeners */

static void listener_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    struct grpc_server *s = user_data;
    /* Bounded so a connect storm cannot starve established connections. */
    for (int i = 0; i < 64; i++) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0)
            return;
        struct grpc_server_conn *conn;
        if (conn_new(s, cfd, NULL, NULL, &conn) < 0)
            close(cfd); /* over max_connections, or no memory: the peer sees EOF */
    }
}

static int listener_add(struct grpc_server *s, int fd, const char *path)
{
    struct grpc_listener *l = realloc(s->listeners, (s->n_listeners + 1) * sizeof(*l));
    if (!l)
        return -ENOMEM;
    s->listeners = l;
    l = &s->listeners[s->n_listeners];
    *l = (struct grpc_listener){.fd = fd};
    if (path) {
        struct stat sb;
        l->path = strdup(path);
        if (!l->path)
            return -ENOMEM;
        if (stat(path, &sb) == 0) {
            l->dev = sb.st_dev;
            l->ino = sb.st_ino;
        }
    }
    int r = ev_loop_add_io(s->loop, fd, EPOLLIN, listener_cb, s);
    if (r < 0) {
        free(l->path);
        return r;
    }
    s->n_listeners++;
    return 0;
}

/* True when a process accepts connections on the socket at sa. A full
 * backlog (EAGAIN) is a live server too; anything else (ECONNREFUSED: the
 * file outlived its server) is not. */
static bool socket_is_live(const struct sockaddr_un *sa)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    int r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
    bool live = r == 0 || errno == EAGAIN || errno == EINPROGRESS;
    close(fd);
    return live;
}

int grpc_server_listen_unix(struct grpc_server *server, const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    struct stat sb;
    if (lstat(path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode))
            return -EEXIST;
        /* A socket someone still serves on (a second daemon started by
         * mistake) is not ours to take; one nobody listens on is left over
         * by a crash and is replaced. */
        if (socket_is_live(&sa))
            return -EADDRINUSE;
        if (unlink(path) < 0 && errno != ENOENT)
            return -errno;
    }
    /* Bind and listen under a temporary name, then rename onto the path: the
     * path never names a socket that is not yet listening, so a peer that sees
     * the file (the kubelet, a test, a second daemon probing for a live socket)
     * never gets ECONNREFUSED from a server that is starting. A temporary name
     * an earlier process was killed with (between bind and rename) goes first. */
    struct sockaddr_un tmp = {.sun_family = AF_UNIX};
    bool renamed = snprintf(tmp.sun_path, sizeof(tmp.sun_path), "%s.tmp.%ld", path,
                            (long)getpid()) < (int)sizeof(tmp.sun_path);
    char dir[sizeof(sa.sun_path)];
    memcpy(dir, path, strlen(path) + 1);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        fs_remove_stale_tmp(dir, slash + 1);
    }
    const struct sockaddr_un *bind_sa = renamed ? &tmp : &sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (renamed)
        unlink(tmp.sun_path);
    if (bind(fd, (const struct sockaddr *)bind_sa, sizeof(*bind_sa)) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    /* bind() creates the file with 0777 & ~umask: under umask 000 anyone could
     * connect (and Allocate). Only the owner may, whatever the umask; the
     * mode is set before the file takes its real name. */
    if (chmod(bind_sa->sun_path, 0600) < 0 || listen(fd, 128) < 0 ||
        (renamed && rename(tmp.sun_path, path) < 0)) {
        int r = -errno;
        close(fd);
        unlink(bind_sa->sun_path);
        return r;
    }
    int r = listener_add(server, fd, path);
    if (r < 0) {
        close(fd);
        unlink(path);
    }
    return r;
}

int grpc_server_listen_fd(struct grpc_server *server, int fd)
{
    return listener_add(server, fd, NULL);
}

void grpc_server_close_listeners(struct grpc_server *server, bool unlink_paths)
{
    for (size_t i = 0; i < server->n_listeners; i++) {
        struct grpc_listener *l = &server->listeners[i];
        ev_loop_del_io(server->loop, l->fd);
        struct stat sb;
        /* Only our own socket: someone may have replaced it since. The path
         * goes before the listener closes, so it never names a dead socket. */
        if (unlink_paths && l->path && stat(l->path, &sb) == 0 && sb.st_dev == l->dev &&
            sb.st_ino == l->ino)
            unlink(l->path);
        close(l->fd);
        free(l->path);
    }
    free(server->listeners);
    server->listeners = NULL;
    server->n_listeners = 0;
}

int grpc_server_add_connection(struct grpc_server *server, int fd)
{
    struct grpc_server_conn *conn;
    return conn_new(server, fd, NULL, NULL, &conn);
}

unsigned grpc_server_connection_count(const struct grpc_server *server)
{
    return server->n_conns;
}

void grpc_server_set_timeouts(struct grpc_server *server, uint64_t handshake_timeout_ns,
                              uint64_t idle_timeout_ns)
{
    server->lim.handshake_timeout_ns =
        handshake_timeout_ns ? handshake_timeout_ns : GRPC_DEFAULT_HANDSHAKE_TIMEOUT_NS;
    server->lim.idle_timeout_ns = idle_timeout_ns ? idle_timeout_ns : GRPC_DEFAULT_IDLE_TIMEOUT_NS;
}

/* ----------------------------------------------------------------- server */

int grpc_server_new(struct ev_loop *loop, const struct grpc_limits *limits,
                    struct grpc_server **ret)
{
    struct grpc_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->loop = loop;
    grpc_limits_resolve(limits, &s->lim);
    if (nghttp2_session_callbacks_new(&s->cbs) != 0 || nghttp2_option_new(&s->opt) != 0) {
        grpc_server_free(s);
        return -ENOMEM;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(s->cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(s->cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(s->cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(s->cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(s->cbs, on_frame_send);
    /* grpc-go sends the socket path as :authority, which HTTP messaging rejects;
     * we check the headers gRPC needs ourselves. */
    nghttp2_option_set_no_http_messaging(s->opt, 1);
    *ret = s;
    return 0;
}

struct grpc_server *grpc_server_free(struct grpc_server *server)
{
    if (!server)
        return NULL;
    grpc_server_close_listeners(server, true);
    if (server->sweep_timer)
        ev_loop_cancel_timer(server->loop, server->sweep_timer);
    while (server->conns)
        conn_close(server->conns);
    process_pending(server);
    for (size_t i = 0; i < server->n_methods; i++)
        free(server->methods[i].path);
    free(server->methods);
    nghttp2_session_callbacks_del(server->cbs);
    nghttp2_option_del(server->opt);
    free(server);
    return NULL;
}

int grpc_server_add_method(struct grpc_server *server, const char *path, enum grpc_method_kind kind,
                           const ProtobufCMessageDescriptor *request_desc, grpc_handler_fn fn,
                           void *user_data)
{
    if (!path || path[0] != '/' || strlen(path) > MAX_PATH_LEN || !fn ||
        (kind != GRPC_METHOD_UNARY && kind != GRPC_METHOD_SERVER_STREAMING))
        return -EINVAL;
    if (method_find(server, path))
        return -EEXIST;
    /* Streams point into this array: no methods after the first connection. */
    if (server->n_conns > 0)
        return -EBUSY;
    struct grpc_method *m = realloc(server->methods, (server->n_methods + 1) * sizeof(*m));
    if (!m)
        return -ENOMEM;
    server->methods = m;
    char *p = strdup(path);
    if (!p)
        return -ENOMEM;
    m[server->n_methods++] = (struct grpc_method){
        .path = p, .kind = kind, .desc = request_desc, .fn = fn, .user_data = user_data};
    return 0;
}

/* ------------------------------------------------------------------- calls */

const char *grpc_call_method(const struct grpc_call *call)
{
    return call->method->path;
}

bool grpc_call_is_cancelled(const struct grpc_call *call)
{
    return call->cancelled;
}

void grpc_call_set_cancel_cb(struct grpc_call *call, grpc_call_cancel_fn fn, void *user_data)
{
    call->cancel_fn = fn;
    call->cancel_data = user_data;
}

/* Queues room for a prefixed message of len bytes; returns where the payload goes. */
static int call_queue(struct grpc_call *call, size_t len, uint8_t **ret_payload)
{
    struct srv_stream *st = call->st;
    if (!st)
        return -ECONNRESET;
    if (len > call->server->lim.max_message_size)
        return -EMSGSIZE;
    if (call->method->kind == GRPC_METHOD_UNARY && call->sent_one)
        return -EINVAL;
    if (st->outq.len + len + 5 > CALL_MAX_QUEUED)
        return -ENOBUFS;
    uint8_t *p;
    int r = grpc_buf_reserve(&st->outq, 5 + len, &p);
    if (r < 0)
        return r;
    grpc_msg_prefix(p, (uint32_t)len);
    *ret_payload = p + 5;
    return 0;
}

static void call_queued(struct grpc_call *call)
{
    struct srv_stream *st = call->st;
    nghttp2_session *sess = st->conn->io.session;
    call->sent_one = true;
    if (!st->responded) {
        nghttp2_nv nva[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
        nghttp2_data_provider prd = {.source.ptr = st, .read_callback = stream_read_cb};
        st->responded = true;
        st->with_body = true;
        nghttp2_submit_response(sess, st->id, nva, ARRAY_SIZE(nva), &prd);
    } else {
        nghttp2_session_resume_data(sess, st->id);
    }
    conn_flush_soon(st->conn);
}

int grpc_call_send(struct grpc_call *call, const uint8_t *data, size_t len)
{
    uint8_t *p;
    int r = call_queue(call, len, &p);
    if (r < 0)
        return r;
    if (len > 0)
        memcpy(p, data, len);
    call_queued(call);
    return 0;
}

int grpc_call_send_msg(struct grpc_call *call, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *p;
    int r = call_queue(call, len, &p);
    if (r < 0)
        return r;
    protobuf_c_message_pack(msg, p);
    call_queued(call);
    return 0;
}

int grpc_call_finish(struct grpc_call *call, int status, const char *message)
{
    struct srv_stream *st = call->st;
    pend_unlink(call->server, call);
    call_free(call);
    if (!st)
        return -ECONNRESET;
    st->call = NULL;
    if (!st->responded) {
        stream_respond_status(st, status, message);
    } else if (st->with_body) {
        st->status = status;
        st->message = message && *message ? grpc_percent_encode(message) : NULL;
        st->finished = true;
        nghttp2_session_resume_data(st->conn->io.session, st->id);
    }
    conn_flush_soon(st->conn);
    return 0;
}

int grpc_call_finishf(struct grpc_call *call, int status, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return grpc_call_finish(call, status, buf);
}

static int reply_too_big(struct grpc_call *call, size_t len)
{
    grpc_call_finishf(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                      "response message of %zu bytes is larger than max (%zu bytes)", len,
                      call->server->lim.max_message_size);
    return -EMSGSIZE;
}

int grpc_call_reply(struct grpc_call *call, const uint8_t *data, size_t len)
{
    /* A detached call may outlive its server: touch nothing else. */
    if (!call->st)
        return grpc_call_finish(call, GRPC_STATUS_CANCELLED, NULL);
    if (len > call->server->lim.max_message_size)
        return reply_too_big(call, len);
    int r = grpc_call_send(call, data, len);
    if (r < 0 && r != -ECONNRESET) {
        grpc_call_finishf(call, GRPC_STATUS_INTERNAL, "cannot send response (%s)", strerror(-r));
        return r;
    }
    return grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

int grpc_call_reply_msg(struct grpc_call *call, const ProtobufCMessage *msg)
{
    if (!call->st)
        return grpc_call_finish(call, GRPC_STATUS_CANCELLED, NULL);
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (len > call->server->lim.max_message_size)
        return reply_too_big(call, len);
    int r = grpc_call_send_msg(call, msg);
    if (r < 0 && r != -ECONNRESET) {
        grpc_call_finishf(call, GRPC_STATUS_INTERNAL, "cannot send response (%s)", strerror(-r));
        return r;
    }
    return grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

/* ---------------------------------------------------------- test hooks */

int grpc_server_mem_conn_new(struct grpc_server *server,
                             void (*sink)(const uint8_t *data, size_t len, void *user_data),
                             void *sink_data, struct grpc_server_conn **ret)
{
    return conn_new(server, -1, sink, sink_data, ret);
}

int grpc_server_mem_conn_feed(struct grpc_server_conn *conn, const uint8_t *data, size_t len)
{
    if (conn->dead)
        return -ECONNRESET;
    conn->busy++;
    int r = grpc_h2io_feed(&conn->io, data, len);
    process_pending(conn->server);
    conn->busy--;
    if (r == 0 && grpc_h2io_flush(&conn->io) < 0)
        r = -ECONNRESET;
    if (r < 0)
        conn->dead = true;
    return r;
}

void grpc_server_mem_conn_close(struct grpc_server_conn *conn)
{
    conn_close(conn);
}
