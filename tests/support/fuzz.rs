//! The structure-aware fuzzer of `tests/fuzz_reviews.rs`: seeds, mutations
//! of JSON trees and YAML text, and the server's steps run on each input
//! with every panic counted (caught or not).

use kmutate::api::load::{parse_documents, Loaded};
use kmutate::authorizer::AlwaysDeny;
use kmutate::dispatch::NoObserver;
use kmutate::engine::{CompiledPolicies, Engine, EngineSources};
use kmutate::matching::complete_request;
use kmutate::mutation::diff::Snapshot;
use kmutate::webhook::reinvocation::{Answered, ReinvocationMemory};
use kmutate::webhook::review::{self, Answer, DecodedBody};
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

/// splitmix64: small, deterministic, fast.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// One panic: what the input was and what the panic said.
#[derive(Clone, Debug)]
pub struct Finding {
    pub target: &'static str,
    pub message: String,
    pub input: Vec<u8>,
}

/// What a run found.
pub struct Report {
    pub inputs: u64,
    pub by_target: Vec<(&'static str, u64)>,
    pub panics: u64,
    pub findings: Vec<Finding>,
    pub elapsed: Duration,
}

impl Report {
    /// Prints the figures and fails with the first findings if any input
    /// panicked (they are written under `target/fuzz-findings/`).
    pub fn assert_clean(&self) {
        let per_second = self.inputs as f64 / self.elapsed.as_secs_f64().max(1e-9);
        let targets: Vec<String> = self
            .by_target
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        println!(
            "fuzz: {} inputs in {:.1} s ({per_second:.0}/s; {}), {} panics",
            self.inputs,
            self.elapsed.as_secs_f64(),
            targets.join(", "),
            self.panics
        );
        if self.panics == 0 {
            return;
        }
        // The counting hook stays silent; this panic is the test's report.
        drop(std::panic::take_hook());
        let dir = findings_dir();
        let _ = std::fs::create_dir_all(&dir);
        let mut shown = String::new();
        for (i, f) in self.findings.iter().enumerate() {
            let base = dir.join(format!("{}-{i}", f.target));
            let _ = std::fs::write(base.with_extension("input"), &f.input);
            let _ = std::fs::write(base.with_extension("panic"), &f.message);
            if i < 5 {
                let input = String::from_utf8_lossy(&f.input);
                let input: String = input.chars().take(600).collect();
                shown.push_str(&format!(
                    "\n[{}] {}\n  input: {input}\n",
                    f.target, f.message
                ));
            }
        }
        panic!(
            "{} of {} inputs panicked (inputs in {}):{shown}",
            self.panics,
            self.inputs,
            dir.display()
        );
    }
}

fn findings_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("fuzz-findings")
}

/// Panics seen by the hook, in every thread, caught or not.
static PANICS: AtomicU64 = AtomicU64::new(0);
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);
static HOOK: Once = Once::new();

fn install_panic_counter() {
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let payload = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(format!("{location}: {payload}"));
        }));
    });
}

/// What the fuzzer feeds and what it feeds it to.
pub struct FuzzRun {
    seed: u64,
    threads: usize,
    corpus: Arc<Corpus>,
}

/// Seeds and engines, shared by the threads.
struct Corpus {
    /// Engines the reviews run on: the library of `policies/` and the
    /// webhook benchmark's fixture.
    engines: Vec<Engine>,
    /// Valid AdmissionReviews.
    reviews: Vec<Value>,
    /// Objects of other kinds, for old objects and swapped subtrees.
    objects: Vec<Value>,
    /// Policy and binding documents, as JSON, and their files' text.
    documents: Vec<Value>,
    yaml_texts: Vec<String>,
}

const TARGETS: [&str; 4] = ["review", "reinvocation", "policies", "yaml"];

impl FuzzRun {
    /// A run from `seed` on `threads` threads.
    pub fn new(seed: u64, threads: usize) -> FuzzRun {
        install_panic_counter();
        FuzzRun {
            seed,
            threads: threads.max(1),
            corpus: Arc::new(Corpus::load()),
        }
    }

