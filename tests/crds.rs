//! Generates kmutate's CustomResourceDefinitions (`deploy/crds/`) from the
//! schemas of the `admissionregistration.k8s.io/v1` types, and checks the
//! committed files are what the types give, so that they cannot drift.
//! `KMUTATE_WRITE_CRDS=1 cargo test --test crds` rewrites them.

use k8s_openapi::api::admissionregistration::v1 as admv1;
use serde_json::{json, Map, Value};
use std::path::Path;

fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    structural(serde_json::to_value(schema).unwrap())
}

/// Keeps what a structural CRD schema allows.
fn structural(schema: Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                if matches!(k.as_str(), "$schema" | "title" | "definitions" | "$defs") {
                    continue;
                }
                out.insert(k, structural(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(structural).collect()),
        other => other,
    }
}

/// What upstream's validation refuses that a structural schema can say
/// too, so that the API server refuses it even while kmutate's validating
/// webhook is down: enums (in the order upstream lists the supported
/// values, so that the message is the built-in one), required fields, the
/// match condition limit and name patterns; and the defaults upstream sets.
/// `path` is a property path, `[]` stepping into a list's items.
fn constrain(spec: &mut Value) {
    const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
    const QUALIFIED_NAME: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
    const DNS_SUBDOMAIN: &str =
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
    const CEL_IDENTIFIER: &str = "^[_a-zA-Z][_a-zA-Z0-9]*$";
    let rules = ["resourceRules[]", "excludeResourceRules[]"];
    let match_resources = ["matchConstraints", "matchResources"];
    for mr in match_resources {
        if node(spec, mr).is_none() {
            continue;
        }
        set(
            spec,
            &format!("{mr}.matchPolicy"),
            json!({"enum": ["Equivalent", "Exact"], "default": "Equivalent"}),
        );
        set(
            spec,
            &format!("{mr}.namespaceSelector"),
            json!({"default": {}}),
        );
        set(
            spec,
            &format!("{mr}.objectSelector"),
            json!({"default": {}}),
        );
        for rule in rules {
            let at = format!("{mr}.{rule}");
            set(
                spec,
                &format!("{at}.operations[]"),
                json!({"enum": OPERATIONS}),
            );
            set(
                spec,
                &format!("{at}.scope"),
                json!({"enum": ["*", "Cluster", "Namespaced"], "default": "*"}),
            );
            set(
                spec,
                &at,
                json!({"required": ["apiGroups", "apiVersions", "operations", "resources"]}),
            );
        }
    }
    let policy_only = [
        (
            "",
            json!({"required": ["matchConstraints", "mutations", "reinvocationPolicy"]}),
        ),
        (
            "failurePolicy",
            json!({"enum": ["Fail", "Ignore"], "default": "Fail"}),
        ),
        ("reinvocationPolicy", json!({"enum": ["IfNeeded", "Never"]})),
        ("paramKind", json!({"required": ["apiVersion", "kind"]})),
        ("matchConditions", json!({"maxItems": 64})),
        ("matchConditions[].name", json!({"pattern": QUALIFIED_NAME})),
        ("variables[]", json!({"required": ["name", "expression"]})),
        ("variables[].name", json!({"pattern": CEL_IDENTIFIER})),
        ("mutations[]", json!({"required": ["patchType"]})),
        (
            "mutations[].patchType",
            json!({"enum": ["ApplyConfiguration", "JSONPatch"]}),
        ),
        (
            "mutations[].applyConfiguration",
            json!({"required": ["expression"]}),
        ),
        ("mutations[].jsonPatch", json!({"required": ["expression"]})),
    ];
    let binding_only = [
        ("", json!({"required": ["policyName"]})),
        (
            "policyName",
            json!({"pattern": DNS_SUBDOMAIN, "maxLength": 253}),
        ),
        ("paramRef", json!({"required": ["parameterNotFoundAction"]})),
        (
            "paramRef.parameterNotFoundAction",
            json!({"enum": ["Deny", "Allow"]}),
        ),
    ];
    let own = if node(spec, "mutations").is_some() {
        &policy_only[..]
    } else {
        &binding_only[..]
    };
    for (path, constraint) in own {
        set(spec, path, constraint.clone());
    }
}

/// The schema node at `path` (see [`constrain`]).
fn node<'a>(schema: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut at = schema;
    for step in path.split('.').filter(|s| !s.is_empty()) {
        let (name, into_items) = match step.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (step, false),
        };
        at = at.get_mut("properties")?.get_mut(name)?;
        if into_items {
            at = at.get_mut("items")?;
        }
    }
    Some(at)
}

