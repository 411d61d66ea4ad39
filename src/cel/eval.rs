//! Evaluating a compiled tree with its names resolved once, when compiled.
//!
//! The `cel` crate looks every identifier up by name, finds every function
//! by name and argument types, and binds a comprehension's variables in a
//! map, on every evaluation; most of a request's evaluation time went
//! there. A [`Plan`] is the same tree with those decisions taken when the
//! expression is compiled: a comprehension's variables are frame slots, the
//! internal cost functions are called directly, and the operators run on
//! the crate's own value operations (`==`, `as_adder`, `as_indexer`, ...),
//! so a value computed here is the value the crate computes.
//!
//! A plan covers the successful evaluations of the common shapes only.
//! Any error, and anything it does not know (an optional where a value was
//! expected, a struct literal, a function of the context), makes it give
//! up ([`GiveUp`]), and the caller evaluates the expression again with the
//! crate, on a fresh meter: CEL is pure, so the second evaluation sees what
//! the first saw, and an error keeps the crate's text and cost. What the
//! plan evaluates, it charges exactly as the crate's evaluation of the same
//! instrumented tree does (the charges are the same calls, in the same
//! order), so a result carries the same cost either way.

use super::cost;
use super::object_types::{JsonPatchStructType, ObjectStructType};
use cel::common::ast::{operators, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{CelBool, CelInt, CelList, CelOptional, CelString, MutableList};
use cel::common::types::{CelMap, CelMapKey, Kind};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::Env;
use cel::StructType;
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

/// An expression's tree, planned for evaluation (see the module doc).
#[derive(Clone, Debug)]
pub struct Plan {
    root: Node,
}

/// The plan could not evaluate the expression: the crate must.
#[derive(Debug, PartialEq, Eq)]
pub struct GiveUp;

type Eval<'b, 'r> = Result<CowVal<'b, 'r>, GiveUp>;

#[derive(Clone, Debug)]
enum Node {
    Literal(LiteralValue),
    /// A top-level variable, or a qualified name starting with one
    /// (`object.spec.containers`), as the resolver answers it; else the
    /// variable (`root`), then each field selected in turn.
    Input {
        name: String,
        root: String,
        fields: Vec<CelString<'static>>,
    },
    /// A comprehension's variable: `up` comprehensions out, its
    /// accumulator or its element.
    Local {
        up: usize,
        accumulator: bool,
    },
    Select {
        operand: Box<Node>,
        field: CelString<'static>,
        test: bool,
    },
    OptionalSelect {
        operand: Box<Node>,
        field: CelString<'static>,
    },
    Index(Box<[Node; 2]>),
    /// `value[?key]` on a value that is no optional.
    OptionalIndex(Box<[Node; 2]>),
    /// A method of the strings extension on a string.
    StringMethod {
        method: StringMethod,
        target: Box<Node>,
        args: Vec<Node>,
    },
    Not(Box<Node>),
    NotStrictlyFalse(Box<Node>),
    And(Box<[Node; 2]>),
    Or(Box<[Node; 2]>),
    Conditional(Box<[Node; 3]>),
    Binary(Binary, Box<[Node; 2]>),
    /// A global function, found by the environment when called (as the
    /// crate finds it).
    Call {
        name: String,
        args: Vec<Node>,
    },
    /// One of kmutate's internal functions (the cost wrappers), called
    /// directly with the code the instrumenter wrote.
    Internal {
        function: cost::Internal,
        code: u64,
        operands: Vec<Node>,
    },
    HasValue(Box<Node>),
    /// `x.size()`: the global `size` overload of `x`'s type, which for
    /// every type that has one is the method's function too.
    Size(Box<Node>),
    /// A map literal (no optional entries).
    Map(Vec<(Node, Node)>),
    /// A struct literal of one of kmutate's types.
    Struct {
        ty: StructKind,
        fields: Vec<(String, Node)>,
    },
    OrValue(Box<[Node; 2]>),
    List(Vec<Node>),
    Fold(Box<Fold>),
}

/// The strings extension's methods a plan calls itself (cel-go's
/// `ext.Strings`, as the crate implements them), where they succeed.
#[derive(Clone, Copy, Debug)]
enum StringMethod {
    Split,
    Substring,
    IndexOf,
    LastIndexOf,
}

/// The struct types an expression can construct.
#[derive(Clone, Copy, Debug)]
enum StructKind {
    Object,
    JsonPatch,
}

#[derive(Clone, Copy, Debug)]
enum Binary {
    Equals,
    NotEquals,
    Less,
    LessEquals,
    Greater,
    GreaterEquals,
    In,
    Add,
    Subtract,
    Multiply,
    Divide,
    Modulo,
}

/// A comprehension.
#[derive(Clone, Debug)]
struct Fold {
    range: Node,
    init: Node,
    condition: Node,
    step: Node,
    result: Node,
    /// The shape the crate runs by appending in place, when `init` is
    /// an empty list: `@result + [items]`, or `guard ? @result + [items] :
    /// @result`, with `@result` as the result and a literal condition.
    append: Option<Append>,
}

#[derive(Clone, Debug)]
struct Append {
    guard: Option<Node>,
    items: Node,
}

/// The names a comprehension binds, innermost last, while planning.
type Scope<'a> = Vec<(&'a str, &'a str)>;

impl Plan {
    /// The plan of `ast`, or `None` when it holds a shape the plan does not
    /// cover (the crate then evaluates it every time).
    pub fn of(ast: &IdedExpr) -> Option<Plan> {
        Some(Plan {
            root: plan(ast, &mut Vec::new())?,
        })
    }

    /// Evaluates the plan in `env` over the variables `inputs` answers;
    /// the cost goes to the running meter.
    pub fn evaluate<'r>(&'r self, env: &'r Env, inputs: &'r dyn VariableResolver) -> Eval<'r, 'r> {
        let frame = Frame {
            inputs,
            env,
            parent: None,
            accumulator: None,
            element: None,
        };
        self.root.eval(&frame)
    }
}

