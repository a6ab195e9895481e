/* slicelist.c — reading the API server's ResourceSliceList for the node's
 * slice (what to delete, whether ours is there and as what) and the
 * canonical text of a slice's spec that decides whether it must be
 * rewritten. Pure functions over JSON text (jansson); the requests are
 * publish.c's. See dra.h. */
#include "dra.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dra_slice_list_clear(struct dra_slice_list *l)
{
    for (size_t i = 0; i < l->n_stale; i++)
        free(l->stale[i]);
    free(l->stale);
    free(l->ours_rv);
    free(l->ours_spec);
    free(l->list_rv);
    for (size_t i = 0; i < l->n_items; i++) {
        free(l->items[i].name);
        free(l->items[i].rv);
        free(l->items[i].spec);
    }
    free(l->items);
    memset(l, 0, sizeof(*l));
}

/* The spec as compact JSON with sorted keys, without what the server adds
 * (a taint's timeAdded). NULL when there is no spec object or no memory. */
static char *canonical_spec(json_t *slice)
{
    json_t *spec = json_object_get(slice, "spec");
    if (!json_is_object(spec))
        return NULL;
    spec = json_deep_copy(spec);
    size_t i, j;
    json_t *d, *t;
    json_array_foreach(json_object_get(spec, "devices"), i, d)
    {
        json_array_foreach(json_object_get(d, "taints"), j, t)
        {
            json_object_del(t, "timeAdded");
        }
    }
    char *s = spec ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(spec);
    return s;
}

int dra_slice_spec_canonical(const char *slice_json, size_t len, char **ret)
{
    json_t *o = json_loadb(slice_json, len, 0, NULL);
    char *s = canonical_spec(o);
    json_decref(o);
    if (!s)
        return -EINVAL;
    *ret = s;
    return 0;
}

int dra_slice_list_parse(const char *body, size_t len, const char *driver, const char *node,
                         const char *name, bool keep_ours, struct dra_slice_list *ret, char *err,
                         size_t errlen)
{
    struct dra_slice_list l = {0};
    json_error_t je;
    json_t *list = json_loadb(body, len, 0, &je);
    json_t *items = json_object_get(list, "items");
    if (!json_is_array(items)) {
        snprintf(err, errlen, "the ResourceSliceList has no items array%s%s", list ? "" : ": ",
                 list ? "" : je.text);
        json_decref(list);
        return -EINVAL;
    }
    int r = -ENOMEM;
    l.stale = calloc(json_array_size(items) + 1, sizeof(char *));
    l.items = calloc(json_array_size(items) + 1, sizeof(*l.items));
    if (!l.stale || !l.items)
        goto fail;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        json_t *spec = json_object_get(it, "spec");
        const char *n = json_string_value(json_object_get(json_object_get(it, "metadata"), "name"));
        const char *drv = json_string_value(json_object_get(spec, "driver"));
        const char *nn = json_string_value(json_object_get(spec, "nodeName"));
        /* the field selector is the server's; check what came back anyway */
        if (!n || !n[0] || !drv || !nn || strcmp(drv, driver) != 0 || strcmp(nn, node) != 0)
            continue;
        json_t *g = json_object_get(json_object_get(spec, "pool"), "generation");
        int64_t gen = json_is_integer(g) ? json_integer_value(g) : 0;
        if (gen > l.max_generation)
            l.max_generation = gen;
        const char *rv =
            json_string_value(json_object_get(json_object_get(it, "metadata"), "resourceVersion"));
        struct dra_slice_item *item = &l.items[l.n_items++];
        item->generation = gen < 0 ? 0 : gen;
        if (!(item->name = strdup(n)) || !(item->rv = strdup(rv ? rv : "")) ||
            !(item->spec = canonical_spec(it)))
            goto fail;
        if (keep_ours && !l.have_ours && strcmp(n, name) == 0 && rv) {
            l.have_ours = true;
            l.ours_generation = gen < 0 ? 0 : gen;
            if (!(l.ours_rv = strdup(rv)) || !(l.ours_spec = canonical_spec(it)))
                goto fail;
        } else {
            if (!(l.stale[l.n_stale] = strdup(n)))
                goto fail;
            l.n_stale++;
        }
    }
    const char *lrv =
        json_string_value(json_object_get(json_object_get(list, "metadata"), "resourceVersion"));
    if (lrv && !(l.list_rv = strdup(lrv)))
        goto fail;
    json_decref(list);
    *ret = l;
    return 0;
fail:
    snprintf(err, errlen, "out of memory");
    json_decref(list);
    dra_slice_list_clear(&l);
    return r;
}
