/* test-config — accel-exporter's YAML config (src/exporter/expconfig.c): every key applied,
 * refusals that name line and column and leave the settings untouched, metrics.disable by
 * family name, the flag form of each key. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expconfig.h"
#include "tap.h"

static int parse(struct exporter_config *c, const char *doc, char *err, size_t len)
{
    return exporter_config_parse(c, doc, strlen(doc), "x.yaml", err, len);
}

TEST(every_key_applies)
{
    struct exporter_config c;
    char err[512];
    exporter_config_defaults(&c);
    REQUIRE_EQ_INT(parse(&c,
                         "listen: 127.0.0.1:9100\n"
                         "interval: 250ms\n"
                         "nvmlLibrary: /opt/nvml.so\n"
                         "procRoot: /host/proc\n"
                         "podResourcesSocket: ''\n"
                         "stateDir: /var/lib/accel\n"
                         "logLevel: debug\n"
                         "metrics:\n"
                         "  disable: [accel_gpu_info, accel_gpu_xid_events_total, accel_gpu_info]\n"
                         "cost:\n"
                         "  currency: EUR\n"
                         "  gpuHourPrice:\n"
                         "    nvidia.com/gpu: 2.48\n"
                         "    nvidia.com/gpu.shared: 0.5\n",
                         err, sizeof err),
                   0);
    CHECK_EQ_STR(c.cost_currency, "EUR");
    REQUIRE_EQ_U64(c.nprices, 2);
    CHECK_EQ_STR(c.prices[0].resource, "nvidia.com/gpu");
    CHECK(c.prices[0].per_hour == 2.48);
    CHECK_EQ_STR(c.prices[1].resource, "nvidia.com/gpu.shared");
    CHECK(c.prices[1].per_hour == 0.5);
    CHECK_EQ_INT(exporter_config_check(&c, err, sizeof err), 0);
    CHECK_EQ_STR(c.listen, "127.0.0.1:9100");
    CHECK_EQ_U64(c.interval_ns, 250000000ULL);
    CHECK_EQ_STR(c.nvml_library, "/opt/nvml.so");
    CHECK_EQ_STR(c.proc_root, "/host/proc");
    CHECK_EQ_STR(c.pod_resources_socket, "");
    CHECK_EQ_STR(c.state_dir, "/var/lib/accel");
    CHECK_EQ_STR(c.log_level, "debug");
    CHECK_EQ_U64(c.ndisabled, 2);
    CHECK(exporter_config_disabled(&c, "accel_gpu_info"));
    CHECK(exporter_config_disabled(&c, "accel_gpu_xid_events_total"));
    CHECK(!exporter_config_disabled(&c, "accel_gpu_power_watts"));
}

/* The HTTP limits (issue 22, F8): defaults, the keys, their bounds, and the idle timeout in
 * whole seconds (libmicrohttpd's unit). */
