/* test-kube-parse.c — src/kube's parsers of outside data without a server: /proc/<pid>/cgroup
 * forms, kubeconfig files, Pod / PodList / watch-event JSON, quantities, and the objects we
 * build (annotation patch, Event). */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup.h"
#include "kubeconfig.h"
#include "fs.h"
#include "objects.h"
#include "pod.h"
#include "tap.h"

#define UID "0b6c4a3e-1f2d-4c5b-9a8e-7d6c5b4a3f2e"
#define UIDU "0b6c4a3e_1f2d_4c5b_9a8e_7d6c5b4a3f2e"
#define CID "3f8a2b1c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"

static int cg(const char *text, struct kube_cgroup_ref *ref)
{
    return kube_cgroup_parse(text, strlen(text), ref);
}

TEST(cgroup_v2_systemd_containerd)
{
    struct kube_cgroup_ref r;
    REQUIRE_EQ_INT(cg("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UIDU
                      ".slice/cri-containerd-" CID ".scope\n",
                      &r),
                   0);
    CHECK_EQ_STR(r.pod_uid, UID);
    CHECK_EQ_STR(r.container_id, CID);
    CHECK_EQ_INT(r.runtime, KUBE_CGROUP_RUNTIME_CONTAINERD);
    CHECK_EQ_STR(kube_cgroup_runtime_name(r.runtime), "containerd");
    /* guaranteed QoS: no QoS slice */
    REQUIRE_EQ_INT(cg("0::/kubepods.slice/kubepods-pod" UIDU ".slice/crio-" CID ".scope", &r), 0);
    CHECK_EQ_STR(r.pod_uid, UID);
    CHECK_EQ_INT(r.runtime, KUBE_CGROUP_RUNTIME_CRIO);
    /* besteffort, docker */
    REQUIRE_EQ_INT(cg("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UIDU
                      ".slice/docker-" CID ".scope\n",
                      &r),
                   0);
    CHECK_EQ_INT(r.runtime, KUBE_CGROUP_RUNTIME_DOCKER);
    /* a container's own sub-cgroup (systemd inside the container) keeps the container */
    REQUIRE_EQ_INT(cg("0::/kubepods.slice/kubepods-pod" UIDU ".slice/cri-containerd-" CID
                      ".scope/init.scope\n",
                      &r),
                   0);
    CHECK_EQ_STR(r.container_id, CID);
}

TEST(cgroup_v1_cgroupfs_and_nesting)
{
    struct kube_cgroup_ref r;
    const char *v1 = "12:pids:/kubepods/burstable/pod" UID "/" CID "\n"
                     "11:memory:/kubepods/burstable/pod" UID "/" CID "\n"
                     "1:name=systemd:/kubepods/burstable/pod" UID "/" CID "\n";
    REQUIRE_EQ_INT(cg(v1, &r), 0);
    CHECK_EQ_STR(r.pod_uid, UID);
    CHECK_EQ_STR(r.container_id, CID);
    CHECK_EQ_INT(r.runtime, KUBE_CGROUP_RUNTIME_UNKNOWN);
    /* guaranteed pod under cgroupfs; upper-case hex folded */
    REQUIRE_EQ_INT(cg("4:cpu,cpuacct:/kubepods/pod0B6C4A3E-1F2D-4C5B-9A8E-7D6C5B4A3F2E/" CID, &r),
                   0);
    CHECK_EQ_STR(r.pod_uid, UID);
    /* kind / a node in docker: the pod segment is further down */
    REQUIRE_EQ_INT(cg("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                      "kubelet-kubepods-besteffort-pod" UIDU ".slice/cri-containerd-" CID ".scope",
                      &r),
                   0);
    CHECK_EQ_STR(r.pod_uid, UID);
    CHECK_EQ_STR(r.container_id, CID);
    REQUIRE_EQ_INT(cg("0::/docker/abc/kubepods/besteffort/pod" UID "/" CID, &r), 0);
    CHECK_EQ_STR(r.container_id, CID);
    /* the pod's own cgroup (no container) */
    REQUIRE_EQ_INT(cg("0::/kubepods/besteffort/pod" UID "\n", &r), 0);
    CHECK_EQ_STR(r.container_id, "");
    /* CRI-O's monitor is not the container */
    REQUIRE_EQ_INT(
        cg("0::/kubepods.slice/kubepods-pod" UIDU ".slice/crio-conmon-" CID ".scope", &r), 0);
    CHECK_EQ_STR(r.container_id, "");
}

