/* fuzz-dra-claim.c — libFuzzer target for the ResourceClaim parser
 * (src/dra/claim.c): any bytes in, a claim or a clean error out; a parsed
 * claim has every required field and only whole, in-range capacities. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dra_claim *c = NULL;
    char err[512] = "";
    int r = dra_claim_parse((const char *)data, size, &c, err, sizeof(err));
    if (r < 0) {
        if (c || err[0] == '\0')
            abort();
        return 0;
    }
    if (!c->namespace_ || !c->name || !c->uid || (c->n_results && !c->results))
        abort();
    for (size_t i = 0; i < c->n_results; i++) {
        const struct dra_result *x = &c->results[i];
        if (!x->request || !x->driver || !x->pool || !x->device || !x->request[0])
            abort();
        if (x->has_cores && (x->cores < 1 || x->cores > 100))
            abort();
    }
    dra_claim_free(c);
    return 0;
}
