//! AdmissionReview in and out: `admission.k8s.io/v1` and `v1beta1` (answered
//! in the version asked), the base64 JSONPatch of the answer and the status
//! of a denial.

use super::MAX_NESTING;
use crate::mutation::diff::Snapshot;
use crate::request::{decode_without_old_object, AdmissionRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// The AdmissionReview versions served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewVersion {
    /// `admission.k8s.io/v1`.
    V1,
    /// `admission.k8s.io/v1beta1`.
    V1Beta1,
}

impl ReviewVersion {
    /// The apiVersion string.
    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "admission.k8s.io/v1",
            ReviewVersion::V1Beta1 => "admission.k8s.io/v1beta1",
        }
    }
}

/// A decoded AdmissionReview.
#[derive(Clone, Debug)]
pub struct Review {
    /// The version to answer in.
    pub version: ReviewVersion,
    /// The request.
    pub request: AdmissionRequest,
}

/// Why a body is not a review (each is answered with HTTP 400).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The JSON nests deeper than [`MAX_NESTING`].
    #[error("request body nests deeper than {MAX_NESTING} levels")]
    TooDeep,
    /// Not JSON, or not the shape of an AdmissionReview.
    #[error("invalid AdmissionReview: {0}")]
    Json(String),
    /// Another kind or version.
    #[error("expected kind AdmissionReview of apiVersion admission.k8s.io/v1 or admission.k8s.io/v1beta1, got kind {kind:?} of apiVersion {api_version:?}")]
    NotAReview {
        /// The body's apiVersion.
        api_version: String,
        /// The body's kind.
        kind: String,
    },
    /// No `request`.
    #[error("AdmissionReview has no request")]
    NoRequest,
}

#[derive(Deserialize)]
struct ReviewIn {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<AdmissionRequest>,
}

/// Decodes a request body.
pub fn decode(body: &[u8]) -> Result<Review, DecodeError> {
    decode_reading_old_object(body, true)
}

/// [`decode`], keeping the request's `oldObject` only when
/// `old_object_read` (an engine whose policies may read it,
/// [`crate::webhook::engine::Engine::reads_old_object`]); otherwise it is
/// checked as strictly, and left out ([`decode_without_old_object`]).
pub fn decode_reading_old_object(
    body: &[u8],
    old_object_read: bool,
) -> Result<Review, DecodeError> {
    if old_object_read {
        decode_review(body)
    } else {
        decode_without_old_object(|| decode_review(body))
    }
}

fn decode_review(body: &[u8]) -> Result<Review, DecodeError> {
    // One UTF-8 check of the whole body is far cheaper than serde_json's
    // check of each string (hundreds in an object); JSON outside strings
    // is ASCII, so nothing valid is refused.
    let text = std::str::from_utf8(body)
        .map_err(|e| DecodeError::Json(format!("request body is not UTF-8: {e}")))?;
    // serde_json refuses nesting past its fixed recursion limit, which is
    // MAX_NESTING: no separate scan needed.
    let review: ReviewIn = serde_json::from_str(text).map_err(|e| {
        let message = e.to_string();
        if message.starts_with("recursion limit exceeded") {
            DecodeError::TooDeep
        } else {
            DecodeError::Json(message)
        }
    })?;
    let version = match (review.api_version.as_str(), review.kind.as_str()) {
        ("admission.k8s.io/v1", "AdmissionReview") => ReviewVersion::V1,
        ("admission.k8s.io/v1beta1", "AdmissionReview") => ReviewVersion::V1Beta1,
        _ => {
            return Err(DecodeError::NotAReview {
                api_version: review.api_version,
                kind: review.kind,
            })
        }
    };
    let request = review.request.ok_or(DecodeError::NoRequest)?;
    Ok(Review { version, request })
}

/// Whether JSON `body` opens more than `limit` arrays or objects at once
/// (strings skipped). Malformed input is left to the decoder. ([`decode`]
/// relies on the decoder's own limit instead.)
pub fn nesting_exceeds(body: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// What the webhook answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Answer {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The RFC 6902 patch (JSON), when the object changed.
    pub patch: Option<Vec<u8>>,
    /// Warnings for the client.
    pub warnings: Vec<String>,
    /// For a denial: the HTTP code and message.
    pub status: Option<(u16, String)>,
}

impl Answer {
    /// Admitted unchanged.
    pub fn allow() -> Answer {
        Answer {
            allowed: true,
            ..Answer::default()
        }
    }