TEST(http_limits)
{
    struct exporter_config c;
    char err[512];
    exporter_config_defaults(&c);
    CHECK_EQ_U64(c.connection_limit, EXPORTER_DEFAULT_CONNECTION_LIMIT);
    CHECK_EQ_U64(c.per_ip_connection_limit, EXPORTER_DEFAULT_PER_IP_LIMIT);
    CHECK_EQ_U64(c.header_timeout_ns, 5000000000ULL);
    CHECK_EQ_U64(c.idle_timeout_ns, 10000000000ULL);
    REQUIRE_EQ_INT(parse(&c,
                         "connectionLimit: 100\nperIpConnectionLimit: 0\n"
                         "requestHeaderTimeout: 750ms\nidleTimeout: 2500ms\n",
                         err, sizeof err),
                   0);
    CHECK_EQ_U64(c.connection_limit, 100);
    CHECK_EQ_U64(c.per_ip_connection_limit, 0);
    CHECK_EQ_U64(c.header_timeout_ns, 750000000ULL);
    CHECK_EQ_U64(c.idle_timeout_ns, 3000000000ULL);
    struct exporter_config keep = c;
    static const struct {
        const char *doc, *err;
    } refused[] = {
        {"connectionLimit: 0\n", "x.yaml:1:18: bad connectionLimit \"0\""},
        {"connectionLimit: 70000\n", "x.yaml:1:18: bad connectionLimit"},
        {"perIpConnectionLimit: -1\n", "x.yaml:1:23: bad perIpConnectionLimit"},
        {"requestHeaderTimeout: 50ms\n", "x.yaml:1:23: bad requestHeaderTimeout \"50ms\""},
        {"requestHeaderTimeout: 2h\n", "x.yaml:1:23: bad requestHeaderTimeout"},
        {"idleTimeout: 500ms\n", "x.yaml:1:14: bad idleTimeout"},
        {"idleTimeout: [1s]\n", "x.yaml:1:14: idleTimeout must be a scalar"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK_EQ_INT(parse(&c, refused[i].doc, err, sizeof err), -EINVAL);
        CHECK(strncmp(err, refused[i].err, strlen(refused[i].err)) == 0);
        if (strncmp(err, refused[i].err, strlen(refused[i].err)) != 0)
            tap_diag("%s -> %s", refused[i].doc, err);
    }
    CHECK(memcmp(&c, &keep, sizeof c) == 0);
    /* the flag form */
    CHECK_EQ_INT(exporter_config_set(&c, "requestHeaderTimeout", "1s", err, sizeof err), 0);
    CHECK_EQ_U64(c.header_timeout_ns, 1000000000ULL);
    CHECK_EQ_INT(exporter_config_set(&c, "perIpConnectionLimit", "x", err, sizeof err), -EINVAL);
    CHECK(strstr(err, "0 (no limit per address) to 65535") != NULL);
}

TEST(empty_and_null_documents_keep_the_defaults)
{
    struct exporter_config c, d;
    char err[128];
    exporter_config_defaults(&c);
    d = c;
    CHECK_EQ_INT(parse(&c, "", err, sizeof err), 0);
    CHECK_EQ_INT(parse(&c, "# only a comment\n", err, sizeof err), 0);
    CHECK_EQ_INT(parse(&c, "~\n", err, sizeof err), 0);
    CHECK_EQ_INT(parse(&c, "metrics:\n", err, sizeof err), 0);
    CHECK(memcmp(&c, &d, sizeof c) == 0);
    CHECK_EQ_STR(c.listen, EXPORTER_DEFAULT_LISTEN);
    CHECK_EQ_STR(c.pod_resources_socket, EXPORTER_DEFAULT_PODRES);
    CHECK_EQ_U64(c.interval_ns, 1000000000ULL);
}

/* Each refusal: the message, with the position where the offending node starts. */
static const struct {
    const char *doc, *err;
} bad[] = {
    {"listen: \"127.0.0.1:1\ninterval: 1s\n", "x.yaml:3:1: YAML syntax error: "},
    {"interval: 1s\nlisten: nowhere\n", "x.yaml:2:9: bad listen \"nowhere\": give IPv4ADDR:PORT"},
    {"interval: 5ms\n", "x.yaml:1:11: bad interval \"5ms\": give a duration of at least 10ms"},
    {"logLevel: loud\n", "x.yaml:1:11: bad logLevel \"loud\""},
    {"interval: 1s\n\tlisten: x\n", "x.yaml:2:1: YAML syntax error: found a tab"},
    {"listen: 0.0.0.0:1\nlisen: x\n", "x.yaml:2:1: unknown key \"lisen\""},
    {"listen: 0.0.0.0:1\nlisten: 0.0.0.0:2\n", "x.yaml:2:1: listen given twice"},
    {"listen: [a]\n", "x.yaml:1:9: listen must be a scalar, found a list"},
    {"- listen\n", "x.yaml:1:1: the config must be a mapping of keys, found a list"},
    {"metrics:\n  disable:\n    - accel_gpu_info\n    - accel_nope\n",
     "x.yaml:4:7: metrics.disable: no metric family \"accel_nope\""},
    {"metrics: {enable: [a]}\n", "x.yaml:1:11: unknown key under metrics"},
    {"metrics: [a]\n", "x.yaml:1:10: metrics must be a mapping, found a list"},
    {"a: &x 1\nlisten: *x\n", "x.yaml:1:1: unknown key \"a\""},
    {"listen: &x 0.0.0.0:1\ninterval: *x\n", "x.yaml:2:11: YAML aliases are not supported"},
    {"listen: 0.0.0.0:1\n---\nlisten: 0.0.0.0:2\n", "x.yaml:2:1: more than one YAML document"},
    {"cost:\n  currency: US$\n", "x.yaml:2:13: bad cost.currency \"US$\""},
    {"cost:\n  gpuHourPrice:\n    nvidia.com/gpu: cheap\n",
     "x.yaml:3:5: cost.gpuHourPrice: bad price \"cheap\" for nvidia.com/gpu"},
    {"cost:\n  gpuHourPrice:\n    nvidia.com/gpu: -1\n",
     "x.yaml:3:5: cost.gpuHourPrice: bad price"},
    {"cost:\n  gpuHourPrice:\n    a: 1\n    a: 2\n",
     "x.yaml:4:5: cost.gpuHourPrice: a given twice"},
    {"cost:\n  gpuHourPrice:\n    \"a=b\": 1\n",
     "x.yaml:3:5: cost.gpuHourPrice: bad resource name"},
    {"cost:\n  gpuHourPrice: [a]\n", "x.yaml:2:17: cost.gpuHourPrice must be a mapping"},
    {"cost:\n  prices: {}\n", "x.yaml:2:3: unknown key under cost"},
    {"cost: 1\n", "x.yaml:1:7: cost must be a mapping, found a scalar"},
};

TEST(refusals_name_line_and_column_and_change_nothing)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct exporter_config c, d;
        char err[512] = "";
        exporter_config_defaults(&c);
        d = c;
        CHECK_EQ_INT(parse(&c, bad[i].doc, err, sizeof err), -EINVAL);
        if (strncmp(err, bad[i].err, strlen(bad[i].err)) != 0)
            tap_fail(__FILE__, __LINE__, "case %zu: got \"%s\", want \"%s...\"", i, err,
                     bad[i].err);
        CHECK(memcmp(&c, &d, sizeof c) == 0);
    }
}

