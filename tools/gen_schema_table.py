#!/usr/bin/env python3
"""Generate kmutate's built-in schema table (src/schema/builtin_schemas.json).

Usage:
    python3 tools/gen_schema_table.py PATH/TO/_definitions.json [OUTPUT]

The input is the `_definitions.json` file of the PyPI package
`kubernetes-validate` (directory `kubernetes-json-schema/vX.Y.Z-local/`), a
JSON-schema rendering of Kubernetes' OpenAPI definitions. The output (default:
src/schema/builtin_schemas.json next to this script's parent directory) is a
compact, deterministic table of structured-merge-diff (SMD) atoms: exactly
what kube-openapi's `schemaconv.ToSchemaFromOpenAPI` derives from the
kube-apiserver's /openapi/v3 documents, which is what the
MutatingAdmissionPolicy plugin uses as its type converter.

Output format (read by src/schema/builtin.rs):

    {"gvk": {"group/version/Kind": "definition name", ...},
     "types": {"definition name": ATOM, ...}}

    ATOM    = {"s": SCALAR?, "l": LIST?, "m": MAP?}     (at least one member)
    SCALAR  = "string" | "numeric" | "boolean" | "untyped"
    LIST    = {"e": TYPEREF, "r": "atomic" | "associative", "k": [key, ...]?}
    MAP     = {"f": {field: TYPEREF, ...}?, "e": TYPEREF?,
               "r": "atomic" | "separable"?, "d": {field: default, ...}?}
    TYPEREF = SCALAR                         (inlined scalar atom)
            | "definition name"              (named type)
            | {"n": "definition name", "r": "atomic" | "separable"}
                                             (named type, map relationship override)
            | ATOM                           (inlined atom)

`MAP.e` absent means unknown fields are not allowed; `MAP.r` absent means the
default (separable). `MAP.d` holds the defaults of list-map key fields, which
SMD uses to identify list items that omit a key (the JSON-schema rendering
drops `default`, so they are listed in KEY_DEFAULTS below).

Only the standard library is used; the output depends only on the input.
"""

import json
import os
import sys

UNTYPED_ATOMIC = "__untyped_atomic_"
UNTYPED_DEDUCED = "__untyped_deduced_"

# kube-openapi schemaconv hard-codes these two definitions.
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
RAW_EXTENSION = "io.k8s.apimachinery.pkg.runtime.RawExtension"

# Defaults of list-map key fields ("+default=" markers in k8s.io/api, published
# as "default" in /openapi/v3). Only key fields matter to SMD
# (typed/helpers.go getAssociativeKeyDefault).
KEY_DEFAULTS = {
    # core/v1 types.go ContainerPort.Protocol: +default="TCP"
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    # core/v1 types.go ServicePort.Protocol: +default="TCP"
    ("io.k8s.api.core.v1.ServicePort", "protocol"): "TCP",
    # core/v1 types.go LocalObjectReference.Name: +default=""
    ("io.k8s.api.core.v1.LocalObjectReference", "name"): "",
}

SCALARS = ("string", "numeric", "boolean", "untyped")


def first_type(schema):
    """The schema's type, ignoring the JSON-schema "null" alternative."""
    t = schema.get("type")
    if isinstance(t, list):
        t = [x for x in t if x != "null"]
        return t[0] if t else ""
    return t or ""


def ref_name(schema):
    ref = schema.get("$ref")
    if ref is None:
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
            ref = all_of[0]["$ref"]
    if not ref:
        return None
    return ref.rsplit("/", 1)[-1]


def map_relationship(schema):
    val = schema.get("x-kubernetes-map-type")
    if val is None:
        return None
    if val == "atomic":
        return "atomic"
    if val == "granular":
        return "separable"
    raise ValueError("unknown map type %r" % (val,))


def list_relationship(schema):
    """kube-openapi schemaconv getListElementRelationship."""
    lt = schema.get("x-kubernetes-list-type")
    if lt is not None:
        if lt == "atomic":
            return "atomic", []
        if lt == "set":
            return "associative", []
        if lt == "map":
            keys = schema.get("x-kubernetes-list-map-keys")
            if not isinstance(keys, list):
                raise ValueError("missing map keys")
            return "associative", [k for k in keys if isinstance(k, str)]
        raise ValueError("unknown list type %r" % (lt,))
    strategy = schema.get("x-kubernetes-patch-strategy")
    if strategy is not None:
        if strategy in ("merge", "merge,retainKeys"):
            key = schema.get("x-kubernetes-patch-merge-key")
            if key is not None:
                return "associative", [key]
            return "associative", []
        return "atomic", []
    return "atomic", []


