//! The file source: the `--policies`, `--bindings` and `--resources` files
//! and folders, scanned for changes.
//!
//! A scan compares each file's modification time and size with the last
//! read; a changed file is read (and its policies compiled) again on its
//! own. When the operating system reports a change (inotify, kqueue, ...
//! through the `notify` crate), only the paths it names are scanned, so
//! that an edit among tens of thousands of files is served within
//! milliseconds; the folders are also scanned whole every [`POLL_INTERVAL`]
//! (or twenty times as long as the last whole scan took, when that is
//! longer), for what events miss (network file systems, a folder created
//! after start, an overflowing event queue). When the new version of a file fails to parse,
//! holds an invalid document or a policy whose expressions do not compile,
//! the last good version of that file stays in force and the problems are
//! logged (file, document, policy) and counted in
//! `kmutate_policy_load_errors`; a file that was never good loads what it
//! can, as at start.

use super::{PolicyInputs, Snapshot, Source};
use crate::api::load::{collect_files, has_document_extension, path_order_key, Loaded};
use crate::api::Binding;
use crate::cel::CelEnvironment;
use crate::dispatch::{compile_policies, CompiledPolicy};
use crate::engine::EngineSources;
use crate::parallel::map_in_order;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Notify;

/// How often the folders are scanned whole, at least.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// A whole scan runs at most once in this many times its own duration, so
/// that polling tens of thousands of files stays a small part of a core.
const POLL_COST_FACTOR: u32 = 20;

/// Files read on one thread before a scan reads on several.
const READS_PER_THREAD_AT_LEAST: usize = 16;

/// What a file is read for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Role {
    /// Policies and bindings (`--policies`, `--bindings`).
    Policies,
    /// Cluster objects (`--resources`).
    Resources,
}

/// A file's place in the state: its role and [`path_order_key`].
type FileKey = (Role, Vec<u8>);

/// What tells that a file changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

/// What one version of a file holds, its policies compiled.
#[derive(Debug, Default)]
struct FileContents {
    policies: Vec<Arc<CompiledPolicy>>,
    bindings: Vec<Binding>,
    resources: Vec<Arc<Value>>,
    /// Problems reading it (not compiling it: those stay with each policy).
    errors: Vec<String>,
}

/// One file's state.
#[derive(Debug)]
struct FileEntry {
    stamp: Stamp,
    /// The version in force.
    good: FileContents,
    /// Problems of the latest read (empty when it is the version in force).
    problems: Vec<String>,
}

/// A file found by a scan.
struct Found {
    key: FileKey,
    path: PathBuf,
    stamp: Stamp,
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<FileKey, FileEntry>,
    /// Roots that could not be listed.
    root_problems: Vec<String>,
    snapshot: Option<Snapshot>,
}

/// Paths the file events named since the last scan.
#[derive(Debug, Default)]
struct Touched {
    paths: Vec<PathBuf>,
    /// An event named no path or asked for a rescan: scan everything.
    everything: bool,
}

