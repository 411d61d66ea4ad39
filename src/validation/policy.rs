//! Upstream's validation of a MutatingAdmissionPolicy's spec, field rules
//! and CEL compilation, in the order upstream reports them.

use super::field::{FieldErrors, Problem};
use super::json::{list_at, object_at, str_at};
use super::rules::{check_format, check_match_resources, default_match_resources};
use crate::api::{
    FailurePolicy, MatchResources, Mutation, NamedExpression, ParamKind, PatchType, Policy,
    ReinvocationPolicy, SourceRef,
};
use crate::cel::CelEnvironment;
use crate::dispatch::CompiledPolicy;
use serde_json::Value as Json;
use std::collections::{BTreeSet, HashMap};

/// Upstream's limit on `matchConditions`.
const MAX_MATCH_CONDITIONS: usize = 64;

/// CEL's reserved words, which no identifier may be.
const CEL_RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Whether `name` is a CEL identifier (`[_a-zA-Z][_a-zA-Z0-9]*`, not reserved).
pub(super) fn is_cel_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !CEL_RESERVED.contains(&name)
}

/// The defaults the API server sets before validating (`SetDefaults_*`):
/// `failurePolicy: Fail` and those of `matchConstraints`.
pub(super) fn default_policy_spec(spec: &mut Json) {
    let Some(map) = spec.as_object_mut() else {
        return;
    };
    if map.get("failurePolicy").is_none_or(Json::is_null) {
        map.insert("failurePolicy".into(), "Fail".into());
    }
    if let Some(mr) = map.get_mut("matchConstraints") {
        default_match_resources(mr);
    }
}

/// Upstream's `validateMutatingAdmissionPolicySpec`. `old_spec` is the
/// stored spec on an UPDATE: match conditions are not checked again when
/// neither they nor `paramKind` changed, so that what was accepted once
/// stays accepted. Without `compile`, expressions are not compiled.
pub(super) fn check_policy_spec(
    errs: &mut FieldErrors,
    spec: &Json,
    old_spec: Option<&Json>,
    compile: bool,
) {
    let compiled = if compile {
        compile_errors(spec)
    } else {
        CompileErrors(HashMap::new())
    };
    match str_at(spec, "failurePolicy") {
        None => errs.required("spec.failurePolicy", ""),
        Some(p) => errs.check_supported("spec.failurePolicy", p, &["Fail", "Ignore"]),
    }
    if let Some(param_kind) = object_at(spec, "paramKind") {
        check_param_kind(errs, param_kind);
    }
    match object_at(spec, "matchConstraints") {
        None => errs.required("spec.matchConstraints", ""),
        Some(mr) => {
            check_match_resources(errs, "spec.matchConstraints", mr);
            // The resource rules give the expressions their types.
            if list_at(mr, "resourceRules").is_empty() {
                errs.required("spec.matchConstraints.resourceRules", "");
            }
        }
    }
    let unchanged = |key: &str| old_spec.is_some_and(|old| old.get(key) == spec.get(key));
    if !(unchanged("matchConditions") && unchanged("paramKind")) {
        check_match_conditions(errs, spec, &compiled);
    }
    check_variables(errs, spec, &compiled);
    check_mutations(errs, spec, &compiled);
    match str_at(spec, "reinvocationPolicy") {
        None => errs.required("spec.reinvocationPolicy", ""),
        Some(p) => errs.check_supported("spec.reinvocationPolicy", p, &["IfNeeded", "Never"]),
    }
}

/// Upstream's `validateParamKind`.
fn check_param_kind(errs: &mut FieldErrors, param_kind: &Json) {
    const AT: &str = "spec.paramKind";
    match str_at(param_kind, "apiVersion").filter(|v| !v.is_empty()) {
        None => errs.required(format!("{AT}.apiVersion"), ""),
        Some(api_version) => check_param_api_version(errs, api_version),
    }
    match str_at(param_kind, "kind").filter(|k| !k.is_empty()) {
        None => errs.required(format!("{AT}.kind"), ""),
        Some(kind) => {
            let problems = super::rules::format_errors("dns1035Label", &kind.to_lowercase());
            if !problems.is_empty() {
                errs.invalid(
                    format!("{AT}.kind"),
                    kind,
                    &format!(
                        "may have mixed case, but should otherwise match: {}",
                        problems.join(",")
                    ),
                );
            }
        }
    }
}

