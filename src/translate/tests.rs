//! Tests of the translators: every conformance case's declarative items
//! translate and compile, and the error paths name the rule and the reason.

use super::*;
use crate::api::{binding_from_json, policy_from_json, SourceRef};
use crate::dispatch::PolicySet;
use std::path::PathBuf;

fn translation_cases() -> Vec<(PathBuf, crate::conformance::Case)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conformance/translation");
    crate::conformance::read_cases(std::slice::from_ref(&root))
        .into_iter()
        .map(|c| c.expect("every translation case parses"))
        .map(|c| (PathBuf::from(&c.source.file), c))
        .collect()
}

#[test]
fn every_translated_case_loads_and_compiles() {
    let cases = translation_cases();
    assert!(cases.len() >= 60, "only {} translation cases", cases.len());
    let mut checked = 0;
    for (file, case) in cases {
        let Some(items) = case.doc.get("declarative") else {
            continue;
        };
        let dir = file.parent().unwrap();
        let t =
            translate_declarative_list(items, dir).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if t.policies.is_empty() {
            // Only where a Katalog switch turned admission mutation off.
            assert!(
                t.warnings.iter().any(|w| w.contains("not translated")),
                "{}: no policy",
                case.name
            );
            continue;
        }
        let policies: Vec<_> = t
            .policies
            .iter()
            .map(|p| {
                policy_from_json(p, SourceRef::default())
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name))
            })
            .collect();
        let bindings: Vec<_> = t
            .bindings
            .iter()
            .map(|b| {
                binding_from_json(b, SourceRef::default())
                    .unwrap_or_else(|e| panic!("{}: {e}", case.name))
            })
            .collect();
        let (_set, errors) = PolicySet::new(policies, bindings);
        assert!(errors.is_empty(), "{}: {errors:?}", case.name);
        checked += 1;
    }
    assert!(checked >= 60, "only {checked} cases with declarative items");
}

fn target() -> katalog::Target {
    katalog::Target::parse("example.com/v1/AppRequest/apprequests").unwrap()
}

fn katalog_rules(rules: serde_json::Value, opts: &Options) -> Result<Translation, TranslateError> {
    katalog::translate_block(
        &serde_json::json!({ "rules": rules }),
        &target(),
        std::path::Path::new("."),
        opts,
    )
}

fn untranslatable(rules: serde_json::Value) -> (String, String) {
    match katalog_rules(rules, &Options::default()) {
        Err(TranslateError::Untranslatable { rule, reason }) => (rule, reason),
        other => panic!("expected an untranslatable rule, got {other:?}"),
    }
}

#[test]
fn external_reads_name_the_rule_and_the_reason() {
    let (rule, reason) = untranslatable(serde_json::json!([
        {"field": "spec.a", "default": "x"},
        {"field": "spec.replicas", "default": "{{ .external.defaults.replicas }}", "valueType": "int"}
    ]));
    assert_eq!(rule, "katalog AppRequest rules[1] (field spec.replicas)");
    assert!(reason.contains("external call"), "{reason}");
}

#[test]
fn clock_and_cluster_conditions_cannot_be_translated() {
    for cond in [
        serde_json::json!({"field": "spec.a", "unique": true}),
        serde_json::json!({"time": "09:00-17:00"}),
        serde_json::json!({"dayOfWeek": "Mon"}),
        serde_json::json!({"cron": "0 * * * *"}),
        serde_json::json!({"field": "spec.a", "operator": "unique"}),
    ] {
        let (rule, reason) = untranslatable(serde_json::json!([
            {"field": "spec.a", "default": "x", "when": [cond]}
        ]));
        assert_eq!(rule, "katalog AppRequest rules[0] (field spec.a)");
        assert!(!reason.is_empty());
    }
}

