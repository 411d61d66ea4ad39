//! Typed `k8s-openapi` objects to the internal model, with the API server's
//! defaults (`SetDefaults_MutatingAdmissionPolicySpec` and friends).
//!
//! v1alpha1, v1beta1 and v1 share one JSON shape for every field kmutate
//! reads, so each version is decoded through the v1 types.

use super::*;
use k8s_openapi::api::admissionregistration::v1 as admv1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;

/// The API versions of `admissionregistration.k8s.io` that serve MAPs.
pub const SERVED_VERSIONS: [&str; 3] = [
    "admissionregistration.k8s.io/v1",
    "admissionregistration.k8s.io/v1beta1",
    "admissionregistration.k8s.io/v1alpha1",
];

/// A policy or binding that is not a valid object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    /// The apiVersion is not one that serves the kind.
    #[error("unsupported apiVersion {api_version:?} for {kind} (expected one of admissionregistration.k8s.io/v1, v1beta1, v1alpha1)")]
    UnsupportedVersion {
        /// The apiVersion found.
        api_version: String,
        /// The kind.
        kind: String,
    },
    /// The object does not decode into the kind's schema.
    #[error("{kind} {name:?}: {message}")]
    Decode {
        /// The kind.
        kind: String,
        /// `metadata.name`, when readable.
        name: String,
        /// The decoder's message.
        message: String,
    },
    /// A field holds a value the API server would refuse.
    #[error("{kind} {name:?}: {field}: {message}")]
    Invalid {
        /// The kind.
        kind: String,
        /// `metadata.name`.
        name: String,
        /// The field path, e.g. `spec.mutations[0].patchType`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn retarget(value: &serde_json::Value, kind: &str) -> Result<serde_json::Value, ConvertError> {
    let api_version = value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    if !SERVED_VERSIONS.contains(&api_version) {
        return Err(ConvertError::UnsupportedVersion {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    let mut value = value.clone();
    value["apiVersion"] = serde_json::Value::from("admissionregistration.k8s.io/v1");
    Ok(value)
}

fn object_name(value: &serde_json::Value) -> String {
    value
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

/// Reads a MutatingAdmissionPolicy of any served version.
pub fn policy_from_json(
    value: &serde_json::Value,
    source: SourceRef,
) -> Result<Policy, ConvertError> {
    const KIND: &str = "MutatingAdmissionPolicy";
    let name = object_name(value);
    let typed: admv1::MutatingAdmissionPolicy = serde_json::from_value(retarget(value, KIND)?)
        .map_err(|e| ConvertError::Decode {
            kind: KIND.into(),
            name: name.clone(),
            message: e.to_string(),
        })?;
    let invalid = |field: &str, message: String| ConvertError::Invalid {
        kind: KIND.into(),
        name: name.clone(),
        field: field.into(),
        message,
    };
    if name.is_empty() {
        return Err(invalid("metadata.name", "Required value".into()));
    }
    let spec = typed.spec.unwrap_or_default();
    let failure_policy = match spec.failure_policy.as_deref() {
        None | Some("Fail") => FailurePolicy::Fail,
        Some("Ignore") => FailurePolicy::Ignore,
        Some(other) => {
            return Err(invalid(
                "spec.failurePolicy",
                format!("Unsupported value: {other:?}: supported values: \"Fail\", \"Ignore\""),
            ))
        }
    };
    let reinvocation_policy = match spec.reinvocation_policy.as_deref() {
        None | Some("Never") => ReinvocationPolicy::Never,
        Some("IfNeeded") => ReinvocationPolicy::IfNeeded,
        Some(other) => {
            return Err(invalid(
                "spec.reinvocationPolicy",
                format!("Unsupported value: {other:?}: supported values: \"IfNeeded\", \"Never\""),
            ))
        }
    };
    let mut mutations = Vec::new();
    for (i, m) in spec.mutations.unwrap_or_default().into_iter().enumerate() {
        let field = format!("spec.mutations[{i}]");
        let (patch_type, expression) = match m.patch_type.as_str() {
            "ApplyConfiguration" => (
                PatchType::ApplyConfiguration,
                m.apply_configuration.and_then(|a| a.expression),
            ),
            "JSONPatch" => (PatchType::JsonPatch, m.json_patch.and_then(|j| j.expression)),
            other => {
                return Err(invalid(
                    &format!("{field}.patchType"),
                    format!("Unsupported value: {other:?}: supported values: \"ApplyConfiguration\", \"JSONPatch\""),
                ))
            }
        };
        let expression = expression.filter(|e| !e.trim().is_empty()).ok_or_else(|| {
            let sub = match patch_type {
                PatchType::ApplyConfiguration => "applyConfiguration",
                PatchType::JsonPatch => "jsonPatch",
            };
            invalid(
                &format!("{field}.{sub}.expression"),
                "Required value".into(),
            )
        })?;
        mutations.push(Mutation {
            patch_type,
            expression,
        });
    }
    if mutations.is_empty() {
        return Err(invalid(
            "spec.mutations",
            "Required value: mutations must contain at least one item".into(),
        ));
    }
    let param_kind = match spec.param_kind {
        None => None,
        Some(pk) => Some(ParamKind {
            api_version: pk
                .api_version
                .ok_or_else(|| invalid("spec.paramKind.apiVersion", "Required value".into()))?,
            kind: pk
                .kind
                .ok_or_else(|| invalid("spec.paramKind.kind", "Required value".into()))?,
        }),
    };
    let match_constraints = match spec.match_constraints {
        Some(mr) => {
            match_resources(mr, "spec.matchConstraints").map_err(|(f, m)| invalid(&f, m))?
        }
        None => return Err(invalid("spec.matchConstraints", "Required value".into())),
    };
    let variables = spec
        .variables
        .unwrap_or_default()
        .into_iter()
        .map(|v| NamedExpression {
            name: v.name,
            expression: v.expression,
        })
        .collect();
    let match_conditions: Vec<NamedExpression> = spec
        .match_conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| NamedExpression {
            name: c.name,
            expression: c.expression,
        })
        .collect();
    if match_conditions.len() > 64 {
        return Err(invalid(
            "spec.matchConditions",
            format!(
                "Too many: {}: must have at most 64 items",
                match_conditions.len()
            ),
        ));
    }
    Ok(Policy {
        name,
        param_kind,
        match_constraints,
        variables,
        mutations,
        failure_policy,
        match_conditions,
        reinvocation_policy,
        source,
    })
}

/// Reads a MutatingAdmissionPolicyBinding of any served version.
pub fn binding_from_json(
    value: &serde_json::Value,
    source: SourceRef,
) -> Result<Binding, ConvertError> {
    const KIND: &str = "MutatingAdmissionPolicyBinding";
    let name = object_name(value);
    let typed: admv1::MutatingAdmissionPolicyBinding =
        serde_json::from_value(retarget(value, KIND)?).map_err(|e| ConvertError::Decode {
            kind: KIND.into(),
            name: name.clone(),
            message: e.to_string(),
        })?;
    let invalid = |field: &str, message: String| ConvertError::Invalid {
        kind: KIND.into(),
        name: name.clone(),
        field: field.into(),
        message,
    };
    if name.is_empty() {
        return Err(invalid("metadata.name", "Required value".into()));
    }
    let spec = typed.spec.unwrap_or_default();
    let policy_name = spec
        .policy_name
        .filter(|p| !p.is_empty())
        .ok_or_else(|| invalid("spec.policyName", "Required value".into()))?;
    let param_ref = match spec.param_ref {
        None => None,
        Some(pr) => {
            let action = match pr.parameter_not_found_action.as_deref() {
                None | Some("Deny") => ParameterNotFoundAction::Deny,
                Some("Allow") => ParameterNotFoundAction::Allow,
                Some(other) => {
                    return Err(invalid(
                        "spec.paramRef.parameterNotFoundAction",
                        format!(
                            "Unsupported value: {other:?}: supported values: \"Allow\", \"Deny\""
                        ),
                    ))
                }
            };
            if pr.name.is_some() && pr.selector.is_some() {
                return Err(invalid(
                    "spec.paramRef",
                    "Forbidden: name and selector are mutually exclusive".into(),
                ));
            }
            Some(ParamRef {
                name: pr.name.filter(|n| !n.is_empty()),
                namespace: pr.namespace.filter(|n| !n.is_empty()),
                selector: pr
                    .selector
                    .map(|s| label_selector(s, "spec.paramRef.selector"))
                    .transpose()
                    .map_err(|(f, m)| invalid(&f, m))?,
                parameter_not_found_action: action,
            })
        }
    };
    let match_resources = spec
        .match_resources
        .map(|mr| match_resources(mr, "spec.matchResources"))
        .transpose()
        .map_err(|(f, m)| invalid(&f, m))?;
    let monitor = match typed
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::MODE_ANNOTATION))
        .map(String::as_str)
    {
        None | Some("enforce") => false,
        Some("monitor") => true,
        Some(other) => {
            return Err(invalid(
                &format!("metadata.annotations[{}]", super::MODE_ANNOTATION),
                format!("Unsupported value: {other:?}: supported values: \"enforce\", \"monitor\""),
            ))
        }
    };
    Ok(Binding {
        name,
        policy_name,
        param_ref,
        match_resources,
        monitor,
        source,
    })
}

type FieldError = (String, String);

fn match_resources(mr: admv1::MatchResources, path: &str) -> Result<MatchResources, FieldError> {
    let match_policy = match mr.match_policy.as_deref() {
        None | Some("Equivalent") => MatchPolicy::Equivalent,
        Some("Exact") => MatchPolicy::Exact,
        Some(other) => {
            return Err((
                format!("{path}.matchPolicy"),
                format!(
                    "Unsupported value: {other:?}: supported values: \"Equivalent\", \"Exact\""
                ),
            ))
        }
    };
    let rules = |rules: Option<Vec<admv1::NamedRuleWithOperations>>, field: &str| {
        rules
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, r)| named_rule(r, &format!("{path}.{field}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(MatchResources {
        namespace_selector: mr
            .namespace_selector
            .map(|s| label_selector(s, &format!("{path}.namespaceSelector")))
            .transpose()?
            .unwrap_or_default(),
        object_selector: mr
            .object_selector
            .map(|s| label_selector(s, &format!("{path}.objectSelector")))
            .transpose()?
            .unwrap_or_default(),
        resource_rules: rules(mr.resource_rules, "resourceRules")?,
        exclude_resource_rules: rules(mr.exclude_resource_rules, "excludeResourceRules")?,
        match_policy,
    })
}

fn named_rule(r: admv1::NamedRuleWithOperations, path: &str) -> Result<NamedRule, FieldError> {
    let scope = match r.scope.as_deref() {
        None | Some("*") => RuleScope::All,
        Some("Cluster") => RuleScope::Cluster,
        Some("Namespaced") => RuleScope::Namespaced,
        Some(other) => {
            return Err((
                format!("{path}.scope"),
                format!("Unsupported value: {other:?}: supported values: \"*\", \"Cluster\", \"Namespaced\""),
            ))
        }
    };
    let operations = r.operations.unwrap_or_default();
    for op in &operations {
        if !matches!(
            op.as_str(),
            "*" | "CREATE" | "UPDATE" | "CONNECT" | "DELETE"
        ) {
            return Err((
                format!("{path}.operations"),
                format!("Unsupported value: {op:?}: supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\""),
            ));
        }
    }
    Ok(NamedRule {
        resource_names: r.resource_names.unwrap_or_default(),
        operations,
        api_groups: r.api_groups.unwrap_or_default(),
        api_versions: r.api_versions.unwrap_or_default(),
        resources: r.resources.unwrap_or_default(),
        scope,
    })
}

/// Converts a typed label selector, checking its operators.
pub(crate) fn label_selector(
    s: metav1::LabelSelector,
    path: &str,
) -> Result<LabelSelector, FieldError> {
    let mut match_expressions = Vec::new();
    for (i, req) in s
        .match_expressions
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let operator = match req.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => {
                return Err((
                    format!("{path}.matchExpressions[{i}].operator"),
                    format!("Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\""),
                ))
            }
        };
        let values = req.values.unwrap_or_default();
        let needs_values = matches!(operator, SelectorOperator::In | SelectorOperator::NotIn);
        if needs_values == values.is_empty() {
            return Err((
                format!("{path}.matchExpressions[{i}].values"),
                if needs_values {
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'".into()
                } else {
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                        .into()
                },
            ));
        }
        match_expressions.push(LabelSelectorRequirement {
            key: req.key,
            operator,
            values,
        });
    }
    Ok(LabelSelector {
        match_labels: s.match_labels.unwrap_or_default(),
        match_expressions,
    })
}

