//! AdmissionReview in and out: `admission.k8s.io/v1` and `v1beta1` (answered
//! in the version asked), the base64 JSONPatch of the answer and the status
//! of a denial.

use super::MAX_NESTING;
use crate::dispatch::{AdmissionContext, PolicySet};
use crate::engine::Engine;
use crate::matching::complete_request;
use crate::mutation::diff::Snapshot;
use crate::request::decode::{
    member_of, DecodedRequest, ObjectChoice, ObjectPeek, RequestSeed, MEMBERS,
};
use crate::request::AdmissionRequest;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Serialize;
use serde_json::{Map, Value as Json};
use std::cell::RefCell;
use std::fmt;

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

/// A review decoded by [`decode_with`].
#[derive(Debug)]
pub struct DecodedReview {
    /// The review; its request's `object` is `None` when it was not built.
    pub review: Review,
    /// What was seen of an object the gate left unbuilt.
    pub skipped_object: Option<ObjectPeek>,
}

/// Decodes a request body.
pub fn decode(body: &[u8]) -> Result<Review, DecodeError> {
    decode_reading_old_object(body, true)
}

/// [`decode`], keeping the request's `oldObject` only when
/// `old_object_read` (an engine whose policies may read it,
/// [`crate::engine::Engine::reads_old_object`]); otherwise it is
/// checked as strictly, and left out ([`ObjectChoice::old_object`]).
pub fn decode_reading_old_object(
    body: &[u8],
    old_object_read: bool,
) -> Result<Review, DecodeError> {
    let choice = ObjectChoice {
        old_object: old_object_read,
        object_gate: None,
    };
    decode_with(body, choice).map(|decoded| decoded.review)
}

/// Decodes a request body, building its objects as `choice` says.
pub fn decode_with(body: &[u8], choice: ObjectChoice<'_>) -> Result<DecodedReview, DecodeError> {
    // One UTF-8 check of the whole body is far cheaper than serde_json's
    // check of each string (hundreds in an object); JSON outside strings
    // is ASCII, so nothing valid is refused.
    let text = std::str::from_utf8(body)
        .map_err(|e| DecodeError::Json(format!("request body is not UTF-8: {e}")))?;
    // serde_json refuses nesting past its fixed recursion limit, which is
    // MAX_NESTING: no separate scan needed.
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let review = ReviewSeed(choice)
        .deserialize(&mut deserializer)
        .and_then(|review| deserializer.end().map(|()| review))
        .map_err(|e| {
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
    let decoded = review.request.ok_or(DecodeError::NoRequest)?;
    Ok(DecodedReview {
        review: Review {
            version,
            request: decoded.request,
        },
        skipped_object: decoded.skipped_object,
    })
}

/// A request body decoded by [`decode_for_policies`].
#[derive(Debug)]
pub enum DecodedBody {
    /// A review whose request no binding acts on, whatever its object: the
    /// object was checked, not built (`object` is `None`), and the request
    /// is completed as its object would have completed it.
    Unmatched(Review),
    /// A review to admit, its object built; not completed yet.
    Review(Review),
}

/// Decodes a request body for `engine`, leaving the object of a request
/// no binding may act on unbuilt ([`decode_for_policies`]).
pub fn decode_review(engine: &Engine, body: &[u8]) -> Result<DecodedBody, DecodeError> {
    decode_for_policies(body, engine.policy_set(), &engine.context())
}

/// Decodes a request body for `policies`: the object of a request none of
/// their bindings may act on, whatever the object holds
/// ([`PolicySet::may_act_whatever_the_object`]), is checked but not built,
/// and the `oldObject` is built only if a policy may read it
/// ([`PolicySet::reads_old_object`]).
///
/// The choice is made at the object, from the members before it (all of
/// them, in kube-apiserver's order), and made again once the whole request
/// is read, its kind, resource, name and namespace completed from the
/// object as [`complete_request`] completes them. A request that turns out
/// to need its object after all is decoded again, building it.
pub fn decode_for_policies(
    body: &[u8],
    policies: &PolicySet,
    ctx: &AdmissionContext<'_>,
) -> Result<DecodedBody, DecodeError> {
    let may_act = |request: &AdmissionRequest| policies.may_act_whatever_the_object(request, ctx);
    // The completed header the early choice was made on.
    let early_header = RefCell::new(None);
    let early = |header: &AdmissionRequest| {
        let mut header = header.matching_header();
        complete_request(&mut header, ctx.resources);
        let acts = may_act(&header);
        *early_header.borrow_mut() = Some(header);
        acts
    };
    let choice = ObjectChoice {
        old_object: policies.reads_old_object(),
        object_gate: Some(&early),
    };
    let decoded = decode_with(body, choice)?;
    let Some(peek) = decoded.skipped_object else {
        return Ok(DecodedBody::Review(decoded.review));
    };
    let mut review = decoded.review;
    review.request.object = Some(peek.stand_in());
    complete_request(&mut review.request, ctx.resources);
    review.request.object = None;
    // Matching reads only what the header holds: the same header, the same
    // choice.
    let unchanged = early_header
        .borrow()
        .as_ref()
        .is_some_and(|early| *early == review.request.matching_header());
    if !unchanged && may_act(&review.request) {
        // Members after the object, or the object's own names, let a
        // binding match.
        return decode_reading_old_object(body, policies.reads_old_object())
            .map(DecodedBody::Review);
    }
    Ok(DecodedBody::Unmatched(review))
}

/// The members of an AdmissionReview that are read.
struct ReviewIn {
    api_version: String,
    kind: String,
    request: Option<DecodedRequest>,
}

/// Decodes a [`ReviewIn`], its request by [`RequestSeed`].
struct ReviewSeed<'g>(ObjectChoice<'g>);

const REVIEW_FIELDS: &[&str] = &["apiVersion", "kind", "request"];

impl<'de> DeserializeSeed<'de> for ReviewSeed<'_> {
    type Value = ReviewIn;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ReviewIn, D::Error> {
        d.deserialize_struct("AdmissionReview", REVIEW_FIELDS, self)
    }
}

