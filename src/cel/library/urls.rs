//! Kubernetes CEL library: URLs (`k8s.io/apiserver/pkg/cel/library/urls.go`).
//!
//! `url(<string>)`, `isURL(<string>)` and the `kubernetes.URL` getters
//! `getScheme`, `getHost`, `getHostname`, `getPort`, `getEscapedPath` and
//! `getQuery`. Parsing follows Go's `net/url` (`ParseRequestURI`, then
//! `Parse`) as built with Go 1.26 defaults: strict colons in `http(s)`
//! hosts, IPv6-only brackets, at most 10000 query parameters.

use cel::common::types::{CelBool, CelList, CelMap, CelMapKey, CelString, Type, STRING_TYPE};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::collections::HashMap;
use std::sync::OnceLock;

static URL_TYPE: Type = Type::new_struct_type("kubernetes.URL");

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], string_to_url)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    cel::add_member_overload!(env, fn get_scheme: (UrlValue) -> CelString, id = "url_get_scheme")?;
    cel::add_member_overload!(env, fn get_host: (UrlValue) -> CelString, id = "url_get_host")?;
    cel::add_member_overload!(env, fn get_hostname: (UrlValue) -> CelString, id = "url_get_hostname")?;
    cel::add_member_overload!(env, fn get_port: (UrlValue) -> CelString, id = "url_get_port")?;
    cel::add_member_overload!(env, fn get_escaped_path: (UrlValue) -> CelString, id = "url_get_escaped_path")?;
    cel::add_member_overload!(env, fn get_query: (UrlValue) -> CelMap, id = "url_get_query")?;
    Ok(())
}

/// A `kubernetes.URL` value: a parsed URL.
#[derive(Debug, Clone)]
pub struct UrlValue {
    url: GoUrl,
}

impl Val for UrlValue {
    fn get_type(&self) -> &Type {
        &URL_TYPE
    }

    fn cel_type() -> &'static Type {
        &URL_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<UrlValue>()
            .is_some_and(|o| o.url.to_go_string() == self.url.to_go_string())
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for UrlValue {}

fn lossy(b: &[u8]) -> CelString<'static> {
    CelString::from(String::from_utf8_lossy(b).into_owned())
}

fn string_arg<'a>(args: &'a [CowVal<'_, '_>], function: &str) -> Result<&'a str, ExecutionError> {
    match args {
        [s] => s
            .downcast_ref::<CelString>()
            .map(|s| s.inner())
            .ok_or_else(|| super::lists::no_such_overload(function)),
        _ => Err(super::lists::no_such_overload(function)),
    }
}

fn string_to_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let s = string_arg(&args, "url")?;
    let conversion = |e: String| {
        ExecutionError::function_error(
            "url",
            format!("URL parse error during conversion from string: {e}"),
        )
    };
    parse_request_uri(s).map_err(conversion)?;
    let url = parse(s).map_err(conversion)?;
    Ok(CowVal::owned(UrlValue { url }))
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let s = string_arg(&args, "isURL")?;
    Ok(CowVal::owned(CelBool::from(parse_request_uri(s).is_ok())))
}

fn get_scheme(u: &UrlValue) -> CelString<'static> {
    CelString::from(u.url.scheme.clone())
}

fn get_host(u: &UrlValue) -> CelString<'static> {
    lossy(&u.url.host)
}

fn get_hostname(u: &UrlValue) -> CelString<'static> {
    lossy(split_host_port(&u.url.host).0)
}

fn get_port(u: &UrlValue) -> CelString<'static> {
    lossy(split_host_port(&u.url.host).1)
}

fn get_escaped_path(u: &UrlValue) -> CelString<'static> {
    CelString::from(u.url.escaped_path())
}

fn get_query(u: &UrlValue) -> CelMap<'static> {
    let mut out: HashMap<CelMapKey<'static>, Box<dyn Val + 'static>> = HashMap::new();
    for (k, vs) in parse_query(&u.url.raw_query) {
        let list: Vec<Box<dyn Val>> = vs
            .iter()
            .map(|v| Box::new(lossy(v)) as Box<dyn Val>)
            .collect();
        out.insert(
            CelMapKey::from(String::from_utf8_lossy(&k).into_owned()),
            Box::new(CelList::from(list)),
        );
    }
    CelMap::from(out)
}

