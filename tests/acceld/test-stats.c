/* test-stats.c — acceld's SLI counters and the acceld-stats.json format: counting, the
 * histogram's buckets, a write read back unchanged through the file, and the strict
 * reader refusing what does not add up (each refusal names where). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs.h"
#include "acceld-stats.h"
#include "tap.h"

#define MS 1000000ull

static void fill(struct acceld_stats *s)
{
    acceld_stats_init(s, 1764000000.25);
    acceld_stats_registration(s, "nvidia.com/gpu", false);
    acceld_stats_registration(s, "nvidia.com/gpu", true);
    acceld_stats_registration(s, "tencent.com/vcuda-core", true);
    acceld_stats_allocate(s, "nvidia.com/gpu", true, MS / 10);     /* 0.1 ms */
    acceld_stats_allocate(s, "nvidia.com/gpu", true, 3 * MS);      /* 3 ms */
    acceld_stats_allocate(s, "nvidia.com/gpu", false, 20000 * MS); /* 20 s: beyond the last */
    for (int i = 0; i < 4; i++)
        acceld_stats_device_init(s, true);
    acceld_stats_device_init(s, false);
    acceld_stats_add_gpu(s, 0, "GPU-aaaa");
    acceld_stats_add_gpu(s, 3, "GPU-bbbb");
    acceld_stats_health(s, "GPU-bbbb", false);
    acceld_stats_health(s, "GPU-bbbb", true);
    acceld_stats_health(s, "GPU-bbbb", false);
    acceld_stats_health(s, "GPU-none", false); /* unknown GPU: not counted */
    acceld_stats_set_health_state(s, "GPU-bbbb", false, "XID 79\n(bus)"); /* '\n' becomes '?' */
    acceld_stats_set_mps_restarts(s, "GPU-aaaa", 5);
    acceld_stats_set_mps_state(s, "GPU-aaaa", ACCELD_STATS_MPS_FAULT);
    acceld_stats_quota(s, ACCELD_STATS_QUOTA_MEMORY, ACCELD_STATS_ACTION_KILL);
    acceld_stats_quota(s, ACCELD_STATS_QUOTA_COMPUTE, ACCELD_STATS_ACTION_FREEZE);
    acceld_stats_quota(s, ACCELD_STATS_QUOTA_COMPUTE, ACCELD_STATS_ACTION_FREEZE);
}

TEST(counting)
{
    static struct acceld_stats s;
    fill(&s);
    REQUIRE_EQ_INT(s.n_resources, 2);
    CHECK_EQ_STR(s.res[0].name, "nvidia.com/gpu");
    CHECK_EQ_U64(s.res[0].reg_ok, 1);
    CHECK_EQ_U64(s.res[0].reg_failed, 1);
    CHECK_EQ_U64(s.res[0].alloc_ok, 2);
    CHECK_EQ_U64(s.res[0].alloc_error, 1);
    /* buckets: 0.0005 holds the 0.1 ms call, 0.005 the 3 ms one too, none the 20 s one */
    CHECK_EQ_U64(s.res[0].bucket[0], 1);
    CHECK_EQ_U64(s.res[0].bucket[2], 1);
    CHECK_EQ_U64(s.res[0].bucket[3], 2);
    CHECK_EQ_U64(s.res[0].bucket[ACCELD_STATS_NBUCKETS - 1], 2);
    CHECK(s.res[0].alloc_sum > 20.003 && s.res[0].alloc_sum < 20.0032);
    CHECK_EQ_U64(s.res[1].reg_ok, 1);
    CHECK_EQ_U64(s.init_ok, 4);
    CHECK_EQ_U64(s.init_failed, 1);
    REQUIRE_EQ_INT(s.n_gpus, 2);
    CHECK_EQ_U64(s.gpus[1].index, 3);
    CHECK_EQ_U64(s.gpus[1].to_unhealthy, 2);
    CHECK_EQ_U64(s.gpus[1].to_healthy, 1);
    CHECK_EQ_U64(s.gpus[0].mps_restarts, 5);
    CHECK(s.gpus[0].has_state && s.gpus[0].healthy);
    CHECK_EQ_STR(s.gpus[0].reason, "");
    CHECK_EQ_INT(s.gpus[0].mps, ACCELD_STATS_MPS_FAULT);
    CHECK(s.gpus[1].has_state && !s.gpus[1].healthy);
    CHECK_EQ_STR(s.gpus[1].reason, "XID 79?(bus)");
    CHECK_EQ_INT(s.gpus[1].mps, ACCELD_STATS_MPS_NONE);
    CHECK_EQ_U64(s.quota[ACCELD_STATS_QUOTA_MEMORY][ACCELD_STATS_ACTION_KILL], 1);
    CHECK_EQ_U64(s.quota[ACCELD_STATS_QUOTA_COMPUTE][ACCELD_STATS_ACTION_FREEZE], 2);
    /* the same restarts again change nothing: no rewrite is due */
    uint64_t gen = s.generation;
    acceld_stats_set_mps_restarts(&s, "GPU-aaaa", 5);
    CHECK_EQ_U64(s.generation, gen);
    acceld_stats_set_mps_restarts(&s, "GPU-aaaa", 6);
    CHECK(s.generation != gen);
    /* health state: the same again changes nothing; healthy clears the reason; unhealthy
     * without a reason says "unknown" */
    gen = s.generation;
    acceld_stats_set_health_state(&s, "GPU-bbbb", false, "XID 79\n(bus)");
    acceld_stats_set_mps_state(&s, "GPU-aaaa", ACCELD_STATS_MPS_FAULT);
    CHECK_EQ_U64(s.generation, gen);
    acceld_stats_set_health_state(&s, "GPU-bbbb", true, "ignored");
    CHECK(s.gpus[1].healthy);
    CHECK_EQ_STR(s.gpus[1].reason, "");
    CHECK(s.generation != gen);
    acceld_stats_set_health_state(&s, "GPU-bbbb", false, NULL);
    CHECK_EQ_STR(s.gpus[1].reason, "unknown");
    acceld_stats_set_mps_state(&s, "GPU-aaaa", ACCELD_STATS_MPS_STATES); /* refused */
    CHECK_EQ_INT(s.gpus[0].mps, ACCELD_STATS_MPS_FAULT);
    CHECK_EQ_STR(acceld_stats_mps_state_name(ACCELD_STATS_MPS_DOWN), "down");
}

