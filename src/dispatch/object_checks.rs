//! What the schema checks of earlier mutations showed of the current object.
//!
//! Upstream checks the whole object at every mutation: an apply
//! configuration first validates the live object against the schema, a JSON
//! patch's result is strictly decoded. Within one admission the object only
//! changes through those mutations, so once a check passed it need not run
//! again on the whole object: a merge of a valid object and a valid patch is
//! valid, and a JSON patch can only break what it wrote
//! ([`crate::schema::subtree`]). The messages stay upstream's: whenever a
//! shortcut cannot vouch for the object, the whole-object check runs.

use crate::mutation::apply_configuration::LiveObject;
use crate::mutation::json_patch::{changed_paths, PatchOperation};
use crate::schema::subtree::{self, WrittenSubtrees};
use crate::schema::{unknown_fields, TypeRef};
use serde_json::Value as Json;

/// Where an admission's object comes from, which decides what its checks
/// may take for granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectOrigin {
    /// Written by hand or read from a file: every check looks at all of it
    /// once, as upstream would after decoding it.
    Written,
    /// Sent by kube-apiserver to the webhook, encoded from the Go types of
    /// its kind (after conversion to the version asked for, and after any
    /// earlier webhook's patch, decoded into them again).
    KubeApiserver,
}

/// Facts about the current object of an admission, for one schema type.
#[derive(Clone, Default)]
pub(crate) struct ObjectChecks {
    /// The type the facts hold for; a different one knows nothing.
    ty: Option<TypeRef>,
    /// The object is as kube-apiserver sent it (see [`ObjectOrigin`]),
    /// which the first type targeted takes for facts.
    sent_by_apiserver: bool,
    /// The object passes SMD's typed validation (duplicates allowed).
    typed_valid: bool,
    /// The object has no field strict decoding rejects.
    strict_clean: bool,
    /// The object is as the kind's Go types encode it: a mutation's result
    /// needs the round trip only where the mutation wrote.
    go_encoded: bool,
    /// The object decodes into the kind's Go types: a JSON patch's result
    /// needs decoding only where the patch wrote.
    go_decodes: bool,
}

impl ObjectChecks {
    /// What is known of an object from `origin` before any check.
    pub(crate) fn of(origin: ObjectOrigin) -> Self {
        ObjectChecks {
            sent_by_apiserver: origin == ObjectOrigin::KubeApiserver,
            ..ObjectChecks::default()
        }
    }

    /// Forgets what was known unless it was known for `ty`.
    fn retarget(&mut self, ty: &TypeRef) {
        if self.ty.is_none() && self.sent_by_apiserver {
            // kube-apiserver encoded the object from the Go types of its
            // kind, the type its mutations are checked against: it decodes
            // into them, strictly, and their round trip changes nothing.
            // An object decoded into Go types also converts to SMD's typed
            // value, as upstream's apply configuration does with it; a
            // custom resource reaches admission before its schema's
            // validation, so its types are left to the check.
            *self = ObjectChecks {
                ty: Some(ty.clone()),
                go_encoded: true,
                go_decodes: true,
                strict_clean: true,
                typed_valid: crate::schema::go_typed(ty.name()),
                ..ObjectChecks::default()
            };
            return;
        }
        if !self.ty.as_ref().is_some_and(|t| t.same_as(ty)) {
            *self = ObjectChecks {
                ty: Some(ty.clone()),
                ..ObjectChecks::default()
            };
        }
    }

    /// How an apply configuration of type `ty` may treat the current object.
    pub(crate) fn live(&mut self, ty: &TypeRef) -> LiveObject {
        self.retarget(ty);
        if self.typed_valid {
            LiveObject::Valid
        } else {
            LiveObject::Unchecked
        }
    }

    /// An apply configuration succeeded, and its result went through the
    /// round trip: the new object passed the live validation (or was known
    /// to) and merged a validated patch.
    ///
    /// That makes it strict-clean too: SMD's typed validation rejects every
    /// field its type does not declare, the only fields strict decoding
    /// rejects (it accepts even more: `apiVersion` and `kind` at the root).
    pub(crate) fn applied(&mut self, ty: &TypeRef) {
        self.retarget(ty);
        self.typed_valid = true;
        self.strict_clean = true;
        // The unstructured converter checked what the merge wrote, not JSON
        // decoding; but the round trip made it as the Go types of its kind
        // encode it, which decodes into them, as upstream's next JSON patch
        // finds the typed result. The rest decodes if it did before.
        self.go_decodes = self.go_decodes && self.go_encoded && crate::schema::go_typed(ty.name());
    }

    /// Whether the object is as the Go types of `ty` encode it.
    pub(crate) fn go_encoded(&mut self, ty: &TypeRef) -> bool {
        self.retarget(ty);
        self.go_encoded
    }

    /// The whole object went through the Go round trip of `ty`.
    pub(crate) fn round_tripped(&mut self, ty: &TypeRef) {
        self.retarget(ty);
        self.go_encoded = true;
    }

    /// Whether the object is known to decode into the Go types of `ty`.
    pub(crate) fn go_decodes(&mut self, ty: &TypeRef) -> bool {
        self.retarget(ty);
        self.go_decodes
    }