class Converter:
    def __init__(self, defs):
        self.defs = defs

    def typeref(self, schema, preserve):
        """kube-openapi schemaconv makeOpenAPIRef."""
        name = ref_name(schema)
        if name:
            rel = map_relationship(schema)
            if rel:
                return {"n": name, "r": rel}
            return name
        atom = self.atom(schema, preserve)
        if list(atom.keys()) == ["s"]:
            return atom["s"]
        return atom

    def atom(self, schema, preserve, def_name=None):
        """kube-openapi schemaconv visitSpec/parseSchema."""
        if schema.get("x-kubernetes-preserve-unknown-fields") is True:
            preserve = True
        if "oneOf" in schema and "type" not in schema:
            # IntOrString / Quantity: "type: string, format: int-or-string"
            # in the OpenAPI document, an untyped scalar for SMD.
            return {"s": "untyped"}
        typ = first_type(schema)
        if typ == "":
            return {
                "s": "untyped",
                "l": self.list(schema, preserve),
                "m": self.map(schema, preserve, def_name),
            }
        if typ == "object":
            return {"m": self.map(schema, preserve, def_name)}
        if typ == "array":
            return {"l": self.list(schema, preserve)}
        if typ in ("integer", "number"):
            return {"s": "numeric"}
        if typ == "boolean":
            return {"s": "boolean"}
        if typ == "string":
            fmt = schema.get("format", "")
            if fmt in ("", "byte"):
                return {"s": "string"}
            return {"s": "untyped"}
        raise ValueError("unrecognized type %r" % (typ,))

    def map(self, schema, preserve, def_name):
        """kube-openapi schemaconv parseObject."""
        out = {}
        props = schema.get("properties") or {}
        if props:
            out["f"] = {k: self.typeref(v, preserve) for k, v in props.items()}
        addl = schema.get("additionalProperties")
        if addl is None:
            if preserve or not props:
                out["e"] = UNTYPED_DEDUCED
        elif isinstance(addl, dict):
            out["e"] = self.typeref(addl, preserve)
        elif addl is True:
            out["e"] = UNTYPED_DEDUCED
        rel = map_relationship(schema)
        if rel:
            out["r"] = rel
        if def_name:
            defaults = {
                field: value
                for (name, field), value in KEY_DEFAULTS.items()
                if name == def_name and field in props
            }
            if defaults:
                out["d"] = defaults
        return out

    def list(self, schema, preserve):
        """kube-openapi schemaconv parseList (items inherit preserve)."""
        rel, keys = list_relationship(schema)
        items = schema.get("items")
        if isinstance(items, dict):
            elem = self.typeref(items, preserve)
        else:
            elem = UNTYPED_ATOMIC
        out = {"e": elem, "r": rel}
        if keys:
            out["k"] = keys
        return out

    def definition(self, name, schema):
        if name == QUANTITY:
            return {"s": "untyped"}
        if name == RAW_EXTENSION:
            return {
                "s": "untyped",
                "l": {"e": UNTYPED_ATOMIC, "r": "atomic"},
                "m": {"e": UNTYPED_ATOMIC, "r": "atomic"},
            }
        return self.atom(schema, False, name)


def generate(defs):
    conv = Converter(defs)
    types = {}
    gvk = {}
    for name in sorted(defs):
        schema = defs[name]
        if ref_name(schema) and "properties" not in schema:
            continue  # top-level references are skipped by schemaconv
        types[name] = conv.definition(name, schema)
        for entry in schema.get("x-kubernetes-group-version-kind") or []:
            kind = entry.get("kind")
            if not kind:
                continue
            key = "%s/%s/%s" % (entry.get("group", ""), entry.get("version", ""), kind)
            # Several definitions may claim a GVK (e.g. DeleteOptions); keep
            # the first in sorted order so that the output is deterministic.
            gvk.setdefault(key, name)
    missing = [
        "%s.%s" % key for key in KEY_DEFAULTS if key[0] in defs and key[1] not in
        (defs[key[0]].get("properties") or {})
    ]
    if missing:
        raise ValueError("key defaults for unknown fields: %s" % ", ".join(missing))
    return gvk, types


def dump(gvk, types):
    def enc(v):
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    lines = ['{"gvk":{']
    items = sorted(gvk.items())
    for i, (k, v) in enumerate(items):
        lines.append("%s:%s%s" % (enc(k), enc(v), "," if i + 1 < len(items) else ""))
    lines.append('},"types":{')
    items = sorted(types.items())
    for i, (k, v) in enumerate(items):
        lines.append("%s:%s%s" % (enc(k), enc(v), "," if i + 1 < len(items) else ""))
    lines.append("}}")
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        doc = json.load(f)
    defs = doc.get("$defs") or doc.get("definitions")
    if not isinstance(defs, dict):
        sys.stderr.write("no $defs in %s\n" % argv[1])
        return 1
    gvk, types = generate(defs)
    out = argv[2] if len(argv) == 3 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src", "schema", "builtin_schemas.json"
    )
    text = dump(gvk, types)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    sys.stderr.write("wrote %s: %d types, %d kinds, %d bytes\n" % (out, len(types), len(gvk), len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
