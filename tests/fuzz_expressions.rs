//! Grammar-based fuzzing of the CEL pipeline: 10,000 random expressions
//! (deterministic seed) must each compile or fail cleanly, evaluate or fail
//! cleanly against a sample activation, never panic, and never run past
//! their cost limit: an evaluation that stops for its cost fails with the
//! cost error, and one that succeeds stayed within the limit.

use kmutate::cel::access::{activation_access, Access};
use kmutate::cel::convert::val_to_json;
use kmutate::cel::cost::COST_LIMIT_EXCEEDED;
use kmutate::cel::{error_text, CelEnvironment, CompiledExpression};
use kmutate::dispatch::activation::{Activation, CompiledVariable};
use serde_json::json;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use support::fuzz::Rng;

mod support;

const EXPRESSIONS: usize = 10_000;
const SEED: u64 = 0x6b6d_7574_6174_6531;
/// A lower limit than the per-call one keeps the runaway expressions quick
/// in a debug build; the metering is the same.
const LIMIT: u64 = 20_000;
/// Longer than any evaluation within `LIMIT` takes, even in a debug build.
const RUNAWAY: Duration = Duration::from_secs(5);

struct Gen {
    rng: Rng,
    /// Comprehension variables in scope.
    scope: Vec<String>,
}

const LITERALS: &[&str] = &[
    "0",
    "1",
    "-1",
    "42",
    "9223372036854775807",
    "-9223372036854775807",
    "1u",
    "18446744073709551615u",
    "0.5",
    "-2.5e3",
    "1e308",
    "-0.0",
    "true",
    "false",
    "null",
    "''",
    "'a'",
    "'abc'",
    "'a,b,c'",
    "\"x\\ny\"",
    "'\\u00e9\\U0001F600'",
    "r'raw\\n'",
    "'''multi\nline'''",
    "b'bytes'",
    "b'\\xff\\x00'",
    "'/spec/replicas'",
    "'k8s.io/x~y'",
    "'1.2.3.4'",
    "'10.0.0.0/8'",
    "'1Gi'",
    "'v1.2.3'",
    "'https://example.com/p?q=1'",
    "'[a-z]+'",
    "'('",
];

