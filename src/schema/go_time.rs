//! Go's `time.Parse` and `Time.Format` for the two layouts Kubernetes
//! encodes times with: `metav1.Time` (`time.RFC3339`) and
//! `metav1.MicroTime` (`metav1.RFC3339Micro`).
//!
//! Both types decode with `time.Parse` and encode `t.UTC()` again, a zero
//! time as JSON null, so a mutation's `+02:00` comes back as `Z`, a
//! `Time`'s fraction is gone, and `0001-01-01T00:00:00Z` is null
//! (`metav1.Time.MarshalJSON`, `MicroTime.MarshalJSON`). The parser's
//! messages are Go's, since a mutation's result that does not decode
//! fails with them.

use std::fmt::Write as _;

/// One element of a `time.Parse` layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Elem {
    Lit(&'static str),
    /// `2006`
    Year,
    /// `01`
    Month,
    /// `02`
    Day,
    /// `15`
    Hour,
    /// `04`
    Minute,
    /// `05`
    Second,
    /// `.000000`
    Micros,
    /// `Z07:00`
    Zone,
}

pub(super) struct Layout {
    text: &'static str,
    /// Whether six fraction digits follow the seconds.
    micros: bool,
}

impl Layout {
    fn elems(&self) -> impl Iterator<Item = Elem> + '_ {
        const DATE_TIME: [Elem; 11] = [
            Elem::Year,
            Elem::Lit("-"),
            Elem::Month,
            Elem::Lit("-"),
            Elem::Day,
            Elem::Lit("T"),
            Elem::Hour,
            Elem::Lit(":"),
            Elem::Minute,
            Elem::Lit(":"),
            Elem::Second,
        ];
        DATE_TIME
            .into_iter()
            .chain(self.micros.then_some(Elem::Micros))
            .chain([Elem::Zone])
    }
}

/// `time.RFC3339`, metav1.Time's layout.
pub(super) static RFC3339: Layout = Layout {
    text: "2006-01-02T15:04:05Z07:00",
    micros: false,
};

/// metav1.RFC3339Micro, metav1.MicroTime's layout.
pub(super) static RFC3339_MICRO: Layout = Layout {
    text: "2006-01-02T15:04:05.000000Z07:00",
    micros: true,
};

impl Elem {
    fn text(self) -> &'static str {
        match self {
            Elem::Lit(s) => s,
            Elem::Year => "2006",
            Elem::Month => "01",
            Elem::Day => "02",
            Elem::Hour => "15",
            Elem::Minute => "04",
            Elem::Second => "05",
            Elem::Micros => ".000000",
            Elem::Zone => "Z07:00",
        }
    }
}

/// `time.Parse` failures: the element could not be read, or read out of range.
enum ElemError {
    Bad,
    Range(&'static str),
}

/// Go's `getnum`: one or two digits (two when `fixed`).
fn getnum(s: &[u8], fixed: bool) -> Result<(i64, &[u8]), ElemError> {
    let digit = |i: usize| {
        s.get(i)
            .filter(|b| b.is_ascii_digit())
            .map(|b| i64::from(b - b'0'))
    };
    let first = digit(0).ok_or(ElemError::Bad)?;
    match digit(1) {
        Some(second) => Ok((first * 10 + second, &s[2..])),
        None if fixed => Err(ElemError::Bad),
        None => Ok((first, &s[1..])),
    }
}

/// Go's `atoi`: an optional sign and decimal digits, nothing else (as
/// Rust parses an `i64`).
fn atoi(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Reads one element from `value`; the rest of it, and the fields read.
fn parse_elem<'v>(elem: Elem, value: &'v [u8], t: &mut Fields) -> Result<&'v [u8], ElemError> {
    match elem {
        Elem::Lit(_) => Ok(value),
        Elem::Year => {
            if value.len() < 4 || !value[0].is_ascii_digit() {
                return Err(ElemError::Bad);
            }
            t.year = atoi(&value[..4]).ok_or(ElemError::Bad)?;
            Ok(&value[4..])
        }
        Elem::Month => {
            let (month, rest) = getnum(value, true)?;
            if !(1..=12).contains(&month) {
                return Err(ElemError::Range("month"));
            }
            t.month = month;
            Ok(rest)
        }
        Elem::Day => {
            let (day, rest) = getnum(value, true)?;
            t.day = day;
            Ok(rest)
        }
        Elem::Hour => clock(value, false, 24, "hour", &mut t.hour),
        Elem::Minute => clock(value, true, 60, "minute", &mut t.minute),
        Elem::Second => clock(value, true, 60, "second", &mut t.second),
        Elem::Micros => {
            if value.len() < 7 {
                return Err(ElemError::Bad);
            }
            t.nanos = fraction(value, 7)?;
            Ok(&value[7..])
        }
        Elem::Zone => {
            if value.first() == Some(&b'Z') {
                return Ok(&value[1..]);
            }
            if value.len() < 6 || value[3] != b':' {
                return Err(ElemError::Bad);
            }
            let (hour, _) = getnum(&value[1..3], true)?;
            let (minute, _) = getnum(&value[4..6], true)?;
            // A range error is told before a bad sign.
            if minute > 60 {
                return Err(ElemError::Range("time zone offset minute"));
            }
            if hour > 24 {
                return Err(ElemError::Range("time zone offset hour"));
            }
            if !matches!(value[0], b'+' | b'-') {
                return Err(ElemError::Bad);
            }
            let offset = (hour * 60 + minute) * 60;
            t.offset = if value[0] == b'-' { -offset } else { offset };
            Ok(&value[6..])
        }
    }
}

