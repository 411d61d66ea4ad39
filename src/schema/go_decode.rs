//! Decoding a JSONPatch result into the kind's Go types, as kube-apiserver
//! does (k8s.io/apiserver `mutating/patch/json_patch.go`: the patched JSON
//! is decoded by the strict JSON serializer into a new typed object; a
//! failure is an internal error that no failure policy turns into an admit).
//!
//! Only the first failure is told, as encoding/json tells it:
//! - a value of the wrong JSON type is noted (`json: cannot unmarshal number
//!   into Go struct field ConfigMap.data of type string`: the innermost Go
//!   struct, the field's JSON path from the root without list indices or map
//!   keys but with the names of embedded structs, the field's Go type) and
//!   decoding goes on; so is a string that is not base64 in a `[]byte`;
//! - a type with its own JSON decoding (`resource.Quantity`,
//!   `intstr.IntOrString`, `metav1.Time`, `metav1.MicroTime`) stops decoding
//!   at its first failure, whose error is told even after a noted one;
//! - `apiVersion` or `kind` that is not a string fails before any of that
//!   (`couldn't get version/kind; json parse error: ...`).
//!
//! Keys are decoded in sorted order (the patched document is a re-encoded Go
//! map); null decodes into anything. Custom kinds are decoded into
//! unstructured objects: only their `apiVersion` and `kind` are checked.
//!
//! An ApplyConfiguration's merged object is instead converted from
//! unstructured ([`go_convert_error`]), with other rules and messages.
//! The Go types come from `go_types.json` (tools/gen_go_types.py).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;

use serde_json::{Map, Number, Value};
use smallvec::SmallVec;

use super::go_time::{parse_time, time_parse_error, Layout, RFC3339, RFC3339_MICRO};
use super::model::FastHash;
use super::typed::MAX_DEPTH;
use crate::quantity::{marshaled as quantity_marshaled, parse_error as quantity_parse_error};