/// Corner cases of the language, combined by the grammar like atoms.
const EDGES: &[&str] = &[
    "9223372036854775807 + 1",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616u",
    "0xFF + 0x7fffffffffffffff",
    "0xFFFFFFFFFFFFFFFFF",
    "1e400",
    "-1e-400",
    "'\\xff'",
    "'\\377'",
    "'\\0'",
    "'\\ud800'",
    "\"\\U00110000\"",
    "b'\\u00e9'",
    "r\"\\\"",
    "'''a'''' + '''",
    "`ident`",
    "object.`metadata`",
    ".object",
    "object.metadata.name.size() == size(object.metadata.name)",
    "-9223372036854775807 - 2",
    "0u - 1u",
    "18446744073709551615u + 1u",
    "1 / 0",
    "1 % 0",
    "1.0 / 0.0",
    "-(-9223372036854775807 - 1)",
    "int(1e30)",
    "int(-1e30)",
    "uint(-1)",
    "int('x')",
    "int('9223372036854775808')",
    "double('nan')",
    "string(b'\\xff')",
    "bytes('é')",
    "'abc'[0]",
    "b'ab'[0]",
    "[1][1]",
    "[1][-1]",
    "[1][0.0]",
    "[1][0.5]",
    "{1: 2}[1u]",
    "{1: 2}[1.0]",
    "{'a': 1}['b']",
    "{'a': 1, 'a': 2}",
    "{[1]: 2}",
    "{1.5: 2}",
    "[1].all(x, x.all(x, x))",
    "[[1]].all(x, x.all(x, x > 0))",
    "[1, 2].all(i, v, [3].exists(i, v, i == v))",
    "{'a': 1}.transformMap(k, v, v + 1)",
    "{'a': 1}.transformMapEntry(k, v, {'b': v})",
    "{'a': 1, 'b': 2}.transformMapEntry(k, v, {'c': v})",
    "[1, 2].transformList(i, v, i > 0, v)",
    "type(1) == int",
    "type(type(1))",
    "dyn(1) == 1.0",
    "1 == 1u",
    "1 < 1.5",
    "duration('1s') + duration('2h')",
    "timestamp('2024-01-01T00:00:00Z') + duration('1s')",
    "timestamp('x')",
    "duration('1x')",
    "timestamp('2024-01-01T00:00:00Z').getFullYear()",
    "optional.of(1).value()",
    "optional.none().value()",
    "optional.none().orValue(2)",
    "optional.of(1).or(optional.none())",
    "[?optional.none(), ?optional.of(1)]",
    "{?'a': optional.none(), ?'b': optional.of(2)}",
    "object.?metadata.?name.orValue('n')",
    "object.?spec.replicas",
    "{'a': {'b': 1}}.?a.?b",
    // Optional selections from the inputs, which select as `.f` does.
    "object.spec.?os.?name.orValue('linux')",
    "object.metadata.?labels[?'app'].orValue('none')",
    "object.metadata[?'labels'].?missing.hasValue()",
    "object.metadata.labels[?'tier'].value()",
    "object.?metadata.?name.?x.hasValue()",
    "object.spec.?replicas.?x.orValue(0)",
    "object.spec.template.spec.containers.map(c, c.?image.orValue('') + c.?imagePullPolicy.orValue('-'))",
    "object.spec.template.spec.containers + object.spec.template.spec.?initContainers.orValue([])",
    "object.spec.template.spec.?containers.orValue([]).exists(c, c.?ports[?0].?containerPort.orValue(0) == 80)",
    "variables.spec.?template.?spec.?containers.orValue([]).size()",
    "variables.kept.map(c, c.?name.orValue(''))",
    "(object.spec.template.spec.containers + object.spec.template.spec.?initContainers.orValue([])).map(c, c.image)",
    "object.spec.template.spec.?containers.orValue([]).filter(c, c.name != 'side').map(c, c.?image.orValue(''))",
    "(object.metadata.?labels.orValue([]) + object.spec.template.spec.containers).size()",
    "(object.spec.template.spec.containers + object.spec.template.spec.containers).exists(c, c.?ports.hasValue())",
    "object.metadata.?labels.orValue([]).all(k, k != '')",
    "(object.metadata.?finalizers.orValue([]) + object.spec.template.spec.containers).map(c, c.name)",
    "['containers', 'initContainers'].map(f, object.spec.template.spec[?f].orValue([]).map(c, c.name))",
    "['labels', 'annotations'].map(f, object.metadata[f].size())",
    "['labels', 'missing'].map(f, object.metadata[?f].hasValue())",
    "['name', 'spec'].map(f, [object.metadata].map(f, f.name))",
    "['template'].exists(t, object.spec[t].spec.containers.exists(c, c.image == 'busybox'))",
    "[object.metadata.name].map(n, object.spec.template.spec.containers.map(c, n + c.image))",
    "object.spec.template.spec.containers.filter(c, c.name != 'x').map(c, c.image)",
    "object.spec.template.spec.containers.filter(c, c.?ports.hasValue()).map(c, {'n': c.name, 'p': c.ports})",
    "object.spec.template.spec.containers.filter(c, c.image.startsWith('n')).exists(c, c.name == 'app')",
    "object.metadata.labels.filter(k, k != 'app').map(k, k + '=')",
    "object.spec.template.spec.containers.filter(c, true).map(c, c.?missing.orValue(c.name))",
    "[1, 2][?5]",
    "{'a': 1}[?'a']",
    "'abc'.matches('(')",
    "'abc'.matches('[')",
    "'a'.substring(5)",
    "'abc'.substring(2, 1)",
    "'abc'.charAt(10)",
    "'a,b'.split(',', -1)",
    "[1, 'a'].join(',')",
    "[].max()",
    "['b', 'a'].isSorted()",
    "[1, 2].sum()",
    "Object{}",
    "Object{}.spec",
    "Object{spec: 1}.spec",
    "Object.spec{}",
    "Object.x.y{}",
    "Foo{}",
    "JSONPatch{}",
    "JSONPatch{op: 1}",
    "JSONPatch{op: 'add'}.op",
    "JSONPatch{bogus: 1}",
    "has(Object{}.spec)",
    "has(object.metadata.labels.app)",
    "has({'a': 1}.a)",
    "[1].map(x, x, x)",
    "'x' * 2",
    "null == null",
    "null.x",
    "true.x",
    "[1, 2] + [3]",
    "{} + {}",
    "'a' + 1",
    "b'a' + b'b'",
    "variables.list + variables.doubled",
    "variables.broken || true",
    "true || variables.broken",
    "variables.broken && false",
    "-variables.list",
    "!variables.name",
    "object.metadata.name + variables.name",
    "object.spec.template.spec.containers.map(c, c.name)",
    "variables.kept.map(c, c.image)",
    "variables.kept.all(c, has(c.ports))",
    "variables.kept.filter(c, c.image != '').map(c, c.ports)",
    "variables.spec.replicas + size(variables.kept[1])",
    "variables.either.name",
    // Tests for presence and literal keys, read without converting values.
    "'app' in object.metadata.labels",
    "'x' in object.metadata.labels",
    "1 in object.metadata.labels",
    "'name' in object.spec.template.spec.containers",
    "'a/b' in object.metadata.annotations && has(object.metadata.annotations)",
    "object.metadata['labels']['app']",
    "object['metadata'].labels['missing']",
    "object.metadata.labels['app'] + object.metadata.labels.tier",
    "'app' in object.metadata.labels ? object.metadata.labels['app'] : 'none'",
    "size(object.metadata.labels) > 0 && 'app' in object.metadata.labels",
    "has(object.spec.template) && has(object.spec.template.spec.containers)",
    "has(object.spec.replicas) && object.spec.replicas > 1",
    "has(object.metadata.labels) ? object.metadata.labels : {}",
    "object.spec.template.spec.containers.all(c, has(c.ports) || 'image' in c)",
    "object.spec.template.spec.containers.map(c, has(c.ports) ? c.ports : [])",
    "'replicas' in variables.spec && has(variables.spec.template)",
    "has(variables.kept) && variables.either['name'] == 'web'",
    "variables.kept.filter(c, 'ports' in c).map(c, c['name'])",
    "object.spec.template.spec.containers.exists_one(c, c.name == 'app')",
    "object.metadata.labels.all(k, v, k != v)",
    "object.metadata.labels.map(k, object.metadata.labels[k])",
    // Sizes, tests of optional selections and two-variable comprehensions,
    // which read less than the whole value.
    "size(object.spec.template.spec.containers) + object.spec.template.spec.containers.size()",
    "size(object.metadata.labels) + size(object.metadata.name) + size(object.spec)",
    "object.spec.template.spec.containers.map(c, size(c)).sum()",
    "object.spec.template.spec.containers.map(c, c.?ports.hasValue())",
    "object.spec.template.spec.containers.exists(c, c.?ports[?0].hasValue())",
    "object.metadata.?labels.?app.hasValue() && object.metadata.labels.app == 'web'",
    "object.metadata.?labels.hasValue() ? size(object.metadata.labels) : 0",
    "object.metadata.labels.?app.hasValue() || object.metadata[?'missing'].hasValue()",
    "variables.kept.size() + size(variables.kept)",
    "object.spec.template.spec.containers.transformList(i, c, c.image != '', i)",
    "object.spec.template.spec.containers.transformList(i, c, i > 0, {'n': c.name, 'p': c.?ports.hasValue()})",
    "object.spec.template.spec.containers.all(i, c, i < 5 && c.name != '')",
    "object.spec.template.spec.containers.exists(i, c, c.image == 'busybox' && i == 1)",
    "object.spec.template.spec.containers.transformList(i, c, c)",
    "object.spec.template.spec.containers.transformList(i, c, size(c.ports) > 0, c.ports[0])",
    "object.spec.template.spec.containers.transformMap(i, c, c.name)",
    "object.metadata.labels.transformMap(k, v, k.startsWith('a'), v + k)",
    "object.metadata.labels.transformMapEntry(k, v, {v: k})",
    "object.metadata.labels.all(k, v, k.size() < 10) && size(object.metadata.labels) == 2",
    "['containers', 'initContainers'].map(f, object.spec.template.spec[?f].orValue([]).transformList(i, c, !c.?ports.hasValue(), string(i) + c.name))",
    "(object.spec.template.spec.containers + object.spec.template.spec.?initContainers.orValue([])).transformList(i, c, c.image)",
    "object.spec.template.spec.containers.filter(c, c.name != 'x').transformList(i, c, c.?ports.hasValue(), c.name)",
    "variables.kept.transformList(i, c, c.image + string(i))",
    "'app' in object.metadata.?labels.orValue({})",
    "'x' in object.metadata.?missing.orValue({})",
    "object.metadata.?labels.orValue({}).app",
    "object.metadata.?missing.orValue({}).app",
    "object.metadata.?labels.orValue({})[?'tier'].orValue('-')",
    "size(object.metadata.?labels.orValue({})) + object.spec.template.spec.?containers.orValue([]).size()",
    "['team', 'tier'].filter(k, k in object.metadata.?labels.orValue({}))",
    "object.?metadata.orValue({}).?labels.orValue({}).app",
    "object.spec.template.spec.?containers.orValue([]).exists(c, c.?ports.orValue([]).size() > 0)",
    "object.metadata.?labels.orValue([]).size()",
];

