//! Expression table for the quantity, ip, cidr and semver libraries.
//!
//! Every entry comes from upstream, cited in the comment above it: the
//! library tests (`staging/src/k8s.io/apiserver/pkg/cel/library/*_test.go`),
//! the examples in the libraries' documentation comments (`library/*.go`),
//! or, marked `[derived]`, upstream source read for a case its tests leave
//! out (the error text built by `net/netip`, `blang/semver` or the library).
//! Upstream tests that match errors by regular expression are checked for
//! the expression's literal text (`ErrorContains`); those that compare
//! `err.Error()` exactly are checked exactly (`Error`). Upstream compile-time
//! errors (kmutate has no type checker) are checked as the same message at
//! run time.

use super::Quantity;
use crate::cel::library::ip::{Cidr, Ip};
use crate::cel::library::semver::Semver;
use crate::cel::{error_text, CelEnvironment};
use crate::quantity::amount::parse_quantity;
use cel::common::types::{CelBool, CelDouble, CelInt, CelString};

#[derive(Debug)]
enum Want {
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(&'static str),
    /// A `kubernetes.Quantity` equal (upstream `Equal`) to this one.
    QuantityOf(&'static str),
    /// A `net.IP` whose string form is this.
    IpOf(&'static str),
    /// A `net.CIDR` whose string form is this.
    CidrOf(&'static str),
    /// A `kubernetes.Semver` whose string form is this.
    SemverOf(&'static str),
    /// An error with exactly this message.
    Error(&'static str),
    /// An error whose message contains this.
    ErrorContains(&'static str),
    /// Some error (documentation examples that only say "error").
    AnyErr,
}

use Want::*;

fn check(expr: &str, want: &Want) -> Result<(), String> {
    let env = CelEnvironment::shared();
    let compiled = match env.compile(expr) {
        Ok(c) => c,
        // Upstream's checker refuses these at compile time.
        Err(e) if matches!(want, ErrorContains(m) if e.to_string().contains(m)) => return Ok(()),
        Err(e) => return Err(format!("compile error: {e}")),
    };
    let ctx = env.context();
    let got = compiled.evaluate(&ctx);
    let v = match (got, want) {
        (Err(e), Error(m)) if error_text(&e) == *m => return Ok(()),
        (Err(e), ErrorContains(m)) if error_text(&e).contains(m) => return Ok(()),
        (Err(_), AnyErr) => return Ok(()),
        (Err(e), _) => return Err(format!("error {:?}", error_text(&e))),
        (Ok(v), _) => v,
    };
    let ok = match want {
        Bool(b) => v.downcast_ref::<CelBool>().is_some_and(|x| x.inner() == b),
        Int(i) => v.downcast_ref::<CelInt>().is_some_and(|x| x.inner() == i),
        Double(d) => v
            .downcast_ref::<CelDouble>()
            .is_some_and(|x| x.inner() == d),
        Str(s) => v
            .downcast_ref::<CelString>()
            .is_some_and(|x| x.inner() == *s),
        QuantityOf(s) => {
            let expected = Quantity::new(parse_quantity(s).expect("upstream literal"), false);
            v.downcast_ref::<Quantity>().is_some() && v.equals(&expected)
        }
        IpOf(s) => v.downcast_ref::<Ip>().is_some_and(|x| x.to_string() == *s),
        CidrOf(s) => v
            .downcast_ref::<Cidr>()
            .is_some_and(|x| x.to_string() == *s),
        SemverOf(s) => v
            .downcast_ref::<Semver>()
            .is_some_and(|x| x.to_string() == *s),
        Error(_) | ErrorContains(_) | AnyErr => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("got {:?} ({})", &*v, v.get_type().name()))
    }
}

const QUANTITY: &[(&str, Want)] = &[
    // library/quantity_test.go TestQuantity "parse"
    (r#"quantity("12Mi")"#, QuantityOf("12Mi")),
    // library/quantity_test.go TestQuantity "parseInvalidSuffix"
    (r#"quantity("10Mo")"#, ErrorContains("quantities must match the regular expression")),
    // library/quantity_test.go TestQuantity "parseInvalidSuffixPassesRegex"
    (r#"quantity("10Mm")"#, ErrorContains("unable to parse quantity's suffix")),
    // library/quantity_test.go TestQuantity "isQuantity"
    (r#"isQuantity("20")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "isQuantity_megabytes"
    (r#"isQuantity("20M")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "isQuantity_mebibytes"
    (r#"isQuantity("20Mi")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "isQuantity_invalidSuffix"
    (r#"isQuantity("20Mo")"#, Bool(false)),
    // library/quantity_test.go TestQuantity "isQuantity_passingRegex"
    (r#"isQuantity("10Mm")"#, Bool(false)),
    // library/quantity_test.go TestQuantity "isQuantity_noOverload" (compile error upstream)
    (r#"isQuantity([1, 2, 3])"#, ErrorContains("found no matching overload for 'isQuantity' applied to")),
    // library/quantity_test.go TestQuantity "equality_reflexivity"
    (r#"quantity("200M") == quantity("200M")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "equality_symmetry"
    (r#"quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "equality_transitivity"
    (r#"quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M") && quantity("0.002G") == quantity("2000k")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "inequality"
    (r#"quantity("200M") == quantity("0.3G")"#, Bool(false)),
    // library/quantity_test.go TestQuantity "quantity_less"
    (r#"quantity("50M").isLessThan(quantity("50Mi"))"#, Bool(true)),
    // library/quantity_test.go TestQuantity "quantity_less_obvious"
    (r#"quantity("50M").isLessThan(quantity("100M"))"#, Bool(true)),
    // library/quantity_test.go TestQuantity "quantity_less_false"
    (r#"quantity("100M").isLessThan(quantity("50M"))"#, Bool(false)),
    // library/quantity_test.go TestQuantity "quantity_greater"
    (r#"quantity("50Mi").isGreaterThan(quantity("50M"))"#, Bool(true)),
    // library/quantity_test.go TestQuantity "quantity_greater_obvious"
    (r#"quantity("150Mi").isGreaterThan(quantity("100Mi"))"#, Bool(true)),
    // library/quantity_test.go TestQuantity "quantity_greater_false"
    (r#"quantity("50M").isGreaterThan(quantity("100M"))"#, Bool(false)),
    // library/quantity_test.go TestQuantity "compare_equal"
    (r#"quantity("200M").compareTo(quantity("0.2G"))"#, Int(0)),
    // library/quantity_test.go TestQuantity "compare_less"
    (r#"quantity("50M").compareTo(quantity("50Mi"))"#, Int(-1)),
    // library/quantity_test.go TestQuantity "compare_greater"
    (r#"quantity("50Mi").compareTo(quantity("50M"))"#, Int(1)),
    // library/quantity_test.go TestQuantity "add_quantity"
    (r#"quantity("50k").add(quantity("20")) == quantity("50.02k")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "add_int"
    (r#"quantity("50k").add(20).isLessThan(quantity("50020"))"#, Bool(false)),
    // library/quantity_test.go TestQuantity "sub_quantity"
    (r#"quantity("50k").sub(quantity("20")) == quantity("49.98k")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "sub_int"
    (r#"quantity("50k").sub(20) == quantity("49980")"#, Bool(true)),
    // library/quantity_test.go TestQuantity "arith_chain_1"
    (r#"quantity("50k").add(20).sub(quantity("100k")).asInteger()"#, Int(-49980)),
    // library/quantity_test.go TestQuantity "arith_chain"
    (r#"quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger()"#, Int(20)),
    // library/quantity_test.go TestQuantity "as_integer"
    (r#"quantity("50k").asInteger()"#, Int(50000)),
    // library/quantity_test.go TestQuantity "as_integer_error"
    (r#"quantity("9999999999999999999999999999999999999G").asInteger()"#, ErrorContains("cannot convert value to integer")),
    // library/quantity_test.go TestQuantity "is_integer" (first)
    (r#"quantity("9999999999999999999999999999999999999G").isInteger()"#, Bool(false)),
    // library/quantity_test.go TestQuantity "is_integer" (second)
    (r#"quantity("50").isInteger()"#, Bool(true)),
    // library/quantity_test.go TestQuantity "as_float"
    (r#"quantity("50.703k").asApproximateFloat()"#, Double(50703.0)),
    // library/quantity.go doc: quantity('1.5G') // returns a Quantity
    ("quantity('1.5G')", QuantityOf("1.5G")),
    // library/quantity.go doc: quantity('200k') // returns a Quantity
    ("quantity('200k')", QuantityOf("200k")),
    // library/quantity.go doc: quantity('200K') // error
    ("quantity('200K')", AnyErr),
    // library/quantity.go doc: quantity('Three') // error
    ("quantity('Three')", AnyErr),
    // library/quantity.go doc: isQuantity('1.3G') // returns true
    ("isQuantity('1.3G')", Bool(true)),
    // library/quantity.go doc: isQuantity('1.3Gi') // returns true
    ("isQuantity('1.3Gi')", Bool(true)),
    // library/quantity.go doc: isQuantity('1,3G') // returns false
    ("isQuantity('1,3G')", Bool(false)),
    // library/quantity.go doc: isQuantity('10000k') // returns true
    ("isQuantity('10000k')", Bool(true)),
    // library/quantity.go doc: isQuantity('200K') // returns false
    ("isQuantity('200K')", Bool(false)),
    // library/quantity.go doc: isQuantity('Three') // returns false
    ("isQuantity('Three')", Bool(false)),
    // library/quantity.go doc: quantity("50000000G").isInteger() // returns true
    (r#"quantity("50000000G").isInteger()"#, Bool(true)),
    // library/quantity.go doc: quantity("50k").isInteger() // returns true
    (r#"quantity("50k").isInteger()"#, Bool(true)),
    // library/quantity.go doc: quantity("50k").asInteger() == 50000 // returns true
    (r#"quantity("50k").asInteger() == 50000"#, Bool(true)),
    // library/quantity.go doc: quantity("50k").sub(20000).asApproximateFloat() == 30000 // returns true
    (r#"quantity("50k").sub(20000).asApproximateFloat() == 30000"#, Bool(true)),
    // library/quantity.go doc: quantity("50k").add(20) == quantity("50020") // returns true
    (r#"quantity("50k").add(20) == quantity("50020")"#, Bool(true)),
    // library/quantity.go doc: quantity("50k").sub(20000) == quantity("30k") // returns true
    (r#"quantity("50k").sub(20000) == quantity("30k")"#, Bool(true)),
    // library/quantity.go doc: quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20") // returns true
    (r#"quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20")"#, Bool(true)),
    // library/quantity.go doc: quantity("50Mi").isGreaterThan(quantity("100Mi")) // returns false
    (r#"quantity("50Mi").isGreaterThan(quantity("100Mi"))"#, Bool(false)),
    // [derived] library/quantity.go declares sign as a global overload (quantity_sign)
    (r#"sign(quantity("-5"))"#, Int(-1)),
    // [derived] library/quantity.go quantity_sign; resource.Quantity.Sign of 0
    (r#"sign(quantity("0"))"#, Int(0)),
    // [derived] library/quantity.go stringToQuantity returns types.WrapErr(ErrFormatWrong)
    (r#"quantity("")"#, Error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")),
    // [derived] apiserver/pkg/cel/quantity.go Equal: `other.(Quantity)` fails for the *Quantity that add returns
    (r#"quantity("50020") == quantity("50k").add(20)"#, Bool(false)),
    // [derived] resource.Quantity.AsInt64 is false for the inf.Dec form ParseQuantity gives "1.5Ki"
    (r#"quantity("1.5Ki").isInteger()"#, Bool(false)),
    // [derived] library/quantity.go quantityAdd: `copy := *q` shares the receiver's *inf.Dec, so
    // copy.Add changes the receiver too ("1.5Gi" parses to the inf.Dec form)
    (r#"[quantity("1.5Gi")].all(q, q.add(quantity("1Gi")) == q)"#, Bool(true)),
    // [derived] as above: after the add, the receiver itself holds 2.5Gi
    (r#"[quantity("1.5Gi")].all(q, q.add(quantity("1Gi")).isGreaterThan(quantity("2Gi")) && q.compareTo(quantity("2.5Gi")) == 0)"#, Bool(true)),
    // [derived] on the int64 path the copy is independent of the receiver
    (r#"[quantity("1")].all(q, q.add(quantity("1")) == quantity("2") && q == quantity("1"))"#, Bool(true)),
    // [derived] library/quantity.go quantityCompareTo calls q.Cmp on the receiver's *resource.Quantity,
    // and Quantity.Cmp moves it to the inf.Dec form (q.AsDec()), where AsInt64 fails
    (r#"[quantity("1")].all(q, q.compareTo(quantity("1.5Gi")) == -1 && !q.isInteger())"#, Bool(true)),
];

const IP: &[(&str, Want)] = &[
    // library/ip_test.go TestIP "parse ipv4"
    (r#"ip("192.168.0.1")"#, IpOf("192.168.0.1")),
    // library/ip_test.go TestIP "parse invalid ipv4"
    (
        r#"ip("192.168.0.1.0")"#,
        Error(
            r#"IP Address "192.168.0.1.0" parse error during conversion from string: ParseAddr("192.168.0.1.0"): IPv4 address too long"#,
        ),
    ),
    // library/ip_test.go TestIP "isIP valid ipv4"
    (r#"isIP("192.168.0.1")"#, Bool(true)),
    // library/ip_test.go TestIP "isIP invalid ipv4"
    (r#"isIP("192.168.0.1.0")"#, Bool(false)),
    // library/ip_test.go TestIP "ip.isCanonical valid ipv4"
    (r#"ip.isCanonical("127.0.0.1")"#, Bool(true)),
    // library/ip_test.go TestIP "ip.isCanonical invalid ipv4"
    (
        r#"ip.isCanonical("127.0.0.1.0")"#,
        Error(
            r#"IP Address "127.0.0.1.0" parse error during conversion from string: ParseAddr("127.0.0.1.0"): IPv4 address too long"#,
        ),
    ),
    // library/ip_test.go TestIP "ipv4 family"
    (r#"ip("192.168.0.1").family()"#, Int(4)),
    // library/ip_test.go TestIP "ipv4 isUnspecified true"
    (r#"ip("0.0.0.0").isUnspecified()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv4 isUnspecified false"
    (r#"ip("127.0.0.1").isUnspecified()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv4 isLoopback true"
    (r#"ip("127.0.0.1").isLoopback()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv4 isLoopback false"
    (r#"ip("1.2.3.4").isLoopback()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv4 isLinkLocalMulticast true"
    (r#"ip("224.0.0.1").isLinkLocalMulticast()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv4 isLinkLocalMulticast false"
    (r#"ip("224.0.1.1").isLinkLocalMulticast()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv4 isLinkLocalUnicast true"
    (r#"ip("169.254.169.254").isLinkLocalUnicast()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv4 isLinkLocalUnicast false"
    (r#"ip("192.168.0.1").isLinkLocalUnicast()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv4 isGlobalUnicast true"
    (r#"ip("192.168.0.1").isGlobalUnicast()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv4 isGlobalUnicast false"
    (r#"ip("255.255.255.255").isGlobalUnicast()"#, Bool(false)),
    // library/ip_test.go TestIP "parse ipv6"
    (r#"ip("2001:db8::68")"#, IpOf("2001:db8::68")),
    // library/ip_test.go TestIP "parse invalid ipv6"
    (
        r#"ip("2001:db8:::68")"#,
        Error(
            r#"IP Address "2001:db8:::68" parse error during conversion from string: ParseAddr("2001:db8:::68"): each colon-separated field must have at least one digit (at ":68")"#,
        ),
    ),
    // library/ip_test.go TestIP "isIP valid ipv6"
    (r#"isIP("2001:db8::68")"#, Bool(true)),
    // library/ip_test.go TestIP "isIP invalid ipv4" (the IPv6 one)
    (r#"isIP("2001:db8:::68")"#, Bool(false)),
    // library/ip_test.go TestIP "ip.isCanonical valid ipv6"
    (r#"ip.isCanonical("2001:db8::68")"#, Bool(true)),
    // library/ip_test.go TestIP "ip.isCanonical non-canonical ipv6"
    (r#"ip.isCanonical("2001:DB8::68")"#, Bool(false)),
    // library/ip_test.go TestIP "ip.isCanonical invalid ipv6"
    (
        r#"ip.isCanonical("2001:db8:::68")"#,
        Error(
            r#"IP Address "2001:db8:::68" parse error during conversion from string: ParseAddr("2001:db8:::68"): each colon-separated field must have at least one digit (at ":68")"#,
        ),
    ),
    // library/ip_test.go TestIP "ipv6 family"
    (r#"ip("2001:db8::68").family()"#, Int(6)),
    // library/ip_test.go TestIP "ipv6 isUnspecified true"
    (r#"ip("::").isUnspecified()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv6 isUnspecified false"
    (r#"ip("::1").isUnspecified()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv6 isLoopback true"
    (r#"ip("::1").isLoopback()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv6 isLoopback false"
    (r#"ip("2001:db8::abcd").isLoopback()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv6 isLinkLocalMulticast true"
    (r#"ip("ff02::1").isLinkLocalMulticast()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv6 isLinkLocalMulticast false"
    (r#"ip("fd00::1").isLinkLocalMulticast()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv6 isLinkLocalUnicast true"
    (r#"ip("fe80::1").isLinkLocalUnicast()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv6 isLinkLocalUnicast false"
    (r#"ip("fd80::1").isLinkLocalUnicast()"#, Bool(false)),
    // library/ip_test.go TestIP "ipv6 isGlobalUnicast true"
    (r#"ip("2001:db8::abcd").isGlobalUnicast()"#, Bool(true)),
    // library/ip_test.go TestIP "ipv6 isGlobalUnicast false"
    (r#"ip("ff00::1").isGlobalUnicast()"#, Bool(false)),
    // library/ip_test.go TestIP "passing cidr into isIP returns compile error"
    (
        r#"isIP(cidr("192.168.0.0/24"))"#,
        ErrorContains("found no matching overload for 'isIP' applied to '(net.CIDR)'"),
    ),
    // library/ip_test.go TestIP "converting an IP address to a string"
    (r#"string(ip("192.168.0.1"))"#, Str("192.168.0.1")),
    // library/ip_test.go TestIP "type of IP is net.IP"
    (r#"type(ip("192.168.0.1")) == net.IP"#, Bool(true)),
    // library/ip.go doc: ip('::1') // returns an IPv6 address
    ("ip('::1')", IpOf("::1")),
    // library/ip.go doc: ip('127.0.0.256') // error
    ("ip('127.0.0.256')", AnyErr),
    // library/ip.go doc: ip(':::1') // error
    ("ip(':::1')", AnyErr),
    // library/ip.go doc: isIP('127.0.0.1') // returns true
    ("isIP('127.0.0.1')", Bool(true)),
    // library/ip.go doc: isIP('::1') // returns true
    ("isIP('::1')", Bool(true)),
    // library/ip.go doc: isIP('127.0.0.256') // returns false
    ("isIP('127.0.0.256')", Bool(false)),
    // library/ip.go doc: isIP(':::1') // returns false
    ("isIP(':::1')", Bool(false)),
    // library/ip.go doc: ip.isCanonical('2001:db8::abcd') // returns true
    ("ip.isCanonical('2001:db8::abcd')", Bool(true)),
    // library/ip.go doc: ip.isCanonical('2001:DB8::ABCD') // returns false
    ("ip.isCanonical('2001:DB8::ABCD')", Bool(false)),
    // library/ip.go doc: ip.isCanonical('2001:db8::0:0:0:abcd') // returns false
    ("ip.isCanonical('2001:db8::0:0:0:abcd')", Bool(false)),
    // library/ip.go doc: ip('127.0.0.1').family() == 4 // returns true
    ("ip('127.0.0.1').family() == 4", Bool(true)),
    // library/ip.go doc: ip('::1').family() == 6 // returns true
    ("ip('::1').family() == 6", Bool(true)),
    // library/ip.go doc: ip('192.168.0.1').isLoopback() // returns false
    ("ip('192.168.0.1').isLoopback()", Bool(false)),
    // library/ip.go doc: ip('fe80::1').isLinkLocalUnicast() // returns true
    ("ip('fe80::1').isLinkLocalUnicast()", Bool(true)),
    // library/ip.go doc (IPv4-mapped IPv6 addresses are not allowed); text [derived] from library/ip.go parseIPAddr
    (
        "ip('::ffff:1.2.3.4')",
        Error(r#"IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed"#),
    ),
    // library/ip.go doc (IP addresses with zones are not allowed); text [derived] from library/ip.go parseIPAddr
    (
        "ip('fe80::1%eth0')",
        Error(r#"IP address "fe80::1%eth0" with zone value is not allowed"#),
    ),
    // library/ip.go doc (leading zeros in IPv4 octets are not allowed); text [derived] from net/netip parseIPv4Fields
    (
        "ip('127.0.0.01')",
        Error(
            r#"IP Address "127.0.0.01" parse error during conversion from string: ParseAddr("127.0.0.01"): IPv4 field has octet with leading zero"#,
        ),
    ),
    // library/ip.go doc: isIP('::ffff:1.2.3.4') is false (IPv4-mapped not allowed)
    ("isIP('::ffff:1.2.3.4')", Bool(false)),
    // [derived] apiserver/pkg/cel/ip.go Equal compares the netip.Addr
    ("ip('2001:db8::1') == ip('2001:DB8:0::1')", Bool(true)),
];

const CIDR: &[(&str, Want)] = &[
    // library/cidr_test.go TestCIDR "parse ipv4"
    (r#"cidr("192.168.0.0/24")"#, CidrOf("192.168.0.0/24")),
    // library/cidr_test.go TestCIDR "parse invalid ipv4"
    (
        r#"cidr("192.168.0.0/")"#,
        Error(
            r#"network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix("192.168.0.0/"): bad bits after slash: """#,
        ),
    ),
    // library/cidr_test.go TestCIDR "contains IP ipv4 (IP)"
    (
        r#"cidr("192.168.0.0/24").containsIP(ip("192.168.0.1"))"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain IP ipv4 (IP)"
    (
        r#"cidr("192.168.0.0/24").containsIP(ip("192.168.1.1"))"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "contains IP ipv4 (string)"
    (
        r#"cidr("192.168.0.0/24").containsIP("192.168.0.1")"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain IP ipv4 (string)"
    (
        r#"cidr("192.168.0.0/24").containsIP("192.168.1.1")"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "contains CIDR ipv4 (CIDR)"
    (
        r#"cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/25"))"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain IP ipv4 (CIDR)"
    (
        r#"cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/23"))"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "contains CIDR ipv4 (string)"
    (
        r#"cidr("192.168.0.0/24").containsCIDR("192.168.0.0/25")"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain CIDR ipv4 (string)"
    (
        r#"cidr("192.168.0.0/24").containsCIDR("192.168.0.0/23")"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "returns IP ipv4"
    (r#"cidr("192.168.0.0/24").ip()"#, IpOf("192.168.0.0")),
    // library/cidr_test.go TestCIDR "masks masked ipv4"
    (
        r#"cidr("192.168.0.0/24").masked()"#,
        CidrOf("192.168.0.0/24"),
    ),
    // library/cidr_test.go TestCIDR "masks unmasked ipv4"
    (
        r#"cidr("192.168.0.1/24").masked()"#,
        CidrOf("192.168.0.0/24"),
    ),
    // library/cidr_test.go TestCIDR "returns prefix length ipv4"
    (r#"cidr("192.168.0.0/24").prefixLength()"#, Int(24)),
    // library/cidr_test.go TestCIDR "parse ipv6"
    (r#"cidr("2001:db8::/32")"#, CidrOf("2001:db8::/32")),
    // library/cidr_test.go TestCIDR "parse invalid ipv6"
    (
        r#"cidr("2001:db8::/")"#,
        Error(
            r#"network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix("2001:db8::/"): bad bits after slash: """#,
        ),
    ),
    // library/cidr_test.go TestCIDR "contains IP ipv6 (IP)"
    (
        r#"cidr("2001:db8::/32").containsIP(ip("2001:db8::1"))"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain IP ipv6 (IP)"
    (
        r#"cidr("2001:db8::/32").containsIP(ip("2001:dc8::1"))"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "contains IP ipv6 (string)"
    (
        r#"cidr("2001:db8::/32").containsIP("2001:db8::1")"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain IP ipv6 (string)"
    (
        r#"cidr("2001:db8::/32").containsIP("2001:dc8::1")"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "contains CIDR ipv6 (CIDR)"
    (
        r#"cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/33"))"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain IP ipv6 (CIDR)"
    (
        r#"cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/31"))"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "contains CIDR ipv6 (string)"
    (
        r#"cidr("2001:db8::/32").containsCIDR("2001:db8::/33")"#,
        Bool(true),
    ),
    // library/cidr_test.go TestCIDR "does not contain CIDR ipv6 (string)"
    (
        r#"cidr("2001:db8::/32").containsCIDR("2001:db8::/31")"#,
        Bool(false),
    ),
    // library/cidr_test.go TestCIDR "returns IP ipv6"
    (r#"cidr("2001:db8::/32").ip()"#, IpOf("2001:db8::")),
    // library/cidr_test.go TestCIDR "masks masked ipv6"
    (r#"cidr("2001:db8::/32").masked()"#, CidrOf("2001:db8::/32")),
    // library/cidr_test.go TestCIDR "masks unmasked ipv6"
    (
        r#"cidr("2001:db8:1::/32").masked()"#,
        CidrOf("2001:db8::/32"),
    ),
    // library/cidr_test.go TestCIDR "returns prefix length ipv6"
    (r#"cidr("2001:db8::/32").prefixLength()"#, Int(32)),
    // library/cidr_test.go TestCIDR "converting a CIDR to a string"
    (r#"string(cidr("192.168.0.0/24"))"#, Str("192.168.0.0/24")),
    // library/cidr_test.go TestCIDR "type of CIDR is net.CIDR"
    (r#"type(cidr("192.168.0.0/24")) == net.CIDR"#, Bool(true)),
    // library/cidr.go doc: cidr('::1/128') // returns an IPv6 address with a CIDR mask
    ("cidr('::1/128')", CidrOf("::1/128")),
    // library/cidr.go doc: cidr('192.168.0.0/33') // error
    ("cidr('192.168.0.0/33')", AnyErr),
    // library/cidr.go doc: cidr('::1/129') // error
    ("cidr('::1/129')", AnyErr),
    // library/cidr.go doc: isCIDR('192.168.0.0/16') // returns true
    ("isCIDR('192.168.0.0/16')", Bool(true)),
    // library/cidr.go doc: isCIDR('::1/128') // returns true
    ("isCIDR('::1/128')", Bool(true)),
    // library/cidr.go doc: isCIDR('192.168.0.0/33') // returns false
    ("isCIDR('192.168.0.0/33')", Bool(false)),
    // library/cidr.go doc: isCIDR('::1/129') // returns false
    ("isCIDR('::1/129')", Bool(false)),
    // library/cidr.go doc: cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24')) // returns true
    (
        "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))",
        Bool(true),
    ),
    // library/cidr.go doc: cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24')) // returns false
    (
        "cidr('192.168.1.0/24').containsCIDR(cidr('192.168.2.0/24'))",
        Bool(false),
    ),
    // library/cidr.go doc: cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24') // returns true
    (
        "cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')",
        Bool(true),
    ),
    // library/cidr.go doc: cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24') // returns false
    (
        "cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24')",
        Bool(false),
    ),
    // kubernetes/kubernetes#130450 (containsCIDR fix, in 1.33): cidr('192.168.0.0/16').containsCIDR('192.168.0.1/32') works
    (
        "cidr('192.168.0.0/16').containsCIDR('192.168.0.1/32')",
        Bool(true),
    ),
    // library/cidr.go doc: cidr('192.168.0.1/24').ip() // returns ipAddr('192.168.0.1')
    ("cidr('192.168.0.1/24').ip()", IpOf("192.168.0.1")),
    // library/cidr.go doc: cidr('192.168.0.1/24').ip().family() // returns '4'
    ("cidr('192.168.0.1/24').ip().family()", Int(4)),
    // library/cidr.go doc: cidr('::1/128').ip() // returns ipAddr('::1')
    ("cidr('::1/128').ip()", IpOf("::1")),
    // library/cidr.go doc: cidr('::1/128').ip().family() // returns '6'
    ("cidr('::1/128').ip().family()", Int(6)),
    // library/cidr.go doc: cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked() // returns true
    (
        "cidr('192.168.0.0/24') == cidr('192.168.0.0/24').masked()",
        Bool(true),
    ),
    // library/cidr.go doc: cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked() // returns false
    (
        "cidr('192.168.0.1/24') == cidr('192.168.0.1/24').masked()",
        Bool(false),
    ),
    // library/cidr.go doc: cidr('192.168.0.0/16').prefixLength() // returns 16
    ("cidr('192.168.0.0/16').prefixLength()", Int(16)),
    // library/cidr.go doc: cidr('::1/128').prefixLength() // returns 128
    ("cidr('::1/128').prefixLength()", Int(128)),
    // library/cidr.go doc (IPv4-mapped IPv6 addresses are not allowed); text [derived] from library/cidr.go stringToCIDR and parseCIDR
    (
        "cidr('::ffff:1.2.3.4/120')",
        Error(
            r#"network address parse error during conversion from string: IPv4-mapped IPv6 address "::ffff:1.2.3.4/120" is not allowed"#,
        ),
    ),
    // [derived] library/cidr.go cidrContainsIPString: a failed stringToIP becomes MaybeNoSuchOverloadErr(arg)
    (
        "cidr('192.168.0.0/24').containsIP('192.168.0')",
        Error("no such overload"),
    ),
    // [derived] library/cidr.go cidrContainsCIDRString: the stringToCIDR error is returned
    (
        "cidr('192.168.0.0/24').containsCIDR('192.168.0.0')",
        Error(
            r#"network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix("192.168.0.0"): no '/'"#,
        ),
    ),
];

const SEMVER: &[(&str, Want)] = &[
    // library/semver_test.go TestSemver "parse"
    (r#"semver("1.2.3")"#, SemverOf("1.2.3")),
    // library/semver_test.go TestSemver "parseInvalidVersion"
    (
        r#"semver("v1.0")"#,
        ErrorContains("No Major.Minor.Patch elements found"),
    ),
    // library/semver_test.go TestSemver "isSemver"
    (r#"isSemver("1.2.3-beta.1+build.1")"#, Bool(true)),
    // library/semver_test.go TestSemver "isSemver_empty_false"
    (r#"isSemver("")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_prefix_false"
    (r#"isSemver("v1.0.0")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_leading_whitespace_false"
    (r#"isSemver(" 1.0.0")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_contains_whitespace_false"
    (r#"isSemver("1. 0.0")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_trailing_whitespace_false"
    (r#"isSemver("1.0.0 ")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_leading_zeros_false"
    (r#"isSemver("01.01.01")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_major_only_false"
    (r#"isSemver("1")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_major_minor_only_false"
    (r#"isSemver("1.1")"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_empty_normalize_false"
    (r#"isSemver("", true)"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_leading_whitespace_normalize_false"
    (r#"isSemver(" 1.0.0", true)"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_contains_whitespace_normalize_false"
    (r#"isSemver("1. 0.0", true)"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_trailing_whitespace_normalize_false"
    (r#"isSemver("1.0.0 ", true)"#, Bool(false)),
    // library/semver_test.go TestSemver "isSemver_v_prefix_normalize_true"
    (r#"isSemver("v1.0.0", true)"#, Bool(true)),
    // library/semver_test.go TestSemver "isSemver_leading_zeros_normalize_true"
    (r#"isSemver("01.01.01", true)"#, Bool(true)),
    // library/semver_test.go TestSemver "isSemver_major_only_normalize_true"
    (r#"isSemver("1", true)"#, Bool(true)),
    // library/semver_test.go TestSemver "isSemver_major_minor_only_normalize_true"
    (r#"isSemver("1.1", true)"#, Bool(true)),
    // library/semver_test.go TestSemver "isSemver_noOverload" (compile error upstream)
    (
        r#"isSemver([1, 2, 3])"#,
        ErrorContains("found no matching overload for 'isSemver' applied to"),
    ),
    // library/semver_test.go TestSemver "equality_normalize"
    (r#"semver("v01.01", true) == semver("1.1.0")"#, Bool(true)),
    // library/semver_test.go TestSemver "equality_reflexivity"
    (r#"semver("1.2.3") == semver("1.2.3")"#, Bool(true)),
    // library/semver_test.go TestSemver "inequality"
    (r#"semver("1.2.3") == semver("1.0.0")"#, Bool(false)),
    // library/semver_test.go TestSemver "semver_less"
    (r#"semver("1.0.0").isLessThan(semver("1.2.3"))"#, Bool(true)),
    // library/semver_test.go TestSemver "semver_less_false"
    (
        r#"semver("1.0.0").isLessThan(semver("1.0.0"))"#,
        Bool(false),
    ),
    // library/semver_test.go TestSemver "semver_greater"
    (
        r#"semver("1.2.3").isGreaterThan(semver("1.0.0"))"#,
        Bool(true),
    ),
    // library/semver_test.go TestSemver "semver_greater_false"
    (
        r#"semver("1.0.0").isGreaterThan(semver("1.0.0"))"#,
        Bool(false),
    ),
    // library/semver_test.go TestSemver "compare_equal"
    (r#"semver("1.2.3").compareTo(semver("1.2.3"))"#, Int(0)),
    // library/semver_test.go TestSemver "compare_less"
    (r#"semver("1.0.0").compareTo(semver("1.2.3"))"#, Int(-1)),
    // library/semver_test.go TestSemver "compare_greater"
    (r#"semver("1.2.3").compareTo(semver("1.0.0"))"#, Int(1)),
    // library/semver_test.go TestSemver "major"
    (r#"semver("1.2.3").major()"#, Int(1)),
    // library/semver_test.go TestSemver "minor"
    (r#"semver("1.2.3").minor()"#, Int(2)),
    // library/semver_test.go TestSemver "patch"
    (r#"semver("1.2.3").patch()"#, Int(3)),
    // library/semverlib.go doc: semver('1.0.0') // returns a Semver
    ("semver('1.0.0')", SemverOf("1.0.0")),
    // library/semverlib.go doc: semver('0.1.0-alpha.1') // returns a Semver
    ("semver('0.1.0-alpha.1')", SemverOf("0.1.0-alpha.1")),
    // library/semverlib.go doc: semver('200K') // error
    ("semver('200K')", AnyErr),
    // library/semverlib.go doc: semver('Three') // error
    ("semver('Three')", AnyErr),
    // library/semverlib.go doc: semver('Mi') // error
    ("semver('Mi')", AnyErr),
    // library/semverlib.go doc: semver('v1.0.0', true) // Returns a Semver of "1.0.0"
    ("semver('v1.0.0', true)", SemverOf("1.0.0")),
    // library/semverlib.go doc: semver('1.0', true) // Returns a Semver of "1.0.0"
    ("semver('1.0', true)", SemverOf("1.0.0")),
    // library/semverlib.go doc: semver('01.01.01', true) // Returns a Semver of "1.1.1"
    ("semver('01.01.01', true)", SemverOf("1.1.1")),
    // library/semverlib.go doc: isSemver('1.0.0') // returns true
    ("isSemver('1.0.0')", Bool(true)),
    // library/semverlib.go doc: isSemver('hello') // returns false
    ("isSemver('hello')", Bool(false)),
    // library/semverlib.go doc: isSemver('v1.0') // returns false
    ("isSemver('v1.0')", Bool(false)),
    // library/semverlib.go doc: isSemver('v1.0', true) // returns true
    ("isSemver('v1.0', true)", Bool(true)),
    // library/semverlib.go doc: semver("1.2.3").compareTo(semver("2.0.0")) // returns -1
    (r#"semver("1.2.3").compareTo(semver("2.0.0"))"#, Int(-1)),
    // library/semverlib.go doc: semver("1.2.3").compareTo(semver("0.1.2")) // returns 1
    (r#"semver("1.2.3").compareTo(semver("0.1.2"))"#, Int(1)),
    // [derived] library/semverlib.go normalizeAndParse error text
    (
        "semver('1.0-alpha', true)",
        Error("short version cannot contain PreRelease/Build meta data"),
    ),
    // [derived] blang/semver/v4 Parse: "Major number must not contain leading zeroes %q"
    (
        "semver('01.1.1')",
        Error(r#"Major number must not contain leading zeroes "01""#),
    ),
    // [derived] blang/semver/v4 Parse: "Version string empty"
    ("semver('')", Error("Version string empty")),
    // [derived] blang/semver/v4 Version.Compare: pre-releases sort before the release
    (
        "semver('1.0.0-alpha').isLessThan(semver('1.0.0'))",
        Bool(true),
    ),
    // [derived] apiserver/pkg/cel/semver.go Equal uses Version.EQ, which ignores build metadata
    ("semver('1.0.0+a') == semver('1.0.0+b')", Bool(true)),
];

fn run(table: &[(&str, Want)]) -> usize {
    let mut failures = Vec::new();
    for (expr, want) in table {
        if let Err(e) = check(expr, want) {
            failures.push(format!("{expr}\n    want {want:?}\n    {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    table.len()
}

#[test]
fn quantity_table() {
    run(QUANTITY);
}

#[test]
fn ip_table() {
    run(IP);
}

#[test]
fn cidr_table() {
    run(CIDR);
}

#[test]
fn semver_table() {
    run(SEMVER);
}

#[test]
fn table_has_enough_entries() {
    let n = QUANTITY.len() + IP.len() + CIDR.len() + SEMVER.len();
    assert!(n >= 120, "{n} entries");
}

/// Arbitrary input never panics: random strings over the characters the
/// parsers care about, through every function, and the results combined.
#[test]
fn arbitrary_input_does_not_panic() {
    let env = CelEnvironment::shared();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabets: [&[u8]; 3] = [
        b"0123456789.+-eEinumkKMGTP",
        b"0123456789abcdefABCDEF:.%/",
        b"0123456789.+-vV0alpha",
    ];
    let fns = [
        "quantity('{}').add(quantity('{}')).sub(7).compareTo(quantity('{}'))",
        "quantity('{}').asApproximateFloat() + double(sign(quantity('{}')))",
        "quantity('{}').isInteger() || quantity('{}').asInteger() > 0",
        "ip('{}').isGlobalUnicast() || ip.isCanonical('{}')",
        "cidr('{}').containsCIDR('{}') || cidr('{}').masked().containsIP('{}')",
        "semver('{}', true).compareTo(semver('{}', true))",
    ];
    for round in 0..3000 {
        let alphabet = alphabets[round % 3];
        let mut word = || {
            let len = (next() % 14) as usize;
            (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char)
                .collect::<String>()
        };
        let group = match round % 3 {
            0 => &fns[0..3],
            1 => &fns[3..5],
            _ => &fns[5..],
        };
        let template = group[(round / 3) % group.len()];
        let mut src = String::new();
        for (i, part) in template.split("{}").enumerate() {
            if i > 0 {
                src.push_str(&word());
            }
            src.push_str(part);
        }
        let compiled = env.compile(&src).expect("compiles");
        let ctx = env.context();
        let _ = compiled.evaluate(&ctx);
    }
    for src in [
        "quantity('1e2147483647').add(quantity('1n')).asApproximateFloat()",
        "quantity('1e-2147483648').asApproximateFloat()",
        "quantity('1e9223372036854775807').isInteger()",
        "quantity('1e99999999999999999999')",
        "quantity('9223372036854775807').add(9223372036854775807).sub(-9223372036854775808)",
        "quantity('-9223372036854775808').sub(-9223372036854775808).asInteger()",
        "quantity('123456789012345678901234567890e2000000000')",
        "sign(quantity('0.123456789012345678901234567890e-2000000000'))",
        "quantity('1e2000000000').compareTo(quantity('1.5Gi'))",
        "quantity('1e2000000000').add(quantity('1.5Gi'))",
        "quantity('9Ei').add(quantity('9Ei')).add(quantity('9Ei')).asApproximateFloat()",
        "ip('1:2:3:4:5:6:7:8:9')",
        "ip('::ffff:255.255.255.256')",
        "cidr('::/99999999999999999999999')",
        "semver('99999999999999999999.0.0')",
        "semver('18446744073709551615.0.0').major()",
    ] {
        let compiled = env.compile(src).expect("compiles");
        let ctx = env.context();
        let _ = compiled.evaluate(&ctx);
    }
    let long = "9".repeat(300_000);
    for src in [
        format!("quantity('{long}')"),
        format!("quantity('0.{}1')", "0".repeat(300_000)),
        format!("isQuantity('{long}Ki')"),
        format!("isSemver('{long}.1.1')"),
        format!("isIP('{long}')"),
    ] {
        let compiled = env.compile(&src).expect("compiles");
        let ctx = env.context();
        let _ = compiled.evaluate(&ctx);
    }
}
