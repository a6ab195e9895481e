/* grpc-client.c — the gRPC client: one HTTP/2 connection (nghttp2 client
 * session) to a unix socket, any number of concurrent unary and
 * server-streaming calls on it, deadlines from the event loop's timers, and
 * the blocking wrappers for command-line tools.
 *
 * A call's done callback runs exactly once. Callbacks may start or cancel
 * calls and may even free the client: freeing while a callback of this
 * client runs is deferred until the callback unwinds (busy counter). */
#include "grpc-internal.h"

#include "accel-config.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define STREAM_WINDOW (1 << 20)
#define CONN_WINDOW (8 << 20)

struct grpc_client_call {
    struct grpc_client *client;
    int32_t id;
    bool streaming;
    grpc_client_msg_fn on_msg;
    grpc_client_done_fn done;
    void *user_data;
    struct grpc_buf req; /* prefixed request, drained by the data provider */
    struct grpc_msgparser parser;
    uint8_t *resp;
    size_t resp_len;
    bool have_resp;
    int http_status;
    bool have_grpc_status;
    int grpc_status;
    char *grpc_message;
    bool done_called;
    uint64_t timer;
    struct grpc_client_call *prev, *next;
};

struct grpc_client {
    struct ev_loop *loop;
    struct grpc_limits lim;
    struct grpc_h2io io;
    nghttp2_session_callbacks *cbs;
    struct grpc_client_call *calls;
    bool connected;
    int busy;
    bool free_pending;
    uint64_t lost_timer;
};

static void client_destroy(struct grpc_client *c);

static void client_enter(struct grpc_client *c)
{
    c->busy++;
}

/* Returns true when the client was freed (a callback asked for it). */
static bool client_leave(struct grpc_client *c)
{
    if (--c->busy == 0 && c->free_pending) {
        client_destroy(c);
        return true;
    }
    return false;
}

static void call_finish(struct grpc_client_call *call, int status, const char *message)
{
    if (call->done_called)
        return;
    call->done_called = true;
    if (call->timer) {
        ev_loop_cancel_timer(call->client->loop, call->timer);
        call->timer = 0;
    }
    bool ok = status == GRPC_STATUS_OK && !call->streaming;
    call->done(status, message ? message : "", ok ? call->resp : NULL, ok ? call->resp_len : 0,
               call->user_data);
}

static void call_free(struct grpc_client_call *call)
{
    struct grpc_client *c = call->client;
    if (call->timer)
        ev_loop_cancel_timer(c->loop, call->timer);
    if (call->prev)
        call->prev->next = call->next;
    else
        c->calls = call->next;
    if (call->next)
        call->next->prev = call->prev;
    grpc_buf_clear(&call->req);
    grpc_msgparser_done(&call->parser);
    free(call->resp);
    free(call->grpc_message);
    free(call);
}

/* The connection is gone: every open call ends with status. */
static void client_disconnect(struct grpc_client *c, int status, const char *message)
{
    c->connected = false;
    if (c->lost_timer) {
        ev_loop_cancel_timer(c->loop, c->lost_timer);
        c->lost_timer = 0;
    }
    if (c->io.fd >= 0) {
        ev_loop_del_io(c->loop, c->io.fd);
        close(c->io.fd);
        c->io.fd = -1;
    }
    /* Callbacks may cancel other calls: rescan after each. */
    for (;;) {
        struct grpc_client_call *call = c->calls;
        while (call && call->done_called)
            call = call->next;
        if (!call)
            break;
        call_finish(call, status, message);
    }
    while (c->calls)
        call_free(c->calls);
    if (c->io.session) {
        nghttp2_session_del(c->io.session);
        c->io.session = NULL;
    }
    grpc_buf_clear(&c->io.out);
}

static void lost_timer_cb(struct ev_loop *loop, void *user_data)
{
    struct grpc_client *c = user_data;
    c->lost_timer = 0;
    client_enter(c);
    client_disconnect(c, GRPC_STATUS_UNAVAILABLE, "connection lost");
    client_leave(c);
}

/* Sends what is queued unless an I/O callback further up will. A write
 * failure ends the calls from a timer, not under the caller's feet. */
static void client_flush_soon(struct grpc_client *c)
{
    if (c->busy > 0 || !c->connected || c->lost_timer)
        return;
    if (grpc_h2io_flush(&c->io) < 0 &&
        ev_loop_add_timer(c->loop, 0, lost_timer_cb, c, &c->lost_timer) < 0)
        c->lost_timer = 0;
}

