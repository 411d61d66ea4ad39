//! Kubernetes CEL libraries: ip and cidr
//! (`k8s.io/apiserver/pkg/cel/library/ip.go`, `cidr.go`).
//!
//! Values of type `net.IP` and `net.CIDR`, parsed and printed as Go's
//! `net/netip` does (`ParseAddr`, `ParsePrefix`, `Addr.String`), with
//! upstream's extra rules: no IPv6 zones, no IPv4-mapped IPv6 addresses.

use crate::gofmt::quote;
use cel::common::types::{CelBool, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::fmt;

/// `net.IP`.
pub static IP_TYPE: Type = Type::new_unspecified_type("net.IP");
/// `net.CIDR`.
pub static CIDR_TYPE: Type = Type::new_unspecified_type("net.CIDR");

// ---------------------------------------------------------------------------
// net/netip
// ---------------------------------------------------------------------------

/// A `netip.Addr` without zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Addr {
    V4(u32),
    V6(u128),
}

/// `netip.parseAddrError`.
struct AddrError<'a> {
    input: &'a str,
    msg: &'static str,
    at: Option<&'a str>,
}

impl fmt::Display for AddrError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParseAddr({}): {}", quote(self.input), self.msg)?;
        if let Some(at) = self.at.filter(|a| !a.is_empty()) {
            write!(f, " (at {})", quote(at))?;
        }
        Ok(())
    }
}

fn addr_err<'a>(input: &'a str, msg: &'static str, at: Option<&'a str>) -> AddrError<'a> {
    AddrError { input, msg, at }
}

/// `netip.ParseAddr`: the address and its zone (empty if none).
fn parse_addr(s: &str) -> Result<(Addr, &str), AddrError<'_>> {
    for c in s.bytes() {
        match c {
            b'.' => {
                return parse_ipv4_fields(s, 0, s.len())
                    .map(|f| (Addr::V4(u32::from_be_bytes(f)), ""))
            }
            b':' => return parse_ipv6(s),
            b'%' => return Err(addr_err(s, "missing IPv6 address", None)),
            _ => {}
        }
    }
    Err(addr_err(s, "unable to parse IP", None))
}

/// `netip.parseIPv4Fields`: the dotted quad `input[off..end]`.
fn parse_ipv4_fields(input: &str, off: usize, end: usize) -> Result<[u8; 4], AddrError<'_>> {
    let s = &input[off..end];
    let b = s.as_bytes();
    let mut fields = [0u8; 4];
    let (mut val, mut pos, mut dig_len) = (0u32, 0usize, 0u32);
    for i in 0..b.len() {
        let c = b[i];
        if c.is_ascii_digit() {
            if dig_len == 1 && val == 0 {
                return Err(addr_err(
                    input,
                    "IPv4 field has octet with leading zero",
                    None,
                ));
            }
            val = val * 10 + (c - b'0') as u32;
            dig_len += 1;
            if val > 255 {
                return Err(addr_err(input, "IPv4 field has value >255", None));
            }
        } else if c == b'.' {
            if i == 0 || i == b.len() - 1 || b[i - 1] == b'.' {
                return Err(addr_err(
                    input,
                    "IPv4 field must have at least one digit",
                    Some(&s[i..]),
                ));
            }
            if pos == 3 {
                return Err(addr_err(input, "IPv4 address too long", None));
            }
            fields[pos] = val as u8;
            pos += 1;
            val = 0;
            dig_len = 0;
        } else {
            return Err(addr_err(input, "unexpected character", Some(&s[i..])));
        }
    }
    if pos < 3 {
        return Err(addr_err(input, "IPv4 address too short", None));
    }
    fields[3] = val as u8;
    Ok(fields)
}