TEST(cgroup_refuses_what_is_not_a_pod)
{
    struct kube_cgroup_ref r = {.pod_uid = "untouched"};
    CHECK_EQ_INT(cg("0::/system.slice/sshd.service\n", &r), -ENOENT);
    CHECK_EQ_INT(cg("0::/user.slice/user-1000.slice/session-2.scope", &r), -ENOENT);
    CHECK_EQ_INT(cg("", &r), -ENOENT);
    CHECK_EQ_INT(cg("0::/kubepods/pod" UID "x/" CID, &r), -ENOENT); /* uid too long */
    CHECK_EQ_INT(cg("0::/kubepods/pod0b6c4a3e-1f2d-4c5b-9a8e-7d6c5b4a3f2/x", &r), -ENOENT);
    CHECK_EQ_INT(cg("0::/kubepods.slice/kubepods-podzzzz.slice/x", &r), -ENOENT);
    CHECK_EQ_INT(cg("0::/x.slice/notkubepods-pod" UIDU ".slice/x", &r), -ENOENT);
    CHECK_EQ_INT(cg("0::/x.slice/kubepodspod" UIDU ".slice/x", &r), -ENOENT);
    CHECK_EQ_STR(r.pod_uid, "untouched");
    /* two lines naming different pods: the text cannot be trusted */
    CHECK_EQ_INT(cg("3:memory:/kubepods/pod" UID "/" CID "\n"
                    "2:cpu:/kubepods/pod1b6c4a3e-1f2d-4c5b-9a8e-7d6c5b4a3f2e/" CID "\n",
                    &r),
                 -EPROTO);
    CHECK_EQ_STR(r.pod_uid, "untouched");
    /* v2 wins over v1 (hybrid hosts) */
    REQUIRE_EQ_INT(cg("3:memory:/kubepods/pod1b6c4a3e-1f2d-4c5b-9a8e-7d6c5b4a3f2e/" CID "\n"
                      "0::/kubepods/pod" UID "/" CID "\n",
                      &r),
                   0);
    CHECK_EQ_STR(r.pod_uid, UID);
}

TEST(cgroup_read_uses_the_proc_root)
{
    char dir[600], file[700];
    snprintf(dir, sizeof(dir), "%s/proc/4242", tap_tmpdir());
    REQUIRE_EQ_INT(fs_mkdir_p(dir, 0755), 0);
    snprintf(file, sizeof(file), "%s/cgroup", dir);
    const char *t = "0::/kubepods/burstable/pod" UID "/" CID "\n";
    REQUIRE_EQ_INT(fs_write_atomic(file, t, strlen(t), 0644), 0);
    char root[600];
    snprintf(root, sizeof(root), "%s/proc", tap_tmpdir());
    struct kube_cgroup_ref r;
    REQUIRE_EQ_INT(kube_cgroup_read(root, 4242, &r), 0);
    CHECK_EQ_STR(r.container_id, CID);
    CHECK_EQ_INT(kube_cgroup_read(root, 4243, &r), -ENOENT);
    CHECK_EQ_INT(kube_cgroup_read(root, 0, &r), -EINVAL);
    /* this test's own process is no pod (outside a cluster) or is one: either answer is a
     * valid one, never a crash */
    int self = kube_cgroup_read(NULL, getpid(), &r);
    CHECK(self == 0 || self == -ENOENT);
}

