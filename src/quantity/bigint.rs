//! A small unsigned big integer, enough for the decimal arithmetic behind
//! `resource.Quantity` (Go's `math/big` through `gopkg.in/inf.v0`): parsing
//! and printing decimal digits, addition, subtraction, scaling by powers of
//! ten and of two, division by small factors, comparison and a correctly
//! rounded conversion to `f64`.
//!
//! Limbs are `u32`, least significant first, with no trailing zero limbs, so
//! zero is the empty vector.

use std::cmp::Ordering;

/// Largest power of ten that fits a `u32` limb multiplier.
const TEN_POW_9: u32 = 1_000_000_000;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BigUint {
    limbs: Vec<u32>,
}

impl BigUint {
    pub(crate) fn zero() -> BigUint {
        BigUint { limbs: Vec::new() }
    }

    pub(crate) fn from_u64(v: u64) -> BigUint {
        let mut limbs = vec![v as u32, (v >> 32) as u32];
        trim(&mut limbs);
        BigUint { limbs }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.limbs.is_empty()
    }

    /// The value, if it fits a `u64`.
    pub(crate) fn to_u64(&self) -> Option<u64> {
        match self.limbs.len() {
            0 => Some(0),
            1 => Some(self.limbs[0] as u64),
            2 => Some(self.limbs[0] as u64 | (self.limbs[1] as u64) << 32),
            _ => None,
        }
    }

    /// Number of significant bits (0 for zero).
    pub(crate) fn bit_len(&self) -> u64 {
        match self.limbs.last() {
            None => 0,
            Some(top) => (self.limbs.len() as u64 - 1) * 32 + (32 - top.leading_zeros() as u64),
        }
    }

    /// Bounds on the number of decimal digits, from the bit length:
    /// `lo <= digits <= hi`. Zero has no digits.
    pub(crate) fn decimal_digits_bounds(&self) -> (i64, i64) {
        let bits = self.bit_len();
        if bits == 0 {
            return (0, 0);
        }
        // 2^(bits-1) <= x < 2^bits, so digits is in
        // [floor((bits-1)·log10 2) + 1, floor(bits·log10 2) + 1]; the margin
        // covers the rounding of the logarithm.
        const LOG10_2: f64 = std::f64::consts::LOG10_2;
        let lo = (((bits - 1) as f64) * LOG10_2).floor() as i64 + 1;
        let hi = ((bits as f64) * LOG10_2).floor() as i64 + 1;
        ((lo - 1).max(1), hi + 1)
    }

    /// Parses ASCII decimal digits (no sign); `None` if empty or not digits.
    pub(crate) fn parse_decimal(digits: &[u8]) -> Option<BigUint> {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut out = BigUint::zero();
        for chunk in digits.chunks(9) {
            let mut v: u32 = 0;
            for d in chunk {
                v = v * 10 + (d - b'0') as u32;
            }
            out.mul_small(10u32.pow(chunk.len() as u32));
            out.add_small(v);
        }
        Some(out)
    }

    /// Decimal digits, `"0"` for zero.
    pub(crate) fn to_decimal_string(&self) -> String {
        if self.is_zero() {
            return "0".to_string();
        }
        let mut chunks = Vec::new();
        let mut rest = self.clone();
        while !rest.is_zero() {
            chunks.push(rest.divmod_small(TEN_POW_9));
        }
        let mut s = chunks.pop().map(|c| c.to_string()).unwrap_or_default();
        for c in chunks.iter().rev() {
            s.push_str(&format!("{c:09}"));
        }
        s
    }

    pub(crate) fn add_small(&mut self, v: u32) {
        let mut carry = v as u64;
        for limb in self.limbs.iter_mut() {
            if carry == 0 {
                return;
            }
            let s = *limb as u64 + carry;
            *limb = s as u32;
            carry = s >> 32;
        }
        if carry != 0 {
            self.limbs.push(carry as u32);
        }
    }

    pub(crate) fn mul_small(&mut self, m: u32) {
        if m == 0 {
            self.limbs.clear();
            return;
        }
        let mut carry: u64 = 0;
        for limb in self.limbs.iter_mut() {
            let p = *limb as u64 * m as u64 + carry;
            *limb = p as u32;
            carry = p >> 32;
        }
        if carry != 0 {
            self.limbs.push(carry as u32);
        }
    }

    /// Divides in place by `d` (non-zero) and returns the remainder.
    pub(crate) fn divmod_small(&mut self, d: u32) -> u32 {
        let mut rem: u64 = 0;
        for limb in self.limbs.iter_mut().rev() {
            let cur = (rem << 32) | *limb as u64;
            *limb = (cur / d as u64) as u32;
            rem = cur % d as u64;
        }
        trim(&mut self.limbs);
        rem as u32
    }

