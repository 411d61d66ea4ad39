//! Who changed what in one admission, for the answer's `auditAnnotations`
//! (kube-apiserver's audit log records them under the webhook's name) and,
//! with `--warnings=changes`, warnings the client prints.
//!
//! Applied changes go under [`CHANGES_KEY`], a monitored binding's would-be
//! changes and errors under [`MONITOR_KEY`], each a JSON list in the order
//! the bindings ran, bounded to [`ANNOTATION_LIMIT`] bytes (the entries
//! beyond it are counted, not listed). The object itself is never
//! annotated: a mutation that wrote its own attribution would change the
//! object again on every reinvocation.

use crate::dispatch::BindingChange;
use crate::json_text::push_quoted;

#[cfg(test)]
use std::collections::BTreeMap;

/// The audit annotation of the changes applied.
pub const CHANGES_KEY: &str = "changes";
/// The audit annotation of what monitored bindings would have done.
pub const MONITOR_KEY: &str = "monitor";
/// The most bytes of one annotation's value.
pub const ANNOTATION_LIMIT: usize = 4096;
/// The most paths one entry lists.
const PATHS_PER_ENTRY: usize = 32;
/// The longest warning (kube-apiserver shortens longer ones).
const WARNING_LIMIT: usize = 256;

/// One binding's effect in an admission.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    /// Its mutations changed these fields (a monitored one's would have).
    Changed {
        policy: String,
        binding: String,
        monitored: bool,
        set: Vec<String>,
        removed: Vec<String>,
    },
    /// A monitored binding failed.
    Failed {
        policy: String,
        binding: String,
        message: String,
    },
}

/// What a monitored binding would have done.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Monitored<'a> {
    /// Changed these fields.
    WouldChange {
        /// The policy.
        policy: &'a str,
        /// The binding.
        binding: &'a str,
        /// The fields set.
        set: &'a [String],
        /// The fields removed.
        removed: &'a [String],
    },
    /// Failed with this message.
    WouldFail {
        /// The policy.
        policy: &'a str,
        /// The binding.
        binding: &'a str,
        /// The error.
        message: &'a str,
    },
}

/// What the bindings of one admission changed, in order.
#[derive(Debug, Default)]
pub struct Attribution {
    entries: Vec<Entry>,
}

impl Attribution {
    /// Records one invocation's change.
    pub fn record(&mut self, change: BindingChange<'_>) {
        self.entries.push(Entry::Changed {
            policy: change.policy.into(),
            binding: change.binding.into(),
            monitored: change.monitored,
            set: change.set,
            removed: change.removed,
        });
    }

