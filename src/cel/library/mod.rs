//! Functions kmutate adds to the CEL environment: the Kubernetes libraries
//! (`k8s.io/apiserver/pkg/cel/library`), `jsonpatch.escapeKey` and the
//! internal helpers of the two-variable comprehensions.

pub mod authz;
pub mod double;
pub mod format;
pub mod ip;
pub mod lists;
pub mod math;
pub mod optional_lists;
pub mod quantity;
pub mod regex;
pub mod semver;
pub mod sets;
pub mod string_format;
pub mod strings;
pub mod urls;

use super::ast::{ENTRIES_FN, MAP_INSERT_FN, MAP_MERGE_FN};
use cel::common::types::{self, CelInt, CelList, CelMap, CelMapKey, CelString};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::collections::HashMap;

/// Registers, before the crate's extensions, the overloads that must take
/// precedence over theirs (the first declared overload that accepts the
/// arguments is the one called).
pub fn register_before_extensions(env: &mut Env) -> Result<(), DeclarationError> {
    optional_lists::register_range(env)?;
    strings::register_join(env)?;
    string_format::register(env)?;
    strings::register_index_of(env)
}

/// Registers the functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    optional_lists::register(env)?;
    lists::register(env)?;
    regex::register(env)?;
    sets::register(env)?;
    urls::register(env)?;
    format::register(env)?;
    quantity::register(env)?;
    ip::register(env)?;
    semver::register(env)?;
    math::register(env)?;
    string_format::register_string(env)?;
    double::register(env)?;
    authz::register(env)?;
    // cel-go declares `duration(int)`, which fails when called (a literal
    // argument is the duration validator's `invalid duration argument`).
    env.add_overload(
        "duration",
        "kmutate_duration_int",
        vec![types::INT_TYPE],
        |_| {
            Err(ExecutionError::function_error(
                "duration",
                "type conversion error from 'int' to 'google.protobuf.Duration'",
            ))
        },
    )?;
    cel::add_overload!(env, fn escape_key: (CelString) -> CelString, name = "jsonpatch.escapeKey")?;
    env.add_overload(
        ENTRIES_FN,
        "kmutate_entries_list",
        vec![types::LIST_TYPE],
        entries,
    )?;
    env.add_overload(
        ENTRIES_FN,
        "kmutate_entries_map",
        vec![types::MAP_TYPE],
        entries,
    )?;
    env.add_overload(
        MAP_INSERT_FN,
        "kmutate_map_insert",
        vec![types::MAP_TYPE, types::DYN_TYPE, types::DYN_TYPE],
        map_insert,
    )?;
    env.add_overload(
        MAP_MERGE_FN,
        "kmutate_map_merge",
        vec![types::MAP_TYPE, types::MAP_TYPE],
        map_merge,
    )?;
    Ok(())
}

/// `jsonpatch.escapeKey`: RFC 6901 escaping of a JSON pointer segment.
fn escape_key(key: &CelString<'_>) -> CelString<'static> {
    CelString::from(key.inner().replace('~', "~0").replace('/', "~1"))
}

fn entries<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let range = &args[0];
    let mut out: Vec<Box<dyn Val + 'v>> = Vec::new();
    if let Some(list) = range.downcast_ref::<CelList>() {
        for (i, v) in list.inner().iter().enumerate() {
            let pair: Vec<Box<dyn Val + 'v>> =
                vec![Box::new(CelInt::from(i as i64)), v.clone_as_boxed()];
            out.push(Box::new(CelList::from(pair)));
        }
    } else if let Some(map) = range.downcast_ref::<CelMap>() {
        let mut items: Vec<(&CelMapKey, &Box<dyn Val + 'v>)> = map.inner().iter().collect();
        items.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in items {
            let pair: Vec<Box<dyn Val + 'v>> = vec![k.inner().clone_as_boxed(), v.clone_as_boxed()];
            out.push(Box::new(CelList::from(pair)));
        }
    } else {
        return Err(ExecutionError::no_such_overload(
            "comprehension",
            vec![range.get_type().name().to_string()],
        ));
    }
    Ok(CowVal::owned(CelList::from(out)))
}

/// A map key as cel-go's errors print it (Go's `%v`: `x`, `1`, `true`).
fn key_text(key: &dyn Val) -> String {
    if let Some(s) = key.downcast_ref::<CelString>() {
        return s.inner().to_string();
    }
    if let Some(i) = key.downcast_ref::<CelInt>() {
        return i.inner().to_string();
    }
    if let Some(u) = key.downcast_ref::<types::CelUInt>() {
        return u.inner().to_string();
    }
    if let Some(b) = key.downcast_ref::<types::CelBool>() {
        return b.inner().to_string();
    }
    format!("{key:?}")
}

fn map_insert<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = args.pop().expect("three arguments").into_owned();
    let key: CelMapKey<'v> = args.pop().expect("three arguments").try_into()?;
    let map = args.pop().expect("three arguments");
    let mut inner: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = map
        .downcast_ref::<CelMap>()
        .map(|m| {
            m.inner()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone_as_boxed()))
                .collect()
        })
        .unwrap_or_default();
    if inner.contains_key(&key) {
        return Err(ExecutionError::function_error(
            "transformMap",
            format!(
                "insert failed: key {} already exists",
                key_text(key.inner())
            ),
        ));
    }
    inner.insert(key, value);
    Ok(CowVal::owned(CelMap::from(inner)))
}

fn map_merge<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut inner: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> = HashMap::new();
    for m in &args {
        if let Some(m) = m.downcast_ref::<CelMap>() {
            for (k, v) in m.inner() {
                if inner.contains_key(k) {
                    return Err(ExecutionError::function_error(
                        "transformMapEntry",
                        format!("insert failed: key {} already exists", key_text(k.inner())),
                    ));
                }
                inner.insert(k.clone(), v.clone_as_boxed());
            }
        }
    }
    Ok(CowVal::owned(CelMap::from(inner)))
}
