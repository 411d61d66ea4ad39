#!/usr/bin/env python3
"""Learn the Go types of the built-in kinds' fields from upstream itself.

Usage:
    python3 tools/probe_go_types.py PATH/TO/_definitions.json MAPORACLE [OUTPUT]

A JSONPatch result is decoded into the kind's Go struct, and a value of the
wrong JSON type fails with encoding/json's message, which names the Go
struct, the field's path (with the names of embedded structs) and the Go type
(`json: cannot unmarshal array into Go struct field Volume.spec.volumes.
VolumeSource.hostPath of type v1.HostPathVolumeSource`). The OpenAPI
documents do not carry those Go names (`v1.Protocol` for a string, the
embedded `VolumeSource`), so this tool asks upstream: for every field of
every definition reachable from a served kind, it runs `maporacle` (see
../shared/upstream/README.md) on a JSONPatch that writes a wrong-typed value
there and records what the message says.

The input is kubernetes-validate's `_definitions.json` (as for
tools/gen_schema_table.py). The output (default: tools/go_type_probes.json)
maps each definition to its fields:

    {"definition": {"field": ["Struct", "Embedded.Path", "go type"], ...}}

(`Embedded.Path` is empty for a field of the struct itself). Fields of types
with their own JSON decoding (IntOrString, Quantity, Time, ...) are not
probed: their messages do not name the field's type. The output is read by
tools/gen_schema_table.py; this tool needs the oracle and takes minutes, the
generator needs neither.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_schema_table import first_type, ref_name  # noqa: E402

# Definitions decoded by their own UnmarshalJSON: never probed.
CUSTOM = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
}

SKIPPED_GROUPS = ("meta.k8s.io", "admission.k8s.io", "imagepolicy.k8s.io")
NON_RESOURCE_KINDS = {"Status", "WatchEvent", "APIGroup", "APIGroupList", "APIResourceList", "APIVersions"}

MESSAGE = re.compile(r"json: cannot unmarshal \S+(?: \S+)? into Go struct field (\S*) of type (\S+)$")


def resource(kind):
    """apimachinery meta.UnsafeGuessKindToResource, as maporacle maps kinds."""
    singular = kind.lower()
    if singular.endswith("endpoints"):
        return singular
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def served_kinds(defs):
    out = []
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            kind = gvk.get("kind", "")
            if (
                kind.endswith("List")
                or kind.endswith("Options")
                or gvk.get("group") in SKIPPED_GROUPS
                or kind in NON_RESOURCE_KINDS
            ):
                continue
            out.append((gvk.get("group", ""), gvk["version"], kind, name))
    # v1 kinds first: their paths are the ones kept.
    out.sort(key=lambda k: (k[1] != "v1", k))
    return out


def reach(defs):
    """For each definition, a kind and a path from the kind's root to it."""
    seen = {}
    queue = deque()
    for group, version, kind, name in served_kinds(defs):
        if name not in seen:
            seen[name] = (group, version, kind, [])
            queue.append(name)
    while queue:
        name = queue.popleft()
        group, version, kind, path = seen[name]
        for field, schema in (defs[name].get("properties") or {}).items():
            sub = path + [("f", field)]
            while True:
                ref = ref_name(schema)
                if ref:
                    if ref not in seen and ref not in CUSTOM and ref in defs:
                        seen[ref] = (group, version, kind, sub)
                        queue.append(ref)
                    break
                typ = first_type(schema)
                if typ == "array" and isinstance(schema.get("items"), dict):
                    sub = sub + [("i",)]
                    schema = schema["items"]
                elif typ == "object" and isinstance(schema.get("additionalProperties"), dict):
                    sub = sub + [("k",)]
                    schema = schema["additionalProperties"]
                else:
                    break
    return seen


