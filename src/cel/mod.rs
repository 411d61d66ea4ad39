//! The CEL environment of MutatingAdmissionPolicy expressions, on the `cel`
//! crate: compiling (parse, Kubernetes rewrites), the `Object` and
//! `JSONPatch` types, JSON conversions and the Kubernetes libraries.

pub mod access;
mod ast;
mod check;
pub(crate) use check::{DeclaredVariables, ExpectedResult};
pub mod convert;
pub mod cost;
mod eval;
pub mod field_warnings;
mod library;
pub mod object_json;
pub mod object_types;
mod rewrite;
pub mod structpb;

use ast::for_each_child;

use cel::common::ast::IdedExpr;
use cel::{Env, ExecutionError};
use std::sync::{Arc, OnceLock};

pub use cel::common::value::{CowVal, Val};
pub use cel::Context;
pub use library::authz;
pub use library::format::validate_format as named_format_errors;
pub use library::urls::go_quote;

/// Parser recursion limit: deeper expressions are refused, never a crash.
const MAX_PARSE_DEPTH: u16 = 250;

/// A compile error, in upstream's words (`compilation failed: ERROR: <input>:1:5: ...`).
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.text())]
pub struct CompileError {
    /// The parser's or checker's message, with `<input>:line:column`.
    pub message: String,
    /// Which of upstream's steps refuses the expression.
    pub stage: CompileStage,
}

/// The step of upstream's compilation an error comes from, which names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CompileStage {
    /// Parsing, type checking and the AST validators (`compilation failed`).
    #[default]
    Compilation,
    /// Building the program, e.g. a constant regex that does not compile
    /// (`program instantiation failed`).
    ProgramInstantiation,
    /// The result's static type is not the one the field needs (`must
    /// evaluate to Object but got Object.metadata`): upstream words it
    /// without a stage.
    ResultType,
}

impl CompileError {
    /// The error as upstream words it.
    fn text(&self) -> String {
        match self.stage {
            CompileStage::ResultType => self.message.clone(),
            stage => format!("{stage}: {}", self.message),
        }
    }
}

impl std::fmt::Display for CompileStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CompileStage::Compilation => "compilation failed",
            CompileStage::ProgramInstantiation => "program instantiation failed",
            CompileStage::ResultType => "result type",
        })
    }
}

/// A compiled expression, ready to evaluate many times.
#[derive(Debug, Clone)]
pub struct CompiledExpression {
    source: String,
    ast: IdedExpr,
    /// The tree the interpreter runs, where it differs from `ast`: rewritten
    /// for speed in ways the analyses of `ast` need not know.
    interpreted: Option<IdedExpr>,
    /// The static type of the result, as far as the checks know it.
    output: check::OutputType,
    /// The cost of the part of the tree that always runs (see `cost`).
    root_cost: u64,
    /// The identifiers the expression reads, sorted (to skip building
    /// inputs nobody reads).
    identifiers: Vec<String>,
    /// The interpreted tree planned for evaluation, when its shapes allow.
    plan: Option<eval::Plan>,
}

impl CompiledExpression {
    /// The static type of the result, for declaring a variable of it.
    pub(crate) fn output_type(&self) -> &check::OutputType {
        &self.output
    }

    /// Upstream's error when the result's static type is known and is not
    /// `expected` (`plugin/cel/compile.go` compiles each expression against
    /// its field's type): `must evaluate to Object but got Object.metadata`.
    pub(crate) fn result_type_error(&self, expected: ExpectedResult) -> Option<CompileError> {
        check::result_type_error(&self.ast, &self.output, expected).map(|message| CompileError {
            message,
            stage: CompileStage::ResultType,
        })
    }