/// Policy and resource files, re-read when they change.
#[derive(Debug)]
pub struct FileSource {
    roots: Vec<(Role, PathBuf)>,
    /// Each root made absolute (against the working folder), as file
    /// events name the paths under a root given relative.
    absolute_roots: Vec<PathBuf>,
    state: Mutex<State>,
    touched: Arc<Mutex<Touched>>,
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
            .collect::<Vec<(Role, PathBuf)>>();
        let absolute_roots = roots
            .iter()
            .map(|(_, root)| std::path::absolute(root).unwrap_or_else(|_| root.clone()))
            .collect();
        FileSource {
            roots,
            absolute_roots,
            state: Mutex::new(State::default()),
            touched: Arc::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the files that changed since the last scan (all of them the
    /// first time); true when the snapshot changed.
    pub fn scan(&self) -> bool {
        let mut found: BTreeMap<FileKey, Found> = BTreeMap::new();
        let mut root_problems = Vec::new();
        for (role, root) in &self.roots {
            match collect_files(root) {
                Ok(files) => {
                    for f in files {
                        add_found(&mut found, *role, f);
                    }
                }
                Err(e) => root_problems.push(e.to_string()),
            }
        }
        let mut state = self.state();
        let mut changed = state.snapshot.is_none() || root_problems != state.root_problems;
        if changed && !root_problems.is_empty() {
            for p in &root_problems {
                tracing::warn!(problem = %p, "policy folder unreadable");
            }
        }
        state.root_problems = root_problems;
        let before = state.files.len();
        state.files.retain(|key, _| found.contains_key(key));
        changed |= state.files.len() != before;
        changed |= read_changed(&mut state, found.into_values());
        if changed {
            state.snapshot = Some(snapshot_of(&state));
        }
        changed
    }

    /// Scans only `paths` (files or folders, present or gone) as file
    /// events named them; true when the snapshot changed. A path outside
    /// every root scans everything.
    fn scan_paths(&self, paths: &[PathBuf]) -> bool {
        let mut found: BTreeMap<FileKey, Found> = BTreeMap::new();
        // (role, path) of each scanned path: what is under it and not found is gone.
        let mut scanned: Vec<(Role, PathBuf)> = Vec::new();
        for path in paths {
            // The path as a listing of each root that holds it names it.
            let roles: Vec<(Role, &PathBuf, PathBuf)> = self
                .roots
                .iter()
                .zip(&self.absolute_roots)
                .filter_map(|((role, root), absolute)| {
                    if path.starts_with(root) {
                        Some((*role, root, path.clone()))
                    } else {
                        let rest = path.strip_prefix(absolute).ok()?;
                        Some((*role, root, root.join(rest)))
                    }
                })
                .collect();
            if roles.is_empty() {
                return self.scan();
            }
            for (role, root, path) in roles {
                if is_listed(root, &path) {
                    if let Ok(files) = collect_files(&path) {
                        for f in files {
                            add_found(&mut found, role, f);
                        }
                    }
                }
                scanned.push((role, path));
            }
        }
        let mut state = self.state();
        if state.snapshot.is_none() {
            drop(state);
            return self.scan();
        }
        // The files under a scanned path are one range of keys: its own
        // key, and those that continue it with a separator (0). A retain
        // over every file, comparing paths, cost 80 ms with 20,000.
        let mut gone: Vec<FileKey> = Vec::new();
        for (role, p) in &scanned {
            let start = (*role, path_order_key(p));
            let mut end = start.clone();
            end.1.push(1);
            gone.extend(
                state
                    .files
                    .range(start..end)
                    .map(|(key, _)| key)
                    .filter(|key| !found.contains_key(*key))
                    .cloned(),
            );
        }
        let mut changed = !gone.is_empty();
        for key in gone {
            state.files.remove(&key);
        }
        changed |= read_changed(&mut state, found.into_values());
        if changed {
            let started = Instant::now();
            state.snapshot = Some(snapshot_of(&state));
            tracing::debug!(
                took_us = started.elapsed().as_micros() as u64,
                "snapshot of the policy files taken"
            );
        }
        changed
    }

    /// Scans the paths file events named, or everything when an event
    /// asked for it; true when the snapshot changed.
    fn scan_touched(&self) -> bool {
        let touched = std::mem::take(&mut *self.touched.lock().unwrap_or_else(|e| e.into_inner()));
        if touched.everything {
            self.scan()
        } else if touched.paths.is_empty() {
            false
        } else {
            self.scan_paths(&touched.paths)
        }
    }

    /// Scans on every file event (the paths it names) and every
    /// [`POLL_INTERVAL`] or more (everything), poking `changed` when
    /// something changed, forever (the task is aborted at shutdown).
    pub async fn watch(self: Arc<Self>, interval: Duration, changed: Arc<Notify>) {
        let touched = Arc::new(Notify::new());
        // Dropping the watcher ends its events: it lives as long as the loop.
        let _watcher = self.file_events(touched.clone());
        let mut next_whole = tokio::time::Instant::now() + interval;
        loop {
            let whole = tokio::select! {
                () = tokio::time::sleep_until(next_whole) => true,
                () = touched.notified() => false,
            };
            let me = self.clone();
            let scanned = tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let changed = if whole { me.scan() } else { me.scan_touched() };
                (changed, started.elapsed())
            })
            .await;
            let Ok((scan_changed, took)) = scanned else {
                continue;
            };
            tracing::debug!(
                whole,
                changed = scan_changed,
                took_us = took.as_micros() as u64,
                "policy folders scanned"
            );
            if whole {
                next_whole = tokio::time::Instant::now() + interval.max(took * POLL_COST_FACTOR);
            }
            if scan_changed {
                changed.notify_one();
            }
        }
    }
}

/// Adds `path` (a file found for `role`) to `found`, with its stamp.
fn add_found(found: &mut BTreeMap<FileKey, Found>, role: Role, path: PathBuf) {
    if let Some(stamp) = stamp(&path) {
        let key = (role, path_order_key(&path));
        found.insert(key.clone(), Found { key, path, stamp });
    }
}