// ---------------------------------------------------------------------------
// Go's strconv.Quote.

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols
/// and the ASCII space.
fn is_print(c: char) -> bool {
    static PRINT: OnceLock<regex::Regex> = OnceLock::new();
    if c == ' ' {
        return true;
    }
    if c.is_ascii() {
        return c.is_ascii_graphic();
    }
    PRINT
        .get_or_init(|| {
            regex::Regex::new(r"^[\p{L}\p{M}\p{N}\p{P}\p{S}]$")
                .unwrap_or_else(|_| regex::Regex::new("^$").expect("valid"))
        })
        .is_match(c.encode_utf8(&mut [0; 4]))
}

/// Go's `strconv.Quote` of the bytes `b` (which may not be UTF-8).
pub fn go_quote(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len() + 2);
    out.push('"');
    let mut rest = b;
    while !rest.is_empty() {
        let (c, width) = match std::str::from_utf8(rest) {
            Ok(s) => {
                let c = s.chars().next().unwrap_or('\u{fffd}');
                (Some(c), c.len_utf8())
            }
            Err(e) if e.valid_up_to() > 0 => {
                let s = std::str::from_utf8(&rest[..e.valid_up_to()]).unwrap_or_default();
                let c = s.chars().next().unwrap_or('\u{fffd}');
                (Some(c), c.len_utf8())
            }
            Err(_) => (None, 1),
        };
        match c {
            None => out.push_str(&format!("\\x{:02x}", rest[0])),
            Some('"') => out.push_str("\\\""),
            Some('\\') => out.push_str("\\\\"),
            Some(c) if is_print(c) => out.push(c),
            Some('\u{7}') => out.push_str("\\a"),
            Some('\u{8}') => out.push_str("\\b"),
            Some('\u{c}') => out.push_str("\\f"),
            Some('\n') => out.push_str("\\n"),
            Some('\r') => out.push_str("\\r"),
            Some('\t') => out.push_str("\\t"),
            Some('\u{b}') => out.push_str("\\v"),
            Some(c) if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            Some(c) if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            Some(c) => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
        rest = &rest[width.min(rest.len())..];
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------
// Go's net/url.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

/// A URL as Go's `url.URL` holds it; the decoded parts are bytes, as Go
/// strings may hold any.
#[derive(Debug, Clone, Default)]
pub struct GoUrl {
    scheme: String,
    opaque: String,
    user: Option<(Vec<u8>, Option<Vec<u8>>)>,
    host: Vec<u8>,
    path: Vec<u8>,
    raw_path: String,
    omit_host: bool,
    force_query: bool,
    raw_query: String,
    fragment: Vec<u8>,
    raw_fragment: String,
}

fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host | Mode::Zone)
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => return c == b'?',
            Mode::UserPassword => return matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::QueryComponent => return true,
            Mode::Fragment => return false,
            Mode::Host | Mode::Zone => {}
        },
        _ => {}
    }
    if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
        return false;
    }
    true
}

fn unhex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

fn escape_error(s: &[u8]) -> String {
    format!("invalid URL escape {}", go_quote(s))
}

/// Go's `unescape`.
fn unescape(s: &[u8], mode: Mode) -> Result<Vec<u8>, String> {
    let mut n = 0;
    let mut has_plus = false;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                n += 1;
                if i + 2 >= s.len()
                    || !s[i + 1].is_ascii_hexdigit()
                    || !s[i + 2].is_ascii_hexdigit()
                {
                    let end = (i + 3).min(s.len());
                    return Err(escape_error(&s[i..end]));
                }
                if mode == Mode::Host && unhex(s[i + 1]) < 8 && &s[i..i + 3] != b"%25" {
                    return Err(escape_error(&s[i..i + 3]));
                }
                if mode == Mode::Zone {
                    let v = unhex(s[i + 1]) << 4 | unhex(s[i + 2]);
                    if &s[i..i + 3] != b"%25" && v != b' ' && should_escape(v, Mode::Host) {
                        return Err(escape_error(&s[i..i + 3]));
                    }
                }
                i += 3;
            }
            b'+' => {
                has_plus = mode == Mode::QueryComponent;
                i += 1;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&s[i..i + 1])
                    ));
                }
                i += 1;
            }
        }
    }
    if n == 0 && !has_plus {
        return Ok(s.to_vec());
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                out.push(unhex(s[i + 1]) << 4 | unhex(s[i + 2]));
                i += 2;
            }
            b'+' if mode == Mode::QueryComponent => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// Go's `escape`.
