//! Runtime cost of expressions, after cel-go's cost tracker
//! (`interpreter/runtimecost.go`) and Kubernetes' cost estimator
//! (`k8s.io/apiserver/pkg/cel/library/cost.go`), with the limits of
//! `k8s.io/apiserver/pkg/apis/cel/config.go`.
//!
//! The `cel` crate meters nothing, so [`instrument`] rewrites the compiled
//! tree: the cost of the part of an expression that always runs is summed at
//! compile time and charged once per evaluation ([`Meter::start`] and the
//! root cost of `CompiledExpression`), while each part that may or may not
//! run (the right operand of `&&` and `||`, a branch of `?:`, the condition
//! and step of a comprehension, charged on every iteration) is wrapped in a
//! call to an internal function that charges that part's cost when it runs.
//! Costs that depend on the values (string `+`, comparisons of strings,
//! `in`, `contains`, `matches`, the Kubernetes library functions) are charged
//! by internal functions wrapped around the operands, which see the values
//! before the operation runs, so that a result too large for the budget is
//! refused before it is allocated. Where the operation is simple enough
//! (`==`, `!=`, `contains`, `startsWith`, `endsWith`), one internal call
//! charges and answers it, in place of the call and the wrappers around
//! its operands. The wrappers hand their operand back unchanged; the
//! loop-step shapes the interpreter recognises (`@result && x`, `@result
//! || x`, `@result + [x]`, `c ? @result + [x] : @result`) are kept by
//! wrapping `x` and `c`, never the step, and the cost of an `all` or
//! `exists` step is charged with its loop's condition.
//!
//! Once an evaluation is over its limit every later charge fails, so loops
//! stop at their next condition or step and an error absorbed by `||` or
//! `&&` cannot hide it: the evaluation fails with [`COST_LIMIT_EXCEEDED`].
//!
//! Beyond cel-go's model, a per-evaluation allocation guard counts the values
//! the interpreter copies (each comprehension's range, each element appended
//! by `map`/`filter`, list literals built in a loop, list `+`, the maps of
//! `transformMap`): cel-go shares values where the crate copies them, and
//! without it a cheap expression could copy a large object many times over.
//!
//! Known differences from cel-go's numbers, all of a unit or two: `==` and
//! `!=` against a short literal cost 1 even when the other side is empty
//! (cel-go: 0); `in` on a constant list costs its size (cel-go's planner may
//! turn it into a set lookup); a selection on an expression that is no
//! attribute costs one more, as a relative attribute; the format library's
//! `validate` and `sortBy`'s key list cost 1; the root's static cost is
//! charged before evaluation rather than as it goes.
//!
//! One difference is larger: cel-go evaluates an error as a value and goes
//! on (the other operands of a call, the remaining iterations of `map` and
//! `filter`), charging all of it, where the crate stops at the first error.
//! What cel-go evaluates after an error is not charged here, so an
//! expression that fails with an error here may be over its limit
//! upstream, and an error absorbed by `||`, `&&` or a macro leaves the cost
//! lower. The steps of `all` and `exists` are the exception: their cost is
//! charged with the condition that lets them run, so a failing step is
//! charged in full, as cel-go does.

use super::access::Access;
use super::ast::{
    ADD_FN, ALLOC_FN, CHARGE_FN, DYN_FN, ENTRIES_FN, EQUALS_FN, GROWTH_FN, LOOP_FN, MAP_INSERT_FN,
    MAP_MERGE_FN, RANGE_FN, SIZE_FN, STRING_PREDICATE_FN,
};
use super::convert::{as_selected_fields, SelectedFields};
use super::object_types::as_struct;
use cel::common::ast::{operators, CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::common::types::{self, CelBool, CelBytes, CelInt, CelList, CelMap, CelString};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError, Value};
use serde_json::Value as Json;
use std::cell::{Cell, RefCell};
use std::time::Instant;

/// `PerCallLimit`: the cost one evaluation of one expression may reach.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// `RuntimeCELCostBudget`: the budget of one mutation's evaluation, its
/// variables included.
pub const RUNTIME_CEL_COST_BUDGET: i64 = 10_000_000;
/// `RuntimeCELCostBudgetMatchConditions`: the budget of one invocation's
/// match conditions, their variables included.
pub const RUNTIME_CEL_COST_BUDGET_MATCH_CONDITIONS: i64 = 2_500_000;
/// cel-go's error when an evaluation goes over its limit.
pub const COST_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";
/// Upstream's error when the expressions of a budget go over it together.
pub const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";
/// The values one evaluation may copy (kmutate's guard, see the module doc).
pub const ALLOCATION_LIMIT: u64 = 4_000_000;

const SELECT_AND_IDENT: u64 = 1;
const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
const STRUCT_CREATE: u64 = 40;
const AUTHZ_CHECK: u64 = 350_000;
const STRING_TRAVERSAL: f64 = 0.1;
const REGEX_STRING_LENGTH: f64 = 0.25;

/// The variables of the activation: a call on anything else that spells a
/// qualified name (`sets.contains(...)`) names a function, not a method.
pub(crate) const INPUT_VARIABLES: [&str; 7] = [
    "object",
    "oldObject",
    "request",
    "params",
    "namespaceObject",
    "variables",
    "authorizer",
];

thread_local! {
    static COST: Cell<u64> = const { Cell::new(0) };
    static LIMIT: Cell<u64> = const { Cell::new(u64::MAX) };
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
    static SIZES: RefCell<Vec<(u32, Size)>> = const { RefCell::new(Vec::new()) };
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static TICKS: Cell<u32> = const { Cell::new(0) };
    static STOPPED: Cell<bool> = const { Cell::new(false) };
}

/// The largest cost either half of a [`LOOP_FN`] code holds.
const LOOP_HALF: u64 = (1 << 31) - 1;

/// How many charges pass between two looks at the clock: upstream's
/// `celconfig.CheckFrequency`, there counted in comprehension iterations.
const INTERRUPT_CHECK_EVERY: u32 = 100;

/// cel-go's error for an evaluation stopped by its context.
pub const INTERRUPTED: &str = "operation interrupted";

/// While it lives, evaluations on this thread stop once its deadline has
/// passed (cel-go's `InterruptCheckFrequency` with a request context): the
/// clock is read every `INTERRUPT_CHECK_EVERY` charges, and from then on
/// every charge fails with [`INTERRUPTED`].
#[derive(Debug)]
pub struct Interrupt {
    saved: (Option<Instant>, bool),
}

impl Interrupt {
    /// Interrupts this thread's evaluations at `deadline`.
    pub fn at(deadline: Instant) -> Interrupt {
        Interrupt {
            saved: (
                DEADLINE.with(|d| d.replace(Some(deadline))),
                STOPPED.with(|s| s.replace(false)),
            ),
        }
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        DEADLINE.with(|d| d.set(self.saved.0));
        STOPPED.with(|s| s.set(self.saved.1));
    }
}

/// Whether this thread's evaluations are to stop: once the deadline of its
/// [`Interrupt`] is seen to have passed, until that guard drops.
fn stopped(ticks: u32) -> bool {
    if STOPPED.with(Cell::get) {
        return true;
    }
    let passed = ticks.is_multiple_of(INTERRUPT_CHECK_EVERY)
        && DEADLINE
            .with(Cell::get)
            .is_some_and(|d| Instant::now() >= d);
    if passed {
        STOPPED.with(|s| s.set(true));
    }
    passed
}

/// Whether `e` is the error of an interrupted evaluation.
pub fn is_interrupted(e: &ExecutionError) -> bool {
    matches!(e, ExecutionError::FunctionError { message, .. } if message == INTERRUPTED)
}

/// The meter of one evaluation, on this thread, while it lives; dropping it
/// restores the enclosing evaluation's meter (variables are evaluated inside
/// the expression that uses them, each with its own limit).
#[derive(Debug)]
pub struct Meter {
    saved: (u64, u64, u64),
    sizes: usize,
}

impl Meter {
    /// Starts metering an evaluation that may cost up to `limit`.
    pub fn start(limit: u64) -> Meter {
        let saved = (
            COST.with(|c| c.replace(0)),
            LIMIT.with(|l| l.replace(limit)),
            ALLOCATED.with(|a| a.replace(0)),
        );
        let sizes = SIZES.with(|s| s.borrow().len());
        Meter { saved, sizes }
    }

    /// The cost so far.
    pub fn cost(&self) -> u64 {
        COST.with(Cell::get)
    }

    /// Whether the evaluation went over its limit.
    pub fn exceeded(&self) -> bool {
        COST.with(Cell::get) > LIMIT.with(Cell::get)
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        COST.with(|c| c.set(self.saved.0));
        LIMIT.with(|l| l.set(self.saved.1));
        ALLOCATED.with(|a| a.set(self.saved.2));
        SIZES.with(|s| s.borrow_mut().truncate(self.sizes));
    }
}

/// The error of an evaluation over its limit.
pub fn limit_exceeded() -> ExecutionError {
    ExecutionError::function_error("cost", COST_LIMIT_EXCEEDED)
}

/// Whether `e` is the error of an evaluation over its limit.
pub fn is_limit_exceeded(e: &ExecutionError) -> bool {
    matches!(e, ExecutionError::FunctionError { message, .. } if message == COST_LIMIT_EXCEEDED)
}

