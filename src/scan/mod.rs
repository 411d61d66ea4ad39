//! `kmutate scan`: what the policies would change in the cluster as it is.
//!
//! Admission mutates only new writes; objects stored before a policy was
//! added keep their old shape. A scan lists every stored object the loaded
//! bindings could match ([`discover`]), page by page, evaluates each as the
//! webhook would admit it now ([`evaluate`]), reports the verdicts as they
//! come ([`output`]), and on request writes the changes back ([`fix`]).
//! Pages are listed while the previous one is evaluated, so the cluster is
//! never held in memory whole.

pub mod cli;
pub mod discover;
pub mod evaluate;
pub mod fix;
pub mod output;

use crate::engine::Engine;
use crate::reports::Subject;
use crate::request::UserInfo;
use discover::Target;
use evaluate::{AsOperation, Verdict};
use kube::api::{DynamicObject, ListParams};
use kube::Resource as _;
use serde_json::Value as Json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Objects asked for in one list call.
pub const PAGE_SIZE: u32 = 500;

/// How a scan reads the cluster.
#[derive(Debug, Clone, Default)]
pub struct ScanOptions {
    /// The admission each object is evaluated as.
    pub operation: AsOperation,
    /// Only objects of this namespace (and no cluster-scoped ones).
    pub namespace: Option<String>,
    /// Only objects with these labels (a label selector).
    pub label_selector: Option<String>,
    /// The requesting user of every evaluation (`request.userInfo`, and
    /// whose permissions the `authorizer` checks).
    pub user: UserInfo,
}

/// One stored object and what the policies would do to it.
#[derive(Debug, Clone)]
pub struct Scanned {
    /// `plural.group` of its resource.
    pub resource: String,
    /// The object.
    pub subject: Subject,
    /// Its resourceVersion when read.
    pub resource_version: String,
    /// What the policies would do.
    pub verdict: Verdict,
}

/// What a scan reports as it goes.
#[derive(Debug)]
pub enum ScanEvent {
    /// A resource is about to be listed; `estimate` more objects (the
    /// server's remaining count after its first page) are expected.
    Listing {
        /// `plural.group`.
        resource: String,
        /// Objects expected, when the server says.
        estimate: Option<u64>,
    },
    /// A resource was left out: the caller may not list it, or listing failed.
    Skipped {
        /// `plural.group`.
        resource: String,
        /// Why, in the API server's words.
        reason: String,
        /// Whether the caller was only not allowed to (not a failure).
        forbidden: bool,
    },
    /// An object was evaluated; the stored object is given for a fix.
    Object(Box<Scanned>, Arc<Json>),
}

/// One page of a resource, listed.
struct Page {
    target: Arc<Target>,
    items: Vec<Json>,
}

/// Lists `targets` page by page and evaluates every object with `engine`,
/// sending each event to `events` in order, until done, `stop` is set or
/// the receiver is gone. The next page is listed while a page is evaluated.
pub async fn scan(
    client: &kube::Client,
    engine: Arc<Engine>,
    targets: Vec<Target>,
    options: &ScanOptions,
    stop: Arc<AtomicBool>,
    events: tokio::sync::mpsc::Sender<ScanEvent>,
) {
    let (pages_tx, mut pages) = tokio::sync::mpsc::channel::<Result<Page, ScanEvent>>(1);
    let lister = tokio::spawn(list_all(client.clone(), targets, options.clone(), pages_tx));
    'pages: while let Some(next) = pages.recv().await {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let page = match next {
            Ok(page) => page,
            Err(event) => match events.send(event).await {
                Ok(()) => continue,
                Err(_) => break,
            },
        };
        let (engine, options) = (engine.clone(), options.clone());
        let evaluated = tokio::task::spawn_blocking(move || evaluate_page(&engine, page, &options))
            .await
            .unwrap_or_default();
        for (scanned, stored) in evaluated {
            if stop.load(Ordering::Relaxed) {
                break 'pages;
            }
            if events
                .send(ScanEvent::Object(Box::new(scanned), stored))
                .await
                .is_err()
            {
                break 'pages;
            }
        }
    }
    lister.abort();
}

