//! A store of watched objects as JSON, fed by a `kube::runtime::watcher`
//! stream, with the semantics of kube's reflector stores: a relist (after
//! a restart or a 410 Gone) is buffered and swapped in whole at its end,
//! so that objects never vanish while the list is under way.
//!
//! The objects are kept as shared JSON values, converted once per event,
//! because the assembler hands them to every engine it builds.

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// (namespace, name).
type Key = (String, String);

#[derive(Debug, Default)]
struct Inner {
    objects: HashMap<Key, Arc<Value>>,
    /// The relist under way.
    relist: Option<HashMap<Key, Arc<Value>>>,
    synced: bool,
    generation: u64,
}

/// Objects of one resource, kept current by a watch.
#[derive(Debug, Default)]
pub struct ObjectStore {
    inner: Mutex<Inner>,
    /// Whether each object's `spec` is kept as JSON text ([`ObjectStore::compacting`]).
    compact_spec: bool,
}

/// An object as JSON with its `apiVersion` and `kind` (list items may lack
/// them) and without `managedFields` (bulky, never read by policies).
pub fn object_json(object: DynamicObject, resource: &ApiResource) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), resource.api_version.clone().into());
        map.insert("kind".into(), resource.kind.clone().into());
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    value
}

/// `object` with its `spec` as a JSON tree again, when a
/// [`ObjectStore::compacting`] store kept it as text.
pub fn expand_spec(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(spec) = object.get_mut("spec") {
        if let Some(parsed) = spec.as_str().and_then(|t| serde_json::from_str(t).ok()) {
            *spec = parsed;
        }
    }
    object
}

/// The string at `pointer` in `value` ("" when absent). The pointers are
/// this module's constants, without escapes: `Value::pointer` unescapes
/// each step into a new string, most of the API source's rebuild with
/// 20,000 objects.
pub fn text_at(value: &Value, pointer: &str) -> String {
    str_at(value, pointer).unwrap_or_default().to_string()
}

/// The string at `pointer` (unescaped steps only) in `value`.
pub fn str_at<'v>(value: &'v Value, pointer: &str) -> Option<&'v str> {
    pointer
        .split('/')
        .skip(1)
        .try_fold(value, |v, step| v.get(step))
        .and_then(Value::as_str)
}

fn key_of(value: &Value) -> Key {
    (
        text_at(value, "/metadata/namespace"),
        text_at(value, "/metadata/name"),
    )
}

impl ObjectStore {
    /// A store that keeps each object's `spec` as JSON text (see
    /// [`expand_spec`]): for policies and bindings, read once when they
    /// change and then held by the thousand, a JSON tree costs about ten
    /// times its text.
    pub fn compacting() -> ObjectStore {
        ObjectStore {
            compact_spec: true,
            ..ObjectStore::default()
        }
    }

    /// An event's object as this store keeps it.
    fn stored(&self, object: DynamicObject, resource: &ApiResource) -> Arc<Value> {
        let mut value = object_json(object, resource);
        if self.compact_spec {
            if let Some(spec) = value.get_mut("spec") {
                *spec = Value::String(spec.to_string());
            }
        }
        Arc::new(value)
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watcher event; true when the objects served changed
    /// (a relist counts once, at its end).
    pub fn apply(&self, event: watcher::Event<DynamicObject>, resource: &ApiResource) -> bool {
        let mut inner = self.inner();
        let changed = match event {
            watcher::Event::Init => {
                inner.relist = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                let v = self.stored(o, resource);
                let key = key_of(&v);
                inner.relist.get_or_insert_with(HashMap::new).insert(key, v);
                false
            }
            watcher::Event::InitDone => {
                if let Some(objects) = inner.relist.take() {
                    inner.objects = objects;
                }
                inner.synced = true;
                true
            }
            watcher::Event::Apply(o) => {
                let v = self.stored(o, resource);
                let key = key_of(&v);
                inner.objects.insert(key, v);
                true
            }
            watcher::Event::Delete(o) => {
                let v = object_json(o, resource);
                inner.objects.remove(&key_of(&v)).is_some()
            }
        };
        if changed {
            inner.generation += 1;
        }
        changed
    }

    /// Takes a list read beside the watch (while a resumed watch may not
    /// deliver yet): the objects served become the list's, where they
    /// differ; true when they changed. A relist of the watch under way is
    /// left alone.
    pub fn replace_listed(&self, listed: Vec<DynamicObject>, resource: &ApiResource) -> bool {
        let listed: Vec<Arc<Value>> = listed
            .into_iter()
            .map(|o| self.stored(o, resource))
            .collect();
        let mut inner = self.inner();
        let mut same = inner.objects.len() == listed.len();
        // An object unchanged keeps its place (the source reads again only
        // the objects it has not seen).
        let objects: HashMap<Key, Arc<Value>> = listed
            .into_iter()
            .map(|v| {
                let key = key_of(&v);
                match inner.objects.get(&key) {
                    Some(mine) if **mine == *v => (key, mine.clone()),
                    _ => {
                        same = false;
                        (key, v)
                    }
                }
            })
            .collect();
        if same {
            return false;
        }
        inner.objects = objects;
        inner.generation += 1;
        true
    }

    /// Marks the store synced though empty (its resource is not served).
    pub fn mark_synced(&self) {
        let mut inner = self.inner();
        if !inner.synced {
            inner.synced = true;
            inner.generation += 1;
        }
    }

    /// Whether the first full list has been applied.
    pub fn is_synced(&self) -> bool {
        self.inner().synced
    }

    /// Changes with every change of the objects.
    pub fn generation(&self) -> u64 {
        self.inner().generation
    }

    /// The objects, sorted by namespace and name.
    pub fn objects(&self) -> Vec<Arc<Value>> {
        let inner = self.inner();
        let mut keyed: Vec<(&Key, &Arc<Value>)> = inner.objects.iter().collect();
        keyed.sort_by(|a, b| a.0.cmp(b.0));
        keyed.into_iter().map(|(_, v)| v.clone()).collect()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.inner().objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;
    use serde_json::json;

    fn resource() -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        )
    }