    /// Runs until `inputs` inputs (all threads together) or `limit`.
    pub fn run(&self, inputs: Option<u64>, limit: Duration) -> Report {
        let started = Instant::now();
        let done = Arc::new(AtomicU64::new(0));
        let per_target: Arc<Vec<AtomicU64>> =
            Arc::new(TARGETS.iter().map(|_| AtomicU64::new(0)).collect());
        let findings = Arc::new(Mutex::new(Vec::new()));
        let panics_before = PANICS.load(Ordering::SeqCst);
        let recorded = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for t in 0..self.threads {
                let corpus = self.corpus.clone();
                let done = done.clone();
                let per_target = per_target.clone();
                let findings = findings.clone();
                let recorded = recorded.clone();
                let mut rng = Rng::new(self.seed ^ (t as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
                std::thread::Builder::new()
                    .stack_size(256 << 20)
                    .spawn_scoped(scope, move || {
                        let memory = ReinvocationMemory::default();
                        let scratch = scratch_file(t);
                        loop {
                            if started.elapsed() >= limit {
                                break;
                            }
                            if let Some(n) = inputs {
                                if done.fetch_add(1, Ordering::SeqCst) >= n {
                                    break;
                                }
                            } else {
                                done.fetch_add(1, Ordering::SeqCst);
                            }
                            let target = pick_target(&mut rng);
                            let before = PANICS.load(Ordering::SeqCst);
                            let input = corpus.one(&mut rng, target, &memory, &scratch);
                            per_target[target].fetch_add(1, Ordering::Relaxed);
                            if PANICS.load(Ordering::SeqCst) != before
                                && recorded.fetch_add(1, Ordering::SeqCst) < 50
                            {
                                let message = LAST_PANIC
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .clone()
                                    .unwrap_or_default();
                                findings.lock().unwrap().push(Finding {
                                    target: TARGETS[target],
                                    message,
                                    input,
                                });
                            }
                        }
                    })
                    .expect("a fuzzing thread");
            }
        });
        let _ = std::fs::remove_dir_all(scratch_dir());
        let mut total = done.load(Ordering::SeqCst);
        if let Some(n) = inputs {
            total = total.min(n);
        }
        let by_target = TARGETS
            .iter()
            .zip(per_target.iter())
            .map(|(t, n)| (*t, n.load(Ordering::SeqCst)))
            .collect();
        let findings = findings.lock().unwrap().clone();
        Report {
            inputs: total,
            by_target,
            panics: PANICS.load(Ordering::SeqCst) - panics_before,
            findings,
            elapsed: started.elapsed(),
        }
    }
}

