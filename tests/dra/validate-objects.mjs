// validate-objects.mjs — validates Kubernetes objects against the kubernetes-models
// npm package's schemas (and @kubernetes-models/prometheus-operator's) (generated from the published OpenAPI). Reads a JSON
// array of objects on stdin; prints one line per object, "ok <i>" or
// "invalid <i> <kind>/<name>: <reason>"; exits 0 when it could check them
// all (verdicts are the caller's to judge), 2 on a kind it does not know.
// The package is imported from $KUBERNETES_MODELS_DIR/node_modules. Note:
// its schemas, like the OpenAPI they come from, accept unknown fields.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const dir = process.env.KUBERNETES_MODELS_DIR;
const objs = JSON.parse(readFileSync(0, "utf8"));
let status = 0;
for (const [i, o] of objs.entries()) {
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  const sub = group ? `${group}/${version}` : version;
  // Kubernetes' own kinds, then prometheus-operator's (ServiceMonitor, PrometheusRule)
  let mod, err;
  for (const pkg of ["kubernetes-models", "@kubernetes-models/prometheus-operator"]) {
    const file = path.join(dir, "node_modules", pkg, sub, `${o.kind}.js`);
    try {
      mod = await import(pathToFileURL(file).href);
      break;
    } catch (e) {
      err = e;
    }
  }
  if (!mod) {
    console.log(`unknown ${i} ${o.apiVersion} ${o.kind}: ${err.message}`);
    status = 2;
    continue;
  }
  try {
    new mod[o.kind](o).validate();
    console.log(`ok ${i}`);
  } catch (e) {
    console.log(`invalid ${i} ${o.kind}/${o.metadata?.name}: ${e.message.replace(/\n/g, " ")}`);
  }
}
process.exit(status);