/// Adds `n` to the running evaluation's cost.
pub fn charge(n: u64) -> Result<(), ExecutionError> {
    let ticks = TICKS.with(|t| {
        let v = t.get().wrapping_add(1);
        t.set(v);
        v
    });
    if stopped(ticks) {
        return Err(ExecutionError::function_error("cost", INTERRUPTED));
    }
    let cost = COST.with(|c| {
        let v = c.get().saturating_add(n);
        c.set(v);
        v
    });
    if cost > LIMIT.with(Cell::get) {
        Err(limit_exceeded())
    } else {
        Ok(())
    }
}

/// Counts `n` copied values; over [`ALLOCATION_LIMIT`] the evaluation is
/// over its limit.
fn allocate(n: u64) -> Result<(), ExecutionError> {
    let total = ALLOCATED.with(|a| {
        let v = a.get().saturating_add(n);
        a.set(v);
        v
    });
    if total > ALLOCATION_LIMIT {
        COST.with(|c| c.set(u64::MAX));
        Err(limit_exceeded())
    } else {
        Ok(())
    }
}

fn allocation_left() -> u64 {
    ALLOCATION_LIMIT.saturating_sub(ALLOCATED.with(Cell::get))
}

/// Registers the internal functions the instrumented tree calls.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    // The first argument is always an int literal the instrumenter wrote:
    // declared `dyn`, matching it skips a comparison of type names.
    let two_dyn = || vec![types::DYN_TYPE, types::DYN_TYPE];
    env.add_overload(CHARGE_FN, "kcost", two_dyn(), charge_fn)?;
    env.add_overload(LOOP_FN, "kcost_loop", two_dyn(), loop_fn)?;
    let three_dyn = || vec![types::DYN_TYPE, types::DYN_TYPE, types::DYN_TYPE];
    env.add_overload(EQUALS_FN, "kcost_equals", three_dyn(), equals_fn)?;
    env.add_overload(ADD_FN, "kcost_add", three_dyn(), add_fn)?;
    env.add_overload(
        STRING_PREDICATE_FN,
        "kcost_string",
        three_dyn(),
        string_predicate_fn,
    )?;
    env.add_overload(ALLOC_FN, "kcost_alloc", two_dyn(), alloc_fn)?;
    env.add_overload(RANGE_FN, "kcost_range", two_dyn(), range_fn)?;
    env.add_overload(GROWTH_FN, "kcost_growth", two_dyn(), growth_fn)?;
    env.add_overload(SIZE_FN, "kcost_size", two_dyn(), size_fn)?;
    env.add_overload(DYN_FN, "kcost_call", two_dyn(), dyn_fn)?;
    Ok(())
}

/// An internal function as a plan calls it: the code the instrumenter
/// wrote (an int literal), then its one or two operands.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Internal {
    Unary(for<'b, 'v> fn(u64, CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError>),
    Binary(
        for<'b, 'v> fn(
            u64,
            CowVal<'b, 'v>,
            CowVal<'b, 'v>,
        ) -> Result<CowVal<'b, 'v>, ExecutionError>,
    ),
}

/// The internal function `name` (one [`register`] declares), to call it
/// without the environment's lookup or an argument vector.
pub(crate) fn internal(name: &str) -> Option<Internal> {
    Some(match name {
        CHARGE_FN => Internal::Unary(charge_of),
        LOOP_FN => Internal::Unary(loop_of),
        ALLOC_FN => Internal::Unary(alloc_of),
        RANGE_FN => Internal::Unary(range_of),
        GROWTH_FN => Internal::Unary(growth_of),
        SIZE_FN => Internal::Unary(size_of),
        DYN_FN => Internal::Unary(dyn_of),
        EQUALS_FN => Internal::Binary(equals_of),
        ADD_FN => Internal::Binary(add_of),
        STRING_PREDICATE_FN => Internal::Binary(string_predicate_of),
        _ => return None,
    })
}

/// The registered form of an internal function (`name_fn`, taking the
/// crate's argument vector) over its direct form (`name_of`).
macro_rules! registered {
    ($registered:ident, $direct:ident, unary) => {
        fn $registered<'b, 'v>(
            mut args: Vec<CowVal<'b, 'v>>,
        ) -> Result<CowVal<'b, 'v>, ExecutionError> {
            let x = args.pop().expect("two arguments");
            $direct(int_arg(&args[0]), x)
        }
    };
    ($registered:ident, $direct:ident, binary) => {
        fn $registered<'b, 'v>(
            mut args: Vec<CowVal<'b, 'v>>,
        ) -> Result<CowVal<'b, 'v>, ExecutionError> {
            let b = args.pop().expect("three arguments");
            let a = args.pop().expect("three arguments");
            $direct(int_arg(&args[0]), a, b)
        }
    };
}

registered!(charge_fn, charge_of, unary);
registered!(loop_fn, loop_of, unary);
registered!(alloc_fn, alloc_of, unary);
registered!(range_fn, range_of, unary);
registered!(growth_fn, growth_of, unary);
registered!(size_fn, size_of, unary);
registered!(dyn_fn, dyn_of, unary);
registered!(equals_fn, equals_of, binary);
registered!(add_fn, add_of, binary);
registered!(string_predicate_fn, string_predicate_of, binary);

fn int_arg(v: &CowVal<'_, '_>) -> u64 {
    v.downcast_ref::<CelInt>()
        .map(|i| (*i.inner()).max(0) as u64)
        .unwrap_or(0)
}

fn charge_of<'b, 'v>(code: u64, x: CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(code)?;
    Ok(x)
}

fn loop_of<'b, 'v>(code: u64, cond: CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let runs_step = cond.downcast_ref::<CelBool>().is_some_and(|b| *b.inner());
    let step = if runs_step { code & LOOP_HALF } else { 0 };
    charge((code >> 32) + step)?;
    Ok(cond)
}

fn equals_of<'b, 'v>(
    code: u64,
    a: CowVal<'b, 'v>,
    b: CowVal<'b, 'v>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let negated = code == 1;
    let size = actual_size(a.as_ref()).min(actual_size(b.as_ref()));
    charge(scaled(size, STRING_TRAVERSAL))?;
    Ok(bool_val(if negated { a != b } else { a == b }))
}

/// A bool result, borrowed from a constant: no allocation.
fn bool_val<'b, 'v>(value: bool) -> CowVal<'b, 'v> {
    CowVal::Borrowed(if value {
        &CelBool::TRUE
    } else {
        &CelBool::FALSE
    })
}

fn add_of<'b, 'v>(
    _code: u64,
    a: CowVal<'b, 'v>,
    b: CowVal<'b, 'v>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let cost = call_cost(Kind::Add, b.as_ref(), Some(Size::of(a.as_ref(), true)))?;
    charge(cost)?;
    // What the crate's `+` does.
    let Some(adder) = a.as_adder() else {
        return Err(ExecutionError::UnsupportedBinaryOperator(
            "add",
            Value::try_from(a.as_ref()).unwrap_or(Value::Null),
            Value::try_from(b.as_ref()).unwrap_or(Value::Null),
        ));
    };
    Ok(CowVal::Owned(adder.add(b.as_ref())?.into_owned()))
}

/// The methods [`STRING_PREDICATE_FN`] answers, by the code it is given.
const STRING_PREDICATES: [&str; 3] = ["contains", "startsWith", "endsWith"];

fn string_predicate_of<'b, 'v>(
    code: u64,
    t: CowVal<'b, 'v>,
    s: CowVal<'b, 'v>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let which = code as usize;
    // cel-go: the string's traversal, times the substring's for `contains`.
    let traversal = |v: &CowVal<'_, '_>| scaled(actual_size(v.as_ref()), STRING_TRAVERSAL);
    let strings = s
        .downcast_ref::<CelString>()
        .zip(t.downcast_ref::<CelString>())
        .map(|(s, t)| (s.inner(), t.inner()));
    let cost = match (which, strings) {
        (0, Some(_)) => traversal(&s).saturating_mul(traversal(&t)),
        (0, None) => 1,
        _ => traversal(&s),
    };
    charge(cost)?;
    let Some((st, tt)) = strings else {
        // The methods are declared on strings alone.
        return Err(ExecutionError::no_such_member_overload(
            STRING_PREDICATES[which],
            vec![
                s.get_type().name().to_owned(),
                t.get_type().name().to_owned(),
            ],
        ));
    };
    let value = match which {
        0 => st.contains(tt),
        1 => st.starts_with(tt),
        _ => st.ends_with(tt),
    };
    Ok(bool_val(value))
}

fn alloc_of<'b, 'v>(code: u64, x: CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(code)?;
    allocate(deep_size(x.as_ref(), allocation_left().saturating_add(1)))?;
    Ok(x)
}

fn range_of<'b, 'v>(code: u64, x: CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(code)?;
    allocate(range_copies(
        x.as_ref(),
        allocation_left().saturating_add(1),
    ))?;
    Ok(x)
}

fn growth_of<'b, 'v>(code: u64, x: CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(code)?;
    allocate(actual_size(x.as_ref()))?;
    Ok(x)
}

fn size_of<'b, 'v>(code: u64, x: CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (_, slot) = decode(code);
    let size = Size::of(x.as_ref(), false);
    SIZES.with(|s| s.borrow_mut().push((slot, size)));
    Ok(x)
}

fn dyn_of<'b, 'v>(code: u64, x: CowVal<'b, 'v>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (kind, slot) = decode(code);
    let other = if !kind.remembers() {
        None
    } else if slot & STATIC_OTHER != 0 {
        Some(Size {
            tag: Tag::String,
            size: u64::from(slot & !STATIC_OTHER),
            values: 0,
            int: None,
        })
    } else {
        SIZES.with(|s| {
            let mut s = s.borrow_mut();
            // Entries above ours were left by operands whose evaluation
            // failed and was absorbed: drop them with ours.
            let at = s.iter().rposition(|(id, _)| *id == slot)?;
            let size = s[at].1;
            s.truncate(at);
            Some(size)
        })
    };
    let cost = call_cost(kind, x.as_ref(), other)?;
    charge(cost)?;
    Ok(x)
}

