//! The MutatingAdmissionPolicy CEL types: `Object` (with its nested
//! `Object.spec.template...` initializers) and `JSONPatch`.
//!
//! Upstream (`k8s.io/apiserver/pkg/cel/mutation`) accepts any type name that
//! starts with `Object` and checks, when the apply configuration is patched,
//! that each nested initializer's name is the field path from the root
//! (`CheckTypeNamesMatchFieldPathNames`). kmutate rewrites every
//! `Object...{}` literal to construct the one registered `Object` struct
//! type, passing the written name in a hidden field (see `rewrite`).

use cel::common::types::{CelOptional, CelString, CelStruct, Type};
use cel::common::value::{CowVal, Val};
use cel::{ExecutionError, StructType};
use std::collections::BTreeMap;

/// Hidden struct field carrying the type name an `Object...{}` literal was written with.
pub const TYPE_NAME_FIELD: &str = "__kmutate_type_name__";

/// The name of the root apply-configuration type.
pub const OBJECT_TYPE: &str = "Object";

/// The name of the JSON patch operation type.
pub const JSON_PATCH_TYPE: &str = "JSONPatch";

/// The `Object` struct type: any field, any nested `Object.<path>` name.
pub struct ObjectStructType {
    ty: Type,
}

impl Default for ObjectStructType {
    fn default() -> Self {
        ObjectStructType {
            ty: Type::new_struct(OBJECT_TYPE.to_string()),
        }
    }
}

/// Unwraps a value set through an optional field (`?field: optional.of(x)`):
/// `None` means the field is left out.
fn unwrap_optional_field<'b, 'v>(value: CowVal<'b, 'v>) -> Option<CowVal<'b, 'v>> {
    match value.downcast_ref::<CelOptional>() {
        Some(opt) => opt.inner().map(|v| CowVal::Owned(v.clone_as_boxed())),
        None => Some(value),
    }
}

impl StructType for ObjectStructType {
    fn get_type(&self) -> &Type {
        &self.ty
    }

    fn new_value<'b, 'v>(
        &self,
        mut fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let name = match fields.remove(TYPE_NAME_FIELD) {
            Some(v) => v
                .downcast_ref::<CelString>()
                .map(|s| s.inner().to_string())
                .unwrap_or_else(|| OBJECT_TYPE.to_string()),
            None => OBJECT_TYPE.to_string(),
        };
        let mut st = CelStruct::new(name);
        for (field, value) in fields {
            if let Some(value) = unwrap_optional_field(value) {
                st.add_field_value(field, value);
            }
        }
        Ok(Box::new(st))
    }
}

/// The `JSONPatch` struct type: `op`, `path`, `from` (strings) and `value`.
pub struct JsonPatchStructType {
    ty: Type,
}

impl Default for JsonPatchStructType {
    fn default() -> Self {
        JsonPatchStructType {
            ty: Type::new_struct(JSON_PATCH_TYPE.to_string()),
        }
    }
}

impl StructType for JsonPatchStructType {
    fn get_type(&self) -> &Type {
        &self.ty
    }

    fn new_value<'b, 'v>(
        &self,
        fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let mut st = CelStruct::new(JSON_PATCH_TYPE.to_string());
        for (field, value) in fields {
            let Some(value) = unwrap_optional_field(value) else {
                continue;
            };
            match field.as_str() {
                "op" | "path" | "from" => {
                    if value.downcast_ref::<CelString>().is_none() {
                        return Err(ExecutionError::UnexpectedType {
                            got: value.get_type().name().to_string(),
                            want: format!("string for field {field} in JSONPatch"),
                        });
                    }
                }
                "value" => {}
                _ => {
                    return Err(ExecutionError::function_error(
                        JSON_PATCH_TYPE,
                        format!("no such field '{field}'"),
                    ))
                }
            }
            st.add_field_value(field, value);
        }
        Ok(Box::new(st))
    }
}

/// Checks that every nested `Object...{}` value is named for its field path
/// from the root, as upstream's `CheckTypeNamesMatchFieldPathNames` does.
/// Returns the mismatches, one message each.
pub fn check_type_names(root: &CelStruct) -> Vec<String> {
    let mut errors = Vec::new();
    let mut path = vec![root.name().to_string()];
    check_struct(root, &mut path, &mut errors);
    errors
}

fn check_struct(st: &CelStruct, path: &mut Vec<String>, errors: &mut Vec<String>) {
    if let Some(mismatch) = name_mismatch(st, path) {
        errors.push(mismatch);
    }
    for (field, value) in st.field_values() {
        path.push(field);
        check_value(value.as_ref(), path, errors);
        path.pop();
    }
}