fn plan<'a>(e: &'a IdedExpr, scope: &mut Scope<'a>) -> Option<Node> {
    Some(match &e.expr {
        Expr::Literal(l) => Node::Literal(l.clone()),
        Expr::Ident(name) => ident(name, scope)?,
        Expr::Select(s) => {
            if !s.test {
                if let Some(input) = qualified_input(e, scope) {
                    return Some(input);
                }
            }
            Node::Select {
                operand: Box::new(plan(&s.operand, scope)?),
                field: CelString::from(s.field.clone()),
                test: s.test,
            }
        }
        Expr::Call(call) => return plan_call(call, scope),
        Expr::List(list) if list.optional_indices.is_empty() => Node::List(
            list.elements
                .iter()
                .map(|e| plan(e, scope))
                .collect::<Option<_>>()?,
        ),
        Expr::Comprehension(c) if c.iter_var2.is_none() => {
            Node::Fold(Box::new(plan_fold(c, scope)?))
        }
        Expr::Map(map) => Node::Map(
            map.entries
                .iter()
                .map(|entry| match &entry.expr {
                    EntryExpr::MapEntry(e) if !e.optional => {
                        Some((plan(&e.key, scope)?, plan(&e.value, scope)?))
                    }
                    _ => None,
                })
                .collect::<Option<_>>()?,
        ),
        Expr::Struct(s) => Node::Struct {
            ty: match s.type_name.as_str() {
                "Object" => StructKind::Object,
                "JSONPatch" => StructKind::JsonPatch,
                _ => return None,
            },
            fields: s
                .entries
                .iter()
                .map(|entry| match &entry.expr {
                    EntryExpr::StructField(f) => Some((f.field.clone(), plan(&f.value, scope)?)),
                    EntryExpr::MapEntry(_) => None,
                })
                .collect::<Option<_>>()?,
        },
        _ => return None,
    })
}

/// A variable: a comprehension's, innermost first, or a top-level one.
fn ident(name: &str, scope: &Scope<'_>) -> Option<Node> {
    for (up, (accumulator, element)) in scope.iter().rev().enumerate() {
        if name == *accumulator || name == *element {
            return Some(Node::Local {
                up,
                accumulator: name == *accumulator,
            });
        }
    }
    let name = name.strip_prefix('.').unwrap_or(name);
    cost::INPUT_VARIABLES.contains(&name).then(|| Node::Input {
        name: name.to_string(),
        root: name.to_string(),
        fields: Vec::new(),
    })
}

/// `object.spec.containers`: the crate resolves a selection chain on a
/// top-level variable as one qualified name.
fn qualified_input(e: &IdedExpr, scope: &Scope<'_>) -> Option<Node> {
    let segments = qualified_name(e)?;
    let (root, fields) = segments.split_first()?;
    let root = root.strip_prefix('.').unwrap_or(root);
    if scope.iter().any(|(a, el)| *a == root || *el == root)
        || !cost::INPUT_VARIABLES.contains(&root)
    {
        return None;
    }
    Some(Node::Input {
        name: segments.join("."),
        root: root.to_string(),
        fields: fields
            .iter()
            .map(|f| CelString::from(f.to_string()))
            .collect(),
    })
}

/// `jsonpatch.escapeKey(k)`: a method call on a name that is no variable
/// calls the function of the qualified name, as the crate resolves it.
fn namespaced_function(target: &IdedExpr, function: &str, scope: &Scope<'_>) -> Option<String> {
    let names = qualified_name(target)?;
    let root = names[0].strip_prefix('.').unwrap_or(names[0]);
    if scope.iter().any(|(a, e)| *a == root || *e == root) || cost::INPUT_VARIABLES.contains(&root)
    {
        return None;
    }
    Some(format!("{}.{function}", names.join(".")))
}