const NAMES: &[&str] = &["x", "y", "z", "i", "v", "k", "e"];

const ATTRIBUTES: &[&str] = &[
    "object",
    "object.metadata",
    "object.metadata.name",
    "object.metadata.labels",
    "object.metadata.annotations",
    "object.spec",
    "object.spec.replicas",
    "object.spec.template.spec.containers",
    "object.spec.template.spec.containers[0]",
    "object.spec.template.spec.containers[0].name",
    "object.spec.missing",
    "oldObject",
    "request",
    "request.operation",
    "request.userInfo.username",
    "request.namespace",
    "params",
    "namespaceObject",
    "namespaceObject.metadata.name",
    "variables",
    "variables.list",
    "variables.name",
    "variables.doubled",
    "variables.broken",
    "variables.missing",
    "variables.kept",
    "variables.kept[0]",
    "variables.kept[0].image",
    "variables.spec",
    "variables.spec.template",
    "variables.either",
    "undeclared",
];

const METHODS0: &[&str] = &[
    "size",
    "lowerAscii",
    "upperAscii",
    "trim",
    "isSorted",
    "sum",
    "max",
    "min",
    "hasValue",
    "value",
    "reverse",
    "ip",
    "family",
    "isCanonical",
    "getHost",
    "getScheme",
    "asInteger",
    "isInteger",
    "major",
];

