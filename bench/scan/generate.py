#!/usr/bin/env python3
"""The scan benchmark's cluster: one JSON List per Namespace, written to
OUT/NNN.json: the Namespace (labelled as the library policies read it), its
`default` ServiceAccount (no controller-manager makes it), and PODS /
NAMESPACES Pods and DEPLOYMENTS / NAMESPACES Deployments shaped as
examples/pod.yaml and examples/deployment.yaml, labelled `shard` 0 to 9 in
turn (a selector takes a tenth, a half, ...).

Usage: generate.py OUT PODS DEPLOYMENTS NAMESPACES
"""
import json
import os
import sys


def namespace(name):
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {
                "team": name, "example.com/cost-center": "cc-" + name}}}


def pod(ns, i):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "debug-%d" % i, "namespace": ns,
                         "labels": {"app": "debug", "shard": str(i % 10)}},
            "spec": {"containers": [
                {"name": "shell", "image": "busybox"},
                {"name": "app", "image": "registry.example.com/team/app:1.2.3"}]}}


def deployment(ns, i):
    labels = {"app": "web-%d" % i}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web-%d" % i, "namespace": ns, "labels": {"shard": str(i % 10)}},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}}}


def main():
    out, pods, deployments, namespaces = sys.argv[1], *map(int, sys.argv[2:5])
    os.makedirs(out, exist_ok=True)
    for n in range(namespaces):
        ns = "scan-%03d" % n
        items = [namespace(ns), {"apiVersion": "v1", "kind": "ServiceAccount",
                                 "metadata": {"name": "default", "namespace": ns}}]
        items += [pod(ns, i) for i in range(n, pods, namespaces)]
        items += [deployment(ns, i) for i in range(n, deployments, namespaces)]
        with open(os.path.join(out, "%03d.json" % n), "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)


main()
