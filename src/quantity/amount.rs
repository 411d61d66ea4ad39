//! A model of `k8s.io/apimachinery/pkg/api/resource.Quantity` as kube-apiserver
//! v1.36 has it: the `int64Amount` fast path, the `inf.Dec` fallback, the
//! parser, comparison, addition and subtraction, `AsInt64`,
//! `AsApproximateFloat64` and the canonical string form.
//!
//! The model follows upstream step by step, because results depend on it: a
//! quantity held as `inf.Dec` is never an integer for `AsInt64`, the float
//! conversion works on the representation, and upstream's `int32` scale
//! arithmetic wraps. Where upstream would build a number of billions of digits
//! (and never finish), this model stops with [`AmountError::TooLarge`].

use super::bigint::BigUint;
use std::cmp::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

/// The most decimal digits this model materializes in a number.
pub(crate) const MAX_DIGITS: u64 = 100_000;

/// `ErrFormatWrong`, `ErrNumeric` and `ErrSuffix` of upstream's parser.
pub(crate) const ERR_FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
pub(crate) const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
pub(crate) const ERR_SUFFIX: &str = "unable to parse quantity's suffix";
/// What upstream reports when an integer division by zero panics inside a
/// CEL function (cel-go recovers the panic).
pub(crate) const ERR_DIVIDE_BY_ZERO: &str = "internal error: runtime error: integer divide by zero";
/// Not upstream's: upstream keeps computing (for minutes, or until memory
/// runs out) where this model gives up.
pub(crate) const ERR_TOO_LARGE: &str = "quantity is too large to evaluate";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AmountError {
    FormatWrong,
    Numeric,
    Suffix,
    /// An `int64Amount` comparison divided by zero (upstream panics).
    DivideByZero,
    /// The computation needs more than [`MAX_DIGITS`] digits.
    TooLarge,
}

impl AmountError {
    pub(crate) fn message(self) -> &'static str {
        match self {
            AmountError::FormatWrong => ERR_FORMAT_WRONG,
            AmountError::Numeric => ERR_NUMERIC,
            AmountError::Suffix => ERR_SUFFIX,
            AmountError::DivideByZero => ERR_DIVIDE_BY_ZERO,
            AmountError::TooLarge => ERR_TOO_LARGE,
        }
    }
}

// ---------------------------------------------------------------------------
// inf.Dec
// ---------------------------------------------------------------------------

/// An `inf.Dec`: `(-1)^neg · mag · 10^(-scale)`. Zero is never negative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Dec {
    neg: bool,
    mag: BigUint,
    scale: i32,
}

impl Dec {
    fn new(neg: bool, mag: BigUint, scale: i32) -> Dec {
        Dec {
            neg: neg && !mag.is_zero(),
            mag,
            scale,
        }
    }

    pub(crate) fn from_i64(v: i64, scale: i32) -> Dec {
        Dec::new(v < 0, BigUint::from_u64(v.unsigned_abs()), scale)
    }