fn pick_target(rng: &mut Rng) -> usize {
    match rng.below(100) {
        0..=69 => 0,
        70..=84 => 1,
        85..=94 => 2,
        _ => 3,
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read_json(path: &str) -> Value {
    let text = std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn read_documents(dir: &str) -> (Vec<Value>, Vec<String>) {
    let mut docs = Vec::new();
    let mut texts = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if let Ok(found) = parse_documents(&text) {
            docs.extend(found);
        }
        texts.push(text);
    }
    (docs, texts)
}

impl Corpus {
    fn load() -> Corpus {
        let library = Engine::load(
            &EngineSources {
                policies: vec![repo().join("policies")],
                bindings: vec![repo().join("bindings")],
                resources: vec![
                    repo().join("examples/params"),
                    repo().join("examples/namespace.yaml"),
                ],
            },
            Box::new(AlwaysDeny),
        );
        let fixture = Engine::load(
            &EngineSources::under(&repo().join("bench/webhook")),
            Box::new(AlwaysDeny),
        );
        let mut reviews = vec![
            read_json("bench/webhook/review.json"),
            read_json("bench/webhook/examples-pod-review.json"),
            read_json("bench/webhook/update-review.json"),
        ];
        let mut objects = Vec::new();
        for example in [
            "examples/pod.yaml",
            "examples/deployment.yaml",
            "examples/namespace.yaml",
        ] {
            let text = std::fs::read_to_string(repo().join(example)).expect("an example");
            objects.extend(parse_documents(&text).expect("an example parses"));
        }
        for object in objects.clone() {
            reviews.push(review_of(object));
        }
        let mut documents = Vec::new();
        let mut yaml_texts = Vec::new();
        for dir in [
            "policies",
            "bindings",
            "bench/webhook/policies",
            "bench/webhook/bindings",
            "examples/params",
        ] {
            let (docs, texts) = read_documents(dir);
            documents.extend(docs);
            yaml_texts.extend(texts);
        }
        Corpus {
            engines: vec![library, fixture],
            reviews,
            objects,
            documents,
            yaml_texts,
        }
    }

    /// Feeds one input of `target` and returns it.
    fn one(
        &self,
        rng: &mut Rng,
        target: usize,
        memory: &ReinvocationMemory,
        scratch: &Path,
    ) -> Vec<u8> {
        match target {
            0 => {
                let body = self.mutated_review(rng);
                let engine = rng.pick(&self.engines);
                let _ = catch_unwind(AssertUnwindSafe(|| serve_steps(engine, &body, memory)));
                body
            }
            1 => self.reinvocation(rng, memory),
            2 => self.policies(rng, scratch),
            _ => self.yaml(rng, scratch),
        }
    }

    fn mutated_review(&self, rng: &mut Rng) -> Vec<u8> {
        let mut review = rng.pick(&self.reviews).clone();
        let donors: Vec<&Value> = self.objects.iter().chain(&self.reviews).collect();
        let changes = 1 + rng.below(4);
        for _ in 0..changes {
            if rng.chance(25) {
                disagree(rng, &mut review, &self.objects);
            } else {
                mutate_tree(rng, &mut review, &donors);
            }
        }
        encode(rng, &review)
    }

    /// A request, then one like it that the memory may take for its
    /// reinvocation: its answer with a change of the other plugins'.
    fn reinvocation(&self, rng: &mut Rng, memory: &ReinvocationMemory) -> Vec<u8> {
        let review = rng.pick(&self.reviews).clone();
        let engine = rng.pick(&self.engines);
        let body = serde_json::to_vec(&review).unwrap_or_default();
        let answered = catch_unwind(AssertUnwindSafe(|| serve_steps(engine, &body, memory)))
            .ok()
            .flatten();
        let mut second = review.clone();
        if let Some(object) = answered {
            second["request"]["object"] = object;
        }
        let donors: Vec<&Value> = self.objects.iter().collect();
        for _ in 0..1 + rng.below(3) {
            mutate_tree(rng, &mut second["request"]["object"], &donors);
        }
        let body = encode(rng, &second);
        let _ = catch_unwind(AssertUnwindSafe(|| serve_steps(engine, &body, memory)));
        body
    }

    /// Policy and binding documents mutated, loaded as the file source
    /// loads a file's documents, then one review run on them.
    fn policies(&self, rng: &mut Rng, scratch: &Path) -> Vec<u8> {
        let mut docs: Vec<Value> = (0..1 + rng.below(4))
            .map(|_| rng.pick(&self.documents).clone())
            .collect();
        let donors: Vec<&Value> = self.documents.iter().collect();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(docs.len());
            if rng.chance(30) {
                mutate_expression(rng, &mut docs[i]);
            } else {
                mutate_tree(rng, &mut docs[i], &donors);
            }
        }
        let text = docs
            .iter()
            .map(|d| serde_json::to_string(d).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n");
        let review = rng.pick(&self.reviews).clone();
        // The validating webhook's path (issue 47): a CREATE, or an UPDATE
        // of itself, where the stored-object allowance runs.
        let operation = if rng.below(2) == 0 {
            "CREATE"
        } else {
            "UPDATE"
        };
        let _ = catch_unwind(AssertUnwindSafe(|| {
            for doc in &docs {
                let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {"uid": "fuzz", "operation": operation, "object": doc, "oldObject": doc}});
                let _ = kmutate::webhook::validate::answer(
                    &serde_json::to_vec(&review).unwrap_or_default(),
                );
            }
            let loaded = load_as_file(scratch, &text);
            let (policies, bindings, resources) =
                (loaded.policies, loaded.bindings, loaded.resources);
            let compiled = CompiledPolicies::compile(policies, bindings, Vec::new());
            let engine = Engine::assemble(
                Arc::new(compiled),
                resources
                    .into_iter()
                    .chain(self.objects.iter().cloned())
                    .map(Arc::new),
                Arc::new(AlwaysDeny),
            );
            let body = serde_json::to_vec(&review).unwrap_or_default();
            serve_steps(&engine, &body, &ReinvocationMemory::default());
        }));
        text.into_bytes()
    }

    /// YAML text mutated as text, parsed as the file source parses a file.
    fn yaml(&self, rng: &mut Rng, scratch: &Path) -> Vec<u8> {
        let i = rng.below(self.yaml_texts.len());
        let text = mutate_text(rng, &self.yaml_texts[i]);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let loaded = load_as_file(scratch, &text);
            let _ = CompiledPolicies::compile(loaded.policies, loaded.bindings, Vec::new());
        }));
        text.into_bytes()
    }
}