const METHODS1: &[&str] = &[
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "split",
    "join",
    "substring",
    "indexOf",
    "lastIndexOf",
    "charAt",
    "find",
    "findAll",
    "orValue",
    "or",
    "containsIP",
    "containsCIDR",
    "format",
    "add",
    "isGreaterThan",
    "compareTo",
];

const FUNCTIONS1: &[&str] = &[
    "size",
    "string",
    "int",
    "uint",
    "double",
    "bytes",
    "type",
    "dyn",
    "has",
    "url",
    "ip",
    "cidr",
    "isIP",
    "isCIDR",
    "quantity",
    "isQuantity",
    "semver",
    "isSemver",
    "isURL",
    "optional.of",
    "optional.ofNonZeroValue",
    "jsonpatch.escapeKey",
    "strings.quote",
    "base64.encode",
    "math.abs",
    "ip.isCanonical",
];

const FUNCTIONS2: &[&str] = &[
    "matches",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "math.greatest",
    "math.least",
];

const BINARY: &[&str] = &[
    "+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in",
];

impl Gen {
    fn lit(&mut self) -> String {
        self.rng.pick(LITERALS).to_string()
    }

    fn atom(&mut self) -> String {
        match self.rng.below(4) {
            0 if !self.scope.is_empty() => self.scope[self.rng.below(self.scope.len())].clone(),
            1 => self.rng.pick(ATTRIBUTES).to_string(),
            _ => self.lit(),
        }
    }

    fn list(&mut self, depth: u32) -> String {
        let n = self.rng.below(5);
        let items: Vec<String> = (0..n)
            .map(|_| {
                if self.rng.chance(10) {
                    format!("?{}", self.optional(depth))
                } else {
                    self.expr(depth)
                }
            })
            .collect();
        format!("[{}]", items.join(", "))
    }

    fn map(&mut self, depth: u32) -> String {
        let n = self.rng.below(4);
        let entries: Vec<String> = (0..n)
            .map(|_| {
                let key = if self.rng.chance(70) {
                    self.lit()
                } else {
                    self.expr(depth)
                };
                if self.rng.chance(10) {
                    format!("?{key}: {}", self.optional(depth))
                } else {
                    format!("{key}: {}", self.expr(depth))
                }
            })
            .collect();
        format!("{{{}}}", entries.join(", "))
    }

    fn optional(&mut self, depth: u32) -> String {
        match self.rng.below(5) {
            0 => format!("optional.of({})", self.expr(depth)),
            1 => "optional.none()".to_string(),
            2 => format!("{}.?{}", self.rng.pick(ATTRIBUTES), self.rng.pick(NAMES)),
            3 => format!("{}[?{}]", self.expr(depth), self.expr(depth)),
            _ => format!("optional.ofNonZeroValue({})", self.expr(depth)),
        }
    }

