//! The parts policies and bindings share: names, label selectors, rules and
//! `matchResources` (upstream's `validateMatchResources` and the helpers of
//! `pkg/apis/admissionregistration/validation`, and apimachinery's name and
//! label selector checks).

use super::field::{FieldErrors, Problem};
use super::json::{list_at, str_at, strings_at};
use crate::cel::named_format_errors;
use serde_json::Value as Json;
use std::collections::BTreeSet;

/// The errors of `value` in the apimachinery format `format` (a name of
/// CEL's `format.named`: `dns1123Subdomain`, `dns1035Label`,
/// `qualifiedName`, `labelValue`).
pub(super) fn format_errors(format: &str, value: &str) -> Vec<String> {
    named_format_errors(format, value.as_bytes()).unwrap_or_default()
}

/// One `Invalid value` per message of `format` for `value` at `field`.
pub(super) fn check_format(errs: &mut FieldErrors, field: &str, format: &str, value: &str) {
    for message in format_errors(format, value) {
        errs.invalid(field, value, &message);
    }
}

/// apimachinery's `IsValidPathSegmentName`: resource names and
/// `paramRef.name`.
pub(super) fn check_path_segment_name(errs: &mut FieldErrors, field: &str, name: &str) {
    if matches!(name, "." | "..") {
        errs.invalid(field, name, &format!("may not be '{name}'"));
        return;
    }
    for illegal in ["/", "%"] {
        if name.contains(illegal) {
            errs.invalid(field, name, &format!("may not contain '{illegal}'"));
        }
    }
}

/// apimachinery's `ValidateLabels`: each key a qualified name, each value a
/// label value, both reported at the map's own path (in key order: Go's
/// map order is random).
pub(super) fn check_labels(errs: &mut FieldErrors, field: &str, labels: Option<&Json>) {
    let Some(labels) = labels.and_then(Json::as_object) else {
        return;
    };
    for (key, value) in labels {
        check_format(errs, field, "qualifiedName", key);
        if let Some(value) = value.as_str() {
            check_format(errs, field, "labelValue", value);
        }
    }
}

/// apimachinery's `ValidateLabelSelector` with the strict options (label
/// values in expressions checked).
pub(super) fn check_label_selector(errs: &mut FieldErrors, field: &str, selector: &Json) {
    check_labels(
        errs,
        &format!("{field}.matchLabels"),
        selector.get("matchLabels"),
    );
    for (i, requirement) in list_at(selector, "matchExpressions").iter().enumerate() {
        let at = format!("{field}.matchExpressions[{i}]");
        let operator = str_at(requirement, "operator").unwrap_or_default();
        let values = strings_at(requirement, "values");
        match operator {
            "In" | "NotIn" if values.is_empty() => errs.required(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(
                format!("{at}.values"),
                Problem::Forbidden(
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'".into(),
                ),
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.invalid(
                format!("{at}.operator"),
                other,
                "not a valid selector operator",
            ),
        }
        let key = str_at(requirement, "key").unwrap_or_default();
        check_format(errs, &format!("{at}.key"), "qualifiedName", key);
        for (j, value) in values.iter().enumerate() {
            check_format(errs, &format!("{at}.values[{j}]"), "labelValue", value);
        }
    }
}

const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
/// The operations a mutating policy can act on: a DELETE has no object to
/// mutate.
const MUTATING_OPERATIONS: [&str; 4] = ["*", "CONNECT", "CREATE", "UPDATE"];
const SCOPES: [&str; 3] = ["*", "Cluster", "Namespaced"];

fn has_wildcard(items: &[&str]) -> bool {
    items.contains(&"*")
}

/// Upstream's `validateResources`: subresource wildcards may not overlap.
fn check_resources(errs: &mut FieldErrors, field: &str, resources: &[&str], raw: Option<&Json>) {
    if resources.is_empty() {
        errs.required(field, "");
    }
    let mut with_wildcard_subresource = BTreeSet::new();
    let mut with_wildcard_resource = BTreeSet::new();
    let (mut double_wildcard, mut single_wildcard, mut plain) = (false, false, false);
    for (i, &item) in resources.iter().enumerate() {
        if item.is_empty() {
            errs.required(format!("{field}[{i}]"), "");
            continue;
        }
        double_wildcard |= item == "*/*";
        single_wildcard |= item == "*";
        let Some((resource, sub)) = item.split_once('/') else {
            // Upstream keeps the last one's answer, not any one's.
            plain = item != "*";
            continue;
        };
        if with_wildcard_subresource.contains(resource) {
            errs.invalid(
                format!("{field}[{i}]"),
                item,
                &format!("if '{resource}/*' is present, must not specify {item}"),
            );
        }
        if with_wildcard_resource.contains(sub) {
            errs.invalid(
                format!("{field}[{i}]"),
                item,
                &format!("if '*/{sub}' is present, must not specify {item}"),
            );
        }
        if sub == "*" {
            with_wildcard_subresource.insert(resource);
        }
        if resource == "*" {
            with_wildcard_resource.insert(sub);
        }
    }
    let whole = || raw.cloned().unwrap_or(Json::Null);
    if resources.len() > 1 && double_wildcard {
        errs.invalid(
            field,
            &whole(),
            "if '*/*' is present, must not specify other resources",
        );
    }
    if single_wildcard && plain {
        errs.invalid(
            field,
            &whole(),
            "if '*' is present, must not specify other resources without subresources",
        );
    }
}

/// The strings of the rule's list `key`, which may not be empty nor hold
/// `*` beside anything else (`what` names them in the message).
fn required_list<'a>(
    errs: &mut FieldErrors,
    field: &str,
    rule: &'a Json,
    key: &str,
    what: &str,
) -> Vec<&'a str> {
    let items = strings_at(rule, key);
    if items.is_empty() {
        errs.required(format!("{field}.{key}"), "");
    }
    if items.len() > 1 && has_wildcard(&items) {
        errs.invalid(
            format!("{field}.{key}"),
            rule.get(key).unwrap_or(&Json::Null),
            &format!("if '*' is present, must not specify other {what}"),
        );
    }
    items
}