TEST(quantities)
{
    int64_t v;
    CHECK_EQ_INT(kube_quantity_parse_milli("30", &v), 0);
    CHECK_EQ_INT(v, 30000);
    CHECK_EQ_INT(kube_quantity_parse_milli("500m", &v), 0);
    CHECK_EQ_INT(v, 500);
    CHECK_EQ_INT(kube_quantity_parse_milli("1Ki", &v), 0);
    CHECK_EQ_INT(v, 1024000);
    CHECK_EQ_INT(kube_quantity_parse_milli("1.5", &v), 0);
    CHECK_EQ_INT(v, 1500);
    CHECK_EQ_INT(kube_quantity_parse_milli("2k", &v), 0);
    CHECK_EQ_INT(v, 2000000);
    CHECK_EQ_INT(kube_quantity_parse_milli("1e3", &v), 0);
    CHECK_EQ_INT(v, 1000000);
    CHECK_EQ_INT(kube_quantity_parse_milli("16Gi", &v), 0);
    CHECK_EQ_INT(v, 16LL * 1024 * 1024 * 1024 * 1000);
    CHECK_EQ_INT(kube_quantity_parse_milli("0.5Ki", &v), 0);
    CHECK_EQ_INT(v, 512000);
    v = 7;
    CHECK_EQ_INT(kube_quantity_parse_milli("", &v), -EINVAL);
    CHECK_EQ_INT(kube_quantity_parse_milli("-1", &v), -EINVAL);
    CHECK_EQ_INT(kube_quantity_parse_milli("1X", &v), -EINVAL);
    CHECK_EQ_INT(kube_quantity_parse_milli("1Kii", &v), -EINVAL);
    CHECK_EQ_INT(kube_quantity_parse_milli("1n", &v), -ERANGE);
    CHECK_EQ_INT(kube_quantity_parse_milli("100Ei", &v), -ERANGE);
    CHECK_EQ_INT(v, 7);
}

static const char *POD_JSON =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\","
    "\"uid\":\"" UID "\",\"resourceVersion\":\"12\",\"creationTimestamp\":\"2024-01-02T03:04:05Z\","
    "\"annotations\":{\"a\":\"b\"}},\"spec\":{\"nodeName\":\"n\",\"containers\":[{\"name\":\"c\","
    "\"resources\":{\"requests\":{\"cpu\":\"1\"}}}],\"initContainers\":[{\"name\":\"i\"}]},"
    "\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"c\",\"containerID\":"
    "\"containerd://0123abcd\"},{\"name\":\"waiting\"},{\"name\":\"x\",\"containerID\":\"\"}]}}";

TEST(pod_json)
{
    json_t *j = json_loads(POD_JSON, 0, NULL);
    struct kube_pod *p = NULL;
    char err[256];
    REQUIRE_EQ_INT(kube_pod_from_json(j, &p, err, sizeof(err)), 0);
    CHECK_EQ_STR(p->uid, UID);
    CHECK_EQ_STR(p->phase, "Running");
    CHECK_EQ_INT(p->n_init_containers, 1);
    CHECK_EQ_STR(kube_container_request(kube_pod_container(p, "c"), "cpu"), "1");
    struct kube_pod *d = NULL;
    REQUIRE_EQ_INT(kube_pod_dup(p, &d), 0);
    CHECK_EQ_STR(kube_pod_annotation(d, "a"), "b");
    CHECK_EQ_INT(d->creation_time, p->creation_time);
    /* started containers' runtime ids, as /proc/<pid>/cgroup names them */
    CHECK_EQ_STR(kube_pod_container_id(p, "c"), "0123abcd");
    CHECK_EQ_STR(kube_pod_container_id(d, "c"), "0123abcd");
    CHECK(kube_pod_container_id(p, "waiting") == NULL);
    CHECK(kube_pod_container_id(p, "x") == NULL);
    CHECK_EQ_INT(p->n_container_ids, 1);
    kube_pod_free(d);
    kube_pod_free(p);
    json_decref(j);

    /* broken shapes are refused with a reason */
    const char *bad[] = {
        "{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\"}}",           /* no uid */
        "{\"metadata\":{\"uid\":1,\"name\":\"p\",\"namespace\":\"n\"}}", /* uid a number */
        "{\"kind\":\"Node\",\"metadata\":{\"uid\":\"u\",\"name\":\"p\",\"namespace\":\"n\"}}",
        "{\"metadata\":{\"uid\":\"u\",\"name\":\"p\",\"namespace\":\"n\"},\"spec\":{"
        "\"containers\":[{\"name\":\"c\",\"resources\":{\"requests\":{\"x\":3}}}]}}",
        "{\"metadata\":{\"uid\":\"u\",\"name\":\"p\",\"namespace\":\"n\",\"creationTimestamp\":"
        "\"yesterday\"}}",
        "{\"metadata\":{\"uid\":\"u\",\"name\":\"p\",\"namespace\":\"n\"},\"status\":{"
        "\"containerStatuses\":[{\"containerID\":\"containerd://1\"}]}}", /* status without name */
        "{\"metadata\":{\"uid\":\"u\",\"name\":\"p\",\"namespace\":\"n\"},\"status\":{"
        "\"containerStatuses\":{}}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        j = json_loads(bad[i], 0, NULL);
        p = NULL;
        err[0] = 0;
        CHECK_EQ_INT(kube_pod_from_json(j, &p, err, sizeof(err)), -EINVAL);
        CHECK(p == NULL);
        CHECK(err[0] != 0);
        json_decref(j);
    }
}

