//! Field errors as apimachinery's `field.Error` words them, and the 422
//! message an API server builds from a list of them.

use crate::cel::go_quote;
use serde_json::Value as Json;
use std::fmt;

/// What is wrong with one field (apimachinery's `field.ErrorType`, with the
/// parts each type prints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// `Required value`, with an optional detail.
    Required(String),
    /// `Invalid value: VALUE: DETAIL`.
    Invalid {
        /// The value refused.
        value: BadValue,
        /// Why.
        detail: String,
    },
    /// `Unsupported value: VALUE: supported values: "a", "b"`.
    NotSupported {
        /// The value refused.
        value: String,
        /// The values allowed, in upstream's order.
        supported: Vec<&'static str>,
    },
    /// `Duplicate value: VALUE`.
    Duplicate(BadValue),
    /// `Too many: N: must have at most MAX items`.
    TooMany {
        /// How many there are.
        actual: usize,
        /// How many are allowed.
        max: usize,
    },
    /// `Forbidden: DETAIL`.
    Forbidden(String),
    /// `Internal error: DETAIL` (an expression whose program cannot be
    /// built, such as a constant conversion that always fails).
    Internal(String),
}

/// A refused value, printed as upstream prints it: strings quoted as Go's
/// `%q`, anything else as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    /// A string.
    Str(String),
    /// Any other JSON value.
    Json(Json),
}

impl From<&str> for BadValue {
    fn from(s: &str) -> BadValue {
        BadValue::Str(s.to_string())
    }
}

impl From<&Json> for BadValue {
    fn from(v: &Json) -> BadValue {
        match v {
            Json::String(s) => BadValue::Str(s.clone()),
            other => BadValue::Json(other.clone()),
        }
    }
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Str(s) => f.write_str(&go_quote(s.as_bytes())),
            // Go's json.Marshal escapes HTML characters.
            BadValue::Json(v) => f.write_str(
                &v.to_string()
                    .replace('<', "\\u003c")
                    .replace('>', "\\u003e")
                    .replace('&', "\\u0026"),
            ),
        }
    }
}

/// One field's error: `spec.failurePolicy: Unsupported value: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.mutations[0].patchType`.
    pub field: String,
    /// What is wrong with it.
    pub problem: Problem,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// The error's body, after its field (`ErrorBody` in apimachinery).
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Required(detail) if detail.is_empty() => f.write_str("Required value"),
            Problem::Required(detail) => write!(f, "Required value: {detail}"),
            Problem::Invalid { value, detail } if detail.is_empty() => {
                write!(f, "Invalid value: {value}")
            }
            Problem::Invalid { value, detail } => write!(f, "Invalid value: {value}: {detail}"),
            Problem::NotSupported { value, supported } => {
                let quoted: Vec<String> =
                    supported.iter().map(|s| go_quote(s.as_bytes())).collect();
                write!(
                    f,
                    "Unsupported value: {}: supported values: {}",
                    go_quote(value.as_bytes()),
                    quoted.join(", ")
                )
            }
            Problem::Duplicate(value) => write!(f, "Duplicate value: {value}"),
            Problem::TooMany { actual, max } => {
                write!(f, "Too many: {actual}: must have at most {max} items")
            }
            Problem::Forbidden(detail) => write!(f, "Forbidden: {detail}"),
            Problem::Internal(detail) => write!(f, "Internal error: {detail}"),
        }
    }
}

/// The field errors of one object, in the order upstream finds them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    /// Adds `problem` at `field`.
    pub fn push(&mut self, field: impl Into<String>, problem: Problem) {
        self.0.push(FieldError {
            field: field.into(),
            problem,
        });
    }

    /// `Required value` (with `detail` unless empty).
    pub fn required(&mut self, field: impl Into<String>, detail: &str) {
        self.push(field, Problem::Required(detail.to_string()));
    }

    /// `Invalid value: VALUE: DETAIL`.
    pub fn invalid(&mut self, field: impl Into<String>, value: impl Into<BadValue>, detail: &str) {
        self.push(
            field,
            Problem::Invalid {
                value: value.into(),
                detail: detail.to_string(),
            },
        );
    }

    /// `Unsupported value` unless `value` is one of `supported`.
    pub fn check_supported(
        &mut self,
        field: impl Into<String>,
        value: &str,
        supported: &[&'static str],
    ) {
        if !supported.contains(&value) {
            self.push(
                field,
                Problem::NotSupported {
                    value: value.to_string(),
                    supported: supported.to_vec(),
                },
            );
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The distinct messages, first occurrence first (`ToAggregate` drops
    /// repeated ones).
    pub fn messages(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.0 {
            let m = e.to_string();
            if !out.contains(&m) {
                out.push(m);
            }
        }
        out
    }
}

/// The message of an API server's 422 for `errors` of the object `name` of
/// `kind` in `group`: `Kind.group "name" is invalid: [a, b]` (no brackets
/// for one error).
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &FieldErrors) -> String {
    let messages = errors.messages();
    let list = match messages.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    format!(
        "{kind}.{group} {} is invalid: {list}",
        go_quote(name.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Messages as kube-apiserver v1.36.2 prints them (tests/validation/recorded.json).
    #[test]
    fn problems_print_as_apimachinery_prints_them() {
        let mut errs = FieldErrors::default();
        errs.check_supported("spec.failurePolicy", "Sometimes", &["Fail", "Ignore"]);
        errs.invalid(
            "spec.matchConstraints.resourceRules[0].operations",
            &json!(["*", "CREATE"]),
            "if '*' is present, must not specify other operations",
        );
        errs.push(
            "spec.matchConditions",
            Problem::TooMany {
                actual: 65,
                max: 64,
            },
        );
        errs.required("spec.mutations", "mutations must contain at least one item");
        errs.required("spec.reinvocationPolicy", "");
        errs.push("x", Problem::Duplicate("web".into()));
        let messages = errs.messages();
        assert_eq!(
            messages,
            [
                r#"spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore""#,
                r#"spec.matchConstraints.resourceRules[0].operations: Invalid value: ["*","CREATE"]: if '*' is present, must not specify other operations"#,
                "spec.matchConditions: Too many: 65: must have at most 64 items",
                "spec.mutations: Required value: mutations must contain at least one item",
                "spec.reinvocationPolicy: Required value",
                r#"x: Duplicate value: "web""#,
            ]
        );
    }

    #[test]
    fn one_error_has_no_brackets_and_repeats_are_dropped() {
        let mut errs = FieldErrors::default();
        errs.required("spec.policyName", "");
        errs.required("spec.policyName", "");
        assert_eq!(
            invalid_message(
                "MutatingAdmissionPolicyBinding",
                "admissionregistration.k8s.io",
                "b",
                &errs
            ),
            r#"MutatingAdmissionPolicyBinding.admissionregistration.k8s.io "b" is invalid: spec.policyName: Required value"#
        );
        errs.required("spec.paramRef", "");
        assert!(invalid_message("K", "g", "n", &errs).ends_with(
            "is invalid: [spec.policyName: Required value, spec.paramRef: Required value]"
        ));
    }
}