/// `netip.parseIPv6`.
fn parse_ipv6(input: &str) -> Result<(Addr, &str), AddrError<'_>> {
    let mut s = input;
    let mut zone = "";
    if let Some(i) = s.find('%') {
        zone = &input[i + 1..];
        s = &input[..i];
        if zone.is_empty() {
            return Err(addr_err(input, "zone must be a non-empty string", None));
        }
    }
    let mut ip = [0u8; 16];
    let mut ellipsis: Option<usize> = None;
    if s.starts_with("::") {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Ok((Addr::V6(0), zone));
        }
    }
    let mut i = 0usize;
    while i < 16 {
        let b = s.as_bytes();
        let mut off = 0usize;
        let mut acc: u32 = 0;
        while off < b.len() {
            let v = match b[off] {
                c @ b'0'..=b'9' => c - b'0',
                c @ b'a'..=b'f' => c - b'a' + 10,
                c @ b'A'..=b'F' => c - b'A' + 10,
                _ => break,
            };
            acc = (acc << 4) + v as u32;
            if off > 3 {
                return Err(addr_err(
                    input,
                    "each group must have 4 or less digits",
                    Some(s),
                ));
            }
            if acc > 0xffff {
                return Err(addr_err(input, "IPv6 field has value >=2^16", Some(s)));
            }
            off += 1;
        }
        if off == 0 {
            return Err(addr_err(
                input,
                "each colon-separated field must have at least one digit",
                Some(s),
            ));
        }
        if off < b.len() && b[off] == b'.' {
            if ellipsis.is_none() && i != 12 {
                return Err(addr_err(
                    input,
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    Some(s),
                ));
            }
            if i + 4 > 16 {
                return Err(addr_err(
                    input,
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    Some(s),
                ));
            }
            let mut end = input.len();
            if !zone.is_empty() {
                end -= zone.len() + 1;
            }
            let fields = parse_ipv4_fields(input, end - s.len(), end)?;
            ip[i..i + 4].copy_from_slice(&fields);
            s = "";
            i += 4;
            break;
        }
        ip[i] = (acc >> 8) as u8;
        ip[i + 1] = acc as u8;
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if !s.starts_with(':') {
            return Err(addr_err(input, "unexpected character, want colon", Some(s)));
        } else if s.len() == 1 {
            return Err(addr_err(
                input,
                "colon must be followed by more characters",
                Some(s),
            ));
        }
        s = &s[1..];
        if s.starts_with(':') {
            if ellipsis.is_some() {
                return Err(addr_err(input, "multiple :: in address", Some(s)));
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return Err(addr_err(input, "trailing garbage after address", Some(s)));
    }
    if i < 16 {
        let Some(e) = ellipsis else {
            return Err(addr_err(input, "address string too short", None));
        };
        let n = 16 - i;
        for j in (e..i).rev() {
            ip[j + n] = ip[j];
        }
        ip[e..e + n].fill(0);
    } else if ellipsis.is_some() {
        return Err(addr_err(
            input,
            "the :: must expand to at least one field of zeros",
            None,
        ));
    }
    Ok((Addr::V6(u128::from_be_bytes(ip)), zone))
}

fn mask6(bits: u32) -> u128 {
    if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    }
}

impl Addr {
    fn bit_len(self) -> u32 {
        match self {
            Addr::V4(_) => 32,
            Addr::V6(_) => 128,
        }
    }

    fn is_4in6(self) -> bool {
        matches!(self, Addr::V6(a) if a >> 32 == 0xffff)
    }

    fn unmap(self) -> Addr {
        match self {
            Addr::V6(a) if self.is_4in6() => Addr::V4(a as u32),
            a => a,
        }
    }

    fn v6u16(a: u128, i: u32) -> u16 {
        (a >> (112 - 16 * i)) as u16
    }

    fn is_loopback(self) -> bool {
        match self.unmap() {
            Addr::V4(a) => a >> 24 == 127,
            Addr::V6(a) => a == 1,
        }
    }

    fn is_multicast(self) -> bool {
        match self.unmap() {
            Addr::V4(a) => (a >> 24) & 0xf0 == 0xe0,
            Addr::V6(a) => a >> 120 == 0xff,
        }
    }