/// What an operand's value contributes to a call's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size {
    tag: Tag,
    /// cel-go's `actualSize`: the size of a string (code points), bytes,
    /// list or map, 1 otherwise.
    size: u64,
    /// For a list operand of `+`: the values it holds, for the allocation guard.
    values: u64,
    /// The value of an int operand (the depth of `flatten`).
    int: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    String,
    Bytes,
    List,
    Other,
}

impl Size {
    fn of(v: &dyn Val, values: bool) -> Size {
        let tag = if v.downcast_ref::<CelString>().is_some() {
            Tag::String
        } else if v.downcast_ref::<CelBytes>().is_some() {
            Tag::Bytes
        } else if v.downcast_ref::<CelList>().is_some() {
            Tag::List
        } else {
            Tag::Other
        };
        let values = if values && tag == Tag::List {
            deep_size(v, allocation_left().saturating_add(1))
        } else {
            0
        };
        Size {
            tag,
            size: actual_size(v),
            values,
            int: v.downcast_ref::<CelInt>().map(|i| *i.inner()),
        }
    }
}

/// cel-go's `actualSize`.
fn actual_size(v: &dyn Val) -> u64 {
    v.as_sizer()
        .map(|s| (*s.size().inner()).max(0) as u64)
        .unwrap_or(1)
}

/// `ceil(n * factor)`, in floating point as cel-go computes it.
fn scaled(n: u64, factor: f64) -> u64 {
    (n as f64 * factor).ceil() as u64
}

/// The values a comprehension copies iterating over `range`, counted up to
/// `cap`: each element of a list once, as cloning it copies ([`Held`]); a
/// map is counted whole.
fn range_copies(range: &dyn Val, cap: u64) -> u64 {
    if range.downcast_ref::<CelList>().is_some() {
        count_values(range, cap, Held::Cloned)
    } else {
        count_values(range, cap, Held::Whole)
    }
}

/// What [`count_values`] counts of a view of JSON ([`SelectedFields`]).
#[derive(Clone, Copy, PartialEq)]
enum Held {
    /// The values it stands for.
    Whole,
    /// One: cloning a view copies two references, not the values.
    Cloned,
}

/// The values `v` holds, counted up to `cap`: 1 for a scalar, 1 + one per
/// 32 bytes for a string or bytes, 1 + the values of the elements, keys and
/// fields of a list, map or object.
fn deep_size(v: &dyn Val, cap: u64) -> u64 {
    count_values(v, cap, Held::Whole)
}

/// [`deep_size`], with views counted as `views` says.
fn count_values(v: &dyn Val, cap: u64, views: Held) -> u64 {
    fn walk(v: &dyn Val, total: &mut u64, cap: u64, views: Held) {
        if *total > cap {
            return;
        }
        if let Some(fields) = as_selected_fields(v) {
            if views == Held::Cloned {
                *total += 1;
                return;
            }
            return walk_selected(fields, total, cap);
        }
        *total += 1;
        if let Some(s) = v.downcast_ref::<CelString>() {
            *total += s.inner().len() as u64 / 32;
        } else if let Some(b) = v.downcast_ref::<CelBytes>() {
            *total += b.inner().len() as u64 / 32;
        } else if let Some(l) = v.downcast_ref::<CelList>() {
            for e in l.inner() {
                walk(e.as_ref(), total, cap, views);
            }
        } else if let Some(m) = v.downcast_ref::<CelMap>() {
            for (k, e) in m.inner() {
                walk(k.inner(), total, cap, views);
                walk(e.as_ref(), total, cap, views);
            }
        } else if let Some(st) = as_struct(v) {
            for (_, e) in st.fields() {
                walk(e, total, cap, views);
            }
        }
    }
    /// `walk` of [`SelectedFields::to_map`], counted on the JSON.
    fn walk_selected(fields: &SelectedFields<'_>, total: &mut u64, cap: u64) {
        *total += 1;
        for (key, value, access) in fields.present() {
            walk_key(key, total, cap);
            walk_converted(value, access, total, cap);
        }
    }
    /// `walk` of `json_to_val_for(value, access)`, counted on the JSON.
    fn walk_converted(value: &Json, access: &Access, total: &mut u64, cap: u64) {
        match (value, access.selected(), access.items()) {
            (Json::Object(map), Some(fields), _) => {
                if *total > cap {
                    return;
                }
                walk_selected(&SelectedFields::new(map, fields), total, cap)
            }
            (Json::Array(items), _, Some(inner)) => {
                if *total > cap {
                    return;
                }
                *total += 1;
                for item in items {
                    walk_converted(item, inner, total, cap);
                }
            }
            _ => walk_json(value, total, cap),
        }
    }
    /// `walk` of a map key, a string.
    fn walk_key(key: &str, total: &mut u64, cap: u64) {
        if *total <= cap {
            *total += 1 + key.len() as u64 / 32;
        }
    }
    /// `walk` of `json_to_val(value)`, counted on the JSON.
    fn walk_json(value: &Json, total: &mut u64, cap: u64) {
        if *total > cap {
            return;
        }
        *total += 1;
        match value {
            Json::String(s) => *total += s.len() as u64 / 32,
            Json::Array(items) => {
                for item in items {
                    walk_json(item, total, cap);
                }
            }
            Json::Object(map) => {
                for (key, item) in map {
                    walk_key(key, total, cap);
                    walk_json(item, total, cap);
                }
            }
            Json::Null | Json::Bool(_) | Json::Number(_) => {}
        }
    }
    let mut total = 0;
    walk(v, &mut total, cap, views);
    total
}

/// The k8s library's `traversalCost`: a string's bytes / 10, rounded down,
/// the sum over a list's elements or a map's keys and values, 1 otherwise.
fn traversal_cost(v: &dyn Val) -> u64 {
    if let Some(fields) = as_selected_fields(v) {
        return traversal_cost(&fields.to_map());
    }
    if let Some(s) = v.downcast_ref::<CelString>() {
        (s.inner().len() as f64 * STRING_TRAVERSAL) as u64
    } else if let Some(b) = v.downcast_ref::<CelBytes>() {
        (b.inner().len() as f64 * STRING_TRAVERSAL) as u64
    } else if let Some(l) = v.downcast_ref::<CelList>() {
        l.inner()
            .iter()
            .fold(0u64, |c, e| c.saturating_add(traversal_cost(e.as_ref())))
    } else if let Some(m) = v.downcast_ref::<CelMap>() {
        m.inner().iter().fold(0u64, |c, (k, e)| {
            c.saturating_add(traversal_cost(k.inner()))
                .saturating_add(traversal_cost(e.as_ref()))
        })
    } else {
        1
    }
}

/// The calls whose cost depends on their operands' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// `a + b`, on `b`, `a` remembered.
    Add = 1,
    /// `a < b` and the like, on `b`, `a` remembered.
    Ordering,
    /// `a in b`, on `b`.
    In,
    /// `s.matches(re)`, `s.find(re)`, `s.findAll(re, ...)`, on `s`, `re` remembered.
    Matches,
    /// `matches(s, re)`, on `re`, `s` remembered.
    MatchesGlobal,
    /// One traversal of the string: `s.lowerAscii()`, `url(s)`, `quantity(s)`...
    Traversal,
    /// Two traversals of the string: `s.replace(...)`, `s.split(...)`, `ip.isCanonical(s)`.
    DoubleTraversal,
    /// The k8s `traversalCost` of the target: `l.sum()`, `s.indexOf(t)`...
    Elements,
    /// `l.join(sep)`, on `l`, `sep` remembered.
    Join,
    /// `bytes(s)`, on `s`.
    ToBytes,
    /// `string(b)`, on `b`.
    ToString,
    /// `cidr.containsIP(x)`, on `x`.
    ContainsIp,
    /// `cidr.containsCIDR(x)`, on `x`.
    ContainsCidr,
    /// `fieldSelector(s)`, `labelSelector(s)`, on `s`.
    Selector,
    /// `sets.contains(a, b)`, `sets.intersects(a, b)`, on `b`, `a` remembered.
    SetProduct,
    /// `sets.equivalent(a, b)`, on `b`, `a` remembered.
    SetEquivalent,
    /// `lists.range(n)`, on `n`: the list it allocates.
    Range,
    /// `l.slice(i, j)`, `l.reverse()`, on the result list.
    ListResult,
    /// `l.flatten()`, `l.flatten(depth)`, on `l`, `depth` remembered.
    Flatten,
    /// `l.distinct()`, `l.sort()`, on `l`; `l.@sortByAssociatedKeys(keys)` on `keys`.
    SelfCompare,
}

impl Kind {
    const ALL: [Kind; 20] = [
        Kind::Add,
        Kind::Ordering,
        Kind::In,
        Kind::Matches,
        Kind::MatchesGlobal,
        Kind::Traversal,
        Kind::DoubleTraversal,
        Kind::Elements,
        Kind::Join,
        Kind::ToBytes,
        Kind::ToString,
        Kind::ContainsIp,
        Kind::ContainsCidr,
        Kind::Selector,
        Kind::SetProduct,
        Kind::SetEquivalent,
        Kind::Range,
        Kind::ListResult,
        Kind::Flatten,
        Kind::SelfCompare,
    ];