    fn range(&mut self, depth: u32) -> String {
        match self.rng.below(4) {
            0 => "variables.list".to_string(),
            1 => "object.spec.template.spec.containers".to_string(),
            2 => "object.metadata.labels".to_string(),
            _ => self.list(depth),
        }
    }

    fn with_var<T>(&mut self, names: &[String], f: impl FnOnce(&mut Self) -> T) -> T {
        let before = self.scope.len();
        self.scope.extend(names.iter().cloned());
        let r = f(self);
        self.scope.truncate(before);
        r
    }

    fn macro_call(&mut self, depth: u32) -> String {
        let range = self.range(depth);
        let v = self.rng.pick(NAMES).to_string();
        let one = [v.clone()];
        match self.rng.below(6) {
            0..=2 => {
                let m = *self
                    .rng
                    .pick(&["all", "exists", "exists_one", "existsOne", "filter"]);
                let body = self.with_var(&one, |g| g.expr(depth));
                format!("{range}.{m}({v}, {body})")
            }
            3 => {
                let body = self.with_var(&one, |g| g.expr(depth));
                if self.rng.chance(50) {
                    let p = self.with_var(&one, |g| g.expr(depth));
                    format!("{range}.map({v}, {p}, {body})")
                } else {
                    format!("{range}.map({v}, {body})")
                }
            }
            _ => {
                let k = self.rng.pick(NAMES).to_string();
                let both = [k.clone(), v.clone()];
                let m = *self.rng.pick(&[
                    "all",
                    "exists",
                    "existsOne",
                    "transformList",
                    "transformMap",
                    "transformMapEntry",
                ]);
                let body = self.with_var(&both, |g| {
                    if m == "transformMapEntry" && g.rng.chance(60) {
                        format!("{{{k}: {v}}}")
                    } else {
                        g.expr(depth)
                    }
                });
                if m.starts_with("transform") && self.rng.chance(30) {
                    let p = self.with_var(&both, |g| g.expr(depth));
                    format!("{range}.{m}({k}, {v}, {p}, {body})")
                } else {
                    format!("{range}.{m}({k}, {v}, {body})")
                }
            }
        }
    }

    fn object(&mut self, depth: u32) -> String {
        match self.rng.below(3) {
            0 => format!(
                "Object{{spec: Object.spec{{replicas: {}}}}}",
                self.expr(depth)
            ),
            1 => format!(
                "Object{{metadata: Object.metadata{{labels: {}}}}}",
                self.map(depth)
            ),
            _ => format!(
                "[JSONPatch{{op: {}, path: {}, value: {}}}]",
                self.rng
                    .pick(&["'add'", "'replace'", "'remove'", "'test'", "1"]),
                self.rng
                    .pick(&["'/spec/replicas'", "'/metadata/labels/a'", "''", "'/-'"]),
                self.expr(depth)
            ),
        }
    }

    /// Expressions built to be expensive: they must stop at the limit.
    fn heavy(&mut self) -> String {
        let l = "[0,1,2,3,4,5,6,7,8,9]";
        match self.rng.below(5) {
            0 => {
                let levels = 2 + self.rng.below(5);
                let mut e = "'0123456789' == '0123456789'".to_string();
                for i in 0..levels {
                    e = format!("{l}.all(a{i}, {e})");
                }
                e
            }
            1 => {
                let mut e = "'ab'".to_string();
                for _ in 0..(5 + self.rng.below(30)) {
                    e = format!("[{e}].map(s, s + s)[0]");
                }
                e
            }
            2 => {
                let mut e = "[1]".to_string();
                for _ in 0..(3 + self.rng.below(20)) {
                    e = format!("{l}.map(q, {e})");
                }
                e
            }
            3 => format!("{l}.map(a, {l}.map(b, {l}.map(c, {l}.map(d, [a, b, c, d]))))"),
            _ => format!("({l}.exists(a, {l}.exists(b, {l}.exists(c, {l}.exists(d, {l}.exists(f, false)))))) || true"),
        }
    }

    fn deep(&mut self) -> String {
        let n = 1 + self.rng.below(200);
        match self.rng.below(6) {
            0 => format!("{}1{}", "(".repeat(n), ")".repeat(n)),
            1 => format!("{}1{}", "[".repeat(n), "]".repeat(n)),
            2 => format!("{}true", "!".repeat(n)),
            3 => format!("{}1", "-".repeat(n)),
            4 => format!("object{}", ".a".repeat(n)),
            _ => vec!["1"; n].join(" + "),
        }
    }

