/* test-mps-cmd — the MPS control command parser (src/emu/mps-cmd.c) and accel-emu's value
 * parsers (src/emu/emu-args.c): exact values, ranges, and messages that name the bad word. */
#include <errno.h>
#include <string.h>

#include "emu-args.h"
#include "mps-cmd.h"
#include "tap.h"

#define GiB (1ull << 30)

TEST(mps_bytes_parse_and_print)
{
    uint64_t v = 1;
    CHECK_EQ_INT(mps_cmd_parse_bytes("2G", &v), 0);
    CHECK_EQ_U64(v, 2 * GiB);
    CHECK_EQ_INT(mps_cmd_parse_bytes("1536MiB", &v), 0);
    CHECK_EQ_U64(v, 1536ull << 20);
    CHECK_EQ_INT(mps_cmd_parse_bytes("64k", &v), 0);
    CHECK_EQ_U64(v, 64ull << 10);
    CHECK_EQ_INT(mps_cmd_parse_bytes("4097", &v), 0);
    CHECK_EQ_U64(v, 4097);
    CHECK_EQ_INT(mps_cmd_parse_bytes("0", &v), 0);
    CHECK_EQ_U64(v, 0);
    v = 7;
    CHECK_EQ_INT(mps_cmd_parse_bytes("1.5G", &v), -EINVAL);
    CHECK_EQ_INT(mps_cmd_parse_bytes("G", &v), -EINVAL);
    CHECK_EQ_INT(mps_cmd_parse_bytes("-1G", &v), -EINVAL);
    CHECK_EQ_INT(mps_cmd_parse_bytes("2GG", &v), -EINVAL);
    CHECK_EQ_INT(mps_cmd_parse_bytes("99999999999T", &v), -ERANGE);
    CHECK_EQ_U64(v, 7);
    char buf[32];
    CHECK_EQ_STR(mps_cmd_format_bytes(2 * GiB, buf, sizeof(buf)), "2G");
    CHECK_EQ_STR(mps_cmd_format_bytes(1536ull << 20, buf, sizeof(buf)), "1536M");
    CHECK_EQ_STR(mps_cmd_format_bytes(4097, buf, sizeof(buf)), "4097");
    CHECK_EQ_STR(mps_cmd_format_bytes(0, buf, sizeof(buf)), "0");
    CHECK_EQ_STR(mps_cmd_format_pct(505, buf, sizeof(buf)), "50.5");
    CHECK_EQ_STR(mps_cmd_format_pct(1000, buf, sizeof(buf)), "100.0");
}