    /// Records a monitored binding's error.
    pub fn record_error(&mut self, policy: &str, binding: &str, message: &str) {
        self.entries.push(Entry::Failed {
            policy: policy.into(),
            binding: binding.into(),
            message: message.into(),
        });
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The (policy, binding, monitored) of each change, for the metrics.
    pub fn changes(&self) -> impl Iterator<Item = (&str, &str, bool)> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Changed {
                policy,
                binding,
                monitored,
                ..
            } => Some((policy.as_str(), binding.as_str(), *monitored)),
            Entry::Failed { .. } => None,
        })
    }

    /// The (policy, binding) of each monitored error, for the metrics.
    pub fn errors(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Failed {
                policy, binding, ..
            } => Some((policy.as_str(), binding.as_str())),
            Entry::Changed { .. } => None,
        })
    }

    /// What the monitored bindings would have done, in order.
    pub fn monitored(&self) -> Vec<Monitored<'_>> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Changed {
                    policy,
                    binding,
                    monitored: true,
                    set,
                    removed,
                } => Some(Monitored::WouldChange {
                    policy,
                    binding,
                    set,
                    removed,
                }),
                Entry::Failed {
                    policy,
                    binding,
                    message,
                } => Some(Monitored::WouldFail {
                    policy,
                    binding,
                    message,
                }),
                Entry::Changed { .. } => None,
            })
            .collect()
    }

    /// The audit annotations: [`CHANGES_KEY`] when `applied` (the answer
    /// patches the object), [`MONITOR_KEY`] when a monitored binding acted.
    /// The plain form is the reference the answer's encoded form is tested
    /// against; the answer itself uses [`Attribution::encoded_audit_annotations`].
    #[cfg(test)]
    pub fn audit_annotations(&self, applied: bool) -> BTreeMap<String, String> {
        self.annotations::<String>(applied)
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect()
    }

    /// The audit annotations: [`CHANGES_KEY`] when `applied` (the answer
    /// patches the object), [`MONITOR_KEY`] when a monitored binding acted;
    /// each value as the JSON string that holds it (quoted, escaped), ready
    /// for the answer.
    pub fn encoded_audit_annotations(&self, applied: bool) -> Vec<(&'static str, Vec<u8>)> {
        self.annotations::<InString>(applied)
            .into_iter()
            .map(|(key, value)| (key, value.into_literal()))
            .collect()
    }

    fn annotations<W: AnnotationOut + Default>(&self, applied: bool) -> Vec<(&'static str, W)> {
        let applied_entries = self.entries.iter().filter(|e| {
            applied
                && matches!(
                    e,
                    Entry::Changed {
                        monitored: false,
                        ..
                    }
                )
        });
        let monitored = self.entries.iter().filter(|e| {
            matches!(
                e,
                Entry::Changed {
                    monitored: true,
                    ..
                } | Entry::Failed { .. }
            )
        });
        // In the keys' order.
        [
            (CHANGES_KEY, bounded_list::<W>(applied_entries)),
            (MONITOR_KEY, bounded_list::<W>(monitored)),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
        .collect()
    }

    /// One warning per entry (`applied`: whether the answer patches the
    /// object, else applied changes are left out), each at most
    /// [`WARNING_LIMIT`] characters.
    pub fn warnings(&self, applied: bool) -> Vec<String> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Changed { monitored: false, .. } if !applied => None,
                Entry::Changed {
                    policy,
                    binding,
                    monitored,
                    set,
                    removed,
                } => {
                    let mut text = format!("kmutate: policy {policy} (binding {binding})");
                    if *monitored {
                        text.push_str(" would have");
                    }
                    let mut parts = Vec::new();
                    if !set.is_empty() {
                        parts.push(("set", set));
                    }
                    if !removed.is_empty() {
                        parts.push(("removed", removed));
                    }
                    for (i, (verb, paths)) in parts.into_iter().enumerate() {
                        text.push_str(if i == 0 { " " } else { "; " });
                        text.push_str(verb);
                        text.push(' ');
                        text.push_str(&paths.join(", "));
                    }
                    if *monitored {
                        text.push_str(" (monitor mode: not applied)");
                    }
                    Some(shortened(text))
                }
                Entry::Failed {
                    policy,
                    binding,
                    message,
                } => Some(shortened(format!(
                    "kmutate: policy {policy} (binding {binding}) would have failed (monitor mode: not enforced): {message}"
                ))),
            })
            .collect()
    }
}

/// `entries` as a JSON list of at most [`ANNOTATION_LIMIT`] bytes, those
/// beyond it counted in a last `{"more": N}`; none when there are none.
fn bounded_list<'e, W: AnnotationOut + Default>(
    entries: impl Iterator<Item = &'e Entry>,
) -> Option<W> {
    let mut out = W::default();
    out.piece(OPEN_LIST);
    let mut more = 0usize;
    for entry in entries {
        let start = out.mark();
        if more == 0 {
            if out.plain_len() > 1 {
                out.piece(COMMA);
            }
            write_entry(&mut out, entry);
            // Room is kept for the count (a comma, `{"more":N}`) and the
            // closing bracket.
            if out.plain_len() + 26 <= ANNOTATION_LIMIT {
                continue;
            }
            out.back_to(start);
        }
        more += 1;
    }
    if out.plain_len() == 1 && more == 0 {
        return None;
    }
    if more > 0 {
        if out.plain_len() > 1 {
            out.piece(COMMA);
        }
        out.piece(MORE);
        out.number(more);
        out.piece(CLOSE_ENTRY);
    }
    out.piece(CLOSE_LIST);
    Some(out)
}

