use serde_json::{json, Value};

use super::model::Relationship;
use super::typed::validate;
use super::*;
use crate::mutation::apply_configuration::apply_configuration;

/// The resolved atom of `ty`, which the test keeps (leaked) for the
/// borrowed views to live as long as the test.
fn resolve(ty: &TypeRef) -> model::Resolved<'static> {
    let ty: &'static TypeRef = Box::leak(Box::new(ty.clone()));
    ty.schema.resolve(&ty.spec).expect("resolvable type")
}

fn field(ty: &TypeRef, path: &[&str]) -> TypeRef {
    let mut spec = ty.spec.clone();
    for name in path {
        let atom = ty.schema.resolve(&spec).expect("resolvable");
        spec = if let Some(map) = &atom.map {
            map.def
                .field(name)
                .unwrap_or_else(|| panic!("no field {name}"))
                .ty
                .clone()
        } else {
            atom.list.expect("list").def.element.clone()
        };
    }
    TypeRef {
        schema: ty.schema.clone(),
        spec,
    }
}

fn errors(ty: &TypeRef, v: &Value) -> Vec<String> {
    validate(&ty.schema, &ty.spec, v, false)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn builtin_table_loads() {
    let table = builtin::parse(include_str!("builtin_schemas.json")).expect("table parses");
    assert!(table.types.len() > 700, "{} types", table.types.len());
    let store = SchemaStore::builtin();
    for (g, v, k) in [
        ("apps", "v1", "Deployment"),
        ("", "v1", "ConfigMap"),
        ("", "v1", "Pod"),
        ("batch", "v1", "CronJob"),
        (
            "admissionregistration.k8s.io",
            "v1beta1",
            "MutatingAdmissionPolicy",
        ),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ] {
        assert!(store.lookup(g, v, k).is_some(), "{g}/{v} {k}");
    }
    assert!(store.lookup("apps", "v1", "Nope").is_none());
    assert!(store.lookup("example.com", "v1", "Widget").is_none());
    assert_eq!(
        store.lookup("apps", "v1", "Deployment").unwrap().name(),
        Some("io.k8s.api.apps.v1.Deployment")
    );
}

// Markers in k8s.io/api and apimachinery types.go as published in OpenAPI.
#[test]
fn builtin_relationships() {
    let deploy = SchemaStore::builtin()
        .lookup("apps", "v1", "Deployment")
        .unwrap();
    // LabelSelector: +structType=atomic.
    let selector = resolve(&field(&deploy, &["spec", "selector"]));
    assert_eq!(
        selector.map.unwrap().relationship,
        Some(Relationship::Atomic)
    );
    // ObjectMeta.finalizers: +listType=set.
    let finalizers = resolve(&field(&deploy, &["metadata", "finalizers"]));
    let finalizers = finalizers.list.unwrap();
    assert_eq!(finalizers.relationship, Some(Relationship::Associative));
    assert!(finalizers.def.keys.is_empty());
    // Container.ports: +listType=map, +listMapKey=containerPort, +listMapKey=protocol.
    let ports = resolve(&field(
        &deploy,
        &["spec", "template", "spec", "containers", "*", "ports"],
    ));
    assert_eq!(ports.list.unwrap().def.keys, ["containerPort", "protocol"]);
    // Container.args: +listType=atomic.
    let args = resolve(&field(
        &deploy,
        &["spec", "template", "spec", "containers", "*", "args"],
    ));
    assert_eq!(args.list.unwrap().relationship, Some(Relationship::Atomic));
    // ObjectMeta.labels: a plain map, granular.
    let labels = resolve(&field(&deploy, &["metadata", "labels"]));
    assert_eq!(labels.map.unwrap().relationship, None);
    // IntOrString is an untyped scalar (schemaconv convertPrimitive).
    let surge = resolve(&field(
        &deploy,
        &["spec", "strategy", "rollingUpdate", "maxSurge"],
    ));
    assert_eq!(surge.scalar, Some(model::Scalar::Untyped));
    assert!(surge.map.is_none() && surge.list.is_none());
}

#[test]
fn deduced_type_accepts_anything() {
    let ty = deduced();
    assert_eq!(ty.name(), Some("__untyped_deduced_"));
    assert_eq!(SchemaStore::deduced().name(), Some("__untyped_deduced_"));
    let atom = resolve(&ty);
    assert_eq!(atom.list.unwrap().relationship, Some(Relationship::Atomic));
    assert_eq!(
        atom.map.unwrap().relationship,
        Some(Relationship::Separable)
    );
    assert!(errors(&ty, &json!({"a": [1, {"b": null}], "c": {"d": "e"}})).is_empty());
    assert!(unknown_fields(&json!({"a": {"b": 1}}), &ty).is_empty());
}

// Conformance jp-unknown-field-strict-decode-error (json_patch_test.go
// TestJSONPatch 'jsonPatch invalid CEL initializer field').
#[test]
fn unknown_fields_strict_decoding_paths() {
    let ty = SchemaStore::builtin()
        .lookup("apps", "v1", "Deployment")
        .unwrap();
    let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "d1", "namespace": "default"},
    "spec": {"template": {"spec": {"containers": [
        {"name": "a"},
        {"name": "x", "ports": [{"containerPortZ": 8080}]}
    ]}}}});
    assert_eq!(
        unknown_fields(&obj, &ty),
        ["spec.template.spec.containers[1].ports[0].containerPortZ"]
    );
    let obj = json!({"zeta": 1, "metadata": {"labels": {"a": "b"}, "bogus": {"x": 1}},
        "spec": {"replicas": 1, "alpha": true}});
    assert_eq!(
        unknown_fields(&obj, &ty),
        ["metadata.bogus", "spec.alpha", "zeta"]
    );
    let cm = SchemaStore::builtin()
        .lookup("", "v1", "ConfigMap")
        .unwrap();
    assert!(unknown_fields(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}}),
        &cm
    )
    .is_empty());
}