/// Why a JSONPatch result does not decode into its Go type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoDecodeError {
    /// A value of the wrong JSON type (`encoding/json.UnmarshalTypeError`).
    #[error("json: cannot unmarshal {value} into Go struct field {field} of type {go_type}")]
    Type {
        /// `number`, `number 1.5`, `string`, `bool`, `array` or `object`.
        value: String,
        /// `Struct.json.path`.
        field: String,
        /// The Go type, as Go's reflect names it (`int32`, `[]v1.Container`).
        go_type: String,
    },
    /// A `[]byte` field's string is not standard base64.
    #[error("illegal base64 data at input byte {0}")]
    Base64(usize),
    /// A `resource.Quantity` does not parse (`resource.ParseQuantity`).
    #[error("{0}")]
    Quantity(&'static str),
    /// A `metav1.Time` or `metav1.MicroTime` does not parse (`time.Parse`).
    #[error("{0}")]
    Time(String),
    /// An unstructured number that is not whole, for an integer field.
    #[error("cannot convert {from} to {to}")]
    Convert { from: &'static str, to: String },
    /// A custom JSON decoder's type error, without a field path (the
    /// unstructured converter decodes the value alone).
    #[error("json: cannot unmarshal {value} into Go value of type {go_type}")]
    Json { value: String, go_type: String },
    /// A `[]byte` field's string is not standard base64, told by the
    /// unstructured converter.
    #[error("error decoding from json: illegal base64 data at input byte {0}")]
    Base64Json(usize),
    /// `apiVersion` or `kind` is not a string.
    #[error("couldn't get version/kind; json parse error: json: cannot unmarshal {value} into Go struct field .{field} of type string")]
    TypeMeta {
        value: &'static str,
        field: &'static str,
    },
}

/// The first error decoding `object`, of the type named `type_name` (an
/// OpenAPI definition name), would meet; `None` when it decodes.
pub fn go_decode_error(object: &Value, type_name: Option<&str>) -> Option<GoDecodeError> {
    decode_error(object, type_name, None)
}

/// [`go_decode_error`] of an object that decoded before a mutation wrote
/// it: only what `written` reaches is decoded (see
/// [`super::go_round_trip_within`] for its shape), in the order of the
/// whole object's decoding, so the first error is the one it would meet.
pub fn go_decode_error_within(
    object: &Value,
    type_name: Option<&str>,
    written: &Map<String, Value>,
) -> Option<GoDecodeError> {
    decode_error(object, type_name, Some(written))
}

fn decode_error(
    object: &Value,
    type_name: Option<&str>,
    within: Within<'_>,
) -> Option<GoDecodeError> {
    if let Some(err) = type_meta_error(object) {
        return Some(err);
    }
    let table = table();
    let def = table.def(type_name?)?;
    let mut decoder = Decoder {
        table,
        struct_name: &def.struct_name,
        fields: Vec::new(),
        saved: None,
    };
    match decoder.structure(def, object, within, 0) {
        Err(abort) => Some(abort),
        Ok(()) => decoder.saved,
    }
}

/// The serializer reads `apiVersion` and `kind` first (`json.Unmarshal`
/// into a struct of two strings).
fn type_meta_error(object: &Value) -> Option<GoDecodeError> {
    ["apiVersion", "kind"]
        .into_iter()
        .find_map(|field| match object.get(field) {
            None | Some(Value::Null) | Some(Value::String(_)) => None,
            Some(v) => Some(GoDecodeError::TypeMeta {
                value: json_word(v),
                field,
            }),
        })
}

/// What a Go type decodes (see tools/gen_go_types.py).
#[derive(Debug)]
pub(super) enum Kind {
    String,
    Int32,
    Int64,
    Float64,
    Bool,
    Bytes,
    /// An element of a `[]byte` given as a JSON array.
    Uint8,
    IntOrString,
    Quantity,
    Time,
    MicroTime,
    /// Any JSON (`runtime.RawExtension`, `FieldsV1`, `apiextensions JSON`).
    Any,
    List(Box<GoType>),
    Map(Box<GoType>),
    /// A struct: its place in [`Table::defs`].
    Struct(usize),
}

#[derive(Debug)]
pub(super) struct GoType {
    pub(super) kind: Kind,
    /// The Go name when it is not the kind's own (`v1.Protocol`).
    name: Option<String>,
}

/// A struct: its name in messages and its fields by JSON name, each with its
/// type and the embedded structs it is reached through.
#[derive(Debug)]
pub(super) struct StructDef {
    struct_name: String,
    go_name: String,
    pub(super) fields: HashMap<String, (GoType, Option<String>), FastHash>,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    /// Places in `defs` by OpenAPI definition name.
    pub(super) index: HashMap<String, usize, FastHash>,
    pub(super) defs: Vec<StructDef>,
}

impl Table {
    fn def(&self, name: &str) -> Option<&StructDef> {
        self.defs.get(*self.index.get(name)?)
    }
}

/// Go types of the built-in kinds, parsed once.
pub(super) fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| parse_table(include_str!("go_types.json")).unwrap_or_default())
}

/// Why `go_types.json` could not be read (a test keeps it readable).
#[derive(Debug, thiserror::Error)]
enum TableError {
    #[error("go_types.json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("go_types.json: bad type {0}")]
    BadType(String),
}

fn parse_table(text: &str) -> Result<Table, TableError> {
    let raw: serde_json::Map<String, Value> = serde_json::from_str(text)?;
    // Structs are referred to by their place in `defs`.
    let index: HashMap<String, usize, FastHash> = raw
        .keys()
        .enumerate()
        .map(|(i, name)| (name.clone(), i))
        .collect();
    let mut defs = Vec::with_capacity(raw.len());
    for (name, def) in &raw {
        let short = name.rsplit('.').next().unwrap_or(name);
        let package = name.rsplit('.').nth(1).unwrap_or_default();
        let struct_name = def
            .get("s")
            .and_then(Value::as_str)
            .unwrap_or(short)
            .to_string();
        let go_name = def
            .get("n")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("{package}.{short}"));
        let mut fields = HashMap::default();
        if let Some(f) = def.get("f").and_then(Value::as_object) {
            for (field, ty) in f {
                let (ty, embedded) = match ty {
                    Value::Array(pair) if pair.len() == 2 => {
                        (&pair[0], pair[1].as_str().map(str::to_string))
                    }
                    other => (other, None),
                };
                fields.insert(field.clone(), (parse_type(ty, &index)?, embedded));
            }
        }
        defs.push(StructDef {
            struct_name,
            go_name,
            fields,
        });
    }
    Ok(Table { index, defs })
}

