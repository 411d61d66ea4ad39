//! Orkestra Katalog `mutation:` blocks to one MutatingAdmissionPolicy per
//! CRDEntry, one JSONPatch mutation per rule, in rule order.
//!
//! The table of constructs and their CEL is docs/translate-katalog.md.

use super::cel::{self, Seg};
use super::gotemplate::{self, TemplateError};
use super::{dns_part, policy_and_binding, MutationOut, Options, TranslateError, Translation};
use serde_json::{json, Value as Json};
use std::path::Path;

/// The custom resource a `mutation:` block is declared on (a CRDEntry's apiTypes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Resource (plural).
    pub resource: String,
}

impl Target {
    /// Parses `GROUP/VERSION/KIND/RESOURCE`.
    pub fn parse(s: &str) -> Result<Target, TranslateError> {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [g, v, k, r] if !v.is_empty() && !k.is_empty() && !r.is_empty() => Ok(Target {
                group: g.to_string(),
                version: v.to_string(),
                kind: k.to_string(),
                resource: r.to_string(),
            }),
            _ => Err(TranslateError::Invalid(format!(
                "--target {s:?}: expected GROUP/VERSION/KIND/RESOURCE"
            ))),
        }
    }

    /// Reads `{group, version, kind, resource}` (or apiTypes' `plural`).
    pub fn from_json(v: &Json) -> Result<Target, TranslateError> {
        let get = |k: &str| v.get(k).and_then(Json::as_str).map(str::to_string);
        let t = Target {
            group: get("group").unwrap_or_default(),
            version: get("version").unwrap_or_default(),
            kind: get("kind").unwrap_or_default(),
            resource: get("resource")
                .or_else(|| get("plural"))
                .unwrap_or_default(),
        };
        if t.version.is_empty() || t.kind.is_empty() || t.resource.is_empty() {
            return Err(TranslateError::Invalid(format!(
                "katalog target needs group, version, kind and resource, got {v}"
            )));
        }
        Ok(t)
    }
}

fn invalid(m: impl Into<String>) -> TranslateError {
    TranslateError::Invalid(m.into())
}

/// Translates a Katalog file: a Katalog (every `spec.crds.*` entry with a
/// `mutation:` block, targets from `apiTypes`; `target` selects the entry of
/// that group and kind) or a bare `mutation:` block (then `target` is
/// required). `include:` resolves against the file's folder.
pub fn translate_file(
    path: &Path,
    target: Option<&Target>,
    opts: &Options,
) -> Result<Translation, TranslateError> {
    opts.validate()?;
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    let docs = crate::api::load::parse_documents(&text)
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = Translation::default();
    let mut found = false;
    for doc in docs.iter().filter(|d| !d.is_null()) {
        let t = translate_document(doc, target, base, opts).map_err(|e| match e {
            TranslateError::Invalid(m) if m.starts_with(BARE_NEEDS_TARGET) => {
                invalid(format!("{}: {m}", path.display()))
            }
            other => other,
        })?;
        found |= t.1;
        out.extend(t.0);
    }
    let mut names = std::collections::BTreeSet::new();
    for p in &out.policies {
        let name = p
            .pointer("/metadata/name")
            .and_then(Json::as_str)
            .unwrap_or("");
        if !names.insert(name.to_string()) {
            return Err(invalid(format!(
                "{}: two mutation blocks translate to policy {name:?} (same kind in two groups?); translate them one at a time with --target",
                path.display()
            )));
        }
    }
    if !found {
        return Err(invalid(format!(
            "{}: no mutation block{}",
            path.display(),
            target
                .map(|t| format!(" for {}/{}", t.group, t.kind))
                .unwrap_or_default()
        )));
    }
    Ok(out)
}

const BARE_NEEDS_TARGET: &str = "a bare mutation block needs --target";

