//! Which parts of a JSON input an expression can observe.
//!
//! Converting a 5 KB object to CEL for every expression dominates the cost
//! of an admission, yet most expressions read a few fields
//! (`object.metadata.labels`, `object.spec.containers`). An input reached
//! only through chains of field selections is converted along those chains
//! alone; the value at the end of a chain, and an input used any other way,
//! are converted whole. The expression cannot tell the difference: a map it
//! only selects known fields from answers those selections exactly as the
//! whole map would.

use cel::common::ast::{Expr, IdedExpr};
use std::collections::BTreeMap;

/// The part of one input an expression (or a set of them) can observe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Never read.
    #[default]
    None,
    /// Read as a whole.
    Full,
    /// Only these fields are selected (each read as its own access says).
    Fields(BTreeMap<String, Access>),
    /// Only iterated by comprehensions whose variable reads each element as
    /// the inner access says (`containers.all(c, c.name != '')`).
    Elements(Box<Access>),
}

impl Access {
    /// What `ast` can observe of the top-level variable `name`.
    pub fn of(ast: &IdedExpr, name: &str) -> Access {
        let mut access = Access::None;
        visit(ast, name, &mut access);
        access
    }

    /// Whether nothing is read.
    pub fn is_none(&self) -> bool {
        matches!(self, Access::None)
    }

    /// Adds what `other` reads.
    pub fn merge(&mut self, other: &Access) {
        match (&mut *self, other) {
            (_, Access::None) | (Access::Full, _) => {}
            (this @ Access::None, _) | (this, Access::Full) => *this = other.clone(),
            (Access::Fields(mine), Access::Fields(theirs)) => {
                for (field, access) in theirs {
                    mine.entry(field.clone()).or_default().merge(access);
                }
            }
            (Access::Elements(mine), Access::Elements(theirs)) => mine.merge(theirs),
            // Read both as a map and as a list: whole.
            (this, _) => *this = Access::Full,
        }
    }

    /// Adds a read of the value at `path` (fields selected in order) as
    /// `leaf` says.
    fn add_at(&mut self, path: &[&str], leaf: &Access) {
        let Some((first, rest)) = path.split_first() else {
            self.merge(leaf);
            return;
        };
        match self {
            Access::Full => {}
            Access::None => {
                *self = Access::Fields(BTreeMap::new());
                self.add_at(path, leaf);
            }
            Access::Fields(fields) => fields
                .entry(first.to_string())
                .or_default()
                .add_at(rest, leaf),
            Access::Elements(_) => *self = Access::Full,
        }
    }
}

/// Whether the identifier `ident` is the variable `name`, which the
/// absolute form `.name` names too.
fn names(ident: &str, name: &str) -> bool {
    ident.strip_prefix('.').unwrap_or(ident) == name
}

fn visit(e: &IdedExpr, name: &str, access: &mut Access) {
    if matches!(access, Access::Full) {
        return;
    }
    match &e.expr {
        Expr::Ident(ident) if names(ident, name) => *access = Access::Full,
        Expr::Select(_) => {
            // The outermost select of a chain is met first: it gives the
            // longest path.
            let mut path = Vec::new();
            let mut node = e;
            while let Expr::Select(select) = &node.expr {
                path.push(select.field.as_str());
                node = &select.operand;
            }
            match &node.expr {
                Expr::Ident(ident) if names(ident, name) => {
                    path.reverse();
                    access.add_at(&path, &Access::Full);
                }
                _ => visit(node, name, access),
            }
        }
        // A comprehension variable of the same name hides the input: too
        // rare to be worth telling apart, so the input is read whole.
        Expr::Comprehension(c)
            if c.iter_var == name || c.accu_var == name || c.iter_var2.as_deref() == Some(name) =>
        {
            *access = Access::Full
        }
        Expr::Comprehension(c) if c.iter_var2.is_none() => {
            let parts = [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result];
            match chain_path(&c.iter_range, name) {
                // Iterating (a field of) the input: its elements are read as
                // the iteration variable is.
                Some(path) => {
                    let mut elements = Access::None;
                    for part in parts {
                        visit(part, &c.iter_var, &mut elements);
                    }
                    access.add_at(&path, &Access::Elements(Box::new(elements)));
                }
                None => visit(&c.iter_range, name, access),
            }
            for part in parts {
                visit(part, name, access);
            }
        }
        _ => super::for_each_child(e, &mut |child| visit(child, name, access)),
    }
}