/// The group must be a DNS subdomain and the version a DNS-1035 label, as
/// an APIService's.
fn check_param_api_version(errs: &mut FieldErrors, api_version: &str) {
    const AT: &str = "spec.paramKind.apiVersion";
    let (group, version) = match api_version.matches('/').count() {
        _ if api_version == "/" => ("", ""),
        0 => ("", api_version),
        1 => api_version.split_once('/').unwrap_or_default(),
        _ => {
            errs.invalid(
                AT,
                api_version,
                &format!("unexpected GroupVersion string: {api_version}"),
            );
            return;
        }
    };
    if !group.is_empty() {
        let problems = super::rules::format_errors("dns1123Subdomain", group);
        if !problems.is_empty() {
            errs.invalid(AT, group, &problems.join(","));
        }
    }
    if version.is_empty() {
        errs.invalid(AT, api_version, "version must be specified");
    } else {
        let problems = super::rules::format_errors("dns1035Label", version);
        if !problems.is_empty() {
            errs.invalid(AT, version, &problems.join(","));
        }
    }
}

/// Upstream's `validateMatchConditions`.
fn check_match_conditions(errs: &mut FieldErrors, spec: &Json, compiled: &CompileErrors) {
    let conditions = list_at(spec, "matchConditions");
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errs.push(
            "spec.matchConditions",
            Problem::TooMany {
                actual: conditions.len(),
                max: MAX_MATCH_CONDITIONS,
            },
        );
    }
    let mut names = BTreeSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let at = format!("spec.matchConditions[{i}]");
        let expression = str_at(condition, "expression").unwrap_or_default().trim();
        if expression.is_empty() {
            errs.required(format!("{at}.expression"), "");
        } else {
            compiled.report(errs, &format!("{at}.expression"), expression);
        }
        let name = str_at(condition, "name").unwrap_or_default();
        if name.is_empty() {
            errs.required(format!("{at}.name"), "");
        } else {
            check_format(errs, &format!("{at}.name"), "qualifiedName", name);
            if !names.insert(name) {
                errs.push(format!("{at}.name"), Problem::Duplicate(name.into()));
            }
        }
    }
}

/// Upstream's `validateVariable` for each variable.
fn check_variables(errs: &mut FieldErrors, spec: &Json, compiled: &CompileErrors) {
    for (i, variable) in list_at(spec, "variables").iter().enumerate() {
        let at = format!("spec.variables[{i}]");
        let name = str_at(variable, "name").unwrap_or_default();
        if name.trim().is_empty() {
            errs.required(format!("{at}.name"), "name is not specified");
        } else if !is_cel_identifier(name) {
            errs.invalid(format!("{at}.name"), name, "must be a valid CEL identifier");
        }
        let expression = str_at(variable, "expression").unwrap_or_default();
        if expression.trim().is_empty() {
            errs.required(format!("{at}.expression"), "expression is not specified");
        } else {
            // Variables are compiled, and shown, as written.
            compiled.report(errs, &format!("{at}.expression"), expression);
        }
    }
}

/// The patch types, as `patchType` names them, with the field each reads.
const PATCH_TYPES: [(&str, &str); 2] = [
    ("ApplyConfiguration", "applyConfiguration"),
    ("JSONPatch", "jsonPatch"),
];

/// Upstream's mutation checks: a patch type, its own body with an
/// expression that compiles to the type it needs, and not the other's body.
fn check_mutations(errs: &mut FieldErrors, spec: &Json, compiled: &CompileErrors) {
    let mutations = list_at(spec, "mutations");
    if mutations.is_empty() {
        errs.required("spec.mutations", "mutations must contain at least one item");
    }
    for (i, mutation) in mutations.iter().enumerate() {
        let at = format!("spec.mutations[{i}]");
        let patch_type = str_at(mutation, "patchType").unwrap_or_default();
        let Some(&(_, own)) = PATCH_TYPES.iter().find(|(t, _)| *t == patch_type) else {
            if patch_type.is_empty() {
                errs.required(format!("{at}.patchType"), "");
            } else {
                errs.check_supported(
                    format!("{at}.patchType"),
                    patch_type,
                    &["ApplyConfiguration", "JSONPatch"],
                );
            }
            continue;
        };
        match object_at(mutation, own) {
            None => errs.required(
                format!("{at}.{own}"),
                &format!("must be specified when patchType is {patch_type}"),
            ),
            Some(body) => {
                let expression = str_at(body, "expression").unwrap_or_default().trim();
                if expression.is_empty() {
                    errs.required(format!("{at}.{own}.expression"), "");
                } else {
                    compiled.report(errs, &format!("{at}.{own}.expression"), expression);
                }
            }
        }
        for &(_, other) in PATCH_TYPES.iter().filter(|(_, f)| *f != own) {
            if object_at(mutation, other).is_some() {
                errs.invalid(
                    format!("{at}.{other}"),
                    format!("{{{other}}}").as_str(),
                    &format!("must not be specified when patchType is {patch_type}"),
                );
            }
        }
    }
}

