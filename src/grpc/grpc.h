/* grpc.h — gRPC over HTTP/2 (prior knowledge) on unix sockets, server and
 * client, on nghttp2 + protobuf-c and the agent's event loop (evloop.h).
 *
 * What it speaks: unary and server-streaming calls; 5-byte length-prefixed
 * messages (compression unsupported: a compressed message gets
 * UNIMPLEMENTED); content-type application/grpc; grpc-status and a
 * percent-encoded grpc-message in the trailers; grpc-timeout is ignored by
 * the server (the kubelet sets no deadline on the calls that matter). PING
 * and flow control are nghttp2's. See docs/grpc.md.
 *
 * Threads: everything runs on the event loop's thread; no function here may
 * be called from another thread. Nothing blocks except grpc_blocking_*(),
 * which run a private loop.
 *
 * Errors: functions return 0 or -errno. gRPC outcomes are status codes
 * (enum grpc_status), delivered through callbacks. */
#pragma once

#include "evloop.h"

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* gRPC's status codes, same values as the wire. */
enum grpc_status {
    GRPC_STATUS_OK = 0,
    GRPC_STATUS_CANCELLED = 1,
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_INVALID_ARGUMENT = 3,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_ALREADY_EXISTS = 6,
    GRPC_STATUS_PERMISSION_DENIED = 7,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_FAILED_PRECONDITION = 9,
    GRPC_STATUS_ABORTED = 10,
    GRPC_STATUS_OUT_OF_RANGE = 11,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
    GRPC_STATUS_DATA_LOSS = 15,
    GRPC_STATUS_UNAUTHENTICATED = 16,
};

/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_STATUS" for values outside 0..16. Static string. */
const char *grpc_status_name(int status);

/* The kubelet's receive limit. */
#define GRPC_DEFAULT_MAX_MESSAGE (4u * 1024 * 1024)
#define GRPC_DEFAULT_MAX_STREAMS 1024u
#define GRPC_DEFAULT_MAX_CONNECTIONS 64u
/* grpc-go's server waits 120 s for a new connection's handshake
 * (ServerOptions.ConnectionTimeout); an idle connection costs us a slot, so
 * ours go sooner. */
#define GRPC_DEFAULT_HANDSHAKE_TIMEOUT_NS (10ull * 1000000000ull)
#define GRPC_DEFAULT_IDLE_TIMEOUT_NS (120ull * 1000000000ull)

/* Resource caps. A zero field means its default. Pass NULL for all defaults. */
struct grpc_limits {
    /* Largest message accepted or sent (payload, without the 5-byte prefix).
     * Over it: RESOURCE_EXHAUSTED, for requests received and for our own replies. */
    size_t max_message_size;
    /* Concurrent streams per connection (advertised in SETTINGS; the server
     * refuses streams beyond it). */
    uint32_t max_concurrent_streams;
    /* Server only. When a new connection would go beyond it, the connection
     * that has been idle (no open stream) the longest is closed to make room
     * (GOAWAY, then close); when none is idle, the new one is closed at once.
     * So idle sockets cannot lock a client out; busy ones (streams open, e.g.
     * ListAndWatch) are never evicted. */
    uint32_t max_connections;
    /* Server only: a connection whose peer has not sent its SETTINGS (the
     * end of the HTTP/2 preface) this long after it connected is closed. */
    uint64_t handshake_timeout_ns;
    /* Server only: a connection with no open stream for this long is closed
     * (with a GOAWAY; a gRPC client reconnects when it needs to). */
    uint64_t idle_timeout_ns;
};

/* ------------------------------------------------------------------ server */

struct grpc_server;
/* One incoming call. Owned by the server until the handler gets it; from then
 * on the handler owns it until it calls grpc_call_finish() (directly or via
 * grpc_call_reply*()), which frees it. A call stays valid after the peer has
 * gone away (sends then fail with -ECONNRESET, finish only frees it), so an
 * async handler always finishes the call it kept. */
struct grpc_call;

enum grpc_method_kind {
    GRPC_METHOD_UNARY,
    GRPC_METHOD_SERVER_STREAMING,
};

struct grpc_request {
    /* The request message bytes (without prefix). Borrowed: valid only while
     * the handler runs. */
    const uint8_t *data;
    size_t len;
    /* The decoded request when the method was registered with a descriptor,
     * else NULL. Borrowed: freed by the server after the handler returns (it
     * lives in a per-server arena: keep nothing that points into it). */
    const ProtobufCMessage *msg;
};

/* Called once per call, after the whole request message has arrived. */
typedef void (*grpc_handler_fn)(struct grpc_call *call, const struct grpc_request *req,
                                void *user_data);
