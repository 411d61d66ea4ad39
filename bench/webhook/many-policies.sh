#!/usr/bin/env bash
# Writes N copies (default 100) of the ten fixture policies and their
# bindings, renamed, into DIR: 10 x N policies for memory measurements.
#   bench/webhook/many-policies.sh /tmp/kmutate-1000 100
set -euo pipefail
out=${1:?usage: many-policies.sh DIR [COPIES]}
copies=${2:-100}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/policies" "$out/bindings"
for i in $(seq -w 1 "$copies"); do
  for f in "$here"/policies/*.yaml; do
    name=$(basename "$f" .yaml)
    sed "s/^  name: $name\$/  name: $name-$i/" "$f" > "$out/policies/$name-$i.yaml"
  done
  for f in "$here"/bindings/*.yaml; do
    name=$(basename "$f" .yaml)
    sed -e "s/^  name: $name\$/  name: $name-$i/" -e "s/policyName: $name\$/policyName: $name-$i/" \
      "$f" > "$out/bindings/$name-$i.yaml"
  done
done
echo "$out: $(ls "$out/policies" | wc -l) policies, $(ls "$out/bindings" | wc -l) bindings"
