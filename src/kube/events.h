/* events.h — posting Warning Events on pods for the agent's findings, each (key) at most once
 * every KUBE_EVENT_REPEAT_S: a finding that persists pass after pass is one Event, not one per
 * pass. The POST runs on the loop through a struct kube_client; nothing waits for it.
 *
 * Threads: the loop's thread only. */
#pragma once

#include <stdint.h>

#include "client.h"
#include "objects.h"

#define KUBE_EVENT_REPEAT_S 300

/* What was posted lately: a small table, the oldest entry reused. Zeroed is empty. */
struct kube_event_memo {
    struct {
        char key[640]; /* uid, namespace or container, name, reason */
        int64_t at;
    } e[64];
};

/* Posts spec (its namespace, pod and uid already checked by the caller to be the API server's
 * shapes) unless key was posted less than KUBE_EVENT_REPEAT_S before spec->time. done (may be
 * NULL) hears of the POST's end. Returns 1 (started), 0 (held back) or -errno. */
int kube_event_post(struct kube_client *c, struct kube_event_memo *m, const char *key,
                    const struct kube_event_spec *spec, kube_response_cb done, void *user_data);
