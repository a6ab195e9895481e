/* test-config.c — acceld's config: defaults, every key through the YAML file
 * and through acceld_config_set (the flag path), and the errors a broken file
 * must produce (file:line, key named, config unchanged). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "acceld-config.h"
#include "fs.h"
#include "tap.h"
#include "util.h"

static int parse(struct acceld_config *c, const char *yaml, char *err, size_t len)
{
    return acceld_config_parse(c, yaml, strlen(yaml), "test.yaml", err, len);
}

TEST(defaults)
{
    struct acceld_config c;
    acceld_config_defaults(&c);
    CHECK_EQ_STR(c.plugin_dir, "/var/lib/kubelet/device-plugins");
    CHECK_EQ_STR(c.resource_name, "nvidia.com/gpu");
    CHECK_EQ_STR(c.dev_root, "/dev");
    CHECK_EQ_STR(c.cdi_dir, "/var/run/cdi");
    CHECK_EQ_STR(c.cdi_vendor, "nvidia.com");
    CHECK_EQ_STR(c.cdi_class, "gpu");
    CHECK_EQ_STR(c.state_dir, "/var/lib/accel");
    CHECK_EQ_INT(c.strategy, ACCELD_STRATEGY_ENVVAR);
    CHECK_EQ_U64(c.recover_after_ns, 0);
    CHECK(!c.no_register);
    REQUIRE_EQ_INT(c.n_ignored_xids, 6);
    int want[] = {13, 31, 43, 45, 68, 109};
    for (int i = 0; i < 6; i++)
        CHECK(acceld_config_xid_ignored(&c, want[i]));
    CHECK(!acceld_config_xid_ignored(&c, 79));
    char sock[128];
    acceld_config_socket_name(&c, sock, sizeof(sock));
    CHECK_EQ_STR(sock, "accel-nvidia.com-gpu.sock");
}

TEST(full_file)
{
    struct acceld_config c;
    char err[512] = "";
    acceld_config_defaults(&c);
    const char *y = "# acceld\n"
                    "devicePluginDir: /tmp/dp\n"
                    "resourceName: example.com/gpu\n"
                    "nvmlLibrary: /opt/lib/libnvidia-ml.so.1\n"
                    "sysfsRoot: /tmp/sys\n"
                    "devRoot: /tmp/dev\n"
                    "stateDir: /tmp/state\n"
                    "logLevel: debug\n"
                    "noRegister: true\n"
                    "deviceListStrategy: cdi\n"
                    "cdi:\n"
                    "  dir: /tmp/cdi\n"
                    "  vendor: example.com\n"
                    "  class: accel\n"
                    "health:\n"
                    "  ignoredXids: [13, 48]\n"
                    "  recoverAfter: 90s\n";
    REQUIRE_EQ_INT(parse(&c, y, err, sizeof(err)), 0);
    CHECK_EQ_STR(c.plugin_dir, "/tmp/dp");
    CHECK_EQ_STR(c.resource_name, "example.com/gpu");
    CHECK_EQ_STR(c.nvml_library, "/opt/lib/libnvidia-ml.so.1");
    CHECK_EQ_STR(c.sysfs_root, "/tmp/sys");
    CHECK_EQ_STR(c.dev_root, "/tmp/dev");
    CHECK_EQ_STR(c.state_dir, "/tmp/state");
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_DEBUG);
    CHECK(c.no_register);
    CHECK_EQ_INT(c.strategy, ACCELD_STRATEGY_CDI);
    CHECK_EQ_STR(c.cdi_dir, "/tmp/cdi");
    CHECK_EQ_STR(c.cdi_vendor, "example.com");
    CHECK_EQ_STR(c.cdi_class, "accel");
    CHECK_EQ_INT(c.n_ignored_xids, 2);
    CHECK(acceld_config_xid_ignored(&c, 48));
    CHECK(!acceld_config_xid_ignored(&c, 31));
    CHECK_EQ_U64(c.recover_after_ns, 90ull * 1000000000ull);
    char buf[256];
    CHECK_EQ_INT(acceld_config_format(&c, "health.ignoredXids", buf, sizeof(buf)), 0);
    CHECK_EQ_STR(buf, "13,48");
    CHECK_EQ_INT(acceld_config_format(&c, "health.recoverAfter", buf, sizeof(buf)), 0);
    CHECK_EQ_STR(buf, "90s");
}

TEST(empty_file_and_empty_list)
{
    struct acceld_config c, d;
    char err[256];
    acceld_config_defaults(&c);
    d = c;
    CHECK_EQ_INT(parse(&c, "", err, sizeof(err)), 0);
    CHECK_EQ_INT(parse(&c, "# only a comment\n", err, sizeof(err)), 0);
    CHECK_EQ_INT(parse(&c, "---\n", err, sizeof(err)), 0);
    CHECK(memcmp(&c, &d, sizeof(c)) == 0);
    CHECK_EQ_INT(parse(&c, "health:\n  ignoredXids: []\n", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.n_ignored_xids, 0);
    CHECK_EQ_INT(parse(&c, "health:\n  ignoredXids: \"13, 31\"\n", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.n_ignored_xids, 2);
}

/* Each broken document: the error names the line and the key, and the
 * config is untouched. */
