//! Go `text/template` templates as CEL string expressions.
//!
//! Katalog's `default` and `override` values are Go templates evaluated
//! against the custom resource (decoded as Kubernetes decodes unstructured
//! objects: integral numbers int64, others float64). This module parses a
//! template (text, actions, pipelines, `if`/`else if`/`else`, `with`,
//! `range` over lists and maps, `$`, variables, `html`, `slice`) and
//! writes the CEL that renders the same string at admission, with Go's
//! rendering of values: a missing key or null is `<no value>`, lists
//! `[a b]`, doubles by `%g`, `printf` verbs with Go's `%!d(string=x)` forms
//! for operands of the wrong type. What CEL cannot express, or what this
//! does not translate (assignments, `define`/`template`/`block`, `break`,
//! `js`, `urlquery`, `call`, printf flags and other verbs),
//! is refused by name.
//!
//! Each value is evaluated once: a CEL expression used more than once is
//! bound by a one-element comprehension (`[E].map(v1, ...)[0]`), since
//! kube-apiserver's CEL has no `cel.bind`.

use super::cel::quote;
use std::cell::Cell;

/// Why a template was not translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// Not a valid template.
    Invalid(String),
    /// Valid Go, but not translated.
    Untranslatable(String),
}

type Result<T> = std::result::Result<T, TemplateError>;

fn invalid<T>(m: impl Into<String>) -> Result<T> {
    Err(TemplateError::Invalid(m.into()))
}

fn untranslatable<T>(m: impl Into<String>) -> Result<T> {
    Err(TemplateError::Untranslatable(m.into()))
}

/// How a field chain at the template's root (`.Spec.Registry`) names a
/// field of the object: its JSON path.
pub type RootFields<'a> = &'a dyn Fn(&[String]) -> Vec<String>;

/// The CEL string expression rendering `template` against `object`.
pub fn translate(template: &str, root: RootFields<'_>) -> Result<String> {
    let nodes = parse(template)?;
    let compiler = Compiler {
        root,
        names: Cell::new(0),
    };
    let scope = Scope {
        dot: Dot::Root,
        vars: Vec::new(),
    };
    compiler.nodes(&nodes, &scope)
}

// ---- parsing ----------------------------------------------------------------

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Action(Pipeline),
    /// `{{ $x := P }}`: `$x` is P's value to the end of the enclosing block.
    Declare(String, Pipeline),
    If(Head, Vec<Node>, Vec<Node>),
    With(Head, Vec<Node>, Vec<Node>),
    Range(Head, Vec<Node>, Vec<Node>),
}

/// The pipeline of an `if`, `with` or `range`, and the variables it
/// declares (`$x :=`; `range $i, $e :=`).
#[derive(Debug, Clone, PartialEq)]
struct Head {
    vars: Vec<String>,
    pipeline: Pipeline,
}

/// `cmd | cmd | ...`: each command's result is the last argument of the next.
type Pipeline = Vec<Command>;
/// A function and its arguments, or a single operand.
type Command = Vec<Operand>;

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `.a.b` (relative to dot); empty for `.` itself.
    Field(Vec<String>),
    /// `$.a.b`: from the template's root, whatever dot is.
    RootField(Vec<String>),
    /// `$x.a.b`: a declared variable and fields of it.
    Variable(String, Vec<String>),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Function(String),
    Sub(Pipeline),
}

/// A lexed action: its tokens.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Field(Vec<String>),
    Ident(String),
    Str(String),
    Number(String),
    Pipe,
    Open,
    Close,
    Variable(String),
    Declare,
    Assign,
    Comma,
}

/// Splits the template into text and actions (`{{- x -}}` trims the
/// neighbouring whitespace, `{{/* */}}` is dropped).
fn split(template: &str) -> Result<Vec<(bool, String)>> {
    let mut out: Vec<(bool, String)> = Vec::new();
    let mut rest = template;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut text = rest[..start].to_string();
        if trim_next {
            text = text.trim_start().to_string();
        }
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return invalid(format!("unclosed {{{{ in {template:?}"));
        };
        let mut inner = &after[..end];
        if inner.starts_with("- ") || inner == "-" {
            text = text.trim_end().to_string();
            inner = &inner[1..];
        }
        trim_next = inner.ends_with(" -");
        if trim_next {
            inner = &inner[..inner.len() - 1];
        }
        if !text.is_empty() {
            out.push((false, text));
        }
        let action = inner.trim();
        if !(action.starts_with("/*") && action.ends_with("*/")) {
            out.push((true, action.to_string()));
        }
        rest = &after[end + 2..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    if !text.is_empty() {
        out.push((false, text.to_string()));
    }
    Ok(out)
}

