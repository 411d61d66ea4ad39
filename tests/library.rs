//! Checks of the shipped policy library (`policies/`, `bindings/`,
//! `examples/params/`) and of its conformance cases (`conformance/library/`).
//!
//! The conformance format holds policies inline, so each library case
//! carries a copy of the policy and binding it tests (written by
//! `tools/sync_library_cases.py`). These tests make the copies and the files
//! impossible to drift apart, and check that every policy is documented and
//! covered: a case that changes the object and a case that leaves it alone.
//! The cases themselves run in `kmutate conformance conformance` (CI).

mod support;

use kmutate::conformance::normalize;
use kmutate::dispatch::PolicySet;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use support::{documents, single_document};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The `*.yaml` files of a repository folder, by file stem.
fn yaml_files(dir: &str) -> BTreeMap<String, PathBuf> {
    std::fs::read_dir(repo(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .collect()
}

/// The shipped policies (by name) and bindings (by name).
fn library() -> (BTreeMap<String, Value>, BTreeMap<String, Value>) {
    let policies = yaml_files("policies")
        .into_iter()
        .map(|(stem, p)| (stem, single_document(&p)))
        .collect();
    let bindings = yaml_files("bindings")
        .into_iter()
        .map(|(stem, p)| (stem, single_document(&p)))
        .collect();
    (policies, bindings)
}

fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or("")
}

#[test]
fn at_least_twelve_policies_each_named_after_its_file_with_one_binding() {
    let (policies, bindings) = library();
    assert!(policies.len() >= 12, "{} policies", policies.len());
    for (stem, policy) in &policies {
        assert_eq!(policy["kind"], "MutatingAdmissionPolicy", "{stem}");
        assert_eq!(name(policy), stem, "policies/{stem}.yaml: name");
        let binding = bindings
            .get(stem)
            .unwrap_or_else(|| panic!("bindings/{stem}.yaml is missing"));
        assert_eq!(binding["kind"], "MutatingAdmissionPolicyBinding", "{stem}");
        assert_eq!(name(binding), stem, "bindings/{stem}.yaml: name");
        assert_eq!(binding["spec"]["policyName"], stem.as_str());
        for doc in [policy, binding] {
            assert_eq!(
                doc["metadata"]["labels"]["app.kubernetes.io/part-of"], "kmutate-library",
                "{stem}: the library label selects every library object"
            );
        }
    }
    for stem in bindings.keys() {
        assert!(
            policies.contains_key(stem),
            "bindings/{stem}.yaml has no policy"
        );
    }
}

/// The value after `# key:` in a file's leading comment block.
fn header_field<'a>(header: &'a [&'a str], key: &str) -> Option<&'a str> {
    header
        .iter()
        .find_map(|l| l.strip_prefix(&format!("# {key}:")))
        .map(str::trim)
}

#[test]
fn every_policy_header_says_what_it_does_and_matches_and_agrees_with_the_spec() {
    for (stem, path) in yaml_files("policies") {
        let text = std::fs::read_to_string(&path).unwrap();
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
        for key in ["What it does", "Matches", "Patch"] {
            assert!(
                header_field(&header, key).is_some_and(|v| !v.is_empty()),
                "policies/{stem}.yaml: the header has no `# {key}:` line"
            );
        }
        let spec = &single_document(&path)["spec"];
        for key in ["failurePolicy", "reinvocationPolicy"] {
            let said = header_field(&header, key)
                .unwrap_or_else(|| panic!("policies/{stem}.yaml: no `# {key}:` line"));
            let set = spec[key]
                .as_str()
                .unwrap_or_else(|| panic!("policies/{stem}.yaml: spec.{key} is not set"));
            assert!(
                said.starts_with(&format!("{set}, ")),
                "policies/{stem}.yaml: the header says `{key}: {said}`, the spec says {set}"
            );
        }
        let has_params = !spec["paramKind"].is_null();
        assert_eq!(
            header_field(&header, "Params").is_some(),
            has_params,
            "policies/{stem}.yaml: a `# Params:` line exactly when paramKind is set"
        );
    }
}

#[test]
fn the_library_and_its_params_load_and_compile_without_problems() {
    let loaded = kmutate::api::load::load_paths(&[
        repo("policies"),
        repo("bindings"),
        repo("examples/params"),
    ]);
    assert!(loaded.errors.is_empty(), "{:?}", loaded.errors);
    assert_eq!(loaded.policies.len(), yaml_files("policies").len());
    let (_set, errors) = PolicySet::new(loaded.policies, loaded.bindings);
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn every_param_reference_has_an_example_param_object() {
    let (policies, bindings) = library();
    let examples: Vec<Value> = yaml_files("examples/params")
        .values()
        .flat_map(|p| documents(p))
        .collect();
    for (stem, binding) in &bindings {
        let kind = &policies[stem]["spec"]["paramKind"];
        let param_ref = &binding["spec"]["paramRef"];
        assert_eq!(
            kind.is_null(),
            param_ref.is_null(),
            "{stem}: paramKind and paramRef"
        );
        if kind.is_null() {
            continue;
        }
        assert_eq!(
            param_ref["parameterNotFoundAction"], "Allow",
            "{stem}: a missing param must not deny every request"
        );
        let found = examples.iter().any(|e| {
            e["apiVersion"] == kind["apiVersion"]
                && e["kind"] == kind["kind"]
                && e["metadata"]["name"] == param_ref["name"]
                && (param_ref["namespace"].is_null()
                    || e["metadata"]["namespace"] == param_ref["namespace"])
        });
        assert!(
            found,
            "{stem}: no example param for {param_ref} in examples/params"
        );
    }
}

/// Every case of `conformance/library/`.
fn library_cases() -> Vec<(String, Value)> {
    yaml_files("conformance/library")
        .into_iter()
        .flat_map(|(stem, path)| {
            documents(&path)
                .into_iter()
                .map(move |case| (stem.clone(), case))
        })
        .collect()
}

#[test]
fn library_cases_hold_exact_copies_of_the_shipped_policies_and_bindings() {
    let (policies, bindings) = library();
    for (file, case) in library_cases() {
        let case_name = case["name"].as_str().unwrap_or("");
        assert!(
            case_name.starts_with(&format!("library-{file}-")),
            "conformance/library/{file}.yaml: case {case_name:?} is not named library-{file}-..."
        );
        for (key, shipped) in [("policies", &policies), ("bindings", &bindings)] {
            let items = case[key].as_array().map(Vec::as_slice).unwrap_or(&[]);
            assert!(!items.is_empty(), "{case_name}: no {key}");
            for item in items {
                let n = name(item);
                let file_copy = shipped.get(n).unwrap_or_else(|| {
                    panic!("{case_name}: {key} item {n:?} is not a library file")
                });
                assert_eq!(
                    item, file_copy,
                    "{case_name}: the {key} item {n:?} differs from {key}/{n}.yaml; \
                     run python3 tools/sync_library_cases.py"
                );
            }
        }
    }
}

#[test]
fn every_policy_has_a_case_that_changes_the_object_and_one_that_does_not() {
    let (policies, _) = library();
    let mut changes: BTreeMap<&str, (usize, usize)> =
        policies.keys().map(|k| (k.as_str(), (0, 0))).collect();
    let cases = library_cases();
    for (_, case) in &cases {
        let Some(expected) = case["expect"].get("object") else {
            continue;
        };
        let changed = normalize(expected) != normalize(&case["object"]);
        for p in case["policies"].as_array().into_iter().flatten() {
            if let Some(count) = changes.get_mut(name(p)) {
                if changed {
                    count.0 += 1;
                } else {
                    count.1 += 1;
                }
            }
        }
    }
    for (policy, (changing, unchanged)) in changes {
        assert!(
            changing > 0,
            "{policy}: no case where it changes the object"
        );
        assert!(
            unchanged > 0,
            "{policy}: no case where it leaves the object alone"
        );
    }
}

/// `kmutate serve` loads its default folders (`policies`, `bindings`) with
/// this engine and serves what loads; problems would be counted in
/// `kmutate_policy_load_errors`.
#[test]
fn serve_loads_the_default_folders_without_problems() {
    use kmutate::authorizer::AlwaysDeny;
    use kmutate::engine::{Engine, EngineSources};
    for resources in [vec![], vec![repo("examples/params")]] {
        let sources = EngineSources {
            policies: vec![repo("policies")],
            bindings: vec![repo("bindings")],
            resources,
        };
        let engine = Engine::load(&sources, Box::new(AlwaysDeny));
        assert!(engine.problems().is_empty(), "{:?}", engine.problems());
        assert_eq!(engine.policies(), yaml_files("policies").len());
        assert_eq!(engine.bindings(), yaml_files("bindings").len());
    }
}

#[test]
fn the_all_policies_cases_run_the_whole_library() {
    let (policies, bindings) = library();
    let whole = library_cases()
        .into_iter()
        .filter(|(file, _)| file == "all-policies")
        .collect::<Vec<_>>();
    assert!(
        !whole.is_empty(),
        "conformance/library/all-policies.yaml has cases"
    );
    for (_, case) in whole {
        for (key, shipped) in [("policies", &policies), ("bindings", &bindings)] {
            let names: Vec<&str> = case[key].as_array().unwrap().iter().map(name).collect();
            let all: Vec<&str> = shipped.keys().map(String::as_str).collect();
            assert_eq!(
                names, all,
                "{}: every library {key}, in order",
                case["name"]
            );
        }
    }
}

/// Whether `expression` has the identifier `word` (not inside a longer name
/// such as `namespaceObject`).
fn mentions(expression: &str, word: &str) -> bool {
    expression.match_indices(word).any(|(at, _)| {
        let before = expression[..at].chars().next_back();
        let after = expression[at + word.len()..].chars().next();
        let part_of_name = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !part_of_name(before) && (word.ends_with('.') || !part_of_name(after))
    })
}

/// Upstream compiles variables and match conditions without the patch types
/// (`plugin/cel/compile.go` createEnvForOpts: `JSONPatch`, the `Object`
/// types and `jsonpatch.escapeKey` come only with HasPatchTypes, which
/// `mutating/compilation.go` sets for the mutations alone), so a policy
/// using them there fails on kube-apiserver, as in kmutate
/// (conformance/typecheck/library-findings.yaml); this names the policy.
#[test]
fn variables_and_match_conditions_use_no_patch_types() {
    for (stem, policy) in library().0 {
        let spec = &policy["spec"];
        for key in ["variables", "matchConditions"] {
            for item in spec[key].as_array().into_iter().flatten() {
                let expression = item["expression"].as_str().unwrap_or("");
                for patch_only in ["JSONPatch", "Object", "jsonpatch."] {
                    assert!(
                        !mentions(expression, patch_only),
                        "policies/{stem}.yaml: {key} {:?} uses {patch_only}",
                        item["name"]
                    );
                }
            }
        }
    }
}
