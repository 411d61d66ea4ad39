//! The engine as the webhook uses it, on the benchmark fixture: decoding a
//! review for it, interrupted admissions, and admitting its answer again.

use crate::authorizer::AlwaysDeny;
use crate::dispatch::{AdmissionObserver, ObjectOrigin, Outcome};
use crate::engine::*;
use crate::matching::complete_request;
use crate::request::AdmissionRequest;
use crate::webhook::review::{self, decode_review, DecodedBody};
use std::cell::Cell;
use std::path::Path;

/// Counts mutations; asks the admission to stop once `stop_after` ran.
struct StopAfter {
    stop_after: usize,
    mutations: Cell<usize>,
}

impl AdmissionObserver for StopAfter {
    fn mutation(&self, _: &str, _: &str, _: std::time::Duration, _: Option<&str>) {
        self.mutations.set(self.mutations.get() + 1);
    }

    fn interrupted(&self) -> bool {
        self.mutations.get() >= self.stop_after
    }
}

/// The benchmark fixture: ten policies that all patch the recorded Pod.
fn fixture() -> (Engine, AdmissionRequest) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/webhook");
    let engine = Engine::load(&EngineSources::under(&dir), Box::new(AlwaysDeny));
    assert!(engine.problems().is_empty(), "{:?}", engine.problems());
    let body = std::fs::read(dir.join("review.json")).expect("fixture review");
    let mut request = crate::webhook::review::decode(&body)
        .expect("fixture decodes")
        .request;
    complete_request(&mut request, engine.resources());
    (engine, request)
}

#[test]
fn an_interrupted_admission_runs_no_further_binding() {
    let (engine, request) = fixture();
    let whole = StopAfter {
        stop_after: usize::MAX,
        mutations: Cell::new(0),
    };
    assert!(matches!(
        engine.admit(&request, &whole),
        Outcome::Admitted { .. }
    ));
    assert!(whole.mutations.get() > 3, "{}", whole.mutations.get());

    let stopped = StopAfter {
        stop_after: 3,
        mutations: Cell::new(0),
    };
    match engine.admit(&request, &stopped) {
        Outcome::Denied { code, .. } => assert_eq!(code, 500),
        other => panic!("not stopped: {other:?}"),
    }
    // Each fixture binding runs one mutation: none after the third.
    assert_eq!(stopped.mutations.get(), 3);
}

// The fixture's policies, as most policies, leave alone an object they
// already set up: admitting their own result again (the object's next
// update) says so, takes no snapshot of the object, and the answer
// carries no patch.
#[test]
fn admitting_the_mutated_object_again_changes_nothing() {
    use crate::webhook::review::Answer;
    let (engine, mut request) = fixture();
    let answer = |engine: &Engine, request: &AdmissionRequest| {
        let whole = StopAfter {
            stop_after: usize::MAX,
            mutations: Cell::new(0),
        };
        match engine.admit_prematched(request.clone(), None, &whole, ObjectOrigin::KubeApiserver) {
            (
                Outcome::Admitted {
                    object,
                    warnings,
                    changed,
                },
                original,
            ) => (
                (changed, original.is_some()),
                Answer::admit_from(original.as_ref(), &object, warnings),
                object,
            ),
            (other, _) => panic!("not admitted: {other:?}"),
        }
    };
    let (changed, first, mutated) = answer(&engine, &request);
    assert_eq!(changed, (true, true));
    assert!(first.patch.is_some());
    request.object = Some(mutated.clone());
    let (changed, again, unchanged) = answer(&engine, &request);
    assert_eq!(changed, (false, false), "the second admission wrote");
    assert_eq!(unchanged, mutated);
    assert_eq!(again, Answer::allow());
}

/// The fixture's review with `change` made to its request.
fn fixture_body(change: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/webhook");
    let body = std::fs::read(dir.join("review.json")).expect("fixture review");
    let mut review: serde_json::Value = serde_json::from_slice(&body).expect("fixture JSON");
    change(&mut review["request"]);
    review::encode_in_request_order(&review)
}

