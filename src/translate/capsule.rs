//! Capsule Tenant `spec.rules[].mutate` to MutatingAdmissionPolicies: one
//! policy for Pod CREATE in the tenant's namespaces, with the entries'
//! mutations in order, and one for newly added ephemeral containers.
//!
//! Atomic Pod fields (nodeSelector, tolerations, affinity) and every
//! `replace` of a list are JSONPatch; merges into listType=map lists and
//! scalar settings are ApplyConfiguration. The table is docs/translate-capsule.md.

use super::cel;
use super::{dns_part, policy_and_binding, MutationOut, Options, TranslateError, Translation};
use serde_json::{json, Map, Value as Json};
use std::path::Path;

/// The label Capsule puts on every namespace of a tenant.
pub const TENANT_LABEL: &str = "capsule.clastix.io/tenant";

fn invalid(m: impl Into<String>) -> TranslateError {
    TranslateError::Invalid(m.into())
}

/// Translates every Tenant of a YAML file.
pub fn translate_file(path: &Path, opts: &Options) -> Result<Translation, TranslateError> {
    opts.validate()?;
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    let docs = crate::api::load::parse_documents(&text)
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    let mut out = Translation::default();
    let mut n = 0;
    for doc in docs.iter().filter(|d| !d.is_null()) {
        n += 1;
        out.extend(translate_tenant(doc, opts)?);
    }
    if n == 0 {
        return Err(invalid(format!("{}: no Tenant", path.display())));
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Merge,
    Replace,
}

/// Container groups of a Pod, as ApplyConfiguration field names.
const GROUPS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// One `mutate` entry, read and checked.
struct Entry {
    label: String,
    action: Action,
    /// Whether the `pod` target is selected (pod-level properties).
    pod: bool,
    /// Container groups selected (indexes into GROUPS).
    groups: Vec<&'static str>,
    node_selector: Option<Map<String, Json>>,
    tolerations: Option<Vec<Json>>,
    affinity: Option<Map<String, Json>>,
    spread: Option<Vec<Json>>,
    host_users: Option<bool>,
    read_only_root: Option<bool>,
    pull_policy: Option<String>,
    pull_secrets: Option<Vec<Json>>,
}

/// Translates one Tenant.
pub fn translate_tenant(doc: &Json, opts: &Options) -> Result<Translation, TranslateError> {
    if let Some(k) = doc.get("kind").and_then(Json::as_str) {
        if k != "Tenant" {
            return Err(invalid(format!("expected a Tenant, got kind {k:?}")));
        }
    }
    let tenant = doc
        .pointer("/metadata/name")
        .and_then(Json::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("the Tenant has no metadata.name"))?;
    let mut out = Translation::default();
    let rules = match doc.pointer("/spec/rules") {
        None | Some(Json::Null) => &[][..],
        Some(Json::Array(r)) => r.as_slice(),
        Some(_) => {
            return Err(invalid(format!(
                "capsule {tenant}: spec.rules must be a list"
            )))
        }
    };
    let mut entries = Vec::new();
    for (ri, rule) in rules.iter().enumerate() {
        let rlabel = format!("capsule {tenant} rules[{ri}]");
        let Some(rmap) = rule.as_object() else {
            return Err(invalid(format!("{rlabel}: expected a map")));
        };
        let mut skip = false;
        for k in rmap.keys() {
            match k.as_str() {
                "mutate" => {}
                "enforce" => out.warnings.push(format!(
                    "{rlabel}.enforce: validation, not mutation; not translated"
                )),
                "namespaceSelector" => {
                    let reason = "a rule's namespaceSelector is not supported by this translator"
                        .to_string();
                    if opts.skip_untranslatable {
                        out.warnings
                            .push(format!("skipped {rlabel}: cannot be translated: {reason}"));
                        skip = true;
                    } else {
                        return Err(TranslateError::Untranslatable {
                            rule: rlabel,
                            reason,
                        });
                    }
                }
                other => return Err(invalid(format!("{rlabel}: unknown key {other:?}"))),
            }
        }
        if skip {
            continue;
        }
        let mutate = match rmap.get("mutate") {
            None | Some(Json::Null) => continue,
            Some(Json::Array(m)) => m,
            Some(_) => return Err(invalid(format!("{rlabel}.mutate must be a list"))),
        };
        for (mi, e) in mutate.iter().enumerate() {
            entries.push(read_entry(e, format!("{rlabel}.mutate[{mi}]"))?);
        }
    }
    let mut pod_mutations = Vec::new();
    let mut eph_mutations = Vec::new();
    for e in &entries {
        pod_mutations.extend(pod_entry(e)?);
        eph_mutations.extend(ephemeral_entry(e));
    }
    let base = format!("capsule-{}", dns_part(tenant));
    let selector = json!({"matchLabels": {TENANT_LABEL: tenant}});
    if pod_mutations.is_empty() {
        out.warnings.push(format!(
            "capsule {tenant}: no mutation to translate; no policy emitted"
        ));
    } else {
        let (p, b) = policy_and_binding(
            &base,
            json!({
                "namespaceSelector": selector,
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"],
                }],
            }),
            &pod_mutations,
            opts,
        );
        out.policies.push(p);
        out.bindings.push(b);
    }
    if !eph_mutations.is_empty() {
        let (p, b) = policy_and_binding(
            &format!("{base}-ephemeral"),
            json!({
                "namespaceSelector": selector,
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["pods/ephemeralcontainers"],
                }],
            }),
            &eph_mutations,
            opts,
        );
        out.policies.push(p);
        out.bindings.push(b);
    }
    Ok(out)
}

