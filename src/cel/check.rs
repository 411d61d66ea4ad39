//! A conservative compile-time check of what upstream's type checker
//! (cel-go `checker`) rejects, for the `cel` crate has none. It only reports
//! what it can prove upstream rejects, whatever the variables hold:
//!
//! - calls to functions nobody declares: `undeclared reference to 'foo'
//!   (in container '')`;
//! - calls whose target and arguments are all literals and that no overload
//!   accepts: `found no matching overload for 'startsWith' applied to
//!   'string.(int)'`.
//!
//! Errors are reported in upstream's format, with the position of the
//! offending node and the line of source under it.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};
use cel::{Context, Env, ExecutionError};
use std::sync::Arc;

/// One error: its byte offset in the source and its message.
struct Issue {
    offset: u32,
    message: String,
}

/// Checks `ast` (already rewritten), parsed from `info.source`; the error
/// text, in upstream's words, if upstream's checker rejects it.
pub(crate) fn check(env: &Arc<Env>, ast: &IdedExpr, info: &SourceInfo) -> Result<(), String> {
    let mut checker = Checker {
        env,
        info,
        issues: Vec::new(),
    };
    checker.visit(ast, 0);
    if checker.issues.is_empty() {
        return Ok(());
    }
    let mut issues = checker.issues;
    issues.sort_by_key(|i| i.offset);
    Err(issues
        .iter()
        .map(|i| display(&info.source, i))
        .collect::<Vec<_>>()
        .join("\n"))
}

struct Checker<'a> {
    env: &'a Arc<Env>,
    info: &'a SourceInfo,
    issues: Vec<Issue>,
}

impl Checker<'_> {
    /// The offset of `e`, else (nodes the rewrites made) `fallback`.
    fn offset(&self, e: &IdedExpr, fallback: u32) -> u32 {
        self.info
            .offset_for(e.id)
            .map(|(start, _)| start)
            .unwrap_or(fallback)
    }

    fn report(&mut self, offset: u32, message: String) {
        self.issues.push(Issue { offset, message });
    }

    fn visit(&mut self, e: &IdedExpr, fallback: u32) {
        let here = self.offset(e, fallback);
        match &e.expr {
            Expr::Call(call) => {
                if let Some(t) = &call.target {
                    self.visit(t, here);
                }
                for a in &call.args {
                    self.visit(a, here);
                }
                self.check_call(e, here);
            }
            Expr::Comprehension(c) => {
                for x in [
                    &c.iter_range,
                    &c.accu_init,
                    &c.loop_cond,
                    &c.loop_step,
                    &c.result,
                ] {
                    self.visit(x, here);
                }
            }
            Expr::List(l) => {
                for x in &l.elements {
                    self.visit(x, here);
                }
            }
            Expr::Map(m) => {
                for en in &m.entries {
                    if let EntryExpr::MapEntry(me) = &en.expr {
                        self.visit(&me.key, here);
                        self.visit(&me.value, here);
                    }
                }
            }
            Expr::Select(s) => self.visit(&s.operand, here),
            Expr::Struct(s) => {
                for en in &s.entries {
                    if let EntryExpr::StructField(f) = &en.expr {
                        self.visit(&f.value, here);
                    }
                }
            }
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn check_call(&mut self, e: &IdedExpr, offset: u32) {
        let Expr::Call(call) = &e.expr else { return };
        let name = call.func_name.as_str();
        // operators and kmutate's internal functions
        if name.starts_with('_') || name.starts_with('@') || name.starts_with("!_") {
            self.check_literal_call(e, offset);
            return;
        }
        let qualified = call
            .target
            .as_ref()
            .and_then(|t| qualified_name(t))
            .map(|prefix| format!("{prefix}.{name}"));
        if let Some(q) = &qualified {
            if self.declared(q) {
                return;
            }
        }
        if !self.declared(name) {
            self.report(
                offset,
                format!("undeclared reference to '{name}' (in container '')"),
            );
            return;
        }
        self.check_literal_call(e, offset);
    }

    /// Whether the environment declares a function `name`, global or
    /// member. (A context refuses to add a function the environment declares.)
    fn declared(&self, name: &str) -> bool {
        let mut ctx = Context::with_env(self.env.clone());
        ctx.add_function(name, || 0i64).is_err()
    }

    /// A call of literals that no overload accepts: evaluating it says so.
    fn check_literal_call(&mut self, e: &IdedExpr, offset: u32) {
        let Expr::Call(call) = &e.expr else { return };
        let mut types = Vec::new();
        if let Some(t) = &call.target {
            match literal_type(t) {
                Some(t) => types.push(t),
                None => return,
            }
        }
        for a in &call.args {
            match literal_type(a) {
                Some(t) => types.push(t),
                None => return,
            }
        }
        let name = call.func_name.as_str();
        // Member calls: only the standard string functions, whose receivers
        // upstream declares as `string` alone.
        if call.target.is_some() && !STRING_MEMBERS.contains(&name) {
            return;
        }
        let numeric = |t: &str| matches!(t, "int" | "uint" | "double");
        // Equality never fails at run time; upstream declares it for two
        // arguments of one type (numbers aside, left alone here).
        if name == "_==_" || name == "_!=_" {
            let (a, b) = (types[0], types[1]);
            if a != b && !(numeric(a) && numeric(b)) {
                self.no_overload(offset, name, &types, false);
            }
            return;
        }
        // The logical operators and the conditional may not evaluate all
        // their arguments: left alone.
        if matches!(name, "_&&_" | "_||_" | "_?_:_" | "@not_strictly_false") {
            return;
        }
        let ctx = Context::with_env(self.env.clone());
        let failed = matches!(
            cel::Value::resolve_val(e, &ctx),
            Err(ExecutionError::NoSuchOverload(_)
                | ExecutionError::UnsupportedBinaryOperator(..)
                | ExecutionError::ValuesNotComparable(..))
        );
        if failed {
            self.no_overload(offset, name, &types, call.target.is_some());
        }
    }

    fn no_overload(&mut self, offset: u32, name: &str, types: &[&str], member: bool) {
        let signature = if member {
            format!("{}.({})", types[0], types[1..].join(", "))
        } else {
            format!("({})", types.join(", "))
        };
        self.report(
            offset,
            format!("found no matching overload for '{name}' applied to '{signature}'"),
        );
    }
}

/// Member functions declared on `string` receivers only (standard library,
/// `ext.Strings`, Kubernetes' regex library).
const STRING_MEMBERS: &[&str] = &[
    "startsWith",
    "endsWith",
    "contains",
    "matches",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "find",
    "findAll",
];

/// `a.b.c` of an identifier or a chain of selects on one.
fn qualified_name(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(s) if !s.test => Some(format!("{}.{}", qualified_name(&s.operand)?, s.field)),
        _ => None,
    }
}

