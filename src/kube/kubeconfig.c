/* kubeconfig.c — owns reading the API server's address and credentials: the in-cluster
 * service-account files and kubeconfig files.
 *
 * kubeconfig fields (the format kubectl documents at
 * https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/):
 * current-context names a context; the context names a cluster (server, certificate-authority
 * or certificate-authority-data) and a user (token, tokenFile, client-certificate[-data],
 * client-key[-data]). exec and auth-provider credential plugins are refused with a message:
 * running a plugin from the node agent is not something we do. insecure-skip-tls-verify is
 * refused too: the agent always verifies the server. */
#define _GNU_SOURCE
#include "kubeconfig.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "fs.h"
#include "util.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define KUBECONFIG_MAX (4 * 1024 * 1024)

struct kube_config *kube_config_free(struct kube_config *cfg)
{
    if (!cfg)
        return NULL;
    free(cfg->server);
    free(cfg->ca_file);
    free(cfg->ca_data);
    if (cfg->token)
        explicit_bzero(cfg->token, strlen(cfg->token));
    free(cfg->token);
    free(cfg->token_file);
    free(cfg->cert_file);
    free(cfg->cert_data);
    if (cfg->key_data)
        explicit_bzero(cfg->key_data, cfg->key_data_len);
    free(cfg->key_file);
    free(cfg->key_data);
    free(cfg);
    return NULL;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int kube_base64_decode(const char *s, size_t len, char **ret, size_t *ret_len)
{
    char *out = malloc(len / 4 * 3 + 4);
    if (!out)
        return -ENOMEM;
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0, pad = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int v = b64_val(c);
        if (v < 0 || pad) {
            free(out);
            return -EINVAL;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    /* leftover bits must be the zero padding of a whole number of bytes */
    if (bits >= 6 || pad > 2 || (acc & ((1u << bits) - 1)) != 0) {
        free(out);
        return -EINVAL;
    }
    out[o] = 0;
    *ret = out;
    *ret_len = o;
    return 0;
}

/* ---- in-cluster ---- */

int kube_config_in_cluster(const char *sa_dir, struct kube_config **ret, char *err, size_t errlen)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!sa_dir)
        sa_dir = SA_DIR;
    if (!host || !*host) {
        errbuf_printf(err, errlen,
                      "not running in a cluster ($KUBERNETES_SERVICE_HOST is not set): give "
                      "--kubeconfig FILE");
        return -ENOENT;
    }
    struct kube_config *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    bool v6 = strchr(host, ':') != NULL;
    if (asprintf(&c->server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
                 port && *port ? port : "443") < 0 ||
        asprintf(&c->token_file, "%s/token", sa_dir) < 0 ||
        asprintf(&c->ca_file, "%s/ca.crt", sa_dir) < 0) {
        c->server = c->token_file = NULL;
        kube_config_free(c);
        return -ENOMEM;
    }
    if (access(c->token_file, R_OK) != 0) {
        int r = -errno;
        errbuf_printf(err, errlen,
                      "cannot read the service-account token %s: mount the pod's service "
                      "account (automountServiceAccountToken) or give --kubeconfig FILE",
                      c->token_file);
        kube_config_free(c);
        return r == -ENOENT ? -ENOENT : r;
    }
    *ret = c;
    return 0;
}

/* ---- kubeconfig ---- */

static const char *scalar(yaml_document_t *d, yaml_node_t *n)
{
    if (!n || n->type != YAML_SCALAR_NODE)
        return NULL;
    (void)d;
    return (const char *)n->data.scalar.value;
}

/* The value under key in mapping n, or NULL. */
static yaml_node_t *map_get(yaml_document_t *d, yaml_node_t *n, const char *key)
{
    if (!n || n->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const char *k = scalar(d, yaml_document_get_node(d, p->key));
        if (k && strcmp(k, key) == 0)
            return yaml_document_get_node(d, p->value);
    }
    return NULL;
}

static const char *map_str(yaml_document_t *d, yaml_node_t *n, const char *key)
{
    return scalar(d, map_get(d, n, key));
}

