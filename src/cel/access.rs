//! Which parts of a JSON input an expression can observe.
//!
//! Converting a 5 KB object to CEL for every expression dominates the cost
//! of an admission, yet most expressions read a few fields
//! (`object.metadata.labels`, `object.spec.containers`). An input reached
//! only through chains of field selections is converted along those chains
//! alone; the value at the end of a chain, and an input used any other way,
//! are converted whole. The expression cannot tell the difference: a map it
//! only selects known fields from answers those selections exactly as the
//! whole map would. A literal key is a selection too (`m['k']` reads what
//! `m.k` reads), and a field only tested for (`has(m.k)`, `'k' in m`,
//! `m.?k.hasValue()`) is not converted at all, nor is what the items of a
//! list only counted (`size(l)`) hold.

use cel::common::ast::{operators, ComprehensionExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::CelString;
use std::collections::BTreeMap;

/// The part of one input an expression (or a set of them) can observe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Never read.
    #[default]
    None,
    /// Only tested for (`has(x.f)`, `'f' in x`): its value is never read.
    Present,
    /// Read as a whole.
    Full,
    /// Only these fields are selected (each read as its own access says).
    Fields(BTreeMap<String, Access>),
    /// Only iterated by comprehensions whose variable reads each element as
    /// the inner access says (`containers.all(c, c.name != '')`).
    Elements(Box<Access>),
}

impl Access {
    /// `Fields` of these (field, access) pairs, for tests.
    #[cfg(test)]
    pub(crate) fn fields(entries: &[(&str, Access)]) -> Access {
        Access::Fields(
            entries
                .iter()
                .map(|(k, a)| (k.to_string(), a.clone()))
                .collect(),
        )
    }

    /// What `ast` can observe of the top-level variable `name`.
    pub fn of(ast: &IdedExpr, name: &str) -> Access {
        let mut access = Access::None;
        visit(ast, name, &mut access);
        access
    }

    /// What `ast` can observe of `name` when the value of `ast` is itself
    /// observed only as `result` says (a policy variable whose readers
    /// select a few fields of it): a part of `name` that becomes the result
    /// unchanged (`object.spec`, or the elements a `filter` keeps) is read
    /// as the result is.
    pub fn of_read_as(ast: &IdedExpr, name: &str, result: &Access) -> Access {
        let mut access = Access::None;
        visit_result(ast, name, &mut access, result);
        access
    }

    /// What is read of the field `field` of a value read as `self` says.
    pub fn field(&self, field: &str) -> Access {
        match self {
            Access::None | Access::Present => Access::None,
            Access::Fields(fields) => fields.get(field).cloned().unwrap_or_default(),
            Access::Full | Access::Elements(_) => Access::Full,
        }
    }

    /// What is read of each element of a list read as `self` says.
    fn element(&self) -> Access {
        match self {
            Access::None | Access::Present => Access::None,
            Access::Elements(inner) => (**inner).clone(),
            Access::Full | Access::Fields(_) => Access::Full,
        }
    }

    /// The fields selected of an object read as `self` says, when it is
    /// read field by field: none of an object only tested for, which stands
    /// in for itself as a view of no field.
    pub fn selected(&self) -> Option<&BTreeMap<String, Access>> {
        /// The fields read of an object only tested for.
        static NONE: BTreeMap<String, Access> = BTreeMap::new();
        match self {
            Access::Fields(fields) => Some(fields),
            Access::Present => Some(&NONE),
            _ => None,
        }
    }

    /// What is read of each item of a list read as `self` says, when it is
    /// read item by item: of a list only tested for, its items are too.
    pub fn items(&self) -> Option<&Access> {
        match self {
            Access::Elements(inner) => Some(inner),
            Access::Present => Some(self),
            _ => None,
        }
    }

    /// Whether nothing is read.
    pub fn is_none(&self) -> bool {
        matches!(self, Access::None)
    }

