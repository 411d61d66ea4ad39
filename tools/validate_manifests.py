#!/usr/bin/env python3
"""Validates kmutate's cluster manifests (deploy/).

- Every object of a built-in kind, in every YAML file under deploy/ (the
  policies and bindings of deploy/config/ and the CRDs of deploy/crds/
  included), against the Kubernetes 1.36 OpenAPI schemas, strictly (unknown
  fields are errors), with the PyPI package kubernetes-validate.
- Objects of CRD-based kinds (cert-manager's Issuer and Certificate, the
  Prometheus Operator's PrometheusRule and ServiceMonitor) are not in those
  schemas: their required fields are checked here by hand, after the CRDs'
  `required` lists. (tests/deploy.rs checks how the objects refer to each
  other: service, ports, path, probes, certificate names, metric names.)
- deploy/kustomization.yaml: every resource and generator file exists, and
  every manifest under deploy/ is either installed by it (as a resource,
  inside a resource folder, or as a generated ConfigMap's file) or named in
  APPLIED_SEPARATELY. Where kubectl is installed, `kubectl kustomize deploy`
  must build, and what it builds is validated too.

With `--rendered FILE...` it validates those files' objects the same way
instead (the Helm chart's renders, one file per values file of
charts/kmutate/ci/, which .ci/run writes with `helm template`).

Run by .ci/run after `pip install kubernetes-validate==1.37.0` (in a venv).
Exits 1 on any problem, listing them all.
"""

import os
import shutil
import subprocess
import sys

import yaml

try:
    import kubernetes_validate
except ImportError:
    sys.exit(
        "tools/validate_manifests.py needs kubernetes-validate: "
        "pip install kubernetes-validate==1.37.0 (.ci/run installs it in a venv)"
    )

KUBERNETES_VERSION = "1.36"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")

# Manifests of deploy/ that kustomization.yaml leaves out on purpose: they
# need the Prometheus Operator's CRDs, which not every cluster has.
# Monitoring needs the Prometheus Operator's CRDs; kmutate's own CRDs
# (kmutate.dev) are only for clusters without the MutatingAdmissionPolicy API
# (`kmutate serve --source api` then reads them): all applied on purpose.
APPLIED_SEPARATELY = {
    "prometheus-rules.yaml",
    "servicemonitor.yaml",
    "crds/mutatingadmissionpolicies.yaml",
    "crds/mutatingadmissionpolicybindings.yaml",
    # `kmutate serve --policy-reports` (README, "Monitor mode and who
    # changed what"): the wg-policy CRDs and what writing reports takes.
    "crds/policyreports.yaml",
    "policy-reports.yaml",
}

# API groups whose kinds come from CRDs, not in the Kubernetes schemas.
CRD_GROUPS = {"cert-manager.io", "monitoring.coreos.com", "kmutate.dev"}


def group_of(api_version):
    return api_version.split("/")[0] if "/" in api_version else ""


def describe(doc):
    meta = doc.get("metadata") or {}
    return "%s %s" % (doc.get("kind"), meta.get("name"))


def required(doc, paths):
    """The dotted paths of `paths` missing (or empty) in doc."""
    missing = []
    for path in paths:
        node = doc
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        if node in (None, "", [], {}):
            missing.append(path)
    return missing