    fn expr(&mut self, depth: u32) -> String {
        if depth == 0 {
            return self.atom();
        }
        let d = depth - 1;
        match self.rng.below(21) {
            0 | 1 => self.atom(),
            2 => self.list(d),
            3 => self.map(d),
            4..=6 => {
                let op = self.rng.pick(BINARY);
                format!("{} {op} {}", self.expr(d), self.expr(d))
            }
            7 => format!("{}{}", self.rng.pick(&["-", "!"]), self.expr(d)),
            8 => format!("{} ? {} : {}", self.expr(d), self.expr(d), self.expr(d)),
            9 => format!("{}.{}()", self.expr(d), self.rng.pick(METHODS0)),
            10 => format!(
                "{}.{}({})",
                self.expr(d),
                self.rng.pick(METHODS1),
                self.expr(d)
            ),
            11 => format!("{}({})", self.rng.pick(FUNCTIONS1), self.expr(d)),
            12 => format!(
                "{}({}, {})",
                self.rng.pick(FUNCTIONS2),
                self.expr(d),
                self.expr(d)
            ),
            13 | 14 => self.macro_call(d),
            15 => self.object(d),
            16 => self.optional(d),
            17 => format!("{}[{}]", self.expr(d), self.expr(d)),
            18 => format!(
                "has({}.{})",
                self.rng.pick(ATTRIBUTES),
                self.rng.pick(NAMES)
            ),
            19 => self.rng.pick(EDGES).to_string(),
            _ => format!("({})", self.expr(d)),
        }
    }

    /// One test expression: mostly grammatical, some heavy, some deep, some
    /// corrupted.
    fn next_expression(&mut self) -> String {
        let e = match self.rng.below(1000) {
            0..=4 => self.heavy(),
            5..=24 => self.deep(),
            25..=124 => self.rng.pick(EDGES).to_string(),
            _ => {
                let depth = 1 + self.rng.below(6) as u32;
                self.expr(depth)
            }
        };
        if self.rng.chance(8) && !e.is_empty() {
            self.corrupt(e)
        } else {
            e
        }
    }

    fn corrupt(&mut self, e: String) -> String {
        let mut chars: Vec<char> = e.chars().collect();
        let at = self.rng.below(chars.len() + 1);
        match self.rng.below(3) {
            0 if at < chars.len() => {
                chars.remove(at);
            }
            1 => chars.truncate(at),
            _ => {
                let c = self.rng.pick(&[
                    "(", ")", "[", "]", "{", "}", ".", ",", "?", ":", "!", "&", "|", "'", "\"",
                    "\\", "@", "#", "`", "\u{0}", "é",
                ]);
                for (i, ch) in c.chars().enumerate() {
                    chars.insert(at + i, ch);
                }
            }
        }
        chars.into_iter().collect()
    }
}

fn object() -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"a/b": "c"}
        },
        "spec": {
            "replicas": 3,
            "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:1.2.3", "ports": [{"containerPort": 80}]},
                {"name": "side", "image": "busybox"}
            ]}}
        }
    })
}

fn variables(env: &CelEnvironment) -> Vec<CompiledVariable> {
    [
        ("list", "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"),
        ("name", "object.metadata.name"),
        ("doubled", "variables.list.map(x, x * 2)"),
        ("broken", "1 / 0"),
        // Values built from the object, read only partly by their readers:
        // converted only as far as those readers look.
        (
            "kept",
            "object.spec.template.spec.containers.filter(c, c.name != 'x')",
        ),
        ("spec", "object.spec"),
        (
            "either",
            "has(object.spec.replicas) ? object.spec : object.metadata",
        ),
    ]
    .into_iter()
    .map(|(name, src)| CompiledVariable {
        name: name.to_string(),
        expression: env.compile(src).map_err(|e| e.to_string()),
    })
    .collect()
}

/// A result as JSON or an error text, to compare two evaluations.
fn describe(
    result: Result<kmutate::cel::CowVal<'_, '_>, cel::ExecutionError>,
) -> Result<String, String> {
    match result {
        Ok(v) => Ok(match val_to_json(&*v) {
            Ok(j) => j.to_string(),
            Err(e) => format!("unconvertible {} ({e})", v.get_type().name()),
        }),
        Err(e) => Err(error_text(&e)),
    }
}

/// `r` with its characters sorted: maps print their entries in hash order,
/// which differs between two evaluations of the same expression.
fn canonical(r: &Result<String, String>) -> (bool, Vec<char>) {
    let (ok, s) = match r {
        Ok(s) => (true, s),
        Err(s) => (false, s),
    };
    let mut chars: Vec<char> = s.chars().collect();
    chars.sort_unstable();
    (ok, chars)
}

