//! Go formatting compatibility: `strconv.Quote` and `fmt` renderings of JSON values, as they appear in structured-merge-diff
//! error messages (values there are `*value.valueUnstructured` wrapping
//! unstructured Go values: `map[string]interface{}`, `[]interface{}`,
//! `int64`, `float64`, `string`, `bool`, `nil`).

use serde_json::{Number, Value};
use std::fmt::Write as _;

/// Go `%v` of a `*value.valueUnstructured`: `&{...}`.
pub(crate) fn value_v(v: &Value) -> String {
    format!("&{{{}}}", plain(v))
}

/// Go `%#v` of a `*value.valueUnstructured`.
pub(crate) fn value_sharp_v(v: &Value) -> String {
    format!("&value.valueUnstructured{{Value:{}}}", sharp(v))
}

/// Go `%T` of the unstructured value.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if is_int(n) => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// SMD `value.ToString`: the rendering used in path elements.
pub(crate) fn to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(to_string).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            keys.iter()
                .map(|k| format!("{}={}", k, to_string(&m[k.as_str()])))
                .collect::<Vec<_>>()
                .join("")
        }
    }
}

pub(crate) fn is_int(n: &Number) -> bool {
    n.is_i64() || n.is_u64()
}

fn number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        float(n.as_f64().unwrap_or(0.0))
    }
}

/// Go `%v` of a value inside an interface.
fn plain(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(plain).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", k, plain(&m[k.as_str()])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go `%#v` of a value inside an interface.
fn sharp(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(sharp).collect();
            format!("[]interface {{}}{{{}}}", parts.join(", "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", quote(k), sharp(&m[k.as_str()])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

/// Go `strconv.Quote` (`%q` of a string).
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if is_print(c) => out.push(c),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// `unicode.IsPrint`: exact for ASCII, Latin-1 and the format/space/private-use characters;
/// unassigned code points outside the ranges listed count as printable.
pub(crate) fn is_print(c: char) -> bool {
    let u = c as u32;
    if u < 0x7f {
        return u >= 0x20;
    }
    if u < 0xa1 || u & 0xfffe == 0xfffe {
        return false;
    }
    !matches!(
        u,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x890..=0x891
            | 0x8e2
            | 0x1680
            | 0x180e
            | 0x2000..=0x200f
            | 0x2028..=0x202f
            | 0x205f..=0x206f
            | 0x3000
            | 0xd800..=0xf8ff
            | 0xfdd0..=0xfdef
            | 0xfeff
            | 0xfff0..=0xfffb
            | 0x110bd
            | 0x110cd
            | 0x13430..=0x1343f
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0x2a6e0..=0x2a6ff
            | 0x2b73a..=0x2b73f
            | 0x2b81e..=0x2b81f
            | 0x2cea2..=0x2ceaf
            | 0x2ebe1..=0x2f7ff
            | 0x2fa1e..=0x2ffff
            | 0x3134b..=0x3134f
            | 0x323b0..=0xe00ff
            | 0xe01f0..=0x10ffff
    )
}

/// Go `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)` with Go's
/// shortest-precision exponent threshold).
pub(crate) fn float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's LowerExp prints the shortest round-trip digits: "d.ddde[-]x".
    let e = format!("{:e}", f);
    let (mantissa, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let point = exp as usize + 1;
        if digits.len() <= point {
            out.push_str(&digits);
            for _ in digits.len()..point {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Expected texts follow Go's fmt/strconv documentation:
    // %v of a pointer to struct is &{field}, %#v spells the type,
    // maps print sorted by key, %g switches to exponent form at 1e+06.
    #[test]
    fn go_renderings() {
        assert_eq!(value_v(&json!("abc")), "&{abc}");
        assert_eq!(
            value_v(&json!({"b": 1, "a": [true, "x"]})),
            "&{map[a:[true x] b:1]}"
        );
        assert_eq!(
            value_sharp_v(&json!(1)),
            "&value.valueUnstructured{Value:1}"
        );
        assert_eq!(
            value_sharp_v(&json!({"k": "v", "a": null})),
            "&value.valueUnstructured{Value:map[string]interface {}{\"a\":interface {}(nil), \"k\":\"v\"}}"
        );
        assert_eq!(
            value_sharp_v(&json!(["a", 2])),
            "&value.valueUnstructured{Value:[]interface {}{\"a\", 2}}"
        );
        assert_eq!(type_name(&json!("x")), "string");
        assert_eq!(type_name(&json!({})), "map[string]interface {}");
        assert_eq!(float(1.5), "1.5");
        assert_eq!(float(1.0), "1");
        assert_eq!(float(100000.0), "100000");
        assert_eq!(float(1000000.0), "1e+06");
        assert_eq!(float(123456789.0), "1.23456789e+08");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(0.00001), "1e-05");
        assert_eq!(float(-2.5), "-2.5");
        assert_eq!(quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
        assert_eq!(to_string(&json!("TCP")), "\"TCP\"");
        assert_eq!(to_string(&json!(80)), "80");
    }
}