TEST(mps_commands)
{
    struct mps_cmd c;
    char err[256];
    REQUIRE_EQ_INT(mps_cmd_parse("set_device_pinned_mem_limit 4242 3 1G\n", &c, err, sizeof(err)),
                   0);
    CHECK_EQ_INT(c.kind, MPS_CMD_SET_PINNED_LIMIT);
    CHECK_EQ_INT(c.pid, 4242);
    CHECK_EQ_INT(c.device, 3);
    CHECK_EQ_U64(c.bytes, GiB);
    REQUIRE_EQ_INT(
        mps_cmd_parse("  set_default_active_thread_percentage\t12.50 ", &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.thread_pct_x10, 125);
    REQUIRE_EQ_INT(mps_cmd_parse("start_server -uid 1000\r\n", &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.kind, MPS_CMD_START_SERVER);
    CHECK_EQ_INT(c.uid, 1000);
    REQUIRE_EQ_INT(mps_cmd_parse("shutdown_server 77 -f", &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.force, 1);
    REQUIRE_EQ_INT(mps_cmd_parse("get_device_client_list", &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.pid, 0);
    REQUIRE_EQ_INT(mps_cmd_parse("quit -t 5", &c, err, sizeof(err)), 0);
    CHECK_EQ_INT(c.timeout_s, 5);
    CHECK_EQ_INT(mps_cmd_parse(" \n", &c, err, sizeof(err)), -ENODATA);

    CHECK_EQ_INT(mps_cmd_parse("set_default_active_thread_percentage 100.05", &c, err, sizeof(err)),
                 -EINVAL);
    CHECK(strstr(err, "'100.05'") != NULL);
    CHECK_EQ_INT(mps_cmd_parse("get_server_list extra", &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "usage: get_server_list") != NULL);
    CHECK_EQ_INT(mps_cmd_parse("get_server_list\nquit", &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "0x0a") != NULL);
    CHECK_EQ_INT(mps_cmd_parse("shutdown_server -5", &c, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "'-5'") != NULL);
}

TEST(emu_args_values)
{
    int numa[EMU_MAX_GPUS] = {0};
    char err[256];
    REQUIRE_EQ_INT(emu_args_numa("0,1,-1,3", 4, numa, err, sizeof(err)), 0);
    CHECK(numa[0] == 0 && numa[1] == 1 && numa[2] == -1 && numa[3] == 3);
    CHECK_EQ_INT(emu_args_numa("0,1", 4, numa, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "has 2 entries, want 4") != NULL);
    CHECK_EQ_INT(emu_args_numa("0,1,2,3,4", 4, numa, err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(emu_args_numa("0,-2,1,1", 4, numa, err, sizeof(err)), -EINVAL);
    CHECK(strstr(err, "'-2'") != NULL);
    CHECK_EQ_INT(numa[2], -1); /* untouched by the failures */

    struct emu_set_req req = {0};
    REQUIRE_EQ_INT(emu_args_set("power=72.5", &req, err, sizeof(err)), 0);
    CHECK_EQ_INT(req.power_mw, 72500);
    REQUIRE_EQ_INT(emu_args_set("compute_mode=prohibited", &req, err, sizeof(err)), 0);
    CHECK_EQ_INT(req.compute_mode, 2);
    CHECK_EQ_INT(req.mask, EMU_SET_POWER | EMU_SET_COMPUTE_MODE);
    CHECK_EQ_INT(emu_args_set("power=72.5555", &req, err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(emu_args_set("temperature=", &req, err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(req.mask, EMU_SET_POWER | EMU_SET_COMPUTE_MODE);

    struct emu_gpu g = {
        .sm_clock_mhz = 1000, .sm_clock_max_mhz = 1500, .cc_major = 8, .cc_minor = 9};
    struct emu_set_req over = {
        .mask = EMU_SET_SM_CLOCK | EMU_SET_TEMPERATURE, .sm_clock_mhz = 1600, .temperature_c = 90};
    CHECK_EQ_INT(emu_args_set_apply(&g, &over, err, sizeof(err)), -ERANGE);
    CHECK_EQ_INT(g.temperature_c, 0); /* all or nothing */
    struct emu_set_req mig = {.mask = EMU_SET_MIG, .mig_mode = 1};
    CHECK_EQ_INT(emu_args_set_apply(&g, &mig, err, sizeof(err)), -ERANGE); /* an 8.9 part */

    unsigned idx = 9;
    CHECK_EQ_INT(emu_args_gpu_index("3", 4, &idx, err, sizeof(err)), 0);
    CHECK_EQ_INT(idx, 3);
    CHECK_EQ_INT(emu_args_gpu_index("4", 4, &idx, err, sizeof(err)), -EINVAL);
    CHECK_EQ_INT(emu_args_gpu_index("GPU-1", 4, &idx, err, sizeof(err)), -ENOENT);
    CHECK_EQ_INT(idx, 3);
}

/* A client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (MPS guide, "Appendix: Environment Variables")
 * only lowers the limits it is given. */
TEST(client_limits_only_tighten)
{
    uint64_t lim[4] = {100ull << 20, 0, 1ull << 30, 5ull << 20};
    CHECK_EQ_INT(mps_cmd_tighten_limits("0=1G,1=512MB,2=256M,3=1M", lim, 4), 0);
    CHECK_EQ_U64(lim[0], 100ull << 20); /* 1G cannot raise 100M */
    CHECK_EQ_U64(lim[1], 512ull << 20); /* none before: the client's own applies */
    CHECK_EQ_U64(lim[2], 256ull << 20);
    CHECK_EQ_U64(lim[3], 1ull << 20);
    uint64_t keep[2] = {1ull << 20, 2ull << 20};
    /* malformed, out-of-range and zero entries are skipped and counted */
    CHECK_EQ_INT(mps_cmd_tighten_limits("0=,x=1K,9=1K,=3,1=0,0=12Q,,-1=1K", keep, 2), 8);
    CHECK_EQ_U64(keep[0], 1ull << 20);
    CHECK_EQ_U64(keep[1], 2ull << 20);
    CHECK_EQ_INT(mps_cmd_tighten_limits(NULL, keep, 2), 0);
    CHECK_EQ_INT(mps_cmd_tighten_limits("1=1K", keep, 2), 0);
    CHECK_EQ_U64(keep[1], 1024);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
