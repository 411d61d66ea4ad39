#!/usr/bin/env bash
# Writes the fixture (its ten policies, bindings, resources and reviews) and
# N more policies, a binding each, that match only example.com/v1
# widgets<i> (CREATE, UPDATE) into DIR: the fixture's review still matches
# the same ten policies, and the N others are loaded for nothing.
#   bench/webhook/non-matching-policies.sh DIR N [files|bundle]
# files (default): one file per policy and per binding; bundle: all N
# policies in DIR/policies/generated.yaml and their bindings in
# DIR/bindings/generated.yaml, multi-document YAML.
set -euo pipefail
out=${1:?usage: non-matching-policies.sh DIR N [files|bundle]}
count=${2:?usage: non-matching-policies.sh DIR N [files|bundle]}
layout=${3:-files}
case "$layout" in files|bundle) ;; *) echo "layout must be files or bundle, not $layout" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"
mkdir -p "$out/policies" "$out/bindings"
cp -r "$here/policies/." "$out/policies/"
cp -r "$here/bindings/." "$out/bindings/"
cp -r "$here/resources" "$out/resources"
cp "$here"/*.json "$out/"

# Templates filled by parameter expansion (no process per document): @N@
# is the number.
policy='apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: widgets-@N@
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["example.com"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["widgets@N@"]
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {\"widget\": \"@N@\"}}}"
'
binding='apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: widgets-@N@
spec:
  policyName: widgets-@N@
'

if [ "$layout" = bundle ]; then
  for ((i = 1; i <= count; i++)); do printf -- '---\n%s' "${policy//@N@/$i}"; done > "$out/policies/generated.yaml"
  for ((i = 1; i <= count; i++)); do printf -- '---\n%s' "${binding//@N@/$i}"; done > "$out/bindings/generated.yaml"
else
  for ((i = 1; i <= count; i++)); do
    printf -- '%s' "${policy//@N@/$i}" > "$out/policies/widgets-$i.yaml"
    printf -- '%s' "${binding//@N@/$i}" > "$out/bindings/widgets-$i.yaml"
  done
fi
echo "$out: the fixture's 10 policies and $count more for widgets ($layout)"