def build(group, version, kind, path):
    api_version = "%s/%s" % (group, version) if group else version
    root = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "default"}}
    # Built from the leaf up: the struct at the end of `path` is {}.
    value = {}
    for seg in reversed(path):
        if seg[0] == "f":
            value = {seg[1]: value}
        elif seg[0] == "i":
            value = [value]
        else:
            value = {"k": value}
    for key, v in value.items():
        if key == "metadata":
            v = dict(v, **root["metadata"])
        root[key] = v
    pointer = ""
    for seg in path:
        pointer += "/" + {"f": lambda s: s[1], "i": lambda s: "0", "k": lambda s: "k"}[seg[0]](seg)
    return root, pointer


def oracle_input(group, version, kind, obj, pointer, value):
    res = resource(kind)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [group], "apiVersions": [version], "operations": ["CREATE"], "resources": [res]}
                ]
            },
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: %s, value: %s}]" % (json.dumps(pointer), value)},
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
        "spec": {"policyName": "p"},
    }
    return {
        "policies": [policy],
        "bindings": [binding],
        "noAutoBinding": True,
        "namespaces": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}],
        "request": {
            "operation": "CREATE",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": res},
            "name": "x",
            "namespace": "default",
        },
        "object": obj,
    }


def probe(oracle, job):
    name, field, group, version, kind, path, is_array = job
    obj, pointer = build(group, version, kind, path)
    value = "{}" if is_array else "[true]"
    data = oracle_input(group, version, kind, obj, pointer + "/" + field.replace("~", "~0").replace("/", "~1"), value)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(data, f)
        tmp = f.name
    try:
        out = subprocess.run(
            [oracle, "-compact", "-no-validate", "-no-input-defaults", "-no-output-defaults", tmp],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
    finally:
        os.unlink(tmp)
    try:
        answer = json.loads(out.splitlines()[0])
        message = answer.get("status", {}).get("message", "") or answer.get("error", "")
    except (ValueError, IndexError):
        message = ""
    m = MESSAGE.search(message)
    if not m:
        return name, field, None, message
    struct, _, rest = m.group(1).partition(".")
    segments = rest.split(".")
    # The field's own segment is last; the embedded structs' names (Go
    # identifiers, capitalised, unlike JSON names) stand right before it.
    embedded = []
    for seg in reversed(segments[:-1]):
        if not seg[:1].isupper():
            break
        embedded.insert(0, seg)
    return name, field, [struct, ".".join(embedded), m.group(2)], message


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        defs = json.load(f)["$defs"]
    oracle = argv[2]
    out_path = argv[3] if len(argv) == 4 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "go_type_probes.json")
    jobs = []
    for name, (group, version, kind, path) in sorted(reach(defs).items()):
        for field, schema in sorted((defs[name].get("properties") or {}).items()):
            if not path and field in ("apiVersion", "kind"):
                continue
            if ref_name(schema) in CUSTOM:
                continue
            jobs.append((name, field, group, version, kind, path, first_type(schema) == "array"))
    only = os.environ.get("PROBE_ONLY")
    if only:
        jobs = [j for j in jobs if re.search(only, j[0])]
    sys.stderr.write("%d probes\n" % len(jobs))
    result = {}
    misses = []
    workers = int(os.environ.get("PROBE_WORKERS", "4"))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for i, (name, field, found, message) in enumerate(pool.map(lambda j: probe(oracle, j), jobs)):
            if found is None:
                misses.append((name, field, message[:200]))
            else:
                result.setdefault(name, {})[field] = found
            if (i + 1) % 200 == 0:
                sys.stderr.write("%d/%d\n" % (i + 1, len(jobs)))
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n")
        items = sorted(result.items())
        for i, (name, fields) in enumerate(items):
            f.write("%s:%s%s\n" % (json.dumps(name), json.dumps(fields, sort_keys=True, separators=(",", ":")), "," if i + 1 < len(items) else ""))
        f.write("}\n")
    for name, field, message in misses:
        sys.stderr.write("no answer for %s.%s: %s\n" % (name, field, message))
    sys.stderr.write("wrote %s: %d fields, %d without an answer\n" % (out_path, sum(map(len, result.values())), len(misses)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