/// The message for a struct not named for its field path from the root
/// (`path`, whose segments joined by dots make the expected name).
fn name_mismatch(st: &CelStruct, path: &[String]) -> Option<String> {
    // Compared segment by segment: joining the path would allocate for
    // every struct of every apply configuration.
    let mut rest = st.name();
    for (i, segment) in path.iter().enumerate() {
        let after_dot = if i == 0 {
            Some(rest)
        } else {
            rest.strip_prefix('.')
        };
        match after_dot.and_then(|r| r.strip_prefix(segment.as_str())) {
            Some(r) => rest = r,
            None => {
                rest = "?";
                break;
            }
        }
    }
    (!rest.is_empty()).then(|| {
        format!(
            "unexpected type name {:?}, expected {:?}, which matches field name path from root Object type",
            st.name(),
            path.join(".")
        )
    })
}

fn check_value(value: &dyn Val, path: &mut Vec<String>, errors: &mut Vec<String>) {
    use cel::common::types::{CelList, CelMap};
    if let Some(fields) = super::convert::as_selected_fields(value) {
        return check_value(&fields.to_map(), path, errors);
    }
    if let Some(st) = value.downcast_ref::<CelStruct>() {
        check_struct(st, path, errors);
    } else if let Some(list) = value.downcast_ref::<CelList>() {
        for item in list.inner() {
            check_value(item.as_ref(), path, errors);
        }
    } else if let Some(map) = value.downcast_ref::<CelMap>() {
        for item in map.inner().values() {
            check_value(item.as_ref(), path, errors);
        }
    }
}

/// Converts an apply configuration (`Object{...}`) to JSON, checking on the
/// way, as `check_type_names` does, that nested initializers are named for
/// their field path. Mismatches come back joined by newlines, as upstream's
/// `errors.Join`.
pub fn object_to_json(root: &CelStruct) -> Result<serde_json::Value, String> {
    let mut path = vec![root.name().to_string()];
    let mut mismatches = Vec::new();
    let json = struct_to_json(root, &mut path, &mut mismatches).map_err(|e| e.to_string())?;
    if mismatches.is_empty() {
        Ok(json)
    } else {
        Err(format!("type mismatch: {}", mismatches.join("\n")))
    }
}

fn struct_to_json(
    st: &CelStruct,
    path: &mut Vec<String>,
    mismatches: &mut Vec<String>,
) -> Result<serde_json::Value, super::convert::ToJsonError> {
    if let Some(mismatch) = name_mismatch(st, path) {
        mismatches.push(mismatch);
    }
    let mut out = serde_json::Map::new();
    for (field, value) in st.field_values() {
        path.push(field);
        let converted = field_to_json(value.as_ref(), path, mismatches);
        let field = path.pop().unwrap_or_default();
        out.insert(field, converted?);
    }
    Ok(serde_json::Value::Object(out))
}

fn field_to_json(
    value: &dyn Val,
    path: &mut Vec<String>,
    mismatches: &mut Vec<String>,
) -> Result<serde_json::Value, super::convert::ToJsonError> {
    use cel::common::types::{CelList, CelMap};
    if let Some(fields) = super::convert::as_selected_fields(value) {
        return field_to_json(&fields.to_map(), path, mismatches);
    }
    if let Some(st) = value.downcast_ref::<CelStruct>() {
        return struct_to_json(st, path, mismatches);
    }
    if let Some(list) = value.downcast_ref::<CelList>() {
        return list
            .inner()
            .iter()
            .map(|item| field_to_json(item.as_ref(), path, mismatches))
            .collect::<Result<Vec<_>, _>>()
            .map(serde_json::Value::Array);
    }
    if let Some(map) = value.downcast_ref::<CelMap>() {
        let mut entries = Vec::with_capacity(map.inner().len());
        for (k, v) in map.inner() {
            let Some(key) = k.inner().downcast_ref::<CelString>() else {
                return Err(super::convert::ToJsonError(format!(
                    "map key of type {} is not string",
                    k.inner().get_type().name()
                )));
            };
            entries.push((
                key.inner().to_string(),
                field_to_json(v.as_ref(), path, mismatches)?,
            ));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        return Ok(serde_json::Value::Object(entries.into_iter().collect()));
    }
    super::convert::val_to_json(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_must_be_named_for_its_whole_field_path() {
        let path: Vec<String> = ["Object", "spec", "template"].map(String::from).into();
        let named = |name: &str| name_mismatch(&CelStruct::new(name.to_string()), &path);
        assert_eq!(named("Object.spec.template"), None);
        for wrong in [
            "Object.spec",
            "Object.spec.templat",
            "Object.spec.template.spec",
            "Object.spec.template.",
            "Objectspec.template",
            "Object.spectemplate",
            "object.spec.template",
            "",
        ] {
            let message = named(wrong).unwrap_or_else(|| panic!("{wrong:?} passed"));
            assert_eq!(
                message,
                format!("unexpected type name {wrong:?}, expected \"Object.spec.template\", which matches field name path from root Object type")
            );
        }
        let root: Vec<String> = vec!["Object".into()];
        assert_eq!(name_mismatch(&CelStruct::new("Object".into()), &root), None);
    }
}
