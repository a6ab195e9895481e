/* grpc-test-client — our gRPC client driven from a test script, to call a
 * server we did not write (python3-grpcio). One call per run:
 *
 *   grpc-test-client SOCKET unary  METHOD [REQUEST [TIMEOUT_MS]]
 *   grpc-test-client SOCKET stream METHOD [REQUEST [TIMEOUT_MS]]
 *   grpc-test-client SOCKET many   METHOD N      (N concurrent async unary calls)
 *
 * Prints "msg=<bytes>" per streamed message, then "status=<code> <NAME>",
 * "message=<grpc-message>" and for unary "resp=<bytes>"; for many,
 * "ok=<calls that returned their request>". Exit 0 when the call ran to a
 * status, 1 when it could not start. */
#include "grpc.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool print_msg(const uint8_t *msg, size_t len, void *ud)
{
    printf("msg=%.*s\n", (int)len, (const char *)msg);
    return true;
}

struct many {
    int done, ok;
    char req[32];
};

static void many_done(int status, const char *message, const uint8_t *resp, size_t len, void *ud)
{
    struct many *m = ud;
    m->done++;
    if (status == GRPC_STATUS_OK && len == strlen(m->req) && memcmp(resp, m->req, len) == 0)
        m->ok++;
}

static int run_many(const char *sock, const char *method, int n)
{
    struct ev_loop *loop;
    struct grpc_client *c;
    if (ev_loop_new(&loop) < 0 || grpc_client_new(loop, sock, NULL, &c) < 0)
        return 1;
    struct many *m = calloc((size_t)n, sizeof(*m));
    int finished = 0;
    for (int i = 0; i < n; i++) {
        snprintf(m[i].req, sizeof(m[i].req), "req-%d", i);
        if (grpc_client_unary(c, method, (const uint8_t *)m[i].req, strlen(m[i].req),
                              10000000000ull, many_done, &m[i], NULL) < 0)
            return 1;
    }
    while (finished < n) {
        if (ev_loop_run_once(loop, -1) < 0)
            return 1;
        finished = 0;
        for (int i = 0; i < n; i++)
            finished += m[i].done;
    }
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += m[i].ok;
    printf("ok=%d\n", ok);
    free(m);
    grpc_client_free(c);
    ev_loop_free(loop);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s SOCKET unary|stream|many METHOD [REQUEST|N [TIMEOUT_MS]]\n",
                argv[0]);
        return 2;
    }
    const char *sock = argv[1], *mode = argv[2], *method = argv[3];
    const char *req = argc > 4 ? argv[4] : "";
    uint64_t timeout_ns = argc > 5 ? strtoull(argv[5], NULL, 10) * 1000000ull : 0;
    if (strcmp(mode, "many") == 0)
        return run_many(sock, method, atoi(req));
    int status = -1;
    char *message = NULL;
    uint8_t *resp = NULL;
    size_t len = 0;
    int r;
    if (strcmp(mode, "stream") == 0)
        r = grpc_blocking_stream(sock, method, (const uint8_t *)req, strlen(req), timeout_ns,
                                 print_msg, NULL, &status, &message);
    else
        r = grpc_blocking_unary(sock, method, (const uint8_t *)req, strlen(req), timeout_ns,
                                &status, &message, &resp, &len);
    if (r < 0) {
        fprintf(stderr, "grpc-test-client: %s\n", strerror(-r));
        return 1;
    }
    printf("status=%d %s\nmessage=%s\n", status, grpc_status_name(status), message);
    if (strcmp(mode, "unary") == 0)
        printf("resp=%.*s\n", (int)len, resp ? (const char *)resp : "");
    free(message);
    free(resp);
    return 0;
}