/// Whether `path`, under `root`, is among the files a listing of `root`
/// gives (or a folder that may hold some): no hidden component, and a
/// document extension for a file. Editors' swap and backup files are not.
fn is_listed(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root) else {
        return false;
    };
    if rest.as_os_str().is_empty() {
        return true;
    }
    let hidden = rest
        .components()
        .any(|c| c.as_os_str().to_string_lossy().starts_with('.'));
    !hidden && (path.is_dir() || has_document_extension(path))
}

/// Reads (several at once when there are many) the files of `found` whose
/// stamp differs from the state's, and puts them in; true when any was.
fn read_changed(state: &mut State, found: impl Iterator<Item = Found>) -> bool {
    let mut reads: Vec<(Found, Option<FileEntry>)> = Vec::new();
    for f in found {
        if state.files.get(&f.key).is_some_and(|e| e.stamp == f.stamp) {
            continue;
        }
        let previous = state.files.remove(&f.key);
        reads.push((f, previous));
    }
    if reads.is_empty() {
        return false;
    }
    tracing::debug!(files = reads.len(), "reading changed policy files");
    let entries = map_in_order(reads, READS_PER_THREAD_AT_LEAST, |(f, previous)| {
        let role = f.key.0;
        (f.key, read_file(f.path, role, f.stamp, previous))
    });
    state.files.extend(entries);
    true
}

