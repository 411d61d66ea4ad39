//! Reading policies, bindings and other objects from YAML or JSON files.
//!
//! A file may hold several YAML documents; a folder is read recursively for
//! `*.yaml`, `*.yml` and `*.json`. A document that cannot be read is
//! reported with its file and index and the others still load.

use super::{binding_from_json, policy_from_json, Binding, Policy, SourceRef};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// How much one file may hold: sized for real bundles (`kubectl get -o
/// yaml` of thousands of policies, generated per-tenant sets), while a
/// YAML bomb or a runaway file is still refused, with its name and the
/// limit, and the other files load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// Documents in one file.
    pub max_documents: usize,
    /// Bytes of one file.
    pub max_bytes: usize,
}

impl FileLimits {
    /// 100,000 documents and 64 MiB a file.
    pub const DEFAULT: FileLimits = FileLimits {
        max_documents: 100_000,
        max_bytes: 64 * 1024 * 1024,
    };

    /// The parser's budget for a text of `len` bytes: documents as set;
    /// nodes and events in proportion to the size (every node takes a few
    /// bytes), never under the parser's defaults; alias and anchor limits
    /// (what a bomb abuses) as the parser sets them.
    fn budget(&self, len: usize) -> serde_saphyr::Budget {
        let mut budget = serde_saphyr::Budget::default();
        budget.max_documents = self.max_documents;
        budget.max_nodes = budget.max_nodes.max(len / 2);
        budget.max_events = budget.max_events.max(len);
        budget
    }
}

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits::DEFAULT
    }
}

static LIMITS: std::sync::RwLock<FileLimits> = std::sync::RwLock::new(FileLimits::DEFAULT);

/// Sets the limits every later read of a file applies (the CLI's
/// `--max-file-documents` and `--max-file-bytes`).
pub fn set_file_limits(limits: FileLimits) {
    *LIMITS.write().unwrap_or_else(|e| e.into_inner()) = limits;
}

/// The limits in force.
pub fn file_limits() -> FileLimits {
    *LIMITS.read().unwrap_or_else(|e| e.into_inner())
}

/// A problem found while loading; loading goes on past it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// A file or folder could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        message: String,
    },
    /// A file is not valid YAML/JSON.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A document is not a valid policy or binding.
    #[error("{at}: {message}")]
    Invalid {
        /// Where the document is.
        at: SourceRef,
        /// What is wrong.
        message: String,
    },
}

/// Everything read from a set of paths.
#[derive(Debug, Default, Clone)]
pub struct Loaded {
    /// The MutatingAdmissionPolicies.
    pub policies: Vec<Policy>,
    /// The MutatingAdmissionPolicyBindings.
    pub bindings: Vec<Binding>,
    /// Every other object (params, Namespaces, CRDs).
    pub resources: Vec<serde_json::Value>,
    /// The problems found.
    pub errors: Vec<LoadError>,
    /// Where each policy name is in `policies` (a bundle of thousands
    /// checks each name in constant time).
    policy_names: HashMap<String, usize>,
    /// Where each binding name is in `bindings`.
    binding_names: HashMap<String, usize>,
}

/// The position of `name` in `items` through `index`, which is rebuilt
/// first when `items` was changed other than by the push functions.
fn position_by_name<T>(
    index: &mut HashMap<String, usize>,
    items: &[T],
    name_of: impl Fn(&T) -> &str,
    name: &str,
) -> Option<usize> {
    let stale = index.len() != items.len()
        || index
            .get(name)
            .is_some_and(|&i| items.get(i).is_none_or(|item| name_of(item) != name));
    if stale {
        *index = items
            .iter()
            .enumerate()
            .rev()
            .map(|(i, item)| (name_of(item).to_string(), i))
            .collect();
    }
    index.get(name).copied()
}

impl Loaded {
    /// Adds policies and bindings loaded elsewhere (e.g. `--bindings` after
    /// `--policies`), with the same checks on names as [`Loaded::add_document`].
    pub fn absorb_definitions(&mut self, policies: Vec<Policy>, bindings: Vec<Binding>) {
        policies.into_iter().for_each(|p| self.push_policy(p));
        bindings.into_iter().for_each(|b| self.push_binding(b));
    }

