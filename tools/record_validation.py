#!/usr/bin/env python3
"""Records what kube-apiserver answers to each object of the validation
corpus (tests/validation/corpus.yaml), created (server-side dry run) as an
admissionregistration.k8s.io/v1 object, into tests/validation/recorded.json.

Usage: tools/record_validation.py ENV_FILE [--kmutate-dev]
ENV_FILE is the `env` file `../shared/upstream/kube-apiserver.sh start DIR`
writes (KAS_URL, KAS_TOKEN, KAS_CA). With --kmutate-dev the objects are
created as kmutate.dev/v1 instead and the answers printed, not recorded (to
compare by eye; tests/validation_api.rs is the check).
"""
import copy
import json
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests/validation/corpus.yaml"
RECORDED = ROOT / "tests/validation/recorded.json"


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def build(corpus, entry):
    obj = copy.deepcopy(corpus["bases"][entry["kind"]])
    obj["metadata"] = entry.get("metadata", {"name": entry["name"]})
    if "spec" in entry:
        obj["spec"] = merge_patch(obj["spec"], entry["spec"])
    return obj


def entries(corpus):
    """(verdict, name, kind, object) of every corpus entry, then of every
    document of the `valid_files` folders (named by their path)."""
    for verdict in ("invalid", "valid"):
        for entry in corpus[verdict]:
            yield verdict, entry["name"], entry["kind"], build(corpus, entry)
    for folder in corpus.get("valid_files", []):
        for path in sorted((ROOT / folder).glob("*.yaml")):
            for obj in yaml.safe_load_all(path.read_text()):
                kind = {"MutatingAdmissionPolicy": "policy", "MutatingAdmissionPolicyBinding": "binding"}[obj["kind"]]
                yield "valid", f"{folder}/{path.name}", kind, obj


def main():
    env = {}
    for line in Path(sys.argv[1]).read_text().splitlines():
        if "=" in line:
            k, v = line.removeprefix("export ").split("=", 1)
            env[k] = v.strip("'\"")
    kmutate_dev = "--kmutate-dev" in sys.argv
    ctx = ssl.create_default_context(cafile=env["KAS_CA"])
    corpus = yaml.safe_load(CORPUS.read_text())
    recorded = {}
    for verdict, name, kind, obj in entries(corpus):
        plural = {"policy": "mutatingadmissionpolicies", "binding": "mutatingadmissionpolicybindings"}[kind]
        group = "admissionregistration.k8s.io"
        if kmutate_dev:
            group = "kmutate.dev"
            obj["apiVersion"] = "kmutate.dev/v1"
        url = f"{env['KAS_URL']}/apis/{group}/v1/{plural}?dryRun=All"
        req = urllib.request.Request(url, data=json.dumps(obj).encode(), method="POST", headers={
            "Authorization": f"Bearer {env['KAS_TOKEN']}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=ctx) as r:
                code, message = r.status, ""
        except urllib.error.HTTPError as e:
            code, message = e.code, json.loads(e.read()).get("message", "")
        recorded[name] = {"code": code, "message": message}
        mark = "ok " if (code == 201) == (verdict == "valid") else "BAD"
        print(f"{mark} {verdict:7} {name}: {code} {message}")
    if not kmutate_dev:
        RECORDED.write_text(json.dumps(recorded, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
