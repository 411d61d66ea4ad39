#!/usr/bin/env python3
"""Generates conformance/differential/*.yaml: random, valid MutatingAdmissionPolicy
cases, each labelled by upstream's own admission plugin (maporacle,
k8s.io/apiserver v0.36.2, see ../shared/upstream/README.md).

Every case is random but deterministic given the seed: policies (matchConstraints,
matchConditions, variables, paramKind/paramRef, ApplyConfiguration and JSONPatch
mutations, reinvocationPolicy, failurePolicy) and bindings, over ConfigMaps, Pods,
Deployments, Services, Namespaces and a custom kind (example.com/v1 Widget, with
its CRD), for CREATE and UPDATE by several users. The expectation is whatever
maporacle answered, never kmutate.

Defaulting: maporacle runs with -no-input-defaults -no-output-defaults, so the
object is neither defaulted before admission nor after each mutation; the
expected object is the mutation alone, as FORMAT.md asks (the cases are tagged
[no-defaulting]). The one conversion artifact left (a pod spec's deprecated
serviceAccount copied from serviceAccountName) is removed when the input lacked
it. The first oracle run also validates the policies and bindings (no
-no-validate): a generated policy the apiserver would refuse is dropped and
counted as a generator defect.

Order: upstream runs policies, the bindings of a policy and the params a
selector lists in no fixed order: it lists them from its informers' stores
(Go maps), so the order changes from one run of maporacle to the next even
for the same input. A case that can run more than one invocation is
labelled ORDER_RUNS times, each run a fresh sample (never answered from the
cache by an earlier run of the same input), with policies, bindings and
params reversed and shuffled (seeded); if the answers differ the case is
dropped ("order-dependent").

Usage:
  python3 tools/differential.py [--seed N] [--oracle PATH] [--jobs N] [--check]
                                [--kmutate PATH] [--pending DIR] [--cache DIR]
                                [--only FEATURE] [--count-scale F] [--out DIR]

  --check  regenerate in memory and fail (exit 1) when a file differs; give it
           the same --kmutate (the cases kmutate fails are set aside again)
  --kmutate PATH   a kmutate binary: the cases it fails go to --pending
           (target/differential-pending/) instead of --out; expectations
           still come from maporacle alone
  --cache DIR      oracle answers kept between runs (target/differential-cache)
Standard library only.
"""
import argparse
import concurrent.futures
import copy
import hashlib
import json
import os
import pathlib
import random
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "conformance" / "differential"
DEFAULT_ORACLE = ROOT / "target" / "upstream" / "maporacle"
ORACLE_FLAGS = ["-compact", "-no-input-defaults", "-no-output-defaults"]
DEFAULT_SEED = 30
ORDER_RUNS = 16
SOURCE = "maporacle (k8s.io/apiserver v0.36.2), tools/differential.py seed %d"

# (feature, number of cases generated before drops)
FEATURES = [
    ("apply-configuration", 450),
    ("json-patch", 450),
    ("match-constraints", 450),
    ("match-conditions", 350),
    ("variables", 350),
    ("params", 450),
    ("reinvocation", 300),
    ("failure-policy", 350),
    ("multi-policy", 300),
    ("bindings", 250),
    ("json-patch-move-copy", 250),
    ("custom-kinds", 250),
]

# ---------------------------------------------------------------------------
# The cluster: namespaces, users, kinds
# ---------------------------------------------------------------------------
NAMESPACES = {
    "default": {"env": "prod"},
    "team-a": {"env": "dev", "team": "a"},
    "team-b": {"env": "prod", "team": "b", "tier": "gold"},
}
USERS = [
    {"username": "alice", "groups": ["system:authenticated", "dev"]},
    {"username": "bob", "groups": ["system:authenticated", "ops"]},
    {"username": "system:serviceaccount:kube-system:deployer",
     "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
    {"username": "root", "groups": ["system:masters", "system:authenticated"]},
]
GROUP = "example.com"
# kind -> (group, version, plural, namespaced)
KINDS = {
    "ConfigMap": ("", "v1", "configmaps", True),
    "Pod": ("", "v1", "pods", True),
    "Deployment": ("apps", "v1", "deployments", True),
    "Service": ("", "v1", "services", True),
    "Namespace": ("", "v1", "namespaces", False),
    "Widget": (GROUP, "v1", "widgets", True),
}
KIND_NAMES = list(KINDS)
# a cluster-scoped custom kind, the request's object in the custom-kinds feature only
# (KIND_NAMES, which the other features draw from, stays as it is)
KINDS["Tunable"] = (GROUP, "v1", "tunables", False)

WIDGET_SPEC = {
    "type": "object",
    "properties": {
        "replicas": {"type": "integer"},
        "size": {"type": "string"},
        "paused": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "items": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "required": ["name"],
                            "properties": {"name": {"type": "string"}, "value": {"type": "string"}}}},
        "config": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
TUNABLE_SPEC = {
    "type": "object",
    "properties": {"prefix": {"type": "string"}, "count": {"type": "integer"},
                   "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
}
# custom kinds: kind -> (plural, singular, scope, spec schema)
CUSTOM = {
    "Widget": ("widgets", "widget", "Namespaced", WIDGET_SPEC),
    "Tunable": ("tunables", "tunable", "Cluster", TUNABLE_SPEC),
}


def crd(kind):
    plural, singular, scope, spec = CUSTOM[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": plural + "." + GROUP},
        "spec": {"group": GROUP, "scope": scope,
                 "names": {"plural": plural, "singular": singular, "kind": kind, "listKind": kind + "List"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "metadata": {"type": "object"}, "spec": spec}}}}]},
    }


ORACLE_RESOURCES = [{"group": GROUP, "version": "v1", "kind": k, "resource": v[0],
                     "singular": v[1], "namespaced": v[2] == "Namespaced"} for k, v in CUSTOM.items()]
ORACLE_SCHEMAS = {"apis/%s/v1" % GROUP: {
    "com.example.v1." + k: {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": GROUP, "version": "v1", "kind": k}],
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                       "metadata": {"type": "object"}, "spec": v[3]}}
    for k, v in CUSTOM.items()}}


def namespace_object(name):
    labels = dict(NAMESPACES[name])
    labels["kubernetes.io/metadata.name"] = name
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


# ---------------------------------------------------------------------------
# Random objects
# ---------------------------------------------------------------------------
LABEL_KEYS = ["app", "tier", "team", "example.com/owner", "track"]
LABEL_VALUES = ["web", "db", "frontend", "backend", "a", "b", "stable", "canary"]
NAMES = ["web", "db", "cache", "worker", "api", "x1"]
IMAGES = ["nginx:1.27", "redis:7", "busybox", "registry.example.com/app:v2"]


def rand_labels(rng, p=0.6):
    if rng.random() > p:
        return None
    return {k: rng.choice(LABEL_VALUES) for k in rng.sample(LABEL_KEYS, rng.randint(1, 3))}


def rand_container(rng, name):
    c = {"name": name, "image": rng.choice(IMAGES)}
    if rng.random() < 0.4:
        c["env"] = [{"name": n, "value": rng.choice(LABEL_VALUES)}
                    for n in rng.sample(["MODE", "LEVEL", "REGION"], rng.randint(1, 2))]
    if rng.random() < 0.3:
        c["ports"] = [{"containerPort": rng.choice([80, 8080, 9090]), "protocol": "TCP"}]
    return c


def pod_spec(rng, in_template=False):
    spec = {"containers": [rand_container(rng, "app")]}
    if rng.random() < 0.3:
        spec["containers"].append(rand_container(rng, "helper"))
    if rng.random() < 0.25:
        spec["nodeSelector"] = {"disk": rng.choice(["ssd", "hdd"])}
    if rng.random() < 0.2:
        spec["restartPolicy"] = rng.choice(["Always", "OnFailure"])
        if in_template:
            # a Deployment's pod template may only say Always (kube-apiserver's
            # validation refuses the object before admission otherwise)
            spec["restartPolicy"] = "Always"
    return spec