/// An hour, minute or second: `getnum`, then below `limit` (or Go's
/// range error naming `what`), stored in `field`.
fn clock<'v>(
    value: &'v [u8],
    fixed: bool,
    limit: i64,
    what: &'static str,
    field: &mut i64,
) -> Result<&'v [u8], ElemError> {
    let (n, rest) = getnum(value, fixed)?;
    if n >= limit {
        return Err(ElemError::Range(what));
    }
    *field = n;
    Ok(rest)
}

/// Go's `parseNanoseconds` of `value[..n]` (a period or comma, then
/// digits): the nanoseconds, from the first nine digits.
fn fraction(value: &[u8], n: usize) -> Result<i64, ElemError> {
    if !matches!(value.first(), Some(b'.' | b',')) {
        return Err(ElemError::Bad);
    }
    let n = n.min(10);
    match atoi(&value[1..n]) {
        None => Err(ElemError::Bad),
        Some(ns) if ns < 0 => Err(ElemError::Range("fractional second")),
        Some(ns) => Ok(ns * 10i64.pow(10 - n as u32)),
    }
}

/// `time.Parse(layout, s)`'s error message, if it fails.
pub(super) fn time_parse_error(s: &str, layout: &Layout) -> Option<String> {
    parse_time(s, layout).err()
}

