//! A small reader of PromQL, enough to find what a query asks of the
//! metrics: the metric names with their label matchers, and the labels of
//! its groupings (`by`, `without`, `on`, `ignoring`, `group_*`) with the
//! metrics each applies to. Grafana's variables and range durations are
//! skipped.

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Punct(char),
    /// Numbers, durations, Grafana variables, ranges: nothing to check.
    Other,
}

/// PromQL's tokens, enough to find metric names, matchers and groupings.
fn tokens(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            let mut value = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && c != '`' {
                    i += 1;
                }
                if i < chars.len() {
                    value.push(chars[i]);
                }
                i += 1;
            }
            i += 1;
            out.push(Token::Str(value));
        } else if c == '[' {
            // A range or subquery: durations and Grafana's $__rate_interval.
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
            out.push(Token::Other);
        } else if c == '$' {
            i += 1;
            if i < chars.len() && chars[i] == '{' {
                while i < chars.len() && chars[i] != '}' {
                    i += 1;
                }
                i += 1;
            } else {
                while i < chars.len() && ident(chars[i]) {
                    i += 1;
                }
            }
            out.push(Token::Other);
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            out.push(Token::Other);
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// One label matcher of a selector.
#[derive(Clone, Debug, PartialEq)]
pub struct Matcher {
    pub label: String,
    pub op: String,
    pub value: String,
}

/// What a PromQL expression asks of the metrics.
#[derive(Debug, Default, PartialEq)]
pub struct Query {
    /// Metric names with their matchers, in order.
    pub selectors: Vec<(String, Vec<Matcher>)>,
    /// Grouping labels (`by`, `without`, `on`, `ignoring`, `group_*`) with
    /// the metrics of the expression they group.
    pub groupings: Vec<(Vec<String>, Vec<String>)>,
}

/// Words that are neither metrics nor functions (besides [`GROUPING`]).
const KEYWORDS: [&str; 5] = ["and", "or", "unless", "offset", "bool"];

/// Modifiers followed by a list of labels.
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The token index of the parenthesis matching the one at `at`: forward from
/// a `(`, backward from a `)`.
fn matching(tokens: &[Token], at: usize) -> usize {
    let forward = tokens[at] == Token::Punct('(');
    let (deeper, shallower) = if forward { ('(', ')') } else { (')', '(') };
    let order: Box<dyn Iterator<Item = usize>> = if forward {
        Box::new(at..tokens.len())
    } else {
        Box::new((0..=at).rev())
    };
    let mut depth = 0;
    for i in order {
        if tokens[i] == Token::Punct(deeper) {
            depth += 1;
        } else if tokens[i] == Token::Punct(shallower) {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
    }
    if forward {
        tokens.len()
    } else {
        0
    }
}

/// What `expr` asks of the metrics.
pub fn parse_query(expr: &str) -> Query {
    let tokens = tokens(expr);
    let mut query = Query::default();
    // Metric names by token index, to find the ones a grouping applies to.
    let mut metric_at: Vec<(usize, String)> = Vec::new();
    let mut pending: Vec<(Vec<String>, usize, usize)> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let next = tokens.get(i + 1);
        match &tokens[i] {
            Token::Ident(name)
                if GROUPING.contains(&name.as_str()) && next == Some(&Token::Punct('(')) =>
            {
                let end = matching(&tokens, i + 1);
                let labels: Vec<String> = tokens[i + 2..end]
                    .iter()
                    .filter_map(|t| match t {
                        Token::Ident(l) => Some(l.clone()),
                        _ => None,
                    })
                    .collect();
                // `sum by (l) (ARG)` or `sum (ARG) by (l)`; `on`, `ignoring`
                // and `group_*` take the whole expression.
                let scope = if !["by", "without"].contains(&name.as_str()) {
                    (0, tokens.len())
                } else if i > 0 && tokens[i - 1] == Token::Punct(')') {
                    (matching(&tokens, i - 1), i - 1)
                } else if tokens.get(end + 1) == Some(&Token::Punct('(')) {
                    (end + 1, matching(&tokens, end + 1))
                } else {
                    (0, tokens.len())
                };
                pending.push((labels, scope.0, scope.1));
                i = end + 1;
                continue;
            }
            // A function or an aggregation: `f(`, `sum by (`, `sum without (`.
            Token::Ident(_)
                if next == Some(&Token::Punct('('))
                    || matches!(next, Some(Token::Ident(k)) if k == "by" || k == "without") => {}
            Token::Ident(name)
                if KEYWORDS.contains(&name.as_str()) || GROUPING.contains(&name.as_str()) => {}
            Token::Ident(name) => {
                metric_at.push((i, name.clone()));
                if next == Some(&Token::Punct('{')) {
                    let (matchers, end) = matchers_from(&tokens, i + 1);
                    query.selectors.push((name.clone(), matchers));
                    i = end + 1;
                    continue;
                }
                query.selectors.push((name.clone(), Vec::new()));
            }
            Token::Punct('{') => {
                // `{__name__="m", ...}`
                let (m, end) = matchers_from(&tokens, i);
                if let Some(name) = m.iter().find(|m| m.label == "__name__" && m.op == "=") {
                    metric_at.push((i, name.value.clone()));
                    query.selectors.push((name.value.clone(), m.clone()));
                }
                i = end + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    for (labels, from, to) in pending {
        let metrics = metric_at
            .iter()
            .filter(|(at, _)| (from..=to).contains(at))
            .map(|(_, m)| m.clone())
            .collect();
        query.groupings.push((labels, metrics));
    }
    query
}

/// The matchers of the selector whose `{` is at `open`, and where its `}` is.
fn matchers_from(tokens: &[Token], open: usize) -> (Vec<Matcher>, usize) {
    let mut out = Vec::new();
    let mut i = open + 1;
    while i < tokens.len() && tokens[i] != Token::Punct('}') {
        if let Token::Ident(label) = &tokens[i] {
            let mut op = String::new();
            let mut j = i + 1;
            while let Some(Token::Punct(c @ ('=' | '!' | '~'))) = tokens.get(j) {
                op.push(*c);
                j += 1;
            }
            if let Some(Token::Str(value)) = tokens.get(j) {
                out.push(Matcher {
                    label: label.clone(),
                    op,
                    value: value.clone(),
                });
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    (out, i)
}
