/* events.c — see events.h. */
#include "events.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether key was posted less than KUBE_EVENT_REPEAT_S before now; if not, it is recorded as
 * posted now (over the oldest entry). */
static bool posted_lately(struct kube_event_memo *m, const char *key, int64_t now)
{
    size_t oldest = 0, n = sizeof(m->e) / sizeof(m->e[0]);
    for (size_t i = 0; i < n; i++) {
        if (m->e[i].at && strcmp(m->e[i].key, key) == 0) {
            if (now - m->e[i].at < KUBE_EVENT_REPEAT_S)
                return true;
            oldest = i;
            break;
        }
        if (m->e[i].at < m->e[oldest].at)
            oldest = i;
    }
    snprintf(m->e[oldest].key, sizeof(m->e[oldest].key), "%s", key);
    m->e[oldest].at = now;
    return false;
}

int kube_event_post(struct kube_client *c, struct kube_event_memo *m, const char *key,
                    const struct kube_event_spec *spec, kube_response_cb done, void *user_data)
{
    if (!c || !m || !key || !spec || !spec->namespace)
        return -EINVAL;
    if (posted_lately(m, key, spec->time))
        return 0;
    char *body = NULL, path[400];
    if (snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", spec->namespace) >=
        (int)sizeof(path))
        return -ENAMETOOLONG;
    int r = kube_event_json(spec, &body);
    if (r == 0)
        r = kube_client_request(c, "POST", path, "application/json", body, done, user_data, NULL);
    free(body);
    return r < 0 ? r : 1;
}
