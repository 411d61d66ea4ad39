#!/usr/bin/env python3
"""Creates every policy and binding of a folder (as non-matching-policies.sh
writes it, one file per document or bundles) in a kube-apiserver, for
timing `kmutate serve --source api` with thousands loaded. ENV is the `env`
file kube-apiserver.sh writes (KAS_URL, KAS_TOKEN, KAS_CA). Documents go as
JSON over several connections at once: kubectl, a process per call, takes
minutes for 20,000. Needs PyYAML to read the folder.

  bench/webhook/api-policies.py ENV DIR [--threads 8]
"""
import argparse
import http.client
import json
import pathlib
import queue
import ssl
import sys
import threading
import urllib.parse

try:
    import yaml
except ImportError:
    sys.exit("api-policies.py needs PyYAML (pip install pyyaml)")

PATHS = {
    "MutatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
}


def read_env(path):
    env = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.removeprefix("export ").strip()] = value.strip().strip('"').strip("'")
    return env


def documents(folder):
    for sub in ("policies", "bindings"):
        for path in sorted((folder / sub).rglob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") in PATHS:
                    yield doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("env", type=pathlib.Path)
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    env = read_env(args.env)
    url = urllib.parse.urlsplit(env["KAS_URL"])
    context = ssl.create_default_context(cafile=env["KAS_CA"])
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {env['KAS_TOKEN']}"}
    work = queue.Queue()
    count = 0
    for doc in documents(args.dir):
        doc["apiVersion"] = "admissionregistration.k8s.io/v1"
        work.put(doc)
        count += 1
    failures = []

    def sender():
        conn = http.client.HTTPSConnection(url.hostname, url.port, context=context)
        while True:
            try:
                doc = work.get_nowait()
            except queue.Empty:
                return
            conn.request("POST", PATHS[doc["kind"]], json.dumps(doc), headers)
            response = conn.getresponse()
            body = response.read()
            if response.status not in (200, 201, 409):
                failures.append(f"{doc['metadata']['name']}: {response.status} {body[:200]!r}")

    threads = [threading.Thread(target=sender) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures[:10]:
        print(f, file=sys.stderr)
    print(f"{count - len(failures)} of {count} documents created")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
