//! A conservative compile-time check of what upstream's type checker
//! (cel-go `checker`) and the AST validators Kubernetes enables reject, for
//! the `cel` crate has neither. It only reports what it can prove upstream
//! rejects, whatever the variables hold; it runs once per expression, at
//! load time, never per request.
//!
//! In upstream's order, each step only when the previous one found nothing:
//!
//! 1. the checker: calls to functions nobody declares (`undeclared reference
//!    to 'foo' (in container '')`), and calls whose argument types are known
//!    (literals, conversions, arithmetic on them, see `types`) that no
//!    overload accepts (`found no matching overload for 'startsWith' applied
//!    to 'string.(int)'`);
//! 2. the validators of Kubernetes' base environment
//!    (`k8s.io/apiserver/pkg/cel/environment/base.go`: `cel.HomogeneousAggregateLiterals()`
//!    since 1.0, `cel.ValidateRegexLiterals()` and
//!    `cel.ValidateHomogeneousAggregateLiterals()` since 1.29): a constant
//!    `matches` pattern that is not a valid Go regex (`invalid matches
//!    argument`), list and map literals whose entries' types differ
//!    (`expected type 'int' but found 'string'`);
//! 3. building the program: a constant `find`/`findAll`/`matches` pattern
//!    that does not compile (Kubernetes' regex library optimizations and
//!    cel-go's `MatchesRegexOptimization`), reported as `program
//!    instantiation failed: error parsing regexp: ...`.
//!
//! Errors are reported in upstream's format, with the position of the
//! offending node and the line of source under it, sorted by position.

mod format;
mod types;

use super::library::regex::go_regex_error;
use super::object_types::{JSON_PATCH_TYPE, OBJECT_TYPE, TYPE_NAME_FIELD};
use super::{CompileError, CompileStage};
use cel::common::ast::{
    operators, CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr, ListExpr, LiteralValue,
    MapEntryExpr, MapExpr, SourceInfo, StructExpr,
};
use cel::{Context, Env, ExecutionError};
use std::sync::Arc;
use types::{Scope, Ty};

/// One error: its byte offset in the source and its message.
struct Issue {
    offset: u32,
    message: String,
}

/// The static type of an expression's result, as far as the checks know it.
#[derive(Debug, Clone)]
pub(crate) struct OutputType(Ty);

/// The policy variables declared so far, with the types of their
/// expressions: what `variables` is to the expressions compiled next
/// (upstream's `CompositedCompiler` declares each variable for the
/// variables after it and for the match conditions and mutations).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeclaredVariables {
    variables: Vec<(String, Ty)>,
    /// Whether `params` is declared: upstream declares it only for a
    /// policy with a `paramKind` (`OptionalVariableDeclarations.HasParams`).
    params: bool,
    /// Whether `variables` is not declared at all: the match conditions of
    /// a MutatingAdmissionPolicy, which upstream's validation compiles
    /// without the policy's variables.
    no_variables: bool,
}

impl DeclaredVariables {
    /// The declarations of a policy, with `params` when it has a paramKind.
    pub(crate) fn for_policy(has_params: bool) -> DeclaredVariables {
        DeclaredVariables {
            variables: Vec::new(),
            params: has_params,
            no_variables: false,
        }
    }

    /// The declarations of the policy's match conditions: no `variables`
    /// (upstream's validation refuses `variables.x` there with
    /// `undeclared reference to 'variables'`).
    pub(crate) fn for_match_conditions(&self) -> DeclaredVariables {
        DeclaredVariables {
            variables: Vec::new(),
            params: self.params,
            no_variables: true,
        }
    }

    /// Declares `name`, of the type of its compiled expression (`dyn`, as
    /// upstream declares it, when it did not compile).
    pub(crate) fn declare(&mut self, name: &str, output: Option<&OutputType>) {
        let ty = output.map_or(Ty::Dyn, |o| declared_type(&o.0));
        self.variables.push((name.to_string(), ty));
    }
}

/// The identifiers every admission policy expression may name, besides
/// `params` (see [`DeclaredVariables`]) and the comprehension variables:
/// the variables of upstream's composited environment and the type names
/// cel-go declares (`type(x) == int`).
const DECLARED_IDENTIFIERS: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "authorizer",
    "variables",
    "bool",
    "bytes",
    "double",
    "int",
    "uint",
    "string",
    "list",
    "map",
    "null_type",
    "type",
    "optional_type",
];

/// Qualified type names cel-go declares as identifiers.
const DECLARED_QUALIFIED: &[&str] = &[
    "google.protobuf.Timestamp",
    "google.protobuf.Duration",
    // Kubernetes' IP and CIDR libraries declare their types by name.
    "net.IP",
    "net.CIDR",
];

/// The type a variable is declared with for an expression of type `t`
/// (upstream's `convertCelTypeToDeclType`): scalars, durations, timestamps,
/// lists and maps keep their types; object and abstract library types
/// become `dyn`.
fn declared_type(t: &Ty) -> Ty {
    match t {
        Ty::List(e) => Ty::List(Box::new(declared_type(e))),
        Ty::Map(k, v) => Ty::Map(Box::new(declared_type(k)), Box::new(declared_type(v))),
        Ty::Opaque(name) if name.starts_with("google.protobuf.") => t.clone(),
        Ty::Opaque(_) | Ty::Object(_) | Ty::Variables(_) => Ty::Dyn,
        _ => t.clone(),
    }
}

/// Checks `ast` (already rewritten), parsed from `info.source`, with
/// `variables` declared when known; the error, in upstream's words, if
/// upstream refuses it, else the type of the result.
pub(crate) fn check(
    env: &Arc<Env>,
    ast: &IdedExpr,
    info: &SourceInfo,
    patch_types: bool,
    variables: Option<&DeclaredVariables>,
) -> Result<Checked, CompileError> {
    let scope = match variables {
        Some(v) if !v.no_variables => Scope::with_variables(&v.variables),
        _ => Scope::default(),
    };
    let mut checker = Checker {
        env,
        info,
        patch_types,
        scope,
        identifiers: variables.map(|v| (v.params, !v.no_variables)),
        type_errors: Vec::new(),
        validator_errors: Vec::new(),
        bool_negations: Vec::new(),
    };
    checker.visit(ast, 0, false);
    checker
        .type_errors
        .extend(single_variable_exists_one(&info.source));
    let issues = if !checker.type_errors.is_empty() {
        checker.type_errors
    } else {
        checker.validator_errors
    };
    if !issues.is_empty() {
        return Err(CompileError {
            message: render(&info.source, issues),
            stage: CompileStage::Compilation,
        });
    }
    let ctx = Context::with_env(env.clone());
    match plan(ast, &ctx).err() {
        Some(message) => Err(CompileError {
            message,
            stage: CompileStage::ProgramInstantiation,
        }),
        None => Ok(Checked {
            output: OutputType(types::type_of(ast, &mut checker.scope)),
            bool_negations: checker.bool_negations,
        }),
    }
}

/// `list.existsOne(x, p)`: cel-go has the `exists_one` macro and the
/// two-variable `existsOne(i, v, p)` (`ext.TwoVarComprehensions`), but no
/// one-variable `existsOne`, which its checker sees as a call of an
/// undeclared function. The crate's parser expands it as `exists_one`: the
/// source is parsed again without macros to find such calls.
fn single_variable_exists_one(source: &str) -> Vec<Issue> {
    fn visit(e: &IdedExpr, info: &SourceInfo, out: &mut Vec<Issue>) {
        if let Expr::Call(c) = &e.expr {
            if c.func_name == "existsOne" && c.target.is_some() && c.args.len() == 2 {
                out.push(Issue {
                    offset: info.offset_for(e.id).map_or(0, |(start, _)| start),
                    message: "undeclared reference to 'existsOne' (in container '')".into(),
                });
            }
        }
        super::ast::for_each_child(e, &mut |c| visit(c, info, out));
    }
    let mut out = Vec::new();
    if !source.contains("existsOne") {
        return out;
    }
    let parser = Env::default()
        .parser()
        .max_recursion_depth(super::MAX_PARSE_DEPTH);
    if let Ok((ast, info)) = parser.parse_with_source_info(source) {
        visit(&ast, &info, &mut out);
    }
    out
}

/// The type a policy field's expression must evaluate to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpectedResult {
    /// An ApplyConfiguration: `Object` (the root initializer).
    Object,
    /// A JSONPatch expression: `list(JSONPatch)`.
    JsonPatchList,
    /// A match condition: `bool`.
    Bool,
}

