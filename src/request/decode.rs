//! Decoding an AdmissionRequest, choosing which of its objects are built.
//!
//! The objects are most of a request's bytes, and building one as a `Value`
//! (then dropping it) is most of what decoding a request costs. A caller
//! that will not read an object has it checked instead: walked with every
//! check a `Value` decode makes (syntax, strings, numbers, nesting), building
//! nothing, so that exactly the bodies refused before are refused.
//!
//! For the new object the choice can wait for the members before it
//! ([`ObjectChoice::object_gate`]): kube-apiserver writes the request's
//! kind, resource, names and operation first, which is all that matching a
//! request to bindings needs, so a webhook can leave the object of a request
//! no binding matches unbuilt. It still learns what
//! [`crate::matching::complete_request`] reads of that object
//! ([`ObjectPeek`]).
//!
//! # Example
//!
//! ```
//! use kmutate::request::decode::{ObjectChoice, RequestSeed};
//! use serde::de::DeserializeSeed;
//!
//! let body = r#"{"uid": "1", "resource": {"group": "", "version": "v1", "resource": "configmaps"},
//!     "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}}"#;
//! let skip_config_maps = |header: &kmutate::request::AdmissionRequest| header.resource.resource != "configmaps";
//! let choice = ObjectChoice { old_object: true, object_gate: Some(&skip_config_maps) };
//! let decoded = RequestSeed(choice)
//!     .deserialize(&mut serde_json::Deserializer::from_str(body))
//!     .unwrap();
//! assert!(decoded.request.object.is_none());
//! let peek = decoded.skipped_object.unwrap();
//! assert_eq!(peek.stand_in()["metadata"]["name"], "settings");
//! ```

use super::AdmissionRequest;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};
use std::fmt;

/// What a [`RequestSeed`] builds of a request's objects.
#[derive(Clone, Copy)]
pub struct ObjectChoice<'g> {
    /// Whether `oldObject` is built; otherwise (and after an object the
    /// gate left unbuilt) it is checked and `old_object` left `None`.
    pub old_object: bool,
    /// Asked at the `object` member, with the members decoded before it
    /// (the others at their defaults): `false` has an object that is a JSON
    /// object checked and peeked at ([`DecodedRequest::skipped_object`])
    /// instead of built. Without a gate the object is built.
    pub object_gate: Option<&'g dyn Fn(&AdmissionRequest) -> bool>,
}

impl ObjectChoice<'_> {
    /// Both objects built: what `AdmissionRequest`'s `Deserialize` does.
    pub const BUILD_BOTH: ObjectChoice<'static> = ObjectChoice {
        old_object: true,
        object_gate: None,
    };
}

/// A request decoded by a [`RequestSeed`].
#[derive(Debug)]
pub struct DecodedRequest {
    /// The request; `object` is `None` when it was not built.
    pub request: AdmissionRequest,
    /// What was seen of an object the gate had left unbuilt.
    pub skipped_object: Option<ObjectPeek>,
}

/// What [`crate::matching::complete_request`] reads of an object: its
/// `apiVersion`, `kind`, `metadata.name` and `metadata.namespace`, each
/// kept when it is a string (of a member given twice, the last, as in a
/// decoded `Value`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectPeek {
    api_version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
}

impl ObjectPeek {
    /// An object with only those members: completing a request with it
    /// gives what completing it with the whole object gives.
    pub fn stand_in(&self) -> Value {
        let strings = |members: [(&str, &Option<String>); 2]| -> Map<String, Value> {
            members
                .into_iter()
                .filter_map(|(key, value)| Some((key.to_string(), Value::String(value.clone()?))))
                .collect()
        };
        let mut object = strings([("apiVersion", &self.api_version), ("kind", &self.kind)]);
        let metadata = strings([("name", &self.name), ("namespace", &self.namespace)]);
        object.insert("metadata".to_string(), Value::Object(metadata));
        Value::Object(object)
    }
}

/// Decodes an `AdmissionRequest`, building its objects as an
/// [`ObjectChoice`] says.
pub struct RequestSeed<'g>(pub ObjectChoice<'g>);

impl<'de> Deserialize<'de> for AdmissionRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RequestSeed(ObjectChoice::BUILD_BOTH)
            .deserialize(d)
            .map(|decoded| decoded.request)
    }
}

/// The request's members, in the order kube-apiserver writes them (the Go
/// struct's).
pub const MEMBERS: &[&str] = &[
    "uid",
    "kind",
    "resource",
    "subResource",
    "requestKind",
    "requestResource",
    "requestSubResource",
    "name",
    "namespace",
    "operation",
    "userInfo",
    "object",
    "oldObject",
    "dryRun",
    "options",
];