impl<'de> Visitor<'de> for ReviewSeed<'_> {
    type Value = ReviewIn;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct AdmissionReview")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReviewIn, A::Error> {
        let mut review = ReviewIn {
            api_version: String::new(),
            kind: String::new(),
            request: None,
        };
        let mut seen = [false; 3];
        while let Some(member) = member_of(&mut map, REVIEW_FIELDS)? {
            let Some(index) = member else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if std::mem::replace(&mut seen[index], true) {
                return Err(de::Error::duplicate_field(REVIEW_FIELDS[index]));
            }
            match index {
                0 => review.api_version = map.next_value()?,
                1 => review.kind = map.next_value()?,
                _ => review.request = map.next_value_seed(OptionalRequest(self.0))?,
            }
        }
        Ok(review)
    }
}

/// A request or `null`, as `Option<AdmissionRequest>` decodes.
struct OptionalRequest<'g>(ObjectChoice<'g>);

impl<'de> DeserializeSeed<'de> for OptionalRequest<'_> {
    type Value = Option<DecodedRequest>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for OptionalRequest<'_> {
    type Value = Option<DecodedRequest>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("option")
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        RequestSeed(self.0).deserialize(d).map(Some)
    }
}

/// JSON `text` without the whitespace between its tokens, its members in
/// the order they are written: a recorded review compacted as
/// kube-apiserver sends it (Go's encoder writes a request's members in
/// its struct's order, the object after the request's other members;
/// decoding to a `Value` and encoding again would sort them). Text that is
/// not JSON comes out without its whitespace outside strings.
pub fn compact_json(text: &[u8]) -> Vec<u8> {
    in_strings(text)
        .filter(|&(b, inside)| inside || !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .map(|(b, _)| b)
        .collect()
}

/// Each byte of JSON `text`, and whether it is part of a string (its
/// quotes included).
fn in_strings(text: &[u8]) -> impl Iterator<Item = (u8, bool)> + '_ {
    let mut in_string = false;
    let mut escaped = false;
    text.iter().map(move |&b| {
        let inside = in_string || b == b'"';
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
        }
        (b, inside)
    })
}

/// The JSON text of `review` with its request's members in the order
/// kube-apiserver writes them ([`MEMBERS`]; members it does not have
/// last), for tests and benchmarks that build reviews as `Value`s, whose
/// members are sorted.
pub fn encode_in_request_order(review: &Json) -> Vec<u8> {
    fn members(object: &Map<String, Json>, ordered: bool) -> Vec<(&String, &Json)> {
        let rank = |key: &str| {
            MEMBERS
                .iter()
                .position(|m| *m == key)
                .unwrap_or(MEMBERS.len())
        };
        let mut members: Vec<(&String, &Json)> = object.iter().collect();
        if ordered {
            members.sort_by_key(|(key, _)| rank(key));
        }
        members
    }
    let Json::Object(outer) = review else {
        return review.to_string().into_bytes();
    };
    let text: Vec<String> = members(outer, false)
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                Json::Object(request) if key == "request" => {
                    let inner: Vec<String> = members(request, true)
                        .into_iter()
                        .map(|(key, value)| format!("{}:{value}", Json::from(key.as_str())))
                        .collect();
                    format!("{{{}}}", inner.join(","))
                }
                value => value.to_string(),
            };
            format!("{}:{value}", Json::from(key.as_str()))
        })
        .collect();
    format!("{{{}}}", text.join(",")).into_bytes()
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
    /// `auditAnnotations` (kube-apiserver records them under the webhook's
    /// name).
    pub audit_annotations: AuditAnnotations,
}