/// `r` as [`canonical`], but of an error only the kind (the text before
/// its first `:`): which element of a map fails first depends on its hash
/// order, which differs between two conversions of the same JSON.
fn error_kind(r: &Result<String, String>) -> (bool, Vec<char>) {
    match r {
        Err(e) => canonical(&Err(e.split(':').next().unwrap_or_default().to_string())),
        ok => canonical(ok),
    }
}

fn evaluate_unmetered(
    env: &CelEnvironment,
    act: &Activation<'_>,
    src: &str,
) -> Result<String, String> {
    let expr = env.compile_unmetered(src).map_err(|e| e.to_string())?;
    let mut ctx = env.context();
    ctx.set_variable_resolver(act);
    describe(expr.evaluate_with_limit(&ctx, u64::MAX).0)
}

#[derive(Default)]
struct Tally {
    compiled: usize,
    evaluated: usize,
    cost_errors: usize,
    problems: Vec<String>,
}

/// The activation of `inputs`, each converted as far as `accesses` says.
fn activation<'a>(
    env: &'a CelEnvironment,
    inputs: &[(&'static str, &'a serde_json::Value)],
    accesses: &'a [Access],
    vars: &'a [CompiledVariable],
) -> Activation<'a> {
    let json_inputs = inputs
        .iter()
        .zip(accesses)
        .map(|((name, json), access)| (*name, *json, access))
        .collect();
    Activation::new(env, json_inputs, Vec::new(), vars)
}

/// `expr` evaluated (metered) in `act`, described; `Err` if it panicked.
fn evaluate_described(
    env: &CelEnvironment,
    expr: &CompiledExpression,
    act: &Activation<'_>,
) -> std::thread::Result<Result<String, String>> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut ctx = env.context();
        ctx.set_variable_resolver(act);
        describe(expr.evaluate_with_limit(&ctx, LIMIT).0)
    }))
}

#[test]
fn random_expressions_fail_cleanly_and_within_budget() {
    // The parser recurses per nesting level, with large frames in a debug
    // build: run on a stack as large as a release build's main thread needs.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(fuzz)
        .expect("thread starts")
        .join()
        .expect("fuzzing completes");
}