    fn is_link_local_multicast(self) -> bool {
        match self.unmap() {
            Addr::V4(a) => a >> 8 == 0xe0_00_00,
            Addr::V6(a) => Addr::v6u16(a, 0) & 0xff0f == 0xff02,
        }
    }

    fn is_link_local_unicast(self) -> bool {
        match self.unmap() {
            Addr::V4(a) => a >> 16 == 0xa9fe,
            Addr::V6(a) => Addr::v6u16(a, 0) & 0xffc0 == 0xfe80,
        }
    }

    fn is_unspecified(self) -> bool {
        matches!(self, Addr::V4(0) | Addr::V6(0))
    }

    fn is_global_unicast(self) -> bool {
        let ip = self.unmap();
        if matches!(ip, Addr::V4(0) | Addr::V4(u32::MAX)) {
            return false;
        }
        ip != Addr::V6(0) && !ip.is_loopback() && !ip.is_multicast() && !ip.is_link_local_unicast()
    }

    /// `Addr.Prefix(bits)`: the address with all but the top `bits` cleared.
    fn masked(self, bits: u32) -> Addr {
        match self {
            Addr::V4(a) => Addr::V4(if bits == 0 {
                0
            } else {
                a & (u32::MAX << (32 - bits))
            }),
            Addr::V6(a) => Addr::V6(a & mask6(bits)),
        }
    }
}

impl fmt::Display for Addr {
    /// `Addr.String`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Addr::V4(a) => {
                let b = a.to_be_bytes();
                write!(f, "{}.{}.{}.{}", b[0], b[1], b[2], b[3])
            }
            Addr::V6(a) if self.is_4in6() => write!(f, "::ffff:{}", Addr::V4(a as u32)),
            Addr::V6(a) => {
                let (mut zero_start, mut zero_end) = (255u32, 255u32);
                for i in 0..8 {
                    let mut j = i;
                    while j < 8 && Addr::v6u16(a, j) == 0 {
                        j += 1;
                    }
                    let l = j - i;
                    if l >= 2 && l > zero_end.wrapping_sub(zero_start) & 0xff {
                        zero_start = i;
                        zero_end = j;
                    }
                }
                let mut i = 0;
                while i < 8 {
                    if i == zero_start {
                        f.write_str("::")?;
                        i = zero_end;
                        if i >= 8 {
                            break;
                        }
                    } else if i > 0 {
                        f.write_str(":")?;
                    }
                    write!(f, "{:x}", Addr::v6u16(a, i))?;
                    i += 1;
                }
                Ok(())
            }
        }
    }
}

/// A `netip.Prefix` (never with a zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    addr: Addr,
    bits: u8,
}

impl Prefix {
    fn masked(self) -> Prefix {
        Prefix {
            addr: self.addr.masked(self.bits as u32),
            bits: self.bits,
        }
    }

    /// `Prefix.Contains`.
    fn contains(self, ip: Addr) -> bool {
        match (self.addr, ip) {
            (Addr::V4(p), Addr::V4(a)) => self.bits == 0 || (p ^ a) >> (32 - self.bits as u32) == 0,
            (Addr::V6(p), Addr::V6(a)) => (p ^ a) & mask6(self.bits as u32) == 0,
            _ => false,
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

/// `netip.ParsePrefix`; the error is `parsePrefixError.Error()`.
fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let err = |msg: &str| format!("netip.ParsePrefix({}): {msg}", quote(s));
    let Some(i) = s.rfind('/') else {
        return Err(err("no '/'"));
    };
    let (addr, zone) = parse_addr(&s[..i]).map_err(|e| err(&e.to_string()))?;
    if matches!(addr, Addr::V6(_)) && !zone.is_empty() {
        return Err(err("IPv6 zones cannot be present in a prefix"));
    }
    let bits_str = &s[i + 1..];
    let bad_bits = || err(&format!("bad bits after slash: {}", quote(bits_str)));
    let b = bits_str.as_bytes();
    if b.len() > 1 && !(b'1'..=b'9').contains(&b[0]) {
        return Err(bad_bits());
    }
    // strconv.Atoi: digits (a lone sign is an error), within int64.
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return Err(bad_bits());
    }
    let bits: u64 = bits_str.parse().map_err(|_| bad_bits())?;
    if bits > i64::MAX as u64 {
        return Err(bad_bits());
    }
    if bits > addr.bit_len() as u64 {
        return Err(err("prefix length out of range"));
    }
    Ok(Prefix {
        addr,
        bits: bits as u8,
    })
}

// ---------------------------------------------------------------------------
// The Kubernetes rules on top
// ---------------------------------------------------------------------------

/// `library.parseIPAddr`.
fn parse_ip_addr(raw: &str) -> Result<Addr, String> {
    let (addr, zone) = parse_addr(raw).map_err(|e| {
        format!(
            "IP Address {} parse error during conversion from string: {e}",
            quote(raw)
        )
    })?;
    if !zone.is_empty() {
        return Err(format!(
            "IP address {} with zone value is not allowed",
            quote(raw)
        ));
    }
    if addr.is_4in6() {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            quote(raw)
        ));
    }
    Ok(addr)
}