fn lex(action: &str) -> Result<Vec<Token>> {
    let chars: Vec<char> = action.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let word_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let single = match c {
            '|' => Some(Token::Pipe),
            '(' => Some(Token::Open),
            ')' => Some(Token::Close),
            '=' => Some(Token::Assign),
            ',' => Some(Token::Comma),
            _ => None,
        };
        if let Some(token) = single {
            tokens.push(token);
            i += 1;
            continue;
        }
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '"' => {
                let (s, next) = string_literal(&chars, i, action)?;
                tokens.push(Token::Str(s));
                i = next;
            }
            '`' => {
                let end = chars[i + 1..].iter().position(|&c| c == '`');
                let Some(end) = end else {
                    return invalid(format!("unterminated raw string in {{{{ {action} }}}}"));
                };
                tokens.push(Token::Str(chars[i + 1..i + 1 + end].iter().collect()));
                i += end + 2;
            }
            '.' => {
                let mut names = Vec::new();
                while chars.get(i) == Some(&'.') {
                    let start = i + 1;
                    let mut j = start;
                    while j < chars.len() && word_char(chars[j]) {
                        j += 1;
                    }
                    if j == start {
                        if names.is_empty() && !chars.get(j).is_some_and(|c| c.is_ascii_digit()) {
                            i = j;
                            break;
                        }
                        return invalid(format!("bad field in {{{{ {action} }}}}"));
                    }
                    names.push(chars[start..j].iter().collect());
                    i = j;
                }
                tokens.push(Token::Field(names));
            }
            '$' => {
                let start = i;
                i += 1;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                tokens.push(Token::Variable(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '+')
                    && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) =>
            {
                let start = i;
                i += 1;
                while i < chars.len() {
                    let exponent_sign =
                        matches!(chars[i], '+' | '-') && matches!(chars[i - 1], 'e' | 'E');
                    if !(chars[i].is_ascii_alphanumeric()
                        || matches!(chars[i], '.' | '_')
                        || exponent_sign)
                    {
                        break;
                    }
                    i += 1;
                }
                tokens.push(Token::Number(chars[start..i].iter().collect()));
            }
            c if word_char(c) => {
                let start = i;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                tokens.push(Token::Ident(chars[start..i].iter().collect()));
            }
            ':' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Token::Declare);
                i += 2;
            }
            other => return invalid(format!("unexpected {other:?} in {{{{ {action} }}}}")),
        }
    }
    Ok(tokens)
}