/// `must evaluate to X but got Y` when `ast`'s static type is known and is
/// not `expected`; `None` when it is, or cannot be told.
pub(crate) fn result_type_error(
    ast: &IdedExpr,
    output: &OutputType,
    expected: ExpectedResult,
) -> Option<String> {
    let (wanted, got) = match expected {
        ExpectedResult::Object => {
            let got = match &ast.expr {
                // An initializer: its written name.
                Expr::Struct(s) if s.type_name == JSON_PATCH_TYPE => JSON_PATCH_TYPE.to_string(),
                Expr::Struct(s) => written_name(s).filter(|n| n != OBJECT_TYPE)?,
                // A map or list is never an Object, whatever it holds.
                _ if matches!(output.0, Ty::Map(..) | Ty::List(_)) => output.0.name(),
                Expr::Map(_) | Expr::List(_) => literal_type_name(ast),
                _ if output.0.is_concrete() => output.0.name(),
                _ => return None,
            };
            ("Object", got)
        }
        ExpectedResult::JsonPatchList => {
            let got = match (&ast.expr, &output.0) {
                (Expr::Struct(s), _) => written_name(s).unwrap_or_else(|| s.type_name.clone()),
                // `[]` types as `list(dyn)`, which is not `list(JSONPatch)`.
                (Expr::List(l), _) if l.elements.is_empty() => "list(dyn)".into(),
                (_, Ty::Map(..)) => output.0.name(),
                // A list of JSONPatch initializers types as a list of unknown.
                (_, Ty::List(e)) if !e.is_concrete() => return None,
                (_, t) if t.is_concrete() => t.name(),
                _ => return None,
            };
            ("list(JSONPatch)", got)
        }
        ExpectedResult::Bool => match &output.0 {
            Ty::Bool => return None,
            t if t.is_concrete() && !matches!(t, Ty::Null) => ("bool", t.name()),
            _ => return None,
        },
    };
    Some(format!("must evaluate to {wanted} but got {got}"))
}

/// cel-go's name of a list or map literal's type where the checks here do
/// not type it: parts of one type keep it, mixed or unknown parts are `dyn`.
fn literal_type_name(e: &IdedExpr) -> String {
    fn joined<'a>(parts: impl Iterator<Item = &'a IdedExpr>) -> String {
        let names: Vec<String> = parts.map(literal_type_name).collect();
        match names.split_first() {
            Some((first, rest)) if rest.iter().all(|n| n == first) => first.clone(),
            _ => "dyn".into(),
        }
    }
    match &e.expr {
        Expr::Literal(l) => types::literal_type(l).name(),
        Expr::List(l) => format!("list({})", joined(l.elements.iter())),
        Expr::Map(m) => {
            let entries = || {
                m.entries.iter().filter_map(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => Some(me),
                    EntryExpr::StructField(_) => None,
                })
            };
            format!(
                "map({}, {})",
                joined(entries().map(|me| &me.key)),
                joined(entries().map(|me| &me.value))
            )
        }
        _ => "dyn".into(),
    }
}

/// The name an `Object...{}` initializer was written with (the rewrite keeps
/// it in a hidden field), or a `JSONPatch{}`'s.
fn written_name(s: &StructExpr) -> Option<String> {
    if s.type_name == JSON_PATCH_TYPE {
        return Some(JSON_PATCH_TYPE.to_string());
    }
    s.entries.iter().find_map(|en| match &en.expr {
        EntryExpr::StructField(f) if f.field == TYPE_NAME_FIELD => match &f.value.expr {
            Expr::Literal(LiteralValue::String(name)) => Some(name.inner().to_string()),
            _ => None,
        },
        _ => None,
    })
}

/// What [`check`] learns of an expression it accepts.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The type of the result.
    pub(crate) output: OutputType,
    /// The ids of the `!x` calls whose operand can only be a bool (or an
    /// error): a `has()` test, or a comparison, logical operator or string
    /// predicate typed bool. For those `x == false` gives the same answer.
    pub(crate) bool_negations: Vec<u64>,
}

/// The issues in upstream's display format, sorted by position.
fn render(source: &str, mut issues: Vec<Issue>) -> String {
    issues.sort_by_key(|i| i.offset);
    issues
        .iter()
        .map(|i| display(source, i))
        .collect::<Vec<_>>()
        .join("\n")
}

struct Checker<'a> {
    env: &'a Arc<Env>,
    info: &'a SourceInfo,
    /// Whether `Object`, `JSONPatch` and `jsonpatch.escapeKey` are declared
    /// (mutation expressions only).
    patch_types: bool,
    /// The comprehension variables in scope, with their types.
    scope: Scope,
    /// Whether identifiers are checked (an expression of a policy, whose
    /// declarations are known), and if so whether `params` and `variables`
    /// are declared.
    identifiers: Option<(bool, bool)>,
    /// What upstream's type checker reports.
    type_errors: Vec<Issue>,
    /// What upstream's AST validators report (only when the checker found nothing).
    validator_errors: Vec<Issue>,
    /// The `!x` whose `x` is always a bool (see [`Checked::bool_negations`]).
    bool_negations: Vec<u64>,
}

