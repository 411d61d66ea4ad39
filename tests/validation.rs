//! kmutate's validation of policies and bindings (issue 47) against what
//! kube-apiserver v1.36.2 answered to every object of the corpus: the same
//! verdict and, for a refusal, the same message.

mod support;

use kmutate::validation::{validate, Validated};
use support::validation_corpus::{corpus, recorded};

#[test]
fn every_corpus_object_gets_the_built_in_apis_answer() {
    let corpus = corpus();
    let recorded = recorded();
    let invalid = corpus.iter().filter(|e| !e.valid).count();
    assert!(invalid >= 50, "{invalid} invalid objects");
    assert!(
        corpus.len() - invalid >= invalid,
        "fewer valid than invalid"
    );
    let mut failures = Vec::new();
    for entry in &corpus {
        let answer = recorded.get(&entry.name).unwrap_or_else(|| {
            panic!(
                "{}: not recorded; run tools/record_validation.py",
                entry.name
            )
        });
        assert_eq!(
            answer.code == 201,
            entry.valid,
            "{}: the corpus and the recording disagree",
            entry.name
        );
        let got = match validate(&entry.object, None) {
            Validated::Accepted => String::new(),
            Validated::Refused(r) => r.message("admissionregistration.k8s.io"),
            Validated::NotOurs => "not a policy or binding".into(),
        };
        if got != answer.message {
            failures.push(format!(
                "{}:\n  kube-apiserver: {}\n  kmutate:        {}",
                entry.name, answer.message, got
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        corpus.len(),
        failures.join("\n")
    );
    // No stale recording either.
    for name in recorded.keys() {
        assert!(
            corpus.iter().any(|e| &e.name == name),
            "{name}: recorded, not in the corpus"
        );
    }
}
