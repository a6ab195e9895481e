/* kubeconfig.h — where the API server is and how acceld proves who it is: the in-cluster
 * service-account files or a standard kubeconfig file (YAML, read with libyaml).
 *
 * Strings are owned by struct kube_config and freed by kube_config_free. File paths are kept
 * as paths (the token file is re-read on each request: bound service-account tokens rotate);
 * inline *-data fields are kept base64-decoded in memory. Not thread-safe; no I/O besides
 * the files named. */
#pragma once

#include <stddef.h>

struct kube_config {
    char *server;  /* "https://10.0.0.1:443", no trailing '/' */
    char *ca_file; /* PEM file, or NULL */
    char *ca_data; /* PEM bytes (certificate-authority-data), or NULL */
    size_t ca_data_len;
    char *token;      /* bearer token given inline, or NULL */
    char *token_file; /* bearer token read from this file per request, or NULL */
    char *cert_file;  /* client certificate (PEM) */
    char *cert_data;
    size_t cert_data_len;
    char *key_file; /* client key (PEM) */
    char *key_data;
    size_t key_data_len;
};

struct kube_config *kube_config_free(struct kube_config *cfg);

/* The in-cluster configuration: $KUBERNETES_SERVICE_HOST / $KUBERNETES_SERVICE_PORT and
 * <sa_dir>/token, <sa_dir>/ca.crt (sa_dir NULL: /var/run/secrets/kubernetes.io/serviceaccount).
 * Returns 0, -ENOENT (not in a cluster: no host variable, or no token file), -ENOMEM;
 * err says which. */
int kube_config_in_cluster(const char *sa_dir, struct kube_config **ret, char *err, size_t errlen);

/* Parses kubeconfig text (len bytes): the current context's cluster and user. Relative file
 * paths are taken relative to base_dir (the kubeconfig's directory, as kubectl does; NULL:
 * as given). Returns 0, -EINVAL (err says what is wrong or missing), -ENOMEM. */
int kube_config_parse_kubeconfig(const char *text, size_t len, const char *base_dir,
                                 struct kube_config **ret, char *err, size_t errlen);

/* Reads and parses a kubeconfig file. -errno of the read, or as above. */
int kube_config_load_kubeconfig(const char *path, struct kube_config **ret, char *err,
                                size_t errlen);

/* Decodes standard base64 (padding optional, whitespace ignored). *ret is owned,
 * NUL-terminated. Returns 0, -EINVAL, -ENOMEM. */
int kube_base64_decode(const char *s, size_t len, char **ret, size_t *ret_len);
