/* bench-acceld.c — acceld's latency figures, measured from a client on the
 * plugin socket (the kubelet's position):
 *
 *   Allocate and GetPreferredAllocation round trips (p50/p99/max), sequential
 *   calls on one connection, every GPU of the node requested in turn;
 *   XID-to-wire: time from starting `accel-emu xid GPU 79` to the
 *   ListAndWatch message that shows that GPU Unhealthy (includes starting the
 *   accel-emu process), needs acceld running with a short health.recoverAfter
 *   so GPUs come back between samples;
 *   acceld's peak RSS (VmHWM from /proc/PID/status) at the end;
 *   worst cases (--worst N): GetPreferredAllocation and Allocate naming N
 *   unknown IDs (refused INVALID_ARGUMENT, more IDs than devices), the same
 *   with a request filling acceld's 1 MiB message limit, the latency of another
 *   client's Allocates while such requests keep coming (two in flight), and
 *   (with --pid) SIGTERM-to-exit while they keep coming.
 *
 * Usage: bench-acceld --socket PATH [--calls N] [--xid-samples N --emu PATH]
 *                     [--pid PID] [--worst N]
 * Run through bench/acceld.sh, which sets up the emulated node. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deviceplugin.pb-c.h"
#include "evloop.h"
#include "grpc.h"
#include "util.h"

extern char **environ;

struct bench {
    struct ev_loop *loop;
    struct grpc_client *client;
    bool done;
    int status;
    bool quiet; /* a non-OK status is expected: do not print it */
    /* device list from the stream */
    char ids[64][64];
    bool healthy[64];
    size_t n;
    uint64_t updates;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, uint64_t *ns, size_t n)
{
    if (n == 0) {
        printf("%-26s no samples\n", what);
        return;
    }
    qsort(ns, n, sizeof(*ns), cmp_u64);
    size_t p99 = (n * 99 + 99) / 100;
    printf("%-26s n=%-6zu p50=%8.3f ms  p99=%8.3f ms  max=%8.3f ms\n", what, n,
           (double)ns[n / 2] / 1e6, (double)ns[p99 >= n ? n - 1 : p99 - 1] / 1e6,
           (double)ns[n - 1] / 1e6);
}

static void on_done(int status, const char *message, const uint8_t *resp, size_t len,
                    void *user_data)
{
    struct bench *b = user_data;
    b->status = status;
    b->done = true;
    if (status != GRPC_STATUS_OK && !b->quiet)
        fprintf(stderr, "bench-acceld: call failed: %s %s\n", grpc_status_name(status), message);
}

static int run_call(struct bench *b, const char *method, const ProtobufCMessage *req)
{
    b->done = false;
    int r = grpc_client_unary_msg(b->client, method, req, 5000000000ull, on_done, b, NULL);
    if (r < 0)
        return r;
    while (!b->done)
        if (ev_loop_run_once(b->loop, -1) < 0)
            return -EIO;
    return b->status == GRPC_STATUS_OK ? 0 : -EREMOTEIO;
}

static void on_list(const uint8_t *msg, size_t len, void *user_data)
{
    struct bench *b = user_data;
    V1beta1__ListAndWatchResponse *m = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
    if (!m)
        return;
    b->n = m->n_devices < 64 ? m->n_devices : 64;
    for (size_t i = 0; i < b->n; i++) {
        snprintf(b->ids[i], sizeof(b->ids[i]), "%s", m->devices[i]->id);
        b->healthy[i] = strcmp(m->devices[i]->health, "Healthy") == 0;
    }
    b->updates++;
    v1beta1__list_and_watch_response__free_unpacked(m, NULL);
}

static void on_stream_done(int status, const char *message, const uint8_t *resp, size_t len,
                           void *user_data)
{
    fprintf(stderr, "bench-acceld: ListAndWatch ended: %s %s\n", grpc_status_name(status), message);
}

/* Runs the loop until cond(b, arg) or timeout; returns whether cond held. */
static bool loop_until(struct bench *b, bool (*cond)(struct bench *, size_t), size_t arg,
                       uint64_t timeout_ns)
{
    uint64_t end = mono_ns() + timeout_ns;
    while (!cond(b, arg)) {
        if (mono_ns() >= end)
            return false;
        ev_loop_run_once(b->loop, 10);
    }
    return true;
}