impl<'de> DeserializeSeed<'de> for RequestSeed<'_> {
    type Value = DecodedRequest;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<DecodedRequest, D::Error> {
        d.deserialize_struct("AdmissionRequest", MEMBERS, self)
    }
}

impl<'de> Visitor<'de> for RequestSeed<'_> {
    type Value = DecodedRequest;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct AdmissionRequest")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DecodedRequest, A::Error> {
        let mut request = AdmissionRequest {
            operation: "CREATE".to_string(),
            ..AdmissionRequest::default()
        };
        let mut skipped_object = None;
        let mut seen = 0u32;
        // A member the request does not have is ignored, as Go's decoder
        // ignores it.
        while let Some(index) = member_of(&mut map, MEMBERS)? {
            let Some(index) = index else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if seen & (1 << index) != 0 {
                return Err(de::Error::duplicate_field(MEMBERS[index]));
            }
            seen |= 1 << index;
            let r = &mut request;
            match MEMBERS[index] {
                "uid" => r.uid = map.next_value()?,
                "kind" => r.kind = map.next_value()?,
                "resource" => r.resource = map.next_value()?,
                "subResource" => r.sub_resource = map.next_value()?,
                "requestKind" => r.request_kind = map.next_value()?,
                "requestResource" => r.request_resource = map.next_value()?,
                "requestSubResource" => r.request_sub_resource = map.next_value()?,
                "name" => r.name = map.next_value()?,
                "namespace" => r.namespace = map.next_value()?,
                "operation" => r.operation = map.next_value()?,
                "userInfo" => r.user_info = map.next_value()?,
                "object" => match self.0.object_gate {
                    Some(gate) if !gate(r) => match map.next_value_seed(PeekObject)? {
                        PeekedObject::Object(peek) => skipped_object = Some(peek),
                        PeekedObject::Other(value) => r.object = value,
                    },
                    _ => r.object = map.next_value()?,
                },
                // An object left unbuilt answers the request without
                // either object.
                "oldObject" if self.0.old_object && skipped_object.is_none() => {
                    r.old_object = map.next_value()?
                }
                "oldObject" => match map.next_value_seed(CheckedKind)? {
                    "object" | "null" => {}
                    found => return Err(not_an_object("oldObject", found)),
                },
                "dryRun" => r.dry_run = map.next_value()?,
                "options" => r.options = map.next_value()?,
                _ => unreachable!("every member of MEMBERS is matched"),
            }
        }
        for (member, value) in [
            ("object", &request.object),
            ("oldObject", &request.old_object),
        ] {
            if let Some(value) = value.as_ref().filter(|v| !v.is_object()) {
                return Err(not_an_object(member, json_kind(value)));
            }
        }
        Ok(DecodedRequest {
            request,
            skipped_object,
        })
    }
}

/// The error for a request's `object` or `oldObject` that is not a JSON
/// object: kube-apiserver sends an object or nothing, and the policies
/// (and conversion to the matched version) need an object.
fn not_an_object<E: de::Error>(member: &str, found: &str) -> E {
    E::custom(format!(
        "request.{member}: expected a JSON object or null, found {found}"
    ))
}

/// What kind of JSON value `value` is, as [`CheckedKind`] names it.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "object",
    }
}

/// Any JSON value, checked as [`CheckedValue`] checks it, answering what
/// kind of value it is ([`json_kind`]'s names).
struct CheckedKind;

impl<'de> DeserializeSeed<'de> for CheckedKind {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_any(CheckedKind)
    }
}

impl<'de> Visitor<'de> for CheckedKind {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_str<E>(self, _: &str) -> Result<&'static str, E> {
        Ok("a string")
    }

    fn visit_bool<E>(self, _: bool) -> Result<&'static str, E> {
        Ok("a boolean")
    }

    fn visit_i64<E>(self, _: i64) -> Result<&'static str, E> {
        Ok("a number")
    }

    fn visit_u64<E>(self, _: u64) -> Result<&'static str, E> {
        Ok("a number")
    }

    fn visit_f64<E>(self, _: f64) -> Result<&'static str, E> {
        Ok("a number")
    }

    fn visit_unit<E>(self) -> Result<&'static str, E> {
        Ok("null")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<&'static str, A::Error> {
        CheckedValue.visit_seq(seq).map(|()| "an array")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<&'static str, A::Error> {
        CheckedValue.visit_map(map).map(|()| "object")
    }
}

