//! Declarative mutation rules to MutatingAdmissionPolicies (issue 6).
//!
//! Two formats are translated, never interpreted: the output is ordinary
//! MutatingAdmissionPolicy and binding objects whose CEL any MAP evaluator
//! (kube-apiserver 1.36 included) runs with the same effect.
//!
//! - [`katalog`]: Orkestra Katalog `mutation:` blocks (docs/translate-katalog.md);
//! - [`capsule`]: Capsule Tenant `spec.rules[].mutate` (docs/translate-capsule.md).
//!
//! Both emit one policy per target with one mutation per rule (or per
//! property), in the source order: mutations of one policy run in order,
//! while kube-apiserver runs separate policies in no fixed order.

pub mod capsule;
mod cel;
pub mod cli;
mod gotemplate;
pub mod katalog;
#[cfg(test)]
mod tests;

use serde_json::{json, Value as Json};
use std::path::Path;

/// The API versions a translation can be printed as.
pub const API_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// How to translate.
#[derive(Debug, Clone)]
pub struct Options {
    /// `admissionregistration.k8s.io/<version>` of the output (default v1).
    pub api_version: String,
    /// Drop rules that cannot be translated (with a warning) instead of failing.
    pub skip_untranslatable: bool,
    /// `spec.reinvocationPolicy` of every policy (default `Never`: see the docs).
    pub reinvocation_policy: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            api_version: "v1".into(),
            skip_untranslatable: false,
            reinvocation_policy: "Never".into(),
        }
    }
}

impl Options {
    /// Checks the version and reinvocation policy.
    pub fn validate(&self) -> Result<(), TranslateError> {
        let v = self
            .api_version
            .trim_start_matches("admissionregistration.k8s.io/");
        if !API_VERSIONS.contains(&v) {
            return Err(TranslateError::Invalid(format!(
                "unsupported --api-version {:?}: expected one of v1, v1beta1, v1alpha1",
                self.api_version
            )));
        }
        if !matches!(self.reinvocation_policy.as_str(), "Never" | "IfNeeded") {
            return Err(TranslateError::Invalid(format!(
                "unsupported reinvocation policy {:?}: expected Never or IfNeeded",
                self.reinvocation_policy
            )));
        }
        Ok(())
    }

    fn full_api_version(&self) -> String {
        format!(
            "admissionregistration.k8s.io/{}",
            self.api_version
                .trim_start_matches("admissionregistration.k8s.io/")
        )
    }
}

/// A translation problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// The source is not a valid document of its format.
    #[error("{0}")]
    Invalid(String),
    /// A rule uses something CEL at admission cannot express; `--skip-untranslatable` drops it.
    #[error("{rule}: cannot be translated: {reason}")]
    Untranslatable {
        /// The rule, e.g. `katalog AppRequest rules[2] (field spec.x)`.
        rule: String,
        /// Why.
        reason: String,
    },
}

/// The policies and bindings a translation produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Translation {
    /// MutatingAdmissionPolicy objects.
    pub policies: Vec<Json>,
    /// MutatingAdmissionPolicyBinding objects.
    pub bindings: Vec<Json>,
    /// Warnings (rules skipped, parts of the source that only matter outside admission).
    pub warnings: Vec<String>,
}

impl Translation {
    fn extend(&mut self, other: Translation) {
        self.policies.extend(other.policies);
        self.bindings.extend(other.bindings);
        self.warnings.extend(other.warnings);
    }

    /// Every object, each policy followed by its binding(s).
    pub fn objects(&self) -> Vec<Json> {
        let mut out = Vec::new();
        for p in &self.policies {
            out.push(p.clone());
            let name = p.pointer("/metadata/name");
            out.extend(
                self.bindings
                    .iter()
                    .filter(|b| b.pointer("/spec/policyName") == name)
                    .cloned(),
            );
        }
        out
    }

    /// The objects as a YAML stream (`---` between documents).
    pub fn to_yaml(&self) -> Result<String, String> {
        let mut out = String::new();
        for (i, o) in self.objects().iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            out.push_str(&serde_saphyr::to_string(o).map_err(|e| e.to_string())?);
        }
        Ok(out)
    }
}

/// One mutation of a policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MutationOut {
    /// `patchType: ApplyConfiguration`.
    Apply(String),
    /// `patchType: JSONPatch`.
    Patch(String),
}

impl MutationOut {
    fn to_json(&self) -> Json {
        match self {
            MutationOut::Apply(e) => json!({
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": e},
            }),
            MutationOut::Patch(e) => json!({
                "patchType": "JSONPatch",
                "jsonPatch": {"expression": e},
            }),
        }
    }
}

/// Builds a policy and its binding.
pub(crate) fn policy_and_binding(
    name: &str,
    match_constraints: Json,
    mutations: &[MutationOut],
    opts: &Options,
) -> (Json, Json) {
    let api_version = opts.full_api_version();
    let policy = json!({
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": match_constraints,
            "failurePolicy": "Fail",
            "reinvocationPolicy": opts.reinvocation_policy,
            "mutations": mutations.iter().map(MutationOut::to_json).collect::<Vec<_>>(),
        },
    });
    let binding = json!({
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name},
    });
    (policy, binding)
}

/// Makes `s` a valid DNS-1123 label part: lowercase, `[a-z0-9-]`.
pub(crate) fn dns_part(s: &str) -> String {
    let mut out: String = s
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("--") {
        out = out.replace("--", "-");
    }
    out.trim_matches('-').to_string()
}

/// Translates one `declarative:` item of a conformance case
/// (`../shared/conformance/FORMAT.md`); `case_dir` is the folder of the case
/// file, against which `baseDir` resolves.
pub fn translate_declarative(item: &Json, case_dir: &Path) -> Result<Translation, TranslateError> {
    let opts = Options::default();
    let format = item.get("format").and_then(Json::as_str).unwrap_or("");
    let source = item
        .get("source")
        .ok_or_else(|| TranslateError::Invalid("declarative item has no source".into()))?;
    match format {
        "katalog" => {
            let target = item
                .get("target")
                .map(katalog::Target::from_json)
                .transpose()?;
            let base = match item.get("baseDir").and_then(Json::as_str) {
                Some(b) => case_dir.join(b),
                None => case_dir.to_path_buf(),
            };
            katalog::translate_document(source, target.as_ref(), &base, &opts).map(|(t, _)| t)
        }
        "capsule" => capsule::translate_tenant(source, &opts),
        other => Err(TranslateError::Invalid(format!(
            "declarative item: unknown format {other:?} (expected katalog or capsule)"
        ))),
    }
}

/// Translates a case's whole `declarative:` list.
pub fn translate_declarative_list(
    items: &Json,
    case_dir: &Path,
) -> Result<Translation, TranslateError> {
    let list = items
        .as_array()
        .ok_or_else(|| TranslateError::Invalid("declarative must be a list".into()))?;
    let mut out = Translation::default();
    for (i, item) in list.iter().enumerate() {
        out.extend(translate_declarative(item, case_dir).map_err(|e| match e {
            TranslateError::Invalid(m) => TranslateError::Invalid(format!("declarative[{i}]: {m}")),
            other => other,
        })?);
    }
    Ok(out)
}
