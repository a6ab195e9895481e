/* health.c — the loop-side health decisions (pure); see health.h. The
 * thread that produces the events is health-monitor.c. */
#include "health.h"

#include <stdio.h>
#include <string.h>

bool health_apply(struct health_gpu *s, const struct health_event *ev,
                  const struct acceld_config *cfg, uint64_t now_ns, bool *ret_ignored)
{
    bool was = s->healthy;
    if (ret_ignored)
        *ret_ignored = false;
    switch (ev->kind) {
    case HEALTH_EV_XID:
        if (ev->data <= 0xffff && acceld_config_xid_ignored(cfg, (int)ev->data)) {
            if (ret_ignored)
                *ret_ignored = true;
            return false;
        }
        snprintf(s->reason, sizeof(s->reason), "XID %llu", (unsigned long long)ev->data);
        s->last_fatal_ns = now_ns;
        s->healthy = false;
        break;
    case HEALTH_EV_ECC_DBE:
        snprintf(s->reason, sizeof(s->reason), "double-bit ECC error");
        s->last_fatal_ns = now_ns;
        s->healthy = false;
        break;
    case HEALTH_EV_LOST:
        snprintf(s->reason, sizeof(s->reason), "GPU is lost (NVML GPU_IS_LOST)");
        s->lost = true;
        s->last_fatal_ns = now_ns;
        s->healthy = false;
        break;
    case HEALTH_EV_BACK:
        /* Answering NVML again is not healthy yet: recovery waits for the
         * quiet period (health_recovered). */
        s->lost = false;
        break;
    default:
        return false;
    }
    return was != s->healthy;
}

bool health_recovered(struct health_gpu *s, uint64_t recover_after_ns, uint64_t now_ns)
{
    if (s->healthy || s->lost || recover_after_ns == 0)
        return false;
    if (now_ns < s->last_fatal_ns || now_ns - s->last_fatal_ns < recover_after_ns)
        return false;
    s->healthy = true;
    s->reason[0] = '\0';
    return true;
}