/// Upstream's `validateNamedRuleWithOperations` (with `validateRule`).
fn check_named_rule(errs: &mut FieldErrors, field: &str, rule: &Json) {
    let names = strings_at(rule, "resourceNames");
    let mut seen = BTreeSet::new();
    for (i, name) in names.iter().enumerate() {
        let at = format!("{field}.resourceNames[{i}]");
        check_path_segment_name(errs, &at, name);
        if !seen.insert(*name) {
            errs.push(at, Problem::Duplicate((*name).into()));
        }
    }
    let operations = required_list(errs, field, rule, "operations", "operations");
    for (i, op) in operations.iter().enumerate() {
        errs.check_supported(format!("{field}.operations[{i}]"), op, &OPERATIONS);
    }
    required_list(errs, field, rule, "apiGroups", "API groups");
    let versions = required_list(errs, field, rule, "apiVersions", "API versions");
    for (i, version) in versions.iter().enumerate() {
        if version.is_empty() {
            errs.required(format!("{field}.apiVersions[{i}]"), "");
        }
    }
    check_resources(
        errs,
        &format!("{field}.resources"),
        &strings_at(rule, "resources"),
        rule.get("resources"),
    );
    if let Some(scope) = str_at(rule, "scope") {
        errs.check_supported(format!("{field}.scope"), scope, &SCOPES);
    }
}

/// Upstream's `validateMatchResources`, then the mutating admission check
/// that `resourceRules` name no operation a mutation cannot act on
/// (reported once per operation, at the list's path without an index).
pub(super) fn check_match_resources(errs: &mut FieldErrors, field: &str, mr: &Json) {
    match str_at(mr, "matchPolicy") {
        None => errs.required(format!("{field}.matchPolicy"), ""),
        Some(policy) => errs.check_supported(
            format!("{field}.matchPolicy"),
            policy,
            &["Equivalent", "Exact"],
        ),
    }
    for selector in ["namespaceSelector", "objectSelector"] {
        match mr.get(selector).filter(|s| !s.is_null()) {
            None => errs.required(format!("{field}.{selector}"), ""),
            Some(s) => check_label_selector(errs, &format!("{field}.{selector}"), s),
        }
    }
    for rules in ["resourceRules", "excludeResourceRules"] {
        for (i, rule) in list_at(mr, rules).iter().enumerate() {
            check_named_rule(errs, &format!("{field}.{rules}[{i}]"), rule);
        }
    }
    for rule in list_at(mr, "resourceRules") {
        for op in strings_at(rule, "operations") {
            errs.check_supported(
                format!("{field}.resourceRules.operations"),
                op,
                &MUTATING_OPERATIONS,
            );
        }
    }
}

/// The defaults the API server sets on `matchResources` before validating:
/// empty selectors, `matchPolicy: Equivalent`, each rule's `scope: "*"`.
pub(super) fn default_match_resources(mr: &mut Json) {
    let Some(map) = mr.as_object_mut() else {
        return;
    };
    for selector in ["namespaceSelector", "objectSelector"] {
        if map.get(selector).is_none_or(Json::is_null) {
            map.insert(selector.into(), Json::Object(Default::default()));
        }
    }
    if map.get("matchPolicy").is_none_or(Json::is_null) {
        map.insert("matchPolicy".into(), "Equivalent".into());
    }
    for rules in ["resourceRules", "excludeResourceRules"] {
        if let Some(list) = map.get_mut(rules).and_then(Json::as_array_mut) {
            for rule in list.iter_mut().filter_map(Json::as_object_mut) {
                if rule.get("scope").is_none_or(Json::is_null) {
                    rule.insert("scope".into(), "*".into());
                }
            }
        }
    }
}