TEST(errors_name_line_and_key)
{
    static const struct {
        const char *yaml;
        const char *want; /* substring of the message */
    } cases[] = {
        {"logLevel: info\nbogus: 1\n", "test.yaml:2: unknown key \"bogus\""},
        {"cdi:\n  dir: /x\n  colour: red\n", "test.yaml:3: unknown key \"cdi.colour\""},
        {"logLevel: loud\n", "test.yaml:1: logLevel: \"loud\" is not one of"},
        {"\n\ndevRoot: relative/dev\n",
         "test.yaml:3: devRoot: \"relative/dev\" is not an absolute"},
        {"health:\n  recoverAfter: soon\n", "test.yaml:2: health.recoverAfter: \"soon\""},
        {"health:\n  ignoredXids: [13, x]\n", "test.yaml:2: health.ignoredXids: \"x\""},
        {"health:\n  ignoredXids: [13, 70000]\n", "health.ignoredXids: \"70000\""},
        {"resourceName: gpu\n", "test.yaml:1: resourceName: \"gpu\" is not a resource name"},
        {"deviceListStrategy: volume\n", "deviceListStrategy: \"volume\""},
        {"noRegister: maybe\n", "noRegister: \"maybe\" is not a boolean"},
        {"logLevel: info\nlogLevel: debug\n", "test.yaml:2: duplicate key \"logLevel\""},
        {"cdi: /var/run/cdi\n", "test.yaml:1: cdi: expected a mapping"},
        {"devRoot: [a, b]\n", "test.yaml:1: devRoot: expected a scalar value"},
        {"- a\n- b\n", "test.yaml:1: the config must be a mapping"},
        {"logLevel: \"info\n", "YAML syntax error"},
        {"logLevel: info\n---\nlogLevel: info\n", "more than one YAML document"},
        {"a: &x /tmp\ndevRoot: *x\n", "unknown key \"a\""},
        {"devRoot: &x /tmp\nstateDir: *x\n", "anchors and aliases"},
        {"cdi:\n  vendor: \"bad vendor\"\n", "cdi.vendor: \"bad vendor\" is not a valid CDI"},
        {"devRoot:\n", "devRoot: empty value"},
        /* rounds to 0 ns = never recover: refused, not taken as 0 */
        {"health:\n  recoverAfter: 0.0000001ms\n",
         "test.yaml:2: health.recoverAfter: \"0.0000001ms\" is below 1ns and would round to 0"},
        {"server:\n  idleTimeout: 0\n", "test.yaml:2: server.idleTimeout: must be more than 0"},
        {"server:\n  handshakeTimeout: 0.1ns\n", "server.handshakeTimeout: \"0.1ns\" is below"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct acceld_config c, d;
        char err[512] = "";
        acceld_config_defaults(&c);
        d = c;
        int r = parse(&c, cases[i].yaml, err, sizeof(err));
        if (!CHECK(r < 0))
            tap_diag("case %zu accepted", i);
        if (!CHECK(strstr(err, cases[i].want) != NULL))
            tap_diag("case %zu: got \"%s\", want \"%s\"", i, err, cases[i].want);
        CHECK(memcmp(&c, &d, sizeof(c)) == 0);
    }
}

TEST(set_is_the_flag_path)
{
    struct acceld_config c, d;
    char err[256];
    acceld_config_defaults(&c);
    CHECK_EQ_INT(acceld_config_set(&c, "health.ignoredXids", "", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.n_ignored_xids, 0);
    CHECK_EQ_INT(acceld_config_set(&c, "health.recoverAfter", "250ms", err, sizeof(err)), 0);
    CHECK_EQ_U64(c.recover_after_ns, 250000000ull);
    char txt[64];
    CHECK_EQ_INT(acceld_config_format(&c, "health.recoverAfter", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "250ms");
    /* sub-millisecond values format without loss (found by the fuzzer) */
    CHECK_EQ_INT(acceld_config_set(&c, "health.recoverAfter", "51us", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_format(&c, "health.recoverAfter", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "51us");
    CHECK_EQ_INT(acceld_config_set(&c, "health.recoverAfter", "0", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_format(&c, "health.recoverAfter", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "0s");
    /* the flag path refuses a value that rounds to 0 too, and changes nothing */
    CHECK_EQ_INT(acceld_config_set(&c, "health.recoverAfter", "0.0000001ms", err, sizeof(err)),
                 -EINVAL);
    CHECK(strstr(err, "or 0 for never") != NULL);
    CHECK_EQ_U64(c.recover_after_ns, 0);
    CHECK_EQ_INT(acceld_config_set(&c, "health.recoverAfter", "0.0ms", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_set(&c, "server.idleTimeout", "1500ms", err, sizeof(err)), 0);
    CHECK_EQ_U64(c.idle_timeout_ns, 1500000000ull);
    CHECK_EQ_INT(acceld_config_set(&c, "health.recoverAfter", "250ms", err, sizeof(err)), 0);
    d = c;
    CHECK_EQ_INT(acceld_config_set(&c, "nope", "1", err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "unknown key \"nope\"") != NULL);
    CHECK_EQ_INT(acceld_config_set(&c, "resourceName", "a/b/c", err, sizeof(err)), -EINVAL);
    CHECK(memcmp(&c, &d, sizeof(c)) == 0);
    /* every key in the table is settable and formattable */
    for (const struct acceld_config_key *k = acceld_config_keys; k->key; k++) {
        char buf[1024];
        CHECK_EQ_INT(acceld_config_format(&c, k->key, buf, sizeof(buf)), 0);
        struct acceld_config e = c;
        int r = acceld_config_set(&e, k->key, buf, err, sizeof(err));
        if (!CHECK(r == 0))
            tap_diag("%s=%s: %s", k->key, buf, err);
        CHECK(!acceld_config_key_differs(&c, &e, k->key));
    }
    struct acceld_config e = c;
    acceld_config_set(&e, "logLevel", "error", err, sizeof(err));
    CHECK(acceld_config_key_differs(&c, &e, "logLevel"));
    CHECK(!acceld_config_key_differs(&c, &e, "devRoot"));
}

TEST(load_file)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/acceld.yaml", tap_tmpdir());
    const char *y = "logLevel: warn\nhealth:\n  recoverAfter: 5m\n";
    REQUIRE_EQ_INT(fs_write_atomic(path, y, strlen(y), 0644), 0);
    struct acceld_config c;
    char err[512];
    acceld_config_defaults(&c);
    REQUIRE_EQ_INT(acceld_config_load_file(&c, path, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_WARN);
    CHECK_EQ_U64(c.recover_after_ns, 300ull * 1000000000ull);
    snprintf(path, sizeof(path), "%s/missing.yaml", tap_tmpdir());
    CHECK_EQ_INT(acceld_config_load_file(&c, path, err, sizeof(err)), -ENOENT);
    CHECK(strstr(err, "missing.yaml") != NULL);
}

/* mode for the node, gpuModes per GPU (index or UUID; first entry wins). */
TEST(modes)
{
    struct acceld_config c;
    char err[512] = "";
    acceld_config_defaults(&c);
    CHECK_EQ_INT(c.mode, ACCELD_MODE_PGPU);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 0, "GPU-a"), ACCELD_MODE_PGPU);
    REQUIRE_EQ_INT(
        parse(&c, "mode: vgpu\ngpuModes: 1=pgpu,GPU-c=pgpu,GPU-d=vgpu\n", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 0, "GPU-a"), ACCELD_MODE_VGPU);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 1, "GPU-b"), ACCELD_MODE_PGPU);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 2, "GPU-c"), ACCELD_MODE_PGPU);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 3, "GPU-d"), ACCELD_MODE_VGPU);
    /* "1" names index 1 only, not index 11 nor a UUID starting with 1 */
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 11, "1x"), ACCELD_MODE_VGPU);
    char buf[128];
    REQUIRE_EQ_INT(acceld_config_format(&c, "mode", buf, sizeof(buf)), 0);
    CHECK_EQ_STR(buf, "vgpu");
    /* bad values: refused with the key named, config unchanged */
    struct acceld_config before = c;
    CHECK_EQ_INT(acceld_config_set(&c, "mode", "mps", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "mode") && strstr(err, "pgpu|vgpu"));
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "0=vgpu,1", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "gpuModes") && strstr(err, "\"1\""));
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "=vgpu", err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "0=vgpux", err, sizeof(err)), -EINVAL);
    CHECK(memcmp(&before, &c, sizeof(c)) == 0);
    REQUIRE_EQ_INT(acceld_config_set(&c, "gpuModes", "", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 1, "GPU-b"), ACCELD_MODE_VGPU);
}

