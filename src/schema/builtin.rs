//! Loading of the generated built-in schema table (`builtin_schemas.json`,
//! written by `tools/gen_schema_table.py`; its header documents the format).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::model::{Atom, FieldDef, ListDef, MapDef, Relationship, Scalar, TypeName, TypeSpec};
use super::KindIndex;

/// The generated table, embedded at build time.
const TABLE: &str = include_str!("builtin_schemas.json");

/// The parsed table: named types and the (group, version, kind) index.
pub(crate) struct BuiltinTable {
    pub(crate) types: HashMap<String, Atom>,
    pub(crate) kinds: KindIndex,
}

/// Parses the embedded table. An unreadable table (a build defect caught by
/// the unit tests) yields an empty one rather than a panic.
pub(crate) fn load() -> BuiltinTable {
    parse(TABLE).unwrap_or_else(|_| BuiltinTable {
        types: HashMap::new(),
        kinds: KindIndex::default(),
    })
}

pub(crate) fn parse(text: &str) -> Result<BuiltinTable, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let types_json = doc
        .get("types")
        .and_then(Value::as_object)
        .ok_or("missing types")?;
    let mut types = HashMap::with_capacity(types_json.len());
    for (name, atom) in types_json {
        types.insert(
            name.clone(),
            decode_atom(atom).map_err(|e| format!("{name}: {e}"))?,
        );
    }
    let mut kinds = KindIndex::default();
    if let Some(gvk) = doc.get("gvk").and_then(Value::as_object) {
        for (key, name) in gvk {
            let mut parts = key.splitn(3, '/');
            let (Some(g), Some(v), Some(k), Some(name)) =
                (parts.next(), parts.next(), parts.next(), name.as_str())
            else {
                return Err(format!("bad gvk entry {key}"));
            };
            kinds.insert(g, v, k, TypeName::new(name));
        }
    }
    Ok(BuiltinTable { types, kinds })
}

fn relationship(v: Option<&Value>) -> Result<Option<Relationship>, String> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => Relationship::parse(s)
            .map(Some)
            .ok_or_else(|| format!("bad relationship {s}")),
        Some(other) => Err(format!("bad relationship {other}")),
    }
}

fn decode_atom(v: &Value) -> Result<Atom, String> {
    let obj = v.as_object().ok_or("atom is not an object")?;
    let mut atom = Atom::default();
    if let Some(s) = obj.get("s") {
        atom.scalar = Some(
            s.as_str()
                .and_then(Scalar::parse)
                .ok_or_else(|| format!("bad scalar {s}"))?,
        );
    }
    if let Some(l) = obj.get("l") {
        let l = l.as_object().ok_or("list is not an object")?;
        let element = decode_typeref(l.get("e").ok_or("list without element type")?)?;
        let keys = match l.get("k") {
            None => Vec::new(),
            Some(Value::Array(keys)) => keys
                .iter()
                .map(|k| k.as_str().map(str::to_string).ok_or("bad list key"))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("bad list keys".into()),
        };
        atom.list = Some(Arc::new(ListDef {
            element,
            relationship: relationship(l.get("r"))?,
            keys,
        }));
    }
    if let Some(m) = obj.get("m") {
        atom.map = Some(Arc::new(decode_map(
            m.as_object().ok_or("map is not an object")?,
        )?));
    }
    Ok(atom)
}

fn decode_map(m: &Map<String, Value>) -> Result<MapDef, String> {
    let defaults = m.get("d").and_then(Value::as_object);
    let mut fields = HashMap::new();
    if let Some(f) = m.get("f") {
        for (name, ty) in f.as_object().ok_or("fields is not an object")? {
            fields.insert(
                name.clone(),
                FieldDef {
                    ty: decode_typeref(ty)?,
                    default: defaults.and_then(|d| d.get(name)).cloned(),
                },
            );
        }
    }
    let element = m.get("e").map(decode_typeref).transpose()?;
    Ok(MapDef::new(fields, element, relationship(m.get("r"))?))
}

fn decode_typeref(v: &Value) -> Result<TypeSpec, String> {
    match v {
        Value::String(s) => Ok(match Scalar::parse(s) {
            Some(scalar) => TypeSpec::scalar(scalar),
            None => TypeSpec::named(s),
        }),
        Value::Object(o) if o.contains_key("n") => {
            let name = o.get("n").and_then(Value::as_str).ok_or("bad named ref")?;
            Ok(TypeSpec::Named {
                name: TypeName::new(name),
                relationship: relationship(o.get("r"))?,
            })
        }
        Value::Object(_) => Ok(TypeSpec::Inline(decode_atom(v)?)),
        other => Err(format!("bad type reference {other}")),
    }
}
