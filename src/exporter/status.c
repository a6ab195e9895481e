/*
 * status.c — the HTML status page (status.h). Every string that comes from outside (GPU names,
 * UUIDs, pod names) is HTML-escaped; the page refreshes itself every 5 s with a meta tag.
 * Rows carry data-* attributes (data-gpu, data-uuid, data-health, data-xid, data-pod) so tests
 * and scripts can read it without scraping the text.
 */
#include "status.h"

#include <inttypes.h>
#include <string.h>

/* XIDs that mean the GPU needs a reset or service (the same set as the AccelGpuFatalXid alert
 * in deploy/prometheus/accel-rules.yml). */
static const unsigned fatal_xids[] = {48, 74, 79, 94, 95, 119, 120};

void status_note_xid(struct status_xids *r, unsigned xid, time_t when)
{
    r->x[r->n % STATUS_RECENT_XIDS] = (struct status_xid){xid, when};
    r->n++;
}

static bool is_fatal(unsigned xid)
{
    for (size_t i = 0; i < sizeof fatal_xids / sizeof fatal_xids[0]; i++)
        if (fatal_xids[i] == xid)
            return true;
    return false;
}

const char *status_health(const struct status_gpu *g, const char **reason)
{
    unsigned kept = g->xids.n < STATUS_RECENT_XIDS ? g->xids.n : STATUS_RECENT_XIDS;
    *reason = "";
    for (unsigned k = 0; k < kept; k++)
        if (is_fatal(g->xids.x[k].xid)) {
            *reason = "fatal XID";
            return "degraded";
        }
    if (!g->util_ok && !g->mem_ok && !g->temp_ok && !g->power_ok)
        *reason = "NVML does not answer for it";
    else if (g->remap_ok && g->remap_failed)
        *reason = "row remap failed";
    else if (g->remap_ok && g->remap_pending)
        *reason = "row remap pending (reset the GPU)";
    else if (g->ecc_ok && g->ecc_uncorrected)
        *reason = "uncorrectable ECC errors";
    else if (g->reasons_ok && (g->clock_event_reasons & 0x60ULL)) /* sw/hw thermal slowdown */
        *reason = "thermal slowdown";
    return **reason ? "degraded" : "ok";
}

/* Writes s HTML-escaped. */
static void html(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&#39;", f);
            break;
        default:
            fputc(*s, f);
        }
}

static void mib(FILE *f, uint64_t bytes)
{
    fprintf(f, "%" PRIu64 " MiB", bytes >> 20);
}

static void utc(FILE *f, time_t t)
{
    struct tm tm;
    char s[32];
    if (gmtime_r(&t, &tm) && strftime(s, sizeof s, "%Y-%m-%d %H:%M:%S UTC", &tm))
        fputs(s, f);
}

static const char style[] =
    "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;width:100%}"
    "th,td{border-bottom:1px solid #ddd;padding:.4em .6em;text-align:left;vertical-align:top}"
    "th{background:#f4f4f4}.ok{color:#176f2c;font-weight:600}"
    ".degraded{color:#b00020;font-weight:600}.uuid{color:#666;font-size:12px}"
    ".bar{background:#eee;width:8em;height:.6em;border-radius:.3em}"
    ".bar span{display:block;height:100%;background:#3b73b9;border-radius:.3em}"
    "ul{margin:0;padding-left:1.1em}.none{color:#888}";

static void bar(FILE *f, double ratio)
{
    if (ratio < 0)
        ratio = 0;
    if (ratio > 1)
        ratio = 1;
    fprintf(f, "<div class=\"bar\"><span style=\"width:%.0f%%\"></span></div>", ratio * 100);
}

