//! Upstream's validation of MutatingAdmissionPolicies and their bindings
//! (`pkg/apis/admissionregistration/validation` in kubernetes/kubernetes):
//! every field rule and the compilation of every expression, with the
//! field paths and words of the built-in API's 422.
//!
//! It serves the `POST /validate` webhook that refuses bad `kmutate.dev`
//! objects at creation, and `kmutate check`.
//!
//! ```
//! use kmutate::validation::{validate, Validated};
//! let policy = serde_json::json!({
//!     "apiVersion": "admissionregistration.k8s.io/v1",
//!     "kind": "MutatingAdmissionPolicy",
//!     "metadata": {"name": "p"},
//!     "spec": {"failurePolicy": "Sometimes"},
//! });
//! let Validated::Refused(refusal) = validate(&policy, None) else { panic!() };
//! assert!(refusal.message("admissionregistration.k8s.io").starts_with(
//!     r#"MutatingAdmissionPolicy.admissionregistration.k8s.io "p" is invalid: [spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore""#
//! ));
//! ```

mod binding;
pub mod field;
pub mod files;
mod json;
mod policy;
mod rules;

use field::{invalid_message, FieldErrors, Problem};
use json::str_at;
use serde_json::Value as Json;

/// The two kinds validated here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A MutatingAdmissionPolicy.
    Policy,
    /// A MutatingAdmissionPolicyBinding.
    Binding,
}

impl Kind {
    /// The kind of `object` by its `kind`, whatever its group.
    pub fn of(object: &Json) -> Option<Kind> {
        match str_at(object, "kind")? {
            "MutatingAdmissionPolicy" => Some(Kind::Policy),
            "MutatingAdmissionPolicyBinding" => Some(Kind::Binding),
            _ => None,
        }
    }

    /// The kind's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Policy => "MutatingAdmissionPolicy",
            Kind::Binding => "MutatingAdmissionPolicyBinding",
        }
    }
}

/// An object the API would refuse, with every reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Its kind.
    pub kind: Kind,
    /// `metadata.name`.
    pub name: String,
    /// What is wrong, in upstream's order.
    pub errors: FieldErrors,
}

impl Refusal {
    /// The API server's 422 message for the kind served in `group`:
    /// `MutatingAdmissionPolicy.GROUP "name" is invalid: [...]`.
    pub fn message(&self, group: &str) -> String {
        invalid_message(self.kind.name(), group, &self.name, &self.errors)
    }
}

/// What validation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validated {
    /// Not a policy or binding: nothing to say.
    NotOurs,
    /// The API would accept it.
    Accepted,
    /// The API would refuse it.
    Refused(Refusal),
}

/// Validates `object` (any group and version: their shapes are one) as the
/// API server does on a create, or on an update of `old`; the server's
/// defaults are applied first, as it applies them.
pub fn validate(object: &Json, old: Option<&Json>) -> Validated {
    validate_with(object, old, Expressions::Compile)
}

/// [`validate`] without compiling the expressions: the field rules alone,
/// for a caller that compiles the policy itself.
pub fn validate_fields(object: &Json) -> Validated {
    validate_with(object, None, Expressions::Skip)
}

/// Whether validation compiles the policy's expressions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expressions {
    Compile,
    Skip,
}

fn validate_with(object: &Json, old: Option<&Json>, expressions: Expressions) -> Validated {
    let Some(kind) = Kind::of(object) else {
        return Validated::NotOurs;
    };
    let defaulted = |o: &Json| {
        let mut spec = o
            .get("spec")
            .cloned()
            .unwrap_or(Json::Object(Default::default()));
        match kind {
            Kind::Policy => policy::default_policy_spec(&mut spec),
            Kind::Binding => binding::default_binding_spec(&mut spec),
        }
        spec
    };
    let spec = defaulted(object);
    let old_spec = old.map(defaulted);
    let mut errors = FieldErrors::default();
    check_object_meta(&mut errors, object.get("metadata").unwrap_or(&Json::Null));
    match kind {
        Kind::Policy => policy::check_policy_spec(
            &mut errors,
            &spec,
            old_spec.as_ref(),
            expressions == Expressions::Compile,
        ),
        Kind::Binding => binding::check_binding_spec(&mut errors, &spec),
    }
    if errors.is_empty() {
        return Validated::Accepted;
    }
    Validated::Refused(Refusal {
        kind,
        name: object
            .pointer("/metadata/name")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string(),
        errors,
    })
}

/// apimachinery's `ValidateObjectMeta` for a cluster-scoped object whose
/// name is a DNS subdomain (the parts a policy file can get wrong).
fn check_object_meta(errs: &mut FieldErrors, meta: &Json) {
    let name = str_at(meta, "name").unwrap_or_default();
    let generate_name = str_at(meta, "generateName").unwrap_or_default();
    if name.is_empty() && generate_name.is_empty() {
        errs.required("metadata.name", "name or generateName is required");
    }
    if !name.is_empty() {
        rules::check_format(errs, "metadata.name", "dns1123Subdomain", name);
    }
    if !str_at(meta, "namespace").unwrap_or_default().is_empty() {
        errs.push(
            "metadata.namespace",
            Problem::Forbidden("not allowed on this type".into()),
        );
    }
    rules::check_labels(errs, "metadata.labels", meta.get("labels"));
    if let Some(annotations) = meta.get("annotations").and_then(Json::as_object) {
        for key in annotations.keys() {
            for message in rules::format_errors("qualifiedName", &key.to_lowercase()) {
                errs.invalid("metadata.annotations", key.as_str(), &message);
            }
        }
    }
}
