#!/usr/bin/env bash
# Serves the fixture, drives it with `kmutate loadtest`, and prints the
# loadtest's figures with the CPU time a request took over the measured
# window: the server's own (user and system, from /proc/PID/stat) and the
# whole machine's (user, system, softirq and idle, from /proc/stat), in ms.
#
# On a machine shared with the generator, throughput is the machine's CPU
# divided by what a request costs; these figures tell which part moved
# between two runs: the server's instructions, or the machine's speed.
#
# Usage: bench/webhook/cpu-per-request.sh KMUTATE [LOADTEST ARGS...]
#   e.g. bench/webhook/cpu-per-request.sh target/release/kmutate --connections 4 --duration 5s
# Environment: REVIEW (default bench/webhook/review.json), POLICIES,
# BINDINGS, RESOURCES (default the fixture's), WARMUP (seconds, default 2).
# Linux only (/proc). Run from the repository's root.
set -euo pipefail

bin=${1:?usage: $0 KMUTATE [LOADTEST ARGS...]}
shift
fixture=bench/webhook
review=${REVIEW:-$fixture/review.json}
warmup=${WARMUP:-2}
tls=$(mktemp -d)
out=$(mktemp)
port=$((20000 + RANDOM % 20000))

"$bin" serve --policies "${POLICIES:-$fixture/policies}" --bindings "${BINDINGS:-$fixture/bindings}" \
    --resources "${RESOURCES:-$fixture/resources}" --listen "127.0.0.1:$port" \
    --metrics-listen "127.0.0.1:$((port + 1))" --cert-dir "$tls" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tls" "$out"' EXIT
for _ in $(seq 200); do
    [ -s "$tls/ca.crt" ] && curl -skf "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.05
done
curl -skf "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 ||
    { echo "the server did not become ready on 127.0.0.1:$port" >&2; exit 1; }

# Fields 14 and 15 of /proc/PID/stat: user and system ticks.
task_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
# The first line of /proc/stat: user nice system idle iowait irq softirq ...
machine_ticks() { awk 'NR == 1 {print $2 + $3, $4, $8, $5}' /proc/stat; }

"$bin" loadtest --url "https://127.0.0.1:$port/mutate" --ca "$tls/ca.crt" --review "$review" \
    --warmup "${warmup}s" "$@" >"$out" 2>&1 &
generator=$!
sleep "$warmup.05"
read -r su0 ss0 < <(task_ticks $server)
read -r mu0 ms0 mq0 mi0 < <(machine_ticks)
if ! wait $generator; then
    cat "$out" >&2
    exit 1
fi
read -r su1 ss1 < <(task_ticks $server)
read -r mu1 ms1 mq1 mi1 < <(machine_ticks)

cat "$out"
requests=$(grep -oP 'requests:\s+\K[0-9]+' "$out" || echo 0)
[ "$requests" -gt 0 ] || { echo "no request was answered" >&2; exit 1; }
tick_ms=$(awk "BEGIN {print 1000 / $(getconf CLK_TCK)}")
per() { awk "BEGIN {printf \"%.4f\", ($1) * $tick_ms / $requests}"; }
echo "server CPU:  $(per "$su1 - $su0") ms user, $(per "$ss1 - $ss0") ms system a request"
echo "machine CPU: $(per "$mu1 - $mu0") ms user, $(per "$ms1 - $ms0") ms system, $(per "$mq1 - $mq0") ms softirq, $(per "$mi1 - $mi0") ms idle a request"