    /// Adds what `other` reads.
    pub fn merge(&mut self, other: &Access) {
        match (&mut *self, other) {
            (_, Access::None) | (Access::Full, _) => {}
            // Any other read covers a test for presence.
            (this, Access::Present) => {
                if this.is_none() {
                    *this = Access::Present;
                }
            }
            (this @ (Access::None | Access::Present), _) | (this, Access::Full) => {
                *this = other.clone()
            }
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

    /// Adds a read of the value at each of `paths` as `leaf` says.
    fn add_at_each(&mut self, paths: &[Vec<&str>], leaf: &Access) {
        for path in paths {
            self.add_at(path, leaf);
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
            // A field selected from a value tested for presence is present
            // whenever the selection succeeds: the selection covers the test.
            Access::None | Access::Present => {
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
    // `'f' in chain`: as `has(chain.f)` on a map (on a list, the chain's
    // value is not an object, and is converted whole).
    if let Some((key, map)) = key_search(e) {
        return visit_chain(map, &[key], &Access::Present, name, access);
    }
    // `size(chain)`: a list's size depends on its items, not on what they
    // hold. A map or a string read this way is converted whole.
    if let Some(sized) = size_operand(e) {
        let items_only = Access::Elements(Box::new(Access::Present));
        return visit_chain(sized, &[], &items_only, name, access);
    }
    // `chain.?f.hasValue()`: as `has(chain.f)`, `f` is only tested for.
    if let Some(tested) = has_value_operand(e) {
        return visit_chain(tested, &[], &Access::Present, name, access);
    }
    match &e.expr {
        Expr::Ident(ident) if names(ident, name) => *access = Access::Full,
        // `has(chain.f)`: `f` is only tested for.
        Expr::Select(select) if select.test => visit_chain(
            &select.operand,
            &[&select.field],
            &Access::Present,
            name,
            access,
        ),
        // The outermost step of a chain is met first: it gives the longest path.
        Expr::Select(_) | Expr::Call(_) if chain_step(e).is_some() => {
            visit_chain(e, &[], &Access::Full, name, access)
        }
        // A comprehension variable of the same name hides the input: too
        // rare to be worth telling apart, so the input is read whole.
        Expr::Comprehension(c)
            if c.iter_var == name || c.accu_var == name || c.iter_var2.as_deref() == Some(name) =>
        {
            *access = Access::Full
        }
        // Over a short list of string literals (`['containers',
        // 'initContainers'].map(f, object.spec[?f]...)`): the variable is one
        // of them in each iteration, so the body reads what it reads with
        // each literal written in the variable's place.
        // The initial value and the result are outside the variable's scope.
        Expr::Comprehension(c)
            if c.iter_var2.is_none() && literal_strings(&c.iter_range).is_some() =>
        {
            visit(&c.accu_init, name, access);
            visit(&c.result, name, access);
            for text in literal_strings(&c.iter_range).unwrap_or_default() {
                for part in [&c.loop_cond, &c.loop_step] {
                    let mut written = part.clone();
                    write_literal(&mut written, &c.iter_var, text);
                    visit(&written, name, access);
                }
            }
        }
        Expr::Comprehension(c) if c.iter_var2.is_none() => {
            let parts = [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result];
            // The range's elements are read as the iteration variable is, or
            // (the two-variable forms) as the variable's value is.
            let (range, element) = match entries_of(&c.iter_range) {
                Some(range) => (range, entry_value_access(&parts, &c.iter_var)),
                None => {
                    let mut element = Access::None;
                    for part in parts {
                        visit(part, &c.iter_var, &mut element);
                    }
                    (&c.iter_range, element)
                }
            };
            let elements = Access::Elements(Box::new(element));
            match range_paths(range, name) {
                // Iterating (fields of) the input.
                Some(paths) => access.add_at_each(&paths, &elements),
                // Iterating a value made from the input (the result of a
                // `filter` of its field: `x.filter(c, p).map(c, c.name)`).
                None => visit_result(uncharged(range), name, access, &elements),
            }
            for part in parts {
                visit(part, name, access);
            }
        }
        _ => super::ast::for_each_child(e, &mut |child| visit(child, name, access)),
    }
}

/// What the expressions of one activation, and the policy variables
/// (name, expression) they may evaluate, can observe of the input `name`.
/// A variable's own value is read only as the expressions and the other
/// variables read `variables.<its name>`.
pub fn activation_access(
    expressions: &[&IdedExpr],
    variables: &[(&str, &IdedExpr)],
    name: &str,
) -> Access {
    let mut variables_read = Access::None;
    for e in expressions.iter().chain(variables.iter().map(|(_, e)| e)) {
        variables_read.merge(&Access::of(e, "variables"));
    }
    let mut access = Access::None;
    for e in expressions {
        access.merge(&Access::of(e, name));
    }
    for (variable, e) in variables {
        access.merge(&Access::of_read_as(
            e,
            name,
            &variables_read.field(variable),
        ));
    }
    access
}

/// Adds a read of `tail` (fields selected in order) below the chain `e`, as
/// `leaf` says, when `e` is a chain from `name`; otherwise visits `e`.
fn visit_chain(e: &IdedExpr, tail: &[&str], leaf: &Access, name: &str, access: &mut Access) {
    match chain_from(e, name) {
        Ok(mut path) => {
            path.extend_from_slice(tail);
            access.add_at(&path, leaf);
        }
        Err(root) => visit(root, name, access),
    }
}

/// The fields a chain of field selections selects in order from the
/// variable `name` (none when `e` is `name` itself), or the operand it
/// starts from when that is not `name`.
fn chain_from<'e>(e: &'e IdedExpr, name: &str) -> Result<Vec<&'e str>, &'e IdedExpr> {
    let mut path = Vec::new();
    let mut node = e;
    loop {
        if let Some((operand, field)) = chain_step(node) {
            path.push(field);
            node = operand;
        } else if let Some(optional) = or_empty(node) {
            node = optional;
        } else {
            break;
        }
    }
    match &node.expr {
        Expr::Ident(ident) if names(ident, name) => {
            path.reverse();
            Ok(path)
        }
        _ => Err(node),
    }
}

/// One step of a chain of field selections: the operand and the field of
/// `operand.field`, or of `operand['field']` (a literal key selects as a
/// field does: on a map both find the same entry or fail the same way).
/// The optional forms `operand.?field` and `operand[?'field']` are steps
/// too: they look the field up as `operand['field']` does (on the operand,
/// or on the value an optional operand holds) and turn a failed lookup into
/// `optional.none()`, so they read the same part of the input.
fn chain_step(e: &IdedExpr) -> Option<(&IdedExpr, &str)> {
    match &e.expr {
        Expr::Select(select) if !select.test => Some((&select.operand, &select.field)),
        Expr::Call(call)
            if (call.func_name == operators::INDEX
                || call.func_name == operators::OPT_INDEX
                || call.func_name == operators::OPT_SELECT)
                && call.target.is_none()
                && call.args.len() == 2 =>
        {
            Some((&call.args[0], string_literal(&call.args[1])?))
        }
        _ => None,
    }
}

/// The operand of `size(operand)` or `operand.size()`.
fn size_operand(e: &IdedExpr) -> Option<&IdedExpr> {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    match (call.target.as_deref(), call.args.as_slice()) {
        (None, [operand]) | (Some(operand), []) if call.func_name == "size" => Some(operand),
        _ => None,
    }
}

/// The optional chain of `chain.hasValue()`, when its last step is an
/// optional selection (`x.?f`, `x[?'f']`): it holds a value exactly when
/// the field is there, as `has(x.f)` tests.
fn has_value_operand(e: &IdedExpr) -> Option<&IdedExpr> {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    let target = call.target.as_deref()?;
    (call.func_name == "hasValue" && call.args.is_empty() && is_optional_step(target))
        .then_some(target)
}

/// The range of a two-variable comprehension (`range.all(k, v, ..)`,
/// `range.transformList(i, v, ..)`), which the rewrite turns into a
/// comprehension over `@kmutate_entries(range)`: one `[key, value]` list
/// per entry.
fn entries_of(e: &IdedExpr) -> Option<&IdedExpr> {
    match &uncharged(e).expr {
        Expr::Call(call)
            if call.func_name == super::ast::ENTRIES_FN
                && call.target.is_none()
                && call.args.len() == 1 =>
        {
            Some(&call.args[0])
        }
        _ => None,
    }
}

/// What `parts` read of each value of a comprehension over
/// `@kmutate_entries(range)` whose variable is `var`: the rewrite reads the
/// key (or index) as `var[0]` and the value as `var[1]`, so the value is
/// read as `var[1]` is. Any other use of `var` reads the value whole.
fn entry_value_access(parts: &[&IdedExpr], var: &str) -> Access {
    // Not a name an expression can spell.
    let value_var = format!("{var}#value");
    let key_var = format!("{var}#key");
    let mut value = Access::None;
    for part in parts {
        let mut written = (*part).clone();
        write_entry_parts(&mut written, var, &key_var, &value_var);
        let mut other = Access::None;
        visit(&written, var, &mut other);
        if !other.is_none() {
            return Access::Full;
        }
        visit(&written, &value_var, &mut value);
    }
    value
}

/// Writes the identifiers `key_var` and `value_var` in place of `var[0]`
/// and `var[1]` in `e`.
fn write_entry_parts(e: &mut IdedExpr, var: &str, key_var: &str, value_var: &str) {
    if let Expr::Call(call) = &e.expr {
        if let (operators::INDEX, None, [entry, index]) = (
            call.func_name.as_str(),
            call.target.as_deref(),
            call.args.as_slice(),
        ) {
            if matches!(&entry.expr, Expr::Ident(i) if i == var) {
                match &index.expr {
                    Expr::Literal(LiteralValue::Int(i)) if **i == 0 => {
                        e.expr = Expr::Ident(key_var.to_string());
                        return;
                    }
                    Expr::Literal(LiteralValue::Int(i)) if **i == 1 => {
                        e.expr = Expr::Ident(value_var.to_string());
                        return;
                    }
                    _ => {}
                }
            }
        }
    }
    super::ast::for_each_child_mut(e, &mut |child| {
        write_entry_parts(child, var, key_var, value_var)
    });
}

/// The optional chain of `chain.orValue({})` or `chain.orValue([])`, when
/// its last step is an optional selection: the value is the field's where
/// it is there, and otherwise an empty map or list, made of no input. So
/// the value is read as the field would be.
fn or_empty(e: &IdedExpr) -> Option<&IdedExpr> {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    let (Some(optional), [default]) = (call.target.as_deref(), call.args.as_slice()) else {
        return None;
    };
    let empty = match &default.expr {
        Expr::List(l) => l.elements.is_empty(),
        Expr::Map(m) => m.entries.is_empty(),
        _ => false,
    };
    (call.func_name == "orValue" && empty && is_optional_step(optional)).then_some(optional)
}

/// Whether `e` is an optional selection (`x.?f`, `x[?'f']`).
fn is_optional_step(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Call(step)
        if step.func_name == operators::OPT_SELECT || step.func_name == operators::OPT_INDEX)
        && chain_step(e).is_some()
}

/// The literal key and the searched value of `'key' in value`.
fn key_search(e: &IdedExpr) -> Option<(&str, &IdedExpr)> {
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    match call.args.as_slice() {
        [key, value] if call.func_name == operators::IN && call.target.is_none() => {
            Some((string_literal(key)?, uncharged(value)))
        }
        _ => None,
    }
}

/// `e` without the wrapper that charges its value's cost: a comprehension's
/// range is wrapped to count the values it copies into the iteration
/// variable (kmutate's allocation guard; with fewer values converted, fewer
/// are copied), the right side of `in` to charge the lookup, the sides of
/// `+` to charge the concatenation by their sizes.
fn uncharged(e: &IdedExpr) -> &IdedExpr {
    match &e.expr {
        Expr::Call(call)
            if (call.func_name == super::ast::RANGE_FN
                || call.func_name == super::ast::DYN_FN
                || call.func_name == super::ast::SIZE_FN)
                && call.args.len() == 2 =>
        {
            &call.args[1]
        }
        _ => e,
    }
}

/// The text of a string literal.
fn string_literal(e: &IdedExpr) -> Option<&str> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner()),
        _ => None,
    }
}