TEST(watch_events)
{
    struct kube_watch_event ev;
    char err[256], line[4096];
    snprintf(line, sizeof(line), "{\"type\":\"MODIFIED\",\"object\":%s}", POD_JSON);
    REQUIRE_EQ_INT(kube_watch_event_parse(line, strlen(line), &ev, err, sizeof(err)), 0);
    CHECK_EQ_INT(ev.type, KUBE_WATCH_MODIFIED);
    CHECK_EQ_STR(ev.resource_version, "12");
    CHECK(ev.pod && strcmp(ev.pod->name, "p") == 0);
    kube_watch_event_clear(&ev);
    const char *bm = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\","
                     "\"metadata\":{\"resourceVersion\":\"99\"}}}";
    REQUIRE_EQ_INT(kube_watch_event_parse(bm, strlen(bm), &ev, err, sizeof(err)), 0);
    CHECK_EQ_INT(ev.type, KUBE_WATCH_BOOKMARK);
    CHECK_EQ_STR(ev.resource_version, "99");
    CHECK(ev.pod == NULL);
    kube_watch_event_clear(&ev);
    const char *gone = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,"
                       "\"message\":\"too old resource version\"}}";
    REQUIRE_EQ_INT(kube_watch_event_parse(gone, strlen(gone), &ev, err, sizeof(err)), 0);
    CHECK_EQ_INT(ev.error_code, 410);
    kube_watch_event_clear(&ev);
    const char *bad[] = {"",
                         "{}",
                         "{\"type\":\"ADDED\"}",
                         "{\"type\":\"NOPE\",\"object\":{}}",
                         "{\"type\":\"ADDED\",\"object\":{\"metadata\":{}}}",
                         "[1,2]",
                         "{\"type\":\"ADDED\",\"type\":\"DELETED\",\"object\":{}}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_EQ_INT(kube_watch_event_parse(bad[i], strlen(bad[i]), &ev, err, sizeof(err)),
                     -EINVAL);
}

