//! RFC 6902 JSON patch applied exactly as kube-apiserver applies a MutatingAdmissionPolicy
//! `JSONPatch` mutation: `Patch.Apply` of `gopkg.in/evanphx/json-patch.v4` (v4.13.0, vendored
//! since Kubernetes 1.35; its error texts are those of v4.12.0, which wrapped with
//! `errors.Wrapf`, i.e. `"<msg>: <cause>"`).
//!
//! How the Go code behaves, and how it is mirrored here:
//! * evanphx keeps the document as lazily parsed nodes. A JSON `null` met while parsing a
//!   container is a nil pointer (`Node::Nil`): it is a missing path segment and equals only
//!   another nil. A `null` that a patch *inserts* (`value: null`, which kube always sends as the
//!   raw bytes `null`) is a non-nil node (`Node::Raw` of `Value::Null`): it decodes as an empty
//!   map, so it equals `null` and `{}`, and adding below it panics (assignment to a nil map).
//!   A `test` value `null` likewise equals `{}` and `[]` but never a null or missing member.
//! * `test` compares compacted raw bytes for scalars. kube's object serializer (encoding/json)
//!   and its CEL value encoding (protojson, then `json.Marshal`) escape strings identically and
//!   both print numbers as Go prints float64/int64, so strings compare by content and numbers
//!   by their Go text: `1` equals `1.0`, `0` does not equal `-0`.
//! * Negative array indices are allowed (`SupportNegativeIndices` defaults to true) and
//!   kube-apiserver sets `AccumulatedCopySizeLimit` to `JSONPatchMaxCopyBytes` (3 MiB).
//! * Go iterates maps in random order; where comparing two objects could either fail or panic
//!   depending on that order, this engine reports the failure.
//! * Object keys keep their order and new keys go last (Go would sort them; kube decodes the
//!   result into objects, so the order is not observable there).

pub(crate) use crate::schema::subtree::decode_key;
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// Values of the document by address: no input chooses these keys, so they
/// are hashed with foldhash's fixed state rather than SipHash.
type ByAddress<V> = HashMap<usize, V, foldhash::fast::FixedState>;
/// A set of the document's values, by address (see [`ByAddress`]).
type AddressSet = HashSet<usize, foldhash::fast::FixedState>;

/// The copy limit kube-apiserver installs (`JSONPatchMaxCopyBytes`, 3 MiB).
pub const KUBE_APISERVER_MAX_COPY_BYTES: i64 = 3 * 1024 * 1024;

const MISSING: &str = "missing value";
const PANIC_NIL_MAP: &str = "assignment to entry in nil map";
const PANIC_NIL_DEREF: &str = "runtime error: invalid memory address or nil pointer dereference";

/// One JSON patch operation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatchOperation {
    /// The `op` field ("" when the JSONPatch left it unset).
    pub op: String,
    /// The `path` field ("" when unset, which means the document root).
    pub path: String,
    /// The `from` field; `None` and `Some("")` both mean absent, as kube only sends a non-empty one.
    pub from: Option<String>,
    /// The `value` field; `None` when unset, `Some(Value::Null)` for a CEL `null`.
    pub value: Option<Value>,
}

/// Why a patch failed; `Display` is evanphx v4's exact error text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPatchError {
    /// A `test` operation did not match (wraps `ErrTestFailed`): kube then skips the whole patch.
    #[error("testing value {path} failed: test failed")]
    TestFailed {
        /// Index of the operation in the patch.
        index: usize,
        /// The operation's path.
        path: String,
    },
    /// Any other failed operation; `message` is evanphx's full, wrapped text.
    #[error("{message}")]
    Failed {
        /// Index of the operation in the patch.
        index: usize,
        /// The error text.
        message: String,
    },
    /// `copy` operations grew the document past the limit (`AccumulatedCopySizeError`).
    #[error("Unable to complete the copy, the accumulated size increase of copy is {accumulated}, exceeding the limit {limit}")]
    CopySizeExceeded {
        /// Index of the operation in the patch.
        index: usize,
        /// Bytes copied so far, this operation included.
        accumulated: i64,
        /// The limit.
        limit: i64,
    },
    /// The op is not add/remove/replace/move/test/copy (`unknown` if Go could not decode it).
    #[error("Unexpected kind: {kind}")]
    UnexpectedKind {
        /// Index of the operation in the patch.
        index: usize,
        /// The op as evanphx read it.
        kind: String,
    },
    /// An input on which evanphx v4 panics; `message` is the Go runtime's panic text.
    #[error("{message}")]
    Panic {
        /// Index of the operation in the patch.
        index: usize,
        /// The panic value's text.
        message: String,
    },
    /// The document is neither an object nor an array (nor null).
    #[error("json: cannot unmarshal {found} into Go value of type jsonpatch.partialDoc")]
    InvalidDocument {
        /// "bool", "number" or "string".
        found: &'static str,
    },
}

impl JsonPatchError {
    /// Index of the failing operation (`None` for an invalid document).
    pub fn op_index(&self) -> Option<usize> {
        match self {
            Self::TestFailed { index, .. }
            | Self::Failed { index, .. }
            | Self::CopySizeExceeded { index, .. }
            | Self::UnexpectedKind { index, .. }
            | Self::Panic { index, .. } => Some(*index),
            Self::InvalidDocument { .. } => None,
        }
    }
}

impl PatchOperation {
    /// Whether the operation writes a value at its `path` (`add`,
    /// `replace`, `copy`, `move`).
    pub fn writes_at_path(&self) -> bool {
        matches!(self.op.as_str(), "add" | "replace" | "copy" | "move")
    }
}

/// The paths `ops` write values at, in order.
pub fn written_paths(ops: &[PatchOperation]) -> impl Iterator<Item = &str> {
    ops.iter()
        .filter(|op| op.writes_at_path())
        .map(|op| op.path.as_str())
}

/// The paths where `ops` may have changed what the Go types encode, in
/// order: each written path, and the parent of each removed value (a
/// `remove`'s path, a `move`'s `from`), which the removal may have left
/// empty. The root, as a parent, is left out: it is never empty to omit.
pub fn changed_paths(ops: &[PatchOperation]) -> impl Iterator<Item = &str> {
    ops.iter().flat_map(|op| {
        let written = op.writes_at_path().then_some(op.path.as_str());
        let removed = match op.op.as_str() {
            "remove" => Some(op.path.as_str()),
            "move" => op.from.as_deref(),
            _ => None,
        };
        let emptied = removed
            .and_then(|path| path.rfind('/').map(|slash| &path[..slash]))
            .filter(|parent| !parent.is_empty());
        written.into_iter().chain(emptied)
    })
}

/// `jsonpatch.escapeKey`: escapes a map key for a path (`~` → `~0`, `/` → `~1`).
pub fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    for c in key.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

/// Applies `ops` in order to a copy of `doc` with kube-apiserver's copy limit.
pub fn apply_patch(doc: &Value, ops: &[PatchOperation]) -> Result<Value, JsonPatchError> {
    apply_patch_with_copy_limit(doc, ops, KUBE_APISERVER_MAX_COPY_BYTES)
}

/// [`apply_patch`] with another `AccumulatedCopySizeLimit` (0 or less: unlimited).
pub fn apply_patch_with_copy_limit(
    doc: &Value,
    ops: &[PatchOperation],
    copy_limit: i64,
) -> Result<Value, JsonPatchError> {
    patched(doc, ops, copy_limit).map(Node::into_value)
}

/// [`apply_patch`] on the document itself, which is left untouched on an
/// error; whether the document changed (by `==`). `before_write`, if
/// given, is called with the document, still as it was, right before the
/// patch writes to it; never when the patch changes nothing.
///
/// The parts of the document the patch does not reach are moved into the
/// result, not copied: a few operations on a large object cost little more
/// than the operations.
pub fn apply_patch_in_place(
    doc: &mut Value,
    ops: &[PatchOperation],
    before_write: Option<&mut dyn FnMut(&Value)>,
) -> Result<bool, JsonPatchError> {
    // Most patches are a single add, replace or remove: written where its
    // path points rather than by rebuilding the document.
    let single = match ops {
        [op] if matches!(op.op.as_str(), "add" | "replace" | "remove") => Some(op),
        _ => None,
    };
    let mut movable = AddressSet::default();
    let write = {
        // Checked on the untouched document first, with every error as
        // the patch gives it.
        let root = patched(doc, ops, KUBE_APISERVER_MAX_COPY_BYTES)?;
        // The direct write finds whether it changes anything itself, but
        // only as it writes: it is found before for a caller that is told.
        if (single.is_none() || before_write.is_some()) && root.same_as(doc) {
            return Ok(false);
        }
        if let Some(before_write) = before_write {
            before_write(doc);
        }
        match single {
            Some(op) => Write::Direct(op),
            None => Write::Rebuild(build_plan(root, doc, &mut movable)),
        }
    };
    let built = match write {
        Write::Rebuild(built) => built,
        Write::Direct(op) => {
            if let Some(changed) = apply_checked_op(doc, op) {
                return Ok(changed);
            }
            // A path the direct write does not walk (it was accepted above).
            let root = patched(doc, ops, KUBE_APISERVER_MAX_COPY_BYTES)?;
            build_plan(root, doc, &mut movable)
        }
    };
    let mut taken = ByAddress::with_capacity_and_hasher(movable.len(), Default::default());
    take_movable(doc, &movable, &mut taken);
    *doc = built.build(&mut taken);
    Ok(true)
}

/// How [`apply_patch_in_place`] writes a patch that changes the document.
enum Write<'o> {
    /// This one operation where its path points.
    Direct(&'o PatchOperation),
    /// The whole result, rebuilt.
    Rebuild(Built),
}

/// The result of a patch whose `root` differs from `doc`, with the subtrees
/// of `doc` it holds once (`movable`) left to be moved, not copied: those it
/// holds twice (a `copy`), or that sit inside another it holds, are copied,
/// as are the operations' values.
fn build_plan(root: Node<'_>, doc: &Value, movable: &mut AddressSet) -> Built {
    let mut holds = ByAddress::default();
    root.count_holds(&mut holds);
    find_movable(doc, &holds, movable);
    root.into_built(movable)
}

/// Applies one `add`, `replace` or `remove` that [`patched`] accepted on
/// `doc` directly where its path points; whether `doc` changed (by `==`).
/// `None`, with `doc` untouched, for a path this shortcut does not walk
/// (the general path then applies the operation).
///
/// Most patches are one such operation on a large object: this spares
/// rebuilding the object around it.
fn apply_checked_op(doc: &mut Value, op: &PatchOperation) -> Option<bool> {
    let path = op.path.strip_prefix('/')?;
    let (parents, last) = match path.rfind('/') {
        Some(i) => (Some(&path[..i]), &path[i + 1..]),
        None => (None, path),
    };
    let mut target = doc;
    for part in parents.into_iter().flat_map(|p| p.split('/')) {
        let part = decode_key(part);
        target = match target {
            Value::Object(m) => m.get_mut(part.as_ref())?,
            Value::Array(a) => {
                let i = get_index(&part, a.len()).ok()?;
                a.get_mut(i)?
            }
            _ => return None,
        };
        if target.is_null() {
            return None;
        }
    }
    let key = decode_key(last);
    let value = || op.value.clone().unwrap_or(Value::Null);
    match (op.op.as_str(), target) {
        ("add" | "replace", Value::Object(m)) => {
            let value = value();
            if m.get(key.as_ref()) == Some(&value) {
                return Some(false);
            }
            m.insert(key.into_owned(), value);
            Some(true)
        }
        ("add", Value::Array(a)) => {
            let i = if key == "-" {
                a.len()
            } else {
                insert_index(&key, a.len()).ok()?
            };
            a.insert(i, value());
            Some(true)
        }
        ("replace", Value::Array(a)) => {
            let i = get_index(&key, a.len()).ok()?;
            let value = value();
            let slot = a.get_mut(i)?;
            if *slot == value {
                return Some(false);
            }
            *slot = value;
            Some(true)
        }
        ("remove", Value::Object(m)) => m.remove(key.as_ref()).map(|_| true),
        ("remove", Value::Array(a)) => {
            let i = remove_index(&key, a.len()).ok()?;
            a.remove(i);
            Some(true)
        }
        _ => None,
    }
}