static void client_io_cb(struct ev_loop *loop, int fd, uint32_t events, void *user_data)
{
    struct grpc_client *c = user_data;
    int r = 0;
    client_enter(c);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))
        r = grpc_h2io_read(&c->io);
    if (c->connected) {
        if (r == 0)
            r = grpc_h2io_flush(&c->io);
        if (r < 0)
            client_disconnect(c, GRPC_STATUS_UNAVAILABLE, "connection closed");
        else if (!grpc_h2io_alive(&c->io))
            client_disconnect(c, GRPC_STATUS_UNAVAILABLE, "connection closed by server");
    }
    client_leave(c);
}

/* nghttp2 callbacks ------------------------------------------------------ */

static struct grpc_client_call *call_of(nghttp2_session *sess, int32_t id)
{
    return nghttp2_session_get_stream_user_data(sess, id);
}

static bool hdr_is(const uint8_t *name, size_t len, const char *lit)
{
    return len == strlen(lit) && memcmp(name, lit, len) == 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct grpc_client_call *call = call_of(sess, frame->hd.stream_id);
    if (!call)
        return 0;
    if (hdr_is(name, namelen, ":status")) {
        int v = 0;
        for (size_t i = 0; i < valuelen && i < 3 && value[i] >= '0' && value[i] <= '9'; i++)
            v = v * 10 + (value[i] - '0');
        call->http_status = v;
    } else if (hdr_is(name, namelen, "grpc-status")) {
        call->have_grpc_status = true;
        call->grpc_status = grpc_status_parse(value, valuelen);
    } else if (hdr_is(name, namelen, "grpc-message")) {
        free(call->grpc_message);
        call->grpc_message = grpc_percent_decode(value, valuelen);
    }
    return 0;
}

static int deliver_msg(const uint8_t *msg, size_t len, void *user_data)
{
    struct grpc_client_call *call = user_data;
    if (call->done_called)
        return -ECANCELED;
    if (call->streaming) {
        if (call->on_msg)
            call->on_msg(msg, len, call->user_data);
        return 0;
    }
    if (call->have_resp)
        return -E2BIG;
    call->resp = malloc(len ? len : 1);
    if (!call->resp)
        return -ENOMEM;
    memcpy(call->resp, msg, len);
    call->resp_len = len;
    call->have_resp = true;
    return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user_data)
{
    struct grpc_client_call *call = call_of(sess, id);
    if (!call || call->done_called)
        return 0;
    int r = grpc_msgparser_feed(&call->parser, data, len, deliver_msg, call);
    if (r == 0 || call->done_called)
        return 0;
    char msg[96];
    int status = GRPC_STATUS_INTERNAL;
    switch (r) {
    case -EMSGSIZE:
        status = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(msg, sizeof(msg), "response message larger than max (%zu bytes)",
                 call->client->lim.max_message_size);
        break;
    case -ENOTSUP:
        snprintf(msg, sizeof(msg), "compressed response (unsupported)");
        break;
    case -E2BIG:
        snprintf(msg, sizeof(msg), "more than one response message on a unary call");
        break;
    case -ENOMEM:
        status = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(msg, sizeof(msg), "out of memory");
        break;
    default:
        snprintf(msg, sizeof(msg), "bad response message prefix");
        break;
    }
    nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    call_finish(call, status, msg);
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t error_code, void *user_data)
{
    struct grpc_client_call *call = call_of(sess, id);
    if (!call)
        return 0;
    nghttp2_session_set_stream_user_data(sess, id, NULL);
    if (call->done_called) {
        call_free(call);
        return 0;
    }
    char msg[96];
    int status;
    const char *text = msg;
    if (call->have_grpc_status) {
        status = call->grpc_status;
        text = call->grpc_message ? call->grpc_message : "";
        if (status == GRPC_STATUS_OK && grpc_msgparser_partial(&call->parser)) {
            status = GRPC_STATUS_INTERNAL;
            text = "truncated response message";
        } else if (status == GRPC_STATUS_OK && !call->streaming && !call->have_resp) {
            status = GRPC_STATUS_INTERNAL;
            text = "no response message";
        }
    } else if (error_code == NGHTTP2_REFUSED_STREAM) {
        status = GRPC_STATUS_UNAVAILABLE;
        snprintf(msg, sizeof(msg), "stream refused by server");
    } else if (error_code == NGHTTP2_CANCEL) {
        status = GRPC_STATUS_CANCELLED;
        snprintf(msg, sizeof(msg), "stream cancelled by server");
    } else if (error_code != NGHTTP2_NO_ERROR) {
        status = GRPC_STATUS_INTERNAL;
        snprintf(msg, sizeof(msg), "stream reset by server (HTTP/2 error %u)", error_code);
    } else if (call->http_status != 200) {
        status = grpc_status_from_http(call->http_status);
        snprintf(msg, sizeof(msg), "HTTP status %d without grpc-status", call->http_status);
    } else {
        status = GRPC_STATUS_INTERNAL;
        snprintf(msg, sizeof(msg), "response without grpc-status");
    }
    call_finish(call, status, text);
    call_free(call);
    return 0;
}

