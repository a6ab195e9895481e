/* fuzz-kube-kubeconfig.c — libFuzzer target for src/kube/kubeconfig.c's kubeconfig reader (YAML
 * through libyaml; base64 *-data fields). Checks: 0 / -EINVAL / -ENOMEM only, a message on
 * -EINVAL, nothing returned on failure, and on success an https:// server and a client
 * certificate only together with its key. Leaks show under ASan. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kubeconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *s = malloc(size ? size : 1);
    if (!s)
        return 0;
    if (size)
        memcpy(s, data, size);
    struct kube_config *cfg = NULL;
    char err[256] = "";
    int r = kube_config_parse_kubeconfig(s, size, "/base", &cfg, err, sizeof(err));
    if (r != 0 && r != -EINVAL && r != -ENOMEM)
        abort();
    if (r < 0 && cfg)
        abort();
    if (r == -EINVAL && !err[0])
        abort();
    if (r == 0) {
        if (!cfg || strncmp(cfg->server, "https://", 8) != 0)
            abort();
        if (!!(cfg->cert_file || cfg->cert_data) != !!(cfg->key_file || cfg->key_data))
            abort();
    }
    kube_config_free(cfg);
    free(s);
    return 0;
}
