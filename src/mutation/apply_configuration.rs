//! ApplyConfiguration mutations: a structured-merge-diff merge of the
//! applied configuration into the object, as kube-apiserver's
//! MutatingAdmissionPolicy plugin does it
//! (k8s.io/apiserver `admission/plugin/policy/mutating/patch/smd.go`
//! `ApplyStructuredMergeDiff`, `validatePatch`, `findAtomics`, and
//! sigs.k8s.io/structured-merge-diff/v6 `typed.TypedValue.Merge`).

use std::cell::RefCell;
use std::collections::VecDeque;

use serde_json::{Map, Value};
use thiserror::Error;

use crate::schema::model::{Atom, ListView, MapView, Relationship, Resolved, SchemaData, TypeSpec};
use crate::schema::typed::{
    self, error, extend_under_field, invalid_atom, item_key, too_deep, validate_scalar, ItemKey,
    KeyMap, MAX_DEPTH,
};
use crate::schema::{TypeRef, ValidationError, ValidationErrors};

/// Why an applied configuration could not be merged. The texts are
/// upstream's; the caller (the patcher) prefixes them with
/// `error applying patch: ` as upstream `applyConfigPatcher.Patch` does.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ApplyError {
    /// The applied configuration does not conform to the schema.
    #[error("failed to convert patch object to typed object: {0}")]
    ConvertPatch(ValidationErrors),
    /// The applied configuration sets atomic lists, maps or structs (paths).
    #[error(
        "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {}",
        .0.join(", ")
    )]
    AtomicMutation(Vec<String>),
    /// The object does not conform to the schema.
    #[error("failed to convert original object to typed object: {0}")]
    ConvertOriginal(ValidationErrors),
    /// The merge failed.
    #[error("failed to merge patch: {0}")]
    Merge(ValidationErrors),
    /// The merge result is not an object (Go type name of the result).
    #[error("failed to convert typed object to object: failed to convert value to unstructured for type {0}")]
    ToObject(String),
}

/// Merges the applied configuration `patch` into the object `live` of type
/// `ty` and returns the new object.
///
/// Like upstream `applyConfigPatcher.Patch`, the patch's `apiVersion` and
/// `kind` are first replaced by the object's (whatever the expression set;
/// removed when the object has none), so the GVK check of
/// `ApplyStructuredMergeDiff` always passes. Then, in upstream's order: the
/// patch is validated against the schema (unknown fields, wrong types,
/// duplicate list-map keys), any atomic list, map or struct it contains is
/// rejected, the object is validated (duplicates allowed), and the two are
/// merged: applied scalars win, granular maps and structs merge key by key,
/// `listType=map`/`set` lists merge by key (the object's items keep their
/// order; a new item lands after the object's items that precede the next
/// item both sides share, i.e. at the end when none follows), atomic values
/// are replaced, and a `null`
/// in the patch sets the field to `null` unless it names a non-empty granular
/// map or associative list (which are kept). Keys keep the object's order,
/// new keys are appended.
pub fn apply_configuration(live: &Value, patch: &Value, ty: &TypeRef) -> Result<Value, ApplyError> {
    apply_configuration_to(live, LiveObject::Unchecked, patch, ty)
}

/// What the caller knows of the object an apply configuration merges into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveObject {
    /// Nothing: it is validated against the schema first, as upstream does.
    Unchecked,
    /// It already passed that validation (it is the unchanged result of an
    /// earlier check or merge), so validating it again cannot fail.
    Valid,
}

/// What the caller knows of an applied configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchChecks {
    /// Nothing: it is validated against the schema and searched for atomic
    /// values, as upstream does.
    Unchecked,
    /// The same configuration passed both checks for the same type before
    /// (a constant expression's value, or a result reused in the
    /// reinvocation pass), so they cannot fail. They run anyway when the
    /// object's `apiVersion` or `kind`, which the configuration takes on, is
    /// not a string.
    Passed,
}

/// [`apply_configuration`], skipping the validation of `live` when it is
/// known to pass ([`LiveObject::Valid`]).
pub fn apply_configuration_to(
    live: &Value,
    known: LiveObject,
    patch: &Value,
    ty: &TypeRef,
) -> Result<Value, ApplyError> {
    let mut merged = live.clone();
    merge_in_place(
        &mut merged,
        known,
        &mut patch.clone(),
        PatchChecks::Unchecked,
        ty,
        MergeTold::default(),
        Nulls::Json,
    )?;
    Ok(merged)
}

/// What a `null` in an applied configuration is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nulls {
    /// JSON's: the field is set to null (an unstructured configuration).
    Json,
    /// protobuf's `structpb.NullValue`, which cel-go makes of a CEL `null`:
    /// SMD's conversion of the patch refuses it wherever a type is known
    /// (`typed::validate_apply_patch`).
    Cel,
}

/// [`apply_configuration_to`] on the object itself: `live` becomes the
/// merged object, and the answer says whether it changed. On an error
/// `live` is untouched: every error is found before anything is written.
/// The patch checks are skipped when `known_patch` says they passed.
/// `before_write`, if given, is called with `live`, still as it was, right
/// before the merge writes to it; never when the merge changes nothing.
///
/// Only the subtrees the patch reaches are rebuilt; the rest of the object is
/// neither copied nor compared, which is what makes a small patch on a large
/// object cheap. The patch is completed in place with the object's
/// `apiVersion` and `kind` before it is checked (rather than copied), and
/// left so: the caller reads what it wrote from it.
///
/// The configuration is a mutation's, evaluated by CEL: its nulls are
/// protobuf's (see [`Nulls::Cel`]).
pub fn apply_configuration_in_place(
    live: &mut Value,
    known: LiveObject,
    patch: &mut Value,
    known_patch: PatchChecks,
    ty: &TypeRef,
    told: MergeTold<'_>,
) -> Result<bool, ApplyError> {
    merge_in_place(live, known, patch, known_patch, ty, told, Nulls::Cel)
}

/// What the caller of [`apply_configuration_in_place`] is told of the merge.
#[derive(Default)]
pub struct MergeTold<'a> {
    /// Called with the object right before the merge first writes to it
    /// (the merge then first finds whether it changes anything).
    pub before_write: Option<&'a mut dyn FnMut(&Value)>,
    /// Filled with where the items of the patch's associative lists landed.
    pub positions: Option<&'a mut MergedPositions>,
}

/// Where the items of an applied configuration's map lists (associative
/// lists with key fields, such as a Pod's containers) landed in the merged
/// object, as the merge placed them: attribution names an item by its
/// merged index without finding it again by its key, nor the list's type.
///
/// A list is known by the address of its items in the patch, so the
/// positions hold while the patch is neither changed nor dropped.
#[derive(Clone, Debug, Default)]
pub struct MergedPositions {
    lists: Vec<PlacedList>,
}

/// One map list of the patch, as the merge placed it.
#[derive(Clone, Debug)]
struct PlacedList {
    /// The address of the patch's items.
    address: usize,
    /// The merged index of each item (`None`: the merge left it out).
    landed: Vec<Option<usize>>,
    /// The list's key fields.
    keys: Vec<String>,
}

impl MergedPositions {
    /// For each of `items` (a map list of the merged patch), its index in
    /// the merged list (`None` for an item the merge left out), and the
    /// list's key fields; `None` for any other list (atomic, a set, or one
    /// the merge did not place item by item).
    pub fn of(&self, items: &[Value]) -> Option<(&[Option<usize>], &[String])> {
        let address = items.as_ptr() as usize;
        self.lists
            .iter()
            .find(|l| l.address == address && l.landed.len() == items.len())
            .map(|l| (l.landed.as_slice(), l.keys.as_slice()))
    }

    fn record(&mut self, items: &[Value], landed: Vec<Option<usize>>, keys: &[String]) {
        // Every empty list has the same (dangling) address.
        if !items.is_empty() {
            self.lists.push(PlacedList {
                address: items.as_ptr() as usize,
                landed,
                keys: keys.to_vec(),
            });
        }
    }
}

fn merge_in_place(
    live: &mut Value,
    known: LiveObject,
    patch: &mut Value,
    known_patch: PatchChecks,
    ty: &TypeRef,
    told: MergeTold<'_>,
    nulls: Nulls,
) -> Result<bool, ApplyError> {
    let schema: &SchemaData = &ty.schema;
    // Checks passed before (`known_patch`) had strings, or nothing, in the
    // two fields the patch takes on from the object.
    let mut taken_are_strings = true;
    if let Value::Object(p) = patch {
        for field in ["apiVersion", "kind"] {
            match live.get(field) {
                Some(v) => {
                    taken_are_strings &= v.is_string();
                    p.insert(field.to_string(), v.clone());
                }
                None => {
                    p.remove(field);
                }
            }
        }
    }

    if known_patch == PatchChecks::Unchecked || !taken_are_strings {
        let (errs, met_atomic) = match nulls {
            Nulls::Json => typed::validate_noting_atomics(schema, &ty.spec, patch, false),
            Nulls::Cel => typed::validate_apply_patch(schema, &ty.spec, patch),
        };
        if !errs.is_empty() {
            return Err(ApplyError::ConvertPatch(ValidationErrors(errs)));
        }

        // The valid patch was walked whole: the search (which renders the
        // paths) has something to find only if the walk met an atomic.
        if met_atomic {
            let mut atomics = Vec::new();
            find_atomics(schema, &ty.spec, patch, &mut Vec::new(), &mut atomics, 0);
            if !atomics.is_empty() {
                return Err(ApplyError::AtomicMutation(atomics));
            }
        }
    }

    if known == LiveObject::Unchecked {
        let errs = typed::validate(schema, &ty.spec, live, true);
        if !errs.is_empty() {
            return Err(ApplyError::ConvertOriginal(ValidationErrors(errs)));
        }
    }

    let MergeTold {
        before_write,
        positions,
    } = told;
    let merger = Merger {
        schema,
        positions: positions
            .is_some()
            .then(|| RefCell::new(MergedPositions::default())),
    };
    let (change, errs) = merger.plan(&ty.spec, live, patch, 0);
    if !errs.is_empty() {
        return Err(ApplyError::Merge(ValidationErrors(errs)));
    }
    if let (Some(recorded), Some(out)) = (merger.positions, positions) {
        *out = recorded.into_inner();
    }
    match change {
        Change::Set(v) if !v.is_object() => Err(ApplyError::ToObject(
            crate::gofmt::type_name(&v).to_string(),
        )),
        Change::Remove => Err(ApplyError::ToObject("<nil>".to_string())),
        Change::Items(_) => Err(ApplyError::ToObject(
            crate::gofmt::type_name(live).to_string(),
        )),
        change => {
            // Found before writing only for a caller that is told.
            if let Some(before_write) = before_write {
                if !change.changes(live) {
                    return Ok(false);
                }
                before_write(live);
            }
            Ok(change.apply(live))
        }
    }
}

