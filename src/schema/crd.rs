//! CustomResourceDefinition schemas: how kube-apiserver publishes a CRD
//! version in /openapi/v3 (apiextensions-apiserver
//! `controller/openapi/builder` `buildKubeNative`/`addEmbeddedProperties`,
//! `apiserver/schema` `ToKubeOpenAPI`) and how kube-openapi
//! `schemaconv.ToSchemaFromOpenAPI` turns that into SMD atoms.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::model::{
    Atom, FieldDef, ListDef, MapDef, Relationship, Scalar, TypeName, TypeSpec, UNTYPED_ATOMIC,
    UNTYPED_DEDUCED,
};

/// ObjectMeta's definition name in the built-in table.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Nesting depth beyond which a CRD schema is treated as deduced.
const MAX_SCHEMA_DEPTH: usize = 256;

/// One served version of a CRD, converted.
pub(crate) struct CrdType {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    pub(crate) type_name: String,
    pub(crate) atom: Atom,
}

/// The converted types of one `apiextensions.k8s.io` CustomResourceDefinition
/// (one per served version); empty for anything else.
pub(crate) fn crd_types(crd: &Value) -> Vec<CrdType> {
    let is_crd = crd.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
        && crd
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("apiextensions.k8s.io/"));
    let Some(spec) = crd.get("spec").filter(|_| is_crd) else {
        return Vec::new();
    };
    let group = spec.get("group").and_then(Value::as_str).unwrap_or("");
    let Some(kind) = spec.pointer("/names/kind").and_then(Value::as_str) else {
        return Vec::new();
    };
    // apiextensions.k8s.io/v1beta1 kept a CRD-wide schema.
    let shared_schema = spec.pointer("/validation/openAPIV3Schema");
    let mut out = Vec::new();
    for version in spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = version.get("name").and_then(Value::as_str) else {
            continue;
        };
        // Only served versions are published in /openapi/v3.
        if version.get("served") == Some(&Value::Bool(false)) {
            continue;
        }
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .or(shared_schema)
            .filter(|s| s.is_object());
        out.push(CrdType {
            group: group.to_string(),
            version: name.to_string(),
            kind: kind.to_string(),
            type_name: format!("{group}/{name}.{kind}"),
            atom: root_atom(schema),
        });
    }
    out
}

/// The atom of a CRD's kind: the structural schema with metadata, apiVersion
/// and kind set (builder `buildKubeNative`), converted.
fn root_atom(schema: Option<&Value>) -> Atom {
    let Some(schema) = schema else {
        // No (structural) schema: published as a bare `type: object`.
        return convert(&json!({"type": "object"}), false, 0);
    };
    let mut root = schema.clone();
    if let Some(obj) = root.as_object_mut() {
        let props = obj
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if !props.is_object() {
            *props = Value::Object(Map::new());
        }
        if let Some(props) = props.as_object_mut() {
            props.insert("metadata".into(), json!({"$ref": OBJECT_META}));
            props.insert("apiVersion".into(), json!({"type": "string"}));
            props.insert("kind".into(), json!({"type": "string"}));
        }
    }
    add_embedded_properties(&mut root, 0);
    convert(&root, false, 0)
}

/// Builder `addEmbeddedProperties`: x-kubernetes-embedded-resource objects
/// get apiVersion, kind and ObjectMeta metadata.
fn add_embedded_properties(s: &mut Value, depth: usize) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    let Some(obj) = s.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        for v in props.values_mut() {
            add_embedded_properties(v, depth + 1);
        }
    }
    if let Some(items) = obj.get_mut("items") {
        add_embedded_properties(items, depth + 1);
    }
    if let Some(addl) = obj.get_mut("additionalProperties") {
        add_embedded_properties(addl, depth + 1);
    }
    if obj.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
        let props = obj
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(props) = props.as_object_mut() {
            props.insert("apiVersion".into(), json!({"type": "string"}));
            props.insert("kind".into(), json!({"type": "string"}));
            props.insert("metadata".into(), json!({"$ref": OBJECT_META}));
        }
    }
}

fn relationship_of_map(s: &Map<String, Value>) -> Option<Relationship> {
    match s.get("x-kubernetes-map-type").and_then(Value::as_str) {
        Some("atomic") => Some(Relationship::Atomic),
        Some("granular") => Some(Relationship::Separable),
        _ => None,
    }
}