/// The fields selected from the variable `name` when `e` is such a chain
/// (`name.a.b`, or `name` itself: no fields).
fn chain_path<'e>(e: &'e IdedExpr, name: &str) -> Option<Vec<&'e str>> {
    // A comprehension's range is wrapped to count the values it copies
    // into the iteration variable (kmutate's allocation guard): with fewer
    // values converted, fewer are copied.
    let e = match &e.expr {
        Expr::Call(call) if call.func_name == super::cost::ALLOC_FN && call.args.len() == 2 => {
            &call.args[1]
        }
        _ => e,
    };
    let mut path = Vec::new();
    let mut node = e;
    while let Expr::Select(select) = &node.expr {
        if select.test {
            return None;
        }
        path.push(select.field.as_str());
        node = &select.operand;
    }
    match &node.expr {
        Expr::Ident(ident) if names(ident, name) => {
            path.reverse();
            Some(path)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::CelEnvironment;

    fn access(src: &str) -> Access {
        let env = CelEnvironment::shared();
        let compiled = env.compile(src).expect("compiles");
        Access::of(compiled.ast(), "object")
    }

    fn fields(entries: &[(&str, Access)]) -> Access {
        Access::Fields(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn select_chains_give_paths() {
        assert_eq!(
            access("object.spec.containers"),
            fields(&[("spec", fields(&[("containers", Access::Full)]))])
        );
        assert_eq!(
            access("has(object.metadata.labels) && object.metadata.name == 'x'"),
            fields(&[(
                "metadata",
                fields(&[("labels", Access::Full), ("name", Access::Full)])
            )])
        );
    }

    #[test]
    fn other_uses_read_the_whole_input() {
        assert_eq!(access("object"), Access::Full);
        assert_eq!(access(".object"), Access::Full);
        assert_eq!(access(".object.spec"), fields(&[("spec", Access::Full)]));
        assert_eq!(access("size(object) > 0"), Access::Full);
        assert_eq!(access("object['spec'].replicas > 1"), Access::Full);
        assert_eq!(access("object.?spec.orValue({}) == {}"), Access::Full);
        assert_eq!(access("[1].all(object, object > 0)"), Access::Full);
        assert_eq!(access("1 == 1"), Access::None);
    }

    #[test]
    fn comprehensions_read_elements_as_their_variable_does() {
        let elements = |inner: Access| Access::Elements(Box::new(inner));
        assert_eq!(
            access("object.spec.containers.all(c, c.name != '' && has(c.image))"),
            fields(&[(
                "spec",
                fields(&[(
                    "containers",
                    elements(fields(&[("image", Access::Full), ("name", Access::Full)]))
                )])
            )])
        );
        // `filter` keeps whole elements.
        assert_eq!(
            access("object.spec.containers.filter(c, c.name == 'a')"),
            fields(&[("spec", fields(&[("containers", elements(Access::Full))]))])
        );
        // Iterated and also read another way: whole.
        assert_eq!(
            access(
                "object.spec.containers.all(c, c.name != '') && size(object.spec.containers) > 1"
            ),
            fields(&[("spec", fields(&[("containers", Access::Full)]))])
        );
    }

    #[test]
    fn a_shorter_path_covers_a_longer_one() {
        assert_eq!(
            access("object.spec.replicas == 1 && object.spec != {}"),
            fields(&[("spec", Access::Full)])
        );
    }
}