/// What a merge does to one subtree of the object, found before anything is
/// written so that a failing merge leaves the object as it was.
#[derive(Debug)]
enum Change<'p> {
    /// The subtree becomes this value.
    Set(Value),
    /// The subtree goes (the merge of a map left nothing in it).
    Remove,
    /// A granular map whose listed fields change, in the patch's key
    /// order; the other fields stay as they are.
    Fields(Vec<(&'p str, Change<'p>)>),
    /// An associative list rebuilt from these items, in this order; the
    /// object's items that are not listed are dropped.
    Items(Vec<ItemChange<'p>>),
}

/// One item of a merged associative list ([`Change::Items`]).
#[derive(Debug)]
enum ItemChange<'p> {
    /// The object's item at this index, as it is.
    Keep(usize),
    /// The object's item at this index, changed.
    Change(usize, Change<'p>),
    /// A new item.
    New(Value),
}

impl Change<'_> {
    /// Whether [`Change::apply`] would change `target`'s value: the same
    /// comparisons, without writing.
    fn changes(&self, target: &Value) -> bool {
        match self {
            Change::Set(v) => target != v,
            Change::Remove => false,
            Change::Fields(fields) => {
                let Value::Object(map) = target else {
                    return false;
                };
                fields
                    .iter()
                    .any(|(key, change)| match (change, map.get(*key)) {
                        (Change::Remove, field) => field.is_some(),
                        (change, Some(field)) => change.changes(field),
                        (Change::Set(_), None) => true,
                        (Change::Fields(_) | Change::Items(_), None) => false,
                    })
            }
            Change::Items(items) => {
                let Value::Array(list) = target else {
                    return false;
                };
                let mut taken = vec![false; list.len()];
                let mut next = 0;
                for item in items {
                    let (index, change) = match item {
                        ItemChange::New(_) => return true,
                        ItemChange::Keep(index) => (*index, None),
                        ItemChange::Change(index, change) => (*index, Some(change)),
                    };
                    if taken.get(index).is_none_or(|t| *t) {
                        continue;
                    }
                    taken[index] = true;
                    if index != next || change.is_some_and(|c| c.changes(&list[index])) {
                        return true;
                    }
                    next = index + 1;
                }
                // Items of the object left out.
                taken.contains(&false)
            }
        }
    }

    /// Writes the change into `target`; whether its value changed.
    fn apply(self, target: &mut Value) -> bool {
        match self {
            Change::Set(v) => {
                if *target == v {
                    false
                } else {
                    *target = v;
                    true
                }
            }
            // Only planned below a map, where the map removes the key.
            Change::Remove => false,
            Change::Fields(fields) => {
                let Value::Object(map) = target else {
                    // Planned only for a map.
                    return false;
                };
                let mut changed = false;
                for (key, change) in fields {
                    match (change, map.get_mut(key)) {
                        (Change::Remove, Some(_)) => {
                            map.remove(key);
                            changed = true;
                        }
                        (Change::Remove, None) => {}
                        (change, Some(field)) => changed |= change.apply(field),
                        (Change::Set(v), None) => {
                            map.insert(key.to_string(), v);
                            changed = true;
                        }
                        (Change::Fields(_) | Change::Items(_), None) => {}
                    }
                }
                changed
            }
            Change::Items(items) => {
                let Value::Array(list) = target else {
                    // Planned only for a list.
                    return false;
                };
                let mut old: Vec<Option<Value>> =
                    std::mem::take(list).into_iter().map(Some).collect();
                // Taken with its buffer: room for the merged list at once.
                list.reserve_exact(items.len());
                let mut changed = false;
                let mut next = 0;
                for item in items {
                    let (index, change) = match item {
                        ItemChange::New(v) => {
                            list.push(v);
                            changed = true;
                            continue;
                        }
                        ItemChange::Keep(index) => (index, None),
                        ItemChange::Change(index, change) => (index, Some(change)),
                    };
                    let Some(mut v) = old.get_mut(index).and_then(Option::take) else {
                        continue;
                    };
                    changed |= index != next;
                    next = index + 1;
                    if let Some(change) = change {
                        changed |= change.apply(&mut v);
                    }
                    list.push(v);
                }
                // Items of the object left out.
                changed || old.iter().any(Option::is_some)
            }
        }
    }
}

/// One step of a path into the patch, rendered only for an atomic found.
enum Step<'v> {
    Field(&'v str),
    Item(usize),
}

/// `path` as findAtomics writes it: `.field` and `[index]` steps.
fn render_steps(path: &[Step]) -> String {
    let mut s = String::new();
    for step in path {
        match step {
            Step::Field(key) => {
                s.push('.');
                s.push_str(key);
            }
            Step::Item(i) => {
                s.push('[');
                s.push_str(itoa::Buffer::new().format(*i));
                s.push(']');
            }
        }
    }
    s
}

/// Upstream `findAtomics`: paths of the atomic lists, maps and structs in
/// the patch. Only declared fields are descended into (not map elements);
/// an atomic value's contents are still searched.
fn find_atomics<'v>(
    schema: &SchemaData,
    spec: &TypeSpec,
    v: &'v Value,
    path: &mut Vec<Step<'v>>,
    out: &mut Vec<String>,
    depth: usize,
) {
    // Only maps and lists can be atomic or hold what is: leaves need no type.
    if depth > MAX_DEPTH || !matches!(v, Value::Object(_) | Value::Array(_)) {
        return;
    }
    let Some(atom) = schema.resolve(spec) else {
        return;
    };
    if let (Value::Object(m), Some(map)) = (v, &atom.map) {
        if map.relationship == Some(Relationship::Atomic) {
            out.push(render_steps(path));
        }
        for (key, val) in m {
            if let Some(field) = map.def.field(key) {
                path.push(Step::Field(key));
                find_atomics(schema, &field.ty, val, path, out, depth + 1);
                path.pop();
            }
        }
    }
    if let (Value::Array(items), Some(list)) = (v, &atom.list) {
        if list.relationship == Some(Relationship::Atomic) {
            out.push(render_steps(path));
        }
        for (i, item) in items.iter().enumerate() {
            path.push(Step::Item(i));
            find_atomics(schema, &list.def.element, item, path, out, depth + 1);
            path.pop();
        }
    }
}

/// A merge result: the merged value (`None`: nothing to keep) and errors.
type Merged = (Option<Value>, Vec<ValidationError>);

static NULL: Value = Value::Null;

/// SMD `mergingWalker` with the `ruleKeepRHS` rule (`TypedValue.Merge`):
/// lhs is the object, rhs the applied configuration.
struct Merger<'a> {
    schema: &'a SchemaData,
    /// Where the patch's list items land, when the caller asks.
    positions: Option<RefCell<MergedPositions>>,
}