static ssize_t req_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    struct grpc_client_call *call = source->ptr;
    size_t n = call->req.len < length ? call->req.len : length;
    memcpy(buf, grpc_buf_head(&call->req), n);
    grpc_buf_consume(&call->req, n);
    if (call->req.len == 0)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* ---------------------------------------------------------------- client */

/* A client on fd (a connected socket, or -1 for a memory connection whose
 * output goes to sink). Takes fd; closes it on failure. */
static int client_new_fd(struct ev_loop *loop, int fd, const struct grpc_limits *limits,
                         void (*sink)(const uint8_t *data, size_t len, void *user_data),
                         void *sink_data, struct grpc_client **ret)
{
    struct grpc_client *c = calloc(1, sizeof(*c));
    if (!c) {
        if (fd >= 0)
            close(fd);
        return -ENOMEM;
    }
    c->loop = loop;
    c->io = (struct grpc_h2io){.loop = loop, .fd = -1, .sink = sink, .sink_data = sink_data};
    grpc_limits_resolve(limits, &c->lim);
    int r = -ENOMEM;
    if (nghttp2_session_callbacks_new(&c->cbs) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_header_callback(c->cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c->cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c->cbs, on_stream_close);
    nghttp2_option *opt;
    if (nghttp2_option_new(&opt) != 0)
        goto fail;
    nghttp2_option_set_no_http_messaging(opt, 1);
    r = nghttp2_session_client_new2(&c->io.session, c->cbs, c, opt);
    nghttp2_option_del(opt);
    if (r != 0) {
        r = -ENOMEM;
        goto fail;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
    };
    if (nghttp2_submit_settings(c->io.session, NGHTTP2_FLAG_NONE, iv, ARRAY_SIZE(iv)) != 0 ||
        nghttp2_session_set_local_window_size(c->io.session, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) !=
            0) {
        r = -ENOMEM;
        goto fail;
    }
    if (fd >= 0) {
        r = ev_loop_add_io(loop, fd, EPOLLIN | EPOLLRDHUP, client_io_cb, c);
        if (r < 0)
            goto fail;
    }
    c->io.fd = fd;
    c->connected = true;
    client_flush_soon(c);
    *ret = c;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    if (c->io.session)
        nghttp2_session_del(c->io.session);
    nghttp2_session_callbacks_del(c->cbs);
    free(c);
    return r;
}

int grpc_client_new(struct ev_loop *loop, const char *socket_path, const struct grpc_limits *limits,
                    struct grpc_client **ret)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, socket_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int r = -errno;
        close(fd);
        return r;
    }
    return client_new_fd(loop, fd, limits, NULL, NULL, ret);
}

int grpc_client_mem_new(struct ev_loop *loop, const struct grpc_limits *limits,
                        void (*sink)(const uint8_t *data, size_t len, void *user_data),
                        void *sink_data, struct grpc_client **ret)
{
    return client_new_fd(loop, -1, limits, sink, sink_data, ret);
}

int grpc_client_mem_feed(struct grpc_client *client, const uint8_t *data, size_t len)
{
    if (!client->connected)
        return -ENOTCONN;
    client_enter(client);
    int r = grpc_h2io_feed(&client->io, data, len);
    if (client->connected) {
        if (r == 0)
            r = grpc_h2io_flush(&client->io);
        if (r < 0)
            client_disconnect(client, GRPC_STATUS_UNAVAILABLE, "connection closed");
    }
    client_leave(client);
    return r;
}

static void client_destroy(struct grpc_client *c)
{
    /* A done callback that frees the client again only sets free_pending. */
    c->busy++;
    client_disconnect(c, GRPC_STATUS_CANCELLED, "client closed");
    nghttp2_session_callbacks_del(c->cbs);
    free(c);
}

struct grpc_client *grpc_client_free(struct grpc_client *client)
{
    if (!client)
        return NULL;
    if (client->busy > 0) {
        client->free_pending = true;
        return NULL;
    }
    client_destroy(client);
    return NULL;
}

