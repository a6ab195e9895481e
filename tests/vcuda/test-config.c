/* Unit tests for libvcuda's config: the file format, the environment, and
 * the rule that a present file wins over the environment. */
#include "vcuda-config.h"
#include "region.h"
#include "tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int parse(const char *text, struct vc_config *cfg, char *err, size_t errlen)
{
    vc_config_init(cfg);
    return vc_config_parse(text, strlen(text), cfg, err, errlen);
}

TEST(config_full_file)
{
    struct vc_config c;
    char err[256] = "";
    const char *text = "# written by acceld\n"
                       "memory_limit = 4Gi\n"
                       "core_limit=30   # percent\n"
                       "core_policy = burst\n"
                       "\n"
                       "region = /var/lib/accel/vgpu/pod/ctr/usage\n"
                       "devices = GPU-aaaa, GPU-bbbb\n"
                       "context_memory = 300Mi\n";
    REQUIRE_EQ_INT(parse(text, &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_FILE);
    CHECK_EQ_U64(c.memory_limit, 4ull << 30);
    CHECK_EQ_INT(c.core_limit, 30);
    CHECK_EQ_INT(c.core_policy, VC_CORE_POLICY_BURST);
    CHECK_EQ_STR(c.region, "/var/lib/accel/vgpu/pod/ctr/usage");
    CHECK_EQ_INT(c.device_count, 2);
    CHECK_EQ_STR(c.device_uuid[0], "GPU-aaaa");
    CHECK_EQ_STR(c.device_uuid[1], "GPU-bbbb");
    CHECK_EQ_U64(c.context_memory, 300ull << 20);
}

TEST(config_defaults)
{
    struct vc_config c;
    char err[256];
    REQUIRE_EQ_INT(parse("", &c, err, sizeof(err)), 0);
    CHECK_EQ_U64(c.memory_limit, 0);
    CHECK_EQ_INT(c.core_limit, 0);
    CHECK_EQ_INT(c.core_policy, VC_CORE_POLICY_HARD);
    CHECK_EQ_U64(c.context_memory, VC_CONFIG_DEFAULT_CONTEXT_MEMORY);
    CHECK_EQ_STR(c.region, "");
}

/* Each bad input is rejected with a message naming the line, and leaves the
 * config as it was. */
TEST(config_rejects_bad_input_and_changes_nothing)
{
    static const struct {
        const char *text, *needle;
    } bad[] = {
        {"memory_limit = lots\n", "line 1: memory_limit"},
        {"memory_limit = -1\n", "line 1: memory_limit"},
        {"core_limit = 0\n", "core_limit"},
        {"core_limit = 101\n", "core_limit"},
        {"core_limit = 30%\n", "core_limit"},
        {"core_policy = soft\n", "core_policy"},
        {"region = relative/path\n", "absolute"},
        {"\n\nfoo = 1\n", "line 3: unknown key"},
        {"memory_limit 4Gi\n", "expected key = value"},
        {"memory_limit =\n", "no value"},
        {"memory_limit = 1Gi\nmemory_limit = 2Gi\n", "line 2: memory_limit given twice"},
        {"devices = GPU-a,,GPU-b\n", "device UUID 2"},
        {"devices = GPU-a,\n", "trailing comma"},
        {"devices = GPU a\n", "character"},
        {"memory_limit = 99999999999999999999999\n", "memory_limit"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct vc_config c;
        vc_config_init(&c);
        c.memory_limit = 12345;
        char err[256] = "";
        int r = vc_config_parse(bad[i].text, strlen(bad[i].text), &c, err, sizeof(err));
        if (!CHECK(r == -EINVAL))
            tap_diag("input %zu accepted: %s", i, bad[i].text);
        if (!strstr(err, bad[i].needle))
            tap_fail(__FILE__, __LINE__, "input %zu: error \"%s\" lacks \"%s\"", i, err,
                     bad[i].needle);
        CHECK_EQ_U64(c.memory_limit, 12345);
        CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_NONE);
    }
}

TEST(config_rejects_nul_and_long_lines)
{
    struct vc_config c;
    vc_config_init(&c);
    char err[256];
    const char nul[] = "memory_limit = 1Gi\0core_limit = 5\n";
    CHECK_EQ_INT(vc_config_parse(nul, sizeof(nul) - 1, &c, err, sizeof(err)), -EINVAL);
    char *big = malloc(5000);
    REQUIRE(big);
    memset(big, 'a', 4999);
    big[4999] = '\0';
    CHECK_EQ_INT(vc_config_parse(big, strlen(big), &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "longer") != NULL);
    free(big);
}

static const char *fake_env[][2] = {
    {"VCUDA_MEMORY_LIMIT", "1.5Gi"},
    {"VCUDA_CORE_LIMIT", "50"},
    {"VCUDA_REGION", "/tmp/region"},
    {NULL, NULL},
};

static char *fake_getenv(const char *name)
{
    for (int i = 0; fake_env[i][0]; i++)
        if (strcmp(fake_env[i][0], name) == 0)
            return (char *)fake_env[i][1];
    return NULL;
}

static char *bad_getenv(const char *name)
{
    return strcmp(name, "VCUDA_CORE_LIMIT") == 0 ? (char *)"150" : NULL;
}

TEST(config_from_environment)
{
    struct vc_config c;
    vc_config_init(&c);
    char err[256];
    REQUIRE_EQ_INT(vc_config_from_env(fake_getenv, &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_ENV);
    CHECK_EQ_U64(c.memory_limit, 3ull << 29);
    CHECK_EQ_INT(c.core_limit, 50);
    CHECK_EQ_STR(c.region, "/tmp/region");

    vc_config_init(&c);
    CHECK_EQ_INT(vc_config_from_env(bad_getenv, &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "VCUDA_CORE_LIMIT") != NULL);
    CHECK_EQ_INT(c.core_limit, 0);
}

/* The environment the tests hand vc_config_load, as a tenant would set it. */
static const char *tenant_env[][2] = {
    {"VCUDA_MEMORY_LIMIT", NULL},   {"VCUDA_CORE_LIMIT", NULL}, {"VCUDA_CORE_POLICY", NULL},
    {"VCUDA_CONTEXT_MEMORY", NULL}, {"VCUDA_REGION", NULL},     {"VCUDA_DEVICES", NULL},
    {"VCUDA_CONFIG", NULL},
};

static char *tenant_getenv(const char *name)
{
    for (size_t i = 0; i < sizeof(tenant_env) / sizeof(tenant_env[0]); i++)
        if (strcmp(name, tenant_env[i][0]) == 0)
            return (char *)tenant_env[i][1];
    return NULL;
}

static void tenant_set(const char *name, const char *value)
{
    for (size_t i = 0; i < sizeof(tenant_env) / sizeof(tenant_env[0]); i++)
        if (strcmp(name, tenant_env[i][0]) == 0)
            tenant_env[i][1] = value;
}

static void tenant_clear(void)
{
    for (size_t i = 0; i < sizeof(tenant_env) / sizeof(tenant_env[0]); i++)
        tenant_env[i][1] = NULL;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    fclose(f);
}

TEST(agent_file_wins_over_environment)
{
    char agent[512], mine[600], missing[600];
    snprintf(agent, sizeof(agent), "%s/agent-config", tap_tmpdir());
    snprintf(mine, sizeof(mine), "%s/tenant-config", tap_tmpdir());
    snprintf(missing, sizeof(missing), "%s/none", tap_tmpdir());
    write_file(agent, "memory_limit = 1Gi\ncore_limit = 30\ncore_policy = burst\n");
    write_file(mine, "memory_limit = 0\n");
    struct vc_config c;
    char err[256], note[1024];

    /* Every loosening route of the issue: ignored, and said so. */
    tenant_clear();
    tenant_set("VCUDA_CONFIG", missing);
    tenant_set("VCUDA_MEMORY_LIMIT", "64Gi");
    tenant_set("VCUDA_CORE_LIMIT", "100");
    tenant_set("VCUDA_REGION", "/tmp/my-own-region");
    REQUIRE_EQ_INT(vc_config_load(agent, tenant_getenv, &c, err, sizeof(err), note, sizeof(note)),
                   0);
    CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_AGENT);
    CHECK_EQ_U64(c.memory_limit, 1ull << 30);
    CHECK_EQ_INT(c.core_limit, 30);
    CHECK_EQ_STR(c.region, "");
    CHECK(strstr(note, "VCUDA_CONFIG ignored") != NULL);
    CHECK(strstr(note, "VCUDA_MEMORY_LIMIT ignored") != NULL);
    CHECK(strstr(note, "VCUDA_CORE_LIMIT ignored") != NULL);
    CHECK(strstr(note, "VCUDA_REGION ignored") != NULL);

    /* VCUDA_CONFIG pointing at a file of the tenant's own with no limit. */
    tenant_clear();
    tenant_set("VCUDA_CONFIG", mine);
    REQUIRE_EQ_INT(vc_config_load(agent, tenant_getenv, &c, err, sizeof(err), note, sizeof(note)),
                   0);
    CHECK_EQ_U64(c.memory_limit, 1ull << 30);

    /* 0 means unlimited: never tighter. */
    tenant_clear();
    tenant_set("VCUDA_MEMORY_LIMIT", "0");
    REQUIRE_EQ_INT(vc_config_load(agent, tenant_getenv, &c, err, sizeof(err), note, sizeof(note)),
                   0);
    CHECK_EQ_U64(c.memory_limit, 1ull << 30);

    /* A variable may tighten: lower limits, a larger context charge, hard policy. */
    tenant_clear();
    tenant_set("VCUDA_MEMORY_LIMIT", "512Mi");
    tenant_set("VCUDA_CORE_LIMIT", "10");
    tenant_set("VCUDA_CORE_POLICY", "hard");
    tenant_set("VCUDA_CONTEXT_MEMORY", "1Gi");
    REQUIRE_EQ_INT(vc_config_load(agent, tenant_getenv, &c, err, sizeof(err), note, sizeof(note)),
                   0);
    CHECK_EQ_U64(c.memory_limit, 512ull << 20);
    CHECK_EQ_INT(c.core_limit, 10);
    CHECK_EQ_INT(c.core_policy, VC_CORE_POLICY_HARD);
    CHECK_EQ_U64(c.context_memory, 1ull << 30);
    CHECK_EQ_STR(note, "");

    /* No agent file (standalone): VCUDA_CONFIG, else the environment. */
    tenant_clear();
    tenant_set("VCUDA_CONFIG", mine);
    tenant_set("VCUDA_MEMORY_LIMIT", "64Gi");
    REQUIRE_EQ_INT(vc_config_load(missing, tenant_getenv, &c, err, sizeof(err), note, sizeof(note)),
                   0);
    CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_FILE);
    CHECK_EQ_U64(c.memory_limit, 0);
    tenant_set("VCUDA_CONFIG", missing);
    REQUIRE_EQ_INT(vc_config_load(missing, tenant_getenv, &c, err, sizeof(err), note, sizeof(note)),
                   0);
    CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_ENV);
    CHECK_EQ_U64(c.memory_limit, 64ull << 30);
    tenant_clear();
}