impl<'a> Merger<'a> {
    /// The change [`Merger::merge`] of `lhs` and `rhs` makes to `lhs`, with
    /// its errors (in `merge`'s order). Granular maps present on both sides
    /// are walked key by key so that fields the patch does not name are
    /// left out of the change; anything else is merged as `merge` does it.
    fn plan<'p>(
        &self,
        spec: &TypeSpec,
        lhs: &Value,
        rhs: &'p Value,
        depth: usize,
    ) -> (Change<'p>, Vec<ValidationError>) {
        // Below MAX_DEPTH, so that the items kept untouched are not ones
        // `merge` would refuse as too deep.
        if depth < MAX_DEPTH {
            if let Some(atom) = self.schema.resolve(spec) {
                let arhs = atom.deduce(Some(rhs));
                let granular = |r: Option<Relationship>| r != Some(Relationship::Atomic);
                let same = || atom.deduce(Some(lhs)).same_members(&arhs);
                match (lhs, rhs, &arhs.map, arhs.scalar, &arhs.list) {
                    // An empty map or list merges through `leaf`.
                    (Value::Object(lmap), Value::Object(rmap), Some(map), _, _)
                        if !lmap.is_empty() && granular(map.relationship) && same() =>
                    {
                        return self.plan_map(map, lmap, rmap, depth);
                    }
                    (Value::Array(llist), Value::Array(rlist), None, None, Some(list))
                        if !llist.is_empty() && granular(list.relationship) && same() =>
                    {
                        return self.plan_list(list, llist, rlist, depth);
                    }
                    _ => {}
                }
            }
        }
        let (merged, errs) = self.merge(spec, Some(lhs), Some(rhs), depth);
        (merged.map_or(Change::Remove, Change::Set), errs)
    }

    /// Where the items of `rhs` (of `list`) land, to be filled when the
    /// caller asks and the list has key fields.
    fn landing(&self, list: &ListView, rhs: &[Value]) -> Option<Vec<Option<usize>>> {
        let keyed = !list.def.keys.is_empty();
        self.positions
            .as_ref()
            .filter(|_| keyed)
            .map(|_| vec![None; rhs.len()])
    }

    /// Keeps where the items of `rhs` (of `list`) landed.
    fn record(&self, list: &ListView, rhs: &[Value], landed: Option<Vec<Option<usize>>>) {
        if let (Some(positions), Some(landed)) = (&self.positions, landed) {
            positions.borrow_mut().record(rhs, landed, &list.def.keys);
        }
    }

    /// [`Merger::merge_map`] as a change to the non-empty `lmap`.
    fn plan_map<'p>(
        &self,
        map: &MapView,
        lmap: &Map<String, Value>,
        rmap: &'p Map<String, Value>,
        depth: usize,
    ) -> (Change<'p>, Vec<ValidationError>) {
        let mut fields = Vec::with_capacity(rmap.len());
        let mut errs = Vec::new();
        // How many keys the merged map has: `merge_map` drops an empty one.
        let mut kept = lmap.len();
        let fallback = TypeSpec::Inline(Atom::default());
        // The patch's keys, usually far fewer than the object's, in the
        // patch's order (upstream walks Go maps, in no set order).
        for (key, r) in rmap {
            let ty = field_spec(map, key, &fallback);
            if let Some(l) = lmap.get(key) {
                let (change, e) = self.plan(ty, l, r, depth + 1);
                extend_under_field(&mut errs, e, key);
                if matches!(change, Change::Remove) {
                    kept -= 1;
                }
                fields.push((key.as_str(), change));
            } else {
                let (v, e) = self.merge(ty, None, Some(r), depth + 1);
                extend_under_field(&mut errs, e, key);
                if let Some(v) = v {
                    kept += 1;
                    fields.push((key.as_str(), Change::Set(v)));
                }
            }
        }
        if kept == 0 {
            (Change::Remove, errs)
        } else {
            (Change::Fields(fields), errs)
        }
    }

    fn merge(
        &self,
        spec: &TypeSpec,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        depth: usize,
    ) -> Merged {
        if lhs.is_none() && rhs.is_none() {
            return (
                None,
                vec![error("at least one of lhs and rhs must be provided")],
            );
        }
        if depth > MAX_DEPTH {
            return (None, vec![too_deep()]);
        }
        if rhs.is_none() {
            // A subtree the patch does not touch is kept as it is: the live
            // object was validated as a whole before the merge.
            return (lhs.cloned(), Vec::new());
        }
        let Some(atom) = self.schema.resolve(spec) else {
            return (
                None,
                vec![error(format!(
                    "schema error: no type found matching: {}",
                    spec.display_name()
                ))],
            );
        };
        let alhs = atom.deduce(lhs);
        let arhs = atom.deduce(rhs);
        if rhs.is_none() {
            self.handle(&alhs, spec, lhs, rhs, depth)
        } else if lhs.is_none() || alhs.same_members(&arhs) {
            self.handle(&arhs, spec, lhs, rhs, depth)
        } else {
            // The value changes kind (possible in untyped/deduced types):
            // walk it as the old kind (errors only), then as the new one.
            let (_, mut errs) = self.handle(&alhs, spec, lhs, rhs, depth);
            let (out, more) = self.handle(&arhs, spec, lhs, rhs, depth);
            errs.extend(more);
            (out, errs)
        }
    }

    /// SMD `handleAtom`.
    fn handle(
        &self,
        atom: &Resolved,
        spec: &TypeSpec,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        depth: usize,
    ) -> Merged {
        if let Some(map) = &atom.map {
            return self.merge_map(map, lhs, rhs, depth);
        }
        if let Some(t) = atom.scalar {
            let lerr = validate_scalar(t, lhs, "lhs: ");
            let rerr = validate_scalar(t, rhs, "rhs: ");
            if let (Some(l), Some(r)) = (lerr, rerr) {
                return (None, vec![l, r]);
            }
            return leaf(lhs, rhs);
        }
        if let Some(list) = &atom.list {
            return self.merge_list(list, lhs, rhs, depth);
        }
        (None, vec![invalid_atom(spec)])
    }

    /// [`Merger::merge_list_items`] as a change to the non-empty `lhs`.
    fn plan_list<'p>(
        &self,
        list: &ListView,
        lhs: &[Value],
        rhs: &'p [Value],
        depth: usize,
    ) -> (Change<'p>, Vec<ValidationError>) {
        let pairs = match self.list_pairs(list, lhs, rhs) {
            Ok(pairs) => pairs,
            Err(errs) => return (Change::Remove, errs),
        };
        let mut items = Vec::with_capacity(pairs.len());
        let mut landed = self.landing(list, rhs);
        // As in `merge_list_items`, the errors of item merges are dropped and
        // an item whose merge gives nothing is left out.
        for (l, r) in pairs {
            let placed = items.len();
            let (rhs_index, r) = (r.and_then(|(i, _)| i), r.map(|(_, v)| v));
            match (l, r) {
                (Some((Some(index), _)), None) => items.push(ItemChange::Keep(index)),
                (Some((Some(index), l)), Some(r)) => {
                    match self.plan(&list.def.element, l, r, depth + 1).0 {
                        Change::Remove => {}
                        change => items.push(ItemChange::Change(index, change)),
                    }
                }
                (l, r) => {
                    let l = l.map(|(_, v)| v);
                    if let (Some(v), _) = self.merge(&list.def.element, l, r, depth + 1) {
                        items.push(ItemChange::New(v));
                    }
                }
            }
            land(&mut landed, rhs_index, placed, items.len());
        }
        self.record(list, rhs, landed);
        if items.is_empty() {
            (Change::Remove, Vec::new())
        } else {
            (Change::Items(items), Vec::new())
        }
    }

    /// SMD `doMap`/`visitMapItems`.
    fn merge_map(
        &self,
        map: &MapView,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        depth: usize,
    ) -> Merged {
        let lmap = lhs.and_then(Value::as_object);
        let rmap = rhs.and_then(Value::as_object);
        let empty = |m: Option<&Map<String, Value>>| m.is_none_or(Map::is_empty);
        if map.relationship == Some(Relationship::Atomic) || (empty(lmap) && empty(rmap)) {
            return leaf(lhs, rhs);
        }
        let mut out = Map::new();
        let mut errs = Vec::new();
        let fallback = TypeSpec::Inline(Atom::default());
        let mut item = |key: &String, l: Option<&Value>, r: Option<&Value>| {
            let (v, e) = self.merge(field_spec(map, key, &fallback), l, r, depth + 1);
            extend_under_field(&mut errs, e, key);
            if let Some(v) = v {
                out.insert(key.clone(), v);
            }
        };
        if let Some(lmap) = lmap {
            for (key, l) in lmap {
                item(key, Some(l), rmap.and_then(|r| r.get(key)));
            }
        }
        if let Some(rmap) = rmap {
            for (key, r) in rmap {
                if lmap.is_none_or(|l| !l.contains_key(key)) {
                    item(key, None, Some(r));
                }
            }
        }
        if out.is_empty() {
            (None, errs)
        } else {
            (Some(Value::Object(out)), errs)
        }
    }

    /// SMD `doList`.
    fn merge_list(
        &self,
        list: &ListView,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        depth: usize,
    ) -> Merged {
        let llist = lhs.and_then(Value::as_array);
        let rlist = rhs.and_then(Value::as_array);
        let empty = |l: Option<&Vec<Value>>| l.is_none_or(Vec::is_empty);
        if list.relationship == Some(Relationship::Atomic) || (empty(llist) && empty(rlist)) {
            return leaf(lhs, rhs);
        }
        let lhs_items = llist.map(Vec::as_slice).unwrap_or(&[]);
        let rhs_items = rlist.map(Vec::as_slice).unwrap_or(&[]);
        self.merge_list_items(list, lhs_items, rhs_items, depth)
    }

    /// The keys of `items` (SMD `listItemToPathElement`), in order; an
    /// item whose key is invalid has its error instead.
    fn keys<'v>(&self, list: &'v ListView, items: &'v [Value]) -> Vec<Result<ItemKey<'v>, String>>
    where
        'a: 'v,
    {
        items
            .iter()
            .map(|child| item_key(self.schema, list, child))
            .collect()
    }

    /// SMD `indexListPathElements`: the keys of the items in order, and the
    /// item (with its index) for each distinct key (duplicated lhs items map
    /// to `null`, without an index). Items whose key is invalid, and
    /// duplicates unless allowed, are errors.
    fn index<'k, 'q, 'v>(
        keys: &'k [Result<ItemKey<'q>, String>],
        items: &'v [Value],
        allow_duplicates: bool,
        errs: &mut Vec<ValidationError>,
    ) -> ItemIndex<'k, 'q, 'v> {
        let mut ids = Vec::with_capacity(items.len());
        let mut observed = KeyMap::for_items(items.len());
        for (i, (key, child)) in keys.iter().zip(items).enumerate() {
            let key = match key {
                Ok(key) => key,
                Err(e) => {
                    errs.push(error(format!("element {i}: {e}")));
                    continue;
                }
            };
            if let Some(seen) = observed.get_mut(&key) {
                if !allow_duplicates {
                    let pe = key.to_path_element().render();
                    errs.push(error(format!("duplicate entries for key {pe}")));
                    continue;
                }
                // Duplicated items are not merged with the new value.
                *seen = (None, &NULL);
            } else {
                observed.insert_new(key, (Some(i), child));
            }
            ids.push(key);
        }
        (ids, observed)
    }

    /// SMD `visitListItems`: merges associative lists item by item. Items
    /// of the object keep their order; an applied item not in the object is
    /// placed after the object's items that precede the next shared item.
    fn merge_list_items(
        &self,
        list: &ListView,
        lhs: &[Value],
        rhs: &[Value],
        depth: usize,
    ) -> Merged {
        let pairs = match self.list_pairs(list, lhs, rhs) {
            Ok(pairs) => pairs,
            Err(errs) => return (None, errs),
        };
        // Upstream drops the errors of item merges (the inner `errs` shadows
        // the outer one); an item whose merge fails is left out.
        let mut out = Vec::with_capacity(pairs.len());
        let mut landed = self.landing(list, rhs);
        for (l, r) in pairs {
            let placed = out.len();
            let (l, rhs_index, r) = (l.map(|(_, v)| v), r.and_then(|(i, _)| i), r.map(|(_, v)| v));
            if let Some(v) = self.merge(&list.def.element, l, r, depth + 1).0 {
                out.push(v);
            }
            land(&mut landed, rhs_index, placed, out.len());
        }
        self.record(list, rhs, landed);
        if out.is_empty() {
            (None, Vec::new())
        } else {
            (Some(Value::Array(out)), Vec::new())
        }
    }

    /// The walk of SMD `visitListItems`: the (object item, applied item)
    /// pairs whose merges make the merged list, in its order, or the errors
    /// of indexing the two lists.
    fn list_pairs<'l, 'r>(
        &self,
        list: &ListView,
        lhs: &'l [Value],
        rhs: &'r [Value],
    ) -> Result<Vec<ItemPair<'l, 'r>>, Vec<ValidationError>> {
        let mut errs = Vec::new();
        let (rhs_keys, lhs_keys) = (self.keys(list, rhs), self.keys(list, lhs));
        let (rhs_ids, observed_rhs) = Self::index(&rhs_keys, rhs, false, &mut errs);
        let (lhs_ids, observed_lhs) = Self::index(&lhs_keys, lhs, true, &mut errs);
        if !errs.is_empty() {
            return Err(errs);
        }

        let mut shared_order: VecDeque<&ItemKey> = rhs_ids
            .iter()
            .filter(|id| observed_lhs.contains_key(id))
            .copied()
            .collect();
        let mut next_shared = shared_order.pop_front();
        // By the applied item's index.
        let mut merged_rhs = vec![false; rhs_ids.len()];
        let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
        let mut push = |l: Option<ListItem<'l>>, r: Option<ListItem<'r>>| out.push((l, r));

        let (llen, rlen) = (lhs_ids.len(), rhs_ids.len());
        let (mut li, mut ri) = (0, 0);
        let mut guard = 2 * (llen + rlen) + 2;
        while li < llen || ri < rlen {
            if guard == 0 {
                break;
            }
            guard -= 1;
            if li < llen && ri < rlen {
                let id = lhs_ids[li];
                if id == rhs_ids[ri] {
                    merged_rhs[ri] = true;
                    push(
                        observed_lhs.get(&id).copied(),
                        observed_rhs.get(&id).copied(),
                    );
                    li += 1;
                    ri += 1;
                    next_shared = shared_order.pop_front();
                    continue;
                }
                if observed_rhs.contains_key(&id) && next_shared.is_some_and(|n| n != id) {
                    // A shared item, but not the one to place now.
                    li += 1;
                    continue;
                }
            }
            if li < llen {
                let id = lhs_ids[li];
                if !observed_rhs.contains_key(&id) {
                    push(Some((Some(li), &lhs[li])), None);
                    li += 1;
                    continue;
                } else if let Some((Some(r), _)) = observed_rhs.get(&id) {
                    if merged_rhs[*r] {
                        li += 1;
                    }
                }
            }
            if ri < rlen {
                let id = rhs_ids[ri];
                merged_rhs[ri] = true;
                push(
                    observed_lhs.get(&id).copied(),
                    observed_rhs.get(&id).copied(),
                );
                ri += 1;
                if next_shared == Some(id) {
                    next_shared = shared_order.pop_front();
                }
            }
        }

        Ok(out)
    }
}

