//! Kubernetes CEL library: semver (`k8s.io/apiserver/pkg/cel/library/semverlib.go`),
//! at the version the v1.36 base environment registers (`SemverVersion(1)`,
//! with the `normalize` overloads).
//!
//! Versions are parsed and compared as `github.com/blang/semver/v4` does, and
//! its error messages are upstream's.

use crate::gofmt::quote;
use cel::common::types::{CelBool, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::cmp::Ordering;
use std::fmt;

/// `kubernetes.Semver`.
pub static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

const NUMBERS: &str = "0123456789";
const ALPHANUM: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789";

/// A pre-release identifier (`semver.PRVersion`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum PrVersion {
    Num(u64),
    Str(String),
}

impl PrVersion {
    fn compare(&self, o: &PrVersion) -> Ordering {
        match (self, o) {
            (PrVersion::Num(a), PrVersion::Num(b)) => a.cmp(b),
            (PrVersion::Num(_), PrVersion::Str(_)) => Ordering::Less,
            (PrVersion::Str(_), PrVersion::Num(_)) => Ordering::Greater,
            (PrVersion::Str(a), PrVersion::Str(b)) => a.as_bytes().cmp(b.as_bytes()),
        }
    }
}

impl fmt::Display for PrVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrVersion::Num(n) => write!(f, "{n}"),
            PrVersion::Str(s) => f.write_str(s),
        }
    }
}

/// A `kubernetes.Semver` value (`semver.Version`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<PrVersion>,
    build: Vec<String>,
}

impl Semver {
    /// `Version.Compare`: build metadata has no precedence.
    fn compare(&self, o: &Semver) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(o.major, o.minor, o.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), o.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(&o.pre) {
            let c = a.compare(b);
            if c != Ordering::Equal {
                return c;
            }
        }
        self.pre.len().cmp(&o.pre.len())
    }
}

impl fmt::Display for Semver {
    /// `Version.String`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        for (i, p) in self.pre.iter().enumerate() {
            f.write_str(if i == 0 { "-" } else { "." })?;
            write!(f, "{p}")?;
        }
        for (i, b) in self.build.iter().enumerate() {
            f.write_str(if i == 0 { "+" } else { "." })?;
            f.write_str(b)?;
        }
        Ok(())
    }
}

fn contains_only(s: &str, set: &str) -> bool {
    s.chars().all(|c| set.contains(c))
}

fn has_leading_zeroes(s: &str) -> bool {
    s.len() > 1 && s.starts_with('0')
}

/// `strconv.ParseUint(s, 10, 64)` for a string of ASCII digits.
fn parse_uint(s: &str) -> Result<u64, String> {
    if s.is_empty() {
        return Err(format!(
            "strconv.ParseUint: parsing {}: invalid syntax",
            quote(s)
        ));
    }
    s.parse::<u64>().map_err(|_| {
        format!(
            "strconv.ParseUint: parsing {}: value out of range",
            quote(s)
        )
    })
}

/// `semver.NewPRVersion`.
fn new_pr_version(s: &str) -> Result<PrVersion, String> {
    if s.is_empty() {
        return Err("Prerelease is empty".to_string());
    }
    if contains_only(s, NUMBERS) {
        if has_leading_zeroes(s) {
            return Err(format!(
                "Numeric PreRelease version must not contain leading zeroes {}",
                quote(s)
            ));
        }
        return parse_uint(s).map(PrVersion::Num);
    }
    if contains_only(s, ALPHANUM) {
        return Ok(PrVersion::Str(s.to_string()));
    }
    Err(format!(
        "Invalid character(s) found in prerelease {}",
        quote(s)
    ))
}

/// `semver.Parse`.
fn parse(s: &str) -> Result<Semver, String> {
    if s.is_empty() {
        return Err("Version string empty".to_string());
    }
    let parts: Vec<&str> = s.splitn(3, '.').collect();
    if parts.len() != 3 {
        return Err("No Major.Minor.Patch elements found".to_string());
    }
    let number = |p: &str, what: &str, cap: &str| -> Result<u64, String> {
        if !contains_only(p, NUMBERS) {
            return Err(format!(
                "Invalid character(s) found in {what} number {}",
                quote(p)
            ));
        }
        if has_leading_zeroes(p) {
            return Err(format!(
                "{cap} number must not contain leading zeroes {}",
                quote(p)
            ));
        }
        parse_uint(p)
    };
    let major = number(parts[0], "major", "Major")?;
    let minor = number(parts[1], "minor", "Minor")?;

    let mut patch_str = parts[2];
    let mut build: Vec<&str> = Vec::new();
    let mut prerelease: Vec<&str> = Vec::new();
    if let Some(i) = patch_str.find('+') {
        build = patch_str[i + 1..].split('.').collect();
        patch_str = &patch_str[..i];
    }
    if let Some(i) = patch_str.find('-') {
        prerelease = patch_str[i + 1..].split('.').collect();
        patch_str = &patch_str[..i];
    }
    let patch = number(patch_str, "patch", "Patch")?;

    let pre = prerelease
        .into_iter()
        .map(new_pr_version)
        .collect::<Result<Vec<_>, _>>()?;
    let mut builds = Vec::with_capacity(build.len());
    for b in build {
        if b.is_empty() {
            return Err("Build meta data is empty".to_string());
        }
        if !contains_only(b, ALPHANUM) {
            return Err(format!(
                "Invalid character(s) found in build meta data {}",
                quote(b)
            ));
        }
        builds.push(b.to_string());
    }
    Ok(Semver {
        major,
        minor,
        patch,
        pre,
        build: builds,
    })
}

