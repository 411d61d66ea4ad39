//! Kubernetes CEL library: named formats
//! (`k8s.io/apiserver/pkg/cel/library/format.go`).
//!
//! `format.named(<string>)` (an optional `kubernetes.NamedFormat`), one
//! `format.<name>()` per format, and `<NamedFormat>.validate(<string>)`,
//! `optional.none()` for a valid string and `optional.of([errors])`
//! otherwise, with the apimachinery / kube-openapi messages.

use super::urls;
use cel::common::types::{CelList, CelOptional, CelString, Type, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::sync::OnceLock;

static FORMAT_TYPE: Type = Type::new_struct_type("kubernetes.NamedFormat");

/// The formats, by `format.named` name, with their `Format.Name`.
const FORMATS: [(&str, &str); 13] = [
    ("dns1123Label", "DNS1123Label"),
    ("dns1123Subdomain", "DNS1123Subdomain"),
    ("dns1035Label", "DNS1035Label"),
    ("qualifiedName", "QualifiedName"),
    ("dns1123LabelPrefix", "DNS1123LabelPrefix"),
    ("dns1123SubdomainPrefix", "DNS1123SubdomainPrefix"),
    ("dns1035LabelPrefix", "DNS1035LabelPrefix"),
    ("labelValue", "LabelValue"),
    ("uri", "URI"),
    ("uuid", "uuid"),
    ("byte", "byte"),
    ("date", "date"),
    ("datetime", "datetime"),
];

/// A `kubernetes.NamedFormat`: an index into [`FORMATS`].
#[derive(Debug, Clone, Copy)]
pub struct NamedFormat(usize);

impl Val for NamedFormat {
    fn get_type(&self) -> &Type {
        &FORMAT_TYPE
    }

    fn cel_type() -> &'static Type {
        &FORMAT_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<NamedFormat>()
            .is_some_and(|o| FORMATS[o.0].1 == FORMATS[self.0].1)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for NamedFormat {}

fn constant<'b, 'v, const I: usize>(
    _args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(NamedFormat(I)))
}

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("format.named", "format-named", vec![STRING_TYPE], named)?;
    let constants: [cel::common::functions::Function; 13] = [
        constant::<0>,
        constant::<1>,
        constant::<2>,
        constant::<3>,
        constant::<4>,
        constant::<5>,
        constant::<6>,
        constant::<7>,
        constant::<8>,
        constant::<9>,
        constant::<10>,
        constant::<11>,
        constant::<12>,
    ];
    for ((name, _), f) in FORMATS.iter().zip(constants) {
        let full = format!("format.{name}");
        env.add_overload(&full, &full, vec![], f)?;
    }
    env.add_member_overload(
        "validate",
        "format-validate",
        FORMAT_TYPE.to_owned(),
        vec![STRING_TYPE],
        validate,
    )?;
    Ok(())
}

fn named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let name = match args.as_slice() {
        [n] => n
            .downcast_ref::<CelString>()
            .map(|s| s.inner().to_string())
            .ok_or_else(|| super::lists::no_such_overload("format.named"))?,
        _ => return Err(super::lists::no_such_overload("format.named")),
    };
    Ok(CowVal::owned(
        match FORMATS.iter().position(|(n, _)| *n == name) {
            Some(i) => CelOptional::of(Box::new(NamedFormat(i))),
            None => CelOptional::none(),
        },
    ))
}

fn validate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (format, s) = match args.as_slice() {
        [f, s] => (
            f.downcast_ref::<NamedFormat>()
                .copied()
                .ok_or_else(|| super::lists::no_such_overload("validate"))?,
            s.downcast_ref::<CelString>()
                .map(|s| s.inner().to_string())
                .ok_or_else(|| super::lists::no_such_overload("validate"))?,
        ),
        _ => return Err(super::lists::no_such_overload("validate")),
    };
    let errors = validate_format(FORMATS[format.0].0, s.as_bytes())
        .map_err(|m| ExecutionError::function_error("validate", m))?;
    if errors.is_empty() {
        return Ok(CowVal::owned(CelOptional::none()));
    }
    let list: Vec<Box<dyn Val>> = errors
        .into_iter()
        .map(|e| Box::new(CelString::from(e)) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelOptional::of(Box::new(CelList::from(
        list,
    )))))
}

/// The validation errors of `s` for the format called `name`; `Err` for a
/// Go panic (recovered by cel-go as an `internal error`).
pub fn validate_format(name: &str, s: &[u8]) -> Result<Vec<String>, String> {
    Ok(match name {
        "dns1123Label" => is_dns1123_label(s),
        "dns1123Subdomain" => is_dns1123_subdomain(s),
        "dns1035Label" => is_dns1035_label(s),
        "qualifiedName" => is_label_key(s),
        "dns1123LabelPrefix" => is_dns1123_label(&mask_trailing_dash(s)?),
        "dns1123SubdomainPrefix" => is_dns1123_subdomain(&mask_trailing_dash(s)?),
        "dns1035LabelPrefix" => is_dns1035_label(&mask_trailing_dash(s)?),
        "labelValue" => is_label_value(s),
        "uri" => match urls::parse_request_uri(&String::from_utf8_lossy(s)) {
            Ok(_) => vec![],
            Err(e) => vec![e],
        },
        "uuid" => check(is_uuid(s), "does not match the UUID format"),
        "byte" => check(is_base64(s), "invalid base64"),
        "date" => check(is_date(s), "invalid date"),
        "datetime" => check(is_date_time(s), "invalid datetime"),
        _ => vec![],
    })
}