    /// The CEL source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the expression reads the top-level variable `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.identifiers
            .binary_search_by(|i| i.as_str().cmp(name))
            .is_ok()
    }

    /// Whether the expression reads no variable at all (no identifier, not
    /// even a comprehension's own): its value is the same in any activation.
    pub fn reads_nothing(&self) -> bool {
        self.identifiers.is_empty()
    }

    /// The rewritten expression tree.
    pub fn ast(&self) -> &IdedExpr {
        &self.ast
    }

    /// Evaluates the expression in `ctx`, within the per-call cost limit.
    pub fn evaluate<'e, 'p, 'v>(
        &'e self,
        ctx: &'e Context<'p, 'v>,
    ) -> Result<CowVal<'e, 'v>, ExecutionError> {
        self.evaluate_with_cost(ctx).0
    }

    /// Evaluates the expression in `ctx`, within the per-call cost limit
    /// (`cost::PER_CALL_LIMIT`); also returns the cost of the evaluation.
    pub fn evaluate_with_cost<'e, 'p, 'v>(
        &'e self,
        ctx: &'e Context<'p, 'v>,
    ) -> (Result<CowVal<'e, 'v>, ExecutionError>, u64) {
        self.evaluate_with_limit(ctx, cost::PER_CALL_LIMIT)
    }

    /// Evaluates the expression in `ctx` within the cost `limit`; also
    /// returns the cost of the evaluation.
    pub fn evaluate_with_limit<'e, 'p, 'v>(
        &'e self,
        ctx: &'e Context<'p, 'v>,
        limit: u64,
    ) -> (Result<CowVal<'e, 'v>, ExecutionError>, u64) {
        let meter = cost::Meter::start(limit);
        let result = cost::charge(self.root_cost).and_then(|()| {
            cel::Value::resolve_val(self.interpreted.as_ref().unwrap_or(&self.ast), ctx)
        });
        let result = if meter.exceeded() {
            Err(cost::limit_exceeded())
        } else {
            result
        };
        (result, meter.cost())
    }

    /// [`CompiledExpression::evaluate_with_cost`] through the expression's
    /// plan ([`eval`]), over the variables `inputs` answers in `env`;
    /// `None` when it has none, or the plan gave up: the caller then
    /// evaluates with the crate, which the meter is left to as it was.
    pub fn evaluate_planned<'r>(
        &'r self,
        env: &'r Env,
        inputs: &'r dyn cel::context::VariableResolver,
    ) -> Option<(CowVal<'r, 'r>, u64)> {
        let plan = self.plan.as_ref()?;
        let meter = cost::Meter::start(cost::PER_CALL_LIMIT);
        cost::charge(self.root_cost).ok()?;
        let value = plan.evaluate(env, inputs).ok()?;
        (!meter.exceeded()).then(|| (value, meter.cost()))
    }
}

/// The environment every policy expression is compiled and evaluated in.
#[derive(Clone)]
pub struct CelEnvironment {
    env: Arc<Env>,
}

impl std::fmt::Debug for CelEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CelEnvironment")
    }
}

impl CelEnvironment {
    /// The shared environment (built once per process).
    pub fn shared() -> CelEnvironment {
        static ENV: OnceLock<CelEnvironment> = OnceLock::new();
        ENV.get_or_init(CelEnvironment::build).clone()
    }

    fn build() -> CelEnvironment {
        let mut env = Env::stdlib();
        library::register_before_extensions(&mut env).expect("kmutate library registers once");
        library::strings::add_strings_v2(&mut env).expect("strings extension registers once");
        // cel-go `ext.Lists` (ListsVersion 3) is in kube-apiserver 1.36's base environment.
        env.add_extension(cel::extensions::lists)
            .expect("lists extension registers once");
        env.add_type(object_types::ObjectStructType::default())
            .expect("Object type registers once");
        env.add_type(object_types::JsonPatchStructType::default())
            .expect("JSONPatch type registers once");
        library::register(&mut env).expect("kmutate library registers once");
        // cel-go keeps the last entry of a map literal that repeats a key.
        env.set_error_on_duplicate_map_keys(false);
        cost::register(&mut env).expect("cost functions register once");
        CelEnvironment { env: Arc::new(env) }
    }