impl Checker<'_> {
    /// Whether `e` can only evaluate to a bool or fail: a `has()` test, or a
    /// call of a comparison, a logical operator or a string predicate that
    /// the checker types bool (on a string, for the predicates). A bool
    /// field or variable may hold something else at run time (a null).
    fn always_bool(&mut self, e: &IdedExpr) -> bool {
        match &e.expr {
            Expr::Select(s) => s.test,
            Expr::Call(call) => {
                let name = call.func_name.as_str();
                (types::BOOL_OPERATORS.contains(&name) || types::STRING_PREDICATES.contains(&name))
                    && types::type_of(e, &mut self.scope) == Ty::Bool
            }
            _ => false,
        }
    }

    /// The offset of `e`, else (nodes the rewrites made) `fallback`.
    fn offset(&self, e: &IdedExpr, fallback: u32) -> u32 {
        self.info
            .offset_for(e.id)
            .map(|(start, _)| start)
            .unwrap_or(fallback)
    }

    /// `Object...{}` and `JSONPatch{}` outside a mutation: upstream declares
    /// the patch types only for mutations (`HasPatchTypes`), so a variable
    /// or match condition naming them refers to an undeclared type.
    fn check_patch_type(&mut self, s: &StructExpr, offset: u32) {
        if self.patch_types {
            return;
        }
        let written = if s.type_name == JSON_PATCH_TYPE {
            Some(JSON_PATCH_TYPE.to_string())
        } else if s.type_name == OBJECT_TYPE {
            // The rewrite keeps the written name (`Object.spec`) in a hidden field.
            s.entries.iter().find_map(|en| match &en.expr {
                EntryExpr::StructField(f) if f.field == TYPE_NAME_FIELD => match &f.value.expr {
                    Expr::Literal(LiteralValue::String(name)) => Some(name.inner().to_string()),
                    _ => None,
                },
                _ => None,
            })
        } else {
            None
        };
        if let Some(name) = written {
            self.report(
                offset,
                format!("undeclared reference to '{name}' (in container '')"),
            );
        }
    }

    /// cel-go's checker on a `JSONPatch{}` initializer: `op`, `path` and
    /// `from` are declared strings (`value` is dyn), reported at the field's
    /// colon.
    fn check_json_patch_fields(&mut self, s: &StructExpr, fallback: u32) {
        if !self.patch_types || s.type_name != JSON_PATCH_TYPE {
            return;
        }
        for en in &s.entries {
            let EntryExpr::StructField(f) = &en.expr else {
                continue;
            };
            if !matches!(f.field.as_str(), "op" | "path" | "from") || f.optional {
                continue;
            }
            let provided = types::type_of(&f.value, &mut self.scope);
            if provided.is_concrete() && !matches!(provided, Ty::String | Ty::Null) {
                let at = self
                    .info
                    .offset_for(en.id)
                    .map(|(start, _)| start)
                    .unwrap_or(fallback);
                self.report(
                    at,
                    format!(
                        "expected type of field '{}' is 'string' but provided type is '{}'",
                        f.field,
                        provided.name()
                    ),
                );
            }
        }
    }

    fn report(&mut self, offset: u32, message: String) {
        self.type_errors.push(Issue { offset, message });
    }

    /// Visits `e`; `in_format` tells that `e` is an argument of a `format`
    /// call, or a list or map literal nested in one, which upstream's
    /// homogeneous-literal validator exempts.
    fn visit(&mut self, e: &IdedExpr, fallback: u32, in_format: bool) {
        let here = self.offset(e, fallback);
        match &e.expr {
            Expr::Call(call) => {
                let format = call.func_name == "format";
                if let Some(t) = &call.target {
                    // `optional.of(x)`, `jsonpatch.escapeKey(k)`: a qualified
                    // function name, whose prefix is no identifier of its own.
                    if !self.is_qualified_function(t, &call.func_name) {
                        self.visit(t, here, format);
                    }
                }
                for a in &call.args {
                    self.visit(a, here, format);
                }
                if let [operand] = call.args.as_slice() {
                    if call.func_name == operators::LOGICAL_NOT
                        && call.target.is_none()
                        && self.always_bool(operand)
                    {
                        self.bool_negations.push(e.id);
                    }
                }
                self.check_call(e, here);
                if let (true, Some(t)) = (format, &call.target) {
                    self.check_format_call(here, t, &call.args);
                }
                self.check_regex_literal(call, here);
                self.check_conversion_literal(call, here);
            }
            Expr::Comprehension(c) => {
                self.visit(&c.iter_range, here, false);
                self.visit(&c.accu_init, here, false);
                let range = types::type_of(&c.iter_range, &mut self.scope);
                if range.is_not_range() {
                    let at = self.offset(&c.iter_range, here);
                    self.report(
                        at,
                        format!(
                            "expression of type '{}' cannot be range of a comprehension (must be list, map, or dynamic)",
                            range.name()
                        ),
                    );
                }
                let (iter, accu) = types::comprehension_types(c, &mut self.scope);
                self.scope.push(&c.iter_var, iter);
                let mut bound = 1;
                if let Some(v2) = &c.iter_var2 {
                    self.scope.push(v2, Ty::Unknown);
                    bound += 1;
                }
                self.scope.push(&c.accu_var, accu);
                bound += 1;
                for x in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.visit(x, here, false);
                }
                self.scope.pop(bound);
            }
            Expr::List(l) => {
                for x in &l.elements {
                    self.visit(x, here, in_format);
                }
                for &i in &l.optional_indices {
                    if let Some(x) = l.elements.get(i) {
                        self.check_optional_entry(x, here);
                    }
                }
                if !in_format {
                    self.check_homogeneous_list(l, here);
                }
            }
            Expr::Map(m) => {
                for en in &m.entries {
                    if let EntryExpr::MapEntry(me) = &en.expr {
                        self.visit(&me.key, here, in_format);
                        self.visit(&me.value, here, in_format);
                        if me.optional {
                            self.check_optional_entry(&me.value, here);
                        }
                    }
                }
                if !in_format {
                    self.check_homogeneous_map(m, here);
                }
            }
            Expr::Select(s) => {
                if qualified_name(e).is_some_and(|q| DECLARED_QUALIFIED.contains(&q.as_str())) {
                    return;
                }
                self.visit(&s.operand, here, false);
                // cel-go's checker: a field the object type does not declare.
                let declared = match types::type_of(&s.operand, &mut self.scope) {
                    Ty::Object(o) => o.field(&s.field).is_some(),
                    Ty::Variables(vs) => vs.iter().any(|(n, _)| *n == s.field),
                    _ => true,
                };
                if !declared {
                    self.report(here, format!("undefined field '{}'", s.field));
                }
            }
            Expr::Struct(s) => {
                for en in &s.entries {
                    if let EntryExpr::StructField(f) = &en.expr {
                        self.visit(&f.value, here, false);
                    }
                }
                self.check_patch_type(s, here);
                self.check_json_patch_fields(s, here);
            }
            Expr::Ident(name) => self.check_identifier(name, here),
            Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    /// `[?x]`, `{?k: x}`: cel-go's checker wants an optional `x`.
    fn check_optional_entry(&mut self, x: &IdedExpr, fallback: u32) {
        let t = types::type_of(x, &mut self.scope);
        if t.is_concrete() && !matches!(t, Ty::Optional(_)) {
            let at = self.offset(x, fallback);
            self.report(at, mismatch(&Ty::Optional(Box::new(t.clone())), &t));
        }
    }

    /// Whether `target.name(...)` calls a function declared as `target.name`
    /// (as cel-go's checker resolves it before checking the target).
    fn is_qualified_function(&self, target: &IdedExpr, name: &str) -> bool {
        let Some(prefix) = qualified_name(target) else {
            return false;
        };
        if self
            .scope
            .binds(prefix.split('.').next().unwrap_or_default())
        {
            return false;
        }
        let q = format!("{prefix}.{name}");
        if q == "jsonpatch.escapeKey" {
            return self.patch_types;
        }
        self.declared(&q)
    }

    /// cel-go's checker: an identifier nothing declares (`undeclared
    /// reference to 'x' (in container '')`).
    fn check_identifier(&mut self, name: &str, offset: u32) {
        let Some((params, variables)) = self.identifiers else {
            return;
        };
        // `.request`: an absolute name, never a comprehension variable.
        let (global, absolute) = match name.strip_prefix('.') {
            Some(rest) => (rest, true),
            None => (name, false),
        };
        let declared = name.starts_with('@')
            || (!absolute && self.scope.binds(name))
            || (DECLARED_IDENTIFIERS.contains(&global) && (variables || global != "variables"))
            || (params && global == "params");
        if !declared {
            self.report(
                offset,
                format!("undeclared reference to '{name}' (in container '')"),
            );
        }
    }

    fn check_call(&mut self, e: &IdedExpr, offset: u32) {
        let Expr::Call(call) = &e.expr else { return };
        let name = call.func_name.as_str();
        // kmutate's internal functions (two-variable comprehensions)
        if name.starts_with("@kmutate") {
            return;
        }
        // operators
        if name.starts_with('_')
            || name.starts_with('@')
            || name.starts_with("!_")
            || name == operators::NEGATE
        {
            self.check_typed_call(call, name, false, offset);
            return;
        }
        let qualified = call
            .target
            .as_ref()
            .and_then(|t| qualified_name(t))
            .map(|prefix| format!("{prefix}.{name}"));
        if let Some(q) = &qualified {
            // Without the patch library `jsonpatch.escapeKey` is an unknown
            // identifier's unknown member (reported as both when
            // identifiers are checked, the identifier alone otherwise).
            let patch_only = q == "jsonpatch.escapeKey" && !self.patch_types;
            if patch_only && self.identifiers.is_none() {
                let at = call
                    .target
                    .as_ref()
                    .map_or(offset, |t| self.offset(t, offset));
                self.report(
                    at,
                    "undeclared reference to 'jsonpatch' (in container '')".into(),
                );
                return;
            }
            if !patch_only && self.declared(q) {
                self.check_typed_call(call, q, true, offset);
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
        self.check_typed_call(call, name, false, offset);
    }

    /// Whether the environment declares a function `name`, global or
    /// member. (A context refuses to add a function the environment declares.)
    fn declared(&self, name: &str) -> bool {
        let mut ctx = Context::with_env(self.env.clone());
        ctx.add_function(name, || 0i64).is_err()
    }

    /// A call whose target and argument types are all known, none `dyn`,
    /// and that no overload accepts: calling it on values of those types
    /// says so. `qualified`: `name` is a library function's qualified name
    /// (`sets.contains`), whose target is its prefix, not an argument.
    fn check_typed_call(&mut self, call: &CallExpr, name: &str, qualified: bool, offset: u32) {
        let member = call.target.is_some() && !qualified;
        // `_&&_`, `_||_`: cel-go checks each operand is a bool, even `null`.
        if name == operators::LOGICAL_AND || name == operators::LOGICAL_OR {
            for a in &call.args {
                let t = types::type_of(a, &mut self.scope);
                if t.is_concrete() && t != Ty::Bool {
                    let at = self.offset(a, offset);
                    self.report(at, mismatch(&Ty::Bool, &t));
                }
            }
            return;
        }
        // `_?_:_`: branches of different kinds (a string and a list, say)
        // have no common type, whatever `dyn` is inside them.
        if name == operators::CONDITIONAL && call.args.len() == 3 {
            let all: Vec<Ty> = call
                .args
                .iter()
                .map(|a| types::type_of(a, &mut self.scope))
                .collect();
            if types::different_kinds(&all[1], &all[2]) {
                self.no_overload(offset, name, &all, false);
                return;
            }
        }
        let operands = call.target.iter().filter(|_| member).map(|t| &**t);
        let mut types = Vec::new();
        for x in operands.chain(&call.args) {
            let t = types::type_of(x, &mut self.scope);
            if !t.is_concrete() {
                return;
            }
            types.push(t);
        }
        if let Some(refused) = Self::refused_by_signature(name, member, &types) {
            if refused {
                self.no_overload(offset, name, &types, member);
            }
            return;
        }
        // `null` is assignable to several types: left alone.
        if types.iter().any(Ty::has_null) {
            return;
        }
        // The conditional is declared on a `bool` condition alone.
        if name == operators::CONDITIONAL {
            if types[0] != Ty::Bool {
                self.no_overload(offset, name, &types, false);
            }
            return;
        }
        // What the rewrites made: left alone.
        if name == operators::NOT_STRICTLY_FALSE {
            return;
        }
        // A function may refuse a string for its value (an IP, a version):
        // the call is refused only when it fails with each sample string.
        let ctx = Context::with_env(self.env.clone());
        let target = call.target.as_deref().filter(|_| qualified);
        let mut failed = false;
        for text in SAMPLE_STRINGS {
            let Some(probe) = probe_call(name, target, member, &types, text) else {
                return;
            };
            failed = probe_fails(&probe, &ctx);
            if !failed || !types.iter().any(Ty::has_string) {
                break;
            }
        }
        if failed {
            self.no_overload(offset, name, &types, member);
        }
    }

    /// Whether upstream's declarations of `name` refuse arguments of these
    /// (concrete) types, for the functions whose overloads are known here
    /// rather than probed: those the crate is more lenient with (numbers
    /// compared across types, any list joined) or whose receivers no value
    /// can stand in for. `None` for the others.
    fn refused_by_signature(name: &str, member: bool, types: &[Ty]) -> Option<bool> {
        use types::compatible;
        let list_of = |t: &Ty| match t {
            Ty::List(e) => Some((**e).clone()),
            _ => None,
        };
        Some(match (name, types) {
            // `_==_`, `_!=_`: declared on (A, A).
            (operators::EQUALS | operators::NOT_EQUALS, [a, b]) => !compatible(a, b),
            // `@in`: (A, list(A)) and (A, map(A, B)).
            (operators::IN, [a, Ty::List(e)]) => !compatible(a, e),
            (operators::IN, [a, Ty::Map(k, _)]) => !compatible(a, k),
            // `_[_]`: (list(A), int) and (map(K, V), K).
            (operators::INDEX, [Ty::List(_), i]) => *i != Ty::Int,
            (operators::INDEX, [Ty::Map(k, _), key]) => !compatible(k, key),
            // The lists extension: `list(A).indexOf(A)`, `sort` and `sortBy`
            // on comparable elements.
            ("indexOf" | "lastIndexOf", [Ty::List(e), a]) => !compatible(e, a),
            ("sort", [Ty::List(e)]) => !types::is_sortable(e),
            // cel-go's optionals: `optional_type(T).orValue(T)`,
            // `optional_type(T).or(optional_type(T))`.
            ("orValue", [Ty::Optional(t), a]) => !compatible(t, a),
            ("or", [o @ Ty::Optional(_), a]) => !compatible(o, a),
            ("@sortByAssociatedKeys", [Ty::List(_), Ty::List(k)]) => !types::is_sortable(k),
            // The strings extension: `list(string).join()`, `.join(string)`.
            ("join", [Ty::List(e), rest @ ..]) => {
                **e != Ty::String || rest.len() > 1 || rest.iter().any(|t| *t != Ty::String)
            }
            // cel-go's sets: (list(T), list(T)).
            ("sets.contains" | "sets.equivalent" | "sets.intersects", _) => match types {
                [a, b] => match (list_of(a), list_of(b)) {
                    (Some(x), Some(y)) => !compatible(&x, &y),
                    _ => true,
                },
                _ => true,
            },
            (_, [receiver, args @ ..]) if member && types::is_authz(receiver) => {
                types::authz_method(receiver, name, args).is_none()
            }
            _ => return None,
        })
    }

    fn no_overload(&mut self, offset: u32, name: &str, types: &[Ty], member: bool) {
        let names: Vec<String> = types.iter().map(Ty::name).collect();
        let signature = if member {
            format!("{}.({})", names[0], names[1..].join(", "))
        } else {
            format!("({})", names.join(", "))
        };
        self.report(
            offset,
            format!("found no matching overload for '{name}' applied to '{signature}'"),
        );
    }

    /// cel-go's `ValidateRegexLiterals`: the first argument of a `matches`
    /// call (the pattern of `s.matches(p)`), when a string literal, must
    /// compile as a Go regex.
    fn check_regex_literal(&mut self, call: &CallExpr, fallback: u32) {
        if call.func_name != "matches" {
            return;
        }
        let Some(arg) = call.args.first() else { return };
        let Expr::Literal(LiteralValue::String(pattern)) = &arg.expr else {
            return;
        };
        if go_regex_error(pattern.inner()).is_some() {
            let offset = self.offset(arg, fallback);
            self.validator_errors.push(Issue {
                offset,
                message: "invalid matches argument".into(),
            });
        }
    }

    /// cel-go's `ValidateDurationLiterals` and `ValidateTimestampLiterals`:
    /// a `duration(...)` or `timestamp(...)` of a literal is evaluated when
    /// compiled, and one that fails is an error at the literal.
    fn check_conversion_literal(&mut self, call: &CallExpr, fallback: u32) {
        let name = call.func_name.as_str();
        if call.target.is_some() || !matches!(name, "duration" | "timestamp") {
            return;
        }
        let Some(arg) = call.args.first() else { return };
        if !matches!(&arg.expr, Expr::Literal(_)) {
            return;
        }
        let probe = IdedExpr {
            id: 0,
            expr: Expr::Call(call.clone()),
        };
        let ctx = Context::with_env(self.env.clone());
        // Go's RFC 3339 parser wants an upper-case `T` and `Z`; the crate's
        // takes lower-case ones too.
        let lower_case = name == "timestamp"
            && matches!(&arg.expr, Expr::Literal(LiteralValue::String(s)) if s.inner().contains(['t', 'z']));
        if lower_case || cel::Value::resolve_val(&probe, &ctx).is_err() {
            let offset = self.literal_offset(arg, fallback);
            self.validator_errors.push(Issue {
                offset,
                message: format!("invalid {name} argument"),
            });
        }
    }

    /// The offset of the literal `e`: for a negative number, that of its
    /// sign, where cel-go's parser places the literal (this parser places
    /// it at the digits).
    fn literal_offset(&self, e: &IdedExpr, fallback: u32) -> u32 {
        let offset = self.offset(e, fallback);
        let negative = match &e.expr {
            Expr::Literal(LiteralValue::Int(i)) => **i < 0,
            Expr::Literal(LiteralValue::Double(d)) => **d < 0.0,
            _ => false,
        };
        if !negative {
            return offset;
        }
        let before: Vec<char> = self.info.source.chars().take(offset as usize).collect();
        match before.iter().rposition(|c| !c.is_whitespace()) {
            Some(sign) if before[sign] == '-' => sign as u32,
            _ => offset,
        }
    }

    /// cel-go's `ValidateHomogeneousAggregateLiterals` on a list literal:
    /// every element's type is the first's, up to the first that is not.
    fn check_homogeneous_list(&mut self, l: &ListExpr, fallback: u32) {
        if !l.optional_indices.is_empty() {
            return;
        }
        let mut first: Option<Ty> = None;
        for x in &l.elements {
            let t = types::type_of(x, &mut self.scope);
            // Past an element of unknown type, upstream may already have
            // stopped at it.
            if !t.is_known() {
                return;
            }
            match &first {
                None => first = Some(t),
                Some(f) if *f == t => {}
                Some(f) => {
                    let message = mismatch(f, &t);
                    let offset = self.offset(x, fallback);
                    self.validator_errors.push(Issue { offset, message });
                    return;
                }
            }
        }
    }

    /// The same on a map literal, for keys and for values: every entry is
    /// compared with the first.
    fn check_homogeneous_map(&mut self, m: &MapExpr, fallback: u32) {
        let mut entries = m.entries.iter().filter_map(|en| match &en.expr {
            EntryExpr::MapEntry(me) => Some(me),
            EntryExpr::StructField(_) => None,
        });
        let Some(first) = entries.next() else { return };
        if first.optional {
            return;
        }
        let key = types::type_of(&first.key, &mut self.scope);
        let value = types::type_of(&first.value, &mut self.scope);
        for me in entries {
            for (expected, x) in [(&key, &me.key), (&value, &me.value)] {
                if me.optional && std::ptr::eq(x, &me.value) {
                    continue;
                }
                let t = types::type_of(x, &mut self.scope);
                if expected.is_known() && t.is_known() && *expected != t {
                    let message = mismatch(expected, &t);
                    let offset = self.offset(x, fallback);
                    self.validator_errors.push(Issue { offset, message });
                }
            }
        }
    }
}

/// The homogeneous-literal validator's message.
fn mismatch(expected: &Ty, found: &Ty) -> String {
    format!(
        "expected type '{}' but found '{}'",
        expected.name(),
        found.name()
    )
}

/// Whether the probe of a call fails for want of an overload.
fn probe_fails(probe: &IdedExpr, ctx: &Context) -> bool {
    match cel::Value::resolve_val(probe, ctx) {
        Err(
            ExecutionError::NoSuchOverload(_)
            | ExecutionError::UnsupportedBinaryOperator(..)
            | ExecutionError::ValuesNotComparable(..),
        ) => true,
        // A global call of a function declared as a member only (`max(1, 2)`):
        // the crate looks for a function of that name in the context.
        Err(ExecutionError::UndeclaredReference(_)) => true,
        // The libraries' own `no such overload` (cel-go's text).
        Err(ExecutionError::FunctionError { message, .. }) => {
            message.starts_with("no such overload")
        }
        _ => false,
    }
}

/// The strings a probe tries for its string arguments: the empty string,
/// then a valid argument of each library constructor.
const SAMPLE_STRINGS: &[&str] = &[
    "",
    "192.168.0.1",
    "192.168.0.0/24",
    "1.0.0",
    "https://example.com/",
    "0",
    "1s",
];

/// The call of `name` with each operand replaced by a value of its type
/// (the first one the receiver when `member`), on `target` for a qualified
/// library function; `None` when some type has no such value here.
fn probe_call(
    name: &str,
    target: Option<&IdedExpr>,
    member: bool,
    types: &[Ty],
    text: &str,
) -> Option<IdedExpr> {
    let mut values = types
        .iter()
        .map(|t| sample(t, text))
        .collect::<Option<Vec<_>>>()?;
    let target = if member {
        Some(Box::new(values.remove(0)))
    } else {
        target.map(|t| Box::new(t.clone()))
    };
    Some(IdedExpr {
        id: 0,
        expr: Expr::Call(CallExpr {
            func_name: name.rsplit('.').next().unwrap_or(name).to_string(),
            target,
            args: values,
        }),
    })
}

/// A literal expression of type `t`, with `text` for its strings.
fn sample(t: &Ty, text: &str) -> Option<IdedExpr> {
    let ident = |name: &str| IdedExpr {
        id: 0,
        expr: Expr::Ident(name.to_string()),
    };
    let call = |name: &str, target: Option<IdedExpr>, args: Vec<IdedExpr>| IdedExpr {
        id: 0,
        expr: Expr::Call(CallExpr {
            func_name: name.to_string(),
            target: target.map(Box::new),
            args,
        }),
    };
    use cel::common::types::{CelBool, CelBytes, CelDouble, CelInt, CelString, CelUInt};
    let literal = |l: LiteralValue| {
        Some(IdedExpr {
            id: 0,
            expr: Expr::Literal(l),
        })
    };
    match t {
        Ty::Bool => literal(LiteralValue::Boolean(CelBool::from(false))),
        Ty::Int => literal(LiteralValue::Int(CelInt::from(0))),
        Ty::Uint => literal(LiteralValue::UInt(CelUInt::from(0u64))),
        Ty::Double => literal(LiteralValue::Double(CelDouble::from(0.0))),
        Ty::String => literal(LiteralValue::String(CelString::from(text.to_string()))),
        Ty::Bytes => literal(LiteralValue::Bytes(CelBytes::from(Vec::<u8>::new()))),
        Ty::List(e) => Some(IdedExpr {
            id: 0,
            expr: Expr::List(ListExpr::new(vec![sample(e, text)?])),
        }),
        Ty::Optional(e) => Some(call("of", Some(ident("optional")), vec![sample(e, text)?])),
        Ty::Type(e) => Some(call("type", None, vec![sample(e, text)?])),
        Ty::Opaque(types::NAMED_FORMAT) => {
            Some(call("dns1123Label", Some(ident("format")), vec![]))
        }
        Ty::Opaque(name) => {
            let (ctor, _, arg) = types::OPAQUE.iter().find(|(_, n, _)| n == name)?;
            Some(IdedExpr {
                id: 0,
                expr: Expr::Call(CallExpr {
                    func_name: ctor.to_string(),
                    target: None,
                    args: vec![literal(LiteralValue::String(CelString::from(
                        arg.to_string(),
                    )))?],
                }),
            })
        }
        Ty::Map(k, v) if matches!(**k, Ty::Bool | Ty::Int | Ty::Uint | Ty::String) => {
            Some(IdedExpr {
                id: 0,
                expr: Expr::Map(MapExpr {
                    entries: vec![IdedEntryExpr {
                        id: 0,
                        expr: EntryExpr::MapEntry(MapEntryExpr {
                            key: sample(k, text)?,
                            value: sample(v, text)?,
                            optional: false,
                        }),
                    }],
                }),
            })
        }
        _ => None,
    }
}

/// What building the program makes of a sub-expression.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Planned {
    /// A constant: a literal, a list or map literal of constants, or a
    /// type conversion of a constant, which the planner evaluates.
    Constant,
    /// Evaluated when the program runs.
    Dynamic,
}

/// The type conversion functions (cel-go `overloads.IsTypeConversionFunction`).
const CONVERSIONS: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "string",
    "timestamp",
    "type",
    "uint",
];

