//! Param objects for a policy invocation: `paramKind` + `paramRef` by name
//! or selector, with upstream's namespace rules and parameterNotFoundAction.
//!
//! Upstream: `generic/policy_dispatcher.go` `CollectParams`.

use super::AdmissionContext;
use crate::api::{Binding, ParameterNotFoundAction, Policy};
use crate::request::AdmissionRequest;
use serde_json::Value as Json;
use smallvec::{smallvec, SmallVec};

/// The params of one binding, one invocation each. Most bindings have
/// none, and run once with null params: one inline slot spares an
/// allocation per binding and request.
pub type Params = SmallVec<[Option<Json>; 1]>;

/// The params of one binding: `[None]` runs the policy once with null
/// params, an empty list runs nothing.
pub fn collect(
    policy: &Policy,
    binding: &Binding,
    request: &AdmissionRequest,
    ctx: &AdmissionContext<'_>,
) -> Result<Params, String> {
    let Some(kind) = &policy.param_kind else {
        return Ok(smallvec![None]);
    };
    let Some(param_ref) = &binding.param_ref else {
        // ParamKind is set but the binding does not use it: null params.
        return Ok(smallvec![None]);
    };
    let namespaced = ctx
        .resources
        .is_namespaced(kind.group(), &kind.api_version, &kind.kind)
        .unwrap_or(true);
    let namespace: Option<String> = if namespaced {
        match &param_ref.namespace {
            Some(ns) => Some(ns.clone()),
            None => Some(request.namespace.clone()),
        }
    } else {
        if param_ref.namespace.is_some() {
            return Err(
                "failed to configure binding: paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        }
        None
    };
    if namespaced && namespace.as_deref() == Some("") {
        return Err("failed to configure binding: cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
    }
    let found: Vec<Json> = ctx
        .cluster
        .find(
            &kind.api_version,
            &kind.kind,
            namespace.as_deref(),
            param_ref.name.as_deref(),
            if param_ref.name.is_some() {
                None
            } else {
                Some(param_ref.selector.as_ref().cloned().unwrap_or_default())
            }
            .as_ref(),
        )
        .into_iter()
        .cloned()
        .collect();
    if found.is_empty() {
        return match param_ref.parameter_not_found_action {
            ParameterNotFoundAction::Allow => Ok(Params::new()),
            ParameterNotFoundAction::Deny => {
                Err("failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction".into())
            }
        };
    }
    Ok(found.into_iter().map(Some).collect())
}
