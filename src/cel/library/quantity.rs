//! Kubernetes CEL library: quantity (`k8s.io/apiserver/pkg/cel/library/quantity.go`).
//!
//! `quantity(string)`, `isQuantity(string)`, `sign(Quantity)` and the members
//! `isGreaterThan`, `isLessThan`, `compareTo`, `asApproximateFloat`,
//! `asInteger`, `isInteger`, `add` and `sub` (a quantity or an int), on values
//! of type `kubernetes.Quantity`.
//!
//! Upstream's values are `apiservercel.Quantity{*resource.Quantity}`, and a few
//! of its behaviours follow from that shape, which this module keeps:
//!
//! * `quantity()` returns the struct, `add` and `sub` a pointer to one, and
//!   equality only accepts the struct on its right-hand side: `q.add(x) ==
//!   quantity('1')` compares values, `quantity('1') == q.add(x)` is `false`.
//! * The functions work on the `*resource.Quantity` itself: a comparison
//!   with a quantity held as `inf.Dec` moves the receiver to that form (after
//!   which `isInteger()` is `false`), and `add`/`sub` on a receiver held as
//!   `inf.Dec` change the receiver's value too, since the copy shares its
//!   `*inf.Dec`. Values are shared the way Go shares the pointer.

#[cfg(test)]
#[path = "quantity_ip_semver_tests.rs"]
mod table_tests;

use crate::quantity::amount::{self, AmountError, Format, GoQuantity};
use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::cmp::Ordering;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// `kubernetes.Quantity`.
pub static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// A `kubernetes.Quantity` value.
#[derive(Clone)]
pub struct Quantity {
    inner: Arc<Mutex<GoQuantity>>,
    /// Whether upstream holds this value as `*apiservercel.Quantity` (the
    /// results of `add` and `sub`) rather than `apiservercel.Quantity`.
    pointer: bool,
}

impl Quantity {
    fn new(q: GoQuantity, pointer: bool) -> Quantity {
        Quantity {
            inner: Arc::new(Mutex::new(q)),
            pointer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, GoQuantity> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A Go struct copy of the quantity (sharing its `*inf.Dec`).
    fn snapshot(&self) -> GoQuantity {
        self.lock().clone()
    }
}

impl fmt::Display for Quantity {
    /// The canonical string form (`resource.Quantity.String()`, which caches
    /// it), as upstream converts a quantity to a string outside CEL (JSON,
    /// `ConvertToNative`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.lock().string();
        f.write_str(&s)
    }
}

impl fmt::Debug for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quantity({})", self.lock().peek_string())
    }
}

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    /// `apiservercel.Quantity.Equal`: `other` must be the struct form.
    fn equals(&self, other: &dyn Val) -> bool {
        let Some(other) = other.downcast_ref::<Quantity>() else {
            return false;
        };
        if other.pointer {
            return false;
        }
        // `Quantity.Equal` has a value receiver: both sides are copies.
        let mut q = self.snapshot();
        let v = other.snapshot();
        q.cmp(&v) == Ok(Ordering::Equal)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

fn error(function: &str, e: AmountError) -> ExecutionError {
    ExecutionError::function_error(function, e.message())
}

fn quantity(s: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    amount::parse_quantity(s.inner())
        .map(|q| Quantity::new(q, false))
        .map_err(|e| error("quantity", e))
}

fn is_quantity(s: &CelString<'_>) -> CelBool {
    CelBool::from(amount::parse_quantity(s.inner()).is_ok())
}

fn sign(q: &Quantity) -> CelInt {
    CelInt::from(q.lock().sign() as i64)
}

/// `q.Cmp(*other)` on the receiver itself.
fn compare(function: &str, q: &Quantity, other: &Quantity) -> Result<Ordering, ExecutionError> {
    let y = other.snapshot();
    let result = q.lock().cmp(&y);
    result.map_err(|e| error(function, e))
}

fn is_greater_than(q: &Quantity, other: &Quantity) -> Result<CelBool, ExecutionError> {
    compare("isGreaterThan", q, other).map(|o| CelBool::from(o == Ordering::Greater))
}

fn is_less_than(q: &Quantity, other: &Quantity) -> Result<CelBool, ExecutionError> {
    compare("isLessThan", q, other).map(|o| CelBool::from(o == Ordering::Less))
}

fn compare_to(q: &Quantity, other: &Quantity) -> Result<CelInt, ExecutionError> {
    compare("compareTo", q, other).map(|o| CelInt::from(o as i64))
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    CelDouble::from(q.lock().as_approximate_float64())
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    q.lock().as_int64().map(CelInt::from).ok_or_else(|| {
        ExecutionError::function_error("asInteger", "cannot convert value to integer")
    })
}

fn is_integer(q: &Quantity) -> CelBool {
    CelBool::from(q.lock().as_int64().is_some())
}

/// `copy := *q; copy.Add(y)` (or `Sub`), returned as a pointer.
fn arithmetic(
    function: &str,
    q: &Quantity,
    y: GoQuantity,
    subtract: bool,
) -> Result<Quantity, ExecutionError> {
    let mut copy = q.snapshot();
    let result = if subtract { copy.sub(&y) } else { copy.add(&y) };
    result.map_err(|e| error(function, e))?;
    Ok(Quantity::new(copy, true))
}

fn add(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    arithmetic("add", q, other.snapshot(), false)
}

fn add_int(q: &Quantity, other: &CelInt) -> Result<Quantity, ExecutionError> {
    let y = GoQuantity::new_int(*other.inner(), Format::DecimalExponent);
    arithmetic("add", q, y, false)
}

fn sub(q: &Quantity, other: &Quantity) -> Result<Quantity, ExecutionError> {
    arithmetic("sub", q, other.snapshot(), true)
}

fn sub_int(q: &Quantity, other: &CelInt) -> Result<Quantity, ExecutionError> {
    let y = GoQuantity::new_int(*other.inner(), Format::DecimalExponent);
    arithmetic("sub", q, y, true)
}

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(QUANTITY_TYPE.to_owned())?;
    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>,
        name = "quantity", id = "string_to_quantity")?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool,
        name = "isQuantity", id = "is_quantity_string")?;
    // Upstream declares `sign` as a global function only.
    cel::add_overload!(env, fn sign: (Quantity) -> CelInt,
        name = "sign", id = "quantity_sign")?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> Result<CelBool>,
        name = "isGreaterThan", id = "quantity_is_greater_than")?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> Result<CelBool>,
        name = "isLessThan", id = "quantity_is_less_than")?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> Result<CelInt>,
        name = "compareTo", id = "quantity_compare_to")?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble,
        name = "asApproximateFloat", id = "quantity_get_float")?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>,
        name = "asInteger", id = "quantity_get_int")?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool,
        name = "isInteger", id = "quantity_is_integer")?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>,
        name = "add", id = "quantity_add")?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>,
        name = "add", id = "quantity_add_int")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>,
        name = "sub", id = "quantity_sub")?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>,
        name = "sub", id = "quantity_sub_int")?;
    Ok(())
}