fn crd(versions: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"}, "versions": versions}})
}

fn version(name: &str, served: bool, schema: Value) -> Value {
    json!({"name": name, "served": served, "storage": served, "schema": {"openAPIV3Schema": schema}})
}

#[test]
fn crd_versions_and_metadata() {
    let store = SchemaStore::with_crds(&[
        crd(json!([
            version(
                "v1",
                true,
                json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}})
            ),
            version("v2", false, json!({"type": "object"})),
        ])),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "not-a-crd"}}),
    ]);
    let ty = store.lookup("example.com", "v1", "Widget").unwrap();
    assert!(store.lookup("example.com", "v2", "Widget").is_none());
    assert!(store.lookup("apps", "v1", "Deployment").is_some());
    // metadata is ObjectMeta, apiVersion/kind strings (builder buildKubeNative).
    assert!(errors(
        &ty,
        &json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": {"size": 1}})
    )
    .is_empty());
    assert_eq!(
        errors(&ty, &json!({"metadata": {"labels": {"a": 1}}})),
        [".metadata.labels.a: expected string, got &value.valueUnstructured{Value:1}"]
    );
    assert_eq!(
        errors(&ty, &json!({"spec": {"size": "big"}})),
        [".spec.size: expected numeric (int or float), got string"]
    );
    assert_eq!(
        errors(&ty, &json!({"status": {}})),
        [".status: field not declared in schema"]
    );
    assert_eq!(
        unknown_fields(
            &json!({"apiVersion": "x", "kind": "y", "spec": {"size": 1, "color": "red"}}),
            &ty
        ),
        ["spec.color"]
    );
}

#[test]
fn crd_extensions() {
    let store = SchemaStore::with_crds(&[crd(json!([version(
        "v1",
        true,
        json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                "port": {"x-kubernetes-int-or-string": true},
                "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"nested": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                    "properties": {"name": {"type": "string"}}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port", "protocol"],
                    "items": {"type": "object", "properties": {
                        "port": {"type": "integer"},
                        "protocol": {"type": "string", "default": "TCP"},
                        "name": {"type": "string"}}}},
                "counts": {"type": "object", "additionalProperties": {"type": "integer"}}
            }}}
        })
    )]))]);
    let ty = store.lookup("example.com", "v1", "Widget").unwrap();
    // Embedded resources get apiVersion, kind and ObjectMeta metadata.
    assert!(errors(
        &ty,
        &json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p"}, "spec": {"anything": [1]}}}})
    )
    .is_empty());
    assert_eq!(
        unknown_fields(
            &json!({"spec": {"template": {"metadata": {"bogus": 1}}}}),
            &ty
        ),
        ["spec.template.metadata.bogus"]
    );
    // int-or-string has no type: any value (schemaconv parseSchema "").
    assert!(errors(&ty, &json!({"spec": {"port": 80}})).is_empty());
    assert!(errors(&ty, &json!({"spec": {"port": "http"}})).is_empty());
    // preserve-unknown-fields reaches nested inlined objects.
    assert!(errors(
        &ty,
        &json!({"spec": {"config": {"x": 1, "nested": {"a": "b", "y": 2}}}})
    )
    .is_empty());
    assert_eq!(
        errors(&ty, &json!({"spec": {"counts": {"a": "x"}}})),
        [".spec.counts.a: expected numeric (int or float), got string"]
    );

    let live = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"ports": [{"port": 80, "protocol": "TCP", "name": "a"}]}});
    // The key default makes {port: 80} the same item as {port: 80, protocol: TCP}.
    let got = apply_configuration(
        &live,
        &json!({"spec": {"ports": [{"port": 80, "name": "b"}]}}),
        &ty,
    )
    .unwrap();
    assert_eq!(
        got["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP", "name": "b"}])
    );
    // x-kubernetes-map-type: atomic makes the struct atomic.
    let err =
        apply_configuration(&live, &json!({"spec": {"selector": {"name": "n"}}}), &ty).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.selector"
    );
}

