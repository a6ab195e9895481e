/*
 * expconfig.h — accel-exporter's settings: defaults, the YAML config file (--config, read with
 * libyaml's event parser so every error names its line and column), and the metric families
 * a config may turn off. Every key is also a flag; a flag given on the command line wins over
 * the file (docs/exporter.md, "Configuration").
 */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EXPORTER_CONFIG_MAX_DISABLED 64
#define EXPORTER_DEFAULT_LISTEN "0.0.0.0:9835"
/* the kubelet's pod-resources socket (its --pod-resources-directory default) */
#define EXPORTER_DEFAULT_PODRES "/var/lib/kubelet/pod-resources/kubelet.sock"
#define EXPORTER_CONFIG_MAX_BYTES (1u << 20) /* a bigger config file is refused */
#define EXPORTER_CONFIG_MAX_PRICES 16        /* cost.gpuHourPrice entries */
/* HTTP limits (docs/exporter.md, "Slow and many clients"): connections at once, from one IP
 * address, the time a request's line and headers may take to arrive, and the time an open
 * connection may stay silent. */
#define EXPORTER_DEFAULT_CONNECTION_LIMIT 256
#define EXPORTER_DEFAULT_PER_IP_LIMIT 16
#define EXPORTER_DEFAULT_HEADER_TIMEOUT_NS 5000000000ULL
#define EXPORTER_DEFAULT_IDLE_TIMEOUT_NS 10000000000ULL

/* One price of the cost table: a GPU-hour (share 1) of this resource costs per_hour. */
struct exporter_config_price {
    char resource[128];
    double per_hour;
};

struct exporter_config {
    char listen[64];                  /* IPv4ADDR:PORT */
    uint64_t interval_ns;             /* sampling period, >= 10 ms */
    char nvml_library[512];           /* "" = $ACCEL_NVML_LIBRARY, else libnvidia-ml.so.1 */
    char proc_root[512];              /* where /proc is */
    char pod_resources_socket[512];   /* "" = pod-resources off */
    char state_dir[512];              /* acceld's stateDir, for its SLI file; "" = off */
    char log_level[16];               /* "" = the default (info) */
    unsigned connection_limit;        /* connections served at once, 1..65535 */
    unsigned per_ip_connection_limit; /* from one address, 0 = no such limit */
    uint64_t header_timeout_ns;       /* a request's line and headers, from its first byte */
    uint64_t idle_timeout_ns;         /* a silent connection, whole seconds (libmicrohttpd's) */
    size_t ndisabled;                 /* metric families turned off (metrics.disable) */
    const char *disabled[EXPORTER_CONFIG_MAX_DISABLED]; /* entries of exporter_metric_families */
    char cost_currency[16];                             /* cost.currency: [A-Za-z0-9_], "" = off */
    size_t nprices;                                     /* cost.gpuHourPrice */
    struct exporter_config_price prices[EXPORTER_CONFIG_MAX_PRICES];
};

/* Every metric family the exporter can serve, by its name in the Prometheus text format
 * (counters with _total); NULL-terminated. */
extern const char *const exporter_metric_families[];

void exporter_config_defaults(struct exporter_config *c);

/* Applies a YAML document (len bytes; name is used in messages) over *c. Keys:
 *   listen, interval, nvmlLibrary, procRoot, podResourcesSocket, stateDir, logLevel,
 *   connectionLimit, perIpConnectionLimit, requestHeaderTimeout, idleTimeout,
 *   metrics: {disable: [FAMILY, ...]}, cost: {currency: CUR, gpuHourPrice: {RESOURCE: PRICE}}
 * Returns 0, or -EINVAL with err set to "NAME:LINE:COLUMN: what is wrong" (then *c is left as
 * it was), -ENOMEM. */
int exporter_config_parse(struct exporter_config *c, const char *data, size_t len, const char *name,
                          char *err, size_t errlen);

/* Reads path and parses it; -errno with err set when it cannot be read. */
int exporter_config_load(struct exporter_config *c, const char *path, char *err, size_t errlen);

/* Writes the settings as a YAML config that parses back to the same settings (strings
 * double-quoted, the interval in nanoseconds as "NNNns"). Returns 0, or -1 on a write error. */
int exporter_config_write(FILE *f, const struct exporter_config *c);

/* true when the config turns off the family called name. */
bool exporter_config_disabled(const struct exporter_config *c, const char *name);

/* IPv4ADDR:PORT into *sa; -EINVAL when it is not one. */
int exporter_parse_listen(const char *s, struct sockaddr_in *sa);

/* Checks what single keys cannot: prices need a currency. 0, or -EINVAL with err set. */
int exporter_config_check(const struct exporter_config *c, char *err, size_t errlen);

/* Checks one setting's value as the file or a flag gives it. key: the YAML key (nested ones
 * dotted: metrics.disable, cost.currency, cost.gpuHourPrice as RESOURCE=PRICE,...). Returns 0, or
 * -EINVAL with err set to what to give instead (no location). */
int exporter_config_set(struct exporter_config *c, const char *key, const char *value, char *err,
                        size_t errlen);