    /// Admitted with `object` for `original`: the patch between them, none
    /// when they are equal.
    pub fn admit(original: &Json, object: &Json, warnings: Vec<String>) -> Answer {
        Answer::admit_from(Some(&Snapshot::of(original)), object, warnings)
    }

    /// [`Answer::admit`] from a snapshot of the original object, which an
    /// admission takes only when it writes to the object: with none, the
    /// object is the original as it came and the two are not compared. An
    /// admission whose mutations found nothing to do (an update of an object
    /// they set up when it was created) costs neither the snapshot nor a
    /// walk of both.
    pub fn admit_from(original: Option<&Snapshot>, object: &Json, warnings: Vec<String>) -> Answer {
        Answer {
            allowed: true,
            patch: original.and_then(|original| original.diff_json(object)),
            warnings,
            status: None,
        }
    }

    /// Denied with upstream's message.
    pub fn deny(code: u16, message: String) -> Answer {
        Answer {
            allowed: false,
            status: Some((code, message)),
            ..Answer::default()
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct StatusOut<'a> {
    metadata: Empty,
    status: &'static str,
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'static str,
    code: u16,
}

#[derive(Serialize)]
struct Empty {}

/// The `reason` of a metav1.Status with HTTP code `code`.
pub fn status_reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// Encodes the AdmissionReview answering request `uid`.
pub fn encode(version: ReviewVersion, uid: &str, answer: &Answer) -> Vec<u8> {
    let review = ReviewOut {
        api_version: version.api_version(),
        kind: "AdmissionReview",
        response: ResponseOut {
            uid,
            allowed: answer.allowed,
            status: answer.status.as_ref().map(|(code, message)| StatusOut {
                metadata: Empty {},
                status: "Failure",
                message,
                reason: status_reason(*code),
                code: *code,
            }),
            warnings: &answer.warnings,
        },
    };
    let mut out = serde_json::to_vec(&review).unwrap_or_default();
    if let Some(patch) = &answer.patch {
        append_patch(&mut out, patch);
    }
    out
}

/// Adds `patchType` and the base64 `patch` to the end of the `response`
/// object that closes `review`, the compact text of a [`ReviewOut`].
///
/// The base64 alphabet needs no JSON escaping, so the encoding is written
/// as it is: a serializer would check each of its bytes (a patch of a few
/// KB) for characters to escape.
fn append_patch(review: &mut Vec<u8>, patch: &[u8]) {
    use base64::Engine;
    // `response`, never empty, is the last field: the text ends by closing
    // it and the review.
    debug_assert!(review.ends_with(b"}}"));
    review.truncate(review.len().saturating_sub(2));
    review.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
    let engine = &base64::engine::general_purpose::STANDARD;
    let start = review.len();
    // Encoded in place; the sized buffer cannot be short, but should it
    // be, the patch is encoded on its own rather than lost.
    let encoded = base64::encoded_len(patch.len(), true).and_then(|len| {
        review.resize(start + len, 0);
        engine.encode_slice(patch, &mut review[start..]).ok()
    });
    match encoded {
        Some(written) => review.truncate(start + written),
        None => {
            review.truncate(start);
            review.extend_from_slice(engine.encode(patch).as_bytes());
        }
    }
    review.extend_from_slice(b"\"}}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    #[test]
    fn decodes_both_versions() {
        for (api, version) in [
            ("admission.k8s.io/v1", ReviewVersion::V1),
            ("admission.k8s.io/v1beta1", ReviewVersion::V1Beta1),
        ] {
            let body = json!({"apiVersion": api, "kind": "AdmissionReview",
                "request": {"uid": "u1", "operation": "CREATE", "object": {"a": 1}}});
            let review = decode(body.to_string().as_bytes()).unwrap();
            assert_eq!(review.version, version);
            assert_eq!(review.request.uid, "u1");
        }
    }

    #[test]
    fn refuses_a_body_that_is_not_utf8() {
        let mut body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"a":"#.to_vec();
        body.extend_from_slice(b"\"\xff\"}}}");
        match decode(&body) {
            Err(DecodeError::Json(m)) => assert!(m.contains("not UTF-8"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_what_is_not_a_review() {
        assert!(matches!(decode(b"{"), Err(DecodeError::Json(_))));
        assert!(decode(b"[]").is_err());
        assert!(decode(b"null").is_err());
        assert!(matches!(
            decode(br#"{"apiVersion":"v1","kind":"Pod"}"#),
            Err(DecodeError::NotAReview { .. })
        ));
        assert_eq!(
            decode(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
                .unwrap_err(),
            DecodeError::NoRequest
        );
        let nested = |depth: usize| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","object":{}{}}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            )
        };
        // The review and request take two levels.
        assert!(decode(nested(MAX_NESTING - 2).as_bytes()).is_ok());
        assert_eq!(
            decode(nested(MAX_NESTING - 1).as_bytes()).unwrap_err(),
            DecodeError::TooDeep
        );
        // Brackets inside strings do not count.
        let s = format!("\"{}\"", "[".repeat(1000));
        assert!(!nesting_exceeds(s.as_bytes(), 10));
        assert!(!nesting_exceeds(br#""\"[[[[""#, 2));
    }

    // A request whose policies cannot read its old object has it checked
    // as strictly, and left out.
    #[test]
    fn an_old_object_left_out_is_checked_as_strictly() {
        let review = |old: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","operation":"UPDATE","object":{{"a":1}},"oldObject":{old}}}}}"#
            )
        };
        let decoded = |old: &str, read: bool| {
            decode_reading_old_object(review(old).as_bytes(), read).map(|r| r.request)
        };
        let old = r#"{"metadata":{"labels":{"a":"\u00e9\"x"}},"n":[1,-2,3.5e10,null,true,{}]}"#;
        let kept = decoded(old, true).unwrap();
        assert_eq!(kept.old_object, Some(serde_json::from_str(old).unwrap()));
        let mut left = decoded(old, false).unwrap();
        assert_eq!(left.old_object, None);
        left.old_object = kept.old_object.clone();
        assert_eq!(left, kept);
        assert_eq!(decoded("null", true).unwrap().old_object, None);
        // The choice does not outlast the decoding.
        assert_eq!(decode(review(old).as_bytes()).unwrap().request, kept);

        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        // Within the limit (the review and the request take two levels).
        assert!(decoded(&nested(MAX_NESTING - 2), false).is_ok());
        for bad in [
            nested(MAX_NESTING - 1),
            r#""\ud800""#.to_string(),
            "1e400".to_string(),
            r#""\x""#.to_string(),
            "\"a\tb\"".to_string(),
            "[1,]".to_string(),
            r#"{"a":1,}"#.to_string(),
            "01".to_string(),
        ] {
            let refused = decoded(&bad, true).unwrap_err();
            assert_eq!(decoded(&bad, false).unwrap_err(), refused, "{bad}");
        }
    }

    #[test]
    fn encodes_patch_and_denial() {
        let a = Answer::admit(&json!({"a": 1}), &json!({"a": 1, "b": 2}), vec![]);
        let out: Json = serde_json::from_slice(&encode(ReviewVersion::V1, "u", &a)).unwrap();
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(out["response"]["uid"], "u");
        assert_eq!(out["response"]["allowed"], true);
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: Json = serde_json::from_slice(&patch).unwrap();
        assert_eq!(patch, json!([{"op": "add", "path": "/b", "value": 2}]));

        // With warnings, a longer patch and a uid to escape.
        let original = json!({"a": "x".repeat(1000)});
        let changed = json!({"a": "y".repeat(1000), "c": "\u{e9}"});
        let warned = Answer::admit(&original, &changed, vec!["w \"1\"".into(), "w2".into()]);
        let text = encode(ReviewVersion::V1, "u\"2", &warned);
        let out: Json = serde_json::from_slice(&text).unwrap();
        assert_eq!(out["kind"], "AdmissionReview");
        assert_eq!(out["response"]["uid"], "u\"2");
        assert_eq!(out["response"]["warnings"], json!(["w \"1\"", "w2"]));
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        let mut patched = original.clone();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(patched, changed);

        let same = Answer::admit(&json!({"a": 1}), &json!({"a": 1}), vec![]);
        let out: Json = serde_json::from_slice(&encode(ReviewVersion::V1, "u", &same)).unwrap();
        assert!(out["response"].get("patch").is_none());
        assert!(out["response"].get("patchType").is_none());

        let d = Answer::deny(403, "policy 'p' with binding 'b' denied request: x".into());
        let out: Json = serde_json::from_slice(&encode(ReviewVersion::V1Beta1, "u", &d)).unwrap();
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1beta1");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 403);
        assert_eq!(out["response"]["status"]["reason"], "Forbidden");
        assert_eq!(
            out["response"]["status"]["message"],
            "policy 'p' with binding 'b' denied request: x"
        );
    }
}