/// [`visit`] for an expression whose value is observed as `result` says.
fn visit_result(e: &IdedExpr, name: &str, access: &mut Access, result: &Access) {
    if matches!(result, Access::Full) || matches!(access, Access::Full) {
        return visit(e, name, access);
    }
    match &e.expr {
        Expr::Ident(ident) if names(ident, name) => access.merge(result),
        Expr::Select(_) | Expr::Call(_) if chain_step(e).is_some() => match chain_path(e, name) {
            Some(path) => access.add_at(&path, result),
            None => visit(e, name, access),
        },
        Expr::Call(call) if call.func_name == "_?_:_" && call.args.len() == 3 => {
            visit(&call.args[0], name, access);
            visit_result(&call.args[1], name, access, result);
            visit_result(&call.args[2], name, access, result);
        }
        Expr::Comprehension(c)
            if c.iter_var != name && c.accu_var != name && c.iter_var2.is_none() =>
        {
            match (filter_parts(c), range_paths(&c.iter_range, name)) {
                // `name.path.filter(x, cond)`: the kept elements are read as
                // the result's elements are, and as `cond` reads `x`.
                (Some((cond, kept)), Some(paths)) if is_ident(kept, &c.iter_var) => {
                    let mut elements = result.element();
                    visit(cond, &c.iter_var, &mut elements);
                    access.add_at_each(&paths, &Access::Elements(Box::new(elements)));
                    visit(cond, name, access);
                }
                _ => visit(e, name, access),
            }
        }
        _ => visit(e, name, access),
    }
}

