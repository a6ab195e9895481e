/* fuzz-mps-cmd.c — libFuzzer target for the MPS control command parser (src/emu/mps-cmd.c),
 * which reads whatever any local user writes to the control socket. Checks its promises on
 * every input: no read past the line (ASan), a result within the documented ranges or an
 * error message that is one printable line, that limits print back to themselves, and that
 * the same text read as a client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT never raises a limit. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mps-cmd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size + 1);
    if (!line)
        return 0;
    memcpy(line, data, size);
    line[size] = '\0';

    struct mps_cmd c, untouched;
    memset(&c, 0x5a, sizeof(c));
    memcpy(&untouched, &c, sizeof(c));
    char err[256] = "";
    int r = mps_cmd_parse(line, &c, err, sizeof(err));
    if (r == 0) {
        if (c.thread_pct_x10 > 1000 || c.pid < 0 || c.device > 1023 || c.timeout_s > 86400)
            abort();
        if ((c.kind == MPS_CMD_SET_DEFAULT_THREAD_PCT || c.kind == MPS_CMD_SET_THREAD_PCT) &&
            c.thread_pct_x10 == 0)
            abort();
    } else {
        if (memcmp(&c, &untouched, sizeof(c)) != 0) /* failure leaves the output alone */
            abort();
        if (r == -EINVAL) {
            if (!err[0])
                abort();
            for (const char *p = err; *p; p++)
                if (iscntrl((unsigned char)*p))
                    abort();
        } else if (r != -ENODATA) {
            abort();
        }
    }

    uint64_t bytes, again;
    if (mps_cmd_parse_bytes(line, &bytes) == 0) {
        char buf[32];
        if (mps_cmd_parse_bytes(mps_cmd_format_bytes(bytes, buf, sizeof(buf)), &again) != 0 ||
            again != bytes)
            abort();
    }
    /* the same text as a tenant's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: it may only lower limits */
    uint64_t lim[4] = {0, 1u << 20, UINT64_MAX, 7}, before[4];
    memcpy(before, lim, sizeof(lim));
    int bad = mps_cmd_tighten_limits(line, lim, 4);
    if (bad < 0)
        abort();
    for (size_t i = 0; i < 4; i++)
        if (before[i] && (lim[i] == 0 || lim[i] > before[i]))
            abort();
    free(line);
    return 0;
}