/// Translates one document: a Katalog (each `spec.crds.*` entry with a
/// `mutation:` block whose admission switches are on, targets from
/// `apiTypes`; `target` selects the entry of that group and kind) or a bare
/// `mutation:` block (then `target` is required). Also tells whether the
/// document held a mutation block for `target` (translated or switched off).
pub fn translate_document(
    doc: &Json,
    target: Option<&Target>,
    base: &Path,
    opts: &Options,
) -> Result<(Translation, bool), TranslateError> {
    let mut out = Translation::default();
    if let Some((motif, block)) = motif_block(doc) {
        let t = target.ok_or_else(|| {
            invalid(format!(
                "motif {motif:?}: its admission mutation block {MOTIF_NEEDS_TARGET}"
            ))
        })?;
        let name = motif_policy_name(t, &motif);
        return Ok((translate_named_block(block, t, &name, base, opts)?, true));
    }
    let is_katalog = doc.get("kind").and_then(Json::as_str) == Some("Katalog")
        || doc.pointer("/spec/motifs").is_some();
    let empty = serde_json::Map::new();
    let crds = doc.pointer("/spec/crds").and_then(Json::as_object);
    let Some(crds) = crds.or(is_katalog.then_some(&empty)) else {
        let t = target
            .ok_or_else(|| invalid(format!("{BARE_NEEDS_TARGET} GROUP/VERSION/KIND/RESOURCE")))?;
        return Ok((translate_block(doc, t, base, opts)?, true));
    };
    let admission = switch(doc, "/spec/security/webhooks/admission/enabled")?;
    let mut found = false;
    for (key, entry) in crds {
        let Some(block) = entry.get("mutation") else {
            continue;
        };
        let api = entry.get("apiTypes").unwrap_or(&Json::Null);
        let mut t = Target::from_json(api)
            .map_err(|e| invalid(format!("spec.crds.{key}.apiTypes: {e}")))?;
        if let Some(sel) = target {
            if sel.group != t.group || sel.kind != t.kind {
                continue;
            }
            t = sel.clone();
        }
        found = true;
        let mutation = switch(entry, "/webhooks/mutation")
            .map_err(|e| invalid(format!("spec.crds.{key}.{e}")))?;
        let switches = [
            (
                "spec.security.webhooks.admission.enabled".to_string(),
                admission,
            ),
            (format!("spec.crds.{key}.webhooks.mutation"), mutation),
        ];
        if let Some((name, _)) = switches.iter().find(|(_, on)| *on == Some(false)) {
            out.warnings.push(format!(
                "katalog {}: not translated: {name} is false, so Katalog does not mutate it at admission (only at reconcile)",
                t.kind
            ));
            continue;
        }
        for (name, _) in switches.iter().filter(|(_, on)| on.is_none()) {
            out.warnings.push(format!(
                "katalog {}: {name} is not set; translated as if true (Katalog mutates at admission only when it is true)",
                t.kind
            ));
        }
        out.extend(translate_block(block, &t, base, opts)?);
    }
    found |= translate_katalog_motifs(doc, admission, target, base, opts, &mut out)?;
    Ok((out, found))
}

const MOTIF_NEEDS_TARGET: &str =
    "applies to the custom resources that use the motif: name one with --target GROUP/VERSION/KIND/RESOURCE";

/// A Motif document's, or a bare `admission:` block's, mutation block, with
/// the motif's name: `kind: Motif` with `spec.admission.mutation` (or
/// `admission.mutation`), or `{admission: {mutation: ...}}`.
fn motif_block(doc: &Json) -> Option<(String, &Json)> {
    let name = doc
        .pointer("/metadata/name")
        .and_then(Json::as_str)
        .unwrap_or("motif")
        .to_string();
    if doc.get("kind").and_then(Json::as_str) == Some("Motif") {
        let block = doc
            .pointer("/spec/admission/mutation")
            .or_else(|| doc.pointer("/admission/mutation"))?;
        return Some((name, block));
    }
    let admission = doc.get("admission")?;
    (doc.get("rules").is_none() && doc.get("mutation").is_none())
        .then(|| admission.get("mutation"))
        .flatten()
        .map(|block| (name, block))
}

/// `katalog-<kind>-motif-<motif>`: apart from the CRD entry's own policy.
fn motif_policy_name(target: &Target, motif: &str) -> String {
    format!(
        "katalog-{}-motif-{}",
        dns_part(&target.kind),
        dns_part(motif)
    )
}

