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
    pub fn audit_annotations(&self, applied: bool) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
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
        if let Some(value) = bounded_list(applied_entries) {
            out.insert(CHANGES_KEY.to_string(), value);
        }
        let monitored = self.entries.iter().filter(|e| {
            matches!(
                e,
                Entry::Changed {
                    monitored: true,
                    ..
                } | Entry::Failed { .. }
            )
        });
        if let Some(value) = bounded_list(monitored) {
            out.insert(MONITOR_KEY.to_string(), value);
        }
        out
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
fn bounded_list<'e>(entries: impl Iterator<Item = &'e Entry>) -> Option<String> {
    let mut out = String::with_capacity(1024);
    out.push('[');
    let mut more = 0usize;
    for entry in entries {
        let start = out.len();
        if more == 0 {
            if start > 1 {
                out.push(',');
            }
            write_entry(&mut out, entry);
            // Room is kept for the count (a comma, `{"more":N}`) and the
            // closing bracket.
            if out.len() + 26 <= ANNOTATION_LIMIT {
                continue;
            }
            out.truncate(start);
        }
        more += 1;
    }
    if out.len() == 1 && more == 0 {
        return None;
    }
    if more > 0 {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&format!("{{\"more\":{more}}}"));
    }
    out.push(']');
    Some(out)
}

/// Appends `entry` as compact JSON, written directly (this runs for every
/// binding that changes an object).
fn write_entry(out: &mut String, entry: &Entry) {
    let list = |out: &mut String, paths: &[String]| {
        out.push('[');
        for (i, p) in paths.iter().take(PATHS_PER_ENTRY).enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_quoted(out, p);
        }
        if paths.len() > PATHS_PER_ENTRY {
            let more = format!(",\"and {} more\"", paths.len() - PATHS_PER_ENTRY);
            out.push_str(&more);
        }
        out.push(']');
    };
    let (policy, binding) = match entry {
        Entry::Changed {
            policy, binding, ..
        }
        | Entry::Failed {
            policy, binding, ..
        } => (policy, binding),
    };
    out.push_str("{\"policy\":");
    push_quoted(out, policy);
    out.push_str(",\"binding\":");
    push_quoted(out, binding);
    match entry {
        Entry::Changed { set, removed, .. } => {
            if !set.is_empty() {
                out.push_str(",\"set\":");
                list(out, set);
            }
            if !removed.is_empty() {
                out.push_str(",\"removed\":");
                list(out, removed);
            }
        }
        Entry::Failed { message, .. } => {
            out.push_str(",\"error\":");
            let cut = message
                .char_indices()
                .nth(512)
                .map_or(message.len(), |(i, _)| i);
            push_quoted(out, &message[..cut]);
        }
    }
    out.push('}');
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