TEST(flag_forms)
{
    struct exporter_config c;
    char err[256];
    exporter_config_defaults(&c);
    CHECK_EQ_INT(exporter_config_set(&c, "metrics.disable",
                                     "accel_gpu_info,accel_exporter_samples_total", err,
                                     sizeof err),
                 0);
    CHECK_EQ_U64(c.ndisabled, 2);
    CHECK_EQ_INT(exporter_config_set(&c, "metrics.disable", "", err, sizeof err), 0);
    CHECK_EQ_U64(c.ndisabled, 0);
    CHECK_EQ_INT(
        exporter_config_set(&c, "metrics.disable", "accel_gpu_info,bogus", err, sizeof err),
        -EINVAL);
    CHECK(strstr(err, "\"bogus\""));
    CHECK_EQ_U64(c.ndisabled, 0);
    CHECK_EQ_INT(exporter_config_set(&c, "listen", "127.0.0.1:99999", err, sizeof err), -EINVAL);
    CHECK_EQ_INT(exporter_config_set(&c, "interval", "20ms", err, sizeof err), 0);
    CHECK_EQ_U64(c.interval_ns, 20000000ULL);
    CHECK_EQ_INT(exporter_config_set(&c, "nope", "1", err, sizeof err), -EINVAL);
    /* the price table's flag form: RESOURCE=PRICE,...; a currency is needed with prices */
    CHECK_EQ_INT(exporter_config_set(&c, "cost.gpuHourPrice", "nvidia.com/gpu=3.6,x.io/y=0", err,
                                     sizeof err),
                 0);
    REQUIRE_EQ_U64(c.nprices, 2);
    CHECK(c.prices[0].per_hour == 3.6 && c.prices[1].per_hour == 0);
    CHECK_EQ_INT(exporter_config_check(&c, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "needs cost.currency"));
    CHECK_EQ_INT(exporter_config_set(&c, "cost.currency", "USD", err, sizeof err), 0);
    CHECK_EQ_INT(exporter_config_check(&c, err, sizeof err), 0);
    CHECK_EQ_INT(exporter_config_set(&c, "cost.gpuHourPrice", "nvidia.com/gpu", err, sizeof err),
                 -EINVAL);
    CHECK_EQ_U64(c.nprices, 2); /* a refused value changes nothing */
    CHECK_EQ_INT(exporter_config_set(&c, "cost.gpuHourPrice", "", err, sizeof err), 0);
    CHECK_EQ_U64(c.nprices, 0);
}

TEST(missing_file_says_so)
{
    struct exporter_config c;
    char err[512];
    exporter_config_defaults(&c);
    CHECK_EQ_INT(exporter_config_load(&c, "/nonexistent/accel.yaml", err, sizeof err), -ENOENT);
    CHECK(strstr(err, "/nonexistent/accel.yaml: cannot read the config"));
}

TEST(written_settings_parse_back_the_same)
{
    struct exporter_config c, d;
    char err[512], *text = NULL;
    size_t len = 0;
    exporter_config_defaults(&c);
    REQUIRE_EQ_INT(parse(&c,
                         "procRoot: \"/a\\\"b\\\\c\\x01\\u2028\\N\"\n"
                         "logLevel: warn\ninterval: 1500ms\n"
                         "metrics: {disable: [accel_gpu_info, accel_gpu_power_watts]}\n"
                         "cost: {currency: EUR, gpuHourPrice: {nvidia.com/gpu: 2.48, "
                         "\"x.io/y\": 1e-3}}\n",
                         err, sizeof err),
                   0);
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f);
    CHECK_EQ_INT(exporter_config_write(f, &c), 0);
    fclose(f);
    CHECK(strstr(text, "procRoot: \"/a\\\"b\\\\c\\x01\\L\\N\"\n"));
    CHECK(strstr(text, "interval: 1500000000ns\n"));
    CHECK(strstr(text, "disable: [accel_gpu_info, accel_gpu_power_watts]\n"));
    CHECK(strstr(text, "currency: \"EUR\"\n"));
    CHECK(strstr(text, "\"nvidia.com/gpu\": 2.4"));
    exporter_config_defaults(&d);
    CHECK_EQ_INT(parse(&d, text, err, sizeof err), 0);
    CHECK(memcmp(&c, &d, sizeof c) == 0);
    free(text);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
