//! What kube-apiserver 1.36's base environment has on lists of optionals
//! and lists that the `cel` crate lacks or does otherwise:
//!
//! - cel-go's optional library (`cel.OptionalTypes()`, `cel/library.go`):
//!   `optional.unwrap(list(optional(T)))` and `list(optional(T)).unwrapOpt()`
//!   (the values of the optionals that hold one, in order), and
//!   `list(T).first()` / `list(T).last()` (an optional of the first or last
//!   element, `optional.none()` for an empty list);
//! - cel-go's `ext.Lists` `lists.range(n)`: `[]` for `n <= 0` (the crate
//!   refuses a negative `n`). It is registered before the crate's extension,
//!   on `dyn`, so that it answers every call.
//!
//! Errors on values of other types are cel-go's run-time texts
//! (`no such overload: unwrapOpt(list)`).

use cel::common::types::{CelInt, CelList, CelOptional, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// The most elements `lists.range` makes (the crate's and cel-go's default).
const MAX_RANGE: i64 = 1_000_000;

/// Registers `lists.range`: before the crate's lists extension.
pub fn register_range(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("lists.range", "kmutate_lists_range", vec![DYN_TYPE], range)
}

/// Registers the optional-list functions.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "optional.unwrap",
        "optional_unwrap_list",
        vec![LIST_TYPE],
        unwrap_global,
    )?;
    env.add_member_overload(
        "unwrapOpt",
        "optional_list_unwrap_opt",
        LIST_TYPE,
        vec![],
        unwrap_member,
    )?;
    env.add_member_overload("first", "list_first", LIST_TYPE, vec![], first)?;
    env.add_member_overload("last", "list_last", LIST_TYPE, vec![], last)?;
    Ok(())
}

/// cel-go's run-time text for a call no overload accepts: `name(types)`.
pub(super) fn no_overload(function: &str, args: &[CowVal<'_, '_>]) -> ExecutionError {
    let types: Vec<&str> = args.iter().map(|a| a.get_type().name()).collect();
    ExecutionError::function_error(
        function,
        format!("no such overload: {function}({})", types.join(", ")),
    )
}

/// The elements of the single list argument.
fn list_items<'a, 'v>(
    args: &'a [CowVal<'_, 'v>],
    function: &str,
) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
    let iterable = match args {
        [list] => list.as_iterable(),
        _ => None,
    }
    .ok_or_else(|| no_overload(function, args))?;
    let mut items = iterable.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

fn unwrap<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = list_items(&args, function)?;
    let mut out: Vec<Box<dyn Val + 'v>> = Vec::new();
    for item in items {
        let opt = item
            .downcast_ref::<CelOptional>()
            .ok_or_else(|| no_overload(function, &args))?;
        if let Some(v) = opt.option() {
            out.push(v.clone_as_boxed());
        }
    }
    Ok(CowVal::owned(CelList::from(out)))
}

fn unwrap_global<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    unwrap(args, "optional.unwrap")
}

fn unwrap_member<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    unwrap(args, "unwrapOpt")
}

fn end<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    last: bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let items = list_items(&args, function)?;
    let item = if last { items.last() } else { items.first() };
    let opt = match item {
        Some(v) => CelOptional::of(v.clone_as_boxed()),
        None => CelOptional::none(),
    };
    Ok(CowVal::owned(opt))
}

fn first<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    end(args, "first", false)
}

fn last<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    end(args, "last", true)
}

fn range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let n = match args.as_slice() {
        [n] => n.downcast_ref::<CelInt>().map(|n| *n.inner()),
        _ => None,
    }
    .ok_or_else(|| no_overload("lists.range", &args))?;
    if n > MAX_RANGE {
        return Err(ExecutionError::function_error(
            "lists.range",
            format!("size must be at most {MAX_RANGE}, got {n}"),
        ));
    }
    let out: Vec<Box<dyn Val + 'v>> = (0..n.max(0))
        .map(|i| Box::new(CelInt::from(i)) as Box<dyn Val + 'v>)
        .collect();
    Ok(CowVal::owned(CelList::from(out)))
}

#[cfg(test)]
mod tests {
    use crate::cel::eval_json as eval;
    use serde_json::json;

    // Expectations from upstream's plugin (maporacle, k8s.io/apiserver v0.36.2).
    #[test]
    fn optional_lists() {
        for (src, expected) in [
            (
                "optional.unwrap([optional.of(1), optional.none()])",
                json!([1]),
            ),
            ("[optional.of(1), optional.none()].unwrapOpt()", json!([1])),
            ("optional.unwrap([]).size()", json!(0)),
            ("[1, 2].first().value()", json!(1)),
            ("[1, 2].last().value()", json!(2)),
            ("[].first().hasValue()", json!(false)),
            ("[].last().hasValue()", json!(false)),
            ("lists.range(-1).size()", json!(0)),
            ("lists.range(dyn(-5)).size()", json!(0)),
            ("lists.range(3)", json!([0, 1, 2])),
        ] {
            assert_eq!(eval(src), Ok(expected), "{src}");
        }
        for (src, expected) in [
            (
                "optional.unwrap(dyn([1]))",
                "no such overload: optional.unwrap(list)",
            ),
            ("dyn([1]).unwrapOpt()", "no such overload: unwrapOpt(list)"),
            (
                "lists.range(dyn('3'))",
                "no such overload: lists.range(string)",
            ),
        ] {
            assert_eq!(eval(src), Err(expected.to_string()), "{src}");
        }
    }
}