/// The mutation blocks of a Katalog's `spec.motifs` (a map by name, or a
/// list of motifs with `name`): translated for `target`, which a motif
/// cannot name itself; without it each is a warning. Whether any was found.
fn translate_katalog_motifs(
    doc: &Json,
    admission: Option<bool>,
    target: Option<&Target>,
    base: &Path,
    opts: &Options,
    out: &mut Translation,
) -> Result<bool, TranslateError> {
    let motifs: Vec<(String, &Json)> = match doc.pointer("/spec/motifs") {
        Some(Json::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Some(Json::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let name = m.get("name").and_then(Json::as_str);
                (
                    name.map_or_else(|| format!("motifs[{i}]"), str::to_string),
                    m,
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut found = false;
    for (name, motif) in motifs {
        let Some(block) = motif.pointer("/admission/mutation") else {
            continue;
        };
        found = true;
        let Some(t) = target else {
            out.warnings.push(format!(
                "katalog motif {name:?}: not translated: its admission mutation block {MOTIF_NEEDS_TARGET}"
            ));
            continue;
        };
        if admission == Some(false) {
            out.warnings.push(format!(
                "katalog motif {name:?}: not translated: spec.security.webhooks.admission.enabled is false"
            ));
            continue;
        }
        let policy = motif_policy_name(t, &name);
        out.extend(translate_named_block(block, t, &policy, base, opts)?);
    }
    Ok(found)
}

/// An admission switch of a Katalog (`None`: not set).
fn switch(doc: &Json, pointer: &str) -> Result<Option<bool>, TranslateError> {
    match doc.pointer(pointer) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(invalid(format!(
            "{}: expected true or false, found {other}",
            pointer.trim_start_matches('/').replace('/', ".")
        ))),
    }
}

/// Translates one `mutation:` block (given with or without the `mutation:` key).
pub fn translate_block(
    block: &Json,
    target: &Target,
    base_dir: &Path,
    opts: &Options,
) -> Result<Translation, TranslateError> {
    let name = format!("katalog-{}", dns_part(&target.kind));
    translate_named_block(block, target, &name, base_dir, opts)
}

/// [`translate_block`] into a policy (and binding) called `name`.
fn translate_named_block(
    block: &Json,
    target: &Target,
    name: &str,
    base_dir: &Path,
    opts: &Options,
) -> Result<Translation, TranslateError> {
    let block = match block.get("mutation") {
        Some(m) if block.get("rules").is_none() => m,
        _ => block,
    };
    let map = block
        .as_object()
        .ok_or_else(|| invalid("the mutation block must be a map"))?;
    let mut out = Translation::default();
    for k in map.keys() {
        match k.as_str() {
            "rules" | "include" => {}
            "mutateFirst" => out.warnings.push(format!(
                "katalog {}: mutateFirst concerns reconcile time only; not part of the admission policy",
                target.kind
            )),
            "external" => out.warnings.push(format!(
                "katalog {}: external calls are not made by the admission policy (rules that read .external.* cannot be translated)",
                target.kind
            )),
            "fires" => {}
            other => return Err(invalid(format!("katalog {}: unknown mutation key {other:?}", target.kind))),
        }
    }
    let mut rules: Vec<Json> = Vec::new();
    if let Some(inc) = block.get("include") {
        let files: Vec<&str> = match inc {
            Json::String(s) => vec![s.as_str()],
            Json::Array(a) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| invalid("include: expected a path"))
                })
                .collect::<Result<_, _>>()?,
            Json::Null => vec![],
            _ => return Err(invalid("include: expected a path")),
        };
        for f in files {
            let p = base_dir.join(f);
            let text = std::fs::read_to_string(&p)
                .map_err(|e| invalid(format!("include {f:?} ({}): {e}", p.display())))?;
            let docs = crate::api::load::parse_documents(&text)
                .map_err(|e| invalid(format!("include {f:?}: {e}")))?;
            for d in docs.iter().filter(|d| !d.is_null()) {
                let r = d
                    .get("rules")
                    .and_then(Json::as_array)
                    .ok_or_else(|| invalid(format!("include {f:?}: expected a rules: list")))?;
                rules.extend(r.iter().cloned());
            }
        }
    }
    match block.get("rules") {
        Some(Json::Array(r)) => rules.extend(r.iter().cloned()),
        None | Some(Json::Null) => {}
        Some(_) => return Err(invalid("rules: expected a list")),
    }
    let mut mutations = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let field = rule.get("field").and_then(Json::as_str).unwrap_or("");
        let label = format!("katalog {} rules[{i}] (field {field})", target.kind);
        match translate_rule(rule) {
            Ok(m) => mutations.push(MutationOut::Patch(m)),
            Err(Problem::Invalid(m)) => return Err(invalid(format!("{label}: {m}"))),
            Err(Problem::Untranslatable(reason)) if opts.skip_untranslatable => out
                .warnings
                .push(format!("skipped {label}: cannot be translated: {reason}")),
            Err(Problem::Untranslatable(reason)) => {
                return Err(TranslateError::Untranslatable {
                    rule: label,
                    reason,
                })
            }
        }
    }
    if mutations.is_empty() {
        out.warnings.push(format!(
            "katalog {}: no rule to translate; no policy emitted",
            target.kind
        ));
        return Ok(out);
    }
    let constraints = json!({
        "resourceRules": [{
            "apiGroups": [target.group],
            "apiVersions": [target.version],
            "operations": ["CREATE", "UPDATE"],
            "resources": [target.resource],
        }],
    });
    let (p, b) = policy_and_binding(name, constraints, &mutations, opts);
    out.policies.push(p);
    out.bindings.push(b);
    Ok(out)
}