    pub(crate) fn sign(&self) -> i32 {
        if self.mag.is_zero() {
            0
        } else if self.neg {
            -1
        } else {
            1
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.mag.is_zero()
    }

    fn negated(&self) -> Dec {
        Dec::new(!self.neg, self.mag.clone(), self.scale)
    }

    /// `inf.Dec.SetString`: an optional sign, digits with at most one '.',
    /// at least one digit. `Ok(None)` if not a number; too many significant
    /// digits are refused.
    fn parse(s: &[u8]) -> Result<Option<Dec>, AmountError> {
        let (neg, body) = match s.first() {
            Some(b'-') => (true, &s[1..]),
            Some(b'+') => (false, &s[1..]),
            _ => (false, s),
        };
        let mut digits = Vec::with_capacity(body.len());
        let mut dot: Option<usize> = None;
        for &c in body {
            match c {
                b'.' if dot.is_none() => dot = Some(digits.len()),
                b'0'..=b'9' => digits.push(c),
                _ => return Ok(None),
            }
        }
        if digits.is_empty() {
            return Ok(None);
        }
        let Ok(scale) = i32::try_from(dot.map(|d| digits.len() - d).unwrap_or(0)) else {
            return Err(AmountError::TooLarge);
        };
        // Leading zeros don't change the value.
        let first = digits
            .iter()
            .position(|&d| d != b'0')
            .unwrap_or(digits.len() - 1);
        if (digits.len() - first) as u64 > MAX_DIGITS {
            return Err(AmountError::TooLarge);
        }
        let mag = BigUint::parse_decimal(&digits[first..]).ok_or(AmountError::Numeric)?;
        Ok(Some(Dec::new(neg, mag, scale)))
    }

    /// The magnitude at `new_scale >= self.scale`.
    fn mag_at(&self, new_scale: i32) -> Result<BigUint, AmountError> {
        let shift = new_scale as i64 - self.scale as i64;
        debug_assert!(shift >= 0);
        let mut m = self.mag.clone();
        if !m.is_zero() && shift > 0 {
            let (_, hi) = m.decimal_digits_bounds();
            if shift as u64 + hi as u64 > MAX_DIGITS {
                return Err(AmountError::TooLarge);
            }
            m.mul_pow10(shift as u64);
        }
        Ok(m)
    }

    /// `inf.Dec.Add` (`sub` negates `y` first): the result has the larger
    /// scale of the two.
    fn add_signed(&self, y: &Dec, negate_y: bool) -> Result<Dec, AmountError> {
        let scale = self.scale.max(y.scale);
        let a = self.mag_at(scale)?;
        let b = y.mag_at(scale)?;
        let (an, bn) = (self.neg, y.neg != negate_y && !y.mag.is_zero());
        let (neg, mag) = if an == bn {
            (an, a.add(&b))
        } else {
            match a.cmp(&b) {
                Ordering::Less => (bn, b.sub(&a)),
                _ => (an, a.sub(&b)),
            }
        };
        Ok(Dec::new(neg, mag, scale))
    }

    pub(crate) fn add(&self, y: &Dec) -> Result<Dec, AmountError> {
        self.add_signed(y, false)
    }

    pub(crate) fn sub(&self, y: &Dec) -> Result<Dec, AmountError> {
        self.add_signed(y, true)
    }

    /// `inf.Dec.Cmp`, exactly, without building numbers larger than the
    /// operands when their magnitudes already decide.
    pub(crate) fn cmp(&self, y: &Dec) -> Ordering {
        let (sx, sy) = (self.sign(), y.sign());
        if sx != sy {
            return sx.cmp(&sy);
        }
        if sx == 0 {
            return Ordering::Equal;
        }
        let m = cmp_magnitudes(&self.mag, self.scale, &y.mag, y.scale);
        if sx < 0 {
            m.reverse()
        } else {
            m
        }
    }

    /// `inf.Dec.Round(x, s, inf.RoundUp)`: the value at scale `s`, rounded
    /// away from zero.
    fn round_up(&self, s: i32) -> Result<Dec, AmountError> {
        let shift = s as i64 - self.scale as i64;
        if shift >= 0 {
            return Ok(Dec::new(self.neg, self.mag_at(s)?, s));
        }
        let k = (-shift) as u64;
        let (_, hi) = self.mag.decimal_digits_bounds();
        let mut mag = self.mag.clone();
        let inexact = if (hi as u64) < k {
            // Fewer digits than the divisor has zeros: the quotient is 0.
            let nonzero = !mag.is_zero();
            mag = BigUint::zero();
            nonzero
        } else {
            mag.div_pow10(k)
        };
        if inexact {
            mag.add_small(1);
        }
        Ok(Dec::new(self.neg, mag, s))
    }

    /// `removeBigIntFactors` on the unscaled value, then the exponent made a
    /// multiple of 3, as `infDecAmount.AsCanonicalBytes`.
    fn as_canonical_bytes(&self) -> (String, i32) {
        let mut amount = self.mag.clone();
        let times = amount.remove_factors_of_ten();
        let mut exponent = self.scale.wrapping_neg().wrapping_add(times as i32);
        while exponent % 3 != 0 {
            amount.mul_small(10);
            exponent = exponent.wrapping_sub(1);
        }
        (signed(self.neg, amount.to_decimal_string()), exponent)
    }

    /// `infDecAmount.AsCanonicalBase1024Bytes`.
    fn as_canonical_base1024_bytes(&self) -> Result<(String, i32), AmountError> {
        let rounded = self.round_up(0)?;
        let mut amount = rounded.mag.clone();
        // 1024 = 2^10: count the factors from the trailing zero bits.
        let times = if amount.is_zero() {
            0
        } else {
            amount.trailing_zeros() / 10
        };
        amount.shr(times * 10);
        Ok((
            signed(rounded.neg, amount.to_decimal_string()),
            times as i32,
        ))
    }

    fn as_approximate_float64(&self) -> f64 {
        let base = if self.neg {
            -self.mag.to_f64()
        } else {
            self.mag.to_f64()
        };
        apply_pow10(base, self.scale.wrapping_neg() as i64)
    }
}

fn signed(neg: bool, digits: String) -> String {
    if neg {
        format!("-{digits}")
    } else {
        digits
    }
}

/// Compares `a·10^(-sa)` with `b·10^(-sb)`.
fn cmp_magnitudes(a: &BigUint, sa: i32, b: &BigUint, sb: i32) -> Ordering {
    match (a.is_zero(), b.is_zero()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    let (alo, ahi) = a.decimal_digits_bounds();
    let (blo, bhi) = b.decimal_digits_bounds();
    // 10^(lo-1-scale) <= value < 10^(hi-scale)
    let (a_min, a_max) = (alo - 1 - sa as i64, ahi - sa as i64);
    let (b_min, b_max) = (blo - 1 - sb as i64, bhi - sb as i64);
    if a_min >= b_max {
        return Ordering::Greater;
    }
    if b_min >= a_max {
        return Ordering::Less;
    }
    // The ranges overlap, so the scales differ by about the digit counts at
    // most: aligning them stays within the operands' size.
    match sa.cmp(&sb) {
        Ordering::Equal => a.cmp(b),
        Ordering::Greater => {
            let mut bb = b.clone();
            bb.mul_pow10((sa as i64 - sb as i64) as u64);
            a.cmp(&bb)
        }
        Ordering::Less => {
            let mut aa = a.clone();
            aa.mul_pow10((sb as i64 - sa as i64) as u64);
            aa.cmp(b)
        }
    }
}

/// `base * math.Pow10(exponent)`, unless the exponent is 0.
fn apply_pow10(base: f64, exponent: i64) -> f64 {
    if exponent == 0 {
        base
    } else {
        base * go_pow10(exponent)
    }
}

/// Go's `math.Pow10`.
fn go_pow10(n: i64) -> f64 {
    const POW10TAB: [f64; 32] = [
        1e00, 1e01, 1e02, 1e03, 1e04, 1e05, 1e06, 1e07, 1e08, 1e09, 1e10, 1e11, 1e12, 1e13, 1e14,
        1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29,
        1e30, 1e31,
    ];
    const POW10POSTAB32: [f64; 10] = [
        1e00, 1e32, 1e64, 1e96, 1e128, 1e160, 1e192, 1e224, 1e256, 1e288,
    ];
    const POW10NEGTAB32: [f64; 11] = [
        1e-00, 1e-32, 1e-64, 1e-96, 1e-128, 1e-160, 1e-192, 1e-224, 1e-256, 1e-288, 1e-320,
    ];
    if (0..=308).contains(&n) {
        return POW10POSTAB32[(n / 32) as usize] * POW10TAB[(n % 32) as usize];
    }
    if (-323..=0).contains(&n) {
        let m = -n;
        return POW10NEGTAB32[(m / 32) as usize] / POW10TAB[(m % 32) as usize];
    }
    if n > 0 {
        f64::INFINITY
    } else {
        0.0
    }
}

// ---------------------------------------------------------------------------
// int64Amount and the int64 helpers of math.go
// ---------------------------------------------------------------------------

const MOST_NEGATIVE: i64 = i64::MIN;

fn int64_add(a: i64, b: i64) -> (i64, bool) {
    let c = a.wrapping_add(b);
    if a > 0 && b > 0 {
        if c < 0 {
            return (0, false);
        }
    } else if a < 0 && b < 0 {
        if c > 0 {
            return (0, false);
        }
        if a == MOST_NEGATIVE && b == MOST_NEGATIVE {
            return (0, false);
        }
    }
    (c, true)
}

fn int64_multiply(a: i64, b: i64) -> (i64, bool) {
    if a == 0 || b == 0 || a == 1 || b == 1 {
        return (a.wrapping_mul(b), true);
    }
    if a == MOST_NEGATIVE || b == MOST_NEGATIVE {
        return (0, false);
    }
    let c = a.wrapping_mul(b);
    (c, c.wrapping_div(b) == a)
}

/// `int64MultiplyScale` and its constant-factor variants, which share its
/// logic for a factor greater than one.
fn int64_multiply_scale(a: i64, b: i64) -> (i64, bool) {
    if a == 0 || a == 1 {
        return (a.wrapping_mul(b), true);
    }
    if a == MOST_NEGATIVE && b != 1 {
        return (0, false);
    }
    let c = a.wrapping_mul(b);
    (c, c.wrapping_div(b) == a)
}

fn positive_scale_int64(base: i64, scale: i32) -> (i64, bool) {
    match scale {
        0 => (base, true),
        1 => int64_multiply_scale(base, 10),
        2 => int64_multiply_scale(base, 100),
        3 => int64_multiply_scale(base, 1000),
        6 => int64_multiply_scale(base, 1_000_000),
        9 => int64_multiply_scale(base, 1_000_000_000),
        _ => {
            let mut value = base;
            let mut i = 0i32;
            // `0·10` stays 0: upstream loops `scale` times for nothing.
            while i < scale && value != 0 {
                let (v, ok) = int64_multiply_scale(value, 10);
                if !ok {
                    return (0, false);
                }
                value = v;
                i += 1;
            }
            (value, true)
        }
    }
}

/// Divides by 10^scale rounding away from zero; `false` if inexact.
fn negative_scale_int64(base: i64, scale: i32) -> (i64, bool) {
    if scale == 0 {
        return (base, true);
    }
    let mut value = base;
    let mut fraction = false;
    let mut i = 0i32;
    while i < scale {
        if !fraction && value % 10 != 0 {
            fraction = true;
        }
        value /= 10;
        if value == 0 {
            if fraction {
                return (if base > 0 { 1 } else { -1 }, false);
            }
            return (0, true);
        }
        i += 1;
    }
    if fraction {
        value += if base > 0 { 1 } else { -1 };
    }
    (value, !fraction)
}

fn pow10_int64(b: i32) -> i64 {
    if (0..=18).contains(&b) {
        10i64.pow(b as u32)
    } else {
        0
    }
}

/// `divideByScaleInt64`; upstream divides by zero (and panics) for a
/// negative scale, which a wrapped scale difference produces.
fn divide_by_scale_int64(base: i64, scale: i32) -> Result<(i64, i64, bool), AmountError> {
    if scale == 0 {
        return Ok((base, 0, true));
    }
    if scale >= 18 {
        return Ok((0, base, false));
    }
    let divisor = pow10_int64(scale);
    if divisor == 0 {
        return Err(AmountError::DivideByZero);
    }
    Ok((base / divisor, base % divisor, true))
}

fn remove_int64_factors(value: i64, base: i64) -> (i64, i32) {
    let mut times = 0;
    let mut result = value;
    let negative = result < 0;
    if negative {
        result = result.wrapping_neg();
    }
    while result >= base && result % base == 0 {
        times += 1;
        result /= base;
    }
    if negative {
        result = result.wrapping_neg();
    }
    (result, times)
}

/// `value · 10^scale`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Int64Amount {
    pub(crate) value: i64,
    pub(crate) scale: i32,
}

impl Int64Amount {
    fn sign(&self) -> i32 {
        self.value.signum() as i32
    }