/// A Go interpreted string literal from `chars[start]` (the opening quote).
fn string_literal(chars: &[char], start: usize, action: &str) -> Result<(String, usize)> {
    let mut s = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((s, i + 1)),
            '\\' => {
                let escaped = match chars.get(i + 1) {
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('r') => '\r',
                    Some('\\') => '\\',
                    Some('"') => '"',
                    Some('\'') => '\'',
                    other => {
                        return untranslatable(format!(
                            "string escape \\{} in {{{{ {action} }}}}",
                            other.map(|c| c.to_string()).unwrap_or_default()
                        ))
                    }
                };
                s.push(escaped);
                i += 2;
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    invalid(format!("unterminated string in {{{{ {action} }}}}"))
}

/// Parses a pipeline from `tokens` (all of them).
fn pipeline(tokens: &[Token], action: &str) -> Result<Pipeline> {
    let mut commands = Vec::new();
    let mut current: Command = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Pipe => {
                if current.is_empty() {
                    return invalid(format!("missing command in {{{{ {action} }}}}"));
                }
                commands.push(std::mem::take(&mut current));
            }
            Token::Open => {
                let mut depth = 1;
                let mut j = i + 1;
                while j < tokens.len() && depth > 0 {
                    match tokens[j] {
                        Token::Open => depth += 1,
                        Token::Close => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                if depth != 0 {
                    return invalid(format!("unclosed ( in {{{{ {action} }}}}"));
                }
                current.push(Operand::Sub(pipeline(&tokens[i + 1..j - 1], action)?));
                i = j;
                continue;
            }
            Token::Close => return invalid(format!("unexpected ) in {{{{ {action} }}}}")),
            Token::Field(names) => current.push(Operand::Field(names.clone())),
            Token::Str(s) => current.push(Operand::Str(s.clone())),
            Token::Number(n) => current.push(number(n, action)?),
            Token::Variable(v) if v == "$" => {
                // `$` is the data the template was given (the object).
                let names = match tokens.get(i + 1) {
                    Some(Token::Field(names)) => {
                        i += 1;
                        names.clone()
                    }
                    _ => Vec::new(),
                };
                current.push(Operand::RootField(names));
            }
            Token::Variable(v) => {
                let names = match tokens.get(i + 1) {
                    Some(Token::Field(names)) => {
                        i += 1;
                        names.clone()
                    }
                    _ => Vec::new(),
                };
                current.push(Operand::Variable(v.clone(), names));
            }
            Token::Declare | Token::Comma => {
                return invalid(format!("unexpected declaration in {{{{ {action} }}}}"))
            }
            Token::Assign => {
                return untranslatable(format!(
                    "assignment to a template variable in {{{{ {action} }}}}"
                ))
            }
            Token::Ident(word) => current.push(match word.as_str() {
                "true" => Operand::Bool(true),
                "false" => Operand::Bool(false),
                "nil" => return untranslatable(format!("nil in {{{{ {action} }}}}")),
                _ => Operand::Function(word.clone()),
            }),
        }
        i += 1;
    }
    if current.is_empty() {
        return invalid(format!("missing value in {{{{ {action} }}}}"));
    }
    commands.push(current);
    Ok(commands)
}

fn number(text: &str, action: &str) -> Result<Operand> {
    let clean = text.replace('_', "");
    if let Ok(i) = clean.parse::<i64>() {
        return Ok(Operand::Int(i));
    }
    match clean.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(Operand::Float(f)),
        _ => untranslatable(format!("number {text} in {{{{ {action} }}}}")),
    }
}

/// An action's pipeline and the variables it declares first, if any.
fn head(action: &str, allow_two: bool) -> Result<Head> {
    let tokens = lex(action)?;
    let declared = match tokens.as_slice() {
        [Token::Variable(a), Token::Declare, ..] => Some((vec![a.clone()], 2)),
        [Token::Variable(a), Token::Comma, Token::Variable(b), Token::Declare, ..] if allow_two => {
            Some((vec![a.clone(), b.clone()], 4))
        }
        [Token::Variable(_), Token::Assign, ..] => {
            return untranslatable(format!(
                "assignment to a template variable in {{{{ {action} }}}}"
            ))
        }
        _ => None,
    };
    let (vars, skip) = declared.unwrap_or_default();
    if vars.iter().any(|v| v == "$") {
        return invalid(format!("cannot declare $ in {{{{ {action} }}}}"));
    }
    Ok(Head {
        vars,
        pipeline: pipeline(&tokens[skip..], action)?,
    })
}

/// The keyword an action starts with, if any.
fn keyword(action: &str) -> &str {
    let word = action
        .split(|c: char| c.is_whitespace())
        .next()
        .unwrap_or_default();
    match word {
        "if" | "else" | "end" | "with" | "range" | "define" | "template" | "block" | "break"
        | "continue" => word,
        _ => "",
    }
}

/// Parses the template into nodes.
fn parse(template: &str) -> Result<Vec<Node>> {
    let pieces = split(template)?;
    let mut at = 0;
    let (nodes, end) = parse_nodes(&pieces, &mut at)?;
    match end {
        None => Ok(nodes),
        Some(e) => invalid(format!("unexpected {{{{ {e} }}}} in {template:?}")),
    }
}

