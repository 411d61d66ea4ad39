#!/usr/bin/env python3
"""Generates conformance/environment/*.yaml: "environment parity" probes of the
CEL environment kube-apiserver gives MutatingAdmissionPolicy expressions.

Every probe is one CEL expression EXPR, run by upstream's own admission plugin
(maporacle, k8s.io/apiserver v0.36.2, see ../shared/upstream/README.md) as

    [JSONPatch{op: "add", path: "/spec/probe", value: EXPR}]

on a custom kind example.com/v1 Probe whose spec preserves unknown fields.
The case expects whatever upstream answered: the object with spec.probe set,
or a denial whose text (compile error, runtime error) the case quotes.
Expected values come only from maporacle, never from kmutate.

Usage:
  python3 tools/environment_parity.py [--oracle PATH] [--check] [--only SUBSTR]

  --check   regenerate in memory and fail (exit 1) when a file differs
  --only    run only probes whose case name contains SUBSTR (no files written)

The probe list is PROBES below (file stem -> [(case suffix, expression), ...]
or (suffix, expression, options)). Options: "authorizer": "allow" (maporacle
allows every authorizer check; the case then lists the decisions in
`authorizer:`), "note": extra description text.
Standard library only.
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "conformance" / "environment"
DEFAULT_ORACLE = ROOT / "target" / "upstream" / "maporacle"
ORACLE_FLAGS = ["-compact", "-no-validate", "-no-input-defaults", "-no-output-defaults"]

PREFIX = '[JSONPatch{op: "add", path: "/spec/probe", value: '
SUFFIX = '}]'

# ---------------------------------------------------------------------------
# Sources, per file
# ---------------------------------------------------------------------------
SOURCES = {
    "strings": "cel-go ext/strings.go (ext.Strings(ext.StringsVersion(2)), base.go since 1.29)",
    "lists": "k8s.io/apiserver/pkg/cel/library/lists.go (library.Lists); cases named lists-ext-*: cel-go ext/lists.go (ext.Lists(ext.ListsVersion(3)), in the base environment since 1.34) and optional lists first()/last() (cel.OptionalTypes())",
    "sets": "cel-go ext/sets.go (ext.Sets(), base.go since 1.29)",
    "optional": "cel-go cel/library.go optionalLib (cel.OptionalTypes(), base.go since 1.28)",
    "two-var-comprehensions": "cel-go ext/comprehensions.go (ext.TwoVarComprehensions(), base.go since 1.32)",
    "semver": "k8s.io/apiserver/pkg/cel/library/semverlib.go (library.SemverLib(SemverVersion(1)), base.go since 1.33)",
    "format": "k8s.io/apiserver/pkg/cel/library/format.go (library.Format, base.go since 1.31)",
    "ip-cidr": "k8s.io/apiserver/pkg/cel/library/ip.go and cidr.go (library.IP, library.CIDR, base.go since 1.30)",
    "quantity": "k8s.io/apiserver/pkg/cel/library/quantity.go (library.Quantity, base.go since 1.28)",
    "authz": "k8s.io/apiserver/pkg/cel/library/authz.go (library.Authz, library.AuthzSelectors)",
    "url": "k8s.io/apiserver/pkg/cel/library/urls.go (library.URLs)",
    "regex": "k8s.io/apiserver/pkg/cel/library/regex.go (library.Regex) and cel-go standard matches()",
    "core-macros": "cel-go parser/macro.go (has, all, exists, exists_one, map, filter)",
    "standard": "cel-go checker/stdlib and common/types (arithmetic, conversions, timestamps, durations, literals validators in base.go)",
    "jsonpatch": "k8s.io/apiserver/pkg/cel/library/jsonpatch.go (library.JSONPatch) and plugin/policy/mutating/patch/json_patch.go (value conversion)",
    "typing": "cel-go checker (checker/checker.go: overloads with type parameters, comprehension accumulator and range types, optional types) and the base environment's validators (cel.ValidateHomogeneousAggregateLiterals, ValidateTimestampLiterals)",
    "absent": "k8s.io/apiserver/pkg/cel/environment/base.go: what the 1.36 environment does NOT enable (cel-go ext.Bindings, ext.Math, ext.Encoders, ext.Protos, ext.Regex, cel.block, ext.Strings beyond v2, library functions of later releases)",
}

# ---------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------
PROBES = {
"strings": [
    ("charat", "'hello'.charAt(1)"),
    ("charat-end", "'hello'.charAt(5)"),
    ("charat-out-of-range", "'hello'.charAt(6)"),
    ("charat-negative", "'hello'.charAt(-1)"),
    ("charat-unicode", "'héllo'.charAt(1)"),
    ("indexof", "'hello mellow'.indexOf('ello')"),
    ("indexof-missing", "'hello'.indexOf('z')"),
    ("indexof-empty", "'hello'.indexOf('')"),
    ("indexof-with-offset", "'hello mellow'.indexOf('ello', 2)"),
    ("indexof-offset-out-of-range", "'hello'.indexOf('l', 10)"),
    ("indexof-offset-negative", "'hello'.indexOf('l', -1)"),
    ("indexof-unicode", "'aéb'.indexOf('b')"),
    ("lastindexof", "'hello mellow'.lastIndexOf('ello')"),
    ("lastindexof-missing", "'hello'.lastIndexOf('z')"),
    ("lastindexof-empty", "'hello'.lastIndexOf('')"),
    ("lastindexof-with-offset", "'hello mellow'.lastIndexOf('ello', 6)"),
    ("lastindexof-offset-out-of-range", "'hello'.lastIndexOf('l', 10)"),
    ("lastindexof-offset-negative", "'hello'.lastIndexOf('l', -1)"),
    ("lowerascii", "'HeLLo Ü'.lowerAscii()"),
    ("upperascii", "'HeLLo ü'.upperAscii()"),
    ("replace", "'a-b-c'.replace('-', '+')"),
    ("replace-n", "'a-b-c'.replace('-', '+', 1)"),
    ("replace-n-zero", "'a-b-c'.replace('-', '+', 0)"),
    ("replace-n-negative", "'a-b-c'.replace('-', '+', -1)"),
    ("replace-empty-pattern", "'abc'.replace('', '_')"),
    ("split", "'a,b,c'.split(',')"),
    ("split-n", "'a,b,c'.split(',', 2)"),
    ("split-n-zero", "['a,b,c'.split(',', 0)]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("split-n-one", "'a,b,c'.split(',', 1)"),
    ("split-n-negative", "'a,b,c'.split(',', -1)"),
    ("split-empty-separator", "'abc'.split('')"),
    ("split-empty-string", "''.split(',')"),
    ("substring", "'hello'.substring(1)"),
    ("substring-range", "'hello'.substring(1, 3)"),
    ("substring-empty-range", "'hello'.substring(2, 2)"),
    ("substring-out-of-range", "'hello'.substring(6)"),
    ("substring-inverted-range", "'hello'.substring(3, 1)"),
    ("substring-end-out-of-range", "'hello'.substring(1, 9)"),
    ("substring-unicode", "'héllo'.substring(1, 3)"),
    ("trim", "'  a b \\t\\n'.trim()"),
    ("trim-unicode-space", "'\\u00a0a\\u2003'.trim()"),
    ("join", "['a', 'b', 'c'].join()"),
    ("join-separator", "['a', 'b', 'c'].join('-')"),
    ("join-empty-list", "[].join('-')"),
    ("join-non-string-list", "[1, 2].join('-')"),
    ("join-dyn-non-string", "dyn([1, 2]).join('-')"),
    ("quote", "strings.quote('a\"b\\nc')"),
    ("quote-unicode", "strings.quote('é\\t')"),
    ("format-s", "'%s-%s'.format(['a', 1])"),
    ("format-d", "'%d'.format([42])"),
    ("format-d-uint", "'%d'.format([42u])"),
    ("format-d-double", "'%d'.format([4.2])"),
    ("format-f", "'%.2f'.format([3.14159])"),
    ("format-f-default", "'%f'.format([2.5])"),
    ("format-e", "'%e'.format([1234.5])"),
    ("format-x", "'%x'.format([255])"),
    ("format-x-string", "'%x'.format(['hi'])"),
    ("format-upper-x", "'%X'.format([255])"),
    ("format-o", "'%o'.format([8])"),
    ("format-b", "'%b'.format([5])"),
    ("format-s-list", "'%s'.format([[1, 'a']])"),
    ("format-s-map", "'%s'.format([{'a': 1}])"),
    ("format-s-bool", "'%s'.format([true])"),
    ("format-s-null", "'%s'.format([null])"),
    ("format-s-double", "'%s'.format([1.5])"),
    ("format-s-bytes", "'%s'.format([b'abc'])"),
    ("format-s-duration", "'%s'.format([duration('90s')])"),
    ("format-s-timestamp", "'%s'.format([timestamp('2020-01-02T03:04:05Z')])"),
    ("format-percent", "'100%%'.format([])"),
    ("format-too-few-args", "'%s %s'.format(['a'])"),
    ("format-bad-verb", "'%q'.format(['a'])"),
    ("format-d-string-error", "'%d'.format(['a'])"),
    ("format-non-literal-args", "'%s'.format(dyn([object.spec.seed]))"),
    ("format-s-library-type", "'%s'.format([quantity('1')])"),
    ("format-s-nested-library-type", "'%s'.format([[quantity('1')]])"),
    ("format-s-map-value-library-type", "'%s'.format([{'a': [ip('1.2.3.4')]}])"),
    ("format-d-list", "'%d'.format([[1]])"),
    ("format-x-optional", "'%x'.format([optional.of(1)])"),
    ("format-f-dyn-int", "'%.3f'.format([dyn(1)])"),
    ("format-too-many-args", "'%d %d'.format([1, 2, 3])"),
    ("format-trailing-percent", "'%'.format([1])"),
    ("format-trailing-percent-after-clause", "'%d%'.format([1])"),
    ("format-precision-unterminated", "'%.'.format([1])"),
    ("format-precision-empty", "'%.x'.format([1])"),
    ("format-width", "'%5d'.format([1])"),
    ("format-index-before-bad-verb", "'%s %q'.format(['a'])"),
    ("charat-wrong-arg-type", "'hello'.charAt('1')"),
    ("indexof-wrong-arg-type", "'hello'.indexOf(1)"),
    ("split-wrong-receiver", "1.split(',')"),
    ("lowerascii-wrong-receiver", "b'A'.lowerAscii()"),
    ("trim-arg", "'  a  '.trim(' ')"),
    ("size-unicode", "size('héllo')"),
    ("contains", "'hello'.contains('ell')"),
    ("startswith", "'hello'.startsWith('he')"),
    ("endswith", "'hello'.endsWith('lo')"),
    ("concat", "'a' + 'b'"),
    ("compare-lt", "'a' < 'b'"),
    ("compare-unicode", "'é' > 'z'"),
],
"lists": [
    ("issorted-true", "[1, 2, 2, 3].isSorted()"),
    ("issorted-false", "[3, 1].isSorted()"),
    ("issorted-strings", "['a', 'b', 'c'].isSorted()"),
    ("issorted-empty", "[].isSorted()"),
    ("issorted-doubles", "[1.0, 0.5].isSorted()"),
    ("issorted-durations", "[duration('1s'), duration('2s')].isSorted()"),
    ("issorted-mixed-dyn", "[dyn(1), dyn('a')].isSorted()"),
    ("issorted-bools", "[false, true].isSorted()"),
    ("sum-int", "[1, 2, 3].sum()"),
    ("sum-empty", "[].sum()"),
    ("sum-empty-int-typed", "dyn([]).sum()"),
    ("sum-double", "[1.5, 2.25].sum()"),
    ("sum-uint", "[1u, 2u].sum()"),
    ("sum-duration", "string([duration('1s'), duration('2m')].sum())"),
    ("sum-strings-error", "['a', 'b'].sum()"),
    ("sum-overflow", "[9223372036854775807, 1].sum()"),
    ("max-int", "[1, 5, 3].max()"),
    ("min-int", "[4, 2, 3].min()"),
    ("max-strings", "['b', 'c', 'a'].max()"),
    ("min-strings", "['b', 'c', 'a'].min()"),
    ("max-empty", "[].max()"),
    ("min-empty", "[].min()"),
    ("max-double", "[1.5, -2.5].max()"),
    ("min-timestamp", "string([timestamp('2020-01-01T00:00:00Z'), timestamp('2019-01-01T00:00:00Z')].min())"),
    ("max-bools", "[false, true].max()"),
    ("indexof", "[1, 2, 3, 2].indexOf(2)"),
    ("indexof-missing", "[1, 2].indexOf(5)"),
    ("lastindexof", "[1, 2, 3, 2].lastIndexOf(2)"),
    ("lastindexof-missing", "[1, 2].lastIndexOf(5)"),
    ("indexof-strings", "['a', 'b'].indexOf('b')"),
    ("indexof-empty", "[].indexOf(1)"),
    ("indexof-lists", "[[1], [2]].indexOf([2])"),
    ("indexof-wrong-type", "[1, 2].indexOf('a')"),
    ("max-wrong-arg", "[1, 2].max(3)"),
    ("concat", "[1] + [2, 3]"),
    ("index", "[1, 2, 3][1]"),
    ("index-out-of-range", "[1, 2, 3][3]"),
    ("index-negative", "[1, 2, 3][-1]"),
    ("index-double", "[1, 2, 3][1.0]"),
    ("index-double-fraction", "dyn([1, 2, 3])[dyn(1.5)]"),
    ("index-uint", "[1, 2, 3][1u]"),
    ("in", "2 in [1, 2, 3]"),
    ("in-cross-numeric", "2.0 in [1, 2, 3]"),
    ("size", "size([1, 2, 3])"),
    ("size-method", "[1, 2, 3].size()"),
    ("equality", "[1, 2] == [1, 2]"),
    ("equality-cross-numeric", "[1, 2] == [1.0, 2u]"),
    ("mixed-literal", "[1, 'a']"),
    ("mixed-literal-dyn", "[dyn(1), 'a']"),
    ("nested", "[[1, 2], [3]]"),
    ("compare-lists-error", "[1] < [2]"),
    ("ext-flatten", "[[1], [2, 3]].flatten()"),
    ("ext-flatten-one-level", "[[[1]], [[2]]].flatten()"),
    ("ext-flatten-mixed-depth-literal", "[[1], [[2]]].flatten()"),
    ("ext-flatten-depth", "[[[1]], [[2, 3]]].flatten(2)"),
    ("ext-flatten-depth-zero", "[[1], [2]].flatten(0)"),
    ("ext-flatten-negative-depth", "[[1], [2]].flatten(-1)"),
    ("ext-flatten-non-list-elements", "[dyn(1), dyn([2])].flatten()"),
    ("ext-slice", "[1, 2, 3, 4].slice(1, 3)"),
    ("ext-slice-empty", "[[1, 2].slice(1, 1)]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("ext-slice-out-of-range", "[1, 2].slice(1, 5)"),
    ("ext-slice-negative", "[1, 2].slice(-1, 1)"),
    ("ext-slice-inverted", "[1, 2, 3].slice(2, 1)"),
    ("ext-range", "lists.range(3)"),
    ("ext-range-zero", "[lists.range(0)]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("ext-range-negative", "[lists.range(-1)]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("ext-distinct", "[1, 2, 1, 3, 2].distinct()"),
    ("ext-distinct-strings", "['b', 'a', 'b'].distinct()"),
    ("ext-distinct-cross-numeric", "[dyn(1), dyn(1.0), dyn(1u), dyn(2)].distinct()"),
    ("ext-distinct-lists", "[[1], [1], [2]].distinct()"),
    ("ext-reverse", "[1, 2, 3].reverse()"),
    ("ext-reverse-empty", "[[].reverse()]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("ext-sort-ints", "[3, 1, 2].sort()"),
    ("ext-sort-strings", "['b', 'c', 'a'].sort()"),
    ("ext-sort-doubles", "[2.5, -1.0, 0.5].sort()"),
    ("ext-sort-bools", "[true, false].sort()"),
    ("ext-sort-timestamps", "[timestamp('2021-01-01T00:00:00Z'), timestamp('2020-01-01T00:00:00Z')].sort().map(t, string(t))"),
    ("ext-sort-mixed-dyn", "[dyn(1), dyn('a')].sort()"),
    ("ext-sort-maps", "[{'a': 1}].sort()"),
    ("ext-sort-empty", "[[].sort()]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("ext-sortby", "[{'n': 2}, {'n': 1}].sortBy(e, e.n)"),
    ("ext-sortby-strings", "['bb', 'a', 'ccc'].sortBy(s, size(s))"),
    ("ext-sortby-stable", "['b1', 'a1', 'c0'].sortBy(e, e.substring(1))"),
    ("ext-sortby-non-comparable-key", "[1, 2].sortBy(x, [x])"),
    ("ext-sortby-non-ident", "[1, 2].sortBy(1, 1)"),
    ("ext-first", "[1, 2].first().value()"),
    ("ext-first-empty", "[].first().hasValue()"),
    ("ext-last-empty", "[].last().hasValue()"),
    ("ext-range-non-int", "lists.range('3')"),
    ("ext-flatten-on-map", "{'a': [1]}.flatten()"),
],
"sets": [
    ("contains-true", "sets.contains([1, 2, 3], [2, 3])"),
    ("contains-false", "sets.contains([1, 2], [3])"),
    ("contains-empty", "sets.contains([1], [])"),
    ("contains-cross-numeric", "sets.contains([1, 2], [2.0, 1u])"),
    ("contains-strings", "sets.contains(['a', 'b'], ['a'])"),
    ("equivalent-true", "sets.equivalent([1, 2, 2], [2, 1])"),
    ("equivalent-false", "sets.equivalent([1, 2], [1, 3])"),
    ("equivalent-empty", "sets.equivalent([], [])"),
    ("equivalent-cross-numeric", "sets.equivalent([1], [1.0])"),
    ("intersects-true", "sets.intersects([1, 2], [2, 5])"),
    ("intersects-false", "sets.intersects([1, 2], [3])"),
    ("intersects-empty", "sets.intersects([], [1])"),
    ("intersects-lists-of-lists", "sets.intersects([[1], [2]], [[2]])"),
    ("contains-mixed-types", "sets.contains([1, 2], ['a'])"),
    ("contains-dyn-mixed", "sets.contains([dyn(1), dyn('a')], ['a'])"),
    ("contains-non-list", "sets.contains(1, [1])"),
    ("contains-one-arg", "sets.contains([1])"),
    ("member-call-style", "[1, 2].contains([1])"),
],
"optional": [
    ("of-marshals-to-value", "optional.of(1)"),
    ("none-marshals", "optional.none()"),
    ("of-hasvalue", "optional.of(1).hasValue()"),
    ("none-hasvalue", "optional.none().hasValue()"),
    ("of-value", "optional.of('x').value()"),
    ("none-value-error", "optional.none().value()"),
    ("ofnonzero-zero", "optional.ofNonZeroValue(0).hasValue()"),
    ("ofnonzero-empty-string", "optional.ofNonZeroValue('').hasValue()"),
    ("ofnonzero-empty-list", "optional.ofNonZeroValue([]).hasValue()"),
    ("ofnonzero-value", "optional.ofNonZeroValue(3).value()"),
    ("ofnonzero-null", "optional.ofNonZeroValue(null).hasValue()"),
    ("or", "optional.none().or(optional.of(2)).value()"),
    ("or-first", "optional.of(1).or(optional.of(2)).value()"),
    ("orvalue", "optional.none().orValue(7)"),
    ("orvalue-present", "optional.of(3).orValue(7)"),
    ("optional-field-present", "object.spec.?seed.orValue(0)"),
    ("optional-field-absent", "object.spec.?missing.orValue('default')"),
    ("optional-field-chain", "object.?spec.?nested.?deep.orValue('none')"),
    ("optional-index-map", "{'a': 1}[?'a'].value()"),
    ("optional-index-map-absent", "{'a': 1}[?'b'].hasValue()"),
    ("optional-index-list", "[1, 2][?1].value()"),
    ("optional-index-list-out-of-range", "[1, 2][?5].hasValue()"),
    ("optional-list-element", "[1, ?optional.none(), ?optional.of(3)]"),
    ("optional-map-entry", "{'a': 1, ?'b': optional.none(), ?'c': optional.of(3)}"),
    ("optmap", "optional.of(2).optMap(x, x * 10).value()"),
    ("optmap-none", "optional.none().optMap(x, x * 10).hasValue()"),
    ("optflatmap", "optional.of(2).optFlatMap(x, optional.of(x + 1)).value()"),
    ("optflatmap-none-result", "optional.of(2).optFlatMap(x, optional.none()).hasValue()"),
    ("optional-type-name", "type(optional.none()) == optional_type"),
    ("unwrap", "optional.unwrap([optional.of(1), optional.none()])"),
    ("unwrapopt", "[optional.of(1), optional.none()].unwrapOpt()"),
    ("unwrap-empty", "[optional.unwrap([])]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("unwrap-non-optional-list", "optional.unwrap([1])"),
    ("first", "[1, 2].first().value()"),
    ("last", "[1, 2].last().value()"),
    ("orvalue-wrong-type", "optional.of(1).orValue('a')"),
    ("optional-equality", "optional.of(1) == optional.of(1)"),
    ("optional-none-equality", "optional.none() == optional.none()"),
    ("optional-on-non-optional-value", "object.spec.seed.?x"),
    ("optional-entry-non-optional", "{?'a': 1}"),
],
"two-var-comprehensions": [
    ("all-list", "[1, 2, 3].all(i, v, v > i)"),
    ("all-map", "{'a': 1, 'b': 2}.all(k, v, v > 0)"),
    ("exists-list", "[10, 20].exists(i, v, i == 1 && v == 20)"),
    ("exists-map", "{'a': 1}.exists(k, v, k == 'a' && v == 1)"),
    ("existsone-list", "[1, 2, 3].existsOne(i, v, v == 2)"),
    ("existsone-map", "{'a': 1, 'b': 1}.existsOne(k, v, v == 1)"),
    ("exists-one-underscore-two-var", "[1, 2].exists_one(i, v, v == 2)"),
    ("existsone-single-var", "[1, 2, 3].existsOne(v, v > 1)"),
    ("transformlist-list", "[10, 20].transformList(i, v, i + v)"),
    ("transformlist-filter", "[1, 2, 3, 4].transformList(i, v, v % 2 == 0, v * i)"),
    ("transformlist-map", "{'a': 1, 'b': 2}.transformList(k, v, k + string(v)).sort()", {"note": "sorted: map iteration order is unspecified"}),
    ("transformmap-list-int-keys-marshal-error", "['x', 'y'].transformMap(i, v, v + string(i))"),
    ("transformmap-list", "['x', 'y'].transformMap(i, v, v + string(i))[1]"),
    ("transformmap-map", "{'a': 1, 'b': 2}.transformMap(k, v, v * 10)"),
    ("transformmap-filter", "{'a': 1, 'b': 2}.transformMap(k, v, v > 1, v * 10)"),
    ("transformmapentry", "{'a': 'x'}.transformMapEntry(k, v, {v: k})"),
    ("transformmapentry-filter", "{'a': 'x', 'b': 'y'}.transformMapEntry(k, v, k == 'b', {v: k})"),
    ("transformmapentry-list", "['p', 'q'].transformMapEntry(i, v, {v: i})"),
    ("transformmapentry-duplicate-key", "{'a': 'x', 'b': 'x'}.transformMapEntry(k, v, {v: k})"),
    ("transformmapentry-two-entries", "{'a': 1}.transformMapEntry(k, v, {k: v, 'z': v})"),
    ("same-var-names", "[1].all(x, x, x > 0)"),
    ("same-var-names-transformmap", "{'a': 1}.transformMap(k, k, 1)"),
    ("transformlist-single-var", "[1, 2].transformList(v, v * 2)"),
    ("all-non-bool", "[1, 2].all(i, v, v)"),
    ("transformlist-empty", "[[].transformList(i, v, v)]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("transformmap-empty-map", "[{}.transformMap(k, v, v)]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("exists-map-error-absorbed", "{'a': 0, 'b': 1}.exists(k, v, 1 / v == 1)"),
],
"semver": [
    ("semver-major", "semver('1.2.3').major()"),
    ("semver-minor", "semver('1.2.3').minor()"),
    ("semver-patch", "semver('1.2.3').patch()"),
    ("issemver-true", "isSemver('1.2.3-alpha.1+build.5')"),
    ("issemver-false", "isSemver('1.2')"),
    ("issemver-v-prefix", "isSemver('v1.2.3')"),
    ("issemver-normalize", "isSemver('v1.2', true)"),
    ("issemver-normalize-false", "isSemver('v1.2', false)"),
    ("issemver-leading-zero", "isSemver('01.2.3')"),
    ("issemver-leading-zero-normalize", "isSemver('01.02.03', true)"),
    ("semver-normalize-value", "semver('v1.2', true).minor()"),
    ("semver-normalize-patch", "semver('v1', true).patch()"),
    ("semver-invalid", "semver('1.2').major()"),
    ("semver-invalid-normalize", "semver('x.y', true).major()"),
    ("compareto-less", "semver('1.2.3').compareTo(semver('1.10.0'))"),
    ("compareto-equal", "semver('1.2.3').compareTo(semver('1.2.3'))"),
    ("compareto-prerelease", "semver('1.0.0-alpha').compareTo(semver('1.0.0'))"),
    ("compareto-build-ignored", "semver('1.0.0+a').compareTo(semver('1.0.0+b'))"),
    ("isgreaterthan", "semver('2.0.0').isGreaterThan(semver('1.9.9'))"),
    ("islessthan", "semver('1.0.0-rc.1').isLessThan(semver('1.0.0-rc.2'))"),
    ("equality", "semver('1.2.3') == semver('1.2.3')"),
    ("equality-build-metadata", "semver('1.2.3+x') == semver('1.2.3')"),
    ("marshal-error", "semver('1.2.3')"),
    ("string-conversion", "string(semver('1.2.3'))"),
    ("compareto-wrong-type", "semver('1.2.3').compareTo('1.2.3')"),
    ("semver-non-string", "semver(1)"),
    ("issemver-empty", "isSemver('')"),
    ("prerelease-numeric-order", "semver('1.0.0-2').isLessThan(semver('1.0.0-10'))"),
],
"format": [
    ("dns1123label-valid", "format.dns1123Label().validate('my-name').hasValue()"),
    ("dns1123label-invalid", "format.dns1123Label().validate('My_Name').value()"),
    ("dns1123subdomain-valid", "format.dns1123Subdomain().validate('a.b.c').hasValue()"),
    ("dns1123subdomain-invalid", "format.dns1123Subdomain().validate('-a').value()"),
    ("dns1035label-invalid", "format.dns1035Label().validate('1abc').value()"),
    ("dns1035label-valid", "format.dns1035Label().validate('abc').hasValue()"),
    ("dns1123labelprefix", "format.dns1123LabelPrefix().validate('abc-').hasValue()"),
    ("dns1123subdomainprefix", "format.dns1123SubdomainPrefix().validate('abc.').hasValue()"),
    ("dns1035labelprefix", "format.dns1035LabelPrefix().validate('a-').hasValue()"),
    ("qualifiedname-valid", "format.qualifiedName().validate('example.com/name').hasValue()"),
    ("qualifiedname-invalid", "format.qualifiedName().validate('a/b/c').value()"),
    ("labelvalue-valid", "format.labelValue().validate('').hasValue()"),
    ("labelvalue-invalid", "format.labelValue().validate('bad value').value()"),
    ("uri-valid", "format.uri().validate('https://example.com/x').hasValue()"),
    ("uri-invalid", "format.uri().validate('not a uri').value()"),
    ("uuid-valid", "format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()"),
    ("uuid-invalid", "format.uuid().validate('xyz').value()"),
    ("byte-valid", "format.byte().validate('aGVsbG8=').hasValue()"),
    ("byte-invalid", "format.byte().validate('!!').value()"),
    ("date-valid", "format.date().validate('2020-01-31').hasValue()"),
    ("date-invalid", "format.date().validate('2020-13-01').value()"),
    ("datetime-valid", "format.datetime().validate('2020-01-31T10:00:00Z').hasValue()"),
    ("datetime-invalid", "format.datetime().validate('yesterday').value()"),
    ("named-valid", "format.named('dns1123Label').hasValue()"),
    ("named-unknown", "format.named('nope').hasValue()"),
    ("named-validate", "format.named('labelValue').value().validate('ok').hasValue()"),
    ("named-dns1123label-invalid", "format.named('dns1123Label').value().validate('A').value()"),
    ("dns1123label-too-long", "format.dns1123Label().validate('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa').value()"),
    ("format-marshal-error", "format.dns1123Label()"),
    ("validate-wrong-arg", "format.dns1123Label().validate(1)"),
    ("unknown-format-function", "format.ipv4().validate('1.2.3.4')"),
    ("named-non-string", "format.named(1)"),
],
"ip-cidr": [
    ("isip-v4", "isIP('192.168.0.1')"),
    ("isip-v6", "isIP('2001:db8::1')"),
    ("isip-invalid", "isIP('999.0.0.1')"),
    ("isip-zone", "isIP('fe80::1%eth0')"),
    ("isip-leading-zero", "isIP('010.0.0.1')"),
    ("isip-mapped", "isIP('::ffff:1.2.3.4')"),
    ("ip-string", "string(ip('192.168.0.1'))"),
    ("ip-string-v6-canonical", "string(ip('2001:DB8:0:0::1'))"),
    ("ip-invalid", "string(ip('not-an-ip'))"),
    ("ip-mapped-invalid", "string(ip('::ffff:1.2.3.4'))"),
    ("ip-marshal-error", "ip('1.2.3.4')"),
    ("ip-family-v4", "ip('10.0.0.1').family()"),
    ("ip-family-v6", "ip('::1').family()"),
    ("ip-iscanonical-true", "ip.isCanonical('2001:db8::1')"),
    ("ip-iscanonical-false", "ip.isCanonical('2001:DB8::1')"),
    ("ip-iscanonical-invalid", "ip.isCanonical('x')"),
    ("ip-isunspecified", "ip('0.0.0.0').isUnspecified()"),
    ("ip-isunspecified-v6", "ip('::').isUnspecified()"),
    ("ip-isloopback", "ip('127.0.0.5').isLoopback()"),
    ("ip-isloopback-v6", "ip('::1').isLoopback()"),
    ("ip-islinklocalmulticast", "ip('224.0.0.1').isLinkLocalMulticast()"),
    ("ip-islinklocalmulticast-v6", "ip('ff02::1').isLinkLocalMulticast()"),
    ("ip-islinklocalunicast", "ip('169.254.1.1').isLinkLocalUnicast()"),
    ("ip-islinklocalunicast-v6", "ip('fe80::1').isLinkLocalUnicast()"),
    ("ip-isglobalunicast", "ip('8.8.8.8').isGlobalUnicast()"),
    ("ip-isglobalunicast-private", "ip('10.0.0.1').isGlobalUnicast()"),
    ("ip-isglobalunicast-broadcast", "ip('255.255.255.255').isGlobalUnicast()"),
    ("ip-equality", "ip('10.0.0.1') == ip('10.0.0.1')"),
    ("ip-equality-v6-forms", "ip('2001:db8::1') == ip('2001:DB8:0::1')"),
    ("ip-inequality", "ip('10.0.0.1') != ip('10.0.0.2')"),
    ("ip-type-name", "type(ip('1.2.3.4')) == net.IP"),
    ("isip-wrong-type", "isIP(1)"),
    ("iscidr-true", "isCIDR('10.0.0.0/8')"),
    ("iscidr-false", "isCIDR('10.0.0.0')"),
    ("iscidr-host-bits", "isCIDR('10.0.0.1/8')"),
    ("iscidr-v6", "isCIDR('2001:db8::/32')"),
    ("iscidr-bad-prefix", "isCIDR('10.0.0.0/33')"),
    ("iscidr-leading-zero", "isCIDR('010.0.0.0/8')"),
    ("cidr-string", "string(cidr('10.0.0.1/8'))"),
    ("cidr-invalid", "string(cidr('10.0.0.0'))"),
    ("cidr-marshal-error", "cidr('10.0.0.0/8')"),
    ("cidr-containsip-string", "cidr('10.0.0.0/8').containsIP('10.1.2.3')"),
    ("cidr-containsip-ip", "cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))"),
    ("cidr-containsip-invalid-string", "cidr('10.0.0.0/8').containsIP('nope')"),
    ("cidr-containsip-v6-in-v4", "cidr('10.0.0.0/8').containsIP('::1')"),
    ("cidr-containscidr-string", "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')"),
    ("cidr-containscidr-cidr", "cidr('10.0.0.0/16').containsCIDR(cidr('10.0.0.0/8'))"),
    ("cidr-containscidr-equal", "cidr('10.0.0.0/8').containsCIDR('10.0.0.0/8')"),
    ("cidr-containscidr-invalid", "cidr('10.0.0.0/8').containsCIDR('10.0.0.0')"),
    ("cidr-ip", "string(cidr('192.168.1.5/24').ip())"),
    ("cidr-masked", "string(cidr('192.168.1.5/24').masked())"),
    ("cidr-masked-v6", "string(cidr('2001:db8::1/32').masked())"),
    ("cidr-prefixlength", "cidr('192.168.1.5/24').prefixLength()"),
    ("cidr-prefixlength-v6", "cidr('::/0').prefixLength()"),
    ("cidr-family", "cidr('::1/128').ip().family()"),
    ("cidr-equality", "cidr('10.0.0.0/8') == cidr('10.0.0.0/8')"),
    ("cidr-equality-unmasked", "cidr('10.0.0.1/8') == cidr('10.0.0.0/8')"),
    ("cidr-type-name", "type(cidr('10.0.0.0/8')) == net.CIDR"),
    ("ip-family-on-string", "'1.2.3.4'.family()"),
    ("containsip-wrong-type", "cidr('10.0.0.0/8').containsIP(1)"),
    ("ip-zone-invalid", "string(ip('fe80::1%eth0'))"),
],
"quantity": [
    ("isquantity-true", "isQuantity('1Gi')"),
    ("isquantity-false", "isQuantity('1GB')"),
    ("isquantity-decimal", "isQuantity('1.5')"),
    ("isquantity-exponent", "isQuantity('1e3')"),
    ("isquantity-empty", "isQuantity('')"),
    ("quantity-invalid", "quantity('abc').isInteger()"),
    ("quantity-marshal-error", "quantity('1Gi')"),
    ("string-not-declared", "string(quantity('1.5Gi'))"),
    ("sign-positive", "sign(quantity('5'))"),
    ("sign-negative", "sign(quantity('-5m'))"),
    ("sign-zero", "sign(quantity('0'))"),
    ("sign-member-style", "quantity('5').sign()"),
    ("sign-int", "sign(1)"),
    ("isinteger-true", "quantity('2Ki').isInteger()"),
    ("isinteger-false", "quantity('500m').isInteger()"),
    ("asinteger", "quantity('2Ki').asInteger()"),
    ("asinteger-fraction-error", "quantity('500m').asInteger()"),
    ("asinteger-overflow", "quantity('100Ei').asInteger()"),
    ("asapproximatefloat", "quantity('500m').asApproximateFloat()"),
    ("asapproximatefloat-large", "quantity('1Ki').asApproximateFloat()"),
    ("add-quantity", "quantity('1Gi').add(quantity('512Mi')).asInteger()"),
    ("add-quantity-equality", "quantity('1Gi').add(quantity('512Mi')) == quantity('1536Mi')"),
    ("add-int", "quantity('100m').add(1).asApproximateFloat()"),
    ("add-int-equality", "quantity('100m').add(1) == quantity('1100m')"),
    ("sub-quantity", "quantity('1').sub(quantity('250m')).asApproximateFloat()"),
    ("sub-int", "quantity('5').sub(10).asInteger()"),
    ("sub-int-sign", "sign(quantity('5').sub(10))"),
    ("add-isinteger", "quantity('500m').add(quantity('500m')).isInteger()"),
    ("compareto-less", "quantity('1').compareTo(quantity('2'))"),
    ("compareto-equal-different-units", "quantity('1k').compareTo(quantity('1000'))"),
    ("compareto-greater", "quantity('1Gi').compareTo(quantity('1G'))"),
    ("isgreaterthan", "quantity('2Gi').isGreaterThan(quantity('2G'))"),
    ("islessthan", "quantity('100m').isLessThan(quantity('1'))"),
    ("equality", "quantity('1000m') == quantity('1')"),
    ("equality-false", "quantity('1Ki') == quantity('1k')"),
    ("add-double-error", "quantity('1').add(1.5)"),
    ("compare-operator-error", "quantity('1') < quantity('2')"),
    ("quantity-non-string", "quantity(1)"),
    ("isquantity-negative", "isQuantity('-1.5Mi')"),
],
"authz": [
    ("resource-check-allowed", "authorizer.group('').resource('pods').namespace('default').check('get').allowed()"),
    ("resource-check-reason", "authorizer.group('').resource('pods').check('list').reason()"),
    ("resource-check-errored", "authorizer.group('apps').resource('deployments').name('x').check('update').errored()"),
    ("resource-check-error", "authorizer.group('apps').resource('deployments').check('update').error()"),
    ("subresource", "authorizer.group('').resource('pods').subresource('status').check('patch').allowed()"),
    # a path and a verb no cluster's default RBAC grants (it allows /healthz
    # to everyone, and the request's own create to its user), so that a live
    # cluster answers as maporacle's deny-all authorizer does
    ("path-check", "authorizer.path('/metrics').check('get').allowed()"),
    ("serviceaccount", "authorizer.serviceAccount('default', 'sa').group('').resource('pods').check('get').allowed()"),
    ("requestresource-check", "authorizer.requestResource.check('delete').allowed()"),
    ("requestresource-name", "authorizer.requestResource.name('other').check('get').allowed()"),
    ("fieldselector", "authorizer.group('').resource('pods').fieldSelector('spec.nodeName=n1').check('list').allowed()"),
    ("labelselector", "authorizer.group('').resource('pods').labelSelector('app=web').check('list').allowed()"),
    ("fieldselector-invalid", "authorizer.group('').resource('pods').fieldSelector('spec.nodeName==n1,,').check('list').reason()"),
    ("labelselector-invalid", "authorizer.group('').resource('pods').labelSelector('!!!').check('list').error()"),
    ("decision-marshal-error", "authorizer.group('').resource('pods').check('get')"),
    ("authorizer-marshal-error", "authorizer"),
    ("allowed-when-allowed", "authorizer.group('').resource('pods').namespace('default').check('get').allowed()", {"authorizer": "allow"}),
    ("reason-when-allowed", "authorizer.group('').resource('pods').namespace('default').check('get').reason()", {"authorizer": "allow"}),
    ("path-allowed", "authorizer.path('/healthz').check('get').allowed()", {"authorizer": "allow"}),
    ("check-wrong-arg", "authorizer.group('').resource('pods').check(1)"),
    ("resource-on-authorizer", "authorizer.resource('pods').check('get').allowed()"),
],
"url": [
    ("isurl-true", "isURL('https://example.com:8080/path?q=1')"),
    ("isurl-relative", "isURL('/absolute-path')"),
    ("isurl-false", "isURL('not a url')"),
    ("isurl-empty", "isURL('')"),
    ("getscheme", "url('https://example.com/').getScheme()"),
    ("gethost", "url('https://example.com:8080/').getHost()"),
    ("gethost-ipv6", "url('https://[::1]:80/').getHost()"),
    ("gethostname", "url('https://example.com:8080/').getHostname()"),
    ("gethostname-ipv6", "url('https://[::1]:80/').getHostname()"),
    ("getport", "url('https://example.com:8080/').getPort()"),
    ("getport-absent", "url('https://example.com/').getPort()"),
    ("getescapedpath", "url('https://example.com/a%20b/c').getEscapedPath()"),
    ("getescapedpath-empty", "url('https://example.com').getEscapedPath()"),
    ("getquery", "url('https://example.com/?a=1&b=2&a=3').getQuery()"),
    ("getquery-empty", "[url('https://example.com/').getQuery()]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("getquery-escaped", "url('https://example.com/?k%20x=v%26y').getQuery()"),
    ("url-invalid", "url('not a url').getScheme()"),
    ("url-relative", "url('/path').getScheme()"),
    ("url-marshal-error", "url('https://example.com/')"),
    ("url-string", "string(url('https://example.com/'))"),
    ("url-equality", "url('https://a/') == url('https://a/')"),
    ("getscheme-on-string", "'https://a/'.getScheme()"),
    ("url-userinfo-host", "url('https://user:pw@example.com/').getHost()"),
    ("url-fragment-path", "url('https://example.com/p#frag').getEscapedPath()"),
],
"regex": [
    ("matches", "'abc123'.matches('[a-z]+[0-9]+')"),
    ("matches-partial", "'xabc'.matches('abc')"),
    ("matches-anchored", "'xabc'.matches('^abc$')"),
    ("matches-function-style", "matches('abc', 'b')"),
    ("matches-invalid-constant", "'abc'.matches('[')"),
    ("matches-invalid-dynamic", "'abc'.matches(object.metadata.name + '[')"),
    ("matches-re2-no-backreference", "'aa'.matches('(a)\\\\1')"),
    ("matches-unicode-class", "'é'.matches('^\\\\pL$')"),
    ("find", "'abc 123 def 456'.find('[0-9]+')"),
    ("find-missing", "'abc'.find('[0-9]+')"),
    ("find-group", "'key=value'.find('=(.*)')"),
    ("findall", "'abc 123 def 456'.findAll('[0-9]+')"),
    ("findall-limit", "'a1b2c3'.findAll('[0-9]', 2)"),
    ("findall-limit-zero", "['a1b2c3'.findAll('[0-9]', 0)]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("findall-limit-negative", "'a1b2c3'.findAll('[0-9]', -1)"),
    ("findall-empty", "['abc'.findAll('[0-9]')]", {"note": "wrapped in a one-element list so the empty value survives the runner dropping empty values"}),
    ("findall-empty-matches", "'abc'.findAll('x*')"),
    ("find-invalid-constant", "'abc'.find('(')"),
    ("find-invalid-dynamic", "'abc'.find(object.metadata.name + '(')"),
    ("findall-invalid-dynamic", "'abc'.findAll(object.metadata.name + '(')"),
    ("find-wrong-arg", "'abc'.find(1)"),
    ("matches-case-insensitive-flag", "'ABC'.matches('(?i)abc')"),
],
"core-macros": [
    ("has-present", "has(object.spec.seed)"),
    ("has-absent", "has(object.spec.missing)"),
    ("has-map-literal", "has({'a': 1}.a)"),
    ("has-non-field", "has(object)"),
    ("has-index", "has(object.spec['seed'])"),
    ("all-true", "[1, 2, 3].all(x, x > 0)"),
    ("all-false", "[1, 2, 3].all(x, x > 1)"),
    ("all-empty", "[].all(x, x > 0)"),
    ("all-map-keys", "{'a': 1, 'b': 2}.all(k, k != 'c')"),
    ("all-error-absorbed", "[0, 1].all(x, 1 / x > 5)"),
    ("all-error-propagates", "[0, 1].all(x, 1 / x > 0)"),
    ("exists-true", "[1, 2].exists(x, x == 2)"),
    ("exists-false", "[1, 2].exists(x, x == 3)"),
    ("exists-error-absorbed", "[0, 1].exists(x, 1 / x == 1)"),
    ("exists-error-propagates", "[0, 1].exists(x, 1 / x == 5)"),
    ("exists-one-true", "[1, 2, 3].exists_one(x, x > 2)"),
    ("exists-one-false", "[1, 2, 3].exists_one(x, x > 1)"),
    ("map", "[1, 2, 3].map(x, x * 2)"),
    ("map-filter", "[1, 2, 3, 4].map(x, x % 2 == 0, x * 10)"),
    ("map-on-map", "{'a': 1, 'b': 2}.map(k, k).sort()", {"note": "sorted: map iteration order is unspecified"}),
    ("filter", "[1, 2, 3, 4].filter(x, x > 2)"),
    ("filter-map", "{'a': 1, 'b': 2}.filter(k, k == 'b')"),
    ("filter-non-bool", "[1, 2].filter(x, x)"),
    ("map-nested", "[[1, 2], [3]].map(l, l.map(x, x + 1))"),
    ("exists-non-ident-var", "[1].exists(1, true)"),
    ("map-wrong-arg-count", "[1].map(x)"),
    ("shadowing", "[1, 2].map(object, object * 2)"),
    ("all-on-non-list", "(1).all(x, x > 0)"),
    ("existsone-camel-single-var", "[1, 2].existsOne(x, x == 1)"),
    ("exists-on-object-field", "object.spec.exists(k, k == 'seed')"),
    ("map-on-object-spec", "object.spec.map(k, k)"),
],
"standard": [
    ("int-add", "1 + 2"),
    ("int-overflow", "9223372036854775807 + 1"),
    ("int-negate-min", "-(-9223372036854775807 - 1)"),
    ("int-mul-overflow", "4611686018427387904 * 2"),
    ("int-divide", "7 / 2"),
    ("int-divide-negative", "-7 / 2"),
    ("int-modulo", "7 % 3"),
    ("int-modulo-negative", "-7 % 3"),
    ("int-divide-zero", "1 / 0"),
    ("int-modulo-zero", "1 % 0"),
    ("int-min-divide-minus-one", "(-9223372036854775807 - 1) / -1"),
    ("uint-add", "1u + 2u"),
    ("uint-underflow", "1u - 2u"),
    ("uint-divide-zero", "1u / 0u"),
    ("uint-large", "18446744073709551615u"),
    ("double-add", "0.1 + 0.2"),
    ("double-divide-zero", "1.0 / 0.0 > 1.0"),
    ("double-nan-compare", "0.0 / 0.0 == 0.0 / 0.0"),
    ("double-whole", "2.0"),
    ("double-exponent", "1e-7"),
    ("double-large", "1e21"),
    ("double-negative-zero", "-0.0"),
    ("mixed-arith-error", "1 + 1.0"),
    ("mixed-arith-dyn-error", "dyn(1) + dyn(1.0)"),
    ("cross-type-compare", "1 < 1.5"),
    ("cross-type-compare-uint", "1u < 2"),
    ("cross-type-equality", "1 == 1.0"),
    ("cross-type-equality-uint", "dyn(1u) == dyn(1)"),
    ("int-conversion-double", "int(3.9)"),
    ("int-conversion-negative-double", "int(-3.9)"),
    ("int-conversion-string", "int('42')"),
    ("int-conversion-string-invalid", "int('4x')"),
    ("int-conversion-double-overflow", "int(1e19)"),
    ("int-conversion-uint-overflow", "int(18446744073709551615u)"),
    ("int-conversion-timestamp", "int(timestamp('2020-01-01T00:00:00Z'))"),
    ("uint-conversion-negative", "uint(-1)"),
    ("uint-conversion-string", "uint('42')"),
    ("double-conversion-string", "double('1.5')"),
    ("double-conversion-int", "double(3)"),
    ("double-conversion-string-inf", "double('inf') > 0.0"),
    ("string-conversion-int", "string(-5)"),
    ("string-conversion-uint", "string(5u)"),
    ("string-conversion-double", "string(1.5)"),
    ("string-conversion-double-whole", "string(2.0)"),
    ("string-conversion-double-small", "string(1e-7)"),
    ("string-conversion-double-large", "string(1e21)"),
    ("string-conversion-double-precision", "string(0.1 + 0.2)"),
    ("string-conversion-bool", "string(true)"),
    ("string-conversion-bytes", "string(b'abc')"),
    ("string-conversion-bytes-invalid-utf8", "string(b'\\xff')"),
    ("string-conversion-duration", "string(duration('1h30m'))"),
    ("string-conversion-duration-fraction", "string(duration('1.5s'))"),
    ("string-conversion-duration-negative", "string(duration('-90m'))"),
    ("string-conversion-timestamp", "string(timestamp('2020-01-02T03:04:05.123Z'))"),
    ("string-conversion-timestamp-offset", "string(timestamp('2020-01-02T03:04:05+02:00'))"),
    ("string-conversion-timestamp-fraction-offset", "string(timestamp('2020-01-02T03:04:05.120+02:00'))"),
    ("string-conversion-double-exponent-six", "string(1234567.0)"),
    ("string-conversion-double-below-exponent-six", "string(123456.0)"),
    ("string-conversion-double-small-fraction", "string(0.00001234)"),
    ("string-conversion-double-ten-thousandth", "string(0.0001)"),
    ("string-conversion-negative-zero", "string(-0.0)"),
    ("string-conversion-dyn-null", "string(dyn(null))"),
    ("string-conversion-dyn-list", "string(dyn([1]))"),
    ("string-conversion-invalid-utf8-computed", "string(b'\\xff' + b'')"),
    ("string-conversion-dyn-quantity", "string(dyn(quantity('1')))"),
    ("string-conversion-duration-hour", "string(duration('1h'))"),
    ("string-conversion-null", "string(null)"),
    ("string-conversion-list", "string([1])"),
    ("bytes-conversion", "bytes('héllo')"),
    ("bool-conversion-string", "bool('true')"),
    ("bool-conversion-string-short", "bool('t')"),
    ("bool-conversion-invalid", "bool('yes')"),
    ("dyn-conversion", "dyn(5)"),
    ("type-equality", "type(1) == int"),
    ("type-of-type", "type(type(1)) == type"),
    ("type-null", "type(null) == null_type"),
    ("type-map", "type({'a': 1}) == map"),
    ("type-object", "type(object) == map"),
    ("type-name-string", "string(type(1))"),
    ("logical-and-error-absorption", "false && (1 / 0 == 1)"),
    ("logical-or-error-absorption", "(1 / 0 == 1) || true"),
    ("logical-and-error", "true && (1 / 0 == 1)"),
    ("ternary", "true ? 'yes' : 'no'"),
    ("ternary-non-bool", "1 ? 'yes' : 'no'"),
    ("not", "!true"),
    ("in-map", "'a' in {'a': 1}"),
    ("map-index-missing", "{'a': 1}['b']"),
    ("map-select-missing", "object.spec.missing"),
    ("map-key-int-double-lookup", "{1: 'one'}[1.0]"),
    ("map-key-bool", "{true: 'y'}"),
    ("map-key-int", "{1: 'one'}"),
    ("map-duplicate-key", "{'a': 1, 'a': 2}"),
    ("map-mixed-values", "{'a': 1, 'b': 'x'}"),
    ("map-equality", "{'a': 1} == {'a': 1}"),
    ("map-size", "size({'a': 1, 'b': 2})"),
    ("size-bytes", "size(b'abc')"),
    ("bytes-concat", "b'a' + b'b'"),
    ("bytes-compare", "b'a' < b'b'"),
    ("null-equality", "null == null"),
    ("null-compare-int", "dyn(null) == 1"),
    ("string-bytes-literal-escape", "'\\x41\\u00e9\\101'"),
    ("raw-string", "r'a\\nb'"),
    ("triple-quoted", "'''a'b'''"),
    ("uint-literal-hex", "0xFFu"),
    ("int-literal-hex", "0x10"),
    ("duration-add", "string(duration('1h') + duration('30m'))"),
    ("duration-compare", "duration('1h') > duration('59m')"),
    ("duration-gethours", "duration('3h30m').getHours()"),
    ("duration-getminutes", "duration('3h30m').getMinutes()"),
    ("duration-getseconds", "duration('1m30s').getSeconds()"),
    ("duration-getmilliseconds", "duration('1.5s').getMilliseconds()"),
    ("duration-units", "string(duration('1h2m3s4ms5us6ns'))"),
    ("duration-invalid-constant", "duration('1d')"),
    ("duration-invalid-dynamic", "duration(object.metadata.name)"),
    ("duration-negative-getminutes", "duration('-90s').getMinutes()"),
    ("duration-overflow", "duration('2562047h') + duration('1h')"),
    ("duration-conversion-int", "duration(5)"),
    ("timestamp-add-duration", "string(timestamp('2020-01-01T00:00:00Z') + duration('36h'))"),
    ("timestamp-subtract", "string(timestamp('2020-01-02T00:00:00Z') - timestamp('2020-01-01T00:00:00Z'))"),
    ("timestamp-subtract-duration", "string(timestamp('2020-01-01T00:00:00Z') - duration('1s'))"),
    ("timestamp-compare", "timestamp('2020-01-01T00:00:00Z') < timestamp('2021-01-01T00:00:00Z')"),
    ("timestamp-getfullyear", "timestamp('2020-03-04T05:06:07Z').getFullYear()"),
    ("timestamp-getmonth", "timestamp('2020-03-04T05:06:07Z').getMonth()"),
    ("timestamp-getdate", "timestamp('2020-03-04T05:06:07Z').getDate()"),
    ("timestamp-getdayofmonth", "timestamp('2020-03-04T05:06:07Z').getDayOfMonth()"),
    ("timestamp-getdayofweek", "timestamp('2020-03-04T05:06:07Z').getDayOfWeek()"),
    ("timestamp-getdayofyear", "timestamp('2020-03-04T05:06:07Z').getDayOfYear()"),
    ("timestamp-gethours", "timestamp('2020-03-04T05:06:07Z').getHours()"),
    ("timestamp-getminutes", "timestamp('2020-03-04T05:06:07Z').getMinutes()"),
    ("timestamp-getseconds", "timestamp('2020-03-04T05:06:07Z').getSeconds()"),
    ("timestamp-getmilliseconds", "timestamp('2020-03-04T05:06:07.089Z').getMilliseconds()"),
    ("timestamp-gethours-timezone", "timestamp('2020-03-04T05:06:07Z').getHours('America/New_York')"),
    ("timestamp-gethours-offset", "timestamp('2020-03-04T05:06:07Z').getHours('+05:30')"),
    ("timestamp-getfullyear-timezone", "timestamp('2020-01-01T01:00:00Z').getFullYear('America/Los_Angeles')"),
    ("timestamp-invalid-timezone", "timestamp('2020-03-04T05:06:07Z').getHours('Mars/Base')"),
    ("timestamp-invalid-constant", "timestamp('2020-13-01T00:00:00Z')"),
    ("timestamp-invalid-dynamic", "timestamp(object.metadata.name)"),
    ("timestamp-from-int", "string(timestamp(86400))"),
    ("timestamp-nanos", "string(timestamp('2020-01-01T00:00:00.123456789Z'))"),
    ("timestamp-out-of-range", "string(timestamp('2020-01-01T00:00:00Z') + duration('87600000h'))"),
    ("timestamp-year-zero", "timestamp('0000-01-01T00:00:00Z')"),
    ("timestamp-lowercase-t", "timestamp('2020-01-01t00:00:00z')"),
    ("timestamp-no-timezone", "timestamp('2020-01-01T00:00:00')"),
    ("duration-marshal", "duration('1m30.5s')"),
    ("timestamp-marshal-fraction", "timestamp('2020-01-01T00:00:00.500Z')"),
    ("bytes-marshal", "b'\\x00\\xff'"),
    ("string-in-list-cross-type", "'a' in ['a', 'b']"),
    ("homogeneous-map-literal-keys", "{'a': 1, 2: 'b'}"),
    ("homogeneous-nested-list", "[[1], ['a']]"),
    ("homogeneous-dyn-escape", "[dyn(1), dyn('a')]"),
    ("null-in-list", "[null, 1]"),
    ("list-of-maps-different-values", "[{'a': 1}, {'a': 'x'}]"),
    ("unknown-variable", "nope"),
    ("unknown-function", "nope()"),
    ("parse-error", "1 +"),
    ("reserved-identifier", "[1].map(if, if)"),
    ("request-namespace", "request.namespace"),
    ("request-operation", "request.operation"),
    ("request-username", "request.userInfo.username"),
    ("oldobject-null", "oldObject == null"),
    ("params-null", "params == null"),
    ("namespaceobject-name", "namespaceObject.metadata.name"),
    ("object-metadata-name", "object.metadata.name"),
    ("variables-undefined", "variables.x"),
    ("string-multiply-error", "'a' * 3"),
    ("deep-nesting", "[[[[[[[[[[1]]]]]]]]]]"),
    ("equality-different-types", "dyn('1') == dyn(1)"),
    ("string-index-error", "'abc'[0]"),
    ("exponent-overflow-literal", "1e400"),
],
"jsonpatch": [
    ("escapekey", "jsonpatch.escapeKey('a/b~c')"),
    ("escapekey-plain", "jsonpatch.escapeKey('abc')"),
    ("escapekey-order", "jsonpatch.escapeKey('~1')"),
    ("escapekey-wrong-type", "jsonpatch.escapeKey(1)"),
    ("value-list-of-maps", "[{'a': [1, 'x']}]"),
    ("value-nested-optional", "[optional.of(1)]"),
    ("value-int-max", "9223372036854775807"),
    ("value-uint-max", "18446744073709551615u"),
    ("value-object-spec", "object.spec"),
    ("value-object-metadata", "object.metadata"),
],
"absent": [
    ("cel-bind", "cel.bind(x, 1, x + 1)"),
    ("cel-block", "cel.block([1], cel.index(0))"),
    ("math-greatest", "math.greatest(1, 2)"),
    ("math-least", "math.least([1, 2])"),
    ("math-ceil", "math.ceil(1.2)"),
    ("math-floor", "math.floor(1.2)"),
    ("math-round", "math.round(1.5)"),
    ("math-trunc", "math.trunc(1.5)"),
    ("math-abs", "math.abs(-1)"),
    ("math-sign", "math.sign(-1)"),
    ("math-isnan", "math.isNaN(1.0)"),
    ("math-isinf", "math.isInf(1.0)"),
    ("math-isfinite", "math.isFinite(1.0)"),
    ("math-bitor", "math.bitOr(1, 2)"),
    ("math-bitand", "math.bitAnd(1, 2)"),
    ("math-bitxor", "math.bitXor(1, 2)"),
    ("math-bitnot", "math.bitNot(1)"),
    ("math-bitshiftleft", "math.bitShiftLeft(1, 2)"),
    ("math-bitshiftright", "math.bitShiftRight(4, 1)"),
    ("math-sqrt", "math.sqrt(4)"),
    ("base64-encode", "base64.encode(b'abc')"),
    ("base64-decode", "base64.decode('YWJj')"),
    ("strings-reverse", "'abc'.reverse()"),
    ("proto-getext", "proto.getExt(object, google.expr.proto2.test.int32_ext)"),
    ("proto-hasext", "proto.hasExt(object, google.expr.proto2.test.int32_ext)"),
    ("regex-replace", "regex.replace('abc', 'b', 'x')"),
    ("regex-extract", "regex.extract('abc', 'b')"),
    ("regex-extractall", "regex.extractAll('abc', 'b')"),
    ("strings-format-function", "strings.format('%s', ['a'])"),
    ("quantity-mul", "quantity('2').mul(3).isInteger()"),
    ("quantity-div", "quantity('6').div(3).isInteger()"),
    ("quantity-divint", "quantity('6').divInt(3)"),
    ("image-library", "image('nginx:1.2').containsDigest()"),
    ("isimage", "isImage('nginx')"),
    ("timestamp-now", "now()"),
    ("uuid-function", "uuid()"),
    ("string-trimprefix", "'abc'.trimPrefix('a')"),
    ("string-contains-any", "'abc'.containsAny(['a'])"),
    ("list-contains", "[1, 2].contains(1)"),
    ("map-keys", "{'a': 1}.keys()"),
    ("semver-v2-functions", "semver('1.2.3').prerelease()"),
    ("ext-strings-v3-indexof-ascii", "'abc'.lastIndexOf('b', 0, 1)"),
    ("abs-global", "abs(-1)"),
    ("max-global", "max(1, 2)"),
    ("getquery-on-url-string", "getQuery('https://a/?x=1')"),
],
"typing": [
    ("equality-int-double", "1 == 1.0"),
    ("equality-int-uint", "int('1') == 1u"),
    ("equality-lists-of-other-numbers", "[1] == [1.0]"),
    ("equality-maps-of-other-numbers", "{'a': 1} == {'a': 1.0}"),
    ("equality-dyn-number", "dyn(1) == 1.0 && int('1') == dyn(1u)"),
    ("equality-string-null", "request.namespace == null"),
    ("equality-int-null", "null == 1"),
    ("equality-list-null", "[1] == null"),
    ("equality-timestamp-null", "timestamp('2020-01-01T00:00:00Z') == null"),
    ("equality-object-null", "request.kind == null"),
    ("equality-optionals-of-other-types", "optional.of(1) == optional.of('a')"),
    ("equality-none-some", "optional.none() == optional.of(1)"),
    ("equality-type-values", "type(1) == string"),
    ("in-null-list-int", "null in [1]"),
    ("in-int-list-null", "1 in [null]"),
    ("in-uint-list-int", "1u in [1]"),
    ("in-map-key", "1 in {1: 'a'}"),
    ("index-map-uint-key", "{1: 'a'}[1u]"),
    ("index-list-dyn-uint", "[1, 2][dyn(1u)]"),
    ("indexof-uint-in-list-int", "[1, 2].indexOf(1u)"),
    ("indexof-dyn-in-list-int", "[1].indexOf(dyn('a'))"),
    ("sets-intersects-other-types", "sets.intersects([1], ['a'])"),
    ("sets-contains-dyn-element", "sets.contains([1], [dyn(1.0)])"),
    ("join-int-separator", "['a'].join(1)"),
    ("join-dyn-list-no-separator", "dyn([1, 2]).join()"),
    ("join-dyn-string", "dyn('a').join('-')"),
    ("sort-list-of-lists", "[[1]].sort()"),
    ("sortby-map-keys", "[{'a': 1}].sortBy(x, x)"),
    ("optional-or-other-type", "optional.of(1).or(optional.of('a'))"),
    ("optional-or-non-optional", "optional.of(1).or(1)"),
    ("optional-list-entry-non-optional", "[?1, 2]"),
    ("optional-unwrapopt-element-type", "[optional.of(1)].unwrapOpt()[0] == 'a'"),
    ("optional-orvalue-result-type", "optional.none().orValue(1) == 'a'"),
    ("logical-and-int", "true && 1"),
    ("logical-or-int", "1 || false"),
    ("not-int", "!1"),
    ("all-int-predicate", "[1, 2].all(x, x)"),
    ("exists-int-predicate", "[1].exists(x, x)"),
    ("exists-one-int-predicate", "[1].exists_one(x, x)"),
    ("map-filter-int-predicate", "[1].map(x, x, x)"),
    ("all-null-predicate", "[1, 2].all(x, null)"),
    ("all-map-key-predicate", "{'a': [1]}.all(k, k)"),
    ("range-string", "'abc'.all(c, true)"),
    ("filter-after-map", "[1].map(x, x).filter(y, y)"),
    ("exists-after-filter", "[1, 2].filter(x, x > 1).exists(y, y)"),
    ("map-element-type", "[1].map(x, [x]).exists(l, l[0] == 'a')"),
    ("two-var-all-index-predicate", "[1, 2].all(i, v, i)"),
    ("two-var-exists-map-value-predicate", "{'a': 1}.exists(k, v, v)"),
    ("list-int-null", "[1, null]"),
    ("list-nulls", "[null, null]"),
    ("list-maps-null-value", "[{'a': null}, {'a': 1}]"),
    ("list-lists-null", "[[null], [1]]"),
    ("list-empty-and-non-empty", "[[1], []]"),
    ("map-values-null-int", "{'a': null, 'b': 1}"),
    ("duration-int-expression", "duration(1 + 1)"),
    ("timestamp-lowercase-z", "timestamp('2020-01-01T00:00:00z')"),
    ("string-of-type-ident", "string(int)"),
    ("authz-group-int", "authorizer.group(1)"),
    ("authz-resource-on-path", "authorizer.path('/x').resource('pods')"),
    ("authz-check-on-authorizer", "authorizer.check('get')"),
    ("authz-check-on-group", "authorizer.group('').check('get')"),
    ("authz-path-check-int", "authorizer.path('/x').check(1)"),
    ("authz-service-account-one-arg", "authorizer.serviceAccount('ns')"),
    ("authz-allowed-on-resource-check", "authorizer.group('').resource('pods').allowed()"),
    ("authz-check-on-string", "'x'.check('get')"),
],
}

# ---------------------------------------------------------------------------
# Case shape
# ---------------------------------------------------------------------------
NAMESPACE = "default"
GROUP, VERSION, KIND, PLURAL = "example.com", "v1", "Probe", "probes"

POLICY = lambda expr: {
    "apiVersion": "admissionregistration.k8s.io/v1beta1",
    "kind": "MutatingAdmissionPolicy",
    "metadata": {"name": "env"},
    "spec": {
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [GROUP], "apiVersions": [VERSION],
            "operations": ["CREATE"], "resources": [PLURAL]}]},
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
        "mutations": [{"patchType": "JSONPatch",
                       "jsonPatch": {"expression": PREFIX + expr + SUFFIX}}],
    },
}
BINDING = {
    "apiVersion": "admissionregistration.k8s.io/v1beta1",
    "kind": "MutatingAdmissionPolicyBinding",
    "metadata": {"name": "env-binding"},
    "spec": {"policyName": "env"},
}
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
SPEC_SCHEMA = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": PLURAL + "." + GROUP},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "probe", "kind": KIND, "listKind": KIND + "List"},
        "versions": [{"name": VERSION, "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                          "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                          "metadata": {"type": "object"}, "spec": SPEC_SCHEMA}}}}],
    },
}
# The same schema, as maporacle takes it (OpenAPI v3 components of the group-version).
ORACLE_SCHEMAS = {"apis/%s/%s" % (GROUP, VERSION): {
    "com.example.v1.Probe": {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": GROUP, "version": VERSION, "kind": KIND}],
        "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                       "metadata": {"type": "object"}, "spec": SPEC_SCHEMA}}}}
REQUEST = {
    "operation": "CREATE",
    "kind": {"group": GROUP, "version": VERSION, "kind": KIND},
    "resource": {"group": GROUP, "version": VERSION, "resource": PLURAL},
    "name": "p", "namespace": NAMESPACE,
    "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
}
OBJECT = {"apiVersion": GROUP + "/" + VERSION, "kind": KIND,
          "metadata": {"name": "p", "namespace": NAMESPACE}, "spec": {"seed": 1}}
# Decisions an "allow" probe states for the runner (maporacle's "allow" allows all).
ALLOW_DECISIONS = [
    {"user": "alice", "group": "", "resource": "pods", "namespace": NAMESPACE, "verb": "get", "allowed": True},
    {"user": "alice", "path": "/healthz", "verb": "get", "allowed": True},
]

DENIAL_PREFIX = "policy 'env' with binding 'env-binding' denied request: "
SHAPE_ERRORS = ["not found", "no schema", "no resource mapping", "decoding", "ServiceUnavailable"]


def oracle_input(expr, opts):
    return {
        "policies": [POLICY(expr)], "bindings": [BINDING], "noAutoBinding": True,
        "namespaces": [NS],
        "resources": [{"group": GROUP, "version": VERSION, "kind": KIND,
                       "resource": PLURAL, "namespaced": True}],
        "schemas": ORACLE_SCHEMAS,
        "authorizer": opts.get("authorizer", "deny"),
        "request": REQUEST, "object": OBJECT,
    }


def run_oracle(oracle, expr, opts):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(oracle_input(expr, opts), f)
        path = f.name
    try:
        r = subprocess.run([str(oracle)] + ORACLE_FLAGS + [path],
                           capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(path)
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise SystemExit("maporacle gave no JSON for %r: rc=%s stdout=%r stderr=%r"
                         % (expr, r.returncode, r.stdout, r.stderr[-2000:]))


def expectation(name, expr, out):
    """maporacle output -> (expect dict, short outcome text); asserts the shape."""
    if out.get("allowed") is True:
        obj = out.get("object")
        assert isinstance(obj, dict), (name, out)
        spec = obj.get("spec", {})
        assert "probe" in spec, ("probe not applied", name, out)
        rest = {k: v for k, v in obj.items() if k != "spec"}
        assert rest == {k: v for k, v in OBJECT.items() if k != "spec"}, ("object changed", name, out)
        assert {k: v for k, v in spec.items() if k != "probe"} == OBJECT["spec"], (name, out)
        # FORMAT.md drops nulls and empty maps/lists before comparing, so a
        # probe whose value is one of those would not check anything.
        assert spec["probe"] not in (None, [], {}), ("empty probe value: wrap EXPR in [...]", name, out)
        return {"object": obj}, "value " + json.dumps(spec["probe"], ensure_ascii=False)
    assert "error" not in out and "stage" not in out, ("oracle error", name, out)
    status = out.get("status") or {}
    msg = status.get("message", "")
    assert msg.startswith(DENIAL_PREFIX), ("unexpected denial shape", name, out)
    for bad in SHAPE_ERRORS:
        assert bad not in msg or "resulted in error" in msg or "compilation failed" in msg, \
            ("case-shape error", name, msg)
    text = msg[len(DENIAL_PREFIX):].split("\n")[0]
    if text.startswith("compilation failed: "):
        contains = text  # compilation failed: ERROR: <input>:L:C: first error
    else:
        contains = text
    return {"rejected": {"messageContains": contains}}, "denied: " + text


def yaml_scalar(v):
    return json.dumps(v, ensure_ascii=False)


def render_case(stem, suffix, expr, opts, expect, outcome):
    name = "env-%s-%s" % (stem, suffix)
    desc = "[environment] %s -> %s" % (expr, outcome)
    if len(desc) > 400:
        desc = desc[:397] + "..."
    if opts.get("note"):
        desc += " (" + opts["note"] + ")"
    lines = [
        "name: " + yaml_scalar(name),
        "description: " + yaml_scalar(desc),
        "source: " + yaml_scalar(SOURCES[stem] + "; expectation from maporacle (k8s.io/apiserver v0.36.2)"),
        "policies:",
        "- " + yaml_scalar(POLICY(expr)),
        "bindings:",
        "- " + yaml_scalar(BINDING),
        "resources:",
        "- " + yaml_scalar(NS),
        "- " + yaml_scalar(CRD),
    ]
    if opts.get("authorizer") == "allow":
        lines.append("authorizer:")
        lines += ["- " + yaml_scalar(d) for d in ALLOW_DECISIONS]
    lines += [
        "request: " + yaml_scalar(REQUEST),
        "object: " + yaml_scalar(OBJECT),
        "expect: " + yaml_scalar(expect),
    ]
    return "\n".join(lines) + "\n"


HEADER = """# Environment parity probes ({stem}): one CEL expression per case, written
# into spec.probe of a custom kind by a JSONPatch mutation, with upstream's
# outcome (k8s.io/apiserver v0.36.2 via maporacle). GENERATED by
# tools/environment_parity.py: edit the probe list there and re-run it.
"""


def all_probes():
    for stem, probes in PROBES.items():
        for p in probes:
            suffix, expr = p[0], p[1]
            opts = p[2] if len(p) > 2 else {}
            yield stem, suffix, expr, opts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default=str(DEFAULT_ORACLE))
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--only")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if not os.access(args.oracle, os.X_OK):
        raise SystemExit("maporacle not found at %s: unpack /work/shared/upstream/maporacle.xz there" % args.oracle)

    probes = list(all_probes())
    names = [("env-%s-%s" % (s, x)) for s, x, _, _ in probes]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, ("duplicate case names", dup)
    if args.only:
        probes = [p for p in probes if args.only in "env-%s-%s" % (p[0], p[1])]

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        outs = list(ex.map(lambda p: run_oracle(args.oracle, p[2], p[3]), probes))

    files = {}
    for (stem, suffix, expr, opts), out in zip(probes, outs):
        expect, outcome = expectation("env-%s-%s" % (stem, suffix), expr, out)
        if args.only:
            print("env-%s-%s: %s\n    %s" % (stem, suffix, expr, outcome))
            continue
        files.setdefault(stem, []).append(render_case(stem, suffix, expr, opts, expect, outcome))
    if args.only:
        return 0

    OUT.mkdir(parents=True, exist_ok=True)
    differ = []
    for stem, cases in files.items():
        text = HEADER.format(stem=stem) + "---\n".join(cases)
        path = OUT / (stem + ".yaml")
        if args.check:
            if not path.exists() or path.read_text() != text:
                differ.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
    if args.check:
        stale = sorted(p.name for p in OUT.glob("*.yaml") if p.stem not in files)
        if differ or stale:
            print("out of date:", ", ".join(differ + stale))
            return 1
        print("up to date: %d cases in %d files" % (len(probes), len(files)))
        return 0
    print("wrote %d cases in %d files under %s" % (len(probes), len(files), OUT.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