/// The address that identifies a value of the document.
fn address(v: &Value) -> usize {
    v as *const Value as usize
}

/// Finds the values of `doc` (outermost first) that the patched document
/// holds exactly once.
fn find_movable(doc: &Value, holds: &ByAddress<usize>, movable: &mut AddressSet) {
    match holds.get(&address(doc)) {
        Some(1) => {
            movable.insert(address(doc));
        }
        Some(_) => {}
        None => match doc {
            Value::Object(m) => m.values().for_each(|c| find_movable(c, holds, movable)),
            Value::Array(a) => a.iter().for_each(|c| find_movable(c, holds, movable)),
            _ => {}
        },
    }
}

/// Takes the `movable` values out of `doc`, by address.
fn take_movable(doc: &mut Value, movable: &AddressSet, taken: &mut ByAddress<Value>) {
    if movable.contains(&address(doc)) {
        taken.insert(address(doc), std::mem::take(doc));
        return;
    }
    match doc {
        Value::Object(m) => m.values_mut().for_each(|c| take_movable(c, movable, taken)),
        Value::Array(a) => a.iter_mut().for_each(|c| take_movable(c, movable, taken)),
        _ => {}
    }
}

/// A patched document that no longer borrows the original: values of the
/// original are named by address, to be moved out of it.
enum Built {
    Take(usize),
    Owned(Value),
    Obj(Vec<(String, Built)>),
    Arr(Vec<Built>),
}

impl Built {
    fn build(self, taken: &mut ByAddress<Value>) -> Value {
        match self {
            Built::Take(a) => taken.remove(&a).unwrap_or_default(),
            Built::Owned(v) => v,
            Built::Obj(entries) => Value::Object(
                entries
                    .into_iter()
                    .map(|(k, b)| (k, b.build(taken)))
                    .collect::<Map<String, Value>>(),
            ),
            Built::Arr(items) => Value::Array(items.into_iter().map(|b| b.build(taken)).collect()),
        }
    }
}

/// Applies `ops` to lazily decoded nodes over `doc`.
fn patched<'a>(
    doc: &'a Value,
    ops: &'a [PatchOperation],
    copy_limit: i64,
) -> Result<Node<'a>, JsonPatchError> {
    let found = match doc {
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Null | Value::Array(_) | Value::Object(_) => "",
    };
    if !found.is_empty() {
        return Err(JsonPatchError::InvalidDocument { found });
    }
    let mut root = Node::Raw(doc);
    let mut copied = 0i64;
    for (index, op) in ops.iter().enumerate() {
        apply_op(&mut root, op, &mut copied, copy_limit).map_err(|e| e.at(index))?;
    }
    Ok(root)
}

/// An operation's error before the operation index is attached.
enum OpError {
    Msg(String),
    TestFailed(String),
    CopySize(i64, i64),
    Kind(String),
    Panic(&'static str),
}

impl OpError {
    /// `fmt.Errorf("<ctx>: %w", err)`; panics and the other kinds propagate unwrapped.
    fn wrap(self, ctx: impl FnOnce() -> String) -> Self {
        match self {
            OpError::Msg(m) => OpError::Msg(format!("{}: {m}", ctx())),
            other => other,
        }
    }

    fn at(self, index: usize) -> JsonPatchError {
        match self {
            OpError::Msg(message) => JsonPatchError::Failed { index, message },
            OpError::TestFailed(path) => JsonPatchError::TestFailed { index, path },
            OpError::CopySize(accumulated, limit) => JsonPatchError::CopySizeExceeded {
                index,
                accumulated,
                limit,
            },
            OpError::Kind(kind) => JsonPatchError::UnexpectedKind { index, kind },
            OpError::Panic(message) => JsonPatchError::Panic {
                index,
                message: message.to_string(),
            },
        }
    }
}

fn msg(s: impl Into<String>) -> OpError {
    OpError::Msg(s.into())
}

/// `... : missing value` (a wrap of `ErrMissing`).
fn missing(s: String) -> OpError {
    OpError::Msg(format!("{s}: {MISSING}"))
}

fn invalid_index(idx: i64) -> OpError {
    OpError::Msg(format!(
        "Unable to access invalid index: {idx}: invalid index referenced"
    ))
}

type Entries<'a> = Vec<(Cow<'a, str>, Node<'a>)>;

/// A `*lazyNode`; `Obj`/`Arr` are nodes already decoded into a `partialDoc`/`partialArray`.
enum Node<'a> {
    /// A nil pointer: a JSON null decoded inside a container, or an absent `value`.
    Nil,
    /// Undecoded JSON; `Value::Null` here is a non-nil node that decodes to a nil map.
    Raw(&'a Value),
    Obj(Entries<'a>),
    Arr(Vec<Node<'a>>),
}

impl<'a> Node<'a> {
    /// A member of a container being decoded: JSON null becomes a nil pointer.
    fn member(v: &'a Value) -> Self {
        if v.is_null() {
            Node::Nil
        } else {
            Node::Raw(v)
        }
    }

    /// `op.value()`: nil without a value, else a raw node (CEL null is the raw bytes `null`).
    fn from_op(op: &'a PatchOperation) -> Self {
        op.value.as_ref().map_or(Node::Nil, Node::Raw)
    }

    fn into_value(self) -> Value {
        match self {
            Node::Nil => Value::Null,
            Node::Raw(v) => v.clone(),
            Node::Obj(entries) => Value::Object(
                entries
                    .into_iter()
                    .map(|(k, n)| (k.into_owned(), n.into_value()))
                    .collect::<Map<String, Value>>(),
            ),
            Node::Arr(items) => Value::Array(items.into_iter().map(Node::into_value).collect()),
        }
    }

    /// Whether [`Node::into_value`] would equal `v`, without building it.
    fn same_as(&self, v: &Value) -> bool {
        match (self, v) {
            (Node::Nil, v) => v.is_null(),
            (Node::Raw(r), v) => std::ptr::eq(*r, v) || **r == *v,
            (Node::Obj(entries), Value::Object(m)) => {
                if m.len() != entries.len() {
                    return false;
                }
                // Entries keep the object's order unless an operation changed
                // its keys: then they pair up without lookups.
                let in_step = entries
                    .iter()
                    .zip(m.keys())
                    .all(|((k, _), key)| k.as_ref() == key.as_str());
                if in_step {
                    entries
                        .iter()
                        .zip(m.values())
                        .all(|((_, n), c)| n.same_as(c))
                } else {
                    entries
                        .iter()
                        .all(|(k, n)| m.get(k.as_ref()).is_some_and(|c| n.same_as(c)))
                }
            }
            (Node::Arr(items), Value::Array(a)) => {
                a.len() == items.len() && items.iter().zip(a).all(|(n, c)| n.same_as(c))
            }
            _ => false,
        }
    }

    /// Counts, by address, the values this node holds undecoded.
    fn count_holds(&self, holds: &mut ByAddress<usize>) {
        match self {
            Node::Nil => {}
            Node::Raw(v) => *holds.entry(address(v)).or_default() += 1,
            Node::Obj(entries) => entries.iter().for_each(|(_, n)| n.count_holds(holds)),
            Node::Arr(items) => items.iter().for_each(|n| n.count_holds(holds)),
        }
    }

    /// [`Node::into_value`], with the `movable` values of the document left
    /// to be moved.
    fn into_built(self, movable: &AddressSet) -> Built {
        match self {
            Node::Nil => Built::Owned(Value::Null),
            Node::Raw(v) if movable.contains(&address(v)) => Built::Take(address(v)),
            Node::Raw(v) => Built::Owned(v.clone()),
            Node::Obj(entries) => Built::Obj(
                entries
                    .into_iter()
                    .map(|(k, n)| (k.into_owned(), n.into_built(movable)))
                    .collect(),
            ),
            Node::Arr(items) => {
                Built::Arr(items.into_iter().map(|n| n.into_built(movable)).collect())
            }
        }
    }

    /// `deepCopy`: marshal and keep as raw bytes (nested raw nulls become nil once decoded).
    fn deep_copy(&self) -> Node<'a> {
        match self {
            Node::Nil => Node::Nil,
            Node::Raw(v) => Node::Raw(v),
            Node::Obj(entries) => Node::Obj(
                entries
                    .iter()
                    .map(|(k, n)| (k.clone(), n.copy_member()))
                    .collect(),
            ),
            Node::Arr(items) => Node::Arr(items.iter().map(Node::copy_member).collect()),
        }
    }

    fn copy_member(&self) -> Node<'a> {
        match self {
            Node::Raw(Value::Null) => Node::Nil,
            other => other.deep_copy(),
        }
    }

    /// Length of Go's `json.Marshal` of this node (the size `copy` accounts).
    fn go_len(&self) -> usize {
        match self {
            Node::Nil => 4,
            Node::Raw(v) => value_go_len(v),
            Node::Obj(entries) => {
                2 + entries.len().saturating_sub(1)
                    + entries
                        .iter()
                        .map(|(k, n)| string_go_len(k) + 1 + n.go_len())
                        .sum::<usize>()
            }
            Node::Arr(items) => {
                2 + items.len().saturating_sub(1) + items.iter().map(Node::go_len).sum::<usize>()
            }
        }
    }
}

/// The `container` a path segment resolves to.
enum Container<'r, 'a> {
    Obj(&'r mut Entries<'a>),
    Arr(&'r mut Vec<Node<'a>>),
    /// A `partialDoc` that is a nil map (a raw `null` node decoded as a map).
    NilMap,
}

/// `intoDoc`/`intoAry` on a non-nil node, decoding it in place; `None` for scalars.
fn container<'r, 'a>(node: &'r mut Node<'a>) -> Option<Container<'r, 'a>> {
    if let Node::Raw(v) = node {
        let v: &'a Value = v;
        match v {
            Value::Object(m) => {
                *node = Node::Obj(
                    m.iter()
                        .map(|(k, c)| (Cow::Borrowed(k.as_str()), Node::member(c)))
                        .collect(),
                )
            }
            Value::Array(a) => *node = Node::Arr(a.iter().map(Node::member).collect()),
            Value::Null => return Some(Container::NilMap),
            _ => return None,
        }
    }
    match node {
        Node::Obj(entries) => Some(Container::Obj(entries)),
        Node::Arr(items) => Some(Container::Arr(items)),
        _ => None,
    }
}

/// `partialArray.get`'s index rules.
fn get_index(key: &str, len: usize) -> Result<usize, OpError> {
    let idx = go_atoi(key).map_err(OpError::Msg)?;
    let len = len as i64;
    let mut i = idx;
    if i < 0 {
        if i < -len {
            return Err(invalid_index(idx));
        }
        i += len;
    }
    if i >= len {
        return Err(invalid_index(i));
    }
    Ok(i as usize)
}

/// `partialArray.add`'s index rules (the key is not "-").
fn insert_index(key: &str, len: usize) -> Result<usize, OpError> {
    let idx = go_atoi(key)
        .map_err(|e| msg(format!("value was not a proper array index: '{key}': {e}")))?;
    let size = len as i64 + 1;
    if idx >= size {
        return Err(invalid_index(idx));
    }
    let mut i = idx;
    if i < 0 {
        if i < -size {
            return Err(invalid_index(idx));
        }
        i += size;
    }
    Ok(i as usize)
}

/// `partialArray.remove`'s index rules.
fn remove_index(key: &str, len: usize) -> Result<usize, OpError> {
    let idx = go_atoi(key).map_err(OpError::Msg)?;
    let len = len as i64;
    if idx >= len {
        return Err(invalid_index(idx));
    }
    let mut i = idx;
    if i < 0 {
        if i < -len {
            return Err(invalid_index(idx));
        }
        i += len;
    }
    Ok(i as usize)
}

impl<'r, 'a> Container<'r, 'a> {
    /// `get`: `Ok(None)` for a missing key or a nil member.
    fn get(&self, key: &str) -> Result<Option<&Node<'a>>, OpError> {
        let node = match self {
            Container::Obj(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, n)| n),
            Container::Arr(items) => items.get(get_index(key, items.len())?),
            Container::NilMap => None,
        };
        Ok(node.filter(|n| !matches!(n, Node::Nil)))
    }

    /// The non-nil member `findObject` descends into, if `get` finds one.
    fn into_member(self, key: &str) -> Option<&'r mut Node<'a>> {
        let node = match self {
            Container::Obj(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, n)| n),
            Container::Arr(items) => {
                let i = get_index(key, items.len()).ok()?;
                items.get_mut(i)
            }
            Container::NilMap => None,
        };
        node.filter(|n| !matches!(n, Node::Nil))
    }

    /// `partialDoc.add` / `partialArray.add`.
    fn add(self, key: &str, val: Node<'a>) -> Result<(), OpError> {
        match self {
            Container::Obj(entries) => {
                put(entries, key, val);
                Ok(())
            }
            Container::Arr(items) => {
                if key == "-" {
                    items.push(val);
                } else {
                    let i = insert_index(key, items.len())?;
                    items.insert(i, val);
                }
                Ok(())
            }
            Container::NilMap => Err(OpError::Panic(PANIC_NIL_MAP)),
        }
    }

    /// `partialDoc.set` / `partialArray.set` (after a successful `get`).
    fn set(self, key: &str, val: Node<'a>) -> Result<(), OpError> {
        match self {
            Container::Obj(entries) => {
                put(entries, key, val);
                Ok(())
            }
            Container::Arr(items) => {
                let i = get_index(key, items.len())?;
                if let Some(slot) = items.get_mut(i) {
                    *slot = val;
                }
                Ok(())
            }
            Container::NilMap => Err(OpError::Panic(PANIC_NIL_MAP)),
        }
    }

    /// `partialDoc.remove` / `partialArray.remove`, returning the removed member.
    fn remove(self, key: &str) -> Result<Node<'a>, OpError> {
        match self {
            Container::Obj(entries) => match entries.iter().position(|(k, _)| k == key) {
                Some(i) => Ok(entries.remove(i).1),
                None => Err(missing(format!("Unable to remove nonexistent key: {key}"))),
            },
            Container::Arr(items) => {
                let i = remove_index(key, items.len())?;
                Ok(items.remove(i))
            }
            Container::NilMap => Err(missing(format!("Unable to remove nonexistent key: {key}"))),
        }
    }
}