fn known_keys(m: &Map<String, Json>, keys: &[&str], label: &str) -> Result<(), TranslateError> {
    for k in m.keys() {
        if !keys.contains(&k.as_str()) {
            return Err(invalid(format!("{label}: unknown key {k:?}")));
        }
    }
    Ok(())
}

/// A block that may be omitted, null or `{}`.
fn block<'a>(
    parent: &'a Map<String, Json>,
    key: &str,
    label: &str,
) -> Result<Option<&'a Map<String, Json>>, TranslateError> {
    match parent.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Object(m)) => Ok(Some(m)),
        Some(_) => Err(invalid(format!("{label}.{key} must be a map"))),
    }
}

fn read_entry(e: &Json, label: String) -> Result<Entry, TranslateError> {
    let m = e
        .as_object()
        .ok_or_else(|| invalid(format!("{label}: expected a map")))?;
    known_keys(m, &["action", "workloads", "targets"], &label)?;
    let action = match m.get("action") {
        None | Some(Json::Null) => Action::Merge,
        Some(Json::String(a)) if a == "merge" => Action::Merge,
        Some(Json::String(a)) if a == "replace" => Action::Replace,
        Some(other) => {
            return Err(invalid(format!(
                "{label}.action: {other} is not merge or replace"
            )))
        }
    };
    let empty = Map::new();
    let w = block(m, "workloads", &label)?.unwrap_or(&empty);
    let wl = format!("{label}.workloads");
    known_keys(w, &["placement", "security", "registries", "targets"], &wl)?;
    let targets = match (m.get("targets"), w.get("targets")) {
        (Some(t), None) | (None, Some(t)) => t.clone(),
        (None, None) => Json::Null,
        (Some(_), Some(_)) => {
            return Err(invalid(format!(
                "{label}: targets given both beside action and in workloads"
            )))
        }
    };
    let (pod, groups) = read_targets(&targets, &label)?;
    let placement = block(w, "placement", &wl)?.unwrap_or(&empty);
    let pl = format!("{wl}.placement");
    known_keys(
        placement,
        &[
            "nodeSelector",
            "tolerations",
            "affinity",
            "topologySpreadConstraints",
        ],
        &pl,
    )?;
    let security = block(w, "security", &wl)?.unwrap_or(&empty);
    let sl = format!("{wl}.security");
    known_keys(security, &["hostUsers", "readOnlyRootFilesystem"], &sl)?;
    let registries = block(w, "registries", &wl)?.unwrap_or(&empty);
    let rl = format!("{wl}.registries");
    known_keys(registries, &["imagePullPolicy", "imagePullSecrets"], &rl)?;

    let map_of = |parent: &Map<String, Json>,
                  k: &str,
                  l: &str|
     -> Result<Option<Map<String, Json>>, TranslateError> {
        match parent.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Object(o)) => Ok(Some(o.clone())),
            Some(_) => Err(invalid(format!("{l}.{k} must be a map"))),
        }
    };
    let list_of = |parent: &Map<String, Json>,
                   k: &str,
                   l: &str|
     -> Result<Option<Vec<Json>>, TranslateError> {
        match parent.get(k) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Array(a)) => {
                if a.iter().any(|i| !i.is_object()) {
                    return Err(invalid(format!("{l}.{k}: every item must be a map")));
                }
                Ok(Some(a.clone()))
            }
            Some(_) => Err(invalid(format!("{l}.{k} must be a list"))),
        }
    };
    let bool_of =
        |parent: &Map<String, Json>, k: &str, l: &str| -> Result<Option<bool>, TranslateError> {
            match parent.get(k) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(invalid(format!("{l}.{k} must be true or false"))),
            }
        };
    let node_selector = map_of(placement, "nodeSelector", &pl)?;
    if let Some(ns) = &node_selector {
        if ns.values().any(|v| !v.is_string()) {
            return Err(invalid(format!(
                "{pl}.nodeSelector: values must be strings"
            )));
        }
    }
    let pull_policy = match registries.get("imagePullPolicy") {
        None | Some(Json::Null) => None,
        Some(Json::String(p)) if matches!(p.as_str(), "Always" | "IfNotPresent" | "Never") => {
            Some(p.clone())
        }
        Some(other) => {
            return Err(invalid(format!(
                "{rl}.imagePullPolicy: {other} is not Always, IfNotPresent or Never"
            )))
        }
    };
    let pull_secrets = list_of(registries, "imagePullSecrets", &rl)?;
    if let Some(s) = &pull_secrets {
        if s.iter()
            .any(|i| !i.get("name").is_some_and(Json::is_string))
        {
            return Err(invalid(format!(
                "{rl}.imagePullSecrets: every item needs a name"
            )));
        }
    }
    let entry = Entry {
        action,
        pod,
        groups,
        node_selector,
        tolerations: list_of(placement, "tolerations", &pl)?,
        affinity: map_of(placement, "affinity", &pl)?,
        spread: list_of(placement, "topologySpreadConstraints", &pl)?,
        host_users: bool_of(security, "hostUsers", &sl)?,
        read_only_root: bool_of(security, "readOnlyRootFilesystem", &sl)?,
        pull_policy,
        pull_secrets,
        label,
    };
    let pod_level = entry.node_selector.is_some()
        || entry.tolerations.is_some()
        || entry.affinity.is_some()
        || entry.spread.is_some()
        || entry.host_users.is_some()
        || entry.pull_secrets.is_some();
    let container_level = entry.read_only_root.is_some() || entry.pull_policy.is_some();
    if !pod_level && !container_level {
        return Err(invalid(format!(
            "{}: supplies no mutation property (empty placement, security and registries supply no changes)",
            entry.label
        )));
    }
    if pod_level && !entry.pod {
        return Err(invalid(format!(
            "{}: placement, hostUsers and imagePullSecrets apply to the pod target only",
            entry.label
        )));
    }
    Ok(entry)
}

