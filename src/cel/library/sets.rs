//! cel-go's `ext.Sets()` library (enabled in the Kubernetes base environment
//! since 1.29): `sets.contains`, `sets.equivalent` and `sets.intersects`.
//!
//! Membership is CEL equality, so `1`, `1u` and `1.0` are one element, and
//! lists compare element-wise.

use cel::common::types::{CelBool, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "sets.contains",
        "sets_contains_list_list",
        vec![LIST_TYPE, LIST_TYPE],
        contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "sets_equivalent_list_list",
        vec![LIST_TYPE, LIST_TYPE],
        equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "sets_intersects_list_list",
        vec![LIST_TYPE, LIST_TYPE],
        intersects,
    )?;
    Ok(())
}

fn elements<'a, 'v>(
    list: &'a (dyn Val + 'v),
    function: &str,
) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
    let iterable = list
        .as_iterable()
        .ok_or_else(|| super::lists::no_such_overload(function))?;
    let mut items = iterable.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

/// The elements of two lists.
type TwoLists<'a, 'v> = (Vec<&'a (dyn Val + 'v)>, Vec<&'a (dyn Val + 'v)>);

/// The two list arguments.
fn two_lists<'a, 'b, 'v>(
    args: &'a [CowVal<'b, 'v>],
    function: &str,
) -> Result<TwoLists<'a, 'v>, ExecutionError> {
    match args {
        [a, b] => Ok((
            elements(a.as_ref(), function)?,
            elements(b.as_ref(), function)?,
        )),
        _ => Err(super::lists::no_such_overload(function)),
    }
}

/// Whether every element of `sub` equals some element of `list`.
fn contains_all(list: &[&dyn Val], sub: &[&dyn Val]) -> bool {
    sub.iter().all(|x| list.iter().any(|y| x.equals(*y)))
}

fn contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (list, sub) = two_lists(&args, "sets.contains")?;
    Ok(CowVal::owned(CelBool::from(contains_all(&list, &sub))))
}

fn equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.equivalent")?;
    Ok(CowVal::owned(CelBool::from(
        contains_all(&a, &b) && contains_all(&b, &a),
    )))
}

fn intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.intersects")?;
    Ok(CowVal::owned(CelBool::from(
        a.iter().any(|x| b.iter().any(|y| x.equals(*y))),
    )))
}