/// `a.b.c` as its names, when it is a chain of selections on a name.
fn qualified_name(e: &IdedExpr) -> Option<Vec<&str>> {
    match &e.expr {
        Expr::Ident(name) => Some(vec![name.as_str()]),
        Expr::Select(s) if !s.test => {
            let mut names = qualified_name(&s.operand)?;
            names.push(s.field.as_str());
            Some(names)
        }
        _ => None,
    }
}

fn plan_args<'a>(args: &'a [IdedExpr], scope: &mut Scope<'a>) -> Option<Vec<Node>> {
    args.iter().map(|a| plan(a, scope)).collect()
}

fn plan_call<'a>(call: &'a cel::common::ast::CallExpr, scope: &mut Scope<'a>) -> Option<Node> {
    if let Some(target) = &call.target {
        if let Some(function) = namespaced_function(target, &call.func_name, scope) {
            return Some(Node::Call {
                name: function,
                args: plan_args(&call.args, scope)?,
            });
        }
        // The optionals' methods and a few of the strings extension's;
        // others are the crate's to find.
        let target = Box::new(plan(target, scope)?);
        let mut args = plan_args(&call.args, scope)?;
        let method = match (call.func_name.as_str(), args.len()) {
            ("hasValue", 0) => return Some(Node::HasValue(target)),
            ("size", 0) => return Some(Node::Size(target)),
            ("orValue", 1) => return Some(Node::OrValue(Box::new([*target, args.remove(0)]))),
            ("split", 1) => StringMethod::Split,
            ("substring", 1 | 2) => StringMethod::Substring,
            ("indexOf", 1) => StringMethod::IndexOf,
            ("lastIndexOf", 1) => StringMethod::LastIndexOf,
            _ => return None,
        };
        return Some(Node::StringMethod {
            method,
            target,
            args,
        });
    }
    let name = call.func_name.as_str();
    let mut args = plan_args(&call.args, scope)?;
    let two = |args: &mut Vec<Node>| -> Option<Box<[Node; 2]>> {
        let b = args.pop()?;
        let a = args.pop()?;
        Some(Box::new([a, b]))
    };
    let node = match (name, args.len()) {
        (operators::CONDITIONAL, 3) => {
            let c = args.pop()?;
            let b = args.pop()?;
            let a = args.pop()?;
            match a {
                // The loop-variable rewrite's `true ? v : v`.
                Node::Literal(LiteralValue::Boolean(t)) if *t.inner() => b,
                a => Node::Conditional(Box::new([a, b, c])),
            }
        }
        (operators::LOGICAL_AND, 2) => Node::And(two(&mut args)?),
        (operators::LOGICAL_OR, 2) => Node::Or(two(&mut args)?),
        (operators::LOGICAL_NOT, 1) => Node::Not(Box::new(args.pop()?)),
        (operators::NOT_STRICTLY_FALSE, 1) => Node::NotStrictlyFalse(Box::new(args.pop()?)),
        (operators::INDEX, 2) => Node::Index(two(&mut args)?),
        (operators::OPT_INDEX, 2) => Node::OptionalIndex(two(&mut args)?),
        (operators::OPT_SELECT, 2) => {
            let Node::Literal(LiteralValue::String(field)) = args.pop()? else {
                return None;
            };
            Node::OptionalSelect {
                operand: Box::new(args.pop()?),
                field,
            }
        }
        (op, 2) if binary(op).is_some() => Node::Binary(binary(op)?, two(&mut args)?),
        (op, _) if op.starts_with('_') || op.starts_with('@') && !op.starts_with("@kmutate") => {
            // Another operator (`_[?_]`, `-_`): the crate's.
            return None;
        }
        _ => match cost::internal(name) {
            // The instrumenter's code is an int literal, its first argument.
            Some(function) => {
                let Node::Literal(LiteralValue::Int(code)) = args.first()? else {
                    return None;
                };
                let code = u64::try_from(*code.inner()).unwrap_or(0);
                let operands = args.split_off(1);
                match (function, operands.len()) {
                    (cost::Internal::Unary(_), 1) | (cost::Internal::Binary(_), 2) => {}
                    _ => return None,
                }
                Node::Internal {
                    function,
                    code,
                    operands,
                }
            }
            None => Node::Call {
                name: name.to_string(),
                args,
            },
        },
    };
    Some(node)
}

fn binary(op: &str) -> Option<Binary> {
    Some(match op {
        operators::EQUALS => Binary::Equals,
        operators::NOT_EQUALS => Binary::NotEquals,
        operators::LESS => Binary::Less,
        operators::LESS_EQUALS => Binary::LessEquals,
        operators::GREATER => Binary::Greater,
        operators::GREATER_EQUALS => Binary::GreaterEquals,
        operators::IN => Binary::In,
        operators::ADD => Binary::Add,
        operators::SUBSTRACT => Binary::Subtract,
        operators::MULTIPLY => Binary::Multiply,
        operators::DIVIDE => Binary::Divide,
        operators::MODULO => Binary::Modulo,
        _ => return None,
    })
}