fn check(ok: bool, message: &str) -> Vec<String> {
    if ok {
        vec![]
    } else {
        vec![message.to_string()]
    }
}

/// apimachinery's `maskTrailingDash`: `name[:len(name)-2] + "a"` when the
/// name ends with a dash, which panics for `"-"`.
fn mask_trailing_dash(name: &[u8]) -> Result<Vec<u8>, String> {
    if name.last() != Some(&b'-') {
        return Ok(name.to_vec());
    }
    if name.len() < 2 {
        return Err("internal error: runtime error: slice bounds out of range [:-1]".to_string());
    }
    let mut out = name[..name.len() - 2].to_vec();
    out.push(b'a');
    Ok(out)
}

/// apimachinery's `MaxLenError`: label values and name parts.
fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

/// apimachinery's DNS label and subdomain validators' length error.
fn max_chars_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = msg.to_string();
    if examples.is_empty() {
        out.push_str(&format!(" (regex used for validation is '{fmt}')"));
        return out;
    }
    out.push_str(" (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn matches_dns1123_label(s: &[u8]) -> bool {
    match (s.first(), s.last()) {
        (Some(&f), Some(&l)) => {
            lower_alnum(f) && lower_alnum(l) && s.iter().all(|&c| lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

fn matches_dns1123_subdomain(s: &[u8]) -> bool {
    s.split(|&c| c == b'.').all(matches_dns1123_label)
}

fn matches_dns1035_label(s: &[u8]) -> bool {
    matches_dns1123_label(s) && s.first().is_some_and(u8::is_ascii_lowercase)
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn matches_label_key(s: &[u8]) -> bool {
    match (s.first(), s.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && s.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

fn is_dns1123_label(s: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_chars_error(63));
    }
    if !matches_dns1123_label(s) {
        if matches_dns1123_subdomain(s) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

fn is_dns1123_subdomain(s: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_chars_error(253));
    }
    if !matches_dns1123_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn is_dns1035_label(s: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_chars_error(63));
    }
    if !matches_dns1035_label(s) {
        errs.push(regex_error(
            DNS1035_LABEL_ERR,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// apimachinery's `content.IsLabelKey` (`validation.IsQualifiedName`).
fn is_label_key(s: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&[u8]> = s.split(|&c| c == b'/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_label_key(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_ERR,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// apimachinery's `content.IsLabelValue`.
fn is_label_value(s: &[u8]) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !(s.is_empty() || matches_label_key(s)) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn static_regex(
    cell: &'static OnceLock<Option<regex::Regex>>,
    pattern: &str,
) -> Option<&'static regex::Regex> {
    cell.get_or_init(|| regex::Regex::new(pattern).ok())
        .as_ref()
}

/// kube-openapi's `IsUUID`: `(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`.
fn is_uuid(s: &[u8]) -> bool {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let Ok(s) = std::str::from_utf8(s) else {
        return false;
    };
    static_regex(
        &RE,
        r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
    )
    .is_some_and(|re| re.is_match(s))
}

/// govalidator's `IsBase64`.
fn is_base64(s: &[u8]) -> bool {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    let Ok(s) = std::str::from_utf8(s) else {
        return false;
    };
    static_regex(
        &RE,
        r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$",
    )
    .is_some_and(|re| re.is_match(s))
}

/// kube-openapi's `IsDate`: Go's `time.Parse("2006-01-02", s)`.
fn is_date(s: &[u8]) -> bool {
    if s.len() != 10 || s[4] != b'-' || s[7] != b'-' {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| {
        s[r.clone()].iter().all(u8::is_ascii_digit).then(|| {
            s[r].iter()
                .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'))
        })
    };
    let (Some(year), Some(month), Some(day)) = (digits(0..4), digits(5..7), digits(8..10)) else {
        return false;
    };
    if !(1..=12).contains(&month) {
        return false;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    (1..=days).contains(&day)
}

/// kube-openapi's `IsDateTime`.
fn is_date_time(s: &[u8]) -> bool {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    if s.len() < 4 {
        return false;
    }
    let lower = String::from_utf8_lossy(s).to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_date(parts[0].as_bytes()) {
        return false;
    }
    let Some(re) = static_regex(
        &RE,
        r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$",
    ) else {
        return false;
    };
    let Some(m) = re.captures(parts[1]) else {
        return false;
    };
    let field = |i: usize| m.get(i).map_or("", |g| g.as_str());
    field(1) <= "23" && field(2) <= "59" && field(3) <= "59"
}
