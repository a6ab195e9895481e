/* test-status — the status page renderer (src/exporter/status.c): every outside string
 * HTML-escaped, health and its reason, the ring of recent XIDs newest first, the pods list
 * capped with a count of the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "tap.h"

static char *render(const struct status_gpu *g, unsigned n)
{
    char *page = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&page, &len);
    REQUIRE(f);
    CHECK_EQ_INT(status_render(f, g, n, "node<1>", "580.1", 1700000000), 0);
    fclose(f);
    return page;
}

static void gpu(struct status_gpu *g, unsigned i)
{
    memset(g, 0, sizeof *g);
    g->index = i;
    snprintf(g->uuid, sizeof g->uuid, "GPU-%u", i);
    snprintf(g->name, sizeof g->name, "Model");
}

TEST(strings_from_outside_are_escaped)
{
    static struct status_gpu g;
    gpu(&g, 0);
    snprintf(g.name, sizeof g.name, "<script>alert(1)</script>");
    snprintf(g.uuid, sizeof g.uuid, "GPU-\"x\"&y");
    g.npods = 1;
    snprintf(g.pods[0].namespace_, sizeof g.pods[0].namespace_, "ns");
    snprintf(g.pods[0].pod, sizeof g.pods[0].pod, "p'<b>");
    snprintf(g.pods[0].container, sizeof g.pods[0].container, "c");
    char *p = render(&g, 1);
    CHECK(!strstr(p, "<script>"));
    CHECK(!strstr(p, "<b>"));
    CHECK(!strstr(p, "node<1>"));
    CHECK(strstr(p, "&lt;script&gt;alert(1)&lt;/script&gt;"));
    CHECK(strstr(p, "data-uuid=\"GPU-&quot;x&quot;&amp;y\""));
    CHECK(strstr(p, "data-pod=\"ns/p&#39;&lt;b&gt;/c\""));
    free(p);
}

TEST(health_names_the_first_reason)
{
    static struct status_gpu g;
    const char *why;
    gpu(&g, 0);
    CHECK_EQ_STR(status_health(&g, &why), "degraded");
    CHECK_EQ_STR(why, "NVML does not answer for it");
    g.temp_ok = true;
    CHECK_EQ_STR(status_health(&g, &why), "ok");
    CHECK_EQ_STR(why, "");
    g.reasons_ok = true;
    g.clock_event_reasons = 0x40; /* hw thermal slowdown */
    CHECK_EQ_STR(status_health(&g, &why), "degraded");
    CHECK_EQ_STR(why, "thermal slowdown");
    g.remap_ok = true;
    g.remap_pending = true;
    status_health(&g, &why);
    CHECK_EQ_STR(why, "row remap pending (reset the GPU)");
    status_note_xid(&g.xids, 13, 1); /* an application error: not fatal */
    status_health(&g, &why);
    CHECK_EQ_STR(why, "row remap pending (reset the GPU)");
    status_note_xid(&g.xids, 79, 2);
    status_health(&g, &why);
    CHECK_EQ_STR(why, "fatal XID");
    char *p = render(&g, 1);
    CHECK(strstr(p, "data-health=\"degraded\""));
    CHECK(strstr(p, "<li data-xid=\"79\">XID 79 at 1970-01-01 00:00:02 UTC</li>"
                    "<li data-xid=\"13\">"));
    free(p);
}

TEST(recent_xids_ring_keeps_the_newest)
{
    static struct status_gpu g;
    gpu(&g, 0);
    for (unsigned k = 1; k <= STATUS_RECENT_XIDS + 3; k++)
        status_note_xid(&g.xids, 100 + k, (time_t)k);
    char *p = render(&g, 1);
    char first[64];
    snprintf(first, sizeof first, "<ul><li data-xid=\"%u\">", 100 + STATUS_RECENT_XIDS + 3);
    CHECK(strstr(p, first));
    CHECK(!strstr(p, "data-xid=\"103\""));
    CHECK(strstr(p, "data-xid=\"104\""));
    CHECK(strstr(p, "(3 older)"));
    free(p);
}

TEST(rows_per_gpu_with_values_and_unknowns)
{
    static struct status_gpu g[2];
    gpu(&g[0], 0);
    gpu(&g[1], 1);
    g[0].util_ok = g[0].mem_ok = g[0].temp_ok = g[0].power_ok = true;
    g[0].utilization = 0.42;
    g[0].memory_used = 1024ull << 20;
    g[0].memory_total = 4096ull << 20;
    g[0].temperature = 71;
    g[0].power_watts = 250;
    g[0].npods = 1;
    g[0].pods_dropped = 2;
    snprintf(g[0].pods[0].pod_uid, sizeof g[0].pods[0].pod_uid, "u-1");
    g[0].pods[0].memory_bytes = 64ull << 20;
    char *p = render(g, 2);
    CHECK(strstr(p, "<tr class=\"gpu\" data-gpu=\"0\" data-uuid=\"GPU-0\" data-health=\"ok\">"));
    CHECK(strstr(p, "data-gpu=\"1\""));
    CHECK(strstr(p, "42%"));
    CHECK(strstr(p, "1024 MiB / 4096 MiB"));
    CHECK(strstr(p, "71 &deg;C"));
    CHECK(strstr(p, "250 W"));
    CHECK(strstr(p, "data-pod=\"uid:u-1\" data-memory-bytes=\"67108864\""));
    CHECK(strstr(p, "(2 more)"));
    CHECK(strstr(p, "<td class=\"util\"><span class=\"none\">n/a</span>")); /* GPU 1 */
    CHECK(strstr(p, "</html>\n"));
    free(p);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
