//! A JSONPatch operation's `value` as JSON, the way upstream makes it.
//!
//! kube-apiserver converts the CEL value to a protobuf `structpb.Value`
//! (cel-go's `ConvertToNative`) and marshals that to JSON. This is not the
//! plain conversion of [`super::convert::val_to_json`]: a protobuf `Value`
//! holds every number as a double, so an integer past ±(2^53 − 1), which a
//! double cannot hold exactly, becomes a decimal string, and a whole double
//! is written without a fraction; durations and timestamps become strings;
//! a map key must be a string; `optional.none()` and the library types
//! (`net.IP`, `kubernetes.Quantity`, ...) have no JSON form at all.

use super::convert::as_selected_fields;
use super::object_types::as_struct;
use cel::common::types::{
    CelBool, CelBytes, CelDouble, CelDuration, CelInt, CelList, CelMap, CelNull, CelOptional,
    CelString, CelTimestamp, CelUInt,
};
use cel::common::value::Val;
use serde_json::Value as Json;

/// The largest integer magnitude a JSON number keeps exactly (cel-go's
/// `maxIntJSON`, 2^53 − 1).
const MAX_INT_JSON: i64 = (1 << 53) - 1;

/// Why a value has no `structpb.Value` form, in cel-go's words.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("JSONPath valueExpression evaluated to a type that could not marshal to JSON: {0}")]
pub struct PatchValueError(String);

/// Converts a JSONPatch operation's `value` to the JSON upstream patches
/// with.
///
/// ```
/// use cel::common::types::CelInt;
/// let big = CelInt::from(1i64 << 53);
/// let json = kmutate::cel::structpb::patch_value_to_json(&big).unwrap();
/// assert_eq!(json, serde_json::json!("9007199254740992"));
/// ```
pub fn patch_value_to_json(value: &dyn Val) -> Result<Json, PatchValueError> {
    to_json(value).map_err(PatchValueError)
}

fn to_json(value: &dyn Val) -> Result<Json, String> {
    if let Some(fields) = as_selected_fields(value) {
        return to_json(&fields.to_map());
    }
    if value.downcast_ref::<CelNull>().is_some() {
        return Ok(Json::Null);
    }
    if let Some(b) = value.downcast_ref::<CelBool>() {
        return Ok(Json::Bool(*b.inner()));
    }
    if let Some(i) = value.downcast_ref::<CelInt>() {
        let i = *i.inner();
        return Ok(if (-MAX_INT_JSON..=MAX_INT_JSON).contains(&i) {
            Json::from(i)
        } else {
            Json::String(i.to_string())
        });
    }
    if let Some(u) = value.downcast_ref::<CelUInt>() {
        let u = *u.inner();
        return Ok(if u <= MAX_INT_JSON as u64 {
            Json::from(u)
        } else {
            Json::String(u.to_string())
        });
    }
    if let Some(d) = value.downcast_ref::<CelDouble>() {
        return double_to_json(*d.inner());
    }
    if let Some(s) = value.downcast_ref::<CelString>() {
        return Ok(Json::String(s.inner().to_string()));
    }
    if let Some(b) = value.downcast_ref::<CelBytes>() {
        use base64::Engine;
        return Ok(Json::String(
            base64::engine::general_purpose::STANDARD.encode(b.inner()),
        ));
    }
    if let Some(d) = value.downcast_ref::<CelDuration>() {
        return Ok(Json::String(duration_string(d.inner())));
    }
    if let Some(t) = value.downcast_ref::<CelTimestamp>() {
        return Ok(Json::String(timestamp_string(t.inner())));
    }
    if let Some(list) = value.downcast_ref::<CelList>() {
        return list
            .inner()
            .iter()
            .map(|v| to_json(v.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Json::Array);
    }
    if let Some(map) = value.downcast_ref::<CelMap>() {
        let mut out = serde_json::Map::new();
        for (k, v) in map.inner() {
            let key = k.inner();
            let Some(key) = key.downcast_ref::<CelString>() else {
                return Err(key_error(key.get_type().name()));
            };
            out.insert(key.inner().to_string(), to_json(v.as_ref())?);
        }
        return Ok(Json::Object(out));
    }
    if let Some(st) = as_struct(value) {
        let mut out = serde_json::Map::new();
        for (k, v) in st.fields() {
            out.insert(k.to_string(), to_json(v)?);
        }
        return Ok(Json::Object(out));
    }
    if let Some(opt) = value.downcast_ref::<CelOptional>() {
        return match opt.inner() {
            Some(v) => to_json(v),
            None => Err("optional.none() dereference".into()),
        };
    }
    let name = value.get_type().name();
    if name == "type" {
        return Err("type conversion not supported for 'type'".into());
    }
    Err(format!(
        "type conversion error from '{}' to '*structpb.Value'",
        go_type_name(name)
    ))
}

/// A double as a protobuf `Value` marshals it: whole numbers without a
/// fraction (Go's `encoding/json` writes `2`, not `2.0`), and no NaN or
/// infinity.
fn double_to_json(f: f64) -> Result<Json, String> {
    if !f.is_finite() {
        let what = if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        return Err(format!(
            "json: error calling MarshalJSON for type *structpb.Value: \
             proto: google.protobuf.Value.number_value: invalid {what} value"
        ));
    }
    // Whole and within i64: written as an integer, which is also how the
    // apiserver reads it back (`-0` included, as 0).
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() == 0.0 && (-TWO_POW_63..TWO_POW_63).contains(&f) {
        return Ok(Json::from(f as i64));
    }
    Ok(serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number))
}