fn escape(s: &[u8], mode: Mode) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &c in s {
        if c == b' ' && mode == Mode::QueryComponent {
            out.push('+');
        } else if should_escape(c, mode) {
            out.push('%');
            out.push(HEX[(c >> 4) as usize] as char);
            out.push(HEX[(c & 15) as usize] as char);
        } else {
            out.push(c as char);
        }
    }
    out
}

/// Go's `validEncoded`.
fn valid_encoded(s: &str, mode: Mode) -> bool {
    s.bytes().all(|c| {
        matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(c, mode)
    })
}

fn valid_optional_port(port: &[u8]) -> bool {
    match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

fn valid_userinfo(s: &str) -> bool {
    s.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                '-' | '.'
                    | '_'
                    | ':'
                    | '~'
                    | '!'
                    | '$'
                    | '&'
                    | '\''
                    | '('
                    | ')'
                    | '*'
                    | '+'
                    | ','
                    | ';'
                    | '='
                    | '%'
                    | '@'
            )
    })
}

/// Go's `getScheme`.
fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' => {
                if i == 0 {
                    return Ok(("", raw));
                }
            }
            b':' => {
                if i == 0 {
                    return Err("missing protocol scheme".to_string());
                }
                return Ok((&raw[..i], &raw[i + 1..]));
            }
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// Go's `parseHost`, with Go 1.26's defaults.
fn parse_host(scheme: &str, host: &str) -> Result<Vec<u8>, String> {
    if let Some(open) = host.rfind('[') {
        if open > 0 {
            return Err("invalid IP-literal".to_string());
        }
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".to_string());
        };
        let colon_port = &host[close + 1..];
        if !valid_optional_port(colon_port.as_bytes()) {
            return Err(format!(
                "invalid port {} after host",
                go_quote(colon_port.as_bytes())
            ));
        }
        let unescaped_port = unescape(colon_port.as_bytes(), Mode::Host)?;
        let hostname = &host[1..close];
        let unescaped_hostname = match hostname.find("%25") {
            Some(zone) => {
                let mut h = unescape(&hostname.as_bytes()[..zone], Mode::Host)?;
                h.extend(unescape(&hostname.as_bytes()[zone..], Mode::Zone)?);
                h
            }
            None => unescape(hostname.as_bytes(), Mode::Host)?,
        };
        match parse_addr(&unescaped_hostname) {
            Err(e) => return Err(format!("invalid host: {e}")),
            Ok(true) => return Err("invalid IP-literal".to_string()),
            Ok(false) => {}
        }
        let mut out = vec![b'['];
        out.extend(unescaped_hostname);
        out.push(b']');
        out.extend(unescaped_port);
        return Ok(out);
    }
    if let Some(first) = host.find(':') {
        let last = host.rfind(':').unwrap_or(first);
        let i = if last != first && scheme != "http" && scheme != "https" {
            last
        } else {
            first
        };
        let colon_port = &host[i..];
        if !valid_optional_port(colon_port.as_bytes()) {
            return Err(format!(
                "invalid port {} after host",
                go_quote(colon_port.as_bytes())
            ));
        }
    }
    unescape(host.as_bytes(), Mode::Host)
}

type UserInfo = (Vec<u8>, Option<Vec<u8>>);