/// Appends `entry` as compact JSON, written directly (this runs for every
/// binding that changes an object).
fn write_entry(out: &mut impl AnnotationOut, entry: &Entry) {
    let list = |out: &mut dyn AnnotationOut, paths: &[String]| {
        out.piece(OPEN_LIST);
        for (i, p) in paths.iter().take(PATHS_PER_ENTRY).enumerate() {
            if i > 0 {
                out.piece(COMMA);
            }
            out.string(p);
        }
        if paths.len() > PATHS_PER_ENTRY {
            out.piece(COMMA);
            out.string(&format!("and {} more", paths.len() - PATHS_PER_ENTRY));
        }
        out.piece(CLOSE_LIST);
    };
    let (policy, binding) = match entry {
        Entry::Changed {
            policy, binding, ..
        }
        | Entry::Failed {
            policy, binding, ..
        } => (policy, binding),
    };
    out.piece(POLICY);
    out.string(policy);
    out.piece(BINDING);
    out.string(binding);
    match entry {
        Entry::Changed { set, removed, .. } => {
            if !set.is_empty() {
                out.piece(SET);
                list(out, set);
            }
            if !removed.is_empty() {
                out.piece(REMOVED);
                list(out, removed);
            }
        }
        Entry::Failed { message, .. } => {
            out.piece(ERROR);
            let cut = message
                .char_indices()
                .nth(512)
                .map_or(message.len(), |(i, _)| i);
            out.string(&message[..cut]);
        }
    }
    out.piece(CLOSE_ENTRY);
}

/// The longest fixed piece, escaped.
const PIECE_CAPACITY: usize = 16;

/// A fixed piece of an annotation's JSON, with the same as the content of
/// a JSON string (its quotes escaped), derived when compiled.
#[derive(Clone, Copy, Debug)]
struct Piece {
    plain: &'static str,
    escaped: [u8; PIECE_CAPACITY],
    escaped_len: usize,
}

impl Piece {
    /// `plain` and its escaped form; a piece too long for
    /// [`PIECE_CAPACITY`] fails the build.
    const fn new(plain: &'static str) -> Piece {
        let bytes = plain.as_bytes();
        let mut escaped = [0u8; PIECE_CAPACITY];
        let (mut i, mut len) = (0, 0);
        while i < bytes.len() {
            if bytes[i] == b'"' || bytes[i] == b'\\' {
                escaped[len] = b'\\';
                len += 1;
            }
            escaped[len] = bytes[i];
            len += 1;
            i += 1;
        }
        Piece {
            plain,
            escaped,
            escaped_len: len,
        }
    }

    /// The piece as the content of a JSON string.
    fn in_string(&self) -> &[u8] {
        &self.escaped[..self.escaped_len]
    }
}