/// Why a rule was not translated.
#[derive(Debug)]
enum Problem {
    /// Not a valid rule.
    Invalid(String),
    /// Valid, but not expressible in CEL at admission.
    Untranslatable(String),
}

fn bad<T>(m: impl Into<String>) -> Result<T, Problem> {
    Err(Problem::Invalid(m.into()))
}

fn cannot<T>(m: impl Into<String>) -> Result<T, Problem> {
    Err(Problem::Untranslatable(m.into()))
}

const RULE_KEYS: [&str; 10] = [
    "field",
    "default",
    "override",
    "valueType",
    "when",
    "or",
    "anyOf",
    "fires",
    "name",
    "description",
];

/// One rule to the CEL of its JSONPatch mutation.
fn translate_rule(rule: &Json) -> Result<String, Problem> {
    let Some(map) = rule.as_object() else {
        return bad("a rule must be a map");
    };
    for k in map.keys() {
        if !RULE_KEYS.contains(&k.as_str()) {
            return if UNTRANSLATABLE_KEYS.contains(&k.as_str()) {
                cannot(format!("{k:?} needs state CEL at admission does not have"))
            } else {
                bad(format!("unknown rule key {k:?}"))
            };
        }
    }
    let field = match rule.get("field") {
        Some(Json::String(f)) if !f.trim().is_empty() => f.trim(),
        _ => return bad("field is required"),
    };
    let segs = parse_field(field)?;
    let (value, is_default) = match (rule.get("default"), rule.get("override")) {
        (Some(_), Some(_)) => return bad("declare either default or override, not both"),
        (Some(d), None) => (d, true),
        (None, Some(o)) => (o, false),
        (None, None) => return bad("declare default or override"),
    };
    let value_type = match rule.get("valueType") {
        None | Some(Json::Null) => None,
        Some(Json::String(t)) => Some(t.as_str()),
        Some(other) => return bad(format!("valueType {other} is not a type name")),
    };
    let value = value_expr(value, value_type)?;
    let mut guards = Vec::new();
    if let Some(w) = rule.get("when") {
        guards.extend(condition_list(w, "when")?);
    }
    let mut any = Vec::new();
    for k in ["or", "anyOf"] {
        if let Some(o) = rule.get(k) {
            any.extend(condition_list(o, k)?);
        }
    }
    if !any.is_empty() {
        guards.push(if any.len() == 1 {
            any.remove(0)
        } else {
            format!("({})", any.join(" || "))
        });
    }
    if is_default {
        // dyn(): upstream's checker types `m[?k].orValue(null)` as null,
        // which refuses `size(v)`; as dyn every test type-checks.
        guards.push(format!(
            "[dyn({})].exists(v, {})",
            raw(&segs),
            "v == null || (type(v) == string && v == \"\") || (type(v) == list && size(v) == 0) || (type(v) == map && size(v) == 0)"
        ));
    }
    let ops = cel::set_path(&segs, &value);
    Ok(if guards.is_empty() {
        ops
    } else {
        format!("{} ?\n({ops}) :\n[]", guards.join(" &&\n"))
    })
}

/// Keys (in rules or conditions) whose meaning depends on the clock,
/// other objects or outside services.
const UNTRANSLATABLE_KEYS: [&str; 11] = [
    "external",
    "unique",
    "time",
    "timeRange",
    "dayOfWeek",
    "daysOfWeek",
    "cron",
    "schedule",
    "before",
    "after",
    "date",
];

/// The field's current value, or null: `object.?a.?b.orValue(null)`.
fn raw(segs: &[Seg]) -> String {
    format!("{}.orValue(null)", cel::opt_chain("object", segs))
}

// ---- field paths and templates ----------------------------------------

