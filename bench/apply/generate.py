#!/usr/bin/env python3
"""Writes the manifest stream of the `kmutate apply` benchmark (issue 48):
20 Namespaces, then N objects (default 10,000) in turn Deployments, Pods,
Services and ConfigMaps spread over them, as one YAML stream on stdout.
Deterministic: the same N gives the same bytes."""
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
out = sys.stdout
for i in range(20):
    out.write(f"""---
apiVersion: v1
kind: Namespace
metadata:
  name: ns-{i:02d}
  labels:
    team: team-{i % 5}
    example.com/cost-center: cc-{i % 3}
""")
for i in range(n):
    ns = f"ns-{i % 20:02d}"
    kind = i % 4
    if kind == 0:
        out.write(f"""---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-{i}
  namespace: {ns}
  labels: {{app: web-{i}}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web-{i}}}
  template:
    metadata:
      labels: {{app: web-{i}}}
    spec:
      containers:
      - name: app
        image: registry.example.com/web:1.{i % 7}
        ports: [{{containerPort: 8080}}]
      - name: sidecar
        image: registry.example.com/proxy:latest
""")
    elif kind == 1:
        out.write(f"""---
apiVersion: v1
kind: Pod
metadata:
  name: job-{i}
  namespace: {ns}
  labels: {{app: job-{i}}}
spec:
  containers:
  - name: work
    image: busybox:latest
    command: [sh, -c, "echo {i}"]
    resources:
      limits: {{cpu: 500m, memory: 256Mi}}
""")
    elif kind == 2:
        out.write(f"""---
apiVersion: v1
kind: Service
metadata:
  name: svc-{i}
  namespace: {ns}
spec:
  selector: {{app: web-{i - 2}}}
  ports:
  - {{port: 80, targetPort: 8080}}
""")
    else:
        out.write(f"""---
# settings of {i}
apiVersion: v1
kind: ConfigMap
metadata:
  name: cfg-{i}
  namespace: {ns}
data:
  key: value-{i}
  other: "{i * 7}"
""")