/// Merges `constraint` into the schema node at `path`, which must exist.
fn set(schema: &mut Value, path: &str, constraint: Value) {
    let at = node(schema, path).unwrap_or_else(|| panic!("no schema node at {path:?}"));
    for (k, v) in constraint.as_object().unwrap() {
        at[k] = v.clone();
    }
}

/// The columns `kubectl get` shows.
fn printer_columns(kind: &str) -> Value {
    let own = if kind == "MutatingAdmissionPolicy" {
        json!([
            {"name": "Failure Policy", "type": "string", "jsonPath": ".spec.failurePolicy"},
            {"name": "Reinvocation", "type": "string", "jsonPath": ".spec.reinvocationPolicy"},
        ])
    } else {
        json!([
            {"name": "Policy", "type": "string", "jsonPath": ".spec.policyName"},
        ])
    };
    let mut columns = own.as_array().unwrap().clone();
    columns.push(json!({"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status", "description": "Whether kmutate serves it (the reason is in the condition)."}));
    columns.push(json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}));
    Value::Array(columns)
}

fn crd(kind: &str, plural: &str, mut spec: Value) -> Value {
    constrain(&mut spec);
    let singular = kind.to_lowercase();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.kmutate.dev"),
            "labels": {"app.kubernetes.io/part-of": "kmutate"},
        },
        "spec": {
            "group": "kmutate.dev",
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural,
                "singular": singular,
                "categories": ["kmutate"],
            },
            "scope": "Cluster",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": printer_columns(kind),
                "schema": {"openAPIV3Schema": {
                    "description": format!("{kind} of kmutate.dev: the schema of admissionregistration.k8s.io/v1 {kind}, for clusters that do not serve it."),
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec,
                        "status": {
                            "description": "What kmutate found loading the object.",
                            "type": "object",
                            "properties": {
                                "observedGeneration": {"type": "integer", "format": "int64"},
                                "conditions": {
                                    "type": "array",
                                    "x-kubernetes-list-type": "map",
                                    "x-kubernetes-list-map-keys": ["type"],
                                    "items": schema_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>(),
                                },
                            },
                        },
                    },
                }},
            }],
        },
    })
}

#[test]
fn deploy_crds_are_generated_from_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/crds");
    let crds = [
        (
            "mutatingadmissionpolicies.yaml",
            crd(
                "MutatingAdmissionPolicy",
                "mutatingadmissionpolicies",
                schema_of::<admv1::MutatingAdmissionPolicySpec>(),
            ),
        ),
        (
            "mutatingadmissionpolicybindings.yaml",
            crd(
                "MutatingAdmissionPolicyBinding",
                "mutatingadmissionpolicybindings",
                schema_of::<admv1::MutatingAdmissionPolicyBindingSpec>(),
            ),
        ),
    ];
    let write = std::env::var_os("KMUTATE_WRITE_CRDS").is_some();
    for (file, crd) in crds {
        let text = format!(
            "# Generated by tests/crds.rs from the admissionregistration.k8s.io/v1 types; do not edit.\n# Regenerate: KMUTATE_WRITE_CRDS=1 cargo test --test crds\n{}",
            serde_saphyr::to_string(&crd).unwrap()
        );
        let path = dir.join(file);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run KMUTATE_WRITE_CRDS=1 cargo test --test crds",
                path.display()
            )
        });
        assert!(
            committed == text,
            "{} differs from what the types give; run KMUTATE_WRITE_CRDS=1 cargo test --test crds",
            path.display()
        );
        // It reads back as the same object.
        let back = kmutate::api::load::parse_documents(&committed).unwrap();
        assert_eq!(back, vec![crd]);
    }
}

#[test]
fn the_crd_schema_is_structural_enough() {
    // Every object-typed node names its properties' types: no $ref, no
    // untyped node except under preserve-unknown-fields.
    fn check(v: &Value, at: &str) {
        let Some(map) = v.as_object() else { return };
        assert!(!map.contains_key("$ref"), "{at}: $ref");
        if let Some(props) = map.get("properties").and_then(Value::as_object) {
            for (k, p) in props {
                let here = format!("{at}.{k}");
                assert!(
                    p.get("type").is_some()
                        || p.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
                        || p.get("x-kubernetes-int-or-string") == Some(&json!(true)),
                    "{here}: no type: {p}"
                );
                check(p, &here);
            }
        }
        if let Some(items) = map.get("items") {
            check(items, &format!("{at}[]"));
        }
    }
    check(&schema_of::<admv1::MutatingAdmissionPolicySpec>(), "spec");
    check(
        &schema_of::<admv1::MutatingAdmissionPolicyBindingSpec>(),
        "spec",
    );
}