/// Any JSON value, decoded as a `Value` would be (every string unescaped,
/// every number converted, serde_json's nesting limit applied) and then
/// forgotten.
pub(crate) struct CheckedValue;

impl<'de> DeserializeSeed<'de> for CheckedValue {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(CheckedValue)
    }
}

/// The `visit_*` methods of a visitor that checks every value but strings
/// and answers `$answer`: maps too when `maps` is given (otherwise the
/// visitor reads them itself).
macro_rules! check_others {
    ($answer:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($answer)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element_seed(CheckedValue)?.is_some() {}
            Ok($answer)
        }
    };
    ($answer:expr, maps) => {
        check_others!($answer);

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_key_seed(CheckedValue)?.is_some() {
                map.next_value_seed(CheckedValue)?;
            }
            Ok($answer)
        }
    };
}

impl<'de> Visitor<'de> for CheckedValue {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    check_others!((), maps);
}

/// A string, kept; any other value, checked ([`CheckedValue`]).
struct TextOrChecked;

impl<'de> DeserializeSeed<'de> for TextOrChecked {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(TextOrChecked)
    }
}

impl<'de> Visitor<'de> for TextOrChecked {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_str<E>(self, text: &str) -> Result<Option<String>, E> {
        Ok(Some(text.to_string()))
    }

    check_others!(None, maps);
}

/// The next member name of `map`, as its index in `names` (`Some(None)`
/// for another name), checked as [`CheckedValue`] checks it.
pub(crate) fn member_of<'de, A: MapAccess<'de>>(
    map: &mut A,
    keep: &[&str],
) -> Result<Option<Option<usize>>, A::Error> {
    struct Name<'k>(&'k [&'k str]);
    impl<'de> DeserializeSeed<'de> for Name<'_> {
        type Value = Option<usize>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Name<'_> {
        type Value = Option<usize>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any valid JSON value")
        }
        fn visit_str<E>(self, name: &str) -> Result<Option<usize>, E> {
            Ok(self.0.iter().position(|k| *k == name))
        }
        check_others!(None, maps);
    }
    map.next_key_seed(Name(keep))
}

/// An object's `metadata`: its `name` and `namespace` when it is a map.
struct PeekMetadata;

impl<'de> DeserializeSeed<'de> for PeekMetadata {
    type Value = [Option<String>; 2];

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(PeekMetadata)
    }
}

impl<'de> Visitor<'de> for PeekMetadata {
    type Value = [Option<String>; 2];

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok([None, None])
    }

    check_others!([None, None]);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = [None, None];
        while let Some(member) = member_of(&mut map, &["name", "namespace"])? {
            match member {
                Some(i) => found[i] = map.next_value_seed(TextOrChecked)?,
                None => map.next_value_seed(CheckedValue)?,
            }
        }
        Ok(found)
    }
}

/// The request's object, left unbuilt when it is a map.
struct PeekObject;

/// What [`PeekObject`] found.
enum PeekedObject {
    /// A map, peeked at.
    Object(ObjectPeek),
    /// Anything else, built (`None` for `null`, as `Option<Value>`).
    Other(Option<Value>),
}

impl<'de> DeserializeSeed<'de> for PeekObject {
    type Value = PeekedObject;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<PeekedObject, D::Error> {
        d.deserialize_any(PeekObject)
    }
}

impl<'de> Visitor<'de> for PeekObject {
    type Value = PeekedObject;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PeekedObject, A::Error> {
        let mut peek = ObjectPeek::default();
        while let Some(member) = member_of(&mut map, &["apiVersion", "kind", "metadata"])? {
            match member {
                Some(0) => peek.api_version = map.next_value_seed(TextOrChecked)?,
                Some(1) => peek.kind = map.next_value_seed(TextOrChecked)?,
                Some(_) => [peek.name, peek.namespace] = map.next_value_seed(PeekMetadata)?,
                None => map.next_value_seed(CheckedValue)?,
            }
        }
        Ok(PeekedObject::Object(peek))
    }

    // Anything but a map is built as serde_json's `Value` builds it.
    fn visit_bool<E>(self, b: bool) -> Result<PeekedObject, E> {
        Ok(PeekedObject::Other(Some(Value::Bool(b))))
    }

    fn visit_i64<E>(self, n: i64) -> Result<PeekedObject, E> {
        Ok(PeekedObject::Other(Some(Value::Number(n.into()))))
    }

