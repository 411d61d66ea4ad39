//! The file source: the `--policies`, `--bindings` and `--resources` files
//! and folders, scanned for changes.
//!
//! A scan lists the folders again and compares each file's modification
//! time and size with the last read; a changed file is read again on its
//! own. A scan runs as soon as the operating system reports a change under
//! a folder (inotify, kqueue, ... through the `notify` crate), so that an
//! edit is served within milliseconds, and every [`POLL_INTERVAL`] in any
//! case, for what events miss (network file systems, a folder created
//! after start). When the new version of a file fails to parse,
//! holds an invalid document or a policy whose expressions do not compile,
//! the last good version of that file stays in force and the problems are
//! logged (file, document, policy) and counted in
//! `kmutate_policy_load_errors`; a file that was never good loads what it
//! can, as at start.

use super::{PolicyInputs, Snapshot, Source};
use crate::api::load::{collect_files, Loaded};
use crate::cel::CelEnvironment;
use crate::dispatch::CompiledPolicy;
use crate::engine::EngineSources;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::Notify;

/// How often the folders are checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What a file is read for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    /// Policies and bindings (`--policies`, `--bindings`).
    Policies,
    /// Cluster objects (`--resources`).
    Resources,
}

/// What tells that a file changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

/// One file's state.
#[derive(Debug)]
struct FileEntry {
    stamp: Stamp,
    /// The version in force.
    good: Loaded,
    /// Problems of the latest read (empty when it is the version in force).
    problems: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<(Role, PathBuf), FileEntry>,
    /// Roots that could not be listed.
    root_problems: Vec<String>,
    snapshot: Option<Snapshot>,
}

/// Policy and resource files, re-read when they change.
#[derive(Debug)]
pub struct FileSource {
    roots: Vec<(Role, PathBuf)>,
    state: Mutex<State>,
}

impl FileSource {
    /// A source of the files and folders of `sources` (nothing is read yet).
    pub fn new(sources: &EngineSources) -> FileSource {
        let roots = sources
            .policies
            .iter()
            .chain(&sources.bindings)
            .map(|p| (Role::Policies, p.clone()))
            .chain(
                sources
                    .resources
                    .iter()
                    .map(|p| (Role::Resources, p.clone())),
            )
            .collect();
        FileSource {
            roots,
            state: Mutex::new(State::default()),
        }
    }

    /// Reads the files that changed since the last scan (all of them the
    /// first time); true when the snapshot changed.
    pub fn scan(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut present: BTreeMap<(Role, PathBuf), Stamp> = BTreeMap::new();
        let mut root_problems = Vec::new();
        for (role, root) in &self.roots {
            match collect_files(root) {
                Ok(files) => {
                    for f in files {
                        if let Some(stamp) = stamp(&f) {
                            present.insert((*role, f), stamp);
                        }
                    }
                }
                Err(e) => root_problems.push(e.to_string()),
            }
        }
        let mut changed = state.snapshot.is_none() || root_problems != state.root_problems;
        if changed && !root_problems.is_empty() {
            for p in &root_problems {
                tracing::warn!(problem = %p, "policy folder unreadable");
            }
        }
        state.root_problems = root_problems;
        let before = state.files.len();
        state.files.retain(|key, _| present.contains_key(key));
        if state.files.len() != before {
            changed = true;
        }
        for (key, stamp) in present {
            if state.files.get(&key).is_some_and(|e| e.stamp == stamp) {
                continue;
            }
            changed = true;
            let previous = state.files.remove(&key);
            let entry = read_file(&key.1, key.0, stamp, previous);
            state.files.insert(key, entry);
        }
        if changed {
            state.snapshot = Some(snapshot_of(&state));
        }
        changed
    }

    /// Scans on every file event and every `interval`, poking `changed`
    /// when something changed, forever (the task is aborted at shutdown).
    pub async fn watch(self: Arc<Self>, interval: Duration, changed: Arc<Notify>) {
        let touched = Arc::new(Notify::new());
        // Dropping the watcher ends its events: it lives as long as the loop.
        let _watcher = self.file_events(touched.clone());
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = touched.notified() => {}
            }
            let me = self.clone();
            if let Ok(true) = tokio::task::spawn_blocking(move || me.scan()).await {
                changed.notify_one();
            }
        }
    }
}