/// An answer's `auditAnnotations`, each value kept as the JSON string that
/// holds it (quoted, escaped), as the answer writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditAnnotations(Vec<(String, Vec<u8>)>);

impl AuditAnnotations {
    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: &str, value: &str) {
        let mut literal = Vec::with_capacity(value.len() + 2);
        crate::json_text::push_quoted(&mut literal, value);
        self.insert_literal(key, literal);
    }

    /// Sets `key` to a value already written as a JSON string.
    pub fn insert_literal(&mut self, key: &str, literal: Vec<u8>) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, value)) => *value = literal,
            None => self.0.push((key.to_string(), literal)),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many bytes they take in the answer, about.
    fn encoded_len(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len() + 8).sum()
    }
}

impl Answer {
    /// Whether the answer applies a change: it admits with a patch.
    pub fn applies(&self) -> bool {
        self.allowed && self.patch.is_some()
    }

    /// Takes the audit annotations of what `attribution` recorded (applied
    /// changes only when the answer [`applies`](Answer::applies) them).
    pub fn annotate(&mut self, attribution: &crate::attribution::Attribution) {
        let mut annotations = AuditAnnotations::default();
        for (key, literal) in attribution.encoded_audit_annotations(self.applies()) {
            annotations.insert_literal(key, literal);
        }
        self.audit_annotations = annotations;
    }

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
            ..Answer::default()
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
    // `auditAnnotations` is appended after (`append_audit_annotations`).
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
    // Room for all of it at once: the review, the annotations (their
    // quotes escaped) and the patch in base64, written after it.
    let annotations = answer.audit_annotations.encoded_len();
    let patch = answer.patch.as_ref().map_or(0, |p| p.len() / 3 * 4 + 48);
    let texts = answer.warnings.iter().map(String::len).sum::<usize>()
        + answer
            .status
            .as_ref()
            .map_or(0, |(_, message)| message.len());
    let room = 256 + texts + annotations + patch;
    let mut out = Vec::with_capacity(room);
    if serde_json::to_writer(&mut out, &review).is_err() {
        out.clear();
    }
    if !answer.audit_annotations.is_empty() {
        append_audit_annotations(&mut out, &answer.audit_annotations);
    }
    if let Some(patch) = &answer.patch {
        append_patch(&mut out, patch);
    }
    out
}

