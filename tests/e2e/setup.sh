#!/usr/bin/env bash
# Run by run.sh before any scenario (TAP like them): what a user does on a node before
# `helm install` (docs/deploy.md) — the images loaded into the node's containerd from the
# archives `make image` and `make test-image` wrote (no registry: imagePullPolicy Never), and
# the node labelled as a GPU node (the chart's nodeSelector).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
rc=0
for img in accel-image accel-test-image; do
    tar=$E2E_REPO/build/$img.tar
    if [ ! -f "$tar" ]; then
        echo "not ok - $img: $tar is missing (make image test-image, or make e2e, which builds both)"
        rc=1
        continue
    fi
    ok "build/$img.tar imported into the node's containerd" "$E2E_CLUSTER/ctr-import" "$tar" || rc=1
done
ok "the node's containerd has $E2E_IMAGE and $E2E_TEST_IMAGE" sh -c \
    "'$E2E_CLUSTER/crictl' images | grep -q 'library/accel .*$E2E_VERSION' && '$E2E_CLUSTER/crictl' images | grep -q 'library/accel-test .*$E2E_VERSION'" || rc=1
ok "node $CL_NODE_NAME labelled accel.io/gpu=true" \
    kubectl label node "$CL_NODE_NAME" accel.io/gpu=true --overwrite || rc=1
exit $rc