#[test]
fn crd_without_schema_is_an_open_object() {
    let store = SchemaStore::with_crds(&[crd(
        json!([{"name": "v1", "served": true, "storage": true}]),
    )]);
    let ty = store.lookup("example.com", "v1", "Widget").unwrap();
    assert!(errors(&ty, &json!({"metadata": {"anything": 1}, "spec": [1]})).is_empty());
}

#[test]
fn deep_crd_schema_does_not_overflow() {
    let mut schema = json!({"type": "string"});
    for _ in 0..400 {
        schema = json!({"type": "object", "properties": {"a": schema}});
    }
    let store = SchemaStore::with_crds(&[crd(json!([version("v1", true, schema)]))]);
    let ty = store.lookup("example.com", "v1", "Widget").unwrap();
    assert!(errors(&ty, &json!({"a": {"a": {"a": {}}}})).is_empty());
}

// The dispatcher takes an object that passed SMD's typed validation to be
// strict-clean as well (`ObjectChecks::applied`): every field strict decoding
// rejects, typed validation rejects too.
#[test]
fn typed_valid_objects_have_no_field_strict_decoding_rejects() {
    let pod = SchemaStore::builtin().lookup("", "v1", "Pod").unwrap();
    let deployment = SchemaStore::builtin()
        .lookup("apps", "v1", "Deployment")
        .unwrap();
    let objects = [
        (
            &pod,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}}),
        ),
        (
            &pod,
            json!({"metadata": {"annotations": {"x": "y"}}, "spec": {"nodeSelector": {"k": "v"}}}),
        ),
        (&pod, json!({"bogus": 1})),
        (&pod, json!({"metadata": {"bogus": {"x": 1}}})),
        (
            &pod,
            json!({"spec": {"containers": [{"name": "c"}, {"name": "d", "imagez": "x"}]}}),
        ),
        (
            &pod,
            json!({"spec": {"securityContext": {"seccompProfile": {"typez": "x"}}}}),
        ),
        (
            &pod,
            json!({"spec": {"volumes": [{"name": "v", "configMap": {"items": [{"key": "k", "pathz": "p"}]}}]}}),
        ),
        (
            &deployment,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}}}),
        ),
        (
            &deployment,
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"limitz": {}}}]}}}}),
        ),
        (
            &deployment,
            json!({"spec": {"selector": {"matchLabels": {"a": "b"}, "other": 1}}}),
        ),
    ];
    let mut rejected = 0;
    for (ty, object) in &objects {
        let unknown = unknown_fields(object, ty);
        if validate(&ty.schema, &ty.spec, object, true).is_empty() {
            assert!(
                unknown.is_empty(),
                "{object}: typed-valid, but strict decoding rejects {unknown:?}"
            );
        } else {
            assert!(!unknown.is_empty(), "{object}: not typed-valid");
            rejected += 1;
        }
    }
    assert_eq!(rejected, 7, "the unknown fields above are all found");
}

#[test]
fn type_names_are_one_copy_per_name() {
    use model::TypeName;
    let a = TypeName::new("io.k8s.api.core.v1.PodSpec");
    let b = TypeName::new(&String::from("io.k8s.api.core.v1.PodSpec"));
    assert_eq!(a, b);
    assert_eq!(&*a, "io.k8s.api.core.v1.PodSpec");
    assert_ne!(a, TypeName::new("io.k8s.api.core.v1.PodStatus"));
    // A name made after the table was loaded still finds its type.
    let pod = SchemaStore::builtin().lookup("", "v1", "Pod").unwrap();
    assert!(pod
        .schema
        .resolve(&model::TypeSpec::named("io.k8s.api.core.v1.PodSpec"))
        .is_some());
}

// With duplicates allowed (the live object), an associative item's key is
// checked but not kept: the errors of keys, and the paths of errors under
// keyed items, read as they do without (SMD `listItemToPathElement`,
// `fieldpath.Path.String`).
#[test]
fn keyed_items_read_alike_with_duplicates_allowed() {
    let pod = SchemaStore::builtin().lookup("", "v1", "Pod").unwrap();
    let cases = [
        (
            json!({"spec": {"containers": [{"name": "app", "image": 5}]}}),
            r#".spec.containers[name="app"].image: expected string, got &value.valueUnstructured{Value:5}"#,
        ),
        (
            json!({"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80, "hostIP": 1}]}]}}),
            r#".spec.containers[name="app"].ports[containerPort=80,protocol="TCP"].hostIP: expected string, got &value.valueUnstructured{Value:1}"#,
        ),
        (
            json!({"spec": {"containers": [{"image": "app:1"}]}}),
            r#".spec.containers: element 0: associative list with keys has an element that omits all key fields ["name"] (and doesn't have default values for any key fields)"#,
        ),
        (
            json!({"spec": {"containers": ["app"]}}),
            ".spec.containers: element 0: associative list with keys may not have non-map elements",
        ),
    ];
    for (object, expected) in cases {
        let lenient: Vec<String> = validate(&pod.schema, &pod.spec, &object, true)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(lenient, [expected], "{object}");
        assert_eq!(errors(&pod, &object), lenient, "{object}");
    }
}