/// The text of a non-string map key's refusal: cel-go's `Bool` and its
/// numbers word it differently.
fn key_error(type_name: &str) -> String {
    if type_name == "bool" {
        "type conversion error from bool to 'string'".into()
    } else {
        format!("unsupported type conversion from '{type_name}' to string")
    }
}

/// The name upstream's libraries give their types in a conversion error
/// (their Go type names, where kmutate uses the CEL ones).
fn go_type_name(cel_name: &str) -> &str {
    match cel_name {
        "net.IP" => "IP",
        "net.CIDR" => "CIDR",
        "kubernetes.Quantity" => "Quantity",
        "kubernetes.Semver" => "Semver",
        "kubernetes.URL" => "URL",
        "kubernetes.NamedFormat" => "Format",
        other => other,
    }
}

/// A duration as cel-go's `string()` writes it: seconds as a double in the
/// shortest decimal form, then `s` (`90.5s`, `0.000000001s`).
pub(crate) fn duration_string(d: &chrono::Duration) -> String {
    // As Go's `Duration.Seconds`: whole seconds plus the nanoseconds, each
    // as a double, so large durations round as they do there.
    let secs = d.num_seconds() as f64 + f64::from(d.subsec_nanos()) / 1e9;
    format!("{secs}s")
}

/// A timestamp as Go's `time.RFC3339Nano` writes it, in its own offset:
/// a trimmed fraction, and `Z` only for UTC.
pub(crate) fn timestamp_string(t: &chrono::DateTime<chrono::FixedOffset>) -> String {
    let nanos = t.timestamp_subsec_nanos() % 1_000_000_000;
    let mut out = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    if nanos != 0 {
        let fraction = format!("{nanos:09}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    if t.offset().local_minus_utc() == 0 {
        out.push('Z');
    } else {
        out.push_str(&t.format("%:z").to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Expectations from maporacle (k8s.io/apiserver v0.36.2), each the
    /// value a `JSONPatch{value: ...}` of the named CEL value added.
    #[test]
    fn numbers_as_upstream_marshals_them() {
        let int = |i: i64| patch_value_to_json(&CelInt::from(i)).unwrap();
        assert_eq!(int(9_007_199_254_740_991), json!(9_007_199_254_740_991i64));
        assert_eq!(int(9_007_199_254_740_992), json!("9007199254740992"));
        assert_eq!(
            int(-9_007_199_254_740_991),
            json!(-9_007_199_254_740_991i64)
        );
        assert_eq!(int(-9_007_199_254_740_992), json!("-9007199254740992"));
        let uint = patch_value_to_json(&CelUInt::from(u64::MAX)).unwrap();
        assert_eq!(uint, json!("18446744073709551615"));
        let double = |f: f64| patch_value_to_json(&CelDouble::from(f)).unwrap();
        assert_eq!(double(2.0), json!(2));
        assert_eq!(double(-0.0), json!(0));
        assert_eq!(double(1e20), json!(1e20));
        assert_eq!(double(2.5e-7), json!(2.5e-7));
    }

    #[test]
    fn durations_and_timestamps_as_upstream_writes_them() {
        let d = |text: &str| {
            let (secs, nanos) = text.split_once('.').unwrap_or((text, "0"));
            let nanos: i64 = format!("{nanos:0<9}").parse().unwrap();
            let secs: i64 = secs.parse().unwrap();
            duration_string(
                &(chrono::Duration::seconds(secs) + chrono::Duration::nanoseconds(nanos)),
            )
        };
        assert_eq!(d("90.5"), "90.5s");
        assert_eq!(d("3600"), "3600s");
        assert_eq!(d("0"), "0s");
        assert_eq!(d("0.000000001"), "0.000000001s");
        assert_eq!(d("123456789.123456789"), "123456789.12345679s");
        assert_eq!(
            duration_string(&-chrono::Duration::milliseconds(1500)),
            "-1.5s"
        );
        let t = |text: &str| timestamp_string(&chrono::DateTime::parse_from_rfc3339(text).unwrap());
        assert_eq!(t("2020-01-01T00:00:00.500Z"), "2020-01-01T00:00:00.5Z");
        assert_eq!(t("2020-01-01T00:00:00Z"), "2020-01-01T00:00:00Z");
        assert_eq!(t("2020-01-01T00:00:00+01:00"), "2020-01-01T00:00:00+01:00");
        assert_eq!(
            t("2020-01-01T00:00:00.120+01:30"),
            "2020-01-01T00:00:00.12+01:30"
        );
    }

    // `?value: x` leaves the value out when `x` is none, `value: x` keeps the
    // optional (upstream then fails to marshal it). maporacle (v0.36.2):
    // `?value: optional.none()` adds null, `?value: optional.of(2)` adds 2,
    // `value: optional.of(3)` adds 3, `value: optional.none()` fails.
    #[test]
    fn optional_and_plain_patch_values() {
        let env = crate::cel::CelEnvironment::shared();
        let value = |field: &str| {
            let src = format!("JSONPatch{{op: 'add', path: '/a', {field}}}");
            let e = env.compile(&src).unwrap();
            let ctx = env.context();
            let v = e.evaluate(&ctx).unwrap();
            let st = crate::cel::object_types::as_struct(&*v).expect("a JSONPatch");
            st.field("value").map(patch_value_to_json)
        };
        assert_eq!(value("?value: optional.none()"), None);
        assert_eq!(
            value("?value: optional.of(2)"),
            Some(Ok(serde_json::json!(2)))
        );
        assert_eq!(
            value("value: optional.of(3)"),
            Some(Ok(serde_json::json!(3)))
        );
        assert_eq!(
            value("value: optional.none()").map(|r| r.map_err(|e| e.to_string())),
            Some(Err("JSONPath valueExpression evaluated to a type that could not marshal to JSON: optional.none() dereference".to_string()))
        );
    }

    #[test]
    fn what_has_no_json_form_is_refused_in_upstreams_words() {
        let err = |v: &dyn Val| patch_value_to_json(v).unwrap_err().to_string();
        let prefix =
            "JSONPath valueExpression evaluated to a type that could not marshal to JSON: ";
        assert_eq!(
            err(&CelOptional::from(None::<Box<dyn Val>>)),
            format!("{prefix}optional.none() dereference")
        );
        assert_eq!(err(&CelDouble::from(f64::NAN)), format!("{prefix}json: error calling MarshalJSON for type *structpb.Value: proto: google.protobuf.Value.number_value: invalid NaN value"));
        assert_eq!(
            key_error("bool"),
            "type conversion error from bool to 'string'"
        );
        assert_eq!(
            key_error("uint"),
            "unsupported type conversion from 'uint' to string"
        );
    }
}
