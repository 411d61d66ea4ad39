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

/// The string at `pointer` in `value` ("" when absent).
pub fn text_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn key_of(value: &Value) -> Key {
    (
        text_at(value, "/metadata/namespace"),
        text_at(value, "/metadata/name"),
    )
}

impl ObjectStore {
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
                let v = object_json(o, resource);
                let key = key_of(&v);
                inner
                    .relist
                    .get_or_insert_with(HashMap::new)
                    .insert(key, Arc::new(v));
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
                let v = object_json(o, resource);
                let key = key_of(&v);
                inner.objects.insert(key, Arc::new(v));
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
