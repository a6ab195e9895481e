/*
 * sli.h — acceld's own SLIs in accel-exporter (docs/exporter.md, "The agent's SLIs"): the
 * sampler reads <state-dir>/acceld-stats.json (written by acceld, format in
 * src/nodestate/acceld-stats.h) once per round, keeps the last good copy when the file is missing or
 * bad (one log line per new problem), and renders the accel_agent_* families from it.
 *
 * Threads: the sampler thread only (never the scrape path).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* The agent counts as up while its file was read and written at most this long ago
 * (acceld rewrites it at least every 10 s). */
#define EXPORTER_SLI_STALE_S 30.0

struct exporter_sli;

/* Reads state_dir/acceld-stats.json from now on. Returns 0 or -ENOMEM/-ENAMETOOLONG. */
int exporter_sli_new(const char *state_dir, struct exporter_sli **ret);
struct exporter_sli *exporter_sli_free(struct exporter_sli *s);

/* Reads the file again; now: Unix seconds (for staleness). */
void exporter_sli_refresh(struct exporter_sli *s, double now);
/* 1 while the agent's file is good and fresh. */
bool exporter_sli_up(const struct exporter_sli *s);

/* Where the families go: family() writes HELP/TYPE and says whether the family is on
 * (the exporter's config may turn it off); print() appends text. */
struct exporter_sli_out {
    bool (*family)(void *ctx, const char *name, const char *type, const char *help);
    void (*print)(void *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    void *ctx;
};
void exporter_sli_render(const struct exporter_sli *s, const struct exporter_sli_out *out);
