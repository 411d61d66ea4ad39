#!/usr/bin/env bash
# The `kmutate scan` benchmark (issue 45): a real kube-apiserver v1.36.2 from
# ../shared/upstream holding PODS Pods (default 10,000) and DEPLOYMENTS
# Deployments (default 1,000) across NAMESPACES Namespaces (default 50), none
# of them mutated (no policy is in the apiserver); then RUNS scans (default
# 3) of the whole cluster with the 15 library policies from the files
# (`kmutate scan -o json`, release build), each timed by GNU time (wall, CPU,
# peak resident memory) with the CPU the apiserver and etcd spent meanwhile
# (from /proc), and scans of parts of it for the memory's dependence on
# the number of objects.
#
# Usage: bench/scan/run.sh   (PODS, DEPLOYMENTS, NAMESPACES, RUNS from the environment)
set -euo pipefail
cd "$(dirname "$0")/../.."
pods="${PODS:-10000}"
deployments="${DEPLOYMENTS:-1000}"
namespaces="${NAMESPACES:-50}"
runs="${RUNS:-3}"
target="${CARGO_TARGET_DIR:-target}"
work="$target/bench-scan"
kas="$work/kas"
script=../shared/upstream/kube-apiserver.sh
cargo build --release --quiet
kmutate="$(pwd)/$target/release/kmutate"

bash "$script" stop "$kas" 2>/dev/null || true
rm -rf "$work"
mkdir -p "$work"
trap 'bash "$script" stop "$kas"' EXIT
bash "$script" start "$kas" > "$work/kas.log" 2>&1
export KUBECONFIG="$kas/kubeconfig"

python3 bench/scan/generate.py "$work/objects" "$pods" "$deployments" "$namespaces"
start=$(date +%s)
kubectl create namespace kmutate-system > /dev/null
kubectl create -f examples/params > /dev/null
ls "$work"/objects/*.json | xargs -P 4 -n 1 kubectl create -o name -f > /dev/null
echo "cluster: $pods Pods, $deployments Deployments in $namespaces Namespaces, created in $(( $(date +%s) - start )) s"

# CPU seconds (user + system) of a process so far.
cpu_of() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
kas_pid=$(cat "$kas/kube-apiserver.pid")
etcd_pid=$(cat "$kas/etcd.pid")

scan_once() {
  local label="$1"; shift
  local kas_before etcd_before
  kas_before=$(cpu_of "$kas_pid"); etcd_before=$(cpu_of "$etcd_pid")
  /usr/bin/time -f "%e %U %S %M" -o "$work/time.txt" \
    "$kmutate" scan --policies policies --bindings bindings -o json "$@" \
      > "$work/report.json" 2> "$work/stderr.txt" || true
  read -r wall user sys rss < "$work/time.txt"
  local kas_cpu etcd_cpu summary
  kas_cpu=$(echo "$(cpu_of "$kas_pid") - $kas_before" | bc)
  etcd_cpu=$(echo "$(cpu_of "$etcd_pid") - $etcd_before" | bc)
  summary=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["summary"]; print(", ".join(f"{k} {v}" for k, v in s.items() if not isinstance(v, (list, dict))))' "$work/report.json")
  echo "$label: wall ${wall} s, kmutate CPU $(echo "$user + $sys" | bc) s, peak RSS $((rss / 1024)) MiB; apiserver CPU ${kas_cpu} s, etcd CPU ${etcd_cpu} s; $summary"
}

for run in $(seq "$runs"); do
  scan_once "run $run (whole cluster)"
done
# Memory against the number of objects: a Namespace (220), a tenth of
# each (1,100), half of each (5,500), the Deployments (1,000), the Pods
# (10,000).
scan_once "one Namespace (-n scan-000)" -n scan-000
scan_once "a tenth (-l shard=0)" -l shard=0
scan_once "half (-l 'shard in (0,1,2,3,4)')" -l 'shard in (0,1,2,3,4)'
scan_once "Deployments only" --resource deployments.apps
scan_once "Pods only" --resource pods
