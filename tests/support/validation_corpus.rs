//! The validation corpus of issue 47 (`tests/validation/corpus.yaml`) and
//! what kube-apiserver v1.36.2 answered to each of its objects
//! (`tests/validation/recorded.json`, by `tools/record_validation.py`).

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// One object of the corpus.
pub struct Entry {
    /// Its name in the corpus (a file's path for the library's objects).
    pub name: String,
    /// Whether the built-in API accepts it.
    pub valid: bool,
    /// Whether the kmutate.dev CRD schema alone refuses it.
    pub schema: bool,
    /// The object, as an `admissionregistration.k8s.io/v1` one.
    pub object: Value,
}

/// The built-in API's answer: status code and message.
pub struct Answer {
    /// 201 or 422.
    pub code: u16,
    /// The 422's message (empty for a 201).
    pub message: String,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every object of the corpus, invalid ones first, then the valid ones and
/// the library's policies and bindings.
pub fn corpus() -> Vec<Entry> {
    let text = std::fs::read_to_string(root().join("tests/validation/corpus.yaml")).unwrap();
    let corpus: Value = serde_saphyr::from_str(&text).unwrap();
    let mut out = Vec::new();
    for verdict in ["invalid", "valid"] {
        for entry in corpus[verdict].as_array().unwrap() {
            let kind = entry["kind"].as_str().unwrap();
            let mut object = corpus["bases"][kind].clone();
            let name = entry["name"].as_str().unwrap().to_string();
            object["metadata"] = entry
                .get("metadata")
                .cloned()
                .unwrap_or_else(|| json!({"name": name}));
            if let Some(spec) = entry.get("spec") {
                json_patch::merge(&mut object["spec"], spec);
            }
            out.push(Entry {
                name,
                valid: verdict == "valid",
                schema: entry.get("schema") == Some(&json!(true)),
                object,
            });
        }
    }
    for folder in corpus["valid_files"].as_array().unwrap() {
        let folder = folder.as_str().unwrap();
        let mut files: Vec<_> = std::fs::read_dir(root().join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for object in kmutate::api::load::parse_documents(&text).unwrap() {
                out.push(Entry {
                    name: format!("{folder}/{}", file.file_name().unwrap().to_string_lossy()),
                    valid: true,
                    schema: false,
                    object,
                });
            }
        }
    }
    out
}

/// kube-apiserver's recorded answer to each entry, by name.
pub fn recorded() -> BTreeMap<String, Answer> {
    let text = std::fs::read_to_string(root().join("tests/validation/recorded.json")).unwrap();
    let map: BTreeMap<String, Value> = serde_json::from_str(&text).unwrap();
    map.into_iter()
        .map(|(name, a)| {
            (
                name,
                Answer {
                    code: a["code"].as_u64().unwrap() as u16,
                    message: a["message"].as_str().unwrap().to_string(),
                },
            )
        })
        .collect()
}