    fn as_int64(&self) -> (i64, bool) {
        if self.scale == 0 {
            return (self.value, true);
        }
        if self.scale < 0 {
            return (0, false);
        }
        positive_scale_int64(self.value, self.scale)
    }

    fn as_scaled_int64(&self, scale: i32) -> (i64, bool) {
        if self.scale < scale {
            let (r, _) = negative_scale_int64(self.value, scale.wrapping_sub(self.scale));
            return (r, true);
        }
        positive_scale_int64(self.value, self.scale.wrapping_sub(scale))
    }

    fn as_dec(&self) -> Dec {
        Dec::from_i64(self.value, self.scale.wrapping_neg())
    }

    fn cmp(&self, b: &Int64Amount) -> Result<Ordering, AmountError> {
        let mut a = *self;
        let mut b = *b;
        match a.scale.cmp(&b.scale) {
            Ordering::Equal => {}
            Ordering::Greater => {
                let (result, remainder, exact) =
                    divide_by_scale_int64(b.value, a.scale.wrapping_sub(b.scale))?;
                if !exact {
                    return Ok(a.as_dec().cmp(&b.as_dec()));
                }
                if result == a.value {
                    return Ok(0.cmp(&remainder));
                }
                b.value = result;
            }
            Ordering::Less => {
                let (result, remainder, exact) =
                    divide_by_scale_int64(a.value, b.scale.wrapping_sub(a.scale))?;
                if !exact {
                    return Ok(a.as_dec().cmp(&b.as_dec()));
                }
                if result == b.value {
                    return Ok(remainder.cmp(&0));
                }
                a.value = result;
            }
        }
        Ok(a.value.cmp(&b.value))
    }

