/* test-mig.c — src/gpu/gpu-mig.c against the emulated NVML of an H100 in MIG mode: the
 * board's profiles and placements, a GPU instance with the compute instance filling it created
 * at a placement and destroyed (NVML's refusals passed on, nothing left half made), the MIG
 * devices listed with NVIDIA's profile names; the mig-minors reader; the mixed strategy's
 * resource names. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu-mig.h"
#include "mig-strategy.h"
#include "state.h"
#include "tap.h"

static struct gpu_nvml *nvml;
static nvmlDevice_t gpu;

static void setup(void)
{
    if (nvml)
        return;
    const char *build = getenv("ACCEL_BUILD_ROOT");
    if (!build)
        tap_skip_all("ACCEL_BUILD_ROOT is not set (run through meson test)");
    char state[400], path[4200], cmd[9000], err[512];
    snprintf(state, sizeof(state), "%s/emu-state", tap_tmpdir());
    struct emu_config cfg;
    emu_config_init(&cfg);
    cfg.gpus = 1;
    cfg.model = "H100";
    REQUIRE_EQ_INT(emu_state_create(state, &cfg), 0);
    setenv("ACCEL_EMU_STATE", state, 1);
    snprintf(cmd, sizeof(cmd), "%s/src/emu/accel-emu set 0 mig=on >/dev/null", build);
    REQUIRE_EQ_INT(system(cmd), 0);
    snprintf(path, sizeof(path), "%s/src/emu/libnvidia-ml.so.1", build);
    if (gpu_nvml_open(path, &nvml, err, sizeof(err)) < 0) {
        tap_diag("emulated NVML: %s", err);
        tap_skip_all("the emulated NVML cannot be opened");
    }
    REQUIRE(nvml->nvmlDeviceGetHandleByIndex_v2(0, &gpu) == NVML_SUCCESS);
}

static const struct gpu_mig_profile *find(const struct gpu_mig_profile *p, size_t n,
                                          const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0)
            return &p[i];
    return NULL;
}

TEST(profiles_and_placements_of_an_h100)
{
    setup();
    struct gpu_mig_profile p[32];
    size_t n = 0;
    REQUIRE_EQ_INT(gpu_mig_profiles(nvml, gpu, p, 32, &n), 0);
    const struct gpu_mig_profile *one = find(p, n, "1g.10gb"), *three = find(p, n, "3g.40gb"),
                                 *seven = find(p, n, "7g.80gb");
    REQUIRE(one && three && seven);
    CHECK_EQ_INT(one->id, 19);
    CHECK_EQ_INT(one->slices, 1);
    CHECK_EQ_INT(one->instances, 7);
    CHECK_EQ_INT(one->n_placements, 7);
    CHECK_EQ_INT(one->placements[6].start, 6);
    CHECK_EQ_INT(one->placements[6].size, 1);
    CHECK_EQ_INT(three->n_placements, 2);
    CHECK_EQ_INT(three->placements[1].start, 4);
    CHECK_EQ_INT(three->placements[1].size, 4);
    CHECK_EQ_INT(seven->n_placements, 1);
    CHECK_EQ_INT(seven->placements[0].size, 8);
    CHECK(find(p, n, "1g.10gb+me") != NULL);
}

TEST(create_at_a_placement_and_destroy)
{
    setup();
    struct gpu_mig_device d, e;
    char err[256];
    REQUIRE_EQ_INT(gpu_mig_create(nvml, gpu, 19, 3, 1, &d, err, sizeof(err)), 0);
    CHECK(strncmp(d.uuid, "MIG-", 4) == 0);
    CHECK_EQ_STR(d.profile, "1g.10gb");
    CHECK_EQ_INT(d.gi_profile_id, 19);
    CHECK_EQ_INT(d.gi_start, 3);
    CHECK_EQ_INT(d.gi_size, 1);
    CHECK_EQ_INT(d.ci_slices, 1);
    CHECK(d.memory_bytes > 9ull << 30);
    /* the placement is taken: NVML's refusal, nothing more created */
    CHECK(gpu_mig_create(nvml, gpu, 19, 3, 1, &e, err, sizeof(err)) < 0);
    CHECK(strstr(err, "1g.10gb GPU instance at memory slice 3") != NULL);
    /* a 3g.40gb over slices 0-3 overlaps it */
    CHECK(gpu_mig_create(nvml, gpu, 9, 0, 4, &e, err, sizeof(err)) < 0);
    struct gpu_mig_device *all = NULL;
    size_t n = 0;
    REQUIRE_EQ_INT(gpu_mig_devices(nvml, gpu, &all, &n), 0);
    CHECK_EQ_INT(n, 1);
    free(all);
    REQUIRE_EQ_INT(gpu_mig_create(nvml, gpu, 9, 4, 4, &e, err, sizeof(err)), 0);
    CHECK_EQ_STR(e.profile, "3g.40gb");
    CHECK_EQ_INT(gpu_mig_find(nvml, gpu, d.gi, d.ci, &d), 0);
    CHECK_EQ_INT(gpu_mig_destroy(nvml, gpu, d.gi, err, sizeof(err)), 0);
    CHECK_EQ_INT(gpu_mig_find(nvml, gpu, d.gi, d.ci, &d), -ENOENT);
    CHECK_EQ_INT(gpu_mig_destroy(nvml, gpu, d.gi, err, sizeof(err)), -ENOENT);
    CHECK_EQ_INT(gpu_mig_destroy(nvml, gpu, e.gi, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(gpu_mig_devices(nvml, gpu, &all, &n), 0);
    CHECK_EQ_INT(n, 0);
    CHECK(gpu_mig_create(nvml, gpu, 4242, 0, 1, &e, err, sizeof(err)) == -ENOENT);
}

TEST(mig_minors)
{
    static const char text[] = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"
                               "gpu1/gi13/access 200\ngpu1/gi13/ci0/access 201\n\n";
    int m = 0;
    CHECK_EQ_INT(gpu_mig_minor(text, sizeof(text) - 1, 1, 13, -1, &m), 0);
    CHECK_EQ_INT(m, 200);
    CHECK_EQ_INT(gpu_mig_minor(text, sizeof(text) - 1, 1, 13, 0, &m), 0);
    CHECK_EQ_INT(m, 201);
    CHECK_EQ_INT(gpu_mig_minor(text, sizeof(text) - 1, 0, 0, 0, &m), 0);
    CHECK_EQ_INT(m, 4);
    CHECK_EQ_INT(gpu_mig_minor(text, sizeof(text) - 1, 1, 13, 1, &m), -ENOENT);
    static const char bad[] = "gpu0/gi0/access three\ngpu0/gi0/ci0/access 4\n";
    CHECK_EQ_INT(gpu_mig_minor(bad, sizeof(bad) - 1, 0, 0, 0, &m), -EINVAL);
    static const char trailing[] = "gpu0/gi0/access 3 x\n";
    CHECK_EQ_INT(gpu_mig_minor(trailing, sizeof(trailing) - 1, 0, 0, -1, &m), -EINVAL);
    CHECK_EQ_INT(gpu_mig_minor("", 0, 0, 0, -1, &m), -ENOENT);
}

TEST(mixed_resource_names)
{
    char out[128];
    CHECK_EQ_INT(mig_resource_name("nvidia.com/gpu", "1g.10gb", out, sizeof(out)), 0);
    CHECK_EQ_STR(out, "nvidia.com/mig-1g.10gb");
    CHECK_EQ_INT(mig_resource_name("nvidia.com/gpu", "1g.10gb+me", out, sizeof(out)), 0);
    CHECK_EQ_STR(out, "nvidia.com/mig-1g.10gb.me");
    CHECK_EQ_INT(mig_resource_name("example.com/accel", "2g.20gb", out, sizeof(out)), 0);
    CHECK_EQ_STR(out, "example.com/mig-2g.20gb");
    CHECK_EQ_INT(mig_resource_name("a-very-long-vendor-domain-name.subdomain.example.com/gpu",
                                   "1c.2g.20gb+gfx", out, sizeof(out)),
                 -EINVAL);
}

int main(int argc, char **argv)
{
    int r = tap_main(argc, argv);
    gpu_nvml_free(nvml);
    return r;
}