    /// The remainder of a division by `d`, without changing `self`.
    pub(crate) fn rem_small(&self, d: u32) -> u32 {
        let mut rem: u64 = 0;
        for limb in self.limbs.iter().rev() {
            rem = ((rem << 32) | *limb as u64) % d as u64;
        }
        rem as u32
    }

    /// Number of trailing zero bits (0 for zero).
    pub(crate) fn trailing_zeros(&self) -> u64 {
        match self.limbs.iter().position(|&l| l != 0) {
            None => 0,
            Some(i) => i as u64 * 32 + self.limbs[i].trailing_zeros() as u64,
        }
    }

    /// Shifts right by `n` bits, dropping the low bits.
    pub(crate) fn shr(&mut self, n: u64) {
        let words = (n / 32) as usize;
        if words >= self.limbs.len() {
            self.limbs.clear();
            return;
        }
        self.limbs.drain(..words);
        let bits = (n % 32) as u32;
        if bits != 0 {
            let mut carry = 0u32;
            for limb in self.limbs.iter_mut().rev() {
                let v = *limb;
                *limb = (v >> bits) | carry;
                carry = v << (32 - bits);
            }
        }
        trim(&mut self.limbs);
    }

    /// Divides out the factors of ten; returns how many there were.
    pub(crate) fn remove_factors_of_ten(&mut self) -> u64 {
        let mut times = 0;
        while !self.is_zero() && self.rem_small(TEN_POW_9) == 0 {
            self.divmod_small(TEN_POW_9);
            times += 9;
        }
        while !self.is_zero() && self.rem_small(10) == 0 {
            self.divmod_small(10);
            times += 1;
        }
        times
    }

    /// Multiplies by 10^k.
    pub(crate) fn mul_pow10(&mut self, k: u64) {
        if self.is_zero() || k == 0 {
            return;
        }
        let p = pow10(k);
        *self = self.mul(&p);
    }

    /// Divides by 10^k, truncating; returns whether the remainder was non-zero.
    pub(crate) fn div_pow10(&mut self, k: u64) -> bool {
        let mut inexact = false;
        let mut k = k;
        while k > 0 && !self.is_zero() {
            let step = k.min(9) as u32;
            if self.divmod_small(10u32.pow(step)) != 0 {
                inexact = true;
            }
            k -= step as u64;
        }
        inexact
    }

    /// Shifts left by `n` bits.
    pub(crate) fn shl(&mut self, n: u32) {
        if self.is_zero() {
            return;
        }
        let words = (n / 32) as usize;
        let bits = n % 32;
        if bits != 0 {
            let mut carry = 0u32;
            for limb in self.limbs.iter_mut() {
                let v = *limb;
                *limb = (v << bits) | carry;
                carry = v >> (32 - bits);
            }
            if carry != 0 {
                self.limbs.push(carry);
            }
        }
        if words > 0 {
            let mut v = vec![0u32; words];
            v.extend_from_slice(&self.limbs);
            self.limbs = v;
        }
    }

    pub(crate) fn mul(&self, other: &BigUint) -> BigUint {
        if self.is_zero() || other.is_zero() {
            return BigUint::zero();
        }
        let mut out = vec![0u32; self.limbs.len() + other.limbs.len()];
        for (i, &a) in self.limbs.iter().enumerate() {
            if a == 0 {
                continue;
            }
            let mut carry: u64 = 0;
            for (j, &b) in other.limbs.iter().enumerate() {
                let t = out[i + j] as u64 + a as u64 * b as u64 + carry;
                out[i + j] = t as u32;
                carry = t >> 32;
            }
            let mut k = i + other.limbs.len();
            while carry != 0 {
                let t = out[k] as u64 + carry;
                out[k] = t as u32;
                carry = t >> 32;
                k += 1;
            }
        }
        trim(&mut out);
        BigUint { limbs: out }
    }

    pub(crate) fn add(&self, other: &BigUint) -> BigUint {
        let (long, short) = if self.limbs.len() >= other.limbs.len() {
            (&self.limbs, &other.limbs)
        } else {
            (&other.limbs, &self.limbs)
        };
        let mut out = Vec::with_capacity(long.len() + 1);
        let mut carry = 0u64;
        for (i, &a) in long.iter().enumerate() {
            let s = a as u64 + short.get(i).copied().unwrap_or(0) as u64 + carry;
            out.push(s as u32);
            carry = s >> 32;
        }
        if carry != 0 {
            out.push(carry as u32);
        }
        BigUint { limbs: out }
    }

    /// `self - other`; requires `self >= other`.
    pub(crate) fn sub(&self, other: &BigUint) -> BigUint {
        let mut out = Vec::with_capacity(self.limbs.len());
        let mut borrow = 0i64;
        for (i, &a) in self.limbs.iter().enumerate() {
            let mut d = a as i64 - other.limbs.get(i).copied().unwrap_or(0) as i64 - borrow;
            if d < 0 {
                d += 1 << 32;
                borrow = 1;
            } else {
                borrow = 0;
            }
            out.push(d as u32);
        }
        trim(&mut out);
        BigUint { limbs: out }
    }