def rand_object(rng, kind, ns):
    g, v, _, namespaced = KINDS[kind]
    api = (g + "/" + v) if g else v
    name = rng.choice(NAMES) if kind != "Namespace" else rng.choice(["sandbox", "team-c", "playground"])
    meta = {"name": name}
    if namespaced:
        meta["namespace"] = ns
    labels = rand_labels(rng)
    if kind == "Namespace":
        # the label kube-apiserver's defaulting always sets (namespaceSelector sees it)
        labels = dict(labels or {}, **{"kubernetes.io/metadata.name": name})
    if labels:
        meta["labels"] = labels
    if rng.random() < 0.25:
        meta["annotations"] = {"note": rng.choice(LABEL_VALUES)}
    obj = {"apiVersion": api, "kind": kind, "metadata": meta}
    if kind == "ConfigMap":
        if rng.random() < 0.8:
            obj["data"] = {k: rng.choice(LABEL_VALUES) for k in rng.sample(["mode", "level", "color", "size"], rng.randint(1, 3))}
    elif kind == "Pod":
        obj["spec"] = pod_spec(rng)
    elif kind == "Deployment":
        sel = {"app": name}
        spec = {"selector": {"matchLabels": sel},
                "template": {"metadata": {"labels": dict(sel)}, "spec": pod_spec(rng, in_template=True)}}
        spec["replicas"] = rng.randint(1, 5)  # absent, the typed round trip would add replicas: 0
        obj["spec"] = spec
    elif kind == "Service":
        # without targetPort, the typed round trip would add targetPort: 0
        spec = {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": rng.choice([8080, "http"])}]}
        if rng.random() < 0.7:
            spec["selector"] = {"app": name}
        if rng.random() < 0.4:
            spec["type"] = rng.choice(["ClusterIP", "NodePort"])
        obj["spec"] = spec
    elif kind == "Widget":
        spec = {}
        if rng.random() < 0.7:
            spec["replicas"] = rng.randint(0, 4)
        if rng.random() < 0.6:
            spec["size"] = rng.choice(["small", "large"])
        if rng.random() < 0.5:
            spec["tags"] = rng.sample(["red", "green", "blue"], rng.randint(1, 2))
        if rng.random() < 0.5:
            spec["items"] = [{"name": "first", "value": rng.choice(LABEL_VALUES)}]
        if rng.random() < 0.4:
            spec["config"] = {"mode": rng.choice(LABEL_VALUES)}
        obj["spec"] = spec
    elif kind == "Tunable":
        spec = {"prefix": rng.choice(["pre", "x"])}
        if rng.random() < 0.6:
            spec["count"] = rng.randint(1, 5)
        if rng.random() < 0.5:
            spec["labels"] = {"zone": rng.choice(["a", "b"])}
        obj["spec"] = spec
    return obj


def changed_copy(rng, obj):
    """The stored object of an UPDATE: the request's object with a difference or two."""
    old = copy.deepcopy(obj)
    meta = old["metadata"]
    r = rng.random()
    if r < 0.35:
        meta["labels"] = rand_labels(rng, 1.0)
    elif r < 0.6:
        meta.pop("labels", None)
    if old["kind"] == "Namespace":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    if old["kind"] == "ConfigMap" and rng.random() < 0.5:
        old["data"] = {"mode": "old"}
    if old["kind"] in ("Deployment", "Widget") and rng.random() < 0.5:
        old.setdefault("spec", {})["replicas"] = rng.randint(1, 9)
    return old


# ---------------------------------------------------------------------------
# Random CEL
# ---------------------------------------------------------------------------
def q(s):
    return json.dumps(s)


class Ctx:
    """What an expression may refer to."""

    def __init__(self, rng, kind, op, ns, param_kind=None):
        self.rng, self.kind, self.op, self.ns = rng, kind, op, ns
        self.param_kind = param_kind          # None | "ConfigMap" | "Tunable"
        self.string_vars = []                 # names of string-valued variables
        self.int_vars = []
        self.allow_errors = 0.0               # chance an expression errors at run time
        self.move_copy = False                # JSONPatch move and copy operations

    def choice(self, xs):
        return self.rng.choice(xs)


def str_expr(c, depth=0):
    r = c.rng
    opts = [
        lambda: q(r.choice(LABEL_VALUES)),
        lambda: "object.metadata.name",
        lambda: "request.userInfo.username.split(\":\")[0]",
        lambda: "request.operation.lowerAscii()",
        lambda: "string(size(object.metadata.name))",
        lambda: "object.metadata.?labels[%s].orValue(%s)" % (q(r.choice(LABEL_KEYS)), q("none")),
        lambda: "(has(object.metadata.labels) ? %s : %s)" % (q("labelled"), q("bare")),
        lambda: "(request.userInfo.groups.exists(g, g == %s) ? %s : %s)" % (q(r.choice(["ops", "dev", "system:masters"])), q("yes"), q("no")),
        lambda: "string(size(request.userInfo.groups))",
        lambda: "%s.upperAscii()" % q(r.choice(LABEL_VALUES)),
        lambda: "request.resource.resource",
    ]
    if KINDS[c.kind][3]:
        opts.append(lambda: "namespaceObject.metadata.name")
        opts.append(lambda: "namespaceObject.metadata.?labels.?env.orValue(%s)" % q("unset"))
        opts.append(lambda: "request.namespace")
    if c.op == "UPDATE":
        opts.append(lambda: "oldObject.metadata.name")
        opts.append(lambda: "oldObject.metadata.?labels[%s].orValue(%s)" % (q(r.choice(LABEL_KEYS)), q("was-unset")))
    if c.param_kind == "ConfigMap":
        opts += [lambda: "params.metadata.name",
                 lambda: "params.data.?%s.orValue(%s)" % (r.choice(["mode", "suffix", "owner"]), q("dflt"))] * 3
    if c.param_kind == "Tunable":
        opts += [lambda: "params.spec.?prefix.orValue(%s)" % q("p"), lambda: "params.metadata.name"] * 3
    if c.string_vars and r.random() < 0.5:
        return "variables." + r.choice(c.string_vars)
    if depth < 1 and r.random() < 0.25:
        return "%s + %s + %s" % (str_expr(c, depth + 1), q("-"), str_expr(c, depth + 1))
    if c.allow_errors and r.random() < c.allow_errors:
        return err_str_expr(c)
    return r.choice(opts)()


def err_str_expr(c):
    r = c.rng
    opts = [
        "string(1 / (size(object.metadata.name) - size(object.metadata.name)))",
        "object.metadata.labels[%s]" % q("no-such-label"),
        "string(int(object.metadata.name))",
        "string([1, 2][size(object.metadata.name) + 2])",
        "string(%d %% (size(request.userInfo.username) - size(request.userInfo.username)))" % r.randint(1, 9),
    ]
    if c.param_kind == "ConfigMap":
        opts.append("params.data[%s]" % q("missing-key"))
    if c.op == "CREATE":
        opts.append("oldObject.metadata.name")
    return r.choice(opts)


def int_expr(c):
    r = c.rng
    opts = [lambda: str(r.randint(0, 7)),
            lambda: "size(object.metadata.name)",
            lambda: "size(request.userInfo.groups) + %d" % r.randint(0, 2)]
    if c.kind in ("Deployment", "Widget"):
        opts.append(lambda: "object.spec.?replicas.orValue(1) + 1")
    if c.param_kind == "Tunable":
        opts.append(lambda: "params.spec.?count.orValue(3)")
    if c.param_kind == "ConfigMap":
        opts.append(lambda: "int(params.data.?count.orValue(\"2\"))")
    if c.int_vars and r.random() < 0.5:
        return "variables." + r.choice(c.int_vars)
    if c.allow_errors and r.random() < c.allow_errors:
        return r.choice(["1 / (size(object.metadata.name) - size(object.metadata.name))",
                         "int(request.userInfo.username)"])
    return r.choice(opts)()


def bool_expr(c, erroring=0.0):
    r = c.rng
    opts = [
        lambda: "request.userInfo.username == %s" % q(r.choice(USERS)["username"]),
        lambda: "%s in request.userInfo.groups" % q(r.choice(["ops", "dev", "system:masters", "system:authenticated"])),
        lambda: "object.metadata.name.startsWith(%s)" % q(r.choice(["w", "d", "c", "a", "s", "x"])),
        lambda: "has(object.metadata.labels) && %s in object.metadata.labels" % q(r.choice(LABEL_KEYS)),
        lambda: "object.metadata.?labels[%s].orValue(%s) == %s" % (q(r.choice(LABEL_KEYS)), q(""), q(r.choice(LABEL_VALUES))),
        lambda: "request.operation == %s" % q(r.choice(["CREATE", "UPDATE"])),
        lambda: r.choice(["true", "false"]),
        lambda: "!has(object.metadata.annotations)",
        lambda: "request.kind.kind == %s" % q(r.choice(KIND_NAMES)),
    ]
    if KINDS[c.kind][3]:
        opts.append(lambda: "namespaceObject == null")  # matchConditions see no Namespace
    if c.op == "UPDATE":
        opts.append(lambda: "oldObject.metadata.?labels == object.metadata.?labels")
    if c.param_kind == "ConfigMap":
        opts.append(lambda: "params.data.?enabled.orValue(%s) == %s" % (q("true"), q("true")))
    if c.param_kind == "Tunable":
        opts.append(lambda: "params.spec.?count.orValue(0) > 1")
    if erroring and r.random() < erroring:
        return r.choice([
            "object.metadata.labels[%s] == %s" % (q("no-such-label"), q("x")),
            "1 / (size(object.metadata.name) - size(object.metadata.name)) == 1",
            "int(object.metadata.name) > 0",
        ])
    e = r.choice(opts)()
    if r.random() < 0.15:
        e = "!(%s)" % e
    elif r.random() < 0.15:
        e = "%s %s %s" % (e, r.choice(["&&", "||"]), r.choice(opts)())
    return e


# ---------------------------------------------------------------------------
# Random mutations
# ---------------------------------------------------------------------------
def as_string(e):
    """A map or list literal's values must share a static type: string(...) makes a dyn one a string."""
    return e if e.startswith('"') and e.endswith('"') and e.count('"') == 2 else "string(%s)" % e


def map_literal(c, keys, valf):
    return "{" + ", ".join("%s: %s" % (q(k), as_string(valf())) for k in keys) + "}"


def ac_metadata(c, field):
    keys = c.rng.sample(LABEL_KEYS + ["stamp"], c.rng.randint(1, 2))
    return "Object{metadata: Object.metadata{%s: %s}}" % (field, map_literal(c, keys, lambda: str_expr(c)))


def ac_container(c, prefix):
    """A container apply configuration (merged into containers by name)."""
    r = c.rng
    name = r.choice(["app", "app", "sidecar", "helper"])
    parts = ["name: %s" % q(name)]
    if r.random() < 0.6 or name == "sidecar":
        parts.append("image: %s" % (q(r.choice(IMAGES)) if r.random() < 0.7 else str_expr(c)))
    if r.random() < 0.5:
        parts.append("env: [%s.env{name: %s, value: %s}]" % (prefix, q(r.choice(["MODE", "TRACE", "USER"])), str_expr(c)))
    if r.random() < 0.25:
        parts.append("ports: [%s.ports{containerPort: %d, protocol: %s}]" % (prefix, r.choice([80, 9090, 53]), q(r.choice(["TCP", "UDP"]))))
    return "%s{%s}" % (prefix, ", ".join(parts))


def ac_pod_spec(c, prefix):
    r = c.rng
    choice = r.randrange(5)
    if choice <= 1:
        return "%s{containers: [%s]}" % (prefix, ac_container(c, prefix + ".containers"))
    if choice == 2:
        return "%s{nodeSelector: %s}" % (prefix, map_literal(c, [r.choice(["disk", "zone"])], lambda: str_expr(c)))
    if choice == 3:
        return "%s{restartPolicy: %s}" % (prefix, q(r.choice(["Always", "Never", "OnFailure"])))
    return "%s{tolerations: [%s.tolerations{key: %s, operator: \"Exists\"}]}" % (prefix, prefix, q(r.choice(["dedicated", "gpu"])))


def apply_configuration(c):
    r = c.rng
    k = c.kind
    gens = [lambda: ac_metadata(c, "labels"), lambda: ac_metadata(c, "annotations")]
    if k == "ConfigMap":
        gens += [lambda: "Object{data: %s}" % map_literal(c, r.sample(["mode", "level", "extra"], r.randint(1, 2)), lambda: str_expr(c))] * 2
    elif k == "Pod":
        gens += [lambda: "Object{spec: %s}" % ac_pod_spec(c, "Object.spec")] * 3
    elif k == "Deployment":
        gens += [lambda: "Object{spec: Object.spec{replicas: %s}}" % int_expr(c),
                 lambda: "Object{spec: Object.spec{template: Object.spec.template{spec: %s}}}" % ac_pod_spec(c, "Object.spec.template.spec"),
                 lambda: "Object{spec: Object.spec{template: Object.spec.template{metadata: Object.spec.template.metadata{labels: %s}}}}"
                 % map_literal(c, [r.choice(["track", "app"])], lambda: str_expr(c)),
                 lambda: "Object{spec: Object.spec{minReadySeconds: %s}}" % int_expr(c)]
    elif k == "Service":
        gens += [lambda: "Object{spec: Object.spec{selector: %s}}" % map_literal(c, [r.choice(["app", "tier"])], lambda: str_expr(c)),
                 lambda: "Object{spec: Object.spec{ports: [Object.spec.ports{name: %s, port: %d, protocol: %s, targetPort: %d}]}}"
                 % (q(r.choice(["http", "metrics", "dns"])), r.choice([80, 9090, 53]), q(r.choice(["TCP", "UDP"])), r.choice([80, 8443])),
                 lambda: "Object{spec: Object.spec{type: %s}}" % q(r.choice(["ClusterIP", "NodePort"])),
                 lambda: "Object{spec: Object.spec{sessionAffinity: %s}}" % q(r.choice(["None", "ClientIP"]))]
    elif k == "Tunable":
        gens += [lambda: "Object{spec: Object.spec{prefix: %s}}" % str_expr(c),
                 lambda: "Object{spec: Object.spec{count: %s}}" % int_expr(c),
                 lambda: "Object{spec: Object.spec{labels: %s}}" % map_literal(c, [r.choice(["zone", "example.com/x"])], lambda: str_expr(c))]
    elif k == "Widget":
        gens += [lambda: "Object{spec: Object.spec{replicas: %s}}" % int_expr(c),
                 lambda: "Object{spec: Object.spec{size: %s}}" % str_expr(c),
                 lambda: "Object{spec: Object.spec{tags: [%s]}}" % ", ".join(as_string(str_expr(c)) for _ in range(r.randint(1, 2))),
                 lambda: "Object{spec: Object.spec{items: [Object.spec.items{name: %s, value: %s}]}}" % (q(r.choice(["first", "second"])), str_expr(c)),
                 lambda: "Object{spec: Object.spec{config: %s}}" % map_literal(c, [r.choice(["mode", "zone"])], lambda: str_expr(c)),
                 lambda: "Object{spec: Object.spec{paused: %s}}" % bool_expr(c)]
    return r.choice(gens)()


def obj_literal(pairs):
    """A JSON object value: dyn(...) around each value keeps the literal homogeneous."""
    return "{" + ", ".join("%s: dyn(%s)" % (q(k), v) for k, v in pairs) + "}"


def jp(op, path, value=None):
    s = "JSONPatch{op: %s, path: %s" % (q(op), path)
    if value is not None:
        s += ", value: " + value
    return s + "}"


def label_key_path(c, field):
    key = c.rng.choice(LABEL_KEYS + ["a~b", "stamp"])
    if "/" in key or "~" in key or c.rng.random() < 0.3:
        return "%s + jsonpatch.escapeKey(%s)" % (q("/metadata/%s/" % field), q(key))
    return q("/metadata/%s/%s" % (field, key))


def json_patch(c, obj):
    """A JSONPatch expression; mostly applicable to obj, sometimes not (a patch error)."""
    r = c.rng
    k = c.kind
    meta = obj["metadata"]
    ops = []
    field = r.choice(["labels", "annotations"])
    if field in meta or r.random() < 0.15:
        ops.append(lambda: jp("add", label_key_path(c, field), str_expr(c)))
        ops.append(lambda: jp("remove", label_key_path(c, field)))
    else:
        ops.append(lambda: jp("add", q("/metadata/" + field), map_literal(c, [r.choice(LABEL_KEYS)], lambda: str_expr(c))))
    ops.append(lambda: jp("test", q("/metadata/name"), q(r.choice([meta["name"], meta["name"], "other"]))))
    if k == "ConfigMap":
        ops.append(lambda: jp(r.choice(["add", "replace"]), q("/data/" + r.choice(["mode", "level", "extra"])), str_expr(c)))
        ops.append(lambda: jp("remove", q("/data/" + r.choice(["mode", "level"]))))
        if "data" not in obj:
            ops.append(lambda: jp("add", q("/data"), map_literal(c, ["mode"], lambda: str_expr(c))))
    elif k in ("Pod", "Deployment"):
        base = "/spec" if k == "Pod" else "/spec/template/spec"
        ops.append(lambda: jp("add", q(base + "/containers/-"), obj_literal([("name", q("sidecar")), ("image", q(r.choice(IMAGES)))])))
        ops.append(lambda: jp("replace", q(base + "/containers/0/image"), str_expr(c)))
        ops.append(lambda: jp("add", q(base + "/containers/0/env"), "[%s]" % obj_literal([("name", q("X")), ("value", str_expr(c))])))
        ops.append(lambda: jp("add", q(base + "/nodeSelector"), map_literal(c, ["disk"], lambda: str_expr(c))))
        if k == "Deployment":
            ops.append(lambda: jp(r.choice(["add", "replace"]), q("/spec/replicas"), int_expr(c)))
            ops.append(lambda: jp("test", q("/spec/replicas"), str(r.randint(1, 3))))
    elif k == "Service":
        ops.append(lambda: jp("add", q("/spec/ports/-"), obj_literal([("name", q("metrics")), ("port", "9090"), ("protocol", q("TCP")), ("targetPort", "9090")])))
        ops.append(lambda: jp("replace", q("/spec/ports/0/port"), str(r.choice([8080, 443]))))
        ops.append(lambda: jp("add", q("/spec/type"), q(r.choice(["ClusterIP", "NodePort"]))))
        ops.append(lambda: jp("remove", q("/spec/selector")))
    elif k == "Widget":
        ops.append(lambda: jp("add", q("/spec/tags/" + r.choice(["-", "0"])), str_expr(c)))
        ops.append(lambda: jp(r.choice(["add", "replace"]), q("/spec/size"), str_expr(c)))
        ops.append(lambda: jp(r.choice(["add", "replace"]), q("/spec/replicas"), int_expr(c)))
        ops.append(lambda: jp("add", "%s + jsonpatch.escapeKey(%s)" % (q("/spec/config/"), q(r.choice(["a/b", "m~n", "plain"]))), str_expr(c)))
        ops.append(lambda: jp("remove", q("/spec/items/0")))
        ops.append(lambda: jp("add", q("/spec/items/-"), obj_literal([("name", q("second")), ("value", str_expr(c))])))
    elif k == "Tunable":
        ops.append(lambda: jp(r.choice(["add", "replace"]), q("/spec/prefix"), str_expr(c)))
        ops.append(lambda: jp("add", "%s + jsonpatch.escapeKey(%s)" % (q("/spec/labels/"), q(r.choice(["zone", "a/b"]))), str_expr(c)))
        ops.append(lambda: jp("remove", q("/spec/count")))
    if c.move_copy:
        ops = move_copy_ops(c, obj) + ops[:2]
    n = r.choice([1, 1, 1, 2, 2, 3])
    return "[" + ", ".join(r.choice(ops)() for _ in range(n)) + "]"


def move_copy_ops(c, obj):
    """JSONPatch move and copy (from: a JSON pointer), applicable or not."""
    r = c.rng
    meta = obj["metadata"]
    esc = lambda k: k.replace("~", "~0").replace("/", "~1")
    present = ["/metadata/%s/%s" % (f, esc(k)) for f in ("labels", "annotations") for k in meta.get(f, {})]
    parents = [f for f in ("labels", "annotations") if f in meta] or ["labels"]
    src = lambda: q(r.choice(present) if present and r.random() < 0.8 else "/metadata/labels/" + r.choice(["app", "absent"]))
    dst = lambda: q("/metadata/%s/%s" % (r.choice(parents) if r.random() < 0.85 else "annotations", r.choice(["copied", "moved", "app"])))
    ops = [lambda: "JSONPatch{op: %s, from: %s, path: %s}" % (q(r.choice(["copy", "move"])), src(), dst()),
           lambda: "JSONPatch{op: \"copy\", from: \"/metadata/name\", path: %s}" % dst()]
    k = c.kind
    if k == "ConfigMap":
        ops.append(lambda: "JSONPatch{op: %s, from: %s, path: %s}" % (q(r.choice(["copy", "move"])), q("/data/" + r.choice(["mode", "level"])), q("/data/" + r.choice(["moved", "color"]))))
    elif k in ("Pod", "Deployment"):
        base = "/spec" if k == "Pod" else "/spec/template/spec"
        ops.append(lambda: "JSONPatch{op: \"copy\", from: %s, path: %s}" % (q(base + "/containers/0/image"), q(base + "/containers/" + r.choice(["1", "0"]) + "/image")))
        ops.append(lambda: "JSONPatch{op: \"move\", from: %s, path: %s}" % (q(base + "/nodeSelector"), q("/metadata/annotations")))
    elif k == "Widget":
        ops.append(lambda: "JSONPatch{op: %s, from: \"/spec/tags/0\", path: \"/spec/tags/-\"}" % q(r.choice(["copy", "move"])))
        ops.append(lambda: "JSONPatch{op: \"copy\", from: \"/spec/size\", path: \"/spec/config/size\"}")
    elif k == "Service":
        ops.append(lambda: "JSONPatch{op: \"copy\", from: \"/spec/ports/0\", path: \"/spec/ports/-\"}")
        ops.append(lambda: "JSONPatch{op: \"move\", from: \"/spec/selector\", path: \"/metadata/labels\"}")
    return ops


def mutation(c, obj, patch_type=None):
    pt = patch_type or c.rng.choice(["ApplyConfiguration", "JSONPatch"])
    if pt == "ApplyConfiguration":
        return {"patchType": pt, "applyConfiguration": {"expression": apply_configuration(c)}}
    return {"patchType": pt, "jsonPatch": {"expression": json_patch(c, obj)}}


# ---------------------------------------------------------------------------
# Random matching
# ---------------------------------------------------------------------------
def selector(rng, keys, values):
    sel = {}
    if rng.random() < 0.6:
        sel["matchLabels"] = {rng.choice(keys): rng.choice(values)}
    if not sel or rng.random() < 0.4:
        key = rng.choice(keys)
        op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
        e = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            e["values"] = rng.sample(values, rng.randint(1, 2))
        sel["matchExpressions"] = [e]
    return sel


def exact_rule(kind, ops):
    g, v, plural, _ = KINDS[kind]
    return {"apiGroups": [g], "apiVersions": [v], "operations": ops, "resources": [plural]}


def random_rule(rng, kind):
    g, v, plural, namespaced = KINDS[kind]
    other = rng.choice([k for k in KIND_NAMES if k != kind])
    kinds = [kind] if rng.random() < 0.8 else [other]
    if rng.random() < 0.3:
        kinds.append(rng.choice(KIND_NAMES))
    groups = sorted({KINDS[k][0] for k in kinds})
    plurals = sorted({KINDS[k][2] for k in kinds})
    rule = {
        "apiGroups": ["*"] if rng.random() < 0.25 else groups,
        # not v1beta1: maporacle makes every version its scheme knows (apps/v1beta1 Deployment) equivalent,
        # where kube-apiserver 1.36 serves apps/v1 only
        "apiVersions": rng.choice([["*"], ["v1"], ["v1"], ["v1"], ["v2"], ["v1", "v2"]]),
        "operations": rng.choice([["*"], ["*"], ["CREATE"], ["UPDATE"], ["CREATE", "UPDATE"], ["CREATE", "UPDATE"], ["CONNECT"], ["CREATE", "CONNECT"]]),
        "resources": rng.choice([["*"], plurals, plurals, plurals, plurals + [p + "/status" for p in plurals], ["*/*"]]),
    }
    if rng.random() < 0.3:
        rule["scope"] = rng.choice(["*", "Namespaced", "Cluster"])
    return rule


def match_constraints(rng, kind, op, elaborate, obj=None, ns=None):
    if not elaborate:
        return {"resourceRules": [exact_rule(kind, rng.choice([["*"], [op], ["CREATE", "UPDATE"]]))]}
    mc = {"resourceRules": [random_rule(rng, kind) for _ in range(rng.choice([1, 1, 2]))]}
    if rng.random() < 0.3:
        ex = random_rule(rng, kind)
        ex.pop("scope", None)
        mc["excludeResourceRules"] = [ex]
    if rng.random() < 0.35:
        ns_labels = NAMESPACES.get(ns) or (obj or {}).get("metadata", {}).get("labels") or {}
        if ns_labels and rng.random() < 0.5:
            k = rng.choice(sorted(ns_labels))
            mc["namespaceSelector"] = {"matchLabels": {k: ns_labels[k]}}
        else:
            mc["namespaceSelector"] = selector(rng, ["env", "team", "tier", "kubernetes.io/metadata.name"], ["prod", "dev", "a", "gold", "default", "sandbox"])
    if rng.random() < 0.35:
        labels = (obj or {}).get("metadata", {}).get("labels") or {}
        if labels and rng.random() < 0.5:
            k = rng.choice(sorted(labels))
            mc["objectSelector"] = rng.choice([{"matchLabels": {k: labels[k]}},
                                               {"matchExpressions": [{"key": k, "operator": "In", "values": [labels[k], "other"]}]}])
        else:
            mc["objectSelector"] = selector(rng, LABEL_KEYS, LABEL_VALUES)
    if rng.random() < 0.4:
        mc["matchPolicy"] = rng.choice(["Exact", "Equivalent"])
    return mc


# ---------------------------------------------------------------------------
# Policies, bindings, params
# ---------------------------------------------------------------------------
API_VERSIONS = ["admissionregistration.k8s.io/v1beta1"] * 3 + ["admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1alpha1"]


def policy(rng, name, spec):
    return {"apiVersion": rng.choice(API_VERSIONS), "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": spec}


def binding(rng, name, policy_name, param_ref=None, match_resources=None):
    spec = {"policyName": policy_name}
    if param_ref:
        spec["paramRef"] = param_ref
    if match_resources:
        spec["matchResources"] = match_resources
    return {"apiVersion": rng.choice(API_VERSIONS), "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name}, "spec": spec}


def param_objects(rng, param_kind):
    """A few param objects; returns (objects, names)."""
    objs = []
    if param_kind == "ConfigMap":
        for i, ns in enumerate(["default", "team-a", "team-b", "default"]):
            if rng.random() < 0.25:
                continue
            data = {k: rng.choice(LABEL_VALUES + ["true", "false"]) for k in rng.sample(["mode", "suffix", "owner", "enabled"], rng.randint(1, 3))}
            if rng.random() < 0.4:
                data["count"] = str(rng.randint(1, 6))
            m = {"name": "settings-%d" % i, "namespace": ns}
            if rng.random() < 0.7:
                m["labels"] = {"role": rng.choice(["settings", "settings", "other"])}
            objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": data})
    else:
        for i in range(3):
            if rng.random() < 0.25:
                continue
            spec = {"prefix": rng.choice(["pre", "x", "team"])}
            if rng.random() < 0.6:
                spec["count"] = rng.randint(0, 5)
            m = {"name": "tune-%d" % i}
            if rng.random() < 0.7:
                m["labels"] = {"role": rng.choice(["settings", "settings", "other"])}
            objs.append({"apiVersion": GROUP + "/v1", "kind": "Tunable", "metadata": m, "spec": spec})
    return objs


def param_ref(rng, param_kind, req_ns):
    pr = {}
    if rng.random() < 0.5:
        pr["name"] = "%s-%d" % ("settings" if param_kind == "ConfigMap" else "tune", rng.randint(0, 4))
    else:
        pr["selector"] = rng.choice([{"matchLabels": {"role": "settings"}}, {"matchLabels": {"role": "other"}}, {},
                                     {"matchExpressions": [{"key": "role", "operator": "Exists"}]}])
    if param_kind == "ConfigMap" and rng.random() < 0.6:
        pr["namespace"] = rng.choice(["default", "team-a", "team-b", req_ns or "default"])
    pr["parameterNotFoundAction"] = rng.choice(["Allow", "Deny"])
    return pr


def variables(c, n):
    out = []
    for i in range(n):
        name = "v%d" % i
        if c.string_vars and c.rng.random() < 0.4:
            out.append({"name": name, "expression": "variables.%s + %s" % (c.rng.choice(c.string_vars), q("-" + c.rng.choice(LABEL_VALUES)))})
            c.string_vars.append(name)
        elif c.int_vars and c.rng.random() < 0.4:
            out.append({"name": name, "expression": "variables.%s * %d" % (c.rng.choice(c.int_vars), c.rng.randint(2, 3))})
            c.int_vars.append(name)
        elif c.rng.random() < 0.7:
            out.append({"name": name, "expression": str_expr(c)})
            c.string_vars.append(name)
        else:
            out.append({"name": name, "expression": int_expr(c)})
            c.int_vars.append(name)
    return out


def make_policy(rng, c, obj, pname, **kw):
    """A policy spec with knobs: elaborate_match, conditions, n_vars, erroring, mutations, patch_type."""
    spec = {"matchConstraints": match_constraints(rng, c.kind, c.op, kw.get("elaborate_match", rng.random() < 0.2), obj, c.ns)}
    if c.param_kind:
        spec["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"} if c.param_kind == "ConfigMap" else {"apiVersion": GROUP + "/v1", "kind": "Tunable"}
    n_cond = kw.get("conditions", rng.choice([0, 0, 0, 1]))
    if n_cond:
        # matchConditions see no variables
        saved = (c.string_vars, c.int_vars)
        c.string_vars, c.int_vars = [], []
        spec["matchConditions"] = [{"name": "cond-%d" % i, "expression": bool_expr(c, kw.get("erroring_conditions", 0.0))}
                                   for i in range(n_cond)]
        c.string_vars, c.int_vars = saved
    n_vars = kw.get("n_vars", rng.choice([0, 0, 0, 1]))
    if n_vars:
        spec["variables"] = variables(c, n_vars)
    c.allow_errors = kw.get("erroring", 0.0)
    c.move_copy = kw.get("move_copy", False)
    spec["mutations"] = [mutation(c, obj, kw.get("patch_type")) for _ in range(kw.get("mutations", rng.choice([1, 1, 1, 2])))]
    c.allow_errors = 0.0
    c.string_vars, c.int_vars = [], []
    spec["failurePolicy"] = kw.get("failure_policy", rng.choice(["Fail", "Fail", "Ignore"]))
    spec["reinvocationPolicy"] = kw.get("reinvocation", rng.choice(["Never", "IfNeeded"]))
    return policy(rng, pname, spec)


# ---------------------------------------------------------------------------
# Cases per feature
# ---------------------------------------------------------------------------
def base_case(rng, kinds=None, op=None):
    kind = rng.choice(kinds or KIND_NAMES)
    namespaced = KINDS[kind][3]
    ns = rng.choice(list(NAMESPACES)) if namespaced else ""
    op = op or rng.choice(["CREATE", "CREATE", "UPDATE"])
    obj = rand_object(rng, kind, ns)
    case = {"kind": kind, "ns": ns, "op": op, "object": obj,
            "oldObject": changed_copy(rng, obj) if op == "UPDATE" else None,
            "user": rng.choice(USERS), "policies": [], "bindings": [], "params": []}
    return case


def add_policy(rng, case, idx, param_kind=None, binding_kw=None, **kw):
    c = Ctx(rng, case["kind"], case["op"], case["ns"], param_kind)
    pname = "p%d" % idx
    case["policies"].append(make_policy(rng, c, case["object"], pname, **kw))
    bkw = binding_kw or {}
    pr = param_ref(rng, param_kind, case["ns"]) if param_kind else None
    mr = None
    if bkw.get("match_resources"):
        mr = match_constraints(rng, case["kind"], case["op"], True, case["object"], case["ns"])
    case["bindings"].append(binding(rng, pname + "-binding", pname, pr, mr))


def feat_apply_configuration(rng):
    case = base_case(rng)
    add_policy(rng, case, 0, patch_type="ApplyConfiguration", mutations=rng.choice([1, 1, 2, 3]), conditions=0, n_vars=rng.choice([0, 0, 1]))
    return case


def feat_json_patch(rng):
    case = base_case(rng)
    add_policy(rng, case, 0, patch_type="JSONPatch", mutations=rng.choice([1, 1, 2]), conditions=0, n_vars=rng.choice([0, 0, 1]))
    return case


def feat_match_constraints(rng):
    case = base_case(rng)
    add_policy(rng, case, 0, elaborate_match=True, conditions=0, n_vars=0, mutations=1,
               binding_kw={"match_resources": rng.random() < 0.35})
    return case


def feat_match_conditions(rng):
    case = base_case(rng)
    add_policy(rng, case, 0, conditions=rng.choice([1, 1, 2, 3]), erroring_conditions=0.2, n_vars=rng.choice([0, 1]),
               failure_policy=rng.choice(["Fail", "Ignore"]))
    return case


def feat_variables(rng):
    case = base_case(rng)
    add_policy(rng, case, 0, n_vars=rng.choice([1, 2, 3, 4]), conditions=rng.choice([0, 0, 1]), erroring=0.05)
    return case


def feat_params(rng):
    case = base_case(rng)
    pk = rng.choice(["ConfigMap", "ConfigMap", "Tunable"])
    case["params"] = param_objects(rng, pk)
    add_policy(rng, case, 0, param_kind=pk, n_vars=rng.choice([0, 1, 2]), conditions=rng.choice([0, 0, 1]),
               erroring=0.05)
    return case


def feat_reinvocation(rng):
    case = base_case(rng)
    n = rng.choice([2, 2, 3])
    for i in range(n):
        add_policy(rng, case, i, reinvocation=rng.choice(["Never", "IfNeeded", "IfNeeded"]),
                   conditions=rng.choice([0, 1]), n_vars=rng.choice([0, 1]), mutations=1)
    return case


def feat_failure_policy(rng):
    case = base_case(rng)
    add_policy(rng, case, 0, erroring=0.5, failure_policy=rng.choice(["Fail", "Ignore"]), conditions=rng.choice([0, 0, 1]),
               erroring_conditions=0.3, n_vars=rng.choice([0, 1, 2]), mutations=rng.choice([1, 2]))
    if rng.random() < 0.3:
        add_policy(rng, case, 1, mutations=1, conditions=0)
    return case


def feat_multi_policy(rng):
    case = base_case(rng)
    for i in range(rng.choice([2, 3])):
        pk = rng.choice([None, None, "ConfigMap"])
        if pk and not case["params"]:
            case["params"] = param_objects(rng, pk)
        elif pk:
            pk = None
        add_policy(rng, case, i, param_kind=pk, elaborate_match=rng.random() < 0.4,
                   binding_kw={"match_resources": rng.random() < 0.2})
    return case


def feat_bindings(rng):
    """One policy bound several times (own matchResources, paramRef): one invocation per binding."""
    case = base_case(rng)
    pk = rng.choice([None, "ConfigMap", "ConfigMap", "Tunable"])
    if pk:
        case["params"] = param_objects(rng, pk)
    add_policy(rng, case, 0, param_kind=pk, conditions=rng.choice([0, 1]), n_vars=rng.choice([0, 1]),
               binding_kw={"match_resources": rng.random() < 0.5})
    for j in range(1, rng.choice([2, 3]) + 1):
        pr = param_ref(rng, pk, case["ns"]) if pk else None
        mr = match_constraints(rng, case["kind"], case["op"], True, case["object"], case["ns"]) if rng.random() < 0.5 else None
        case["bindings"].append(binding(rng, "p0-binding-%d" % j, "p0", pr, mr))
    return case


def feat_json_patch_move_copy(rng):
    case = base_case(rng)
    add_policy(rng, case, 0, patch_type="JSONPatch", move_copy=True, conditions=0, n_vars=0, mutations=rng.choice([1, 1, 2]))
    return case


def feat_custom_kinds(rng):
    """Widget (namespaced, list map items, atomic tags) and Tunable (cluster-scoped) requests."""
    case = base_case(rng, kinds=["Widget", "Widget", "Tunable"])
    for i in range(rng.choice([1, 1, 2])):
        pk = rng.choice([None, None, "ConfigMap", "Tunable"])
        if pk and not case["params"]:
            case["params"] = param_objects(rng, pk)
        elif pk:
            pk = None
        add_policy(rng, case, i, param_kind=pk, elaborate_match=rng.random() < 0.3, erroring=0.05,
                   mutations=rng.choice([1, 1, 2]))
    return case


GENERATORS = {
    "apply-configuration": feat_apply_configuration,
    "json-patch": feat_json_patch,
    "match-constraints": feat_match_constraints,
    "match-conditions": feat_match_conditions,
    "variables": feat_variables,
    "params": feat_params,
    "reinvocation": feat_reinvocation,
    "failure-policy": feat_failure_policy,
    "multi-policy": feat_multi_policy,
    "bindings": feat_bindings,
    "json-patch-move-copy": feat_json_patch_move_copy,
    "custom-kinds": feat_custom_kinds,
}


# ---------------------------------------------------------------------------
# Oracle
# ---------------------------------------------------------------------------
def request_of(case):
    g, v, plural, namespaced = KINDS[case["kind"]]
    return {"operation": case["op"],
            "kind": {"group": g, "version": v, "kind": case["kind"]},
            "resource": {"group": g, "version": v, "resource": plural},
            "name": case["object"]["metadata"]["name"],
            # kube-apiserver names a Namespace's own request after it (its
            # create handler sets namespace = name), not ""
            "namespace": case["object"]["metadata"]["name"] if case["kind"] == "Namespace" else case["ns"],
            "userInfo": case["user"]}


def oracle_input(case, order=None):
    pols, binds, params = order or (case["policies"], case["bindings"], case["params"])
    return {"policies": pols, "bindings": binds, "params": params, "noAutoBinding": True,
            "namespaces": [namespace_object(n) for n in NAMESPACES],
            "resources": ORACLE_RESOURCES, "schemas": ORACLE_SCHEMAS,
            "request": request_of(case), "object": case["object"], "oldObject": case["oldObject"]}


CACHE = None  # a folder of earlier answers (--cache), keyed by the input and flags


def run_oracle(oracle, inp, flags, sample=0):
    """maporacle's answer; `sample` numbers the runs of one case, which the cache
    keeps apart (the same input may get another answer in another run)."""
    key = None
    if CACHE:
        ident = [flags, inp] if sample == 0 else [flags, inp, sample]
        key = CACHE / (hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest() + ".json")
        if key.exists():
            return json.loads(key.read_text())
    out = run_oracle_uncached(oracle, inp, flags)
    if key:
        key.write_text(json.dumps(out))
    return out


def run_oracle_uncached(oracle, inp, flags):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(inp, f)
        path = f.name
    try:
        r = subprocess.run([str(oracle)] + flags + [path], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise SystemExit("maporacle gave no JSON: rc=%s stdout=%r stderr=%r" % (r.returncode, r.stdout, r.stderr[-2000:]))


def stored_object_is_a_param(case):
    """An UPDATE whose object is of a policy's paramKind, in a namespace its binding's
    paramRef reads, by name or selector: on a live cluster the object is stored before
    the UPDATE, so the paramRef finds it; maporacle's params are only the case's."""
    if case["op"] != "UPDATE":
        return False
    kinds = {p["metadata"]["name"]: p["spec"].get("paramKind", {}).get("kind") for p in case["policies"]}
    name = case["object"]["metadata"]["name"]
    for b in case["bindings"]:
        ref = b["spec"].get("paramRef")
        if not ref or kinds.get(b["spec"]["policyName"]) != case["kind"]:
            continue
        if ref.get("namespace", case["ns"]) != case["ns"]:
            continue
        if "selector" in ref or ref.get("name") == name:
            return True
    return False


def may_reorder(case):
    if len(case["bindings"]) > 1:
        return True
    return any("selector" in b["spec"].get("paramRef", {}) for b in case["bindings"])


def label(oracle, case, seed):
    """Runs the oracle; returns (outputs list). The first run validates."""
    outs = [run_oracle(oracle, oracle_input(case), ORACLE_FLAGS)]
    if "stage" not in outs[0] and may_reorder(case):
        for sample, order in enumerate(input_orders(case, seed), start=1):
            outs.append(run_oracle(oracle, oracle_input(case, order), ORACLE_FLAGS + ["-no-validate"], sample))
    return outs


def input_orders(case, seed):
    """ORDER_RUNS - 1 other input orders: every combination of reversals first, then
    seeded shuffles. The input order is one source of variation; the informers'
    stores, which upstream lists from, are the other (each run a fresh sample)."""
    lists = [case["policies"], case["bindings"], case["params"]]
    orders = []
    for mask in range(1, 8):
        orders.append([xs[::-1] if mask >> i & 1 else list(xs) for i, xs in enumerate(lists)])
    rng = random.Random("%d/%s/order" % (seed, case["name"]))
    while len(orders) < ORDER_RUNS - 1:
        orders.append([rng.sample(xs, len(xs)) for xs in lists])
    return orders[:ORDER_RUNS - 1]


def strip_artifacts(case, obj):
    """Drops the deprecated serviceAccount a conversion copies from serviceAccountName (README)."""
    def specs(o):
        if not isinstance(o, dict):
            return []
        if o.get("kind") == "Pod":
            return [o.get("spec")]
        if o.get("kind") == "Deployment":
            return [o.get("spec", {}).get("template", {}).get("spec")]
        return []
    for before, after in zip(specs(case["object"]), specs(obj)):
        if isinstance(after, dict) and "serviceAccount" in after and "serviceAccount" not in (before or {}):
            del after["serviceAccount"]
    return obj


def normal(v):
    """FORMAT.md's comparison: nulls and empty maps or lists dropped."""
    if isinstance(v, dict):
        v = {k: normal(x) for k, x in v.items()}
        return {k: x for k, x in v.items() if x not in (None, {}, [])}
    if isinstance(v, list):
        return [normal(x) for x in v]
    return v


def leaves(v, path=()):
    """(path, value) of every scalar; list indices are kept in path."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield from leaves(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from leaves(x, path + (i,))
    else:
        yield path, v


def general(path):
    return tuple("*" if isinstance(p, int) else p for p in path)


# Minimal objects whose pass through maporacle with no policy shows the fields the typed
# round trip (v1 -> internal -> v1, with defaulting off) adds on its own: a non-pointer
# internal field the v1 type serialises even when zero (Deployment spec.replicas, a
# ServicePort's targetPort).
ARTIFACT_PROBES = [
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "default"},
     "spec": {"containers": [{"name": "a", "image": "i", "env": [{"name": "A", "value": "b"}],
                              "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
              "tolerations": [{"key": "k", "operator": "Exists"}]}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "default"},
     "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "i"}]}}}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": "default"},
     "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}},
]


def find_artifacts(oracle):
    """kind -> {(general path, value)} the oracle adds to an object no policy touched."""
    found = {}
    for o in ARTIFACT_PROBES:
        case = {"kind": o["kind"], "ns": o["metadata"].get("namespace", ""), "op": "CREATE", "object": o,
                "oldObject": None, "user": USERS[0], "policies": [], "bindings": [], "params": []}
        out = run_oracle(oracle, oracle_input(case), ORACLE_FLAGS)
        before = {p for p, _ in leaves(normal(o))}
        found[o["kind"]] = {(general(p), v) for p, v in leaves(normal(out["object"])) if p not in before}
    return found


SHAPE_ERRORS = ["decoding", "no resource mapping", "not yet synced", "not yet ready", "ServiceUnavailable"]


def expectation(case, out, artifacts):
    """maporacle output -> (expect, outcome) or (None, drop reason)."""
    if out.get("stage"):
        return None, "invalid policy or binding generated (%s)" % out["stage"]
    if out.get("allowed") is True:
        obj = strip_artifacts(case, out.get("object"))
        before = {p for p, _ in leaves(normal(case["object"]))}
        for p, v in leaves(normal(obj)):
            if p not in before and (general(p), v) in artifacts.get(case["kind"], ()):
                return None, "conversion artifact (%s: %s) in the answer" % ("/".join(map(str, general(p))), v)
        return {"object": obj}, "unchanged" if normal(obj) == normal(case["object"]) else "mutated"
    msg = (out.get("status") or {}).get("message") or out.get("error") or ""
    for bad in SHAPE_ERRORS:
        if bad in msg and "resulted in error" not in msg:
            raise SystemExit("case-shape error in %s: %s" % (case["name"], msg))
    if not msg:
        raise SystemExit("denial without message in %s: %r" % (case["name"], out))
    return {"rejected": {"messageContains": msg}}, "rejected"


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------
def y(v):
    return json.dumps(v, ensure_ascii=False)


def describe(case):
    bits = []
    for p in case["policies"]:
        s = p["spec"]
        muts = "+".join("AC" if m["patchType"] == "ApplyConfiguration" else "JP" for m in s["mutations"])
        extra = []
        if s.get("matchConditions"):
            extra.append("%d cond" % len(s["matchConditions"]))
        if s.get("variables"):
            extra.append("%d var" % len(s["variables"]))
        if s.get("paramKind"):
            extra.append("param " + s["paramKind"]["kind"])
        bits.append("%s(%s %s %s%s)" % (p["metadata"]["name"], muts, s["failurePolicy"], s["reinvocationPolicy"],
                                        (", " + ", ".join(extra)) if extra else ""))
    return "[differential] [no-defaulting] %s %s %s by %s; %s -> %s" % (
        case["op"], case["kind"], (case["ns"] + "/" if case["ns"] else "") + case["object"]["metadata"]["name"],
        case["user"]["username"], "; ".join(bits), case["outcome"])


def render(case, seed):
    uses = {case["kind"]} | {p["kind"] for p in case["params"]}
    resources = [namespace_object(n) for n in NAMESPACES]
    resources += [crd(k) for k in CUSTOM if k in uses]
    resources += case["params"]
    lines = ["name: " + y(case["name"]),
             "description: " + y(describe(case)),
             "source: " + y(SOURCE % seed),
             "policies:"] + ["- " + y(p) for p in case["policies"]] + ["bindings:"] + \
            ["- " + y(b) for b in case["bindings"]] + ["resources:"] + ["- " + y(r) for r in resources] + \
            ["request: " + y(request_of(case)), "object: " + y(case["object"])]
    if case["oldObject"] is not None:
        lines.append("oldObject: " + y(case["oldObject"]))
    lines.append("expect: " + y(case["expect"]))
    return "\n".join(lines) + "\n"


HEADER = """# Differential corpus ({feature}): random MutatingAdmissionPolicy cases labelled
# by upstream's admission plugin (maporacle, k8s.io/apiserver v0.36.2), seed {seed}.
# GENERATED by tools/differential.py: do not edit; re-run it (see README.md here).
"""


def generate(seed, scale=1.0, only=None):
    cases = []
    for feature, count in FEATURES:
        if only and feature != only:
            continue
        rng = random.Random("%d/%s" % (seed, feature))
        for i in range(max(1, int(count * scale))):
            case = GENERATORS[feature](rng)
            case["feature"] = feature
            case["name"] = "diff-%s-%d" % (feature, i)
            cases.append(case)
    return cases


def tags(case):
    """The cross-cutting features a case exercises (for the coverage table)."""
    t = {"object " + case["kind"], "operation " + case["op"], "user " + case["user"]["username"],
         "outcome " + case["outcome"]}
    if len(case["policies"]) > 1:
        t.add("several policies")
    if len(case["bindings"]) > len(case["policies"]):
        t.add("several bindings of one policy")
    for p, b in zip(case["policies"], case["bindings"]):
        s, bs = p["spec"], b["spec"]
        t.add("policy " + p["apiVersion"].split("/")[1])
        mc = s["matchConstraints"]
        for k in ("excludeResourceRules", "namespaceSelector", "objectSelector", "matchPolicy"):
            if k in mc:
                t.add("matchConstraints." + k)
        if any(r.get("apiGroups") == ["*"] or r.get("resources") in (["*"], ["*/*"]) or r.get("operations") == ["*"]
               for r in mc["resourceRules"]):
            t.add("matchConstraints wildcard rule")
        if "matchResources" in bs:
            t.add("binding matchResources")
        if s.get("matchConditions"):
            t.add("matchConditions")
            if any(e in c["expression"] for c in s["matchConditions"] for e in ("no-such-label", "int(", "1 / (")):
                t.add("matchConditions erroring")
        if s.get("variables"):
            t.add("variables")
            if len(s["variables"]) > 1 and any("variables." in v["expression"] for v in s["variables"]):
                t.add("variables referencing variables")
        if "paramKind" in s:
            t.add("paramKind " + s["paramKind"]["kind"])
            pr = bs["paramRef"]
            t.add("paramRef " + ("name" if "name" in pr else "selector"))
            t.add("parameterNotFoundAction " + pr["parameterNotFoundAction"])
        for m in s["mutations"]:
            t.add("mutation " + m["patchType"])
            e = (m.get("jsonPatch") or m.get("applyConfiguration"))["expression"]
            for op in ("add", "remove", "replace", "test", "move", "copy"):
                if 'op: "%s"' % op in e:
                    t.add("JSONPatch op " + op)
            if "jsonpatch.escapeKey" in e:
                t.add("jsonpatch.escapeKey")
            for ref in ("oldObject", "namespaceObject", "params", "request."):
                if ref in e:
                    t.add("mutation reads " + ref.rstrip("."))
        t.add("failurePolicy " + s["failurePolicy"])
        t.add("reinvocationPolicy " + s["reinvocationPolicy"])
    return t


def kmutate_failures(kmutate, kept, seed):
    """Names of the cases `kmutate conformance` fails (to set them aside, not to label them)."""
    with tempfile.TemporaryDirectory() as tmp:
        for f, named in kept.items():
            pathlib.Path(tmp, f + ".yaml").write_text(HEADER.format(feature=f, seed=seed) + "---\n".join(t for _, t, _ in named))
        r = subprocess.run([kmutate, "conformance", "--expected-failures", "/dev/null", tmp],
                           capture_output=True, text=True)
    failing = {}
    for block in re.split(r"^FAIL ", r.stdout, flags=re.M)[1:]:
        name, _, rest = block.partition("\n")
        detail = " ".join(l.strip() for l in rest.splitlines() if l.startswith("    "))
        failing[name.strip()] = detail[:240]
    return failing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--oracle", default=str(DEFAULT_ORACLE))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--only")
    ap.add_argument("--count-scale", type=float, default=1.0)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--cache", default=str(ROOT / "target" / "differential-cache"),
                    help="folder of oracle answers kept between runs ('' for none)")
    ap.add_argument("--kmutate", help="a kmutate binary: cases it fails go to --pending instead of --out")
    ap.add_argument("--pending", default=str(ROOT / "target" / "differential-pending"),
                    help="where the cases kmutate fails go (outside conformance/, which CI runs whole)")
    args = ap.parse_args()
    if not os.access(args.oracle, os.X_OK):
        raise SystemExit("maporacle not found at %s: xz -dc ../shared/upstream/maporacle.xz > %s && chmod +x %s"
                         % (args.oracle, args.oracle, args.oracle))
    global CACHE
    if args.cache:
        CACHE = pathlib.Path(args.cache)
        CACHE.mkdir(parents=True, exist_ok=True)
    artifacts = find_artifacts(args.oracle)
    cases = generate(args.seed, args.count_scale, args.only)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        outs = list(ex.map(lambda c: label(args.oracle, c, args.seed), cases))

    kept, drops, stats = {}, {}, {}
    for case, runs in zip(cases, outs):
        f = case["feature"]
        st = stats.setdefault(f, {"generated": 0, "kept": 0, "mutated": 0, "unchanged": 0, "rejected": 0})
        st["generated"] += 1
        expect, outcome = expectation(case, runs[0], artifacts)
        if expect is None:
            drops.setdefault(outcome, []).append(case["name"])
            continue
        if stored_object_is_a_param(case):
            drops.setdefault("the updated object would be its own param (a live cluster stores it before "
                             "the UPDATE; maporacle does not)", []).append(case["name"])
            continue
        if any(r != runs[0] for r in runs[1:]):
            drops.setdefault("order-dependent (answers differ across %d input orders)" % ORDER_RUNS, []).append(case["name"])
            continue
        case["expect"], case["outcome"] = expect, outcome
        st["kept"] += 1
        st[outcome] += 1
        kept.setdefault(f, []).append((case["name"], render(case, args.seed), case))

    out = pathlib.Path(args.out)
    failing = {}
    if args.kmutate:
        failing = kmutate_failures(args.kmutate, kept, args.seed)
    pending = pathlib.Path(args.pending)
    files = {}
    for d, want in ((out, False), (pending, True)):
        for f, named in kept.items():
            texts = [t for n, t, _ in named if (n in failing) == want]
            if texts:
                files[d / (f + ".yaml")] = HEADER.format(feature=f, seed=args.seed) + "---\n".join(texts)
    committed = [c for named in kept.values() for n, _, c in named if n not in failing]
    notes = readme(args, stats, committed, failing, drops)
    if not args.only:  # a partial run leaves the other files, and the README, as they are
        files[out / "README.md"] = notes
    differ = []
    for path, text in sorted(files.items()):
        if args.check:
            if path.parent == out and (not path.exists() or path.read_text() != text):
                differ.append(path.name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for d in () if args.only else (out,) if args.check else (out, pending):
        for stale in d.glob("*.yaml") if d.exists() else ():
            if stale not in files and stale.stem in GENERATORS:
                differ.append(stale.name)
                if not args.check:
                    stale.unlink()
    print(notes)
    if args.check and differ:
        print("out of date:", ", ".join(differ))
        return 1
    return 0


def readme(args, stats, committed, failing, drops):
    n_pending = len(failing)
    lines = [
        "# Differential corpus",
        "",
        "Random, valid MutatingAdmissionPolicy cases (FORMAT.md), each labelled by upstream's",
        "admission plugin: `maporacle` (k8s.io/apiserver v0.36.2, ../shared/upstream/README.md).",
        "GENERATED by `tools/differential.py`: do not edit the YAML; tests need neither Python",
        "nor the oracle. Regenerate (maporacle unpacked at target/upstream/maporacle, kmutate built;",
        "about 15 minutes on 2 cores):",
        "",
        "    cargo build && python3 tools/differential.py --seed %d --kmutate target/debug/kmutate" % args.seed,
        "",
        "Expectations come from maporacle only. `--kmutate` is used only to sort: a case kmutate",
        "fails goes to `target/differential-pending/` (not committed, and outside conformance/,",
        "which CI and `kmutate conformance conformance` run whole; see the issue 30 report)",
        "instead of this folder, so that CI stays green while the disagreement is fixed.",
        "",
        "How the cases are made to fit FORMAT.md:",
        "",
        "- Defaulting: the oracle runs with `-no-input-defaults -no-output-defaults` (no defaulting of",
        "  the incoming object, none after each mutation), so `expect.object` is the mutation alone;",
        "  every case is tagged `[no-defaulting]`. Before labelling, minimal objects of each kind are",
        "  passed through the oracle with no policy to find what the typed round trip adds by itself",
        "  (Deployment `spec.replicas: 0`, a ServicePort's `targetPort: 0`); the generator always",
        "  writes those fields, and drops a case whose answer still has one it did not write. A pod",
        "  spec's deprecated `serviceAccount` (copied from `serviceAccountName`) would be removed.",
        "- Requests are given in full (kind, resource, namespace, name, operation, userInfo);",
        "  a Namespace request's namespace is the Namespace's own name (kube-apiserver's create",
        "  and update handlers set it so; its `namespaceObject` stays null), and a Namespace",
        "  object carries its `kubernetes.io/metadata.name` label, as kube-apiserver's defaulting",
        "  always sets it. A Deployment's pod template says `restartPolicy: Always` if anything",
        "  (kube-apiserver refuses any other value before admission).",
        "- Order: upstream runs policies, and the params a selector lists, in no fixed order. A case",
        "  with more than one policy or a selector paramRef is labelled %d times with policies," % ORDER_RUNS,
        "  bindings and params reversed (every combination) and shuffled; if the answers differ it",
        "  is dropped. Each run is a fresh sample: upstream lists policies, bindings and params",
        "  from its informers' stores (Go maps), so even one input order is run in an order that",
        "  changes from run to run (two bindings of one policy that deny with different messages).",
        "- Validity: the first oracle run validates policies and bindings as the apiserver does; a",
        "  case it refuses would be a generator defect and is dropped (counted below).",
        "- Rules never name apps/v1beta1: maporacle treats every version its scheme knows as",
        "  equivalent (a Deployment rule for v1beta1 would match apps/v1 and then fail for lack of",
        "  a v1beta1 schema), where kube-apiserver 1.36 serves apps/v1 only.",
        "",
        "## Cases per file",
        "",
        "| file (feature) | generated | dropped | pending (kmutate disagrees) | committed | mutated | unchanged | rejected |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    per = {}
    for c in committed:
        per.setdefault(c["feature"], {"mutated": 0, "unchanged": 0, "rejected": 0})[c["outcome"]] += 1
    tot = [0] * 7
    for f, st in stats.items():
        pend = sum(1 for n in failing if re.fullmatch(r"diff-%s-\d+" % re.escape(f), n))
        o = per.get(f, {"mutated": 0, "unchanged": 0, "rejected": 0})
        row = [st["generated"], st["generated"] - st["kept"], pend, st["kept"] - pend, o["mutated"], o["unchanged"], o["rejected"]]
        tot = [a + b for a, b in zip(tot, row)]
        lines.append("| %s.yaml | %s |" % (f, " | ".join(map(str, row))))
    lines.append("| total | %s |" % " | ".join(map(str, tot)))
    lines += ["", "## Coverage of the committed cases", "",
              "A case counts once per line it exercises (a case usually exercises several).", "",
              "| feature | cases |", "| --- | ---: |"]
    count = {}
    for c in committed:
        for t in tags(c):
            count[t] = count.get(t, 0) + 1
    for t in sorted(count):
        lines.append("| %s | %d |" % (t, count[t]))
    lines += ["", "## Dropped cases", ""]
    if not drops:
        lines.append("None.")
    for reason, names in sorted(drops.items()):
        lines.append("- %s: %d (%s)" % (reason, len(names), ", ".join(names)))
    lines += ["", "## Pending", ""]
    lines.append("%d cases kmutate disagreed with when generated are in %s/%s" % (
        n_pending, os.path.relpath(args.pending, ROOT), ":" if failing else "."))
    if failing:
        lines.append("")
    for name in sorted(failing, key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))):
        lines.append("- %s: %s" % (name, failing[name].replace("|", "\\|")))
    lines += ["", "## Disagreements the corpus found", ""] + RESOLVED
    return "\n".join(lines) + "\n"


# What kmutate did otherwise than upstream where generated cases first disagreed, and the
# rule upstream follows (each has minimal cases of its own in conformance/).
RESOLVED = [
    "- Selecting a field of a null input (`oldObject.metadata` on a CREATE, `namespaceObject`",
    "  in a matchCondition or for a cluster-scoped request) is cel-go's `no such key: metadata`;",
    "  kmutate said the cel crate's `no such overload ... '_._'`; `has()` of a field of it is",
    "  false. Fixed (fidelity-round-trip.yaml).",
    "- A mutation's result goes through the kind's Go types: a null in a typed map of strings",
    "  (ConfigMap data, labels; a JSONPatch copy from a missing key) comes back `\"\"`, and a",
    "  zero value in an `omitempty` field that is not a pointer (`minReadySeconds: 0`,",
    "  `paused: false`) is dropped. Fixed: the tags come from maporacle itself",
    "  (tools/probe_go_omitempty.py, src/schema/go_zero_fields.json).",
    "- Errors of several bindings: upstream collects every binding's params before it runs",
    "  any invocation, so a missing param (`Deny`) is told before an earlier binding's",
    "  mutation error. Fixed.",
    "- Found while fixing those (minimal cases, not the generator): an ApplyConfiguration's",
    "  CEL `null` is protobuf's NullValue, refused by the typed conversion; a Namespace's",
    "  own-name label is the apiserver's defaulting, not the matcher's. Fixed. `double()` of",
    "  a string out of float64's range fails upstream; kmutate answers infinity (listed in",
    "  expected-failures.txt).",
]


if __name__ == "__main__":
    sys.exit(main())
