// validate.mjs — checks Kubernetes objects against kubernetes-models' schemas (the OpenAPI
// schemas of the Kubernetes API, compiled by kubernetes-models): every manifest under the
// directory given (deploy/examples: *.yaml / *.yml, multi-document) and every object src/kube writes (the
// JSON printed by kube-objects-dump: Events in full, annotation patches applied to a Pod).
// Prints TAP; exits 77 when kubernetes-models is not installed (scripts/deps.sh installs it).
//
//   node validate.mjs DEPLOY_DIR [DUMP_PROGRAM]
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

let yaml;
try {
  yaml = (await import("js-yaml")).default;
  await import("kubernetes-models/v1");
} catch (e) {
  console.log("1..0 # SKIP kubernetes-models is not installed in tests/kube/k8s-validate: " +
              "run scripts/deps.sh (it needs npm and the npm registry)");
  process.exit(77);
}

const [deployDir, dumpProgram] = process.argv.slice(2);
let n = 0, failed = 0;

function report(ok, name, why) {
  n++;
  console.log(`${ok ? "ok" : "not ok"} ${n} - ${name}`);
  if (!ok) {
    failed++;
    for (const line of String(why).split("\n")) console.log(`# ${line}`);
  }
}

async function validate(obj, name) {
  if (!obj || typeof obj !== "object" || !obj.apiVersion || !obj.kind) {
    report(false, name, "not a Kubernetes object (no apiVersion/kind)");
    return;
  }
  let mod;
  try {
    mod = await import(`kubernetes-models/${obj.apiVersion}`);
  } catch (e) {
    report(false, name, `no schema for apiVersion ${obj.apiVersion}`);
    return;
  }
  const Model = mod[obj.kind];
  if (!Model) {
    report(false, name, `no schema for ${obj.apiVersion} ${obj.kind}`);
    return;
  }
  try {
    new Model(obj).validate();
    report(true, name);
  } catch (e) {
    report(false, name, `${e.message}\n${JSON.stringify(e.errors ?? [], null, 1)}`);
  }
}

function yamlFiles(dir) {
  const out = [];
  for (const e of readdirSync(dir).sort()) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...yamlFiles(p));
    else if (/\.ya?ml$/.test(e)) out.push(p);
  }
  return out;
}

// RFC 7386 merge patch
function mergePatch(target, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const out = target && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

const basePod = {
  apiVersion: "v1", kind: "Pod",
  metadata: { name: "cuda-app", namespace: "default", annotations: { "accel.dev/vgpu-gpu": "x" } },
  spec: { nodeName: "node-a", containers: [{ name: "cuda", image: "cuda:12",
    resources: { limits: { "tencent.com/vcuda-core": "30", "tencent.com/vcuda-memory": "16" } } }] },
};

const files = yamlFiles(deployDir);
if (files.length === 0) report(false, `manifests in ${deployDir}`, "none found");
for (const f of files) {
  let docs;
  try {
    docs = yaml.loadAll(readFileSync(f, "utf8"));
  } catch (e) {
    report(false, f, `YAML error: ${e.message}`);
    continue;
  }
  let i = 0;
  for (const d of docs) {
    if (d === null || d === undefined) continue;
    await validate(d, `${f}#${i++} ${d.kind ?? "?"} ${d.metadata?.name ?? ""}`);
  }
}

if (dumpProgram) {
  const dump = JSON.parse(execFileSync(dumpProgram, { encoding: "utf8" }));
  for (const [i, o] of dump.objects.entries())
    await validate(o, `src/kube object ${i}: ${o.kind} ${o.reason ?? ""}`);
  for (const [i, p] of dump.podPatches.entries()) {
    const patched = mergePatch(basePod, p);
    await validate(patched, `src/kube pod patch ${i} applied to a Pod`);
  }
  if (dump.objects.length === 0) report(false, "src/kube objects", "the dump printed none");
}

console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