TEST(pod_list)
{
    char text[4096];
    snprintf(text, sizeof(text),
             "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
             "\"7\"},\"items\":[%s]}",
             POD_JSON);
    struct kube_pod **pods = NULL;
    size_t n = 0;
    char *rv = NULL, err[256];
    REQUIRE_EQ_INT(kube_pod_list_parse(text, strlen(text), &pods, &n, &rv, NULL, err, sizeof(err)),
                   0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_STR(rv, "7");
    kube_pod_free(pods[0]);
    free(pods);
    free(rv);
    const char *nolv = "{\"kind\":\"PodList\",\"items\":[]}";
    CHECK_EQ_INT(kube_pod_list_parse(nolv, strlen(nolv), &pods, &n, &rv, NULL, err, sizeof(err)),
                 -EINVAL);
}

/* Issue 22, F11: one pod with 4097 annotations, one with a NUL in an annotation value and
 * one named with a '/' are left out of the list (and said which and why); the good pod is
 * there. Before, any one of them made the whole list unusable. */
TEST(one_bad_pod_costs_only_itself)
{
    size_t cap = 300000;
    char *text = malloc(cap);
    REQUIRE(text != NULL);
    size_t at = (size_t)snprintf(text, cap,
                                 "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"7\"},"
                                 "\"items\":[%s,{\"metadata\":{\"uid\":\"u-many\",\"name\":"
                                 "\"many\",\"namespace\":\"t\",\"annotations\":{",
                                 POD_JSON);
    for (int i = 0; i < 4097; i++)
        at += (size_t)snprintf(text + at, cap - at, "%s\"a%d\":\"v\"", i ? "," : "", i);
    at += (size_t)snprintf(
        text + at, cap - at,
        "}}},{\"metadata\":{\"uid\":\"u-nul\",\"name\":\"nul\",\"namespace\":\"t\","
        "\"annotations\":{\"x\":\"a\\u0000b\"}}},"
        "{\"metadata\":{\"uid\":\"u-slash\",\"name\":\"a/b\",\"namespace\":\"t\"}}]}");
    REQUIRE(at < cap);
    struct kube_pod **pods = NULL;
    size_t n = 0;
    char *rv = NULL, err[256] = "";
    struct kube_pod_skips sk;
    REQUIRE_EQ_INT(kube_pod_list_parse(text, at, &pods, &n, &rv, &sk, err, sizeof(err)), 0);
    REQUIRE_EQ_INT(n, 1);
    CHECK_EQ_STR(pods[0]->name, "p");
    REQUIRE_EQ_INT(sk.n, 3);
    CHECK_EQ_STR(sk.e[0].uid, "u-many");
    CHECK_EQ_STR(sk.e[0].name, "many");
    CHECK(strstr(sk.e[0].why, "4097") != NULL);
    CHECK_EQ_STR(sk.e[1].uid, "u-nul");
    CHECK(strstr(sk.e[1].why, "NUL") != NULL);
    CHECK_EQ_STR(sk.e[2].uid, "u-slash");
    CHECK_EQ_STR(sk.e[2].name, ""); /* not believed: no Event is posted on it */
    kube_pod_free(pods[0]);
    free(pods);
    free(rv);
    /* the same pods in watch events: the event is usable, its pod is skipped */
    struct kube_watch_event ev;
    const char *line = "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"uid\":\"u-nul\","
                       "\"name\":\"nul\",\"namespace\":\"t\",\"resourceVersion\":\"9\","
                       "\"annotations\":{\"x\":\"v\\u0000\"}}}}";
    REQUIRE_EQ_INT(kube_watch_event_parse(line, strlen(line), &ev, err, sizeof(err)), 0);
    CHECK(ev.is_skipped);
    CHECK(ev.pod == NULL);
    CHECK_EQ_STR(ev.resource_version, "9");
    CHECK_EQ_STR(ev.skipped.uid, "u-nul");
    CHECK(strstr(ev.skipped.why, "NUL") != NULL);
    kube_watch_event_clear(&ev);
    free(text);
}

static int kc(const char *text, struct kube_config **cfg, char *err)
{
    *cfg = NULL;
    err[0] = 0;
    return kube_config_parse_kubeconfig(text, strlen(text), "/etc/k", cfg, err, 512);
}

TEST(kubeconfig_fields_and_errors)
{
    struct kube_config *c;
    char err[512];
    REQUIRE_EQ_INT(kc("current-context: a\n"
                      "clusters: [{name: c, cluster: {server: 'https://h:6443/', "
                      "certificate-authority: ca.pem}}]\n"
                      "contexts: [{name: a, context: {cluster: c, user: u}}]\n"
                      "users: [{name: u, user: {client-certificate: /x/c.pem, client-key: k.pem, "
                      "token: abc}}]\n",
                      &c, err),
                   0);
    CHECK_EQ_STR(c->server, "https://h:6443");
    CHECK_EQ_STR(c->ca_file, "/etc/k/ca.pem");
    CHECK_EQ_STR(c->cert_file, "/x/c.pem");
    CHECK_EQ_STR(c->key_file, "/etc/k/k.pem");
    CHECK_EQ_STR(c->token, "abc");
    kube_config_free(c);
    /* -data wins over the file, decoded */
    REQUIRE_EQ_INT(kc("current-context: a\n"
                      "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: "
                      "f, certificate-authority-data: aGVsbG8=}}]\n"
                      "contexts: [{name: a, context: {cluster: c}}]\n",
                      &c, err),
                   0);
    CHECK(c->ca_file == NULL);
    CHECK_EQ_STR(c->ca_data, "hello");
    CHECK_EQ_INT(c->ca_data_len, 5);
    kube_config_free(c);

    struct {
        const char *text, *want;
    } bad[] = {
        {"clusters: []\n", "current-context"},
        {"current-context: a\ncontexts: []\n", "\"a\" is not in contexts"},
        {"current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n", "not in clusters"},
        {"current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
         "clusters: [{name: c, cluster: {server: 'http://h'}}]\n",
         "https://"},
        {"current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]\n",
         "insecure-skip-tls-verify"},
        {"current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {exec: {command: aws}}}]\n",
         "exec"},
        {"current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://h'}}]\n"
         "users: [{name: u, user: {client-certificate: c.pem}}]\n",
         "without a client key"},
        {"current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: '!'}}]\n",
         "base64"},
        {"kind: Pod\n", "not Config"},
        {"[1, 2]\n", "mapping"},
        {"a: [\n", "YAML error"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ_INT(kc(bad[i].text, &c, err), -EINVAL);
        CHECK(c == NULL);
        if (!strstr(err, bad[i].want))
            tap_fail(__FILE__, __LINE__, "case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].want);
    }
}

TEST(base64)
{
    char *out;
    size_t n;
    REQUIRE_EQ_INT(kube_base64_decode("aGk=", 4, &out, &n), 0);
    CHECK_EQ_STR(out, "hi");
    free(out);
    REQUIRE_EQ_INT(kube_base64_decode("aGk\n", 4, &out, &n), 0);
    CHECK_EQ_STR(out, "hi");
    free(out);
    CHECK_EQ_INT(kube_base64_decode("a", 1, &out, &n), -EINVAL);
    CHECK_EQ_INT(kube_base64_decode("aGl=", 4, &out, &n), -EINVAL); /* non-zero pad bits */
    CHECK_EQ_INT(kube_base64_decode("aG=k", 4, &out, &n), -EINVAL);
}

TEST(objects)
{
    const char *k[] = {"b", "a"}, *v[] = {"1", NULL};
    char *s = NULL;
    REQUIRE_EQ_INT(kube_annotation_patch(k, v, 2, &s), 0);
    CHECK_EQ_STR(s, "{\"metadata\":{\"annotations\":{\"a\":null,\"b\":\"1\"}}}");
    free(s);
    CHECK_EQ_INT(kube_annotation_patch(k, v, 0, &s), -EINVAL);
    struct kube_event_spec e = {.namespace = "ns",
                                .pod_name = "p",
                                .pod_uid = UID,
                                .reason = "R",
                                .message = "m",
                                .component = "acceld",
                                .host = "n",
                                .time = 0};
    REQUIRE_EQ_INT(kube_event_json(&e, &s), 0);
    json_t *j = json_loads(s, 0, NULL);
    CHECK_EQ_STR(json_string_value(json_object_get(j, "firstTimestamp")), "1970-01-01T00:00:00Z");
    CHECK_EQ_STR(json_string_value(json_object_get(j, "type")), "Normal");
    json_decref(j);
    free(s);
    /* a long message is cut at a character boundary, never inside one */
    char msg[2100];
    for (size_t i = 0; i + 2 < sizeof(msg); i += 2)
        memcpy(msg + i, "\xc3\xa9", 2);
    msg[sizeof(msg) - 2] = 0;
    e.message = msg;
    CHECK_EQ_INT(kube_event_json(&e, &s), 0);
    free(s);
    e.reason = "";
    CHECK_EQ_INT(kube_event_json(&e, &s), -EINVAL);
}

int main(int argc, char **argv)
{
    return tap_main(argc, argv);
}
