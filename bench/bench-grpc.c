/* bench-grpc — the gRPC layer's own costs, our client against our server over
 * a unix socket, the server on its own thread (as it would be in acceld):
 *   - unary round trip of a small message, one call at a time: p50/p99/max
 *   - unary calls per second with 64 in flight on one connection
 *   - server-streaming messages per second (100-byte messages)
 *   - one 4 MiB unary echo
 * Usage: bench-grpc [N]   (N sequential calls, default 20000). Not a test:
 * the numbers go to docs/grpc.md with the machine they came from. */
#include "grpc.h"
#include "util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct ev_loop *srv_loop;

static void h_echo(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    grpc_call_reply(call, req->data, req->len);
}

static void h_stream(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    static uint8_t msg[100];
    long n = atol((const char *)req->data);
    for (long i = 0; i < n; i++)
        grpc_call_send(call, msg, sizeof(msg));
    grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void quit_cb(struct ev_loop *loop, void *ud)
{
    ev_loop_quit(loop);
}

static void h_quit(struct grpc_call *call, const struct grpc_request *req, void *ud)
{
    grpc_call_reply(call, NULL, 0);
    ev_loop_add_timer(srv_loop, 0, quit_cb, NULL, NULL);
}

static void *serve(void *arg)
{
    ev_loop_run(srv_loop);
    return NULL;
}

struct waiter {
    int done;
    int failed;
    long msgs;
};

static void done_cb(int status, const char *message, const uint8_t *resp, size_t len, void *ud)
{
    struct waiter *w = ud;
    w->done++;
    w->failed += status != GRPC_STATUS_OK;
}

static void msg_cb(const uint8_t *msg, size_t len, void *ud)
{
    ((struct waiter *)ud)->msgs++;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    char path[] = "/tmp/bench-grpc-XXXXXX";
    if (!mkdtemp(path))
        return 1;
    char sock[64];
    snprintf(sock, sizeof(sock), "%s/s.sock", path);

    struct grpc_server *server;
    if (ev_loop_new(&srv_loop) < 0 || grpc_server_new(srv_loop, NULL, &server) < 0 ||
        grpc_server_add_method(server, "/b/Echo", GRPC_METHOD_UNARY, NULL, h_echo, NULL) < 0 ||
        grpc_server_add_method(server, "/b/Stream", GRPC_METHOD_SERVER_STREAMING, NULL, h_stream,
                               NULL) < 0 ||
        grpc_server_add_method(server, "/b/Quit", GRPC_METHOD_UNARY, NULL, h_quit, NULL) < 0 ||
        grpc_server_listen_unix(server, sock) < 0)
        return 1;
    pthread_t th;
    pthread_create(&th, NULL, serve, NULL);

    struct ev_loop *loop;
    struct grpc_client *c;
    if (ev_loop_new(&loop) < 0 || grpc_client_new(loop, sock, NULL, &c) < 0)
        return 1;
    static const uint8_t small[64];

    /* Sequential round trips. */
    uint64_t *lat = calloc((size_t)n, sizeof(*lat));
    struct waiter w = {0};
    for (int i = 0; i < n; i++) {
        uint64_t t0 = mono_ns();
        int want = w.done + 1;
        grpc_client_unary(c, "/b/Echo", small, sizeof(small), 0, done_cb, &w, NULL);
        while (w.done < want)
            ev_loop_run_once(loop, -1);
        lat[i] = mono_ns() - t0;
    }
    qsort(lat, (size_t)n, sizeof(*lat), cmp_u64);
    printf("unary 64 B, sequential (%d calls): p50 %.1f us  p99 %.1f us  max %.1f us  "
           "failed %d\n",
           n, lat[n / 2] / 1e3, lat[(size_t)n * 99 / 100] / 1e3, lat[n - 1] / 1e3, w.failed);
    free(lat);

    /* 64 in flight. */
    w = (struct waiter){0};
    int total = n * 2, started = 0;
    uint64_t t0 = mono_ns();
    while (w.done < total) {
        while (started < total && started - w.done < 64) {
            grpc_client_unary(c, "/b/Echo", small, sizeof(small), 0, done_cb, &w, NULL);
            started++;
        }
        ev_loop_run_once(loop, -1);
    }
    double s = (mono_ns() - t0) / 1e9;
    printf("unary 64 B, 64 in flight: %.0f calls/s  (failed %d)\n", total / s, w.failed);

    /* Streaming. */
    w = (struct waiter){0};
    long count = 200000;
    char req[16];
    snprintf(req, sizeof(req), "%ld", count);
    t0 = mono_ns();
    grpc_client_stream(c, "/b/Stream", (const uint8_t *)req, strlen(req) + 1, 0, msg_cb, done_cb,
                       &w, NULL);
    while (!w.done)
        ev_loop_run_once(loop, -1);
    s = (mono_ns() - t0) / 1e9;
    printf("server streaming, 100 B messages: %.0f msgs/s (%ld received, failed %d)\n", w.msgs / s,
           w.msgs, w.failed);

    /* 4 MiB echo. */
    size_t big_len = GRPC_DEFAULT_MAX_MESSAGE;
    uint8_t *big = calloc(1, big_len);
    w = (struct waiter){0};
    t0 = mono_ns();
    grpc_client_unary(c, "/b/Echo", big, big_len, 0, done_cb, &w, NULL);
    while (!w.done)
        ev_loop_run_once(loop, -1);
    printf("unary 4 MiB echo: %.2f ms (failed %d)\n", (mono_ns() - t0) / 1e6, w.failed);
    free(big);

    w = (struct waiter){0};
    grpc_client_unary(c, "/b/Quit", NULL, 0, 0, done_cb, &w, NULL);
    while (!w.done)
        ev_loop_run_once(loop, -1);
    pthread_join(th, NULL);
    grpc_client_free(c);
    ev_loop_free(loop);
    grpc_server_free(server);
    ev_loop_free(srv_loop);
    rmdir(path);
    return 0;
}
