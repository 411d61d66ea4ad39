//! The RFC 6902 patch a webhook answers with: from the request's object to
//! the mutated one.
//!
//! The operations are those of `json_patch::diff` (json-patch 4, the
//! crate kube uses), which this replaces for speed only: subtrees the
//! mutations left equal are skipped after one comparison, instead of being
//! walked key by key while building a JSON pointer for each.
//!
//! The left side is a [`Snapshot`] of the original object rather than the
//! object itself: the operations only ever carry the new values, so the
//! original is needed for its shape and its leaves alone. A snapshot is
//! four allocations (three vectors and a string) where a copy of a Pod is
//! about a thousand, which is what lets an admission mutate the request's
//! own object.

use super::json_patch::escape_key;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Number, Value};

/// The patch that turns `left` into `right`, as `json_patch::diff` makes it.
pub fn diff(left: &Value, right: &Value) -> Patch {
    Snapshot::of(left).diff(right)
}

/// What a diff needs of a JSON value: its shape and its leaves, in three
/// flat vectors and a string (see the module documentation).
#[derive(Debug)]
pub struct Snapshot {
    /// Every node; the root is the first.
    nodes: Vec<Node>,
    /// The members of the objects, each object's together and in its
    /// (sorted) key order: key, node.
    members: Vec<(Span, usize)>,
    /// The items of the arrays, each array's together: node.
    items: Vec<usize>,
    /// The text of the strings and keys.
    text: String,
}

/// A range of [`Snapshot::text`].
#[derive(Clone, Copy, Debug)]
struct Span {
    start: usize,
    len: usize,
}

#[derive(Debug)]
enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(Span),
    /// Members `start..start + len`.
    Object {
        start: usize,
        len: usize,
    },
    /// Items `start..start + len`.
    Array {
        start: usize,
        len: usize,
    },
}

/// The JSON pointer of the value a diff is at: its text, and where each of
/// its tokens starts, so that leaving a value is a truncation (the
/// `PointerBuf` this replaces searches and decodes its last token to pop
/// it).
#[derive(Default)]
struct Pointer {
    text: String,
    starts: Vec<usize>,
}

impl Pointer {
    /// Enters the member `key` (escaped: `~` as `~0`, `/` as `~1`).
    fn push_key(&mut self, key: &str) {
        self.starts.push(self.text.len());
        self.text.push('/');
        if key.contains(['~', '/']) {
            self.text.push_str(&escape_key(key));
        } else {
            self.text.push_str(key);
        }
    }

    /// Enters the item `index`.
    fn push_index(&mut self, index: usize) {
        self.starts.push(self.text.len());
        self.text.push('/');
        self.text.push_str(itoa::Buffer::new().format(index));
    }

    /// Leaves the last value entered.
    fn pop(&mut self) {
        if let Some(start) = self.starts.pop() {
            self.text.truncate(start);
        }
    }

    fn as_str(&self) -> &str {
        &self.text
    }

    /// The pointer as json-patch's type.
    fn to_buf(&self) -> PointerBuf {
        // Not an input: the text is only ever `/` and an escaped token
        // (`~` always as `~0`), repeated. Falling back to the empty
        // pointer would name the whole document.
        PointerBuf::parse(self.text.clone()).expect("a pointer of escaped tokens parses")
    }
}

/// Where a diff's operations go: each gets the pointer and (for an add or
/// a replace) the new value only borrowed, so that a sink writing text
/// need not copy the value.
trait OpSink {
    fn add(&mut self, path: &Pointer, value: &Value);
    fn remove(&mut self, path: &Pointer);
    fn replace(&mut self, path: &Pointer, value: &Value);
}

impl OpSink for Vec<PatchOperation> {
    fn add(&mut self, path: &Pointer, value: &Value) {
        self.push(PatchOperation::Add(AddOperation {
            path: path.to_buf(),
            value: value.clone(),
        }));
    }

    fn remove(&mut self, path: &Pointer) {
        self.push(PatchOperation::Remove(RemoveOperation {
            path: path.to_buf(),
        }));
    }

    fn replace(&mut self, path: &Pointer, value: &Value) {
        self.push(PatchOperation::Replace(ReplaceOperation {
            path: path.to_buf(),
            value: value.clone(),
        }));
    }
}