    /// Adds a policy unless one of its name is already there: the same
    /// document read twice (overlapping paths) is kept once; another
    /// document of the same name is an error, as names are unique in a
    /// cluster, and the first stays.
    fn push_policy(&mut self, p: Policy) {
        let at = position_by_name(&mut self.policy_names, &self.policies, |q| &q.name, &p.name);
        match at.map(|i| &self.policies[i]) {
            None => {
                self.policy_names
                    .insert(p.name.clone(), self.policies.len());
                self.policies.push(p);
            }
            Some(q) if *q == p => {}
            Some(q) => {
                let message = format!(
                    "MutatingAdmissionPolicy {:?} is also defined at {}; names are unique, the first is used",
                    p.name, q.source
                );
                self.errors.push(LoadError::Invalid {
                    at: p.source,
                    message,
                });
            }
        }
    }

    /// [`Loaded::push_policy`] for bindings.
    fn push_binding(&mut self, b: Binding) {
        let at = position_by_name(
            &mut self.binding_names,
            &self.bindings,
            |c| &c.name,
            &b.name,
        );
        match at.map(|i| &self.bindings[i]) {
            None => {
                self.binding_names
                    .insert(b.name.clone(), self.bindings.len());
                self.bindings.push(b);
            }
            Some(c) if *c == b => {}
            Some(c) => {
                let message = format!(
                    "MutatingAdmissionPolicyBinding {:?} is also defined at {}; names are unique, the first is used",
                    b.name, c.source
                );
                self.errors.push(LoadError::Invalid {
                    at: b.source,
                    message,
                });
            }
        }
    }

    /// Adds one decoded document, classifying it by kind.
    pub fn add_document(&mut self, doc: serde_json::Value, source: SourceRef) {
        if doc.is_null() {
            return;
        }
        let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
        let api_version = doc
            .get("apiVersion")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        let is_admission = api_version.starts_with("admissionregistration.k8s.io/");
        match kind {
            "MutatingAdmissionPolicy" if is_admission => {
                match policy_from_json(&doc, source.clone()) {
                    Ok(p) => self.push_policy(p),
                    Err(e) => self.errors.push(LoadError::Invalid {
                        at: source,
                        message: e.to_string(),
                    }),
                }
            }
            "MutatingAdmissionPolicyBinding" if is_admission => {
                match binding_from_json(&doc, source.clone()) {
                    Ok(b) => self.push_binding(b),
                    Err(e) => self.errors.push(LoadError::Invalid {
                        at: source,
                        message: e.to_string(),
                    }),
                }
            }
            "List" => {
                if let Some(items) = doc.get("items").and_then(|i| i.as_array()) {
                    for item in items {
                        self.add_document(item.clone(), source.clone());
                    }
                }
            }
            _ => {
                if !doc.is_object() {
                    self.errors.push(LoadError::Invalid {
                        at: source,
                        message: "document is not an object".into(),
                    });
                } else {
                    self.resources.push(doc);
                }
            }
        }
    }

    /// Reads a file or, recursively, a folder.
    pub fn add_path(&mut self, path: &Path) {
        match collect_files(path) {
            Ok(files) => {
                for file in files {
                    self.add_file(&file);
                }
            }
            Err(e) => self.errors.push(e),
        }
    }

    /// Reads every document of one file.
    pub fn add_file(&mut self, file: &Path) {
        let name = file.display().to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                self.errors.push(LoadError::Io {
                    path: name,
                    message: e.to_string(),
                });
                return;
            }
        };
        self.add_text(&name, &text);
    }

    /// Reads every document of `text`, the content of the file `name`
    /// (`-` for standard input).
    pub fn add_text(&mut self, name: &str, text: &str) {
        let name = name.to_string();
        match parse_documents(text) {
            Ok(docs) => {
                for (i, doc) in docs.into_iter().enumerate() {
                    self.add_document(
                        doc,
                        SourceRef {
                            file: name.clone(),
                            document: i,
                        },
                    );
                }
            }
            Err(message) => self.errors.push(LoadError::Parse {
                path: name,
                message,
            }),
        }
    }
}

/// Policies from `policies` and bindings from `bindings` (each folder may
/// hold either, as `--policies` and `--bindings`): one set, with the
/// problems of both.
pub fn load_definitions<P: AsRef<Path>>(policies: &[P], bindings: &[P]) -> Loaded {
    let mut loaded = load_paths(policies);
    let other = load_paths(bindings);
    loaded.absorb_definitions(other.policies, other.bindings);
    loaded.errors.extend(other.errors);
    loaded
}

/// Loads every path given.
pub fn load_paths<P: AsRef<Path>>(paths: &[P]) -> Loaded {
    let mut loaded = Loaded::default();
    for p in paths {
        loaded.add_path(p.as_ref());
    }
    loaded
}