fn plan_fold<'a>(c: &'a ComprehensionExpr, scope: &mut Scope<'a>) -> Option<Fold> {
    // The range and the initial accumulator are evaluated outside the loop.
    let range = plan(&c.iter_range, scope)?;
    let init = plan(&c.accu_init, scope)?;
    scope.push((c.accu_var.as_str(), c.iter_var.as_str()));
    let planned = (|| {
        let condition = plan(&c.loop_cond, scope)?;
        let step = plan(&c.loop_step, scope)?;
        let result = plan(&c.result, scope)?;
        let append = append_shape(c, scope);
        Some((condition, step, result, append))
    })();
    scope.pop();
    let (condition, step, result, append) = planned?;
    Some(Fold {
        range,
        init,
        condition,
        step,
        result,
        append,
    })
}

/// The crate's in-place `map`/`filter` step (its `AppendStep::of`).
fn append_shape<'a>(c: &'a ComprehensionExpr, scope: &mut Scope<'a>) -> Option<Append> {
    let accu = c.accu_var.as_str();
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(name) if name == accu);
    let items_of = |e: &'a IdedExpr| match &e.expr {
        Expr::Call(call) if call.func_name == operators::ADD && call.target.is_none() => {
            match call.args.as_slice() {
                [lhs, rhs] if is_accu(lhs) && matches!(rhs.expr, Expr::List(_)) => Some(rhs),
                _ => None,
            }
        }
        _ => None,
    };
    if !is_accu(&c.result) || !matches!(c.loop_cond.expr, Expr::Literal(_)) {
        return None;
    }
    if let Expr::Call(call) = &c.loop_step.expr {
        if call.func_name == operators::CONDITIONAL && call.target.is_none() {
            return match call.args.as_slice() {
                [guard, step, otherwise] if is_accu(otherwise) => Some(Append {
                    guard: Some(plan(guard, scope)?),
                    items: plan(items_of(step)?, scope)?,
                }),
                _ => None,
            };
        }
    }
    Some(Append {
        guard: None,
        items: plan(items_of(&c.loop_step)?, scope)?,
    })
}

/// The variables in scope: the inputs, and each comprehension's two.
struct Frame<'b, 'r> {
    inputs: &'r dyn VariableResolver,
    env: &'b Env,
    parent: Option<&'b Frame<'b, 'r>>,
    accumulator: Option<&'b (dyn Val + 'r)>,
    element: Option<&'b (dyn Val + 'r)>,
}

impl<'b, 'r> Frame<'b, 'r> {
    /// The frame of a comprehension in this one, with its two variables.
    fn inner<'x>(
        &'x self,
        accumulator: Option<&'x (dyn Val + 'r)>,
        element: Option<&'x (dyn Val + 'r)>,
    ) -> Frame<'x, 'r> {
        Frame {
            inputs: self.inputs,
            env: self.env,
            parent: Some(self),
            accumulator,
            element,
        }
    }

    fn local(&self, up: usize, accumulator: bool) -> Eval<'b, 'r> {
        let mut frame = self;
        for _ in 0..up {
            frame = frame.parent.ok_or(GiveUp)?;
        }
        let value = if accumulator {
            frame.accumulator
        } else {
            frame.element
        };
        value.map(CowVal::Borrowed).ok_or(GiveUp)
    }
}

fn boolean<'b, 'r>(value: bool) -> CowVal<'b, 'r> {
    CowVal::Borrowed(if value {
        &CelBool::TRUE
    } else {
        &CelBool::FALSE
    })
}

fn as_bool(v: &CowVal<'_, '_>) -> Result<bool, GiveUp> {
    v.downcast_ref::<CelBool>()
        .map(|b| *b.inner())
        .ok_or(GiveUp)
}

fn is_optional(v: &dyn Val) -> bool {
    v.downcast_ref::<CelOptional>().is_some()
}

/// `left.field` on a value that is no optional.
fn select<'b, 'r>(left: CowVal<'b, 'r>, field: &CelString<'static>) -> Eval<'b, 'r> {
    if is_optional(left.as_ref()) {
        return Err(GiveUp);
    }
    index(left, field)
}

/// `left[key]`, as the crate's `index_into` succeeds.
fn index<'b, 'r>(left: CowVal<'b, 'r>, key: &dyn Val) -> Eval<'b, 'r> {
    match left {
        CowVal::Borrowed(v) => v.as_indexer().ok_or(GiveUp)?.get(key).map_err(|_| GiveUp),
        CowVal::Owned(b) => b
            .as_indexer()
            .ok_or(GiveUp)?
            .get(key)
            .map(|v| CowVal::Owned(v.into_owned()))
            .map_err(|_| GiveUp),
    }
}