    /// The nearest `f64`, ties to even, as Go's `big.Float.SetInt(x).Float64()`
    /// rounds; `+Inf` past the largest finite value.
    pub(crate) fn to_f64(&self) -> f64 {
        let bits = self.bit_len();
        if bits <= 64 {
            return self.to_u64().unwrap_or(0) as f64;
        }
        let shift = bits - 64;
        // The top 64 bits, with any lower non-zero bit folded into the lowest
        // one: that bit is below the rounding position, so the conversion of
        // the u64 rounds exactly as the whole number would.
        let mut top = self.clone();
        let words = (shift / 32) as usize;
        let sticky_words = top.limbs[..words].iter().any(|&l| l != 0);
        top.limbs.drain(..words);
        let rem_bits = (shift % 32) as u32;
        let mut sticky = sticky_words;
        if rem_bits != 0 {
            let mask = (1u32 << rem_bits) - 1;
            if top.limbs[0] & mask != 0 {
                sticky = true;
            }
            let mut carry = 0u32;
            for limb in top.limbs.iter_mut().rev() {
                let v = *limb;
                *limb = (v >> rem_bits) | carry;
                carry = v << (32 - rem_bits);
            }
            trim(&mut top.limbs);
        }
        let mut t = top.to_u64().unwrap_or(u64::MAX);
        if sticky {
            t |= 1;
        }
        let f = t as f64;
        if shift > 1023 {
            return f64::INFINITY;
        }
        f * f64::from_bits((1023 + shift) << 52)
    }
}

impl PartialOrd for BigUint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BigUint {
    fn cmp(&self, other: &Self) -> Ordering {
        self.limbs
            .len()
            .cmp(&other.limbs.len())
            .then_with(|| self.limbs.iter().rev().cmp(other.limbs.iter().rev()))
    }
}

/// 10^k, by repeated squaring.
pub(crate) fn pow10(k: u64) -> BigUint {
    let mut result = BigUint::from_u64(1);
    let mut base = BigUint::from_u64(10);
    let mut k = k;
    while k > 0 {
        if k & 1 == 1 {
            result = result.mul(&base);
        }
        k >>= 1;
        if k > 0 {
            base = base.mul(&base);
        }
    }
    result
}

fn trim(limbs: &mut Vec<u32>) {
    while limbs.last() == Some(&0) {
        limbs.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> BigUint {
        BigUint::parse_decimal(s.as_bytes()).unwrap()
    }

    #[test]
    fn decimal_round_trip() {
        for s in [
            "0",
            "1",
            "999999999",
            "1000000000",
            "18446744073709551616",
            "123456789012345678901234567890",
        ] {
            assert_eq!(n(s).to_decimal_string(), s);
        }
    }

    #[test]
    fn arithmetic() {
        assert_eq!(
            n("99999999999999999999").add(&n("1")).to_decimal_string(),
            "100000000000000000000"
        );
        assert_eq!(
            n("100000000000000000000").sub(&n("1")).to_decimal_string(),
            "99999999999999999999"
        );
        let mut x = n("15");
        x.mul_pow10(30);
        assert_eq!(x.to_decimal_string(), format!("15{}", "0".repeat(30)));
        assert!(!x.div_pow10(29));
        assert_eq!(x.to_decimal_string(), "150");
        assert!(x.div_pow10(2));
        assert_eq!(x.to_decimal_string(), "1");
        let mut y = n("3");
        y.shl(60);
        assert_eq!(y.to_decimal_string(), "3458764513820540928");
        assert_eq!(y.trailing_zeros(), 60);
        y.shr(59);
        assert_eq!(y.to_decimal_string(), "6");
        let mut z = n("1200000000000000000000");
        assert_eq!(z.remove_factors_of_ten(), 20);
        assert_eq!(z.to_decimal_string(), "12");
        assert_eq!(pow10(0).to_decimal_string(), "1");
        assert_eq!(n("1024").rem_small(1024), 0);
    }

    #[test]
    fn float_conversion_rounds_to_nearest_even() {
        assert_eq!(n("9007199254740993").to_f64(), 9007199254740992.0);
        assert_eq!(n("9007199254740995").to_f64(), 9007199254740996.0);
        assert_eq!(
            n("123456789012345678901234567890").to_f64(),
            123456789012345678901234567890.0
        );
        assert_eq!(n(&"9".repeat(400)).to_f64(), f64::INFINITY);
        let mut max = n("1");
        max.mul_pow10(308);
        assert_eq!(max.to_f64(), 1e308);
    }
}
