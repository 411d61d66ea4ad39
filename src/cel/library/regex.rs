//! Kubernetes CEL library: regex (`k8s.io/apiserver/pkg/cel/library/regex.go`).
//!
//! `<string>.find(<regex>)`, `<string>.findAll(<regex>)` and
//! `<string>.findAll(<regex>, <limit>)`, with Go's `regexp` semantics: the
//! pattern is parsed as Go's `regexp/syntax` (RE2, `syntax.Perl` flags) does,
//! with Go's error texts, then translated into an equivalent pattern for the
//! `regex` crate (ASCII `\d`, `\s`, `\w`, `\b`; no octal or `\Q..\E` in the
//! crate's syntax; `{` a literal when it does not start a repetition, ...).
//! `findAll` follows `Regexp.FindAllString`: an empty match right after a
//! previous match is skipped.

use cel::common::types::{CelInt, CelList, CelString, INT_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};

/// Registers the library's functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload(
        "find",
        "string_find_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_all,
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all,
    )?;
    Ok(())
}

/// Go's `*syntax.Error`: `error parsing regexp: <code>: `<expr>``.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoRegexError {
    code: &'static str,
    expr: String,
}

impl fmt::Display for GoRegexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error parsing regexp: {}: `{}`", self.code, self.expr)
    }
}

const ERR_INVALID_CHAR_RANGE: &str = "invalid character class range";
const ERR_INVALID_ESCAPE: &str = "invalid escape sequence";
const ERR_INVALID_NAMED_CAPTURE: &str = "invalid named capture";
const ERR_INVALID_PERL_OP: &str = "invalid or unsupported Perl syntax";
const ERR_INVALID_REPEAT_OP: &str = "invalid nested repetition operator";
const ERR_INVALID_REPEAT_SIZE: &str = "invalid repeat count";
const ERR_MISSING_BRACKET: &str = "missing closing ]";
const ERR_MISSING_PAREN: &str = "missing closing )";
const ERR_MISSING_REPEAT_ARGUMENT: &str = "missing argument to repetition operator";
const ERR_TRAILING_BACKSLASH: &str = "trailing backslash at end of expression";
const ERR_UNEXPECTED_PAREN: &str = "unexpected )";
const ERR_NESTING_DEPTH: &str = "expression nests too deeply";
const ERR_LARGE: &str = "expression too large";

/// Go's `maxHeight`, `maxRepeat` and `maxSize`.
const MAX_HEIGHT: u32 = 1000;
const MAX_REPEAT: i64 = 1000;
const MAX_SIZE: i64 = (128 << 20) / 40;

/// Compiles a Go regular expression, with Go's error on a syntax error.
pub fn compile_go(pattern: &str) -> Result<regex::Regex, GoRegexError> {
    static CACHE: OnceLock<Mutex<HashMap<String, regex::Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Ok(cache) = cache.lock() {
        if let Some(re) = cache.get(pattern) {
            return Ok(re.clone());
        }
    }
    let translated = Parser::parse(pattern)?;
    let re = regex::RegexBuilder::new(&translated)
        .nest_limit(20_000)
        .size_limit(1 << 28)
        .build()
        .map_err(|_| GoRegexError {
            code: ERR_LARGE,
            expr: pattern.to_string(),
        })?;
    if let Ok(mut cache) = cache.lock() {
        if cache.len() >= 256 {
            cache.clear();
        }
        cache.insert(pattern.to_string(), re.clone());
    }
    Ok(re)
}

/// The syntax error Go reports for `pattern`, if any: what upstream reports
/// at program creation for a constant pattern (`program instantiation
/// failed: <this>`).
pub fn go_regex_error(pattern: &str) -> Option<String> {
    compile_go(pattern).err().map(|e| e.to_string())
}

fn illegal(e: GoRegexError, function: &str) -> ExecutionError {
    ExecutionError::function_error(function, format!("Illegal regex: {e}"))
}

fn string_arg<'a>(v: &'a dyn Val, function: &str) -> Result<&'a str, ExecutionError> {
    v.downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| super::lists::no_such_overload(function))
}

fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 2 {
        return Err(super::lists::no_such_overload("find"));
    }
    let s = string_arg(args[0].as_ref(), "find")?;
    let pattern = string_arg(args[1].as_ref(), "find")?;
    let re = compile_go(pattern).map_err(|e| illegal(e, "find"))?;
    let found = re.find(s).map(|m| m.as_str()).unwrap_or("");
    Ok(CowVal::owned(CelString::from(found.to_string())))
}

fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    if args.len() != 2 && args.len() != 3 {
        return Err(super::lists::no_such_overload("findAll"));
    }
    let s = string_arg(args[0].as_ref(), "findAll")?;
    let pattern = string_arg(args[1].as_ref(), "findAll")?;
    let limit = match args.get(2) {
        Some(n) => *n
            .downcast_ref::<CelInt>()
            .ok_or_else(|| super::lists::no_such_overload("findAll"))?
            .inner(),
        None => -1,
    };
    let re = compile_go(pattern).map_err(|e| illegal(e, "findAll"))?;
    let found: Vec<Box<dyn Val + 'v>> = find_all_strings(&re, s, limit)
        .into_iter()
        .map(|m| Box::new(CelString::from(m.to_string())) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelList::from(found)))
}

