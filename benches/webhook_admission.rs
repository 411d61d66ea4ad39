//! In-process cost of one webhook request on the `bench/webhook/` fixture
//! (a 5 KB Pod and ten matching policies), and of the example policies in
//! `policies/` on a 3.4 KB Pod: decoding the review, the admission, and
//! encoding the answer, without HTTP or TLS.

use criterion::{criterion_group, Criterion};
use kmutate::api::{load, Binding};
use kmutate::attribution::Attribution;
use kmutate::authorizer::AlwaysDeny;
use kmutate::cel::CelEnvironment;
use kmutate::dispatch::{compile_policies, CompiledPolicy, Outcome};
use kmutate::engine::{CompiledPolicies, Engine, EngineSources};
use kmutate::matching::complete_request;
use kmutate::webhook::review::{self, Answer};
use kmutate::webhook::review::{decode_review, DecodedBody};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

// As the binary (src/main.rs).
#[global_allocator]
static ALLOCATOR: kmutate::allocator::Mimalloc = kmutate::allocator::Mimalloc;

struct NoMetrics;
impl kmutate::dispatch::AdmissionObserver for NoMetrics {}

/// As the server's observer for attribution (issue 44): each binding's
/// change recorded, for the answer's audit annotations.
#[derive(Default)]
struct Attributing(std::cell::RefCell<Attribution>);
impl kmutate::dispatch::AdmissionObserver for Attributing {
    fn wants_changes(&self) -> bool {
        true
    }
    fn binding_changed(&self, change: kmutate::dispatch::BindingChange<'_>) {
        self.0.borrow_mut().record(change);
    }
}

fn fixture() -> (Engine, Vec<u8>) {
    // `KMUTATE_BENCH_FIXTURE`: another folder of the same layout (say,
    // some of the policies only), for profiling.
    let dir = std::env::var_os("KMUTATE_BENCH_FIXTURE").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/webhook"),
        PathBuf::from,
    );
    load(&EngineSources::under(&dir), &dir.join("review.json"))
}

/// The engine of `sources`, and the review at `review` made compact, as
/// kube-apiserver sends it (and `kmutate loadtest` does).
fn load(sources: &EngineSources, review: &std::path::Path) -> (Engine, Vec<u8>) {
    let engine = Engine::load(sources, Box::new(AlwaysDeny));
    assert!(engine.problems().is_empty(), "{:?}", engine.problems());
    (engine, read_review(review))
}

/// The review at `path`, compacted as kube-apiserver sends it (its members
/// in the order written).
fn read_review(path: &std::path::Path) -> Vec<u8> {
    let body = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice::<serde::de::IgnoredAny>(&body).expect("review is JSON");
    review::compact_json(&body)
}

#[inline(never)]
fn serve_one(engine: &Engine, body: &[u8]) -> Vec<u8> {
    serve_one_as(engine, body, false)
}

/// One request, its changes attributed in the answer when `attributed`.
#[inline(never)]
fn serve_one_as(engine: &Engine, body: &[u8], attributed: bool) -> Vec<u8> {
    // As the server (src/webhook/server.rs `mutate` and `evaluate`).
    let mut review = match decode_review(engine, body).expect("fixture decodes") {
        DecodedBody::Unmatched(review) => {
            return review::encode(review.version, &review.request.uid, &Answer::allow())
        }
        DecodedBody::Review(review) => review,
    };
    complete_request(&mut review.request, engine.resources());
    let prematch = engine.prematch(&review.request);
    let uid = review.request.uid.clone();
    if engine.matched(&prematch).is_empty() {
        return review::encode(review.version, &uid, &Answer::allow());
    }
    let attributing = Attributing::default();
    let observer: &dyn kmutate::dispatch::AdmissionObserver = match attributed {
        true => &attributing,
        false => &NoMetrics,
    };
    let mut answer = match engine.admit_prematched(
        review.request,
        Some(prematch),
        observer,
        kmutate::dispatch::ObjectOrigin::KubeApiserver,
    ) {
        (
            Outcome::Admitted {
                object, warnings, ..
            },
            original,
        ) => Answer::admit_from(original.as_ref(), &object, warnings),
        (Outcome::Denied { message, code }, _) => Answer::deny(code, message),
    };
    let attribution = attributing.0.into_inner();
    if !attribution.is_empty() {
        answer.annotate(&attribution);
    }
    review::encode(review.version, &uid, &answer)
}