/// The patch as JSON text, byte for byte what serde_json writes for the
/// [`Patch`] (`{"op":..,"path":..,"value":..}` in that order).
struct PatchText(Vec<u8>);

impl PatchText {
    fn op(&mut self, op: &str, path: &Pointer, value: Option<&Value>) {
        if self.0.is_empty() {
            // Room for a typical patch, taken only once there is one.
            self.0.reserve(1024);
            self.0.push(b'[');
        } else {
            self.0.push(b',');
        }
        self.0.extend_from_slice(b"{\"op\":\"");
        self.0.extend_from_slice(op.as_bytes());
        self.0.extend_from_slice(b"\",\"path\":");
        // Writing to a Vec cannot fail; strings and JSON values always
        // serialize.
        let _ = serde_json::to_writer(&mut self.0, path.as_str());
        if let Some(value) = value {
            self.0.extend_from_slice(b",\"value\":");
            let _ = serde_json::to_writer(&mut self.0, value);
        }
        self.0.push(b'}');
    }
}

impl OpSink for PatchText {
    fn add(&mut self, path: &Pointer, value: &Value) {
        self.op("add", path, Some(value));
    }

    fn remove(&mut self, path: &Pointer) {
        self.op("remove", path, None);
    }

    fn replace(&mut self, path: &Pointer, value: &Value) {
        self.op("replace", path, Some(value));
    }
}

impl Snapshot {
    /// The snapshot of `value`.
    pub fn of(value: &Value) -> Snapshot {
        // Room for a typical object (a Pod of a few KB), so that growing
        // rarely copies.
        let mut snapshot = Snapshot {
            nodes: Vec::with_capacity(512),
            members: Vec::with_capacity(512),
            items: Vec::with_capacity(128),
            text: String::with_capacity(8192),
        };
        snapshot.add(value);
        snapshot
    }

    fn span(&mut self, s: &str) -> Span {
        let start = self.text.len();
        self.text.push_str(s);
        Span {
            start,
            len: s.len(),
        }
    }

    /// Adds `value` and what it holds; returns its node's index. The
    /// members (items) of one object (array) are reserved before their
    /// values are added, so that they stay together.
    fn add(&mut self, value: &Value) -> usize {
        let index = self.nodes.len();
        match value {
            Value::Null => self.nodes.push(Node::Null),
            Value::Bool(b) => self.nodes.push(Node::Bool(*b)),
            Value::Number(n) => self.nodes.push(Node::Number(n.clone())),
            Value::String(s) => {
                let span = self.span(s);
                self.nodes.push(Node::String(span));
            }
            Value::Object(map) => {
                let start = self.members.len();
                self.nodes.push(Node::Object {
                    start,
                    len: map.len(),
                });
                let empty = Span { start: 0, len: 0 };
                self.members.resize(start + map.len(), (empty, 0));
                for (i, (k, v)) in map.iter().enumerate() {
                    let key = self.span(k);
                    let child = self.add(v);
                    self.members[start + i] = (key, child);
                }
            }
            Value::Array(items) => {
                let start = self.items.len();
                self.nodes.push(Node::Array {
                    start,
                    len: items.len(),
                });
                self.items.resize(start + items.len(), 0);
                for (i, v) in items.iter().enumerate() {
                    let child = self.add(v);
                    self.items[start + i] = child;
                }
            }
        }
        index
    }

    fn text(&self, span: Span) -> &str {
        &self.text[span.start..span.start + span.len]
    }

    /// The text at `span` as bytes: no character-boundary checks, which
    /// slicing a `str` makes (the spans were cut at the ends of whole
    /// strings).
    fn bytes(&self, span: Span) -> &[u8] {
        &self.text.as_bytes()[span.start..span.start + span.len]
    }

    fn members(&self, start: usize, len: usize) -> impl Iterator<Item = (&str, usize)> + Clone {
        self.members[start..start + len]
            .iter()
            .map(|&(key, node)| (self.text(key), node))
    }

    /// The member `key` of the object whose members start at `start`.
    fn member(&self, start: usize, len: usize, key: &str) -> Option<usize> {
        let members = &self.members[start..start + len];
        // Keys are in `Map` order, which is byte order.
        members
            .binary_search_by(|&(k, _)| self.bytes(k).cmp(key.as_bytes()))
            .ok()
            .map(|i| members[i].1)
    }

