//! Issue 47 on the real kube-apiserver v1.36.2 (`../shared/upstream`): every
//! object of the validation corpus (`tests/validation/corpus.yaml`) created
//! (server-side dry run) as a built-in `admissionregistration.k8s.io/v1`
//! object and as a `kmutate.dev/v1` one, with `deploy/crds/` installed and
//! kmutate's `POST /validate` registered as `deploy/validating-webhook.yaml`
//! registers it:
//!
//! - the built-in API still answers what was recorded;
//! - kmutate.dev gets the same verdict; a refusal by the webhook carries the
//!   built-in message (in the kmutate.dev group) after the webhook's prefix,
//!   one by the CRD schema names a field the built-in message names;
//! - with kmutate stopped (the webhook's failurePolicy is Ignore), the CRD
//!   schema alone still refuses every object marked `schema: true`, and
//!   every valid object is still accepted.

mod support;

use kmutate::engine::EngineSources;
use serde_json::{json, Value};
use std::time::Duration;
use support::kas::{self, Kas};
use support::validation_corpus::{corpus, recorded};
use support::{config, eventually, run, scratch, started};

const PREFIX: &str = "admission webhook \"validate.kmutate.dev\" denied the request: ";

fn as_kmutate_dev(object: &Value) -> Value {
    let mut o = object.clone();
    o["apiVersion"] = json!("kmutate.dev/v1");
    o
}

/// `deploy/validating-webhook.yaml`, calling `url` with `ca` instead of the
/// in-cluster Service.
fn registration(url: &str, ca: &[u8]) -> Value {
    use base64::Engine as _;
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/validating-webhook.yaml"),
    )
    .unwrap();
    let mut webhook = kmutate::api::load::parse_documents(&text)
        .unwrap()
        .remove(0);
    webhook["metadata"]["annotations"] = json!({});
    webhook["webhooks"][0]["clientConfig"] = json!({
        "url": url,
        "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
    });
    webhook
}

/// The field path of the first error of a 422 message.
fn first_field(message: &str) -> &str {
    let errors = message.split_once(" is invalid: ").map_or("", |(_, e)| e);
    let errors = errors.strip_prefix('[').unwrap_or(errors);
    errors.split_once(": ").map_or("", |(f, _)| f)
}

fn status_code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

#[test]
fn kmutate_dev_objects_get_the_built_in_apis_verdicts() {
    let Some(kas) = Kas::start("validation") else {
        return;
    };
    let dir = scratch("validation_api", "corpus");
    run(Duration::from_secs(900), async {
        let client = kas.client().await;
        kas::install_crds(&client).await;
        let server = started(config(&dir, EngineSources::default())).await;
        let ca = std::fs::read(server.ca_bundle().expect("self-signed CA")).unwrap();
        let url = format!("https://127.0.0.1:{}/validate", server.addr().port());
        kas::create(&client, &registration(&url, &ca))
            .await
            .unwrap();

        let corpus = corpus();
        let recorded = recorded();
        // In force once a refusal only the webhook gives comes.
        let probe = corpus
            .iter()
            .find(|e| e.name == "policy-mutation-type-error")
            .unwrap();
        eventually(Duration::from_secs(30), || async {
            let e = kas::dry_run_create(&client, &as_kmutate_dev(&probe.object))
                .await
                .err()?;
            kas::message(&e).starts_with(PREFIX).then_some(())
        })
        .await
        .expect("the validating webhook never took effect");

        let mut failures = Vec::new();
        let (mut by_webhook, mut by_schema) = (0, 0);
        for entry in &corpus {
            let answer = &recorded[&entry.name];
            let builtin = kas::dry_run_create(&client, &entry.object).await;
            let builtin_message = builtin.as_ref().err().map(kas::message).unwrap_or_default();
            if builtin_message != answer.message {
                failures.push(format!(
                    "{}: the built-in API now answers {builtin_message:?}, recorded {:?}",
                    entry.name, answer.message
                ));
                continue;
            }
            let ours = kas::dry_run_create(&client, &as_kmutate_dev(&entry.object)).await;
            match (entry.valid, ours) {
                (true, Ok(_)) => {}
                (true, Err(e)) => failures.push(format!(
                    "{}: valid, kmutate.dev refused: {}",
                    entry.name,
                    kas::message(&e)
                )),
                (false, Ok(_)) => {
                    failures.push(format!("{}: invalid, kmutate.dev accepted", entry.name))
                }
                (false, Err(e)) => {
                    let message = kas::message(&e);
                    if let Some(rest) = message.strip_prefix(PREFIX) {
                        by_webhook += 1;
                        let want = answer.message.replacen(
                            ".admissionregistration.k8s.io \"",
                            ".kmutate.dev \"",
                            1,
                        );
                        if rest != want || status_code(&e) != 422 {
                            failures.push(format!(
                                "{}: the webhook answered {} {rest:?}, want 422 {want:?}",
                                entry.name,
                                status_code(&e)
                            ));
                        }
                    } else {
                        by_schema += 1;
                        let field = first_field(&message);
                        if field.is_empty() || !answer.message.contains(&format!("{field}: ")) {
                            failures.push(format!(
                                "{}: refused for {field:?}, which the built-in message does not name: {message:?}",
                                entry.name
                            ));
                        }
                    }
                }
            }
        }
        eprintln!(
            "{} objects: {by_webhook} refused by the webhook, {by_schema} by the CRD schema",
            corpus.len()
        );

        // An UPDATE is judged too: a stored policy changed to one whose
        // mutation does not compile is refused with the built-in words for
        // that expression (as recorded for policy-mutation-type-error).
        let base = corpus.iter().find(|e| e.name == "policy-base").unwrap();
        let mut fresh = as_kmutate_dev(&base.object);
        fresh["metadata"]["name"] = json!("policy-updated");
        let stored = kas::create(&client, &fresh).await.unwrap();
        let mut broken = stored.clone();
        broken["spec"]["mutations"][0]["applyConfiguration"]["expression"] = json!("1 + 'a'");
        let api = kas::api_for(&client, &broken).await;
        let refused = api
            .replace(
                "policy-updated",
                &kube::api::PostParams::default(),
                &serde_json::from_value(broken).unwrap(),
            )
            .await
            .expect_err("an UPDATE to a mutation that does not compile is refused");
        let why = recorded["policy-mutation-type-error"]
            .message
            .split_once(" is invalid: ")
            .unwrap()
            .1
            .to_string();
        assert_eq!(
            kas::message(&refused),
            format!(
                "{PREFIX}MutatingAdmissionPolicy.kmutate.dev \"policy-updated\" is invalid: {why}"
            )
        );

        // kmutate down: the CRD schema alone.
        server.shutdown().await;
        for entry in &corpus {
            let ours = kas::dry_run_create(&client, &as_kmutate_dev(&entry.object)).await;
            match (entry.valid, entry.schema, ours) {
                (true, _, Err(e)) => failures.push(format!(
                    "{}: valid, refused while kmutate is down: {}",
                    entry.name,
                    kas::message(&e)
                )),
                (false, true, Ok(_)) => failures.push(format!(
                    "{}: marked schema: true, accepted while kmutate is down",
                    entry.name
                )),
                (false, false, Err(e)) => failures.push(format!(
                    "{}: not marked schema: true, yet refused while kmutate is down: {}",
                    entry.name,
                    kas::message(&e)
                )),
                _ => {}
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}