#[test]
fn unknown_template_functions_cannot_be_translated() {
    for t in [
        "{{ upper .spec.name }}",
        "{{ .spec.name | lower }}",
        "{{ $x := .spec.x }}{{ $x = 2 }}",
        "{{ js .spec.x }}",
    ] {
        let (_, reason) = untranslatable(serde_json::json!([{"field": "spec.a", "override": t}]));
        assert!(reason.contains("template"), "{t}: {reason}");
    }
    let (_, reason) = untranslatable(
        serde_json::json!([{"field": "spec.a", "override": "{{ upper .spec.name }}"}]),
    );
    assert!(
        reason.contains("unknown template function \"upper\""),
        "{reason}"
    );
    let (_, reason) = untranslatable(
        serde_json::json!([{"field": "metadata.labels.{{ .spec.x | quote }}", "override": "a"}]),
    );
    assert!(reason.contains("\"quote\""), "{reason}");
}

#[test]
fn skip_untranslatable_drops_the_rule_with_a_warning() {
    let opts = Options {
        skip_untranslatable: true,
        ..Options::default()
    };
    let t = katalog_rules(
        serde_json::json!([
            {"field": "spec.a", "default": "x"},
            {"field": "spec.b", "default": "{{ .external.svc.b }}"},
            {"field": "spec.c", "default": "y", "when": [{"dayOfWeek": "Mon"}]}
        ]),
        &opts,
    )
    .unwrap();
    assert_eq!(t.policies.len(), 1);
    assert_eq!(
        t.policies[0]["spec"]["mutations"].as_array().unwrap().len(),
        1
    );
    assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
    assert!(t.warnings[0].starts_with("skipped katalog AppRequest rules[1] (field spec.b)"));
    assert!(t.warnings[1].starts_with("skipped katalog AppRequest rules[2] (field spec.c)"));
}

#[test]
fn invalid_rules_are_errors_even_with_skip() {
    let opts = Options {
        skip_untranslatable: true,
        ..Options::default()
    };
    for (rules, needle) in [
        (
            serde_json::json!([{"field": "spec.a", "default": 1, "override": 2}]),
            "not both",
        ),
        (
            serde_json::json!([{"field": "spec.a"}]),
            "declare default or override",
        ),
        (
            serde_json::json!([{"field": "spec.a", "default": "x", "valueType": "date"}]),
            "unknown valueType",
        ),
        (
            serde_json::json!([{"field": "spec.a", "default": "x1", "valueType": "int"}]),
            "not an integer",
        ),
        (
            serde_json::json!([{"field": "spec.a", "default": "x", "when": [{"field": "spec.b", "looksLike": 1}]}]),
            "unknown condition operator",
        ),
        (
            serde_json::json!([{"field": "spec.a", "default": "x", "when": [{"field": "spec.b", "between": "1"}]}]),
            "min,max",
        ),
        (
            serde_json::json!([{"field": "spec.a", "default": "x", "when": [{"field": "spec.b", "regex": "("}]}]),
            "regex",
        ),
    ] {
        match katalog_rules(rules.clone(), &opts) {
            Err(TranslateError::Invalid(m)) => {
                assert!(m.contains("rules[0]") && m.contains(needle), "{rules}: {m}")
            }
            other => panic!("{rules}: {other:?}"),
        }
    }
}