/// Nodes up to an `{{ else ... }}` or `{{ end }}` (returned) or the end.
fn parse_nodes(pieces: &[(bool, String)], at: &mut usize) -> Result<(Vec<Node>, Option<String>)> {
    let mut nodes = Vec::new();
    while *at < pieces.len() {
        let (is_action, text) = &pieces[*at];
        *at += 1;
        if !is_action {
            nodes.push(Node::Text(text.clone()));
            continue;
        }
        match keyword(text) {
            "" => {
                let Head { mut vars, pipeline } = head(text, false)?;
                nodes.push(match vars.pop() {
                    Some(var) => Node::Declare(var, pipeline),
                    None => Node::Action(pipeline),
                });
            }
            "else" | "end" => return Ok((nodes, Some(text.clone()))),
            kind @ ("if" | "with" | "range") => nodes.push(parse_branch(kind, text, pieces, at)?),
            other => return untranslatable(format!("template action {{{{ {other} }}}}")),
        }
    }
    Ok((nodes, None))
}

/// `{{ if P }}A{{ else if Q }}B{{ else }}C{{ end }}` (and `with`).
fn parse_branch(
    kind: &str,
    action: &str,
    pieces: &[(bool, String)],
    at: &mut usize,
) -> Result<Node> {
    let condition = head(action[kind.len()..].trim(), kind == "range")?;
    let (then, end) = parse_nodes(pieces, at)?;
    let otherwise = match end.as_deref().map(str::trim) {
        Some("end") => Vec::new(),
        Some("else") => {
            let (otherwise, end) = parse_nodes(pieces, at)?;
            if end.as_deref() != Some("end") {
                return invalid(format!("{{{{ {action} }}}} without {{{{ end }}}}"));
            }
            otherwise
        }
        Some(e) if e.starts_with("else ") => {
            // `else if Q` (or `else with Q`): a nested branch sharing the end.
            let nested = e["else ".len()..].trim().to_string();
            let nested_kind = keyword(&nested);
            if nested_kind != kind {
                return untranslatable(format!("template action {{{{ {e} }}}}"));
            }
            vec![parse_branch(kind, &nested, pieces, at)?]
        }
        _ => return invalid(format!("{{{{ {action} }}}} without {{{{ end }}}}")),
    };
    Ok(match kind {
        "if" => Node::If(condition, then, otherwise),
        "with" => Node::With(condition, then, otherwise),
        _ => Node::Range(condition, then, otherwise),
    })
}

// ---- CEL --------------------------------------------------------------------

/// What `.` and the declared variables are.
#[derive(Debug, Clone)]
struct Scope {
    dot: Dot,
    /// Template variable names and the CEL variables holding them.
    vars: Vec<(String, String)>,
}

impl Scope {
    fn with_dot(&self, dot: Dot) -> Scope {
        Scope {
            dot,
            vars: self.vars.clone(),
        }
    }

    fn with_var(&self, name: &str, cel: &str) -> Scope {
        let mut vars = self.vars.clone();
        vars.push((name.to_string(), cel.to_string()));
        Scope {
            dot: self.dot.clone(),
            vars,
        }
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c.as_str())
    }
}

/// What `.` is.
#[derive(Debug, Clone)]
enum Dot {
    /// The object (field chains go through [`RootFields`]).
    Root,
    /// A CEL value (`with`).
    Value(String),
}

struct Compiler<'a> {
    root: RootFields<'a>,
    names: Cell<usize>,
}