bool grpc_client_is_connected(const struct grpc_client *client)
{
    return client->connected && !client->free_pending && !client->lost_timer;
}

static void deadline_cb(struct ev_loop *loop, void *user_data)
{
    struct grpc_client_call *call = user_data;
    struct grpc_client *c = call->client;
    call->timer = 0;
    client_enter(c);
    if (c->connected)
        nghttp2_submit_rst_stream(c->io.session, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_CANCEL);
    call_finish(call, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded");
    if (!client_leave(c))
        client_flush_soon(c);
}

/* grpc-timeout: at most 8 digits and a unit. */
static void format_timeout(char *buf, size_t len, uint64_t ns)
{
    uint64_t ms = (ns + 999999) / 1000000;
    if (ms < 100000000)
        snprintf(buf, len, "%llum", (unsigned long long)ms);
    else if (ms / 1000 < 100000000)
        snprintf(buf, len, "%lluS", (unsigned long long)(ms / 1000));
    else
        snprintf(buf, len, "%lluH", (unsigned long long)(ms / 3600000));
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

static int start_call(struct grpc_client *c, const char *method, const ProtobufCMessage *msg,
                      const uint8_t *req, size_t len, uint64_t timeout_ns, bool streaming,
                      grpc_client_msg_fn on_msg, grpc_client_done_fn done, void *user_data,
                      struct grpc_client_call **ret_call)
{
    if (!method || method[0] != '/' || !done)
        return -EINVAL;
    if (!grpc_client_is_connected(c))
        return -ENOTCONN;
    if (msg)
        len = protobuf_c_message_get_packed_size(msg);
    if (len > c->lim.max_message_size)
        return -EMSGSIZE;
    struct grpc_client_call *call = calloc(1, sizeof(*call));
    if (!call)
        return -ENOMEM;
    call->client = c;
    call->streaming = streaming;
    call->on_msg = on_msg;
    call->done = done;
    call->user_data = user_data;
    grpc_msgparser_init(&call->parser, c->lim.max_message_size);
    uint8_t *p;
    int r = grpc_buf_reserve(&call->req, 5 + len, &p);
    if (r < 0) {
        free(call);
        return r;
    }
    grpc_msg_prefix(p, (uint32_t)len);
    if (msg)
        protobuf_c_message_pack(msg, p + 5);
    else if (len > 0)
        memcpy(p + 5, req, len);

    char tmo[24] = "";
    nghttp2_nv nva[8] = {
        NV(":method", "POST"),
        NV(":scheme", "http"),
        NV(":path", method),
        NV(":authority", "localhost"),
        NV("content-type", "application/grpc"),
        NV("te", "trailers"),
        NV("user-agent", "accel-grpc/" ACCEL_VERSION),
    };
    size_t n = 7;
    if (timeout_ns) {
        format_timeout(tmo, sizeof(tmo), timeout_ns);
        nva[n++] = (nghttp2_nv)NV("grpc-timeout", tmo);
    }
    nghttp2_data_provider prd = {.source.ptr = call, .read_callback = req_read_cb};
    int32_t id = nghttp2_submit_request(c->io.session, NULL, nva, n, &prd, call);
    if (id < 0) {
        grpc_buf_clear(&call->req);
        grpc_msgparser_done(&call->parser);
        free(call);
        return id == NGHTTP2_ERR_NOMEM ? -ENOMEM : -ENOTCONN;
    }
    call->id = id;
    call->next = c->calls;
    if (c->calls)
        c->calls->prev = call;
    c->calls = call;
    if (timeout_ns && ev_loop_add_timer(c->loop, timeout_ns, deadline_cb, call, &call->timer) < 0) {
        /* Without a timer the deadline cannot be kept: fail the call now. */
        nghttp2_submit_rst_stream(c->io.session, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
        call->done_called = true;
        client_flush_soon(c);
        return -ENOMEM;
    }
    if (ret_call)
        *ret_call = call;
    client_flush_soon(c);
    return 0;
}

int grpc_client_unary(struct grpc_client *client, const char *method, const uint8_t *req,
                      size_t len, uint64_t timeout_ns, grpc_client_done_fn done, void *user_data,
                      struct grpc_client_call **ret_call)
{
    return start_call(client, method, NULL, req, len, timeout_ns, false, NULL, done, user_data,
                      ret_call);
}

int grpc_client_unary_msg(struct grpc_client *client, const char *method,
                          const ProtobufCMessage *req, uint64_t timeout_ns,
                          grpc_client_done_fn done, void *user_data,
                          struct grpc_client_call **ret_call)
{
    return start_call(client, method, req, NULL, 0, timeout_ns, false, NULL, done, user_data,
                      ret_call);
}

int grpc_client_stream(struct grpc_client *client, const char *method, const uint8_t *req,
                       size_t len, uint64_t timeout_ns, grpc_client_msg_fn on_msg,
                       grpc_client_done_fn done, void *user_data,
                       struct grpc_client_call **ret_call)
{
    return start_call(client, method, NULL, req, len, timeout_ns, true, on_msg, done, user_data,
                      ret_call);
}

int grpc_client_call_cancel(struct grpc_client_call *call)
{
    if (call->done_called)
        return -EALREADY;
    struct grpc_client *c = call->client;
    client_enter(c);
    if (c->connected)
        nghttp2_submit_rst_stream(c->io.session, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_CANCEL);
    call_finish(call, GRPC_STATUS_CANCELLED, "cancelled");
    if (!client_leave(c))
        client_flush_soon(c);
    return 0;
}

/* -------------------------------------------------------------- blocking */

struct blocking {
    bool done;
    int status;
    char *message;
    uint8_t *resp;
    size_t resp_len;
    grpc_blocking_msg_fn on_msg;
    void *user_data;
    struct grpc_client_call *call;
    bool stop;
};

static void blocking_done(int status, const char *message, const uint8_t *resp, size_t len,
                          void *user_data)
{
    struct blocking *b = user_data;
    b->done = true;
    b->status = status;
    b->message = strdup(message);
    if (resp) {
        b->resp = malloc(len ? len : 1);
        if (b->resp) {
            memcpy(b->resp, resp, len);
            b->resp_len = len;
        }
    }
}

static void blocking_msg(const uint8_t *msg, size_t len, void *user_data)
{
    struct blocking *b = user_data;
    if (!b->stop && !b->on_msg(msg, len, b->user_data)) {
        b->stop = true;
        grpc_client_call_cancel(b->call);
    }
}

static int blocking_run(const char *socket_path, const char *method, const uint8_t *req, size_t len,
                        uint64_t timeout_ns, struct blocking *b)
{
    struct ev_loop *loop = NULL;
    struct grpc_client *c = NULL;
    int r = ev_loop_new(&loop);
    if (r < 0)
        return r;
    r = grpc_client_new(loop, socket_path, NULL, &c);
    if (r == 0) {
        if (b->on_msg)
            r = grpc_client_stream(c, method, req, len, timeout_ns, blocking_msg, blocking_done, b,
                                   &b->call);
        else
            r = grpc_client_unary(c, method, req, len, timeout_ns, blocking_done, b, NULL);
    }
    while (r == 0 && !b->done) {
        int n = ev_loop_run_once(loop, -1);
        if (n < 0)
            r = n;
    }
    grpc_client_free(c);
    ev_loop_free(loop);
    if (r == 0 && !b->message)
        r = -ENOMEM;
    if (r < 0) {
        free(b->message);
        free(b->resp);
    }
    return r;
}

int grpc_blocking_unary(const char *socket_path, const char *method, const uint8_t *req, size_t len,
                        uint64_t timeout_ns, int *ret_status, char **ret_message,
                        uint8_t **ret_resp, size_t *ret_len)
{
    struct blocking b = {0};
    int r = blocking_run(socket_path, method, req, len, timeout_ns, &b);
    if (r < 0)
        return r;
    if (ret_status)
        *ret_status = b.status;
    if (ret_message)
        *ret_message = b.message;
    else
        free(b.message);
    if (ret_resp) {
        *ret_resp = b.resp;
        if (ret_len)
            *ret_len = b.resp_len;
    } else {
        free(b.resp);
    }
    return 0;
}

int grpc_blocking_stream(const char *socket_path, const char *method, const uint8_t *req,
                         size_t len, uint64_t timeout_ns, grpc_blocking_msg_fn on_msg,
                         void *user_data, int *ret_status, char **ret_message)
{
    if (!on_msg)
        return -EINVAL;
    struct blocking b = {.on_msg = on_msg, .user_data = user_data};
    int r = blocking_run(socket_path, method, req, len, timeout_ns, &b);
    if (r < 0)
        return r;
    free(b.resp);
    if (ret_status)
        *ret_status = b.status;
    if (ret_message)
        *ret_message = b.message;
    else
        free(b.message);
    return 0;
}