/// The condition and the appended element of a `filter` macro's expansion
/// (`@result + [x]` when the condition holds), when `c` is one.
fn filter_parts(c: &ComprehensionExpr) -> Option<(&IdedExpr, &IdedExpr)> {
    let is_accu = |e: &IdedExpr| is_ident(e, &c.accu_var);
    let empty_init = matches!(&c.accu_init.expr, Expr::List(l) if l.elements.is_empty());
    if !empty_init || !is_accu(&c.result) || !is_true(&c.loop_cond) {
        return None;
    }
    let Expr::Call(step) = &c.loop_step.expr else {
        return None;
    };
    let [cond, append, otherwise] = step.args.as_slice() else {
        return None;
    };
    if step.func_name != "_?_:_" || !is_accu(otherwise) {
        return None;
    }
    let Expr::Call(add) = &append.expr else {
        return None;
    };
    let [accu, list] = add.args.as_slice() else {
        return None;
    };
    match &list.expr {
        Expr::List(l) if add.func_name == "_+_" && is_accu(accu) && l.elements.len() == 1 => {
            Some((cond, &l.elements[0]))
        }
        _ => None,
    }
}

/// Whether `e` is the identifier `ident` (also under kmutate's cost
/// guard, which wraps values a comprehension copies).
fn is_ident(e: &IdedExpr, ident: &str) -> bool {
    match &e.expr {
        Expr::Ident(i) => i == ident,
        Expr::Call(call) if call.func_name == super::ast::ALLOC_FN && call.args.len() == 2 => {
            is_ident(&call.args[1], ident)
        }
        _ => false,
    }
}

