#!/usr/bin/env python3
"""Probe how upstream's typed round trip treats zero and null scalars and empty lists and maps (src/schema/go_zero_fields.json).

Usage:
    python3 tools/probe_go_omitempty.py [MAPORACLE] [OUTPUT]

Upstream decodes every mutation's result into the kind's Go types and encodes it
again (k8s.io/apiserver mutating/dispatcher.go, json_patch.go, apply.go), so:
- a field tagged `omitempty` that is not a pointer loses a zero value
  (`minReadySeconds: 0`, `paused: false`, an env var's `value: ""`);
- a null becomes the zero value of a field that is not a pointer, kept where the
  field has no `omitempty` (a container's `name: null` is `name: ""`).
The OpenAPI documents tell neither the tags nor the pointers, so this asks
upstream itself: for each built-in kind, an object with every scalar field (in
every struct reachable, one item per list, one entry per map) set to its zero
value, then one with every scalar set to null, goes through maporacle with no
policy (-no-input-defaults -no-output-defaults: the round trip alone). Output:

    {"roots": [the kinds' definitions that go through the round trip],
     "types": {"definition": {"omit": [fields that lose a zero value],
                              "zero": [fields where null becomes a kept zero value],
                              "empty": [list and map fields that lose an empty value]}}}

Only the standard library is used; the output depends only on maporacle and
src/schema/go_types.json.
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "upstream", "maporacle")
OUTPUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "src", "schema", "go_zero_fields.json")
TYPES = json.load(open(os.path.join(ROOT, "src", "schema", "go_types.json")))
GVK = json.load(open(os.path.join(ROOT, "src", "schema", "builtin_schemas.json")))["gvk"]
ZERO = {"string": "", "int32": 0, "int64": 0, "float64": 0, "bool": False}
MAX_DEPTH = 14
# Kinds maporacle's REST mapper leaves out (main.go), or not objects one admits.
SKIP_GROUPS = {"meta.k8s.io", "admission.k8s.io", "imagepolicy.k8s.io"}
CLUSTER = set()  # the scope does not matter with no policy


def EMPTY_SCALARS(kind):
    """Leaf of the first empties probe: scalars left out, lists and maps of scalars empty."""
    return None


def EMPTY_STRUCTS(kind):
    """Leaf of the second empties probe: scalars left out, lists and maps of structs empty."""
    return None


def unwrap(ty):
    return ty[0] if isinstance(ty, list) else ty


def kind_of(ty):
    ty = unwrap(ty)
    if isinstance(ty, str):
        return ty
    return ty["k"]


def build(defn, leaf, path):
    """An object of definition `defn` whose scalars are leaf(kind) (None: left out)."""
    if len(path) > MAX_DEPTH or defn in path:
        return None
    out = {}
    for field, ty in TYPES[defn]["f"].items():
        if not path and field in ("apiVersion", "kind"):
            continue
        v = value(ty, leaf, path + (defn,))
        if v is not None:
            out[field] = v
    return out


def value(ty, leaf, path):
    ty = unwrap(ty)
    k = kind_of(ty)
    if isinstance(ty, str) and ty.startswith("#"):
        return build(ty[1:], leaf, path)
    if k in ZERO:
        return leaf(k)
    if k in ("list", "map"):
        elem = unwrap(ty["e"])
        of_structs = isinstance(elem, str) and elem.startswith("#")
        # The empties probes: a list or map sent empty ([] or {}), of scalars
        # in the first, of structs in the second (whose items the first
        # fills, to reach the lists and maps within them).
        if leaf is EMPTY_SCALARS and not of_structs or leaf is EMPTY_STRUCTS and of_structs:
            return [] if k == "list" else {}
        e = value(ty["e"], leaf, path)
        if e is None:
            return None
        return [e] if k == "list" else {"k": e}
    return None  # custom JSON types (quantity, time, intstr, bytes, any): not probed


def walk(defn, sent, got, path, leaf):
    """Calls leaf(definition, field, kind, sent value, answered value, path)
    on each field sent, following struct fields and the one item of lists and
    maps of structs; leaf returns whether it took the field."""
    if len(path) > MAX_DEPTH or defn in path or not isinstance(got, dict):
        return
    for field, ty in TYPES[defn]["f"].items():
        if field not in sent:
            continue
        t = unwrap(ty)
        k = kind_of(t)
        if isinstance(t, str) and t.startswith("#"):
            walk(t[1:], sent[field], got.get(field), path + (defn,), leaf)
        elif leaf(defn, field, k, sent[field], got.get(field, "<absent>"), path):
            continue
        elif k in ("list", "map") and isinstance(unwrap(t["e"]), str) and unwrap(t["e"]).startswith("#"):
            g = got.get(field)
            item = (g[0] if isinstance(g, list) and g else None) if k == "list" else (g or {}).get("k")
            s = sent[field][0] if k == "list" else sent[field]["k"]
            walk(unwrap(t["e"])[1:], s, item, path + (defn,), leaf)


def observe(defn, sent, got, path, seen):
    """Records, per (definition, scalar field), whether the sent leaf came back."""
    def leaf(d, field, k, _sent, answer, at):
        if k not in ZERO:
            return False
        seen.setdefault((d, field), []).append((answer, at[:1]))
        return True
    walk(defn, sent, got, path, leaf)


def observe_empty(defn, sent, got, path, seen):
    """Records, per (definition, list or map field) sent empty, whether it came back."""
    def leaf(d, field, k, sent_value, answer, _at):
        if k not in ("list", "map") or sent_value not in ([], {}):
            return False
        seen.setdefault((d, field), []).append(answer)
        return True
    walk(defn, sent, got, path, leaf)


def plural(kind):
    s = kind.lower()
    if s.endswith("s"):
        return s + "es"
    if s.endswith("y"):
        return s[:-1] + "ies"
    return s + "s"


def run(obj, gvk):
    g, v, k = gvk.split("/")
    api_version = "%s/%s" % (g, v) if g else v
    obj = dict(obj, apiVersion=api_version, kind=k)
    obj.setdefault("metadata", {})
    obj["metadata"] = dict(obj["metadata"], name="probe", namespace="default")
    inp = {"policies": [], "bindings": [], "noAutoBinding": True,
           "request": {"operation": "CREATE", "kind": {"group": g, "version": v, "kind": k},
                       "resource": {"group": g, "version": v, "resource": plural(k)},
                       "name": "probe", "namespace": "default", "userInfo": {"username": "probe"}},
           "object": obj}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(inp, f)
    try:
        r = subprocess.run([ORACLE, "-compact", "-no-validate", "-no-input-defaults", "-no-output-defaults", f.name],
                           capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(f.name)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        return None
    return out.get("object") if out.get("allowed") else None


def main():
    zero_seen, null_seen, empty_seen, roots = {}, {}, {}, []
    for gvk, defn in sorted(GVK.items()):
        g, v, k = gvk.split("/")
        if g in SKIP_GROUPS or k.endswith("List") or k.endswith("Options") or k == "WatchEvent" or defn not in TYPES:
            continue
        answers = []
        for leaf in (lambda k: ZERO[k], lambda k: None):
            # None leaves are written as JSON null: built with a sentinel, then swapped.
            sent = build(defn, (lambda kk, leaf=leaf: "\0null" if leaf(kk) is None else leaf(kk)), ())
            sent = json.loads(json.dumps(sent).replace('"\\u0000null"', "null"))
            answers.append((sent, run(sent, gvk)))
        if any(got is None for _, got in answers):
            print("no answer for", gvk, file=sys.stderr)
            continue
        zero = {}
        observe(defn, answers[0][0], answers[0][1], (), zero)
        # A kind maporacle keeps unstructured (CustomResourceDefinition, APIService:
        # not in its scheme) drops no zero value: it has no round trip.
        if not any(a == "<absent>" for obs in zero.values() for a, _ in obs):
            print("no round trip for", gvk, file=sys.stderr)
            continue
        if defn not in roots:
            roots.append(defn)
        for key, obs in zero.items():
            zero_seen.setdefault(key, []).extend(obs)
        observe(defn, answers[1][0], answers[1][1], (), null_seen)
        for leaf in (EMPTY_SCALARS, EMPTY_STRUCTS):
            sent = build(defn, leaf, ())
            got = run(sent, gvk)
            if got is None:
                print("no answer for", gvk, "with empty lists and maps", file=sys.stderr)
                continue
            observe_empty(defn, sent, got, (), empty_seen)
    # The probe sets the name and namespace itself.
    for seen in (zero_seen, null_seen):
        for field in ("name", "namespace"):
            seen.pop(("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", field), None)
        for key, answers in seen.items():
            if len({a != "<absent>" and a is not None for a, _ in answers}) > 1:
                print("answers differ", key, answers[:3], file=sys.stderr)
    table = {}
    for (defn, field), answers in sorted(zero_seen.items()):
        if all(a == "<absent>" for a, _ in answers):
            table.setdefault(defn, {}).setdefault("omit", []).append(field)
    for (defn, field), answers in sorted(null_seen.items()):
        if all(a != "<absent>" and a is not None for a, _ in answers):
            table.setdefault(defn, {}).setdefault("zero", []).append(field)
    for (defn, field), answers in sorted(empty_seen.items()):
        # An answer with entries the conversion added (a DaemonSet's
        # deprecated.daemonset.template.generation annotation) tells nothing.
        answers = [a for a in answers if a in ("<absent>", [], {})]
        if answers and all(a == "<absent>" for a in answers):
            table.setdefault(defn, {}).setdefault("empty", []).append(field)
        elif len({a == "<absent>" for a in answers}) > 1:
            print("answers differ", (defn, field), answers[:3], file=sys.stderr)
    with open(OUTPUT, "w") as f:
        f.write('{"roots":%s,\n"types":{\n' % json.dumps(sorted(roots)))
        f.write(",\n".join("%s:%s" % (json.dumps(d), json.dumps(table[d], separators=(",", ":")))
                           for d in sorted(table)) + "\n}}\n")


if __name__ == "__main__":
    main()