fn parse_authority(scheme: &str, authority: &str) -> Result<(Option<UserInfo>, Vec<u8>), String> {
    let at = authority.rfind('@');
    let host = match at {
        None => parse_host(scheme, authority)?,
        Some(i) => parse_host(scheme, &authority[i + 1..])?,
    };
    let Some(i) = at else {
        return Ok((None, host));
    };
    let userinfo = &authority[..i];
    if !valid_userinfo(userinfo) {
        return Err("net/url: invalid userinfo".to_string());
    }
    let user = match userinfo.split_once(':') {
        None => (unescape(userinfo.as_bytes(), Mode::UserPassword)?, None),
        Some((name, password)) => (
            unescape(name.as_bytes(), Mode::UserPassword)?,
            Some(unescape(password.as_bytes(), Mode::UserPassword)?),
        ),
    };
    Ok((Some(user), host))
}

impl GoUrl {
    fn set_path(&mut self, p: &str) -> Result<(), String> {
        let path = unescape(p.as_bytes(), Mode::Path)?;
        self.raw_path = if escape(&path, Mode::Path) == p {
            String::new()
        } else {
            p.to_string()
        };
        self.path = path;
        Ok(())
    }

    fn set_fragment(&mut self, f: &str) -> Result<(), String> {
        let frag = unescape(f.as_bytes(), Mode::Fragment)?;
        self.raw_fragment = if escape(&frag, Mode::Fragment) == f {
            String::new()
        } else {
            f.to_string()
        };
        self.fragment = frag;
        Ok(())
    }

    /// Go's `EscapedPath`.
    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty() && valid_encoded(&self.raw_path, Mode::Path) {
            if let Ok(p) = unescape(self.raw_path.as_bytes(), Mode::Path) {
                if p == self.path {
                    return self.raw_path.clone();
                }
            }
        }
        if self.path == b"*" {
            return "*".to_string();
        }
        escape(&self.path, Mode::Path)
    }

    fn escaped_fragment(&self) -> String {
        if !self.raw_fragment.is_empty() && valid_encoded(&self.raw_fragment, Mode::Fragment) {
            if let Ok(f) = unescape(self.raw_fragment.as_bytes(), Mode::Fragment) {
                if f == self.fragment {
                    return self.raw_fragment.clone();
                }
            }
        }
        escape(&self.fragment, Mode::Fragment)
    }

    /// Go's `URL.String`.
    fn to_go_string(&self) -> String {
        let mut buf = String::new();
        if !self.scheme.is_empty() {
            buf.push_str(&self.scheme);
            buf.push(':');
        }
        if !self.opaque.is_empty() {
            buf.push_str(&self.opaque);
        } else {
            let no_authority = self.host.is_empty() && self.user.is_none();
            if !no_authority || !self.scheme.is_empty() && !self.omit_host {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    buf.push_str("//");
                }
                if let Some((name, password)) = &self.user {
                    buf.push_str(&escape(name, Mode::UserPassword));
                    if let Some(p) = password {
                        buf.push(':');
                        buf.push_str(&escape(p, Mode::UserPassword));
                    }
                    buf.push('@');
                }
                if !self.host.is_empty() {
                    buf.push_str(&escape(&self.host, Mode::Host));
                }
            }
            let path = self.escaped_path();
            if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
                buf.push('/');
            }
            if buf.is_empty() && path.split('/').next().is_some_and(|seg| seg.contains(':')) {
                buf.push_str("./");
            }
            buf.push_str(&path);
        }
        if self.force_query || !self.raw_query.is_empty() {
            buf.push('?');
            buf.push_str(&self.raw_query);
        }
        if !self.fragment.is_empty() {
            buf.push('#');
            buf.push_str(&self.escaped_fragment());
        }
        buf
    }
}