impl Node {
    fn eval<'b, 'r>(&'b self, frame: &Frame<'b, 'r>) -> Eval<'b, 'r> {
        match self {
            Node::Literal(l) => Ok(l.to_val()),
            Node::Input { name, root, fields } => input(frame, name, root, fields),
            Node::Local { up, accumulator } => frame.local(*up, *accumulator),
            Node::Select {
                operand,
                field,
                test: false,
            } => select(operand.eval(frame)?, field),
            Node::Select {
                operand,
                field,
                test: true,
            } => has(operand.eval(frame)?, field),
            Node::OptionalSelect { operand, field } => optional_select(operand.eval(frame)?, field),
            Node::Index(ab) => {
                let value = ab[0].eval(frame)?;
                if is_optional(value.as_ref()) {
                    return Err(GiveUp);
                }
                let key = ab[1].eval(frame)?;
                index(value, key.as_ref())
            }
            Node::OptionalIndex(ab) => {
                let value = ab[0].eval(frame)?;
                if is_optional(value.as_ref()) {
                    return Err(GiveUp);
                }
                let key = ab[1].eval(frame)?;
                let found = value
                    .as_indexer()
                    .and_then(|i| i.get(key.as_ref()).ok())
                    .map(CowVal::into_owned);
                Ok(CowVal::owned(
                    found.map_or_else(CelOptional::none, CelOptional::of),
                ))
            }
            Node::StringMethod {
                method,
                target,
                args,
            } => {
                // The crate evaluates a method's arguments before its target.
                let args = args
                    .iter()
                    .map(|a| a.eval(frame))
                    .collect::<Result<Vec<_>, _>>()?;
                string_method(*method, &target.eval(frame)?, &args)
            }
            Node::Not(x) => Ok(boolean(!as_bool(&x.eval(frame)?)?)),
            Node::NotStrictlyFalse(x) => Ok(boolean(as_bool(&x.eval(frame)?).unwrap_or(true))),
            Node::And(ab) => {
                if !as_bool(&ab[0].eval(frame)?)? {
                    return Ok(boolean(false));
                }
                Ok(boolean(as_bool(&ab[1].eval(frame)?)?))
            }
            Node::Or(ab) => {
                if as_bool(&ab[0].eval(frame)?)? {
                    return Ok(boolean(true));
                }
                Ok(boolean(as_bool(&ab[1].eval(frame)?)?))
            }
            Node::Conditional(abc) => {
                if as_bool(&abc[0].eval(frame)?)? {
                    abc[1].eval(frame)
                } else {
                    abc[2].eval(frame)
                }
            }
            Node::Binary(op, ab) => {
                let a = ab[0].eval(frame)?;
                let b = ab[1].eval(frame)?;
                binary_op(*op, a, b)
            }
            Node::Call { name, args } => call(frame, name, args),
            Node::Internal {
                function,
                code,
                operands,
            } => match (function, operands.as_slice()) {
                (cost::Internal::Unary(f), [x]) => f(*code, x.eval(frame)?).map_err(|_| GiveUp),
                (cost::Internal::Binary(f), [a, b]) => {
                    let a = a.eval(frame)?;
                    f(*code, a, b.eval(frame)?).map_err(|_| GiveUp)
                }
                _ => Err(GiveUp),
            },
            Node::HasValue(target) => {
                let target = target.eval(frame)?;
                let o = target.downcast_ref::<CelOptional>().ok_or(GiveUp)?;
                Ok(boolean(o.inner().is_some()))
            }
            Node::OrValue(parts) => {
                // The crate evaluates a method's arguments before its target.
                let default = parts[1].eval(frame)?;
                or_value(parts[0].eval(frame)?, default)
            }
            Node::Size(target) => size(frame, target.eval(frame)?),
            Node::Map(entries) => map_literal(frame, entries),
            Node::Struct { ty, fields } => struct_literal(frame, *ty, fields),
            Node::List(elements) => {
                let items = elements
                    .iter()
                    .map(|e| e.eval(frame).map(CowVal::into_owned))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(CowVal::owned(CelList::from(items)))
            }
            Node::Fold(fold) => fold.eval(frame),
        }
    }
}

/// `has(left.field)` on a value that is no optional.
fn has<'b, 'r>(left: CowVal<'b, 'r>, field: &CelString<'static>) -> Eval<'b, 'r> {
    if is_optional(left.as_ref()) {
        return Err(GiveUp);
    }
    match left.as_indexer().ok_or(GiveUp)?.get(field) {
        Ok(_) => Ok(boolean(true)),
        Err(cel::ExecutionError::NoSuchKey(_)) => Ok(boolean(false)),
        Err(_) => Err(GiveUp),
    }
}

/// `operand.?field`: none when the operand is none, has no such field,
/// or cannot be indexed.
fn optional_select<'b, 'r>(operand: CowVal<'b, 'r>, field: &CelString<'static>) -> Eval<'b, 'r> {
    let target = match operand.downcast_ref::<CelOptional>() {
        Some(o) => match o.inner() {
            None => return Ok(CowVal::owned(CelOptional::none())),
            Some(v) => v,
        },
        None => operand.as_ref(),
    };
    let found = target
        .as_indexer()
        .and_then(|i| i.get(field).ok())
        .map(CowVal::into_owned);
    Ok(CowVal::owned(
        found.map_or_else(CelOptional::none, CelOptional::of),
    ))
}