impl Compiler<'_> {
    /// A fresh comprehension variable name.
    fn name(&self) -> String {
        let n = self.names.get() + 1;
        self.names.set(n);
        format!("t{n}")
    }

    /// `body` with `value` bound to a variable, evaluated once.
    fn bind(&self, value: &str, body: impl FnOnce(&str) -> String) -> String {
        let v = self.name();
        format!("[dyn({value})].map({v}, {})[0]", body(&v))
    }

    fn nodes(&self, nodes: &[Node], scope: &Scope) -> Result<String> {
        if nodes.is_empty() {
            return Ok("\"\"".into());
        }
        let mut parts = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if let Node::Declare(name, p) = n {
                // The rest of the block sees the variable.
                let value = self.pipeline(p, scope)?;
                let v = self.name();
                let rest = self.nodes(&nodes[i + 1..], &scope.with_var(name, &v))?;
                parts.push(format!("[dyn({value})].map({v}, {rest})[0]"));
                return Ok(parts.join(" + "));
            }
            parts.push(self.node(n, scope)?);
        }
        Ok(parts.join(" + "))
    }

    fn node(&self, node: &Node, scope: &Scope) -> Result<String> {
        Ok(match node {
            Node::Text(t) => quote(t),
            Node::Action(p) => {
                let value = self.pipeline(p, scope)?;
                self.bind(&value, |v| render(v, "<no value>"))
            }
            Node::Declare(..) => return invalid("a declaration outside a block"),
            Node::If(head, then, otherwise) => {
                let value = self.pipeline(&head.pipeline, scope)?;
                let v = self.name();
                let inner = declared(scope, &head.vars, &v);
                let (then, otherwise) = (self.nodes(then, &inner)?, self.nodes(otherwise, &inner)?);
                format!(
                    "[dyn({value})].map({v}, ({}) ? ({then}) : ({otherwise}))[0]",
                    truth(&v)
                )
            }
            Node::Range(head, body, otherwise) => self.range(head, body, otherwise, scope)?,
            Node::With(head, then, otherwise) => {
                let value = self.pipeline(&head.pipeline, scope)?;
                let v = self.name();
                let inner = declared(scope, &head.vars, &v);
                let then = self.nodes(then, &inner.with_dot(Dot::Value(v.clone())))?;
                let otherwise = self.nodes(otherwise, &inner)?;
                format!(
                    "[dyn({value})].map({v}, ({}) ? ({then}) : ({otherwise}))[0]",
                    truth(&v)
                )
            }
        })
    }

    /// `{{ range P }}B{{ else }}E{{ end }}`: B for each element of a list,
    /// or each value of a map in the order of its keys (Go sorts them), with
    /// dot bound to it (and `range $i, $e :=` its index or key and itself);
    /// E when there is none.
    fn range(
        &self,
        head: &Head,
        body: &[Node],
        otherwise: &[Node],
        scope: &Scope,
    ) -> Result<String> {
        let value = self.pipeline(&head.pipeline, scope)?;
        let (v, k, i, x) = (self.name(), self.name(), self.name(), self.name());
        // Each element as [key or index, value], both dyn so that the two
        // branches have one type for kube-apiserver's checker. Map keys are
        // strings; as such they sort (a list of dyn does not).
        let pairs = format!(
            "(type({v}) == map ? {v}.map({k}, string({k})).sort().map({k}, [dyn({k}), {v}[{k}]]) \
             : {v}.transformList({i}, {k}, [dyn({i}), {k}]))"
        );
        let element = format!("{x}[1]");
        let mut inner = scope.with_dot(Dot::Value(element.clone()));
        match head.vars.as_slice() {
            [] => {}
            [e] => inner = inner.with_var(e, &element),
            [key, e] => {
                inner = inner
                    .with_var(key, &format!("{x}[0]"))
                    .with_var(e, &element)
            }
            _ => return invalid("range declares at most two variables"),
        }
        let body = self.nodes(body, &inner)?;
        let otherwise = self.nodes(otherwise, scope)?;
        Ok(format!(
            "[dyn({value})].map({v}, ({v} == null || size({v}) == 0) ? ({otherwise}) : \
             {pairs}.map({x}, {body}).join(\"\"))[0]"
        ))
    }

    /// The value of a pipeline: each command's result is the last argument
    /// of the next.
    fn pipeline(&self, p: &Pipeline, scope: &Scope) -> Result<String> {
        let mut previous: Option<String> = None;
        for command in p {
            previous = Some(self.command(command, previous, scope)?);
        }
        previous.map_or_else(|| invalid("empty pipeline"), Ok)
    }

    fn command(&self, command: &Command, piped: Option<String>, scope: &Scope) -> Result<String> {
        let Some(Operand::Function(name)) = command.first() else {
            if command.len() > 1 || piped.is_some() {
                return invalid("a value cannot take arguments");
            }
            return self.operand(&command[0], scope);
        };
        let mut args: Vec<String> = command[1..]
            .iter()
            .map(|a| self.operand(a, scope))
            .collect::<Result<_>>()?;
        let mut literals: Vec<Option<&Operand>> = command[1..].iter().map(Some).collect();
        if let Some(p) = piped {
            args.push(p);
            literals.push(None);
        }
        self.function(name, &args, &literals)
    }

    fn operand(&self, operand: &Operand, scope: &Scope) -> Result<String> {
        Ok(match operand {
            Operand::Field(names) => self.field(names, &scope.dot)?,
            Operand::RootField(names) => self.field(names, &Dot::Root)?,
            Operand::Variable(name, names) => match scope.var(name) {
                Some(v) => self.field(names, &Dot::Value(v.to_string()))?,
                None => return invalid(format!("undefined template variable {name}")),
            },
            Operand::Str(s) => quote(s),
            Operand::Int(i) => i.to_string(),
            Operand::Float(f) => format!("{f:?}"),
            Operand::Bool(b) => b.to_string(),
            Operand::Sub(p) => self.pipeline(p, scope)?,
            Operand::Function(name) => self.function(name, &[], &[])?,
        })
    }

    /// A field chain from dot: null when a key is missing (Go's "no value").
    fn field(&self, names: &[String], dot: &Dot) -> Result<String> {
        match dot {
            Dot::Root if names.is_empty() => {
                untranslatable("template {{ . }} renders the whole object")
            }
            Dot::Root => {
                let path = (self.root)(names);
                Ok(format!("{}.orValue(null)", chain("object", &path)))
            }
            Dot::Value(v) if names.is_empty() => Ok(v.clone()),
            Dot::Value(v) => Ok(format!(
                "({v} == null ? null : {}.orValue(null))",
                chain(v, names)
            )),
        }
    }

    fn function(
        &self,
        name: &str,
        args: &[String],
        literals: &[Option<&Operand>],
    ) -> Result<String> {
        let arity = |ok: bool, what: &str| -> Result<()> {
            if ok {
                Ok(())
            } else {
                invalid(format!("wrong number of arguments for {name}: {what}"))
            }
        };
        match name {
            "printf" => {
                arity(!args.is_empty(), "at least a format")?;
                let Some(Some(Operand::Str(format))) = literals.first() else {
                    return untranslatable("printf with a format that is not a string literal");
                };
                self.printf(format, &args[1..])
            }
            "print" | "println" => Ok(self.print(args, name == "println")),
            "len" => {
                arity(args.len() == 1, "one")?;
                Ok(format!("size({})", args[0]))
            }
            "index" => {
                arity(!args.is_empty(), "at least one")?;
                let mut out = args[0].clone();
                for (key, literal) in args[1..].iter().zip(&literals[1..]) {
                    out = match literal {
                        Some(Operand::Str(_)) => {
                            format!("({out} == null ? null : {out}[?{key}].orValue(null))")
                        }
                        Some(Operand::Int(_)) => format!("{out}[{key}]"),
                        _ => {
                            return untranslatable(
                                "index with a key that is not a string or integer literal",
                            )
                        }
                    };
                }
                Ok(out)
            }
            "not" => {
                arity(args.len() == 1, "one")?;
                Ok(self.bind(&args[0], |v| format!("!({})", truth(v))))
            }
            "and" | "or" => {
                arity(!args.is_empty(), "at least one")?;
                let mut out = args[args.len() - 1].clone();
                for a in args[..args.len() - 1].iter().rev() {
                    out = self.bind(a, |v| match name {
                        "and" => format!("({}) ? ({out}) : {v}", truth(v)),
                        _ => format!("({}) ? {v} : ({out})", truth(v)),
                    });
                }
                Ok(out)
            }
            "eq" => {
                arity(args.len() >= 2, "at least two")?;
                let tests: Vec<String> = args[1..]
                    .iter()
                    .map(|b| comparison(&args[0], "==", b))
                    .collect();
                Ok(format!("({})", tests.join(" || ")))
            }
            "ne" | "lt" | "le" | "gt" | "ge" => {
                arity(args.len() == 2, "two")?;
                let op = match name {
                    "ne" => "!=",
                    "lt" => "<",
                    "le" => "<=",
                    "gt" => ">",
                    _ => ">=",
                };
                Ok(comparison(&args[0], op, &args[1]))
            }
            "html" => {
                arity(!args.is_empty(), "at least one")?;
                let text = self.print(args, false);
                Ok(format!(
                    "({text}).replace(\"&\", \"&amp;\").replace(\"<\", \"&lt;\")\
                     .replace(\">\", \"&gt;\").replace(\"\\\"\", \"&#34;\").replace(\"'\", \"&#39;\")"
                ))
            }
            "slice" => {
                arity((1..=3).contains(&args.len()), "one to three")?;
                let x = &args[0];
                Ok(match &args[1..] {
                    [] => x.clone(),
                    [from] => self.bind(x, |v| {
                        format!("(type({v}) == string ? dyn({v}.substring({from})) : dyn({v}.slice({from}, size({v}))))")
                    }),
                    [from, to] => self.bind(x, |v| {
                        format!("(type({v}) == string ? dyn({v}.substring({from}, {to})) : dyn({v}.slice({from}, {to})))")
                    }),
                    _ => return untranslatable("slice with a capacity (3 indices)"),
                })
            }
            "js" | "urlquery" | "call" => untranslatable(format!(
                "template function {name:?} (no CEL equivalent is translated)"
            )),
            _ => untranslatable(format!("unknown template function {name:?}")),
        }
    }

    /// Go's `fmt.Sprint` (`println`: `Sprintln`): operands rendered, a space
    /// between two that are not strings (always, for println).
    fn print(&self, args: &[String], line: bool) -> String {
        if args.is_empty() {
            return quote(if line { "\n" } else { "" });
        }
        let names: Vec<String> = args.iter().map(|_| self.name()).collect();
        let mut body = render(&names[0], "<nil>");
        for w in 1..names.len() {
            let (a, b) = (&names[w - 1], &names[w]);
            let space = if line {
                quote(" ")
            } else {
                format!("(type({a}) != string && type({b}) != string ? \" \" : \"\")")
            };
            body = format!("{body} + {space} + {}", render(b, "<nil>"));
        }
        if line {
            body = format!("{body} + \"\\n\"");
        }
        bind_each(args, &names, body)
    }

    /// Go's `fmt.Sprintf` for the verbs %v, %s, %d, %t and %%.
    fn printf(&self, format: &str, args: &[String]) -> Result<String> {
        let mut pieces: Vec<String> = Vec::new();
        let mut text = String::new();
        let mut used = 0;
        let mut chars = format.chars();
        let mut names = Vec::new();
        while let Some(c) = chars.next() {
            if c != '%' {
                text.push(c);
                continue;
            }
            let Some(verb) = chars.next() else {
                return untranslatable("printf format ending in %");
            };
            if verb == '%' {
                text.push('%');
                continue;
            }
            if !matches!(verb, 'v' | 's' | 'd' | 't') {
                return untranslatable(format!(
                    "printf verb or flag %{verb} (only %v, %s, %d, %t and %% are translated)"
                ));
            }
            if used == args.len() {
                return untranslatable(format!("printf {format:?}: more verbs than arguments"));
            }
            if !text.is_empty() {
                pieces.push(quote(&std::mem::take(&mut text)));
            }
            let name = self.name();
            pieces.push(verb_render(verb, &name));
            names.push(name);
            used += 1;
        }
        if used != args.len() {
            return untranslatable(format!("printf {format:?}: more arguments than verbs"));
        }
        if !text.is_empty() || pieces.is_empty() {
            pieces.push(quote(&text));
        }
        Ok(bind_each(args, &names, pieces.join(" + ")))
    }
}

