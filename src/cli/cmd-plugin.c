/* cmd-plugin.c — `accelctl plugin`: a debugging client for any kubelet
 * device plugin (API v1beta1) on a unix socket, like grpcurl for this one
 * API: its options, its device list (the first ListAndWatch message, or all
 * of them with --watch), and its answers to GetPreferredAllocation and
 * Allocate, as text or JSON. It only asks; it never registers anything. */
#include "accelctl.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "deviceplugin.pb-c.h"
#include "grpc.h"
#include "util.h"

#define DEFAULT_TIMEOUT_NS (10ull * 1000000000ull)
/* How long to wait for the socket to accept (a plugin just started). */
#define DEFAULT_WAIT_NS (5ull * 1000000000ull)
#define WAIT_POLL_NS (20ull * 1000000ull)
#define MAX_IDS 1024

struct plugin_args {
    const char *socket;
    bool json;
    bool watch;
    uint64_t timeout_ns;
    uint64_t wait_ns;
    char *available[MAX_IDS];
    size_t n_available;
    bool have_available;
    char *must[MAX_IDS];
    size_t n_must;
    int size;
    char **ids; /* allocate: positional IDs */
    size_t n_ids;
};

static void plugin_usage(FILE *f)
{
    fprintf(f, "Usage: accelctl plugin COMMAND --socket PATH [OPTIONS]\n"
               "Talks to a kubelet device plugin (API v1beta1) the way the kubelet does.\n\n"
               "  info                     GetDevicePluginOptions\n"
               "  devices [--watch]        the device list (ListAndWatch; --watch keeps printing)\n"
               "  prefer --size N [--available ID,..] [--must ID,..]\n"
               "                           GetPreferredAllocation (default: all Healthy devices)\n"
               "  allocate ID...           Allocate, one container with these devices\n\n"
               "  --socket PATH            the plugin's socket (e.g. "
               "/var/lib/kubelet/device-plugins/accel-nvidia.com-gpu.sock)\n"
               "  --json                   JSON output\n"
               "  --timeout DUR            per-call deadline (default 10s; devices --watch: none)\n"
               "  --wait DUR               wait up to DUR for the socket to accept, e.g. right\n"
               "                           after starting the plugin (default 5s; 0: no wait)\n");
}

/* Splits "a,b,c" in place into out. */
static int split_ids(char *s, char **out, size_t *n)
{
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (!*tok)
            continue;
        if (*n >= MAX_IDS)
            return -E2BIG;
        out[(*n)++] = tok;
    }
    return 0;
}

/* Why the socket could not be used, and what to check. */
static void unreachable(const char *socket, int r)
{
    const char *hint = r == -ENOENT ? " (no socket there: is the plugin running, and is this its "
                                      "device plugin dir?)"
                       : r == -ECONNREFUSED ? " (nothing listens on it: the plugin has exited)"
                       : r == -EACCES       ? " (permission denied: plugin sockets are root's)"
                                            : "";
    fprintf(stderr, "accelctl: cannot reach the plugin at %s: %s%s\n", socket, strerror(-r), hint);
}

/* Waits until a connect() to the socket succeeds: a plugin just started has
 * not bound it yet (ENOENT) or not listened yet (ECONNREFUSED). Bounded
 * polling: at most wait_ns. Returns 0 or the last -errno. */
static int wait_socket(const char *path, uint64_t wait_ns)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    uint64_t end = mono_ns() + wait_ns;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        int r = connect(fd, (const struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
        close(fd);
        if (r == 0 || (r != -ENOENT && r != -ECONNREFUSED) || mono_ns() >= end)
            return r;
        struct timespec ts = {0, (long)WAIT_POLL_NS};
        nanosleep(&ts, NULL);
    }
}

static int call_unary(const struct plugin_args *a, const char *method, const ProtobufCMessage *req,
                      uint8_t **ret_resp, size_t *ret_len)
{
    size_t len = protobuf_c_message_get_packed_size(req);
    _cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    protobuf_c_message_pack(req, buf);
    int status = 0;
    _cleanup_free_ char *msg = NULL;
    int r = grpc_blocking_unary(a->socket, method, buf, len, a->timeout_ns, &status, &msg, ret_resp,
                                ret_len);
    if (r < 0) {
        unreachable(a->socket, r);
        return r;
    }
    if (status != GRPC_STATUS_OK) {
        fprintf(stderr, "accelctl: %s: %s%s%s\n", method, grpc_status_name(status),
                msg && *msg ? ": " : "", msg ? msg : "");
        return -EREMOTEIO;
    }
    return 0;
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
}