impl FileSource {
    /// Watches the roots for file events, poking `touched` on each; `None`
    /// (logged) where the platform has no events, and polling alone finds
    /// changes.
    fn file_events(&self, touched: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher;
        let handler = move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| completes_a_change(&e.kind)) {
                touched.notify_one();
            }
        };
        let mut watcher = notify::recommended_watcher(handler)
            .map_err(|e| tracing::warn!(error = %e, "no file events; policy folders are polled"))
            .ok()?;
        for (_, root) in &self.roots {
            if let Err(e) = watcher.watch(root, notify::RecursiveMode::Recursive) {
                tracing::debug!(path = %root.display(), error = %e,
                    "no file events for this path; it is polled");
            }
        }
        Some(watcher)
    }
}

/// Whether a file event leaves a file (or folder) whole: created, removed,
/// renamed, or closed after writing. A write itself does not: a file
/// rewritten in place is read once it is closed, not truncated halfway.
/// Reads, ours included, change nothing.
fn completes_a_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, ModifyKind};
    use notify::EventKind;
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(ModifyKind::Data(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
    }
}

impl Source for FileSource {
    fn snapshot(&self) -> Option<Snapshot> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .snapshot
            .clone()
    }
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Reads one file; when it is broken and a good version was in force, that
/// version stays.
fn read_file(path: &Path, role: Role, stamp: Stamp, previous: Option<FileEntry>) -> FileEntry {
    let mut loaded = Loaded::default();
    loaded.add_file(path);
    if role == Role::Resources {
        // Policies in a resources file are not served, as at start.
        loaded.policies.clear();
        loaded.bindings.clear();
    }
    let mut problems: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
    // Only a file with a version to fall back on is compiled here; at the
    // first read the engine's compile reports the problems.
    let compile_problems = if previous.is_some() {
        compile_problems(&loaded)
    } else {
        Vec::new()
    };
    let was_good = previous.as_ref().is_some_and(|p| p.problems.is_empty());
    let file = path.display();
    match previous {
        Some(previous) if !problems.is_empty() || !compile_problems.is_empty() => {
            problems.extend(compile_problems);
            for p in &problems {
                tracing::warn!(file = %file, problem = %p,
                    "policy file is broken; its last good version stays in force");
            }
            problems.push(format!(
                "{file}: broken; the version read {} stays in force",
                if was_good { "before" } else { "first" }
            ));
            FileEntry {
                stamp,
                good: previous.good,
                problems,
            }
        }
        previous => {
            if previous.is_some() {
                tracing::info!(file = %file, policies = loaded.policies.len(),
                    bindings = loaded.bindings.len(), objects = loaded.resources.len(),
                    "file changed: reloaded");
            }
            // Problems of a file never good are reported by the engine's load.
            FileEntry {
                stamp,
                good: loaded,
                problems: Vec::new(),
            }
        }
    }
}

/// The compile errors of a file's policies, each with the file and document.
fn compile_problems(loaded: &Loaded) -> Vec<String> {
    if loaded.policies.is_empty() {
        return Vec::new();
    }
    let env = CelEnvironment::shared();
    loaded
        .policies
        .iter()
        .flat_map(|p| {
            let (_, errors) = CompiledPolicy::compile(&env, p.clone());
            errors
                .into_iter()
                .map(|e| format!("{}: {e}", p.source))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn snapshot_of(state: &State) -> Snapshot {
    let mut inputs = PolicyInputs {
        problems: state.root_problems.clone(),
        ..PolicyInputs::default()
    };
    let mut objects: Vec<Arc<Value>> = Vec::new();
    for entry in state.files.values() {
        inputs.policies.extend(entry.good.policies.iter().cloned());
        inputs.bindings.extend(entry.good.bindings.iter().cloned());
        inputs
            .problems
            .extend(entry.good.errors.iter().map(ToString::to_string));
        inputs.problems.extend(entry.problems.iter().cloned());
        objects.extend(entry.good.resources.iter().cloned().map(Arc::new));
    }
    Snapshot {
        policies: Arc::new(inputs),
        objects,
    }
}