/// The example policies of `policies/` and `bindings/` (params and the
/// Namespace from `examples/`), and a review of a 3.4 KB Pod of a
/// ReplicaSet: upstream's idioms (optional selections, `orValue`,
/// `containers + initContainers`, `filter(..).map(..)`, `transformList`)
/// rather than the fixture's.
fn examples() -> (Engine, Vec<u8>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let sources = EngineSources {
        policies: vec![root.join("policies")],
        bindings: vec![root.join("bindings")],
        resources: vec![root.join("examples")],
    };
    load(
        &sources,
        &root.join("bench/webhook/examples-pod-review.json"),
    )
}

/// The fixture's review with the object its policies return for it: the
/// next update of a Pod they already set up, which they leave as it is.
fn already_mutated(engine: &Engine, body: &[u8]) -> Vec<u8> {
    let mut review = review::decode(body).expect("fixture decodes");
    complete_request(&mut review.request, engine.resources());
    let Outcome::Admitted { object, .. } = engine.admit(&review.request, &NoMetrics) else {
        panic!("the fixture is admitted");
    };
    let mut doc: serde_json::Value = serde_json::from_slice(body).expect("fixture is JSON");
    doc["request"]["object"] = object;
    review::encode_in_request_order(&doc)
}

/// `bench/webhook/update-review.json`: an update of the fixture's Pod (a
/// label added), which its policies, all on CREATE, do not match. The
/// request carries the Pod twice, and is answered after matching alone.
fn unmatched_update() -> Vec<u8> {
    read_review(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/webhook/update-review.json"))
}

fn webhook_admission(c: &mut Criterion) {
    let (engine, body) = fixture();
    let answer = serve_one(&engine, &body);
    assert!(
        String::from_utf8_lossy(&answer).contains("\"patch\""),
        "the fixture's policies patch the Pod"
    );
    c.bench_function("webhook-fixture-request", |b| {
        b.iter(|| serve_one(&engine, black_box(&body)))
    });
    // Issue 44: what attributing the changes in the answer costs.
    let attributed = String::from_utf8_lossy(&serve_one_as(&engine, &body, true)).into_owned();
    assert!(
        attributed.contains("\"auditAnnotations\""),
        "the fixture's answer names the policies that changed the Pod: {attributed}"
    );
    c.bench_function("webhook-fixture-request-attributed", |b| {
        b.iter(|| serve_one_as(&engine, black_box(&body), true))
    });
    let unchanged = already_mutated(&engine, &body);
    assert!(
        !String::from_utf8_lossy(&serve_one(&engine, &unchanged)).contains("\"patch\""),
        "the fixture's policies leave the Pod they mutated as it is"
    );
    c.bench_function("webhook-fixture-request-already-mutated", |b| {
        b.iter(|| serve_one(&engine, black_box(&unchanged)))
    });
    let update = unmatched_update();
    let answer = String::from_utf8_lossy(&serve_one(&engine, &update)).into_owned();
    assert!(
        answer.contains("\"allowed\":true") && !answer.contains("\"patch\""),
        "no fixture policy matches an update: {answer}"
    );
    c.bench_function("webhook-fixture-update-unmatched", |b| {
        b.iter(|| serve_one(&engine, black_box(&update)))
    });
    let (engine, body) = examples();
    assert!(
        String::from_utf8_lossy(&serve_one(&engine, &body)).contains("\"patch\""),
        "the example policies patch the example Pod"
    );
    c.bench_function("webhook-examples-pod-request", |b| {
        b.iter(|| serve_one(&engine, black_box(&body)))
    });
    c.bench_function("webhook-examples-pod-request-attributed", |b| {
        b.iter(|| serve_one_as(&engine, black_box(&body), true))
    });
}

/// The fixture with `count` more policies loaded that match only other
/// resources (`bench/webhook/non-matching-policies.sh`, one bundle file).
fn fixture_with_non_matching(count: usize) -> (Engine, Vec<u8>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("non-matching-{count}"));
    let status = std::process::Command::new("bash")
        .arg(root.join("bench/webhook/non-matching-policies.sh"))
        .arg(&dir)
        .arg(count.to_string())
        .arg("bundle")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("bash runs");
    assert!(status.success(), "non-matching-policies.sh failed");
    let (engine, body) = load(&EngineSources::under(&dir), &dir.join("review.json"));
    assert_eq!(
        (engine.policies(), engine.bindings()),
        (10 + count, 10 + count)
    );
    (engine, body)
}