    /// Adds `b`; `false`, leaving `self` unchanged, on overflow.
    fn add(&mut self, b: Int64Amount) -> bool {
        if b.value == 0 {
            return true;
        }
        if self.value == 0 {
            *self = b;
            return true;
        }
        match self.scale.cmp(&b.scale) {
            Ordering::Equal => match int64_add(self.value, b.value) {
                (c, true) => self.value = c,
                _ => return false,
            },
            Ordering::Greater => {
                let (c, ok) = positive_scale_int64(self.value, self.scale.wrapping_sub(b.scale));
                if !ok {
                    return false;
                }
                let (c, ok) = int64_add(c, b.value);
                if !ok {
                    return false;
                }
                self.scale = b.scale;
                self.value = c;
            }
            Ordering::Less => {
                let (c, ok) = positive_scale_int64(b.value, b.scale.wrapping_sub(self.scale));
                if !ok {
                    return false;
                }
                let (c, ok) = int64_add(self.value, c);
                if !ok {
                    return false;
                }
                self.value = c;
            }
        }
        true
    }

    fn sub(&mut self, b: Int64Amount) -> bool {
        self.add(Int64Amount {
            value: b.value.wrapping_neg(),
            scale: b.scale,
        })
    }

    fn as_scale(&self, scale: i32) -> (Int64Amount, bool) {
        if self.scale >= scale {
            return (*self, true);
        }
        let (value, exact) = negative_scale_int64(self.value, scale.wrapping_sub(self.scale));
        (Int64Amount { value, scale }, exact)
    }

    fn as_canonical_bytes(&self) -> (String, i32) {
        let (mut amount, times) = remove_int64_factors(self.value, 10);
        let mut exponent = self.scale.wrapping_add(times);
        match exponent % 3 {
            1 | -2 => match int64_multiply_scale(amount, 10) {
                (v, true) => {
                    amount = v;
                    exponent = exponent.wrapping_sub(1);
                }
                _ => return self.as_dec().as_canonical_bytes(),
            },
            2 | -1 => match int64_multiply_scale(amount, 100) {
                (v, true) => {
                    amount = v;
                    exponent = exponent.wrapping_sub(2);
                }
                _ => return self.as_dec().as_canonical_bytes(),
            },
            _ => {}
        }
        (amount.to_string(), exponent)
    }

    fn as_canonical_base1024_bytes(&self) -> Result<(String, i32), AmountError> {
        let (value, ok) = self.as_scaled_int64(0);
        if !ok {
            return self.as_dec().as_canonical_base1024_bytes();
        }
        let (amount, exponent) = remove_int64_factors(value, 1024);
        Ok((amount.to_string(), exponent))
    }
}

// ---------------------------------------------------------------------------
// Quantity
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    DecimalExponent,
    BinarySI,
    DecimalSI,
}

/// The `*inf.Dec` of a quantity: shallow copies of a `Quantity` share it, so
/// changing it through one copy changes the others, as upstream.
pub(crate) type SharedDec = Arc<Mutex<Dec>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A `resource.Quantity` value. `Clone` is Go's struct copy: the `inf.Dec`
/// pointer is shared.
#[derive(Clone, Debug)]
pub(crate) struct GoQuantity {
    pub(crate) i: Int64Amount,
    pub(crate) d: Option<SharedDec>,
    /// The cached string form (`Quantity.s`), empty if not computed.
    pub(crate) s: String,
    pub(crate) format: Format,
}

impl GoQuantity {
    /// `resource.NewQuantity(value, format)`.
    pub(crate) fn new_int(value: i64, format: Format) -> GoQuantity {
        GoQuantity {
            i: Int64Amount { value, scale: 0 },
            d: None,
            s: String::new(),
            format,
        }
    }

    fn dec_value(&self) -> Option<Dec> {
        self.d.as_ref().map(|d| lock(d).clone())
    }