fn put<'a>(entries: &mut Entries<'a>, key: &str, val: Node<'a>) {
    match entries.iter_mut().find(|(k, _)| k == key) {
        Some((_, slot)) => *slot = val,
        None => entries.push((Cow::Owned(key.to_string()), val)),
    }
}

/// `findObject`: the container holding the path's last segment, and that segment decoded.
/// Like Go, it needs a `/` somewhere and ignores whatever precedes the first one.
fn find_object<'r, 'a, 'p>(
    root: &'r mut Node<'a>,
    path: &'p str,
) -> Option<(Container<'r, 'a>, Cow<'p, str>)> {
    let first = path.find('/')?;
    let last = path.rfind('/')?;
    let mut con = container(root)?;
    if last > first {
        for part in path[first + 1..last].split('/') {
            let next = con.into_member(&decode_key(part))?;
            con = container(next)?;
        }
    }
    Some((con, decode_key(&path[last + 1..])))
}

/// `Operation.Path()`; the error is Go's JSON error for the quoted string.
fn decode_path(op: &PatchOperation) -> Result<&str, String> {
    match go_quoted_json_error(&op.path) {
        None => Ok(&op.path),
        Some(e) => Err(e),
    }
}

/// `Operation.From()`.
fn decode_from(op: &PatchOperation) -> Result<&str, String> {
    match op.from.as_deref() {
        None | Some("") => Err(format!("operation, missing from field: {MISSING}")),
        Some(from) => match go_quoted_json_error(from) {
            None => Ok(from),
            Some(e) => Err(e),
        },
    }
}

fn apply_op<'a>(
    root: &mut Node<'a>,
    op: &'a PatchOperation,
    copied: &mut i64,
    limit: i64,
) -> Result<(), OpError> {
    let kind = if go_quoted_json_error(&op.op).is_some() {
        "unknown"
    } else {
        op.op.as_str()
    };
    match kind {
        "add" => op_add(root, op),
        "remove" => op_remove(root, op),
        "replace" => op_replace(root, op),
        "move" => op_move(root, op),
        "test" => op_test(root, op),
        "copy" => op_copy(root, op, copied, limit),
        other => Err(OpError::Kind(other.to_string())),
    }
}

fn op_add<'a>(root: &mut Node<'a>, op: &'a PatchOperation) -> Result<(), OpError> {
    let path =
        decode_path(op).map_err(|_| missing("add operation failed to decode path".to_string()))?;
    let Some((con, key)) = find_object(root, path) else {
        return Err(missing(format!(
            "add operation does not apply: doc is missing path: \"{path}\""
        )));
    };
    con.add(&key, Node::from_op(op))
        .map_err(|e| e.wrap(|| format!("error in add for path: '{path}'")))
}

fn op_remove(root: &mut Node<'_>, op: &PatchOperation) -> Result<(), OpError> {
    let path = decode_path(op)
        .map_err(|_| missing("remove operation failed to decode path".to_string()))?;
    let Some((con, key)) = find_object(root, path) else {
        return Err(missing(format!(
            "remove operation does not apply: doc is missing path: \"{path}\""
        )));
    };
    con.remove(&key)
        .map(drop)
        .map_err(|e| e.wrap(|| format!("error in remove for path: '{path}'")))
}

fn op_replace<'a>(root: &mut Node<'a>, op: &'a PatchOperation) -> Result<(), OpError> {
    let path = decode_path(op)
        .map_err(|e| msg(format!("replace operation failed to decode path: {e}")))?;
    if path.is_empty() {
        return match &op.value {
            None => Err(OpError::Panic(PANIC_NIL_DEREF)),
            Some(v @ (Value::Object(_) | Value::Array(_) | Value::Null)) => {
                *root = Node::Raw(v);
                Ok(())
            }
            // fmt.Errorf("...: %w", err) with a nil err.
            Some(_) => Err(msg(
                "replace operation value must be object or array: %!w(<nil>)",
            )),
        };
    }
    let Some((con, key)) = find_object(root, path) else {
        return Err(missing(format!(
            "replace operation does not apply: doc is missing path: {path}"
        )));
    };
    if con.get(&key).is_err() {
        return Err(missing(format!(
            "replace operation does not apply: doc is missing key: {path}"
        )));
    }
    con.set(&key, Node::from_op(op))
        .map_err(|e| e.wrap(|| format!("error in remove for path: '{path}'")))
}

fn op_move(root: &mut Node<'_>, op: &PatchOperation) -> Result<(), OpError> {
    let from =
        decode_from(op).map_err(|e| msg(format!("move operation failed to decode from: {e}")))?;
    let Some((con, key)) = find_object(root, from) else {
        return Err(missing(format!(
            "move operation does not apply: doc is missing from path: {from}"
        )));
    };
    // evanphx calls get then remove: partialDoc.get never fails and partialArray.get rejects
    // exactly the keys remove rejects, with the same errors, so remove alone is equivalent.
    let val = con
        .remove(&key)
        .map_err(|e| e.wrap(|| format!("error in move for path: '{key}'")))?;
    let path =
        decode_path(op).map_err(|e| msg(format!("move operation failed to decode path: {e}")))?;
    let Some((con, key)) = find_object(root, path) else {
        return Err(missing(format!(
            "move operation does not apply: doc is missing destination path: {path}"
        )));
    };
    con.add(&key, val)
        .map_err(|e| e.wrap(|| format!("error in move for path: '{path}'")))
}

fn op_test(root: &mut Node<'_>, op: &PatchOperation) -> Result<(), OpError> {
    let path =
        decode_path(op).map_err(|e| msg(format!("test operation failed to decode path: {e}")))?;
    let verdict = |cmp: Cmp| match cmp {
        Cmp::Equal => Ok(()),
        Cmp::NotEqual => Err(OpError::TestFailed(path.to_string())),
        Cmp::Panic => Err(OpError::Panic(PANIC_NIL_DEREF)),
    };
    if path.is_empty() {
        let Some(value) = &op.value else {
            return Err(OpError::Panic(PANIC_NIL_DEREF));
        };
        return match doc_ref(root) {
            Some(me) => verdict(equal(me, value)),
            None => Err(OpError::Panic(PANIC_NIL_DEREF)),
        };
    }
    let Some((con, key)) = find_object(root, path) else {
        return Err(missing(format!(
            "test operation does not apply: is missing path: {path}"
        )));
    };
    let val = con
        .get(&key)
        .map_err(|e| e.wrap(|| format!("error in test for path: '{path}'")))?;
    match (val.and_then(doc_ref), &op.value) {
        (None, None) => Ok(()),
        (None, Some(_)) | (Some(_), None) => verdict(Cmp::NotEqual),
        (Some(me), Some(value)) => verdict(equal(me, value)),
    }
}

fn op_copy(
    root: &mut Node<'_>,
    op: &PatchOperation,
    copied: &mut i64,
    limit: i64,
) -> Result<(), OpError> {
    let from =
        decode_from(op).map_err(|e| msg(format!("copy operation failed to decode from: {e}")))?;
    let Some((con, key)) = find_object(root, from) else {
        return Err(missing(format!(
            "copy operation does not apply: doc is missing from path: {from}"
        )));
    };
    let (val, size) = match con
        .get(&key)
        .map_err(|e| e.wrap(|| format!("error in copy for from: '{from}'")))?
    {
        None => (Node::Nil, 0),
        Some(node) => (node.deep_copy(), node.go_len()),
    };
    let path =
        decode_path(op).map_err(|_| missing("copy operation failed to decode path".to_string()))?;
    let Some((con, key)) = find_object(root, path) else {
        return Err(missing(format!(
            "copy operation does not apply: doc is missing destination path: {path}"
        )));
    };
    *copied = copied.saturating_add(i64::try_from(size).unwrap_or(i64::MAX));
    if limit > 0 && *copied > limit {
        return Err(OpError::CopySize(*copied, limit));
    }
    con.add(&key, val)
        .map_err(|e| e.wrap(|| "error while adding value during copy".to_string()))
}