/// A file of this thread's to write inputs to, read as the file source
/// reads a policy file.
fn scratch_file(thread: usize) -> PathBuf {
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir.join(format!("thread-{thread}.yaml"))
}

fn scratch_dir() -> PathBuf {
    findings_dir().join(format!("scratch-{}", std::process::id()))
}

/// `text` loaded as the file source loads a file ([`Loaded::add_file`]).
fn load_as_file(scratch: &Path, text: &str) -> Loaded {
    std::fs::write(scratch, text).expect("a scratch file");
    let mut loaded = Loaded::default();
    loaded.add_file(scratch);
    loaded
}

/// An AdmissionReview creating `object`, as kube-apiserver sends one.
fn review_of(object: Value) -> Value {
    let kind = object["kind"].as_str().unwrap_or("Pod").to_string();
    let api_version = object["apiVersion"].as_str().unwrap_or("v1").to_string();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version),
    };
    let resource = format!("{}s", kind.to_lowercase());
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("team-a")
        .to_string();
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-4000-8000-000000000001",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "name": object["metadata"]["name"].clone(),
            "namespace": if kind == "Namespace" { Value::Null } else { json!(namespace) },
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": object,
            "dryRun": false
        }
    })
}

/// The steps `kmutate serve` runs on a request body (`server.rs`'s
/// `mutate`, less the network): decoding, completing, matching, the
/// reinvocation memory, the admission, the patch and the encoded answer.
/// Returns the admitted object when it changed.
pub fn serve_steps(engine: &Engine, body: &[u8], memory: &ReinvocationMemory) -> Option<Value> {
    let decoded = review::decode_review(engine, body).ok()?;
    let mut review = match decoded {
        DecodedBody::Unmatched(review) => {
            let _ = review::encode(review.version, &review.request.uid, &Answer::allow());
            return None;
        }
        DecodedBody::Review(review) => review,
    };
    complete_request(&mut review.request, engine.resources());
    let prematch = engine.prematch(&review.request);
    if engine.matched(&prematch).is_empty() || review.request.object.is_none() {
        return None;
    }
    let (identity, as_sent) = memory.recognise(&mut review.request);
    let version = review.version;
    let uid = review.request.uid.clone();
    let (outcome, original) = engine.admit_prematched(
        review.request,
        Some(prematch),
        &NoObserver,
        kmutate::dispatch::ObjectOrigin::KubeApiserver,
    );
    match outcome {
        kmutate::dispatch::Outcome::Denied { message, code } => {
            let _ = review::encode(version, &uid, &Answer::deny(code, message));
            None
        }
        kmutate::dispatch::Outcome::Admitted {
            object, warnings, ..
        } => {
            let original = match &as_sent {
                Some(sent) => Some(Snapshot::of(sent)),
                None => original,
            };
            let answer = Answer::admit_from(original.as_ref(), &object, warnings);
            let _ = review::encode(version, &uid, &answer);
            if answer.patch.is_some() {
                memory.remember(
                    identity,
                    Answered::new(&object, None, answer.patch.as_deref()),
                );
                Some(object)
            } else {
                None
            }
        }
    }
}

