/* kube-objects-dump.c — prints, as one JSON document, every kind of object src/kube writes to
 * the API server, built by the same functions the agent calls: {"objects": [Event, ...],
 * "podPatches": [merge patch, ...]}. tests/kube/k8s-validate/validate.mjs checks the Events
 * against kubernetes-models' core/v1 Event schema and each patch applied to a Pod against
 * the Pod schema. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objects.h"

static int add(json_t *arr, char *text)
{
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!j)
        return -1;
    return json_array_append_new(arr, j);
}

int main(void)
{
    json_t *objects = json_array(), *patches = json_array();
    char long_msg[3000];
    for (size_t i = 0; i + 1 < sizeof(long_msg); i++)
        long_msg[i] = (char)('a' + i % 26);
    long_msg[sizeof(long_msg) - 1] = 0;
    struct kube_event_spec events[] = {
        {.namespace = "default",
         .pod_name = "cuda-app-7d9f8",
         .pod_uid = "0b6c4a3e-1f2d-4c5b-9a8e-7d6c5b4a3f2e",
         .type = KUBE_EVENT_WARNING,
         .reason = "GPUMemoryOverQuota",
         .message = "container cuda uses 5.0 GiB on GPU-0a1b, over its 4.0 GiB quota: killed",
         .component = "acceld",
         .host = "node-a",
         .time = 1704164645},
        {.namespace = "team-a",
         .pod_name = "p",
         .pod_uid = "1b6c4a3e-1f2d-4c5b-9a8e-7d6c5b4a3f2e",
         .type = KUBE_EVENT_NORMAL,
         .reason = "GPUAssigned",
         .message = long_msg,
         .component = "acceld",
         .host = "node-b.example.com",
         .time = 0},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof(events) / sizeof(events[0]); i++) {
        char *s = NULL;
        if (kube_event_json(&events[i], &s) < 0 || add(objects, s) < 0)
            rc = 1;
    }
    const char *k1[] = {"accel.dev/vgpu-gpu", "accel.dev/vgpu-assigned"};
    const char *v1[] = {"GPU-0a1b2c3d-0000-1111-2222-333344445555", "cuda=0"};
    const char *k2[] = {"accel.dev/vgpu-gpu"};
    const char *v2[] = {NULL};
    char *s = NULL;
    if (kube_annotation_patch(k1, v1, 2, &s) < 0 || add(patches, s) < 0)
        rc = 1;
    s = NULL;
    if (kube_annotation_patch(k2, v2, 1, &s) < 0 || add(patches, s) < 0)
        rc = 1;
    json_t *root = json_pack("{s:o, s:o}", "objects", objects, "podPatches", patches);
    char *out = json_dumps(root, JSON_INDENT(2));
    if (!out)
        return 1;
    puts(out);
    free(out);
    json_decref(root);
    return rc;
}