    pub(crate) fn is_zero(&self) -> bool {
        match &self.d {
            Some(d) => lock(d).is_zero(),
            None => self.i.value == 0,
        }
    }

    pub(crate) fn sign(&self) -> i32 {
        match &self.d {
            Some(d) => lock(d).sign(),
            None => self.i.sign(),
        }
    }

    /// `AsInt64`: only a quantity on the int64 path can be an int64.
    pub(crate) fn as_int64(&self) -> Option<i64> {
        if self.d.is_some() {
            return None;
        }
        match self.i.as_int64() {
            (v, true) => Some(v),
            _ => None,
        }
    }

    pub(crate) fn as_approximate_float64(&self) -> f64 {
        match self.dec_value() {
            Some(d) => d.as_approximate_float64(),
            None => apply_pow10(self.i.value as f64, self.i.scale as i64),
        }
    }

    /// `ToDec`: moves the value to the `inf.Dec` form, in place.
    fn promote_to_dec(&mut self) {
        if self.d.is_none() {
            self.d = Some(Arc::new(Mutex::new(self.i.as_dec())));
            self.i = Int64Amount::default();
        }
    }

    /// `AsDec` on a copy: the value as an `inf.Dec`.
    fn as_dec_copy(&self) -> Dec {
        self.dec_value().unwrap_or_else(|| self.i.as_dec())
    }

    /// `Cmp(y)`, where `y` is a copy. Like upstream, compares in the
    /// `inf.Dec` form if either side has it, converting `self` to that form.
    pub(crate) fn cmp(&mut self, y: &GoQuantity) -> Result<Ordering, AmountError> {
        if self.d.is_none() && y.d.is_none() {
            return self.i.cmp(&y.i);
        }
        let yd = y.as_dec_copy();
        self.promote_to_dec();
        let xd = self.dec_value().unwrap_or_else(|| Dec::from_i64(0, 0));
        Ok(xd.cmp(&yd))
    }

    /// `CmpInt64(y)`.
    fn cmp_int64(&self, y: i64) -> Ordering {
        match self.dec_value() {
            Some(d) => d.cmp(&Dec::from_i64(y, 0)),
            None => self
                .i
                .cmp(&Int64Amount { value: y, scale: 0 })
                .unwrap_or(Ordering::Equal),
        }
    }

    /// Replaces the shared `inf.Dec` with `f(value)`.
    fn update_dec(
        &mut self,
        f: impl FnOnce(&Dec) -> Result<Dec, AmountError>,
    ) -> Result<(), AmountError> {
        self.promote_to_dec();
        if let Some(d) = &self.d {
            let mut guard = lock(d);
            let next = f(&guard)?;
            *guard = next;
        }
        Ok(())
    }

    /// `Add(y)`, in place.
    pub(crate) fn add(&mut self, y: &GoQuantity) -> Result<(), AmountError> {
        self.s.clear();
        if self.d.is_none() && y.d.is_none() {
            if self.i.value == 0 {
                self.format = y.format;
            }
            if self.i.add(y.i) {
                return Ok(());
            }
        } else if self.is_zero() {
            self.format = y.format;
        }
        let yd = y.as_dec_copy();
        self.update_dec(|x| x.add(&yd))
    }

    /// `Sub(y)`, in place.
    pub(crate) fn sub(&mut self, y: &GoQuantity) -> Result<(), AmountError> {
        self.s.clear();
        if self.is_zero() {
            self.format = y.format;
        }
        if self.d.is_none() && y.d.is_none() && self.i.sub(y.i) {
            return Ok(());
        }
        let yd = y.as_dec_copy();
        self.update_dec(|x| x.sub(&yd))
    }

    /// `String()`: the canonical form, cached.
    pub(crate) fn string(&mut self) -> String {
        if self.s.is_empty() {
            self.s = self.canonicalize();
        }
        self.s.clone()
    }

    /// The string form without caching it.
    pub(crate) fn peek_string(&self) -> String {
        if self.s.is_empty() {
            self.canonicalize()
        } else {
            self.s.clone()
        }
    }

    /// `CanonicalizeBytes`, number and suffix joined.
    fn canonicalize(&self) -> String {
        if self.is_zero() {
            return "0".to_string();
        }
        let mut format = self.format;
        if format == Format::BinarySI {
            if self.cmp_int64(-1024) == Ordering::Greater && self.cmp_int64(1024) == Ordering::Less
            {
                format = Format::DecimalSI;
            } else {
                let exact = match self.dec_value() {
                    Some(d) => d.round_up(0).map(|r| r.cmp(&d) == Ordering::Equal),
                    None => Ok(self.i.as_scale(0).1),
                };
                if exact != Ok(true) {
                    format = Format::DecimalSI;
                }
            }
        }
        if format == Format::BinarySI {
            let rounded = match self.dec_value() {
                Some(d) => d.as_canonical_base1024_bytes(),
                None => self.i.as_scale(0).0.as_canonical_base1024_bytes(),
            };
            if let Ok((number, exponent)) = rounded {
                let suffix = construct_suffix(2, exponent.wrapping_mul(10), format);
                return number + suffix.as_deref().unwrap_or("");
            }
            // Too large to round: shown in decimal form instead.
            format = Format::DecimalSI;
        }
        let (number, exponent) = match self.dec_value() {
            Some(d) => d.as_canonical_bytes(),
            None => self.i.as_canonical_bytes(),
        };
        let suffix = construct_suffix(10, exponent, format);
        number + suffix.as_deref().unwrap_or("")
    }
}