/// A non-nil node on the document side of `lazyNode.equal`.
#[derive(Clone, Copy)]
enum DocRef<'r> {
    Node(&'r Node<'r>),
    Val(&'r Value),
}

fn doc_ref<'r>(node: &'r Node<'_>) -> Option<DocRef<'r>> {
    match node {
        Node::Nil => None,
        Node::Raw(v) => Some(DocRef::Val(v)),
        other => Some(DocRef::Node(other)),
    }
}

fn val_member(v: &Value) -> Option<DocRef<'_>> {
    if v.is_null() {
        None
    } else {
        Some(DocRef::Val(v))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cmp {
    Equal,
    NotEqual,
    /// Go dereferences a nil member.
    Panic,
}

/// `lazyNode.equal(n, o)` with `o` the operation's value (a raw node, never nil here).
fn equal(n: DocRef<'_>, o: &Value) -> Cmp {
    match n {
        DocRef::Val(Value::Object(m)) => equal_map(
            m.len(),
            m.iter().map(|(k, v)| (k.as_str(), val_member(v))),
            o,
        ),
        DocRef::Val(Value::Null) => equal_map(0, std::iter::empty(), o),
        DocRef::Val(Value::Array(a)) => equal_array(a.len(), a.iter().map(val_member), o),
        DocRef::Val(scalar) => {
            if scalar_bytes_equal(scalar, o) {
                Cmp::Equal
            } else {
                Cmp::NotEqual
            }
        }
        DocRef::Node(Node::Obj(entries)) => equal_map(
            entries.len(),
            entries.iter().map(|(k, n)| (k.as_ref(), doc_ref(n))),
            o,
        ),
        DocRef::Node(Node::Arr(items)) => equal_array(items.len(), items.iter().map(doc_ref), o),
        DocRef::Node(Node::Raw(v)) => equal(DocRef::Val(v), o),
        DocRef::Node(Node::Nil) => Cmp::Panic,
    }
}

/// The `eDoc` branch: `o` must decode as a map (an object, or `null` as a nil map).
fn equal_map<'k, 'r>(
    len: usize,
    entries: impl Iterator<Item = (&'k str, Option<DocRef<'r>>)>,
    o: &Value,
) -> Cmp {
    let other = match o {
        Value::Object(m) => Some(m),
        Value::Null => None,
        _ => return Cmp::NotEqual,
    };
    if len != other.map_or(0, Map::len) {
        return Cmp::NotEqual;
    }
    let mut panicked = false;
    for (key, mine) in entries {
        let Some(theirs) = other.and_then(|m| m.get(key)) else {
            return Cmp::NotEqual;
        };
        match (mine, theirs.is_null()) {
            (None, true) => {}
            (None, false) | (Some(_), true) => return Cmp::NotEqual,
            (Some(mine), false) => match equal(mine, theirs) {
                Cmp::Equal => {}
                Cmp::NotEqual => return Cmp::NotEqual,
                Cmp::Panic => panicked = true,
            },
        }
    }
    if panicked {
        Cmp::Panic
    } else {
        Cmp::Equal
    }
}

/// The `eAry` branch: `o` must decode as a slice (an array, or `null` as a nil slice).
fn equal_array<'r>(len: usize, items: impl Iterator<Item = Option<DocRef<'r>>>, o: &Value) -> Cmp {
    let other: &[Value] = match o {
        Value::Array(a) => a,
        Value::Null => &[],
        _ => return Cmp::NotEqual,
    };
    if len != other.len() {
        return Cmp::NotEqual;
    }
    for (mine, theirs) in items.zip(other) {
        // val.equal(o.ary[idx]) dereferences both.
        let Some(mine) = mine else {
            return Cmp::Panic;
        };
        if theirs.is_null() {
            return Cmp::Panic;
        }
        match equal(mine, theirs) {
            Cmp::Equal => {}
            other => return other,
        }
    }
    Cmp::Equal
}

/// `bytes.Equal(n.compact(), o.compact())` for a scalar `n`.
fn scalar_bytes_equal(a: &Value, o: &Value) -> bool {
    match (a, o) {
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => go_number(x) == go_number(y),
        (Value::Bool(x), Value::Bool(y)) => x == y,
        _ => false,
    }
}

/// How Go prints a JSON number that went through int64/float64 (`encoding/json`, protojson).
fn go_number(n: &Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(0.0)),
    }
}

/// `encoding/json`'s float64 format: shortest digits, exponent form below 1e-6 or from 1e21.
fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) if e.starts_with('-') => format!("{m}e{e}"),
            Some((m, e)) => format!("{m}e+{e}"),
            None => s,
        }
    } else {
        format!("{f}")
    }
}

fn value_go_len(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => go_number(n).len(),
        Value::String(s) => string_go_len(s),
        Value::Array(a) => {
            2 + a.len().saturating_sub(1) + a.iter().map(value_go_len).sum::<usize>()
        }
        Value::Object(m) => {
            2 + m.len().saturating_sub(1)
                + m.iter()
                    .map(|(k, v)| string_go_len(k) + 1 + value_go_len(v))
                    .sum::<usize>()
        }
    }
}

/// Length of a string as `encoding/json` writes it (HTML-safe escaping).
fn string_go_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

/// `strconv.Atoi`, with its error text.
fn go_atoi(s: &str) -> Result<i64, String> {
    let err = |what: &str| format!("strconv.Atoi: parsing {}: {what}", crate::gofmt::quote(s));
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return Err(err("invalid syntax"));
    }
    let mut n: u64 = 0;
    for b in digits.bytes() {
        if !b.is_ascii_digit() {
            return Err(err("invalid syntax"));
        }
        n = match n
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(b - b'0')))
        {
            Some(v) => v,
            None => return Err(err("value out of range")),
        };
    }
    const CUTOFF: u64 = 1 << 63;
    if (!neg && n >= CUTOFF) || (neg && n > CUTOFF) {
        return Err(err("value out of range"));
    }
    let n = n as i64;
    Ok(if neg { n.wrapping_neg() } else { n })
}

/// The error of Go's `json.Unmarshal` on `strconv.Quote(s)`, as kube builds op, path and from:
/// `\a`, `\v`, `\xNN` and `\UNNNNNNNN` are not JSON escapes.
fn go_quoted_json_error(s: &str) -> Option<String> {
    // Printable ASCII, what paths nearly always are, quotes as itself.
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    s.chars().find_map(|c| {
        let bad = match c {
            '\u{7}' => 'a',
            '\u{b}' => 'v',
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => return None,
            c if crate::gofmt::is_print(c) => return None,
            c if (c as u32) < 0x20 || c == '\u{7f}' => 'x',
            c if (c as u32) < 0x10000 => return None,
            _ => 'U',
        };
        Some(format!("invalid character '{bad}' in string escape code"))
    })
}

#[cfg(test)]
mod tests {
    //! Cases ported from evanphx/json-patch `patch_test.go` (v4: `Cases`, `MutationTestCases`,
    //! `BadCases`, `TestCases`, `TestAdd`, `EqualityCases`) and kubernetes
    //! `staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch/json_patch_test.go`
    //! (`TestJSONPatch`). Error texts are those the v4.13.0 code builds. Where an evanphx case
    //! decodes `"value": null` to a nil pointer, kube sends the raw bytes `null` instead; those
    //! cases are given kube's outcome, and say so.
    use super::*;
    use serde_json::json;

    fn op(kind: &str, path: &str) -> PatchOperation {
        PatchOperation {
            op: kind.to_string(),
            path: path.to_string(),
            from: None,
            value: None,
        }
    }
    fn add(path: &str, value: Value) -> PatchOperation {
        PatchOperation {
            value: Some(value),
            ..op("add", path)
        }
    }
    #[test]
    fn changed_paths_include_the_parents_a_removal_may_empty() {
        let ops = vec![
            op("remove", "/data/level"),
            add("/metadata/labels/a", json!("b")),
            PatchOperation {
                from: Some("/spec/a~1b/c".into()),
                ..op("move", "/spec/d")
            },
            op("remove", "/top"),
            op("test", "/x/y"),
        ];
        assert_eq!(
            changed_paths(&ops).collect::<Vec<_>>(),
            ["/data", "/metadata/labels/a", "/spec/d", "/spec/a~1b"]
        );
    }
    fn replace(path: &str, value: Value) -> PatchOperation {
        PatchOperation {
            value: Some(value),
            ..op("replace", path)
        }
    }
    fn test(path: &str, value: Value) -> PatchOperation {
        PatchOperation {
            value: Some(value),
            ..op("test", path)
        }
    }
    fn remove(path: &str) -> PatchOperation {
        op("remove", path)
    }
    fn mv(from: &str, path: &str) -> PatchOperation {
        PatchOperation {
            from: Some(from.to_string()),
            ..op("move", path)
        }
    }
    fn cp(from: &str, path: &str) -> PatchOperation {
        PatchOperation {
            from: Some(from.to_string()),
            ..op("copy", path)
        }
    }

    /// [`apply_patch_in_place`], with the documents its `before_write`
    /// was called with.
    fn in_place(
        doc: &mut Value,
        ops: &[PatchOperation],
    ) -> (Result<bool, JsonPatchError>, Vec<Value>) {
        let mut seen = Vec::new();
        let mut untold = doc.clone();
        let result = apply_patch_in_place(doc, ops, Some(&mut |d| seen.push(d.clone())));
        // Untold, it patches the same.
        let same = apply_patch_in_place(&mut untold, ops, None);
        assert_eq!((&same, &untold), (&result, &*doc));
        (result, seen)
    }

    #[track_caller]
    fn ok(doc: Value, ops: &[PatchOperation], want: Value) {
        match apply_patch(&doc, ops) {
            Ok(got) => assert_eq!(got, want),
            Err(e) => panic!("unexpected error: {e}"),
        }
        // The dispatcher's in-place form gives the same document.
        // It is told of its first write, with the document as it was,
        // exactly when the document changes.
        let mut patched = doc.clone();
        match in_place(&mut patched, ops) {
            (Ok(changed), seen) => {
                assert_eq!(patched, want, "in place");
                assert_eq!(changed, doc != want, "changed");
                assert_eq!(seen, if changed { vec![doc] } else { vec![] });
            }
            (Err(e), _) => panic!("unexpected error in place: {e}"),
        }
    }

    #[track_caller]
    fn fails(doc: Value, ops: &[PatchOperation], want: &str) {
        let before = doc.clone();
        match apply_patch(&doc, ops) {
            Ok(got) => panic!("expected error {want:?}, got {got}"),
            Err(e) => assert_eq!(e.to_string(), want),
        }
        assert_eq!(doc, before);
        in_place_fails(doc, ops);
    }

    /// The in-place form fails as [`apply_patch`] does, leaving the document.
    #[track_caller]
    fn in_place_fails(mut doc: Value, ops: &[PatchOperation]) {
        let before = doc.clone();
        let want = apply_patch(&doc, ops).expect_err("fails");
        assert_eq!(in_place(&mut doc, ops), (Err(want), vec![]));
        assert_eq!(doc, before);
    }