fn parse_type(v: &Value, index: &HashMap<String, usize, FastHash>) -> Result<GoType, TableError> {
    let bad = || TableError::BadType(v.to_string());
    let (kind, name, elem) = match v {
        Value::String(s) => (s.as_str(), None, None),
        Value::Object(o) => (
            o.get("k").and_then(Value::as_str).ok_or_else(bad)?,
            o.get("n").and_then(Value::as_str).map(str::to_string),
            o.get("e"),
        ),
        _ => return Err(bad()),
    };
    let kind = match kind {
        "string" => Kind::String,
        "int32" => Kind::Int32,
        "int64" => Kind::Int64,
        "float64" => Kind::Float64,
        "bool" => Kind::Bool,
        "bytes" => Kind::Bytes,
        "intstr" => Kind::IntOrString,
        "quantity" => Kind::Quantity,
        "time" => Kind::Time,
        "microtime" => Kind::MicroTime,
        "any" => Kind::Any,
        "list" => Kind::List(Box::new(parse_type(elem.ok_or_else(bad)?, index)?)),
        "map" => Kind::Map(Box::new(parse_type(elem.ok_or_else(bad)?, index)?)),
        s => match s.strip_prefix('#').and_then(|def| index.get(def)) {
            Some(&def) => Kind::Struct(def),
            None => return Err(bad()),
        },
    };
    Ok(GoType { kind, name })
}

impl Table {
    /// The Go name of `ty`, as reflect spells it (pointers are not shown).
    fn go_name(&self, ty: &GoType) -> String {
        if let Some(name) = &ty.name {
            return name.clone();
        }
        match &ty.kind {
            Kind::String => "string".into(),
            Kind::Int32 => "int32".into(),
            Kind::Int64 => "int64".into(),
            Kind::Float64 => "float64".into(),
            Kind::Bool => "bool".into(),
            Kind::Bytes => "[]uint8".into(),
            Kind::Uint8 => "uint8".into(),
            Kind::IntOrString => "intstr.IntOrString".into(),
            Kind::Quantity => "resource.Quantity".into(),
            Kind::Time => "v1.Time".into(),
            Kind::MicroTime => "v1.MicroTime".into(),
            Kind::Any => "interface {}".into(),
            Kind::List(e) => format!("[]{}", self.go_name(e)),
            Kind::Map(e) => format!("map[string]{}", self.go_name(e)),
            Kind::Struct(def) => self
                .defs
                .get(*def)
                .map(|d| d.go_name.clone())
                .unwrap_or_default(),
        }
    }
}

/// The keys of a struct or map to visit, each with what to visit of it;
/// `None`: all of it (the shape of what a mutation wrote, see
/// [`super::go_round_trip_within`]).
pub(super) type Within<'w> = Option<&'w Map<String, Value>>;

/// What to visit of a value that `written` stands for: its keys when it is
/// an object, all of it otherwise.
pub(super) fn within_value(written: &Value) -> Within<'_> {
    written.as_object()
}

/// The items of a list of `len` items that `written` names by their
/// positions (the shape of a JSON patch's destinations through a list), in
/// order, each with what of it to visit.
pub(super) fn within_items(
    written: &Map<String, Value>,
    len: usize,
) -> SmallVec<[(usize, Within<'_>); 4]> {
    let mut items: SmallVec<[(usize, Within<'_>); 4]> = written
        .iter()
        .filter_map(|(key, w)| {
            Some((
                key.parse::<usize>().ok().filter(|&i| i < len)?,
                within_value(w),
            ))
        })
        .collect();
    items.sort_unstable_by_key(|&(i, _)| i);
    items
}

/// What of the value at `key` to visit, given what of its parent is;
/// `None`: none of it.
fn within_key<'w>(within: Within<'w>, key: &str) -> Option<Within<'w>> {
    match within {
        None => Some(None),
        Some(written) => written.get(key).map(within_value),
    }
}

/// encoding/json's decoder state: the innermost struct and the field path
/// (its error context) and the first noted error.
struct Decoder<'a> {
    table: &'a Table,
    struct_name: &'a str,
    fields: Vec<&'a str>,
    saved: Option<GoDecodeError>,
}

/// The value type for `uint8` elements of a `[]byte` JSON array.
static UINT8: GoType = GoType {
    kind: Kind::Uint8,
    name: None,
};

