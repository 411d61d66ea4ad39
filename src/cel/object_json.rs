//! Apply configurations (`Object{...}` values) to JSON: each nested
//! initializer must be named for its field path from the root, as
//! upstream's `CheckTypeNamesMatchFieldPathNames` requires.

use super::convert::{as_selected_fields, val_to_json, ToJsonError};
use super::object_types::{as_struct, StructValue};
use cel::common::types::CelString;
use cel::common::value::Val;

/// Checks that every nested `Object...{}` value is named for its field path
/// from the root, as upstream's `CheckTypeNamesMatchFieldPathNames` does.
/// Returns the mismatches, one message each.
pub fn check_type_names(root: &StructValue) -> Vec<String> {
    let mut errors = Vec::new();
    let mut path = vec![root.name().to_string()];
    check_struct(root, &mut path, &mut errors);
    errors
}

fn check_struct(st: &StructValue, path: &mut Vec<String>, errors: &mut Vec<String>) {
    if let Some(mismatch) = name_mismatch(st.name(), path) {
        errors.push(mismatch);
    }
    for (field, value) in st.fields() {
        path.push(field.to_string());
        check_value(value, path, errors);
        path.pop();
    }
}

/// The message for a struct not named for its field path from the root
/// (`path`, whose segments joined by dots make the expected name).
fn name_mismatch(name: &str, path: &[String]) -> Option<String> {
    // Compared segment by segment: joining the path would allocate for
    // every struct of every apply configuration.
    let mut rest = name;
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
            name,
            path.join(".")
        )
    })
}

fn check_value(value: &dyn Val, path: &mut Vec<String>, errors: &mut Vec<String>) {
    use cel::common::types::{CelList, CelMap};
    if let Some(fields) = as_selected_fields(value) {
        return check_value(&fields.to_map(), path, errors);
    }
    if let Some(st) = as_struct(value) {
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
pub fn object_to_json(root: &StructValue) -> Result<serde_json::Value, String> {
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
    st: &StructValue,
    path: &mut Vec<String>,
    mismatches: &mut Vec<String>,
) -> Result<serde_json::Value, ToJsonError> {
    if let Some(mismatch) = name_mismatch(st.name(), path) {
        mismatches.push(mismatch);
    }
    let mut out = serde_json::Map::new();
    for (field, value) in st.fields() {
        path.push(field.to_string());
        let converted = field_to_json(value, path, mismatches);
        let field = path.pop().unwrap_or_default();
        out.insert(field, converted?);
    }
    Ok(serde_json::Value::Object(out))
}

fn field_to_json(
    value: &dyn Val,
    path: &mut Vec<String>,
    mismatches: &mut Vec<String>,
) -> Result<serde_json::Value, ToJsonError> {
    use cel::common::types::{CelList, CelMap};
    if let Some(fields) = as_selected_fields(value) {
        return field_to_json(&fields.to_map(), path, mismatches);
    }
    if let Some(st) = as_struct(value) {
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
                return Err(ToJsonError(format!(
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
    val_to_json(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_must_be_named_for_its_whole_field_path() {
        let path: Vec<String> = ["Object", "spec", "template"].map(String::from).into();
        let named = |name: &str| name_mismatch(name, &path);
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
        assert_eq!(name_mismatch("Object", &root), None);
    }
}