/* Called at most once, when the peer resets the stream or the connection
 * closes before the call was finished. The call is still valid (and still
 * the handler's to finish); typically the handler calls grpc_call_finish()
 * here. */
typedef void (*grpc_call_cancel_fn)(struct grpc_call *call, void *user_data);

/* Creates a server on loop (borrowed; must outlive the server). limits may be
 * NULL. Returns 0 or -errno. */
int grpc_server_new(struct ev_loop *loop, const struct grpc_limits *limits,
                    struct grpc_server **ret);
/* Closes listeners (unlinking the socket paths it bound), connections, and
 * detaches unfinished calls (their cancel callbacks run first; the handler
 * must still grpc_call_finish() them, which then only frees). NULL ok;
 * returns NULL. Not from inside one of this server's callbacks. */
struct grpc_server *grpc_server_free(struct grpc_server *server);

/* Registers a method by full path, e.g. "/v1beta1.DevicePlugin/Allocate".
 * request_desc (may be NULL): when set, the server unpacks every request with
 * protobuf-c and answers INVALID_ARGUMENT itself when it does not decode; the
 * handler then sees req->msg. -EEXIST if path is taken, -EINVAL on a path
 * not starting with '/', -EBUSY once a connection exists (register all
 * methods before serving). Unknown paths are answered UNIMPLEMENTED. */
int grpc_server_add_method(struct grpc_server *server, const char *path, enum grpc_method_kind kind,
                           const ProtobufCMessageDescriptor *request_desc, grpc_handler_fn fn,
                           void *user_data);

/* Binds a unix socket at path, mode 0600 whatever the umask (only its owner
 * may connect), and serves on it. An existing socket file
 * there is replaced when nothing listens on it (left by a crash); when some
 * process still accepts connections on it, nothing changes and the result is
 * -EADDRINUSE. Several listeners per server are fine. Returns 0 or -errno
 * (-EEXIST: a file that is not a socket; -ENAMETOOLONG: a path over
 * sun_path). */
int grpc_server_listen_unix(struct grpc_server *server, const char *path);
/* Serves on an already listening socket; the server takes ownership of fd. */
int grpc_server_listen_fd(struct grpc_server *server, int fd);
/* Closes every listener (unlinking the paths it bound when unlink_paths);
 * established connections keep being served. For re-serving after the
 * kubelet wiped the directory: close, then listen again. */
void grpc_server_close_listeners(struct grpc_server *server, bool unlink_paths);
/* Serves one already connected stream socket (e.g. one end of a
 * socketpair); takes ownership of fd. -EMFILE beyond max_connections. */
int grpc_server_add_connection(struct grpc_server *server, int fd);
/* Open connections, for tests and diagnostics. */
unsigned grpc_server_connection_count(const struct grpc_server *server);
/* Changes the two timeouts (0: the default) for connections idle from now on
 * (SIGHUP reload); connections already waiting keep their deadline until they
 * next become idle. */
void grpc_server_set_timeouts(struct grpc_server *server, uint64_t handshake_timeout_ns,
                              uint64_t idle_timeout_ns);

/* The method path of the call ("/pkg.Service/Method"). Borrowed, valid while
 * the server lives. After grpc_server_free() the only valid use of a call is
 * grpc_call_finish() (or the reply/send functions, which then fail). */
const char *grpc_call_method(const struct grpc_call *call);
/* True once the peer reset the stream or the connection closed. */
bool grpc_call_is_cancelled(const struct grpc_call *call);
/* Sets (or with fn NULL clears) the cancel callback. If the call is already
 * cancelled, fn is not called: check grpc_call_is_cancelled(). */
void grpc_call_set_cancel_cb(struct grpc_call *call, grpc_call_cancel_fn fn, void *user_data);

/* Queues one response message (streaming: any number; unary: at most one,
 * -EINVAL for a second). Returns 0; -EMSGSIZE if over max_message_size (the
 * call is untouched: finish it, e.g. with RESOURCE_EXHAUSTED); -ECONNRESET if
 * the call is cancelled; -EALREADY if finished; -ENOBUFS when more than
 * 64 MiB is queued and unsent on this call (a peer that stopped reading). */
int grpc_call_send(struct grpc_call *call, const uint8_t *data, size_t len);
/* Packs msg with protobuf-c and sends it; same returns as grpc_call_send(). */
int grpc_call_send_msg(struct grpc_call *call, const ProtobufCMessage *msg);
/* Ends the call with status and message (may be NULL; percent-encoded on the
 * wire) after the queued messages, and frees the call: do not use it after.
 * Returns 0, or -ECONNRESET when the peer had gone (the call is still freed). */