/// schemaconv `getListElementRelationship` (CRD lists default to atomic).
fn list_relationship(s: &Map<String, Value>) -> (Relationship, Vec<String>) {
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => (Relationship::Associative, Vec::new()),
        Some("map") => {
            let keys = s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            (Relationship::Associative, keys)
        }
        Some(_) => (Relationship::Atomic, Vec::new()),
        None => match s.get("x-kubernetes-patch-strategy").and_then(Value::as_str) {
            Some("merge") | Some("merge,retainKeys") => {
                match s
                    .get("x-kubernetes-patch-merge-key")
                    .and_then(Value::as_str)
                {
                    Some(k) => (Relationship::Associative, vec![k.to_string()]),
                    None => (Relationship::Associative, Vec::new()),
                }
            }
            _ => (Relationship::Atomic, Vec::new()),
        },
    }
}

/// schemaconv `makeOpenAPIRef`.
fn typeref(s: &Value, preserve: bool, depth: usize) -> TypeSpec {
    if let Some(obj) = s.as_object() {
        let reference = obj.get("$ref").and_then(Value::as_str).or_else(|| {
            match obj
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                Some([single]) => single.get("$ref").and_then(Value::as_str),
                _ => None,
            }
        });
        if let Some(name) = reference.and_then(|r| r.rsplit('/').next()) {
            if !name.is_empty() {
                return TypeSpec::Named {
                    name: TypeName::new(name),
                    relationship: relationship_of_map(obj),
                };
            }
        }
    }
    TypeSpec::Inline(convert(s, preserve, depth))
}

/// schemaconv `visitSpec`/`parseSchema`.
fn convert(s: &Value, preserve: bool, depth: usize) -> Atom {
    let deduced = || Atom {
        scalar: Some(Scalar::Untyped),
        list: Some(Arc::new(ListDef {
            element: TypeSpec::named(UNTYPED_ATOMIC),
            relationship: Some(Relationship::Atomic),
            keys: Vec::new(),
        })),
        map: Some(Arc::new(MapDef::new(
            HashMap::new(),
            Some(TypeSpec::named(UNTYPED_DEDUCED)),
            None,
        ))),
    };
    let Some(obj) = s.as_object() else {
        return deduced();
    };
    if depth > MAX_SCHEMA_DEPTH {
        return deduced();
    }
    let preserve =
        preserve || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let typ = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.first().and_then(Value::as_str).unwrap_or(""),
        _ => "",
    };
    match typ {
        "" => Atom {
            scalar: Some(Scalar::Untyped),
            list: Some(Arc::new(convert_list(obj, preserve, depth))),
            map: Some(Arc::new(convert_map(obj, preserve, depth))),
        },
        "object" => Atom {
            map: Some(Arc::new(convert_map(obj, preserve, depth))),
            ..Atom::default()
        },
        "array" => Atom {
            list: Some(Arc::new(convert_list(obj, preserve, depth))),
            ..Atom::default()
        },
        "integer" | "number" => scalar_atom(Scalar::Numeric),
        "boolean" => scalar_atom(Scalar::Boolean),
        "string" => match obj.get("format").and_then(Value::as_str).unwrap_or("") {
            "" | "byte" => scalar_atom(Scalar::String),
            _ => scalar_atom(Scalar::Untyped),
        },
        // schemaconv reports "unrecognized type" (failing the whole
        // conversion); such a CRD is not structural and never published.
        _ => scalar_atom(Scalar::Untyped),
    }
}

fn scalar_atom(s: Scalar) -> Atom {
    Atom {
        scalar: Some(s),
        ..Atom::default()
    }
}

/// schemaconv `parseObject`.
fn convert_map(obj: &Map<String, Value>, preserve: bool, depth: usize) -> MapDef {
    let mut fields = HashMap::new();
    let props = obj.get("properties").and_then(Value::as_object);
    for (name, member) in props.into_iter().flatten() {
        fields.insert(
            name.clone(),
            FieldDef {
                ty: typeref(member, preserve, depth + 1),
                default: member.get("default").cloned(),
            },
        );
    }
    let element = match obj.get("additionalProperties") {
        None | Some(Value::Null) => {
            if preserve || fields.is_empty() {
                Some(TypeSpec::named(UNTYPED_DEDUCED))
            } else {
                None
            }
        }
        Some(Value::Bool(true)) => Some(TypeSpec::named(UNTYPED_DEDUCED)),
        Some(Value::Bool(false)) => None,
        Some(schema) => Some(typeref(schema, preserve, depth + 1)),
    };
    MapDef::new(fields, element, relationship_of_map(obj))
}

/// schemaconv `parseList` (items inherit preserve-unknown-fields).
fn convert_list(obj: &Map<String, Value>, preserve: bool, depth: usize) -> ListDef {
    let (relationship, keys) = list_relationship(obj);
    let element = match obj.get("items") {
        Some(items @ Value::Object(_)) => typeref(items, preserve, depth + 1),
        _ => TypeSpec::named(UNTYPED_ATOMIC),
    };
    ListDef {
        element,
        relationship: Some(relationship),
        keys,
    }
}
