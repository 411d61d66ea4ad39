//! Rewrites of the parsed expression that give the `cel` crate the parts of
//! Kubernetes' CEL it lacks:
//!
//! - `Object.<path>{...}` literals construct the registered `Object` type,
//!   with the written name in a hidden field (see `object_types`);
//! - the two-variable comprehensions of cel-go's `ext.TwoVarComprehensions`
//!   (`all(i, v, p)`, `exists(i, v, p)`, `existsOne(i, v, p)`,
//!   `transformList`, `transformMap`, `transformMapEntry`) become ordinary
//!   comprehensions over `[key, value]` pairs.

use super::ast::{for_each_child_mut, ENTRIES_FN, MAP_INSERT_FN, MAP_MERGE_FN};
use super::object_types::{JSON_PATCH_TYPE, OBJECT_TYPE, TYPE_NAME_FIELD};
use cel::common::ast::{
    operators, CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, ListExpr,
    LiteralValue, MapExpr, StructFieldExpr,
};
use cel::common::types::{CelBool, CelInt, CelString};

const RESULT: &str = "@result";

/// Why an expression cannot be rewritten, and at which node when known.
#[derive(Debug)]
pub struct RewriteError {
    pub at: Option<u64>,
    pub message: String,
}

impl From<String> for RewriteError {
    fn from(message: String) -> Self {
        RewriteError { at: None, message }
    }
}