/// `quantitySuffixer.constructBytes`: `None` when no suffix exists, and the
/// number is then printed without one (as upstream does).
fn construct_suffix(base: i32, exponent: i32, format: Format) -> Option<String> {
    match format {
        Format::DecimalSI => {
            let s = match (base, exponent) {
                (10, -9) => "n",
                (10, -6) => "u",
                (10, -3) => "m",
                (10, 0) | (2, 0) => "",
                (10, 3) => "k",
                (10, 6) => "M",
                (10, 9) => "G",
                (10, 12) => "T",
                (10, 15) => "P",
                (10, 18) => "E",
                _ => return None,
            };
            Some(s.to_string())
        }
        Format::BinarySI => {
            let s = match (base, exponent) {
                (2, 10) => "Ki",
                (2, 20) => "Mi",
                (2, 30) => "Gi",
                (2, 40) => "Ti",
                (2, 50) => "Pi",
                (2, 60) => "Ei",
                _ => return None,
            };
            Some(s.to_string())
        }
        Format::DecimalExponent => {
            if base != 10 {
                None
            } else if exponent == 0 {
                Some(String::new())
            } else {
                Some(format!("e{exponent}"))
            }
        }
    }
}

/// `quantitySuffixer.interpret`: base, exponent and format of a suffix.
fn interpret_suffix(s: &[u8]) -> Option<(i32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSI));
    let bin = |e| Some((2, e, Format::BinarySI));
    match s {
        b"" => dec(0),
        b"n" => dec(-9),
        b"u" => dec(-6),
        b"m" => dec(-3),
        b"k" => dec(3),
        b"M" => dec(6),
        b"G" => dec(9),
        b"T" => dec(12),
        b"P" => dec(15),
        b"E" => dec(18),
        b"Ki" => bin(10),
        b"Mi" => bin(20),
        b"Gi" => bin(30),
        b"Ti" => bin(40),
        b"Pi" => bin(50),
        b"Ei" => bin(60),
        _ if s.len() > 1 && (s[0] == b'e' || s[0] == b'E') => {
            let parsed = go_parse_int64(&s[1..])?;
            // Upstream narrows with int32(parsed), which wraps.
            Some((10, parsed as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// `strconv.ParseInt(s, 10, 64)`: an optional sign, then digits.
fn go_parse_int64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: i128 = 0;
    for d in digits {
        v = v * 10 + (d - b'0') as i128;
        if v > i64::MAX as i128 + 1 {
            return None;
        }
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).ok()
}

struct Scanned<'a> {
    positive: bool,
    value: &'a [u8],
    num: &'a [u8],
    denom: &'a [u8],
    suffix: &'a [u8],
}

/// `parseQuantityString`.
fn parse_quantity_string(s: &[u8]) -> Result<Scanned<'_>, AmountError> {
    let end = s.len();
    let mut out = Scanned {
        positive: true,
        value: &[],
        num: &[],
        denom: &[],
        suffix: &[],
    };
    let mut pos = 0;
    if pos < end {
        match s[0] {
            b'-' => {
                out.positive = false;
                pos += 1;
            }
            b'+' => pos += 1,
            _ => {}
        }
    }
    // leading zeros
    let mut i = pos;
    loop {
        if i >= end {
            out.num = b"0";
            out.value = b"0";
            return Ok(out);
        }
        if s[i] == b'0' {
            pos += 1;
        } else {
            break;
        }
        i += 1;
    }
    // numerator
    let mut i = pos;
    loop {
        if i >= end {
            out.num = &s[pos..end];
            out.value = &s[..end];
            return Ok(out);
        }
        if !s[i].is_ascii_digit() {
            out.num = &s[pos..i];
            pos = i;
            break;
        }
        i += 1;
    }
    if out.num.is_empty() {
        out.num = b"0";
    }
    // denominator
    if pos < end && s[pos] == b'.' {
        pos += 1;
        let mut i = pos;
        loop {
            if i >= end {
                out.denom = &s[pos..end];
                out.value = &s[..end];
                return Ok(out);
            }
            if !s[i].is_ascii_digit() {
                out.denom = &s[pos..i];
                pos = i;
                break;
            }
            i += 1;
        }
    }
    out.value = &s[..pos];
    // suffix: letters, an optional sign, digits
    let suffix_start = pos;
    let mut i = pos;
    loop {
        if i >= end {
            out.suffix = &s[suffix_start..end];
            return Ok(out);
        }
        if !b"eEinumkKMGTP".contains(&s[i]) {
            pos = i;
            break;
        }
        i += 1;
    }
    if pos < end && (s[pos] == b'-' || s[pos] == b'+') {
        pos += 1;
    }
    let mut i = pos;
    loop {
        if i >= end {
            out.suffix = &s[suffix_start..end];
            return Ok(out);
        }
        if !s[i].is_ascii_digit() {
            break;
        }
        i += 1;
    }
    Err(AmountError::FormatWrong)
}

/// `resource.ParseQuantity`.
pub(crate) fn parse_quantity(str: &str) -> Result<GoQuantity, AmountError> {
    if str.is_empty() {
        return Err(AmountError::FormatWrong);
    }
    if str == "0" {
        return Ok(GoQuantity {
            i: Int64Amount::default(),
            d: None,
            s: str.to_string(),
            format: Format::DecimalSI,
        });
    }
    let p = parse_quantity_string(str.as_bytes())?;
    let (base, exponent, mut format) = interpret_suffix(p.suffix).ok_or(AmountError::Suffix)?;

    let (precision, mut scale, mantissa): (i64, i32, i64) = match format {
        Format::DecimalExponent | Format::DecimalSI => {
            (18 - (p.num.len() + p.denom.len()) as i64, exponent, 1)
        }
        Format::BinarySI if exponent >= 0 && p.denom.is_empty() => {
            // 1Mi (2^20) has ~6 digits of decimal precision
            let digits = ((exponent as f32) * 3.0 / 10.0) as i64;
            (15 - p.num.len() as i64 - digits - 1, 0, 1i64 << exponent)
        }
        Format::BinarySI => (-1, 0, 1),
    };

    if precision >= 0 {
        scale = scale.wrapping_sub(p.denom.len() as i32);
        if scale >= -9 {
            let shifted: Vec<u8> = [p.num, p.denom].concat();
            let value = go_parse_int64(&shifted).ok_or(AmountError::Numeric)?;
            if let (result, true) = int64_multiply(value, mantissa) {
                let result = if p.positive {
                    result
                } else {
                    result.wrapping_neg()
                };
                let canonical = match format {
                    Format::BinarySI => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with(b"000") && shifted[0] != b'0',
                };
                return Ok(GoQuantity {
                    i: Int64Amount {
                        value: result,
                        scale,
                    },
                    d: None,
                    s: if canonical {
                        str.to_string()
                    } else {
                        String::new()
                    },
                    format,
                });
            }
        }
    }

    let mut amount = Dec::parse(p.value)?.ok_or(AmountError::Numeric)?;
    if base == 10 {
        amount.scale = amount.scale.wrapping_add(exponent.wrapping_neg());
    } else if base == 2 {
        amount.mag.shl(exponent as u32);
    }
    let sign = amount.sign();
    if sign == -1 {
        amount = amount.negated();
    }
    if !amount.is_zero() {
        amount = amount.round_up(9)?;
    }
    if format == Format::BinarySI {
        let max_allowed = Dec::from_i64(i64::MAX, 0);
        if amount.cmp(&max_allowed) == Ordering::Greater {
            amount = max_allowed;
        }
        if amount.cmp(&Dec::from_i64(1, 0)) == Ordering::Less && amount.sign() > 0 {
            format = Format::DecimalSI;
        }
    }
    if sign == -1 {
        amount = amount.negated();
    }
    Ok(GoQuantity {
        i: Int64Amount::default(),
        d: Some(Arc::new(Mutex::new(amount))),
        s: String::new(),
        format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> GoQuantity {
        parse_quantity(s).unwrap()
    }

    #[test]
    fn representation_after_parsing() {
        // int64 fast path
        assert_eq!(
            q("12Mi").i,
            Int64Amount {
                value: 12 << 20,
                scale: 0
            }
        );
        assert!(q("12Mi").d.is_none());
        assert_eq!(
            q("1.5").i,
            Int64Amount {
                value: 15,
                scale: -1
            }
        );
        // inf.Dec path, rounded to nano
        let d = q("1.5Gi").dec_value().unwrap();
        assert_eq!(d.scale, 9);
        assert_eq!(d.mag.to_decimal_string(), "1610612736000000000");
        assert!(q("9999999999999999999999999999999999999G").d.is_some());
    }

    /// The value and format `ParseQuantity` gives, against
    /// apimachinery/pkg/api/resource/quantity_test.go TestQuantityParse
    /// (`decQuantity(i, exponent, format)`).
    #[test]
    fn parsed_values() {
        use Format::*;
        for (input, i, exponent, format) in [
            ("0", 0, 0, DecimalSI),
            ("0n", 0, 0, DecimalSI),
            ("0Ki", 0, 0, BinarySI),
            ("0Ti", 0, 0, BinarySI),
            ("1", 1, 0, DecimalSI),
            ("1Ki", 1024, 0, BinarySI),
            (
                "3Ei",
                3 * 1024 * 1024 * 1024 * 1024 * 1024 * 1024,
                0,
                BinarySI,
            ),
            ("100Ti", 100 * 1024 * 1024 * 1024 * 1024, 0, BinarySI),
            ("5n", 5, -9, DecimalSI),
            ("50k", 5, 4, DecimalSI),
            ("300T", 3, 14, DecimalSI),
            ("1E", 1, 18, DecimalSI),
            ("1E-3", 1, -3, DecimalExponent),
            ("1E18", 1, 18, DecimalExponent),
            ("100.035k", 100035, 0, DecimalSI),
            ("0.0005k", 5, -1, DecimalSI),
            ("0.00500", 5, -3, DecimalSI),
            ("0.5e-2", 5, -3, DecimalExponent),
            ("10.035M", 10035, 3, DecimalSI),
            ("1.3E+6", 13, 5, DecimalExponent),
            ("1.7E18", 17, 17, DecimalExponent),
            ("6.987654321G", 6987654321, 0, DecimalSI),
            ("1.01E", 101, 16, DecimalSI),
            ("3.001n", 4, -9, DecimalSI),
            ("1.1E-9", 2, -9, DecimalExponent),
            ("0.0000000001", 1, -9, DecimalSI),
            ("0.00000000050", 1, -9, DecimalSI),
            ("0.9n", 1, -9, DecimalSI),
            ("0.00000012345", 124, -9, DecimalSI),
            ("9Ei", i64::MAX, 0, BinarySI),
            ("9223372036854775807Ki", i64::MAX, 0, BinarySI),
            ("12E", 12, 18, DecimalSI),
            ("100.035Ki", 10243584, -2, BinarySI),
            ("0.05Gi", 536870912, -1, BinarySI),
            ("0.025Ti", 274877906944, -1, BinarySI),
            ("0.000000000001Ki", 2, -9, DecimalSI),
            (".001", 1, -3, DecimalSI),
            (".0001k", 100, -3, DecimalSI),
            ("1.", 1, 0, DecimalSI),
            ("1.G", 1, 9, DecimalSI),
        ] {
            for (prefix, sign) in [("", 1), ("-", -1), ("+", 1)] {
                let mut got = q(&format!("{prefix}{input}"));
                let want = GoQuantity {
                    i: Int64Amount::default(),
                    d: Some(Arc::new(Mutex::new(Dec::from_i64(sign * i, -exponent)))),
                    s: String::new(),
                    format,
                };
                assert_eq!(got.cmp(&want), Ok(Ordering::Equal), "{prefix}{input}");
                assert_eq!(got.format, format, "{prefix}{input}");
            }
        }
    }

    /// quantity_test.go TestQuantityParseEmit and the alternates of
    /// TestQuantityString: input → canonical string.
    #[test]
    fn canonical_strings() {
        for (input, want) in [
            ("1Ki", "1Ki"),
            ("1Mi", "1Mi"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1000M", "1G"),
            (".001Ki", "1024m"),
            (".000001Ki", "1024u"),
            (".000000001Ki", "1024n"),
            (".000000000001Ki", "2n"),
            ("307200Ki", "300Mi"),
            ("1025024Mi", "1001Gi"),
            ("1024Gi", "1Ti"),
            ("5000m", "5"),
            ("0.5", "500m"),
            ("0.001T", "1G"),
            ("1000u", "1m"),
            ("1.08", "1080m"),
            ("1080000000n", "1080m"),
            (".001e12", "1e9"),
            ("0.001e0", "1e-3"),
            ("1000e-12", "1e-9"),
            ("00", "0"),
        ] {
            assert_eq!(q(input).string(), want, "{input}");
            if want != "0" {
                assert_eq!(q(&format!("-{input}")).string(), format!("-{want}"));
            }
        }
        // Canonical input is kept as the cached string.
        for canonical in [
            "1Gi", "300Mi", "6Ki", "1001Gi", "1Ti", "5", "500m", "1G", "1m", "80m", "1080m",
            "300M", "1T", "1234567M", "1234567m", "3k", "1025", "0", "1e9", "1e-3", "1e-9",
            "80e-3", "300e6", "1e12", "1e3", "3e3", "1n", "80n", "1080n", "1u", "80u", "1080u",
        ] {
            let parsed = q(canonical);
            assert_eq!(parsed.s, canonical);
            assert_eq!(q(canonical).string(), canonical);
        }
    }

    #[test]
    fn parse_errors() {
        for (input, want) in [
            ("", AmountError::FormatWrong),
            ("1.1.M", AmountError::FormatWrong),
            ("1+1.0M", AmountError::FormatWrong),
            ("0.1mi", AmountError::Suffix),
            ("0.1am", AmountError::FormatWrong),
            ("aoeu", AmountError::FormatWrong),
            (".5i", AmountError::Suffix),
            ("1i", AmountError::Suffix),
            ("-3.01i", AmountError::Suffix),
            ("-3.01e-", AmountError::Suffix),
            (" 1", AmountError::FormatWrong),
            ("1 ", AmountError::FormatWrong),
        ] {
            assert_eq!(parse_quantity(input).err(), Some(want), "{input:?}");
        }
    }

    #[test]
    fn go_pow10_matches_go_tables() {
        assert_eq!(go_pow10(0), 1.0);
        assert_eq!(go_pow10(3), 1000.0);
        assert_eq!(go_pow10(-9), 1e-9);
        assert_eq!(go_pow10(309), f64::INFINITY);
        assert_eq!(go_pow10(-324), 0.0);
    }

    #[test]
    fn huge_exponents_do_not_hang() {
        // The int64 path keeps the exponent symbolically.
        let big = q("1e2147483647");
        assert_eq!(big.as_approximate_float64(), f64::INFINITY);
        assert_eq!(big.as_int64(), None);
        // Upstream narrows a 64-bit exponent to int32: 2^32+1 becomes 1.
        assert_eq!(q("1e4294967297").as_int64(), Some(10));
        // Below a nano, rounded up to 1n (printed in the exponent format).
        assert_eq!(q("1e-1000000").string(), "1e-9");
        // The inf.Dec path with a huge exponent is refused, not computed.
        assert_eq!(
            parse_quantity("1234567890123456789e2000000000").err(),
            Some(AmountError::TooLarge)
        );
        let mut a = q("1e2000000000");
        let b = q("1.5Ki");
        assert_eq!(a.add(&b), Err(AmountError::TooLarge));
        let mut c = q("1e2147483647");
        assert_eq!(c.cmp(&q("1n")), Err(AmountError::DivideByZero));
        let mut c = q("1e2000000000");
        assert_eq!(c.cmp(&q("1")), Ok(Ordering::Greater));
    }
}