/// The keys of a list's items in order, and the item each distinct key names.
type ItemIndex<'k, 'q, 'v> = (Vec<&'k ItemKey<'q>>, KeyMap<&'k ItemKey<'q>, ListItem<'v>>);

/// An item of a list and its index (none for the stand-in of duplicates).
type ListItem<'v> = (Option<usize>, &'v Value);

/// An object item and an applied item merged into one item of a list.
type ItemPair<'l, 'r> = (Option<ListItem<'l>>, Option<ListItem<'r>>);

/// Notes in `landed` that the applied item `rhs_index` landed at `placed`
/// when the merge added an item there (`now` items after it).
fn land(
    landed: &mut Option<Vec<Option<usize>>>,
    rhs_index: Option<usize>,
    placed: usize,
    now: usize,
) {
    if let (Some(landed), Some(i), true) = (landed, rhs_index, now > placed) {
        if let Some(slot) = landed.get_mut(i) {
            *slot = Some(placed);
        }
    }
}

/// The type of a map's field `key`: its declared field, else the map's
/// element type, else `fallback` (an untyped value).
fn field_spec<'m>(map: &'m MapView, key: &str, fallback: &'m TypeSpec) -> &'m TypeSpec {
    match map.def.field(key) {
        Some(f) => &f.ty,
        None => map.def.element.as_ref().unwrap_or(fallback),
    }
}

