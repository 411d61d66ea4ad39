#!/usr/bin/env python3
"""kmutate beside kube-apiserver's built-in MutatingAdmissionPolicy plugin,
measured inside one kube-apiserver v1.36.2 (issue 43, item 1).

One apiserver from ../shared/upstream; a namespace labelled as the library
reads it (`team`, `example.com/cost-center`) with its ServiceAccount; the
library's params (examples/params). Four phases of N sequential server-side
dry-run creates of examples/pod.yaml on one keep-alive connection (after W
warm-up creates), each timed by the client:

  baseline   no policy, no webhook
  builtin    the 15 library policies and bindings created as v1 objects, run
             by the apiserver's own plugin
  kmutate    the same policies served by `kmutate serve --source both`
             (policies from the files, Namespaces from the API), registered
             as a MutatingWebhookConfiguration for Pod creates
  empty      the same webhook serving no policy

Both sides export apiserver_mutating_admission_policy_check_duration_seconds;
the delta of its _sum per policy over a phase, divided by the Pods created,
is each side's evaluation time per Pod. Printed: the per-policy table with the
ratio, the webhook's own time per call (kmutate_webhook_request_duration_seconds,
mean and histogram median), and the median latency each phase adds to a create
over the baseline.

Usage: bench/apiserver/side_by_side.py [--creates N] [--warmup W] [--kmutate BIN]
(a release build: cargo build --release)
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UPSTREAM = os.path.join(ROOT, "..", "shared", "upstream", "kube-apiserver.sh")
NAMESPACE = "bench"
METRIC = "apiserver_mutating_admission_policy_check_duration_seconds"


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Apiserver:
    """The apiserver: started in a fresh folder, stopped at the end."""

    def __init__(self, folder):
        self.folder = folder
        run("bash", UPSTREAM, "start", folder)
        env = {}
        with open(os.path.join(folder, "env")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.strip().split("=", 1)
                    env[k.replace("export ", "")] = v.strip("'\"")
        self.url = env["KAS_URL"]
        self.token = env["KAS_TOKEN"]
        self.kubeconfig = os.path.join(folder, "kubeconfig")
        host_port = self.url.split("//", 1)[1]
        self.host, self.port = host_port.rsplit(":", 1)
        self.context = ssl.create_default_context(cafile=env["KAS_CA"])

    def stop(self):
        subprocess.run(["bash", UPSTREAM, "stop", self.folder], capture_output=True)

    def kubectl(self, *args, stdin=None):
        return run("kubectl", "--kubeconfig", self.kubeconfig, *args, input=stdin)

    def connection(self):
        return http.client.HTTPSConnection(self.host, int(self.port), context=self.context)

    def metrics(self):
        conn = self.connection()
        conn.request("GET", "/metrics", headers={"Authorization": "Bearer " + self.token})
        return conn.getresponse().read().decode()


def pod_body():
    """examples/pod.yaml in the bench namespace, as JSON."""
    with open(os.path.join(ROOT, "examples", "pod.yaml")) as f:
        pod = yaml.safe_load(f)
    pod["metadata"]["namespace"] = NAMESPACE
    return json.dumps(pod).encode()


def creates(kas, body, n):
    """n sequential dry-run creates on one connection: their latencies (s)
    and the last answer."""
    conn = kas.connection()
    path = "/api/v1/namespaces/%s/pods?dryRun=All" % NAMESPACE
    headers = {"Authorization": "Bearer " + kas.token, "Content-Type": "application/json"}
    times, answer = [], None
    for _ in range(n):
        start = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        times.append(time.perf_counter() - start)
        if response.status != 201:
            sys.exit("create answered %d: %s" % (response.status, data[:500]))
        answer = json.loads(data)
    return times, answer


def mutated(answer):
    return "team" in (answer["metadata"].get("labels") or {})


def wait_until(kas, body, want_mutated, what):
    for _ in range(300):
        _, answer = creates(kas, body, 1)
        if mutated(answer) == want_mutated:
            return
        time.sleep(0.1)
    sys.exit("timed out waiting for " + what)


def samples(text, name):
    """{labels: value} of the samples of metric `name`."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            labels = key[len(name):]
            out[labels] = float(value)
    return out


def per_policy(before, after):
    """Seconds of evaluation per policy between two scrapes."""
    totals = {}
    b = samples(before, METRIC + "_sum")
    for labels, value in samples(after, METRIC + "_sum").items():
        policy = labels.split('policy="', 1)[1].split('"', 1)[0] if 'policy="' in labels else labels
        totals[policy] = totals.get(policy, 0.0) + value - b.get(labels, 0.0)
    return totals


def histogram_median(before, after, name):
    """The median of a histogram's observations between two scrapes (the
    upper bound of the bucket holding it)."""
    b = samples(before, name + "_bucket")
    buckets = {}
    for labels, value in samples(after, name + "_bucket").items():
        le = labels.split('le="', 1)[1].split('"', 1)[0]
        bound = float("inf") if le == "+Inf" else float(le)
        buckets[bound] = buckets.get(bound, 0.0) + value - b.get(labels, 0.0)
    total = buckets.get(float("inf"), 0.0)
    for bound in sorted(buckets):
        if buckets[bound] >= total / 2:
            return bound
    return float("nan")


