/* dra-test-plugin.c — runs the DRA kubelet plugin (src/dra) on its own for
 * tests/dra/test_kubelet.py: two emulated GPUs, claims from JSON files.
 * Usage: dra-test-plugin REGISTRY_DIR PLUGIN_DIR CDI_DIR STATE_DIR CLAIMS_DIR VCUDA_LIB
 * DRA_TEST_GPU_UUIDS=u0,u1 replaces the GPUs' UUIDs (the emulator's, for
 * tests/dra/test_container.py). Prints READY when serving; exits when stdin
 * closes. */
#include "dra.h"
#include "evloop.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static void on_stdin(struct ev_loop *loop, int fd, uint32_t events, void *ud)
{
    (void)events;
    (void)ud;
    char b[64];
    if (read(fd, b, sizeof(b)) <= 0)
        ev_loop_quit(loop);
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s REGISTRY PLUGIN_DIR CDI_DIR STATE_DIR CLAIMS_DIR VCUDA\n",
                argv[0]);
        return 2;
    }
    static struct dra_gpu gpus[] = {
        {.name = "gpu-0",
         .uuid = "GPU-00000000-0000-0000-0000-000000000000",
         .dev_node = "/dev/nvidia0",
         .memory = 16ull << 30,
         .shared = true,
         .healthy = true},
        {.name = "gpu-1",
         .uuid = "GPU-11111111-1111-1111-1111-111111111111",
         .dev_node = "/dev/nvidia1",
         .memory = 16ull << 30,
         .healthy = true},
    };
    static char uuids[2][64];
    const char *env = getenv("DRA_TEST_GPU_UUIDS");
    if (env && sscanf(env, "%63[^,],%63s", uuids[0], uuids[1]) == 2) {
        gpus[0].uuid = uuids[0];
        gpus[1].uuid = uuids[1];
    }
    static const char *const ctl[] = {"/dev/nvidiactl", "/dev/nvidia-uvm"};
    struct dra_prepare_config pc = {.driver_name = "gpu.accel.dev",
                                    .pool_name = "node-a",
                                    .cdi_dir = argv[3],
                                    .state_dir = argv[4],
                                    .vcuda_library = argv[6],
                                    .control_nodes = ctl,
                                    .n_control_nodes = 2,
                                    .gpus = gpus,
                                    .n_gpus = 2};
    char err[512] = "";
    struct dra_state *st = NULL;
    struct ev_loop *loop = NULL;
    struct dra_plugin *p = NULL;
    int r = dra_state_new(&pc, &st, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "state: %s\n", err);
        return 1;
    }
    struct dra_plugin_config cfg = {.driver_name = "gpu.accel.dev",
                                    .registry_dir = argv[1],
                                    .plugin_dir = argv[2],
                                    .state = st,
                                    .source = dra_claim_source_dir(argv[5])};
    if ((r = ev_loop_new(&loop)) < 0 || (r = dra_plugin_new(loop, &cfg, &p)) < 0 ||
        (r = ev_loop_add_io(loop, 0, EPOLLIN, on_stdin, NULL)) < 0) {
        fprintf(stderr, "start: %s\n", strerror(-r));
        return 1;
    }
    printf("READY\n");
    fflush(stdout);
    ev_loop_run(loop);
    ev_loop_del_io(loop, 0);
    dra_plugin_free(p);
    ev_loop_free(loop);
    dra_state_free(st);
    return 0;
}