    /// The patch that turns the snapshotted value into `right`.
    pub fn diff(&self, right: &Value) -> Patch {
        let mut patch = Vec::new();
        self.diff_root(right, &mut patch);
        Patch(patch)
    }

    /// [`Snapshot::diff`] as the JSON text serde_json makes of it, written
    /// without copying the new values first; `None` for no operation.
    pub fn diff_json(&self, right: &Value) -> Option<Vec<u8>> {
        let mut text = PatchText(Vec::new());
        self.diff_root(right, &mut text);
        if text.0.is_empty() {
            return None;
        }
        text.0.push(b']');
        Some(text.0)
    }

    /// The operations that turn the snapshotted value into `right`.
    fn diff_root(&self, right: &Value, patch: &mut impl OpSink) {
        // Two objects (or arrays) differ exactly when the walk of their
        // members finds an operation, so the walk alone decides; comparing
        // them first would compare every member before the first change
        // twice. Other values are compared first: their walk always
        // replaces.
        let composite = matches!(
            (&self.nodes[0], right),
            (Node::Object { .. }, Value::Object(_)) | (Node::Array { .. }, Value::Array(_))
        );
        if composite || !self.equal(0, right) {
            self.diff_value(0, right, &mut Pointer::default(), patch);
        }
    }

    /// The operations for node `left` and `right`, which differ. Equal
    /// subtrees give no operation: callers skip them after one comparison.
    fn diff_value(
        &self,
        left: usize,
        right: &Value,
        pointer: &mut Pointer,
        patch: &mut impl OpSink,
    ) {
        match (&self.nodes[left], right) {
            (&Node::Object { start, len }, Value::Object(r)) => {
                self.diff_object(start, len, r, pointer, patch)
            }
            (&Node::Array { start, len }, Value::Array(r)) => {
                self.diff_array(start, len, r, pointer, patch)
            }
            _ => patch.replace(pointer, right),
        }
    }

    /// Items compared by index; extra items of the left array are removed
    /// from the end inward at the index they then have, extra items of
    /// `right` appended.
    fn diff_array(
        &self,
        start: usize,
        len: usize,
        right: &[Value],
        pointer: &mut Pointer,
        patch: &mut impl OpSink,
    ) {
        let left = &self.items[start..start + len];
        let mut removed = 0usize;
        for index in 0..left.len().max(right.len()) {
            match (left.get(index), right.get(index)) {
                (Some(&l), Some(r)) => {
                    if !self.equal(l, r) {
                        pointer.push_index(index);
                        self.diff_value(l, r, pointer, patch);
                        pointer.pop();
                    }
                }
                (Some(_), None) => {
                    pointer.push_index(index - removed);
                    patch.remove(pointer);
                    pointer.pop();
                    removed += 1;
                }
                (None, Some(r)) => {
                    pointer.push_index(index);
                    patch.add(pointer, r);
                    pointer.pop();
                }
                (None, None) => {}
            }
        }
    }

    /// `right`'s keys in its order (changed or added), then the left
    /// object's keys that `right` lacks (removed).
    fn diff_object(
        &self,
        start: usize,
        len: usize,
        right: &Map<String, Value>,
        pointer: &mut Pointer,
        patch: &mut impl OpSink,
    ) {
        // Objects keep their keys sorted, so most keys pair up in step; the
        // others are looked up.
        let mut in_step = self.members(start, len).peekable();
        let mut found = 0usize;
        for (key, r) in right {
            let l = match in_step.next_if(|(k, _)| *k == key) {
                Some((_, l)) => Some(l),
                None => self.member(start, len, key),
            };
            match l {
                Some(l) => {
                    found += 1;
                    if !self.equal(l, r) {
                        pointer.push_key(key);
                        self.diff_value(l, r, pointer, patch);
                        pointer.pop();
                    }
                }
                None => {
                    pointer.push_key(key);
                    patch.add(pointer, r);
                    pointer.pop();
                }
            }
        }
        if found == len {
            return;
        }
        for (key, _) in self.members(start, len) {
            if !right.contains_key(key) {
                pointer.push_key(key);
                patch.remove(pointer);
                pointer.pop();
            }
        }
    }