int grpc_call_finish(struct grpc_call *call, int status, const char *message);
/* Unary shorthands: send msg (or bytes) then finish OK. If the reply is over
 * max_message_size, finishes RESOURCE_EXHAUSTED instead. The call is freed
 * in every case. Returns as grpc_call_finish(), or -EMSGSIZE. */
int grpc_call_reply_msg(struct grpc_call *call, const ProtobufCMessage *msg);
int grpc_call_reply(struct grpc_call *call, const uint8_t *data, size_t len);
/* Formats message like printf and finishes with status. */
int grpc_call_finishf(struct grpc_call *call, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------ client */

struct grpc_client;
/* One outgoing call; owned by the client. The handle is valid until the
 * done callback has returned. */
struct grpc_client_call;

/* Call outcome. message: the server's grpc-message decoded, or ours ("" if
 * none); resp/len: the unary response message (NULL/0 for streaming calls or
 * on error). All borrowed, valid during the callback. Runs exactly once per
 * started call (also from grpc_client_free, with CANCELLED). */
typedef void (*grpc_client_done_fn)(int status, const char *message, const uint8_t *resp,
                                    size_t len, void *user_data);
/* One message of a server-streaming call. Borrowed, valid during the callback. */
typedef void (*grpc_client_msg_fn)(const uint8_t *msg, size_t len, void *user_data);

/* Connects to the unix socket at path (the connect itself does not block on a
 * unix socket). Returns 0 or -errno: -ENOENT / -ECONNREFUSED when nobody
 * listens (retry later), -ENAMETOOLONG. limits may be NULL. */
int grpc_client_new(struct ev_loop *loop, const char *socket_path, const struct grpc_limits *limits,
                    struct grpc_client **ret);
/* Cancels pending calls (their done callbacks run with CANCELLED), closes the
 * connection. NULL ok; returns NULL. May be called from inside this client's
 * own callbacks: the client is then freed when that callback returns. */
struct grpc_client *grpc_client_free(struct grpc_client *client);
/* False once the connection failed or the server closed it (GOAWAY); pending
 * calls then completed with UNAVAILABLE and new ones return -ENOTCONN. */
bool grpc_client_is_connected(const struct grpc_client *client);

/* Starts a unary call. timeout_ns 0: no deadline; else DEADLINE_EXCEEDED (and
 * the stream is reset) when it passes. Also sends grpc-timeout. ret_call is
 * optional. Returns 0 (done will run) or -errno (done will not run):
 * -ENOTCONN, -EMSGSIZE, -EINVAL. */
int grpc_client_unary(struct grpc_client *client, const char *method, const uint8_t *req,
                      size_t len, uint64_t timeout_ns, grpc_client_done_fn done, void *user_data,
                      struct grpc_client_call **ret_call);
/* Same, packing req with protobuf-c. */
int grpc_client_unary_msg(struct grpc_client *client, const char *method,
                          const ProtobufCMessage *req, uint64_t timeout_ns,
                          grpc_client_done_fn done, void *user_data,
                          struct grpc_client_call **ret_call);
/* Starts a server-streaming call: on_msg per message, then done. */
int grpc_client_stream(struct grpc_client *client, const char *method, const uint8_t *req,
                       size_t len, uint64_t timeout_ns, grpc_client_msg_fn on_msg,
                       grpc_client_done_fn done, void *user_data,
                       struct grpc_client_call **ret_call);
/* Resets the stream; done runs (now) with CANCELLED. -EALREADY if done already ran. */
int grpc_client_call_cancel(struct grpc_client_call *call);

/* ---------------------------------------------------------- blocking (CLI) */

/* Connects, runs one unary call on a private loop and returns when it ends or
 * timeout_ns passes (then DEADLINE_EXCEEDED; 0 = no limit). Returns 0 when
 * the call ran to a status (*ret_status, maybe not OK), or -errno when it
 * could not start (connect failed). On 0: *ret_message (owned, free; never
 * NULL), *ret_resp / *ret_len (owned, free; NULL/0 unless OK). Out params may
 * be NULL when not wanted. */
int grpc_blocking_unary(const char *socket_path, const char *method, const uint8_t *req, size_t len,
                        uint64_t timeout_ns, int *ret_status, char **ret_message,
                        uint8_t **ret_resp, size_t *ret_len);
/* Server-streaming: on_msg per message; returning false cancels the call
 * (status then CANCELLED). Same returns as grpc_blocking_unary(). */
typedef bool (*grpc_blocking_msg_fn)(const uint8_t *msg, size_t len, void *user_data);
int grpc_blocking_stream(const char *socket_path, const char *method, const uint8_t *req,
                         size_t len, uint64_t timeout_ns, grpc_blocking_msg_fn on_msg,
                         void *user_data, int *ret_status, char **ret_message);
