//! `POST /validate`: the validating webhook that refuses a `kmutate.dev`
//! policy or binding the built-in API would refuse, with the built-in
//! API's message (see [`crate::validation`]).
//!
//! Only CREATE and UPDATE are judged; on an UPDATE the stored object is the
//! review's `oldObject`, so that upstream's allowance for what was accepted
//! once applies.

use crate::validation::field::Problem;
use crate::validation::{validate, Refusal, Validated};
use serde_json::{json, Value as Json};

/// The path kube-apiserver POSTs the reviews of `kmutate.dev` objects to
/// (the ValidatingWebhookConfiguration's `clientConfig.service.path`).
pub const VALIDATE_PATH: &str = "/validate";

/// The group the webhook's objects are served in, which its messages name.
const GROUP: &str = "kmutate.dev";

/// The AdmissionReview answering the review `body`; `Err` (a 400) when the
/// body is no AdmissionReview.
pub fn answer(body: &[u8]) -> Result<Json, String> {
    let review: Json =
        serde_json::from_slice(body).map_err(|e| format!("request body is not JSON: {e}"))?;
    let api_version = review
        .get("apiVersion")
        .and_then(Json::as_str)
        .filter(|v| v.starts_with("admission.k8s.io/"))
        .ok_or("apiVersion: expected admission.k8s.io/v1 or v1beta1")?;
    let request = review
        .get("request")
        .filter(|r| r.is_object())
        .ok_or("request: expected an object")?;
    let uid = request.get("uid").cloned().unwrap_or(Json::Null);
    let operation = request.get("operation").and_then(Json::as_str);
    let verdict = match (operation, request.get("object")) {
        (Some("CREATE" | "UPDATE"), Some(object)) => {
            validate(object, request.get("oldObject").filter(|o| o.is_object()))
        }
        _ => Validated::NotOurs,
    };
    let response = match verdict {
        Validated::Refused(refusal) => json!({
            "uid": uid,
            "allowed": false,
            "status": status_of(&refusal),
        }),
        Validated::Accepted | Validated::NotOurs => json!({"uid": uid, "allowed": true}),
    };
    Ok(json!({
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "response": response,
    }))
}

/// The `Status` of a 422 as the API server builds it, causes included.
fn status_of(refusal: &Refusal) -> Json {
    let causes: Vec<Json> = refusal
        .errors
        .0
        .iter()
        .map(|e| {
            json!({"reason": cause_reason(&e.problem), "message": e.problem.to_string(), "field": e.field})
        })
        .collect();
    json!({
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": refusal.message(GROUP),
        "details": {
            "name": refusal.name,
            "group": GROUP,
            "kind": refusal.kind.name(),
            "causes": causes,
        },
    })
}

/// The `metav1.CauseType` of a field error.
fn cause_reason(problem: &Problem) -> &'static str {
    match problem {
        Problem::Required(_) => "FieldValueRequired",
        Problem::Invalid { .. } => "FieldValueInvalid",
        Problem::NotSupported { .. } => "FieldValueNotSupported",
        Problem::Duplicate(_) => "FieldValueDuplicate",
        Problem::TooMany { .. } => "FieldValueTooMany",
        Problem::Forbidden(_) => "FieldValueForbidden",
        Problem::Internal(_) => "InternalError",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(operation: &str, object: Json, old: Option<Json>) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": operation, "object": object, "oldObject": old},
        })
        .to_string()
        .into_bytes()
    }

    fn policy(spec: Json) -> Json {
        json!({"apiVersion": "kmutate.dev/v1", "kind": "MutatingAdmissionPolicy",
               "metadata": {"name": "p"}, "spec": spec})
    }

    fn valid_spec() -> Json {
        json!({
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "mutations": [{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": "Object{}"}}],
        })
    }

    #[test]
    fn a_valid_policy_is_allowed() {
        let out = answer(&review("CREATE", policy(valid_spec()), None)).unwrap();
        assert_eq!(out["response"], json!({"uid": "u-1", "allowed": true}));
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    }

    // The message kube-apiserver v1.36.2 gives the built-in object
    // (tests/validation/recorded.json), in the kmutate.dev group.
    #[test]
    fn an_invalid_policy_is_refused_with_the_built_in_message_and_causes() {
        let mut spec = valid_spec();
        spec["failurePolicy"] = json!("Sometimes");
        let out = answer(&review("CREATE", policy(spec), None)).unwrap();
        let status = &out["response"]["status"];
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(status["code"], 422);
        assert_eq!(
            status["message"],
            r#"MutatingAdmissionPolicy.kmutate.dev "p" is invalid: spec.failurePolicy: Unsupported value: "Sometimes": supported values: "Fail", "Ignore""#
        );
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "FieldValueNotSupported", "field": "spec.failurePolicy",
                    "message": r#"Unsupported value: "Sometimes": supported values: "Fail", "Ignore""#}])
        );
    }

    #[test]
    fn an_update_keeping_stored_match_conditions_is_not_refused_for_them() {
        let mut spec = valid_spec();
        spec["matchConditions"] = json!([{"name": "c", "expression": "'not a bool'"}]);
        let created = answer(&review("CREATE", policy(spec.clone()), None)).unwrap();
        assert_eq!(created["response"]["allowed"], false);
        let mut changed = spec.clone();
        changed["failurePolicy"] = json!("Ignore");
        let updated = answer(&review("UPDATE", policy(changed), Some(policy(spec)))).unwrap();
        assert_eq!(updated["response"]["allowed"], true, "{updated}");
    }

    #[test]
    fn deletes_and_other_kinds_pass() {
        let out = answer(&review("DELETE", Json::Null, Some(policy(json!({}))))).unwrap();
        assert_eq!(out["response"]["allowed"], true);
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(
            answer(&review("CREATE", other, None)).unwrap()["response"]["allowed"],
            true
        );
    }

    #[test]
    fn what_is_no_review_is_a_clear_error() {
        assert!(answer(b"nope")
            .unwrap_err()
            .starts_with("request body is not JSON"));
        assert_eq!(
            answer(br#"{"apiVersion": "v1"}"#).unwrap_err(),
            "apiVersion: expected admission.k8s.io/v1 or v1beta1"
        );
        assert_eq!(
            answer(br#"{"apiVersion": "admission.k8s.io/v1", "request": 1}"#).unwrap_err(),
            "request: expected an object"
        );
    }
}