    fn cm(name: &str, team: &str) -> DynamicObject {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
            "managedFields": [{"manager": "kubectl"}]}, "data": {"team": team}}))
        .unwrap()
    }

    fn teams(store: &ObjectStore) -> Vec<String> {
        store
            .objects()
            .iter()
            .map(|o| format!("{}={}", o["metadata"]["name"], o["data"]["team"]))
            .collect()
    }

    #[test]
    fn a_relist_is_swapped_in_whole_at_its_end() {
        // kube's reflector store: Init starts a buffer, InitDone swaps it in.
        let store = ObjectStore::default();
        let r = resource();
        assert!(!store.is_synced());
        assert!(!store.apply(watcher::Event::Init, &r));
        assert!(!store.apply(watcher::Event::InitApply(cm("a", "1")), &r));
        assert!(store.objects().is_empty(), "nothing served before InitDone");
        assert!(store.apply(watcher::Event::InitDone, &r));
        assert!(store.is_synced());
        assert!(store.apply(watcher::Event::Apply(cm("b", "2")), &r));
        assert_eq!(teams(&store), ["\"a\"=\"1\"", "\"b\"=\"2\""]);

        // A relist (after 410 Gone): the old objects serve until it ends.
        let generation = store.generation();
        store.apply(watcher::Event::Init, &r);
        store.apply(watcher::Event::InitApply(cm("b", "3")), &r);
        assert_eq!(teams(&store), ["\"a\"=\"1\"", "\"b\"=\"2\""]);
        assert_eq!(store.generation(), generation);
        store.apply(watcher::Event::InitDone, &r);
        assert_eq!(teams(&store), ["\"b\"=\"3\""]);
        assert!(store.apply(watcher::Event::Delete(cm("b", "3")), &r));
        assert!(store.is_empty());
        assert!(!store.apply(watcher::Event::Delete(cm("b", "3")), &r));
    }

    #[test]
    fn a_compacting_store_keeps_the_spec_as_text_and_gives_it_back_whole() {
        let store = ObjectStore::compacting();
        let r = resource();
        let object: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"failurePolicy": "Fail", "mutations": [{"patchType": "JSONPatch"}]}
        }))
        .unwrap();
        store.apply(watcher::Event::Apply(object), &r);
        let kept = &store.objects()[0];
        assert_eq!(
            kept["spec"],
            json!(r#"{"failurePolicy":"Fail","mutations":[{"patchType":"JSONPatch"}]}"#)
        );
        let whole = expand_spec(kept);
        assert_eq!(whole["spec"]["mutations"][0]["patchType"], "JSONPatch");
        assert_eq!(whole["metadata"]["name"], "p");
        assert_eq!(whole["kind"], "ConfigMap");
    }

    #[test]
    fn objects_get_their_type_and_lose_managed_fields() {
        let v = object_json(cm("a", "1"), &resource());
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "ConfigMap");
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(v["metadata"]["name"], "a");
    }
}