/// Go's unexported `parse`: the error is the inner one, without `parse "..."`.
fn parse_inner(raw: &str, via_request: bool) -> Result<GoUrl, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".to_string());
    }
    let mut url = GoUrl::default();
    if raw == "*" {
        url.path = b"*".to_vec();
        return Ok(url);
    }
    let (scheme, mut rest) = split_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        rest = r;
        url.raw_query = q.to_string();
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_string();
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".to_string());
        }
        if rest.split('/').next().is_some_and(|seg| seg.contains(':')) {
            return Err("first path segment in URL cannot contain colon".to_string());
        }
    }
    if (!url.scheme.is_empty() || !via_request && !rest.starts_with("///"))
        && rest.starts_with("//")
    {
        let mut authority = &rest[2..];
        rest = "";
        if let Some(i) = authority.find('/') {
            rest = &authority[i..];
            authority = &authority[..i];
        }
        let (user, host) = parse_authority(&url.scheme, authority)?;
        url.user = user;
        url.host = host;
    } else if !url.scheme.is_empty() && rest.starts_with('/') {
        url.omit_host = true;
    }
    url.set_path(rest)?;
    Ok(url)
}

/// Go's `url.ParseRequestURI`, with its `*url.Error` text on failure.
pub fn parse_request_uri(raw: &str) -> Result<GoUrl, String> {
    parse_inner(raw, true).map_err(|e| format!("parse {}: {e}", go_quote(raw.as_bytes())))
}

/// Go's `url.Parse`, with its `*url.Error` text on failure.
pub fn parse(raw: &str) -> Result<GoUrl, String> {
    let (u, frag) = raw.split_once('#').unwrap_or((raw, ""));
    let mut url =
        parse_inner(u, false).map_err(|e| format!("parse {}: {e}", go_quote(u.as_bytes())))?;
    if !frag.is_empty() {
        url.set_fragment(frag)
            .map_err(|e| format!("parse {}: {e}", go_quote(raw.as_bytes())))?;
    }
    Ok(url)
}

/// Go's `splitHostPort`: (hostname, port) of a `Host`.
fn split_host_port(host: &[u8]) -> (&[u8], &[u8]) {
    let mut h = host;
    let mut port: &[u8] = b"";
    if let Some(colon) = h.iter().rposition(|&c| c == b':') {
        if valid_optional_port(&h[colon..]) {
            port = &h[colon + 1..];
            h = &h[..colon];
        }
    }
    if h.len() >= 2 && h[0] == b'[' && h[h.len() - 1] == b']' {
        h = &h[1..h.len() - 1];
    }
    (h, port)
}