TEST(vgpu_host_check_keys)
{
    struct acceld_config c;
    char err[256], txt[64];
    acceld_config_defaults(&c);
    /* kill by default (issue 22): what a multi-tenant node wants of a quota */
    CHECK(c.vgpu_over_quota_kill);
    CHECK(c.dra_over_quota_kill);
    CHECK_EQ_U64(c.vgpu_check_interval_ns, 10000000000ull);
    CHECK_EQ_U64(c.dra_check_interval_ns, 10000000000ull);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.overQuotaAction", "none", err, sizeof(err)), 0);
    CHECK(!c.vgpu_over_quota_kill);
    CHECK_EQ_INT(acceld_config_set(&c, "dra.overQuotaAction", "none", err, sizeof(err)), 0);
    CHECK(!c.dra_over_quota_kill);
    CHECK_EQ_INT(acceld_config_format(&c, "dra.overQuotaAction", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "none");
    CHECK_EQ_INT(acceld_config_set(&c, "dra.checkInterval", "250ms", err, sizeof(err)), 0);
    CHECK_EQ_U64(c.dra_check_interval_ns, 250000000ull);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.overQuotaAction", "kill", err, sizeof(err)), 0);
    CHECK(c.vgpu_over_quota_kill);
    CHECK_EQ_INT(acceld_config_format(&c, "vgpu.overQuotaAction", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "kill");
    /* bad input: a clear error, nothing changed */
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.overQuotaAction", "freeze", err, sizeof(err)),
                 -EINVAL);
    CHECK(strstr(err, "none|kill") != NULL);
    CHECK(c.vgpu_over_quota_kill);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.checkInterval", "0", err, sizeof(err)), 0);
    CHECK_EQ_U64(c.vgpu_check_interval_ns, 0);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.checkInterval", "soon", err, sizeof(err)), -EINVAL);
    CHECK_EQ_U64(c.vgpu_check_interval_ns, 0);
    CHECK_EQ_U64(c.allocate_wait_ns, 5000000000ull);
    CHECK_EQ_INT(acceld_config_set(&c, "allocateWait", "0", err, sizeof(err)), 0);
    CHECK_EQ_U64(c.allocate_wait_ns, 0);
    /* the compute half */
    CHECK(!c.vgpu_compute_freeze);
    CHECK_EQ_U64(c.vgpu_freeze_period_ns, 1000000000ull);
    CHECK_EQ_STR(c.vgpu_cgroup_root, "/sys/fs/cgroup");
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.computeAction", "freeze", err, sizeof(err)), 0);
    CHECK(c.vgpu_compute_freeze);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.computeAction", "kill", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "none|freeze") != NULL);
    CHECK(c.vgpu_compute_freeze);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.freezePeriod", "250ms", err, sizeof(err)), 0);
    CHECK_EQ_U64(c.vgpu_freeze_period_ns, 250000000ull);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.freezePeriod", "0", err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.cgroupRoot", "relative", err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(acceld_config_set(&c, "vgpu.cgroupRoot", "/tmp/cg", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_format(&c, "vgpu.cgroupRoot", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "/tmp/cg");
    CHECK_EQ_INT(acceld_config_format(&c, "vgpu.computeAction", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "freeze");
}

/* NVIDIA's device-plugin sections sit next to acceld's keys: config.c skips
 * them (sharing.c parses them) and says they are there; mpsControl. */
TEST(nvidia_sections_and_mps_control)
{
    struct acceld_config c;
    char err[512] = "", txt[64];
    acceld_config_defaults(&c);
    CHECK(!c.nvidia_sharing);
    CHECK_EQ_STR(c.mps_control, "");
    const char *y = "version: v1\n"
                    "flags: {migStrategy: none, plugin: {list: [a, {b: c}]}}\n"
                    "logLevel: debug\n"
                    "mpsControl: /opt/bin/nvidia-cuda-mps-control\n"
                    "sharing:\n"
                    "  mps:\n"
                    "    resources:\n"
                    "    - name: nvidia.com/gpu\n"
                    "      replicas: 2\n";
    CHECK_EQ_INT(parse(&c, y, err, sizeof(err)), 0);
    CHECK(c.nvidia_sharing);
    CHECK_EQ_INT(c.log_level, LOG_LEVEL_DEBUG);
    CHECK_EQ_STR(c.mps_control, "/opt/bin/nvidia-cuda-mps-control");
    CHECK_EQ_INT(acceld_config_format(&c, "mpsControl", txt, sizeof(txt)), 0);
    CHECK_EQ_STR(txt, "/opt/bin/nvidia-cuda-mps-control");
    /* "" is allowed: found on PATH */
    CHECK_EQ_INT(acceld_config_set(&c, "mpsControl", "", err, sizeof(err)), 0);
    CHECK_EQ_STR(c.mps_control, "");
    /* a file of acceld's keys only does not select sharing */
    acceld_config_defaults(&c);
    CHECK_EQ_INT(parse(&c, "logLevel: warn\n", err, sizeof(err)), 0);
    CHECK(!c.nvidia_sharing);
    /* unknown keys are still refused, after a skipped section too */
    CHECK_EQ_INT(parse(&c, "sharing: {mps: {}}\nbogus: 1\n", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "test.yaml:2") != NULL && strstr(err, "bogus") != NULL);
    CHECK(!c.nvidia_sharing); /* refused: nothing changed */
}

/* The vgpu.* keys as a section of the file (docs/vgpu.md writes them so), not only as flags. */
TEST(vgpu_section)
{
    struct acceld_config c;
    char err[256];
    acceld_config_defaults(&c);
    static const char yaml[] = "mode: vgpu\n"
                               "vgpu:\n"
                               "  overQuotaAction: kill\n"
                               "  checkInterval: 3s\n";
    CHECK_EQ_INT(acceld_config_parse(&c, yaml, sizeof(yaml) - 1, "t", err, sizeof(err)), 0);
    CHECK(c.vgpu_over_quota_kill);
    CHECK_EQ_U64(c.vgpu_check_interval_ns, 3000000000ull);
    static const char bad[] = "vgpu:\n  overQuotaActions: kill\n";
    CHECK_EQ_INT(acceld_config_parse(&c, bad, sizeof(bad) - 1, "t", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "vgpu.overQuotaActions") != NULL);
}

TEST(dra_keys)
{
    struct acceld_config c;
    char err[256];
    acceld_config_defaults(&c);
    CHECK_EQ_STR(c.dra_registry_dir, "/var/lib/kubelet/plugins_registry");
    CHECK_EQ_STR(c.dra_plugin_dir, "");
    CHECK_EQ_INT(c.dra_sharing, ACCELD_DRA_EXCLUSIVE);
    CHECK_EQ_INT(c.dra_taint_effect, ACCELD_TAINT_NO_SCHEDULE);
    CHECK_EQ_INT(c.dra_fatal_taint_effect, ACCELD_TAINT_NO_EXECUTE);
    CHECK_EQ_U64(c.dra_claim_wait_ns, 10000000000ull);
    static const char yaml[] = "mode: dra\n"
                               "dra:\n"
                               "  registryDir: /r\n"
                               "  pluginDir: /p/gpu.accel.dev\n"
                               "  sharing: shared\n"
                               "  claimWait: 2s\n";
    CHECK_EQ_INT(acceld_config_parse(&c, yaml, sizeof(yaml) - 1, "t", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.mode, ACCELD_MODE_DRA);
    CHECK_EQ_STR(c.dra_registry_dir, "/r");
    CHECK_EQ_STR(c.dra_plugin_dir, "/p/gpu.accel.dev");
    CHECK_EQ_INT(c.dra_sharing, ACCELD_DRA_SHARED);
    CHECK_EQ_U64(c.dra_claim_wait_ns, 2000000000ull);
    CHECK_EQ_INT(acceld_config_set(&c, "dra.sharing", "half", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "exclusive|shared|mps") != NULL);
    CHECK_EQ_INT(acceld_config_set(&c, "dra.sharing", "mps", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.dra_sharing, ACCELD_DRA_MPS);
    CHECK_EQ_INT(acceld_config_dra_sharing(&c, 3, "GPU-z"), ACCELD_DRA_MPS);
    CHECK(!acceld_config_dra_shared(&c, 3, "GPU-z"));
    char fmt[64];
    CHECK_EQ_INT(acceld_config_format(&c, "dra.sharing", fmt, sizeof(fmt)), 0);
    CHECK_EQ_STR(fmt, "mps");
    CHECK_EQ_INT(acceld_config_set(&c, "dra.sharing", "shared", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_set(&c, "dra.claimWait", "0", err, sizeof(err)), -EINVAL);
    /* per-GPU sharing: index or UUID, first match wins, else dra.sharing */
    CHECK_EQ_INT(acceld_config_set(&c, "dra.gpuSharing", "1=exclusive,GPU-x=exclusive,1=shared",
                                   err, sizeof(err)),
                 0);
    CHECK(acceld_config_dra_shared(&c, 0, "GPU-a"));
    CHECK(!acceld_config_dra_shared(&c, 1, "GPU-b"));
    CHECK(!acceld_config_dra_shared(&c, 2, "GPU-x"));
    CHECK_EQ_INT(acceld_config_set(&c, "dra.gpuSharing", "1=half", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "\"1=half\" is not SEL=exclusive|shared|mps") != NULL);
    /* mps per GPU, by UUID; an entry that only looks like mps is refused */
    CHECK_EQ_INT(acceld_config_set(&c, "dra.gpuSharing", "GPU-m=mps,1=exclusive", err, sizeof(err)),
                 0);
    CHECK_EQ_INT(acceld_config_dra_sharing(&c, 4, "GPU-m"), ACCELD_DRA_MPS);
    CHECK_EQ_INT(acceld_config_dra_sharing(&c, 1, "GPU-b"), ACCELD_DRA_EXCLUSIVE);
    CHECK_EQ_INT(acceld_config_dra_sharing(&c, 0, "GPU-a"), ACCELD_DRA_SHARED);
    CHECK_EQ_INT(acceld_config_set(&c, "dra.gpuSharing", "0=mpss", err, sizeof(err)), -EINVAL);
    CHECK_EQ_STR(c.dra_gpu_sharing, "GPU-m=mps,1=exclusive");
    CHECK_EQ_INT(acceld_config_set(&c, "dra.gpuSharing", "1=exclusive,GPU-x=exclusive,1=shared",
                                   err, sizeof(err)),
                 0);
    CHECK_EQ_INT(acceld_config_set(&c, "dra.gpuSharing", "=shared", err, sizeof(err)), -EINVAL);
    CHECK_EQ_STR(c.dra_gpu_sharing, "1=exclusive,GPU-x=exclusive,1=shared");
    CHECK_EQ_INT(acceld_config_set(&c, "dra.gpuSharing", "", err, sizeof(err)), 0);
    CHECK(acceld_config_dra_shared(&c, 1, "GPU-b"));
    /* taint effects: the three values, by key, flag spelling and file; anything else refused */
    static const char yaml2[] = "dra:\n"
                                "  taintEffect: None\n"
                                "  fatalTaintEffect: NoSchedule\n";
    CHECK_EQ_INT(acceld_config_parse(&c, yaml2, sizeof(yaml2) - 1, "t", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.dra_taint_effect, ACCELD_TAINT_NONE);
    CHECK_EQ_INT(c.dra_fatal_taint_effect, ACCELD_TAINT_NO_SCHEDULE);
    CHECK_EQ_INT(acceld_config_format(&c, "dra.taintEffect", fmt, sizeof(fmt)), 0);
    CHECK_EQ_STR(fmt, "None");
    CHECK_EQ_INT(acceld_config_set(&c, "dra.taintEffect", "NoExecute", err, sizeof(err)), 0);
    CHECK_EQ_INT(c.dra_taint_effect, ACCELD_TAINT_NO_EXECUTE);
    CHECK_EQ_INT(acceld_config_format(&c, "dra.fatalTaintEffect", fmt, sizeof(fmt)), 0);
    CHECK_EQ_STR(fmt, "NoSchedule");
    CHECK_EQ_INT(acceld_config_set(&c, "dra.fatalTaintEffect", "noexecute", err, sizeof(err)),
                 -EINVAL);
    CHECK(strstr(err, "NoSchedule|NoExecute|None") != NULL);
    CHECK_EQ_INT(c.dra_fatal_taint_effect, ACCELD_TAINT_NO_SCHEDULE);
    CHECK_EQ_INT(acceld_config_set(&c, "dra.taintEffect", "PreferNoSchedule", err, sizeof(err)),
                 -EINVAL);
    CHECK_EQ_INT(c.dra_taint_effect, ACCELD_TAINT_NO_EXECUTE);
    /* DRA per GPU beside the device-plugin modes (docs/dra.md, "DRA beside the
     * device-plugin modes"): gpuModes may name dra, by index or UUID, first entry wins */
    acceld_config_defaults(&c);
    CHECK(!acceld_config_dra_only(&c));
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "0=dra", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 0, "GPU-a"), ACCELD_MODE_DRA);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 1, "GPU-b"), ACCELD_MODE_PGPU);
    CHECK(!acceld_config_dra_only(&c)); /* mode pgpu: GPU 1 and others stay device plugins */
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "GPU-b=dra,1=vgpu,0=dra", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 1, "GPU-b"), ACCELD_MODE_DRA);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 1, "GPU-x"), ACCELD_MODE_VGPU);
    CHECK_EQ_INT(acceld_config_format(&c, "gpuModes", fmt, sizeof(fmt)), 0);
    CHECK_EQ_STR(fmt, "GPU-b=dra,1=vgpu,0=dra");
    /* mode dra: alone when every entry says dra too, beside the plugins otherwise */
    static const char yaml3[] = "mode: dra\ngpuModes: 1=pgpu,GPU-c=vgpu\n";
    CHECK_EQ_INT(acceld_config_parse(&c, yaml3, sizeof(yaml3) - 1, "t", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 0, "GPU-a"), ACCELD_MODE_DRA);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 1, "GPU-b"), ACCELD_MODE_PGPU);
    CHECK_EQ_INT(acceld_config_gpu_mode(&c, 2, "GPU-c"), ACCELD_MODE_VGPU);
    CHECK(!acceld_config_dra_only(&c));
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "1=dra", err, sizeof(err)), 0);
    CHECK(acceld_config_dra_only(&c));
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "", err, sizeof(err)), 0);
    CHECK(acceld_config_dra_only(&c));
    /* refused, the running value kept: no SEL, an unknown mode, the mode's case */
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "0=pgpu", err, sizeof(err)), 0);
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "=dra", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "pgpu|vgpu|dra") != NULL);
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "0=DRA", err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(acceld_config_set(&c, "gpuModes", "1=dra,0=dras", err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "\"0=dras\"") != NULL);
    CHECK_EQ_STR(c.gpu_modes, "0=pgpu");
    CHECK(!acceld_config_dra_only(&c));
    static const char yaml4[] = "mode: pgpu\ngpuModes: 0=mps\n"; /* MPS: the sharing sections */
    CHECK_EQ_INT(acceld_config_parse(&c, yaml4, sizeof(yaml4) - 1, "t", err, sizeof(err)), -EINVAL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
