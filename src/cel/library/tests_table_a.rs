//! Table of upstream expression → result pairs for the lists, regex, sets,
//! URL and format libraries, evaluated through `CelEnvironment::shared()`.
//!
//! Every entry names where it comes from: a test of kubernetes/kubernetes
//! (`apiextensions-apiserver/pkg/apiserver/schema/cel/validation_test.go`,
//! `apiserver/pkg/cel/library/format_test.go`), of cel-go
//! (`ext/sets_test.go`), or a documented example (the doc comments of
//! `apiserver/pkg/cel/library/*.go`, cel-go's `ext/README.md`). Upstream's
//! `valid` rules are expected to evaluate to `true`.
//!
//! `self` is bound to the object of the upstream test, its typed fields
//! (durations, dates) written as CEL values, and `x` to the `[5, 4, 3, 2, 1]`
//! of the cel-go sets tests.

use crate::cel::{convert, error_text, CelEnvironment};
use serde_json::Value as Json;

/// What an expression gives upstream.
enum Want {
    /// This value, as JSON.
    V(&'static str),
    /// An error with exactly this text.
    E(&'static str),
    /// An error whose text contains this (upstream reports it at another
    /// stage, with another prefix).
    C(&'static str),
}
use Want::*;

const VALIDATION_TEST_LISTS: &str = "apiextensions-apiserver schema/cel/validation_test.go TestValidationExpressions \"stdlib list functions\"";
const VALIDATION_TEST_REGEX: &str = "apiextensions-apiserver schema/cel/validation_test.go TestValidationExpressions \"stdlib regex functions\"";
const VALIDATION_TEST_URL: &str = "apiextensions-apiserver schema/cel/validation_test.go TestValidationExpressions \"URL parsing\"";
const LISTS_GO_DOC: &str = "apiserver/pkg/cel/library/lists.go Lists() doc examples";
const REGEX_GO_DOC: &str = "apiserver/pkg/cel/library/regex.go Regex() doc examples";
const URLS_GO_DOC: &str = "apiserver/pkg/cel/library/urls.go URLs() doc examples";
const SETS_TEST: &str = "cel-go ext/sets_test.go TestSets";
/// The TestSets cases with mixed-type list literals, their elements made
/// `dyn`: Kubernetes' environment refuses mixed-type literals
/// (`cel.HomogeneousAggregateLiterals`), cel-go's test environment does not.
const SETS_TEST_DYN: &str = "cel-go ext/sets_test.go TestSets (elements made dyn)";
const SETS_DOC: &str = "cel-go ext/sets.go Sets() doc examples";
const FORMAT_TEST: &str = "apiserver/pkg/cel/library/format_test.go TestFormat";

/// The object of the upstream tests. Its values are `dyn`, as a schema
/// declares them upstream: a literal of mixed value types would not compile
/// (`cel.HomogeneousAggregateLiterals`).
const SELF: &str = r#"{
  'ints': dyn([1, 2, 2, 3]), 'unsortedInts': dyn([2, 1]), 'emptyInts': dyn([]),
  'doubles': dyn([1.0, 2.0, 2.0, 3.0]), 'unsortedDoubles': dyn([2.0, 1.0]), 'emptyDoubles': dyn([]),
  'intBackedDoubles': dyn([1.0, 2.0, 2.0, 3.0]), 'unsortedIntBackedDDoubles': dyn([2.0, 1.0]), 'emptyIntBackedDDoubles': dyn([]),
  'durations': dyn([duration('1s'), duration('1m'), duration('1m'), duration('1h')]),
  'unsortedDurations': dyn([duration('1m'), duration('1s')]), 'emptyDurations': dyn([]),
  'strings': dyn(['a', 'b', 'b', 'c']), 'unsortedStrings': dyn(['b', 'a']), 'emptyStrings': dyn([]),
  'dates': dyn([timestamp('2000-01-01T00:00:00Z'), timestamp('2000-02-01T00:00:00Z'), timestamp('2000-02-01T00:00:00Z'), timestamp('2010-01-01T00:00:00Z')]),
  'unsortedDates': dyn([timestamp('2000-02-01T00:00:00Z'), timestamp('2000-01-01T00:00:00Z')]), 'emptyDates': dyn([]),
  'objs': dyn([{'f1': 'a', 'f2': 'a'}, {'f1': 'a', 'f2': 'b'}, {'f1': 'a', 'f2': 'b'}, {'f1': 'a', 'f2': 'c'}]),
  'str': dyn('this is a 123 string 456'),
  'url': dyn('https://user:pass@kubernetes.io:80/docs/home?k1=a&k2=b&k2=c#anchor')
}"#;

#[rustfmt::skip]
const CASES: &[(&str, &str, Want)] = &[
    // ---- lists ----
    (VALIDATION_TEST_LISTS, "self.ints.sum() == 8", V("true")),
    (VALIDATION_TEST_LISTS, "self.ints.min() == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.ints.max() == 3", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyInts.sum() == 0", V("true")),
    (VALIDATION_TEST_LISTS, "self.ints.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyInts.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.unsortedInts.isSorted() == false", V("true")),
    (VALIDATION_TEST_LISTS, "self.ints.indexOf(2) == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.ints.lastIndexOf(2) == 2", V("true")),
    (VALIDATION_TEST_LISTS, "self.ints.indexOf(10) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.ints.lastIndexOf(10) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.sum() == 8.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.min() == 1.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.max() == 3.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyDoubles.sum() == 0.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyDoubles.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.unsortedDoubles.isSorted() == false", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.indexOf(2.0) == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.lastIndexOf(2.0) == 2", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.indexOf(10.0) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.doubles.lastIndexOf(10.0) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.sum() == 8.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.min() == 1.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.max() == 3.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyIntBackedDDoubles.sum() == 0.0", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.unsortedIntBackedDDoubles.isSorted() == false", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.indexOf(2.0) == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.lastIndexOf(2.0) == 2", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.indexOf(10.0) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.intBackedDoubles.lastIndexOf(10.0) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.sum() == duration('1h2m1s')", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.min() == duration('1s')", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.max() == duration('1h')", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyDurations.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.unsortedDurations.isSorted() == false", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.indexOf(duration('1m')) == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.lastIndexOf(duration('1m')) == 2", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.indexOf(duration('2m')) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.durations.lastIndexOf(duration('2m')) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.strings.min() == 'a'", V("true")),
    (VALIDATION_TEST_LISTS, "self.strings.max() == 'c'", V("true")),
    (VALIDATION_TEST_LISTS, "self.strings.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyStrings.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.unsortedStrings.isSorted() == false", V("true")),
    (VALIDATION_TEST_LISTS, "self.strings.indexOf('b') == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.strings.lastIndexOf('b') == 2", V("true")),
    (VALIDATION_TEST_LISTS, "self.strings.indexOf('x') == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.strings.lastIndexOf('x') == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.dates.min() == timestamp('2000-01-01T00:00:00.000Z')", V("true")),
    (VALIDATION_TEST_LISTS, "self.dates.max() == timestamp('2010-01-01T00:00:00.000Z')", V("true")),
    (VALIDATION_TEST_LISTS, "self.dates.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyDates.isSorted()", V("true")),
    (VALIDATION_TEST_LISTS, "self.unsortedDates.isSorted() == false", V("true")),
    (VALIDATION_TEST_LISTS, "self.dates.indexOf(timestamp('2000-02-01T00:00:00.000Z')) == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.dates.lastIndexOf(timestamp('2000-02-01T00:00:00.000Z')) == 2", V("true")),
    (VALIDATION_TEST_LISTS, "self.dates.indexOf(timestamp('2005-02-01T00:00:00.000Z')) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "self.dates.lastIndexOf(timestamp('2005-02-01T00:00:00.000Z')) == -1", V("true")),
    (VALIDATION_TEST_LISTS, "[[1], [2]].indexOf([1]) == 0", V("true")),
    (VALIDATION_TEST_LISTS, "[{'a': 1}, {'b': 2}].lastIndexOf({'b': 2}) == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.objs.indexOf(self.objs[1]) == 1", V("true")),
    (VALIDATION_TEST_LISTS, "self.objs.lastIndexOf(self.objs[1]) == 2", V("true")),
    (VALIDATION_TEST_LISTS, "([0] + self.emptyInts).min() == 0", V("true")),
    (VALIDATION_TEST_LISTS, "dyn([]).sum() == 0", V("true")),
    (VALIDATION_TEST_LISTS, "dyn([1, 2]).sum() == 3", V("true")),
    (VALIDATION_TEST_LISTS, "dyn([1.0, 2.0]).sum() == 3.0", V("true")),
    (VALIDATION_TEST_LISTS, "[].sum() == 0", V("true")),
    (VALIDATION_TEST_LISTS, "self.emptyInts.min() == 1", E("min called on empty list")),
    (VALIDATION_TEST_LISTS, "self.emptyInts.max() == 3", E("max called on empty list")),
    (VALIDATION_TEST_LISTS, "self.emptyDoubles.min() == 1.0", E("min called on empty list")),
    (VALIDATION_TEST_LISTS, "self.emptyDoubles.max() == 3.0", E("max called on empty list")),
    (VALIDATION_TEST_LISTS, "self.emptyStrings.min() == 'a'", E("min called on empty list")),
    (VALIDATION_TEST_LISTS, "self.emptyStrings.max() == 'c'", E("max called on empty list")),

    (LISTS_GO_DOC, "[1, 2, 3].isSorted()", V("true")),
    (LISTS_GO_DOC, "['a', 'b', 'b', 'c'].isSorted()", V("true")),
    (LISTS_GO_DOC, "[2.0, 1.0].isSorted()", V("false")),
    (LISTS_GO_DOC, "[1].isSorted()", V("true")),
    (LISTS_GO_DOC, "[].isSorted()", V("true")),
    (LISTS_GO_DOC, "[1, 3].sum()", V("4")),
    (LISTS_GO_DOC, "[1.0, 3.0].sum()", V("4.0")),
    (LISTS_GO_DOC, "[1, 3].min()", V("1")),
    (LISTS_GO_DOC, "[1, 3].max()", V("3")),
    (LISTS_GO_DOC, "[].min()", E("min called on empty list")),
    (LISTS_GO_DOC, "[1].min()", V("1")),
    (LISTS_GO_DOC, "[1, 2, 2, 3].indexOf(2)", V("1")),
    (LISTS_GO_DOC, "['a', 'b', 'b', 'c'].lastIndexOf('b')", V("2")),
    (LISTS_GO_DOC, "[1.0].indexOf(1.1)", V("-1")),
    (LISTS_GO_DOC, "[].indexOf('string')", V("-1")),
    // ---- regex ----
    (VALIDATION_TEST_REGEX, "self.str.find('[0-9]+') == '123'", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.find('[0-9]+') != '456'", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.find('xyz') == ''", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('[0-9]+') == ['123', '456']", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('[0-9]+', 0) == []", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('[0-9]+', 1) == ['123']", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('[0-9]+', 2) == ['123', '456']", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('[0-9]+', 3) == ['123', '456']", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('[0-9]+', -1) == ['123', '456']", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('xyz') == []", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.findAll('xyz', 1) == []", V("true")),
    (VALIDATION_TEST_REGEX, "self.str.find(')') == ''", C("error parsing regexp: unexpected ): `)`")),
    (VALIDATION_TEST_REGEX, "self.str.findAll(')') == []", C("error parsing regexp: unexpected ): `)`")),
    (VALIDATION_TEST_REGEX, "self.str.findAll(')', 1) == []", C("error parsing regexp: unexpected ): `)`")),
    (REGEX_GO_DOC, "\"abc 123\".find('xyz')", V("\"\"")),
    (REGEX_GO_DOC, "\"123 abc 456\".findAll('[0-9]*', 1)", V("[\"123\"]")),
    (REGEX_GO_DOC, "\"123 abc 456\".findAll('xyz')", V("[]")),
    // ---- URLs ----
    (VALIDATION_TEST_URL, "url('/path').getScheme() == ''", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/').getScheme() == 'https'", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com:80/').getHost() == 'example.com:80'", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/').getHost() == 'example.com'", V("true")),
    (VALIDATION_TEST_URL, "url('https://[::1]:80/').getHost() == '[::1]:80'", V("true")),
    (VALIDATION_TEST_URL, "url('https://[::1]/').getHost() == '[::1]'", V("true")),
    (VALIDATION_TEST_URL, "url('/path').getHost() == ''", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com:80/').getHostname() == 'example.com'", V("true")),
    (VALIDATION_TEST_URL, "url('https://127.0.0.1/').getHostname() == '127.0.0.1'", V("true")),
    (VALIDATION_TEST_URL, "url('https://[::1]/').getHostname() == '::1'", V("true")),
    (VALIDATION_TEST_URL, "url('/path').getHostname() == ''", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com:80/').getPort() == '80'", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/').getPort() == ''", V("true")),
    (VALIDATION_TEST_URL, "url('/path').getPort() == ''", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/path').getEscapedPath() == '/path'", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/with space/').getEscapedPath() == '/with%20space/'", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com').getEscapedPath() == ''", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == { 'k1': ['a'], 'k2': ['b', 'c']}", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/path?key with spaces=value with spaces').getQuery() == { 'key with spaces': ['value with spaces']}", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/path?').getQuery() == {}", V("true")),
    (VALIDATION_TEST_URL, "url('https://example.com/path').getQuery() == {}", V("true")),
    (VALIDATION_TEST_URL, "url(self.url).getScheme() == 'https'", V("true")),
    (VALIDATION_TEST_URL, "url(self.url).getHost() == 'kubernetes.io:80'", V("true")),
    (VALIDATION_TEST_URL, "url(self.url).getHostname() == 'kubernetes.io'", V("true")),
    (VALIDATION_TEST_URL, "url(self.url).getPort() == '80'", V("true")),
    (VALIDATION_TEST_URL, "url(self.url).getEscapedPath() == '/docs/home'", V("true")),
    (VALIDATION_TEST_URL, "url(self.url).getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}", V("true")),
    (VALIDATION_TEST_URL, "isURL('https://user:pass@example.com:80/path?query=val#fragment')", V("true")),
    (VALIDATION_TEST_URL, "isURL('/path') == true", V("true")),
    (VALIDATION_TEST_URL, "isURL('https://a:b:c/') == false", V("true")),
    (VALIDATION_TEST_URL, "isURL('../relative-path') == false", V("true")),
    (URLS_GO_DOC, "isURL('/absolute-path')", V("true")),
    (URLS_GO_DOC, "url('https://a:b:c/')", C("URL parse error during conversion from string: ")),
    (URLS_GO_DOC, "url('../relative-path')", C("URL parse error during conversion from string: ")),
    (URLS_GO_DOC, "url('https://127.0.0.1:80/').getHostname()", V("\"127.0.0.1\"")),
    (URLS_GO_DOC, "url('https://[::1]:80/').getHostname()", V("\"::1\"")),
    (URLS_GO_DOC, "url('https://example.com/path with spaces/').getEscapedPath()", V("\"/path%20with%20spaces/\"")),
    (URLS_GO_DOC, "url('https://example.com/').getScheme()", V("\"https\"")),
    (URLS_GO_DOC, "url('https://[::1]:80/').getHost()", V("\"[::1]:80\"")),
    // ---- sets ----
    (SETS_TEST, "sets.contains(x, [1, 2, 3])", V("true")),
    (SETS_TEST, "sets.contains(x, [1, 1, 1, 1, 1])", V("true")),
    (SETS_TEST, "sets.contains([], [])", V("true")),
    (SETS_TEST, "sets.contains([1], [])", V("true")),
    (SETS_TEST, "sets.contains([1], [1])", V("true")),
    (SETS_TEST, "sets.contains([1], [1, 1])", V("true")),
    (SETS_TEST, "sets.contains([1, 1], [1])", V("true")),
    (SETS_TEST, "sets.contains([2, 1], [1])", V("true")),
    (SETS_TEST, "sets.contains([1, 2, 3, 4], [2, 3])", V("true")),
    (SETS_TEST_DYN, "sets.contains([dyn(1)], [dyn(1.0), dyn(1)])", V("true")),
    (SETS_TEST_DYN, "sets.contains([dyn(1), dyn(2)], [dyn(2u), dyn(2.0)])", V("true")),
    (SETS_TEST_DYN, "sets.contains([dyn(1), dyn(2u)], [dyn(2), dyn(2.0)])", V("true")),
    (SETS_TEST_DYN, "sets.contains([dyn(1), dyn(2.0), dyn(3u)], [dyn(1.0), dyn(2u), dyn(3)])", V("true")),
    (SETS_TEST_DYN, "sets.contains([[dyn(1)], [dyn(2), dyn(3)]], [[dyn(2), dyn(3.0)]])", V("true")),
    (SETS_TEST, "!sets.contains([1], [2])", V("true")),
    (SETS_TEST, "!sets.contains([1], [1, 2])", V("true")),
    (SETS_TEST_DYN, "!sets.contains([dyn(1)], [dyn(\"1\"), dyn(1)])", V("true")),
    (SETS_TEST_DYN, "!sets.contains([dyn(1)], [dyn(1.1), dyn(1u)])", V("true")),
    (SETS_TEST, "sets.equivalent([], [])", V("true")),
    (SETS_TEST, "sets.equivalent([1], [1])", V("true")),
    (SETS_TEST, "sets.equivalent([1], [1, 1])", V("true")),
    (SETS_TEST, "sets.equivalent([1, 1], [1])", V("true")),
    (SETS_TEST_DYN, "sets.equivalent([dyn(1)], [dyn(1u), dyn(1.0)])", V("true")),
    (SETS_TEST_DYN, "sets.equivalent([dyn(1), dyn(2), dyn(3)], [dyn(3u), dyn(2.0), dyn(1)])", V("true")),
    (SETS_TEST_DYN, "sets.equivalent([[dyn(1.0)], [dyn(2), dyn(3)]], [[dyn(1)], [dyn(2), dyn(3.0)]])", V("true")),
    (SETS_TEST, "!sets.equivalent([2, 1], [1])", V("true")),
    (SETS_TEST, "!sets.equivalent([1], [1, 2])", V("true")),
    (SETS_TEST_DYN, "!sets.equivalent([dyn(1), dyn(2)], [dyn(2u), dyn(2), dyn(2.0)])", V("true")),
    (SETS_TEST_DYN, "!sets.equivalent([dyn(1), dyn(2)], [dyn(1u), dyn(2), dyn(2.3)])", V("true")),
    (SETS_TEST, "sets.intersects([1], [1])", V("true")),
    (SETS_TEST, "sets.intersects([1], [1, 1])", V("true")),
    (SETS_TEST, "sets.intersects([1, 1], [1])", V("true")),
    (SETS_TEST, "sets.intersects([2, 1], [1])", V("true")),
    (SETS_TEST, "sets.intersects([1], [1, 2])", V("true")),
    (SETS_TEST_DYN, "sets.intersects([dyn(1)], [dyn(1.0), dyn(2)])", V("true")),
    (SETS_TEST_DYN, "sets.intersects([dyn(1), dyn(2)], [dyn(2u), dyn(2), dyn(2.0)])", V("true")),
    (SETS_TEST_DYN, "sets.intersects([dyn(1), dyn(2)], [dyn(1u), dyn(2), dyn(2.3)])", V("true")),
    (SETS_TEST_DYN, "sets.intersects([[dyn(1)], [dyn(2), dyn(3)]], [[dyn(1), dyn(2)], [dyn(2), dyn(3.0)]])", V("true")),
    (SETS_TEST, "!sets.intersects([], [])", V("true")),
    (SETS_TEST, "!sets.intersects([1], [])", V("true")),
    (SETS_TEST, "!sets.intersects([1], [2])", V("true")),
    (SETS_TEST_DYN, "!sets.intersects([dyn(1)], [dyn(\"1\"), dyn(2)])", V("true")),
    (SETS_TEST_DYN, "!sets.intersects([dyn(1)], [dyn(1.1), dyn(2u)])", V("true")),
    (SETS_DOC, "sets.contains([], [1])", V("false")),
    (SETS_DOC, "sets.intersects([1], [])", V("false")),
    // ---- format ----
    (FORMAT_TEST, "format.dns1123Label().validate(\"my-label-name\")", V("null")),
    (FORMAT_TEST, "format.dns1123Subdomain().validate(\"apiextensions.k8s.io\")", V("null")),
    (FORMAT_TEST, "format.qualifiedName().validate(\"apiextensions.k8s.io/v1beta1\")", V("null")),
    (FORMAT_TEST, "format.dns1123LabelPrefix().validate(\"my-label-prefix-\")", V("null")),
    (FORMAT_TEST, "format.dns1123SubdomainPrefix().validate(\"mysubdomain.prefix.-\")", V("null")),
    (FORMAT_TEST, "format.dns1035LabelPrefix().validate(\"my-label-prefix-\")", V("null")),
    (FORMAT_TEST, "format.uri().validate(\"http://example.com\")", V("null")),
    (FORMAT_TEST, "format.uuid().validate(\"123e4567-e89b-12d3-a456-426614174000\")", V("null")),
    (FORMAT_TEST, "format.byte().validate(\"aGVsbG8=\")", V("null")),
    (FORMAT_TEST, "format.date().validate(\"2021-01-01\")", V("null")),
    (FORMAT_TEST, "format.datetime().validate(\"2021-01-01T00:00:00Z\")", V("null")),
    (FORMAT_TEST, "format.dns1123Label().validate(\"contains a space\")", V(r#"["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]"#)),
    (FORMAT_TEST, "format.dns1123Subdomain().validate(\"contains a space\")", V(r#"["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]"#)),
    (FORMAT_TEST, "format.dns1035Label().validate(\"contains a space\")", V(r#"["a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]"#)),
    (FORMAT_TEST, "format.qualifiedName().validate(\"contains a space\")", V(r#"["name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]"#)),
    (FORMAT_TEST, "format.dns1123LabelPrefix().validate(\"contains a space-\")", V(r#"["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"]"#)),
    (FORMAT_TEST, "format.dns1123SubdomainPrefix().validate(\"contains a space-\")", V(r#"["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]"#)),
    (FORMAT_TEST, "format.dns1035LabelPrefix().validate(\"contains a space-\")", V(r#"["a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]"#)),
    (FORMAT_TEST, "format.dns1123Label().validate(\"my-label-name\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.dns1123Subdomain().validate(\"example.com\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.dns1035Label().validate(\"my-label-name\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.qualifiedName().validate(\"my.name\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.byte().validate(\"aGVsbG8=\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.byte().validate(\"aGVsbG8\")", V(r#"["invalid base64"]"#)),
    (FORMAT_TEST, "format.date().validate(\"2020-01-01\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.date().validate(\"2020-01-32\")", V(r#"["invalid date"]"#)),
    (FORMAT_TEST, "format.datetime().validate(\"2020-01-01T00:00:00Z\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.datetime().validate(\"2020-01-32T00:00:00Z\")", V(r#"["invalid datetime"]"#)),
    (FORMAT_TEST, "format.named(\"unknown\").hasValue()", V("false")),
    (FORMAT_TEST, "format.labelValue().validate(\"my-cool-label-Value\") == optional.none()", V("true")),
    (FORMAT_TEST, "format.labelValue().validate(\"my-cool-label-Value!!\\n\\n!!!\")", V(r#"["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]"#)),
];

/// The names of `library.ConstantFormats`.
const FORMAT_NAMES: [&str; 13] = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

/// The generated cases of format_test.go TestFormat: "lookup and
/// comparison", "comparison with lookup succeeds" and `compare_<a>_<b>`.
fn generated_format_cases() -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for lhs in FORMAT_NAMES {
        out.push((format!("format.named(\"{lhs}\").hasValue()"), true));
        out.push((
            format!("format.named(\"{lhs}\").value() == format.{lhs}()"),
            true,
        ));
        for rhs in FORMAT_NAMES {
            if lhs != rhs {
                out.push((format!("format.{lhs}() == format.{rhs}()"), false));
            }
        }
    }
    out
}

fn eval(expr: &str) -> Result<Json, String> {
    let env = CelEnvironment::shared();
    let setup = env.compile(SELF).map_err(|e| e.to_string())?;
    let setup_ctx = env.context();
    let self_val = setup.evaluate(&setup_ctx).map_err(|e| error_text(&e))?;
    let self_value: cel::Value = (&*self_val).try_into().map_err(|_| "self".to_string())?;
    let mut ctx = env.context();
    ctx.add_variable_from_value("self", self_value);
    ctx.add_variable_from_value("x", vec![5i64, 4, 3, 2, 1]);
    let compiled = env.compile(expr).map_err(|e| e.to_string())?;
    let v = compiled.evaluate(&ctx).map_err(|e| error_text(&e))?;
    convert::val_to_json(&*v).map_err(|e| format!("(to json) {e}"))
}

#[test]
fn upstream_table() {
    let mut failures = Vec::new();
    for (source, expr, want) in CASES {
        let got = eval(expr);
        let ok = match (want, &got) {
            (V(json), Ok(v)) => serde_json::from_str::<Json>(json).is_ok_and(|w| &w == v),
            (E(msg), Err(e)) => e == msg,
            (C(part), Err(e)) => e.contains(part),
            _ => false,
        };
        if !ok {
            let want = match want {
                V(j) => format!("value {j}"),
                E(m) => format!("error {m:?}"),
                C(m) => format!("error containing {m:?}"),
            };
            failures.push(format!(
                "[{source}] {expr}\n    want {want}\n    got  {got:?}"
            ));
        }
    }
    for (expr, want) in generated_format_cases() {
        let got = eval(&expr);
        if got != Ok(Json::Bool(want)) {
            failures.push(format!(
                "[{FORMAT_TEST}] {expr}\n    want {want}\n    got  {got:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn table_size() {
    assert!(CASES.len() + generated_format_cases().len() >= 180);
}

/// Inputs that must not panic, and upstream's errors for them (derived
/// from the sources: cel-go's `Int.Add`/`Uint.Add`/`Duration.Add` overflow
/// errors, `types.NoSuchOverloadErr`, apimachinery's `maskTrailingDash`).
#[test]
fn robustness() {
    let cases: &[(&str, Result<Json, &str>)] = &[
        ("[9223372036854775807, 1].sum()", Err("integer overflow")),
        ("[-9223372036854775808, -1].sum()", Err("integer overflow")),
        ("[18446744073709551615u, 1u].sum()", Err("unsigned integer overflow")),
        ("[duration('2562047h'), duration('2562047h')].sum()", Err("integer overflow")),
        ("[dyn(1), dyn(2.0)].sum()", Err("no such overload")),
        // Typed lists: refused when compiled, as upstream's checker does.
        ("dyn(['a', 'b']).sum()", Err("no such overload: sum(list)")),
        ("dyn([[1], [2]]).min()", Err("no such overload: min(list)")),
        ("dyn([{'a': 1}]).max()", Err("no such overload: max(list)")),
        ("[null].isSorted()", Err("no such overload: isSorted(list)")),
        ("[dyn(1), dyn('a')].isSorted()", Ok(Json::Bool(true))),
        ("[b'\\xff', b'\\x00'].min() == b'\\x00'", Ok(Json::Bool(true))),
        ("[0.0/0.0, 1.0].isSorted()", Ok(Json::Bool(true))),
        ("'abc'.findAll('b', 9223372036854775807)", Ok(serde_json::json!(["b"]))),
        ("'abc'.findAll('', -9223372036854775808)", Ok(serde_json::json!(["", "", "", ""]))),
        ("'aaa'.findAll('a*?')", Ok(serde_json::json!(["", "", "", ""]))),
        ("'é'.find('\\\\xff')", Ok(serde_json::json!(""))),
        ("'x'.find(dyn('['))", Err("Illegal regex: error parsing regexp: missing closing ]: `[`")),
        ("'x'.find(dyn('(?<name'))", Err("Illegal regex: error parsing regexp: invalid named capture: `(?<name`")),
        ("format.dns1123LabelPrefix().validate('-')", Err("internal error: runtime error: slice bounds out of range [:-1]")),
        ("format.uri().validate('a\\nb')", Ok(serde_json::json!(["parse \"a\\nb\": net/url: invalid control character in URL"]))),
        ("format.uri().validate('../x')", Ok(serde_json::json!(["parse \"../x\": invalid URI for request"]))),
        ("url('http://[::1')", Err("URL parse error during conversion from string: parse \"http://[::1\": missing ']' in host")),
        ("url('http://[1.2.3.4]/')", Err("URL parse error during conversion from string: parse \"http://[1.2.3.4]/\": invalid IP-literal")),
        ("url('http://x/%zz')", Err("URL parse error during conversion from string: parse \"http://x/%zz\": invalid URL escape \"%zz\"")),
        ("url('')", Err("URL parse error during conversion from string: parse \"\": empty url")),
        ("isURL('*')", Ok(Json::Bool(true))),
    ];
    let mut failures = Vec::new();
    for (expr, want) in cases {
        let got = eval(expr);
        let ok = match (want, &got) {
            (Ok(w), Ok(g)) => w == g,
            (Err(w), Err(g)) => g == w,
            _ => false,
        };
        if !ok {
            failures.push(format!("{expr}\n    want {want:?}\n    got  {got:?}"));
        }
    }
    let long = "a".repeat(20_000);
    for expr in [
        format!("'{long}'.findAll('a')"),
        format!("isURL('http://h/{long}')"),
        format!("format.qualifiedName().validate('{long}')"),
    ] {
        assert!(eval(&expr).is_ok(), "{}", &expr[..40]);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// cel-go's `ext.Lists(ext.ListsVersion(3))`, in the 1.36 base environment,
/// is the `cel` crate's `extensions::lists`: it registers alongside these
/// libraries without a conflict.
#[test]
fn cel_lists_extension_registers_alongside() {
    let mut env = cel::Env::stdlib();
    env.add_extension(cel::extensions::strings).unwrap();
    env.add_extension(cel::extensions::lists).unwrap();
    super::super::register(&mut env).unwrap();
}
