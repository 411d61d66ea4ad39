//! Kubernetes CEL library: lists (`k8s.io/apiserver/pkg/cel/library/lists.go`).
//!
//! `isSorted`, `sum`, `min`, `max`, `indexOf` and `lastIndexOf` on lists, as
//! the library is registered in the 1.36 base environment
//! (`UnversionedLib(library.Lists)`, i.e. version 0: no `includes`).
//!
//! Upstream declares one overload per element type and cel-go picks it at
//! runtime by the type of the list's first element (an empty list takes the
//! first declared overload, `int`). The functions below dispatch the same
//! way, on a plain `list`.

use cel::common::traits::Adder;
use cel::common::types::{CelDouble, CelDuration, CelInt, CelUInt, Kind, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::cmp::Ordering;

#[cfg(test)]
#[path = "tests_table_a.rs"]
mod tests_table_a;

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "isSorted",
        "list_is_sorted_bool",
        LIST_TYPE,
        vec![],
        is_sorted,
    )?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_a_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_a_last_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}

/// cel-go's text for a call no overload (or trait) accepts.
pub(super) fn no_such_overload(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, "no such overload")
}

/// The elements of the list argument.
fn elements<'a, 'v>(
    list: &'a (dyn Val + 'v),
    function: &str,
) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
    let iterable = list
        .as_iterable()
        .ok_or_else(|| no_such_overload(function))?;
    let mut items = iterable.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

/// The element types upstream's `comparableTypes` lists.
fn is_comparable_kind(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Int
            | Kind::UInt
            | Kind::Double
            | Kind::Boolean
            | Kind::Duration
            | Kind::Timestamp
            | Kind::String
            | Kind::Bytes
    )
}

/// `a.Compare(b)`: `None` when cel-go's comparison is an error (other
/// types, NaN), which upstream's loops treat as "not ordered".
fn compare(a: &dyn Val, b: &dyn Val) -> Option<Ordering> {
    a.as_comparer()?.compare(b).ok()
}

/// cel-go's text when no overload is declared for the list's elements
/// (`no such overload: sum(list)`).
fn no_overload_for_list(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, format!("no such overload: {function}(list)"))
}

/// Checks that the overload chosen by the first element exists and that
/// every element is a `traits.Comparer`.
fn check_comparable(items: &[&dyn Val], function: &str) -> Result<(), ExecutionError> {
    if let Some(first) = items.first() {
        if !is_comparable_kind(first.get_type().kind()) {
            return Err(no_overload_for_list(function));
        }
    }
    for item in items {
        if !is_comparable_kind(item.get_type().kind()) || item.as_comparer().is_none() {
            return Err(no_such_overload(function));
        }
    }
    Ok(())
}

fn single_arg<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
    function: &str,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 1 {
        return Err(no_such_overload(function));
    }
    Ok(args.remove(0))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = single_arg(args, "isSorted")?;
    let items = elements(list.as_ref(), "isSorted")?;
    check_comparable(&items, "isSorted")?;
    let sorted = items
        .windows(2)
        .all(|w| compare(w[0], w[1]) != Some(Ordering::Greater));
    Ok(CowVal::owned(cel::common::types::CelBool::from(sorted)))
}

/// The running total of `sum`, of the overload's type.
enum Total {
    Int(i64),
    UInt(u64),
    Double(f64),
    Duration(CelDuration),
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = single_arg(args, "sum")?;
    let items = elements(list.as_ref(), "sum")?;
    let mut total = match items.first().map(|v| v.get_type().kind()) {
        None | Some(Kind::Int) => Total::Int(0),
        Some(Kind::UInt) => Total::UInt(0),
        Some(Kind::Double) => Total::Double(0.0),
        Some(Kind::Duration) => Total::Duration(CelDuration::default()),
        Some(_) => return Err(no_overload_for_list("sum")),
    };
    for item in items {
        total = match total {
            Total::Int(acc) => {
                let v = item
                    .downcast_ref::<CelInt>()
                    .ok_or_else(|| no_such_overload("sum"))?;
                Total::Int(
                    acc.checked_add(*v.inner())
                        .ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?,
                )
            }
            Total::UInt(acc) => {
                let v = item
                    .downcast_ref::<CelUInt>()
                    .ok_or_else(|| no_such_overload("sum"))?;
                Total::UInt(acc.checked_add(*v.inner()).ok_or_else(|| {
                    ExecutionError::function_error("sum", "unsigned integer overflow")
                })?)
            }
            Total::Double(acc) => {
                let v = item
                    .downcast_ref::<CelDouble>()
                    .ok_or_else(|| no_such_overload("sum"))?;
                Total::Double(acc + *v.inner())
            }
            Total::Duration(acc) => {
                if item.downcast_ref::<CelDuration>().is_none() {
                    return Err(no_such_overload("sum"));
                }
                match acc.add(item) {
                    Ok(v) => Total::Duration(
                        v.downcast_ref::<CelDuration>()
                            .copied()
                            .ok_or_else(|| no_such_overload("sum"))?,
                    ),
                    Err(ExecutionError::Overflow(..)) => {
                        return Err(ExecutionError::function_error("sum", "integer overflow"))
                    }
                    Err(_) => return Err(no_such_overload("sum")),
                }
            }
        };
    }
    Ok(match total {
        Total::Int(v) => CowVal::owned(CelInt::from(v)),
        Total::UInt(v) => CowVal::owned(CelUInt::from(v)),
        Total::Double(v) => CowVal::owned(CelDouble::from(v)),
        Total::Duration(v) => CowVal::owned(v),
    })
}

/// `min` and `max`: the first element, replaced by each later one that
/// compares as `prefer` against the current result.
fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    prefer: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = single_arg(args, function)?;
    let items = elements(list.as_ref(), function)?;
    check_comparable(&items, function)?;
    let mut result: Option<&dyn Val> = None;
    for item in items {
        result = match result {
            None => Some(item),
            Some(current) => {
                if compare(current, item) == Some(prefer) {
                    Some(item)
                } else {
                    Some(current)
                }
            }
        };
    }
    match result {
        Some(v) => Ok(CowVal::Owned(v.clone_as_boxed())),
        None => Err(ExecutionError::function_error(
            function,
            format!("{function} called on empty list"),
        )),
    }
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", Ordering::Greater)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", Ordering::Less)
}

fn find_index<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 2 {
        return Err(no_such_overload(function));
    }
    let items = elements(args[0].as_ref(), function)?;
    let needle = args[1].as_ref();
    let found = if last {
        items.iter().rposition(|v| v.equals(needle))
    } else {
        items.iter().position(|v| v.equals(needle))
    };
    Ok(CowVal::owned(CelInt::from(found.map_or(-1, |i| i as i64))))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    find_index(args, "indexOf", false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    find_index(args, "lastIndexOf", true)
}
