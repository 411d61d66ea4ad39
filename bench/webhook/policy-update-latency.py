#!/usr/bin/env python3
"""Time from a policy edit to the webhook answering with it.

Each round rewrites the label value of the fixture's p01-managed-by-label
policy (a copy of bench/webhook under DIR, as non-matching-policies.sh
writes it) and sends the fixture's review to a running `kmutate serve` until
the answer's patch carries the new value; it prints each round's time from
the write to that answer, then the median and the maximum. With `--api
ENV` the policy is changed in the Kubernetes API instead (a merge patch of
the admissionregistration.k8s.io/v1 object, timed from sending it), for a
server run with `--source api`; ENV is the `env` file kube-apiserver.sh
writes (KAS_URL, KAS_TOKEN, KAS_CA). Standard library only.

  bench/webhook/policy-update-latency.py DIR --ca CA [--url URL] [--rounds N] [--api ENV]
"""
import argparse
import base64
import http.client
import json
import pathlib
import ssl
import statistics
import sys
import time
import urllib.parse

POLICY = "policies/p01-managed-by-label.yaml"
POLICY_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p01-managed-by-label"
EXPRESSION = 'Object{metadata: Object.metadata{labels: {"app.kubernetes.io/managed-by": "%s"}}}'
VALUE = '"app.kubernetes.io/managed-by\\": \\"'


def replace(path, text):
    """Writes `path` whole, by renaming a scratch file over it (the server
    never reads half a file); returns the time of the rename."""
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    start = time.perf_counter()
    scratch.rename(path)
    return start


def patch_policy(env_file, expression):
    """Sets the policy's mutation to `expression` through the apiserver;
    returns the time the request was sent."""
    env = dict(
        line.split("=", 1)
        for line in env_file.read_text().split("\n")
        if "=" in line and not line.startswith("#")
    )
    env = {k.removeprefix("export "): v.strip().strip('"').strip("'") for k, v in env.items()}
    url = urllib.parse.urlsplit(env["KAS_URL"])
    context = ssl.create_default_context(cafile=env["KAS_CA"])
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=context)
    body = json.dumps({"spec": {"mutations": [{"patchType": "ApplyConfiguration",
                                                "applyConfiguration": {"expression": expression}}]}})
    start = time.perf_counter()
    conn.request("PATCH", POLICY_PATH, body, {
        "Content-Type": "application/merge-patch+json",
        "Authorization": f"Bearer {env['KAS_TOKEN']}",
    })
    response = conn.getresponse()
    if response.status != 200:
        sys.exit(f"PATCH {POLICY_PATH}: {response.status} {response.read()[:300]!r}")
    response.read()
    return start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--url", default="https://127.0.0.1:8443/mutate")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a round may take")
    ap.add_argument("--api", type=pathlib.Path, help="change the policy through this apiserver")
    args = ap.parse_args()

    policy = args.dir / POLICY
    template = policy.read_text()
    if VALUE not in template:
        sys.exit(f"{policy}: no managed-by label value to change")
    review = (args.dir / "review.json").read_bytes()
    url = urllib.parse.urlsplit(args.url)
    context = ssl.create_default_context(cafile=args.ca)
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=context)

    def answer_has(value):
        conn.request("POST", url.path, review, {"Content-Type": "application/json"})
        body = json.loads(conn.getresponse().read())
        patch = body.get("response", {}).get("patch")
        return patch is not None and f'"{value}"' in base64.b64decode(patch).decode()

    times = []
    try:
        for round_number in range(1, args.rounds + 1):
            value = f"kmutate-{round_number}-{time.time_ns()}"
            if args.api:
                start = patch_policy(args.api, EXPRESSION % value)
            else:
                start = replace(policy, template.replace(VALUE + "kmutate", VALUE + value, 1))
            while not answer_has(value):
                if time.perf_counter() - start > args.timeout:
                    sys.exit(f"round {round_number}: not served within {args.timeout} s")
            elapsed = (time.perf_counter() - start) * 1000
            times.append(elapsed)
            print(f"round {round_number}: {elapsed:.1f} ms", flush=True)
            time.sleep(0.5)
    finally:
        if args.api:
            patch_policy(args.api, EXPRESSION % "kmutate")
        else:
            replace(policy, template)
    print(f"median {statistics.median(times):.1f} ms, max {max(times):.1f} ms")


if __name__ == "__main__":
    main()