/// What compiling the policy's expressions found, by field path.
struct CompileErrors(HashMap<String, String>);

impl CompileErrors {
    /// `Invalid value: EXPRESSION: MESSAGE` when the expression at `field`
    /// did not compile.
    fn report(&self, errs: &mut FieldErrors, field: &str, expression: &str) {
        let Some(message) = self.0.get(field) else {
            return;
        };
        // Upstream's compiler reports a program it cannot build as an
        // internal error, without the expression.
        if message.starts_with("program instantiation failed:") {
            errs.push(field, Problem::Internal(message.clone()));
        } else {
            errs.invalid(field, expression, message);
        }
    }
}

/// Compiles every expression of `spec` as the policy plugin does (each
/// variable seeing those before it, params only with a `paramKind`).
/// Blank expressions and mutations of no known patch type get a stand-in
/// that compiles: their own error is a field error, reported elsewhere.
fn compile_errors(spec: &Json) -> CompileErrors {
    const STAND_IN: &str = "dyn(null)";
    let trimmed_or = |e: &Json, stand_in: &str| {
        let s = str_at(e, "expression").unwrap_or_default().trim();
        if s.is_empty() { stand_in } else { s }.to_string()
    };
    let variables = list_at(spec, "variables")
        .iter()
        .map(|v| {
            let raw = str_at(v, "expression").unwrap_or_default();
            NamedExpression {
                name: str_at(v, "name").unwrap_or_default().to_string(),
                expression: if raw.trim().is_empty() { STAND_IN } else { raw }.to_string(),
            }
        })
        .collect();
    let match_conditions = list_at(spec, "matchConditions")
        .iter()
        .map(|c| NamedExpression {
            name: str_at(c, "name").unwrap_or_default().to_string(),
            expression: trimmed_or(c, "true"),
        })
        .collect();
    let mutations = list_at(spec, "mutations")
        .iter()
        .map(|m| {
            let patch_type = str_at(m, "patchType").unwrap_or_default();
            let body = match patch_type {
                "JSONPatch" => object_at(m, "jsonPatch"),
                _ => object_at(m, "applyConfiguration"),
            };
            match (patch_type, body) {
                ("JSONPatch", Some(b)) => Mutation {
                    patch_type: PatchType::JsonPatch,
                    expression: trimmed_or(b, "[JSONPatch{op: 'test', path: '/'}]"),
                },
                (_, b) => Mutation {
                    patch_type: PatchType::ApplyConfiguration,
                    expression: b.map_or("Object{}".into(), |b| trimmed_or(b, "Object{}")),
                },
            }
        })
        .collect();
    let policy = Policy {
        name: String::new(),
        param_kind: object_at(spec, "paramKind").map(|_| ParamKind {
            api_version: String::new(),
            kind: String::new(),
        }),
        match_constraints: MatchResources::default(),
        variables,
        mutations,
        failure_policy: FailurePolicy::Fail,
        match_conditions,
        reinvocation_policy: ReinvocationPolicy::Never,
        source: SourceRef::default(),
    };
    let (_, errors) = CompiledPolicy::compile(&CelEnvironment::shared(), policy);
    CompileErrors(errors.into_iter().map(|e| (e.field, e.message)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    // isCELIdentifier in pkg/apis/admissionregistration/validation.
    #[test]
    fn cel_identifiers_are_upstreams() {
        for ok in ["x", "_x", "a1", "camelCase", "snake_case", "_"] {
            assert!(is_cel_identifier(ok), "{ok}");
        }
        for bad in ["", "9x", "my-var", "a.b", "in", "namespace", "null", "é"] {
            assert!(!is_cel_identifier(bad), "{bad}");
        }
    }
}