    /// The object decoded into the Go types of `ty`.
    pub(crate) fn decoded(&mut self, ty: &TypeRef) {
        self.retarget(ty);
        self.go_decodes = true;
    }

    /// The fields of `patched`, the result of `ops` on the current object,
    /// that strict decoding rejects (in upstream's order). When none, the
    /// facts move to `patched`.
    pub(crate) fn strict_errors(
        &mut self,
        ty: &TypeRef,
        ops: &[PatchOperation],
        patched: &Json,
    ) -> Vec<String> {
        self.retarget(ty);
        // With the removals' parents: a removal from a list moves the items
        // that later roots would name by position.
        let dests = changed_paths(ops);
        // Found once for both checks, and only when a fact may carry over.
        let written = (self.strict_clean || self.typed_valid)
            .then(|| WrittenSubtrees::at(patched, ty, &subtree::written_roots(patched, dests)));
        let written = written.as_ref();
        let clean = self.strict_clean && written.is_some_and(WrittenSubtrees::strict_clean);
        if !clean {
            let unknown = unknown_fields(patched, ty);
            if !unknown.is_empty() {
                return unknown;
            }
        }
        self.strict_clean = true;
        // An object that decodes into its kind's Go types converts to SMD's
        // typed value, as kube-apiserver's own objects do (see `retarget`),
        // once the round trip that follows has made it as they encode it:
        // before any apply configuration reads it.
        self.typed_valid = (self.go_decodes && crate::schema::go_typed(ty.name()))
            || (self.typed_valid && written.is_some_and(WrittenSubtrees::typed_valid));
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> TypeRef {
        crate::schema::builtin_type("", "v1", "Pod")
    }

    /// An apply configuration and its round trip, as the dispatcher runs them.
    fn apply(checks: &mut ObjectChecks, ty: &TypeRef) {
        if !checks.go_encoded(ty) {
            checks.round_tripped(ty);
        }
        checks.applied(ty);
    }

    #[test]
    fn an_object_kube_apiserver_sent_still_decodes_after_an_apply_configuration() {
        let mut checks = ObjectChecks::of(ObjectOrigin::KubeApiserver);
        let ty = pod();
        assert!(matches!(checks.live(&ty), LiveObject::Valid));
        apply(&mut checks, &ty);
        assert!(checks.go_decodes(&ty));
    }

    #[test]
    fn a_written_object_decodes_after_an_apply_configuration_only_if_it_did_before() {
        let ty = pod();
        let mut checks = ObjectChecks::of(ObjectOrigin::Written);
        assert!(matches!(checks.live(&ty), LiveObject::Unchecked));
        // The round trip over what the merge did not write keeps whatever
        // did not decode there.
        apply(&mut checks, &ty);
        assert!(!checks.go_decodes(&ty));
        checks.decoded(&ty);
        apply(&mut checks, &ty);
        assert!(checks.go_decodes(&ty));
    }

    #[test]
    fn a_custom_resource_is_not_taken_as_typed() {
        let ty = crate::schema::deduced();
        let mut checks = ObjectChecks::of(ObjectOrigin::KubeApiserver);
        assert!(matches!(checks.live(&ty), LiveObject::Unchecked));
        apply(&mut checks, &ty);
        assert!(!checks.go_decodes(&ty));
    }
    #[test]
    fn a_json_patch_result_that_decodes_is_typed_for_a_kind_with_go_types() {
        // A null container is the zero container once decoded and encoded
        // again, though SMD refuses the null itself.
        let patched = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "spec": {"containers": [null]}});
        let ops = [PatchOperation {
            op: "add".into(),
            path: "/spec/containers/-".into(),
            from: None,
            value: Some(Json::Null),
        }];
        let ty = pod();
        let mut checks = ObjectChecks::of(ObjectOrigin::Written);
        checks.decoded(&ty);
        assert!(checks.strict_errors(&ty, &ops, &patched).is_empty());
        assert!(matches!(checks.live(&ty), LiveObject::Valid));
        // Not known to decode: the written list is checked, and fails.
        let mut checks = ObjectChecks::of(ObjectOrigin::KubeApiserver);
        checks.live(&ty);
        checks.go_decodes = false;
        assert!(checks.strict_errors(&ty, &ops, &patched).is_empty());
        assert!(matches!(checks.live(&ty), LiveObject::Unchecked));
    }
    #[test]
    fn a_removal_that_moves_items_covers_what_an_earlier_operation_wrote_in_them() {
        let op = |op: &str, path: &str, value: Option<Json>| PatchOperation {
            op: op.into(),
            path: path.into(),
            from: None,
            value,
        };
        let ops = [
            op("add", "/spec/containers/1/imagez", Some(Json::from("x"))),
            op("remove", "/spec/containers/0", None),
        ];
        let object = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}});
        let patched = crate::mutation::json_patch::apply_patch(&object, &ops).unwrap();
        // `imagez` is now in item 0, which the add named as item 1; item 1
        // is now `c`. The removal's parent, the list, covers both.
        let ty = pod();
        let mut checks = ObjectChecks::of(ObjectOrigin::KubeApiserver);
        assert_eq!(
            checks.strict_errors(&ty, &ops, &patched),
            ["spec.containers[0].imagez"]
        );
    }
}