    /// Whether the cost also needs an operand evaluated before this one.
    fn remembers(self) -> bool {
        matches!(
            self,
            Kind::Ordering
                | Kind::Matches
                | Kind::MatchesGlobal
                | Kind::Join
                | Kind::SetProduct
                | Kind::SetEquivalent
                | Kind::Flatten
        )
    }
}

fn encode(kind: Kind, slot: u32) -> i64 {
    ((kind as i64) << 32) | i64::from(slot)
}

/// Set in the low half of a [`DYN_FN`] code whose remembered operand is a
/// string literal: the rest of the low half is its size (code points), known
/// when the expression is compiled, in place of a slot to look it up.
const STATIC_OTHER: u32 = 1 << 31;

/// The code of a [`DYN_FN`] call whose remembered operand `e` is a string
/// literal, carrying its size (code points, what `Size::of` gives its value);
/// `None` for any other operand, or a size that does not fit the code.
fn encode_static(kind: Kind, e: &IdedExpr) -> Option<i64> {
    let Some((Tag::String, chars)) = literal_size(e) else {
        return None;
    };
    let chars = u32::try_from(chars)
        .ok()
        .filter(|c| c & STATIC_OTHER == 0)?;
    Some(encode(kind, STATIC_OTHER | chars))
}

fn decode(code: u64) -> (Kind, u32) {
    let kind = Kind::ALL
        .into_iter()
        .find(|k| *k as u64 == code >> 32)
        .unwrap_or(Kind::Traversal);
    (kind, code as u32)
}

/// cel-go's `costCall` and the k8s `CallCost`, for `kind` on `x` (and the
/// remembered operand `other`). Charges list copies to the allocation guard.
fn call_cost(kind: Kind, x: &dyn Val, other: Option<Size>) -> Result<u64, ExecutionError> {
    let other = other.unwrap_or(Size {
        tag: Tag::Other,
        size: 1,
        values: 0,
        int: None,
    });
    let size = actual_size(x);
    let same = |tag: Tag| other.tag == tag && Size::of(x, false).tag == tag;
    Ok(match kind {
        Kind::Add => {
            if same(Tag::String) || same(Tag::Bytes) {
                scaled(other.size.saturating_add(size), STRING_TRAVERSAL)
            } else {
                if other.tag == Tag::List {
                    let cap = allocation_left().saturating_sub(other.values);
                    allocate(
                        other
                            .values
                            .saturating_add(deep_size(x, cap.saturating_add(1))),
                    )?;
                }
                1
            }
        }
        Kind::Ordering => {
            if same(Tag::String) || same(Tag::Bytes) {
                scaled(other.size.min(size), STRING_TRAVERSAL)
            } else {
                1
            }
        }
        Kind::In => {
            if x.downcast_ref::<CelList>().is_some() {
                size
            } else {
                1
            }
        }
        Kind::Matches => regex_cost(size, other.size),
        Kind::MatchesGlobal => regex_cost(other.size, size),
        Kind::Traversal => scaled(size, STRING_TRAVERSAL),
        Kind::DoubleTraversal => (size as f64 * 2.0 * STRING_TRAVERSAL).ceil() as u64,
        Kind::Elements => traversal_cost(x),
        Kind::Join => {
            let separator = if other.tag == Tag::String {
                other.size
            } else {
                0
            };
            let result = x
                .downcast_ref::<CelList>()
                .map(|l| {
                    let n = l.inner().len() as u64;
                    l.inner()
                        .iter()
                        .fold(0u64, |s, e| s.saturating_add(actual_size(e.as_ref())))
                        .saturating_add(n.saturating_sub(1).saturating_mul(separator))
                })
                .unwrap_or(1);
            (result as f64 * 2.0 * STRING_TRAVERSAL).ceil() as u64
        }
        Kind::ToBytes => {
            if x.downcast_ref::<CelString>().is_some() {
                scaled(size, STRING_TRAVERSAL)
            } else {
                1
            }
        }
        Kind::ToString => {
            if x.downcast_ref::<CelBytes>().is_some() {
                scaled(size, STRING_TRAVERSAL)
            } else {
                1
            }
        }
        Kind::ContainsIp | Kind::ContainsCidr => {
            // The CIDR is no sizer: its size is 1.
            let mut cost = scaled(2, STRING_TRAVERSAL);
            if kind == Kind::ContainsCidr {
                cost += scaled(1, STRING_TRAVERSAL) + 1;
            }
            if x.downcast_ref::<CelString>().is_some() {
                cost += scaled(size, STRING_TRAVERSAL);
            }
            cost
        }
        Kind::Selector => {
            let requirements = scaled(size, 0.5);
            LIST_CREATE
                .saturating_add(scaled(size, STRING_TRAVERSAL))
                .saturating_add(scaled(requirements, (LIST_CREATE + STRUCT_CREATE) as f64))
        }
        // cel-go ext/sets.go `trackSetsCost`.
        Kind::SetProduct => 1 + other.size.saturating_mul(size),
        Kind::SetEquivalent => 1 + (other.size.saturating_mul(size) as f64 * 2.0) as u64,
        // cel-go ext/lists.go `trackAllocatingListCall`: the list's size
        // times a factor, the call and the list creation.
        Kind::Range => {
            let n = x
                .downcast_ref::<CelInt>()
                .map_or(0, |i| (*i.inner()).max(0) as u64);
            allocating_list(1.0, n)
        }
        Kind::ListResult => {
            if x.downcast_ref::<CelList>().is_some() {
                allocating_list(1.0, size)
            } else {
                1
            }
        }
        Kind::Flatten => {
            let depth = if other.tag == Tag::Other {
                other.int.unwrap_or(1) as f64
            } else {
                1.0
            };
            allocating_list(depth.max(0.0), size)
        }
        Kind::SelfCompare => match x.downcast_ref::<CelList>() {
            Some(l) => {
                let mut factor = 2.0;
                if let Some(first) = l.inner().first() {
                    if first.downcast_ref::<CelString>().is_some()
                        || first.downcast_ref::<CelBytes>().is_some()
                    {
                        factor += STRING_TRAVERSAL;
                    }
                }
                allocating_list(factor, size.saturating_mul(size))
            }
            None => 1,
        },
    })
}

fn allocating_list(factor: f64, size: u64) -> u64 {
    ((size as f64 * factor) as u64)
        .saturating_add(1)
        .saturating_add(LIST_CREATE)
}

/// `matches` and `find`: the string's traversal times the regex's length.
fn regex_cost(string: u64, regex: u64) -> u64 {
    let string_cost = ((1.0 + string as f64) * STRING_TRAVERSAL).ceil() as u64;
    string_cost.saturating_mul(scaled(regex, REGEX_STRING_LENGTH))
}

/// Instruments `expr` (already rewritten by `rewrite`) for metering and
/// returns the cost of its part that always runs, to charge once per
/// evaluation. `next_id` supplies ids for new nodes.
pub fn instrument(expr: &mut IdedExpr, next_id: &mut u64) -> u64 {
    let mut inst = Instrumenter {
        next_id,
        bound: INPUT_VARIABLES.iter().map(|s| s.to_string()).collect(),
        loop_depth: 0,
    };
    inst.visit(expr, false)
}

struct Instrumenter<'a> {
    next_id: &'a mut u64,
    /// The names an identifier can refer to: the inputs and the variables of
    /// the comprehensions around.
    bound: Vec<String>,
    loop_depth: usize,
}

/// A literal, or a list or map of them: cel-go's planner folds these into
/// constants (`OptOptimize`), which cost nothing.
fn is_constant(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Literal(_) => true,
        Expr::List(l) => l.optional_indices.is_empty() && l.elements.iter().all(is_constant),
        Expr::Map(m) => m.entries.iter().all(|en| match &en.expr {
            EntryExpr::MapEntry(me) => {
                !me.optional && is_constant(&me.key) && is_constant(&me.value)
            }
            EntryExpr::StructField(_) => false,
        }),
        _ => false,
    }
}

/// Whether cel-go plans `e` as an attribute, so that a selection on it is a
/// qualifier of it rather than of a new relative attribute (one more unit).
fn is_attribute(e: &IdedExpr) -> bool {
    match &e.expr {
        Expr::Ident(_) => true,
        Expr::Select(s) => !s.test,
        Expr::Call(c) => {
            c.target.is_none()
                && matches!(
                    c.func_name.as_str(),
                    operators::INDEX
                        | operators::OPT_INDEX
                        | operators::OPT_SELECT
                        | operators::CONDITIONAL
                )
        }
        _ => false,
    }
}

/// The cost of a literal operand as cel-go sizes it, for the size rules.
fn literal_size(e: &IdedExpr) -> Option<(Tag, u64)> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => {
            Some((Tag::String, s.inner().chars().count() as u64))
        }
        Expr::Literal(LiteralValue::Bytes(b)) => Some((Tag::Bytes, b.inner().len() as u64)),
        Expr::Literal(_) => Some((Tag::Other, 1)),
        _ => None,
    }
}

fn is_number_literal(e: &IdedExpr) -> bool {
    matches!(
        &e.expr,
        Expr::Literal(LiteralValue::Int(_) | LiteralValue::UInt(_) | LiteralValue::Double(_))
    )
}