/// `library.normalizeAndParse`: drops one leading `v`, strips leading zeros
/// from the three parts, fills in a missing minor and patch.
fn normalize_and_parse(s: &str) -> Result<Semver, String> {
    let s = s.strip_prefix('v').unwrap_or(s);
    let mut parts: Vec<String> = s
        .splitn(3, '.')
        .map(|p| {
            if p.len() > 1 {
                let t = p.trim_start_matches('0');
                if t.is_empty() || !t.starts_with(|c: char| c.is_ascii_digit()) {
                    return format!("0{t}");
                }
                return t.to_string();
            }
            p.to_string()
        })
        .collect();
    if parts.len() < 3 {
        if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
            return Err("short version cannot contain PreRelease/Build meta data".to_string());
        }
        while parts.len() < 3 {
            parts.push("0".to_string());
        }
    }
    parse(&parts.join("."))
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    /// `Version.EQ`: equal precedence, whatever the build metadata.
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| self.compare(o) == Ordering::Equal)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Semver {}

fn parse_with(s: &str, normalize: bool) -> Result<Semver, String> {
    if normalize {
        normalize_and_parse(s)
    } else {
        parse(s)
    }
}

fn semver(s: &CelString<'_>) -> Result<Semver, ExecutionError> {
    parse_with(s.inner(), false).map_err(|e| ExecutionError::function_error("semver", e))
}

fn semver_normalize(s: &CelString<'_>, normalize: &CelBool) -> Result<Semver, ExecutionError> {
    parse_with(s.inner(), *normalize.inner())
        .map_err(|e| ExecutionError::function_error("semver", e))
}

fn is_semver(s: &CelString<'_>) -> CelBool {
    CelBool::from(parse_with(s.inner(), false).is_ok())
}

fn is_semver_normalize(s: &CelString<'_>, normalize: &CelBool) -> CelBool {
    CelBool::from(parse_with(s.inner(), *normalize.inner()).is_ok())
}

fn major(v: &Semver) -> CelInt {
    CelInt::from(v.major as i64)
}

fn minor(v: &Semver) -> CelInt {
    CelInt::from(v.minor as i64)
}

fn patch(v: &Semver) -> CelInt {
    CelInt::from(v.patch as i64)
}

fn is_greater_than(v: &Semver, o: &Semver) -> CelBool {
    CelBool::from(v.compare(o) == Ordering::Greater)
}

fn is_less_than(v: &Semver, o: &Semver) -> CelBool {
    CelBool::from(v.compare(o) == Ordering::Less)
}

fn compare_to(v: &Semver, o: &Semver) -> CelInt {
    CelInt::from(v.compare(o) as i64)
}

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(SEMVER_TYPE.to_owned())?;
    cel::add_overload!(env, fn semver: (CelString) -> Result<Semver>,
        name = "semver", id = "string_to_semver")?;
    cel::add_overload!(env, fn semver_normalize: (CelString, CelBool) -> Result<Semver>,
        name = "semver", id = "string_bool_to_semver")?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool,
        name = "isSemver", id = "is_semver_string")?;
    cel::add_overload!(env, fn is_semver_normalize: (CelString, CelBool) -> CelBool,
        name = "isSemver", id = "is_semver_string_bool")?;
    cel::add_member_overload!(env, fn is_greater_than: (Semver, Semver) -> CelBool,
        name = "isGreaterThan", id = "semver_is_greater_than")?;
    cel::add_member_overload!(env, fn is_less_than: (Semver, Semver) -> CelBool,
        name = "isLessThan", id = "semver_is_less_than")?;
    cel::add_member_overload!(env, fn compare_to: (Semver, Semver) -> CelInt,
        name = "compareTo", id = "semver_compare_to")?;
    cel::add_member_overload!(env, fn major: (Semver) -> CelInt, name = "major", id = "semver_major")?;
    cel::add_member_overload!(env, fn minor: (Semver) -> CelInt, name = "minor", id = "semver_minor")?;
    cel::add_member_overload!(env, fn patch: (Semver) -> CelInt, name = "patch", id = "semver_patch")?;
    Ok(())
}