/// `pod` (all container groups), `pod/containers`, `pod/initcontainers`,
/// `pod/ephemeralcontainers`; omitted means `[pod]`.
fn read_targets(t: &Json, label: &str) -> Result<(bool, Vec<&'static str>), TranslateError> {
    let list: Vec<&str> = match t {
        Json::Null => vec!["pod"],
        Json::Array(a) if !a.is_empty() => a
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| invalid(format!("{label}.targets: items must be strings")))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(invalid(format!("{label}.targets must be a non-empty list"))),
    };
    let mut pod = false;
    let mut groups: Vec<&'static str> = Vec::new();
    for t in list {
        let add: &[&'static str] = match t {
            "pod" => {
                pod = true;
                &GROUPS
            }
            "pod/containers" => &GROUPS[0..1],
            "pod/initcontainers" => &GROUPS[1..2],
            "pod/ephemeralcontainers" => &GROUPS[2..3],
            other => {
                return Err(invalid(format!(
                    "{label}.targets: unknown target {other:?} (pod, pod/containers, pod/initcontainers, pod/ephemeralcontainers)"
                )))
            }
        };
        for g in add {
            if !groups.contains(g) {
                groups.push(g);
            }
        }
    }
    groups.sort_by_key(|g| GROUPS.iter().position(|x| x == g));
    Ok((pod, groups))
}