/// Applies every rewrite to `expr` in place. `next_id` supplies ids for new nodes.
pub fn rewrite(expr: &mut IdedExpr, next_id: &mut u64) -> Result<(), RewriteError> {
    // Children first, so nested comprehensions are already rewritten.
    let mut children = Ok(());
    for_each_child_mut(expr, &mut |c| {
        if children.is_ok() {
            children = rewrite(c, next_id);
        }
    });
    children?;

    match &mut expr.expr {
        Expr::Struct(s) if s.type_name == OBJECT_TYPE || s.type_name.starts_with("Object.") => {
            let written = std::mem::replace(&mut s.type_name, OBJECT_TYPE.to_string());
            let value = new_expr(
                next_id,
                Expr::Literal(LiteralValue::String(CelString::from(written))),
            );
            let id = bump(next_id);
            s.entries.push(IdedEntryExpr {
                id,
                expr: EntryExpr::StructField(StructFieldExpr {
                    field: TYPE_NAME_FIELD.to_string(),
                    value,
                    optional: false,
                }),
            });
        }
        Expr::Call(call) if call.target.is_some() => {
            if let Some(new) = two_var_comprehension(call, next_id)? {
                expr.expr = new;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Turns each `!x` of `ids` into `x == false`. The two agree wherever `x`
/// is a bool or an error (the `ids` the checker found, see
/// `check::Checked::bool_negations`), and the `cel` crate evaluates the
/// comparison without building the overload error `!_` prepares for a
/// non-bool operand on every evaluation.
pub fn negations_as_comparisons(e: &mut IdedExpr, ids: &[u64], next_id: &mut u64) {
    if ids.is_empty() {
        return;
    }
    if let Expr::Call(call) = &mut e.expr {
        if ids.contains(&e.id)
            && call.func_name == operators::LOGICAL_NOT
            && call.target.is_none()
            && call.args.len() == 1
        {
            call.func_name = operators::EQUALS.to_string();
            call.args.push(bool_lit(next_id, false));
        }
    }
    for_each_child_mut(e, &mut |c| negations_as_comparisons(c, ids, next_id));
}

/// Renames each conversion `from(x)` (`string`, `double`) to `to`, the
/// kmutate conversion with cel-go's results: after checking and metering,
/// which know it as `from`.
pub fn rename_conversions(e: &mut IdedExpr, from: &str, to: &str) {
    if let Expr::Call(call) = &mut e.expr {
        if call.func_name == from && call.target.is_none() && call.args.len() == 1 {
            call.func_name = to.to_string();
        }
    }
    for_each_child_mut(e, &mut |c| rename_conversions(c, from, to));
}

/// Renames each optional field `?f: x` of a `JSONPatch{}` to `?f`, once
/// checked: the crate hands a struct type its fields' values alone, and
/// only the name tells `JSONPatch` to leave out an absent one (`?value:
/// optional.none()`) but keep `value: optional.none()`, which upstream then
/// fails to marshal (`optional.none() dereference`).
pub fn optional_struct_fields(e: &mut IdedExpr) {
    if let Expr::Struct(s) = &mut e.expr {
        if s.type_name == JSON_PATCH_TYPE {
            for en in s.entries.iter_mut() {
                if let EntryExpr::StructField(f) = &mut en.expr {
                    if f.optional && !f.field.starts_with('?') {
                        f.field = format!("?{}", f.field);
                    }
                }
            }
        }
    }
    for_each_child_mut(e, &mut optional_struct_fields);
}

/// Turns each field selection on a comprehension's loop variable inside
/// its loop step, `c.name` or `has(c.name)`, into one on `true ? c : c`;
/// whether anything changed. The two evaluate alike, but the `cel` crate
/// takes `c.name` for a qualified name: it builds its segments and the
/// joined name, then looks up `c.name` before `c` in every scope, on every
/// iteration, where the conditional goes straight to `c`. Within the step
/// the variable is always bound in the innermost scopes, and no variable
/// has a dot in its name, so the qualified lookup can only end at `c`.
/// Run on the tree handed to the interpreter alone: the analyses read the
/// selections as written.
pub fn loop_selections_unqualified(e: &mut IdedExpr, next_id: &mut u64) -> bool {
    let mut changed = false;
    unqualify(e, &mut Vec::new(), next_id, &mut changed);
    changed
}

fn unqualify(e: &mut IdedExpr, bound: &mut Vec<String>, next_id: &mut u64, changed: &mut bool) {
    match &mut e.expr {
        Expr::Comprehension(c) => {
            // The range and the accumulator's start are evaluated outside the
            // loop, the condition also before the first element is bound,
            // and the result after the last (or none).
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.result,
            ] {
                unqualify(part, bound, next_id, changed);
            }
            bound.push(c.iter_var.clone());
            unqualify(&mut c.loop_step, bound, next_id, changed);
            bound.pop();
        }
        Expr::Select(select) => match &select.operand.expr {
            Expr::Ident(name) if bound.contains(name) => {
                let name = name.clone();
                let args = vec![
                    bool_lit(next_id, true),
                    ident(next_id, &name),
                    ident(next_id, &name),
                ];
                let operand = call_expr(next_id, operators::CONDITIONAL, args);
                *select.operand = operand;
                *changed = true;
            }
            _ => unqualify(&mut select.operand, bound, next_id, changed),
        },
        _ => for_each_child_mut(e, &mut |c| unqualify(c, bound, next_id, changed)),
    }
}

fn bump(next_id: &mut u64) -> u64 {
    *next_id += 1;
    *next_id
}

fn new_expr(next_id: &mut u64, expr: Expr) -> IdedExpr {
    IdedExpr {
        id: bump(next_id),
        expr,
    }
}

fn call_expr(next_id: &mut u64, name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    new_expr(
        next_id,
        Expr::Call(CallExpr {
            func_name: name.to_string(),
            target: None,
            args,
        }),
    )
}

fn ident(next_id: &mut u64, name: &str) -> IdedExpr {
    new_expr(next_id, Expr::Ident(name.to_string()))
}

fn bool_lit(next_id: &mut u64, b: bool) -> IdedExpr {
    new_expr(
        next_id,
        Expr::Literal(LiteralValue::Boolean(CelBool::from(b))),
    )
}

fn int_lit(next_id: &mut u64, i: i64) -> IdedExpr {
    new_expr(next_id, Expr::Literal(LiteralValue::Int(CelInt::from(i))))
}

/// Rewrites `range.f(k, v, ...)` for the two-variable forms; `None` for any other call.
fn two_var_comprehension(
    call: &mut CallExpr,
    next_id: &mut u64,
) -> Result<Option<Expr>, RewriteError> {
    let name = call.func_name.as_str();
    let arity_ok = match name {
        "all" | "exists" | "existsOne" | "exists_one" => call.args.len() == 3,
        "transformList" | "transformMap" | "transformMapEntry" => {
            call.args.len() == 3 || call.args.len() == 4
        }
        _ => false,
    };
    if !arity_ok {
        return Ok(None);
    }
    let (Expr::Ident(k), Expr::Ident(v)) = (&call.args[0].expr, &call.args[1].expr) else {
        return Err(format!("{name}() variable names must be simple identifiers").into());
    };
    let (k, v) = (k.clone(), v.clone());
    if k == v {
        // cel-go's words, at the second variable.
        return Err(RewriteError {
            at: Some(call.args[1].id),
            message: format!("duplicate variable name: {k}"),
        });
    }
    if k == RESULT || v == RESULT {
        return Err(format!("{name}() variable name cannot be {RESULT}").into());
    }
    let iter_var = format!("@kv{}", bump(next_id));
    let mut rest: Vec<IdedExpr> = call.args.drain(2..).collect();
    for e in rest.iter_mut() {
        substitute(e, &k, &v, &iter_var, next_id);
    }
    let range = call.target.take().map(|b| *b).unwrap_or_default();
    let iter_range = call_expr(next_id, ENTRIES_FN, vec![range]);
    let key = || -> Box<dyn Fn(&mut u64) -> IdedExpr> {
        let iv = iter_var.clone();
        Box::new(move |n: &mut u64| {
            let base = ident(n, &iv);
            let idx = int_lit(n, 0);
            call_expr(n, operators::INDEX, vec![base, idx])
        })
    };
    let result_ident = |n: &mut u64| ident(n, RESULT);

    let (accu_init, loop_cond, loop_step, result) = match name {
        "all" => {
            let pred = rest.pop().unwrap_or_default();
            let accu = result_ident(next_id);
            let cond = call_expr(next_id, operators::NOT_STRICTLY_FALSE, vec![accu]);
            let accu = result_ident(next_id);
            let step = call_expr(next_id, operators::LOGICAL_AND, vec![accu, pred]);
            (bool_lit(next_id, true), cond, step, result_ident(next_id))
        }
        "exists" => {
            let pred = rest.pop().unwrap_or_default();
            let accu = result_ident(next_id);
            let not = call_expr(next_id, operators::LOGICAL_NOT, vec![accu]);
            let cond = call_expr(next_id, operators::NOT_STRICTLY_FALSE, vec![not]);
            let accu = result_ident(next_id);
            let step = call_expr(next_id, operators::LOGICAL_OR, vec![accu, pred]);
            (bool_lit(next_id, false), cond, step, result_ident(next_id))
        }
        "existsOne" | "exists_one" => {
            let pred = rest.pop().unwrap_or_default();
            let accu = result_ident(next_id);
            let one = int_lit(next_id, 1);
            let plus = call_expr(next_id, operators::ADD, vec![accu, one]);
            let accu = result_ident(next_id);
            let step = call_expr(next_id, operators::CONDITIONAL, vec![pred, plus, accu]);
            let accu = result_ident(next_id);
            let one = int_lit(next_id, 1);
            let result = call_expr(next_id, operators::EQUALS, vec![accu, one]);
            (int_lit(next_id, 0), bool_lit(next_id, true), step, result)
        }
        _ => {
            let transform = rest.pop().unwrap_or_default();
            let filter = rest.pop();
            let accu = result_ident(next_id);
            let (init, grown) = match name {
                "transformList" => {
                    let single = new_expr(next_id, Expr::List(ListExpr::new(vec![transform])));
                    (
                        new_expr(next_id, Expr::List(ListExpr::new(vec![]))),
                        call_expr(next_id, operators::ADD, vec![accu, single]),
                    )
                }
                "transformMap" => {
                    let k_expr = key()(next_id);
                    (
                        new_expr(next_id, Expr::Map(MapExpr { entries: vec![] })),
                        call_expr(next_id, MAP_INSERT_FN, vec![accu, k_expr, transform]),
                    )
                }
                _ => (
                    new_expr(next_id, Expr::Map(MapExpr { entries: vec![] })),
                    call_expr(next_id, MAP_MERGE_FN, vec![accu, transform]),
                ),
            };
            let step = match filter {
                Some(f) => {
                    let accu = result_ident(next_id);
                    call_expr(next_id, operators::CONDITIONAL, vec![f, grown, accu])
                }
                None => grown,
            };
            (init, bool_lit(next_id, true), step, result_ident(next_id))
        }
    };
    Ok(Some(Expr::Comprehension(Box::new(ComprehensionExpr {
        iter_range,
        iter_var,
        iter_var2: None,
        accu_var: RESULT.to_string(),
        accu_init,
        loop_cond,
        loop_step,
        result,
    }))))
}

/// Replaces free occurrences of `k` and `v` with `iter_var[0]` and `iter_var[1]`.
fn substitute(expr: &mut IdedExpr, k: &str, v: &str, iter_var: &str, next_id: &mut u64) {
    match &mut expr.expr {
        Expr::Ident(name) if name == k || name == v => {
            let index = if name == k { 0 } else { 1 };
            let base = ident(next_id, iter_var);
            let idx = int_lit(next_id, index);
            expr.expr = Expr::Call(CallExpr {
                func_name: operators::INDEX.to_string(),
                target: None,
                args: vec![base, idx],
            });
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        Expr::Call(c) => {
            if let Some(t) = c.target.as_mut() {
                substitute(t, k, v, iter_var, next_id);
            }
            for a in c.args.iter_mut() {
                substitute(a, k, v, iter_var, next_id);
            }
        }
        Expr::Comprehension(c) => {
            substitute(&mut c.iter_range, k, v, iter_var, next_id);
            substitute(&mut c.accu_init, k, v, iter_var, next_id);
            // The comprehension's own variables shadow ours in its body.
            let bound =
                |n: &str| c.iter_var == n || c.accu_var == n || c.iter_var2.as_deref() == Some(n);
            let (sk, sv) = (bound(k), bound(v));
            if sk && sv {
                return;
            }
            let (k2, v2) = (if sk { "\u{0}" } else { k }, if sv { "\u{0}" } else { v });
            substitute(&mut c.loop_cond, k2, v2, iter_var, next_id);
            substitute(&mut c.loop_step, k2, v2, iter_var, next_id);
            substitute(&mut c.result, k2, v2, iter_var, next_id);
        }
        Expr::List(l) => {
            for e in l.elements.iter_mut() {
                substitute(e, k, v, iter_var, next_id);
            }
        }
        Expr::Map(m) => {
            for e in m.entries.iter_mut() {
                if let EntryExpr::MapEntry(me) = &mut e.expr {
                    substitute(&mut me.key, k, v, iter_var, next_id);
                    substitute(&mut me.value, k, v, iter_var, next_id);
                }
            }
        }
        Expr::Select(s) => substitute(&mut s.operand, k, v, iter_var, next_id),
        Expr::Struct(s) => {
            for e in s.entries.iter_mut() {
                if let EntryExpr::StructField(f) = &mut e.expr {
                    substitute(&mut f.value, k, v, iter_var, next_id);
                }
            }
        }
    }
}
