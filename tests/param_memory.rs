//! Measures what 10,000 watched param objects cost kmutate: heap bytes
//! live (counted by this binary's allocator; the fake API server's copies
//! are measured apart and subtracted), the first sync, and the time a
//! change to one of them takes to apply. Alone in its binary so that no
//! other test's allocations mix in. Prints the figures.

mod support;

use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};
use support::api::*;
use support::*;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_kib() -> isize {
    LIVE.load(Ordering::Relaxed) / 1024
}

/// Starts a server against a fake holding `params` ConfigMaps and a
/// policy using one of them; returns the heap it added (KiB), the time to
/// ready, and the time a change to the param took to apply.
async fn measure(dir: &std::path::Path, params: usize) -> (isize, Duration, Duration) {
    let (fake, p, b) = fake_with(V1).await;
    let cms = config_maps();
    let param = |i: usize, team: &str| {
        json!({"metadata": {"name": format!("param-{i:05}"), "namespace": "default",
            "labels": {"shard": (i % 100).to_string()}},
            "data": {"team": team, "owner": "someone@example.com"}})
    };
    for i in 0..params {
        fake.put(&cms, param(i, &format!("team-{i}")));
    }
    let last = params - 1;
    let (policy, binding) = labelling_policy(
        V1,
        "byname",
        "team",
        "params.data.team",
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap"})),
        Some(json!({"name": format!("param-{last:05}"), "namespace": "default"})),
    );
    fake.put(&p, policy);
    fake.put(&b, binding);
    let before = live_kib();
    let started_at = Instant::now();
    let server = started(api_config(dir, &fake)).await;
    let ready = started_at.elapsed();
    let mut conn = connect(&server).await;
    wait_labels(&mut conn, json!({"team": format!("team-{last}")})).await;
    assert!(server.engine().unwrap().cluster().len() > params);
    let written = Instant::now();
    fake.put(&cms, param(last, "changed"));
    wait_labels(&mut conn, json!({"team": "changed"})).await;
    let update = written.elapsed();
    // Let the engines replaced meanwhile go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let added = live_kib() - before;
    server.shutdown().await;
    (added, ready, update)
}

#[test]
fn ten_thousand_params_are_cached_and_found() {
    let dir = scratch("param_memory", "many");
    run(Duration::from_secs(300), async {
        // One param first (the process-wide statics, the CEL environment
        // and the schemas, are paid for here), then 10,000.
        let (base, _, _) = measure(&dir, 1).await;
        let (many, ready, update) = measure(&dir, 10_000).await;
        println!(
            "10,000 params: kmutate's heap {many} KiB ({base} KiB with one param: {} KiB for the 10,000); ready (listed and compiled) in {ready:?}; a change to one param applied in {update:?}",
            many - base
        );
    });
}
