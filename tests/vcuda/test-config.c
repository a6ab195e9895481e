/* Unit tests for libvcuda's config: the file format, the environment, and
 * the rule that a present file wins over the environment. */
#include "config.h"
#include "region.h"
#include "tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

TEST(config_file_wins_over_environment)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/config", tap_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("memory_limit = 1Gi\n", f);
    fclose(f);
    setenv("VCUDA_MEMORY_LIMIT", "64Gi", 1);
    setenv("VCUDA_CORE_LIMIT", "100", 1);
    struct vc_config c;
    char err[256];
    REQUIRE_EQ_INT(vc_config_load(path, &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_FILE);
    CHECK_EQ_U64(c.memory_limit, 1ull << 30);
    CHECK_EQ_INT(c.core_limit, 0); /* not taken from the environment */

    /* No file: the environment applies. */
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/none", tap_tmpdir());
    REQUIRE_EQ_INT(vc_config_load(missing, &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.source, VC_CONFIG_SOURCE_ENV);
    CHECK_EQ_U64(c.memory_limit, 64ull << 30);

    /* A broken file is an error (the library then fails closed), not a
     * fallback to the environment. */
    f = fopen(path, "w");
    REQUIRE(f);
    fputs("memory_limit = 1Gi\nbogus\n", f);
    fclose(f);
    CHECK_EQ_INT(vc_config_load(path, &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, path) != NULL);
    CHECK(strstr(err, "line 2") != NULL);
    unsetenv("VCUDA_MEMORY_LIMIT");
    unsetenv("VCUDA_CORE_LIMIT");
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