/// Parses `spec.a.b`, with `["k.e.y"]` for keys holding dots and `{{ }}`
/// templates inside segments.
fn parse_field(field: &str) -> Result<Vec<Seg>, Problem> {
    let mut raw_segs: Vec<String> = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = field.chars().collect();
    let mut i = 0;
    let mut quoted_seg = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '{' && chars.get(i + 1) == Some(&'{') {
            let rest: String = chars[i..].iter().collect();
            let Some(end) = rest.find("}}") else {
                return bad(format!("unclosed {{{{ in field {field:?}"));
            };
            cur.push_str(&rest[..end + 2]);
            i += rest[..end + 2].chars().count();
            continue;
        }
        if c == '[' && matches!(chars.get(i + 1), Some('"') | Some('\'')) {
            let q = chars[i + 1];
            let mut j = i + 2;
            let mut key = String::new();
            while j < chars.len() && chars[j] != q {
                key.push(chars[j]);
                j += 1;
            }
            if chars.get(j + 1) != Some(&']') {
                return bad(format!("unclosed [{q} in field {field:?}"));
            }
            if !cur.is_empty() {
                raw_segs.push(std::mem::take(&mut cur));
            }
            raw_segs.push(key);
            quoted_seg = true;
            i = j + 2;
            if chars.get(i) == Some(&'.') {
                i += 1;
            }
            continue;
        }
        if c == '.' {
            if cur.is_empty() && !quoted_seg {
                return bad(format!("empty segment in field {field:?}"));
            }
            if !cur.is_empty() {
                raw_segs.push(std::mem::take(&mut cur));
            }
            quoted_seg = false;
        } else {
            cur.push(c);
            quoted_seg = false;
        }
        i += 1;
    }
    if !cur.is_empty() {
        raw_segs.push(cur);
    }
    if raw_segs.is_empty() {
        return bad("field is empty");
    }
    raw_segs
        .into_iter()
        .map(|s| {
            if s.contains("{{") {
                Ok(Seg::Dynamic(template(&s)?))
            } else {
                Ok(Seg::Static(s))
            }
        })
        .collect()
}

/// ObjectMeta fields a template names at the top level (`{{ .Name }}`).
fn meta_field(name: &str) -> Option<&'static str> {
    Some(match name {
        "Name" => "name",
        "Namespace" => "namespace",
        "Labels" => "labels",
        "Annotations" => "annotations",
        "GenerateName" => "generateName",
        "UID" => "uid",
        "Generation" => "generation",
        "ResourceVersion" => "resourceVersion",
        _ => return None,
    })
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Go template field chain to JSON field names: `.Spec.Registry` and
/// `.spec.registry` are `spec.registry`; `.Name`/`.Namespace` (and the other
/// ObjectMeta fields) are under `metadata`; keys under labels and
/// annotations are kept as written.
fn field_chain(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, n) in names.iter().enumerate() {
        if i == 0 {
            if let Some(m) = meta_field(n.as_str()) {
                out.push("metadata".into());
                out.push(m.into());
                continue;
            }
        }
        let under_map = out.len() >= 2
            && out[out.len() - 2] == "metadata"
            && matches!(out[out.len() - 1].as_str(), "labels" | "annotations");
        out.push(if under_map {
            n.to_string()
        } else {
            lower_first(n)
        });
    }
    out
}

/// The CEL string expression rendering a Go template (`gotemplate`), its
/// root field chains named as [`field_chain`] names them.
fn template(s: &str) -> Result<String, Problem> {
    refuse_external(s)?;
    gotemplate::translate(s, &field_chain).map_err(|e| match e {
        TemplateError::Invalid(m) => Problem::Invalid(m),
        TemplateError::Untranslatable(m) => Problem::Untranslatable(m),
    })
}

/// `{{ .external.x }}`: the result of an external call, which a MAP
/// cannot make.
fn refuse_external(s: &str) -> Result<(), Problem> {
    for action in s.split("{{").skip(1).filter_map(|a| a.split("}}").next()) {
        let action = action.trim_matches(|c: char| c == '-' || c.is_whitespace());
        let reads_external = action
            .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == '|')
            .any(|w| w == ".external" || w.starts_with(".external."));
        if reads_external {
            return cannot(format!(
                "template {{{{ {action} }}}} reads the result of an external call"
            ));
        }
    }
    Ok(())
}

// ---- values ---------------------------------------------------------------