fn is_true(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Literal(LiteralValue::Boolean(b)) if **b)
}

/// The chains from the variable `name` whose values a comprehension's
/// range `e` is made of, when it is made only of them: a chain (`name.a`,
/// or `name.?a.orValue([])`, see [`or_empty`]), or `+` of such ranges
/// (`name.a + name.?b.orValue([])`). The range's elements are then the
/// elements of those values, and are read as the iteration variable reads
/// them.
fn range_paths<'e>(e: &'e IdedExpr, name: &str) -> Option<Vec<Vec<&'e str>>> {
    let e = uncharged(e);
    if let Ok(path) = chain_from(e, name) {
        return Some(vec![path]);
    }
    let Expr::Call(call) = &e.expr else {
        return None;
    };
    // `+` as written, or as the cost meter's call that charges and adds.
    let (left, right) = match (call.target.as_deref(), call.args.as_slice()) {
        (None, [left, right]) if call.func_name == operators::ADD => (left, right),
        (None, [_, left, right]) if call.func_name == super::ast::ADD_FN => (left, right),
        _ => return None,
    };
    let mut paths = range_paths(left, name)?;
    paths.extend(range_paths(right, name)?);
    Some(paths)
}

/// The most literals [`literal_strings`] gives: each is a copy of the
/// comprehension's body to analyse.
const LITERAL_RANGE_MAX: usize = 8;

/// The strings of a list of (one to [`LITERAL_RANGE_MAX`]) string literals.
fn literal_strings(e: &IdedExpr) -> Option<Vec<&str>> {
    match &uncharged(e).expr {
        Expr::List(l)
            if l.optional_indices.is_empty()
                && (1..=LITERAL_RANGE_MAX).contains(&l.elements.len()) =>
        {
            l.elements.iter().map(string_literal).collect()
        }
        _ => None,
    }
}

/// Writes the string literal `text` in place of the variable `var` where
/// it is free in `e`.
fn write_literal(e: &mut IdedExpr, var: &str, text: &str) {
    match &mut e.expr {
        Expr::Ident(ident) if ident == var => {
            e.expr = Expr::Literal(LiteralValue::String(CelString::from(text.to_string())));
        }
        // Bound again inside: only the range and the initial value are in
        // the outer scope.
        Expr::Comprehension(c)
            if c.iter_var == var || c.accu_var == var || c.iter_var2.as_deref() == Some(var) =>
        {
            write_literal(&mut c.iter_range, var, text);
            write_literal(&mut c.accu_init, var, text);
        }
        _ => super::ast::for_each_child_mut(e, &mut |child| write_literal(child, var, text)),
    }
}

