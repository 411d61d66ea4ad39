#!/usr/bin/env bash
# The `kmutate apply` stream benchmark (issue 48): N objects (default
# 10,000: Deployments, Pods, Services and ConfigMaps over 20 Namespaces)
# through the 15 library policies, -o yaml to a file; RUNS runs (default 5)
# of a release build, each timed by GNU time: wall time, CPU time (user +
# system, so CPU/wall tells how many cores worked) and peak memory.
#
# Usage: bench/apply/run.sh [N] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-10000}"
runs="${2:-5}"
work="${CARGO_TARGET_DIR:-target}/bench-apply"
mkdir -p "$work"
cargo build --release --quiet
python3 bench/apply/generate.py "$n" > "$work/stream.yaml"
echo "input: $n objects + 20 Namespaces, $(wc -c < "$work/stream.yaml") bytes"
for run in $(seq "$runs"); do
  /usr/bin/time -f "%e %U %S %M" -o "$work/time.txt" \
    "${CARGO_TARGET_DIR:-target}/release/kmutate" apply --policies policies --bindings bindings \
      -f "$work/stream.yaml" -o yaml > "$work/out.yaml" 2> "$work/stderr.txt"
  read -r wall user sys rss < "$work/time.txt"
  echo "run $run: wall ${wall} s, cpu $(echo "$user + $sys" | bc) s, peak RSS $((rss / 1024)) MiB; $(tail -1 "$work/stderr.txt")"
done