// ---- CEL building ---------------------------------------------------------

fn ptr(path: &str) -> String {
    cel::quote(path)
}

/// `[remove]` when the field is present, else nothing.
fn clear(field: &str) -> String {
    format!(
        "object.spec.?{field}.hasValue() ? [{}] : []",
        cel::remove(&ptr(&format!("/spec/{field}")))
    )
}

/// ApplyConfiguration literal of a JSON value at `type_path` (`Object.spec.x`):
/// objects become `Object.spec.x{...}` initializers, except map-typed
/// fields (label maps), which stay map literals.
fn ac_value(v: &Json, type_path: &str) -> Result<String, TranslateError> {
    const MAP_FIELDS: [&str; 2] = ["matchLabels", "nodeSelector"];
    let last = type_path.rsplit('.').next().unwrap_or("");
    Ok(match v {
        Json::Object(m) if !MAP_FIELDS.contains(&last) => {
            let mut fields = Vec::new();
            for (k, fv) in m {
                if !cel::is_selector(k) {
                    return Err(invalid(format!(
                        "field name {k:?} is not valid at {type_path}"
                    )));
                }
                fields.push(format!(
                    "{k}: {}",
                    ac_value(fv, &format!("{type_path}.{k}"))?
                ));
            }
            format!("{type_path}{{{}}}", fields.join(", "))
        }
        Json::Array(a) => format!(
            "[{}]",
            a.iter()
                .map(|i| ac_value(i, type_path))
                .collect::<Result<Vec<_>, _>>()?
                .join(", ")
        ),
        other => cel::literal(other),
    })
}

fn toleration_match(var: &str, t: &Json) -> String {
    let s = |k: &str| t.get(k).and_then(Json::as_str).unwrap_or("").to_string();
    let op = s("operator");
    let op_test = if op.is_empty() || op == "Equal" {
        format!("{var}.?operator.orValue(\"\") in [\"\", \"Equal\"]")
    } else {
        format!("{var}.?operator.orValue(\"\") == {}", cel::quote(&op))
    };
    format!(
        "{var}.?key.orValue(\"\") == {} && {op_test} && {var}.?value.orValue(\"\") == {} && {var}.?effect.orValue(\"\") == {}",
        cel::quote(&s("key")),
        cel::quote(&s("value")),
        cel::quote(&s("effect"))
    )
}

/// Fields of the list entries merged by JSONPatch (kept from the Pod's
/// entry when the supplied entry leaves them out).
const TOLERATION_FIELDS: [&str; 5] = ["key", "operator", "value", "effect", "tolerationSeconds"];
const SPREAD_FIELDS: [&str; 8] = [
    "maxSkew",
    "topologyKey",
    "whenUnsatisfiable",
    "labelSelector",
    "minDomains",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "matchLabelKeys",
];

