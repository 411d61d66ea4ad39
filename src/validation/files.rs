//! Validating the policies and bindings of files, for `kmutate check`.

use super::{validate, Validated};
use crate::api::load::{collect_files, parse_documents};
use crate::api::SourceRef;
use serde_json::Value as Json;
use std::path::Path;

/// A document of a file the API would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedDocument {
    /// Where it is.
    pub at: SourceRef,
    /// The object's name.
    pub name: String,
    /// The API server's 422 message, in the object's own group.
    pub message: String,
}

/// Every policy and binding under `paths` (files, or folders searched as
/// the loader searches them) the API would refuse. Unreadable files are
/// left out: loading reports them.
pub fn refused_documents<P: AsRef<Path>>(paths: &[P]) -> Vec<RefusedDocument> {
    let mut out = Vec::new();
    for path in paths {
        for file in collect_files(path.as_ref()).unwrap_or_default() {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            out.extend(refused_in_text(&file.display().to_string(), &text));
        }
    }
    out
}

/// The policies and bindings of the YAML or JSON `text` of `file` the API
/// would refuse (none when it does not parse: loading reports that).
pub fn refused_in_text(file: &str, text: &str) -> Vec<RefusedDocument> {
    let mut out = Vec::new();
    for (i, document) in parse_documents(text).unwrap_or_default().iter().enumerate() {
        let at = SourceRef {
            file: file.to_string(),
            document: i,
        };
        validate_document(document, &at, &mut out);
    }
    out
}

/// Validates `document`, or each item of a `List`, as served in its group.
fn validate_document(document: &Json, at: &SourceRef, out: &mut Vec<RefusedDocument>) {
    if document.get("kind").and_then(Json::as_str) == Some("List") {
        for item in document
            .get("items")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            validate_document(item, at, out);
        }
        return;
    }
    let group = document
        .get("apiVersion")
        .and_then(Json::as_str)
        .and_then(|v| v.split_once('/'))
        .map_or("", |(group, _)| group);
    if !matches!(group, "admissionregistration.k8s.io" | "kmutate.dev") {
        return;
    }
    if let Validated::Refused(refusal) = validate(document, None) {
        out.push(RefusedDocument {
            at: at.clone(),
            name: refusal.name.clone(),
            message: refusal.message(group),
        });
    }
}