static bool have_list(struct bench *b, size_t arg)
{
    return b->n > 0;
}

static bool gpu_unhealthy(struct bench *b, size_t gpu)
{
    return gpu < b->n && !b->healthy[gpu];
}

static bool gpu_healthy(struct bench *b, size_t gpu)
{
    return gpu < b->n && b->healthy[gpu];
}

/* One async call's outcome (the worst-case rows run two at once). */
struct pending {
    bool done;
    int status;
    uint64_t t0, t1;
};

static void on_pending(int status, const char *message, const uint8_t *resp, size_t len,
                       void *user_data)
{
    struct pending *p = user_data;
    p->status = status;
    p->t1 = mono_ns();
    p->done = true;
}

static int start(struct grpc_client *c, const char *method, const ProtobufCMessage *req,
                 struct pending *p)
{
    *p = (struct pending){.t0 = mono_ns()};
    return grpc_client_unary_msg(c, method, req, 60000000000ull, on_pending, p, NULL);
}

static bool wait_pending(struct ev_loop *loop, struct pending *p)
{
    uint64_t end = mono_ns() + 60000000000ull;
    while (!p->done && mono_ns() < end)
        ev_loop_run_once(loop, 10);
    return p->done;
}

/* True when the process is gone or a zombie (exited, not yet reaped). */
static bool exited(int pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return !rp || rp[1] == '\0' || rp[2] == 'Z' || rp[2] == 'X';
}