/// The type of a literal, as upstream names it; not `null`, which is
/// assignable to several types.
fn literal_type(e: &IdedExpr) -> Option<&'static str> {
    match &e.expr {
        Expr::Literal(l) => match l {
            LiteralValue::Boolean(_) => Some("bool"),
            LiteralValue::Bytes(_) => Some("bytes"),
            LiteralValue::Double(_) => Some("double"),
            LiteralValue::Int(_) => Some("int"),
            LiteralValue::String(_) => Some("string"),
            LiteralValue::UInt(_) => Some("uint"),
            LiteralValue::Null => None,
        },
        _ => None,
    }
}

/// `ERROR: <input>:line:column: message`, then the line and a caret under
/// the column, as cel-go's `common.Error.ToDisplayString` (columns count
/// characters; a wide character is marked with wide dots).
fn display(source: &str, issue: &Issue) -> String {
    let offset = (issue.offset as usize).min(source.len());
    let before = &source[..offset];
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line = source[line_start..].split('\n').next().unwrap_or("");
    let prefix = &source[line_start..offset];
    let column = prefix.chars().count();
    let mut out = format!("ERROR: <input>:{line_no}:{}: {}", column + 1, issue.message);
    let snippet = line.replace('\t', " ");
    out.push_str("\n | ");
    out.push_str(&snippet);
    out.push_str("\n | ");
    for c in prefix.chars() {
        out.push(if c.len_utf8() > 1 { '\u{ff0e}' } else { '.' });
    }
    let wide = source[offset..]
        .chars()
        .next()
        .is_some_and(|c| c.len_utf8() > 1);
    out.push(if wide { '\u{ff3e}' } else { '^' });
    out
}

#[cfg(test)]
mod tests {
    use super::super::CelEnvironment;

    fn error(source: &str) -> String {
        CelEnvironment::shared()
            .compile(source)
            .expect_err(source)
            .to_string()
    }

    fn compiles(source: &str) {
        if let Err(e) = CelEnvironment::shared().compile(source) {
            panic!("{source}: {e}");
        }
    }

    // Texts of cel-go's `checker/errors.go` (`undeclaredReference`,
    // `noMatchingOverload`), as in its `checker/checker_test.go`; the
    // position is the call's, its opening parenthesis.
    #[test]
    fn undeclared_functions() {
        assert_eq!(
            error("foo(1)"),
            "compilation failed: ERROR: <input>:1:4: undeclared reference to 'foo' (in container '')\n | foo(1)\n | ...^"
        );
        assert!(error("object.spec.bar()")
            .contains(":1:16: undeclared reference to 'bar' (in container '')"));
        assert!(error("true &&\n  baz(1)")
            .contains("ERROR: <input>:2:6: undeclared reference to 'baz'"));
    }

    #[test]
    fn literal_arguments_without_overload() {
        assert!(error("'abc'.startsWith(1)").contains(
            ":1:17: found no matching overload for 'startsWith' applied to 'string.(int)'"
        ));
        assert!(
            error("size(1)").contains("found no matching overload for 'size' applied to '(int)'")
        );
        assert!(error("1 + 'a'")
            .contains(":1:3: found no matching overload for '_+_' applied to '(int, string)'"));
        assert!(error("1 == 'a'")
            .contains("found no matching overload for '_==_' applied to '(int, string)'"));
    }

    #[test]
    fn valid_expressions_still_compile() {
        for s in [
            "optional.of(1).hasValue()",
            "jsonpatch.escapeKey('a/b')",
            "'abc'.startsWith('a') && 'abc'.matches('^a')",
            "1 < 2.0 && 1u < 2",
            "1 / 0 == 1 || int('x') == 1",
            "[1, 'a'].size() == 2",
            "[1, 2].all(i, v, v > i) && {'a': 1}.transformMap(k, v, v + 1) == {'a': 2}",
            "object.spec.replicas > 1 && has(object.metadata.labels)",
            "quantity('1Gi').isGreaterThan(quantity('1Mi'))",
        ] {
            compiles(s);
        }
    }
}