impl FileSource {
    /// Watches the roots for file events, poking `touched` on each; `None`
    /// (logged) where the platform has no events, and polling alone finds
    /// changes.
    fn file_events(&self, touched: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
        use notify::Watcher;
        let paths = self.touched.clone();
        let handler = move |event: notify::Result<notify::Event>| {
            let mut noted = paths.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                Ok(e) if e.need_rescan() || (e.paths.is_empty() && completes_a_change(&e.kind)) => {
                    noted.everything = true;
                }
                Ok(e) if completes_a_change(&e.kind) => noted.paths.extend(e.paths),
                Ok(_) => return,
                // Events were lost: only a whole scan finds what they said.
                Err(_) => noted.everything = true,
            }
            drop(noted);
            touched.notify_one();
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

/// Reads one file and compiles its policies; when it is broken and a good
/// version was in force, that version stays.
fn read_file(path: PathBuf, role: Role, stamp: Stamp, previous: Option<FileEntry>) -> FileEntry {
    let mut loaded = Loaded::default();
    loaded.add_file(&path);
    if role == Role::Resources {
        // Policies in a resources file are not served, as at start.
        loaded.policies.clear();
        loaded.bindings.clear();
    }
    let mut problems: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
    let sources: Vec<String> = loaded
        .policies
        .iter()
        .map(|p| p.source.to_string())
        .collect();
    let policies: Vec<Arc<CompiledPolicy>> = compile_policies(
        &CelEnvironment::shared(),
        std::mem::take(&mut loaded.policies),
    )
    .into_iter()
    .map(|(c, _)| Arc::new(c))
    .collect();
    let was_good = previous.as_ref().is_some_and(|p| p.problems.is_empty());
    let file = path.display().to_string();
    match previous {
        // A file never good loads what it can: the engine reports the
        // compile errors of its policies with the rest.
        Some(previous)
            if !problems.is_empty() || policies.iter().any(|c| !c.compile_errors().is_empty()) =>
        {
            problems.extend(policies.iter().zip(&sources).flat_map(|(c, source)| {
                c.compile_errors()
                    .iter()
                    .map(move |e| format!("{source}: {e}"))
            }));
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
                tracing::info!(file = %file, policies = policies.len(),
                    bindings = loaded.bindings.len(), objects = loaded.resources.len(),
                    "file changed: reloaded");
            }
            FileEntry {
                stamp,
                good: FileContents {
                    policies,
                    bindings: loaded.bindings,
                    resources: loaded.resources.into_iter().map(Arc::new).collect(),
                    errors: loaded.errors.iter().map(ToString::to_string).collect(),
                },
                problems: Vec::new(),
            }
        }
    }
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
        inputs.problems.extend(entry.good.errors.iter().cloned());
        inputs.problems.extend(entry.problems.iter().cloned());
        objects.extend(entry.good.resources.iter().cloned());
    }
    Snapshot {
        policies: Arc::new(inputs),
        objects,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder for one test.
    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kmutate-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_policy(path: &Path, name: &str, value: &str) {
        let text = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicy\n\
             metadata: {{name: {name}}}\nspec:\n  matchConstraints:\n    resourceRules:\n\
             \x20   - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}\n\
             \x20 mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n\
             \x20     expression: \"Object{{metadata: Object.metadata{{labels: {{'v': '{value}'}}}}}}\"\n"
        );
        std::fs::write(path, text).unwrap();
    }

    /// (name, label value) of each policy served, in order.
    fn served(source: &FileSource) -> Vec<(String, String)> {
        let snapshot = source.snapshot().expect("scanned");
        snapshot
            .policies
            .policies
            .iter()
            .map(|c| {
                let value = c.policy.mutations[0]
                    .expression
                    .split("'v': '")
                    .nth(1)
                    .and_then(|rest| rest.split('\'').next())
                    .unwrap_or_default()
                    .to_string();
                (c.policy.name.clone(), value)
            })
            .collect()
    }

    fn source_of(dir: &Path) -> FileSource {
        FileSource::new(&EngineSources {
            policies: vec![dir.to_path_buf()],
            ..EngineSources::default()
        })
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn only_the_paths_an_event_names_are_read_again() {
        let dir = folder("named");
        let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
        write_policy(&a, "a", "1");
        write_policy(&b, "b", "1");
        let source = source_of(&dir);
        assert!(source.scan());
        assert_eq!(served(&source), pairs(&[("a", "1"), ("b", "1")]));

        // Both change (a different length, so the stamp differs however
        // coarse the clock), but an event named only a.
        write_policy(&a, "a", "22");
        write_policy(&b, "b", "22");
        assert!(source.scan_paths(std::slice::from_ref(&a)));
        assert_eq!(served(&source), pairs(&[("a", "22"), ("b", "1")]));
        // The whole scan finds the other.
        assert!(source.scan());
        assert_eq!(served(&source), pairs(&[("a", "22"), ("b", "22")]));
        assert!(!source.scan(), "nothing changed since");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_root_given_relative_reads_only_the_absolute_path_an_event_names() {
        // Events name absolute paths; the root is relative to the working
        // folder (the crate's, under cargo test).
        let relative = PathBuf::from(format!(
            "target/kmutate-files-relative-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&relative);
        std::fs::create_dir_all(&relative).unwrap();
        let (a, b) = (relative.join("a.yaml"), relative.join("b.yaml"));
        write_policy(&a, "a", "1");
        write_policy(&b, "b", "1");
        let source = source_of(&relative);
        assert!(source.scan());
        write_policy(&a, "a", "22");
        write_policy(&b, "b", "22");
        let event_path = std::path::absolute(&a).unwrap();
        assert!(source.scan_paths(&[event_path]));
        // Had the path matched no root, everything would have been read.
        assert_eq!(served(&source), pairs(&[("a", "22"), ("b", "1")]));
        std::fs::remove_file(&a).unwrap();
        assert!(source.scan_paths(&[std::path::absolute(&a).unwrap()]));
        assert_eq!(served(&source), pairs(&[("b", "1")]));
        let _ = std::fs::remove_dir_all(&relative);
    }

    #[test]
    fn a_named_folder_is_listed_again_and_hidden_or_other_files_are_not_read() {
        let dir = folder("listed");
        let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
        write_policy(&a, "a", "1");
        write_policy(&b, "b", "1");
        let source = source_of(&dir);
        source.scan();
        std::fs::remove_file(&a).unwrap();
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        write_policy(&dir.join("sub/c.yaml"), "c", "1");
        // An editor's swap file and a file of another kind are not policies.
        write_policy(&dir.join(".b.yaml.swp"), "swap", "1");
        write_policy(&dir.join("notes.txt"), "notes", "1");
        assert!(!source.scan_paths(&[dir.join(".b.yaml.swp"), dir.join("notes.txt")]));
        assert!(source.scan_paths(&[dir.join("sub"), a.clone()]));
        assert_eq!(served(&source), pairs(&[("b", "1"), ("c", "1")]));
        // A removed folder takes its files with it.
        std::fs::remove_dir_all(dir.join("sub")).unwrap();
        assert!(source.scan_paths(&[dir.join("sub")]));
        assert_eq!(served(&source), pairs(&[("b", "1")]));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_path_outside_every_root_scans_everything() {
        let dir = folder("outside");
        let a = dir.join("a.yaml");
        write_policy(&a, "a", "1");
        let source = source_of(&dir);
        source.scan();
        write_policy(&a, "a", "22");
        assert!(source.scan_paths(&[PathBuf::from("/elsewhere/x.yaml")]));
        assert_eq!(served(&source), pairs(&[("a", "22")]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