/// `library.parseCIDR`.
fn parse_cidr(raw: &str) -> Result<Prefix, String> {
    let prefix = parse_prefix(raw)
        .map_err(|e| format!("network address parse error during conversion from string: {e}"))?;
    if prefix.addr.is_4in6() {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            quote(raw)
        ));
    }
    Ok(prefix)
}

/// `library.stringToCIDR`'s error.
fn cidr_from_str(raw: &str, function: &str) -> Result<Cidr, ExecutionError> {
    parse_cidr(raw).map(Cidr).map_err(|e| {
        ExecutionError::function_error(
            function,
            format!("network address parse error during conversion from string: {e}"),
        )
    })
}

// ---------------------------------------------------------------------------
// CEL values
// ---------------------------------------------------------------------------

/// A `net.IP` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ip(pub Addr);

/// A `net.CIDR` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr(pub Prefix);

impl fmt::Display for Ip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Val for Ip {
    fn get_type(&self) -> &Type {
        &IP_TYPE
    }
    fn cel_type() -> &'static Type {
        &IP_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Ip>() == Some(self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Ip {}

impl Val for Cidr {
    fn get_type(&self) -> &Type {
        &CIDR_TYPE
    }
    fn cel_type() -> &'static Type {
        &CIDR_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Cidr>() == Some(self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Cidr {}

// ---------------------------------------------------------------------------
// Functions
// ---------------------------------------------------------------------------

fn ip(s: &CelString<'_>) -> Result<Ip, ExecutionError> {
    parse_ip_addr(s.inner())
        .map(Ip)
        .map_err(|e| ExecutionError::function_error("ip", e))
}

fn is_ip(s: &CelString<'_>) -> CelBool {
    CelBool::from(parse_ip_addr(s.inner()).is_ok())
}

fn ip_is_canonical(s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let addr = parse_ip_addr(s.inner())
        .map_err(|e| ExecutionError::function_error("ip.isCanonical", e))?;
    Ok(CelBool::from(addr.to_string() == s.inner()))
}

fn ip_to_string(ip: &Ip) -> CelString<'static> {
    CelString::from(ip.0.to_string())
}

fn family(ip: &Ip) -> CelInt {
    CelInt::from(match ip.0 {
        Addr::V4(_) => 4,
        Addr::V6(_) => 6,
    })
}

fn is_unspecified(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_unspecified())
}

fn is_loopback(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_loopback())
}

fn is_link_local_multicast(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_link_local_multicast())
}

fn is_link_local_unicast(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_link_local_unicast())
}

fn is_global_unicast(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_global_unicast())
}

fn cidr(s: &CelString<'_>) -> Result<Cidr, ExecutionError> {
    cidr_from_str(s.inner(), "cidr")
}

fn is_cidr(s: &CelString<'_>) -> CelBool {
    CelBool::from(parse_cidr(s.inner()).is_ok())
}

