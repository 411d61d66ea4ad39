//! Reading manifest streams as `kubectl apply -f` reads them: files,
//! folders (`-R` for their subfolders), `-` for standard input; YAML
//! streams and JSON; `kind: List` unpacked. Each document keeps its text,
//! so that an object no policy changes is written back as it came.

use crate::api::load::{has_document_extension, parse_documents, path_order_key};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

/// Where an input object came from: `deploy.yaml, document 2` (zero-based
/// document index, as `kmutate check` counts), with the item of a `List`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file, or `-` for standard input.
    pub file: String,
    /// The document's index in its file.
    pub document: usize,
    /// The item's index when the document is a `List`.
    pub item: Option<usize>,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, document {}", self.file, self.document)?;
        if let Some(i) = self.item {
            write!(f, ", item {i}")?;
        }
        Ok(())
    }
}

/// One document of the input, as read.
#[derive(Debug, Clone)]
pub struct Document {
    /// Where it is (`item` unset).
    pub origin: Origin,
    /// Its text, without the `---` line before it.
    pub text: String,
    /// What it holds.
    pub content: Content,
}

/// What a document holds.
#[derive(Debug, Clone)]
pub enum Content {
    /// One object.
    Object(Json),
    /// A `List`'s items (each an object), with the list itself.
    List {
        /// The document as parsed.
        list: Json,
        /// Its items.
        items: Vec<Json>,
    },
    /// Something that is not an object: the reason, which names the file
    /// and document.
    Unreadable(String),
}

/// An input that could not be read at all (a missing file, an unreadable
/// folder): a usage error.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct InputError {
    /// The path as given.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

/// The documents of every input, in the order given (a folder's files in
/// name order). `stdin` is read for `-`.
pub fn read_inputs(
    inputs: &[PathBuf],
    recursive: bool,
    stdin: &mut dyn std::io::Read,
) -> Result<Vec<Document>, InputError> {
    let mut documents = Vec::new();
    for input in inputs {
        if input.as_os_str() == "-" {
            let mut text = String::new();
            stdin.read_to_string(&mut text).map_err(|e| InputError {
                path: "-".into(),
                message: format!("reading standard input: {e}"),
            })?;
            documents.extend(split_documents("-", &text));
            continue;
        }
        for file in files_of(input, recursive)? {
            let name = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| InputError {
                path: name.clone(),
                message: e.to_string(),
            })?;
            documents.extend(split_documents(&name, &text));
        }
    }
    Ok(documents)
}

/// `path` itself, or the manifest files of the folder `path` (and of its
/// subfolders with `recursive`), sorted by name.
fn files_of(path: &Path, recursive: bool) -> Result<Vec<PathBuf>, InputError> {
    let error = |e: std::io::Error| InputError {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(error)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(error)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    entries.sort_by_key(|p| path_order_key(p));
    for entry in entries {
        if entry.is_dir() {
            if recursive {
                files.extend(files_of(&entry, true)?);
            }
        } else if has_document_extension(&entry) {
            files.push(entry);
        }
    }
    Ok(files)
}

/// The documents of a YAML stream (or a JSON text), each with its own text:
/// split at the `---` lines that start a document, as YAML splits them.
pub fn split_documents(file: &str, text: &str) -> Vec<Document> {
    let mut chunks: Vec<String> = vec![String::new()];
    for line in text.split_inclusive('\n') {
        if is_document_start(line) {
            chunks.push(String::new());
            // Content after the marker (`--- {a: 1}`) belongs to the document.
            let rest = line[3..].trim_start_matches([' ', '\t']);
            if !rest.trim().is_empty() && !rest.starts_with('#') {
                chunks.last_mut().unwrap().push_str(rest);
            }
        } else if line.trim_end() == "..." {
            chunks.push(String::new());
        } else {
            chunks.last_mut().unwrap().push_str(line);
        }
    }
    // Parsing is most of reading a large stream: the chunks on all cores.
    let parsed = crate::parallel::map_in_order(chunks, 256, |chunk| {
        let parsed = parse_documents(&chunk);
        (chunk, parsed)
    });
    let mut out = Vec::new();
    for (chunk, parsed) in parsed {
        let origin = Origin {
            file: file.to_string(),
            document: out.len(),
            item: None,
        };
        let content = match parsed {
            Ok(parsed) if parsed.iter().all(Json::is_null) => continue,
            Ok(mut parsed) if parsed.len() == 1 => content_of(parsed.remove(0), &origin),
            Ok(parsed) => Content::Unreadable(format!(
                "{origin}: expected one document, found {}",
                parsed.len()
            )),
            Err(e) => Content::Unreadable(format!("{origin}: {e}")),
        };
        out.push(Document {
            origin,
            text: chunk,
            content,
        });
    }
    out
}

/// A `---` line: the marker alone, or followed by a space, a tab or a
/// comment.
fn is_document_start(line: &str) -> bool {
    line.strip_prefix("---")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\n', '\r']))
}

/// What `value` is: an object (with string `apiVersion` and `kind`), a list
/// of them, or neither.
fn content_of(value: Json, origin: &Origin) -> Content {
    if let Err(why) = check_object(&value) {
        return Content::Unreadable(format!("{origin}: {why}"));
    }
    let kind = value["kind"].as_str().unwrap_or_default();
    if !(kind == "List" || kind.ends_with("List") && value.get("items").is_some()) {
        return Content::Object(value);
    }
    let items = value
        .get("items")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        if let Err(why) = check_object(item) {
            let item_origin = Origin {
                item: Some(i),
                ..origin.clone()
            };
            return Content::Unreadable(format!("{item_origin}: {why}"));
        }
    }
    Content::List { list: value, items }
}