impl<'a> Decoder<'a> {
    /// The error for `word` (a JSON value kind) decoded into `ty` here.
    fn type_error(&self, word: String, go_type: String) -> GoDecodeError {
        let mut field = self.struct_name.to_string();
        for f in &self.fields {
            field.push('.');
            field.push_str(f);
        }
        GoDecodeError::Type {
            value: word,
            field,
            go_type,
        }
    }

    /// Notes an error; only the first one counts.
    fn save(&mut self, err: GoDecodeError) {
        if self.saved.is_none() {
            self.saved = Some(err);
        }
    }

    fn mismatch(&mut self, v: &Value, ty: &GoType) {
        let err = self.type_error(json_word(v).into(), self.table.go_name(ty));
        self.save(err);
    }

    /// Decodes `v` into `ty`; `Err` stops decoding (a custom decoder failed).
    fn value(
        &mut self,
        ty: &'a GoType,
        v: &'a Value,
        within: Within<'a>,
        depth: usize,
    ) -> Result<(), GoDecodeError> {
        if depth > MAX_DEPTH || v.is_null() {
            return Ok(());
        }
        match (&ty.kind, v) {
            (Kind::String, Value::String(_))
            | (Kind::Float64, Value::Number(_))
            | (Kind::Bool, Value::Bool(_))
            | (Kind::IntOrString, Value::String(_))
            | (Kind::Any, _) => {}
            (Kind::Int32 | Kind::Int64 | Kind::Uint8, Value::Number(n)) => {
                let text = number_text(n);
                if !fits(&text, &ty.kind) {
                    let err = self.type_error(format!("number {text}"), self.table.go_name(ty));
                    self.save(err);
                }
            }
            (Kind::IntOrString, Value::Number(n)) => {
                // IntOrString.UnmarshalJSON decodes a non-string as int32.
                let text = number_text(n);
                if !fits(&text, &Kind::Int32) {
                    return Err(self.type_error(format!("number {text}"), "int32".into()));
                }
            }
            (Kind::IntOrString, _) => {
                return Err(self.type_error(json_word(v).into(), "int32".into()));
            }
            (Kind::Bytes, Value::String(s)) => {
                if let Some(at) = base64_error(s.as_bytes()) {
                    self.save(GoDecodeError::Base64(at));
                }
            }
            (Kind::Bytes, Value::Array(items)) => {
                for item in items {
                    self.value(&UINT8, item, None, depth + 1)?;
                }
            }
            (Kind::Quantity, _) => quantity_error(v)?,
            (Kind::Time | Kind::MicroTime, Value::String(s)) => time_error(&ty.kind, s)?,
            (Kind::Time | Kind::MicroTime, _) => {
                // The inner json.Unmarshal into a string fails.
                return Err(self.type_error(json_word(v).into(), "string".into()));
            }
            (Kind::List(elem), Value::Array(items)) => match within {
                None => {
                    for item in items {
                        self.value(elem, item, None, depth + 1)?;
                    }
                }
                Some(written) => {
                    for (i, within) in within_items(written, items.len()) {
                        self.value(elem, &items[i], within, depth + 1)?;
                    }
                }
            },
            (Kind::Map(elem), Value::Object(m)) => {
                for (key, child) in m {
                    if let Some(within) = within_key(within, key) {
                        self.value(elem, child, within, depth + 1)?;
                    }
                }
            }
            (Kind::Struct(def), Value::Object(_)) => {
                if let Some(def) = self.table.defs.get(*def) {
                    self.structure(def, v, within, depth)?;
                }
            }
            _ => self.mismatch(v, ty),
        }
        Ok(())
    }

    /// Decodes the object `v` into the struct `def`; unknown fields are
    /// skipped (strict decoding reports them only when nothing else fails).
    fn structure(
        &mut self,
        def: &'a StructDef,
        v: &'a Value,
        within: Within<'a>,
        depth: usize,
    ) -> Result<(), GoDecodeError> {
        let Value::Object(m) = v else {
            return Ok(());
        };
        let outer = std::mem::replace(&mut self.struct_name, &def.struct_name);
        let mut result = Ok(());
        // serde_json's map iterates in key order (see `keys_iterate_sorted`).
        for (key, child) in m {
            let Some((ty, embedded)) = def.fields.get(key.as_str()) else {
                continue;
            };
            let Some(within) = within_key(within, key) else {
                continue;
            };
            let mark = self.fields.len();
            if let Some(embedded) = embedded {
                self.fields.extend(embedded.split('.'));
            }
            self.fields.push(key);
            result = self.value(ty, child, within, depth + 1);
            self.fields.truncate(mark);
            if result.is_err() {
                break;
            }
        }
        self.struct_name = outer;
        result
    }
}

