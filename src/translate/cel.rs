//! Small helpers that build CEL source text.

use serde_json::Value as Json;

/// CEL's reserved words: not usable as `a.b` selectors.
const RESERVED: [&str; 23] = [
    "as",
    "break",
    "const",
    "continue",
    "else",
    "false",
    "for",
    "function",
    "if",
    "import",
    "in",
    "let",
    "loop",
    "package",
    "namespace",
    "null",
    "return",
    "true",
    "var",
    "void",
    "while",
    "has",
    "dyn",
];

/// A CEL string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A CEL double literal (always with a decimal point or exponent).
pub fn double(f: f64) -> String {
    let s = format!("{f:?}");
    if s.contains('.') || s.contains('e') || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// The CEL type of a JSON value's literal (as `literal` writes it).
fn type_of(v: &Json) -> String {
    match v {
        Json::Null => "null_type".into(),
        Json::Bool(_) => "bool".into(),
        Json::Number(n) if n.is_i64() => "int".into(),
        Json::Number(n) if n.is_u64() => "uint".into(),
        Json::Number(_) => "double".into(),
        Json::String(_) => "string".into(),
        Json::Array(a) => format!("list({})", common_type(a.iter())),
        Json::Object(m) => format!("map(string, {})", common_type(m.values())),
    }
}

/// The one type of the items, or `dyn` when they differ (or there are none).
fn common_type<'a>(mut items: impl Iterator<Item = &'a Json>) -> String {
    let Some(first) = items.next() else {
        return "dyn".into();
    };
    let t = type_of(first);
    if items.all(|i| type_of(i) == t) {
        t
    } else {
        "dyn".into()
    }
}

/// Whether the items of a literal have one CEL type. Kubernetes CEL
/// compiles with homogeneous aggregate literals: a list or map literal
/// whose items differ in type is a compile error there, so such items are
/// wrapped in `dyn()`.
fn homogeneous<'a>(items: impl Iterator<Item = &'a Json> + Clone) -> bool {
    items.clone().count() < 2 || common_type(items) != "dyn"
}

/// A CEL literal for a JSON value (maps with string keys, in source order);
/// items of mixed types are wrapped in `dyn()`.
pub fn literal(v: &Json) -> String {
    match v {
        Json::Null => "null".into(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                format!("{u}u")
            } else {
                double(n.as_f64().unwrap_or(0.0))
            }
        }
        Json::String(s) => quote(s),
        Json::Array(a) => {
            let wrap = !homogeneous(a.iter());
            format!(
                "[{}]",
                a.iter()
                    .map(|i| item(i, wrap))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        Json::Object(m) => {
            let wrap = !homogeneous(m.values());
            format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, v)| format!("{}: {}", quote(k), item(v, wrap)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    }
}

/// A list item or map value: `dyn(...)` when its literal is not homogeneous.
pub fn item(v: &Json, wrap: bool) -> String {
    if wrap {
        format!("dyn({})", literal(v))
    } else {
        literal(v)
    }
}

/// Whether `s` can follow a `.` in CEL.
pub fn is_selector(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&s)
}

/// One segment of a field path: a fixed key, or a CEL string expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A key known when translating.
    Static(String),
    /// A CEL expression of type string, computed at admission.
    Dynamic(String),
}

/// `root` followed by optional selections of `segs`: an `optional` value.
pub fn opt_chain(root: &str, segs: &[Seg]) -> String {
    let mut out = root.to_string();
    for s in segs {
        match s {
            Seg::Static(k) if is_selector(k) => {
                out.push_str(".?");
                out.push_str(k);
            }
            Seg::Static(k) => out.push_str(&format!("[?{}]", quote(k))),
            Seg::Dynamic(e) => out.push_str(&format!("[?({e})]")),
        }
    }
    out
}

/// RFC 6901 escaping of one reference token.
pub fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// A CEL string expression for the JSON pointer of `segs`.
pub fn pointer(segs: &[Seg]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut lit = String::new();
    for s in segs {
        lit.push('/');
        match s {
            Seg::Static(k) => lit.push_str(&escape_pointer(k)),
            Seg::Dynamic(e) => {
                parts.push(quote(&lit));
                lit.clear();
                parts.push(format!("jsonpatch.escapeKey({e})"));
            }
        }
    }
    if !lit.is_empty() || parts.is_empty() {
        parts.push(quote(&lit));
    }
    parts.join(" + ")
}

/// A CEL map key for a segment.
pub fn key(s: &Seg) -> String {
    match s {
        Seg::Static(k) => quote(k),
        Seg::Dynamic(e) => format!("({e})"),
    }
}

/// `JSONPatch{op: "add", path: ..., value: ...}`.
pub fn add(path: &str, value: &str) -> String {
    format!("JSONPatch{{op: \"add\", path: {path}, value: {value}}}")
}

/// `JSONPatch{op: "remove", path: ...}`.
pub fn remove(path: &str) -> String {
    format!("JSONPatch{{op: \"remove\", path: {path}}}")
}

/// The CEL list of patch operations that sets `segs` of `object` to
/// `value`, creating missing (absent or null) parents as maps: the first
/// missing parent receives the rest of the path as nested maps.
pub fn set_path(segs: &[Seg], value: &str) -> String {
    let mut lines = Vec::new();
    for i in 1..segs.len() {
        let missing = format!("{}.orValue(null) == null", opt_chain("object", &segs[..i]));
        let mut nested = value.to_string();
        for s in segs[i..].iter().rev() {
            nested = format!("{{{}: {nested}}}", key(s));
        }
        lines.push(format!(
            "{missing} ? [{}] :",
            add(&pointer(&segs[..i]), &nested)
        ));
    }
    lines.push(format!("[{}]", add(&pointer(segs), value)));
    lines.join("\n")
}