/// The fields selected from the variable `name` when `e` is such a chain
/// (`name.a.b`, `name['a'].b`, or `name` itself: no fields).
fn chain_path<'e>(e: &'e IdedExpr, name: &str) -> Option<Vec<&'e str>> {
    chain_from(uncharged(e), name).ok()
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

    /// `object.metadata.labels` read as `inner` says.
    fn labels(inner: Access) -> Access {
        metadata(&[("labels", inner)])
    }

    /// `object.spec`'s fields read as `entries` say.
    fn spec(entries: &[(&str, Access)]) -> Access {
        Access::fields(&[("spec", Access::fields(entries))])
    }

    /// `object.metadata`'s fields read as `entries` say.
    fn metadata(entries: &[(&str, Access)]) -> Access {
        Access::fields(&[("metadata", Access::fields(entries))])
    }

    /// A list whose elements are read as `inner` says.
    fn elements(inner: Access) -> Access {
        Access::Elements(Box::new(inner))
    }

    /// A list whose items are only counted (`size`).
    fn items_only() -> Access {
        elements(Access::Present)
    }

    /// A list of containers whose images are read.
    fn image() -> Access {
        elements(Access::fields(&[("image", Access::Full)]))
    }

    #[test]
    fn select_chains_give_paths() {
        assert_eq!(
            access("object.spec.containers"),
            spec(&[("containers", Access::Full)])
        );
        assert_eq!(
            access("has(object.metadata.labels) && object.metadata.name == 'x'"),
            metadata(&[("labels", Access::Present), ("name", Access::Full)])
        );
    }

    #[test]
    fn literal_keys_select_and_tests_read_presence_only() {
        assert_eq!(
            access("object.metadata['labels']['app'] == 'web'"),
            labels(Access::fields(&[("app", Access::Full)]))
        );
        assert_eq!(
            access("object['spec'].replicas > 1"),
            spec(&[("replicas", Access::Full)])
        );
        assert_eq!(
            access("'app' in object.metadata.labels"),
            labels(Access::fields(&[("app", Access::Present)]))
        );
        assert_eq!(
            access("has(object.metadata.labels.app)"),
            labels(Access::fields(&[("app", Access::Present)]))
        );
        // A test and a read of the same field: the read covers the test.
        assert_eq!(
            access("'app' in object.metadata.labels && object.metadata.labels.app == 'x'"),
            labels(Access::fields(&[("app", Access::Full)]))
        );
        assert_eq!(
            access("has(object.metadata.labels) && 'app' in object.metadata.labels"),
            labels(Access::fields(&[("app", Access::Present)]))
        );
        // Keys that are not string literals, and other uses: whole.
        assert_eq!(access("1 in object.metadata.labels"), labels(Access::Full));
        assert_eq!(
            access("object.metadata.labels[object.metadata.name]"),
            metadata(&[("labels", Access::Full), ("name", Access::Full)])
        );
        assert_eq!(
            access("'app' in object.metadata.labels && size(object.metadata.labels) > 1"),
            labels(Access::Full)
        );
        // A test below an index that is no literal key.
        assert_eq!(
            access("has(object.spec.containers[0].image)"),
            spec(&[("containers", Access::Full)])
        );
    }

    #[test]
    fn optional_selections_and_literal_keys_are_chain_steps() {
        assert_eq!(
            access("object.metadata.labels[?'app'].orValue('') == 'web'"),
            labels(Access::fields(&[("app", Access::Full)]))
        );
        // Whether an optional selection holds a value tests for the field;
        // after a plain selection the value is read.
        for (src, app) in [
            ("object.metadata.?labels.?app.hasValue()", Access::Present),
            (
                "object.metadata.?labels[?'app'].hasValue()",
                Access::Present,
            ),
            ("object.metadata.labels.app.hasValue()", Access::Full),
        ] {
            assert_eq!(
                access(src),
                labels(Access::fields(&[("app", app)])),
                "{src}"
            );
        }
        assert_eq!(
            access("object.?spec.orValue({}) == {}"),
            Access::fields(&[("spec", Access::Full)])
        );
        // The example policies' idiom: only `spec.os.name` is read.
        assert_eq!(
            access("object.spec.?os.?name.orValue('') != 'windows'"),
            spec(&[("os", Access::fields(&[("name", Access::Full)]))])
        );
        // A list under an optional selection is read whole as its elements
        // are not selected one by one here.
        assert_eq!(
            access("object.spec.containers + object.spec.?initContainers.orValue([])"),
            spec(&[
                ("containers", Access::Full),
                ("initContainers", Access::Full)
            ])
        );
        // A key that is no literal: the map is read whole.
        assert_eq!(
            access("object.metadata.labels[?object.metadata.name]"),
            metadata(&[("labels", Access::Full), ("name", Access::Full)])
        );
    }

    #[test]
    fn ranges_joined_from_chains_read_elements_as_their_variable_does() {
        assert_eq!(
            access("(object.spec.containers + object.spec.?initContainers.orValue([])).all(c, c.image != '')"),
            spec(&[("containers", image()), ("initContainers", image())])
        );
        assert_eq!(
            access("object.spec.?initContainers.orValue([]).exists(c, c.image == 'x')"),
            spec(&[("initContainers", image())])
        );
        // A default that is not an empty list, or a part that is no chain:
        // the lists are read whole.
        assert_eq!(
            access(
                "object.spec.?initContainers.orValue(object.spec.containers).all(c, c.image != '')"
            ),
            spec(&[
                ("containers", Access::Full),
                ("initContainers", Access::Full)
            ])
        );
        assert_eq!(
            access("(object.spec.containers + [{'image': 'x'}]).all(c, c.image != '')"),
            spec(&[("containers", Access::Full)])
        );
    }

    #[test]
    fn a_comprehension_over_a_filter_reads_the_kept_elements_as_its_variable_does() {
        let containers = |inner: Access| spec(&[("containers", elements(inner))]);
        assert_eq!(
            access("object.spec.containers.filter(c, c.image != '').map(c, c.name)"),
            containers(Access::fields(&[
                ("image", Access::Full),
                ("name", Access::Full)
            ]))
        );
        assert_eq!(
            access("object.spec.containers.filter(c, c.name in ['a']).map(c, {'n': c.name, 'r': c.?resources.orValue({})})"),
            containers(Access::fields(&[
                ("name", Access::Full),
                ("resources", Access::Full)
            ]))
        );
        // A kept element used whole: read whole.
        assert_eq!(
            access("object.spec.containers.filter(c, c.name != '').map(c, c)"),
            containers(Access::Full)
        );
        // Over a range that is neither a chain nor a filter of one: as before.
        assert_eq!(
            access("object.spec.containers.map(c, c.name).map(n, n.size())"),
            containers(Access::fields(&[("name", Access::Full)]))
        );
    }

    #[test]
    fn a_comprehension_over_literal_keys_reads_each_key() {
        assert_eq!(
            access("['containers', 'initContainers'].map(f, object.spec[?f].orValue([]).map(c, c.image))"),
            spec(&[("containers", image()), ("initContainers", image())])
        );
        assert_eq!(
            access("['containers', 'initContainers'].all(f, object.spec[f].all(c, c.image != '' && f != ''))"),
            spec(&[("containers", image()), ("initContainers", image())])
        );
        // The variable bound again inside is not the literal there.
        assert_eq!(
            access("['a'].map(f, [object.spec].map(f, f.image))"),
            Access::fields(&[("spec", Access::Full)])
        );
        // Not all literal strings: the key is unknown, the spec read whole.
        assert_eq!(
            access(
                "['containers', string(object.kind)].map(f, object.spec[?f].orValue([]).size())"
            ),
            Access::fields(&[("kind", Access::Full), ("spec", Access::Full)])
        );
    }

    #[test]
    fn an_optional_field_or_an_empty_value_is_read_as_the_field() {
        for (src, app) in [
            (
                "'app' in object.metadata.?labels.orValue({})",
                Access::Present,
            ),
            (
                "object.metadata.?labels.orValue({}).app == 'x'",
                Access::Full,
            ),
            (
                "object.metadata[?'labels'].orValue({})[?'app'].hasValue()",
                Access::Present,
            ),
        ] {
            assert_eq!(
                access(src),
                labels(Access::fields(&[("app", app)])),
                "{src}"
            );
        }
        assert_eq!(
            access("object.spec.?containers.orValue([]).all(c, c.name != '')"),
            spec(&[(
                "containers",
                elements(Access::fields(&[("name", Access::Full)]))
            )])
        );
        // Another default, or no optional field: the value is read whole.
        for src in [
            "'app' in object.metadata.?labels.orValue({'app': 'x'})",
            "'app' in object.metadata.labels.orValue({})",
            "object.metadata.?labels.orValue({}) == {}",
        ] {
            assert_eq!(access(src), labels(Access::Full), "{src}");
        }
    }

    #[test]
    fn a_size_reads_the_items_of_a_list_and_nothing_they_hold() {
        assert_eq!(
            access("size(object.spec.containers) > 1"),
            spec(&[("containers", items_only())])
        );
        assert_eq!(
            access("object.spec.?volumes.orValue([]).size() + object.spec.containers.size()"),
            spec(&[("containers", items_only()), ("volumes", items_only())])
        );
        // A map (or a string) read so is converted whole, which its size
        // needs: items are only taken from lists.
        assert_eq!(access("size(object) > 0"), items_only());
        assert_eq!(
            access("size(object.metadata.labels) > 1 && object.metadata.labels.app == 'x'"),
            labels(Access::Full)
        );
    }

    #[test]
    fn two_variable_comprehensions_read_values_as_their_value_variable_does() {
        assert_eq!(
            access("object.spec.containers.transformList(i, c, c.image != '', i)"),
            spec(&[("containers", image())])
        );
        assert_eq!(
            access("object.spec.containers.all(i, c, i < 5 && c.name != '')"),
            spec(&[(
                "containers",
                elements(Access::fields(&[("name", Access::Full)]))
            )])
        );
        assert_eq!(
            access("object.spec.?initContainers.orValue([]).transformList(i, c, Object.spec.initContainers{name: c.name, image: c.image})"),
            spec(&[(
                "initContainers",
                elements(Access::fields(&[("image", Access::Full), ("name", Access::Full)]))
            )])
        );
        // Over literal keys and an optional field, as the example policy
        // `security-drop-all-capabilities` reads.
        assert_eq!(
            access("['containers', 'initContainers'].map(f, object.spec[?f].orValue([]).transformList(i, c, !c.?securityContext.?capabilities.?drop.hasValue(), i))"),
            spec(&[
                ("containers", elements(Access::fields(&[("securityContext", Access::fields(&[("capabilities", Access::fields(&[("drop", Access::Present)]))]))]))),
                ("initContainers", elements(Access::fields(&[("securityContext", Access::fields(&[("capabilities", Access::fields(&[("drop", Access::Present)]))]))]))),
            ])
        );
        // The value used whole, or the entry itself: whole values.
        assert_eq!(
            access("object.spec.containers.transformList(i, c, c)"),
            spec(&[("containers", elements(Access::Full))])
        );
        // A map's entries: its values are read, so it is converted whole.
        assert_eq!(
            access("object.metadata.labels.all(k, v, v != '')"),
            labels(elements(Access::Full))
        );
        assert_eq!(
            access("object.metadata.labels.transformMap(k, v, k.startsWith('a'), v + k)"),
            labels(elements(Access::Full))
        );
    }

    #[test]
    fn presence_merges_below_every_other_read() {
        let fields = Access::fields(&[("a", Access::Full)]);
        let elements = Access::Elements(Box::new(Access::Full));
        for other in [Access::Full, fields, elements] {
            let mut access = Access::Present;
            access.merge(&other);
            assert_eq!(access, other);
            let mut access = other.clone();
            access.merge(&Access::Present);
            assert_eq!(access, other);
        }
        let mut access = Access::None;
        access.merge(&Access::Present);
        assert_eq!(access, Access::Present);
        access.merge(&Access::None);
        assert_eq!(access, Access::Present);
    }

    #[test]
    fn other_uses_read_the_whole_input() {
        assert_eq!(access("object"), Access::Full);
        assert_eq!(access(".object"), Access::Full);
        assert_eq!(
            access(".object.spec"),
            Access::fields(&[("spec", Access::Full)])
        );
        assert_eq!(access("object[object.kind].replicas > 1"), Access::Full);
        assert_eq!(access("optional.of(object).?spec.hasValue()"), Access::Full);
        assert_eq!(access("[1].all(object, object > 0)"), Access::Full);
        assert_eq!(access("1 == 1"), Access::None);
    }

    #[test]
    fn comprehensions_read_elements_as_their_variable_does() {
        assert_eq!(
            access("object.spec.containers.all(c, c.name != '' && has(c.image))"),
            spec(&[(
                "containers",
                elements(Access::fields(&[
                    ("image", Access::Present),
                    ("name", Access::Full)
                ]))
            )])
        );
        // `filter` keeps whole elements.
        assert_eq!(
            access("object.spec.containers.filter(c, c.name == 'a')"),
            spec(&[("containers", elements(Access::Full))])
        );
        // Iterated and also sized: the size reads no more of the elements.
        assert_eq!(
            access(
                "object.spec.containers.all(c, c.name != '') && size(object.spec.containers) > 1"
            ),
            spec(&[(
                "containers",
                elements(Access::fields(&[("name", Access::Full)]))
            )])
        );
        // Iterated and also read another way: whole.
        assert_eq!(
            access(
                "object.spec.containers.all(c, c.name != '') && object.spec.containers[0] != {}"
            ),
            spec(&[("containers", Access::Full)])
        );
    }

    #[test]
    fn a_variable_is_converted_as_far_as_its_readers_look() {
        let env = CelEnvironment::shared();
        let compile = |src: &str| env.compile(src).expect("compiles");
        let unsized_containers =
            compile("object.spec.containers.filter(c, !has(c.resources.requests))");
        let whole_spec = compile("object.spec");
        let variables = [
            ("unsized", unsized_containers.ast()),
            ("spec", whole_spec.ast()),
        ];
        let mutation = compile("variables.unsized.map(c, c.name) + [variables.spec.hostname]");
        assert_eq!(
            activation_access(&[mutation.ast()], &variables, "object"),
            spec(&[
                (
                    "containers",
                    elements(Access::fields(&[
                        ("name", Access::Full),
                        (
                            "resources",
                            Access::fields(&[("requests", Access::Present)])
                        ),
                    ]))
                ),
                ("hostname", Access::Full),
            ])
        );
        // Read whole (here compared), the variable needs the whole input.
        let whole = compile("variables.unsized != [] && variables.spec != {}");
        assert_eq!(
            activation_access(&[whole.ast()], &variables, "object"),
            Access::fields(&[("spec", Access::Full)])
        );
        // Only sized, the kept items are read only as the filter reads them.
        let sized = compile("size(variables.unsized) > 0");
        assert_eq!(
            activation_access(&[sized.ast()], &variables[..1], "object"),
            spec_containers_tested_for_requests()
        );
        // Unread, only its own reads count.
        let none = compile("1 == 1");
        assert_eq!(
            activation_access(&[none.ast()], &variables, "object"),
            spec_containers_tested_for_requests()
        );
    }

    /// `object.spec.containers`, whose items are tested for
    /// `resources.requests`.
    fn spec_containers_tested_for_requests() -> Access {
        spec(&[(
            "containers",
            elements(Access::fields(&[(
                "resources",
                Access::fields(&[("requests", Access::Present)]),
            )])),
        )])
    }

    #[test]
    fn a_shorter_path_covers_a_longer_one() {
        assert_eq!(
            access("object.spec.replicas == 1 && object.spec != {}"),
            Access::fields(&[("spec", Access::Full)])
        );
    }
}
