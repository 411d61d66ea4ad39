#!/usr/bin/env python3
"""Generate kmutate's table of the built-in kinds' Go types (src/schema/go_types.json).

Usage:
    python3 tools/gen_go_types.py PATH/TO/_definitions.json [PROBES] [OUTPUT]

A JSONPatch result is decoded into the kind's Go types
(k8s.io/apiserver mutating/patch/json_patch.go), whose errors name Go types,
Go structs and embedded structs. The input is kubernetes-validate's
`_definitions.json` (as for tools/gen_schema_table.py) for the shape and the
integer formats, and PROBES (default: tools/go_type_probes.json, written by
tools/probe_go_types.py from upstream's own answers) for the Go names the
OpenAPI documents do not carry (`v1.Protocol`, `v1.ResourceList`, embedded
`VolumeSource`). The output (default: src/schema/go_types.json) is read by
src/schema/go_decode.rs:

    {"definition": {"s": "Struct"?, "n": "pkg.Name"?,
                    "f": {field: TYPE | [TYPE, "Embedded.Path"], ...}}}

    TYPE = KIND                                  (unnamed scalar or custom type)
         | "#definition"                         (a struct)
         | {"k": KIND, "n": "Go name"}           (named scalar or custom type)
         | {"k": "list" | "map", "e": TYPE, "n": "Go name"?}

    KIND = "string" | "int32" | "int64" | "float64" | "bool" | "bytes"
         | "intstr" | "quantity" | "time" | "microtime" | "any"

`s` (the struct's name in messages) and `n` (its Go type name) are given only
where they differ from the definition's last two name segments; a list's or
map's `n` only where it differs from `[]ELEM` / `map[string]ELEM`.

Only the standard library is used; the output depends only on the inputs.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_schema_table import first_type, ref_name  # noqa: E402

CUSTOM = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "intstr",
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "microtime",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "any",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON": "any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray": "any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool": "any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray": "any",
}

# The Go names of the custom types, as messages show them.
CUSTOM_NAMES = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "intstr.IntOrString",
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "resource.Quantity",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "v1.MicroTime",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "v1.FieldsV1",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "runtime.RawExtension",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON": "v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray": "v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool": "v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray": "v1.JSONSchemaPropsOrStringArray",
}

SCALAR_NAMES = {"string": "string", "int32": "int32", "int64": "int64", "float64": "float64", "bool": "bool", "bytes": "[]uint8"}


def def_go_name(name):
    parts = name.split(".")
    return "%s.%s" % (parts[-2], parts[-1])


def split_map(go_name):
    """`map[K]V` -> V (K may hold brackets), else None."""
    if not go_name.startswith("map["):
        return None
    depth = 0
    for i, c in enumerate(go_name[3:], 3):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return go_name[i + 1:]
    return None


class Gen:
    def __init__(self, defs):
        self.defs = defs

    def type_of(self, schema, go_name):
        """The TYPE of a property schema; `go_name` is what upstream named it, if known."""
        ref = ref_name(schema)
        if ref:
            if ref in CUSTOM:
                kind = CUSTOM[ref]
                if kind == "any":
                    return {"k": "any", "n": CUSTOM_NAMES[ref]}
                return kind
            target = self.defs.get(ref, {})
            if "properties" not in target and first_type(target) not in ("", "object"):
                return self.type_of(target, go_name)
            return "#" + ref
        typ = first_type(schema)
        if typ == "array":
            items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
            elem_name = go_name[2:] if go_name and go_name.startswith("[]") else None
            out = {"k": "list", "e": self.type_of(items, elem_name)}
            if go_name and go_name != "[]" + self.name_of(out["e"]):
                out["n"] = go_name
            return out
        if typ == "object" or (typ == "" and "additionalProperties" in schema):
            addl = schema.get("additionalProperties")
            if isinstance(addl, dict):
                elem_name = split_map(go_name) if go_name else None
                out = {"k": "map", "e": self.type_of(addl, elem_name)}
                if go_name and go_name != "map[string]" + self.name_of(out["e"]):
                    out["n"] = go_name
                return out
            return {"k": "any", "n": go_name or "map[string]interface {}"}
        if typ == "string" and schema.get("format") == "byte":
            # A probe of a []byte field meets its elements (`uint8`).
            return "bytes"
        if typ == "string":
            kind = "string"
        elif typ == "integer":
            kind = "int32" if schema.get("format") == "int32" else "int64"
        elif typ == "number":
            kind = "float64"
        elif typ == "boolean":
            kind = "bool"
        else:
            return {"k": "any", "n": go_name or "interface {}"}
        if go_name and go_name != SCALAR_NAMES[kind]:
            return {"k": kind, "n": go_name}
        return kind

    def name_of(self, ty):
        if isinstance(ty, str):
            if ty.startswith("#"):
                return def_go_name(ty[1:])
            if ty in SCALAR_NAMES:
                return SCALAR_NAMES[ty]
            return {"intstr": "intstr.IntOrString", "quantity": "resource.Quantity", "time": "v1.Time", "microtime": "v1.MicroTime"}[ty]
        if "n" in ty:
            return ty["n"]
        if ty["k"] == "list":
            return "[]" + self.name_of(ty["e"])
        return "map[string]" + self.name_of(ty["e"])

    def definition(self, name, probes):
        schema = self.defs[name]
        out = {}
        fields = {}
        structs = set()
        for field, prop in sorted((schema.get("properties") or {}).items()):
            probe = probes.get(field)
            go_name = probe[2] if probe else None
            if probe:
                structs.add(probe[0])
            ty = self.type_of(prop, go_name)
            if probe and probe[1]:
                fields[field] = [ty, probe[1]]
            else:
                fields[field] = ty
        out["f"] = fields
        if len(structs) == 1:
            (struct,) = structs
            if struct != name.rsplit(".", 1)[-1]:
                out["s"] = struct
        return out


def generate(defs, probes):
    gen = Gen(defs)
    out = {}
    for name in sorted(defs):
        schema = defs[name]
        # Structs without fields are kept: fields refer to them.
        if name in CUSTOM or ("properties" not in schema and first_type(schema) != "object"):
            continue
        out[name] = gen.definition(name, probes.get(name, {}))
    return out


def main(argv):
    if len(argv) not in (2, 3, 4):
        sys.stderr.write(__doc__)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    with open(argv[1], encoding="utf-8") as f:
        defs = json.load(f)["$defs"]
    probes_path = argv[2] if len(argv) >= 3 else os.path.join(here, "go_type_probes.json")
    with open(probes_path, encoding="utf-8") as f:
        probes = json.load(f)
    out_path = argv[3] if len(argv) == 4 else os.path.join(here, "..", "src", "schema", "go_types.json")
    table = generate(defs, probes)
    enc = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    items = sorted(table.items())
    text = "{\n" + ",\n".join("%s:%s" % (enc(k), enc(v)) for k, v in items) + "\n}\n"
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    sys.stderr.write("wrote %s: %d definitions, %d bytes\n" % (out_path, len(table), len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