/// Why `value` is no Kubernetes object, if it is not.
fn check_object(value: &Json) -> Result<(), String> {
    let Some(map) = value.as_object() else {
        return Err(format!(
            "not a Kubernetes object: expected a mapping, found {}",
            kind_of(value)
        ));
    };
    for field in ["apiVersion", "kind"] {
        if !map.get(field).is_some_and(Json::is_string) {
            return Err(format!(
                "not a Kubernetes object: it has no string field {field:?}"
            ));
        }
    }
    Ok(())
}

fn kind_of(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a sequence",
        Json::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects(docs: &[Document]) -> Vec<Json> {
        docs.iter()
            .map(|d| match &d.content {
                Content::Object(o) => o.clone(),
                Content::List { items, .. } => json!({"items": items}),
                Content::Unreadable(why) => json!({"unreadable": why}),
            })
            .collect()
    }

    #[test]
    fn a_stream_splits_at_document_markers_keeping_each_text() {
        let text = "# leading comment\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---   # empty\n--- {apiVersion: v1, kind: Service, metadata: {name: b}}\n...\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  annotations: {note: \"--- not a marker\"}\n";
        let docs = split_documents("m.yaml", text);
        assert_eq!(docs.len(), 3);
        assert_eq!(
            docs[0].text,
            "# leading comment\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"
        );
        assert_eq!(objects(&docs)[1]["kind"], "Service");
        assert_eq!(
            objects(&docs)[2]["metadata"]["annotations"]["note"],
            "--- not a marker"
        );
        assert_eq!(
            docs.iter().map(|d| d.origin.document).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[test]
    fn lists_are_unpacked_and_non_objects_named() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: a}}\n- {apiVersion: v1, kind: Pod, metadata: {name: b}}\n---\n- just\n- a list\n---\nkind: Pod\n---\nkey: [unclosed\n";
        let docs = split_documents("s.yaml", text);
        let Content::List { items, .. } = &docs[0].content else {
            panic!("{:?}", docs[0].content)
        };
        assert_eq!(items.len(), 2);
        let why: Vec<String> = docs[1..]
            .iter()
            .map(|d| match &d.content {
                Content::Unreadable(w) => w.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            why[0],
            "s.yaml, document 1: not a Kubernetes object: expected a mapping, found a sequence"
        );
        assert_eq!(
            why[1],
            "s.yaml, document 2: not a Kubernetes object: it has no string field \"apiVersion\""
        );
        assert!(why[2].starts_with("s.yaml, document 3: "), "{}", why[2]);
    }

    #[test]
    fn json_is_one_document() {
        let docs = split_documents(
            "o.json",
            "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"a\"}}",
        );
        assert_eq!(docs.len(), 1);
        assert_eq!(objects(&docs)[0]["metadata"]["name"], "a");
    }
}