/// `target.orValue(default)` on an optional.
fn or_value<'b, 'r>(target: CowVal<'b, 'r>, default: CowVal<'b, 'r>) -> Eval<'b, 'r> {
    match target {
        CowVal::Borrowed(t) => match t.downcast_ref::<CelOptional>().ok_or(GiveUp)?.inner() {
            Some(v) => Ok(CowVal::Borrowed(v)),
            None => Ok(default),
        },
        CowVal::Owned(t) => match t.downcast_ref::<CelOptional>().ok_or(GiveUp)?.inner() {
            Some(v) => Ok(CowVal::Owned(v.clone_as_boxed())),
            None => Ok(default),
        },
    }
}

/// `s.split(sep)`, `s.substring(start[, end])`, `s.indexOf(sub)`,
/// `s.lastIndexOf(sub)`: code-point positions, as cel-go's. An empty
/// separator or substring, a position out of range, or a value of another
/// type is the crate's.
fn string_method<'b, 'r>(
    method: StringMethod,
    target: &CowVal<'_, 'r>,
    args: &[CowVal<'_, 'r>],
) -> Eval<'b, 'r> {
    let s = target.downcast_ref::<CelString>().ok_or(GiveUp)?.inner();
    let string_arg = |i: usize| -> Result<&str, GiveUp> {
        let arg = args.get(i).ok_or(GiveUp)?;
        let arg = arg.downcast_ref::<CelString>().ok_or(GiveUp)?.inner();
        if arg.is_empty() {
            return Err(GiveUp);
        }
        Ok(arg)
    };
    let int_arg = |i: usize| -> Result<i64, GiveUp> {
        let arg = args.get(i).ok_or(GiveUp)?;
        Ok(*arg.downcast_ref::<CelInt>().ok_or(GiveUp)?.inner())
    };
    let char_index = |byte: usize| s[..byte].chars().count() as i64;
    let value: Box<dyn Val + 'r> = match method {
        StringMethod::Split => {
            let sep = string_arg(0)?;
            let parts: Vec<Box<dyn Val + 'r>> = s
                .split(sep)
                .map(|p| Box::new(CelString::from(p.to_string())) as Box<dyn Val + 'r>)
                .collect();
            Box::new(CelList::from(parts))
        }
        StringMethod::Substring => {
            let chars = s.chars().count() as i64;
            let start = int_arg(0)?;
            let end = if args.len() == 2 { int_arg(1)? } else { chars };
            if start < 0 || end < start || end > chars {
                return Err(GiveUp);
            }
            let sub: String = s
                .chars()
                .skip(start as usize)
                .take((end - start) as usize)
                .collect();
            Box::new(CelString::from(sub))
        }
        StringMethod::IndexOf => {
            Box::new(CelInt::from(s.find(string_arg(0)?).map_or(-1, char_index)))
        }
        StringMethod::LastIndexOf => {
            Box::new(CelInt::from(s.rfind(string_arg(0)?).map_or(-1, char_index)))
        }
    };
    Ok(CowVal::Owned(value))
}

/// A global function called with the values of `args`.
fn call<'b, 'r>(frame: &Frame<'b, 'r>, name: &str, args: &'b [Node]) -> Eval<'b, 'r> {
    let args = args
        .iter()
        .map(|a| a.eval(frame))
        .collect::<Result<Vec<_>, _>>()?;
    let function = frame.env.find_overload(name, &args).ok_or(GiveUp)?;
    function(args).map_err(|_| GiveUp)
}

/// `target.size()` of a list, map, string or bytes.
fn size<'b, 'r>(frame: &Frame<'b, 'r>, target: CowVal<'b, 'r>) -> Eval<'b, 'r> {
    if !matches!(
        target.get_type().kind(),
        Kind::List | Kind::Map | Kind::String | Kind::Bytes
    ) {
        return Err(GiveUp);
    }
    let args = vec![target];
    let size = frame.env.find_overload("size", &args).ok_or(GiveUp)?;
    size(args).map_err(|_| GiveUp)
}

fn map_literal<'b, 'r>(frame: &Frame<'b, 'r>, entries: &'b [(Node, Node)]) -> Eval<'b, 'r> {
    let mut map: HashMap<CelMapKey<'r>, Box<dyn Val + 'r>> = HashMap::with_capacity(entries.len());
    for (key, value) in entries {
        let key: CelMapKey<'r> = key.eval(frame)?.try_into().map_err(|_| GiveUp)?;
        let value = value.eval(frame)?;
        // cel-go, and the environment, keep a repeated key's last value.
        map.insert(key, value.into_owned());
    }
    Ok(CowVal::owned(CelMap::from(map)))
}