    #[track_caller]
    fn test_fails(doc: Value, ops: &[PatchOperation], path: &str) {
        match apply_patch(&doc, ops) {
            Err(e @ JsonPatchError::TestFailed { .. }) => {
                assert_eq!(
                    e.to_string(),
                    format!("testing value {path} failed: test failed")
                )
            }
            other => panic!("expected a failed test, got {other:?}"),
        }
        in_place_fails(doc, ops);
    }

    fn aaa(n: usize) -> String {
        "A".repeat(n)
    }

    // ---- patch_test.go `Cases` (TestAllCases) ----

    #[test]
    fn in_place_moves_what_it_keeps_and_copies_what_it_duplicates() {
        let doc = json!({"a": {"b": [1, 2]}, "c": {"d": true}, "e": "f"});
        // `copy` holds `/a` twice: both copies are whole and equal.
        ok(
            doc.clone(),
            &[cp("/a", "/g"), add("/a/b/-", json!(3))],
            json!({"a": {"b": [1, 2, 3]}, "c": {"d": true}, "e": "f", "g": {"b": [1, 2]}}),
        );
        // `move` holds a value inside another it holds.
        ok(
            doc.clone(),
            &[mv("/c/d", "/h"), add("/c/i", json!(1))],
            json!({"a": {"b": [1, 2]}, "c": {"i": 1}, "e": "f", "h": true}),
        );
        // Adding what is there changes nothing.
        ok(doc.clone(), &[replace("/e", json!("f"))], doc.clone());
        ok(doc.clone(), &[remove("/e"), add("/e", json!("f"))], doc);
    }

    #[test]
    fn cases_add_member() {
        ok(
            json!({"foo": "bar"}),
            &[add("/baz", json!("qux"))],
            json!({"baz": "qux", "foo": "bar"}),
        );
    }

    #[test]
    fn cases_add_into_array() {
        ok(
            json!({"foo": ["bar", "baz"]}),
            &[add("/foo/1", json!("qux"))],
            json!({"foo": ["bar", "qux", "baz"]}),
        );
    }

    #[test]
    fn cases_add_negative_index_appends() {
        ok(
            json!({"foo": ["bar", "baz"]}),
            &[add("/foo/-1", json!("qux"))],
            json!({"foo": ["bar", "baz", "qux"]}),
        );
        ok(
            json!({"foo": []}),
            &[add("/foo/-1", json!("qux"))],
            json!({"foo": ["qux"]}),
        );
    }

    #[test]
    fn cases_remove() {
        ok(
            json!({"baz": "qux", "foo": "bar"}),
            &[remove("/baz")],
            json!({"foo": "bar"}),
        );
        ok(
            json!({"foo": ["bar", "qux", "baz"]}),
            &[remove("/foo/1")],
            json!({"foo": ["bar", "baz"]}),
        );
        ok(
            json!({"foo": ["bar", "qux", "baz"]}),
            &[remove("/foo/-2")],
            json!({"foo": ["bar", "baz"]}),
        );
        ok(
            json!({"foo": "bar", "qux": {"baz": 1, "bar": null}}),
            &[remove("/qux/bar")],
            json!({"foo": "bar", "qux": {"baz": 1}}),
        );
    }

    #[test]
    fn cases_replace() {
        ok(
            json!({"baz": "qux", "foo": "bar"}),
            &[replace("/baz", json!("boo"))],
            json!({"baz": "boo", "foo": "bar"}),
        );
        ok(
            json!({"foo": ["bar"]}),
            &[replace("/foo/0", json!("baz"))],
            json!({"foo": ["baz"]}),
        );
        ok(
            json!({"foo": ["bar", "baz"]}),
            &[replace("/foo/0", json!("bum"))],
            json!({"foo": ["bum", "baz"]}),
        );
        ok(
            json!({"foo": ["bar", "qux", "baz"]}),
            &[replace("/foo/1", json!("bum"))],
            json!({"foo": ["bar", "bum", "baz"]}),
        );
        ok(
            json!([{"foo": ["bar", "qux", "baz"]}]),
            &[replace("/0/foo/0", json!("bum"))],
            json!([{"foo": ["bum", "qux", "baz"]}]),
        );
    }

    #[test]
    fn cases_replace_null_members() {
        ok(
            json!({"bar": [{"baz": null}]}),
            &[replace("/bar/0/baz", json!(1))],
            json!({"bar": [{"baz": 1}]}),
        );
        ok(
            json!({"bar": [{"baz": 1}]}),
            &[replace("/bar/0/baz", Value::Null)],
            json!({"bar": [{"baz": null}]}),
        );
        ok(
            json!({"bar": [null]}),
            &[replace("/bar/0", json!(1))],
            json!({"bar": [1]}),
        );
        ok(
            json!({"bar": [1]}),
            &[replace("/bar/0", Value::Null)],
            json!({"bar": [null]}),
        );
    }

    #[test]
    fn cases_move() {
        ok(
            json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
            &[mv("/foo/waldo", "/qux/thud")],
            json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
        );
        ok(
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            &[mv("/foo/1", "/foo/3")],
            json!({"foo": ["all", "cows", "eat", "grass"]}),
        );
        ok(
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            &[mv("/foo/1", "/foo/2")],
            json!({"foo": ["all", "cows", "grass", "eat"]}),
        );
    }

    #[test]
    fn cases_add_containers_and_null() {
        ok(
            json!({"foo": "bar"}),
            &[add("/child", json!({"grandchild": {}}))],
            json!({"foo": "bar", "child": {"grandchild": {}}}),
        );
        ok(
            json!({"foo": ["bar"]}),
            &[add("/foo/-", json!(["abc", "def"]))],
            json!({"foo": ["bar", ["abc", "def"]]}),
        );
        ok(
            json!({"foo": "bar"}),
            &[add("/baz", Value::Null)],
            json!({"baz": null, "foo": "bar"}),
        );
    }

    #[test]
    fn cases_copy() {
        ok(
            json!([{"foo": ["bar", "qux", "baz"], "bar": ["qux", "baz"]}]),
            &[cp("/0/foo/0", "/0/bar/0")],
            json!([{"foo": ["bar", "qux", "baz"], "bar": ["bar", "qux", "baz"]}]),
        );
        ok(
            json!([{"foo": ["bar", "qux", "baz"], "bar": ["qux", "baz"]}]),
            &[cp("/0/foo/0", "/0/bar")],
            json!([{"foo": ["bar", "qux", "baz"], "bar": "bar"}]),
        );
        ok(
            json!([{"foo": {"bar": ["qux", "baz"]}, "baz": {"qux": "bum"}}]),
            &[cp("/0/foo/bar", "/0/baz/bar")],
            json!([{"baz": {"bar": ["qux", "baz"], "qux": "bum"}, "foo": {"bar": ["qux", "baz"]}}]),
        );
        ok(
            json!({"foo": ["bar"]}),
            &[cp("/foo", "/foo/0")],
            json!({"foo": [["bar"], "bar"]}),
        );
    }

    #[test]
    fn cases_copy_size_at_limit() {
        // Each copy of the 48 A's costs 50 bytes (quotes included); 100 is allowed.
        let doc = json!({"foo": ["A", aaa(48)]});
        let ops = [cp("/foo/1", "/foo/-"), cp("/foo/1", "/foo/-")];
        let got = apply_patch_with_copy_limit(&doc, &ops, 100).unwrap();
        assert_eq!(got, json!({"foo": ["A", aaa(48), aaa(48), aaa(48)]}));
    }

    // ---- `MutationTestCases` ----

    #[test]
    fn mutation_cases_change_the_document() {
        let doc = json!({"foo": "bar", "qux": {"baz": 1, "bar": null}});
        assert_ne!(apply_patch(&doc, &[remove("/qux/bar")]).unwrap(), doc);
        assert_ne!(
            apply_patch(&doc, &[replace("/qux/baz", Value::Null)]).unwrap(),
            doc
        );
    }

    // ---- `BadCases` ----

    #[test]
    fn bad_add_under_missing_member() {
        fails(
            json!({"foo": "bar"}),
            &[add("/baz/bat", json!("qux"))],
            r#"add operation does not apply: doc is missing path: "/baz/bat": missing value"#,
        );
    }

    #[test]
    fn bad_remove_missing_key() {
        fails(
            json!({"a": {"b": {"d": 1}}}),
            &[remove("/a/b/c")],
            "error in remove for path: '/a/b/c': Unable to remove nonexistent key: c: missing value",
        );
    }

    #[test]
    fn bad_move_from_missing_key() {
        fails(
            json!({"a": {"b": {"d": 1}}}),
            &[mv("/a/b/c", "/a/b/e")],
            "error in move for path: 'c': Unable to remove nonexistent key: c: missing value",
        );
    }

    #[test]
    fn bad_index_past_end() {
        fails(
            json!({"a": {"b": [1]}}),
            &[remove("/a/b/1")],
            "error in remove for path: '/a/b/1': Unable to access invalid index: 1: invalid index referenced",
        );
        fails(
            json!({"a": {"b": [1]}}),
            &[mv("/a/b/1", "/a/b/2")],
            "error in move for path: '1': Unable to access invalid index: 1: invalid index referenced",
        );
        fails(
            json!({"foo": ["bar", "baz"]}),
            &[replace("/foo/2", json!("bum"))],
            "replace operation does not apply: doc is missing key: /foo/2: missing value",
        );
        fails(
            json!({"foo": ["bar"]}),
            &[add("/foo/2", json!("bum"))],
            "error in add for path: '/foo/2': Unable to access invalid index: 2: invalid index referenced",
        );
    }

    #[test]
    fn bad_add_root() {
        fails(
            json!({"foo": "bar"}),
            &[add("", json!("qux"))],
            r#"add operation does not apply: doc is missing path: "": missing value"#,
        );
    }

    #[test]
    fn bad_negative_indices() {
        fails(
            json!({"foo": ["bar", "baz"]}),
            &[add("/foo/-4", json!("bum"))],
            "error in add for path: '/foo/-4': Unable to access invalid index: -4: invalid index referenced",
        );
        fails(
            json!({"foo": []}),
            &[remove("/foo/-1")],
            "error in remove for path: '/foo/-1': Unable to access invalid index: -1: invalid index referenced",
        );
        fails(
            json!({"foo": ["bar"]}),
            &[remove("/foo/-2")],
            "error in remove for path: '/foo/-2': Unable to access invalid index: -2: invalid index referenced",
        );
    }

    #[test]
    fn bad_replace_under_missing_member() {
        fails(
            json!({"name": {"foo": "bat", "qux": "bum"}}),
            &[replace("/foo/bar", json!("baz"))],
            "replace operation does not apply: doc is missing path: /foo/bar: missing value",
        );
    }

    #[test]
    fn bad_remove_dash() {
        fails(
            json!({"foo": []}),
            &[remove("/foo/-")],
            r#"error in remove for path: '/foo/-': strconv.Atoi: parsing "-": invalid syntax"#,
        );
    }

    #[test]
    fn bad_copy_without_from() {
        fails(
            json!({}),
            &[op("copy", "")],
            "copy operation failed to decode from: operation, missing from field: missing value",
        );
        // kube only sends `from` when it is non-empty.
        fails(
            json!({}),
            &[cp("", "/a")],
            "copy operation failed to decode from: operation, missing from field: missing value",
        );
        fails(
            json!({"a": 1}),
            &[op("move", "/b")],
            "move operation failed to decode from: operation, missing from field: missing value",
        );
    }