    /// The underlying `cel` environment.
    pub fn env(&self) -> &Arc<Env> {
        &self.env
    }

    /// A new evaluation context on this environment.
    pub fn context<'v>(&self) -> Context<'static, 'v> {
        Context::with_env(self.env.clone())
    }

    /// Parses and prepares `source`.
    pub fn compile(&self, source: &str) -> Result<CompiledExpression, CompileError> {
        self.compile_with(source, true, true, None)
    }

    /// [`CelEnvironment::compile`] of a policy expression that sees
    /// `variables` as declared (a variable sees those before it), with the
    /// patch types only for mutations.
    pub(crate) fn compile_in_policy(
        &self,
        source: &str,
        patch_types: bool,
        variables: &DeclaredVariables,
    ) -> Result<CompiledExpression, CompileError> {
        self.compile_with(source, true, patch_types, Some(variables))
    }

    /// [`CelEnvironment::compile`] for a variable or match condition: as
    /// upstream, only mutations see the patch types (`Object`, `JSONPatch`)
    /// and `jsonpatch.escapeKey`.
    pub fn compile_without_patch_types(
        &self,
        source: &str,
    ) -> Result<CompiledExpression, CompileError> {
        self.compile_with(source, true, false, None)
    }

    /// Parses and prepares `source` without the cost metering: for tests
    /// comparing metered and unmetered evaluations.
    #[doc(hidden)]
    pub fn compile_unmetered(&self, source: &str) -> Result<CompiledExpression, CompileError> {
        self.compile_with(source, false, true, None)
    }

    fn compile_with(
        &self,
        source: &str,
        metered: bool,
        patch_types: bool,
        variables: Option<&DeclaredVariables>,
    ) -> Result<CompiledExpression, CompileError> {
        check_nesting(source)?;
        // The parser recurses deeply per nesting level: compile on a large
        // stack rather than risk the caller's. Compiling happens at load
        // time, not per request.
        crate::parallel::with_large_stack(|| {
            self.compile_on_this_thread(source, metered, patch_types, variables)
        })
        .unwrap_or_else(|e| {
            Err(CompileError {
                message: match e {
                    crate::parallel::LargeStackError::Spawn(e) => {
                        format!("ERROR: <input>:1:1: cannot start the compiler thread: {e}")
                    }
                    crate::parallel::LargeStackError::Panicked => {
                        "ERROR: <input>:1:1: the parser failed on this expression".into()
                    }
                },
                ..Default::default()
            })
        })
    }

    fn compile_on_this_thread(
        &self,
        source: &str,
        metered: bool,
        patch_types: bool,
        variables: Option<&DeclaredVariables>,
    ) -> Result<CompiledExpression, CompileError> {
        let parser = self.env.parser().max_recursion_depth(MAX_PARSE_DEPTH);
        let (mut ast, source_info) =
            parser
                .parse_with_source_info(source)
                .map_err(|e| CompileError {
                    message: macro_argument_messages(source, &e.to_string()),
                    ..Default::default()
                })?;
        let mut next_id = max_id(&ast) + 1;
        rewrite::rewrite(&mut ast, &mut next_id).map_err(|e| {
            let at = e.at.and_then(|id| source_info.offset_for(id));
            CompileError {
                message: check::error_at(source, at.map_or(0, |(start, _)| start), &e.message),
                ..Default::default()
            }
        })?;
        let checked = check::check(&self.env, &ast, &source_info, patch_types, variables)?;
        let mut identifiers = Vec::new();
        collect_identifiers(&ast, &mut identifiers);
        identifiers.sort();
        identifiers.dedup();
        let root_cost = if metered {
            cost::instrument(&mut ast, &mut next_id)
        } else {
            0
        };
        // After metering, which charges `!x` as written.
        rewrite::negations_as_comparisons(&mut ast, &checked.bool_negations, &mut next_id);
        rewrite::rename_conversions(&mut ast, "string", library::string_format::STRING_FN);
        rewrite::rename_conversions(&mut ast, "double", library::double::DOUBLE_FN);
        rewrite::optional_struct_fields(&mut ast);
        let mut interpreted = ast.clone();
        let interpreted = rewrite::loop_selections_unqualified(&mut interpreted, &mut next_id)
            .then_some(interpreted);
        let output = checked.output;
        let plan = eval::Plan::of(interpreted.as_ref().unwrap_or(&ast));
        Ok(CompiledExpression {
            source: source.to_string(),
            ast,
            interpreted,
            output,
            root_cost,
            identifiers,
            plan,
        })
    }
}