/// The YAML/JSON files under `path` (itself if it is a file), sorted.
/// Entries whose names start with a dot are left out: a ConfigMap volume
/// holds each file twice, as `NAME` and inside a hidden `..TIMESTAMP`
/// folder (kubelet's atomic writer), and editors leave dotfiles.
pub fn collect_files(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let io = |e: std::io::Error| LoadError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| LoadError::Io {
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let p = entry.path();
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if has_document_extension(&p) {
                out.push(p);
            }
        }
    }
    out.sort_by_cached_key(|p| path_order_key(p));
    Ok(out)
}

/// Whether a file found in a folder is read: `.yaml`, `.yml` or `.json`.
pub fn has_document_extension(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// A key that sorts paths as [`Path`]'s own order does (component by
/// component) for the clean paths a folder listing gives, but compares as
/// plain bytes: with tens of thousands of policy files, component-wise
/// comparisons were most of a folder scan.
pub fn path_order_key(path: &Path) -> Vec<u8> {
    use std::path::Component;
    let mut key = Vec::with_capacity(path.as_os_str().len() + 8);
    for (i, component) in path.components().enumerate() {
        if i > 0 {
            // Below every byte a key holds: "a/b" sorts before "a-b".
            key.push(0);
        }
        // Kinds of component sort as `Component` orders them ("/" before ".").
        key.push(match component {
            Component::Prefix(_) => 1,
            Component::RootDir => 2,
            Component::CurDir => 3,
            Component::ParentDir => 4,
            Component::Normal(_) => 5,
        });
        key.extend_from_slice(component.as_os_str().as_encoded_bytes());
    }
    key
}

/// Deepest nesting of YAML/JSON accepted; deeper input is refused, never a crash.
pub const MAX_DEPTH: usize = 512;

/// Parses YAML (a JSON document is YAML too) into JSON values, one per document.
pub fn parse_documents(text: &str) -> Result<Vec<serde_json::Value>, String> {
    parse_documents_with(text, file_limits())
}

/// [`parse_documents`] under `limits`.
fn parse_documents_with(text: &str, limits: FileLimits) -> Result<Vec<serde_json::Value>, String> {
    if let Some(depth) = nesting_exceeds(text, MAX_DEPTH) {
        return Err(format!(
            "line {depth}: nesting deeper than {MAX_DEPTH} levels is not accepted"
        ));
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // JSON fast path; fall back to YAML for flow-style YAML.
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
            return Ok(vec![v]);
        }
    }
    if text.len() > limits.max_bytes {
        return Err(format!(
            "{} bytes, over the limit of {} bytes a file (--max-file-bytes)",
            text.len(),
            limits.max_bytes
        ));
    }
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(limits.budget(text.len()));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(text, options)
        .map_err(|e| {
            let message = e.to_string();
            if message.contains("Documents") {
                format!(
                    "more than {} documents, the limit a file (--max-file-documents)",
                    limits.max_documents
                )
            } else {
                message
            }
        })?;
    Ok(docs)
}