TEST(table_full)
{
    static struct acceld_stats s;
    acceld_stats_init(&s, 1);
    char name[32];
    for (int i = 0; i < ACCELD_STATS_MAX_RESOURCES + 3; i++) {
        snprintf(name, sizeof name, "example.com/r%d", i);
        acceld_stats_registration(&s, name, true);
    }
    CHECK_EQ_INT(s.n_resources, ACCELD_STATS_MAX_RESOURCES);
    char longname[ACCELD_STATS_NAME_MAX + 1];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    acceld_stats_init(&s, 1);
    acceld_stats_allocate(&s, longname, true, 1);
    CHECK_EQ_INT(s.n_resources, 0);
}

TEST(write_reads_back)
{
    static struct acceld_stats s, r;
    fill(&s);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/state/sub", tap_tmpdir()); /* created on the way */
    REQUIRE_EQ_INT(acceld_stats_write(&s, dir, 1764000100.5), 0);
    char path[600], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, ACCELD_STATS_FILE);
    struct stat st;
    CHECK_EQ_INT(stat(path, &st), 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0644);
    strcat(path, ".tmp");
    CHECK_NE_INT(stat(path, &st), 0); /* renamed away */
    path[strlen(path) - 4] = '\0';
    int rc = acceld_stats_read(path, &r, err, sizeof err);
    if (rc)
        tap_diag("%s", err);
    REQUIRE_EQ_INT(rc, 0);
    CHECK(r.start_time == s.start_time);
    CHECK(r.write_time == 1764000100.5);
    CHECK_EQ_U64(r.nbuckets, ACCELD_STATS_NBUCKETS);
    for (size_t k = 0; k < r.nbuckets; k++)
        CHECK(r.bounds[k] == acceld_stats_buckets[k]);
    r.write_time = s.write_time;
    r.generation = s.generation;
    CHECK(r.res[0].alloc_sum == s.res[0].alloc_sum);
    CHECK(memcmp(&r, &s, sizeof r) == 0); /* every field, every counter */
    /* a second write replaces the file */
    acceld_stats_allocate(&s, "nvidia.com/gpu", true, MS);
    REQUIRE_EQ_INT(acceld_stats_write(&s, dir, 1764000101.5), 0);
    REQUIRE_EQ_INT(acceld_stats_read(path, &r, err, sizeof err), 0);
    CHECK_EQ_U64(r.res[0].alloc_ok, 3);
    /* missing file: the read's errno */
    CHECK_EQ_INT(acceld_stats_read("/nonexistent/acceld-stats.json", &r, err, sizeof err), -ENOENT);
}

/* Formats fill()'s stats, replaces the first `from` with `to`, and parses that. */
static int parse_edited(const char *from, const char *to, char *err, size_t errlen)
{
    static struct acceld_stats s, r;
    fill(&s);
    char *text;
    size_t len;
    if (acceld_stats_format(&s, 1764000100.5, &text, &len) < 0)
        return -ENOMEM;
    char *at = strstr(text, from);
    if (!at) {
        tap_fail(__FILE__, __LINE__, "\"%s\" not in the file", from);
        free(text);
        return -EBADMSG;
    }
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    memset(&r, 0x5a, sizeof r);
    static struct acceld_stats before;
    memcpy(&before, &r, sizeof r);
    int rc = acceld_stats_parse(out, strlen(out), &r, err, errlen);
    if (rc < 0)
        CHECK(memcmp(&before, &r, sizeof r) == 0); /* untouched on failure */
    free(out);
    free(text);
    return rc;
}