fn keys_match(var: &str, t: &Json, keys: &[&str]) -> String {
    keys.iter()
        .map(|k| {
            let v = t.get(*k).and_then(Json::as_str).unwrap_or("");
            format!("{var}.?{k}.orValue(\"\") == {}", cel::quote(v))
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// The merged list, as a CEL expression: each Pod entry that matches a
/// supplied entry (`matches(var, supplied)`) is updated (the supplied
/// fields set, its other `fields` kept), and supplied entries that match
/// none are appended in order.
fn merge_list(
    existing: &str,
    supplied: &[Json],
    matches: &dyn Fn(&str, &Json) -> String,
    fields: &[&str],
) -> String {
    let updated = |s: &Json| -> String {
        let m = s.as_object().cloned().unwrap_or_default();
        let mut parts: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{}: {}", cel::quote(k), cel::item(v, true)))
            .collect();
        for f in fields {
            if !m.contains_key(*f) {
                parts.push(format!("?{}: x.?{f}", cel::quote(f)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    };
    let mut chain = "x".to_string();
    for s in supplied.iter().rev() {
        chain = format!("({}) ? {} : {chain}", matches("x", s), updated(s));
    }
    let mut value = format!("{existing}.map(x, {chain})");
    for s in supplied {
        value.push_str(&format!(
            "\n    + ({existing}.exists(x, {}) ? [] : [{}])",
            matches("x", s),
            cel::literal(s)
        ));
    }
    value
}

/// The Pod CREATE mutations of one entry.
fn pod_entry(e: &Entry) -> Result<Vec<MutationOut>, TranslateError> {
    let mut out = Vec::new();
    let replace = e.action == Action::Replace;
    // placement.nodeSelector: atomic map, JSONPatch.
    if let Some(ns) = &e.node_selector {
        let lit = cel::literal(&Json::Object(ns.clone()));
        if replace && ns.is_empty() {
            out.push(MutationOut::Patch(clear("nodeSelector")));
        } else if replace {
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(&ptr("/spec/nodeSelector"), &lit)
            )));
        } else if !ns.is_empty() {
            let keys: Vec<String> = ns
                .iter()
                .map(|(k, v)| {
                    cel::add(
                        &ptr(&format!("/spec/nodeSelector/{}", cel::escape_pointer(k))),
                        &cel::literal(v),
                    )
                })
                .collect();
            out.push(MutationOut::Patch(format!(
                "object.spec.?nodeSelector.orValue(null) == null ?\n  [{}] :\n  [{}]",
                cel::add(&ptr("/spec/nodeSelector"), &lit),
                keys.join(",\n   ")
            )));
        }
    }
    // placement.tolerations: atomic list, JSONPatch; merge identity key, operator, value, effect.
    if let Some(ts) = &e.tolerations {
        if replace && ts.is_empty() {
            out.push(MutationOut::Patch(clear("tolerations")));
        } else if replace {
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(
                    &ptr("/spec/tolerations"),
                    &cel::literal(&Json::Array(ts.clone()))
                )
            )));
        } else if !ts.is_empty() {
            let value = merge_list(
                "object.spec.?tolerations.orValue([])",
                ts,
                &toleration_match,
                &TOLERATION_FIELDS,
            );
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(&ptr("/spec/tolerations"), &value)
            )));
        }
    }
    // placement.affinity: atomic, JSONPatch.
    if let Some(a) = &e.affinity {
        if replace && a.is_empty() {
            out.push(MutationOut::Patch(clear("affinity")));
        } else if replace {
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(
                    &ptr("/spec/affinity"),
                    &cel::literal(&Json::Object(a.clone()))
                )
            )));
        } else if !a.is_empty() {
            out.push(MutationOut::Patch(affinity_merge(a, &e.label)?));
        }
    }
    // placement.topologySpreadConstraints: listType=map (topologyKey, whenUnsatisfiable).
    if let Some(c) = &e.spread {
        if replace && c.is_empty() {
            out.push(MutationOut::Patch(clear("topologySpreadConstraints")));
        } else if replace {
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(
                    &ptr("/spec/topologySpreadConstraints"),
                    &cel::literal(&Json::Array(c.clone()))
                )
            )));
        } else if !c.is_empty()
            && c.iter()
                .any(|i| i.get("labelSelector").is_some() || i.get("matchLabelKeys").is_some())
        {
            // labelSelector and matchLabelKeys are atomic: ApplyConfiguration may not set them.
            let keys = ["topologyKey", "whenUnsatisfiable"];
            let value = merge_list(
                "object.spec.?topologySpreadConstraints.orValue([])",
                c,
                &|v: &str, s: &Json| keys_match(v, s, &keys),
                &SPREAD_FIELDS,
            );
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(&ptr("/spec/topologySpreadConstraints"), &value)
            )));
        } else if !c.is_empty() {
            out.push(MutationOut::Apply(format!(
                "Object{{spec: Object.spec{{topologySpreadConstraints: {}}}}}",
                ac_value(
                    &Json::Array(c.clone()),
                    "Object.spec.topologySpreadConstraints"
                )
                .map_err(|err| invalid(format!("{}: {err}", e.label)))?
            )));
        }
    }
    // security.hostUsers: scalar.
    if let Some(h) = e.host_users {
        out.push(MutationOut::Apply(format!(
            "Object{{spec: Object.spec{{hostUsers: {h}}}}}"
        )));
    }
    // Container-level settings, per selected group.
    for g in &e.groups {
        out.extend(container_settings(e, g, false));
    }
    // registries.imagePullSecrets: listType=map (name).
    if let Some(s) = &e.pull_secrets {
        if replace && s.is_empty() {
            out.push(MutationOut::Patch(clear("imagePullSecrets")));
        } else if replace {
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(
                    &ptr("/spec/imagePullSecrets"),
                    &cel::literal(&Json::Array(s.clone()))
                )
            )));
        } else if !s.is_empty() {
            // The entries (LocalObjectReference) are atomic structs:
            // ApplyConfiguration may not set them, so the merge is a JSONPatch.
            let value = merge_list(
                "object.spec.?imagePullSecrets.orValue([])",
                s,
                &|v: &str, i: &Json| keys_match(v, i, &["name"]),
                &["name"],
            );
            out.push(MutationOut::Patch(format!(
                "[{}]",
                cel::add(&ptr("/spec/imagePullSecrets"), &value)
            )));
        }
    }
    Ok(out)
}