def check_crd_kind(doc):
    """Problems in an object of a CRD-based kind (the CRDs' required fields)."""
    kind = doc.get("kind")
    group = group_of(doc.get("apiVersion", ""))
    problems = ["missing " + p for p in required(doc, ["metadata.name", "spec"])]
    spec = doc.get("spec") or {}
    if group == "cert-manager.io" and kind in ("Issuer", "ClusterIssuer"):
        types = ["acme", "ca", "selfSigned", "vault", "venafi"]
        present = [t for t in types if t in spec]
        if len(present) != 1:
            problems.append("spec must set exactly one of %s, has %s" % (types, present))
        if "ca" in spec:
            problems += ["missing spec." + p for p in required(spec, ["ca.secretName"])]
    elif group == "cert-manager.io" and kind == "Certificate":
        problems += ["missing spec." + p for p in required(spec, ["secretName", "issuerRef.name"])]
        if not (spec.get("dnsNames") or spec.get("commonName") or spec.get("ipAddresses")
                or spec.get("uris") or spec.get("emailAddresses")):
            problems.append("spec needs a commonName, dnsNames or another subject name")
    elif group == "monitoring.coreos.com" and kind == "PrometheusRule":
        for g, grp in enumerate(spec.get("groups") or []):
            problems += ["missing spec.groups[%d].%s" % (g, p) for p in required(grp, ["name", "rules"])]
            for r, rule in enumerate(grp.get("rules") or []):
                where = "spec.groups[%d].rules[%d]" % (g, r)
                if "expr" not in rule:
                    problems.append("missing %s.expr" % where)
                if ("alert" in rule) == ("record" in rule):
                    problems.append("%s must set exactly one of alert and record" % where)
                unknown = set(rule) - {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
                if unknown:
                    problems.append("%s: unknown fields %s" % (where, sorted(unknown)))
        if not spec.get("groups"):
            problems.append("missing spec.groups")
    elif group == "monitoring.coreos.com" and kind == "ServiceMonitor":
        problems += ["missing spec." + p for p in required(spec, ["selector", "endpoints"])]
    elif group == "kmutate.dev":
        pass  # kmutate's own kinds: kmutate loads and checks them itself.
    else:
        problems.append("no check known for this CRD-based kind")
    return problems


def validate_documents(docs, source, counts):
    problems = []
    for doc in docs:
        if not isinstance(doc, dict):
            problems.append("%s: a document is not an object" % source)
            continue
        api_version = doc.get("apiVersion", "")
        if group_of(api_version) in CRD_GROUPS:
            counts["crd"] += 1
            for p in check_crd_kind(doc):
                problems.append("%s: %s: %s" % (source, describe(doc), p))
            continue
        counts["builtin"] += 1
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            problems.append("%s: %s: %s: %s" % (source, describe(doc), path, e.message))
        except kubernetes_validate.SchemaNotFoundError as e:
            problems.append("%s: %s: %s" % (source, describe(doc), e.message))
    return problems


def manifest_files():
    """Every YAML file under deploy/, kustomization.yaml aside."""
    out = []
    for folder, _, files in os.walk(DEPLOY):
        for name in files:
            if name.endswith((".yaml", ".yml")) and name != "kustomization.yaml":
                out.append(os.path.join(folder, name))
    return sorted(out)


def check_kustomization():
    """kustomization.yaml names only what exists, and installs every
    manifest of deploy/ but those APPLIED_SEPARATELY."""
    problems = []
    with open(os.path.join(DEPLOY, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    covered = set()
    for res in k.get("resources") or []:
        path = os.path.normpath(os.path.join(DEPLOY, res))
        if os.path.isdir(path):
            if not os.path.exists(os.path.join(path, "kustomization.yaml")):
                problems.append("kustomization.yaml: resource %s is a folder without a kustomization.yaml" % res)
            covered.update(p for p in manifest_files() if p.startswith(path + os.sep))
        elif os.path.isfile(path):
            covered.add(path)
        else:
            problems.append("kustomization.yaml: resource %s does not exist" % res)
    for gen in k.get("configMapGenerator") or []:
        for f in gen.get("files") or []:
            path = os.path.normpath(os.path.join(DEPLOY, f.split("=", 1)[-1]))
            if not os.path.isfile(path):
                problems.append("kustomization.yaml: %s: file %s does not exist" % (gen.get("name"), f))
            covered.add(path)
    for path in manifest_files():
        rel = os.path.relpath(path, DEPLOY)
        if path not in covered and rel not in APPLIED_SEPARATELY:
            problems.append(
                "deploy/%s is neither installed by kustomization.yaml nor in APPLIED_SEPARATELY "
                "(tools/validate_manifests.py)" % rel
            )
    return problems


def validate_rendered(paths):
    """The objects of each rendered file, as deploy/'s are validated."""
    counts = {"builtin": 0, "crd": 0}
    problems = []
    for path in paths:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        if not docs:
            problems.append("%s: no object rendered" % path)
        problems += validate_documents(docs, path, counts)
    for p in problems:
        print("ERROR", p)
    print(
        "rendered: %d files; %d objects of built-in kinds validated against Kubernetes %s (strict), "
        "%d of CRD-based kinds checked for required fields; %d problems"
        % (len(paths), counts["builtin"], KUBERNETES_VERSION, counts["crd"], len(problems))
    )
    return 1 if problems else 0


def main():
    if sys.argv[1:2] == ["--rendered"]:
        return validate_rendered(sys.argv[2:])
    counts = {"builtin": 0, "crd": 0}
    problems = check_kustomization()
    files = manifest_files()
    for path in files:
        rel = os.path.relpath(path, ROOT)
        try:
            with open(path) as f:
                docs = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            problems.append("%s: %s" % (rel, e))
            continue
        problems += validate_documents(docs, rel, counts)
    built = ""
    kubectl = shutil.which("kubectl")
    if kubectl:
        run = subprocess.run([kubectl, "kustomize", DEPLOY], capture_output=True, text=True)
        if run.returncode != 0:
            problems.append("kubectl kustomize deploy: " + run.stderr.strip())
        else:
            docs = [d for d in yaml.safe_load_all(run.stdout) if d is not None]
            problems += validate_documents(docs, "kubectl kustomize deploy", counts)
            built = ", and the %d objects `kubectl kustomize deploy` builds" % len(docs)
    else:
        built = " (kubectl not found: the kustomize build was not checked)"
    for p in problems:
        print("ERROR", p)
    print(
        "manifests: %d files; %d objects of built-in kinds validated against Kubernetes %s (strict), "
        "%d of CRD-based kinds checked for required fields%s; %d problems"
        % (len(files), counts["builtin"], KUBERNETES_VERSION, counts["crd"], built, len(problems))
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