    #[test]
    fn bad_copy_to_huge_index() {
        // from "/" names the missing key "" (a nil value, copied as 0 bytes).
        fails(
            json!({"foo": ["bar"]}),
            &[cp("/", "/foo/6666666666")],
            "error while adding value during copy: Unable to access invalid index: 6666666666: invalid index referenced",
        );
        fails(
            json!({"foo": ["bar"]}),
            &[cp("/foo/0", "/foo/2")],
            "error while adding value during copy: Unable to access invalid index: 2: invalid index referenced",
        );
    }

    #[test]
    fn bad_copy_size_over_limit() {
        // 51 + 51 > 100.
        let doc = json!({"foo": ["A", aaa(49)]});
        let ops = [cp("/foo/1", "/foo/-"), cp("/foo/1", "/foo/-")];
        let err = apply_patch_with_copy_limit(&doc, &ops, 100).unwrap_err();
        assert_eq!(
            err,
            JsonPatchError::CopySizeExceeded {
                index: 1,
                accumulated: 102,
                limit: 100
            }
        );
        assert_eq!(
            err.to_string(),
            "Unable to complete the copy, the accumulated size increase of copy is 102, exceeding the limit 100"
        );
    }

    #[test]
    fn bad_move_past_end() {
        fails(
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            &[mv("/foo/1", "/foo/4")],
            "error in move for path: '/foo/4': Unable to access invalid index: 4: invalid index referenced",
        );
    }

    // ---- `TestCases` (TestAllTest) ----

    #[test]
    fn test_op_passes() {
        let doc = json!({"baz": "qux", "foo": ["a", 2, "c"]});
        ok(
            doc.clone(),
            &[test("/baz", json!("qux")), test("/foo/1", json!(2))],
            doc,
        );
        let doc = json!({"baz/foo": "qux"});
        ok(doc.clone(), &[test("/baz~1foo", json!("qux"))], doc);
    }