/// `string()` of an IP or a CIDR, for the conversion `string(x)` is
/// renamed to (`string_format::STRING_FN`), which answers every value.
pub(super) fn library_string(v: &dyn Val) -> Option<String> {
    match v.downcast_ref::<Ip>() {
        Some(ip) => Some(ip.0.to_string()),
        None => v.downcast_ref::<Cidr>().map(|c| c.0.to_string()),
    }
}

fn cidr_to_string(c: &Cidr) -> CelString<'static> {
    CelString::from(c.0.to_string())
}

fn contains_ip(c: &Cidr, ip: &Ip) -> CelBool {
    CelBool::from(c.0.contains(ip.0))
}

/// Upstream parses the string with `stringToIP`, and reports a failure as
/// "no such overload" (its error is dropped for the CIDR argument's).
fn contains_ip_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    match parse_ip_addr(s.inner()) {
        Ok(addr) => Ok(CelBool::from(c.0.contains(addr))),
        Err(_) => Err(ExecutionError::function_error(
            "containsIP",
            "no such overload",
        )),
    }
}

/// The masked prefix equals the other's address masked to the same length,
/// and the other is no shorter.
fn contains_cidr(c: &Cidr, other: &Cidr) -> CelBool {
    let p = c.0;
    let o = other.0;
    let other_at_bits = Prefix {
        addr: o.addr,
        bits: p.bits,
    };
    // `netip.PrefixFrom(addr, bits)` is invalid when bits exceed the
    // address's length, and then never equal to a valid prefix.
    let valid = p.bits as u32 <= o.addr.bit_len();
    let equal_masked = valid && p.masked() == other_at_bits.masked();
    CelBool::from(equal_masked && p.bits <= o.bits)
}

fn contains_cidr_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let other = cidr_from_str(s.inner(), "containsCIDR")?;
    Ok(contains_cidr(c, &other))
}

fn cidr_ip(c: &Cidr) -> Ip {
    Ip(c.0.addr)
}

fn prefix_length(c: &Cidr) -> CelInt {
    CelInt::from(c.0.bits as i64)
}

fn masked(c: &Cidr) -> Cidr {
    Cidr(c.0.masked())
}

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(IP_TYPE.to_owned())?;
    env.add_type(CIDR_TYPE.to_owned())?;

    cel::add_overload!(env, fn ip: (CelString) -> Result<Ip>, name = "ip", id = "string_to_ip")?;
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP", id = "is_ip")?;
    cel::add_overload!(env, fn ip_is_canonical: (CelString) -> Result<CelBool>,
        name = "ip.isCanonical", id = "ip_is_canonical")?;
    cel::add_overload!(env, fn ip_to_string: (Ip) -> CelString,
        name = "string", id = "ip_to_string")?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt, name = "family", id = "ip_family")?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool,
        name = "isUnspecified", id = "ip_is_unspecified")?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool,
        name = "isLoopback", id = "ip_is_loopback")?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool,
        name = "isLinkLocalMulticast", id = "ip_is_link_local_multicast")?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool,
        name = "isLinkLocalUnicast", id = "ip_is_link_local_unicast")?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool,
        name = "isGlobalUnicast", id = "ip_is_global_unicast")?;

    cel::add_overload!(env, fn cidr: (CelString) -> Result<Cidr>,
        name = "cidr", id = "string_to_cidr")?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR", id = "is_cidr")?;
    cel::add_overload!(env, fn cidr_to_string: (Cidr) -> CelString,
        name = "string", id = "cidr_to_string")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString) -> Result<CelBool>,
        name = "containsIP", id = "cidr_contains_ip_string")?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool,
        name = "containsIP", id = "cidr_contains_ip_ip")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString) -> Result<CelBool>,
        name = "containsCIDR", id = "cidr_contains_cidr_string")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool,
        name = "containsCIDR", id = "cidr_contains_cidr")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip", id = "cidr_ip")?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt,
        name = "prefixLength", id = "cidr_prefix_length")?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr, name = "masked", id = "cidr_masked")?;
    Ok(())
}