/// `Regexp.FindAllString(s, n)`: successive non-overlapping matches, an
/// empty match abutting the previous match ignored; all of them for `n < 0`.
pub fn find_all_strings<'s>(re: &regex::Regex, s: &'s str, n: i64) -> Vec<&'s str> {
    let limit = if n < 0 {
        usize::MAX
    } else {
        usize::try_from(n).unwrap_or(usize::MAX)
    };
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut prev_end: Option<usize> = None;
    while out.len() < limit && pos <= s.len() {
        let Some(m) = re.find_at(s, pos) else { break };
        let mut accept = true;
        if m.end() == pos {
            if Some(m.start()) == prev_end {
                accept = false;
            }
            pos += s[pos..].chars().next().map_or(1, char::len_utf8);
        } else {
            pos = m.end();
        }
        prev_end = Some(m.end());
        if accept {
            out.push(m.as_str());
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Go regexp/syntax parser and translation.

const FOLD_CASE: u16 = 1;
const ONE_LINE: u16 = 1 << 4;
const DOT_NL: u16 = 1 << 3;
const NON_GREEDY: u16 = 1 << 5;

#[derive(Debug, Clone)]
enum ClassItem {
    /// A range of code points (surrogates possible, as in Go).
    Range(u32, u32),
    /// A Perl or POSIX group, as ranges, maybe negated.
    Group(&'static [(u32, u32)], bool),
    /// A Unicode property; `None` stands for the surrogates (`Cs`).
    Unicode(Option<&'static str>, bool),
}

#[derive(Debug, Clone)]
enum RepeatOp {
    Star,
    Plus,
    Quest,
    Count(i64, i64),
}

#[derive(Debug, Clone)]
enum NodeKind {
    Empty,
    NoMatch,
    Literal(u32, bool),
    Any(bool),
    Class(Vec<ClassItem>, bool, bool),
    BeginLine,
    EndLine,
    BeginText,
    EndText,
    WordBoundary,
    NoWordBoundary,
    Capture(Box<Node>),
    Concat(Vec<Node>),
    Alternate(Vec<Node>),
    Repeat(Box<Node>, RepeatOp, bool),
}

#[derive(Debug, Clone)]
struct Node {
    kind: NodeKind,
    height: u32,
}

impl Node {
    fn leaf(kind: NodeKind) -> Node {
        Node { kind, height: 1 }
    }

    fn with_children(kind: NodeKind) -> Node {
        let height = 1 + match &kind {
            NodeKind::Capture(n) | NodeKind::Repeat(n, _, _) => n.height,
            NodeKind::Concat(v) | NodeKind::Alternate(v) => {
                v.iter().map(|n| n.height).max().unwrap_or(0)
            }
            _ => 0,
        };
        Node { kind, height }
    }

    /// Go's `calcSize`: the compiled size estimate.
    fn size(&self) -> i64 {
        let size = match &self.kind {
            NodeKind::Literal(..) => 1,
            NodeKind::Capture(n) => 2 + n.size(),
            NodeKind::Repeat(n, RepeatOp::Star, _) => 2 + n.size(),
            NodeKind::Repeat(n, RepeatOp::Plus | RepeatOp::Quest, _) => 1 + n.size(),
            NodeKind::Concat(v) => v.iter().map(Node::size).fold(0i64, i64::saturating_add),
            NodeKind::Alternate(v) => v
                .iter()
                .map(Node::size)
                .fold(0i64, i64::saturating_add)
                .saturating_add(v.len() as i64 - 1),
            NodeKind::Repeat(n, RepeatOp::Count(min, max), _) => {
                let sub = n.size();
                if *max == -1 {
                    if *min == 0 {
                        2 + sub
                    } else {
                        1i64.saturating_add(min.saturating_mul(sub))
                    }
                } else {
                    max.saturating_mul(sub).saturating_add(max - min)
                }
            }
            _ => 0,
        };
        size.max(1)
    }
}

enum Item {
    Node(Node),
    /// `(`: capturing or not, and the flags to restore at `)`.
    LeftParen(bool, u16),
    VerticalBar,
}

struct Parser<'a> {
    whole: &'a str,
    flags: u16,
    stack: Vec<Item>,
}

fn err(code: &'static str, expr: &str) -> GoRegexError {
    GoRegexError {
        code,
        expr: expr.to_string(),
    }
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

fn unhex(c: char) -> i64 {
    c.to_digit(16).map_or(-1, i64::from)
}

/// The character at byte `i` of `s` and its length; `None` at the end.
fn char_at(s: &str, i: usize) -> Option<(char, usize)> {
    s.get(i..)
        .and_then(|t| t.chars().next())
        .map(|c| (c, c.len_utf8()))
}

const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
const SPACE_PERL: &[(u32, u32)] = &[(0x09, 0x0a), (0x0c, 0x0d), (0x20, 0x20)];
const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5a), (0x5f, 0x5f), (0x61, 0x7a)];

fn perl_group(c: u8) -> Option<(&'static [(u32, u32)], bool)> {
    Some(match c {
        b'd' => (DIGIT, false),
        b'D' => (DIGIT, true),
        b's' => (SPACE_PERL, false),
        b'S' => (SPACE_PERL, true),
        b'w' => (WORD, false),
        b'W' => (WORD, true),
        _ => return None,
    })
}

fn posix_group(name: &str) -> Option<(&'static [(u32, u32)], bool)> {
    let (negated, base) = match name.strip_prefix("[:^") {
        Some(rest) => (true, rest),
        None => (false, name.strip_prefix("[:")?),
    };
    let ranges: &'static [(u32, u32)] = match base {
        "alnum:]" => &[(0x30, 0x39), (0x41, 0x5a), (0x61, 0x7a)],
        "alpha:]" => &[(0x41, 0x5a), (0x61, 0x7a)],
        "ascii:]" => &[(0x00, 0x7f)],
        "blank:]" => &[(0x09, 0x09), (0x20, 0x20)],
        "cntrl:]" => &[(0x00, 0x1f), (0x7f, 0x7f)],
        "digit:]" => DIGIT,
        "graph:]" => &[(0x21, 0x7e)],
        "lower:]" => &[(0x61, 0x7a)],
        "print:]" => &[(0x20, 0x7e)],
        "punct:]" => &[(0x21, 0x2f), (0x3a, 0x40), (0x5b, 0x60), (0x7b, 0x7e)],
        "space:]" => &[(0x09, 0x0d), (0x20, 0x20)],
        "upper:]" => &[(0x41, 0x5a)],
        "word:]" => WORD,
        "xdigit:]" => &[(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
        _ => return None,
    };
    Some((ranges, negated))
}

/// Go's `canonicalName`: leading letter upper case, the rest lower case,
/// without `_`, `-` and spaces.
fn canonical_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut first = true;
    for c in name.chars() {
        if c == '_' || c == '-' || c == ' ' {
            continue;
        }
        if first {
            out.push(c.to_ascii_uppercase());
            first = false;
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

const CATEGORIES: &[&str] = &[
    "C", "Cc", "Cf", "Cn", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn",
    "N", "Nd", "Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm",
    "So", "Z", "Zl", "Zp", "Zs",
];

/// `unicode.CategoryAliases`, by canonical name.
const CATEGORY_ALIASES: &[(&str, &str)] = &[
    ("Casedletter", "LC"),
    ("Closepunctuation", "Pe"),
    ("Combiningmark", "M"),
    ("Connectorpunctuation", "Pc"),
    ("Control", "Cc"),
    ("Currencysymbol", "Sc"),
    ("Dashpunctuation", "Pd"),
    ("Decimalnumber", "Nd"),
    ("Enclosingmark", "Me"),
    ("Finalpunctuation", "Pf"),
    ("Format", "Cf"),
    ("Initialpunctuation", "Pi"),
    ("Letter", "L"),
    ("Letternumber", "Nl"),
    ("Lineseparator", "Zl"),
    ("Lowercaseletter", "Ll"),
    ("Mark", "M"),
    ("Mathsymbol", "Sm"),
    ("Modifierletter", "Lm"),
    ("Modifiersymbol", "Sk"),
    ("Nonspacingmark", "Mn"),
    ("Number", "N"),
    ("Openpunctuation", "Ps"),
    ("Other", "C"),
    ("Otherletter", "Lo"),
    ("Othernumber", "No"),
    ("Otherpunctuation", "Po"),
    ("Othersymbol", "So"),
    ("Paragraphseparator", "Zp"),
    ("Privateuse", "Co"),
    ("Punctuation", "P"),
    ("Separator", "Z"),
    ("Spaceseparator", "Zs"),
    ("Spacingmark", "Mc"),
    ("Surrogate", "Cs"),
    ("Symbol", "S"),
    ("Titlecaseletter", "Lt"),
    ("Unassigned", "Cn"),
    ("Uppercaseletter", "Lu"),
    ("Cntrl", "Cc"),
    ("Digit", "Nd"),
    ("Punct", "P"),
];

/// The scripts of `unicode.Scripts` whose key is already a canonical name.
const SCRIPTS: &[&str] = &[
    "Adlam",
    "Ahom",
    "Arabic",
    "Armenian",
    "Avestan",
    "Balinese",
    "Bamum",
    "Batak",
    "Bengali",
    "Bhaiksuki",
    "Bopomofo",
    "Brahmi",
    "Braille",
    "Buginese",
    "Buhid",
    "Carian",
    "Chakma",
    "Cham",
    "Cherokee",
    "Chorasmian",
    "Common",
    "Coptic",
    "Cuneiform",
    "Cypriot",
    "Cyrillic",
    "Deseret",
    "Devanagari",
    "Dogra",
    "Duployan",
    "Elbasan",
    "Elymaic",
    "Ethiopic",
    "Georgian",
    "Glagolitic",
    "Gothic",
    "Grantha",
    "Greek",
    "Gujarati",
    "Gurmukhi",
    "Han",
    "Hangul",
    "Hanunoo",
    "Hatran",
    "Hebrew",
    "Hiragana",
    "Inherited",
    "Javanese",
    "Kaithi",
    "Kannada",
    "Katakana",
    "Kawi",
    "Kharoshthi",
    "Khmer",
    "Khojki",
    "Khudawadi",
    "Lao",
    "Latin",
    "Lepcha",
    "Limbu",
    "Lisu",
    "Lycian",
    "Lydian",
    "Mahajani",
    "Makasar",
    "Malayalam",
    "Mandaic",
    "Manichaean",
    "Marchen",
    "Medefaidrin",
    "Miao",
    "Modi",
    "Mongolian",
    "Mro",
    "Multani",
    "Myanmar",
    "Nabataean",
    "Nandinagari",
    "Newa",
    "Nko",
    "Nushu",
    "Ogham",
    "Oriya",
    "Osage",
    "Osmanya",
    "Palmyrene",
    "Phoenician",
    "Rejang",
    "Runic",
    "Samaritan",
    "Saurashtra",
    "Sharada",
    "Shavian",
    "Siddham",
    "Sinhala",
    "Sogdian",
    "Soyombo",
    "Sundanese",
    "Syriac",
    "Tagalog",
    "Tagbanwa",
    "Takri",
    "Tamil",
    "Tangsa",
    "Tangut",
    "Telugu",
    "Thaana",
    "Thai",
    "Tibetan",
    "Tifinagh",
    "Tirhuta",
    "Toto",
    "Ugaritic",
    "Vai",
    "Vithkuqi",
    "Wancho",
    "Yezidi",
    "Yi",
];

/// Go's `unicodeTable`: the property (`None` for the surrogates) and
/// whether it is inverted, for a `\p` name Go knows.
fn unicode_table(name: &str) -> Option<(Option<&'static str>, bool)> {
    let name = canonical_name(name);
    let category = |c: &'static str| if c == "Cs" { None } else { Some(c) };
    match name.as_str() {
        "Any" => return Some((Some("Any"), false)),
        "Assigned" => return Some((Some("Cn"), true)),
        "Ascii" => return Some((Some("ASCII"), false)),
        "Lc" => return Some((Some("LC"), false)),
        _ => {}
    }
    if let Some(c) = CATEGORIES.iter().find(|c| **c == name) {
        return Some((category(c), false));
    }
    if let Some(s) = SCRIPTS.iter().find(|s| **s == name) {
        return Some((Some(s), false));
    }
    CATEGORY_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map(|(_, c)| (category(c), false))
}

impl<'a> Parser<'a> {
    /// Parses `s` as Go does and returns the equivalent `regex` crate pattern.
    fn parse(s: &'a str) -> Result<String, GoRegexError> {
        let mut p = Parser {
            whole: s,
            flags: ONE_LINE,
            stack: Vec::new(),
        };
        let mut t = 0usize;
        let mut last_repeat: Option<usize> = None;
        while t < s.len() {
            let mut repeat: Option<usize> = None;
            let b = s.as_bytes()[t];
            match b {
                b'(' => {
                    if s[t..].starts_with("(?") {
                        t = p.parse_perl_flags(t)?;
                    } else {
                        p.stack.push(Item::LeftParen(true, p.flags));
                        t += 1;
                    }
                }
                b'|' => {
                    p.parse_vertical_bar()?;
                    t += 1;
                }
                b')' => {
                    p.parse_right_paren()?;
                    t += 1;
                }
                b'^' => {
                    p.push_leaf(if p.flags & ONE_LINE != 0 {
                        NodeKind::BeginText
                    } else {
                        NodeKind::BeginLine
                    });
                    t += 1;
                }
                b'$' => {
                    p.push_leaf(if p.flags & ONE_LINE != 0 {
                        NodeKind::EndText
                    } else {
                        NodeKind::EndLine
                    });
                    t += 1;
                }
                b'.' => {
                    p.push_leaf(NodeKind::Any(p.flags & DOT_NL != 0));
                    t += 1;
                }
                b'[' => t = p.parse_class(t)?,
                b'*' | b'+' | b'?' => {
                    let op = match b {
                        b'*' => RepeatOp::Star,
                        b'+' => RepeatOp::Plus,
                        _ => RepeatOp::Quest,
                    };
                    let after = p.repeat(op, t, t + 1, last_repeat)?;
                    repeat = Some(t);
                    t = after;
                }
                b'{' => match parse_repeat(s, t) {
                    None => {
                        p.literal('{' as u32);
                        t += 1;
                    }
                    Some((min, max, after)) => {
                        if !(0..=MAX_REPEAT).contains(&min)
                            || max > MAX_REPEAT
                            || (max >= 0 && min > max)
                        {
                            return Err(err(ERR_INVALID_REPEAT_SIZE, &s[t..after]));
                        }
                        let after = p.repeat(RepeatOp::Count(min, max), t, after, last_repeat)?;
                        repeat = Some(t);
                        t = after;
                    }
                },
                b'\\' => t = p.parse_backslash(t)?,
                _ => {
                    let (c, n) = char_at(s, t).unwrap_or(('\u{fffd}', 1));
                    p.literal(c as u32);
                    t += n;
                }
            }
            last_repeat = repeat;
        }
        p.concat()?;
        if p.swap_vertical_bar() {
            p.stack.pop();
        }
        p.alternate()?;
        if p.stack.len() != 1 {
            return Err(err(ERR_MISSING_PAREN, s));
        }
        let Some(Item::Node(root)) = p.stack.pop() else {
            return Err(err(ERR_MISSING_PAREN, s));
        };
        if root.size() > MAX_SIZE {
            return Err(err(ERR_LARGE, s));
        }
        let mut out = String::with_capacity(s.len() * 2);
        emit(&root, &mut out);
        Ok(out)
    }

    fn check_height(&self, node: &Node) -> Result<(), GoRegexError> {
        if node.height > MAX_HEIGHT {
            return Err(err(ERR_NESTING_DEPTH, self.whole));
        }
        Ok(())
    }

    fn push_node(&mut self, node: Node) -> Result<(), GoRegexError> {
        self.check_height(&node)?;
        self.stack.push(Item::Node(node));
        Ok(())
    }

    fn push_leaf(&mut self, kind: NodeKind) {
        self.stack.push(Item::Node(Node::leaf(kind)));
    }

    fn literal(&mut self, c: u32) {
        let fold = self.flags & FOLD_CASE != 0;
        self.push_leaf(NodeKind::Literal(c, fold));
    }

    fn parse_backslash(&mut self, t: usize) -> Result<usize, GoRegexError> {
        let s = self.whole;
        if let Some(&next) = s.as_bytes().get(t + 1) {
            match next {
                b'A' => {
                    self.push_leaf(NodeKind::BeginText);
                    return Ok(t + 2);
                }
                b'b' => {
                    self.push_leaf(NodeKind::WordBoundary);
                    return Ok(t + 2);
                }
                b'B' => {
                    self.push_leaf(NodeKind::NoWordBoundary);
                    return Ok(t + 2);
                }
                b'C' => return Err(err(ERR_INVALID_ESCAPE, &s[t..t + 2])),
                b'Q' => {
                    let rest = &s[t + 2..];
                    let (lit, end) = match rest.find("\\E") {
                        Some(i) => (&rest[..i], t + 2 + i + 2),
                        None => (rest, s.len()),
                    };
                    for c in lit.chars() {
                        self.literal(c as u32);
                    }
                    return Ok(end);
                }
                b'z' => {
                    self.push_leaf(NodeKind::EndText);
                    return Ok(t + 2);
                }
                _ => {}
            }
        }
        let fold = self.flags & FOLD_CASE != 0;
        if let Some((item, rest)) = parse_unicode_class(s, t)? {
            self.push_leaf(NodeKind::Class(vec![item], false, fold));
            return Ok(rest);
        }
        if let Some((group, negated)) = s.as_bytes().get(t + 1).and_then(|c| perl_group(*c)) {
            self.push_leaf(NodeKind::Class(
                vec![ClassItem::Group(group, negated)],
                false,
                fold,
            ));
            return Ok(t + 2);
        }
        let (c, rest) = parse_escape(s, t)?;
        self.literal(c);
        Ok(rest)
    }

    fn parse_perl_flags(&mut self, t: usize) -> Result<usize, GoRegexError> {
        let s = self.whole;
        let rest = &s[t..];
        let rb = rest.as_bytes();
        let starts_with_p = rb.len() > 4 && rb[2] == b'P' && rb[3] == b'<';
        let starts_with_name = rb.len() > 3 && rb[2] == b'<';
        if starts_with_p || starts_with_name {
            let expr_start = if starts_with_name { 3 } else { 4 };
            let Some(end) = rest.find('>') else {
                return Err(err(ERR_INVALID_NAMED_CAPTURE, rest));
            };
            let capture = &rest[..end + 1];
            let name = &rest[expr_start.min(end)..end];
            if name.is_empty() || !name.chars().all(|c| c == '_' || is_alnum(c)) {
                return Err(err(ERR_INVALID_NAMED_CAPTURE, capture));
            }
            self.stack.push(Item::LeftParen(true, self.flags));
            return Ok(t + end + 1);
        }
        let mut i = t + 2;
        let mut flags = self.flags;
        let mut negative = false;
        let mut saw_flag = false;
        while let Some((c, n)) = char_at(s, i) {
            i += n;
            match c {
                'i' => {
                    flags |= FOLD_CASE;
                    saw_flag = true;
                }
                'm' => {
                    flags &= !ONE_LINE;
                    saw_flag = true;
                }
                's' => {
                    flags |= DOT_NL;
                    saw_flag = true;
                }
                'U' => {
                    flags |= NON_GREEDY;
                    saw_flag = true;
                }
                '-' => {
                    if negative {
                        break;
                    }
                    negative = true;
                    flags = !flags;
                    saw_flag = false;
                }
                ':' | ')' => {
                    if negative {
                        if !saw_flag {
                            break;
                        }
                        flags = !flags;
                    }
                    if c == ':' {
                        self.stack.push(Item::LeftParen(false, self.flags));
                    }
                    self.flags = flags;
                    return Ok(i);
                }
                _ => break,
            }
        }
        Err(err(ERR_INVALID_PERL_OP, &s[t..i]))
    }

    /// Replaces the top of the stack with itself repeated; returns where
    /// parsing resumes.
    fn repeat(
        &mut self,
        op: RepeatOp,
        before: usize,
        mut after: usize,
        last_repeat: Option<usize>,
    ) -> Result<usize, GoRegexError> {
        let s = self.whole;
        let mut flags = self.flags;
        if s.as_bytes().get(after) == Some(&b'?') {
            after += 1;
            flags ^= NON_GREEDY;
        }
        if let Some(last) = last_repeat {
            return Err(err(ERR_INVALID_REPEAT_OP, &s[last..after]));
        }
        let sub = match self.stack.pop() {
            Some(Item::Node(n)) => n,
            other => {
                if let Some(item) = other {
                    self.stack.push(item);
                }
                return Err(err(ERR_MISSING_REPEAT_ARGUMENT, &s[before..after]));
            }
        };
        let counted = match op {
            RepeatOp::Count(min, max) => min >= 2 || max >= 2,
            _ => false,
        };
        let node =
            Node::with_children(NodeKind::Repeat(Box::new(sub), op, flags & NON_GREEDY == 0));
        self.check_height(&node)?;
        if counted && !repeat_is_valid(&node, MAX_REPEAT) {
            return Err(err(ERR_INVALID_REPEAT_SIZE, &s[before..after]));
        }
        self.stack.push(Item::Node(node));
        Ok(after)
    }

    /// The index just above the topmost `(` or `|`.
    fn pseudo_boundary(&self) -> usize {
        self.stack
            .iter()
            .rposition(|i| !matches!(i, Item::Node(_)))
            .map_or(0, |i| i + 1)
    }

    fn take_nodes(&mut self) -> Vec<Node> {
        let at = self.pseudo_boundary();
        self.stack
            .drain(at..)
            .filter_map(|i| match i {
                Item::Node(n) => Some(n),
                _ => None,
            })
            .collect()
    }

    fn concat(&mut self) -> Result<(), GoRegexError> {
        let subs = self.take_nodes();
        let node = if subs.is_empty() {
            Node::leaf(NodeKind::Empty)
        } else {
            collapse(subs, false)
        };
        self.push_node(node)
    }

    fn alternate(&mut self) -> Result<(), GoRegexError> {
        let subs = self.take_nodes();
        let node = if subs.is_empty() {
            Node::leaf(NodeKind::NoMatch)
        } else {
            collapse(subs, true)
        };
        self.push_node(node)
    }

    fn swap_vertical_bar(&mut self) -> bool {
        let n = self.stack.len();
        if n >= 2 && matches!(self.stack[n - 2], Item::VerticalBar) {
            self.stack.swap(n - 1, n - 2);
            return true;
        }
        false
    }

    fn parse_vertical_bar(&mut self) -> Result<(), GoRegexError> {
        self.concat()?;
        if !self.swap_vertical_bar() {
            self.stack.push(Item::VerticalBar);
        }
        Ok(())
    }

    fn parse_right_paren(&mut self) -> Result<(), GoRegexError> {
        self.concat()?;
        if self.swap_vertical_bar() {
            self.stack.pop();
        }
        self.alternate()?;
        if self.stack.len() < 2 {
            return Err(err(ERR_UNEXPECTED_PAREN, self.whole));
        }
        let re1 = self.stack.pop();
        let re2 = self.stack.pop();
        match (re1, re2) {
            (Some(Item::Node(n)), Some(Item::LeftParen(capture, flags))) => {
                self.flags = flags;
                if capture {
                    self.push_node(Node::with_children(NodeKind::Capture(Box::new(n))))
                } else {
                    self.push_node(n)
                }
            }
            _ => Err(err(ERR_UNEXPECTED_PAREN, self.whole)),
        }
    }

    fn parse_class(&mut self, start: usize) -> Result<usize, GoRegexError> {
        let s = self.whole;
        let whole_class = &s[start..];
        let mut t = start + 1;
        let mut negated = false;
        if s.as_bytes().get(t) == Some(&b'^') {
            negated = true;
            t += 1;
        }
        let mut items = Vec::new();
        let mut first = true;
        while t >= s.len() || s.as_bytes()[t] != b']' || first {
            first = false;
            let rest = &s[t.min(s.len())..];
            if rest.len() > 2 && rest.starts_with("[:") {
                if let Some(i) = rest[2..].find(":]") {
                    let name = &rest[..i + 4];
                    let (group, neg) =
                        posix_group(name).ok_or_else(|| err(ERR_INVALID_CHAR_RANGE, name))?;
                    items.push(ClassItem::Group(group, neg));
                    t += name.len();
                    continue;
                }
            }
            if let Some((item, next)) = parse_unicode_class(s, t)? {
                items.push(item);
                t = next;
                continue;
            }
            if rest.len() >= 2 && rest.as_bytes()[0] == b'\\' {
                if let Some((group, neg)) = perl_group(rest.as_bytes()[1]) {
                    items.push(ClassItem::Group(group, neg));
                    t += 2;
                    continue;
                }
            }
            let range_start = t;
            let (lo, next) = parse_class_char(s, t, whole_class)?;
            t = next;
            let mut hi = lo;
            let rb = &s.as_bytes()[t.min(s.len())..];
            if rb.len() >= 2 && rb[0] == b'-' && rb[1] != b']' {
                t += 1;
                let (h, next) = parse_class_char(s, t, whole_class)?;
                t = next;
                hi = h;
                if hi < lo {
                    return Err(err(ERR_INVALID_CHAR_RANGE, &s[range_start..t]));
                }
            }
            items.push(ClassItem::Range(lo, hi));
        }
        let fold = self.flags & FOLD_CASE != 0;
        self.push_leaf(NodeKind::Class(items, negated, fold));
        Ok(t + 1)
    }
}

/// `(min, max, rest)` for `{n}`, `{n,}` (max -1) or `{n,m}` at `t`; `None`
/// if it is not one (then `{` is a literal). Too big numbers give min -1.
fn parse_repeat(s: &str, t: usize) -> Option<(i64, i64, usize)> {
    let b = s.as_bytes();
    let mut i = t + 1;
    let (mut min, next) = parse_int(b, i)?;
    i = next;
    let max;
    match b.get(i) {
        None => return None,
        Some(b',') => {
            i += 1;
            match b.get(i) {
                None => return None,
                Some(b'}') => max = -1,
                Some(_) => {
                    let (m, next) = parse_int(b, i)?;
                    i = next;
                    max = m;
                    if m < 0 {
                        min = -1;
                    }
                }
            }
        }
        Some(_) => max = min,
    }
    if b.get(i) != Some(&b'}') {
        return None;
    }
    Some((min, max, i + 1))
}

/// Go's `parseInt`: decimal digits without a leading zero; -1 when too big.
fn parse_int(b: &[u8], i: usize) -> Option<(i64, usize)> {
    let first = *b.get(i)?;
    if !first.is_ascii_digit() {
        return None;
    }
    if first == b'0' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let mut j = i;
    let mut n: i64 = 0;
    while j < b.len() && b[j].is_ascii_digit() {
        if n >= 0 {
            if n >= 100_000_000 {
                n = -1;
            } else {
                n = n * 10 + i64::from(b[j] - b'0');
            }
        }
        j += 1;
    }
    Some((n, j))
}

/// Go's `parseEscape` at `t` (a backslash): the escaped code point and
/// where parsing resumes.
fn parse_escape(s: &str, t: usize) -> Result<(u32, usize), GoRegexError> {
    let Some((c, n)) = char_at(s, t + 1) else {
        return Err(err(ERR_TRAILING_BACKSLASH, ""));
    };
    let mut i = t + 1 + n;
    let invalid = |end: usize| err(ERR_INVALID_ESCAPE, &s[t..end]);
    let b = s.as_bytes();
    let is_octal = |i: usize| b.get(i).is_some_and(|d| (b'0'..=b'7').contains(d));
    match c {
        c if c.is_ascii() && !is_alnum(c) => Ok((c as u32, i)),
        '1'..='7' | '0' => {
            if c != '0' && !is_octal(i) {
                return Err(invalid(i));
            }
            let mut r = c as u32 - '0' as u32;
            for _ in 1..3 {
                if !is_octal(i) {
                    break;
                }
                r = r * 8 + u32::from(b[i] - b'0');
                i += 1;
            }
            Ok((r, i))
        }
        'x' => {
            let Some((c, n)) = char_at(s, i) else {
                return Err(invalid(i));
            };
            i += n;
            if c == '{' {
                let mut nhex = 0;
                let mut r: i64 = 0;
                loop {
                    let Some((c, n)) = char_at(s, i) else {
                        return Err(invalid(i));
                    };
                    i += n;
                    if c == '}' {
                        break;
                    }
                    let v = unhex(c);
                    if v < 0 {
                        return Err(invalid(i));
                    }
                    r = r * 16 + v;
                    if r > 0x10FFFF {
                        return Err(invalid(i));
                    }
                    nhex += 1;
                }
                if nhex == 0 {
                    return Err(invalid(i));
                }
                return Ok((r as u32, i));
            }
            let x = unhex(c);
            let y = match char_at(s, i) {
                Some((c, n)) => {
                    i += n;
                    unhex(c)
                }
                None => -1,
            };
            if x < 0 || y < 0 {
                return Err(invalid(i));
            }
            Ok(((x * 16 + y) as u32, i))
        }
        'a' => Ok((7, i)),
        'f' => Ok((12, i)),
        'n' => Ok((10, i)),
        'r' => Ok((13, i)),
        't' => Ok((9, i)),
        'v' => Ok((11, i)),
        _ => Err(invalid(i)),
    }
}

/// Go's `parseClassChar`.
fn parse_class_char(s: &str, t: usize, whole_class: &str) -> Result<(u32, usize), GoRegexError> {
    match char_at(s, t) {
        None => Err(err(ERR_MISSING_BRACKET, whole_class)),
        Some(('\\', _)) => parse_escape(s, t),
        Some((c, n)) => Ok((c as u32, t + n)),
    }
}

/// Go's `parseUnicodeClass` at `t`: `None` if `s[t..]` is not `\p` or `\P`.
fn parse_unicode_class(s: &str, t: usize) -> Result<Option<(ClassItem, usize)>, GoRegexError> {
    let rest = &s[t.min(s.len())..];
    let negated_p = if rest.starts_with("\\p") {
        false
    } else if rest.starts_with("\\P") {
        true
    } else {
        return Ok(None);
    };
    let mut negated = negated_p;
    let (seq, name, next) = match char_at(s, t + 2) {
        Some(('{', _)) => {
            let Some(end) = rest.find('}') else {
                return Err(err(ERR_INVALID_CHAR_RANGE, rest));
            };
            (&rest[..end + 1], &rest[3..end], t + end + 1)
        }
        Some((_, n)) => (&rest[..2 + n], &rest[2..2 + n], t + 2 + n),
        None => (&rest[..2], "", t + 2),
    };
    let name = match name.strip_prefix('^') {
        Some(n) => {
            negated = !negated;
            n
        }
        None => name,
    };
    let (prop, inverted) = unicode_table(name).ok_or_else(|| err(ERR_INVALID_CHAR_RANGE, seq))?;
    Ok(Some((ClassItem::Unicode(prop, negated ^ inverted), next)))
}

/// Go's `repeatIsValid`.
fn repeat_is_valid(node: &Node, mut n: i64) -> bool {
    if let NodeKind::Repeat(_, RepeatOp::Count(min, max), _) = &node.kind {
        let mut m = *max;
        if m == 0 {
            return true;
        }
        if m < 0 {
            m = *min;
        }
        if m > n {
            return false;
        }
        if m > 0 {
            n /= m;
        }
    }
    match &node.kind {
        NodeKind::Capture(sub) | NodeKind::Repeat(sub, _, _) => repeat_is_valid(sub, n),
        NodeKind::Concat(v) | NodeKind::Alternate(v) => v.iter().all(|c| repeat_is_valid(c, n)),
        _ => true,
    }
}

/// A concatenation or alternation of `subs`, hoisting nested ones.
fn collapse(subs: Vec<Node>, alternate: bool) -> Node {
    if subs.len() == 1 {
        return subs
            .into_iter()
            .next()
            .unwrap_or_else(|| Node::leaf(NodeKind::Empty));
    }
    let mut out = Vec::with_capacity(subs.len());
    for sub in subs {
        match (sub.kind, alternate) {
            (NodeKind::Concat(v), false) | (NodeKind::Alternate(v), true) => out.extend(v),
            (kind, _) => out.push(Node {
                kind,
                height: sub.height,
            }),
        }
    }
    Node::with_children(if alternate {
        NodeKind::Alternate(out)
    } else {
        NodeKind::Concat(out)
    })
}

const NEVER: &str = r"[^\x{0}-\x{10FFFF}]";

fn push_code_point(out: &mut String, c: u32) {
    out.push_str(&format!("\\x{{{c:X}}}"));
}

/// Appends `lo-hi` without the surrogates, which no string contains.
fn push_range(out: &mut String, lo: u32, hi: u32) -> bool {
    let mut any = false;
    for (a, b) in [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi.min(0x10FFFF))] {
        if a <= b {
            push_code_point(out, a);
            if b > a {
                out.push('-');
                push_code_point(out, b);
            }
            any = true;
        }
    }
    any
}

fn emit_class(items: &[ClassItem], negated: bool, out: &mut String) {
    let mut body = String::new();
    let mut any = false;
    for item in items {
        match item {
            ClassItem::Range(lo, hi) => any |= push_range(&mut body, *lo, *hi),
            ClassItem::Group(ranges, neg) => {
                body.push('[');
                if *neg {
                    body.push('^');
                }
                for (lo, hi) in ranges.iter() {
                    push_range(&mut body, *lo, *hi);
                }
                body.push(']');
                any = true;
            }
            ClassItem::Unicode(Some(name), neg) => {
                body.push_str(if *neg { "\\P{" } else { "\\p{" });
                body.push_str(name);
                body.push('}');
                any = true;
            }
            ClassItem::Unicode(None, neg) => {
                if *neg {
                    any |= push_range(&mut body, 0, 0x10FFFF);
                }
            }
        }
    }
    if !any {
        out.push_str(if negated {
            r"[\x{0}-\x{10FFFF}]"
        } else {
            NEVER
        });
        return;
    }
    out.push('[');
    if negated {
        out.push('^');
    }
    out.push_str(&body);
    out.push(']');
}

/// Writes `node` as a `regex` crate pattern.
fn emit(node: &Node, out: &mut String) {
    match &node.kind {
        NodeKind::Empty => out.push_str("(?:)"),
        NodeKind::NoMatch => out.push_str(NEVER),
        NodeKind::Literal(c, fold) => {
            if (0xD800..=0xDFFF).contains(c) || *c > 0x10FFFF {
                out.push_str(NEVER);
            } else if *fold {
                out.push_str("(?i:");
                push_code_point(out, *c);
                out.push(')');
            } else {
                push_code_point(out, *c);
            }
        }
        NodeKind::Any(nl) => out.push_str(if *nl { "(?s:.)" } else { "(?-s:.)" }),
        NodeKind::Class(items, negated, fold) => {
            if *fold {
                out.push_str("(?i:");
            }
            emit_class(items, *negated, out);
            if *fold {
                out.push(')');
            }
        }
        NodeKind::BeginLine => out.push_str("(?m:^)"),
        NodeKind::EndLine => out.push_str("(?m:$)"),
        NodeKind::BeginText => out.push_str(r"\A"),
        NodeKind::EndText => out.push_str(r"\z"),
        NodeKind::WordBoundary => out.push_str(r"(?-u:\b)"),
        NodeKind::NoWordBoundary => out.push_str(r"(?-u:\B)"),
        NodeKind::Capture(sub) => {
            out.push_str("(?:");
            emit(sub, out);
            out.push(')');
        }
        NodeKind::Concat(v) => {
            for n in v {
                emit(n, out);
            }
        }
        NodeKind::Alternate(v) => {
            out.push_str("(?:");
            for (i, n) in v.iter().enumerate() {
                if i > 0 {
                    out.push('|');
                }
                emit(n, out);
            }
            out.push(')');
        }
        NodeKind::Repeat(sub, op, greedy) => {
            out.push_str("(?:");
            emit(sub, out);
            out.push(')');
            match op {
                RepeatOp::Star => out.push('*'),
                RepeatOp::Plus => out.push('+'),
                RepeatOp::Quest => out.push('?'),
                RepeatOp::Count(min, max) => {
                    if *max == -1 {
                        out.push_str(&format!("{{{min},}}"));
                    } else if min == max {
                        out.push_str(&format!("{{{min}}}"));
                    } else {
                        out.push_str(&format!("{{{min},{max}}}"));
                    }
                }
            }
            if !greedy {
                out.push('?');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(p: &str) -> String {
        compile_go(p)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn go_syntax_errors() {
        // Go regexp/syntax parse_test.go invalidRegexps and error texts.
        assert_eq!(error(")"), "error parsing regexp: unexpected ): `)`");
        assert_eq!(error("a)"), "error parsing regexp: unexpected ): `a)`");
        assert_eq!(
            error("(abc"),
            "error parsing regexp: missing closing ): `(abc`"
        );
        assert_eq!(
            error("x[a-z"),
            "error parsing regexp: missing closing ]: `[a-z`"
        );
        assert_eq!(
            error("a**"),
            "error parsing regexp: invalid nested repetition operator: `**`"
        );
        assert_eq!(
            error("a*+"),
            "error parsing regexp: invalid nested repetition operator: `*+`"
        );
        assert_eq!(
            error("*"),
            "error parsing regexp: missing argument to repetition operator: `*`"
        );
        assert_eq!(
            error("(*)"),
            "error parsing regexp: missing argument to repetition operator: `*`"
        );
        assert_eq!(
            error("a{1001}"),
            "error parsing regexp: invalid repeat count: `{1001}`"
        );
        assert_eq!(
            error("(a{500}){3}"),
            "error parsing regexp: invalid repeat count: `{3}`"
        );
        assert_eq!(
            error("\\8"),
            "error parsing regexp: invalid escape sequence: `\\8`"
        );
        assert_eq!(
            error("a\\"),
            "error parsing regexp: trailing backslash at end of expression: ``"
        );
        assert_eq!(
            error("(?i)(?x)"),
            "error parsing regexp: invalid or unsupported Perl syntax: `(?x`"
        );
        assert_eq!(
            error("(?P<x y>a)"),
            "error parsing regexp: invalid named capture: `(?P<x y>`"
        );
        assert_eq!(
            error("[z-a]"),
            "error parsing regexp: invalid character class range: `z-a`"
        );
        assert_eq!(
            error("[[:foo:]]"),
            "error parsing regexp: invalid character class range: `[:foo:]`"
        );
        assert_eq!(
            error("\\pX"),
            "error parsing regexp: invalid character class range: `\\pX`"
        );
        assert_eq!(
            error("\\C"),
            "error parsing regexp: invalid escape sequence: `\\C`"
        );
        assert_eq!(error("x{1,2"), "");
        let deep = "(".repeat(1100) + "a" + &")".repeat(1100);
        assert_eq!(
            error(&deep),
            format!("error parsing regexp: expression nests too deeply: `{deep}`")
        );
        assert_eq!(
            error(&"(".repeat(1100)),
            format!(
                "error parsing regexp: missing closing ): `{}`",
                "(".repeat(1100)
            )
        );
    }

    #[test]
    fn go_semantics() {
        let m = |p: &str, s: &str| {
            compile_go(p)
                .unwrap()
                .find(s)
                .map(|m| m.as_str().to_string())
        };
        assert_eq!(m(r"\d+", "a١٢3"), Some("3".into()));
        assert_eq!(m(r"a{,2}", "a{,2}"), Some("a{,2}".into()));
        assert_eq!(m(r"\Q.*\E", "x.*"), Some(".*".into()));
        assert_eq!(m(r"\101", "A"), Some("A".into()));
        assert_eq!(m(r"x{01}", "x{01}"), Some("x{01}".into()));
        let re = compile_go("[0-9]*").unwrap();
        assert_eq!(
            find_all_strings(&re, "123 abc 456", -1),
            vec!["123", "", "", "", "", "456"]
        );
    }

    /// Every pattern Go's parser accepts translates to one the `regex`
    /// crate compiles, and nothing panics.
    #[test]
    fn translation_always_compiles() {
        let alphabet: Vec<char> = r"ab()[]{}|*+?.^$\-:,019iPpxUms<>=!dDwWsSbBAzQE _é"
            .chars()
            .collect();
        let mut seed: u64 = 0x2545F4914F6CDD1D;
        for _ in 0..30_000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 59) as usize;
            let mut p = String::new();
            let mut x = seed;
            for _ in 0..len {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                p.push(alphabet[(x >> 33) as usize % alphabet.len()]);
            }
            if let Ok(translated) = Parser::parse(&p) {
                let built = regex::RegexBuilder::new(&translated)
                    .nest_limit(20_000)
                    .size_limit(1 << 28)
                    .build();
                assert!(built.is_ok(), "{p:?} -> {translated:?}: {built:?}");
                let re = built.unwrap();
                let _ = find_all_strings(&re, "ab(x)é{1}-zz", -1);
            }
        }
    }
}