def measured(kas, body, args, scrape):
    creates(kas, body, args.warmup)
    before = scrape()
    times, _ = creates(kas, body, args.creates)
    return times, before, scrape()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--creates", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--kmutate", default=os.path.join(ROOT, "target", "release", "kmutate"))
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="kmutate-side-by-side-")
    kas = Apiserver(os.path.join(work, "kas"))
    server = None
    try:
        kas.kubectl("create", "namespace", NAMESPACE)
        kas.kubectl("label", "namespace", NAMESPACE, "team=shop", "example.com/cost-center=cc-1")
        kas.kubectl("create", "serviceaccount", "default", "-n", NAMESPACE)
        kas.kubectl("create", "namespace", "kmutate-system")
        kas.kubectl("create", "-f", os.path.join(ROOT, "examples", "params"))
        body = pod_body()

        baseline, _, _ = measured(kas, body, args, lambda: "")

        library = ["-f", os.path.join(ROOT, "policies"), "-f", os.path.join(ROOT, "bindings")]
        kas.kubectl("create", *library)
        wait_until(kas, body, True, "the built-in plugin to apply the library")
        builtin, b0, b1 = measured(kas, body, args, kas.metrics)
        builtin_policies = per_policy(b0, b1)
        kas.kubectl("delete", *library)
        wait_until(kas, body, False, "the built-in plugin to drop the library")

        port, metrics_port = free_port(), free_port()
        tls = os.path.join(work, "tls")
        empty = os.path.join(work, "empty")
        os.makedirs(empty)

        def serve(policies, bindings, resources):
            # The second server keeps the first one's certificate, which the
            # webhook configuration trusts.
            crt, key = os.path.join(tls, "tls.crt"), os.path.join(tls, "tls.key")
            certificate = (["--tls-cert", crt, "--tls-key", key] if os.path.exists(crt)
                           else ["--cert-dir", tls])
            return subprocess.Popen(
                [args.kmutate, "serve", "--source", "both",
                 "--policies", policies, "--bindings", bindings, "--resources", resources,
                 "--listen", "127.0.0.1:%d" % port, "--metrics-listen", "127.0.0.1:%d" % metrics_port,
                 *certificate],
                env=dict(os.environ, KUBECONFIG=kas.kubeconfig),
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "serve.log"), "a"))

        def kmutate_metrics():
            return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port).read().decode()

        def wait_ready():
            for _ in range(300):
                try:
                    kmutate_metrics()
                    if os.path.exists(os.path.join(tls, "ca.crt")):
                        return
                except OSError:
                    pass
                time.sleep(0.1)
            sys.exit("kmutate serve did not start (see %s)" % os.path.join(work, "serve.log"))

        server = serve(os.path.join(ROOT, "policies"), os.path.join(ROOT, "bindings"),
                       os.path.join(ROOT, "examples", "params"))
        wait_ready()
        with open(os.path.join(tls, "ca.crt"), "rb") as f:
            import base64
            ca = base64.b64encode(f.read()).decode()
        webhook = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kmutate"},
            "webhooks": [{"name": "mutate.kmutate.dev", "admissionReviewVersions": ["v1"],
                          "clientConfig": {"url": "https://127.0.0.1:%d/mutate" % port, "caBundle": ca},
                          "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                     "resources": ["pods"]}],
                          "failurePolicy": "Fail", "sideEffects": "None", "reinvocationPolicy": "IfNeeded",
                          "timeoutSeconds": 5}]}
        kas.kubectl("create", "-f", "-", stdin=json.dumps(webhook))
        wait_until(kas, body, True, "kmutate's webhook to apply the library")
        served, k0, k1 = measured(kas, body, args, kmutate_metrics)
        kmutate_policies = per_policy(k0, k1)
        call = "kmutate_webhook_request_duration_seconds"
        calls = sum(samples(k1, call + "_count").values()) - sum(samples(k0, call + "_count").values())
        call_sum = sum(samples(k1, call + "_sum").values()) - sum(samples(k0, call + "_sum").values())
        call_median = histogram_median(k0, k1, call)
        server.terminate()
        server.wait()

        server = serve(empty, empty, empty)
        wait_ready()
        wait_until(kas, body, False, "kmutate with no policy")
        no_policy, _, _ = measured(kas, body, args, lambda: "")
    finally:
        if server:
            server.terminate()
            server.wait()
        kas.stop()
        shutil.rmtree(work, ignore_errors=True)

    n = args.creates
    print("%d dry-run creates of examples/pod.yaml per phase (%d warm-up), one connection\n" % (n, args.warmup))
    print("| policy | upstream µs per Pod | kmutate µs per Pod | ratio |")
    print("| --- | ---: | ---: | ---: |")
    total_up = total_km = 0.0
    for policy in sorted(set(builtin_policies) | set(kmutate_policies),
                         key=lambda p: -builtin_policies.get(p, 0.0)):
        up, km = builtin_policies.get(policy, 0.0) / n * 1e6, kmutate_policies.get(policy, 0.0) / n * 1e6
        total_up, total_km = total_up + up, total_km + km
        print("| %s | %.1f | %.1f | %s |" % (policy, up, km, "%.3f" % (km / up) if up else "-"))
    print("| **total** | **%.1f** | **%.1f** | **%.3f** |\n" % (total_up, total_km, total_km / total_up))
    base = statistics.median(baseline)
    added = {name: statistics.median(t) - base for name, t in
             (("builtin", builtin), ("kmutate", served), ("kmutate, no policy", no_policy))}
    print("median create latency without policies: %.2f ms" % (base * 1e3))
    for name, a in added.items():
        print("added by %s: %.2f ms" % (name, a * 1e3))
    print("added latency ratio kmutate / builtin: %.2f" % (added["kmutate"] / added["builtin"]))
    print("webhook's own time per call: mean %.3f ms, median <= %.3f ms (histogram bucket), %d calls"
          % (call_sum / calls * 1e3, call_median * 1e3, calls))


if __name__ == "__main__":
    main()