    fn visit_u64<E>(self, n: u64) -> Result<PeekedObject, E> {
        Ok(PeekedObject::Other(Some(Value::Number(n.into()))))
    }

    fn visit_f64<E>(self, n: f64) -> Result<PeekedObject, E> {
        Ok(PeekedObject::Other(Some(
            Number::from_f64(n).map_or(Value::Null, Value::Number),
        )))
    }

    fn visit_str<E>(self, text: &str) -> Result<PeekedObject, E> {
        Ok(PeekedObject::Other(Some(Value::String(text.to_string()))))
    }

    fn visit_unit<E>(self) -> Result<PeekedObject, E> {
        Ok(PeekedObject::Other(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PeekedObject, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(PeekedObject::Other(Some(Value::Array(items))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::RefCell;

    /// The outcome of decoding a request, and the headers its gate saw.
    type Gated = (Result<DecodedRequest, String>, Vec<AdmissionRequest>);

    /// `request` decoded with a gate answering `build`.
    fn gated(request: &str, build: bool) -> Gated {
        let shown = RefCell::new(Vec::new());
        let gate = |header: &AdmissionRequest| {
            shown.borrow_mut().push(header.clone());
            build
        };
        let choice = ObjectChoice {
            old_object: true,
            object_gate: Some(&gate),
        };
        let decoded = RequestSeed(choice)
            .deserialize(&mut serde_json::Deserializer::from_str(request))
            .map_err(|e| e.to_string());
        (decoded, shown.into_inner())
    }

    fn built(request: &str) -> Result<AdmissionRequest, String> {
        serde_json::from_str(request).map_err(|e| e.to_string())
    }

    #[test]
    fn members_decode_as_the_derived_decoder_did() {
        let request = built(
            r#"{"uid":"u","kind":{"group":"apps","version":"v1","kind":"Deployment"},
            "resource":{"group":"apps","version":"v1","resource":"deployments"},"subResource":"scale",
            "requestKind":null,"requestSubResource":"s","name":"n","namespace":"ns",
            "userInfo":{"username":"a","groups":["g"]},"object":{"a":1},"oldObject":null,
            "dryRun":true,"options":{"o":2},"unknown":[1,{"x":2}]}"#,
        )
        .unwrap();
        assert_eq!(request.uid, "u");
        assert_eq!(request.kind.kind, "Deployment");
        assert_eq!(request.resource.resource, "deployments");
        assert_eq!(request.sub_resource, "scale");
        assert_eq!(request.request_kind, None);
        assert_eq!(request.request_sub_resource.as_deref(), Some("s"));
        assert_eq!(
            (request.name.as_str(), request.namespace.as_str()),
            ("n", "ns")
        );
        assert_eq!(request.user_info.groups, ["g"]);
        assert_eq!(request.object, Some(json!({"a": 1})));
        assert_eq!(request.old_object, None);
        assert_eq!(request.dry_run, Some(true));
        assert_eq!(request.options, Some(json!({"o": 2})));
        // Left out: the defaults, CREATE for the operation.
        assert_eq!(built("{}").unwrap().operation, "CREATE");
        assert_eq!(built("{}").unwrap().object, None);
        // serde's own messages, as the derived decoder gave them.
        assert_eq!(
            built(r#"{"uid":"a","uid":"b"}"#).unwrap_err(),
            "duplicate field `uid` at line 1 column 16"
        );
        assert_eq!(
            built(r#"{"name":5}"#).unwrap_err(),
            "invalid type: integer `5`, expected a string at line 1 column 9"
        );
        assert_eq!(
            built(r#""x""#).unwrap_err(),
            "invalid type: string \"x\", expected struct AdmissionRequest at line 1 column 3"
        );
        // From a `Value` as from text.
        let value = json!({"operation": "UPDATE", "object": {"b": [1]}});
        let request: AdmissionRequest = serde_json::from_value(value).unwrap();
        assert_eq!(request.operation, "UPDATE");
        assert_eq!(request.object, Some(json!({"b": [1]})));
    }

    #[test]
    fn the_gate_sees_the_members_before_the_object() {
        let request =
            r#"{"uid":"u","operation":"UPDATE","namespace":"ns","object":{"a":1},"name":"late"}"#;
        let (decoded, shown) = gated(request, true);
        assert_eq!(decoded.unwrap().request, built(request).unwrap());
        assert_eq!(shown.len(), 1);
        let seen = &shown[0];
        assert_eq!(
            (
                seen.uid.as_str(),
                seen.operation.as_str(),
                seen.namespace.as_str()
            ),
            ("u", "UPDATE", "ns")
        );
        assert_eq!(seen.name, "", "a member after the object is not seen yet");
        // No object, no question.
        let (decoded, shown) = gated(r#"{"uid":"u"}"#, false);
        assert!(decoded.unwrap().skipped_object.is_none());
        assert!(shown.is_empty());
    }

    #[test]
    fn an_object_left_unbuilt_is_peeked_at() {
        let request = r#"{"uid":"u","object":{"kind":"Pod","apiVersion":"v1","spec":{"containers":[{"name":"c"}]},
            "metadata":{"labels":{"name":"no"},"namespace":"ns","name":"p"}},"oldObject":{"kind":"Pod"},"dryRun":false}"#;
        let (decoded, _) = gated(request, false);
        let decoded = decoded.unwrap();
        let mut whole = built(request).unwrap();
        assert_eq!(decoded.request.object, None);
        assert_eq!(decoded.request.old_object, None, "after a skipped object");
        whole.object = None;
        whole.old_object = None;
        assert_eq!(decoded.request, whole);
        let peek = decoded.skipped_object.unwrap();
        assert_eq!(
            peek.stand_in(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
        );

        // As a decoded Value holds them: the last of a repeated member, and
        // only strings.
        let peek_of = |object: &str| {
            let (decoded, _) = gated(&format!(r#"{{"object":{object}}}"#), false);
            decoded.unwrap().skipped_object.unwrap().stand_in()
        };
        assert_eq!(
            peek_of(
                r#"{"kind":"Pod","kind":"Job","apiVersion":1,"metadata":{"name":"a","name":null}}"#
            ),
            json!({"kind": "Job", "metadata": {}})
        );
        assert_eq!(
            peek_of(r#"{"metadata":{"name":"a"},"metadata":["x"]}"#),
            json!({"metadata": {}})
        );
        assert_eq!(peek_of("{}"), json!({"metadata": {}}));
    }

    #[test]
    fn an_object_that_is_not_a_map_is_refused_built_or_not() {
        // Found by tests/fuzz_reviews.rs: conversion to the matched
        // version panicked on a number.
        for (value, found) in [
            ("5", "a number"),
            ("-1", "a number"),
            ("2.5", "a number"),
            (r#""x""#, "a string"),
            ("true", "a boolean"),
            (r#"[1,{"a":[]}]"#, "an array"),
        ] {
            for member in ["object", "oldObject"] {
                let request = format!(r#"{{"uid":"u","{member}":{value}}}"#);
                let expected =
                    format!("request.{member}: expected a JSON object or null, found {found}");
                let refused = built(&request).unwrap_err();
                assert!(refused.starts_with(&expected), "{refused}");
                let (decoded, _) = gated(&request, false);
                assert_eq!(decoded.unwrap_err(), refused, "{member}: {value}");
            }
        }
        let request = r#"{"uid":"u","object":null,"oldObject":null}"#;
        assert_eq!(built(request).unwrap().object, None);
    }

    #[test]
    fn an_object_left_unbuilt_is_checked_as_strictly() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        // The request and the object take two of the 127 levels serde_json
        // allows.
        let deepest = format!(r#"{{"object":{{"a":{}}}}}"#, nested(125));
        let (decoded, _) = gated(&deepest, false);
        assert_eq!(built(&deepest).map(|_| ()), Ok(()));
        assert!(decoded.unwrap().skipped_object.is_some());
        for bad in [
            format!(r#"{{"a":{}}}"#, nested(126)),
            r#"{"a":"\ud800"}"#.to_string(),
            r#"{"a":1e400}"#.to_string(),
            r#"{"a":"\x"}"#.to_string(),
            "{\"a\":\"a\tb\"}".to_string(),
            r#"{"a":[1,]}"#.to_string(),
            r#"{"a":1,}"#.to_string(),
            r#"{"a":01}"#.to_string(),
            r#"{"metadata":{"name":"\ud800"}}"#.to_string(),
            r#"{"kind":"\x"}"#.to_string(),
            r#"{"\x":1}"#.to_string(),
            r#"{"metadata":{"\ud800":1}}"#.to_string(),
            r#"{"a":1"#.to_string(),
        ] {
            let request = format!(r#"{{"uid":"u","object":{bad}}}"#);
            let refused = built(&request).unwrap_err();
            let (decoded, _) = gated(&request, false);
            assert_eq!(decoded.unwrap_err(), refused, "{bad}");
        }
    }
}
