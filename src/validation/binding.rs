//! Upstream's validation of a MutatingAdmissionPolicyBinding's spec.

use super::field::{FieldErrors, Problem};
use super::json::{object_at, str_at};
use super::rules::{
    check_format, check_label_selector, check_match_resources, check_path_segment_name,
    default_match_resources,
};
use serde_json::Value as Json;

/// The defaults the API server sets before validating: those of
/// `matchResources`.
pub(super) fn default_binding_spec(spec: &mut Json) {
    if let Some(mr) = spec.get_mut("matchResources").filter(|m| !m.is_null()) {
        default_match_resources(mr);
    }
}

/// Upstream's `validateMutatingAdmissionPolicyBindingSpec`.
pub(super) fn check_binding_spec(errs: &mut FieldErrors, spec: &Json) {
    match str_at(spec, "policyName").filter(|n| !n.is_empty()) {
        None => errs.required("spec.policyName", ""),
        Some(name) => check_format(errs, "spec.policyName", "dns1123Subdomain", name),
    }
    if let Some(param_ref) = object_at(spec, "paramRef") {
        check_param_ref(errs, param_ref);
    }
    if let Some(mr) = object_at(spec, "matchResources") {
        check_match_resources(errs, "spec.matchResources", mr);
    }
}

/// Upstream's `validateParamRef`: a name or a selector, not both, and what
/// to do when none is found.
fn check_param_ref(errs: &mut FieldErrors, param_ref: &Json) {
    const AT: &str = "spec.paramRef";
    const EXCLUSIVE: &str = "name and selector are mutually exclusive";
    let name = str_at(param_ref, "name").unwrap_or_default();
    let selector = object_at(param_ref, "selector");
    if !name.is_empty() {
        check_path_segment_name(errs, &format!("{AT}.name"), name);
        if selector.is_some() {
            errs.push(format!("{AT}.name"), Problem::Forbidden(EXCLUSIVE.into()));
        }
    }
    if let Some(selector) = selector {
        check_label_selector(errs, &format!("{AT}.selector"), selector);
        if !name.is_empty() {
            errs.push(
                format!("{AT}.selector"),
                Problem::Forbidden(EXCLUSIVE.into()),
            );
        }
    }
    if name.is_empty() && selector.is_none() {
        errs.required(AT, "one of name or selector must be specified");
    }
    match str_at(param_ref, "parameterNotFoundAction").filter(|a| !a.is_empty()) {
        None => errs.required(format!("{AT}.parameterNotFoundAction"), ""),
        // Upstream lists them in this order here.
        Some(action) => errs.check_supported(
            format!("{AT}.parameterNotFoundAction"),
            action,
            &["Deny", "Allow"],
        ),
    }
}