/// Values of every JSON type, including the awkward ones.
fn random_value(rng: &mut Rng, donors: &[&Value]) -> Value {
    match rng.below(22) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(false),
        3 => json!(0),
        4 => json!(-1),
        5 => json!(i64::MAX),
        6 => json!(u64::MAX),
        7 => json!(1e308),
        8 => json!(-0.5),
        9 => json!(""),
        10 => json!("x".repeat(rng.below(3) * 40_000 + 1)),
        11 => json!(rng.pick(&STRINGS).to_string()),
        12 => json!([]),
        13 => json!({}),
        14 => json!([1, "a", null, {}, []]),
        15 => deep(rng.below(140)),
        16 => Value::Array((0..rng.below(5_000)).map(|i| json!(i)).collect()),
        17 => Value::Object(
            (0..rng.below(2_000))
                .map(|i| (format!("k{i}"), json!(i)))
                .collect(),
        ),
        18 => json!(2147483648_i64),
        19 => json!(-9223372036854775808_i64),
        _ => {
            let donor = rng.pick(donors);
            random_subtree(rng, donor).clone()
        }
    }
}

const STRINGS: [&str; 24] = [
    "v1",
    "apps/v1",
    "Pod",
    "Deployment",
    "CREATE",
    "UPDATE",
    "DELETE",
    "CONNECT",
    "pods",
    "status",
    "/",
    "a/b/c",
    "admission.k8s.io/v1beta1",
    "\u{0}",
    "\u{feff}",
    "ünïcødé",
    "1.5Gi",
    "100m",
    "2024-01-01T00:00:00Z",
    "-",
    "~0~1",
    "${x}",
    "{{ .x }}",
    "'\"\\",
];

fn deep(depth: usize) -> Value {
    let mut v = json!(1);
    for i in 0..depth {
        v = if i % 2 == 0 {
            json!([v])
        } else {
            json!({ "a": v })
        };
    }
    v
}

fn random_subtree<'a>(rng: &mut Rng, root: &'a Value) -> &'a Value {
    let mut at = root;
    loop {
        let children: Vec<&Value> = match at {
            Value::Object(m) => m.values().collect(),
            Value::Array(a) => a.iter().collect(),
            _ => return at,
        };
        if children.is_empty() || rng.chance(25) {
            return at;
        }
        at = children[rng.below(children.len())];
    }
}

/// A node of `root`, each level descended into three times in four.
fn random_node<'a>(rng: &mut Rng, at: &'a mut Value) -> &'a mut Value {
    let children = match &*at {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    };
    if children == 0 || !rng.chance(75) {
        return at;
    }
    let i = rng.below(children);
    match at {
        Value::Object(m) => random_node(
            rng,
            m.values_mut().nth(i).expect("an index below the length"),
        ),
        Value::Array(a) => random_node(rng, &mut a[i]),
        other => other,
    }
}

/// One change somewhere in `root`: a value replaced (by another type, a
/// donor's subtree, a huge or deep value), a member dropped, an item
/// duplicated or dropped.
fn mutate_tree(rng: &mut Rng, root: &mut Value, donors: &[&Value]) {
    let replacement = random_value(rng, donors);
    let choice = rng.below(10);
    let at = random_node(rng, root);
    match (choice, &mut *at) {
        (0..=1, Value::Object(m)) if !m.is_empty() => {
            let key = m
                .keys()
                .nth(rng.below(m.len()))
                .cloned()
                .unwrap_or_default();
            m.remove(&key);
        }
        (2, Value::Object(m)) => {
            let key = rng.pick(&KEYS).to_string();
            m.insert(key, replacement);
        }
        (3, Value::Array(a)) if !a.is_empty() => {
            let i = rng.below(a.len());
            let item = a[i].clone();
            a.insert(i, item);
        }
        (4, Value::Array(a)) if !a.is_empty() => {
            a.remove(rng.below(a.len()));
        }
        _ => *at = replacement,
    }
}

