#!/usr/bin/python3
"""Checks proto/ against the kubelet APIs' wire contract: every message, field
name, number, type and repetition, and every service method with its request
and response types and streaming, for device plugin v1beta1, pod-resources
v1, plugin registration v1 and DRA v1 / v1beta1. A renumbered or retyped field breaks the kubelet silently; this fails
loudly instead. Prints TAP; exits 77 without protoc / python3-protobuf."""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    from google.protobuf import descriptor_pb2
except ImportError:
    print("1..0 # SKIP python3-protobuf is not installed")
    sys.exit(77)
if not shutil.which("protoc"):
    print("1..0 # SKIP protoc is not installed")
    sys.exit(77)

SRC = os.environ.get("ACCEL_SOURCE_ROOT", ".")
F = descriptor_pb2.FieldDescriptorProto
R, O = "repeated", "single"
S, B, I32, I64, U64, M = F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_INT32, F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_MESSAGE

# message -> [(field, number, type, label, message type or None)]
DEVICEPLUGIN = {
    "DevicePluginOptions": [("pre_start_required", 1, B, O, None),
                            ("get_preferred_allocation_available", 2, B, O, None)],
    "RegisterRequest": [("version", 1, S, O, None), ("endpoint", 2, S, O, None),
                        ("resource_name", 3, S, O, None),
                        ("options", 4, M, O, ".v1beta1.DevicePluginOptions")],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, M, R, ".v1beta1.Device")],
    "TopologyInfo": [("nodes", 1, M, R, ".v1beta1.NUMANode")],
    "NUMANode": [("ID", 1, I64, O, None)],
    "Device": [("ID", 1, S, O, None), ("health", 2, S, O, None),
               ("topology", 3, M, O, ".v1beta1.TopologyInfo")],
    "PreStartContainerRequest": [("devices_ids", 1, S, R, None)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [("container_requests", 1, M, R,
                                    ".v1beta1.ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, S, R, None),
                                            ("must_include_deviceIDs", 2, S, R, None),
                                            ("allocation_size", 3, I32, O, None)],
    "PreferredAllocationResponse": [("container_responses", 1, M, R,
                                     ".v1beta1.ContainerPreferredAllocationResponse")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, S, R, None)],
    "AllocateRequest": [("container_requests", 1, M, R, ".v1beta1.ContainerAllocateRequest")],
    "ContainerAllocateRequest": [("devices_ids", 1, S, R, None)],
    "AllocateResponse": [("container_responses", 1, M, R,
                          ".v1beta1.ContainerAllocateResponse")],
    "ContainerAllocateResponse": [
        ("envs", 1, M, R, ".v1beta1.ContainerAllocateResponse.EnvsEntry"),
        ("mounts", 2, M, R, ".v1beta1.Mount"),
        ("devices", 3, M, R, ".v1beta1.DeviceSpec"),
        ("annotations", 4, M, R, ".v1beta1.ContainerAllocateResponse.AnnotationsEntry"),
        ("cdi_devices", 5, M, R, ".v1beta1.CDIDevice")],
    "Mount": [("container_path", 1, S, O, None), ("host_path", 2, S, O, None),
              ("read_only", 3, B, O, None)],
    "DeviceSpec": [("container_path", 1, S, O, None), ("host_path", 2, S, O, None),
                   ("permissions", 3, S, O, None)],
    "CDIDevice": [("name", 1, S, O, None)],
}
DEVICEPLUGIN_SERVICES = {
    "Registration": [("Register", "RegisterRequest", "Empty", False)],
    "DevicePlugin": [
        ("GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
        ("ListAndWatch", "Empty", "ListAndWatchResponse", True),
        ("GetPreferredAllocation", "PreferredAllocationRequest", "PreferredAllocationResponse",
         False),
        ("Allocate", "AllocateRequest", "AllocateResponse", False),
        ("PreStartContainer", "PreStartContainerRequest", "PreStartContainerResponse", False)],
}

PODRESOURCES = {
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [("devices", 1, M, R, ".v1.ContainerDevices"),
                                     ("cpu_ids", 2, I64, R, None),
                                     ("memory", 3, M, R, ".v1.ContainerMemory")],
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, M, R, ".v1.PodResources")],
    "PodResources": [("name", 1, S, O, None), ("namespace", 2, S, O, None),
                     ("containers", 3, M, R, ".v1.ContainerResources")],
    "ContainerResources": [("name", 1, S, O, None),
                           ("devices", 2, M, R, ".v1.ContainerDevices"),
                           ("cpu_ids", 3, I64, R, None),
                           ("memory", 4, M, R, ".v1.ContainerMemory"),
                           ("dynamic_resources", 5, M, R, ".v1.DynamicResource")],
    "ContainerMemory": [("memory_type", 1, S, O, None), ("size", 2, U64, O, None),
                        ("topology", 3, M, O, ".v1.TopologyInfo")],
    "ContainerDevices": [("resource_name", 1, S, O, None), ("device_ids", 2, S, R, None),
                         ("topology", 3, M, O, ".v1.TopologyInfo")],
    "TopologyInfo": [("nodes", 1, M, R, ".v1.NUMANode")],
    "NUMANode": [("ID", 1, I64, O, None)],
    "DynamicResource": [("claim_name", 2, S, O, None), ("claim_namespace", 3, S, O, None),
                        ("claim_resources", 4, M, R, ".v1.ClaimResource")],
    "ClaimResource": [("cdi_devices", 1, M, R, ".v1.CDIDevice"), ("driver_name", 2, S, O, None),
                      ("pool_name", 3, S, O, None), ("device_name", 4, S, O, None)],
    "CDIDevice": [("name", 1, S, O, None)],
    "GetPodResourcesRequest": [("pod_name", 1, S, O, None), ("pod_namespace", 2, S, O, None)],
    "GetPodResourcesResponse": [("pod_resources", 1, M, O, ".v1.PodResources")],
}
PODRESOURCES_SERVICES = {
    "PodResourcesLister": [
        ("List", "ListPodResourcesRequest", "ListPodResourcesResponse", False),
        ("GetAllocatableResources", "AllocatableResourcesRequest",
         "AllocatableResourcesResponse", False),
        ("Get", "GetPodResourcesRequest", "GetPodResourcesResponse", False)],
}

