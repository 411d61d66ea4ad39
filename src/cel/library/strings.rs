//! cel-go's `ext.Strings(ext.StringsVersion(2))`, which kube-apiserver
//! 1.36's base environment enables, from the crate's strings extension:
//! without `string.reverse()` (version 3), and with cel-go's
//! `indexOf(sub, offset)` / `lastIndexOf(sub, offset)`, which answer -1 for
//! an offset past the end (the crate refuses it) and the offset itself for
//! an empty substring.

use super::optional_lists::no_overload;
use cel::common::types::{CelInt, CelList, CelString, DYN_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

/// The crate's strings extension as cel-go's `ext.Strings(ext.StringsVersion(2))`,
/// which kube-apiserver 1.36's base environment enables: without
/// `string.reverse()` (version 3). The extension declares `reverse` last; a
/// `reverse` on `string` declared first, which no overload accepts at run
/// time (cel-go: `no such overload: reverse(string)`), makes its declaration
/// a duplicate, and the check refuses `'abc'.reverse()` as upstream's does.
pub fn add_strings_v2(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "reverse",
        "kmutate_string_reverse_absent",
        STRING_TYPE,
        vec![],
        |args| Err(no_overload("reverse", &args)),
    )?;
    match env.add_extension(cel::extensions::strings) {
        Err(DeclarationError::DuplicateOverload { function, .. }) if function == "reverse" => {
            Ok(())
        }
        Ok(()) => panic!("the strings extension no longer declares string.reverse()"),
        Err(e) => Err(e),
    }
}

/// Registers `join` before the crate's extension, on any receiver: cel-go
/// declares it on `list(string)` alone, so a list holding anything else
/// (`dyn([1, 2]).join('-')`) has no overload, `no such overload: join(list,
/// string)`, where the crate's says `Unexpected type`.
pub fn register_join(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("join", "kmutate_join", DYN_TYPE, vec![], join)?;
    env.add_member_overload(
        "join",
        "kmutate_join_separator",
        DYN_TYPE,
        vec![DYN_TYPE],
        join,
    )
}

fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let strings = |v: &CowVal<'_, '_>| -> Option<Vec<String>> {
        let list = v.downcast_ref::<CelList>()?;
        list.inner()
            .iter()
            .map(|x| x.downcast_ref::<CelString>().map(|s| s.inner().to_string()))
            .collect()
    };
    let joined = match args.as_slice() {
        [list] => strings(list).map(|parts| parts.concat()),
        [list, sep] => match (strings(list), sep.downcast_ref::<CelString>()) {
            (Some(parts), Some(sep)) => Some(parts.join(sep.inner())),
            _ => None,
        },
        _ => None,
    };
    match joined {
        Some(s) => Ok(CowVal::owned(CelString::from(s))),
        None => Err(no_overload("join", &args)),
    }
}

/// Registers `indexOf` and `lastIndexOf` with an offset: before the crate's
/// extension, on a `dyn` offset, so that they answer every such call.
pub fn register_index_of(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "indexOf",
        "kmutate_string_index_of_offset",
        STRING_TYPE,
        vec![STRING_TYPE, DYN_TYPE],
        index_of_offset,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "kmutate_string_last_index_of_offset",
        STRING_TYPE,
        vec![STRING_TYPE, DYN_TYPE],
        last_index_of_offset,
    )
}

/// The receiver, substring and offset of `s.f(sub, offset)`.
fn offset_args(
    args: &[CowVal<'_, '_>],
    function: &str,
) -> Result<(Vec<char>, Vec<char>, i64), ExecutionError> {
    match args {
        [s, sub, off] => match (
            s.downcast_ref::<CelString>(),
            sub.downcast_ref::<CelString>(),
            off.downcast_ref::<CelInt>(),
        ) {
            (Some(s), Some(sub), Some(off)) => Ok((
                s.inner().chars().collect(),
                sub.inner().chars().collect(),
                *off.inner(),
            )),
            _ => Err(no_overload(function, args)),
        },
        _ => Err(no_overload(function, args)),
    }
}

fn index_of_offset<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (s, sub, off) = offset_args(&args, "indexOf")?;
    Ok(CowVal::owned(CelInt::from(search(
        &s, &sub, off, "indexOf", false,
    )?)))
}

fn last_index_of_offset<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (s, sub, off) = offset_args(&args, "lastIndexOf")?;
    Ok(CowVal::owned(CelInt::from(search(
        &s,
        &sub,
        off,
        "lastIndexOf",
        true,
    )?)))
}

/// cel-go's `indexOfOffset` / `lastIndexOfOffset`, in code points.
fn search(
    s: &[char],
    sub: &[char],
    off: i64,
    function: &str,
    backwards: bool,
) -> Result<i64, ExecutionError> {
    if sub.is_empty() {
        return Ok(off);
    }
    if off < 0 {
        return Err(ExecutionError::function_error(
            function,
            format!("index out of range: {off}"),
        ));
    }
    let len = s.len() as i64;
    if off >= len {
        return Ok(-1);
    }
    let last_start = len - sub.len() as i64;
    let at = |i: i64| s[i as usize..].starts_with(sub);
    let found = if backwards {
        (0..=off.min(last_start)).rev().find(|&i| at(i))
    } else {
        (off..=last_start).find(|&i| at(i))
    };
    Ok(found.unwrap_or(-1))
}

#[cfg(test)]
mod tests {
    use crate::cel::eval_json;
    use serde_json::json;

    // Expectations from upstream's plugin (maporacle, k8s.io/apiserver v0.36.2).
    #[test]
    fn index_of_with_an_offset() {
        for (src, expected) in [
            ("'hello'.indexOf('l', 10)", json!(-1)),
            ("'hello'.indexOf('l', 5)", json!(-1)),
            ("'hello'.indexOf('l', 3)", json!(3)),
            ("'hello'.indexOf('lo', 4)", json!(-1)),
            ("'hello'.indexOf('', 5)", json!(5)),
            ("'hello'.indexOf('', 10)", json!(10)),
            ("'hello'.lastIndexOf('', 10)", json!(10)),
            ("'hello'.lastIndexOf('o', 10)", json!(-1)),
            ("'hello'.lastIndexOf('l', 4)", json!(3)),
            ("'hello'.lastIndexOf('l', 2)", json!(2)),
            ("'hello'.lastIndexOf('lo', 4)", json!(3)),
        ] {
            assert_eq!(eval_json(src), Ok(expected), "{src}");
        }
        for src in ["'hello'.indexOf('l', -1)", "'hello'.lastIndexOf('l', -1)"] {
            assert_eq!(
                eval_json(src),
                Err("index out of range: -1".to_string()),
                "{src}"
            );
        }
        assert!(eval_json("'hello'.reverse()").is_err());
    }
}