    #[test]
    fn test_op_fails_with_path() {
        test_fails(json!({"baz": "qux"}), &[test("/baz", json!("bar"))], "/baz");
        test_fails(
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
            &[test("/baz", json!("qux")), test("/foo/1", json!("c"))],
            "/foo/1",
        );
        test_fails(json!({"baz": "qux"}), &[test("/foo", json!(42))], "/foo");
        test_fails(json!({"foo": []}), &[op("test", "/foo")], "/foo");
        let e = apply_patch(&json!({"a": 1}), &[remove("/a"), test("/b", json!(1))]).unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::TestFailed {
                index: 1,
                path: "/b".into()
            }
        );
    }

    #[test]
    fn test_op_null_as_kube_sends_it() {
        // evanphx's own cases decode `"value": null` to a nil pointer and pass the first two;
        // kube's CEL null is the raw `null`, which never equals a nil (missing or null) member
        // and decodes to an empty map/slice, so it equals {} and [].
        test_fails(json!({"baz": "qux"}), &[test("/foo", Value::Null)], "/foo");
        test_fails(json!({"foo": null}), &[test("/foo", Value::Null)], "/foo");
        ok(
            json!({"foo": {}}),
            &[test("/foo", Value::Null)],
            json!({"foo": {}}),
        );
        ok(
            json!({"foo": []}),
            &[test("/foo", Value::Null)],
            json!({"foo": []}),
        );
        // Without a value, a missing or null member passes (v4.13 checks `op.value() == nil`).
        ok(json!({"baz": 1}), &[op("test", "/foo")], json!({"baz": 1}));
        ok(
            json!({"foo": null}),
            &[op("test", "/foo")],
            json!({"foo": null}),
        );
        // A null the patch inserted is a raw node decoding as a nil map: it equals null and {},
        // not [] (`[]` does not decode into a map).
        let patched = [
            add("/x", Value::Null),
            test("/x", Value::Null),
            test("/x", json!({})),
        ];
        ok(json!({}), &patched, json!({"x": null}));
        test_fails(
            json!({}),
            &[add("/x", Value::Null), test("/x", json!([]))],
            "/x",
        );
        test_fails(json!({}), &[add("/x", Value::Null), op("test", "/x")], "/x");
    }

    // ---- TestAdd (partialArray.add) ----

    #[test]
    fn array_add_indices() {
        ok(
            json!({"a": []}),
            &[add("/a/0", json!(1))],
            json!({"a": [1]}),
        );
        fails(
            json!({"a": []}),
            &[add("/a/1", json!(1))],
            "error in add for path: '/a/1': Unable to access invalid index: 1: invalid index referenced",
        );
        ok(
            json!({"a": []}),
            &[add("/a/-1", json!(1))],
            json!({"a": [1]}),
        );
        fails(
            json!({"a": []}),
            &[add("/a/-2", json!(1))],
            "error in add for path: '/a/-2': Unable to access invalid index: -2: invalid index referenced",
        );
    }

    // ---- EqualityCases (TestEquality), through `test` ----

    #[test]
    fn equality_cases() {
        let eq = |a: Value, b: Value| apply_patch(&a, &[test("", b)]).is_ok();
        assert!(!eq(
            json!({"foo": "bar"}),
            json!({"foo": "bar", "baz": "qux"})
        ));
        assert!(!eq(
            json!({"foo": "bar", "baz": "qux"}),
            json!({"foo": "bar"})
        ));
        assert!(eq(
            json!({"baz": "qux", "foo": "bar"}),
            json!({"foo": "bar", "baz": "qux"})
        ));
        assert!(!eq(json!({"foo": null}), json!({"foo": "bar"})));
        assert!(!eq(json!({"foo": "bar"}), json!({"foo": null})));
        assert!(eq(json!({"foo": null}), json!({"foo": null})));
        assert!(!eq(
            json!(["foo", "bar", "baz"]),
            json!(["bar", "baz", "foo"])
        ));
        assert!(eq(
            json!(["foo", "bar", "baz"]),
            json!(["foo", "bar", "baz"])
        ));
        let all =
            json!({"int": 6, "bool": true, "float": 7.0, "string": "the_string", "null": null});
        assert!(eq(all.clone(), all));
        assert!(!eq(
            json!({"foo": ["an", "array"], "bar": {"an": "object"}}),
            json!({"foo": null, "bar": null})
        ));
        for scalar in [json!("foo"), json!(6), json!(6.01), json!(false)] {
            assert!(!eq(json!({"a": scalar.clone()}), json!({"a": null})));
            test_fails(json!({"a": scalar}), &[test("/a", Value::Null)], "/a");
        }
    }

    #[test]
    fn test_numbers_compare_as_go_prints_them() {
        ok(json!({"a": 1}), &[test("/a", json!(1.0))], json!({"a": 1}));
        ok(
            json!({"a": 1.0}),
            &[test("/a", json!(1))],
            json!({"a": 1.0}),
        );
        ok(
            json!({"a": 100}),
            &[test("/a", json!(1e2))],
            json!({"a": 100}),
        );
        ok(
            json!({"a": 1e21}),
            &[test("/a", json!(1e21))],
            json!({"a": 1e21}),
        );
        test_fails(json!({"a": 1}), &[test("/a", json!(1.5))], "/a");
        test_fails(json!({"a": 0}), &[test("/a", json!(-0.0))], "/a");
        test_fails(json!({"a": 1}), &[test("/a", json!("1"))], "/a");
        test_fails(json!({"a": true}), &[test("/a", json!(1))], "/a");
        // A CEL int goes through a double: 2^53 + 1 is sent as 2^53.
        test_fails(
            json!({"a": 9007199254740993_i64}),
            &[test("/a", json!(9007199254740992.0))],
            "/a",
        );
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1.5e-7), "1.5e-7");
        assert_eq!(go_float(123456789.0), "123456789");
        assert_eq!(go_float(0.000001), "0.000001");
        assert_eq!(go_float(1152921504606846976.0), "1152921504606847000");
    }

    #[test]
    fn test_arrays_with_null_members_panic() {
        let e = apply_patch(&json!({"a": [null]}), &[test("/a", json!([null]))]).unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::Panic {
                index: 0,
                message: PANIC_NIL_DEREF.into()
            }
        );
        // A mismatch found first is a plain failure.
        test_fails(
            json!({"a": [1, null]}),
            &[test("/a", json!([2, null]))],
            "/a",
        );
        test_fails(json!({"a": [null]}), &[test("/a", json!([1, 2]))], "/a");
    }

    #[test]
    fn test_root() {
        let doc = json!({"a": [1, {"b": "c"}]});
        ok(
            doc.clone(),
            &[test("", json!({"a": [1, {"b": "c"}]}))],
            doc.clone(),
        );
        // "testing value %s failed" with an empty path.
        let e = apply_patch(&doc, &[test("", json!({}))]).unwrap_err();
        assert_eq!(e.to_string(), "testing value  failed: test failed");
        let e = apply_patch(&doc, &[op("test", "")]).unwrap_err();
        assert_eq!(e.to_string(), PANIC_NIL_DEREF);
    }

    // ---- kubernetes json_patch_test.go (TestJSONPatch) ----

    fn deployment(spec: Value, labels: Option<Value>) -> Value {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"creationTimestamp": null}, "spec": spec});
        if let Some(l) = labels {
            d["metadata"]["labels"] = l;
        }
        d
    }

    fn containers(names: &[&str]) -> Value {
        let list: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "resources": {}}))
            .collect();
        json!({"template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": list}}})
    }

    #[test]
    fn kube_test_operation() {
        let doc = deployment(json!({"replicas": 1}), None);
        // "jsonPatch with false test operation": the patch is skipped.
        let err = apply_patch(
            &doc,
            &[
                test("/spec/replicas", json!(100)),
                replace("/spec/replicas", json!(3)),
            ],
        );
        assert!(matches!(err, Err(JsonPatchError::TestFailed { .. })));
        // "jsonPatch with true test operation"
        ok(
            doc.clone(),
            &[
                test("/spec/replicas", json!(1)),
                replace("/spec/replicas", json!(3)),
            ],
            deployment(json!({"replicas": 3}), None),
        );
    }

    #[test]
    fn kube_remove() {
        ok(
            deployment(json!({"replicas": 1}), None),
            &[remove("/spec/replicas")],
            deployment(json!({}), None),
        );
        ok(
            deployment(json!({}), Some(json!({"x": "1", "y": "1"}))),
            &[remove("/metadata/labels/y")],
            deployment(json!({}), Some(json!({"x": "1"}))),
        );
        ok(
            deployment(containers(&["a", "b", "c"]), None),
            &[remove("/spec/template/spec/containers/1")],
            deployment(containers(&["a", "c"]), None),
        );
    }

    #[test]
    fn kube_copy_and_move() {
        ok(
            deployment(json!({}), Some(json!({"x": "1"}))),
            &[cp("/metadata/labels/x", "/metadata/labels/y")],
            deployment(json!({}), Some(json!({"x": "1", "y": "1"}))),
        );
        ok(
            deployment(containers(&["a", "b", "c"]), None),
            &[cp(
                "/spec/template/spec/containers/0",
                "/spec/template/spec/containers/-",
            )],
            deployment(containers(&["a", "b", "c", "a"]), None),
        );
        ok(
            deployment(json!({}), Some(json!({"x": "1"}))),
            &[mv("/metadata/labels/x", "/metadata/labels/y")],
            deployment(json!({}), Some(json!({"y": "1"}))),
        );
        ok(
            deployment(containers(&["a", "b", "c"]), None),
            &[mv(
                "/spec/template/spec/containers/0",
                "/spec/template/spec/containers/-",
            )],
            deployment(containers(&["b", "c", "a"]), None),
        );
    }

    #[test]
    fn kube_add() {
        ok(
            deployment(json!({}), Some(json!({"y": "1"}))),
            &[add("/metadata/labels/x", json!("2"))],
            deployment(json!({}), Some(json!({"y": "1", "x": "2"}))),
        );
        ok(
            deployment(json!({}), None),
            &[add("/metadata/labels", json!({"y": "2"}))],
            deployment(json!({}), Some(json!({"y": "2"}))),
        );
        // "jsonPatch add map to existing map" performs a replacement.
        ok(
            deployment(json!({}), Some(json!({"x": "1"}))),
            &[add("/metadata/labels", json!({"y": "2"}))],
            deployment(json!({}), Some(json!({"y": "2"}))),
        );
        ok(
            deployment(containers(&["a"]), None),
            &[add(
                "/spec/template/spec/containers/0",
                json!({"name": "x", "resources": {}}),
            )],
            deployment(containers(&["x", "a"]), None),
        );
        ok(
            deployment(containers(&["a"]), None),
            &[add(
                "/spec/template/spec/containers/-",
                json!({"name": "x", "resources": {}}),
            )],
            deployment(containers(&["a", "x"]), None),
        );
    }

    #[test]
    fn kube_replace() {
        // Replacing a missing map key adds it (partialDoc.get never fails).
        ok(
            deployment(json!({}), Some(json!({"y": "1"}))),
            &[replace("/metadata/labels/x", json!("2"))],
            deployment(json!({}), Some(json!({"y": "1", "x": "2"}))),
        );
        ok(
            deployment(json!({}), None),
            &[replace("/metadata/labels", json!({"y": "2"}))],
            deployment(json!({}), Some(json!({"y": "2"}))),
        );
        ok(
            deployment(json!({}), Some(json!({"x": "1"}))),
            &[replace("/metadata/labels", json!({"y": "2"}))],
            deployment(json!({}), Some(json!({"y": "2"}))),
        );
        ok(
            deployment(containers(&["a"]), None),
            &[replace(
                "/spec/template/spec/containers/0",
                json!({"name": "x", "resources": {}}),
            )],
            deployment(containers(&["x"]), None),
        );
        fails(
            deployment(containers(&["a"]), None),
            &[replace("/spec/template/spec/containers/-", json!({"name": "x"}))],
            "replace operation does not apply: doc is missing key: /spec/template/spec/containers/-: missing value",
        );
    }

    #[test]
    fn kube_key_escaping() {
        assert_eq!(escape_key("k8s.io/x~y"), "k8s.io~1x~0y");
        assert_eq!(escape_key("~1/"), "~01~1");
        ok(
            deployment(json!({}), Some(json!({}))),
            &[
                add("/metadata/labels", json!({})),
                add(
                    &format!("/metadata/labels/{}", escape_key("k8s.io/x~y")),
                    json!("true"),
                ),
            ],
            deployment(json!({}), Some(json!({"k8s.io/x~y": "true"}))),
        );
        assert_eq!(decode_key("~01"), "~1");
        assert_eq!(decode_key("a~2~"), "a~2~");
    }

    // ---- remaining error texts and edge cases, from the v4.13.0 code ----

    #[test]
    fn unexpected_kind() {
        fails(json!({}), &[op("foo", "/a")], "Unexpected kind: foo");
        fails(json!({}), &[op("", "/a")], "Unexpected kind: ");
        fails(json!({}), &[op("Add", "/a")], "Unexpected kind: Add");
        // strconv.Quote("ad\x01") is not JSON, so Kind() reads "unknown".
        fails(
            json!({}),
            &[op("ad\u{1}", "/a")],
            "Unexpected kind: unknown",
        );
        assert_eq!(
            apply_patch(&json!({}), &[op("x", "")]).unwrap_err(),
            JsonPatchError::UnexpectedKind {
                index: 0,
                kind: "x".into()
            }
        );
    }

    #[test]
    fn undecodable_paths() {
        let doc = json!({"a": {}});
        fails(
            doc.clone(),
            &[add("/a\u{7}", json!(1))],
            "add operation failed to decode path: missing value",
        );
        fails(
            doc.clone(),
            &[remove("/a\u{7f}")],
            "remove operation failed to decode path: missing value",
        );
        fails(
            doc.clone(),
            &[replace("/a\u{7}", json!(1))],
            "replace operation failed to decode path: invalid character 'a' in string escape code",
        );
        fails(
            doc.clone(),
            &[test("/\u{1}", json!(1))],
            "test operation failed to decode path: invalid character 'x' in string escape code",
        );
        fails(
            doc.clone(),
            &[mv("/a\u{b}", "/b")],
            "move operation failed to decode from: invalid character 'v' in string escape code",
        );
        fails(
            doc.clone(),
            &[mv("/a", "/b\u{e0001}")],
            "move operation failed to decode path: invalid character 'U' in string escape code",
        );
        fails(
            doc.clone(),
            &[cp("/a\u{f0000}", "/b")],
            "copy operation failed to decode from: invalid character 'U' in string escape code",
        );
        fails(
            doc.clone(),
            &[cp("/a", "/b\u{7}")],
            "copy operation failed to decode path: missing value",
        );
        // Escapes Go writes as \t, \n, \u00a0, \u200b are JSON.
        ok(
            doc,
            &[add("/a/\t\n\u{a0}\u{200b}é", json!(1))],
            json!({"a": {"\t\n\u{a0}\u{200b}é": 1}}),
        );
    }

    #[test]
    fn missing_containers() {
        let doc = json!({"a": {"b": [1, 2]}});
        fails(
            doc.clone(),
            &[remove("/x/y")],
            r#"remove operation does not apply: doc is missing path: "/x/y": missing value"#,
        );
        fails(
            doc.clone(),
            &[mv("/x/y", "/a/c")],
            "move operation does not apply: doc is missing from path: /x/y: missing value",
        );
        fails(
            doc.clone(),
            &[mv("/a/b", "/x/y")],
            "move operation does not apply: doc is missing destination path: /x/y: missing value",
        );
        fails(
            doc.clone(),
            &[cp("/x/y", "/a/c")],
            "copy operation does not apply: doc is missing from path: /x/y: missing value",
        );
        fails(
            doc.clone(),
            &[cp("/a/b", "/x/y")],
            "copy operation does not apply: doc is missing destination path: /x/y: missing value",
        );
        fails(
            doc.clone(),
            &[test("/x/y", json!(1))],
            "test operation does not apply: is missing path: /x/y: missing value",
        );
        fails(
            doc.clone(),
            &[mv("x", "/a/c")],
            "move operation does not apply: doc is missing from path: x: missing value",
        );
        // Scalars and nulls are not containers.
        fails(
            json!({"a": 1}),
            &[add("/a/b", json!(1))],
            r#"add operation does not apply: doc is missing path: "/a/b": missing value"#,
        );
        fails(
            json!({"a": null}),
            &[add("/a/b", json!(1))],
            r#"add operation does not apply: doc is missing path: "/a/b": missing value"#,
        );
        fails(
            json!({"a": [null]}),
            &[add("/a/0/b", json!(1))],
            r#"add operation does not apply: doc is missing path: "/a/0/b": missing value"#,
        );
    }

    #[test]
    fn array_index_errors() {
        let doc = json!({"a": [1, 2]});
        fails(
            doc.clone(),
            &[cp("/a/5", "/b")],
            "error in copy for from: '/a/5': Unable to access invalid index: 5: invalid index referenced",
        );
        fails(
            doc.clone(),
            &[test("/a/9", json!(1))],
            "error in test for path: '/a/9': Unable to access invalid index: 9: invalid index referenced",
        );
        fails(
            doc.clone(),
            &[add("/a/x", json!(1))],
            r#"error in add for path: '/a/x': value was not a proper array index: 'x': strconv.Atoi: parsing "x": invalid syntax"#,
        );
        fails(
            doc.clone(),
            &[add("/a/99999999999999999999", json!(1))],
            r#"error in add for path: '/a/99999999999999999999': value was not a proper array index: '99999999999999999999': strconv.Atoi: parsing "99999999999999999999": value out of range"#,
        );
        fails(
            doc.clone(),
            &[remove("/a/9223372036854775808")],
            r#"error in remove for path: '/a/9223372036854775808': strconv.Atoi: parsing "9223372036854775808": value out of range"#,
        );
        fails(
            doc.clone(),
            &[remove("/a/-9223372036854775808")],
            "error in remove for path: '/a/-9223372036854775808': Unable to access invalid index: -9223372036854775808: invalid index referenced",
        );
        fails(
            doc.clone(),
            &[remove("/a/")],
            r#"error in remove for path: '/a/': strconv.Atoi: parsing "": invalid syntax"#,
        );
        // Atoi quotes the key; control characters other than \b \f \n \r \t cannot reach it,
        // as kube's quoting of the path already fails on them.
        fails(
            doc.clone(),
            &[remove("/a/\t")],
            "error in remove for path: '/a/\t': strconv.Atoi: parsing \"\\t\": invalid syntax",
        );
        fails(
            doc.clone(),
            &[remove("/a/\u{1}")],
            "remove operation failed to decode path: missing value",
        );
        fails(
            doc.clone(),
            &[mv("/a/-", "/c")],
            r#"error in move for path: '-': strconv.Atoi: parsing "-": invalid syntax"#,
        );
        fails(
            doc.clone(),
            &[test("/a/-", json!(1))],
            r#"error in test for path: '/a/-': strconv.Atoi: parsing "-": invalid syntax"#,
        );
        fails(
            doc,
            &[cp("/a/0", "/a/x")],
            r#"error while adding value during copy: value was not a proper array index: 'x': strconv.Atoi: parsing "x": invalid syntax"#,
        );
    }

    #[test]
    fn negative_and_signed_indices() {
        let doc = json!({"a": [{"b": 1}, {"b": 2}]});
        ok(
            doc.clone(),
            &[replace("/a/-1/b", json!(3))],
            json!({"a": [{"b": 1}, {"b": 3}]}),
        );
        ok(
            doc.clone(),
            &[replace("/a/-1", json!(0))],
            json!({"a": [{"b": 1}, 0]}),
        );
        ok(doc.clone(), &[test("/a/-2/b", json!(1))], doc.clone());
        ok(
            doc.clone(),
            &[replace("/a/+0", json!(0)), remove("/a/01")],
            json!({"a": [0]}),
        );
        ok(
            doc.clone(),
            &[mv("/a/-1", "/a/0")],
            json!({"a": [{"b": 2}, {"b": 1}]}),
        );
        fails(
            doc,
            &[replace("/a/-3", json!(0))],
            "replace operation does not apply: doc is missing key: /a/-3: missing value",
        );
    }

    #[test]
    fn replace_root() {
        let doc = json!({"a": 1});
        ok(
            doc.clone(),
            &[replace("", json!({"b": 2})), add("/c", json!(3))],
            json!({"b": 2, "c": 3}),
        );
        ok(doc.clone(), &[replace("", json!([1]))], json!([1]));
        fails(
            doc.clone(),
            &[replace("", json!("x"))],
            "replace operation value must be object or array: %!w(<nil>)",
        );
        fails(
            doc.clone(),
            &[replace("", json!(5))],
            "replace operation value must be object or array: %!w(<nil>)",
        );
        assert_eq!(
            apply_patch(&doc, &[op("replace", "")]).unwrap_err(),
            JsonPatchError::Panic {
                index: 0,
                message: PANIC_NIL_DEREF.into()
            }
        );
        // null becomes a nil map: serialised as null, and adding to it panics.
        ok(doc.clone(), &[replace("", Value::Null)], Value::Null);
        assert_eq!(
            apply_patch(&doc, &[replace("", Value::Null), add("/x", json!(1))])
                .unwrap_err()
                .to_string(),
            PANIC_NIL_MAP
        );
    }

    #[test]
    fn inserted_null_is_a_nil_map() {
        let e =
            apply_patch(&json!({}), &[add("/a", Value::Null), add("/a/b", json!(1))]).unwrap_err();
        assert_eq!(
            e,
            JsonPatchError::Panic {
                index: 1,
                message: PANIC_NIL_MAP.into()
            }
        );
        assert_eq!(
            apply_patch(
                &json!({}),
                &[add("/a", Value::Null), replace("/a/b", json!(1))]
            )
            .unwrap_err()
            .to_string(),
            PANIC_NIL_MAP
        );
        fails(
            json!({}),
            &[add("/a", Value::Null), remove("/a/b")],
            "error in remove for path: '/a/b': Unable to remove nonexistent key: b: missing value",
        );
        // Adding under a null from the document is a missing path instead.
        fails(
            json!({"a": null}),
            &[add("/a/b", json!(1))],
            r#"add operation does not apply: doc is missing path: "/a/b": missing value"#,
        );
    }

    #[test]
    fn value_absent_or_null() {
        // Without a value, add/replace store a nil (null).
        ok(
            json!({"a": 1}),
            &[op("add", "/b"), op("replace", "/a")],
            json!({"a": null, "b": null}),
        );
        ok(
            json!({"a": [1]}),
            &[op("add", "/a/-")],
            json!({"a": [1, null]}),
        );
    }

    #[test]
    fn copy_from_missing_key_inserts_null() {
        ok(
            json!({"a": {}}),
            &[cp("/a/x", "/b")],
            json!({"a": {}, "b": null}),
        );
        ok(
            json!({"a": {"x": null}}),
            &[cp("/a/x", "/b")],
            json!({"a": {"x": null}, "b": null}),
        );
        // move needs the key.
        fails(
            json!({"a": {}}),
            &[mv("/a/x", "/b")],
            "error in move for path: 'x': Unable to remove nonexistent key: x: missing value",
        );
        ok(
            json!({"a": {"x": null}}),
            &[mv("/a/x", "/b")],
            json!({"a": {}, "b": null}),
        );
    }

    #[test]
    fn copy_size_uses_go_encoding() {
        // "<" is written \u003c: 6 + 2 quotes = 8 bytes; nil copies cost nothing.
        let doc = json!({"a": "<", "o": {"k": [1, true, null]}});
        assert!(apply_patch_with_copy_limit(&doc, &[cp("/a", "/b")], 8).is_ok());
        assert!(apply_patch_with_copy_limit(&doc, &[cp("/a", "/b")], 7).is_err());
        assert!(apply_patch_with_copy_limit(&doc, &[cp("/zz", "/b")], 1).is_ok());
        // {"k":[1,true,null]} is 19 bytes.
        assert!(apply_patch_with_copy_limit(&doc, &[cp("/o", "/b")], 19).is_ok());
        assert!(apply_patch_with_copy_limit(&doc, &[cp("/o", "/b")], 18).is_err());
        // 0 means no limit; kube's limit is 3 MiB.
        let big = json!({"a": "x".repeat(2 * 1024 * 1024)});
        assert!(apply_patch_with_copy_limit(&big, &[cp("/a", "/b"), cp("/a", "/c")], 0).is_ok());
        let e = apply_patch(&big, &[cp("/a", "/b"), cp("/a", "/c")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Unable to complete the copy, the accumulated size increase of copy is 4194308, exceeding the limit 3145728"
        );
        // A decoded container is measured the same way: {"k":[1,true,null,"\u0026"]} is 28 bytes.
        assert!(apply_patch_with_copy_limit(
            &doc,
            &[add("/o/k/-", json!("&")), cp("/o", "/b")],
            28
        )
        .is_ok());
        assert!(apply_patch_with_copy_limit(
            &doc,
            &[add("/o/k/-", json!("&")), cp("/o", "/b")],
            27
        )
        .is_err());
    }

    #[test]
    fn paths_without_leading_slash() {
        // findObject ignores what comes before the first "/"; no "/" at all is a missing path.
        ok(
            json!({"a": 1}),
            &[add("x/b", json!(2))],
            json!({"a": 1, "b": 2}),
        );
        ok(
            json!({"a": {"c": 1}}),
            &[remove("zz/a/c")],
            json!({"a": {}}),
        );
        fails(
            json!({"a": 1}),
            &[add("b", json!(2))],
            r#"add operation does not apply: doc is missing path: "b": missing value"#,
        );
        // "/" names the empty key.
        ok(json!({}), &[add("/", json!(1))], json!({"": 1}));
        ok(
            json!({"": {"": 2}}),
            &[test("//", json!(2))],
            json!({"": {"": 2}}),
        );
    }

    #[test]
    fn move_onto_itself_and_into_child() {
        ok(
            json!({"a": [1, 2, 3]}),
            &[mv("/a/1", "/a/1")],
            json!({"a": [1, 2, 3]}),
        );
        fails(
            json!({"a": {"b": 1}}),
            &[mv("/a", "/a/c")],
            "move operation does not apply: doc is missing destination path: /a/c: missing value",
        );
        ok(
            json!({"a": {"b": 1}}),
            &[cp("/a", "/a/c")],
            json!({"a": {"b": 1, "c": {"b": 1}}}),
        );
    }

    #[test]
    fn invalid_documents() {
        for (doc, found) in [
            (json!(1), "number"),
            (json!("s"), "string"),
            (json!(true), "bool"),
        ] {
            let e = apply_patch(&doc, &[]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "json: cannot unmarshal {found} into Go value of type jsonpatch.partialDoc"
                )
            );
            assert_eq!(e.op_index(), None);
        }
        ok(json!([1]), &[add("/0", json!(0))], json!([0, 1]));
        ok(Value::Null, &[], Value::Null);
    }

    #[test]
    fn strings_compare_by_content() {
        let doc = json!({"a": "x<y>&\u{2028}\u{7f}\"\\\n"});
        ok(
            doc.clone(),
            &[test("/a", json!("x<y>&\u{2028}\u{7f}\"\\\n"))],
            doc,
        );
        let doc = json!({"a": {"k": ["v", {"n": 1}]}});
        ok(
            doc.clone(),
            &[test("/a", json!({"k": ["v", {"n": 1.0}]}))],
            doc.clone(),
        );
        test_fails(
            doc,
            &[test("/a", json!({"k": ["v", {"n": 1}], "x": null}))],
            "/a",
        );
    }

    #[test]
    fn test_after_mutation_sees_the_change() {
        let doc = json!({"a": {"b": [1]}});
        ok(
            doc,
            &[
                add("/a/b/-", json!(2)),
                add("/a/c", json!({"d": null})),
                test("/a", json!({"b": [1, 2], "c": {"d": null}})),
            ],
            json!({"a": {"b": [1, 2], "c": {"d": null}}}),
        );
    }

    #[test]
    fn error_leaves_input_and_reports_index() {
        let doc = json!({"a": [1]});
        let e = apply_patch(&doc, &[add("/a/-", json!(2)), remove("/nope")]).unwrap_err();
        assert_eq!(e.op_index(), Some(1));
        assert!(matches!(e, JsonPatchError::Failed { index: 1, .. }));
        assert_eq!(doc, json!({"a": [1]}));
    }

    // A lone add, replace or remove is applied in place by a shortcut; it
    // must leave exactly what the general path gives (itself checked
    // against upstream's cases above), and fail the same way.
    #[test]
    fn a_lone_operation_applies_as_the_general_path_does() {
        let doc = json!({"a": {"b": 1, "n": null, "l": [1, 2, 3], "m/k": {"x~y": 2}},
            "s": "str", "e": {}, "z": [[0], {"k": 1}]});
        let value = json!({"v": [1]});
        let mut ops = Vec::new();
        for path in [
            "",
            "/",
            "/a",
            "/a/b",
            "/a/new",
            "/a/n",
            "/a/n/x",
            "/a/l/0",
            "/a/l/2",
            "/a/l/3",
            "/a/l/-",
            "/a/l/-1",
            "/a/l/-3",
            "/a/l/-4",
            "/a/l/01",
            "/a/l/x",
            "/a/m~1k/x~0y",
            "/a/m~1k/new",
            "/s/x",
            "/e/x",
            "/missing/x",
            "/z/0/0",
            "/z/1/k",
            "/z/2/k",
            "a/b",
        ] {
            ops.push(add(path, value.clone()));
            ops.push(add(path, json!(1)));
            ops.push(replace(path, value.clone()));
            ops.push(replace(path, json!(null)));
            ops.push(remove(path));
            ops.push(PatchOperation {
                op: "add".into(),
                path: path.into(),
                from: None,
                value: None,
            });
        }
        for op in &ops {
            let general = apply_patch(&doc, std::slice::from_ref(op));
            let mut patched = doc.clone();
            let (got, seen) = in_place(&mut patched, std::slice::from_ref(op));
            match (general, got) {
                (Ok(expected), Ok(changed)) => {
                    assert_eq!(patched, expected, "{op:?}");
                    assert_eq!(changed, expected != doc, "{op:?}");
                    let told = if changed { vec![doc.clone()] } else { vec![] };
                    assert_eq!(seen, told, "{op:?}");
                }
                (Err(expected), Err(e)) => {
                    assert_eq!(e.to_string(), expected.to_string(), "{op:?}");
                    assert_eq!(patched, doc, "{op:?}");
                    assert!(seen.is_empty(), "{op:?}");
                }
                (general, got) => panic!("{op:?}: general {general:?}, in place {got:?}"),
            }
        }
    }

    #[test]
    fn deep_documents() {
        // The engine recurses no deeper than serde_json's own clone and drop of the document.
        let depth = 400;
        let mut doc = json!(1);
        let mut path = String::new();
        for _ in 0..depth {
            doc = json!({"k": doc});
            path.push_str("/k");
        }
        let got = apply_patch(&doc, &[replace(&path, json!(2)), test(&path, json!(2))]).unwrap();
        assert_eq!(got.pointer(&path), Some(&json!(2)));
        assert!(apply_patch(&doc, &[test("", doc.clone())]).is_ok());
        assert!(apply_patch(&doc, &[cp("/k", "/j")]).is_ok());
    }

    #[test]
    fn atoi_and_quote() {
        assert_eq!(go_atoi("-0"), Ok(0));
        assert_eq!(go_atoi("+7"), Ok(7));
        assert_eq!(go_atoi("-9223372036854775808"), Ok(i64::MIN));
        assert!(go_atoi("1_0").is_err());
        assert!(go_atoi(" 1").is_err());
        assert_eq!(
            go_atoi("99999999999999999999x").unwrap_err(),
            r#"strconv.Atoi: parsing "99999999999999999999x": value out of range"#
        );
        assert_eq!(
            crate::gofmt::quote("a\"\\\u{7}\u{1}\u{7f}\u{a0}é\u{e0001}"),
            r#""a\"\\\a\x01\x7f\u00a0é\U000e0001""#
        );
    }
}
