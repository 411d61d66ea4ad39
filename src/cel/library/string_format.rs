//! cel-go's `string.format` (`ext.Strings`, `ext/formatting.go`), which
//! kube-apiserver 1.36's base environment enables, in place of the crate's:
//! `%s` of a list or map writes CEL literals (`[1, "a"]`, `{"a":1}`), `%e`
//! is written by Go's `x/text` printer (`1.234500×10⁰³`), `%f` groups
//! thousands (`1,234.500000`), `%d` takes integers only, and the errors are
//! cel-go's. The parser is shared with the compile-time validator
//! (`check::format`), which checks the same clauses on static types.

use super::optional_lists::no_overload;
use crate::cel::structpb::{duration_string, timestamp_string};
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelDuration, CelInt, CelList, CelMap, CelNull, CelString,
    CelTimestamp, CelType, CelUInt, DYN_TYPE, STRING_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// A formatting clause's verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    String,
    Decimal,
    Fixed,
    Scientific,
    Binary,
    Hex { upper: bool },
    Octal,
}

impl Verb {
    fn of(c: char) -> Option<Verb> {
        Some(match c {
            's' => Verb::String,
            'd' => Verb::Decimal,
            'f' => Verb::Fixed,
            'e' => Verb::Scientific,
            'b' => Verb::Binary,
            'x' => Verb::Hex { upper: false },
            'X' => Verb::Hex { upper: true },
            'o' => Verb::Octal,
            _ => return None,
        })
    }

    /// cel-go's error for an argument of the type named `name`.
    pub(crate) fn refusal(self, name: &str) -> String {
        let what = match self {
            Verb::String => "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps",
            Verb::Decimal => "decimal clause can only be used on integers",
            Verb::Fixed => "fixed-point clause can only be used on doubles",
            Verb::Scientific => "scientific clause can only be used on doubles",
            Verb::Binary => "only integers and bools can be formatted as binary",
            Verb::Hex { .. } => "only integers, byte buffers, and strings can be formatted as hex",
            Verb::Octal => "octal clause can only be used on integers",
        };
        format!("error during formatting: {what}, was given {name}")
    }
}

/// A piece of a format string.
#[derive(Debug)]
pub(crate) enum Piece {
    Text(String),
    Clause(Verb, Option<usize>),
}

/// Why a format string does not parse, after the pieces before it.
#[derive(Debug)]
pub(crate) struct ParseError {
    pub(crate) message: String,
    /// Whether it comes before the clause's argument is taken (a `%`
    /// ending the text): the other errors come after a missing argument's.
    pub(crate) before_argument: bool,
}

/// The pieces of `format` up to the first clause that does not parse, and
/// that clause's error (cel-go `parseFormatString`, byte by byte).
pub(crate) fn parse(format: &str) -> (Vec<Piece>, Option<ParseError>) {
    let bytes = format.as_bytes();
    let mut pieces = Vec::new();
    let mut text = Vec::new();
    let mut i = 0;
    let fail = |message: String, before_argument| {
        Some(ParseError {
            message,
            before_argument,
        })
    };
    while i < bytes.len() {
        if bytes[i] != b'%' {
            text.push(bytes[i]);
            i += 1;
            continue;
        }
        if bytes.get(i + 1) == Some(&b'%') {
            text.push(b'%');
            i += 2;
            continue;
        }
        pieces.push(Piece::Text(String::from_utf8_lossy(&text).into_owned()));
        text.clear();
        if i + 1 >= bytes.len() {
            return (pieces, fail("unexpected end of string".into(), true));
        }
        let mut j = i + 1;
        let mut precision = None;
        if bytes[j] == b'.' {
            j += 1;
            let start = j;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                j += 1;
            }
            let prefix = "could not parse formatting clause: error while parsing precision";
            if j >= bytes.len() {
                let m = format!("{prefix}: could not find end of precision specifier");
                return (pieces, fail(m, false));
            }
            match format[start..j].parse::<usize>() {
                Ok(p) => precision = Some(p),
                Err(_) => {
                    let digits = &format[start..j];
                    let m = format!("{prefix}: error while converting precision to integer: strconv.Atoi: parsing \"{digits}\": invalid syntax");
                    return (pieces, fail(m, false));
                }
            }
        }
        let c = char::from(bytes[j]);
        let Some(verb) = Verb::of(c) else {
            let m = format!(
                "could not parse formatting clause: unrecognized formatting clause \"{c}\""
            );
            return (pieces, fail(m, false));
        };
        pieces.push(Piece::Clause(verb, precision));
        i = j + 1;
    }
    pieces.push(Piece::Text(String::from_utf8_lossy(&text).into_owned()));
    (pieces, None)
}