/// The crate's parser says `argument must be a simple name` of every
/// macro's variable that is no identifier; cel-go says so for the
/// quantifiers (`all`, `exists`, `exists_one`) but `argument is not an
/// identifier` for `map`, `filter` and `sortBy`.
fn macro_argument_messages(source: &str, message: &str) -> String {
    const CRATE: &str = ": argument must be a simple name";
    let lines: Vec<&str> = source.split('\n').collect();
    message
        .split('\n')
        .map(|line| {
            // cel-go indents the source snippet and caret lines by one space.
            if let Some(snippet) = line.strip_prefix("| ") {
                return format!(" | {snippet}");
            }
            let Some(position) = line
                .strip_prefix("ERROR: <input>:")
                .and_then(|rest| rest.strip_suffix(CRATE))
            else {
                return line.to_string();
            };
            let Some((l, c)) = position.split_once(':') else {
                return line.to_string();
            };
            let (Ok(l), Ok(c)) = (l.parse::<usize>(), c.parse::<usize>()) else {
                return line.to_string();
            };
            // The source up to the error, then up to the macro call's '('.
            let mut before: Vec<char> = lines[..l.saturating_sub(1).min(lines.len())]
                .iter()
                .flat_map(|text| text.chars().chain(['\n']))
                .collect();
            if let Some(text) = lines.get(l.wrapping_sub(1)) {
                before.extend(text.chars().take(c.saturating_sub(1)));
            }
            let mut depth = 0usize;
            while let Some(ch) = before.pop() {
                match ch {
                    ')' | ']' | '}' => depth += 1,
                    '(' | '[' | '{' if depth > 0 => depth -= 1,
                    '(' => break,
                    _ => {}
                }
            }
            let before: String = before.into_iter().collect();
            let before = before.trim_end();
            let name_start = before
                .rfind(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
                .map_or(0, |i| i + 1);
            if matches!(&before[name_start..], "map" | "filter" | "sortBy") {
                format!("ERROR: <input>:{position}: argument is not an identifier")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every identifier of the tree (variables, comprehension variables).
fn collect_identifiers(e: &IdedExpr, out: &mut Vec<String>) {
    if let cel::common::ast::Expr::Ident(name) = &e.expr {
        // `.name` is the absolute form of `name`.
        out.push(name.strip_prefix('.').unwrap_or(name).to_string());
    }
    for_each_child(e, &mut |c| collect_identifiers(c, out));
}

/// Refuses sources nested deeper than the parser can take on a thread's
/// stack, before parsing: the parser itself recurses per level.
fn check_nesting(source: &str) -> Result<(), CompileError> {
    let (mut depth, mut line, mut col) = (0usize, 1usize, 0usize);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in source.chars() {
        col += 1;
        if c == '\n' {
            line += 1;
            col = 0;
        }
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_PARSE_DEPTH as usize / 2 {
                    return Err(CompileError {
                        message: format!("ERROR: <input>:{line}:{col}: expression nesting exceeds the maximum of {}", MAX_PARSE_DEPTH / 2),
                        ..Default::default()
                    });
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn max_id(e: &IdedExpr) -> u64 {
    let mut m = e.id;
    for_each_child(e, &mut |c| m = m.max(max_id(c)));
    m
}

/// cel-go's text for an error of the crate's own functions, where it differs.
fn function_error_text(function: &str, message: &str) -> Option<String> {
    match function {
        // A string that does not parse (cel-go's `StringToDuration` and
        // `StringToTimestamp` conversions).
        "duration"
            if message.starts_with("Parsing Error")
                || message == "range error parsing duration" =>
        {
            Some("type conversion error from 'string' to 'google.protobuf.Duration'".into())
        }
        // A string that does not parse as a number (cel-go's `strconv`
        // conversions): `int('abc')`, `uint('-1')`, `double('x')`.
        "int" | "uint" | "double" if message.starts_with("string parse error") => Some(format!(
            "type conversion error from 'string' to '{function}'"
        )),
        "timestamp" if message != "timestamp out of range" => {
            Some("type conversion error from 'string' to 'google.protobuf.Timestamp'".into())
        }
        // `'<pattern>' not a valid regex: ...`: Go's `regexp` error.
        "matches" => {
            let pattern = message.strip_prefix('\'')?;
            let end = pattern.rfind("' not a valid regex")?;
            library::regex::go_regex_error(&pattern[..end])
        }
        _ => None,
    }
}

/// An evaluation error in upstream's (cel-go's) words.
pub fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(_, cel::Value::UInt(_), _) => "unsigned integer overflow".into(),
        ExecutionError::Overflow(_, _, _) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(cel::Value::Int(i)) => format!("index out of bounds: {i}"),
        ExecutionError::UnsupportedIndex(cel::Value::Float(f), cel::Value::List(_)) => {
            format!("unsupported index value {f} in list")
        }
        // cel-go's operators on values of other types (`dyn(1) + dyn(1.0)`).
        ExecutionError::UnsupportedBinaryOperator(..) => "no such overload".into(),
        ExecutionError::NoSuchOverload(o) => format!("no such overload: {o}"),
        ExecutionError::UndeclaredReference(n) => format!("no such attribute: {n}"),
        ExecutionError::FunctionError { function, message } => {
            function_error_text(function, message).unwrap_or_else(|| message.clone())
        }
        other => other.to_string(),
    }
}

/// The JSON value of `src` evaluated with no variables, or the compile or
/// evaluation error in upstream's words: for unit tests.
#[cfg(test)]
pub(crate) fn eval_json(src: &str) -> Result<serde_json::Value, String> {
    let env = CelEnvironment::shared();
    let expr = env.compile(src).map_err(|e| e.to_string())?;
    let ctx = env.context();
    let v = expr.evaluate(&ctx).map_err(|e| error_text(&e))?;
    convert::val_to_json(&*v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The `!_` and `_==_` calls of `e`.
    fn negations_and_equalities(e: &IdedExpr) -> (usize, usize) {
        let mut counts = match &e.expr {
            cel::common::ast::Expr::Call(c) if c.func_name == "!_" => (1, 0),
            cel::common::ast::Expr::Call(c) if c.func_name == "_==_" => (0, 1),
            _ => (0, 0),
        };
        for_each_child(e, &mut |c| {
            let (n, q) = negations_and_equalities(c);
            counts.0 += n;
            counts.1 += q;
        });
        counts
    }

    #[test]
    fn negations_of_bools_are_compared_with_false_and_answer_the_same() {
        let env = CelEnvironment::shared();
        // (expression, `!` left as written, its value or error)
        for (src, kept, expected) in [
            ("!has({'a': 1}.a)", 0, Ok(json!(false))),
            ("!has({'a': 1}.b)", 0, Ok(json!(true))),
            ("!('abc'.contains('b'))", 0, Ok(json!(false))),
            (
                "!'abc'.startsWith('b') && !('abc'.matches('^z'))",
                0,
                Ok(json!(true)),
            ),
            ("!(1 < 2)", 0, Ok(json!(false))),
            ("!(1 > 2 || 2 > 3)", 0, Ok(json!(true))),
            ("!!(1 in [1])", 0, Ok(json!(true))),
            ("!(1 / 0 == 1)", 0, Err("division by zero".to_string())),
            ("!(1 / 0 == 1) || true", 0, Ok(json!(true))),
            // Operands that may be no bool at run time keep `!`.
            ("!dyn(true)", 1, Ok(json!(false))),
            (
                "!dyn(1)",
                1,
                Err(
                    "no such overload: found no matching overload for '!_' applied to '(int)'"
                        .to_string(),
                ),
            ),
            ("[true, false].map(x, !x)", 1, Ok(json!([false, true]))),
            ("!{'f': true}.f", 1, Ok(json!(false))),
        ] {
            let expr = env.compile(src).unwrap();
            let (negations, _) = negations_and_equalities(expr.ast());
            assert_eq!(negations, kept, "{src}");
            assert_eq!(eval_json(src), expected, "{src}");
        }
        // Metered or not, the rewrite is the same.
        let unmetered = env.compile_unmetered("!has({'a': 1}.a)").unwrap();
        assert_eq!(negations_and_equalities(unmetered.ast()), (0, 1));
    }

    #[test]
    fn selections_on_loop_variables_answer_as_written() {
        let env = CelEnvironment::shared();
        // (expression, whether a selection in it is on a loop variable)
        for (src, rewritten) in [
            ("[{'a': 1}, {'a': 2}].map(c, c.a)", true),
            ("[{'a': {'b': 'x'}}].map(c, c.a.b)", true),
            ("[{'a': 1}, {}].filter(c, has(c.a))", true),
            ("[{'a': 1}].map(c, c.b)", true),
            ("[dyn(1)].map(c, c.a)", true),
            ("[dyn(1)].map(c, has(c.a))", true),
            ("[{'a': 1}].exists(c, [c].exists(d, d.a == c.a))", true),
            ("[[{'a': 1}]].map(c, c.map(d, d.a))", true),
            ("[{'a': 1}].map(c, [{'a': 2}].map(c, c.a))", true),
            ("[{'a': 1}].map(c, c).map(d, d.a)", true),
            ("[{'a': 1}].exists_one(c, c.a == 1)", true),
            ("{'k': {'a': 1}}.all(k, k.a == 1)", true),
            ("[dyn({'a': 1})].map(c, c.?a.orValue(0))", false),
            ("{'c': {'a': 1}}.c.a", false),
            ("[{'a': 1}].map(c, {'c': 2}.c)", false),
        ] {
            let expr = env.compile(src).unwrap();
            assert_eq!(expr.interpreted.is_some(), rewritten, "{src}");
            let as_written = CompiledExpression {
                interpreted: None,
                ..expr.clone()
            };
            let ctx = env.context();
            let answer = |e: &CompiledExpression| {
                let (result, cost) = e.evaluate_with_cost(&ctx);
                let result = result
                    .map_err(|e| error_text(&e))
                    .and_then(|v| convert::val_to_json(&*v).map_err(|e| e.to_string()));
                (result, cost)
            };
            assert_eq!(answer(&expr), answer(&as_written), "{src}");
        }
    }

    #[test]
    fn object_literal_carries_its_written_type_name() {
        let env = CelEnvironment::shared();
        let expr = env
            .compile("Object{spec: Object.specx{replicas: 1}}")
            .unwrap();
        let ctx = env.context();
        let v = expr.evaluate(&ctx).unwrap();
        let st = object_types::as_struct(v.as_ref()).unwrap();
        let errs = object_json::check_type_names(st);
        assert_eq!(errs, vec!["unexpected type name \"Object.specx\", expected \"Object.spec\", which matches field name path from root Object type".to_string()]);
    }

    #[test]
    fn object_equality_and_field_access() {
        assert_eq!(eval_json("Object{} == Object{}").unwrap(), true);
        assert_eq!(
            eval_json("Object{field: 'x'} == Object{field: 'y'}").unwrap(),
            false
        );
        assert_eq!(eval_json("Object{field: 'x'}.field").unwrap(), "x");
    }

    #[test]
    fn objects_compare_select_and_copy_as_structs() {
        use serde_json::json;
        for (src, expected) in [
            // Equal: same written name, same fields (in any order written).
            ("Object{a: 1, b: 'x'} == Object{b: 'x', a: 1}", json!(true)),
            ("Object.spec{} == Object{}", json!(false)),
            ("Object{a: 1} == Object{a: 1, b: 2}", json!(false)),
            ("Object{a: [1]} == Object{a: [2]}", json!(false)),
            ("has(Object{a: 1}.a)", json!(true)),
            ("has(Object{a: 1}.b)", json!(false)),
            ("Object{?a: optional.none()}", json!({})),
            // `map()` copies each value it appends: the copies are equal values.
            (
                "[1, 2].map(i, Object{n: i, s: Object.s{m: {'k': i}}})",
                json!([{"n": 1, "s": {"m": {"k": 1}}}, {"n": 2, "s": {"m": {"k": 2}}}]),
            ),
            (
                "[1, 2].map(i, Object{n: i})[1] == Object{n: 2}",
                json!(true),
            ),
            ("type(Object.spec{}) == type(Object{})", json!(false)),
            ("JSONPatch{op: 'add'} == JSONPatch{op: 'add'}", json!(true)),
            ("JSONPatch{op: 'add'} == Object{op: 'add'}", json!(false)),
        ] {
            assert_eq!(eval_json(src).unwrap(), expected, "{src}");
        }
        assert_eq!(eval_json("Object{a: 1}.b").unwrap_err(), "no such key: b");
    }

    #[test]
    fn two_variable_comprehensions() {
        // cel-go ext/comprehensions_test.go
        assert_eq!(eval_json("[1, 2, 3].all(i, v, i < v)").unwrap(), true);
        assert_eq!(
            eval_json("[1, 2, 3].exists(i, v, i == 1 && v == 2)").unwrap(),
            true
        );
        assert_eq!(
            eval_json("{'a': 1, 'b': 2}.existsOne(k, v, v == 2)").unwrap(),
            true
        );
        assert_eq!(
            eval_json("[1, 2, 3].transformList(i, v, i * v)").unwrap(),
            serde_json::json!([0, 2, 6])
        );
        assert_eq!(
            eval_json("[1, 2, 3].transformList(i, v, i > 0, v)").unwrap(),
            serde_json::json!([2, 3])
        );
        assert_eq!(
            eval_json("{'a': 1}.transformMap(k, v, v + 1)").unwrap(),
            serde_json::json!({"a": 2})
        );
        assert_eq!(
            eval_json("{'greeting': 'hello'}.transformMapEntry(k, v, {v: k})").unwrap(),
            serde_json::json!({"hello": "greeting"})
        );
        // shadowing by an inner one-variable comprehension
        assert_eq!(
            eval_json("[1, 2].all(i, v, [5].all(v, v == 5))").unwrap(),
            true
        );
    }

    #[test]
    fn cel_bind_is_not_declared() {
        // kube-apiserver 1.36's environment (environment/base.go) has no
        // bindings extension; its plugin (maporacle) refuses the expression
        // with these four errors.
        let env = CelEnvironment::shared();
        let e = env
            .compile_in_policy(
                "cel.bind(a, 1, a + 1) == 2",
                false,
                &DeclaredVariables::default(),
            )
            .unwrap_err()
            .to_string();
        let lines: Vec<&str> = e.lines().filter(|l| l.contains("ERROR")).collect();
        assert_eq!(
            lines,
            [
                "compilation failed: ERROR: <input>:1:1: undeclared reference to 'cel' (in container '')",
                "ERROR: <input>:1:9: undeclared reference to 'bind' (in container '')",
                "ERROR: <input>:1:10: undeclared reference to 'a' (in container '')",
                "ERROR: <input>:1:16: undeclared reference to 'a' (in container '')",
            ],
            "{e}"
        );
    }

    #[test]
    fn escape_key() {
        assert_eq!(
            eval_json("jsonpatch.escapeKey('k8s.io/x~y')").unwrap(),
            "k8s.io~1x~0y"
        );
    }

    #[test]
    fn parse_errors_use_upstream_format() {
        let e = CelEnvironment::shared()
            .compile("1 +")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("compilation failed: ERROR: <input>:1:"),
            "{e}"
        );
    }

    // cel-go's texts (maporacle, k8s.io/apiserver v0.36.2).
    #[test]
    fn macro_variables_that_are_no_identifiers() {
        let env = CelEnvironment::shared();
        for (src, message) in [
            (
                "[1].map(1, 1)",
                "ERROR: <input>:1:9: argument is not an identifier",
            ),
            (
                "[1].filter(1, true)",
                "ERROR: <input>:1:12: argument is not an identifier",
            ),
            (
                "[1, 2].sortBy(x.y, 1)",
                "ERROR: <input>:1:16: argument is not an identifier",
            ),
            (
                "[1].all(1, true)",
                "ERROR: <input>:1:9: argument must be a simple name",
            ),
            (
                "[1].exists_one(1, true)",
                "ERROR: <input>:1:16: argument must be a simple name",
            ),
        ] {
            let e = env.compile(src).unwrap_err().to_string();
            assert!(e.contains(message), "{src}: {e}");
        }
    }

    // cel-go's run-time texts and results (maporacle, k8s.io/apiserver v0.36.2).
    #[test]
    fn runtime_errors_and_results_in_cel_go_words() {
        for (src, expected) in [
            ("[1, 2, 3][3]", Err("index out of bounds: 3")),
            ("[1, 2, 3][-1]", Err("index out of bounds: -1")),
            (
                "dyn([1, 2, 3])[dyn(1.5)]",
                Err("unsupported index value 1.5 in list"),
            ),
            ("1u - 2u", Err("unsigned integer overflow")),
            ("9223372036854775807 + 1", Err("integer overflow")),
            ("dyn(1) + dyn(1.0)", Err("no such overload")),
            (
                "{'a': 'x', 'b': 'x'}.transformMapEntry(k, v, {v: k})",
                Err("insert failed: key x already exists"),
            ),
            ("{'a': 1, 'a': 2}", Ok(json!({"a": 2}))),
            (
                "duration(string(1) + 'x')",
                Err("type conversion error from 'string' to 'google.protobuf.Duration'"),
            ),
            (
                "timestamp(string(1) + 'x')",
                Err("type conversion error from 'string' to 'google.protobuf.Timestamp'"),
            ),
            (
                "int(string(1) + 'x')",
                Err("type conversion error from 'string' to 'int'"),
            ),
            (
                "int(string(1) + '99999999999999999999')",
                Err("type conversion error from 'string' to 'int'"),
            ),
            (
                "uint('-' + string(1))",
                Err("type conversion error from 'string' to 'uint'"),
            ),
            (
                "double(string(1) + 'x')",
                Err("type conversion error from 'string' to 'double'"),
            ),
            (
                "'abc'.matches(string(1) + '[')",
                Err("error parsing regexp: missing closing ]: `[`"),
            ),
        ] {
            assert_eq!(eval_json(src), expected.map_err(str::to_string), "{src}");
        }
    }

    #[test]
    fn very_deep_expressions_are_refused_not_crashing() {
        let src = "(".repeat(5000) + "1" + &")".repeat(5000);
        assert!(CelEnvironment::shared().compile(&src).is_err());
    }
}