# pluginregistration v1 (package `pluginregistration`, as upstream) and DRA
# v1 / v1beta1 (kubernetes staging/src/k8s.io/kubelet/pkg/apis/{pluginregistration,dra}/).
PLUGINREG = {
    "PluginInfo": [("type", 1, S, O, None), ("name", 2, S, O, None), ("endpoint", 3, S, O, None),
                   ("supported_versions", 4, S, R, None)],
    "RegistrationStatus": [("plugin_registered", 1, B, O, None), ("error", 2, S, O, None)],
    "RegistrationStatusResponse": [],
    "InfoRequest": [],
}
PLUGINREG_SERVICES = {
    "Registration": [("GetInfo", "InfoRequest", "PluginInfo", False),
                     ("NotifyRegistrationStatus", "RegistrationStatus",
                      "RegistrationStatusResponse", False)],
}


# DRA resource health v1alpha1 (kubernetes staging/src/k8s.io/kubelet/pkg/apis/dra-health/).
E = F.TYPE_ENUM
DRAHEALTH = {
    "NodeWatchResourcesRequest": [],
    "DeviceIdentifier": [("pool_name", 1, S, O, None), ("device_name", 2, S, O, None)],
    "DeviceHealth": [("device", 1, M, O, ".v1alpha1.DeviceIdentifier"), ("health", 2, E, O, None),
                     ("last_updated_time", 3, I64, O, None)],
    "NodeWatchResourcesResponse": [("devices", 1, M, R, ".v1alpha1.DeviceHealth")],
}
DRAHEALTH_SERVICES = {
    "DRAResourceHealth": [("NodeWatchResources", "NodeWatchResourcesRequest",
                           "NodeWatchResourcesResponse", True)],
}


def drahealth_enum(fd):
    want = [("UNKNOWN", 0), ("HEALTHY", 1), ("UNHEALTHY", 2)]
    got = {e.name: [(v.name, v.number) for v in e.value] for e in fd.enum_type}
    return [] if got == {"HealthStatus": want} else ["enums %s, want HealthStatus %s" % (got, want)]


def dra(v):
    p = ".k8s.io.kubelet.pkg.apis.dra.%s." % v
    msgs = {
        "NodePrepareResourcesRequest": [("claims", 1, M, R, p + "Claim")],
        "NodePrepareResourcesResponse": [
            ("claims", 1, M, R, p + "NodePrepareResourcesResponse.ClaimsEntry")],
        "NodePrepareResourceResponse": [("devices", 1, M, R, p + "Device"),
                                        ("error", 2, S, O, None)],
        "Device": [("request_names", 1, S, R, None), ("pool_name", 2, S, O, None),
                   ("device_name", 3, S, O, None), ("cdi_device_ids", 4, S, R, None)],
        "NodeUnprepareResourcesRequest": [("claims", 1, M, R, p + "Claim")],
        "NodeUnprepareResourcesResponse": [
            ("claims", 1, M, R, p + "NodeUnprepareResourcesResponse.ClaimsEntry")],
        "NodeUnprepareResourceResponse": [("error", 1, S, O, None)],
        "Claim": [("namespace", 1, S, O, None), ("uid", 2, S, O, None), ("name", 3, S, O, None)],
    }
    services = {"DRAPlugin": [
        ("NodePrepareResources", "NodePrepareResourcesRequest", "NodePrepareResourcesResponse",
         False),
        ("NodeUnprepareResources", "NodeUnprepareResourcesRequest",
         "NodeUnprepareResourcesResponse", False)]}
    maps = {"NodePrepareResourcesResponse.ClaimsEntry": p + "NodePrepareResourceResponse",
            "NodeUnprepareResourcesResponse.ClaimsEntry": p + "NodeUnprepareResourceResponse"}
    return msgs, services, maps