/// Registers `string.format(list)` before the crate's strings extension,
/// on any argument, so that it answers every call.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "format",
        "kmutate_string_format",
        STRING_TYPE,
        vec![DYN_TYPE],
        format_call,
    )
}

fn format_call<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (Some(format), Some(list)) = (
        args.first().and_then(|f| f.downcast_ref::<CelString>()),
        args.get(1).and_then(|l| l.downcast_ref::<CelList>()),
    ) else {
        return Err(no_overload("format", &args));
    };
    let items = list.inner();
    let error = |m: String| ExecutionError::function_error("format", m);
    let (pieces, parse_error) = parse(format.inner());
    let mut out = String::new();
    let mut index = 0;
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(&t),
            Piece::Clause(verb, precision) => {
                let Some(arg) = items.get(index) else {
                    return Err(error(format!("index {index} out of range")));
                };
                out.push_str(&clause(verb, precision, arg.as_ref()).map_err(error)?);
                index += 1;
            }
        }
    }
    if let Some(e) = parse_error {
        if !e.before_argument && index >= items.len() {
            return Err(error(format!("index {index} out of range")));
        }
        return Err(error(e.message));
    }
    Ok(CowVal::owned(CelString::from(out)))
}

/// The runtime type name cel-go's errors give a value.
fn type_name(v: &dyn Val) -> String {
    if v.downcast_ref::<CelList>().is_some() {
        "list".into()
    } else if v.downcast_ref::<CelMap>().is_some() {
        "map".into()
    } else if v.downcast_ref::<CelNull>().is_some() {
        "null_type".into()
    } else if v.downcast_ref::<CelTimestamp>().is_some() {
        "google.protobuf.Timestamp".into()
    } else if v.downcast_ref::<CelDuration>().is_some() {
        "google.protobuf.Duration".into()
    } else {
        v.get_type().name().to_string()
    }
}

fn clause(verb: Verb, precision: Option<usize>, v: &dyn Val) -> Result<String, String> {
    let int = v.downcast_ref::<CelInt>().map(|i| *i.inner());
    let uint = v.downcast_ref::<CelUInt>().map(|u| *u.inner());
    let refuse = || Err(verb.refusal(&type_name(v)));
    match verb {
        Verb::String => format_string(v).map_err(|e| format!("error during formatting: {e}")),
        Verb::Decimal => match (int, uint) {
            (Some(i), _) => Ok(i.to_string()),
            (_, Some(u)) => Ok(u.to_string()),
            _ => refuse(),
        },
        Verb::Octal => match (int, uint) {
            (Some(i), _) => Ok(signed(i, |m| format!("{m:o}"))),
            (_, Some(u)) => Ok(format!("{u:o}")),
            _ => refuse(),
        },
        Verb::Binary => match (int, uint, v.downcast_ref::<CelBool>()) {
            (Some(i), ..) => Ok(signed(i, |m| format!("{m:b}"))),
            (_, Some(u), _) => Ok(format!("{u:b}")),
            (.., Some(b)) => Ok(if *b.inner() { "1" } else { "0" }.into()),
            _ => refuse(),
        },
        Verb::Hex { upper } => {
            let hex = match (int, uint) {
                (Some(i), _) => signed(i, |m| format!("{m:x}")),
                (_, Some(u)) => format!("{u:x}"),
                _ => {
                    let bytes = match (v.downcast_ref::<CelString>(), v.downcast_ref::<CelBytes>())
                    {
                        (Some(s), _) => s.inner().as_bytes().to_vec(),
                        (_, Some(b)) => b.inner().to_vec(),
                        _ => return refuse(),
                    };
                    bytes.iter().map(|b| format!("{b:02x}")).collect()
                }
            };
            Ok(if upper { hex.to_uppercase() } else { hex })
        }
        Verb::Fixed | Verb::Scientific => {
            let f = match (v.downcast_ref::<CelDouble>(), v.downcast_ref::<CelString>()) {
                (Some(d), _) => *d.inner(),
                (_, Some(s)) if s.inner() == "NaN" => f64::NAN,
                (_, Some(s)) if s.inner() == "Infinity" => f64::INFINITY,
                (_, Some(s)) if s.inner() == "-Infinity" => f64::NEG_INFINITY,
                _ => return refuse(),
            };
            Ok(if verb == Verb::Fixed {
                fixed(f, precision.unwrap_or(6))
            } else {
                // cel-go passes the precision as the width (`%6e`).
                let s = scientific(f);
                let pad = precision.unwrap_or(6).saturating_sub(s.chars().count());
                format!("{}{s}", " ".repeat(pad))
            })
        }
    }
}