/* The entry of list `list` (clusters/contexts/users) whose name is name, then its `inner`
 * mapping (cluster/context/user). */
static yaml_node_t *named(yaml_document_t *d, yaml_node_t *root, const char *list, const char *name,
                          const char *inner)
{
    yaml_node_t *l = map_get(d, root, list);
    if (!l || l->type != YAML_SEQUENCE_NODE || !name)
        return NULL;
    for (yaml_node_item_t *i = l->data.sequence.items.start; i < l->data.sequence.items.top; i++) {
        yaml_node_t *e = yaml_document_get_node(d, *i);
        const char *nm = map_str(d, e, "name");
        if (nm && strcmp(nm, name) == 0) {
            yaml_node_t *in = map_get(d, e, inner);
            return in && in->type == YAML_MAPPING_NODE ? in : NULL;
        }
    }
    return NULL;
}

static int path_dup(const char *base_dir, const char *p, char **ret)
{
    int r;
    if (p[0] == '/' || !base_dir)
        r = (*ret = strdup(p)) ? 0 : -1;
    else
        r = asprintf(ret, "%s/%s", base_dir, p);
    if (r < 0) {
        *ret = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* path field or base64 data field into file/data; both given → the data wins, as kubectl. */
static int take_pem(yaml_document_t *d, yaml_node_t *n, const char *file_key, const char *data_key,
                    const char *base_dir, char **ret_file, char **ret_data, size_t *ret_len,
                    char *err, size_t errlen)
{
    const char *data = map_str(d, n, data_key);
    const char *file = map_str(d, n, file_key);
    if (data && *data) {
        int r = kube_base64_decode(data, strlen(data), ret_data, ret_len);
        if (r == -EINVAL)
            return errbuf_printf(err, errlen, "kubeconfig: %s is not base64", data_key);
        return r;
    }
    if (file && *file)
        return path_dup(base_dir, file, ret_file);
    return 0;
}

static int parse_doc(yaml_document_t *d, const char *base_dir, struct kube_config *c, char *err,
                     size_t errlen)
{
    yaml_node_t *root = yaml_document_get_root_node(d);
    if (!root || root->type != YAML_MAPPING_NODE)
        return errbuf_printf(err, errlen, "kubeconfig: not a YAML mapping");
    const char *kind = map_str(d, root, "kind");
    if (kind && strcmp(kind, "Config") != 0)
        return errbuf_printf(err, errlen, "kubeconfig: kind is %.40s, not Config", kind);
    const char *ctx_name = map_str(d, root, "current-context");
    if (!ctx_name || !*ctx_name) {
        yaml_node_t *l = map_get(d, root, "contexts");
        /* one context and no current-context: that one, as there is no other choice */
        if (l && l->type == YAML_SEQUENCE_NODE &&
            l->data.sequence.items.top - l->data.sequence.items.start == 1)
            ctx_name =
                map_str(d, yaml_document_get_node(d, l->data.sequence.items.start[0]), "name");
        if (!ctx_name)
            return errbuf_printf(err, errlen,
                                 "kubeconfig: no current-context (set one with kubectl config "
                                 "use-context NAME)");
    }
    yaml_node_t *ctx = named(d, root, "contexts", ctx_name, "context");
    if (!ctx)
        return errbuf_printf(err, errlen, "kubeconfig: context \"%.100s\" is not in contexts",
                             ctx_name);
    const char *cl_name = map_str(d, ctx, "cluster");
    const char *user_name = map_str(d, ctx, "user");
    yaml_node_t *cl = named(d, root, "clusters", cl_name, "cluster");
    if (!cl)
        return errbuf_printf(err, errlen,
                             "kubeconfig: context \"%.100s\" names cluster \"%.100s\", which is "
                             "not in clusters",
                             ctx_name, cl_name ? cl_name : "");
    const char *server = map_str(d, cl, "server");
    if (!server || strncmp(server, "https://", 8) != 0 || !server[8])
        return errbuf_printf(err, errlen, "kubeconfig: cluster \"%.100s\" needs an https:// server",
                             cl_name);
    const char *insecure = map_str(d, cl, "insecure-skip-tls-verify");
    if (insecure && strcmp(insecure, "true") == 0)
        return errbuf_printf(err, errlen,
                             "kubeconfig: insecure-skip-tls-verify is not supported: give the "
                             "cluster's certificate-authority");
    c->server = strdup(server);
    if (!c->server)
        return -ENOMEM;
    size_t sl = strlen(c->server);
    while (sl > 8 && c->server[sl - 1] == '/')
        c->server[--sl] = 0;
    int r = take_pem(d, cl, "certificate-authority", "certificate-authority-data", base_dir,
                     &c->ca_file, &c->ca_data, &c->ca_data_len, err, errlen);
    if (r < 0)
        return r;

    yaml_node_t *user = user_name ? named(d, root, "users", user_name, "user") : NULL;
    if (user_name && !user)
        return errbuf_printf(err, errlen,
                             "kubeconfig: context \"%.100s\" names user \"%.100s\", which is not "
                             "in users",
                             ctx_name, user_name);
    if (!user)
        return 0; /* anonymous */
    const char *token = map_str(d, user, "token");
    const char *token_file = map_str(d, user, "tokenFile");
    if (token && *token) {
        if (!(c->token = strdup(token)))
            return -ENOMEM;
    } else if (token_file && *token_file) {
        if ((r = path_dup(base_dir, token_file, &c->token_file)) < 0)
            return r;
    }
    r = take_pem(d, user, "client-certificate", "client-certificate-data", base_dir, &c->cert_file,
                 &c->cert_data, &c->cert_data_len, err, errlen);
    if (r < 0)
        return r;
    r = take_pem(d, user, "client-key", "client-key-data", base_dir, &c->key_file, &c->key_data,
                 &c->key_data_len, err, errlen);
    if (r < 0)
        return r;
    bool cert = c->cert_file || c->cert_data, key = c->key_file || c->key_data;
    if (cert != key)
        return errbuf_printf(err, errlen,
                             "kubeconfig: user \"%.100s\" has a client %s without a client %s",
                             user_name, cert ? "certificate" : "key", cert ? "key" : "certificate");
    if (!c->token && !c->token_file && !cert &&
        (map_get(d, user, "exec") || map_get(d, user, "auth-provider")))
        return errbuf_printf(err, errlen,
                             "kubeconfig: user \"%.100s\" uses an exec/auth-provider plugin, "
                             "which acceld does not run: give a token, tokenFile or client "
                             "certificate",
                             user_name);
    return 0;
}

int kube_config_parse_kubeconfig(const char *text, size_t len, const char *base_dir,
                                 struct kube_config **ret, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return -ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        int r = errbuf_printf(err, errlen, "kubeconfig: YAML error at line %zu: %s",
                              parser.problem_mark.line + 1,
                              parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return r;
    }
    struct kube_config *c = calloc(1, sizeof(*c));
    int r = c ? parse_doc(&doc, base_dir, c, err, errlen) : -ENOMEM;
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (r < 0) {
        kube_config_free(c);
        return r;
    }
    *ret = c;
    return 0;
}

int kube_config_load_kubeconfig(const char *path, struct kube_config **ret, char *err,
                                size_t errlen)
{
    char *text = NULL;
    size_t len = 0;
    int r = fs_read_all(path, KUBECONFIG_MAX, &text, &len);
    if (r < 0) {
        errbuf_printf(err, errlen, "cannot read kubeconfig %s: %s", path, strerror(-r));
        return r;
    }
    _cleanup_free_ char *dir = strdup(path);
    if (!dir) {
        free(text);
        return -ENOMEM;
    }
    char *slash = strrchr(dir, '/');
    const char *base = ".";
    if (slash == dir)
        base = "/";
    else if (slash) {
        *slash = 0;
        base = dir;
    }
    r = kube_config_parse_kubeconfig(text, len, base, ret, err, errlen);
    free(text);
    return r;
}
