#!/usr/bin/env python3
"""Writes conformance/translation/katalog-go-templates.yaml: one case per Go
template construct, a Katalog override of spec.out with the template, its
expected value what Go's text/template renders on the same custom resource
(main.go, run with the machine's Go), or a denial where Go's execution fails.

Usage: python3 tools/gotemplate/cases.py   (from the repository's root)
"""
import json
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "conformance", "translation", "katalog-go-templates.yaml")

OBJECT = {
    "apiVersion": "example.com/v1",
    "kind": "AppRequest",
    "metadata": {"name": "web", "namespace": "team-a",
                 "labels": {"app.kubernetes.io/name": "shop"}},
    "spec": {"team": "payments", "flag": True, "off": False, "empty": "",
             "n": 3, "f": 2.5, "big": 1000000, "tiny": 0.00001,
             "items": ["a", "b"], "mixed": [1, "b", 2.5, True],
             "ports": {"https": 443, "admin": 9000, "http": 80},
             "markup": "<b>Tom & \"Jerry's\"</b>"},
}

# (name, description, template)
CASES = [
    ("printf-string", "printf %s of a string field", '{{ printf "%s-x" .metadata.name }}'),
    ("printf-verbs", "printf %v, %d, %t and %s of fields of their types, and %%",
     '{{ printf "%v|%d|%t|%s|100%%" .spec.n .spec.n .spec.flag .spec.team }}'),
    ("printf-wrong-type", "printf of operands of another type: Go's %!verb(type=value)",
     '{{ printf "%d and %s and %t" .spec.team .spec.n .spec.f }}'),
    ("printf-missing-operand", "printf %s of a missing field: %!s(<nil>)", '{{ printf "%s" .spec.missing }}'),
    ("pipeline-into-printf", "a pipeline's value is the last argument of the next command",
     '{{ .metadata.name | printf "%s-svc" }}'),
    ("if-else", "if/else on a true boolean", "{{ if .spec.flag }}on{{ else }}off{{ end }}"),
    ("else-if-chain", "false and empty are false; else if chains; the last else renders",
     "{{ if .spec.off }}a{{ else if .spec.empty }}b{{ else if .spec.items }}c{{ else }}d{{ end }}"),
    ("if-missing-field", "a missing field is false", "{{ if .spec.missing }}set{{ else }}unset{{ end }}"),
    ("if-zero", "0 is false, other numbers true", "{{ if .spec.n }}nonzero{{ end }}{{ if 0 }}zero{{ end }}"),
    ("with-value", "with rebinds dot to the value", "{{ with .spec.team }}team-{{ . }}{{ else }}none{{ end }}"),
    ("with-missing", "with on a missing field renders its else", "{{ with .spec.missing }}x{{ else }}none{{ end }}"),
    ("with-map-field", "fields under with are relative to its value",
     '{{ with .metadata }}{{ .name }}/{{ index .labels "app.kubernetes.io/name" }}{{ end }}'),
    ("index-map-key", "index of a key with dots", '{{ index .metadata.labels "app.kubernetes.io/name" }}'),
    ("index-missing-key", "index of a missing key renders <no value>", '{{ index .metadata.labels "nope" }}'),
    ("index-list", "index of a list element", "{{ index .spec.items 1 }}"),
    ("len-list", "len of a list", "{{ len .spec.items }}"),
    ("comparisons", "gt, ne, and of comparisons",
     '{{ if and (gt .spec.n 2) (ne .spec.team "ops") }}big{{ else }}small{{ end }}'),
    ("eq-several", "eq with several operands: any equal", '{{ if eq .spec.team "ops" "payments" }}known{{ end }}'),
    ("le-ge-strings", "strings compare in byte order", '{{ if le "a" .spec.team }}le{{ end }}{{ if ge .spec.f 3.5 }}ge{{ end }}'),
    ("or-value", "or renders its first true operand, else its last", "{{ or .spec.empty .spec.team }}|{{ or .spec.off .spec.empty }}"),
    ("and-value", "and renders its first false operand, else its last", "{{ and .spec.flag .spec.n }}|{{ and .spec.n .spec.off .spec.team }}"),
    ("not", "not of Go's truth", "{{ not .spec.empty }}/{{ not .spec.items }}"),
    ("print-spacing", "print puts a space between operands when neither is a string",
     '{{ print .spec.n .spec.f "x" .spec.flag }}'),
    ("println", "println separates every operand and ends the line", "{{ println .spec.team .spec.n }}"),
    ("render-list", "a list renders as [a b], its elements by %v", "{{ .spec.items }} {{ .spec.mixed }}"),
    ("render-numbers", "integers in decimal, doubles by %g", "{{ .spec.n }} {{ .spec.f }} {{ .spec.big }} {{ .spec.tiny }}"),
    ("missing-field-no-value", "a missing key renders <no value>", "{{ .spec.registry }}/app"),
    ("parenthesized", "a parenthesized pipeline is an operand", '{{ printf "%d items" (len .spec.items) }}'),
    ("literals", "string, raw string, integer, float and boolean literals",
     '{{ printf "%v %v %v %v %v" "s" `raw` 42 1.5 true }}'),
    ("range-list", "range over a list, dot bound to each element", "{{ range .spec.items }}<{{ . }}>{{ end }}"),
    ("range-map-sorted", "range over a map visits its values in the order of the keys",
     "{{ range .spec.ports }}{{ . }},{{ end }}"),
    ("range-else", "range over a missing field renders its else", "{{ range .spec.missing }}x{{ else }}none{{ end }}"),
    ("range-root", "$ is the object inside range", "{{ range .spec.items }}{{ $.metadata.name }}-{{ . }} {{ end }}"),
    ("variable", "a declared variable holds its value to the end of the block",
     "{{ $team := .spec.team }}{{ with .metadata }}{{ .name }}-{{ $team }}{{ end }}"),
    ("variable-fields", "fields of a variable", "{{ $m := .metadata }}{{ $m.name }}/{{ $m.namespace }}"),
    ("range-index-and-element", "range $i, $e := over a list", "{{ range $i, $e := .spec.items }}{{ $i }}={{ $e }};{{ end }}"),
    ("range-key-and-value", "range $k, $v := over a map, keys in order",
     "{{ range $k, $v := .spec.ports }}{{ $k }}={{ $v }};{{ end }}"),
    ("range-element-variable", "range $e := binds the element and dot", "{{ range $e := .spec.items }}{{ $e }}{{ . }}{{ end }}"),
    ("if-declaration", "if $x := P: the variable in both branches", "{{ if $x := .spec.items }}{{ index $x 0 }}{{ else }}none{{ end }}"),
    ("with-declaration", "with $x := P", "{{ with $t := .spec.team }}{{ $t }}/{{ . }}{{ end }}"),
    ("html", "html escapes & < > \" and '", "{{ html .spec.markup }}"),
    ("slice-string", "slice of a string", "{{ slice .spec.team 1 4 }}|{{ slice .spec.team 3 }}"),
    ("slice-list", "slice of a list", "{{ slice .spec.mixed 1 3 }}"),
    ("compare-int-and-float", "comparing an integer with a float is Go's error: the request is denied",
     "{{ if lt .spec.n 2.5 }}x{{ end }}"),
]