/// Go's `url.ParseQuery`, errors dropped (as `URL.Query` does): the values
/// of each key, in order. Over 10000 parameters, none.
fn parse_query(query: &str) -> Vec<(Vec<u8>, Vec<Vec<u8>>)> {
    let mut out: Vec<(Vec<u8>, Vec<Vec<u8>>)> = Vec::new();
    if query.matches('&').count() + 1 > 10_000 {
        return out;
    }
    for pair in query.split('&') {
        if pair.contains(';') || pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Ok(k), Ok(v)) = (
            unescape(k.as_bytes(), Mode::QueryComponent),
            unescape(v.as_bytes(), Mode::QueryComponent),
        ) else {
            continue;
        };
        match out.iter_mut().find(|(key, _)| *key == k) {
            Some((_, vs)) => vs.push(v),
            None => out.push((k, vec![v])),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Go's netip.ParseAddr, for the IP literals of hosts.

fn addr_error(input: &[u8], msg: &str, at: &[u8]) -> String {
    if at.is_empty() {
        format!("ParseAddr({}): {msg}", go_quote(input))
    } else {
        format!(
            "ParseAddr({}): {msg} (at {})",
            go_quote(input),
            go_quote(at)
        )
    }
}

/// Go's `netip.ParseAddr`: `Ok(true)` for an IPv4 address, `Ok(false)` for
/// an IPv6 one, Go's error text otherwise.
pub fn parse_addr(s: &[u8]) -> Result<bool, String> {
    for &c in s {
        match c {
            b'.' => return parse_ipv4(s).map(|_| true),
            b':' => return parse_ipv6(s).map(|_| false),
            b'%' => return Err(addr_error(s, "missing IPv6 address", b"")),
            _ => {}
        }
    }
    Err(addr_error(s, "unable to parse IP", b""))
}

fn parse_ipv4(s: &[u8]) -> Result<[u8; 4], String> {
    let mut fields = [0u8; 4];
    let mut val: u32 = 0;
    let mut pos = 0;
    let mut dig_len = 0;
    for i in 0..s.len() {
        let c = s[i];
        if c.is_ascii_digit() {
            if dig_len == 1 && val == 0 {
                return Err(addr_error(s, "IPv4 field has octet with leading zero", b""));
            }
            val = val * 10 + u32::from(c - b'0');
            dig_len += 1;
            if val > 255 {
                return Err(addr_error(s, "IPv4 field has value >255", b""));
            }
        } else if c == b'.' {
            if i == 0 || i == s.len() - 1 || s[i - 1] == b'.' {
                return Err(addr_error(
                    s,
                    "IPv4 field must have at least one digit",
                    &s[i..],
                ));
            }
            if pos == 3 {
                return Err(addr_error(s, "IPv4 address too long", b""));
            }
            fields[pos] = val as u8;
            pos += 1;
            val = 0;
            dig_len = 0;
        } else {
            return Err(addr_error(s, "unexpected character", &s[i..]));
        }
    }
    if pos < 3 {
        return Err(addr_error(s, "IPv4 address too short", b""));
    }
    fields[3] = val as u8;
    Ok(fields)
}

fn parse_ipv6(input: &[u8]) -> Result<(), String> {
    let mut s = input;
    if let Some(i) = s.iter().position(|&c| c == b'%') {
        if i + 1 == s.len() {
            return Err(addr_error(input, "zone must be a non-empty string", b""));
        }
        s = &s[..i];
    }
    let mut ellipsis: Option<usize> = None;
    if s.len() >= 2 && s[0] == b':' && s[1] == b':' {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Ok(());
        }
    }
    let mut i = 0;
    while i < 16 {
        let mut off = 0;
        let mut acc: u32 = 0;
        while off < s.len() {
            let c = s[off];
            let v = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => break,
            };
            acc = (acc << 4) + u32::from(v);
            if acc > 0xffff {
                return Err(addr_error(input, "IPv6 field has value >=2^16", s));
            }
            off += 1;
        }
        if off == 0 {
            return Err(addr_error(
                input,
                "each colon-separated field must have at least one digit",
                s,
            ));
        }
        if off < s.len() && s[off] == b'.' {
            if ellipsis.is_none() && i != 12 {
                return Err(addr_error(
                    input,
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    s,
                ));
            }
            if i + 4 > 16 {
                return Err(addr_error(
                    input,
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    s,
                ));
            }
            if let Err(e) = parse_ipv4(s) {
                return Err(addr_error(input, &e, s));
            }
            s = b"";
            i += 4;
            break;
        }
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if s[0] != b':' {
            return Err(addr_error(input, "unexpected character, want colon", s));
        } else if s.len() == 1 {
            return Err(addr_error(
                input,
                "colon must be followed by more characters",
                s,
            ));
        }
        s = &s[1..];
        if s[0] == b':' {
            if ellipsis.is_some() {
                return Err(addr_error(input, "multiple :: in address", s));
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return Err(addr_error(input, "trailing garbage after address", s));
    }
    if i < 16 {
        if ellipsis.is_none() {
            return Err(addr_error(input, "address string too short", b""));
        }
    } else if ellipsis.is_some() {
        return Err(addr_error(
            input,
            "the :: must expand to at least one field of zeros",
            b"",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameter_limit() {
        // Go 1.26 net/url parseQuery: more than 10000 parameters is an error,
        // which URL.Query drops with everything parsed.
        let at_limit = vec!["a=1"; 10_000].join("&");
        assert_eq!(parse_query(&at_limit)[0].1.len(), 10_000);
        let over = vec!["a=1"; 10_001].join("&");
        assert!(parse_query(&over).is_empty());
    }

    #[test]
    fn quote_like_go() {
        assert_eq!(go_quote(b"a\"b\\"), r#""a\"b\\""#);
        assert_eq!(go_quote(b"\x00\x7f\n"), r#""\x00\x7f\n""#);
        assert_eq!(go_quote(b"%\xc3"), r#""%\xc3""#);
        assert_eq!(go_quote("é\u{a0}".as_bytes()), r#""é\u00a0""#);
    }
}