impl Instrumenter<'_> {
    fn id(&mut self) -> u64 {
        *self.next_id += 1;
        *self.next_id
    }

    /// Replaces `e` by `name(arg, e)`.
    fn wrap(&mut self, e: &mut IdedExpr, name: &str, arg: i64) {
        let inner = std::mem::take(e);
        let lit = IdedExpr {
            id: self.id(),
            expr: Expr::Literal(LiteralValue::Int(CelInt::from(arg))),
        };
        *e = IdedExpr {
            id: self.id(),
            expr: Expr::Call(CallExpr {
                func_name: name.to_string(),
                target: None,
                args: vec![lit, inner],
            }),
        };
    }

    fn charge_when_run(&mut self, e: &mut IdedExpr, cost: u64) {
        if cost > 0 {
            self.wrap(e, CHARGE_FN, cost as i64);
        }
    }

    /// Whether `e` spells a qualified name whose root is no variable: the
    /// namespace of a function (`sets`, `strings`, `optional`...).
    fn is_namespace(&self, e: &IdedExpr) -> bool {
        let mut e = e;
        loop {
            match &e.expr {
                Expr::Ident(name) => return !self.bound.iter().any(|b| b == name),
                Expr::Select(s) if !s.test => e = &s.operand,
                _ => return false,
            }
        }
    }

    /// Instruments `e`; returns the cost of its part that always runs when
    /// `e` does. `measured`: an enclosing wrapper already counts the values
    /// of `e` for the allocation guard.
    fn visit(&mut self, e: &mut IdedExpr, measured: bool) -> u64 {
        let slot = e.id as u32;
        match &mut e.expr {
            Expr::Literal(_) | Expr::Unspecified => 0,
            Expr::Ident(_) => SELECT_AND_IDENT,
            Expr::Select(s) => {
                if s.test {
                    // `has()`: PresenceTestHasCost(false).
                    self.visit(&mut s.operand, false)
                } else {
                    let relative = u64::from(!is_attribute(&s.operand));
                    self.visit(&mut s.operand, false) + SELECT_AND_IDENT + relative
                }
            }
            Expr::List(l) => {
                let constant = l.optional_indices.is_empty() && l.elements.iter().all(is_constant);
                let measure = self.loop_depth > 0 && !measured && !constant;
                let mut cost = if constant { 0 } else { LIST_CREATE };
                for el in l.elements.iter_mut() {
                    cost += self.visit(el, measured || measure);
                }
                if measure {
                    self.wrap(e, ALLOC_FN, 0);
                }
                cost
            }
            Expr::Map(m) => {
                let constant = m.entries.iter().all(|en| match &en.expr {
                    EntryExpr::MapEntry(me) => {
                        !me.optional && is_constant(&me.key) && is_constant(&me.value)
                    }
                    EntryExpr::StructField(_) => false,
                });
                let measure = self.loop_depth > 0 && !measured && !constant;
                let mut cost = if constant { 0 } else { MAP_CREATE };
                for en in m.entries.iter_mut() {
                    match &mut en.expr {
                        EntryExpr::MapEntry(me) => {
                            cost += self.visit(&mut me.key, measured || measure);
                            cost += self.visit(&mut me.value, measured || measure);
                        }
                        EntryExpr::StructField(f) => {
                            cost += self.visit(&mut f.value, measured || measure)
                        }
                    }
                }
                if measure {
                    self.wrap(e, ALLOC_FN, 0);
                }
                cost
            }
            Expr::Struct(s) => {
                let measure = self.loop_depth > 0 && !measured;
                let mut cost = STRUCT_CREATE;
                for en in s.entries.iter_mut() {
                    match &mut en.expr {
                        EntryExpr::StructField(f) => {
                            cost += self.visit(&mut f.value, measured || measure)
                        }
                        EntryExpr::MapEntry(me) => {
                            cost += self.visit(&mut me.key, measured || measure);
                            cost += self.visit(&mut me.value, measured || measure);
                        }
                    }
                }
                if measure {
                    self.wrap(e, ALLOC_FN, 0);
                }
                cost
            }
            Expr::Comprehension(_) => self.comprehension(e),
            Expr::Call(_) => self.call(e, slot, measured),
        }
    }

    fn comprehension(&mut self, e: &mut IdedExpr) -> u64 {
        let Expr::Comprehension(c) = &mut e.expr else {
            return 0;
        };
        // Every element of the range is copied into the iteration variable.
        let mut cost = self.visit(&mut c.iter_range, true);
        self.wrap(&mut c.iter_range, RANGE_FN, 0);
        cost += self.visit(&mut c.accu_init, false);

        let scope = self.bound.len();
        self.bound.push(c.iter_var.clone());
        if let Some(v2) = &c.iter_var2 {
            self.bound.push(v2.clone());
        }
        self.bound.push(c.accu_var.clone());
        self.loop_depth += 1;

        // The condition: charged outside it, so that a loop stops at its next
        // condition once the evaluation is over its limit (an error inside
        // `@not_strictly_false` would be taken for true). The step's part
        // that always runs is charged with it, before the step: cel-go
        // charges every step it evaluates, whatever its value, while the
        // crate stops a step at its first error, which `all`, `exists` or
        // an enclosing `||` may then absorb. A literal condition (`map`,
        // `filter`, `exists_one`) stays as it is: the crate builds an
        // appended list in place only under one, so the step charges itself.
        let literal_cond = matches!(c.loop_cond.expr, Expr::Literal(_));
        let cond = self.visit(&mut c.loop_cond, false);
        let step = self.loop_step(&mut c.loop_step, &c.accu_var, literal_cond);
        self.charge_loop(&mut c.loop_cond, cond, step);
        self.loop_depth -= 1;
        cost += self.visit(&mut c.result, false);
        self.bound.truncate(scope);
        cost
    }

    /// Instruments a loop step, keeping the shapes the interpreter
    /// recognises; returns the cost of its part that always runs that is
    /// left for the condition to charge (see [`Self::charge_loop`]), none
    /// when `in_place` or the step is an append.
    fn loop_step(&mut self, step: &mut IdedExpr, accu: &str, in_place: bool) -> u64 {
        match step_shape(step, accu) {
            StepShape::Fold => {
                // `@result && x`: `x` runs on every iteration (the loop stops
                // once the accumulator decides the result).
                let Expr::Call(call) = &mut step.expr else {
                    return 0;
                };
                let x = &mut call.args[1];
                let cost = SELECT_AND_IDENT + self.visit(x, false);
                self.charged_here_or_left(x, cost, in_place)
            }
            StepShape::Append => {
                // `@result + [x]`
                if let Expr::Call(call) = &mut step.expr {
                    let cost = self.appended(&mut call.args[1]) + 1 + SELECT_AND_IDENT;
                    self.appended_charge(&mut call.args[1], cost);
                }
                0
            }
            StepShape::GuardedAppend => {
                // `c ? @result + [x] : @result`: the `@result` of the other
                // branch is charged with `c`, the rest of the append with `x`.
                if let Expr::Call(call) = &mut step.expr {
                    let c_cost = self.visit(&mut call.args[0], false) + SELECT_AND_IDENT;
                    self.charge_when_run(&mut call.args[0], c_cost);
                    if let Expr::Call(append) = &mut call.args[1].expr {
                        let cost = self.appended(&mut append.args[1]) + 1;
                        self.appended_charge(&mut append.args[1], cost);
                    }
                }
                0
            }
            StepShape::Other => {
                let cost = self.visit(step, false);
                self.charged_here_or_left(step, cost, in_place)
            }
        }
    }

    /// Wraps `e` to charge `cost` when it runs, if `in_place`; otherwise
    /// returns `cost` for the loop's condition to charge.
    fn charged_here_or_left(&mut self, e: &mut IdedExpr, cost: u64, in_place: bool) -> u64 {
        if in_place {
            self.charge_when_run(e, cost);
            0
        } else {
            cost
        }
    }

    /// Wraps a loop condition to charge its own cost on every iteration and
    /// the step's when it lets the step run (evaluates to `true`, as in
    /// cel-go's fold).
    fn charge_loop(&mut self, cond: &mut IdedExpr, cond_cost: u64, step_cost: u64) {
        if step_cost == 0 {
            return self.charge_when_run(cond, cond_cost);
        }
        // A half at its ceiling is over every limit already.
        let half = |n: u64| n.min(LOOP_HALF);
        let code = (half(cond_cost) << 32) | half(step_cost);
        self.wrap(cond, LOOP_FN, code as i64);
    }

    /// Instruments the single element of the `[x]` a step appends; returns
    /// the cost of creating the list (not wrapped: the step keeps its shape).
    fn appended(&mut self, list: &mut IdedExpr) -> u64 {
        let Expr::List(l) = &mut list.expr else {
            return self.visit(list, false);
        };
        let create = if l.elements.iter().all(is_constant) {
            0
        } else {
            LIST_CREATE
        };
        create + self.visit(&mut l.elements[0], true)
    }

    fn appended_charge(&mut self, list: &mut IdedExpr, cost: u64) {
        if let Expr::List(l) = &mut list.expr {
            self.wrap(&mut l.elements[0], ALLOC_FN, cost as i64);
        }
    }

    fn call(&mut self, e: &mut IdedExpr, slot: u32, measured: bool) -> u64 {
        let Expr::Call(call) = &mut e.expr else {
            return 0;
        };
        let name = call.func_name.clone();
        let arity = call.args.len();
        if call.target.is_none() {
            match (name.as_str(), arity) {
                (operators::CONDITIONAL, 3) => {
                    let cond = self.visit(&mut call.args[0], false);
                    let yes = self.visit(&mut call.args[1], measured);
                    let no = self.visit(&mut call.args[2], measured);
                    let common = yes.min(no);
                    self.charge_when_run(&mut call.args[1], yes - common);
                    self.charge_when_run(&mut call.args[2], no - common);
                    return cond + common;
                }
                (operators::LOGICAL_AND | operators::LOGICAL_OR, 2) => {
                    let lhs = self.visit(&mut call.args[0], false);
                    let rhs = self.visit(&mut call.args[1], false);
                    self.charge_when_run(&mut call.args[1], rhs);
                    return lhs;
                }
                (operators::INDEX | operators::OPT_INDEX, 2) => {
                    // `k`/`v` of a two-variable comprehension: an identifier in cel-go.
                    if matches!(&call.args[0].expr, Expr::Ident(n) if n.starts_with("@kv"))
                        && matches!(&call.args[1].expr, Expr::Literal(_))
                    {
                        return SELECT_AND_IDENT;
                    }
                    let relative = u64::from(!is_attribute(&call.args[0]));
                    let cost =
                        self.visit(&mut call.args[0], false) + self.visit(&mut call.args[1], false);
                    return cost + 1 + relative;
                }
                (operators::OPT_SELECT, 2) => {
                    let relative = u64::from(!is_attribute(&call.args[0]));
                    let cost =
                        self.visit(&mut call.args[0], false) + self.visit(&mut call.args[1], false);
                    return cost + 1 + relative;
                }
                (operators::ADD, 2) => {
                    let cost =
                        self.visit(&mut call.args[0], false) + self.visit(&mut call.args[1], false);
                    if is_number_literal(&call.args[0]) || is_number_literal(&call.args[1]) {
                        return cost + 1;
                    }
                    self.fuse(e, ADD_FN, 0);
                    return cost;
                }
                (operators::EQUALS | operators::NOT_EQUALS, 2) => {
                    let cost =
                        self.visit(&mut call.args[0], false) + self.visit(&mut call.args[1], false);
                    let known = match (literal_size(&call.args[0]), literal_size(&call.args[1])) {
                        (Some((_, a)), Some((_, b))) => Some(scaled(a.min(b), STRING_TRAVERSAL)),
                        // Cost 1 unless the other side is empty.
                        (Some((_, n)), None) | (None, Some((_, n))) if n <= 10 => Some(1),
                        _ => None,
                    };
                    if let Some(k) = known {
                        return cost + k;
                    }
                    let negated = i64::from(name == operators::NOT_EQUALS);
                    self.fuse(e, EQUALS_FN, negated);
                    return cost;
                }
                (
                    operators::LESS
                    | operators::LESS_EQUALS
                    | operators::GREATER
                    | operators::GREATER_EQUALS,
                    2,
                ) => {
                    let cost =
                        self.visit(&mut call.args[0], false) + self.visit(&mut call.args[1], false);
                    let known = match (literal_size(&call.args[0]), literal_size(&call.args[1])) {
                        (Some((Tag::Other, _)), _) | (_, Some((Tag::Other, _))) => Some(1),
                        (Some((ta, a)), Some((tb, b))) if ta == tb => {
                            Some(scaled(a.min(b), STRING_TRAVERSAL))
                        }
                        _ => None,
                    };
                    if let Some(k) = known {
                        return cost + k;
                    }
                    self.remember_and_charge(call, 0, 1, Kind::Ordering, slot);
                    return cost;
                }
                (operators::IN, 2) => {
                    let cost =
                        self.visit(&mut call.args[0], false) + self.visit(&mut call.args[1], false);
                    if let Expr::List(l) = &call.args[1].expr {
                        if l.optional_indices.is_empty() {
                            return cost + l.elements.len() as u64;
                        }
                    }
                    self.charge_on(&mut call.args[1], Kind::In, slot);
                    return cost;
                }
                (ENTRIES_FN, _) => {
                    return call.args.iter_mut().map(|a| self.visit(a, false)).sum();
                }
                (MAP_INSERT_FN | MAP_MERGE_FN, _) => {
                    // Each step copies the accumulated map.
                    let cost = 1 + call
                        .args
                        .iter_mut()
                        .map(|a| self.visit(a, false))
                        .sum::<u64>();
                    if self.loop_depth > 0 {
                        self.wrap(e, GROWTH_FN, 0);
                    }
                    return cost;
                }
                _ => {}
            }
        }

        // A function call, global or on a target.
        let namespace = call.target.as_deref().is_some_and(|t| self.is_namespace(t));
        let mut cost = 1;
        if let Some(t) = call.target.as_deref_mut() {
            if !namespace {
                cost += self.visit(t, false);
            }
        }
        for a in call.args.iter_mut() {
            cost += self.visit(a, false);
        }
        let qualified = if namespace {
            call.target
                .as_deref()
                .and_then(qualified_name)
                .map(|q| format!("{q}.{name}"))
        } else {
            None
        };
        let member = call.target.is_some() && !namespace;
        if member && arity == 1 && STRING_PREDICATES.contains(&name.as_str()) {
            self.fuse_string_predicate(e);
            return cost - 1;
        }
        if member {
            // Arguments run before the target: the target's wrapper runs
            // last, right before the call.
            let on_target = match (name.as_str(), arity) {
                ("lowerAscii" | "upperAscii" | "substring" | "trim", _) => Some(Kind::Traversal),
                ("format", _) => Some(Kind::Traversal),
                ("replace" | "split", _) => Some(Kind::DoubleTraversal),
                ("isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf", _) => {
                    Some(Kind::Elements)
                }
                ("matches", 1) | ("find" | "findAll", 1 | 2) => Some(Kind::Matches),
                ("join", 0 | 1) => Some(Kind::Join),
                ("flatten", 0 | 1) => Some(Kind::Flatten),
                ("distinct" | "sort", 0) => Some(Kind::SelfCompare),
                _ => None,
            };
            if let Some(kind) = on_target {
                let code = if kind.remembers() && arity > 0 {
                    self.remember(&mut call.args[0], kind, slot)
                } else {
                    encode(kind, slot)
                };
                if let Some(t) = call.target.as_deref_mut() {
                    self.wrap(t, DYN_FN, code);
                }
                return cost - 1;
            }
            let on_argument = match (name.as_str(), arity) {
                ("containsIP", 1) => Some(Kind::ContainsIp),
                ("containsCIDR", 1) => Some(Kind::ContainsCidr),
                ("fieldSelector" | "labelSelector", 1) => Some(Kind::Selector),
                ("@sortByAssociatedKeys", 1) => Some(Kind::SelfCompare),
                _ => None,
            };
            if let Some(kind) = on_argument {
                self.charge_on(&mut call.args[0], kind, slot);
                return cost - 1;
            }
            if matches!((name.as_str(), arity), ("slice", 2) | ("reverse", 0)) {
                // Charged on the result (no larger than the target).
                self.charge_on(e, Kind::ListResult, slot);
                return cost - 1;
            }
            if name == "check" && arity == 1 {
                return cost - 1 + AUTHZ_CHECK;
            }
            return cost;
        }
        let function = qualified.as_deref().unwrap_or(name.as_str());
        let on_first = match (function, arity) {
            (
                "url"
                | "cidr"
                | "isIP"
                | "isCIDR"
                | "ip"
                | "quantity"
                | "isQuantity"
                | "semver"
                | "isSemver"
                | "jsonpatch.escapeKey"
                | "strings.quote",
                1 | 2,
            ) => Some(Kind::Traversal),
            ("ip.isCanonical", 1) => Some(Kind::DoubleTraversal),
            ("bytes", 1) => Some(Kind::ToBytes),
            ("lists.range", 1) => Some(Kind::Range),
            ("string", 1) => Some(Kind::ToString),
            _ => None,
        };
        if let Some(kind) = on_first {
            self.charge_on(&mut call.args[0], kind, slot);
            return cost - 1;
        }
        let pair = match (function, arity) {
            ("matches", 2) => Some(Kind::MatchesGlobal),
            ("sets.contains" | "sets.intersects", 2) => Some(Kind::SetProduct),
            ("sets.equivalent", 2) => Some(Kind::SetEquivalent),
            _ => None,
        };
        if let Some(kind) = pair {
            self.remember_and_charge(call, 0, 1, kind, slot);
            return cost - 1;
        }
        cost
    }

    /// Replaces the call `e` by the internal function `name` that charges
    /// and answers it, given `code` before the call's arguments.
    fn fuse(&mut self, e: &mut IdedExpr, name: &str, code: i64) {
        let Expr::Call(call) = &mut e.expr else {
            return;
        };
        let code = IdedExpr {
            id: self.id(),
            expr: Expr::Literal(LiteralValue::Int(CelInt::from(code))),
        };
        call.func_name = name.to_string();
        call.args.insert(0, code);
    }

    /// Replaces `s.contains(t)` (or `startsWith`, `endsWith`) by the
    /// [`STRING_PREDICATE_FN`] call that charges and answers it.
    fn fuse_string_predicate(&mut self, e: &mut IdedExpr) {
        let Expr::Call(call) = &mut e.expr else {
            return;
        };
        let Some(which) = STRING_PREDICATES.iter().position(|p| *p == call.func_name) else {
            return;
        };
        let Some(target) = call.target.take() else {
            return;
        };
        // After the argument, which the crate evaluates first (metering
        // must not change which error an expression answers).
        call.args.push(*target);
        self.fuse(e, STRING_PREDICATE_FN, which as i64);
    }

    /// Wraps `e` to charge the call `kind` from its value.
    fn charge_on(&mut self, e: &mut IdedExpr, kind: Kind, slot: u32) {
        self.wrap(e, DYN_FN, encode(kind, slot));
    }

    /// Makes the size of `operand` known to the [`DYN_FN`] call charging
    /// `kind`; returns that call's code. A string literal's size is known
    /// now and goes into the code, the literal left unwrapped; any other
    /// operand is wrapped to remember its size when it runs.
    fn remember(&mut self, operand: &mut IdedExpr, kind: Kind, slot: u32) -> i64 {
        if let Some(code) = encode_static(kind, operand) {
            return code;
        }
        self.wrap(operand, SIZE_FN, encode(kind, slot));
        encode(kind, slot)
    }

    /// Wraps argument `first` to remember its size and argument `second`
    /// (evaluated after it) to charge the call `kind`.
    fn remember_and_charge(
        &mut self,
        call: &mut CallExpr,
        first: usize,
        second: usize,
        kind: Kind,
        slot: u32,
    ) {
        let code = self.remember(&mut call.args[first], kind, slot);
        self.wrap(&mut call.args[second], DYN_FN, code);
    }
}