/// `body` with each operand of `args` bound to its name in `names`, each
/// evaluated once, in order.
fn bind_each(args: &[String], names: &[String], body: String) -> String {
    args.iter().zip(names).rev().fold(body, |out, (arg, name)| {
        format!("[dyn({arg})].map({name}, {out})[0]")
    })
}

/// `scope` with an `if`'s or `with`'s declared variable bound to `v`.
fn declared(scope: &Scope, vars: &[String], v: &str) -> Scope {
    match vars.first() {
        Some(name) => scope.with_var(name, v),
        None => scope.clone(),
    }
}

/// `root` then an optional selection of each key.
fn chain(root: &str, path: &[String]) -> String {
    let segs: Vec<super::cel::Seg> = path.iter().cloned().map(super::cel::Seg::Static).collect();
    super::cel::opt_chain(root, &segs)
}

/// Go's truth of a value: false, 0, "", empty lists and maps and nil are false.
fn truth(v: &str) -> String {
    format!(
        "({v} == null ? false : type({v}) == bool ? {v} : type({v}) == string ? {v} != \"\" : \
         type({v}) == int ? {v} != 0 : type({v}) == double ? {v} != 0.0 : \
         type({v}) == list || type({v}) == map ? size({v}) != 0 : true)"
    )
}

