#!/usr/bin/env python3
"""Probe which struct fields upstream's typed round trip writes when they are absent (src/schema/go_struct_fills.json).

Usage:
    python3 tools/probe_go_struct_fills.py [MAPORACLE] [OUTPUT]

encoding/json writes every struct field that is no pointer, even when it is
the zero struct, and the conversion through the internal types sets some
pointers (a Pod's spec.securityContext). So an object decoded into its kind's
Go types comes back with `status: {}`, a container's `resources: {}` and so
on, and CEL sees them: `has(object.status)` is true upstream for a Pod that
was written without one. The OpenAPI documents tell neither the pointers nor
the conversions, so this asks upstream itself: for each kind that goes through
the round trip (src/schema/go_zero_fields.json's roots) and each depth, an
object whose structs (one item per list, one entry per map) are present down
to that depth and sent empty ({}) at it, with no scalar, goes through
maporacle with no policy (-no-input-defaults -no-output-defaults: the round
trip alone). What comes back as an object in an empty struct is filled.
Output: {"definition": [fields written as {} when absent]}.

Only the standard library is used; the output depends only on maporacle and
src/schema/go_types.json, go_zero_fields.json and builtin_schemas.json.
"""

import json
import os
import sys

ARGS = sys.argv[1:]
# The omitempty probe's helpers (types, kinds, maporacle), told the same
# maporacle and no output of their own.
sys.argv = sys.argv[:1] + ARGS[:1]
import probe_go_omitempty as omitempty  # noqa: E402

ROOT = omitempty.ROOT
OUTPUT = ARGS[1] if len(ARGS) > 1 else os.path.join(ROOT, "src", "schema", "go_struct_fills.json")
ROOTS = json.load(open(os.path.join(ROOT, "src", "schema", "go_zero_fields.json")))["roots"]
MAX_DEPTH = 12


def struct_of(ty):
    """The definition a field's type names, as a struct, a list item or a map entry."""
    ty = omitempty.unwrap(ty)
    if isinstance(ty, str):
        return (ty[1:], None) if ty.startswith("#") else (None, None)
    if ty["k"] in ("list", "map"):
        elem = omitempty.unwrap(ty["e"])
        if isinstance(elem, str) and elem.startswith("#"):
            return elem[1:], ty["k"]
    return None, None


def build(defn, depth, path):
    """Structs of `defn` down to `depth` levels, empty at the last; no scalar."""
    out = {}
    if depth == 0:
        return out
    for field, ty in omitempty.TYPES[defn]["f"].items():
        child, container = struct_of(ty)
        if child is None or child in path or not path and field in ("apiVersion", "kind"):
            continue
        v = build(child, depth - 1, path + (defn,))
        out[field] = [v] if container == "list" else {"k": v} if container == "map" else v
    return out


def observe(defn, sent, got, depth, path, seen):
    """Records, for each struct sent empty at `depth`, what came back as objects."""
    if not isinstance(got, dict):
        return
    if depth == 0:
        filled = sorted(k for k, v in got.items() if isinstance(v, dict))
        seen.setdefault(defn, []).append(filled)
        return
    for field, ty in omitempty.TYPES[defn]["f"].items():
        child, container = struct_of(ty)
        if child is None or field not in sent:
            continue
        s, g = sent[field], got.get(field)
        if container == "list":
            s, g = s[0], (g[0] if isinstance(g, list) and g else None)
        elif container == "map":
            s, g = s["k"], (g or {}).get("k") if isinstance(g, dict) else None
        observe(child, s, g, depth - 1, path + (defn,), seen)


def main():
    seen = {}
    for gvk, defn in sorted(omitempty.GVK.items()):
        if defn not in ROOTS:
            continue
        for depth in range(0, MAX_DEPTH + 1):
            sent = build(defn, depth, ())
            got = omitempty.run(sent, gvk)
            if got is None:
                print("no answer for", gvk, "at depth", depth, file=sys.stderr)
                continue
            before = sum(len(v) for v in seen.values())
            observe(defn, sent, got, depth, (), seen)
            if sum(len(v) for v in seen.values()) == before:
                break  # no struct that deep
    table = {}
    for defn, answers in sorted(seen.items()):
        fills = set(answers[0]).intersection(*map(set, answers[1:]))
        if any(set(a) != fills for a in answers):
            print("answers differ", defn, answers[:3], file=sys.stderr)
        if fills:
            table[defn] = sorted(fills)
    with open(OUTPUT, "w") as f:
        f.write("{\n" + ",\n".join("%s:%s" % (json.dumps(d), json.dumps(table[d])) for d in sorted(table)) + "\n}\n")


if __name__ == "__main__":
    main()
