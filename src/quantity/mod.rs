//! Kubernetes resource quantities as apimachinery's `resource.Quantity`
//! holds them (`int64Amount` or `inf.Dec`, with its format), parses and
//! prints them: plain data, read by the schema decoder (a quantity's JSON
//! decoding) and by the CEL quantity library.

pub(crate) mod amount;
pub(crate) mod bigint;

use amount::AmountError;

/// `resource.ParseQuantity`'s error for `s`, if it does not parse.
pub(crate) fn parse_error(s: &str) -> Option<&'static str> {
    amount::parse_quantity(s).err().map(AmountError::message)
}

/// `Quantity.MarshalJSON` after `ParseQuantity(s)`: the string as given
/// when it is canonical, otherwise the canonical form; `None` when `s`
/// does not parse.
pub(crate) fn marshaled(s: &str) -> Option<String> {
    amount::parse_quantity(s).ok().map(|mut q| q.string())
}