/// Plans `e` as upstream's program planner does (depth first, arguments
/// before their call), with the decorators Kubernetes enables; the first
/// error it reports:
///
/// - a constant `find`/`findAll` pattern of Kubernetes' regex library
///   (whose program options compile constant patterns) and a constant
///   `matches` pattern (cel-go's `MatchesRegexOptimization`, enabled by
///   `cel.OptOptimize`) that does not compile, in Go's `regexp` words;
/// - a type conversion of a constant that fails: `cel.OptOptimize` folds
///   constant list and map literals and conversions of constants
///   (`int('4x')`: `type conversion error from 'string' to 'int'`).
fn plan(e: &IdedExpr, ctx: &Context) -> Result<Planned, String> {
    let mut children = Vec::new();
    let mut failed = None;
    super::ast::for_each_child(e, &mut |c| {
        if failed.is_none() {
            match plan(c, ctx) {
                Ok(p) => children.push(p),
                Err(m) => failed = Some(m),
            }
        }
    });
    if let Some(m) = failed {
        return Err(m);
    }
    let all_constant = children.iter().all(|p| *p == Planned::Constant);
    match &e.expr {
        Expr::Literal(_) => Ok(Planned::Constant),
        Expr::List(l) if l.optional_indices.is_empty() && all_constant => Ok(Planned::Constant),
        Expr::Map(m)
            if all_constant
                && m.entries
                    .iter()
                    .all(|en| matches!(&en.expr, EntryExpr::MapEntry(me) if !me.optional)) =>
        {
            Ok(Planned::Constant)
        }
        Expr::Call(call) => {
            if let Some(m) = bad_constant_regex(call) {
                return Err(m);
            }
            let name = call.func_name.as_str();
            if call.target.is_some()
                || call.args.len() != 1
                || !all_constant
                || !CONVERSIONS.contains(&name)
            {
                return Ok(Planned::Dynamic);
            }
            if name == "double" {
                // The crate reads an out-of-range string as infinity.
                if let Expr::Literal(LiteralValue::String(text)) = &call.args[0].expr {
                    if super::library::double::go_parse_float(text.inner()).is_none() {
                        return Err("type conversion error from 'string' to 'double'".into());
                    }
                }
            }
            match cel::Value::resolve_val(e, ctx) {
                Ok(_) => Ok(Planned::Constant),
                Err(err) => {
                    let arg = cel::Value::resolve_val(&call.args[0], ctx).ok();
                    Err(conversion_error(name, arg.as_deref(), &err))
                }
            }
        }
        _ => Ok(Planned::Dynamic),
    }
}