const OPEN_LIST: Piece = Piece::new("[");
const CLOSE_LIST: Piece = Piece::new("]");
const COMMA: Piece = Piece::new(",");
const CLOSE_ENTRY: Piece = Piece::new("}");
const POLICY: Piece = Piece::new(r#"{"policy":"#);
const BINDING: Piece = Piece::new(r#","binding":"#);
const SET: Piece = Piece::new(r#","set":"#);
const REMOVED: Piece = Piece::new(r#","removed":"#);
const ERROR: Piece = Piece::new(r#","error":"#);
const MORE: Piece = Piece::new(r#"{"more":"#);

/// Where an annotation's JSON text is written: as it is ([`String`]), or
/// already escaped as the content of the JSON string the answer carries it
/// in ([`InString`]), which spares escaping a few KB full of quotes again.
trait AnnotationOut {
    /// Appends a fixed piece.
    fn piece(&mut self, piece: Piece);
    /// Appends `text` as a JSON string.
    fn string(&mut self, text: &str);
    /// Appends a number.
    fn number(&mut self, n: usize);
    /// How long the JSON text is so far.
    fn plain_len(&self) -> usize;
    /// Where the text is now, to come back to.
    fn mark(&self) -> (usize, usize);
    /// Cuts the text back to `mark`.
    fn back_to(&mut self, mark: (usize, usize));
}

#[cfg(test)]
impl AnnotationOut for String {
    fn piece(&mut self, piece: Piece) {
        self.push_str(piece.plain);
    }
    fn string(&mut self, text: &str) {
        push_quoted(self, text);
    }
    fn number(&mut self, n: usize) {
        self.push_str(&n.to_string());
    }
    fn plain_len(&self) -> usize {
        self.len()
    }
    fn mark(&self) -> (usize, usize) {
        (self.len(), 0)
    }
    fn back_to(&mut self, mark: (usize, usize)) {
        self.truncate(mark.0);
    }
}

/// An annotation's JSON text escaped as the content of a JSON string.
#[derive(Default)]
struct InString {
    bytes: Vec<u8>,
    /// How many bytes the escaping added.
    added: usize,
}

impl InString {
    /// The JSON string holding the text: quoted, escaped.
    fn into_literal(self) -> Vec<u8> {
        let mut literal = Vec::with_capacity(self.bytes.len() + 2);
        literal.push(b'"');
        literal.extend_from_slice(&self.bytes);
        literal.push(b'"');
        literal
    }
}

impl AnnotationOut for InString {
    fn piece(&mut self, piece: Piece) {
        self.bytes.extend_from_slice(piece.in_string());
        self.added += piece.escaped_len - piece.plain.len();
    }
    fn string(&mut self, text: &str) {
        // Most names and paths need no escape: their quotes only.
        // (A fold without an early exit: one vectorized pass.)
        let needs_escape = (text.bytes()).fold(false, |escapes, b| {
            escapes | (b < 0x20) | (b == b'"') | (b == b'\\')
        });
        if !needs_escape {
            self.bytes.extend_from_slice(br#"\""#);
            self.bytes.extend_from_slice(text.as_bytes());
            self.bytes.extend_from_slice(br#"\""#);
            self.added += 2;
            return;
        }
        let mut plain = String::new();
        push_quoted(&mut plain, text);
        // Escaped once, it has no control characters left.
        for b in plain.bytes() {
            if b == b'"' || b == b'\\' {
                self.bytes.push(b'\\');
                self.added += 1;
            }
            self.bytes.push(b);
        }
    }
    fn number(&mut self, n: usize) {
        self.bytes.extend_from_slice(n.to_string().as_bytes());
    }
    fn plain_len(&self) -> usize {
        self.bytes.len() - self.added
    }
    fn mark(&self) -> (usize, usize) {
        (self.bytes.len(), self.added)
    }
    fn back_to(&mut self, mark: (usize, usize)) {
        self.bytes.truncate(mark.0);
        self.added = mark.1;
    }
}

fn shortened(text: String) -> String {
    if text.chars().count() <= WARNING_LIMIT {
        return text;
    }
    let mut short: String = text.chars().take(WARNING_LIMIT - 3).collect();
    short.push_str("...");
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value as Json};

    fn change<'a>(
        policy: &'a str,
        monitored: bool,
        set: &'a [String],
        removed: &'a [String],
    ) -> BindingChange<'a> {
        BindingChange {
            policy,
            binding: "b",
            monitored,
            set: set.to_vec(),
            removed: removed.to_vec(),
        }
    }

    #[test]
    fn applied_and_monitored_changes_have_their_own_keys_and_warnings() {
        let set = ["spec.a".to_string(), "spec.c".to_string()];
        let removed = ["spec.b".to_string()];
        let mut seen = Attribution::default();
        seen.record(change("p1", false, &set, &removed));
        seen.record(change("p2", true, &set, &removed));
        seen.record_error(
            "p3",
            "b",
            "expression 'x' resulted in error: no such key: y",
        );
        let annotations = seen.audit_annotations(true);
        let changes: Json = serde_json::from_str(&annotations[CHANGES_KEY]).unwrap();
        assert_eq!(
            changes,
            json!([{"policy": "p1", "binding": "b", "set": ["spec.a", "spec.c"], "removed": ["spec.b"]}])
        );
        let monitor: Json = serde_json::from_str(&annotations[MONITOR_KEY]).unwrap();
        assert_eq!(monitor[0]["policy"], "p2");
        assert_eq!(
            monitor[1],
            json!({"policy": "p3", "binding": "b", "error": "expression 'x' resulted in error: no such key: y"})
        );
        assert_eq!(
            seen.warnings(true),
            [
                "kmutate: policy p1 (binding b) set spec.a, spec.c; removed spec.b",
                "kmutate: policy p2 (binding b) would have set spec.a, spec.c; removed spec.b (monitor mode: not applied)",
                "kmutate: policy p3 (binding b) would have failed (monitor mode: not enforced): expression 'x' resulted in error: no such key: y",
            ]
        );
        // Not applied (the answer is no patch): only the monitor key.
        assert!(!seen.audit_annotations(false).contains_key(CHANGES_KEY));
        assert_eq!(seen.warnings(false).len(), 2);
    }

    // The answer carries each annotation escaped once more, written so
    // directly: decoded, it is the annotation, bound and count included.
    #[test]
    fn the_answers_form_of_an_annotation_decodes_to_it() {
        let tricky: Vec<String> = [
            r#"metadata.labels["app.kubernetes.io/name"]"#,
            r"back\slash",
            "tab\tcontrol\u{1}",
            "ünï",
        ]
        .map(String::from)
        .to_vec();
        let many: Vec<String> = (0..100).map(|i| format!("field-\"{i:03}\"")).collect();
        let names: Vec<String> = (0..40).map(|i| format!("policy-{i}")).collect();
        let mut seen = Attribution::default();
        seen.record(change("p1", false, &tricky, &tricky[..1]));
        seen.record(change("p2", true, &tricky, &[]));
        seen.record_error("p3", "b", "quote \" and \\ in an error");
        for name in &names {
            seen.record(change(name, false, &many, &[]));
        }
        for applied in [true, false] {
            let plain = seen.audit_annotations(applied);
            let encoded = seen.encoded_audit_annotations(applied);
            assert_eq!(encoded.len(), plain.len());
            for (key, literal) in encoded {
                let decoded: String = serde_json::from_slice(&literal).unwrap();
                assert_eq!(decoded, plain[key], "{key}");
            }
        }
        let plain = seen.audit_annotations(true);
        assert!(plain[CHANGES_KEY].contains("\"more\""));
        assert!(plain[CHANGES_KEY].len() <= ANNOTATION_LIMIT);
    }

    #[test]
    fn annotations_are_bounded_and_count_what_they_leave_out() {
        let set: Vec<String> = (0..100).map(|i| format!("field-{i:03}")).collect();
        let mut seen = Attribution::default();
        let names: Vec<String> = (0..40).map(|i| format!("policy-{i}")).collect();
        for name in &names {
            seen.record(change(name, false, &set, &[]));
        }
        let value = &seen.audit_annotations(true)[CHANGES_KEY];
        assert!(value.len() <= ANNOTATION_LIMIT, "{}", value.len());
        let list: Vec<Json> = serde_json::from_str(value).unwrap();
        let more = list.last().unwrap()["more"].as_u64().unwrap() as usize;
        assert_eq!(list.len() - 1 + more, 40);
        assert_eq!(
            list[0]["set"].as_array().unwrap().len(),
            PATHS_PER_ENTRY + 1
        );
        assert_eq!(list[0]["set"][PATHS_PER_ENTRY], "and 68 more");
        assert!(seen.warnings(true)[0].chars().count() <= WARNING_LIMIT);
    }
}