/* ---- info ---- */

static int do_info(const struct plugin_args *a)
{
    V1beta1__Empty e = V1BETA1__EMPTY__INIT;
    _cleanup_free_ uint8_t *resp = NULL;
    size_t len = 0;
    int r = call_unary(a, "/v1beta1.DevicePlugin/GetDevicePluginOptions", &e.base, &resp, &len);
    if (r < 0)
        return r;
    V1beta1__DevicePluginOptions *o = v1beta1__device_plugin_options__unpack(NULL, len, resp);
    if (!o) {
        fprintf(stderr, "accelctl: the plugin's options do not decode\n");
        return -EBADMSG;
    }
    if (a->json)
        print_json(json_pack("{s:b, s:b}", "pre_start_required", o->pre_start_required,
                             "get_preferred_allocation_available",
                             o->get_preferred_allocation_available));
    else
        printf("pre_start_required: %s\nget_preferred_allocation_available: %s\n",
               o->pre_start_required ? "true" : "false",
               o->get_preferred_allocation_available ? "true" : "false");
    v1beta1__device_plugin_options__free_unpacked(o, NULL);
    return 0;
}

/* ---- devices ---- */

struct devices_ctx {
    const struct plugin_args *a;
    int printed;
    int error;
    /* prefer without --available: the healthy IDs of the first message;
     * with all, every ID and its health (accelctl gpus --plugin-socket) */
    bool collect, all;
    char **ids;
    bool *healthy;
    size_t n_ids;
};

static json_t *devices_json(const V1beta1__ListAndWatchResponse *m)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < m->n_devices; i++) {
        const V1beta1__Device *d = m->devices[i];
        json_t *numa = json_array();
        for (size_t k = 0; d->topology && numa && k < d->topology->n_nodes; k++)
            json_array_append_new(numa, json_integer(d->topology->nodes[k]->id));
        json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "id", d->id, "health", d->health,
                                             "numa_nodes", numa));
    }
    return arr;
}

static void devices_text(const V1beta1__ListAndWatchResponse *m, int nth)
{
    if (nth > 0)
        printf("\n");
    printf("%-48s %-10s %s\n", "ID", "HEALTH", "NUMA");
    for (size_t i = 0; i < m->n_devices; i++) {
        const V1beta1__Device *d = m->devices[i];
        char numa[64] = "-";
        size_t n = 0;
        for (size_t k = 0; d->topology && k < d->topology->n_nodes && n < sizeof(numa); k++) {
            int w = snprintf(numa + n, sizeof(numa) - n, "%s%lld", k ? "," : "",
                             (long long)d->topology->nodes[k]->id);
            if (w > 0)
                n += (size_t)w;
        }
        printf("%-48s %-10s %s\n", d->id, d->health, numa);
    }
    fflush(stdout);
}

static bool on_devices(const uint8_t *msg, size_t len, void *user_data)
{
    struct devices_ctx *c = user_data;
    V1beta1__ListAndWatchResponse *m = v1beta1__list_and_watch_response__unpack(NULL, len, msg);
    if (!m) {
        fprintf(stderr, "accelctl: a ListAndWatch message does not decode\n");
        c->error = -EBADMSG;
        return false;
    }
    if (c->collect) {
        c->ids = calloc(m->n_devices + 1, sizeof(char *));
        c->healthy = calloc(m->n_devices + 1, sizeof(bool));
        for (size_t i = 0; c->ids && c->healthy && i < m->n_devices; i++) {
            bool ok = strcmp(m->devices[i]->health, "Healthy") == 0;
            if (!ok && !c->all)
                continue;
            c->healthy[c->n_ids] = ok;
            c->ids[c->n_ids++] = strdup(m->devices[i]->id);
        }
    } else if (c->a->json) {
        json_t *j = devices_json(m);
        /* one JSON document per message, compact when watching (a stream of lines) */
        char *s = json_dumps(j, c->a->watch ? JSON_COMPACT : JSON_INDENT(2));
        if (s)
            printf("%s\n", s);
        fflush(stdout);
        free(s);
        json_decref(j);
    } else {
        devices_text(m, c->printed);
    }
    c->printed++;
    v1beta1__list_and_watch_response__free_unpacked(m, NULL);
    return c->a->watch && !c->collect;
}