/// readOnlyRootFilesystem and imagePullPolicy for container group `g`
/// (ApplyConfiguration keyed by container name). With `only_new`, only
/// ephemeral containers absent from `oldObject` are set.
fn container_settings(e: &Entry, g: &str, only_new: bool) -> Vec<MutationOut> {
    let t = format!("Object.spec.{g}");
    let mut fields = Vec::new();
    if let Some(r) = e.read_only_root {
        fields.push(format!(
            "securityContext: {t}.securityContext{{readOnlyRootFilesystem: {r}}}"
        ));
    }
    if let Some(p) = &e.pull_policy {
        fields.push(format!("imagePullPolicy: {}", cel::quote(p)));
    }
    if fields.is_empty() {
        return Vec::new();
    }
    let selected = if only_new {
        format!(
            "object.spec.?{g}.orValue([]).filter(c, !oldObject.spec.?{g}.orValue([]).exists(o, o.name == c.name))"
        )
    } else {
        format!("object.spec.?{g}.orValue([])")
    };
    vec![MutationOut::Apply(format!(
        "{selected}.size() > 0 ?\n  Object{{spec: Object.spec{{{g}: {selected}.map(c, {t}{{name: c.name, {}}})}}}} :\n  Object{{}}",
        fields.join(", ")
    ))]
}

/// The mutations of one entry for newly added ephemeral containers.
fn ephemeral_entry(e: &Entry) -> Vec<MutationOut> {
    if e.groups.contains(&"ephemeralContainers") {
        container_settings(e, "ephemeralContainers", true)
    } else {
        Vec::new()
    }
}

