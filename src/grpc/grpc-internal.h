/* grpc-internal.h — what the server, client and tests share inside src/grpc:
 * the byte buffer, the 5-byte message framing parser, percent-encoding of
 * grpc-message, the HTTP/2 socket pump, and hooks for the fuzz target and
 * unit tests. Not installed, not for other components. */
#pragma once

#include "grpc.h"

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ byte buffer */

/* A growable FIFO of bytes: append at the end, consume from the front. */
struct grpc_buf {
    uint8_t *data;
    size_t off, len, cap; /* live bytes are data[off .. off+len) */
};

int grpc_buf_append(struct grpc_buf *b, const void *data, size_t len);
/* Appends len uninitialized bytes; *ret points at them (valid until the next
 * change to b). 0 or -ENOMEM (b unchanged). */
int grpc_buf_reserve(struct grpc_buf *b, size_t len, uint8_t **ret);
void grpc_buf_consume(struct grpc_buf *b, size_t n);
void grpc_buf_clear(struct grpc_buf *b);
static inline const uint8_t *grpc_buf_head(const struct grpc_buf *b)
{
    return b->data + b->off;
}

/* ---------------------------------------------------- message framing */

/* Reassembles length-prefixed gRPC messages (1 byte compressed flag, 4 bytes
 * big-endian length, payload) from arbitrary DATA chunks. */
struct grpc_msgparser {
    size_t max; /* largest payload accepted */
    uint8_t hdr[5];
    size_t hdr_len; /* bytes of hdr[] filled */
    uint32_t need;  /* payload length of the message being read */
    struct grpc_buf body;
    unsigned count; /* complete messages so far */
    int error;      /* sticky: first error returned */
};

/* Called per complete message; msg is borrowed. Returning non-zero stops the
 * parser (that value is returned by feed and kept as its sticky error). */
typedef int (*grpc_msg_fn)(const uint8_t *msg, size_t len, void *user_data);

void grpc_msgparser_init(struct grpc_msgparser *p, size_t max);
void grpc_msgparser_done(struct grpc_msgparser *p);
/* Returns 0, -EMSGSIZE (a prefix announced more than max), -ENOTSUP (the
 * compressed flag is set), -EPROTO (a flag byte other than 0/1), or the
 * callback's value. After an error every feed returns it again. */
int grpc_msgparser_feed(struct grpc_msgparser *p, const uint8_t *data, size_t len, grpc_msg_fn cb,
                        void *user_data);
/* True when input stopped in the middle of a message (truncated). */
bool grpc_msgparser_partial(const struct grpc_msgparser *p);
/* Writes the 5-byte prefix for an uncompressed message of len bytes. */
void grpc_msg_prefix(uint8_t out[5], uint32_t len);

/* ------------------------------------------------ grpc-message encoding */

/* Percent-encodes s as gRPC wants for grpc-message ('%' and bytes outside
 * 0x20..0x7e). Returns a malloc'd string or NULL on ENOMEM. */
char *grpc_percent_encode(const char *s);
/* Decodes %XX sequences; malformed ones are kept literally. malloc'd or NULL. */
char *grpc_percent_decode(const uint8_t *s, size_t len);
/* Parses a grpc-status header value; values outside 0..16 or junk → UNKNOWN. */
int grpc_status_parse(const uint8_t *s, size_t len);
/* Maps an HTTP :status of a response without grpc-status to a gRPC status
 * (the mapping gRPC documents for HTTP errors). */
int grpc_status_from_http(int http_status);

/* Fills lim from limits (NULL or zero fields → defaults). */
void grpc_limits_resolve(const struct grpc_limits *limits, struct grpc_limits *lim);

/* -------------------------------------------------- HTTP/2 socket pump */

/* Moves bytes between a non-blocking socket and an nghttp2 session. Output
 * nghttp2 produces that the socket cannot take now waits in out; EPOLLOUT is
 * asked for only while it is non-empty. fd < 0: a memory connection whose
 * output goes to sink (tests, fuzzing). */
struct grpc_h2io {
    struct ev_loop *loop;
    int fd;
    nghttp2_session *session;
    struct grpc_buf out;
    bool want_out; /* EPOLLOUT currently requested */
    void (*sink)(const uint8_t *data, size_t len, void *user_data);
    void *sink_data;
};

/* Reads what the socket has (bounded per call for fairness) into the session.
 * Returns 0, -ECONNRESET on EOF/error, or -EPROTO when nghttp2 failed fatally
 * (it may have queued a GOAWAY: flush, then close). */
int grpc_h2io_read(struct grpc_h2io *io);
/* Feeds bytes (memory connections). Returns as grpc_h2io_read(). */
int grpc_h2io_feed(struct grpc_h2io *io, const uint8_t *data, size_t len);
/* Sends what nghttp2 has queued, as far as the socket takes it. Returns 0 or
 * -ECONNRESET / -errno on a write error. */
int grpc_h2io_flush(struct grpc_h2io *io);
/* True while the session has more to do (read or write). */
bool grpc_h2io_alive(const struct grpc_h2io *io);

/* ------------------------------------------------------- test/fuzz hooks */

/* A server connection with no socket: bytes go in with feed; what the server
 * answers goes to sink (may be NULL to drop it). Handlers run during feed.
 * Freed with the server or with grpc_server_mem_conn_close(). */
struct grpc_server_conn;
int grpc_server_mem_conn_new(struct grpc_server *server,
                             void (*sink)(const uint8_t *data, size_t len, void *user_data),
                             void *sink_data, struct grpc_server_conn **ret);
/* Returns 0 or -errno (the connection is then dead; close it). */
int grpc_server_mem_conn_feed(struct grpc_server_conn *conn, const uint8_t *data, size_t len);
void grpc_server_mem_conn_close(struct grpc_server_conn *conn);

/* A client with no socket: what it sends goes to sink; the server's bytes go
 * in with grpc_client_mem_feed (callbacks run during the feed). Free with
 * grpc_client_free(). */
int grpc_client_mem_new(struct ev_loop *loop, const struct grpc_limits *limits,
                        void (*sink)(const uint8_t *data, size_t len, void *user_data),
                        void *sink_data, struct grpc_client **ret);
/* Returns 0 or -errno (the calls then ended UNAVAILABLE). */
int grpc_client_mem_feed(struct grpc_client *client, const uint8_t *data, size_t len);