/* An agent's file that cannot be read or parsed is an error (the library then
 * fails closed), never a fallback to VCUDA_CONFIG or the environment. */
TEST(broken_or_unreadable_agent_file_is_an_error)
{
    char agent[512], mine[600];
    snprintf(agent, sizeof(agent), "%s/agent-broken", tap_tmpdir());
    snprintf(mine, sizeof(mine), "%s/tenant-ok", tap_tmpdir());
    write_file(mine, "memory_limit = 0\n");
    write_file(agent, "memory_limit = 1Gi\nbogus\n");
    tenant_clear();
    tenant_set("VCUDA_CONFIG", mine);
    tenant_set("VCUDA_MEMORY_LIMIT", "64Gi");
    struct vc_config c;
    vc_config_init(&c);
    c.memory_limit = 12345;
    char err[256];
    CHECK_EQ_INT(vc_config_load(agent, tenant_getenv, &c, err, sizeof(err), NULL, 0), -EINVAL);
    CHECK(strstr(err, agent) != NULL);
    CHECK(strstr(err, "line 2") != NULL);
    CHECK_EQ_U64(c.memory_limit, 12345); /* untouched */
    /* A directory where the file should be: read fails (EISDIR). */
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/agent-dir", tap_tmpdir());
    REQUIRE_EQ_INT(mkdir(dir, 0700), 0);
    CHECK(vc_config_load(dir, tenant_getenv, &c, err, sizeof(err), NULL, 0) < 0);
    CHECK(strstr(err, dir) != NULL);
    /* Unreadable (skipped as root, who reads anything). */
    if (geteuid() != 0) {
        write_file(agent, "memory_limit = 1Gi\n");
        REQUIRE_EQ_INT(chmod(agent, 0), 0);
        CHECK_EQ_INT(vc_config_load(agent, tenant_getenv, &c, err, sizeof(err), NULL, 0), -EACCES);
        CHECK(strstr(err, "Permission denied") != NULL);
    }
    tenant_clear();
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