/// Go's `%v` of a value (`nil`: what a nil renders as, `<no value>` in a
/// template action, `<nil>` in print): strings as they are, lists as
/// `[a b]` of their elements, doubles by `%g`.
fn render(v: &str, nil: &str) -> String {
    format!(
        "({v} == null ? {} : type({v}) == string ? {v} : type({v}) == list ? \
         \"[\" + {v}.map(e, {}).join(\" \") + \"]\" : string({v}))",
        quote(nil),
        scalar("e")
    )
}

/// `%v` of a list element (nil is `<nil>`; a list or map in it is an error).
fn scalar(e: &str) -> String {
    format!("({e} == null ? \"<nil>\" : type({e}) == string ? {e} : string({e}))")
}

/// Go's name of a decoded value's type, for `%!d(string=x)`.
fn go_type(v: &str) -> String {
    format!(
        "(type({v}) == string ? \"string\" : type({v}) == int ? \"int64\" : \
         type({v}) == double ? \"float64\" : type({v}) == bool ? \"bool\" : \
         type({v}) == list ? \"[]interface {{}}\" : \"map[string]interface {{}}\")"
    )
}

/// One printf verb of a value: its rendering where the type fits, else
/// Go's `%!verb(type=value)`.
fn verb_render(verb: char, v: &str) -> String {
    let fits = match verb {
        'v' => return format!("({})", render(v, "<nil>")),
        's' => format!("type({v}) == string"),
        'd' => format!("type({v}) == int"),
        _ => format!("type({v}) == bool"),
    };
    let good = if verb == 's' {
        v.to_string()
    } else {
        format!("string({v})")
    };
    format!(
        "({v} == null ? {nil} : {fits} ? {good} : \"%!{verb}(\" + {} + \"=\" + ({}) + \")\")",
        go_type(v),
        render(v, "<nil>"),
        nil = quote(&format!("%!{verb}(<nil>)")),
    )
}