/// The Go `fmt` form of a scalar (`3`, `2.5`, `true`, the string itself).
fn scalar_string(v: &Json) -> Option<String> {
    Some(match v {
        Json::String(s) => s.clone(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => {
            if n.is_f64() {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 1e21 {
                    format!("{}", f as i64)
                } else {
                    format!("{f}")
                }
            } else {
                n.to_string()
            }
        }
        _ => return None,
    })
}

fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The CEL of a rule's value with its valueType.
fn value_expr(v: &Json, value_type: Option<&str>) -> Result<String, Problem> {
    let templated = matches!(v, Json::String(s) if s.contains("{{"));
    let kind = match value_type {
        None => None,
        Some("string") => Some("string"),
        Some("int" | "integer") => Some("int"),
        Some("float" | "number") => Some("float"),
        Some("bool" | "boolean") => Some("bool"),
        Some(other) => return bad(format!("unknown valueType {other:?}")),
    };
    if templated {
        let s = v.as_str().unwrap_or_default();
        let r = template(s)?;
        return Ok(match kind {
            None | Some("string") => r,
            Some("int") => format!("int({r})"),
            Some("float") => format!("double({r})"),
            _ => format!("bool({r})"),
        });
    }
    let lit = match (kind, v) {
        (None, _) => v.clone(),
        (Some("string"), _) => Json::String(
            scalar_string(v)
                .ok_or_else(|| Problem::Invalid("valueType string needs a scalar value".into()))?,
        ),
        (Some("int"), Json::Number(n)) if n.is_i64() || n.is_u64() => v.clone(),
        (Some("int"), Json::Number(n)) => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if f.fract() == 0.0 && f.abs() < 9.2e18 {
                json!(f as i64)
            } else {
                return bad(format!("{v} is not an integer"));
            }
        }
        (Some("int"), Json::String(s)) => match s.trim().parse::<i64>() {
            Ok(i) => json!(i),
            Err(_) => return bad(format!("{s:?} is not an integer")),
        },
        (Some("float"), Json::Number(n)) => json!(n.as_f64().unwrap_or(0.0)),
        (Some("float"), Json::String(s)) => match s.trim().parse::<f64>() {
            Ok(f) if f.is_finite() => json!(f),
            _ => return bad(format!("{s:?} is not a number")),
        },
        (Some("bool"), Json::Bool(_)) => v.clone(),
        (Some("bool"), Json::String(s)) => match parse_bool(s.trim()) {
            Some(b) => json!(b),
            None => return bad(format!("{s:?} is not a boolean")),
        },
        (Some(t), _) => return bad(format!("{v} is not a valid {t}")),
    };
    Ok(match (kind, &lit) {
        (Some("float"), Json::Number(n)) => cel::double(n.as_f64().unwrap_or(0.0)),
        _ => cel::literal(&lit),
    })
}

// ---- conditions -----------------------------------------------------------

/// The field value as a string for comparisons: scalars by `string()`,
/// absent, null, maps and lists as "".
fn str_of(var: &str) -> String {
    format!(
        "(type({var}) == string ? {var} : (type({var}) == int || type({var}) == uint || type({var}) == double || type({var}) == bool) ? string({var}) : \"\")"
    )
}

