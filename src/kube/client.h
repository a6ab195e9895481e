/* client.h — HTTPS requests to the Kubernetes API server from the agent's event loop:
 * libcurl's multi-socket interface driven by struct ev_loop (never a blocking transfer), the
 * bearer token or client certificate of a struct kube_config, and the server's Status answers
 * turned into messages that say what to do.
 *
 * Threads: everything on the loop's thread. Callbacks run from the loop; a callback may start
 * or cancel requests (its own request is finished and freed after it returns). */
#pragma once

#include <stddef.h>

/* Connections to the API server at most (see kube_client_new). A watch stream holds one for
 * its life over HTTP/1.1, so a client runs at most one stream; the other connection carries
 * the requests one after another. */
#define KUBE_MAX_HOST_CONNECTIONS 2

struct ev_loop;
struct kube_config;
struct kube_client;
struct kube_request;

struct kube_response {
    long status;      /* HTTP status; 0 when no response came (connect/TLS/transfer error) */
    const char *body; /* NUL-terminated (borrowed; "" for a stream) */
    size_t body_len;
    const char *error; /* NULL on a 2xx; else one line for the log, saying what to do */
};

typedef void (*kube_response_cb)(struct kube_client *c, const struct kube_response *resp,
                                 void *user_data);
/* A stream's line (no '\n', not NUL-terminated). Return non-zero to abort the stream. */
typedef int (*kube_line_cb)(struct kube_client *c, const char *line, size_t len, void *user_data);

/* The client takes ownership of nothing: cfg is copied as needed and may be freed after.
 * Returns 0, -ENOMEM, -EIO (libcurl could not start). */
int kube_client_new(struct ev_loop *loop, const struct kube_config *cfg, struct kube_client **ret);
/* Cancels every request without calling back. NULL ok; returns NULL. Not from a callback. */
struct kube_client *kube_client_free(struct kube_client *c);

/* Starts method (GET, POST, PATCH, ...) on path ("/api/v1/..."), body with content_type
 * (both NULL for none). done is called once, from the loop, unless the request is cancelled.
 * *ret_req (optional) is borrowed and valid until done runs. Returns 0 or -ENOMEM/-EINVAL. */
int kube_client_request(struct kube_client *c, const char *method, const char *path,
                        const char *content_type, const char *body, kube_response_cb done,
                        void *user_data, struct kube_request **ret_req);
/* A GET whose 2xx body is a stream of lines (a watch): each complete line goes to on_line as
 * it arrives; done is called when the stream ends, breaks or fails (a non-2xx answer's body is
 * collected and described as for a request). */
int kube_client_stream(struct kube_client *c, const char *path, kube_line_cb on_line,
                       kube_response_cb done, void *user_data, struct kube_request **ret_req);
/* Stops a request without calling done. Not from that request's own callbacks. */
void kube_request_cancel(struct kube_client *c, struct kube_request *req);

/* The number of requests in flight (tests, accelctl). */
size_t kube_client_pending(const struct kube_client *c);
