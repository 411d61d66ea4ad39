//! Writing what `kmutate apply` found: the whole stream back (`yaml`,
//! `json`), or per object under a header naming it (`patch`, `diff`,
//! `explain`), or JSON lines (`explain-json`).

use super::input::Content;
use super::{DocumentResult, Evaluated, Verdict};
use serde_json::{json, Value as Json};

/// The output formats (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The stream as YAML, with the policies' changes (unchanged documents
    /// as they came).
    Yaml,
    /// The mutated object as JSON (several: a List of them).
    Json,
    /// The RFC 6902 patch from each original to its mutated object.
    Patch,
    /// A readable line diff of each object.
    Diff,
    /// Which policy, binding and mutation changed which fields, in dispatch
    /// order, with skipped invocations, errors and the verdict.
    Explain,
    /// The explanations as JSON lines, each naming its object.
    ExplainJson,
}

/// A result that cannot be written.
#[derive(Debug, thiserror::Error)]
#[error("writing the output: {0}")]
pub struct OutputError(String);

fn yaml(value: &Json) -> Result<String, OutputError> {
    serde_saphyr::to_string(value).map_err(|e| OutputError(e.to_string()))
}

fn pretty(value: &impl serde::Serialize) -> Result<String, OutputError> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| OutputError(e.to_string()))
}

/// The object an output shows for `e`: the policies' result, or the
/// original when denied (the cluster would refuse it itself).
fn shown(e: &Evaluated) -> &Json {
    match &e.verdict {
        Verdict::Admitted { object, .. } => object,
        Verdict::Denied(_) => &e.original,
    }
}

/// `results` written in `format`.
pub fn render(results: &[DocumentResult], format: Format) -> Result<String, OutputError> {
    let objects: Vec<&Evaluated> = results.iter().flat_map(|r| &r.objects).collect();
    let headers = objects.len() > 1;
    match format {
        Format::Yaml => stream(results),
        Format::Json => match objects.as_slice() {
            [one] => pretty(shown(one)),
            many => pretty(&json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": many.iter().map(|e| shown(e)).collect::<Vec<_>>(),
            })),
        },
        Format::ExplainJson => {
            let mut out = String::new();
            for e in objects {
                let mut line = serde_json::to_value(&e.explanation)
                    .map_err(|err| OutputError(err.to_string()))?;
                if let Some(map) = line.as_object_mut() {
                    map.insert("object".into(), identity_json(e));
                }
                out.push_str(&line.to_string());
                out.push('\n');
            }
            Ok(out)
        }
        Format::Patch | Format::Diff | Format::Explain => {
            let mut out = String::new();
            for e in objects {
                if headers {
                    out.push_str(&header(e));
                }
                out.push_str(&per_object(e, format)?);
            }
            Ok(out)
        }
    }
}

/// `# Deployment default/web (deploy.yaml, document 1)`.
pub fn header(e: &Evaluated) -> String {
    format!("# {} ({})\n", describe(&e.original), e.origin)
}

/// `Deployment default/web`.
pub fn describe(object: &Json) -> String {
    let at = |p: &str| object.pointer(p).and_then(Json::as_str).unwrap_or_default();
    match at("/metadata/namespace") {
        "" => format!("{} {}", at("/kind"), at("/metadata/name")),
        ns => format!("{} {ns}/{}", at("/kind"), at("/metadata/name")),
    }
}

fn identity_json(e: &Evaluated) -> Json {
    let at = |p: &str| e.original.pointer(p).cloned().unwrap_or(Json::Null);
    json!({
        "apiVersion": at("/apiVersion"),
        "kind": at("/kind"),
        "namespace": at("/metadata/namespace"),
        "name": at("/metadata/name"),
        "file": e.origin.file,
        "document": e.origin.document,
        "item": e.origin.item,
    })
}

/// One object's patch, diff or explanation; a denial as a comment.
fn per_object(e: &Evaluated, format: Format) -> Result<String, OutputError> {
    if format == Format::Explain {
        return Ok(e
            .explanation
            .as_ref()
            .map(|x| x.to_text())
            .unwrap_or_default());
    }
    let Verdict::Admitted { object, .. } = &e.verdict else {
        let Verdict::Denied(message) = &e.verdict else {
            unreachable!()
        };
        return Ok(format!("# denied: {message}\n"));
    };
    match format {
        Format::Patch => pretty(&json_patch::diff(&e.original, object)),
        _ => Ok(line_diff(&yaml(&e.original)?, &yaml(object)?)),
    }
}

/// The YAML stream: each document as it came unless a policy changed one
/// of its objects, then that document written anew.
fn stream(results: &[DocumentResult]) -> Result<String, OutputError> {
    // Writing YAML anew is the costly part: on all cores.
    let texts = crate::parallel::map_in_order(results.iter().collect(), 256, document_text);
    let mut out = String::new();
    let mut first = true;
    for text in texts {
        let Some(text) = text? else {
            continue;
        };
        if !first {
            out.push_str("---\n");
        }
        first = false;
        out.push_str(text.as_ref());
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// The text a document is written back as (none when it is unreadable).
fn document_text(r: &DocumentResult) -> Result<Option<std::borrow::Cow<'_, str>>, OutputError> {
    Ok(Some(match &r.document.content {
        Content::Unreadable(_) => return Ok(None),
        _ if !r.changed() => r.document.text.as_str().into(),
        Content::Object(_) => yaml(shown(&r.objects[0]))?.into(),
        Content::List { list, .. } => {
            let mut list = list.clone();
            list["items"] = Json::Array(r.objects.iter().map(|e| shown(e).clone()).collect());
            yaml(&list)?.into()
        }
    }))
}

/// A minimal line diff (`-`/`+`/` ` prefixes) of two texts, by their
/// longest common subsequence of lines.
pub fn line_diff(before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        }
    }
    out
}