/// cel-go's text for the conversion `function(arg)` that failed with `err`.
fn conversion_error(function: &str, arg: Option<&dyn super::Val>, err: &ExecutionError) -> String {
    let arg_type = arg.map(|a| a.get_type().name().to_string());
    match (arg_type.as_deref(), err) {
        (Some("string"), _) if matches!(function, "int" | "uint" | "double" | "bool") => {
            format!("type conversion error from 'string' to '{function}'")
        }
        (Some(t), ExecutionError::NoSuchOverload(_)) => {
            format!("no such overload: {function}({t})")
        }
        _ => super::error_text(err),
    }
}

/// The pattern error of a constant `find`/`findAll`/`matches` pattern.
fn bad_constant_regex(call: &CallExpr) -> Option<String> {
    if !matches!(call.func_name.as_str(), "find" | "findAll" | "matches") {
        return None;
    }
    // The pattern is the second of the target and the arguments together.
    let pattern = match &call.target {
        Some(_) => call.args.first(),
        None => call.args.get(1),
    }?;
    match &pattern.expr {
        Expr::Literal(LiteralValue::String(p)) => go_regex_error(p.inner()),
        _ => None,
    }
}

/// `a.b.c` of an identifier or a chain of selects on one.
fn qualified_name(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(s) if !s.test => Some(format!("{}.{}", qualified_name(&s.operand)?, s.field)),
        _ => None,
    }
}

/// One error at byte `offset` of `source`, as upstream displays it (see `display`).
pub(super) fn render_issue(source: &str, offset: u32, message: &str) -> String {
    display(
        source,
        &Issue {
            offset,
            message: message.to_string(),
        },
    )
}