/// Go's `%x`, `%o`, `%b` of a signed integer: the magnitude with a sign.
fn signed(i: i64, digits: impl Fn(u64) -> String) -> String {
    let m = digits(i.unsigned_abs());
    if i < 0 {
        format!("-{m}")
    } else {
        m
    }
}

/// Go's `x/text` printer's `%.Nf` in English: thousands grouped.
fn fixed(f: f64, precision: usize) -> String {
    if !f.is_finite() {
        return non_finite(f);
    }
    let text = format!("{:.*}", precision, f.abs());
    let (whole, fraction) = text
        .split_once('.')
        .map_or((text.as_str(), None), |(w, r)| (w, Some(r)));
    let mut grouped = String::new();
    for (n, c) in whole.chars().enumerate() {
        if n > 0 && (whole.len() - n) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if f.is_sign_negative() && f != 0.0 {
        "-"
    } else {
        ""
    };
    match fraction {
        Some(r) => format!("{sign}{grouped}.{r}"),
        None => format!("{sign}{grouped}"),
    }
}

/// Go's `x/text` printer's `%e`: six decimals, then `×10` and the
/// exponent in superscript digits, two at least.
fn scientific(f: f64) -> String {
    if !f.is_finite() {
        return non_finite(f);
    }
    let text = format!("{f:.6e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    const SUPERSCRIPT: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    let digits: String = format!("{:02}", exponent.unsigned_abs())
        .bytes()
        .map(|d| SUPERSCRIPT[usize::from(d - b'0')])
        .collect();
    let sign = if exponent < 0 { "⁻" } else { "" };
    format!("{mantissa}×10{sign}{digits}")
}

fn non_finite(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f > 0.0 {
        "∞".into()
    } else {
        "-∞".into()
    }
}

/// The function `string(x)` calls are renamed to once compiled (see
/// `rewrite::rename_conversions`): cel-go's conversion where the
/// crate's differs, a double in Go's shortest form (`1e-07`, `1e+21`) and a
/// timestamp in its own offset (the crate's is in UTC).
pub const STRING_FN: &str = "@kmutate_string";

/// Registers [`STRING_FN`].
pub fn register_string(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(STRING_FN, "kmutate_string", vec![DYN_TYPE], to_string)
}

fn to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let text = match args.as_slice() {
        [v] if v.downcast_ref::<CelBytes>().is_some() => {
            let bytes = v.downcast_ref::<CelBytes>().map(|b| b.inner().to_vec());
            String::from_utf8(bytes.unwrap_or_default()).map_err(|_| {
                ExecutionError::function_error(
                    "string",
                    "invalid UTF-8 in bytes, cannot convert to string",
                )
            })?
        }
        // `string(null)`, `string(int)`: no overload, as the crate's.
        [v] if v.downcast_ref::<CelNull>().is_some() || v.downcast_ref::<CelType>().is_some() => {
            return Err(no_overload("string", &args));
        }
        [v] => match (
            scalar_string(v.as_ref()),
            super::ip::library_string(v.as_ref()),
        ) {
            (Some(Ok(s)), _) | (_, Some(s)) => s,
            _ => return Err(no_overload("string", &args)),
        },
        _ => return Err(no_overload("string", &args)),
    };
    Ok(CowVal::owned(CelString::from(text)))
}

/// cel-go's `FormatString`: a value as `string()` converts it; lists and
/// maps as CEL literals.
fn format_string(v: &dyn Val) -> Result<String, String> {
    if let Some(list) = v.downcast_ref::<CelList>() {
        let items = list
            .inner()
            .iter()
            .map(|x| member(x.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(format!("[{}]", items.join(", ")));
    }
    if let Some(map) = v.downcast_ref::<CelMap>() {
        let mut entries = Vec::new();
        for (k, x) in map.inner() {
            let k = k.inner();
            let key = if k.downcast_ref::<CelString>().is_some()
                || k.downcast_ref::<CelBool>().is_some()
            {
                quote_for_cel(k, format_string(k)?)
            } else if let Some(i) = k.downcast_ref::<CelInt>() {
                i.inner().to_string()
            } else if let Some(u) = k.downcast_ref::<CelUInt>() {
                u.inner().to_string()
            } else {
                return Err(format!(
                    "no formatting function for map key of type {}",
                    type_name(k)
                ));
            };
            entries.push((key, member(x.as_ref())?));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let entries: Vec<String> = entries
            .into_iter()
            .map(|(k, x)| format!("{k}:{x}"))
            .collect();
        return Ok(format!("{{{}}}", entries.join(", ")));
    }
    scalar_string(v).ok_or_else(|| {
        Verb::String
            .refusal(&type_name(v))
            .trim_start_matches("error during formatting: ")
            .to_string()
    })?
}

/// A scalar as `string()` converts it (`None`: no such conversion).
fn scalar_string(v: &dyn Val) -> Option<Result<String, String>> {
    Some(Ok(if let Some(i) = v.downcast_ref::<CelInt>() {
        i.inner().to_string()
    } else if let Some(u) = v.downcast_ref::<CelUInt>() {
        u.inner().to_string()
    } else if let Some(d) = v.downcast_ref::<CelDouble>() {
        go_shortest(*d.inner())
    } else if let Some(b) = v.downcast_ref::<CelBool>() {
        b.inner().to_string()
    } else if let Some(s) = v.downcast_ref::<CelString>() {
        s.inner().to_string()
    } else if let Some(b) = v.downcast_ref::<CelBytes>() {
        return Some(String::from_utf8(b.inner().to_vec()).map_err(|_| {
            "could not convert argument \"invalid UTF-8 in bytes, cannot convert to string\" to string".to_string()
        }));
    } else if let Some(t) = v.downcast_ref::<CelTimestamp>() {
        timestamp_string(t.inner())
    } else if let Some(d) = v.downcast_ref::<CelDuration>() {
        duration_string(d.inner())
    } else if let Some(t) = v.downcast_ref::<CelType>() {
        t.name().to_string()
    } else if v.downcast_ref::<CelNull>().is_some() {
        "null".into()
    } else {
        return None;
    }))
}

/// An element of a list or a map's value, as `%s` of the list writes it
/// (cel-go `formatList`'s `clauseForType` and `quoteForCEL`).
fn member(v: &dyn Val) -> Result<String, String> {
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        let f = *d.inner();
        let text = if f.is_nan() {
            "NaN".to_string()
        } else if f.is_infinite() {
            if f > 0.0 { "+Inf" } else { "-Inf" }.to_string()
        } else {
            format!("{f:.6}")
        };
        return Ok(if f.is_finite() { text } else { go_quote(&text) });
    }
    if let Some(t) = v.downcast_ref::<CelTimestamp>() {
        return Ok(format!(
            "timestamp({})",
            go_quote(&timestamp_string(t.inner()))
        ));
    }
    if let Some(d) = v.downcast_ref::<CelDuration>() {
        return Ok(format!(
            "duration({})",
            go_quote(&duration_string(d.inner()))
        ));
    }
    if v.downcast_ref::<CelList>().is_some() || v.downcast_ref::<CelMap>().is_some() {
        return format_string(v);
    }
    match scalar_string(v) {
        Some(s) => Ok(quote_for_cel(v, s?)),
        None => Err(format!("no formatting function for {}", type_name(v))),
    }
}

fn quote_for_cel(v: &dyn Val, text: String) -> String {
    if v.downcast_ref::<CelString>().is_some() {
        go_quote(&text)
    } else if v.downcast_ref::<CelBytes>().is_some() {
        format!("b{}", go_quote(&text))
    } else {
        text
    }
}

/// Go's `%q` of a string (`strconv.Quote`): printable characters kept,
/// the others escaped as Go escapes them.
fn go_quote(s: &str) -> String {
    const ESCAPES: [(char, &str); 9] = [
        ('"', "\\\""),
        ('\\', "\\\\"),
        ('\n', "\\n"),
        ('\r', "\\r"),
        ('\t', "\\t"),
        ('\u{7}', "\\a"),
        ('\u{8}', "\\b"),
        ('\u{c}', "\\f"),
        ('\u{b}', "\\v"),
    ];
    let mut out = String::from("\"");
    for c in s.chars() {
        if let Some((_, escape)) = ESCAPES.iter().find(|(e, _)| *e == c) {
            out.push_str(escape);
        } else if (c as u32) < 0x20 || c == '\u{7f}' {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, as cel-go's `string()` of a
/// double: the shortest digits, in exponent form below 1e-4 or from 1e6
/// (Go decides with precision 6 when asked for the shortest digits).
pub(crate) fn go_shortest(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let e = format!("{f:e}");
    let (mantissa, exponent) = e.split_once('e').unwrap_or((&e, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use crate::cel::eval_json;
    use serde_json::json;

    // Expectations from upstream's plugin (maporacle, k8s.io/apiserver v0.36.2).
    #[test]
    fn format_as_cel_go() {
        for (src, expected) in [
            ("'%f'.format([1234567.5])", "1,234,567.500000"),
            ("'%.2f'.format([-1234.567])", "-1,234.57"),
            ("'%e'.format([0.00123])", "1.230000×10⁻⁰³"),
            ("'%e'.format([-1234.5])", "-1.234500×10⁰³"),
            ("'%.2e'.format([0.0])", "0.000000×10⁰⁰"),
            ("'%e'.format([1e100])", "1.000000×10¹⁰⁰"),
            ("'%e'.format(['Infinity'])", "     ∞"),
            ("'%f'.format(['NaN'])", "NaN"),
            ("'%s'.format([1000000.0])", "1e+06"),
            ("'%s'.format([1234567.0])", "1.234567e+06"),
            ("'%s'.format([123456.0])", "123456"),
            ("'%s'.format([0.00001234])", "1.234e-05"),
            (
                "'%s'.format([[1.5, 1e21, b'ab', 'x\"y', true, null, [2u]]])",
                "[1.500000, 1000000000000000000000.000000, b\"ab\", \"x\\\"y\", true, null, [2]]",
            ),
            ("'%s'.format([{2: 'b', 1: 'a'}])", "{1:\"a\", 2:\"b\"}"),
            ("'%s'.format([{true: 1.0}])", "{true:1.000000}"),
            ("'%x'.format([-255])", "-ff"),
            ("'%X'.format(['hi'])", "6869"),
            (
                "'%s'.format([[duration('1s'), timestamp('2020-01-01T00:00:00Z')]])",
                "[duration(\"1s\"), timestamp(\"2020-01-01T00:00:00Z\")]",
            ),
            ("'%s'.format([[int]])", "[int]"),
            ("'%b'.format([true])", "1"),
            ("'%o'.format([-8])", "-10"),
            ("'%s'.format([1.0/0.0])", "+Inf"),
            ("'%s'.format([[1.0/0.0]])", "[\"+Inf\"]"),
            (
                "'%s'.format([timestamp('2020-01-02T03:04:05+02:00')])",
                "2020-01-02T03:04:05+02:00",
            ),
        ] {
            assert_eq!(eval_json(src), Ok(json!(expected)), "{src}");
        }
        for (src, error) in [
            ("'%.3f'.format(dyn([1]))", "error during formatting: fixed-point clause can only be used on doubles, was given int"),
            ("'%d'.format(dyn([4.2]))", "error during formatting: decimal clause can only be used on integers, was given double"),
            ("'%s'.format(dyn([[b'\\xff']]))", "error during formatting: could not convert argument \"invalid UTF-8 in bytes, cannot convert to string\" to string"),
            ("'%q'.format(dyn(['a']))", "could not parse formatting clause: unrecognized formatting clause \"q\""),
            ("string(b'\\xff' + b'')", "invalid UTF-8 in bytes, cannot convert to string"),
            ("string(dyn(quantity('1')))", "no such overload: string(kubernetes.Quantity)"),
        ] {
            assert_eq!(eval_json(src), Err(error.to_string()), "{src}");
        }
    }
}