fn struct_literal<'b, 'r>(
    frame: &Frame<'b, 'r>,
    ty: StructKind,
    fields: &'b [(String, Node)],
) -> Eval<'b, 'r> {
    static OBJECT: OnceLock<ObjectStructType> = OnceLock::new();
    static JSON_PATCH: OnceLock<JsonPatchStructType> = OnceLock::new();
    let mut values = BTreeMap::new();
    for (name, value) in fields {
        values.insert(name.clone(), value.eval(frame)?);
    }
    let value = match ty {
        StructKind::Object => OBJECT.get_or_init(Default::default).new_value(values),
        StructKind::JsonPatch => JSON_PATCH.get_or_init(Default::default).new_value(values),
    };
    value.map(CowVal::Owned).map_err(|_| GiveUp)
}

/// A top-level variable, or a selection chain on one.
fn input<'b, 'r>(
    frame: &Frame<'b, 'r>,
    name: &str,
    root: &str,
    fields: &[CelString<'static>],
) -> Eval<'b, 'r> {
    if let Some(v) = frame.inputs.resolve(name) {
        return Ok(v);
    }
    if fields.is_empty() {
        return Err(GiveUp);
    }
    let mut value = frame.inputs.resolve(root).ok_or(GiveUp)?;
    for field in fields {
        value = select(value, field)?;
    }
    Ok(value)
}

fn binary_op<'b, 'r>(op: Binary, a: CowVal<'b, 'r>, b: CowVal<'b, 'r>) -> Eval<'b, 'r> {
    let ordering = |a: &CowVal<'b, 'r>, b: &CowVal<'b, 'r>| {
        a.as_comparer()
            .ok_or(GiveUp)?
            .compare(b.as_ref())
            .map_err(|_| GiveUp)
    };
    let owned = |r: Result<CowVal<'_, 'r>, cel::ExecutionError>| {
        r.map(|v| CowVal::Owned(v.into_owned())).map_err(|_| GiveUp)
    };
    use std::cmp::Ordering::{Greater, Less};
    match op {
        Binary::Equals => Ok(boolean(a == b)),
        Binary::NotEquals => Ok(boolean(a != b)),
        Binary::Less => Ok(boolean(ordering(&a, &b)? == Less)),
        Binary::LessEquals => Ok(boolean(ordering(&a, &b)? != Greater)),
        Binary::Greater => Ok(boolean(ordering(&a, &b)? == Greater)),
        Binary::GreaterEquals => Ok(boolean(ordering(&a, &b)? != Less)),
        Binary::In => b
            .as_container()
            .ok_or(GiveUp)?
            .contains(a.as_ref())
            .map(boolean)
            .map_err(|_| GiveUp),
        Binary::Add => owned(a.as_adder().ok_or(GiveUp)?.add(b.as_ref())),
        Binary::Subtract => owned(a.as_subtractor().ok_or(GiveUp)?.sub(b.as_ref())),
        Binary::Multiply => owned(a.as_multiplier().ok_or(GiveUp)?.mul(b.as_ref())),
        Binary::Divide => owned(a.as_divider().ok_or(GiveUp)?.div(b.as_ref())),
        Binary::Modulo => owned(a.as_modder().ok_or(GiveUp)?.modulo(b.as_ref())),
    }
}

impl Fold {
    fn eval<'b, 'r>(&'b self, frame: &Frame<'b, 'r>) -> Eval<'b, 'r> {
        let init = self.init.eval(frame)?;
        let range = self.range.eval(frame)?;
        if let Some(append) = &self.append {
            if init
                .downcast_ref::<CelList>()
                .is_some_and(|l| l.inner().is_empty())
            {
                return self.append(append, &range, frame);
            }
        }
        let mut accumulator: Box<dyn Val + 'r> = init.into_owned();
        let iterable = range.as_iterable().ok_or(GiveUp)?;
        let mut items = iterable.iter();
        let mut last = None;
        while let Some(item) = items.next() {
            // The condition sees the element before this one, as the crate binds it.
            let inner = frame.inner(Some(accumulator.as_ref()), last);
            if !as_bool(&self.condition.eval(&inner)?)? {
                break;
            }
            let inner = frame.inner(Some(accumulator.as_ref()), Some(item));
            let next = self.step.eval(&inner)?.into_owned();
            accumulator = next;
            last = Some(item);
        }
        let inner = frame.inner(Some(accumulator.as_ref()), last);
        let result = self.result.eval(&inner)?.into_owned();
        Ok(CowVal::Owned(result))
    }

    fn append<'b, 'r>(
        &'b self,
        append: &'b Append,
        range: &CowVal<'_, 'r>,
        frame: &Frame<'b, 'r>,
    ) -> Eval<'b, 'r> {
        let size = range
            .as_sizer()
            .map(|s| *s.size().inner() as usize)
            .unwrap_or(0);
        let mut list = MutableList::with_capacity(size);
        let iterable = range.as_iterable().ok_or(GiveUp)?;
        let mut items = iterable.iter();
        let mut last = None;
        // The crate binds no accumulator here: the shape is all that reads it.
        while let Some(item) = items.next() {
            if !as_bool(&self.condition.eval(&frame.inner(None, last))?)? {
                break;
            }
            let inner = frame.inner(None, Some(item));
            last = Some(item);
            if let Some(guard) = &append.guard {
                if !as_bool(&guard.eval(&inner)?)? {
                    continue;
                }
            }
            let items = append.items.eval(&inner)?;
            list.extend(items.as_ref()).map_err(|_| GiveUp)?;
        }
        Ok(CowVal::owned(list.to_immutable()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::convert::{json_to_val, val_to_json};
    use crate::cel::CelEnvironment;
    use serde_json::json;

    /// The top-level variables of the tests: `object` alone.
    struct Inputs<'a>(Box<dyn Val + 'a>);

    impl VariableResolver for Inputs<'_> {
        fn resolve<'b>(&'b self, name: &str) -> Option<CowVal<'b, 'b>> {
            (name == "object").then(|| CowVal::Borrowed(self.0.as_ref()))
        }
    }

    fn pod() -> serde_json::Value {
        json!({"metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"containers": [
                {"name": "app", "image": "nginx:latest"},
                {"name": "proxy", "image": "envoy", "resources": {"requests": {"cpu": "1"}}}]}})
    }

    /// The plan's value and cost, and the crate's, of `source` over the Pod.
    fn both(source: &str) -> (Option<(serde_json::Value, u64)>, (serde_json::Value, u64)) {
        let env = CelEnvironment::shared();
        let expr = env.compile(source).unwrap();
        let json = pod();
        let inputs = Inputs(json_to_val(&json));
        let planned = expr
            .evaluate_planned(env.env(), &inputs)
            .map(|(v, cost)| (val_to_json(v.as_ref()).unwrap(), cost));
        let mut ctx = env.context();
        ctx.set_variable_resolver(&inputs);
        let (value, cost) = expr.evaluate_with_cost(&ctx);
        let value = val_to_json(value.unwrap().as_ref()).unwrap();
        (planned, (value, cost))
    }

    #[test]
    fn a_plan_gives_the_crates_value_at_the_crates_cost() {
        for (source, value) in [
            ("object.metadata.name", json!("web")),
            (".object.metadata.name", json!("web")),
            ("[1].map(object, object + 1)", json!([2])),
            ("has(object.metadata.labels) && !has(object.spec.volumes)", json!(true)),
            ("object.spec.?serviceAccountName.orValue('default')", json!("default")),
            (
                "object.spec.containers.filter(c, !c.?resources.?requests.hasValue()).map(c, c.name)",
                json!(["app"]),
            ),
            (
                "object.spec.containers.exists(c, c.image.endsWith(':latest'))",
                json!(true),
            ),
            ("object.spec.containers.all(c, c.name.size() > 3)", json!(false)),
            (
                "object.spec.containers.transformList(i, c, i > 0, {c.name: i})",
                json!([{"proxy": 1}]),
            ),
            ("'app' in object.metadata.labels ? [1, 2] + [3] : []", json!([1, 2, 3])),
            (
                "[JSONPatch{op: 'add', path: '/spec/x', value: 7 % 4}][0].value",
                json!(3),
            ),
            ("object.spec[?'containers'].orValue([]).size()", json!(2)),
            ("object.spec[?'volumes'].hasValue()", json!(false)),
            ("'reg.io/team/app:1'.split('/')", json!(["reg.io", "team", "app:1"])),
            // Positions count code points, not bytes.
            ("'héllo/wörld'.lastIndexOf('/')", json!(5)),
            ("'héllo/wörld'.indexOf('ö')", json!(7)),
            ("'héllo/wörld'.substring(6)", json!("wörld")),
            ("'héllo'.substring(1, 3)", json!("él")),
            ("jsonpatch.escapeKey('a/b~c')", json!("a~1b~0c")),
        ] {
            let (planned, crate_answer) = both(source);
            assert_eq!(crate_answer.0, value, "{source}");
            assert_eq!(planned, Some(crate_answer), "{source}");
        }
    }

    #[test]
    fn errors_and_uncovered_shapes_are_left_to_the_crate() {
        for source in [
            // An error: the crate's text and cost.
            "object.spec.missing",
            "object.spec.containers[5].name",
            "1 / 0 == 1",
            "'abc'.substring(4)",
            "'abc'.substring(2, 1)",
            // An empty separator splits into characters: the crate's.
            "'abc'.split('')",
            // A function of the strings library: not planned.
            "object.metadata.name.upperAscii()",
            // An optional where a value is expected.
            "object.?spec.containers.size()",
        ] {
            let env = CelEnvironment::shared();
            let expr = env.compile(source).unwrap();
            let json = pod();
            let inputs = Inputs(json_to_val(&json));
            let _outer = cost::Meter::start(100);
            cost::charge(7).unwrap();
            assert!(
                expr.evaluate_planned(env.env(), &inputs).is_none(),
                "{source}"
            );
            // The enclosing meter is as it was.
            assert_eq!(_outer.cost(), 7, "{source}");
        }
    }
}