const KEYS: [&str; 16] = [
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "status",
    "name",
    "namespace",
    "labels",
    "annotations",
    "containers",
    "object",
    "oldObject",
    "generateName",
    "resourceVersion",
    "managedFields",
    "finalizers",
];

/// A request whose parts disagree: kind, version, resource, operation or
/// sub-resource of another request, an old object of another kind.
fn disagree(rng: &mut Rng, review: &mut Value, objects: &[Value]) {
    let Some(request) = review.get_mut("request").and_then(Value::as_object_mut) else {
        return;
    };
    let kinds = [
        json!({"group": "", "version": "v1", "kind": "Pod"}),
        json!({"group": "apps", "version": "v1", "kind": "Deployment"}),
        json!({"group": "apps", "version": "v1beta1", "kind": "Deployment"}),
        json!({"group": "", "version": "v1", "kind": "Namespace"}),
        json!({"group": "example.com", "version": "v9", "kind": "Widget"}),
        json!({"group": "", "version": "", "kind": ""}),
    ];
    let resources = [
        json!({"group": "", "version": "v1", "resource": "pods"}),
        json!({"group": "apps", "version": "v1", "resource": "deployments"}),
        json!({"group": "", "version": "v2", "resource": "pods"}),
        json!({"group": "", "version": "v1", "resource": "namespaces"}),
        json!({"group": "example.com", "version": "v9", "resource": "widgets"}),
    ];
    match rng.below(9) {
        0 => {
            request.insert("kind".into(), rng.pick(&kinds).clone());
        }
        1 => {
            request.insert("resource".into(), rng.pick(&resources).clone());
        }
        2 => {
            request.insert("requestKind".into(), rng.pick(&kinds).clone());
            request.insert("requestResource".into(), rng.pick(&resources).clone());
        }
        3 => {
            let op = *rng.pick(&["CREATE", "UPDATE", "DELETE", "CONNECT", "", "create"]);
            request.insert("operation".into(), json!(op));
        }
        4 => {
            let sub = *rng.pick(&["status", "scale", "ephemeralcontainers", "binding", "a/b"]);
            request.insert("subResource".into(), json!(sub));
        }
        5 => {
            let old = rng.pick(objects).clone();
            request.insert("oldObject".into(), old);
            request.insert("operation".into(), json!("UPDATE"));
        }
        6 => {
            if let Some(object) = request.get_mut("object").and_then(Value::as_object_mut) {
                let version = *rng.pick(&["v1", "apps/v1", "apps/v1beta2", "v2", "", "/"]);
                object.insert("apiVersion".into(), json!(version));
            }
        }
        7 => {
            let namespace = *rng.pick(&["", "team-a", "shop", "kube-system", "missing"]);
            request.insert("namespace".into(), json!(namespace));
        }
        _ => {
            let object = rng.pick(objects).clone();
            request.insert("object".into(), object);
        }
    }
}

/// A CEL expression somewhere in a policy replaced or cut.
fn mutate_expression(rng: &mut Rng, doc: &mut Value) {
    let mut expressions: Vec<*mut String> = Vec::new();
    collect_expressions(doc, &mut expressions);
    if expressions.is_empty() {
        return;
    }
    let at = expressions[rng.below(expressions.len())];
    // SAFETY: each pointer is to a distinct string of `doc`, which is not
    // otherwise touched while this one is written.
    let text = unsafe { &mut *at };
    *text = match rng.below(6) {
        0 => {
            let cut = rng.below(text.len() + 1);
            text.char_indices()
                .take_while(|(i, _)| *i < cut)
                .map(|(_, c)| c)
                .collect()
        }
        1 => format!("{text}{}", rng.pick(&EXPRESSION_TAILS)),
        2 => rng.pick(&EXPRESSIONS).to_string(),
        3 => format!("({text}) + ({text})"),
        4 => format!("[{text}].map(x, x)"),
        _ => text.replace("object", "oldObject"),
    };
}