/// One error at `offset` of `source`, displayed as upstream displays it.
pub(crate) fn error_at(source: &str, offset: u32, message: &str) -> String {
    display(
        source,
        &Issue {
            offset,
            message: message.to_string(),
        },
    )
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

    // Upstream declares `Object`, `JSONPatch` and `jsonpatch.escapeKey` only
    // for mutations (plugin/cel/compile.go, HasPatchTypes; set by
    // mutating/compilation.go for mutations alone).
    #[test]
    fn patch_types_only_in_mutations() {
        let env = CelEnvironment::shared();
        let refused = |source: &str| {
            env.compile_without_patch_types(source)
                .expect_err(source)
                .to_string()
        };
        for (source, name) in [
            ("[JSONPatch{op: 'add', path: '/a', value: 1}]", "JSONPatch"),
            ("Object{metadata: Object.metadata{name: 'x'}}", "Object"),
            ("Object.spec{replicas: 1}", "Object.spec"),
            ("jsonpatch.escapeKey('a/b')", "jsonpatch"),
        ] {
            let e = refused(source);
            assert!(
                e.contains(&format!(
                    "undeclared reference to '{name}' (in container '')"
                )),
                "{source}: {e}"
            );
            compiles(source);
        }
        assert!(env
            .compile_without_patch_types("object.metadata.name == 'x'")
            .is_ok());
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

    // The checker knows the result types of conversions, arithmetic and
    // the string functions (cel-go's standard declarations), so the same
    // `noMatchingOverload` errors follow for computed arguments.
    #[test]
    fn computed_arguments_without_overload() {
        assert_eq!(
            error("int('x') + 'y'"),
            "compilation failed: ERROR: <input>:1:10: found no matching overload for '_+_' applied to '(int, string)'\n | int('x') + 'y'\n | .........^"
        );
        assert!(error("size(1 + 2)")
            .contains(":1:5: found no matching overload for 'size' applied to '(int)'"));
        assert!(error("string(1).startsWith(2)")
            .contains("found no matching overload for 'startsWith' applied to 'string.(int)'"));
        assert!(error("'a'.lowerAscii().endsWith(size('b'))")
            .contains("found no matching overload for 'endsWith' applied to 'string.(int)'"));
        // cel-go checks each operand of `_&&_` and `_||_` is a bool
        // (maporacle: `1 && true` at the `1`).
        assert!(
            error("1 && true").contains("ERROR: <input>:1:1: expected type 'bool' but found 'int'")
        );
        assert!(error("[1, 2] + 'a'")
            .contains("found no matching overload for '_+_' applied to '(list(int), string)'"));
        assert!(error("[1, 2].map(x, x + 'a').size() > 0")
            .contains("found no matching overload for '_+_' applied to '(int, string)'"));
    }

    // cel-go `cel/validator_test.go`, `TestValidateRegexLiterals`: Kubernetes
    // enables `cel.ValidateRegexLiterals()` from 1.29 (`environment/base.go`).
    #[test]
    fn invalid_constant_matches_patterns() {
        assert_eq!(
            error("'hello'.matches('x++')"),
            "compilation failed: ERROR: <input>:1:17: invalid matches argument\n | 'hello'.matches('x++')\n | ................^"
        );
        assert!(error("'hello'.matches('(?<name%>el*)')")
            .contains("ERROR: <input>:1:17: invalid matches argument"));
        assert!(error("'hello'.matches('??el*')")
            .contains("ERROR: <input>:1:17: invalid matches argument"));
        assert_eq!(
            error("object.metadata.name.matches('[')"),
            "compilation failed: ERROR: <input>:1:30: invalid matches argument\n | object.metadata.name.matches('[')\n | .............................^"
        );
        compiles("'hello'.matches('el*')");
        compiles("'hello'.matches(object.pattern)");
    }

    // Unary minus of an expression is the operator `-_` (cel-go
    // `common/operators`), declared for int and double only
    // (`checker/decls` standard overloads `negate_int64`, `negate_double`).
    #[test]
    fn unary_minus_is_an_operator() {
        compiles("-object.spec.replicas < 0");
        compiles("-(1 + 2) < 0 && -(1.5 * 2.0) < 0.0");
        let env = CelEnvironment::shared();
        let negated = env.compile("-(1 + 2)").expect("compiles");
        let ctx = env.context();
        let v = negated.evaluate(&ctx).expect("evaluates");
        assert_eq!(crate::cel::convert::val_to_json(&*v).unwrap(), -3);
        assert!(error("-duration('1h') < duration('0s')").contains(
            "ERROR: <input>:1:1: found no matching overload for '-_' applied to '(google.protobuf.Duration)'"
        ));
        assert!(error("-'a' == 'a'")
            .contains("found no matching overload for '-_' applied to '(string)'"));
    }

    // The constructors of Kubernetes' library types and of CEL's duration
    // and timestamp return their abstract types (`library/quantity.go`,
    // `urls.go`, `ip.go`, `cidr.go`, `semver.go` declare no operator
    // overloads on them; cel-go's standard declarations give timestamps and
    // durations their arithmetic and comparisons), so operators upstream
    // does not declare for them are compile errors naming the types.
    #[test]
    fn library_types_are_known_to_operators() {
        for ok in [
            "string(duration('1s')) == '1s'",
            "int(timestamp('2000-01-01T00:00:00Z')) > 0",
            "timestamp('2000-01-01T00:00:00Z') + duration('1h') > timestamp('2000-01-01T00:00:00Z')",
            "timestamp('2000-01-01T00:00:00Z') - timestamp('1999-01-01T00:00:00Z') > duration('1h')",
            "duration('1h') - duration('1m') < duration('2h')",
            "timestamp(0) == timestamp('1970-01-01T00:00:00Z')",
            "quantity('1') == quantity('1')",
            "ip('1.2.3.4') == ip('1.2.3.4') && cidr('1.2.3.0/24') == cidr('1.2.3.0/24')",
            "url('https://a/b') == url('https://a/b') && semver('1.0.0') == semver('1.0.0')",
            "[quantity('1'), quantity('2')].size() == 2",
            "string(ip('1.2.3.4')) == '1.2.3.4'",
            "duration('1s') in [duration('1s')]",
            "quantity('1').isLessThan(quantity('2'))",
        ] {
            compiles(ok);
        }
        for (bad, message) in [
            (
                "quantity('1') < quantity('2')",
                "ERROR: <input>:1:15: found no matching overload for '_<_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'",
            ),
            (
                "quantity('1') + 1 == quantity('2')",
                "found no matching overload for '_+_' applied to '(kubernetes.Quantity, int)'",
            ),
            (
                "ip('1.2.3.4') == '1.2.3.4'",
                "found no matching overload for '_==_' applied to '(net.IP, string)'",
            ),
            (
                "size(url('https://a/')) == 1",
                "found no matching overload for 'size' applied to '(kubernetes.URL)'",
            ),
            (
                "duration('1s') * 2 == duration('2s')",
                "found no matching overload for '_*_' applied to '(google.protobuf.Duration, int)'",
            ),
            (
                "[semver('1.0.0'), '2.0.0'].size() == 2",
                "expected type 'kubernetes.Semver' but found 'string'",
            ),
        ] {
            let got = error(bad);
            assert!(got.contains(message), "{bad}: {got}");
        }
    }

    // `request` and `namespaceObject` have the object types
    // `plugin/cel/compile.go` declares (`BuildRequestType`,
    // `BuildNamespaceType`): cel-go's checker refuses a field they do not
    // declare (`undefined field`, at the selecting '.') and knows the types
    // of those they do.
    #[test]
    fn request_and_namespace_object_fields_are_declared() {
        assert_eq!(
            error("request.uid != ''"),
            "compilation failed: ERROR: <input>:1:8: undefined field 'uid'\n | request.uid != ''\n | .......^"
        );
        assert!(error("request.userInfo.userName == 'a'")
            .contains("ERROR: <input>:1:17: undefined field 'userName'"));
        // Upstream spells the namespace's uid `UID`.
        assert!(error("namespaceObject.metadata.uid != ''")
            .contains("ERROR: <input>:1:25: undefined field 'uid'"));
        assert!(
            error("namespaceObject.status.conditions.exists(c, c.foo == 'x')")
                .contains("undefined field 'foo'")
        );
        assert!(error("request.operation + 1 == 2")
            .contains("found no matching overload for '_+_' applied to '(string, int)'"));
        // A string is no `null` (maporacle).
        assert!(error("request.namespace == null")
            .contains("found no matching overload for '_==_' applied to '(string, null)'"));
        assert!(error("[request.kind, request.resource].size() == 2").contains(
            "expected type 'kubernetes.GroupVersionKind' but found 'kubernetes.GroupVersionResource'"
        ));
        for ok in [
            "request.kind.group == '' && request.resource.resource == 'pods'",
            "request.userInfo.groups.exists(g, g == 'system:masters')",
            "request.userInfo.extra['a'][0] == 'b'",
            "request.dryRun == true && request.options.foo == 1",
            "request.namespace == '' || request.kind == request.requestKind",
            "namespaceObject.metadata.UID != ''",
            "'team' in namespaceObject.metadata.labels",
            "has(namespaceObject.metadata.labels) && namespaceObject.metadata.labels.team == 'a'",
            "namespaceObject.status.conditions.exists(c, c.type == 'x')",
            // A comprehension variable of the same name hides the declaration.
            "[{'uid': 1}].all(request, request.uid == 1)",
        ] {
            compiles(ok);
        }
    }

    // cel-go `cel/validator_test.go`, `TestValidateDurationLiterals` and
    // `TestValidateTimestampLiterals`: Kubernetes enables both validators
    // from 1.29 (`environment/base.go`).
    #[test]
    fn invalid_constant_durations_and_timestamps() {
        assert_eq!(
            error("duration('1')"),
            "compilation failed: ERROR: <input>:1:10: invalid duration argument\n | duration('1')\n | .........^"
        );
        assert!(error("duration('1d')").contains("ERROR: <input>:1:10: invalid duration argument"));
        assert!(error("duration('1us')\n < duration('1nns')")
            .contains("ERROR: <input>:2:13: invalid duration argument\n |  < duration('1nns')\n | ............^"));
        compiles("duration('2h3m4s5us')");
        compiles("duration(object.metadata.name)");
        assert_eq!(
            error("timestamp('1000-00-00T00:00:00Z')"),
            "compilation failed: ERROR: <input>:1:11: invalid timestamp argument\n | timestamp('1000-00-00T00:00:00Z')\n | ..........^"
        );
        assert!(error("timestamp('1000-01-01T00:00:00ZZ')")
            .contains("ERROR: <input>:1:11: invalid timestamp argument"));
        compiles("timestamp('1000-01-01T00:00:00Z')");
        compiles("timestamp(-6213559680)");
        let out_of_range = error("timestamp(-62135596801)");
        assert!(
            out_of_range.contains("ERROR: <input>:1:11: invalid timestamp argument"),
            "{out_of_range}"
        );
        compiles("timestamp(object.metadata.name)");
    }

    // Kubernetes' regex library compiles constant `find`/`findAll`
    // patterns when the program is built (`FindRegexOptimization`,
    // `FindAllRegexOptimization` in `pkg/cel/library/regex.go`), and
    // `plugin/cel/compile.go` reports that as `program instantiation failed: `
    // with Go's `regexp` error.
    #[test]
    fn invalid_constant_find_patterns() {
        assert_eq!(
            error("'x'.find('(')"),
            "program instantiation failed: error parsing regexp: missing closing ): `(`"
        );
        assert_eq!(
            error("object.metadata.name.findAll('a**', 2).size() > 0"),
            "program instantiation failed: error parsing regexp: invalid nested repetition operator: `**`"
        );
        // cel-go's `MatchesRegexOptimization` takes the second argument of
        // the global form, which the validator does not look at.
        assert_eq!(
            error("matches('abc', '[')"),
            "program instantiation failed: error parsing regexp: missing closing ]: `[`"
        );
        compiles("'abc 123'.find('[0-9]+') == '123'");
        compiles("object.metadata.name.find(object.spec.pattern) == ''");
    }

    // `cel.OptOptimize` folds conversions of constants when the program is
    // built; `plugin/cel/compile.go` reports a failure as `program
    // instantiation failed: `. Expectations from maporacle (v0.36.2).
    #[test]
    fn failing_conversions_of_constants() {
        for (src, message) in [
            ("int('4x')", "type conversion error from 'string' to 'int'"),
            ("uint('x')", "type conversion error from 'string' to 'uint'"),
            (
                "double('x')",
                "type conversion error from 'string' to 'double'",
            ),
            (
                "bool('yes')",
                "type conversion error from 'string' to 'bool'",
            ),
            ("int(1e19)", "integer overflow"),
            ("int(-1e19)", "integer overflow"),
            ("int(18446744073709551615u)", "integer overflow"),
            ("uint(-1)", "unsigned integer overflow"),
            ("uint(-1.5)", "unsigned integer overflow"),
            (
                "string(b'\\xff')",
                "invalid UTF-8 in bytes, cannot convert to string",
            ),
            ("string(null)", "no such overload: string(null_type)"),
            ("int(dyn([1]))", "no such overload: int(list)"),
            // Constant list literals and conversions nest.
            (
                "dyn([int('x')])",
                "type conversion error from 'string' to 'int'",
            ),
            (
                "[int('x'), 1 / 0]",
                "type conversion error from 'string' to 'int'",
            ),
        ] {
            assert_eq!(
                error(src),
                format!("program instantiation failed: {message}"),
                "{src}"
            );
        }
        // Not constant: an error when evaluated.
        compiles("int(string(1) + 'x') == 1");
        compiles("int(object.spec.n) == 1");
    }

    // cel-go `cel/validator_test.go`,
    // `TestValidateHomogeneousAggregateLiterals`: Kubernetes enables
    // `cel.HomogeneousAggregateLiterals()` in its base environment from 1.0
    // (`environment/base.go`), which cel-go implements as this validator.
    #[test]
    fn mixed_type_literals() {
        assert_eq!(
            error("name in ['hello', 0]"),
            "compilation failed: ERROR: <input>:1:19: expected type 'string' but found 'int'\n | name in ['hello', 0]\n | ..................^"
        );
        assert!(error("{'hello':'world', 1:'!'}")
            .contains("ERROR: <input>:1:19: expected type 'string' but found 'int'"));
        assert!(error("name in {'hello':'world', 'goodbye':true}")
            .contains("ERROR: <input>:1:37: expected type 'string' but found 'bool'"));
        assert!(error("[1, 'a'].size() == 2")
            .contains("ERROR: <input>:1:5: expected type 'int' but found 'string'"));
        // Types must be equivalent, not assignable: `dyn` and `int` differ
        // (the validator's `IsEquivalentType`).
        assert!(error("[dyn(1), 2]").contains("expected type 'dyn' but found 'int'"));
        assert!(error("[object.a, 'x']").contains("expected type 'dyn' but found 'string'"));
        assert!(
            error("[[1], ['a']]").contains("expected type 'list(int)' but found 'list(string)'")
        );
        for valid in [
            "name in ['hello', 'world']",
            "name in ['hello', ?optional.ofNonZeroValue('')]",
            "name in [?optional.ofNonZeroValue(''), 'hello', ?optional.of('')]",
            "name in {'hello': false, 'world': true}",
            "{'hello': false, ?'world': optional.ofNonZeroValue(true)}",
            "{?'hello': optional.ofNonZeroValue(false), 'world': true}",
            // exempt inside `format` (cel-go PR 832)
            "'%s - %d'.format(['a', 1]) == 'a - 1'",
            "[dyn(1), dyn('a')].size() == 2",
            "[object.a, object.b, variables.c]",
        ] {
            compiles(valid);
        }
    }

    #[test]
    fn type_errors_come_before_validator_errors() {
        let e = error("[1, 'a'].size() == 2 && 'b'.startsWith(1)");
        assert!(e.contains("found no matching overload"), "{e}");
        assert!(!e.contains("expected type"), "{e}");
    }

    // The overload check calls functions on stand-in values ('' for a
    // string, 0 for an int): a stand-in a function refuses for its value,
    // not its type, must not make a valid call an error. Upstream library
    // documentation examples (k8s.io/apiserver/pkg/cel/library, cel-go ext).
    #[test]
    fn calls_valid_for_their_types_compile() {
        for s in [
            "int('5') == 5 && uint('5') == 5u && double('1.5') == 1.5 && bool('true')",
            "bytes('a') == b'a' && string(1) == '1'",
            "duration('1s') < duration('1m') && timestamp('2020-01-01T00:00:00Z') < timestamp('2021-01-01T00:00:00Z')",
            "quantity('1Gi').isGreaterThan(quantity('1Mi')) && isQuantity('1Gi')",
            "url('https://example.com/x').getHost() == 'example.com' && isURL('https://x')",
            "ip('1.2.3.4').family() == 4 && isIP('1.2.3.4') && cidr('10.0.0.0/8').containsIP('10.1.2.3')",
            "isCIDR('10.0.0.0/8') && semver('1.2.3').major() == 1 && isSemver('1.2.3')",
            "format.named('dns1123Label').hasValue()",
            "'abc'.charAt(1) == 'b' && 'abc'.substring(1, 2) == 'b' && 'abc'.indexOf('c', 1) == 2",
            "'a,b'.split(',', 1) == ['a,b'] && 'abc'.replace('b', 'x', 1) == 'axc'",
            "'%d items'.format([3]) == '3 items'",
            "[1, 2, 3].sum() == 6 && [3, 1].min() == 1 && [1, 2].indexOf(2) == 1",
            "[1, 2, 3].slice(1, 2) == [2] && lists.range(3) == [0, 1, 2]",
            "sets.contains([1, 2], [1]) && sets.intersects([1], [1])",
            "strings.quote('a') == '\"a\"' && ['a', 'b'].join('-') == 'a-b'",
            "'abc'.matches('^a') && 'abc 123'.find('[0-9]+') == '123'",
            "size('abc') == 3 && size([1]) == 1 && size({'a': 1}) == 1",
        ] {
            compiles(s);
        }
    }

    // Member calls on receivers of known types are probed as global calls
    // are: upstream's checker refuses those no overload declares
    // (expectations from maporacle, k8s.io/apiserver v0.36.2). A string a
    // function refuses for its value (an IP) is no type error.
    #[test]
    fn member_calls_on_known_types() {
        for (bad, message) in [
            // ext.Strings version 2: no string reverse(), lists have one.
            (
                "'abc'.reverse()",
                "ERROR: <input>:1:14: found no matching overload for 'reverse' applied to 'string.()'",
            ),
            (
                "'1.2.3.4'.family()",
                "found no matching overload for 'family' applied to 'string.()'",
            ),
            (
                "cidr('10.0.0.0/8').containsIP(1)",
                "found no matching overload for 'containsIP' applied to 'net.CIDR.(int)'",
            ),
            (
                "['a', 'b'].sum()",
                "found no matching overload for 'sum' applied to 'list(string).()'",
            ),
            (
                "[1, 2].max(3)",
                "found no matching overload for 'max' applied to 'list(int).(int)'",
            ),
            (
                "1 ? 'yes' : 'no'",
                "ERROR: <input>:1:3: found no matching overload for '_?_:_' applied to '(int, string, string)'",
            ),
            (
                "max(1, 2)",
                "ERROR: <input>:1:4: found no matching overload for 'max' applied to '(int, int)'",
            ),
            (
                "getQuery('https://a/?x=1')",
                "found no matching overload for 'getQuery' applied to '(string)'",
            ),
            (
                "semver('1.2.3').compareTo('1.2.3')",
                "found no matching overload for 'compareTo' applied to 'kubernetes.Semver.(string)'",
            ),
        ] {
            let got = error(bad);
            assert!(got.contains(message), "{bad}: {got}");
        }
        for ok in [
            "[1, 2].reverse() == [2, 1]",
            "'abc'.lowerAscii() == 'abc' && strings.quote('a') == '\"a\"'",
            "cidr('10.0.0.0/8').containsIP('10.1.2.3')",
            "cidr('10.0.0.0/8').containsIP('nope')",
            "semver('1.2.3').compareTo(semver('1.2.4')) < 0",
        ] {
            compiles(ok);
        }
        let env = CelEnvironment::shared();
        let e = env.compile("dyn('abc').reverse()").unwrap();
        let err = e.evaluate(&env.context()).unwrap_err();
        assert_eq!(
            super::super::error_text(&err),
            "no such overload: reverse(string)"
        );
    }

    // Upstream's checker wants one type where its overloads take a type
    // parameter, types a comprehension's accumulator and the library
    // types, and refuses the optional entries of non-optional values.
    // Expectations from maporacle (k8s.io/apiserver v0.36.2); columns are
    // maporacle's less the 50 characters of its JSONPatch prefix.
    #[test]
    fn operands_of_one_type() {
        for (bad, message) in [
            ("1 == 1.0", "1:3: found no matching overload for '_==_' applied to '(int, double)'"),
            ("null in [1]", "1:6: found no matching overload for '@in' applied to '(null, list(int))'"),
            ("{1: 'a'}[1u]", "1:9: found no matching overload for '_[_]' applied to '(map(int, string), uint)'"),
            ("[1, 2].indexOf(1u)", "1:15: found no matching overload for 'indexOf' applied to 'list(int).(uint)'"),
            ("sets.intersects([1], ['a'])", "1:16: found no matching overload for 'sets.intersects' applied to '(list(int), list(string))'"),
            ("['a'].join(1)", "1:11: found no matching overload for 'join' applied to 'list(string).(int)'"),
            ("[{'a': 1}].sortBy(x, x)", "1:18: found no matching overload for '@sortByAssociatedKeys' applied to 'list(map(string, int)).(list(map(string, int)))'"),
            ("optional.of(1).or(1)", "1:18: found no matching overload for 'or' applied to 'optional_type(int).(int)'"),
            ("'abc'.all(c, true)", "1:1: expression of type 'string' cannot be range of a comprehension (must be list, map, or dynamic)"),
            ("[1].map(x, x).filter(y, y)", "1:21: found no matching overload for '_?_:_' applied to '(int, list(int), list(int))'"),
            // kube-apiserver 1.36 refused a translated policy so (issue 50).
            ("true ? 'a' : [dyn(1)]", "1:6: found no matching overload for '_?_:_' applied to '(bool, string, list(dyn))'"),
            ("[1, 2].all(i, v, i)", "1:18: expected type 'bool' but found 'int'"),
            ("{'a': 1}.exists(k, v, v)", "1:23: expected type 'bool' but found 'int'"),
            ("{'a': [1]}.all(k, k)", "1:19: expected type 'bool' but found 'string'"),
            ("[?1, 2]", "1:3: expected type 'optional_type(int)' but found 'int'"),
            ("[1].map(x, [x]).exists(l, l[0] == 'a')", "1:32: found no matching overload for '_==_' applied to '(int, string)'"),
            ("[optional.of(1)].unwrapOpt()[0] == 'a'", "1:33: found no matching overload for '_==_' applied to '(int, string)'"),
            ("optional.none().orValue(1) == 'a'", "1:28: found no matching overload for '_==_' applied to '(int, string)'"),
            ("authorizer.group('').check('get')", "1:27: found no matching overload for 'check' applied to 'kubernetes.authorization.GroupCheck.(string)'"),
        ] {
            let got = error(bad);
            assert!(got.contains(&format!("ERROR: <input>:{message}")), "{bad}: {got}");
        }
        for ok in [
            "[[1], []]",
            "dyn(['a', 'b']).join()",
            "type(1) == string",
            "optional.none() == optional.of(1)",
        ] {
            compiles(ok);
        }
    }

    // Expectations from maporacle (k8s.io/apiserver v0.36.2).
    #[test]
    fn one_variable_exists_one_is_undeclared() {
        assert!(error("[1, 2].existsOne(x, x == 1)").contains(
            "ERROR: <input>:1:17: undeclared reference to 'existsOne' (in container '')"
        ));
        compiles("[1, 2].exists_one(x, x == 1) && [1, 2].existsOne(i, v, v == 1)");
    }

    // cel-go columns count characters; a wide character is marked with
    // wide dots (common/errors.go ToDisplayString).
    #[test]
    fn positions_after_non_ascii_text() {
        assert!(error("'é' + 1").contains(
            "ERROR: <input>:1:5: found no matching overload for '_+_' applied to '(string, int)'"
        ));
        assert_eq!(
            error("['日本', 1]"),
            "compilation failed: ERROR: <input>:1:8: expected type 'string' but found 'int'\n | ['日本', 1]\n | ..\u{ff0e}\u{ff0e}...^"
        );
    }

    #[test]
    fn valid_expressions_still_compile() {
        for s in [
            "optional.of(1).hasValue()",
            "jsonpatch.escapeKey('a/b')",
            "'abc'.startsWith('a') && 'abc'.matches('^a')",
            "1 < 2.0 && 1u < 2",
            "1 / 0 == 1 || int(object.x) == 1",
            // Only `dyn` meets numbers of another type (`1 == 1.0` is no
            // overload upstream, see `operands_of_one_type`).
            "dyn(1) == 1.0 && int('1') == dyn(1u)",
            "[1, 2].all(i, v, v > i) && {'a': 1}.transformMap(k, v, v + 1) == {'a': 2}",
            "object.spec.replicas > 1 && has(object.metadata.labels)",
            "quantity('1Gi').isGreaterThan(quantity('1Mi'))",
            "string(object.spec.replicas) + '-' + object.metadata.name",
            "size(object.spec.containers) + 1 > 2",
            "[1, 2].map(x, x * 2) == [2, 4]",
            "{'a': [1], 'b': [2]}.size() == 2",
            "['a', 'b'].join(',') == 'a,b'",
            "Object{spec: Object.spec{replicas: 1}}",
            "[JSONPatch{op: 'add', path: '/a', value: 1}, JSONPatch{op: 'remove', path: '/b'}]",
            "object.spec.containers.map(c, c.name).exists(n, n == 'x')",
        ] {
            compiles(s);
        }
    }
}