def load(rel):
    tmp = tempfile.mkdtemp()
    try:
        out = os.path.join(tmp, "set.pb")
        d = os.path.join(SRC, os.path.dirname(rel))
        subprocess.check_call(["protoc", "-I", d, "--descriptor_set_out", out,
                               os.path.basename(rel)])
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
        return fds.file[0]
    finally:
        shutil.rmtree(tmp)


def check_file(fd, package, messages, services, maps=None):
    errors = []
    if fd.package != package:
        errors.append("package %s, want %s" % (fd.package, package))
    got = {m.name: m for m in fd.message_type}
    if set(got) != set(messages):
        errors.append("messages differ: extra %s, missing %s" %
                      (sorted(set(got) - set(messages)), sorted(set(messages) - set(got))))
    for name, fields in messages.items():
        m = got.get(name)
        if m is None:
            continue
        have = [(f.name, f.number, f.type,
                 R if f.label == F.LABEL_REPEATED else O,
                 f.type_name if f.type == M else None) for f in m.field]
        if sorted(have, key=lambda x: x[1]) != sorted(fields, key=lambda x: x[1]):
            errors.append("%s: %s, want %s" % (name, have, fields))
        for nested in m.nested_type:  # map entries: key = 1 string, value = 2
            if nested.options.map_entry:
                # value: a string unless maps names its message type
                want_v = (maps or {}).get(name + "." + nested.name)
                kv = [(f.name, f.number, f.type, f.type_name if f.type == M else None)
                      for f in nested.field]
                want = [("key", 1, S, None),
                        ("value", 2, M, want_v) if want_v else ("value", 2, S, None)]
                if kv != want:
                    errors.append("%s.%s: %s, want %s" % (name, nested.name, kv, want))
    svcs = {s.name: s for s in fd.service}
    if set(svcs) != set(services):
        errors.append("services %s, want %s" % (sorted(svcs), sorted(services)))
    for name, methods in services.items():
        s = svcs.get(name)
        if s is None:
            continue
        have = [(m.name, m.input_type.split(".")[-1], m.output_type.split(".")[-1],
                 m.server_streaming) for m in s.method]
        if have != methods or any(m.client_streaming for m in s.method):
            errors.append("service %s: %s, want %s" % (name, have, methods))
    return errors


def main():
    cases = [
        ("deviceplugin_v1beta1_matches_kubelet",
         lambda: check_file(load("proto/deviceplugin/v1beta1/api.proto"), "v1beta1",
                            DEVICEPLUGIN, DEVICEPLUGIN_SERVICES)),
        ("podresources_v1_matches_kubelet",
         lambda: check_file(load("proto/podresources/v1/api.proto"), "v1", PODRESOURCES,
                            PODRESOURCES_SERVICES)),
        ("pluginregistration_v1_matches_kubelet",
         lambda: check_file(load("proto/pluginregistration/v1/api.proto"), "pluginregistration",
                            PLUGINREG, PLUGINREG_SERVICES)),
    ]
    cases.append(("drahealth_v1alpha1_matches_kubelet",
                  lambda: (lambda fd: check_file(fd, "v1alpha1", DRAHEALTH, DRAHEALTH_SERVICES) +
                           drahealth_enum(fd))(load("proto/dra-health/v1alpha1/api.proto"))))
    for v in ("v1", "v1beta1"):
        msgs, svcs, maps = dra(v)
        cases.append(("dra_%s_matches_kubelet" % v,
                      lambda v=v, msgs=msgs, svcs=svcs, maps=maps: check_file(
                          load("proto/dra/%s/api.proto" % v), "k8s.io.kubelet.pkg.apis.dra." + v,
                          msgs, svcs, maps)))
    print("1..%d" % len(cases))
    failed = 0
    for i, (name, fn) in enumerate(cases, 1):
        try:
            errors = fn()
        except Exception as e:  # protoc failure counts as a failure of the case
            errors = [repr(e)]
        if errors:
            failed += 1
            print("not ok %d - %s" % (i, name))
            for e in errors:
                print("# " + e)
        else:
            print("ok %d - %s" % (i, name))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