/// The loop steps the interpreter recognises.
enum StepShape {
    /// `@result && x`, `@result || x`.
    Fold,
    /// `@result + [x]`.
    Append,
    /// `c ? @result + [x] : @result`.
    GuardedAppend,
    Other,
}

fn step_shape(step: &IdedExpr, accu: &str) -> StepShape {
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == accu);
    let is_append = |e: &IdedExpr| match &e.expr {
        Expr::Call(c) if c.func_name == operators::ADD && c.target.is_none() => {
            matches!(c.args.as_slice(), [lhs, rhs] if is_accu(lhs)
                && matches!(&rhs.expr, Expr::List(l) if l.elements.len() == 1 && l.optional_indices.is_empty()))
        }
        _ => false,
    };
    let Expr::Call(call) = &step.expr else {
        return StepShape::Other;
    };
    let name = call.func_name.as_str();
    if call.target.is_some() {
        return StepShape::Other;
    }
    match call.args.as_slice() {
        [lhs, _]
            if is_accu(lhs)
                && (name == operators::LOGICAL_AND || name == operators::LOGICAL_OR) =>
        {
            StepShape::Fold
        }
        _ if is_append(step) => StepShape::Append,
        [_, yes, no] if name == operators::CONDITIONAL && is_append(yes) && is_accu(no) => {
            StepShape::GuardedAppend
        }
        _ => StepShape::Other,
    }
}