#[test]
fn only_a_request_the_policies_may_act_on_has_its_object_built() {
    let (engine, _) = fixture();
    let decoded = |body: &[u8]| decode_review(&engine, body).expect("decodes");
    // The fixture's Pod CREATE: every policy matches.
    let body = fixture_body(|_| {});
    assert!(matches!(decoded(&body), DecodedBody::Review(r) if r.request.object.is_some()));
    // An update (the policies are all on CREATE), and a ConfigMap.
    for change in [
        (|r: &mut serde_json::Value| {
            r["operation"] = "UPDATE".into();
            r["oldObject"] = r["object"].clone();
        }) as fn(&mut serde_json::Value),
        |r| {
            r["kind"]["kind"] = "ConfigMap".into();
            r["resource"]["resource"] = "configmaps".into();
        },
    ] {
        let body = fixture_body(change);
        let DecodedBody::Unmatched(review) = decoded(&body) else {
            panic!("built: {}", String::from_utf8_lossy(&body));
        };
        let mut whole = review::decode(&body).expect("decodes").request;
        complete_request(&mut whole, engine.resources());
        assert!(engine.matched(&engine.prematch(&whole)).is_empty());
        whole.object = None;
        whole.old_object = None;
        assert_eq!(review.request, whole);
    }
    // Members after the object decide: the kind says ConfigMap, but the
    // resource, written after the object, is pods.
    let review: serde_json::Value =
        serde_json::from_slice(&fixture_body(|_| {})).expect("fixture JSON");
    let request = &review["request"];
    let member = |key: &str| format!("\"{key}\":{}", request[key]);
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"kind":{{"group":"","version":"v1","kind":"ConfigMap"}},{},{},{},{}}}}}"#,
        member("object"),
        member("resource"),
        member("namespace"),
        member("operation"),
    );
    let DecodedBody::Review(built) = decoded(body.as_bytes()) else {
        panic!("left unbuilt: {body}");
    };
    assert_eq!(
        built.request,
        review::decode(body.as_bytes()).expect("decodes").request
    );
    assert!(built.request.object.is_some());
}

// The shortcut `ObjectOrigin::KubeApiserver` allows (no whole-object decode
// or Go round trip before the first mutation) holds for what kube-apiserver
// sends: its answer is the one the full checks give. Both reviews were
// recorded from kube-apiserver; between them they run apply configurations
// and JSON patches, before and after one another.
#[test]
fn an_object_kube_apiserver_sent_is_answered_alike_with_its_origin_trusted() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let library = EngineSources {
        policies: vec![root.join("policies")],
        bindings: vec![root.join("bindings")],
        resources: vec![root.join("examples")],
    };
    for (sources, review_file) in [
        (
            EngineSources::under(&root.join("bench/webhook")),
            "bench/webhook/review.json",
        ),
        (library, "bench/webhook/examples-pod-review.json"),
    ] {
        let engine = Engine::load(&sources, Box::new(AlwaysDeny));
        assert!(engine.problems().is_empty(), "{:?}", engine.problems());
        let body = std::fs::read(root.join(review_file)).expect("review");
        let mut request = review::decode(&body).expect("decodes").request;
        complete_request(&mut request, engine.resources());
        let answer = |origin| {
            let whole = StopAfter {
                stop_after: usize::MAX,
                mutations: Cell::new(0),
            };
            match engine.admit_prematched(request.clone(), None, &whole, origin) {
                (
                    Outcome::Admitted {
                        object, warnings, ..
                    },
                    original,
                ) => {
                    let answer = review::Answer::admit_from(original.as_ref(), &object, warnings);
                    (answer, object, whole.mutations.get())
                }
                (other, _) => panic!("{review_file}: not admitted: {other:?}"),
            }
        };
        let trusted = answer(ObjectOrigin::KubeApiserver);
        assert!(trusted.0.patch.is_some(), "{review_file}: no patch");
        assert!(trusted.2 > 3, "{review_file}: {} mutations", trusted.2);
        assert_eq!(trusted, answer(ObjectOrigin::Written), "{review_file}");
    }
}
