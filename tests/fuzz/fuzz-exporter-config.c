/* fuzz-exporter-config.c — libFuzzer target for accel-exporter's config parser
 * (src/exporter/expconfig.c): any bytes in, either settings that hold their invariants (a
 * listen address that parses, an interval of at least 10 ms, every string NUL-terminated in
 * its field, each disabled family a known one, once) or a refusal that leaves the settings
 * untouched and says where: "fuzz:LINE:COLUMN: ...". */
#include <errno.h>
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct exporter_config c, d;
    char err[512];
    struct sockaddr_in sa;
    unsigned long line, col;

    if (size > 65536)
        return 0;
    exporter_config_defaults(&c);
    d = c;
    err[0] = '\0';
    int r = exporter_config_parse(&c, (const char *)data, size, "fuzz", err, sizeof err);
    if (r < 0) {
        if (r != -EINVAL && r != -ENOMEM)
            abort();
        if (memcmp(&c, &d, sizeof c) != 0)
            abort();
        if (r == -EINVAL && (sscanf(err, "fuzz:%lu:%lu: ", &line, &col) != 2 || !line || !col))
            abort();
        return 0;
    }
    if (exporter_parse_listen(c.listen, &sa) < 0 || c.interval_ns < 10000000ULL)
        abort();
    if (!memchr(c.nvml_library, 0, sizeof c.nvml_library) ||
        !memchr(c.proc_root, 0, sizeof c.proc_root) ||
        !memchr(c.pod_resources_socket, 0, sizeof c.pod_resources_socket) ||
        !memchr(c.state_dir, 0, sizeof c.state_dir) || !memchr(c.log_level, 0, sizeof c.log_level))
        abort();
    if (c.ndisabled > EXPORTER_CONFIG_MAX_DISABLED)
        abort();
    for (size_t i = 0; i < c.ndisabled; i++) {
        const char *const *f = exporter_metric_families;
        while (*f && *f != c.disabled[i])
            f++;
        if (!*f)
            abort();
        for (size_t j = 0; j < i; j++)
            if (c.disabled[j] == c.disabled[i])
                abort();
    }
    /* the price table: bounded, named, each price a finite number of at least 0, once */
    if (c.nprices > EXPORTER_CONFIG_MAX_PRICES ||
        !memchr(c.cost_currency, 0, sizeof c.cost_currency))
        abort();
    for (size_t i = 0; i < c.nprices; i++) {
        if (!c.prices[i].resource[0] ||
            !memchr(c.prices[i].resource, 0, sizeof c.prices[i].resource) ||
            !(c.prices[i].per_hour >= 0) || c.prices[i].per_hour > DBL_MAX)
            abort();
        for (size_t j = 0; j < i; j++)
            if (strcmp(c.prices[j].resource, c.prices[i].resource) == 0)
                abort();
    }
    /* what --check-config prints parses back to the same settings */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f || exporter_config_write(f, &c) < 0 || fclose(f) != 0)
        abort();
    exporter_config_defaults(&d);
    if (exporter_config_parse(&d, text, len, "written", err, sizeof err) < 0 ||
        memcmp(&c, &d, sizeof c) != 0)
        abort();
    free(text);
    return 0;
}