static int list_devices(const struct plugin_args *a, struct devices_ctx *c)
{
    V1beta1__Empty e = V1BETA1__EMPTY__INIT;
    uint8_t buf[8];
    size_t len = v1beta1__empty__pack(&e, buf);
    int status = 0;
    _cleanup_free_ char *msg = NULL;
    int r = grpc_blocking_stream(a->socket, "/v1beta1.DevicePlugin/ListAndWatch", buf, len,
                                 a->watch && !c->collect ? 0 : a->timeout_ns, on_devices, c,
                                 &status, &msg);
    if (r < 0) {
        unreachable(a->socket, r);
        return r;
    }
    if (c->error)
        return c->error;
    /* We cancel the stream ourselves after the first message. */
    if (c->printed > 0 && (status == GRPC_STATUS_CANCELLED || status == GRPC_STATUS_OK))
        return 0;
    fprintf(stderr, "accelctl: ListAndWatch ended: %s%s%s\n", grpc_status_name(status),
            msg && *msg ? ": " : "", msg ? msg : "");
    return -EREMOTEIO;
}

static int do_devices(const struct plugin_args *a)
{
    struct devices_ctx c = {.a = a};
    return list_devices(a, &c);
}

/* ---- prefer ---- */

static int do_prefer(struct plugin_args *a)
{
    struct devices_ctx c = {.a = a, .collect = true};
    /* before the first `goto out`: the cleanup must never see an unset pointer */
    _cleanup_free_ uint8_t *resp = NULL;
    int r;
    if (a->size <= 0) {
        fprintf(stderr, "accelctl: plugin prefer needs --size N (N > 0)\n");
        return -EINVAL;
    }
    if (!a->have_available) {
        if ((r = list_devices(a, &c)) < 0)
            goto out;
        for (size_t i = 0; i < c.n_ids && i < MAX_IDS; i++)
            a->available[a->n_available++] = c.ids[i];
    }
    V1beta1__ContainerPreferredAllocationRequest cr =
        V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
    cr.n_available_deviceids = a->n_available;
    cr.available_deviceids = a->available;
    cr.n_must_include_deviceids = a->n_must;
    cr.must_include_deviceids = a->must;
    cr.allocation_size = a->size;
    V1beta1__ContainerPreferredAllocationRequest *crs[] = {&cr};
    V1beta1__PreferredAllocationRequest req = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
    req.n_container_requests = 1;
    req.container_requests = crs;
    size_t len = 0;
    r = call_unary(a, "/v1beta1.DevicePlugin/GetPreferredAllocation", &req.base, &resp, &len);
    if (r < 0)
        goto out;
    V1beta1__PreferredAllocationResponse *m =
        v1beta1__preferred_allocation_response__unpack(NULL, len, resp);
    if (!m) {
        fprintf(stderr, "accelctl: the GetPreferredAllocation response does not decode\n");
        r = -EBADMSG;
        goto out;
    }
    if (a->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < m->n_container_responses; i++) {
            json_t *ids = json_array();
            for (size_t k = 0; k < m->container_responses[i]->n_deviceids; k++)
                json_array_append_new(ids, json_string(m->container_responses[i]->deviceids[k]));
            json_array_append_new(arr, json_pack("{s:o}", "deviceIDs", ids));
        }
        print_json(json_pack("{s:o}", "container_responses", arr));
    } else {
        for (size_t i = 0; i < m->n_container_responses; i++)
            for (size_t k = 0; k < m->container_responses[i]->n_deviceids; k++)
                printf("%s\n", m->container_responses[i]->deviceids[k]);
    }
    v1beta1__preferred_allocation_response__free_unpacked(m, NULL);
out:
    for (size_t i = 0; i < c.n_ids; i++)
        free(c.ids[i]);
    free(c.ids);
    free(c.healthy);
    return r;
}

/* ---- allocate ---- */