    /// Whether node `left` equals `right` (`Value`'s `==`), pairing the keys
    /// of objects in step while they come in the same order, before falling
    /// back to lookups.
    fn equal(&self, left: usize, right: &Value) -> bool {
        match (&self.nodes[left], right) {
            (&Node::Object { start, len }, Value::Object(r)) => {
                if len != r.len() {
                    return false;
                }
                let mut pairs = self.members[start..start + len].iter().zip(r.iter());
                for (&(lk, lv), (rk, rv)) in pairs.by_ref() {
                    if !self.text_is(lk, rk) {
                        // Out of step: the rest by lookup.
                        return self
                            .members(start, len)
                            .all(|(k, v)| r.get(k).is_some_and(|w| self.equal(v, w)));
                    }
                    if !self.equal(lv, rv) {
                        return false;
                    }
                }
                true
            }
            (&Node::Array { start, len }, Value::Array(r)) => {
                len == r.len()
                    && self.items[start..start + len]
                        .iter()
                        .zip(r)
                        .all(|(&a, b)| self.equal(a, b))
            }
            (Node::Null, Value::Null) => true,
            (Node::Bool(a), Value::Bool(b)) => a == b,
            (Node::Number(a), Value::Number(b)) => a == b,
            (&Node::String(span), Value::String(b)) => self.text_is(span, b),
            _ => false,
        }
    }