/* Worst-case requests: n unknown IDs of UUID length. */
static int worst_cases(struct bench *b, const char *sock, size_t n, int samples, int pid)
{
    /* what fits in acceld's 1 MiB message limit (ACCELD_MAX_MESSAGE): 2 bytes
     * of tag and length per ID */
    const size_t id_len = 40, max_ids = (1024u * 1024 - 64) / (id_len + 2);
    size_t cap = n > max_ids ? n : max_ids;
    char **ids = calloc(cap, sizeof(char *));
    char *store = malloc(cap * (id_len + 1));
    uint64_t *ns = calloc((size_t)samples, sizeof(uint64_t));
    const size_t other_cap = 1u << 20;
    uint64_t *other_ns = calloc(other_cap, sizeof(uint64_t));
    struct grpc_client *other = NULL;
    if (!ids || !store || !ns || !other_ns || grpc_client_new(b->loop, sock, NULL, &other) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < cap; i++) {
        ids[i] = store + i * (id_len + 1);
        snprintf(ids[i], id_len + 1, "GPU-ffffffff-0000-4000-8000-%012u", (unsigned)(i % 1000000u));
    }
    V1beta1__ContainerPreferredAllocationRequest pcr =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    pcr.allocation_size = 2;
    V1beta1__ContainerPreferredAllocationRequest *pcrs[] = {&pcr};
    V1beta1__PreferredAllocationRequest preq = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    preq.n_container_requests = 1;
    preq.container_requests = pcrs;
    V1beta1__ContainerAllocateRequest acr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest *acrs[] = {&acr};
    V1beta1__AllocateRequest areq = V1BETA1__ALLOCATE_REQUEST__INIT;
    areq.n_container_requests = 1;
    areq.container_requests = acrs;
    /* another client's ordinary Allocate: one GPU of the node */
    char *one[] = {b->ids[0]};
    V1beta1__ContainerAllocateRequest ocr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    ocr.n_devices_ids = 1;
    ocr.devices_ids = one;
    V1beta1__ContainerAllocateRequest *ocrs[] = {&ocr};
    V1beta1__AllocateRequest oreq = V1BETA1__ALLOCATE_REQUEST__INIT;
    oreq.n_container_requests = 1;
    oreq.container_requests = ocrs;

    const size_t sizes[] = {n, max_ids};
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        size_t m = sizes[k];
        pcr.n_available_deviceids = m;
        pcr.available_deviceids = ids;
        acr.n_devices_ids = m;
        acr.devices_ids = ids;
        const struct {
            const char *name, *method;
            const ProtobufCMessage *req;
        } rows[] = {
            {"GPA", "/v1beta1.DevicePlugin/GetPreferredAllocation", &preq.base},
            {"Allocate", "/v1beta1.DevicePlugin/Allocate", &areq.base},
        };
        for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
            char what[64];
            size_t got = 0, wrong = 0;
            for (int i = 0; i < samples; i++) {
                struct pending p;
                if (start(b->client, rows[r].method, rows[r].req, &p) < 0 ||
                    !wait_pending(b->loop, &p))
                    return -EIO;
                wrong += p.status != GRPC_STATUS_INVALID_ARGUMENT;
                ns[got++] = p.t1 - p.t0;
            }
            snprintf(what, sizeof(what), "%s %zu IDs (refused)", rows[r].name, m);
            report(what, ns, got);
            if (wrong)
                printf("  %zu of them not INVALID_ARGUMENT\n", wrong);
            /* another client's one-GPU Allocates, one at a time, while two
             * hostile requests stay in flight on the first connection: its
             * worst latency bounds how long one hostile request holds the loop */
            got = 0;
            struct pending h[2], o;
            int hostile_done = 0;
            for (int i = 0; i < 2; i++)
                if (start(b->client, rows[r].method, rows[r].req, &h[i]) < 0)
                    return -EIO;
            if (start(other, "/v1beta1.DevicePlugin/Allocate", &oreq.base, &o) < 0)
                return -EIO;
            uint64_t end = mono_ns() + 120000000000ull;
            while (hostile_done < samples && mono_ns() < end) {
                ev_loop_run_once(b->loop, 10);
                for (int i = 0; i < 2; i++) {
                    if (!h[i].done)
                        continue;
                    hostile_done++;
                    if (start(b->client, rows[r].method, rows[r].req, &h[i]) < 0)
                        return -EIO;
                }
                if (o.done) {
                    if (got < other_cap)
                        other_ns[got++] = o.t1 - o.t0;
                    if (start(other, "/v1beta1.DevicePlugin/Allocate", &oreq.base, &o) < 0)
                        return -EIO;
                }
            }
            if (!wait_pending(b->loop, &h[0]) || !wait_pending(b->loop, &h[1]) ||
                !wait_pending(b->loop, &o))
                return -EIO;
            snprintf(what, sizeof(what), "  other client meanwhile");
            report(what, other_ns, got);
        }
    }
    if (pid > 0) {
        /* keep hostile requests in flight, then SIGTERM */
        pcr.n_available_deviceids = max_ids;
        struct pending p[4];
        for (int i = 0; i < 4; i++)
            start(b->client, "/v1beta1.DevicePlugin/GetPreferredAllocation", &preq.base, &p[i]);
        for (int i = 0; i < 20; i++)
            ev_loop_run_once(b->loop, 1);
        uint64_t t0 = mono_ns();
        kill(pid, SIGTERM);
        while (!exited(pid) && mono_ns() - t0 < 60000000000ull)
            ev_loop_run_once(b->loop, 1);
        printf("%-26s %.3f ms (4 requests of %zu IDs in flight)\n", "SIGTERM-to-exit",
               (double)(mono_ns() - t0) / 1e6, max_ids);
    }
    grpc_client_free(other);
    free(other_ns);
    free(ns);
    free(store);
    free(ids);
    return 0;
}