fn collect_expressions(v: &mut Value, out: &mut Vec<*mut String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                if let (true, Value::String(s)) = (k == "expression", &mut *child) {
                    out.push(s as *mut String);
                } else {
                    collect_expressions(child, out);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| collect_expressions(c, out)),
        _ => {}
    }
}

const EXPRESSION_TAILS: [&str; 8] = [
    ".x",
    "[0]",
    " + 1",
    "[?'a']",
    ".orValue(1)",
    ")",
    "?",
    " ? 1 : 2",
];

const EXPRESSIONS: [&str; 16] = [
    "object",
    "Object{}",
    "Object{spec: Object.spec{}}",
    "[JSONPatch{op: 'add', path: '/metadata/labels', value: {}}]",
    "[JSONPatch{op: 'remove', path: '/spec'}]",
    "[JSONPatch{op: 'replace', path: '', value: 1}]",
    "[JSONPatch{op: 'copy', from: '/x', path: '/y'}]",
    "[JSONPatch{op: 'add', path: '/spec/containers/-', value: object}]",
    "Object{metadata: Object.metadata{labels: {'a': 1}}}",
    "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'x'}, Object.spec.containers{name: 'x'}]}}",
    "object.spec.containers.map(c, c.image)",
    "variables.missing",
    "params.data",
    "1 / 0",
    "'a' * 2",
    "dyn(object).metadata.name.size() > 0 ? Object{} : Object{metadata: Object.metadata{name: 'b'}}",
];

/// JSON text of `value`, now and then with a duplicated member, cut short
/// or with a byte changed.
fn encode(rng: &mut Rng, value: &Value) -> Vec<u8> {
    let mut text = serde_json::to_vec(value).unwrap_or_default();
    match rng.below(20) {
        0 => {
            // A duplicated member: `{"a":1,...}` becomes `{"a":1,"a":1,...}`.
            if let Some(Value::Object(m)) = value.get("request") {
                if let Some((k, v)) = m.iter().nth(rng.below(m.len().max(1))) {
                    let member = format!("\"{}\":{},", k, v);
                    if let Some(at) = find(&text, b"\"request\":{") {
                        let at = at + b"\"request\":{".len();
                        text.splice(at..at, member.into_bytes());
                    }
                }
            }
        }
        1 if !text.is_empty() => {
            let cut = rng.below(text.len());
            text.truncate(cut);
        }
        2 if !text.is_empty() => {
            let i = rng.below(text.len());
            text[i] = rng.next() as u8;
        }
        _ => {}
    }
    text
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// YAML text changed as text: lines dropped, duplicated or re-indented,
/// YAML's own constructs (anchors, aliases, tags, merges, flow collections)
/// spliced in.
fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for _ in 0..1 + rng.below(4) {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let i = rng.below(lines.len());
        match rng.below(8) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let line = lines[i].clone();
                lines.insert(i, line);
            }
            2 => lines[i] = format!("  {}", lines[i]),
            3 => lines[i] = lines[i].trim_start().to_string(),
            4 => lines.insert(i, rng.pick(&YAML_SNIPPETS).to_string()),
            5 => {
                let line = &lines[i];
                let cut = rng.below(line.len() + 1);
                let cut = (0..=cut)
                    .rev()
                    .find(|c| line.is_char_boundary(*c))
                    .unwrap_or(0);
                lines[i] = line[..cut].to_string();
            }
            6 => lines[i] = format!("{}{}", lines[i], rng.pick(&YAML_SNIPPETS)),
            _ => lines.insert(i, "---".into()),
        }
    }
    lines.join("\n")
}

const YAML_SNIPPETS: [&str; 16] = [
    "a: &a [1, 2]",
    "b: *a",
    "<<: *a",
    "c: !!binary aGVsbG8=",
    "d: !custom x",
    "e: {f: [g, {h: i}]}",
    "? complex key\n: value",
    "j: |\n  block\n  text",
    "k: >-\n  folded",
    "l: 0x1F",
    "m: .inf",
    "n: ~",
    "- item",
    "%YAML 1.2",
    "o: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "p: \"\\u0000\\ud800\"",
];
