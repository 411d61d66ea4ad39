//! cel-go's `string.format` validator (`ext.Strings`, in kube-apiserver's
//! base environment): a `format` call on a string literal whose argument is
//! a list literal is checked when compiled. Its clauses are parsed as they
//! are when run, and each argument's static type must suit its clause
//! (`dyn` always does); a clause that does not parse, an argument missing or
//! one too many is an error at the call, a type that does not suit one at
//! the argument.

use super::types::{type_of, Ty};
use super::{Checker, Issue};
use crate::cel::library::string_format::{parse, Piece, Verb};
use cel::common::ast::{Expr, IdedExpr, LiteralValue};

/// Whether a value of (concrete) type `t` suits the clause (cel-go
/// `stringFormatChecker`: kinds only).
fn accepts(verb: Verb, t: &Ty) -> bool {
    let timestamp_or_duration = matches!(t, Ty::Opaque(n) if n.starts_with("google.protobuf."));
    match verb {
        Verb::String => {
            timestamp_or_duration
                || matches!(
                    t,
                    Ty::List(_)
                        | Ty::Map(..)
                        | Ty::Int
                        | Ty::Uint
                        | Ty::Double
                        | Ty::Bool
                        | Ty::String
                        | Ty::Bytes
                        | Ty::Type(_)
                        | Ty::Null
                )
        }
        Verb::Decimal | Verb::Octal => matches!(t, Ty::Int | Ty::Uint),
        Verb::Fixed | Verb::Scientific => matches!(t, Ty::Double | Ty::String),
        Verb::Binary => matches!(t, Ty::Int | Ty::Uint | Ty::Bool),
        Verb::Hex { .. } => matches!(t, Ty::Int | Ty::Uint | Ty::String | Ty::Bytes),
    }
}

/// A type's name as cel-go's `TypeName()` gives it in these errors: the
/// kind alone for parameterized types.
fn type_name(t: &Ty) -> String {
    match t {
        Ty::List(_) => "list".into(),
        Ty::Map(..) => "map".into(),
        Ty::Optional(_) => "optional_type".into(),
        Ty::Type(_) => "type".into(),
        Ty::Null => "null_type".into(),
        other => other.name(),
    }
}

impl Checker<'_> {
    /// `'...'.format([...])`: cel-go's format validator.
    pub(super) fn check_format_call(
        &mut self,
        call_offset: u32,
        target: &IdedExpr,
        args: &[IdedExpr],
    ) {
        let (Expr::Literal(LiteralValue::String(format)), [list]) = (&target.expr, args) else {
            return;
        };
        let Expr::List(list) = &list.expr else { return };
        let elements = &list.elements;
        let (pieces, parse_error) = parse(format.inner());
        let clauses: Vec<Verb> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Clause(verb, _) => Some(*verb),
                Piece::Text(_) => None,
            })
            .collect();
        for (index, verb) in clauses.iter().enumerate() {
            let Some(arg) = elements.get(index) else {
                self.format_issue(call_offset, format!("index {index} out of range"));
                return;
            };
            if let Some((at, t)) = self.refused_format_arg(*verb, arg) {
                let offset = self.offset(at, call_offset);
                self.format_issue(offset, verb.refusal(&type_name(&t)));
                return;
            }
        }
        // The failing clause's argument is taken before it is parsed.
        let index = clauses.len();
        match parse_error {
            Some(e) if !e.before_argument && index >= elements.len() => {
                self.format_issue(call_offset, format!("index {index} out of range"));
            }
            Some(e) => self.format_issue(call_offset, e.message),
            None if elements.len() > index => self.format_issue(
                call_offset,
                format!(
                    "too many arguments supplied to string.format (expected {index}, got {})",
                    elements.len()
                ),
            ),
            None => {}
        }
    }

    fn format_issue(&mut self, offset: u32, message: String) {
        self.validator_errors.push(Issue { offset, message });
    }

    /// The argument (or, for `%s`, the element of a literal argument) whose
    /// static type the clause refuses, with that type.
    fn refused_format_arg<'e>(
        &mut self,
        verb: Verb,
        arg: &'e IdedExpr,
    ) -> Option<(&'e IdedExpr, Ty)> {
        let t = type_of(arg, &mut self.scope);
        if !t.is_concrete() && !matches!(t, Ty::List(_) | Ty::Map(..)) {
            return None;
        }
        if !accepts(verb, &t) {
            return Some((arg, t));
        }
        if verb != Verb::String {
            return None;
        }
        match &arg.expr {
            Expr::List(l) => l
                .elements
                .iter()
                .find_map(|x| self.refused_format_arg(verb, x)),
            Expr::Map(m) => m.entries.iter().find_map(|en| match &en.expr {
                cel::common::ast::EntryExpr::MapEntry(me) => self
                    .refused_format_arg(verb, &me.key)
                    .or_else(|| self.refused_format_arg(verb, &me.value)),
                _ => None,
            }),
            _ => None,
        }
    }
}