def go_outputs(templates):
    data = json.dumps({"data": OBJECT, "templates": templates})
    run = subprocess.run(["go", "run", "."], cwd=HERE, input=data, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in run.stdout.splitlines()]


def case(name, description, template, result):
    out = {
        "name": "katalog-go-template-" + name,
        "description": description + " (expected: Go text/template's output on the same object, "
        "tools/gotemplate).",
        "source": "seed 000 (Orkestra Katalog `mutation`): Template values, \"Go templates evaluated "
        "against the CR\"; issue 50 item 3",
        "declarative": [{
            "format": "katalog",
            "target": {"group": "example.com", "version": "v1", "kind": "AppRequest", "resource": "apprequests"},
            "source": {"rules": [{"field": "spec.out", "override": template}]},
        }],
        "resources": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
             "metadata": {"name": "apprequests.example.com"},
             "spec": {"group": "example.com", "scope": "Namespaced",
                      "names": {"plural": "apprequests", "kind": "AppRequest"},
                      "versions": [{"name": "v1", "served": True, "storage": True,
                                    "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}}}]}},
        ],
        "request": {"operation": "CREATE",
                    "resource": {"group": "example.com", "version": "v1", "resource": "apprequests"}},
        "object": OBJECT,
    }
    if "error" in result:
        out["expect"] = {"rejected": {"messageContains": "katalog-apprequest"}}
        out["description"] += " Go: " + result["error"]
    else:
        expected = json.loads(json.dumps(OBJECT))
        expected["spec"]["out"] = result["output"]
        out["expect"] = {"object": expected}
    return out


def main():
    results = go_outputs([t for _, _, t in CASES])
    docs = [case(n, d, t, r) for (n, d, t), r in zip(CASES, results)]
    with open(OUT, "w") as f:
        f.write("# Go templates in Katalog values (issue 50 item 3). Generated by tools/gotemplate/cases.py:\n"
                "# each expectation is what Go's text/template renders on the same object.\n")
        yaml.safe_dump_all(docs, f, sort_keys=False, width=100)
    print("%d cases written to %s" % (len(docs), os.path.relpath(OUT, ROOT)))


if __name__ == "__main__":
    sys.exit(main())