fn qualified_name(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(n) => Some(n.clone()),
        Expr::Select(s) if !s.test => {
            qualified_name(&s.operand).map(|q| format!("{q}.{}", s.field))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cel::{error_text, CelEnvironment};

    /// The cost of evaluating `src` with no inputs, or its error.
    fn cost_of(src: &str) -> Result<u64, String> {
        // Deeply nested test expressions recurse in the (debug) interpreter:
        // evaluate on a thread with room for it.
        let src = src.to_string();
        std::thread::Builder::new()
            .stack_size(256 * 1024 * 1024)
            .spawn(move || {
                let env = CelEnvironment::shared();
                let expr = env.compile(&src).map_err(|e| e.to_string())?;
                let ctx = env.context();
                let (r, cost) = expr.evaluate_with_cost(&ctx);
                r.map(|_| cost).map_err(|e| error_text(&e))
            })
            .expect("test thread starts")
            .join()
            .expect("evaluation does not panic")
    }

    #[test]
    fn literals_cost_nothing_and_calls_one() {
        assert_eq!(cost_of("1").unwrap(), 0);
        assert_eq!(cost_of("[1, 2, 3]").unwrap(), 0);
        assert_eq!(cost_of("{'a': 1}").unwrap(), 0);
        assert_eq!(cost_of("1 + 2").unwrap(), 1);
        assert_eq!(cost_of("size([1, 2]) == 2").unwrap(), 2);
        assert_eq!(cost_of("[1, 1 + 1]").unwrap(), 11);
    }

    #[test]
    fn short_circuits_charge_only_what_runs() {
        assert_eq!(cost_of("true || 1 + 1 == 2").unwrap(), 0);
        assert_eq!(cost_of("false || 1 + 1 == 2").unwrap(), 2);
        assert_eq!(cost_of("true ? 1 : 1 + 2 + 3").unwrap(), 0);
        assert_eq!(cost_of("false ? 1 : 1 + 2 + 3").unwrap(), 2);
    }

    #[test]
    fn comprehensions_charge_each_iteration() {
        // cel-go: per element, @not_strictly_false(@result) (2) + @result (1)
        // + x (1) + x > 0 (1), then the result @result (1).
        assert_eq!(cost_of("[1, 2, 3].all(x, x > 0)").unwrap(), 3 * 5 + 1);
        // map: @result + [x * 2] = 1 + 1 + 10 + (x * 2: 2), result 1.
        assert_eq!(cost_of("[1, 2, 3].map(x, x * 2)").unwrap(), 3 * 14 + 1);
        // filter: x > 1 (2) + the other branch's @result (1); kept: +12 (x 1).
        assert_eq!(
            cost_of("[1, 2, 3].filter(x, x > 1)").unwrap(),
            3 * 3 + 2 * 12 + 1
        );
    }

    #[test]
    fn equality_of_values_costs_by_the_shorter_and_answers_as_the_operator() {
        // Operands no literal: the call that charges also compares.
        let a = format!("['{}'][0]", "a".repeat(100));
        let b = format!("['{}'][0]", "b".repeat(300));
        let operands = cost_of(&a).unwrap() + cost_of(&b).unwrap();
        for (op, same, other) in [("==", true, false), ("!=", false, true)] {
            // cel-go: ceil(min(100, 300) * 0.1).
            assert_eq!(cost_of(&format!("{a} {op} {b}")).unwrap(), operands + 10);
            assert_eq!(
                crate::cel::eval_json(&format!("{a} {op} {a}")),
                Ok(same.into())
            );
            assert_eq!(
                crate::cel::eval_json(&format!("{a} {op} {b}")),
                Ok(other.into())
            );
        }
        // Heterogeneous numbers are equal as the operator has them.
        assert_eq!(
            crate::cel::eval_json("[1][0] == dyn([1.0][0])"),
            Ok(true.into())
        );
    }

    #[test]
    fn string_predicates_on_strings_cost_and_answer_as_the_methods() {
        let s = "a".repeat(100);
        for (src, cost, value) in [
            // cel-go: ceil(100 * 0.1) * ceil(30 * 0.1), ceil(100 * 0.1).
            (format!("'{s}'.contains('{}')", "a".repeat(30)), 30, true),
            (format!("'{s}'.contains('b')"), 10, false),
            (format!("'{s}'.startsWith('aa')"), 10, true),
            (format!("'{s}'.startsWith('b')"), 10, false),
            (format!("'{s}b'.endsWith('ab')"), 11, true),
            (format!("'{s}'.endsWith('b')"), 10, false),
        ] {
            assert_eq!(cost_of(&src), Ok(cost), "{src}");
            assert_eq!(crate::cel::eval_json(&src), Ok(value.into()), "{src}");
        }
    }

    #[test]
    fn a_string_predicate_on_another_value_fails_as_the_method_does() {
        // What the crate's method call says of an int target (`dyn` is no
        // string to the checker, so this one is the method itself).
        let expected = crate::cel::eval_json("dyn(5).contains('a')").unwrap_err();
        let _meter = Meter::start(u64::MAX);
        let args = vec![
            CowVal::owned(CelInt::from(0)),
            CowVal::owned(CelString::from("a")),
            CowVal::owned(CelInt::from(5)),
        ];
        let got = string_predicate_fn(args).map(|_| ()).unwrap_err();
        assert_eq!(error_text(&got), expected);
    }

    #[test]
    fn a_step_is_charged_when_its_error_is_absorbed() {
        // cel-go charges each step it evaluates whatever its value: per
        // element @not_strictly_false(!@result) (3) + @result (1) + x (1) +
        // x / 0 (1) + == (1); exists goes on after an error and `|| true`
        // absorbs it; then the result @result (1).
        assert_eq!(
            cost_of("[1, 2, 3].exists(x, x / 0 == 1) || true").unwrap(),
            3 * 7 + 1
        );
    }

    #[test]
    fn strings_cost_by_size() {
        let s = "a".repeat(100);
        // 'x' + 'y': ceil((100 + 100) * 0.1)
        assert_eq!(cost_of(&format!("'{s}' + '{s}'")).unwrap(), 20);
        assert_eq!(cost_of(&format!("'{s}' == '{s}'")).unwrap(), 10);
        assert_eq!(cost_of(&format!("'{s}'.contains('{s}')")).unwrap(), 100);
        assert_eq!(cost_of(&format!("'{s}'.startsWith('a')")).unwrap(), 10);
        // matches: ceil(101 * 0.1) * ceil(4 * 0.25)
        assert_eq!(cost_of(&format!("'{s}'.matches('a+b*')")).unwrap(), 11);
        assert_eq!(cost_of("'abc' in ['a', 'abc']").unwrap(), 2);
    }

    // A string literal operand's size goes into the charge when the
    // expression is compiled: it is counted in code points, as cel-go's
    // `actualSize` counts a string, not in bytes.
    #[test]
    fn a_literal_operand_is_sized_in_code_points() {
        let s = "a".repeat(100);
        let ascii = "b".repeat(30);
        let accented = "é".repeat(30);
        for src in [
            format!("'{s}'.contains('X')"),
            format!("'X' + '{s}'"),
            format!("'{s}'.matches('X')"),
        ] {
            let with = |lit: &str| cost_of(&src.replace('X', lit)).unwrap();
            assert_eq!(with(&ascii), with(&accented), "{src}");
            assert_ne!(with(&ascii), with(&"b".repeat(60)), "{src}");
        }
    }

    // How fast a runaway stops is a benchmark figure (kmutate bench on
    // fp-cost-limit-exceeded), not a timed test: these check that it stops
    // at the limit, before doing (or allocating for) the work.
    #[test]
    fn the_limit_stops_nested_loops() {
        let l = "[0,1,2,3,4,5,6,7,8,9]";
        let src = format!(
            "{l}.all(a, {l}.all(b, {l}.all(c, {l}.all(d, {l}.all(e, {l}.all(f, 'x' == 'x'))))))"
        );
        assert_eq!(cost_of(&src).unwrap_err(), COST_LIMIT_EXCEEDED);
    }

    #[test]
    fn an_absorbed_limit_error_still_fails_the_evaluation() {
        let l = "[0,1,2,3,4,5,6,7,8,9]";
        let heavy =
            format!("{l}.all(a, {l}.all(b, {l}.all(c, {l}.all(d, {l}.all(e, {l}.all(f, true))))))");
        assert_eq!(
            cost_of(&format!("({heavy}) || true")).unwrap_err(),
            COST_LIMIT_EXCEEDED
        );
        assert_eq!(
            cost_of(&format!("{l}.exists(z, ({heavy}) || true)")).unwrap_err(),
            COST_LIMIT_EXCEEDED
        );
    }

    #[test]
    fn doubling_strings_stops_before_allocating() {
        // Each level doubles the string; the cost of `+` follows its size.
        let mut src = "'0123456789'".to_string();
        for _ in 0..40 {
            src = format!("[{src}].map(s, s + s)[0]");
        }
        assert_eq!(cost_of(&src).unwrap_err(), COST_LIMIT_EXCEEDED);
    }

    #[test]
    fn copying_large_values_is_bounded() {
        // A list of 1000 lists of 1000: each `map` step copies a million values.
        let src = "[0].map(i, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(j, [0,1,2,3,4,5,6,7,8,9].map(k, [0,1,2,3,4,5,6,7,8,9].map(l, [0,1,2,3,4,5,6,7,8,9].map(m, [0,1,2,3,4,5,6,7,8,9])))))[0]";
        let big = format!("{src}.map(a, {src})");
        assert_eq!(cost_of(&big).unwrap_err(), COST_LIMIT_EXCEEDED);
    }

    #[test]
    fn library_costs() {
        assert_eq!(cost_of("sets.contains([1, 2, 3], [1, 2])").unwrap(), 1 + 6);
        assert_eq!(cost_of("sets.equivalent([1, 2], [2, 1])").unwrap(), 1 + 8);
        // lists.range(n): n + the call + the list creation, before allocating.
        assert_eq!(cost_of("lists.range(5)").unwrap(), 5 + 11);
        assert_eq!(
            cost_of("lists.range(1000000000)").unwrap_err(),
            COST_LIMIT_EXCEEDED
        );
        assert_eq!(cost_of("[1, 2, 3].reverse()").unwrap(), 3 + 11);
        assert_eq!(cost_of("[3, 1, 2].sort()").unwrap(), 9 * 2 + 11);
    }

    #[test]
    fn variables_and_expressions_share_the_budget() {
        use crate::dispatch::activation::{Activation, CompiledVariable};
        let env = CelEnvironment::shared();
        // Each variable costs 4 * 10 + 1 = 41.
        let vars: Vec<CompiledVariable> = ["a", "b", "c"]
            .iter()
            .map(|n| CompiledVariable {
                name: n.to_string(),
                expression: env
                    .compile("[0,1,2,3,4,5,6,7,8,9].all(x, x >= 0)")
                    .map_err(|e| e.to_string()),
            })
            .collect();
        let expr = env
            .compile("variables.a && variables.b && variables.c")
            .unwrap();
        let within = Activation::new(&env, Vec::new(), Vec::new(), &vars).with_budget(200);
        assert_eq!(within.evaluate(&expr, |_| ()), Ok(()));
        assert!(!within.out_of_budget());
        let over = Activation::new(&env, Vec::new(), Vec::new(), &vars).with_budget(100);
        assert_eq!(over.evaluate(&expr, |_| ()), Err(OUT_OF_BUDGET.to_string()));
        assert!(over.out_of_budget());
    }

    #[test]
    fn meters_nest_and_restore() {
        let outer = Meter::start(100);
        charge(10).unwrap();
        {
            let inner = Meter::start(5);
            assert!(charge(6).is_err());
            assert!(inner.exceeded());
        }
        assert_eq!(outer.cost(), 10);
        assert!(!outer.exceeded());
    }

    #[test]
    fn a_passed_deadline_interrupts_a_loop_and_the_guard_lifts_it() {
        let env = CelEnvironment::shared();
        // 1,000 iterations, each charged: the clock is read ten times.
        let expr = env
            .compile("[0,1,2,3,4,5,6,7,8,9].all(a, [0,1,2,3,4,5,6,7,8,9].all(b, [0,1,2,3,4,5,6,7,8,9].all(c, a + b + c >= 0)))")
            .unwrap();
        let ctx = env.context();
        {
            let _interrupt = Interrupt::at(Instant::now());
            let (r, _) = expr.evaluate_with_cost(&ctx);
            let e = r.expect_err("interrupted");
            assert!(is_interrupted(&e), "{e:?}");
        }
        let (r, _) = expr.evaluate_with_cost(&ctx);
        assert!(r.is_ok(), "{r:?}");
        {
            let _interrupt = Interrupt::at(Instant::now() + std::time::Duration::from_secs(3600));
            let (r, _) = expr.evaluate_with_cost(&ctx);
            assert!(r.is_ok(), "{r:?}");
        }
    }

    #[test]
    fn a_range_is_charged_for_what_iterating_it_copies() {
        use crate::cel::convert::json_to_val_for;
        use serde_json::json;
        let long = "x".repeat(70);
        let container =
            json!({"name": long, "env": [{"name": "E", "value": long}], "ports": [1, 2]});
        let doc = json!({"containers": [container.clone(), container.clone(), container]});
        let element = Access::fields(&[("name", Access::Full), ("env", Access::Full)]);
        let list_of_views = json_to_val_for(
            &doc["containers"],
            Box::leak(Box::new(Access::Elements(Box::new(element)))),
        );
        // Each element is a view: iterating copies a reference per element,
        // not the 3 x 11 values the views stand for.
        assert_eq!(deep_size(list_of_views.as_ref(), u64::MAX - 1), 43);
        assert_eq!(range_copies(list_of_views.as_ref(), u64::MAX - 1), 4);
        // Lists, maps and objects are cloned whole, views inside them not.
        let env = CelEnvironment::shared();
        let ctx = env.context();
        for (src, whole, copied) in [
            ("[[{'k': 'v'}, {'a': 'bc'}], [{'k': 'v'}]]", 12, 12),
            ("[Object{spec: Object.spec{replicas: 1}}]", 4, 4),
        ] {
            let expr = env.compile(src).expect("compiles");
            let v = expr.evaluate(&ctx).expect("evaluates");
            assert_eq!(deep_size(v.as_ref(), u64::MAX - 1), whole, "{src}");
            assert_eq!(range_copies(v.as_ref(), u64::MAX - 1), copied, "{src}");
        }
        // A map, and a view of a map, are counted whole.
        let map_view = json_to_val_for(&doc, Box::leak(Box::new(Access::Full)));
        assert_eq!(
            range_copies(map_view.as_ref(), u64::MAX - 1),
            deep_size(map_view.as_ref(), u64::MAX - 1)
        );
        // The count stops past the cap.
        assert!(range_copies(list_of_views.as_ref(), 1) <= 3);
    }

    #[test]
    fn selected_fields_are_counted_as_the_map_they_stand_for() {
        use crate::cel::convert::json_to_val_for;
        use serde_json::json;
        let fields = Access::fields;
        let long = "x".repeat(70);
        let doc = json!({"spec": {"containers": [{"name": long, "image": "i", "ports": [1, 2]},
            {"name": "b", "env": [{"name": "E", "value": long}]}], "n": 3, "f": 1.5, "t": true, "z": null},
            "metadata": {long.clone(): {"k": long}}});
        let element = fields(&[("name", Access::Full), ("env", Access::Full)]);
        for access in [
            fields(&[("spec", Access::Full)]),
            fields(&[(
                "spec",
                fields(&[("containers", Access::Elements(Box::new(element.clone())))]),
            )]),
            fields(&[
                (
                    "spec",
                    fields(&[
                        ("n", Access::Full),
                        ("f", Access::Full),
                        ("t", Access::Full),
                        ("z", Access::Full),
                    ]),
                ),
                ("metadata", Access::Full),
            ]),
            fields(&[("absent", Access::Full)]),
        ] {
            let view = json_to_val_for(&doc, &access);
            assert!(crate::cel::convert::as_selected_fields(view.as_ref()).is_some());
            // The same values converted whole, with no view anywhere.
            let projected = crate::cel::convert::project(&doc, &access);
            let whole = crate::cel::convert::json_to_val(&projected);
            let expected = deep_size(whole.as_ref(), u64::MAX - 1);
            assert_eq!(
                deep_size(view.as_ref(), u64::MAX - 1),
                expected,
                "{access:?}"
            );
            // Past the cap both stop, above it.
            let capped = deep_size(view.as_ref(), expected / 2);
            assert!(capped > expected / 2 && capped <= expected, "{access:?}");
        }
    }
}