#[test]
fn katalog_file_resolves_include_against_its_folder() {
    let dir = std::env::temp_dir().join(format!("kmutate-translate-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("admission")).unwrap();
    std::fs::write(
        dir.join("admission/apprequest.yaml"),
        "rules:\n  - field: spec.replicas\n    default: 1\n    valueType: int\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("katalog.yaml"),
        "apiVersion: orkestra.orkspace.io/v1\nkind: Katalog\nmetadata: {name: p}\nspec:\n  crds:\n    app:\n      apiTypes: {group: example.com, version: v1, kind: AppRequest, plural: apprequests}\n      mutation:\n        mutateFirst: true\n        include: ./admission/apprequest.yaml\n        rules:\n          - field: spec.logLevel\n            default: info\n",
    )
    .unwrap();
    let opts = Options {
        api_version: "v1beta1".into(),
        reinvocation_policy: "IfNeeded".into(),
        ..Options::default()
    };
    let t = katalog::translate_file(&dir.join("katalog.yaml"), None, &opts).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(t.policies.len(), 1);
    let p = &t.policies[0];
    assert_eq!(p["apiVersion"], "admissionregistration.k8s.io/v1beta1");
    assert_eq!(p["metadata"]["name"], "katalog-apprequest");
    assert_eq!(p["spec"]["reinvocationPolicy"], "IfNeeded");
    assert_eq!(p["spec"]["failurePolicy"], "Fail");
    let m = p["spec"]["mutations"].as_array().unwrap();
    assert_eq!(m.len(), 2);
    assert!(m[0]["jsonPatch"]["expression"]
        .as_str()
        .unwrap()
        .contains("/spec/replicas"));
    assert!(m[1]["jsonPatch"]["expression"]
        .as_str()
        .unwrap()
        .contains("/spec/logLevel"));
    assert!(t.warnings.iter().any(|w| w.contains("mutateFirst")));
    assert_eq!(t.bindings[0]["spec"]["policyName"], "katalog-apprequest");
    // The YAML output reads back as the same objects.
    let docs = crate::api::load::parse_documents(&t.to_yaml().unwrap()).unwrap();
    assert_eq!(docs, t.objects());
}

#[test]
fn bare_block_needs_a_target() {
    let dir = std::env::temp_dir().join(format!("kmutate-translate-bare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("m.yaml"),
        "mutation:\n  rules:\n    - field: spec.a\n      default: x\n",
    )
    .unwrap();
    let err = katalog::translate_file(&dir.join("m.yaml"), None, &Options::default()).unwrap_err();
    assert!(err.to_string().contains("--target"), "{err}");
    let t =
        katalog::translate_file(&dir.join("m.yaml"), Some(&target()), &Options::default()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(t.policies.len(), 1);
    assert!(Options {
        api_version: "v2".into(),
        ..Options::default()
    }
    .validate()
    .is_err());
}

fn tenant(mutate: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "capsule.clastix.io/v1beta2", "kind": "Tenant",
        "metadata": {"name": "solar"},
        "spec": {"rules": [{"mutate": mutate}]}
    })
}

#[test]
fn capsule_entries_must_supply_a_property_for_a_compatible_target() {
    for (mutate, needle) in [
        (
            serde_json::json!([{"action": "merge", "workloads": {"placement": {}, "security": {}}}]),
            "supplies no mutation property",
        ),
        (
            serde_json::json!([{"workloads": {"placement": {"nodeSelector": {"a": "b"}}}, "targets": ["pod/containers"]}]),
            "pod target only",
        ),
        (
            serde_json::json!([{"action": "patch", "workloads": {"security": {"hostUsers": false}}}]),
            "not merge or replace",
        ),
        (
            serde_json::json!([{"workloads": {"registries": {"imagePullPolicy": "Sometimes"}}}]),
            "imagePullPolicy",
        ),
        (
            serde_json::json!([{"workloads": {"security": {"hostUsers": false}}, "targets": ["node"]}]),
            "unknown target",
        ),
    ] {
        match capsule::translate_tenant(&tenant(mutate.clone()), &Options::default()) {
            Err(TranslateError::Invalid(m)) => {
                assert!(
                    m.contains("capsule solar rules[0].mutate[0]") && m.contains(needle),
                    "{m}"
                )
            }
            other => panic!("{mutate}: {other:?}"),
        }
    }
}

#[test]
fn capsule_policies_are_named_and_matched_by_tenant() {
    let t = capsule::translate_tenant(
        &tenant(serde_json::json!([
            {"workloads": {"placement": {"tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5}]}}},
            {"action": "replace", "workloads": {"security": {"readOnlyRootFilesystem": true}}}
        ])),
        &Options::default(),
    )
    .unwrap();
    let names: Vec<&str> = t
        .policies
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["capsule-solar", "capsule-solar-ephemeral"]);
    let p = &t.policies[0]["spec"];
    assert_eq!(
        p["matchConstraints"]["namespaceSelector"]["matchLabels"]["capsule.clastix.io/tenant"],
        "solar"
    );
    assert_eq!(
        p["matchConstraints"]["resourceRules"][0]["operations"][0],
        "CREATE"
    );
    let eph = &t.policies[1]["spec"]["matchConstraints"]["resourceRules"][0];
    assert_eq!(eph["resources"][0], "pods/ephemeralcontainers");
    // Tolerations are atomic: JSONPatch; the mixed-type toleration literal is dyn-wrapped.
    let first = &p["mutations"][0];
    assert_eq!(first["patchType"], "JSONPatch");
    assert!(first["jsonPatch"]["expression"]
        .as_str()
        .unwrap()
        .contains("\"tolerationSeconds\": dyn(5)"));
    assert_eq!(p["mutations"][1]["patchType"], "ApplyConfiguration");
}

#[test]
fn capsule_rule_namespace_selector_is_untranslatable_unless_skipped() {
    let mut doc = tenant(serde_json::json!([{"workloads": {"security": {"hostUsers": false}}}]));
    doc["spec"]["rules"][0]["namespaceSelector"] =
        serde_json::json!({"matchLabels": {"env": "prod"}});
    assert!(matches!(
        capsule::translate_tenant(&doc, &Options::default()),
        Err(TranslateError::Untranslatable { .. })
    ));
    let t = capsule::translate_tenant(
        &doc,
        &Options {
            skip_untranslatable: true,
            ..Options::default()
        },
    )
    .unwrap();
    assert!(t.policies.is_empty());
    assert!(t
        .warnings
        .iter()
        .any(|w| w.starts_with("skipped capsule solar rules[0]")));
}

#[test]
fn literals_of_mixed_types_are_dyn_wrapped() {
    use super::cel::literal;
    assert_eq!(
        literal(&serde_json::json!({"a": "x", "b": "y"})),
        "{\"a\": \"x\", \"b\": \"y\"}"
    );
    assert_eq!(
        literal(&serde_json::json!({"a": "x", "b": 1})),
        "{\"a\": dyn(\"x\"), \"b\": dyn(1)}"
    );
    assert_eq!(literal(&serde_json::json!([1, 2.5])), "[dyn(1), dyn(2.5)]");
    assert_eq!(
        literal(&serde_json::json!([{"a": 1}, {"a": 2}])),
        "[{\"a\": 1}, {\"a\": 2}]"
    );
    assert_eq!(super::cel::quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
}

/// Seed 000, "When mutation runs": at admission only when
/// `security.webhooks.admission.enabled` and the CRD entry's
/// `webhooks.mutation` are true (issue 50). A switch that is false emits
/// nothing for its entries and says which; unset ones are translated with
/// a warning naming them (docs/translate-katalog.md).
#[test]
fn katalog_admission_switches_decide_what_is_translated() {
    let katalog = |security: &str, webhooks: &str| {
        serde_saphyr::from_str::<Json>(&format!(
            "apiVersion: orkestra.orkspace.io/v1\nkind: Katalog\nmetadata: {{name: p}}\nspec:\n{security}  crds:\n    app:\n      apiTypes: {{group: example.com, version: v1, kind: AppRequest, plural: apprequests}}\n{webhooks}      mutation:\n        rules: [{{field: spec.replicas, default: 1}}]\n"
        ))
        .unwrap()
    };
    let on = "  security: {webhooks: {admission: {enabled: true}}}\n";
    let off = "  security: {webhooks: {admission: {enabled: false}}}\n";
    let crd_on = "      webhooks: {mutation: true}\n";
    let crd_off = "      webhooks: {mutation: false}\n";
    let run = |doc: Json| {
        katalog::translate_document(&doc, None, Path::new("."), &Options::default()).unwrap()
    };
    let (t, found) = run(katalog(on, crd_on));
    assert!(found);
    assert_eq!(
        (t.policies.len(), t.warnings.len()),
        (1, 0),
        "{:?}",
        t.warnings
    );
    let (t, found) = run(katalog(off, crd_on));
    assert!(found && t.policies.is_empty());
    assert_eq!(
        t.warnings,
        ["katalog AppRequest: not translated: spec.security.webhooks.admission.enabled is false, so Katalog does not mutate it at admission (only at reconcile)"]
    );
    let (t, _) = run(katalog(on, crd_off));
    assert!(t.policies.is_empty());
    assert!(
        t.warnings[0].contains("spec.crds.app.webhooks.mutation is false"),
        "{:?}",
        t.warnings
    );
    let (t, _) = run(katalog("", ""));
    assert_eq!(t.policies.len(), 1);
    assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
    assert!(t.warnings[0]
        .contains("spec.security.webhooks.admission.enabled is not set; translated as if true"));
    assert!(t.warnings[1].contains("spec.crds.app.webhooks.mutation is not set"));
    let bad = katalog(
        "  security: {webhooks: {admission: {enabled: \"yes\"}}}\n",
        crd_on,
    );
    assert!(katalog::translate_document(&bad, None, Path::new("."), &Options::default()).is_err());
}

/// Seed 000: rules may be "declared ... inside a Motif's admission block"
/// (issue 50). A Motif names no custom resource: --target does.
#[test]
fn motif_admission_blocks_translate_for_the_target() {
    let target = katalog::Target::parse("example.com/v1/AppRequest/apprequests").unwrap();
    let motif: Json = serde_saphyr::from_str(
        "apiVersion: orkestra.orkspace.io/v1\nkind: Motif\nmetadata: {name: web-defaults}\nspec:\n  admission:\n    mutation:\n      rules: [{field: spec.logLevel, default: info}]\n",
    )
    .unwrap();
    let run = |doc: &Json, target: Option<&katalog::Target>| {
        katalog::translate_document(doc, target, Path::new("."), &Options::default())
    };
    let (t, found) = run(&motif, Some(&target)).unwrap();
    assert!(found);
    assert_eq!(
        t.policies[0]["metadata"]["name"],
        "katalog-apprequest-motif-web-defaults"
    );
    let e = run(&motif, None).unwrap_err().to_string();
    assert!(
        e.contains("motif \"web-defaults\"") && e.contains("--target"),
        "{e}"
    );
    // A bare admission block reads the same.
    let bare: Json = serde_saphyr::from_str(
        "admission:\n  mutation:\n    rules: [{field: spec.a, default: x}]\n",
    )
    .unwrap();
    assert_eq!(run(&bare, Some(&target)).unwrap().0.policies.len(), 1);
    // A Katalog's motifs: without --target, each is a warning.
    let katalog_doc: Json = serde_saphyr::from_str(
        "apiVersion: orkestra.orkspace.io/v1\nkind: Katalog\nmetadata: {name: k}\nspec:\n  motifs:\n  - name: web\n    admission:\n      mutation:\n        rules: [{field: spec.a, default: x}]\n",
    )
    .unwrap();
    let (t, found) = run(&katalog_doc, None).unwrap();
    assert!(found && t.policies.is_empty());
    assert!(
        t.warnings[0].starts_with("katalog motif \"web\": not translated"),
        "{:?}",
        t.warnings
    );
    let (t, _) = run(&katalog_doc, Some(&target)).unwrap();
    assert_eq!(
        t.policies[0]["metadata"]["name"],
        "katalog-apprequest-motif-web"
    );
}