/// Cheap pre-scan for bracket or indentation nesting beyond `limit`; returns
/// the line where it happens. It guards the recursive decoders' stacks.
fn nesting_exceeds(text: &str, limit: usize) -> Option<usize> {
    let mut depth: usize = 0;
    let mut in_string: Option<char> = None;
    let mut escaped = false;
    let mut line = 1;
    for c in text.chars() {
        if c == '\n' {
            line += 1;
            if in_string == Some('\'') || in_string == Some('"') {
                // multi-line quoted scalars are rare; keep tracking
            }
        }
        if let Some(q) = in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' && q == '"' {
                escaped = true;
            } else if c == q {
                in_string = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => in_string = Some(c),
            '{' | '[' => {
                depth += 1;
                if depth > limit {
                    return Some(line);
                }
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let _ = in_string;
    // Indentation depth: a block structure nested more than `limit` deep
    // needs at least `limit` leading spaces on some line.
    for (i, l) in text.lines().enumerate() {
        let indent = l.len() - l.trim_start_matches([' ', '-']).len();
        if indent > limit * 2 {
            return Some(i + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundles_load_and_files_over_the_limits_are_refused_by_name() {
        let doc = |i: usize| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{a: b, c: d}}\n"
            )
        };
        // Past the parser's default of 1,024 documents and 250,000 nodes.
        let many: Vec<String> = (0..30_000).map(doc).collect();
        let text = many.join("---\n");
        let docs = parse_documents_with(&text, FileLimits::DEFAULT).unwrap();
        assert_eq!(docs.len(), 30_000);
        let few = FileLimits {
            max_documents: 100,
            ..FileLimits::DEFAULT
        };
        let e = parse_documents_with(&text, few).unwrap_err();
        assert_eq!(
            e,
            "more than 100 documents, the limit a file (--max-file-documents)"
        );
        let small = FileLimits {
            max_bytes: 1000,
            ..FileLimits::DEFAULT
        };
        let e = parse_documents_with(&text, small).unwrap_err();
        assert!(
            e.ends_with("over the limit of 1000 bytes a file (--max-file-bytes)"),
            "{e}"
        );
        // The alias limits against YAML bombs stay as the parser sets them.
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (i, prev) in ('b'..='j').zip('a'..) {
            bomb.push_str(&format!("{i}: &{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        assert!(parse_documents_with(&bomb, FileLimits::DEFAULT).is_err());
    }

    #[test]
    fn multi_document_yaml() {
        // `y` would be the YAML 1.1 boolean, as in kubectl (go-yaml v2).
        let docs = parse_documents("a: 1\n---\nb: [x, z]\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["b"][1], "z");
    }

    #[test]
    fn malformed_yaml_is_an_error_with_a_line() {
        let err = parse_documents("a: [1, 2\nb: c\n").unwrap_err();
        assert!(err.contains("line") || err.contains(':'), "{err}");
    }

    #[test]
    fn deep_nesting_is_refused_without_crashing() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let err = parse_documents(&deep).unwrap_err();
        assert!(err.contains("nesting deeper"), "{err}");
        let mut yaml = String::new();
        for i in 0..10_000 {
            yaml.push_str(&" ".repeat(i));
            yaml.push_str("a:\n");
        }
        assert!(parse_documents(&yaml).is_err());
    }

    #[test]
    fn a_name_defined_twice_loads_once() {
        let policy = |mutation: &str| {
            parse_documents(&format!(
                "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\nmetadata: {{name: p}}\nspec:\n  matchConstraints: {{resourceRules: []}}\n  mutations:\n  - patchType: JSONPatch\n    jsonPatch: {{expression: {mutation:?}}}\n"
            ))
            .unwrap()
            .remove(0)
        };
        let at = |file: &str| SourceRef {
            file: file.into(),
            document: 0,
        };
        let mut loaded = Loaded::default();
        loaded.add_document(policy("[]"), at("a.yaml"));
        // The same document again (a folder given as --policies and --bindings).
        let mut again = Loaded::default();
        again.add_document(policy("[]"), at("a.yaml"));
        loaded.absorb_definitions(again.policies, again.bindings);
        assert_eq!(loaded.policies.len(), 1);
        assert!(loaded.errors.is_empty());
        // Another document of the same name: an error naming both places.
        loaded.add_document(policy("[ ]"), at("b.yaml"));
        assert_eq!(loaded.policies.len(), 1);
        assert_eq!(loaded.policies[0].source, at("a.yaml"));
        let msg = loaded.errors[0].to_string();
        assert!(
            msg.starts_with("b.yaml (document 0)") && msg.contains("also defined at a.yaml"),
            "{msg}"
        );
    }

    #[test]
    fn invalid_policy_is_reported_and_others_load() {
        let mut loaded = Loaded::default();
        let docs = parse_documents(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: bad}
spec:
  matchConstraints: {resourceRules: []}
  mutations: []
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: good}
spec:
  matchConstraints: {resourceRules: []}
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: "[]"}
"#,
        )
        .unwrap();
        for (i, d) in docs.into_iter().enumerate() {
            loaded.add_document(
                d,
                SourceRef {
                    file: "f.yaml".into(),
                    document: i,
                },
            );
        }
        assert_eq!(loaded.policies.len(), 1);
        assert_eq!(loaded.policies[0].name, "good");
        assert_eq!(loaded.errors.len(), 1);
        let msg = loaded.errors[0].to_string();
        assert!(
            msg.contains("f.yaml (document 0)")
                && msg.contains("\"bad\"")
                && msg.contains("spec.mutations"),
            "{msg}"
        );
    }

    #[test]
    fn path_order_keys_sort_as_paths_do() {
        let names = [
            "policies/a-b.yaml",
            "policies/a/b.yaml",
            "policies/a.yaml",
            "policies/ab/c.yaml",
            "policies/a/b/c.yaml",
            "policies/A.yaml",
            "policies/a b.yaml",
            "/abs/policies/x.yaml",
            "./policies/z.yaml",
            "policies/\u{e9}.yaml",
            "policies/a/",
            "../policies/y.yaml",
            "policies/./b.yaml",
        ];
        let mut by_path: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        let mut by_key = by_path.clone();
        by_path.sort();
        by_key.sort_by_cached_key(|p| path_order_key(p));
        assert_eq!(by_key, by_path);
    }
}