/// Adds `auditAnnotations` to the end of the `response` object that closes
/// `review`, the compact text of a [`ReviewOut`].
fn append_audit_annotations(review: &mut Vec<u8>, annotations: &AuditAnnotations) {
    // `response`, never empty, is the last field: the text ends by closing
    // it and the review.
    if !review.ends_with(b"}}") {
        return;
    }
    review.truncate(review.len() - 2);
    review.extend_from_slice(br#","auditAnnotations":{"#);
    for (i, (key, literal)) in annotations.0.iter().enumerate() {
        if i > 0 {
            review.push(b',');
        }
        crate::json_text::push_quoted(review, key);
        review.push(b':');
        review.extend_from_slice(literal);
    }
    review.extend_from_slice(b"}}}");
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
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","object":{{"a":{}{}}}}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            )
        };
        // The review, the request and the object take three levels.
        assert!(decode(nested(MAX_NESTING - 3).as_bytes()).is_ok());
        assert_eq!(
            decode(nested(MAX_NESTING - 2).as_bytes()).unwrap_err(),
            DecodeError::TooDeep
        );
        // Brackets inside strings do not count, escaped quotes included.
        let in_string = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","object":{{"a":"\"{}"}}}}}}"#,
            "[".repeat(MAX_NESTING * 2)
        );
        assert!(decode(in_string.as_bytes()).is_ok());
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
        // `decode` builds both objects.
        assert_eq!(decode(review(old).as_bytes()).unwrap().request, kept);

        let nested = |depth: usize| format!("{{\"a\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        // Within the limit (the review, the request and the old object
        // take three levels).
        assert!(decoded(&nested(MAX_NESTING - 3), false).is_ok());
        for bad in [
            nested(MAX_NESTING - 2),
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
    fn audit_annotations_come_after_the_warnings_and_before_the_patch() {
        let original = json!({"metadata": {"labels": {"a": "1"}}});
        let object = json!({"metadata": {"labels": {"a": "2"}}});
        let mut answer = Answer::admit(&original, &object, vec!["w \"1\"".into()]);
        let changes =
            r#"[{"policy":"p","binding":"b","set":["metadata.labels[\"a\"]"]},"tab\t\u0001"]"#;
        answer.audit_annotations.insert("changes", changes);
        answer.audit_annotations.insert("monitor\"x", "\\");
        let text = encode(ReviewVersion::V1, "u1", &answer);
        let review: Json = serde_json::from_slice(&text).expect("the answer is JSON");
        assert_eq!(
            review["response"]["auditAnnotations"],
            json!({"changes": changes, "monitor\"x": "\\"})
        );
        let text = String::from_utf8(text).unwrap();
        let at = |field: &str| {
            text.find(field)
                .unwrap_or_else(|| panic!("{field} in {text}"))
        };
        assert!(at("\"warnings\"") < at("\"auditAnnotations\""));
        assert!(at("\"auditAnnotations\"") < at("\"patchType\""));
        assert_eq!(review["response"]["patchType"], "JSONPatch");
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

    #[test]
    fn compacting_keeps_the_members_order_and_the_strings() {
        let text = b"{\n  \"uid\": \"a b\",\n  \"kind\": {\"kind\": \"Pod\"},\t\"s\": \"x\\\" \\\\ \\n y\",\r\n \"n\": [1, 2]\n}\n";
        let compact = compact_json(text);
        assert_eq!(
            String::from_utf8(compact.clone()).unwrap(),
            r#"{"uid":"a b","kind":{"kind":"Pod"},"s":"x\" \\ \n y","n":[1,2]}"#
        );
        let decoded: Json = serde_json::from_slice(&compact).unwrap();
        assert_eq!(decoded, serde_json::from_slice::<Json>(text).unwrap());
    }

    #[test]
    fn a_review_is_encoded_with_its_request_in_kube_apiservers_order() {
        let review = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
            "request": {"userInfo": {"username": "u"}, "uid": "1", "object": {"b": 1, "a": 2},
                "extra": true, "operation": "UPDATE"}});
        let text = String::from_utf8(encode_in_request_order(&review)).unwrap();
        assert_eq!(
            text,
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"UPDATE","userInfo":{"username":"u"},"object":{"a":2,"b":1},"extra":true}}"#
        );
        assert_eq!(serde_json::from_str::<Json>(&text).unwrap(), review);
    }

    /// The fixture's review with bytes of its object replaced or inserted
    /// at random: left unbuilt, the object is refused exactly when it is
    /// refused built, with the same message, and the rest of the request
    /// decodes the same.
    #[test]
    fn an_object_left_unbuilt_is_refused_as_when_built() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/webhook/review.json");
        let body = compact_json(&std::fs::read(path).expect("fixture review"));
        let text = String::from_utf8(body.clone()).unwrap();
        let start = text.find("\"object\":").unwrap() + 9;
        let end = text.find(",\"oldObject\"").unwrap();
        let skip = |_: &AdmissionRequest| false;
        let choice = ObjectChoice {
            old_object: true,
            object_gate: Some(&skip),
        };
        // Nesting past the limit inside the object: too deep either way.
        let deep = format!(
            "{}{{\"a\":{}{}}}{}",
            &text[..start],
            "[".repeat(MAX_NESTING),
            "]".repeat(MAX_NESTING),
            &text[end..]
        );
        assert_eq!(decode(deep.as_bytes()).unwrap_err(), DecodeError::TooDeep);
        assert_eq!(
            decode_with(deep.as_bytes(), choice).unwrap_err(),
            DecodeError::TooDeep
        );
        let interesting = b"\"\\{}[],:0123456789eE.-+ubtnrfx \t\x01";
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut refused, mut skipped) = (0, 0);
        for _ in 0..3000 {
            let mut mutated = body.clone();
            for _ in 0..1 + next(3) {
                let at = start + next(end - start);
                let byte = interesting[next(interesting.len())];
                if next(2) == 0 {
                    mutated[at] = byte;
                } else {
                    mutated.insert(at, byte);
                }
            }
            let built = decode(&mutated);
            match (decode_with(&mutated, choice), built) {
                (Err(gated), Err(built)) => {
                    assert_eq!(gated, built);
                    refused += 1;
                }
                (Ok(gated), Ok(mut built)) => {
                    if gated.skipped_object.is_some() {
                        built.request.object = None;
                        skipped += 1;
                    }
                    assert_eq!(gated.review.request, built.request);
                }
                (gated, built) => panic!(
                    "{}: {:?} against {:?}",
                    String::from_utf8_lossy(&mutated),
                    gated.map(|g| g.skipped_object),
                    built.map(|_| ())
                ),
            }
        }
        // Both outcomes are common enough to have been compared.
        assert!(
            refused > 1000 && skipped > 200,
            "{refused} refused, {skipped} skipped"
        );
    }
}