/// The field value as a list of zero or one double: numbers, numeric
/// strings, and absent/null as 0.
fn num_of(var: &str) -> String {
    format!(
        "((type({var}) == int || type({var}) == uint || type({var}) == double) ? [double({var})] : (type({var}) == string && {var}.matches({})) ? [double({var})] : {var} == null ? [0.0] : [])",
        cel::quote(r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")
    )
}

fn condition_list(v: &Json, key: &str) -> Result<Vec<String>, Problem> {
    match v {
        Json::Array(a) => a.iter().map(condition).collect(),
        Json::Object(_) => Ok(vec![condition(v)?]),
        Json::Null => Ok(vec![]),
        _ => bad(format!("{key}: expected a list of conditions")),
    }
}

const OPERATORS: [&str; 31] = [
    "equals",
    "notEquals",
    "contains",
    "notContains",
    "prefix",
    "suffix",
    "regex",
    "exists",
    "notExists",
    "gt",
    "greaterThan",
    "lt",
    "lessThan",
    "gte",
    "min",
    "greaterThanOrEqual",
    "lte",
    "max",
    "lessThanOrEqual",
    "between",
    "notBetween",
    "in",
    "notIn",
    "typeOf",
    "typeMap",
    "typeList",
    "typeString",
    "typeNumber",
    "typeBool",
    "typeNull",
    "operator",
];

/// One condition to a CEL boolean.
fn condition(c: &Json) -> Result<String, Problem> {
    let Some(map) = c.as_object() else {
        return bad("a condition must be a map");
    };
    // Nested groups.
    if !map.contains_key("field") {
        for (k, all) in [
            ("when", true),
            ("allOf", true),
            ("or", false),
            ("anyOf", false),
        ] {
            if let Some(list) = map.get(k) {
                let parts = condition_list(list, k)?;
                let joined = if parts.is_empty() {
                    if all {
                        "true".into()
                    } else {
                        "false".into()
                    }
                } else {
                    format!("({})", parts.join(if all { " && " } else { " || " }))
                };
                return Ok(if negate(map)? {
                    format!("!{joined}")
                } else {
                    joined
                });
            }
        }
    }
    for k in map.keys() {
        if UNTRANSLATABLE_KEYS.contains(&k.as_str()) {
            return cannot(format!(
                "condition {k:?} depends on the clock, other objects or outside calls"
            ));
        }
        if !OPERATORS.contains(&k.as_str())
            && !matches!(k.as_str(), "field" | "negate" | "value" | "message")
        {
            return bad(format!("unknown condition operator {k:?}"));
        }
    }
    let field = match map.get("field") {
        Some(Json::String(f)) => f.trim(),
        _ => return bad("a condition needs a field"),
    };
    if field.starts_with("external.") || field.starts_with(".external.") {
        return cannot(format!(
            "condition on {field:?} reads the result of an external call"
        ));
    }
    let segs = parse_field(field.trim_start_matches('.'))?;
    let (op, operand) = if let Some(o) = map.get("operator") {
        let o = o.as_str().unwrap_or_default();
        if UNTRANSLATABLE_KEYS.contains(&o) {
            return cannot(format!(
                "operator {o:?} depends on the clock, other objects or outside calls"
            ));
        }
        (
            o.to_string(),
            map.get("value").cloned().unwrap_or(Json::Null),
        )
    } else {
        let ops: Vec<&String> = map
            .keys()
            .filter(|k| OPERATORS.contains(&k.as_str()))
            .collect();
        if ops.len() != 1 {
            return bad(format!(
                "a condition needs exactly one operator, found {}",
                ops.len()
            ));
        }
        (ops[0].clone(), map[ops[0].as_str()].clone())
    };
    let pred = predicate(&op, &operand)?;
    let expr = format!("[{}].exists(v, {pred})", raw(&segs));
    Ok(if negate(map)? {
        format!("!{expr}")
    } else {
        expr
    })
}

fn negate(map: &serde_json::Map<String, Json>) -> Result<bool, Problem> {
    match map.get("negate") {
        None | Some(Json::Null) => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(other) => bad(format!("negate: expected a boolean, got {other}")),
    }
}

/// A string operand: a template renders at admission, scalars by their Go form.
fn string_operand(op: &str, v: &Json) -> Result<String, Problem> {
    match v {
        Json::String(s) if s.contains("{{") => template(s),
        _ => match scalar_string(v) {
            Some(s) => Ok(cel::quote(&s)),
            None => bad(format!("{op}: expected a scalar operand, got {v}")),
        },
    }
}

/// A numeric operand: a number, a numeric string or a template.
fn number_operand(op: &str, v: &Json) -> Result<String, Problem> {
    match v {
        Json::Number(n) => Ok(cel::double(n.as_f64().unwrap_or(0.0))),
        Json::String(s) if s.contains("{{") => Ok(format!("double({})", template(s)?)),
        Json::String(s) => match s.trim().parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(cel::double(f)),
            _ => bad(format!("{op}: {s:?} is not a number")),
        },
        _ => bad(format!("{op}: expected a number, got {v}")),
    }
}

fn list_operand(op: &str, v: &Json) -> Result<Vec<String>, Problem> {
    match v {
        Json::String(s) => Ok(s.split(',').map(|p| p.trim().to_string()).collect()),
        Json::Array(a) => a
            .iter()
            .map(|e| {
                scalar_string(e)
                    .ok_or_else(|| Problem::Invalid(format!("{op}: list items must be scalars")))
            })
            .collect(),
        _ => scalar_string(v)
            .map(|s| vec![s])
            .ok_or_else(|| Problem::Invalid(format!("{op}: expected a comma list"))),
    }
}

fn flag_operand(op: &str, v: &Json) -> Result<bool, Problem> {
    match v {
        Json::Null => Ok(true),
        Json::Bool(b) => Ok(*b),
        Json::String(s) => {
            parse_bool(s).ok_or_else(|| Problem::Invalid(format!("{op}: expected true or false")))
        }
        _ => bad(format!("{op}: expected true or false")),
    }
}

