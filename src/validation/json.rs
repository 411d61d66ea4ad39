//! Reading the untyped object: a field of the wrong JSON type reads as
//! absent here (the API server's decoding, or the CRD schema, refuses it
//! before validation runs).

use serde_json::Value as Json;

/// The string at `key`, if there is one.
pub(super) fn str_at<'a>(v: &'a Json, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Json::as_str)
}

/// The list at `key` (empty when absent).
pub(super) fn list_at<'a>(v: &'a Json, key: &str) -> &'a [Json] {
    v.get(key)
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// The strings of the list at `key` (other items left out).
pub(super) fn strings_at<'a>(v: &'a Json, key: &str) -> Vec<&'a str> {
    list_at(v, key).iter().filter_map(Json::as_str).collect()
}

/// The object at `key`, when present and not null.
pub(super) fn object_at<'a>(v: &'a Json, key: &str) -> Option<&'a Json> {
    v.get(key).filter(|x| !x.is_null())
}
