//! cel-go's `double(x)` conversion, in place of the crate's where they
//! differ: a string is read by Go's `strconv.ParseFloat(s, 64)`, which
//! refuses a value out of float64's range (`double('1e999')` is `type
//! conversion error from 'string' to 'double'`, not infinity) and accepts
//! hexadecimal mantissas (`0x1.8p1`) and digits separated by underscores
//! (`1_000`), as maporacle (k8s.io/apiserver v0.36.2) answers.

use super::optional_lists::no_overload;
use cel::common::types::{CelDouble, CelInt, CelString, CelUInt, DYN_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// The function `double(x)` calls are renamed to once compiled (see
/// `rewrite::rename_conversions`).
pub const DOUBLE_FN: &str = "@kmutate_double";

/// Registers [`DOUBLE_FN`].
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(DOUBLE_FN, "kmutate_double", vec![DYN_TYPE], to_double)
}

fn to_double<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = match args.as_slice() {
        [v] => number(v.as_ref()),
        _ => None,
    };
    match value {
        Some(Ok(d)) => Ok(CowVal::owned(CelDouble::from(d))),
        Some(Err(())) => Err(ExecutionError::function_error(
            "double",
            "type conversion error from 'string' to 'double'",
        )),
        None => Err(no_overload("double", &args)),
    }
}

/// `v` as a double; `None` where `double()` has no overload for its type,
/// `Some(Err(()))` for a string Go does not parse.
fn number(v: &dyn Val) -> Option<Result<f64, ()>> {
    if let Some(d) = v.downcast_ref::<CelDouble>() {
        Some(Ok(*d.inner()))
    } else if let Some(i) = v.downcast_ref::<CelInt>() {
        Some(Ok(*i.inner() as f64))
    } else if let Some(u) = v.downcast_ref::<CelUInt>() {
        Some(Ok(*u.inner() as f64))
    } else {
        v.downcast_ref::<CelString>()
            .map(|s| go_parse_float(s.inner()).ok_or(()))
    }
}

/// Go's `strconv.ParseFloat(s, 64)`; `None` for its syntax and range
/// errors (an overflow; an underflow is zero, as Go's).
pub fn go_parse_float(s: &str) -> Option<f64> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    // Go reads `nan` only without a sign.
    if lower == "nan" {
        return (body.len() == s.len()).then_some(f64::NAN);
    }
    let hex = lower.starts_with("0x");
    if body.contains('_') && !underscores_separate_digits(&lower, hex) {
        return None;
    }
    let digits: String = lower.chars().filter(|c| *c != '_').collect();
    let magnitude = if hex {
        parse_hex(&digits[2..])?
    } else {
        // Rust's grammar for the rest is Go's (`5.`, `.5`, `1E5`), less the
        // words handled above.
        if !digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'))
        {
            return None;
        }
        digits.parse::<f64>().ok()?
    };
    if magnitude.is_infinite() {
        return None;
    }
    Some(if negative { -magnitude } else { magnitude })
}

/// Go's `underscoreOK`: each `_` stands between two digits (or after a
/// base prefix).
fn underscores_separate_digits(s: &str, hex: bool) -> bool {
    let bytes = s.as_bytes();
    let start = if hex { 2 } else { 0 };
    let is_digit = |b: u8| {
        if hex {
            b.is_ascii_hexdigit()
        } else {
            b.is_ascii_digit()
        }
    };
    for (i, b) in bytes.iter().enumerate().skip(start) {
        if *b != b'_' {
            continue;
        }
        let before = if i == start && hex {
            true
        } else {
            i > start && is_digit(bytes[i - 1])
        };
        let after = bytes.get(i + 1).is_some_and(|b| is_digit(*b));
        if !before || !after {
            return false;
        }
    }
    true
}

/// A hexadecimal float's mantissa and binary exponent (`1.8p1`): Go
/// requires the `p` exponent.
fn parse_hex(s: &str) -> Option<f64> {
    let (mantissa, exponent) = s.split_once('p')?;
    let exponent: i64 = match exponent.as_bytes().first() {
        Some(b'+') | Some(b'-') if exponent.len() > 1 => exponent.parse().ok()?,
        Some(b) if b.is_ascii_digit() => exponent.parse().ok()?,
        _ => return None,
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    let mut shift: i64 = 0;
    let mut sticky = false;
    for (i, c) in whole.chars().chain(fraction.chars()).enumerate() {
        let d = c.to_digit(16)? as u64;
        let in_fraction = i >= whole.len();
        if value >> 60 == 0 {
            value = value * 16 + d;
            if in_fraction {
                shift -= 4;
            }
        } else {
            // Digits past 64 bits only round.
            sticky |= d != 0;
            if !in_fraction {
                shift += 4;
            }
        }
    }
    if sticky {
        value |= 1;
    }
    let scale = exponent.saturating_add(shift);
    Some(scale_by_two(value as f64, scale))
}

/// `m × 2^e` without overflowing the intermediate power.
fn scale_by_two(mut m: f64, mut e: i64) -> f64 {
    while e > 0 && m.is_finite() && m != 0.0 {
        let step = e.min(1000);
        m *= 2f64.powi(step as i32);
        e -= step;
    }
    while e < 0 && m != 0.0 {
        let step = (-e).min(1000);
        m *= 2f64.powi(-(step as i32));
        e += step;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::go_parse_float;

    // maporacle (k8s.io/apiserver v0.36.2), `string(double(s))` of a string
    // not known when compiled.
    #[test]
    fn strings_as_go_parses_them() {
        let parsed = [
            ("1e-400", Some(0.0)),
            ("0x1p-2", Some(0.25)),
            ("inf", Some(f64::INFINITY)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("+inf", Some(f64::INFINITY)),
            ("1_000", Some(1000.0)),
            ("+1.5", Some(1.5)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("1e308", Some(1e308)),
            ("0x1.8p1", Some(3.0)),
            ("0x_1p0", Some(1.0)),
            ("1E5", Some(100000.0)),
            (" 1", None),
            ("1.8e308", None),
            ("1e999", None),
            ("-1e999", None),
            ("+nan", None),
            ("-nan", None),
            ("0x1", None),
            ("0x1p", None),
            ("1__0", None),
            ("_1", None),
            ("1_", None),
            ("1._5", None),
            ("1e", None),
            (".", None),
            ("Inf5", None),
            ("infinit", None),
            ("0x1.fffffffffffff8p1023", None),
            ("0x.8p1", Some(1.0)),
            ("1e+5", Some(100000.0)),
            ("0X1P3", Some(8.0)),
            ("0x1p+2", Some(4.0)),
            ("0x1_0p0", Some(16.0)),
            ("1_0.5_5", Some(10.55)),
            ("4.9e-324", Some(5e-324)),
            ("0x1p-1074", Some(5e-324)),
            ("0x1p-1080", Some(0.0)),
            ("1e-320", Some(1e-320)),
        ];
        for (text, want) in parsed {
            assert_eq!(go_parse_float(text), want, "{text}");
        }
        assert!(go_parse_float("NaN").unwrap().is_nan());
        assert!(go_parse_float("nan").unwrap().is_nan());
    }
}