/// `time.Parse(layout, s)`: the time read, or the error's message.
pub(super) fn parse_time(s: &str, layout: &Layout) -> Result<GoTime, String> {
    let whole = s.as_bytes();
    let mut value = whole;
    let mut t = Fields::default();
    let cannot = |value_elem: &[u8], layout_elem: &str| {
        format!(
            "parsing time {} as {}: cannot parse {} as {}",
            time_quote(whole),
            time_quote(layout.text.as_bytes()),
            time_quote(value_elem),
            time_quote(layout_elem.as_bytes())
        )
    };
    let range = |what: &str| format!("parsing time {}: {what} out of range", time_quote(whole));
    for elem in layout.elems() {
        if let Elem::Lit(lit) = elem {
            for &b in lit.as_bytes() {
                match value.split_first() {
                    Some((&first, rest)) if first == b => value = rest,
                    _ => return Err(cannot(value, lit)),
                }
            }
            continue;
        }
        let hold = value;
        match parse_elem(elem, value, &mut t) {
            Ok(rest) => value = rest,
            Err(ElemError::Bad) => return Err(cannot(hold, elem.text())),
            Err(ElemError::Range(what)) => return Err(range(what)),
        }
        // A fraction after the seconds is read even when the layout has
        // none (unless the layout's own fraction comes next).
        if elem == Elem::Second
            && !layout.micros
            && value.len() >= 2
            && matches!(value[0], b'.' | b',')
            && value[1].is_ascii_digit()
        {
            let n = 2 + value[2..].iter().take_while(|b| b.is_ascii_digit()).count();
            match fraction(value, n) {
                Ok(nanos) => t.nanos = nanos,
                Err(err) => {
                    return Err(match err {
                        ElemError::Bad => cannot(hold, elem.text()),
                        ElemError::Range(what) => range(what),
                    })
                }
            }
            value = &value[n..];
        }
    }
    if !value.is_empty() {
        return Err(format!(
            "parsing time {}: extra text: {}",
            time_quote(whole),
            time_quote(value)
        ));
    }
    if t.day < 1 || t.day > days_in(t.month, t.year) {
        return Err(range("day"));
    }
    Ok(t.instant())
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The time package's `quote`: bytes outside printable ASCII as `\xNN`.
fn time_quote(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for &b in s {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7f => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
    out
}

/// The fields a layout's elements read; `offset` in seconds east of UTC.
#[derive(Debug, Default)]
struct Fields {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    nanos: i64,
    offset: i64,
}

impl Fields {
    fn instant(&self) -> GoTime {
        let days = days_from_civil(self.year, self.month, self.day);
        GoTime {
            seconds: days * 86_400 + self.hour * 3_600 + self.minute * 60 + self.second
                - self.offset,
            nanos: self.nanos,
        }
    }
}

/// An instant: seconds since 1970-01-01T00:00:00Z and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GoTime {
    seconds: i64,
    nanos: i64,
}

/// `time.Time{}`'s instant, January 1 of year 1, UTC.
const ZERO_SECONDS: i64 = -62_135_596_800;

impl GoTime {
    /// `Time.IsZero`.
    pub(super) fn is_zero(self) -> bool {
        self.seconds == ZERO_SECONDS && self.nanos == 0
    }

    /// Whether `t.UTC().Format` writes a year `time.Parse` reads back
    /// (0000 to 9999): kube-apiserver cannot decode a time it encoded
    /// outside them (a 500 for the request).
    pub(super) fn year_parses(self) -> bool {
        let (year, _, _) = civil_from_days(self.seconds.div_euclid(86_400));
        (0..=9999).contains(&year)
    }

    /// `t.UTC().Format(layout)`.
    pub(super) fn format_utc(self, layout: &Layout) -> String {
        let days = self.seconds.div_euclid(86_400);
        let secs = self.seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        let mut out = String::with_capacity(32);
        // Go's appendInt(year, 4): a sign, then at least four digits.
        if year < 0 {
            out.push('-');
        }
        let _ = write!(
            out,
            "{:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            year.unsigned_abs(),
            secs / 3_600,
            secs / 60 % 60,
            secs % 60
        );
        if layout.micros {
            let _ = write!(out, ".{:06}", self.nanos / 1_000);
        }
        out.push('Z');
        out
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str, layout: &Layout) -> Option<String> {
        parse_time(s, layout).ok().map(|t| t.format_utc(layout))
    }

    /// Answers from maporacle (k8s.io/apiserver v0.36.2, Go 1.26): a Pod's
    /// creationTimestamp and a Lease's acquireTime written by a JSONPatch.
    #[test]
    fn times_come_back_in_utc_as_go_formats_them() {
        let cases = [
            ("2020-01-02T03:04:05+02:00", "2020-01-02T01:04:05Z"),
            ("2020-01-02T03:04:05.123+02:00", "2020-01-02T01:04:05Z"),
            (
                "2020-01-01T00:00:00.999999999-01:30",
                "2020-01-01T01:30:00Z",
            ),
            ("9999-12-31T23:59:59-05:00", "10000-01-01T04:59:59Z"),
            ("0000-01-01T00:00:00+01:00", "-0001-12-31T23:00:00Z"),
            ("2024-02-29T1:00:00Z", "2024-02-29T01:00:00Z"),
        ];
        for (input, want) in cases {
            assert_eq!(utc(input, &RFC3339).as_deref(), Some(want), "{input}");
        }
        assert_eq!(
            utc("2020-01-02T03:04:05.123456+02:00", &RFC3339_MICRO).as_deref(),
            Some("2020-01-02T01:04:05.123456Z")
        );
        assert_eq!(utc("2020-01-02", &RFC3339), None);
        let year_parses = |s: &str| parse_time(s, &RFC3339).map(GoTime::year_parses);
        assert_eq!(year_parses("9999-12-31T23:59:59-05:00"), Ok(false));
        assert_eq!(year_parses("0000-01-01T00:00:00+01:00"), Ok(false));
        assert_eq!(year_parses("0000-01-01T00:00:00Z"), Ok(true));
        assert_eq!(year_parses("9999-12-31T23:59:59Z"), Ok(true));
    }

    #[test]
    fn the_zero_time_is_january_first_of_year_one_in_utc() {
        let zero = |s: &str, layout: &Layout| parse_time(s, layout).map(GoTime::is_zero);
        assert_eq!(zero("0001-01-01T00:00:00Z", &RFC3339), Ok(true));
        assert_eq!(zero("0001-01-01T01:00:00+01:00", &RFC3339), Ok(true));
        assert_eq!(zero("0001-01-01T00:00:00.5Z", &RFC3339), Ok(false));
        assert_eq!(
            zero("0001-01-01T00:00:00.000000Z", &RFC3339_MICRO),
            Ok(true)
        );
        assert_eq!(zero("1970-01-01T00:00:00Z", &RFC3339), Ok(false));
    }

    #[test]
    fn civil_days_round_trip() {
        for days in [-800_000, -719_528, -1, 0, 1, 59, 365, 11_016, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }
}