/// A matching request with 0, 1,000 and 10,000 policies for other
/// resources loaded: the same answer, and (issue 31) nearly the same time.
fn non_matching_policies(c: &mut Criterion) {
    let mut group = c.benchmark_group("fixture-request-with-non-matching-policies");
    let mut first_answer = None;
    for count in [0, 1_000, 10_000] {
        let (engine, body) = fixture_with_non_matching(count);
        let answer = serve_one(&engine, &body);
        assert_eq!(
            first_answer.get_or_insert_with(|| answer.clone()),
            &answer,
            "{count} non-matching policies change the answer"
        );
        group.bench_function(count.to_string(), |b| {
            b.iter(|| serve_one(&engine, black_box(&body)))
        });
    }
    group.finish();
}

/// What the assembler rebuilds when one of the fixture's policies and
/// `count` others changed: the policies compiled already (a source compiles
/// each as it reads it), their bindings, the cluster objects, and the engine
/// before the change.
struct RebuildInputs {
    policies: Vec<Arc<CompiledPolicy>>,
    bindings: Vec<Binding>,
    objects: Vec<Arc<serde_json::Value>>,
    before: Engine,
}

fn rebuild_inputs(count: usize) -> RebuildInputs {
    let (before, _) = fixture_with_non_matching(count);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("non-matching-{count}"));
    let sources = EngineSources::under(&dir);
    let mut loaded = load::load_paths(&sources.policies);
    let bindings = load::load_paths(&sources.bindings);
    loaded.absorb_definitions(bindings.policies, bindings.bindings);
    let resources = load::load_paths(&sources.resources);
    let policies = compile_policies(&CelEnvironment::shared(), loaded.policies)
        .into_iter()
        .map(|(c, _)| Arc::new(c))
        .collect();
    RebuildInputs {
        policies,
        bindings: loaded.bindings,
        objects: resources.resources.into_iter().map(Arc::new).collect(),
        before,
    }
}

/// One rebuild: every policy reused, the set and its index assembled again.
fn rebuild(inputs: &RebuildInputs) -> Engine {
    let compiled =
        CompiledPolicies::assemble(inputs.policies.clone(), inputs.bindings.clone(), Vec::new());
    Engine::reassemble(
        Arc::new(compiled),
        inputs.objects.clone(),
        Arc::new(AlwaysDeny),
        Some(&inputs.before),
    )
}

/// The policy set rebuilt after one policy changed, with 10,000 policies for
/// other resources loaded (issue 31: an update takes effect in under 100 ms).
fn policy_set_rebuild(c: &mut Criterion) {
    let inputs = rebuild_inputs(10_000);
    assert_eq!(rebuild(&inputs).policies(), 10_010);
    let mut group = c.benchmark_group("policy-set-rebuild");
    group.sample_size(20);
    group.bench_function("10000", |b| b.iter(|| rebuild(black_box(&inputs))));
    group.finish();
}

