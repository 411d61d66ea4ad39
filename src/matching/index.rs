//! Which bindings a request can match at all, by the resource names their
//! rules name, so that a request touches only those: with thousands of
//! policies loaded, a request pays for the few that may apply to its
//! resource, not for every one.
//!
//! The index may only skip what can never match. A binding is filed under
//! the resource names (the part before any `/subresource`) that its
//! policy's `resourceRules` name, or, when those name every resource, its
//! own `matchResources.resourceRules` (the effective match is their
//! intersection); a binding whose rules name `*` on both sides, or none,
//! is a candidate for every request. Equivalent resources (`matchPolicy:
//! Equivalent`) share their resource name: built-in ones are stored under
//! `group/plural` (or, for the cohabiting Events, under one plural), a
//! custom resource under its CRD's group and plural (see
//! `ResourceTable::equivalents`), so the name of the request's resource
//! finds them too. Selectors, exclusions, operations, scopes and match
//! conditions are left to the matching of each candidate.

use crate::api::NamedRule;
use std::collections::HashMap;

/// Binding positions by the resource names their rules can match.
#[derive(Debug, Default)]
pub struct ResourceIndex {
    by_resource: HashMap<String, Vec<usize>, foldhash::fast::RandomState>,
    /// Bindings any resource may match, in order.
    always: Vec<usize>,
}

/// The resource names `rules` can match, or `None` when they can match any
/// resource (a `*` resource, or no rules at all).
pub fn resource_names(rules: &[NamedRule]) -> Option<Vec<String>> {
    if rules.is_empty() {
        return None;
    }
    let mut names = Vec::new();
    for rule in rules {
        for r in &rule.resources {
            let name = r.split('/').next().unwrap_or_default();
            if name == "*" {
                return None;
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
    }
    Some(names)
}

impl ResourceIndex {
    /// An index of bindings `0..`, each given the resource names it can
    /// match (`None`: any).
    pub fn new(names: impl IntoIterator<Item = Option<Vec<String>>>) -> ResourceIndex {
        let mut index = ResourceIndex::default();
        for (position, names) in names.into_iter().enumerate() {
            match names {
                None => index.always.push(position),
                Some(names) => {
                    for name in names {
                        index.by_resource.entry(name).or_default().push(position);
                    }
                }
            }
        }
        index
    }

    /// The bindings a request for `resource` can match, in binding order.
    pub fn candidates(&self, resource: &str) -> Vec<usize> {
        let named = self
            .by_resource
            .get(resource)
            .map(Vec::as_slice)
            .unwrap_or_default();
        // Both lists are in order: merge them.
        let mut out = Vec::with_capacity(named.len() + self.always.len());
        let (mut a, mut b) = (named.iter().peekable(), self.always.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x <= y => a.next(),
                (Some(_), Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            out.extend(next.copied());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(resources: &[&str]) -> NamedRule {
        NamedRule {
            resources: resources.iter().map(|r| r.to_string()).collect(),
            ..NamedRule::default()
        }
    }

    #[test]
    fn wildcards_and_empty_rules_name_every_resource() {
        assert_eq!(resource_names(&[]), None);
        assert_eq!(resource_names(&[rule(&["*"])]), None);
        assert_eq!(resource_names(&[rule(&["pods"]), rule(&["*/scale"])]), None);
        assert_eq!(resource_names(&[rule(&["*/*"])]), None);
        assert_eq!(
            resource_names(&[rule(&["pods", "pods/*", "deployments/scale"])]),
            Some(vec!["pods".to_string(), "deployments".to_string()])
        );
    }

    #[test]
    fn candidates_are_the_named_and_the_unnamed_in_order() {
        let index = ResourceIndex::new([
            Some(vec!["pods".into()]),
            None,
            Some(vec!["configmaps".into(), "pods".into()]),
            Some(vec!["secrets".into()]),
            None,
        ]);
        assert_eq!(index.candidates("pods"), [0, 1, 2, 4]);
        assert_eq!(index.candidates("configmaps"), [1, 2, 4]);
        assert_eq!(index.candidates("widgets"), [1, 4]);
        assert!(ResourceIndex::new([Some(vec!["pods".into()])])
            .candidates("secrets")
            .is_empty());
    }
}