/// SMD `doLeaf` with `ruleKeepRHS`: the applied value, else the object's.
fn leaf(lhs: Option<&Value>, rhs: Option<&Value>) -> Merged {
    (rhs.or(lhs).cloned(), Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{deduced, test_type, SchemaStore};
    use serde_json::json;

    fn kind(group: &str, version: &str, kind: &str) -> TypeRef {
        SchemaStore::builtin()
            .lookup(group, version, kind)
            .unwrap_or_else(|| panic!("no schema for {group}/{version} {kind}"))
    }

    fn deployment(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d1"}, "spec": spec})
    }

    fn apply_err(live: &Value, patch: &Value, ty: &TypeRef) -> String {
        match apply_configuration(live, patch, ty) {
            Ok(v) => panic!("expected an error, got {v}"),
            Err(e) => e.to_string(),
        }
    }

    // kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/
    // policy/mutating/patch/smd_test.go TestApplyConfiguration.
    #[test]
    fn upstream_add_to_list_type_map() {
        let live = deployment(json!({"template": {"spec": {"volumes": [{"name": "x"}]}}}));
        let patch = json!({"spec": {"template": {"spec": {"volumes": [{"name": "y"}]}}}});
        let got = apply_configuration(&live, &patch, &kind("apps", "v1", "Deployment")).unwrap();
        assert_eq!(
            got,
            deployment(json!({"template": {"spec": {"volumes": [{"name": "x"}, {"name": "y"}]}}}))
        );
    }

    #[test]
    fn upstream_update_list_type_map_entry() {
        let live =
            deployment(json!({"template": {"spec": {"volumes": [{"name": "x"}, {"name": "y"}]}}}));
        let patch = json!({"spec": {"template": {"spec": {"volumes": [
            {"name": "y", "hostPath": {"path": "a"}}
        ]}}}});
        let got = apply_configuration(&live, &patch, &kind("apps", "v1", "Deployment")).unwrap();
        assert_eq!(
            got,
            deployment(json!({"template": {"spec": {"volumes": [
                {"name": "x"},
                {"name": "y", "hostPath": {"path": "a"}}
            ]}}}))
        );
    }

    #[test]
    fn upstream_scalar_replaced() {
        let live = deployment(json!({"replicas": 2}));
        let patch = json!({"spec": {"replicas": 3}});
        let got = apply_configuration(&live, &patch, &kind("apps", "v1", "Deployment")).unwrap();
        assert_eq!(got, deployment(json!({"replicas": 3})));
    }

    #[test]
    fn upstream_complex_initialization() {
        // The port omits protocol, a list-map key defaulted to "TCP".
        let spec = json!({
            "replicas": 1,
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{
                    "name": "nginx",
                    "image": "nginx:1.14.2",
                    "ports": [{"containerPort": 80}],
                    "resources": {"limits": {"cpu": "128M"}}
                }]}
            }
        });
        let live = deployment(json!({}));
        let got = apply_configuration(
            &live,
            &json!({"spec": spec}),
            &kind("apps", "v1", "Deployment"),
        )
        .unwrap();
        assert_eq!(got, deployment(spec));
    }

    #[test]
    fn upstream_change_to_atomic_rejected() {
        let live = deployment(json!({"replicas": 1}));
        let patch = json!({"spec": {"selector": {"matchLabels": {"l": "v"}}}});
        assert_eq!(
            apply_err(&live, &patch, &kind("apps", "v1", "Deployment")),
            "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.selector"
        );
    }

    #[test]
    fn upstream_invalid_field_name() {
        let live = deployment(json!({"replicas": 1}));
        let patch = json!({"spec": {"replicasx": 1}});
        assert_eq!(
            apply_err(&live, &patch, &kind("apps", "v1", "Deployment")),
            "failed to convert patch object to typed object: .spec.replicasx: field not declared in schema"
        );
    }

    #[test]
    fn upstream_duplicate_env_vars_in_original_object() {
        let containers = json!([{"name": "nginx", "env": [
            {"name": "test", "value": "a"},
            {"name": "test", "value": "b"}
        ]}]);
        let live =
            deployment(json!({"replicas": 1, "template": {"spec": {"containers": containers}}}));
        let patch = json!({"spec": {"replicas": 3}});
        let got = apply_configuration(&live, &patch, &kind("apps", "v1", "Deployment")).unwrap();
        assert_eq!(
            got,
            deployment(json!({"replicas": 3, "template": {"spec": {"containers": containers}}}))
        );
    }

    #[test]
    fn upstream_modify_existing_env_variable_with_duplicates() {
        let live = deployment(json!({"replicas": 1, "template": {"spec": {"containers": [
            {"name": "nginx", "env": [
                {"name": "test", "value": "a"},
                {"name": "test", "value": "b"},
                {"name": "foo", "value": "bar"}
            ]}
        ]}}}));
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "nginx", "env": [{"name": "test", "value": "c"}]}
        ]}}}});
        let got = apply_configuration(&live, &patch, &kind("apps", "v1", "Deployment")).unwrap();
        assert_eq!(
            got,
            deployment(json!({"replicas": 1, "template": {"spec": {"containers": [
                {"name": "nginx", "env": [
                    {"name": "test", "value": "c"},
                    {"name": "foo", "value": "bar"}
                ]}
            ]}}}))
        );
    }

    /// Lists longer than the ones compared item by item are hashed: the
    /// upstream cases above, with forty items instead of two or three.
    #[test]
    fn long_lists_merge_as_short_ones() {
        let env = |names: &[String], value: &str| -> Vec<Value> {
            names
                .iter()
                .map(|n| json!({"name": n, "value": value}))
                .collect()
        };
        let names: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
        let pod = |env: Vec<Value>| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "env": env}]}})
        };
        let ty = kind("", "v1", "Pod");

        // The object's duplicates collapse into the applied item (upstream
        // TestApplyConfiguration "Modify existing env variable with duplicates").
        let mut live_env = env(&names, "a");
        live_env.insert(7, json!({"name": "e5", "value": "b"}));
        let patch = pod(vec![
            json!({"name": "e5", "value": "c"}),
            json!({"name": "new", "value": "n"}),
        ]);
        let got = apply_configuration(&pod(live_env), &patch, &ty).unwrap();
        // e5 keeps its first place. SMD visitListItems skips the object's
        // second e5 (already merged) in the same step that places the next
        // applied item, so the new item takes the duplicate's place.
        let mut want = env(&names, "a");
        want[5] = json!({"name": "e5", "value": "c"});
        want.insert(7, json!({"name": "new", "value": "n"}));
        assert_eq!(got, pod(want));

        // A duplicate in a long applied list is refused, as in a short one.
        let mut patch_env = env(&names, "x");
        patch_env.push(json!({"name": "e3", "value": "y"}));
        assert_eq!(
            apply_err(&pod(env(&names, "a")), &pod(patch_env), &ty),
            "failed to convert patch object to typed object: .spec.containers[name=\"c\"].env: duplicate entries for key [name=\"e3\"]"
        );
    }

    // mutating/plugin_test.go TestSSAMapList.
    #[test]
    fn upstream_init_containers_appended() {
        let live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"initContainers": [{"name": "init-container", "image": "image"}]}});
        let patch = json!({
            "metadata": {"annotations": {"foo": "bar"}},
            "spec": {"initContainers": [{"name": "injected-init-container", "image": "injected-image"}]}
        });
        let got = apply_configuration(&live, &patch, &kind("", "v1", "Pod")).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"foo": "bar"}},
            "spec": {"initContainers": [
                {"name": "init-container", "image": "image"},
                {"name": "injected-init-container", "image": "injected-image"}
            ]}})
        );
    }

    // apimachinery meta/v1 types.go: OwnerReference is +structType=atomic,
    // ownerReferences a list map; smd.go findAtomics reports the item.
    #[test]
    fn owner_reference_is_an_atomic_struct() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        let patch = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "0000-1111"}
        ]}});
        assert_eq!(
            apply_err(&live, &patch, &kind("", "v1", "ConfigMap")),
            "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .metadata.ownerReferences[0]"
        );
    }

    // The search for atomics runs only when validating the patch met one:
    // whatever it would find, the validation must have met.
    #[test]
    fn validation_meets_every_atomic_the_search_finds() {
        let deployment_ty = kind("apps", "v1", "Deployment");
        let configmap_ty = kind("", "v1", "ConfigMap");
        let cases = [
            (
                &deployment_ty,
                json!({"spec": {"selector": {"matchLabels": {"l": "v"}}}}),
            ),
            (
                &deployment_ty,
                json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["x"]}]}}}}),
            ),
            (
                &deployment_ty,
                json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
            ),
            (
                &configmap_ty,
                json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "name": "owner", "uid": "0000-1111"}]}}),
            ),
            (
                &configmap_ty,
                json!({"metadata": {"labels": {"a": "b"}}, "data": {"k": "v"}}),
            ),
        ];
        for (ty, patch) in cases {
            let (errs, met_atomic) =
                typed::validate_noting_atomics(&ty.schema, &ty.spec, &patch, false);
            assert!(errs.is_empty(), "{patch}: {errs:?}");
            let mut atomics = Vec::new();
            find_atomics(
                &ty.schema,
                &ty.spec,
                &patch,
                &mut Vec::new(),
                &mut atomics,
                0,
            );
            assert_eq!(met_atomic, !atomics.is_empty(), "{patch}: {atomics:?}");
        }
    }

    // smd.go findAtomics: every atomic value is reported, nested ones too,
    // joined with ", ".
    #[test]
    fn all_atomics_reported() {
        let live = deployment(json!({}));
        let patch = json!({"spec": {
            "selector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
            "template": {"spec": {"containers": [{"name": "c", "args": ["x"]}]}}
        }});
        assert_eq!(
            apply_err(&live, &patch, &kind("apps", "v1", "Deployment")),
            "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: \
             .spec.selector, .spec.selector.matchExpressions, .spec.template.spec.containers[0].args"
        );
    }

    #[test]
    fn unknown_top_level_field() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}});
        let patch = json!({"spec": {"x": "y"}});
        assert_eq!(
            apply_err(&live, &patch, &kind("", "v1", "ConfigMap")),
            "failed to convert patch object to typed object: .spec: field not declared in schema"
        );
    }

    // validate.go validateScalar/mapValue messages; helpers.go
    // ValidationErrors.Error joins several errors under "errors:". Upstream
    // walks the patch's Go map in no set order; ours is its (sorted) key
    // order.
    #[test]
    fn wrong_types_are_errors() {
        let ty = kind("apps", "v1", "Deployment");
        let live = deployment(json!({}));
        assert_eq!(
            apply_err(&live, &json!({"spec": "oops"}), &ty),
            "failed to convert patch object to typed object: .spec: expected map, got &{oops}"
        );
        assert_eq!(
            apply_err(
                &live,
                &json!({"spec": {"replicas": "x", "paused": "y"}}),
                &ty
            ),
            "failed to convert patch object to typed object: errors:\n  \
             .spec.paused: expected boolean, got &{y}\n  \
             .spec.replicas: expected numeric (int or float), got string"
        );
        assert_eq!(
            apply_err(&live, &json!({"metadata": {"labels": {"a": 1}}}), &ty),
            "failed to convert patch object to typed object: .metadata.labels.a: expected string, got &value.valueUnstructured{Value:1}"
        );
        assert_eq!(
            apply_err(&live, &json!({"spec": {"template": {"spec": {"containers": ["c"]}}}}), &ty),
            "failed to convert patch object to typed object: .spec.template.spec.containers: element 0: associative list with keys may not have non-map elements"
        );
        assert_eq!(
            apply_err(&live, &json!({"metadata": {"finalizers": ["a", "a"]}}), &ty),
            "failed to convert patch object to typed object: .metadata.finalizers: duplicate entries for key [=\"a\"]"
        );
        assert_eq!(
            apply_err(&live, &json!({"spec": {"template": {"spec": {"containers": [{"image": "i"}]}}}}), &ty),
            "failed to convert patch object to typed object: .spec.template.spec.containers: element 0: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)"
        );
        let bad_live = deployment(json!({"replicas": "x"}));
        assert_eq!(
            apply_err(&bad_live, &json!({"spec": {"replicas": 1}}), &ty),
            "failed to convert original object to typed object: .spec.replicas: expected numeric (int or float), got string"
        );
    }

    // smd.go Patch: the patch takes the object's apiVersion and kind.
    #[test]
    fn patch_gvk_replaced_by_object_gvk() {
        let live = deployment(json!({"replicas": 1}));
        let patch = json!({"apiVersion": "v9", "kind": "Other", "spec": {"replicas": 2}});
        let got = apply_configuration(&live, &patch, &kind("apps", "v1", "Deployment")).unwrap();
        assert_eq!(got, deployment(json!({"replicas": 2})));
    }

    // ContainerPort is keyed by containerPort+protocol, protocol defaulting
    // to "TCP" (core/v1 types.go +default="TCP"; SMD helpers.go
    // keyedAssociativeListItemToPathElement uses key defaults).
    #[test]
    fn two_key_list_map_with_default() {
        let ty = kind("", "v1", "Pod");
        let live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 80, "protocol": "TCP"},
            {"containerPort": 53, "protocol": "UDP"}
        ]}]}});
        let patch = json!({"spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 80, "name": "http"},
            {"containerPort": 53, "protocol": "TCP"}
        ]}]}});
        let got = apply_configuration(&live, &patch, &ty).unwrap();
        assert_eq!(
            got["spec"]["containers"][0]["ports"],
            json!([
                {"containerPort": 80, "protocol": "TCP", "name": "http"},
                {"containerPort": 53, "protocol": "UDP"},
                {"containerPort": 53, "protocol": "TCP"}
            ])
        );
    }

    // Conformance ac-granular-map-merge / ac-set-list-existing-value-no-duplicate.
    #[test]
    fn granular_map_and_set() {
        let ty = kind("", "v1", "ConfigMap");
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "finalizers": ["example.com/a", "example.com/b"]},
            "data": {"a": "1", "c": "3"}});
        let patch = json!({"metadata": {"finalizers": ["example.com/a", "example.com/c"]},
            "data": {"a": "2", "b": "2"}});
        let got = apply_configuration(&live, &patch, &ty).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "finalizers": ["example.com/a", "example.com/b", "example.com/c"]},
                "data": {"a": "2", "c": "3", "b": "2"}})
        );
    }

    // The deduced type (parser.go DeducedParseableType): granular maps,
    // atomic lists; findAtomics only follows declared fields, so nothing
    // under a deduced map is rejected.
    #[test]
    fn deduced_type_merge() {
        let live = json!({"apiVersion": "x/v1", "kind": "X", "spec": {"a": 1, "list": [1, 2], "m": {"k": "v"}}});
        let patch = json!({"spec": {"b": 2, "list": [3], "m": {"j": "w"}}});
        let got = apply_configuration(&live, &patch, &deduced()).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "x/v1", "kind": "X",
                "spec": {"a": 1, "list": [3], "m": {"k": "v", "j": "w"}, "b": 2}})
        );
    }

    fn crd(schema: Value) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}}]}})
    }

    // CRD lists: x-kubernetes-list-type=map merges by key; no list-type
    // means atomic (schemaconv getListElementRelationship).
    #[test]
    fn crd_list_types() {
        let store = SchemaStore::with_crds(&[crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "items": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {
                        "name": {"type": "string"}, "size": {"type": "integer"}}}},
                "tags": {"type": "array", "items": {"type": "string"}}
            }}
        }}))]);
        let ty = store.lookup("example.com", "v1", "Widget").unwrap();
        let live = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"items": [{"name": "a", "size": 1}, {"name": "b", "size": 2}]}});
        let patch = json!({"metadata": {"labels": {"l": "v"}},
            "spec": {"items": [{"name": "b", "size": 3}, {"name": "c"}]}});
        let got = apply_configuration(&live, &patch, &ty).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "labels": {"l": "v"}},
                "spec": {"items": [{"name": "a", "size": 1}, {"name": "b", "size": 3}, {"name": "c"}]}})
        );
        assert_eq!(
            apply_err(&live, &json!({"spec": {"tags": ["x"]}}), &ty),
            "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.tags"
        );
        assert_eq!(
            apply_err(&live, &json!({"spec": {"other": 1}}), &ty),
            "failed to convert patch object to typed object: .spec.other: field not declared in schema"
        );
    }

    // Conformance crd-v1-mutated: x-kubernetes-preserve-unknown-fields at the
    // root keeps ObjectMeta typed and accepts any other field.
    #[test]
    fn crd_preserve_unknown_fields() {
        let store = SchemaStore::with_crds(&[crd(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        )]);
        let ty = store.lookup("example.com", "v1", "Widget").unwrap();
        let live = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"list": [1]}});
        let patch = json!({"metadata": {"labels": {"mutated": "true"}}, "spec": {"list": [2], "x": {"y": 1}}});
        let got = apply_configuration(&live, &patch, &ty).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "labels": {"mutated": "true"}},
                "spec": {"list": [2], "x": {"y": 1}}})
        );
        assert_eq!(
            apply_err(&live, &json!({"metadata": {"labels": {"a": true}}}), &ty),
            "failed to convert patch object to typed object: .metadata.labels.a: expected string, got &value.valueUnstructured{Value:true}"
        );
    }

    #[test]
    fn deep_nesting_does_not_panic() {
        let store = SchemaStore::with_crds(&[crd(
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        )]);
        let ty = store.lookup("example.com", "v1", "Widget").unwrap();
        let mut deep = json!(1);
        for _ in 0..(MAX_DEPTH + 50) {
            deep = json!({"a": deep});
        }
        let live = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": deep.clone()});
        let patch = json!({"spec": deep});
        let err = apply_err(&live, &patch, &ty);
        assert!(err.contains("exceeded maximum nesting depth"), "{err}");
        assert!(crate::schema::unknown_fields(&live, &ty).is_empty());

        // Just below the limit the merge goes through.
        let mut deep = json!(1);
        for _ in 0..(MAX_DEPTH - 10) {
            deep = json!({"a": deep});
        }
        let live = json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": deep.clone()});
        let got = apply_configuration(&live, &json!({"spec": deep}), &ty).unwrap();
        assert!(got == live);
    }

    /// [`apply_configuration_in_place`], with the objects its `before_write`
    /// was called with.
    fn merge_in_place(
        object: &mut Value,
        known: LiveObject,
        mut patch: Value,
        known_patch: PatchChecks,
        ty: &TypeRef,
    ) -> (Result<bool, ApplyError>, Vec<Value>) {
        let mut seen = Vec::new();
        let mut untold = object.clone();
        let mut positions = MergedPositions::default();
        let result = apply_configuration_in_place(
            object,
            known,
            &mut patch.clone(),
            known_patch,
            ty,
            MergeTold {
                before_write: Some(&mut |o: &Value| seen.push(o.clone())),
                positions: Some(&mut positions),
            },
        );
        // Untold, it merges the same.
        let same = apply_configuration_in_place(
            &mut untold,
            known,
            &mut patch,
            known_patch,
            ty,
            MergeTold::default(),
        );
        assert_eq!((&same, &untold), (&result, &*object));
        (result, seen)
    }

    /// The containers of `pod` merged with `patch`, and where the merge
    /// said each patch container (and each of its ports) landed.
    fn placed_containers(pod: &Value, patch: Value) -> (Value, Vec<Option<usize>>, Vec<Value>) {
        let ty = kind("", "v1", "Pod");
        let mut object = pod.clone();
        let mut patch = patch;
        let mut positions = MergedPositions::default();
        apply_configuration_in_place(
            &mut object,
            LiveObject::Unchecked,
            &mut patch,
            PatchChecks::Unchecked,
            &ty,
            MergeTold {
                before_write: None,
                positions: Some(&mut positions),
            },
        )
        .unwrap();
        let merged = object["spec"]["containers"].clone();
        let items = patch["spec"]["containers"].as_array().unwrap();
        let (landed, keys) = positions.of(items).expect("the containers are noted");
        assert_eq!(keys, ["name"]);
        let landed = landed.to_vec();
        // Each item's ports, where the merged container has them.
        let ports = items
            .iter()
            .zip(&landed)
            .filter_map(|(item, at)| {
                let ports = item.get("ports")?.as_array()?;
                let merged_ports = merged[(*at)?]["ports"].as_array()?;
                let (found, keys) = positions.of(ports)?;
                assert_eq!(keys, ["containerPort", "protocol"]);
                Some(json!({"landed": found, "names": found.iter().map(|i| i.map(|i| merged_ports[i]["containerPort"].clone())).collect::<Vec<_>>()}))
            })
            .collect();
        (merged, landed, ports)
    }

    // Upstream's placement (SMD `visitListItems`): the object's items keep
    // their order, a new item lands after the object's items that precede
    // the next item both sides share.
    #[test]
    fn the_merge_notes_where_each_patch_item_landed() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "a", "image": "a"},
                {"name": "b", "image": "b", "ports": [{"containerPort": 53, "protocol": "UDP"}]},
                {"name": "c", "image": "c"}]}});
        let (merged, landed, ports) = placed_containers(
            &pod,
            json!({"spec": {"containers": [
                {"name": "new"},
                {"name": "b", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]},
                {"name": "sidecar"}]}}),
        );
        let names: Vec<&str> = merged
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "new", "b", "c", "sidecar"]);
        assert_eq!(landed, [Some(1), Some(2), Some(4)]);
        // The object's UDP port keeps its place, the new one follows it... or
        // precedes the shared one it is listed before.
        assert_eq!(ports, [json!({"landed": [0, 1], "names": [80, 53]})]);

        // Into a Pod without containers: the patch's order.
        let empty = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": []}});
        let (_, landed, _) = placed_containers(
            &empty,
            json!({"spec": {"containers": [{"name": "x", "image": "x"}, {"name": "y", "image": "y"}]}}),
        );
        assert_eq!(landed, [Some(0), Some(1)]);
    }

    #[test]
    fn in_place_merge_reports_change_and_keeps_object_on_error() {
        let ty = kind("apps", "v1", "Deployment");
        let live =
            deployment(json!({"replicas": 1, "template": {"metadata": {"labels": {"a": "1"}}}}));
        // Restating what the object has changes nothing.
        let mut object = live.clone();
        let same =
            json!({"spec": {"replicas": 1, "template": {"metadata": {"labels": {"a": "1"}}}}});
        assert_eq!(
            merge_in_place(
                &mut object,
                LiveObject::Unchecked,
                same.clone(),
                PatchChecks::Unchecked,
                &ty
            ),
            (Ok(false), vec![])
        );
        assert_eq!(object, live);
        // A new label lands after the existing one; untouched fields stay.
        let add = json!({"spec": {"template": {"metadata": {"labels": {"b": "2"}}}}});
        // The merge is told of its first write, with the object as it was.
        assert_eq!(
            merge_in_place(
                &mut object,
                LiveObject::Unchecked,
                add.clone(),
                PatchChecks::Unchecked,
                &ty
            ),
            (Ok(true), vec![live.clone()])
        );
        assert_eq!(
            serde_json::to_string(&object["spec"]).unwrap(),
            r#"{"replicas":1,"template":{"metadata":{"labels":{"a":"1","b":"2"}}}}"#
        );
        // A failing merge leaves the object as it was.
        let before = object.clone();
        let bad = json!({"spec": {"replicas": "three", "paused": true}});
        let (result, seen) = merge_in_place(
            &mut object,
            LiveObject::Unchecked,
            bad.clone(),
            PatchChecks::Unchecked,
            &ty,
        );
        assert!(result.is_err() && seen.is_empty());
        assert_eq!(object, before);
    }

    #[test]
    fn passed_patch_checks_run_when_the_object_kind_is_not_a_string() {
        // The patch takes on the object's `kind`: checks it passed with a
        // string there say nothing of a number.
        let ty = kind("apps", "v1", "Deployment");
        let mut live = deployment(json!({"replicas": 1}));
        live["kind"] = json!(5);
        let patch = json!({"spec": {"replicas": 2}});
        let run = |known: PatchChecks| {
            let mut object = live.clone();
            let (result, seen) =
                merge_in_place(&mut object, LiveObject::Valid, patch.clone(), known, &ty);
            assert!(seen.is_empty());
            assert_eq!(object, live);
            result
        };
        let checked = run(PatchChecks::Unchecked);
        assert!(
            matches!(&checked, Err(ApplyError::ConvertPatch(errs)) if errs.0[0].path == ".kind"),
            "{checked:?}"
        );
        assert_eq!(run(PatchChecks::Passed), checked);
    }

    // --- structured-merge-diff typed/merge_test.go TestMerge triplets ---

    /// TypedValue.Merge as the SMD test harness runs it: lhs validated with
    /// AllowDuplicates, rhs strictly.
    fn smd_merge(ty: &TypeRef, lhs: &Value, rhs: &Value) -> Value {
        let errs = typed::validate(&ty.schema, &ty.spec, lhs, true);
        assert!(errs.is_empty(), "lhs {lhs}: {errs:?}");
        let errs = typed::validate(&ty.schema, &ty.spec, rhs, false);
        assert!(errs.is_empty(), "rhs {rhs}: {errs:?}");
        let merger = Merger {
            schema: &ty.schema,
            positions: None,
        };
        let (out, errs) = merger.merge(&ty.spec, Some(lhs), Some(rhs), 0);
        assert!(errs.is_empty(), "merge {lhs} {rhs}: {errs:?}");
        let out = out.unwrap_or(Value::Null);
        // The in-place merge the dispatcher uses gives the same object.
        let (change, errs) = merger.plan(&ty.spec, lhs, rhs, 0);
        assert!(errs.is_empty(), "plan {lhs} {rhs}: {errs:?}");
        let mut in_place = lhs.clone();
        let changed = match change {
            Change::Remove => {
                in_place = Value::Null;
                true
            }
            change => change.apply(&mut in_place),
        };
        assert_eq!(in_place, out, "in place: lhs {lhs} rhs {rhs}");
        assert_eq!(changed, out != *lhs, "changed: lhs {lhs} rhs {rhs}");
        out
    }

    fn run_triplets(ty: &TypeRef, triplets: &[(&str, &str, &str)]) {
        for (lhs, rhs, out) in triplets {
            let lhs: Value = serde_json::from_str(lhs).unwrap();
            let rhs: Value = serde_json::from_str(rhs).unwrap();
            let want: Value = serde_json::from_str(out).unwrap();
            assert_eq!(smd_merge(ty, &lhs, &rhs), want, "lhs {lhs} rhs {rhs}");
        }
    }

    #[test]
    fn smd_simple_pair() {
        let ty = test_type(
            json!({"stringPair": {"m": {"f": {"key": "string", "value": "__untyped_atomic_"}}}}),
            "stringPair",
        );
        run_triplets(
            &ty,
            &[
                (
                    r#"{"key":"foo","value":{}}"#,
                    r#"{"key":"foo","value":1}"#,
                    r#"{"key":"foo","value":1}"#,
                ),
                (
                    r#"{"key":"foo","value":1}"#,
                    r#"{"key":"foo","value":{}}"#,
                    r#"{"key":"foo","value":{}}"#,
                ),
                (
                    r#"{"key":"foo","value":null}"#,
                    r#"{"key":"foo","value":{}}"#,
                    r#"{"key":"foo","value":{}}"#,
                ),
                (
                    r#"{"key":"foo"}"#,
                    r#"{"value":true}"#,
                    r#"{"key":"foo","value":true}"#,
                ),
            ],
        );
    }

    #[test]
    fn smd_null_and_empty() {
        let untyped = "__untyped_atomic_";
        for ty in [
            test_type(
                json!({"r": {"m": {"f": {"inner": {"m": {"e": untyped}}}}}}),
                "r",
            ),
            test_type(
                json!({"r": {"m": {"f": {"inner": {"m": {"f": {"value": untyped}}}}}}}),
                "r",
            ),
        ] {
            run_triplets(
                &ty,
                &[
                    (r#"{}"#, r#"{"inner":{}}"#, r#"{"inner":{}}"#),
                    (r#"{}"#, r#"{"inner":null}"#, r#"{"inner":null}"#),
                    (r#"{"inner":null}"#, r#"{"inner":{}}"#, r#"{"inner":{}}"#),
                    (r#"{"inner":{}}"#, r#"{"inner":null}"#, r#"{"inner":null}"#),
                    (r#"{"inner":{}}"#, r#"{"inner":{}}"#, r#"{"inner":{}}"#),
                ],
            );
        }
        let ty = test_type(
            json!({"r": {"m": {"f": {"inner": {"l": {"e": untyped, "r": "atomic"}}}}}}),
            "r",
        );
        run_triplets(
            &ty,
            &[
                (r#"{}"#, r#"{"inner":[]}"#, r#"{"inner":[]}"#),
                (r#"{}"#, r#"{"inner":null}"#, r#"{"inner":null}"#),
                (r#"{"inner":null}"#, r#"{"inner":[]}"#, r#"{"inner":[]}"#),
                (r#"{"inner":[]}"#, r#"{"inner":null}"#, r#"{"inner":null}"#),
                (r#"{"inner":[]}"#, r#"{"inner":[]}"#, r#"{"inner":[]}"#),
            ],
        );
    }

    #[test]
    fn smd_struct_grab_bag_and_sets() {
        let set = |e: &str| json!({"l": {"e": e, "r": "associative"}});
        let ty = test_type(
            json!({"myStruct": {"m": {"f": {
                "numeric": "numeric", "string": "string", "bool": "boolean",
                "setStr": set("string"), "setBool": set("boolean"), "setNumeric": set("numeric")
            }}}}),
            "myStruct",
        );
        run_triplets(
            &ty,
            &[
                (
                    r#"{"numeric":1}"#,
                    r#"{"numeric":3.14159}"#,
                    r#"{"numeric":3.14159}"#,
                ),
                (
                    r#"{"numeric":3.14159}"#,
                    r#"{"numeric":1}"#,
                    r#"{"numeric":1}"#,
                ),
                (
                    r#"{"string":"aoeu"}"#,
                    r#"{"bool":true}"#,
                    r#"{"string":"aoeu","bool":true}"#,
                ),
                (
                    r#"{"setStr":["a","b","c"]}"#,
                    r#"{"setStr":["a","b"]}"#,
                    r#"{"setStr":["a","b","c"]}"#,
                ),
                (
                    r#"{"setStr":["a","b"]}"#,
                    r#"{"setStr":["a","b","c"]}"#,
                    r#"{"setStr":["a","b","c"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c"]}"#,
                    r#"{"setStr":[]}"#,
                    r#"{"setStr":["a","b","c"]}"#,
                ),
                (
                    r#"{"setStr":[]}"#,
                    r#"{"setStr":["a","b","c"]}"#,
                    r#"{"setStr":["a","b","c"]}"#,
                ),
                (
                    r#"{"setStr":["a","b"]}"#,
                    r#"{"setStr":["b","a"]}"#,
                    r#"{"setStr":["b","a"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c"]}"#,
                    r#"{"setStr":["d","e","f"]}"#,
                    r#"{"setStr":["a","b","c","d","e","f"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c"]}"#,
                    r#"{"setStr":["c","d","e","f"]}"#,
                    r#"{"setStr":["a","b","c","d","e","f"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c","g","f"]}"#,
                    r#"{"setStr":["c","d","e","f"]}"#,
                    r#"{"setStr":["a","b","c","g","d","e","f"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c"]}"#,
                    r#"{"setStr":["d","e","f","x","y","z"]}"#,
                    r#"{"setStr":["a","b","c","d","e","f","x","y","z"]}"#,
                ),
                (
                    r#"{"setStr":["c","d","e","f"]}"#,
                    r#"{"setStr":["a","c","e"]}"#,
                    r#"{"setStr":["a","c","d","e","f"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c","x","y","z"]}"#,
                    r#"{"setStr":["d","e","f"]}"#,
                    r#"{"setStr":["a","b","c","x","y","z","d","e","f"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c","x","y","z"]}"#,
                    r#"{"setStr":["d","e","f","x","y","z"]}"#,
                    r#"{"setStr":["a","b","c","d","e","f","x","y","z"]}"#,
                ),
                (
                    r#"{"setStr":["c","a","g","f"]}"#,
                    r#"{"setStr":["c","f","a","g"]}"#,
                    r#"{"setStr":["c","f","a","g"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c","d"]}"#,
                    r#"{"setStr":["d","e","f","a"]}"#,
                    r#"{"setStr":["b","c","d","e","f","a"]}"#,
                ),
                (
                    r#"{"setStr":["c","d","e","f","g","h","i","j"]}"#,
                    r#"{"setStr":["2","h","3","e","4","k","l"]}"#,
                    r#"{"setStr":["c","d","f","g","2","h","i","j","3","e","4","k","l"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c","d","e","f","g","h","i","j"]}"#,
                    r#"{"setStr":["1","b","2","h","3","e","4","k","l"]}"#,
                    r#"{"setStr":["a","1","b","c","d","f","g","2","h","i","j","3","e","4","k","l"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","b"]}"#,
                    r#"{"setStr":["c"]}"#,
                    r#"{"setStr":["a","b","b","c"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","b"]}"#,
                    r#"{"setStr":["b"]}"#,
                    r#"{"setStr":["a","b"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","b"]}"#,
                    r#"{"setStr":["a"]}"#,
                    r#"{"setStr":["a","b","b"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c","d","e","c"]}"#,
                    r#"{"setStr":["1","b","2","e","d"]}"#,
                    r#"{"setStr":["a","1","b","c","2","e","c","d"]}"#,
                ),
                (
                    r#"{"setStr":["a","b","c","d","e","c"]}"#,
                    r#"{"setStr":["1","b","2","c","e","d"]}"#,
                    r#"{"setStr":["a","1","b","2","c","e","d"]}"#,
                ),
                (
                    r#"{"setStr":["a","a","b","b"]}"#,
                    r#"{"setStr":["b","c","d"]}"#,
                    r#"{"setStr":["a","a","b","c","d"]}"#,
                ),
                (
                    r#"{"setStr":["a","a","b","b"]}"#,
                    r#"{"setStr":[]}"#,
                    r#"{"setStr":["a","a","b","b"]}"#,
                ),
                (
                    r#"{"setBool":[true]}"#,
                    r#"{"setBool":[false]}"#,
                    r#"{"setBool":[true, false]}"#,
                ),
                (
                    r#"{"setNumeric":[1,2,3.14159]}"#,
                    r#"{"setNumeric":[1,2,3]}"#,
                    r#"{"setNumeric":[1,2,3.14159,3]}"#,
                ),
                (
                    r#"{"setStr":["c","a","g","f","c","a"]}"#,
                    r#"{"setStr":["c","f","a","g"]}"#,
                    r#"{"setStr":["c","f","a","g"]}"#,
                ),
                (
                    r#"{"setNumeric":[1,2,3.14159,1,2]}"#,
                    r#"{"setNumeric":[1,2,3]}"#,
                    r#"{"setNumeric":[1,2,3.14159,3]}"#,
                ),
                (
                    r#"{"setBool":[true,false,true]}"#,
                    r#"{"setBool":[false]}"#,
                    r#"{"setBool":[true,false,true]}"#,
                ),
                (
                    r#"{"setBool":[true,false,true]}"#,
                    r#"{"setBool":[true]}"#,
                    r#"{"setBool":[true, false]}"#,
                ),
            ],
        );
    }

    #[test]
    fn smd_associative_list_with_two_keys() {
        let ty = test_type(
            json!({
                "myRoot": {"m": {"f": {"list": "myList", "atomicList": "mySequence"}}},
                "myList": {"l": {"e": "myElement", "r": "associative", "k": ["key", "id"]}},
                "mySequence": {"l": {"e": "string", "r": "atomic"}},
                "myElement": {"m": {"f": {"key": "string", "id": "numeric", "value": "myValue",
                    "bv": "boolean", "nv": "numeric"}}},
                "myValue": {"m": {"e": "string"}}
            }),
            "myRoot",
        );
        run_triplets(
            &ty,
            &[
                (
                    r#"{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}"#,
                    r#"{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}"#,
                    r#"{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}"#,
                ),
                (
                    r#"{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}"#,
                    r#"{"list":[{"key":"a","id":2,"value":{"a":"a"}}]}"#,
                    r#"{"list":[{"key":"a","id":1,"value":{"a":"a"}},{"key":"a","id":2,"value":{"a":"a"}}]}"#,
                ),
                (
                    r#"{"list":[{"key":"a","id":1},{"key":"b","id":1}]}"#,
                    r#"{"list":[{"key":"a","id":1},{"key":"a","id":2}]}"#,
                    r#"{"list":[{"key":"a","id":1},{"key":"b","id":1},{"key":"a","id":2}]}"#,
                ),
                (
                    r#"{"list":[{"key":"b","id":2}]}"#,
                    r#"{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}"#,
                    r#"{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}"#,
                ),
                (
                    r#"{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}"#,
                    r#"{"list":[{"key":"c","id":3},{"key":"b","id":2}]}"#,
                    r#"{"list":[{"key":"a","id":1},{"key":"c","id":3},{"key":"b","id":2}]}"#,
                ),
                (
                    r#"{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}"#,
                    r#"{"list":[{"key":"c","id":3},{"key":"a","id":1}]}"#,
                    r#"{"list":[{"key":"b","id":2},{"key":"c","id":3},{"key":"a","id":1}]}"#,
                ),
                (
                    r#"{"atomicList":["a","a","a"]}"#,
                    r#"{"atomicList":null}"#,
                    r#"{"atomicList":null}"#,
                ),
                (
                    r#"{"atomicList":["a","b","c"]}"#,
                    r#"{"atomicList":[]}"#,
                    r#"{"atomicList":[]}"#,
                ),
                (
                    r#"{"atomicList":["a","a","a"]}"#,
                    r#"{"atomicList":["a","a"]}"#,
                    r#"{"atomicList":["a","a"]}"#,
                ),
                (
                    r#"{"list":[{"key":"a","id":1,"bv":true},{"key":"b","id":2},{"key":"a","id":1,"bv":false,"nv":2}]}"#,
                    r#"{"list":[{"key":"a","id":1,"nv":3},{"key":"c","id":3},{"key":"b","id":2}]}"#,
                    r#"{"list":[{"key":"a","id":1,"nv":3},{"key":"c","id":3},{"key":"b","id":2}]}"#,
                ),
                (
                    r#"{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}"#,
                    r#"{"list":[]}"#,
                    r#"{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}"#,
                ),
                (
                    r#"{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}"#,
                    r#"{}"#,
                    r#"{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}"#,
                ),
            ],
        );
    }

    // cel-go converts a CEL null to structpb.NullValue, which SMD's typed
    // conversion of the patch refuses (maporacle's words); JSON's null is
    // accepted by the plain apply.
    #[test]
    fn cel_nulls_are_refused_by_the_patch_conversion() {
        let ty = kind("", "v1", "ConfigMap");
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        for (patch, message) in [
            (
                json!({"data": {"a": null}}),
                ".data.a: expected string, got &value.valueUnstructured{Value:0}",
            ),
            (
                json!({"data": null}),
                ".data: expected map, got &{NULL_VALUE}",
            ),
            (
                json!({"immutable": null}),
                ".immutable: expected boolean, got &{NULL_VALUE}",
            ),
            (
                json!({"metadata": {"finalizers": null}}),
                ".metadata.finalizers: expected list, got &{NULL_VALUE}",
            ),
            (
                json!({"metadata": {"generation": null}}),
                ".metadata.generation: expected numeric (int or float), got structpb.NullValue",
            ),
        ] {
            let mut object = live.clone();
            let err = apply_configuration_in_place(
                &mut object,
                LiveObject::Unchecked,
                &mut patch.clone(),
                PatchChecks::Unchecked,
                &ty,
                MergeTold::default(),
            )
            .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("failed to convert patch object to typed object: {message}")
            );
            assert_eq!(object, live);
            assert!(apply_configuration(&live, &patch, &ty).is_ok(), "{patch}");
        }
    }

    // SMD merge.go doMap: a null applied to a non-empty granular map keeps
    // the object's entries (only an empty/absent one becomes null).
    #[test]
    fn null_on_granular_map_keeps_entries() {
        let ty = kind("", "v1", "ConfigMap");
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}});
        let got =
            apply_configuration(&live, &json!({"data": null, "immutable": null}), &ty).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1"}, "immutable": null})
        );
    }
}