/// Merge of a supplied affinity into the Pod's (see the docs):
/// required node-affinity terms are combined (every existing term gains
/// the requirements of each supplied term); every other list gains the
/// supplied entries it does not already hold.
fn affinity_merge(a: &Map<String, Json>, label: &str) -> Result<String, TranslateError> {
    const REQ: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    const PREF: &str = "preferredDuringSchedulingIgnoredDuringExecution";
    let mut branch_ops = Vec::new();
    for (b, bv) in a {
        if !matches!(
            b.as_str(),
            "nodeAffinity" | "podAffinity" | "podAntiAffinity"
        ) {
            return Err(invalid(format!("{label}: unknown affinity branch {b:?}")));
        }
        let Some(bm) = bv.as_object() else {
            return Err(invalid(format!("{label}: affinity.{b} must be a map")));
        };
        if bm.is_empty() {
            continue;
        }
        let here = format!("object.spec.affinity.?{b}");
        let mut field_ops = Vec::new();
        for (f, fv) in bm {
            let path = ptr(&format!("/spec/affinity/{b}/{f}"));
            if b == "nodeAffinity" && f == REQ {
                let terms = fv
                    .get("nodeSelectorTerms")
                    .and_then(Json::as_array)
                    .cloned()
                    .unwrap_or_default();
                if fv
                    .as_object()
                    .is_some_and(|m| m.keys().any(|k| k != "nodeSelectorTerms"))
                {
                    return Err(invalid(format!(
                        "{label}: affinity.nodeAffinity.{REQ} holds only nodeSelectorTerms"
                    )));
                }
                if terms.is_empty() {
                    continue;
                }
                let existing = format!("{here}.?{REQ}.?nodeSelectorTerms.orValue([])");
                let mut combos = Vec::new();
                for s in &terms {
                    let mut parts = Vec::new();
                    for k in ["matchExpressions", "matchFields"] {
                        let sup = s
                            .get(k)
                            .and_then(Json::as_array)
                            .cloned()
                            .unwrap_or_default();
                        if sup.is_empty() {
                            parts.push(format!("?{}: e.?{k}", cel::quote(k)));
                        } else {
                            let adds: Vec<String> = sup
                                .iter()
                                .map(|x| {
                                    let l = cel::literal(x);
                                    format!("({l} in e.?{k}.orValue([]) ? [] : [{l}])")
                                })
                                .collect();
                            // dyn(): the map literal's other entry is an
                            // optional of dyn, and upstream's homogeneous
                            // literal validator wants one value type.
                            parts.push(format!(
                                "{}: dyn(e.?{k}.orValue([]) + {})",
                                cel::quote(k),
                                adds.join(" + ")
                            ));
                        }
                    }
                    combos.push(format!("{existing}.map(e, {{{}}})", parts.join(", ")));
                }
                let value = format!(
                    "{{\"nodeSelectorTerms\": {existing}.size() == 0 ? {} : {}}}",
                    cel::literal(&Json::Array(terms.clone())),
                    combos.join(" + ")
                );
                field_ops.push(format!("[{}]", cel::add(&path, &value)));
            } else if f == REQ || f == PREF {
                let Some(items) = fv.as_array() else {
                    return Err(invalid(format!("{label}: affinity.{b}.{f} must be a list")));
                };
                if items.is_empty() {
                    continue;
                }
                let existing = format!("{here}.?{f}.orValue([])");
                let adds: Vec<String> = items
                    .iter()
                    .map(|x| {
                        let l = cel::literal(x);
                        format!("({l} in {existing} ? [] : [{l}])")
                    })
                    .collect();
                field_ops.push(format!(
                    "[{}]",
                    cel::add(&path, &format!("{existing} + {}", adds.join(" + ")))
                ));
            } else {
                return Err(invalid(format!("{label}: unknown field affinity.{b}.{f}")));
            }
        }
        if field_ops.is_empty() {
            continue;
        }
        branch_ops.push(format!(
            "({here}.orValue(null) == null ? [{}] : {})",
            cel::add(&ptr(&format!("/spec/affinity/{b}")), &cel::literal(bv)),
            field_ops.join(" + ")
        ));
    }
    if branch_ops.is_empty() {
        return Ok("[]".into());
    }
    Ok(format!(
        "object.spec.?affinity.orValue(null) == null ?\n  [{}] :\n  {}",
        cel::add(
            &ptr("/spec/affinity"),
            &cel::literal(&Json::Object(a.clone()))
        ),
        branch_ops.join("\n  + ")
    ))
}