/// What `Quantity.UnmarshalJSON` parses of `v`: its raw JSON, unquoted.
fn quantity_text(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => go_json_escape(s),
        Value::Number(n) => number_text(n).into(),
        Value::Bool(b) => b.to_string().into(),
        // The raw JSON: it never has the quantity syntax.
        Value::Array(_) => "[".into(),
        _ => "{".into(),
    }
}

/// `Quantity.UnmarshalJSON` of `v`: its raw JSON, unquoted, must parse.
fn quantity_error(v: &Value) -> Result<(), GoDecodeError> {
    match quantity_parse_error(quantity_text(v).trim()) {
        Some(message) => Err(GoDecodeError::Quantity(message)),
        None => Ok(()),
    }
}

/// What a `resource.Quantity` decoded from `v` (a string or a number)
/// encodes again: the canonical string, or the string as given when it is
/// canonical already; `None` when it does not decode.
pub(super) fn quantity_round_trip(v: &Value) -> Option<String> {
    match v {
        Value::String(_) | Value::Number(_) => quantity_marshaled(quantity_text(v).trim()),
        _ => None,
    }
}

fn time_layout(kind: &Kind) -> &'static Layout {
    match kind {
        Kind::MicroTime => &RFC3339_MICRO,
        _ => &RFC3339,
    }
}

/// `Time.UnmarshalJSON` / `MicroTime.UnmarshalJSON` of the string `s`.
fn time_error(kind: &Kind, s: &str) -> Result<(), GoDecodeError> {
    match time_parse_error(s, time_layout(kind)) {
        Some(message) => Err(GoDecodeError::Time(message)),
        None => Ok(()),
    }
}

/// What a `metav1.Time` or `metav1.MicroTime` (`kind`) decoded from the
/// string `s` encodes again: the instant in UTC, null for the zero time;
/// `None` when it does not decode. A time whose year in UTC is outside
/// 0000-9999 is left as written: upstream writes it with five digits or a
/// sign, which kube-apiserver cannot read back, so a webhook answering
/// that would fail the request where the built-in plugin, which never
/// re-reads it, admits it; as written, the apiserver decodes the same
/// instant and stores what the plugin would.
pub(super) fn time_round_trip(kind: &Kind, s: &str) -> Option<Value> {
    let layout = time_layout(kind);
    let t = parse_time(s, layout).ok().filter(|t| t.year_parses())?;
    Some(if t.is_zero() {
        Value::Null
    } else {
        Value::String(t.format_utc(layout))
    })
}

/// The first error converting `object` (an ApplyConfiguration's merged
/// result, of the type named `type_name`) from unstructured into its Go
/// type would meet (apimachinery `DefaultUnstructuredConverter.
/// FromUnstructured`, which upstream runs after the merge); `None` when it
/// converts. SMD's typed conversion has already checked the JSON kinds, so
/// what is left is what the Go types add: integers that are not whole,
/// and the types with their own JSON decoding (quantities, times,
/// IntOrString, base64 bytes), whose errors are told without a field path.
/// An integer out of its type's range converts (it wraps).
pub fn go_convert_error(object: &Value, type_name: Option<&str>) -> Option<GoDecodeError> {
    let table = table();
    let def = table.def(type_name?)?;
    convert_struct(table, def, object, 0).err()
}

fn convert_struct(
    table: &Table,
    def: &StructDef,
    v: &Value,
    depth: usize,
) -> Result<(), GoDecodeError> {
    let Value::Object(m) = v else {
        return Ok(());
    };
    for (key, child) in m {
        if let Some((ty, _)) = def.fields.get(key.as_str()) {
            convert(table, ty, child, depth + 1)?;
        }
    }
    Ok(())
}

