//! What kmutate adds to the `cel` crate's AST, for every stage that walks
//! it: the names of the internal functions the rewrites and the cost meter
//! insert, and walkers over an expression's direct children.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// Internal function: `[[key, value], ...]` of a list or a map.
pub const ENTRIES_FN: &str = "@kmutate_entries";
/// Internal function: map with one more entry (error on a duplicate key).
pub const MAP_INSERT_FN: &str = "@kmutate_map_insert";
/// Internal function: union of two maps (error on a duplicate key).
pub const MAP_MERGE_FN: &str = "@kmutate_map_merge";

// The meter's functions are looked up by name at every call, in the
// `cel` crate's sorted map of all function names: several hundred times a
// request on the example policies. Their names start with `!@`, which
// sorts before the operators' names (`!_`, `-_`, `@in`, `_+_`, ...) and
// every identifier, the most called first (the digit after the prefix):
// the search stops at the first keys of each node it passes.

/// `(n, x)`: charges `n`, returns `x`.
pub(crate) const CHARGE_FN: &str = "!@0kcost";
/// `(code, cond)`: charges a loop condition's cost (the high half of `code`)
/// and, when `cond` is `true`, the cost of the step it lets run (the low
/// half).
pub(crate) const LOOP_FN: &str = "!@0kcost_loop";
/// `(code, x)`: charges the call `code` names, from `x` and the remembered
/// size (or the size of a string literal, which `code` carries).
pub(crate) const DYN_FN: &str = "!@1kcost_call";
/// `(negated, a, b)`: charges `a == b` by the sizes of its operands and
/// returns it (`a != b` when `negated` is 1): one call in place of the
/// operator and the two that would charge it.
pub(crate) const EQUALS_FN: &str = "!@1kcost_equals";
/// `(0, a, b)`: charges `a + b` by its operands' sizes (a list's values
/// to the allocation guard) and returns it: one call in place of the
/// operator and the two that would charge it.
pub(crate) const ADD_FN: &str = "!@1kcost_add";
/// `(which, t, s)`: charges and answers `s.contains(t)` (`which` 0),
/// `s.startsWith(t)` (1) or `s.endsWith(t)` (2), declared on strings
/// alone: one call in place of the method and the one that charged it.
pub(crate) const STRING_PREDICATE_FN: &str = "!@1kcost_string";
/// `(code, x)`: remembers the size of `x` for the call `code` names.
pub(crate) const SIZE_FN: &str = "!@2kcost_size";
/// `(n, x)`: charges `n` and the values a comprehension copies out of its
/// range `x` into the iteration variable.
pub(crate) const RANGE_FN: &str = "!@3kcost_range";
/// `(n, x)`: charges `n` and the values of `x` to the allocation guard.
pub(crate) const ALLOC_FN: &str = "!@4kcost_alloc";
/// `(n, x)`: charges `n` and the size of `x` (a copied accumulator).
pub(crate) const GROWTH_FN: &str = "!@5kcost_growth";

/// Calls `f` on each direct sub-expression of `e`.
pub(crate) fn for_each_child<'e>(e: &'e IdedExpr, f: &mut dyn FnMut(&'e IdedExpr)) {
    match &e.expr {
        Expr::Call(c) => {
            if let Some(t) = &c.target {
                f(t);
            }
            c.args.iter().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for x in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                f(x);
            }
        }
        Expr::List(l) => l.elements.iter().for_each(&mut *f),
        Expr::Map(m) => {
            for en in &m.entries {
                if let EntryExpr::MapEntry(me) = &en.expr {
                    f(&me.key);
                    f(&me.value);
                }
            }
        }
        Expr::Select(sel) => f(&sel.operand),
        Expr::Struct(st) => {
            for en in &st.entries {
                if let EntryExpr::StructField(fe) = &en.expr {
                    f(&fe.value);
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// Calls `f` on each direct sub-expression of `e`.
pub(crate) fn for_each_child_mut(e: &mut IdedExpr, f: &mut dyn FnMut(&mut IdedExpr)) {
    match &mut e.expr {
        Expr::Call(call) => {
            if let Some(t) = call.target.as_mut() {
                f(t);
            }
            call.args.iter_mut().for_each(&mut *f);
        }
        Expr::Comprehension(c) => {
            for x in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                f(x);
            }
        }
        Expr::List(l) => l.elements.iter_mut().for_each(&mut *f),
        Expr::Map(m) => {
            for en in m.entries.iter_mut() {
                if let EntryExpr::MapEntry(me) = &mut en.expr {
                    f(&mut me.key);
                    f(&mut me.value);
                }
            }
        }
        Expr::Select(s) => f(&mut s.operand),
        Expr::Struct(s) => {
            for en in s.entries.iter_mut() {
                if let EntryExpr::StructField(fe) = &mut en.expr {
                    f(&mut fe.value);
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}