TEST(strict_reader)
{
    static const struct {
        const char *from, *to, *msg;
    } cases[] = {
        {"\"version\": 2", "\"version\": 3", "version"},
        {"\"version\": 2", "\"version\": 0", "version"},
        {"\"version\": 2", "\"versionx\": 2", "unknown key \"versionx\""},
        /* version 1 has no current state: its keys are unknown there */
        {"\"version\": 2", "\"version\": 1", "gpus[0]: unknown key"},
        {"\"mps\": \"fault\"", "\"mps\": \"restarting\"", "gpus[0].mps"},
        {"\"mps\": \"fault\"", "\"mps\": 1", "gpus[0].mps"},
        {"\"healthy\": true", "\"healthy\": 1", "gpus[0].healthy"},
        {"\"reason\": \"\"", "\"reason\": \"XID 79\"", "while healthy"},
        {"\"reason\": \"XID 79?(bus)\"", "\"reason\": \"\"", "gpus[1].reason"},
        {"\"reason\": \"XID 79?(bus)\"", "\"reason\": \"XID\\t79\"", "printable ASCII"},
        {"\"reason\": \"XID 79?(bus)\",", "", "gpus[1]: \"reason\" is missing"},
        {"\"ok\": 2,", "\"ok\": -2,", "resources[0].allocate.ok"},
        {"\"ok\": 2,", "\"ok\": 2.5,", "resources[0].allocate.ok"},
        {"\"name\": \"tencent.com/vcuda-core\"", "\"name\": \"nvidia.com/gpu\"", "listed twice"},
        {"\"uuid\": \"GPU-bbbb\"", "\"uuid\": \"GPU-aaaa\"", "gpus[1].uuid"},
        {"\"uuid\": \"GPU-bbbb\"", "\"uuid\": \"GPU-\\nbbbb\"", "printable ASCII"},
        {"\"uuid\": \"GPU-bbbb\"", "\"uuid\": \"\"", "gpus[1].uuid"},
        {"\"toHealthy\": 1", "\"toHealthy\": 1, \"toHealthy\": 1", "not valid JSON"},
        {"\"freeze\": 2", "\"freeze\": \"2\"", "quotaFindings.compute.freeze"},
        {"\"compute\": {", "\"gpu\": {}, \"compute\": {", "unknown key \"gpu\""},
        {"\"startTime\": 1764000000.25", "\"startTime\": -1", "startTime"},
        {"\"allocateBuckets\": [", "\"allocateBuckets\": [0.001, ", "increasing"},
        {"\"deviceInit\": {", "\"deviceInit\": {\"skipped\": 1, ", "deviceInit"},
        {"\"sum\": ", "\"sum\": -", "sum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        int rc = parse_edited(cases[i].from, cases[i].to, err, sizeof err);
        CHECK_EQ_INT(rc, -EINVAL);
        if (!strstr(err, cases[i].msg))
            tap_fail(__FILE__, __LINE__, "case %zu: \"%s\" does not name \"%s\"", i, err,
                     cases[i].msg);
    }
    char err[256];
    static struct acceld_stats r;
    CHECK_EQ_INT(acceld_stats_parse("[]", 2, &r, err, sizeof err), -EINVAL);
    CHECK_EQ_INT(acceld_stats_parse("{", 1, &r, err, sizeof err), -EINVAL);
    CHECK_EQ_INT(acceld_stats_parse("{\"a\"\0:1}", 8, &r, err, sizeof err), -EINVAL);
}

/* A version 1 file (acceld before the GPUs' current state) still reads: its GPUs have no
 * state, so the exporter leaves their health out rather than inventing one. */
TEST(version1_reads)
{
    static const char v1[] =
        "{\"version\": 1, \"startTime\": 1, \"writeTime\": 2, \"deviceInit\": {\"ok\": 1, "
        "\"failed\": 0}, \"allocateBuckets\": [0.5], \"resources\": [], \"gpus\": [{\"index\": 0, "
        "\"uuid\": \"GPU-a\", \"toUnhealthy\": 1, \"toHealthy\": 1, \"mpsRestarts\": 0}], "
        "\"quotaFindings\": {\"memory\": {\"none\": 0, \"kill\": 0, \"freeze\": 0}, "
        "\"under_report\": {\"none\": 0, \"kill\": 0, \"freeze\": 0}, \"compute\": {\"none\": 0, "
        "\"kill\": 0, \"freeze\": 0}}}";
    static struct acceld_stats r;
    char err[256] = "";
    int rc = acceld_stats_parse(v1, sizeof v1 - 1, &r, err, sizeof err);
    if (rc)
        tap_diag("%s", err);
    REQUIRE_EQ_INT(rc, 0);
    REQUIRE_EQ_INT(r.n_gpus, 1);
    CHECK(!r.gpus[0].has_state);
    CHECK_EQ_U64(r.gpus[0].to_healthy, 1);
}

TEST(bucket_over_count_refused)
{
    char err[256] = "";
    /* ok 2 + error 0: the 20 s call is gone, every bucket still <= 2 */
    int rc = parse_edited("\"error\": 1", "\"error\": 0", err, sizeof err);
    CHECK_EQ_INT(rc, 0);
    rc = parse_edited("\"ok\": 2,", "\"ok\": 0,", err, sizeof err);
    CHECK_EQ_INT(rc, -EINVAL); /* buckets hold 2, count is 1 */
    CHECK(strstr(err, "exceed") != NULL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