fn convert(table: &Table, ty: &GoType, v: &Value, depth: usize) -> Result<(), GoDecodeError> {
    if depth > MAX_DEPTH || v.is_null() {
        return Ok(());
    }
    let json = |value: String, go_type: &str| GoDecodeError::Json {
        value,
        go_type: go_type.into(),
    };
    match (&ty.kind, v) {
        (Kind::Int32 | Kind::Int64, Value::Number(n))
            if n.as_f64().is_some_and(|f| f.fract() != 0.0) =>
        {
            return Err(GoDecodeError::Convert {
                from: "float64",
                to: table.go_name(ty),
            });
        }
        (Kind::IntOrString, Value::Number(n)) if !fits(&number_text(n), &Kind::Int32) => {
            return Err(json(format!("number {}", number_text(n)), "int32"));
        }
        (Kind::IntOrString, Value::Bool(_) | Value::Array(_) | Value::Object(_)) => {
            return Err(json(json_word(v).into(), "int32"));
        }
        (Kind::Quantity, _) => quantity_error(v)?,
        (Kind::Time | Kind::MicroTime, Value::String(s)) => time_error(&ty.kind, s)?,
        (Kind::Time | Kind::MicroTime, _) => return Err(json(json_word(v).into(), "string")),
        (Kind::Bytes, Value::String(s)) => {
            if let Some(at) = base64_error(s.as_bytes()) {
                return Err(GoDecodeError::Base64Json(at));
            }
        }
        (Kind::List(elem), Value::Array(items)) => {
            for item in items {
                convert(table, elem, item, depth + 1)?;
            }
        }
        (Kind::Map(elem), Value::Object(m)) => {
            for child in m.values() {
                convert(table, elem, child, depth + 1)?;
            }
        }
        (Kind::Struct(def), Value::Object(_)) => {
            if let Some(def) = table.defs.get(*def) {
                convert_struct(table, def, v, depth)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// encoding/json's word for a JSON value's kind.
fn json_word(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The number's text in the patched document: Go's JSON encoding of it (a
/// float64 in `%f` form between 1e-6 and 1e21, else in `%e` form with at
/// least two exponent digits, negative ones trimmed to one).
fn number_text(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or_default();
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return f.to_string();
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or_default();
    if exp < 0 {
        format!("{mantissa}e-{}", -exp)
    } else {
        format!("{mantissa}e+{exp:02}")
    }
}

/// Whether `text` decodes into the integer kind (`strconv.ParseInt` of the
/// literal, then the type's range).
fn fits(text: &str, kind: &Kind) -> bool {
    match kind {
        Kind::Uint8 => text.parse::<u8>().is_ok(),
        Kind::Int32 => text.parse::<i32>().is_ok(),
        _ => text.parse::<i64>().is_ok(),
    }
}

/// A string as it stands between the quotes in Go's JSON encoding (what
/// `Quantity.UnmarshalJSON` parses: the quotes are cut, escapes are kept).
fn go_json_escape(s: &str) -> Cow<'_, str> {
    let escaped = |c: char| {
        matches!(c, '"' | '\\' | '<' | '>' | '&' | '\u{2028}' | '\u{2029}') || (c as u32) < 0x20
    };
    if !s.chars().any(escaped) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if escaped(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Where `base64.StdEncoding.Decode` fails on `src`, if it does (padding
/// required, CR and LF skipped, trailing bits ignored).
fn base64_error(src: &[u8]) -> Option<usize> {
    fn sextet(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'+' || b == b'/'
    }
    let newline = |b: u8| b == b'\n' || b == b'\r';
    let mut si = 0;
    while si < src.len() {
        // One quantum of four characters.
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                return match j {
                    0 => None,
                    _ => Some(si - j),
                };
            }
            let c = src[si];
            si += 1;
            if sextet(c) {
                j += 1;
                continue;
            }
            if newline(c) {
                continue;
            }
            if c != b'=' {
                return Some(si - 1);
            }
            // Padding: the quantum ends here.
            match j {
                0 | 1 => return Some(si - 1),
                2 => {
                    while si < src.len() && newline(src[si]) {
                        si += 1;
                    }
                    if si == src.len() {
                        return Some(src.len());
                    }
                    if src[si] != b'=' {
                        return Some(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && newline(src[si]) {
                si += 1;
            }
            return (si < src.len()).then_some(si);
        }
    }
    None
}

#[cfg(test)]
#[path = "go_decode_tests.rs"]
mod tests;