static void gpu_row(FILE *f, const struct status_gpu *g)
{
    const char *reason;
    const char *health = status_health(g, &reason);
    fprintf(f, "<tr class=\"gpu\" data-gpu=\"%u\" data-uuid=\"", g->index);
    html(f, g->uuid);
    fprintf(f, "\" data-health=\"%s\"><td>%u</td><td>", health, g->index);
    html(f, g->name);
    fputs("<div class=\"uuid\">", f);
    html(f, g->uuid);
    fprintf(f, "</div></td><td class=\"health %s\">%s", health, health);
    if (*reason)
        fprintf(f, "<div class=\"reason\">%s</div>", reason);
    fputs("</td><td class=\"util\">", f);
    if (g->util_ok) {
        fprintf(f, "%.0f%%", g->utilization * 100);
        bar(f, g->utilization);
    } else {
        fputs("<span class=\"none\">n/a</span>", f);
    }
    fputs("</td><td class=\"memory\">", f);
    if (g->mem_ok) {
        mib(f, g->memory_used);
        fputs(" / ", f);
        mib(f, g->memory_total);
        bar(f, g->memory_total ? (double)g->memory_used / (double)g->memory_total : 0);
    } else {
        fputs("<span class=\"none\">n/a</span>", f);
    }
    fputs("</td><td class=\"temperature\">", f);
    if (g->temp_ok)
        fprintf(f, "%u &deg;C", g->temperature);
    fputs("</td><td class=\"power\">", f);
    if (g->power_ok)
        fprintf(f, "%.0f W", g->power_watts);
    fputs("</td><td class=\"xids\">", f);
    if (!g->xids.n) {
        fputs("<span class=\"none\">none</span>", f);
    } else {
        unsigned kept = g->xids.n < STATUS_RECENT_XIDS ? g->xids.n : STATUS_RECENT_XIDS;
        fputs("<ul>", f);
        for (unsigned k = 0; k < kept; k++) { /* newest first */
            const struct status_xid *x = &g->xids.x[(g->xids.n - 1 - k) % STATUS_RECENT_XIDS];
            fprintf(f, "<li data-xid=\"%u\">XID %u at ", x->xid, x->xid);
            utc(f, x->when);
            fputs("</li>", f);
        }
        if (g->xids.n > kept)
            fprintf(f, "<li>(%u older)</li>", g->xids.n - kept);
        fputs("</ul>", f);
    }
    fputs("</td><td class=\"pods\">", f);
    if (!g->npods) {
        fputs("<span class=\"none\">none</span>", f);
    } else {
        fputs("<ul>", f);
        for (unsigned k = 0; k < g->npods; k++) {
            const struct status_pod *p = &g->pods[k];
            fputs("<li data-pod=\"", f);
            if (p->pod[0]) {
                html(f, p->namespace_);
                fputc('/', f);
                html(f, p->pod);
                fputc('/', f);
                html(f, p->container);
            } else {
                fputs("uid:", f);
                html(f, p->pod_uid);
            }
            fprintf(f, "\" data-memory-bytes=\"%" PRIu64 "\">", p->memory_bytes);
            if (p->pod[0]) {
                html(f, p->namespace_);
                fputc('/', f);
                html(f, p->pod);
                fputs(" (", f);
                html(f, p->container);
                fputc(')', f);
            } else {
                fputs("pod ", f);
                html(f, p->pod_uid);
            }
            fputs(": ", f);
            mib(f, p->memory_bytes);
            fputs("</li>", f);
        }
        if (g->pods_dropped)
            fprintf(f, "<li>(%u more)</li>", g->pods_dropped);
        fputs("</ul>", f);
    }
    fputs("</td></tr>\n", f);
}

int status_render(FILE *f, const struct status_gpu *g, unsigned n, const char *host,
                  const char *driver, time_t now)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<meta name=\"viewport\" content=\"width=device-width\">"
          "<meta http-equiv=\"refresh\" content=\"5\"><title>accel GPUs on ",
          f);
    html(f, host);
    fprintf(f, "</title><style>%s</style></head>\n<body><h1>GPUs on ", style);
    html(f, host);
    fputs("</h1><p>Driver ", f);
    html(f, driver);
    fprintf(f, ", %u GPU(s), sampled ", n);
    utc(f, now);
    fputs(". Metrics: <a href=\"/metrics\">/metrics</a>.</p>\n"
          "<table id=\"gpus\"><thead><tr><th>GPU</th><th>Model</th><th>Health</th>"
          "<th>Utilization</th><th>Memory</th><th>Temperature</th><th>Power</th>"
          "<th>Recent XIDs</th><th>Pods</th></tr></thead><tbody>\n",
          f);
    for (unsigned i = 0; i < n; i++)
        gpu_row(f, &g[i]);
    fputs("</tbody></table></body></html>\n", f);
    return ferror(f) ? -1 : 0;
}