criterion_group!(
    benches,
    webhook_admission,
    non_matching_policies,
    policy_set_rebuild
);

/// Criterion's main, or with `KMUTATE_PROFILE_ITERATIONS=N` exactly N
/// requests and no measurement, for instruction counts under callgrind
/// (of the already mutated Pod with `KMUTATE_PROFILE_ALREADY_MUTATED` set,
/// of the unmatched update with `KMUTATE_PROFILE_UNMATCHED_UPDATE`, of the
/// example policies with `KMUTATE_PROFILE_EXAMPLES`, with N policies for
/// other resources loaded beside the fixture's with
/// `KMUTATE_PROFILE_NON_MATCHING=N`; their changes attributed in the answer
/// with `KMUTATE_PROFILE_ATTRIBUTED`), or N rebuilds of the policy set with
/// 10,000 of them loaded with `KMUTATE_PROFILE_REBUILD` set. With
/// `KMUTATE_ATTRIBUTION_ROUNDS=R`, attribution's cost measured interleaved
/// instead ([`attribution_rounds`]).
fn main() {
    if let Some(rounds) = std::env::var("KMUTATE_ATTRIBUTION_ROUNDS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        attribution_rounds(rounds);
        return;
    }
    if let Some(n) = std::env::var("KMUTATE_PROFILE_ITERATIONS")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        if std::env::var_os("KMUTATE_PROFILE_REBUILD").is_some() {
            let inputs = rebuild_inputs(10_000);
            for _ in 0..n {
                black_box(rebuild(&inputs));
            }
            return;
        }
        let non_matching = std::env::var("KMUTATE_PROFILE_NON_MATCHING")
            .ok()
            .and_then(|n| n.parse::<usize>().ok());
        let (engine, mut body) = if std::env::var_os("KMUTATE_PROFILE_EXAMPLES").is_some() {
            examples()
        } else if let Some(count) = non_matching {
            fixture_with_non_matching(count)
        } else {
            fixture()
        };
        if std::env::var_os("KMUTATE_PROFILE_ALREADY_MUTATED").is_some() {
            body = already_mutated(&engine, &body);
        } else if std::env::var_os("KMUTATE_PROFILE_UNMATCHED_UPDATE").is_some() {
            body = unmatched_update();
        }
        let attributed = std::env::var_os("KMUTATE_PROFILE_ATTRIBUTED").is_some();
        for _ in 0..n {
            black_box(serve_one_as(&engine, black_box(&body), attributed));
        }
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

/// Attribution's cost on the fixture and on the example policies, each
/// measured in `rounds` rounds of a batch of requests without it and a
/// batch with it, in alternating order: both see the same state of the
/// machine (a shared 2-core VM whose speed drifts by more than the cost
/// from one run to the next). Prints the median time per request of each
/// and the median of the rounds' ratios.
fn attribution_rounds(rounds: usize) {
    const BATCH: usize = 200;
    for (name, (engine, body)) in [("fixture", fixture()), ("examples", examples())] {
        let batch = |attributed: bool| {
            let started = std::time::Instant::now();
            for _ in 0..BATCH {
                black_box(serve_one_as(&engine, black_box(&body), attributed));
            }
            started.elapsed().as_secs_f64() / BATCH as f64 * 1e6
        };
        batch(false);
        batch(true);
        let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (a, b) = match round % 2 {
                0 => (batch(false), batch(true)),
                _ => {
                    let b = batch(true);
                    (batch(false), b)
                }
            };
            off.push(a);
            on.push(b);
            ratios.push(b / a);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{name}: {:.1} µs without attribution, {:.1} µs with it (medians of {rounds} rounds of {BATCH}); median ratio {:.4}",
            median(&mut off),
            median(&mut on),
            median(&mut ratios)
        );
    }
}