    /// Whether the text at `span` is `s`.
    #[inline]
    fn text_is(&self, span: Span, s: &str) -> bool {
        span.len == s.len() && self.bytes(span) == s.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The same operations as `json_patch::diff`, the implementation this
    /// replaces, and a patch that turns `left` into `right`.
    #[track_caller]
    fn same_as_json_patch(left: Value, right: Value) {
        let ours = diff(&left, &right);
        assert_eq!(ours, json_patch::diff(&left, &right), "{left} -> {right}");
        // The text written directly is serde_json's text of the operations.
        let text = Snapshot::of(&left).diff_json(&right);
        let expected = (!ours.0.is_empty()).then(|| serde_json::to_vec(&ours).unwrap());
        assert_eq!(
            text.as_deref().map(String::from_utf8_lossy),
            expected.as_deref().map(String::from_utf8_lossy),
            "{left} -> {right}"
        );
        let mut patched = left.clone();
        json_patch::patch(&mut patched, &ours).expect("applies");
        assert_eq!(patched, right);
    }

    // json-patch 4.2 `src/diff.rs` tests, and the shapes the webhook meets.
    #[test]
    fn operations_match_json_patch_diff() {
        same_as_json_patch(json!({"title": "Hello!"}), Value::Null);
        same_as_json_patch(
            json!({"title": "Something", "": "Hello!"}),
            json!({"title": "Something", "": "Bye!"}),
        );
        same_as_json_patch(Value::Null, json!({"title": "Hello!"}));
        same_as_json_patch(
            json!({"a": [1, 2, 3, 4], "b": {"c": 1, "d/e~f": 2}}),
            json!({"a": [1, 5], "b": {"d/e~f": 3, "g": [true]}}),
        );
        same_as_json_patch(json!({"a": [1]}), json!({"a": [1, 2, {"x": null}]}));
        same_as_json_patch(json!([{"a": 1}, {"b": 2}]), json!([{"a": 1}, {"b": 3}, 4]));
        same_as_json_patch(
            json!({"a": {"b": {"c": [1, 2]}}}),
            json!({"a": {"b": {"c": [1, 2]}}}),
        );
        same_as_json_patch(json!({"a": 1}), json!({"a": "1"}));
        // Equal and empty roots of each kind: no operation.
        for same in [
            json!({}),
            json!([]),
            json!([1, {"a": []}]),
            json!(1),
            json!("s"),
            Value::Null,
        ] {
            same_as_json_patch(same.clone(), same);
        }
        same_as_json_patch(json!([]), json!({}));
        same_as_json_patch(json!(1), json!(2));
        // Keys and strings outside ASCII, compared and looked up as bytes.
        same_as_json_patch(
            json!({"é": "ü", "z": {"ß": "x", "a": 1}}),
            json!({"é": "ü", "z": {"ß": "y", "a": 1, "ä": []}, "ö": "é"}),
        );
        let pod = json!({"metadata": {"name": "p", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}});
        let mut mutated = pod.clone();
        mutated["metadata"]["labels"]["team"] = json!("t");
        mutated["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        mutated["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "2"}, {"name": "B"}]);
        mutated["spec"]["securityContext"] = json!({"runAsNonRoot": true});
        same_as_json_patch(pod, mutated);
    }

    /// A small deterministic generator (xorshift), for the random pairs.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn key(&mut self) -> String {
            // Few keys, so that objects share and miss keys; "" and one
            // needing escapes in a pointer.
            ["a", "b", "c", "", "d/e~f", "é"][self.below(6) as usize].to_string()
        }

        fn value(&mut self, depth: u32) -> Value {
            match self.below(if depth == 0 { 5 } else { 7 }) {
                0 => Value::Null,
                1 => json!(self.below(2) == 0),
                2 => json!(self.below(3)),
                3 => json!(self.below(3) as f64),
                4 => json!(["x", "y", "z"][self.below(3) as usize]),
                5 => (0..self.below(4)).map(|_| self.value(depth - 1)).collect(),
                _ => Value::Object(
                    (0..self.below(5))
                        .map(|_| (self.key(), self.value(depth - 1)))
                        .collect(),
                ),
            }
        }

        /// `v` with a few random changes somewhere inside.
        fn mutate(&mut self, v: &mut Value, depth: u32) {
            match v {
                Value::Object(m) if !m.is_empty() && self.below(4) != 0 => match self.below(4) {
                    0 => {
                        m.insert(self.key(), self.value(depth));
                    }
                    1 => {
                        let key = self.key();
                        m.remove(&key);
                    }
                    _ => {
                        let n = self.below(m.len() as u64) as usize;
                        if let Some(child) = m.values_mut().nth(n) {
                            self.mutate(child, depth.saturating_sub(1));
                        }
                    }
                },
                Value::Array(items) if !items.is_empty() && self.below(4) != 0 => {
                    match self.below(4) {
                        0 => items.push(self.value(depth)),
                        1 => {
                            items.pop();
                        }
                        _ => {
                            let n = self.below(items.len() as u64) as usize;
                            self.mutate(&mut items[n], depth.saturating_sub(1));
                        }
                    }
                }
                _ => *v = self.value(depth),
            }
        }
    }

    #[test]
    fn random_pairs_match_json_patch_diff() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..3000 {
            let left = rng.value(4);
            let mut right = left.clone();
            for _ in 0..=rng.below(3) {
                rng.mutate(&mut right, 4);
            }
            same_as_json_patch(left.clone(), right.clone());
            // And the other way round: removals where there were additions.
            same_as_json_patch(right, left);
        }
    }

    #[test]
    fn snapshot_members_are_in_byte_order() {
        // `Snapshot::member` searches an object's keys by bisection, which
        // holds while `serde_json::Map` keeps its keys sorted (it does
        // unless its `preserve_order` feature is on).
        let map: Map<String, Value> = ["é", "b", "B", "a", "", "ab"]
            .into_iter()
            .map(|k| (k.to_string(), Value::Null))
            .collect();
        let keys: Vec<&str> = map.keys().map(String::as_str).collect();
        assert_eq!(keys, ["", "B", "a", "ab", "b", "é"]);
        let snapshot = Snapshot::of(&Value::Object(map));
        let Node::Object { start, len } = snapshot.nodes[0] else {
            panic!("an object")
        };
        for key in ["", "B", "a", "ab", "b", "é"] {
            assert!(snapshot.member(start, len, key).is_some(), "{key:?}");
        }
        for key in ["A", "c", "ba", "e"] {
            assert!(snapshot.member(start, len, key).is_none(), "{key:?}");
        }
    }

    #[test]
    fn keys_out_of_order_pair_by_name() {
        // Reordered only: equal, no operation.
        same_as_json_patch(
            json!({"a": 1, "b": {"x": 1, "y": 2}, "c": 3}),
            json!({"c": 3, "b": {"y": 2, "x": 1}, "a": 1}),
        );
        // Reordered, with a change, an addition and a removal.
        same_as_json_patch(
            json!({"a": 1, "b": 2, "c": 3, "e": 5}),
            json!({"c": 3, "a": 1, "b": 5, "d": 4}),
        );
        // A key removed early puts the rest out of step.
        same_as_json_patch(
            json!({"a": 1, "b": 2, "c": {"x": 1}, "d": 4}),
            json!({"a": 1, "c": {"x": 2}, "d": 4}),
        );
        // Same keys and length, in another order, one value differing.
        same_as_json_patch(json!({"a": 1, "b": 2}), json!({"b": 2, "a": 3}));
    }
}