fn type_test(name: &str) -> Result<&'static str, Problem> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "string" => "type(v) == string",
        "number" | "numeric" => "(type(v) == int || type(v) == uint || type(v) == double)",
        "int" | "integer" => "(type(v) == int || type(v) == uint)",
        "float" | "double" => "type(v) == double",
        "bool" | "boolean" => "type(v) == bool",
        "map" | "object" => "type(v) == map",
        "list" | "array" | "slice" => "type(v) == list",
        "null" | "nil" => "v == null",
        other => return bad(format!("typeOf: unknown type {other:?}")),
    })
}

fn with_flag(test: &str, flag: bool) -> String {
    if flag {
        test.to_string()
    } else {
        format!("!({test})")
    }
}

/// The predicate over `v` (the field's raw value) of one operator.
fn predicate(op: &str, x: &Json) -> Result<String, Problem> {
    let s = str_of("v");
    let n = num_of("v");
    let cmp = |sym: &str| -> Result<String, Problem> {
        Ok(format!("{n}.exists(n, n {sym} {})", number_operand(op, x)?))
    };
    let range = || -> Result<(String, String), Problem> {
        let parts: Vec<Json> = match x {
            Json::String(t) => t
                .split(',')
                .map(|p| Json::String(p.trim().into()))
                .collect(),
            Json::Array(a) => a.clone(),
            _ => vec![],
        };
        if parts.len() != 2 {
            return bad(format!("{op}: expected \"min,max\", got {x}"));
        }
        Ok((
            number_operand(op, &parts[0])?,
            number_operand(op, &parts[1])?,
        ))
    };
    let contains = |needle: String| {
        format!(
            "(type(v) == list ? v.exists(e, {} == {needle}) : type(v) == map ? {needle} in v : {s}.contains({needle}))",
            str_of("e")
        )
    };
    Ok(match op {
        "equals" => format!("{s} == {}", string_operand(op, x)?),
        "notEquals" => format!("{s} != {}", string_operand(op, x)?),
        "contains" => contains(string_operand(op, x)?),
        "notContains" => format!("!{}", contains(string_operand(op, x)?)),
        "prefix" => format!("{s}.startsWith({})", string_operand(op, x)?),
        "suffix" => format!("{s}.endsWith({})", string_operand(op, x)?),
        "regex" => {
            let re = match x {
                Json::String(r) if !r.contains("{{") => r.clone(),
                _ => return bad("regex: expected a regular expression string"),
            };
            if let Err(e) = regex::Regex::new(&re) {
                return bad(format!("regex {re:?}: {e}"));
            }
            format!("{s}.matches({})", cel::quote(&re))
        }
        "exists" => with_flag("v != null", flag_operand(op, x)?),
        "notExists" => with_flag("v == null", flag_operand(op, x)?),
        "gt" | "greaterThan" => cmp(">")?,
        "lt" | "lessThan" => cmp("<")?,
        "gte" | "min" | "greaterThanOrEqual" => cmp(">=")?,
        "lte" | "max" | "lessThanOrEqual" => cmp("<=")?,
        "between" => {
            let (lo, hi) = range()?;
            format!("{n}.exists(n, n >= {lo} && n <= {hi})")
        }
        "notBetween" => {
            let (lo, hi) = range()?;
            format!("{n}.exists(n, n < {lo} || n > {hi})")
        }
        "in" | "notIn" => {
            let items = list_operand(op, x)?;
            let list = format!(
                "[{}]",
                items
                    .iter()
                    .map(|i| cel::quote(i))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            if op == "in" {
                format!("{s} in {list}")
            } else {
                format!("!({s} in {list})")
            }
        }
        "typeOf" => match x {
            Json::String(t) => type_test(t)?.to_string(),
            _ => return bad("typeOf: expected a type name"),
        },
        "typeMap" => with_flag(type_test("map")?, flag_operand(op, x)?),
        "typeList" => with_flag(type_test("list")?, flag_operand(op, x)?),
        "typeString" => with_flag(type_test("string")?, flag_operand(op, x)?),
        "typeNumber" => with_flag(type_test("number")?, flag_operand(op, x)?),
        "typeBool" => with_flag(type_test("bool")?, flag_operand(op, x)?),
        "typeNull" => with_flag(type_test("null")?, flag_operand(op, x)?),
        other if UNTRANSLATABLE_KEYS.contains(&other) => {
            return cannot(format!(
                "operator {other:?} depends on the clock, other objects or outside calls"
            ))
        }
        other => return bad(format!("unknown condition operator {other:?}")),
    })
}