fn fuzz() {
    let env = CelEnvironment::shared();
    let vars = variables(&env);
    let object = object();
    let request =
        json!({"operation": "CREATE", "namespace": "default", "userInfo": {"username": "alice"}});
    let namespace = json!({"metadata": {"name": "default", "labels": {"env": "prod"}}});
    let null = serde_json::Value::Null;

    let mut gen = Gen {
        rng: Rng::new(SEED),
        scope: Vec::new(),
    };
    let mut tally = Tally::default();
    let started = Instant::now();
    for n in 0..EDGES.len() + EXPRESSIONS {
        // Every corner case once, then the random expressions.
        let src = match EDGES.get(n) {
            Some(edge) => edge.to_string(),
            None => gen.next_expression(),
        };
        if std::env::var_os("FUZZ_TRACE").is_some() {
            eprintln!("#{n}: {src}");
        }
        let compiled = catch_unwind(AssertUnwindSafe(|| env.compile(&src)));
        let expr = match compiled {
            Err(_) => {
                tally
                    .problems
                    .push(format!("#{n}: compile panicked: {src}"));
                continue;
            }
            Ok(Err(e)) => {
                // Upstream's two compile stages: checking, and building
                // the program (constant regexes and conversions folded).
                let text = e.to_string();
                if !text.starts_with("compilation failed: ")
                    && !text.starts_with("program instantiation failed: ")
                {
                    tally
                        .problems
                        .push(format!("#{n}: odd compile error {e}: {src}"));
                }
                continue;
            }
            Ok(Ok(expr)) => expr,
        };
        tally.compiled += 1;
        // The inputs converted only as far as the expression can observe
        // them, as the dispatcher does; checked below against whole inputs.
        let inputs = [
            ("object", &object),
            ("oldObject", &null),
            ("request", &request),
            ("params", &null),
            ("namespaceObject", &namespace),
        ];
        let var_asts: Vec<_> = vars
            .iter()
            .filter_map(|v| Some((v.name.as_str(), v.expression.as_ref().ok()?.ast())))
            .collect();
        let accesses: Vec<Access> = inputs
            .iter()
            .map(|(name, _)| activation_access(&[expr.ast()], &var_asts, name))
            .collect();
        let act = activation(&env, &inputs, &accesses, &vars);
        let full: Vec<Access> = inputs.iter().map(|_| Access::Full).collect();
        let whole = activation(&env, &inputs, &full, &vars);
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut ctx = env.context();
            ctx.set_variable_resolver(&act);
            let (result, cost) = expr.evaluate_with_limit(&ctx, LIMIT);
            match result {
                Ok(v) => {
                    // The conversions a mutation applies must not panic either.
                    let _ = val_to_json(&*v);
                    (Ok(()), cost)
                }
                Err(e) => (Err(error_text(&e)), cost),
            }
        }));
        let elapsed = t.elapsed();
        let Ok((result, cost)) = outcome else {
            tally
                .problems
                .push(format!("#{n}: evaluation panicked: {src}"));
            continue;
        };
        // Converting only what the expression can observe must not change
        // what it evaluates to.
        let on_whole = evaluate_described(&env, &expr, &whole);
        let on_part = evaluate_described(&env, &expr, &act);
        match (&on_whole, on_part) {
            (Ok(w), Ok(p)) if error_kind(w) != error_kind(&p) => tally.problems.push(format!(
                "#{n}: {p:?} on the observed part but {w:?} on whole inputs: {src}"
            )),
            (Ok(_), Ok(_)) => {}
            _ => tally
                .problems
                .push(format!("#{n}: evaluation on whole inputs panicked: {src}")),
        }
        // The variables' own reads count even when the expression names
        // none, and they cover the spec and the containers: an expression
        // that names no variable is checked again on what it alone reads.
        if Access::of(expr.ast(), "variables").is_none() {
            let alone: Vec<Access> = inputs
                .iter()
                .map(|(name, _)| activation_access(&[expr.ast()], &[], name))
                .collect();
            let act_alone = activation(&env, &inputs, &alone, &vars);
            let on_alone = evaluate_described(&env, &expr, &act_alone);
            match (&on_whole, on_alone) {
                (Ok(w), Ok(a)) if error_kind(w) != error_kind(&a) => tally.problems.push(format!(
                    "#{n}: {a:?} on the part it alone observes but {w:?} on whole inputs: {src}"
                )),
                (Ok(_), Ok(_)) | (Err(_), _) => {}
                (Ok(_), Err(_)) => tally.problems.push(format!(
                    "#{n}: evaluation on the part it alone observes panicked: {src}"
                )),
            }
        }
        // Metering must not change what an expression evaluates to.
        if !matches!(&result, Err(e) if e == COST_LIMIT_EXCEEDED) {
            let plain = catch_unwind(AssertUnwindSafe(|| evaluate_unmetered(&env, &act, &src)));
            let metered = evaluate_described(&env, &expr, &act);
            match (plain, metered) {
                (Ok(p), Ok(m)) if canonical(&p) != canonical(&m) => tally
                    .problems
                    .push(format!("#{n}: metered {m:?} but unmetered {p:?}: {src}")),
                (Ok(_), Ok(_)) => {}
                _ => tally
                    .problems
                    .push(format!("#{n}: re-evaluation panicked: {src}")),
            }
        }
        tally.evaluated += 1;
        match &result {
            Ok(()) if cost > LIMIT => tally
                .problems
                .push(format!("#{n}: succeeded at cost {cost} > {LIMIT}: {src}")),
            Err(e) if cost > LIMIT && e != COST_LIMIT_EXCEEDED => tally
                .problems
                .push(format!("#{n}: stopped at cost {cost} with {e:?}: {src}")),
            Err(e) if e == COST_LIMIT_EXCEEDED => tally.cost_errors += 1,
            _ => {}
        }
        if elapsed > RUNAWAY {
            tally.problems.push(format!(
                "#{n}: ran {elapsed:?} (cost {cost}, {result:?}): {src}"
            ));
        }
    }
    eprintln!(
        "{} expressions: {} compiled, {} evaluated, {} stopped by their cost, in {:?}",
        EDGES.len() + EXPRESSIONS,
        tally.compiled,
        tally.evaluated,
        tally.cost_errors,
        started.elapsed()
    );
    assert!(
        tally.compiled > EXPRESSIONS / 4,
        "too few expressions compile"
    );
    assert!(tally.cost_errors > 0, "no expression reached the limit");
    assert!(
        tally.problems.is_empty(),
        "{} problems:\n{}",
        tally.problems.len(),
        tally.problems.join("\n")
    );
}