/// Lists every target in pages into `pages`; a target that cannot be
/// listed becomes a [`ScanEvent::Skipped`].
async fn list_all(
    client: kube::Client,
    targets: Vec<Target>,
    options: ScanOptions,
    pages: tokio::sync::mpsc::Sender<Result<Page, ScanEvent>>,
) {
    for target in targets {
        if target.namespaced || options.namespace.is_none() {
            let target = Arc::new(target);
            if list_target(&client, &target, &options, &pages)
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

/// Lists one target into `pages`; `Err` when the receiver is gone.
async fn list_target(
    client: &kube::Client,
    target: &Arc<Target>,
    options: &ScanOptions,
    pages: &tokio::sync::mpsc::Sender<Result<Page, ScanEvent>>,
) -> Result<(), ()> {
    let namespace = options.namespace.as_deref().filter(|_| target.namespaced);
    let path = DynamicObject::url_path(&target.resource, namespace);
    let mut params = ListParams::default().limit(PAGE_SIZE);
    if let Some(selector) = &options.label_selector {
        params = params.labels(selector);
    }
    let mut first = true;
    loop {
        let listed = list_page(client, &path, &params).await;
        let mut page = match listed {
            Ok(page) => page,
            Err(e) => {
                let forbidden = matches!(&e, kube::Error::Api(s) if s.code == 403);
                let skipped = ScanEvent::Skipped {
                    resource: target.name(),
                    reason: api_message(&e),
                    forbidden,
                };
                return pages.send(Err(skipped)).await.map_err(drop);
            }
        };
        let remaining = page["metadata"]["remainingItemCount"].as_u64();
        let items = typed_items(&mut page, &target.resource);
        if first {
            let estimate = Some(items.len() as u64 + remaining.unwrap_or(0));
            let listing = ScanEvent::Listing {
                resource: target.name(),
                estimate,
            };
            pages.send(Err(listing)).await.map_err(drop)?;
            first = false;
        }
        let page_out = Page {
            target: target.clone(),
            items,
        };
        pages.send(Ok(page_out)).await.map_err(drop)?;
        match continue_token(&page) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok(()),
        }
    }
}

/// A listed page's items, each with its `apiVersion` and `kind` (a list
/// leaves them out of its items).
pub(crate) fn typed_items(page: &mut Json, resource: &kube::api::ApiResource) -> Vec<Json> {
    let items = match page.get_mut("items").map(Json::take) {
        Some(Json::Array(items)) => items,
        _ => Vec::new(),
    };
    items
        .into_iter()
        .map(|mut item| {
            item["apiVersion"] = Json::from(resource.api_version.clone());
            item["kind"] = Json::from(resource.kind.clone());
            item
        })
        .collect()
}

/// The token of a listed page's next page, if there is one.
pub(crate) fn continue_token(page: &Json) -> Option<String> {
    page["metadata"]["continue"]
        .as_str()
        .filter(|c| !c.is_empty())
        .map(str::to_string)
}

/// One list call, as JSON (the items are read once, without typing them).
pub(crate) async fn list_page(
    client: &kube::Client,
    path: &str,
    params: &ListParams,
) -> Result<Json, kube::Error> {
    let request = kube::core::Request::new(path)
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    client.request::<Json>(request).await
}

/// The API server's own message of `e`.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Evaluates a page's objects, spread over the machine's cores, in order.
fn evaluate_page(engine: &Engine, page: Page, options: &ScanOptions) -> Vec<(Scanned, Arc<Json>)> {
    let resource = page.target.gvr();
    let name = page.target.name();
    let evaluate_one = |stored: Json| {
        let verdict =
            evaluate::evaluate(engine, &stored, &resource, options.operation, &options.user);
        let scanned = Scanned {
            resource: name.clone(),
            subject: subject_of(&stored),
            resource_version: stored["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            verdict,
        };
        (scanned, Arc::new(stored))
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = page.items.len().div_ceil(cores).max(1);
    let mut items = page.items;
    let mut chunks = Vec::new();
    while !items.is_empty() {
        let rest = items.split_off(chunk.min(items.len()));
        chunks.push(std::mem::replace(&mut items, rest));
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(|| chunk.into_iter().map(&evaluate_one).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// The object a report names.
pub fn subject_of(object: &Json) -> Subject {
    let text = |v: &Json| v.as_str().unwrap_or_default().to_string();
    let metadata = &object["metadata"];
    Subject {
        api_version: text(&object["apiVersion"]),
        kind: text(&object["kind"]),
        namespace: text(&metadata["namespace"]),
        name: text(&metadata["name"]),
        uid: text(&metadata["uid"]),
    }
}