/// Go's comparison functions: operands of different kinds are an error
/// ("incompatible types for comparison"), so is ordering booleans.
fn comparison(a: &str, op: &str, b: &str) -> String {
    // An error at admission, not a constant CEL folds when compiling.
    let incompatible = format!("0 / (size([{a}]) - 1)");
    let ordered = if op == "==" || op == "!=" {
        String::new()
    } else {
        format!(" && type({a}) != bool")
    };
    format!("(type({a}) == type({b}){ordered} ? {a} {op} {b} : {incompatible} == 0)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(names: &[String]) -> Vec<String> {
        names.to_vec()
    }

    #[test]
    fn text_and_fields_parse() {
        assert_eq!(
            parse("a{{ .b.c }}d").unwrap(),
            vec![
                Node::Text("a".into()),
                Node::Action(vec![vec![Operand::Field(vec!["b".into(), "c".into()])]]),
                Node::Text("d".into())
            ]
        );
    }

    #[test]
    fn branches_nest_with_else_if() {
        let nodes = parse("{{ if .a }}A{{ else if .b }}B{{ else }}C{{ end }}").unwrap();
        let Node::If(_, then, otherwise) = &nodes[0] else {
            panic!("{nodes:?}")
        };
        assert_eq!(then, &vec![Node::Text("A".into())]);
        assert!(
            matches!(&otherwise[0], Node::If(_, b, c) if b == &vec![Node::Text("B".into())] && c == &vec![Node::Text("C".into())])
        );
    }

    #[test]
    fn what_is_not_translated_is_refused_by_name() {
        for (template, name) in [
            ("{{ $x := 1 }}{{ $x = 2 }}", "assignment"),
            ("{{ js .a }}", "\"js\""),
            ("{{ upper .a }}", "unknown template function \"upper\""),
            ("{{ printf \"%05d\" .a }}", "%0"),
            ("{{ printf \"%s %s\" .a }}", "more verbs"),
            ("{{ . }}", "whole object"),
        ] {
            match translate(template, &root) {
                Err(TemplateError::Untranslatable(m)) => {
                    assert!(m.contains(name), "{template}: {m}")
                }
                other => panic!("{template}: {other:?}"),
            }
        }
        assert!(matches!(
            translate("{{ if .a }}", &root),
            Err(TemplateError::Invalid(_))
        ));
        assert!(matches!(
            translate("{{ end }}", &root),
            Err(TemplateError::Invalid(_))
        ));
    }
}