static long vm_hwm_kib(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
            break;
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"calls", required_argument, NULL, 'c'},
        {"xid-samples", required_argument, NULL, 'x'},
        {"emu", required_argument, NULL, 'e'},
        {"pid", required_argument, NULL, 'p'},
        {"worst", required_argument, NULL, 'w'},
        {NULL, 0, NULL, 0},
    };
    const char *sock = NULL, *emu = NULL;
    int calls = 2000, xid_samples = 0, pid = 0, worst = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 's')
            sock = optarg;
        else if (c == 'c')
            calls = atoi(optarg);
        else if (c == 'x')
            xid_samples = atoi(optarg);
        else if (c == 'e')
            emu = optarg;
        else if (c == 'p')
            pid = atoi(optarg);
        else if (c == 'w')
            worst = atoi(optarg);
        else
            return 2;
    }
    if (!sock || calls <= 0) {
        fprintf(stderr, "usage: bench-acceld --socket PATH [--calls N] [--xid-samples N --emu "
                        "PATH] [--pid PID] [--worst N]\n");
        return 2;
    }
    struct bench b = {0};
    if (ev_loop_new(&b.loop) < 0 || grpc_client_new(b.loop, sock, NULL, &b.client) < 0) {
        fprintf(stderr, "bench-acceld: cannot connect to %s\n", sock);
        return 1;
    }
    V1beta1__Empty empty = V1BETA1__EMPTY__INIT;
    uint8_t ebuf[8];
    size_t elen = v1beta1__empty__pack(&empty, ebuf);
    if (grpc_client_stream(b.client, "/v1beta1.DevicePlugin/ListAndWatch", ebuf, elen, 0, on_list,
                           on_stream_done, &b, NULL) < 0 ||
        !loop_until(&b, have_list, 0, 5000000000ull)) {
        fprintf(stderr, "bench-acceld: no device list\n");
        return 1;
    }
    printf("acceld at %s: %zu GPUs\n", sock, b.n);

    uint64_t *ns = calloc((size_t)calls, sizeof(uint64_t));
    char *idp[64];
    for (size_t i = 0; i < b.n; i++)
        idp[i] = b.ids[i];

    /* Allocate: one GPU per call, every GPU in turn, plus whole-node calls */
    for (int i = 0; i < calls; i++) {
        V1beta1__ContainerAllocateRequest cr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
        size_t g = (size_t)i % b.n;
        bool all = i % 10 == 9;
        cr.n_devices_ids = all ? b.n : 1;
        cr.devices_ids = all ? idp : &idp[g];
        V1beta1__ContainerAllocateRequest *crs[] = {&cr};
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        req.n_container_requests = 1;
        req.container_requests = crs;
        uint64_t t0 = mono_ns();
        if (run_call(&b, "/v1beta1.DevicePlugin/Allocate", &req.base) < 0)
            return 1;
        ns[i] = mono_ns() - t0;
    }
    report("Allocate", ns, (size_t)calls);

    /* GetPreferredAllocation: sizes 1..n from the whole node */
    for (int i = 0; i < calls; i++) {
        V1beta1__ContainerPreferredAllocationRequest cr =
            V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
        cr.n_available_deviceids = b.n;
        cr.available_deviceids = idp;
        cr.allocation_size = (int32_t)((size_t)i % b.n) + 1;
        V1beta1__ContainerPreferredAllocationRequest *crs[] = {&cr};
        V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
        req.n_container_requests = 1;
        req.container_requests = crs;
        uint64_t t0 = mono_ns();
        if (run_call(&b, "/v1beta1.DevicePlugin/GetPreferredAllocation", &req.base) < 0)
            return 1;
        ns[i] = mono_ns() - t0;
    }
    report("GetPreferredAllocation", ns, (size_t)calls);

    /* XID-to-wire */
    if (xid_samples > 0 && emu) {
        uint64_t *xs = calloc((size_t)xid_samples, sizeof(uint64_t));
        size_t got = 0;
        for (int i = 0; i < xid_samples; i++) {
            size_t g = (size_t)i % b.n;
            if (!loop_until(&b, gpu_healthy, g, 30000000000ull)) {
                fprintf(stderr, "bench-acceld: GPU %zu did not recover (recoverAfter set?)\n", g);
                break;
            }
            char gs[16];
            snprintf(gs, sizeof(gs), "%zu", g);
            char *args[] = {(char *)emu, "xid", gs, "79", NULL};
            pid_t child;
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
            uint64_t t0 = mono_ns();
            int sr = posix_spawn(&child, emu, &fa, NULL, args, environ);
            posix_spawn_file_actions_destroy(&fa);
            if (sr != 0) {
                fprintf(stderr, "bench-acceld: cannot run %s\n", emu);
                break;
            }
            bool seen = loop_until(&b, gpu_unhealthy, g, 10000000000ull);
            uint64_t t1 = mono_ns();
            int st;
            waitpid(child, &st, 0);
            if (!seen) {
                fprintf(stderr, "bench-acceld: GPU %zu never went Unhealthy\n", g);
                break;
            }
            xs[got++] = t1 - t0;
        }
        report("XID-to-wire", xs, got);
        free(xs);
    }
    if (pid > 0)
        printf("%-26s %ld KiB (VmHWM)\n", "acceld peak RSS", vm_hwm_kib(pid));
    if (worst > 0) {
        b.quiet = true;
        if (worst_cases(&b, sock, (size_t)worst, 20, pid) < 0) {
            fprintf(stderr, "bench-acceld: worst-case rows failed\n");
            return 1;
        }
    }
    free(ns);
    b.client = grpc_client_free(b.client);
    ev_loop_free(b.loop);
    return 0;
}