static json_t *allocate_json(const V1beta1__AllocateResponse *m)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < m->n_container_responses; i++) {
        const V1beta1__ContainerAllocateResponse *c = m->container_responses[i];
        json_t *envs = json_object(), *mounts = json_array(), *devs = json_array();
        json_t *ann = json_object(), *cdi = json_array();
        for (size_t k = 0; k < c->n_envs; k++)
            json_object_set_new(envs, c->envs[k]->key, json_string(c->envs[k]->value));
        for (size_t k = 0; k < c->n_mounts; k++)
            json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "container_path",
                                                    c->mounts[k]->container_path, "host_path",
                                                    c->mounts[k]->host_path, "read_only",
                                                    c->mounts[k]->read_only));
        for (size_t k = 0; k < c->n_devices; k++)
            json_array_append_new(devs, json_pack("{s:s, s:s, s:s}", "container_path",
                                                  c->devices[k]->container_path, "host_path",
                                                  c->devices[k]->host_path, "permissions",
                                                  c->devices[k]->permissions));
        for (size_t k = 0; k < c->n_annotations; k++)
            json_object_set_new(ann, c->annotations[k]->key, json_string(c->annotations[k]->value));
        for (size_t k = 0; k < c->n_cdi_devices; k++)
            json_array_append_new(cdi, json_string(c->cdi_devices[k]->name));
        json_array_append_new(arr,
                              json_pack("{s:o, s:o, s:o, s:o, s:o}", "envs", envs, "mounts", mounts,
                                        "devices", devs, "annotations", ann, "cdi_devices", cdi));
    }
    return json_pack("{s:o}", "container_responses", arr);
}

static void allocate_text(const V1beta1__AllocateResponse *m)
{
    for (size_t i = 0; i < m->n_container_responses; i++) {
        const V1beta1__ContainerAllocateResponse *c = m->container_responses[i];
        printf("container %zu:\n", i);
        for (size_t k = 0; k < c->n_envs; k++)
            printf("  env        %s=%s\n", c->envs[k]->key, c->envs[k]->value);
        for (size_t k = 0; k < c->n_devices; k++)
            printf("  device     %s -> %s (%s)\n", c->devices[k]->host_path,
                   c->devices[k]->container_path, c->devices[k]->permissions);
        for (size_t k = 0; k < c->n_mounts; k++)
            printf("  mount      %s -> %s%s\n", c->mounts[k]->host_path,
                   c->mounts[k]->container_path, c->mounts[k]->read_only ? " (ro)" : "");
        for (size_t k = 0; k < c->n_annotations; k++)
            printf("  annotation %s=%s\n", c->annotations[k]->key, c->annotations[k]->value);
        for (size_t k = 0; k < c->n_cdi_devices; k++)
            printf("  cdi        %s\n", c->cdi_devices[k]->name);
    }
}

static int do_allocate(const struct plugin_args *a)
{
    if (a->n_ids == 0) {
        fprintf(stderr, "accelctl: plugin allocate needs device IDs\n");
        return -EINVAL;
    }
    V1beta1__ContainerAllocateRequest cr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    cr.n_devices_ids = a->n_ids;
    cr.devices_ids = a->ids;
    V1beta1__ContainerAllocateRequest *crs[] = {&cr};
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    req.n_container_requests = 1;
    req.container_requests = crs;
    _cleanup_free_ uint8_t *resp = NULL;
    size_t len = 0;
    int r = call_unary(a, "/v1beta1.DevicePlugin/Allocate", &req.base, &resp, &len);
    if (r < 0)
        return r;
    V1beta1__AllocateResponse *m = v1beta1__allocate_response__unpack(NULL, len, resp);
    if (!m) {
        fprintf(stderr, "accelctl: the Allocate response does not decode\n");
        return -EBADMSG;
    }
    if (a->json)
        print_json(allocate_json(m));
    else
        allocate_text(m);
    v1beta1__allocate_response__free_unpacked(m, NULL);
    return 0;
}

