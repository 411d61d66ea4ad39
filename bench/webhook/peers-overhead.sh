#!/usr/bin/env bash
# The webhook's own time per call with and without --peers (issue 42):
# serves the policy library (policies/, bindings/, examples/params and
# examples/namespace.yaml) and drives it with bench/webhook/examples-pod-review.json
# on one connection, one request at a time, three ways:
#   KMUTATE           alone, without --peers;
#   KMUTATE --peers   with a second replica it sends each answer to;
#   OLD               (optional) another build alone, e.g. main before.
# Prints each run's loadtest figures.
#
# Usage: bench/webhook/peers-overhead.sh KMUTATE [OLD] [LOADTEST ARGS...]
#   e.g. bench/webhook/peers-overhead.sh target/release/kmutate /tmp/old/kmutate --duration 10s
set -euo pipefail

new=${1:?usage: $0 KMUTATE [OLD] [LOADTEST ARGS...]}
shift
old=
if [ $# -gt 0 ] && [ -x "$1" ]; then
    old=$1
    shift
fi
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/resources"
cp examples/params/*.yaml examples/namespace.yaml "$work/resources/"
port() { echo $((20000 + RANDOM % 20000)); }

# One certificate for every replica (a throwaway server generates it).
gen=$(port)
"$new" serve --policies policies --bindings bindings --listen "127.0.0.1:$gen" \
    --metrics-listen "127.0.0.1:$((gen + 1))" --cert-dir "$work/tls" >/dev/null 2>&1 &
g=$!
for _ in $(seq 200); do [ -s "$work/tls/ca.crt" ] && [ -s "$work/tls/tls.key" ] && break; sleep 0.05; done
sleep 0.2
kill $g; wait $g 2>/dev/null || true

serve() { # BIN PORT [ARGS...]
    local bin=$1 p=$2
    shift 2
    "$bin" serve --policies policies --bindings bindings --resources "$work/resources" \
        --listen "127.0.0.1:$p" --metrics-listen "127.0.0.1:$((p + 1))" \
        --tls-cert "$work/tls/tls.crt" --tls-key "$work/tls/tls.key" "$@" >/dev/null 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do
        curl -skf "https://127.0.0.1:$p/readyz" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "the server on $p did not become ready" >&2
    exit 1
}

drive() { # LABEL PORT [LOADTEST ARGS...]
    local label=$1 p=$2
    shift 2
    echo "== $label"
    "$new" loadtest --url "https://127.0.0.1:$p/mutate" --ca "$work/tls/ca.crt" \
        --review bench/webhook/examples-pod-review.json --connections 1 --warmup 2s "$@"
}

a=$(port)
serve "$new" "$a"
drive "$new, no --peers" "$a" "$@"

b=$(port)
c=$(port)
serve "$new" "$c" --peers "127.0.0.1:$b"
serve "$new" "$b" --peers "127.0.0.1:$c"
drive "$new, --peers (one peer)" "$b" "$@"

if [ -n "$old" ]; then
    o=$(port)
    serve "$old" "$o"
    drive "$old" "$o" "$@"
fi
