/* cdi.c — CDI spec rendering (jansson) and atomic writing; see cdi.h. */
#include "cdi.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"
#include "util.h"

int cdi_valid_device_name(const char *name)
{
    if (!name || !isalnum((unsigned char)name[0]))
        return 0;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_.:-", *p))
            return 0;
    return 1;
}

static int valid_kind_part(const char *s, const char *extra)
{
    if (!s || !isalnum((unsigned char)s[0]))
        return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(extra, *p))
            return 0;
    return isalnum((unsigned char)s[strlen(s) - 1]);
}

/* {"path": p, "hostPath": p, "permissions": "rw"} appended to arr. */
static int add_nodes(json_t *arr, const char *const *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_pack("{s:s, s:s, s:s}", "path", nodes[i], "hostPath", nodes[i],
                              "permissions", "rw");
        if (!o || json_array_append_new(arr, o) < 0)
            return -ENOMEM;
    }
    return 0;
}

int cdi_spec_render(const char *vendor, const char *class, const struct cdi_device *devs,
                    size_t n_devs, const char *const *common_nodes, size_t n_common,
                    char **ret_json)
{
    if (!valid_kind_part(vendor, ".-") || !valid_kind_part(class, "_.-"))
        return -EINVAL;
    for (size_t i = 0; i < n_devs; i++)
        if (!cdi_valid_device_name(devs[i].name))
            return -EINVAL;

    char kind[512];
    if ((size_t)snprintf(kind, sizeof(kind), "%s/%s", vendor, class) >= sizeof(kind))
        return -EINVAL;
    int r = -ENOMEM;
    json_t *root = json_object(), *devices = json_array(), *common = json_array();
    if (!root || !devices || !common)
        goto out;
    for (size_t i = 0; i < n_devs; i++) {
        json_t *nodes = json_array();
        if (!nodes || add_nodes(nodes, devs[i].nodes, devs[i].n_nodes) < 0) {
            json_decref(nodes);
            goto out;
        }
        json_t *d = json_pack("{s:s, s:{s:o}}", "name", devs[i].name, "containerEdits",
                              "deviceNodes", nodes);
        if (!d || json_array_append_new(devices, d) < 0)
            goto out;
    }
    if (add_nodes(common, common_nodes, n_common) < 0)
        goto out;
    json_t *edits = json_pack("{s:o}", "deviceNodes", common);
    common = NULL;
    if (!edits || json_object_set_new(root, "containerEdits", edits) < 0 ||
        json_object_set_new(root, "cdiVersion", json_string(CDI_SPEC_VERSION)) < 0 ||
        json_object_set_new(root, "kind", json_string(kind)) < 0 ||
        json_object_set_new(root, "devices", devices) < 0) {
        devices = NULL;
        goto out;
    }
    devices = NULL;
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!s)
        goto out;
    *ret_json = s;
    r = 0;
out:
    json_decref(root);
    json_decref(devices);
    json_decref(common);
    return r;
}

int cdi_spec_path_tagged(const char *dir, const char *vendor, const char *class, const char *tag,
                         char *buf, size_t len)
{
    if (tag && !cdi_valid_device_name(tag))
        return -EINVAL;
    int n = snprintf(buf, len, "%s/accel-%s-%s%s%s.json", dir, vendor, class, tag ? "-" : "",
                     tag ? tag : "");
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return 0;
}

int cdi_spec_path(const char *dir, const char *vendor, const char *class, char *buf, size_t len)
{
    return cdi_spec_path_tagged(dir, vendor, class, NULL, buf, len);
}

int cdi_spec_write(const char *dir, const char *vendor, const char *class,
                   const struct cdi_device *devs, size_t n_devs, const char *const *common_nodes,
                   size_t n_common)
{
    return cdi_spec_write_tagged(dir, vendor, class, NULL, devs, n_devs, common_nodes, n_common);
}

int cdi_spec_write_tagged(const char *dir, const char *vendor, const char *class, const char *tag,
                          const struct cdi_device *devs, size_t n_devs,
                          const char *const *common_nodes, size_t n_common)
{
    char path[1024];
    _cleanup_free_ char *json = NULL;
    int r = cdi_spec_render(vendor, class, devs, n_devs, common_nodes, n_common, &json);
    if (r < 0)
        return r;
    if ((r = cdi_spec_path_tagged(dir, vendor, class, tag, path, sizeof(path))) < 0)
        return r;
    if ((r = fs_mkdir_p(dir, 0755)) < 0)
        return r;
    size_t len = strlen(json);
    json[len] = '\n'; /* replace the NUL: the file ends in a newline */
    return fs_write_atomic(path, json, len + 1, 0644);
}
