/* test-cdi.c — the CDI spec writer: the JSON reads back with the right kind,
 * devices and nodes; the file is replaced whole; bad names write nothing. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi.h"
#include "fs.h"
#include "tap.h"

static const char *const n0[] = {"/dev/nvidia0"};
static const char *const n1[] = {"/dev/nvidia1"};
static const char *const common[] = {"/dev/nvidiactl", "/dev/nvidia-uvm"};

TEST(render_reads_back)
{
    struct cdi_device devs[] = {{"GPU-aaaa-0001", n0, 1}, {"GPU-aaaa-0002", n1, 1}};
    char *s = NULL;
    REQUIRE_EQ_INT(cdi_spec_render("nvidia.com", "gpu", devs, 2, common, 2, &s), 0);
    json_error_t je;
    json_t *root = json_loads(s, 0, &je);
    free(s);
    REQUIRE(root != NULL);
    CHECK_EQ_STR(json_string_value(json_object_get(root, "kind")), "nvidia.com/gpu");
    CHECK_EQ_STR(json_string_value(json_object_get(root, "cdiVersion")), CDI_SPEC_VERSION);
    json_t *d = json_object_get(root, "devices");
    REQUIRE(json_array_size(d) == 2);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(d, 1), "name")), "GPU-aaaa-0002");
    json_t *node = json_array_get(
        json_object_get(json_object_get(json_array_get(d, 1), "containerEdits"), "deviceNodes"), 0);
    CHECK_EQ_STR(json_string_value(json_object_get(node, "path")), "/dev/nvidia1");
    CHECK_EQ_STR(json_string_value(json_object_get(node, "hostPath")), "/dev/nvidia1");
    CHECK_EQ_STR(json_string_value(json_object_get(node, "permissions")), "rw");
    json_t *cn = json_object_get(json_object_get(root, "containerEdits"), "deviceNodes");
    CHECK_EQ_INT(json_array_size(cn), 2);
    CHECK_EQ_STR(json_string_value(json_object_get(json_array_get(cn, 0), "path")),
                 "/dev/nvidiactl");
    json_decref(root);
}

TEST(write_replaces_whole_file)
{
    char dir[512], path[1024];
    snprintf(dir, sizeof(dir), "%s/cdi/sub", tap_tmpdir());
    struct cdi_device devs[] = {{"GPU-1", n0, 1}, {"GPU-2", n1, 1}};
    /* the spec's mode is explicit, not the umask's */
    mode_t old = umask(0);
    int r = cdi_spec_write(dir, "example.com", "gpu", devs, 2, common, 2);
    umask(old);
    REQUIRE_EQ_INT(r, 0);
    REQUIRE_EQ_INT(cdi_spec_path(dir, "example.com", "gpu", path, sizeof(path)), 0);
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0644);
    REQUIRE_EQ_INT(cdi_spec_write(dir, "example.com", "gpu", devs, 1, common, 0), 0);
    char *data = NULL;
    size_t len = 0;
    REQUIRE_EQ_INT(fs_read_all(path, 1 << 20, &data, &len), 0);
    json_t *root = json_loads(data, 0, NULL);
    free(data);
    REQUIRE(root != NULL);
    CHECK_EQ_INT(json_array_size(json_object_get(root, "devices")), 1);
    json_decref(root);
}

TEST(bad_names_write_nothing)
{
    char dir[512], path[1024];
    snprintf(dir, sizeof(dir), "%s/cdi-bad", tap_tmpdir());
    struct cdi_device bad[] = {{"GPU 1/x", n0, 1}};
    struct cdi_device good[] = {{"GPU-1", n0, 1}};
    CHECK_EQ_INT(cdi_spec_write(dir, "nvidia.com", "gpu", bad, 1, common, 2), -EINVAL);
    CHECK_EQ_INT(cdi_spec_write(dir, "bad vendor", "gpu", good, 1, common, 2), -EINVAL);
    CHECK_EQ_INT(cdi_spec_write(dir, "nvidia.com", "", good, 1, common, 2), -EINVAL);
    REQUIRE_EQ_INT(cdi_spec_path(dir, "nvidia.com", "gpu", path, sizeof(path)), 0);
    CHECK(access(path, F_OK) != 0);
    CHECK(cdi_valid_device_name("GPU-6f2c:1.0_a"));
    CHECK(!cdi_valid_device_name("-GPU"));
    CHECK(!cdi_valid_device_name(""));
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
