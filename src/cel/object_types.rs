//! The MutatingAdmissionPolicy CEL types: `Object` (with its nested
//! `Object.spec.template...` initializers) and `JSONPatch`.
//!
//! Upstream (`k8s.io/apiserver/pkg/cel/mutation`) accepts any type name that
//! starts with `Object` and checks, when the apply configuration is patched,
//! that each nested initializer's name is the field path from the root
//! (`CheckTypeNamesMatchFieldPathNames`). kmutate rewrites every
//! `Object...{}` literal to construct the one registered `Object` struct
//! type, passing the written name in a hidden field (see `rewrite`), which
//! builds a [`StructValue`] of that name.

use cel::common::traits::{Indexer, Zeroer};
use cel::common::types::{CelOptional, CelString, Type};
use cel::common::value::{CowVal, Val};
use cel::{ExecutionError, StructType};
use std::collections::BTreeMap;
use std::sync::Arc;

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
        let fields = fields
            .into_iter()
            .filter_map(|(field, value)| {
                unwrap_optional_field(value).map(|value| (field, value.into_owned()))
            })
            .collect();
        Ok(Box::new(StructValue::new(name, fields)))
    }
}

/// A value of one of the policy struct types, `Object...{}` or
/// `JSONPatch{}`: the type name it was written with and its fields, shared.
///
/// The `cel` crate's own struct value copies every field when it is copied,
/// and `map()` copies each value it appends; a copy of this one copies a
/// pointer. Its fields are listed in name order, each once (they come from
/// the crate's map of the literal's fields).
#[derive(Debug, Clone)]
pub struct StructValue<'v>(Arc<StructData<'v>>);

#[derive(Debug)]
struct StructData<'v> {
    ty: Type,
    fields: Vec<(String, Box<dyn Val + 'v>)>,
}

/// What [`StructValue::as_any`](Val::as_any) answers: it tells a
/// `StructValue` from any other value (see [`as_struct`]).
struct StructMarker;

static STRUCT_MARKER: StructMarker = StructMarker;

/// The type [`Val::cel_type`] names for every `StructValue`.
static STRUCT_VALUE_TYPE: std::sync::LazyLock<Type> =
    std::sync::LazyLock::new(|| Type::new_struct(OBJECT_TYPE.to_string()));

/// `value` as a [`StructValue`], if it is one.
pub fn as_struct<'b, 'v>(value: &'b (dyn Val + 'v)) -> Option<&'b StructValue<'v>> {
    if value
        .as_any()
        .is_some_and(|any| any.downcast_ref::<StructMarker>().is_some())
    {
        // SAFETY: only `StructValue` answers `as_any` with the private
        // `StructMarker`, so the value is a `StructValue<'v>` (its lifetime
        // bound is the trait object's).
        Some(unsafe { &*(value as *const (dyn Val + 'v) as *const StructValue<'v>) })
    } else {
        None
    }
}

impl<'v> StructValue<'v> {
    /// A value of type `name` with `fields`, in name order, each once.
    fn new(name: String, fields: Vec<(String, Box<dyn Val + 'v>)>) -> Self {
        StructValue(Arc::new(StructData {
            ty: Type::new_struct(name),
            fields,
        }))
    }

    /// The type name the literal was written with (`Object.spec`).
    pub fn name(&self) -> &str {
        self.0.ty.name()
    }

    /// The fields set, in name order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &(dyn Val + 'v))> {
        self.0.fields.iter().map(|(k, v)| (k.as_str(), v.as_ref()))
    }

    /// The field `name`, if set.
    pub fn field(&self, name: &str) -> Option<&(dyn Val + 'v)> {
        let fields = &self.0.fields;
        fields
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| fields[i].1.as_ref())
    }

    /// A copy whose fields borrow nothing, made with `copy`.
    pub fn to_static<E>(
        &self,
        mut copy: impl FnMut(&dyn Val) -> Result<Box<dyn Val + 'static>, E>,
    ) -> Result<StructValue<'static>, E> {
        let fields = self
            .0
            .fields
            .iter()
            .map(|(k, v)| Ok((k.clone(), copy(v.as_ref())?)))
            .collect::<Result<_, E>>()?;
        Ok(StructValue::new(self.name().to_string(), fields))
    }
}

impl Val for StructValue<'_> {
    fn get_type(&self) -> &Type {
        &self.0.ty
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &STRUCT_VALUE_TYPE
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(self.clone())
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn into_indexer<'w>(self: Box<Self>) -> Option<Box<dyn Indexer + 'w>>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_zeroer(&self) -> Option<&dyn Zeroer> {
        Some(self)
    }

    /// As the crate's struct: the same type name and equal fields.
    fn equals(&self, other: &dyn Val) -> bool {
        as_struct(other).is_some_and(|other| {
            Arc::ptr_eq(&self.0, &other.0)
                || (self.name() == other.name()
                    && self.0.fields.len() == other.0.fields.len()
                    && self
                        .fields()
                        .zip(other.fields())
                        .all(|((k, v), (l, w))| k == l && v.equals(w)))
        })
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(&STRUCT_MARKER)
    }
}

impl Indexer for StructValue<'_> {
    fn get<'b, 'w>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        let Some(field) = idx.downcast_ref::<CelString>() else {
            return Err(ExecutionError::no_such_overload(
                "_[_]",
                vec![self.name().to_string(), idx.get_type().name().to_string()],
            ));
        };
        self.field(field.inner())
            .map(CowVal::Borrowed)
            .ok_or_else(|| ExecutionError::no_such_key(field.inner()))
    }

    fn steal<'w>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

impl Zeroer for StructValue<'_> {
    fn is_zero_value(&self) -> bool {
        self.0.fields.is_empty()
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
        let mut set = Vec::with_capacity(fields.len());
        for (field, value) in fields {
            // `?value: x` (named `?value` once checked, see
            // `rewrite::optional_struct_fields`) is set only when `x` holds
            // a value; `value: x` keeps `x`, even an optional.
            let (field, value) = match field.strip_prefix('?') {
                Some(name) => match unwrap_optional_field(value) {
                    Some(value) => (name.to_string(), value),
                    None => continue,
                },
                None => (field, value),
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
            set.push((field, value.into_owned()));
        }
        // A `?field` renamed back may be out of name order.
        set.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Box::new(StructValue::new(JSON_PATCH_TYPE.to_string(), set)))
    }
}