/// Reads a label selector from untyped JSON (as found in cases and params).
pub fn label_selector_from_json(
    value: &serde_json::Value,
    path: &str,
) -> Result<LabelSelector, String> {
    let typed: metav1::LabelSelector =
        serde_json::from_value(value.clone()).map_err(|e| format!("{path}: {e}"))?;
    label_selector(typed, path).map_err(|(f, m)| format!("{f}: {m}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding_annotated(mode: Option<&str>) -> Result<Binding, ConvertError> {
        let mut doc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "b"},
            "spec": {"policyName": "p"}});
        if let Some(mode) = mode {
            doc["metadata"]["annotations"] = json!({"kmutate.dev/mode": mode});
        }
        binding_from_json(&doc, SourceRef::default())
    }

    #[test]
    fn a_binding_is_monitored_only_when_annotated_so_and_a_typo_is_named() {
        assert!(!binding_annotated(None).unwrap().monitor);
        assert!(!binding_annotated(Some("enforce")).unwrap().monitor);
        assert!(binding_annotated(Some("monitor")).unwrap().monitor);
        let err = binding_annotated(Some("monitr")).unwrap_err().to_string();
        assert!(
            err.contains("metadata.annotations[kmutate.dev/mode]")
                && err.contains(
                    r#"Unsupported value: "monitr": supported values: "enforce", "monitor""#
                ),
            "{err}"
        );
        assert!(err.contains("\"b\""), "{err}");
    }
}