int accelctl_plugin_health(const char *socket, char ***ret_ids, bool **ret_healthy, size_t *ret_n)
{
    struct plugin_args a = {.socket = socket, .timeout_ns = DEFAULT_TIMEOUT_NS};
    struct devices_ctx c = {.a = &a, .collect = true, .all = true};
    int r = wait_socket(socket, DEFAULT_WAIT_NS);
    if (r < 0) {
        unreachable(socket, r);
        return r;
    }
    r = list_devices(&a, &c);
    if (r == 0 && (!c.ids || !c.healthy))
        r = -ENOMEM;
    if (r < 0) {
        for (size_t i = 0; i < c.n_ids; i++)
            free(c.ids[i]);
        free(c.ids);
        free(c.healthy);
        return r;
    }
    *ret_ids = c.ids;
    *ret_healthy = c.healthy;
    *ret_n = c.n_ids;
    return 0;
}

int accelctl_cmd_plugin(int argc, char **argv)
{
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"watch", no_argument, NULL, 'w'},        {"timeout", required_argument, NULL, 't'},
        {"wait", required_argument, NULL, 'W'},   {"available", required_argument, NULL, 'a'},
        {"must", required_argument, NULL, 'm'},   {"size", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    struct plugin_args a = {.timeout_ns = DEFAULT_TIMEOUT_NS, .wait_ns = DEFAULT_WAIT_NS};
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        plugin_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? ACCELCTL_EXIT_USAGE : ACCELCTL_EXIT_OK;
    }
    const char *sub = argv[1];
    int c;
    optind = 1;
    opterr = 0;
    /* argv[1] is the subcommand: parse from there */
    while ((c = getopt_long(argc - 1, argv + 1, ":", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            a.socket = optarg;
            break;
        case 'j':
            a.json = true;
            break;
        case 'w':
            a.watch = true;
            break;
        case 't':
            if (parse_duration_ns(optarg, &a.timeout_ns) < 0) {
                fprintf(stderr, "accelctl: --timeout: \"%s\" is not a duration\n", optarg);
                return 2;
            }
            break;
        case 'W':
            if (parse_duration_ns(optarg, &a.wait_ns) < 0) {
                fprintf(stderr, "accelctl: --wait: \"%s\" is not a duration (e.g. 0, 5s)\n",
                        optarg);
                return 2;
            }
            break;
        case 'a':
            a.have_available = true;
            if (split_ids(optarg, a.available, &a.n_available) < 0) {
                fprintf(stderr, "accelctl: --available: too many IDs\n");
                return 2;
            }
            break;
        case 'm':
            if (split_ids(optarg, a.must, &a.n_must) < 0) {
                fprintf(stderr, "accelctl: --must: too many IDs\n");
                return 2;
            }
            break;
        case 'n':
            if (parse_int(optarg, &a.size) < 0 || a.size <= 0) {
                fprintf(stderr, "accelctl: --size: \"%s\" is not a positive number\n", optarg);
                return 2;
            }
            break;
        case 'h':
            plugin_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "accelctl: plugin: %s: %s\n", argv[optind],
                    c == ':' ? "needs a value" : "unknown option");
            return 2;
        }
    }
    a.ids = argv + 1 + optind;
    a.n_ids = (size_t)(argc - 1 - optind);
    if (!a.socket) {
        fprintf(stderr, "accelctl: plugin %s: --socket PATH is required\n", sub);
        return 2;
    }
    if (strcmp(sub, "allocate") != 0 && a.n_ids) {
        fprintf(stderr, "accelctl: plugin %s: unexpected argument \"%s\"\n", sub, a.ids[0]);
        return 2;
    }
    int r;
    if (strcmp(sub, "info") != 0 && strcmp(sub, "devices") != 0 && strcmp(sub, "prefer") != 0 &&
        strcmp(sub, "allocate") != 0) {
        fprintf(stderr, "accelctl: plugin: unknown command \"%s\"\n", sub);
        plugin_usage(stderr);
        return 2;
    }
    if (a.wait_ns && (r = wait_socket(a.socket, a.wait_ns)) < 0) {
        unreachable(a.socket, r);
        return ACCELCTL_EXIT_FAILURE;
    }
    if (strcmp(sub, "info") == 0)
        r = do_info(&a);
    else if (strcmp(sub, "devices") == 0)
        r = do_devices(&a);
    else if (strcmp(sub, "prefer") == 0)
        r = do_prefer(&a);
    else
        r = do_allocate(&a);
    return r == -EINVAL ? ACCELCTL_EXIT_USAGE : r < 0 ? ACCELCTL_EXIT_FAILURE : ACCELCTL_EXIT_OK;
}
