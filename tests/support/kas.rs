//! A real kube-apiserver v1.36.2 with etcd, from `../shared/upstream`
//! (`kube-apiserver.sh`), for the end-to-end tests against upstream.
//!
//! The binaries are unpacked once under the target directory and shared by
//! every test's apiserver; each apiserver keeps its state in a folder of
//! its own and is stopped when its [`Kas`] is dropped. Where
//! `../shared/upstream` is absent (a fresh clone on its own) a test is
//! skipped with a message, unless `KMUTATE_REQUIRE_UPSTREAM` is set, as
//! `.ci/run` sets it, when its absence fails the test.

#![allow(dead_code)]

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::Client;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The field manager of the objects the tests apply.
pub const MANAGER: &str = "kmutate-test";

/// The folder of upstream's programs, if it is there.
pub fn upstream_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/upstream");
    dir.join("kube-apiserver.sh").is_file().then_some(dir)
}

/// `None` (after saying why) when upstream is absent and not required.
fn upstream_or_skip(test: &str) -> Option<PathBuf> {
    match upstream_dir() {
        Some(d) => Some(d),
        None if std::env::var_os("KMUTATE_REQUIRE_UPSTREAM").is_some() => {
            panic!("{test}: ../shared/upstream is absent and KMUTATE_REQUIRE_UPSTREAM is set")
        }
        None => {
            eprintln!("skipped {test}: ../shared/upstream (the real kube-apiserver) is absent");
            None
        }
    }
}

/// The unpacked binaries, shared by every apiserver of the run.
fn unpacked_binaries(upstream: &Path) -> PathBuf {
    // One unpacking at a time within a test binary; across binaries the
    // unique partial names and the rename keep it whole.
    static UNPACKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = UNPACKING.lock().unwrap_or_else(|e| e.into_inner());
    let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("upstream-bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["etcd", "kube-apiserver"] {
        let target = bin.join(name);
        if target.is_file() {
            continue;
        }
        // Unpacked beside and renamed: tests running at once never see half a binary.
        let partial = bin.join(format!("{name}.{}.partial", std::process::id()));
        let out = std::fs::File::create(&partial).unwrap();
        let status = Command::new("xz")
            .arg("-dc")
            .arg(upstream.join(format!("{name}.xz")))
            .stdout(out)
            .status()
            .expect("xz runs");
        assert!(status.success(), "unpacking {name} failed");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&partial, &target).unwrap();
    }
    bin
}

/// A running kube-apiserver; stopped on drop.
pub struct Kas {
    script: PathBuf,
    /// Its state folder.
    pub dir: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// Its kubeconfig (a `system:masters` token).
    pub kubeconfig: PathBuf,
    /// `KAS_EXTRA_ARGS` of its starts.
    extra_args: String,
}

impl Kas {
    /// Starts a fresh apiserver for the test `name`; `None` when upstream
    /// is absent (the test is then skipped).
    pub fn start(name: &str) -> Option<Kas> {
        Kas::start_with(name, |_| Vec::new())
    }

    /// [`Kas::start`] with further kube-apiserver flags, made from the
    /// apiserver's folder (`KAS_EXTRA_ARGS`: none may hold a space).
    pub fn start_with(name: &str, flags: impl FnOnce(&Path) -> Vec<String>) -> Option<Kas> {
        let upstream = upstream_or_skip(name)?;
        let bin = unpacked_binaries(&upstream);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("kas")
            .join(name);
        let script = upstream.join("kube-apiserver.sh");
        // A previous run's processes, if any, then its state.
        let _ = Command::new("bash")
            .arg(&script)
            .arg("stop")
            .arg(&dir)
            .output();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&bin, dir.join("bin")).unwrap();
        let mut kas = Kas {
            script,
            url: String::new(),
            kubeconfig: dir.join("kubeconfig"),
            dir,
            extra_args: String::new(),
        };
        kas.extra_args = flags(&kas.dir).join(" ");
        kas.url = kas.run_script("start");
        Some(kas)
    }

    fn run_script(&self, verb: &str) -> String {
        let out = Command::new("bash")
            .arg(&self.script)
            .arg(verb)
            .arg(&self.dir)
            .env("KAS_EXTRA_ARGS", &self.extra_args)
            .output()
            .expect("kube-apiserver.sh runs");
        let log = std::fs::read_to_string(self.dir.join("kube-apiserver.log")).unwrap_or_default();
        assert!(
            out.status.success(),
            "kube-apiserver.sh {verb}: {}{}\nlog tail: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            &log[log.len().saturating_sub(3000)..]
        );
        let env = std::fs::read_to_string(self.dir.join("env")).unwrap_or_default();
        env.lines()
            .find_map(|l| l.strip_prefix("KAS_URL="))
            .unwrap_or_default()
            .to_string()
    }

    /// Stops the apiserver (etcd's data stays).
    pub fn stop(&self) {
        self.run_script("stop");
    }

    /// Starts it again on the same folder, URL and data.
    pub fn restart(&self) {
        self.run_script("start");
    }

    /// The kube client configuration of its kubeconfig.
    pub async fn config(&self) -> kube::Config {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap()
    }

    /// A client of it, as the admin.
    pub async fn client(&self) -> Client {
        Client::try_from(self.config().await).unwrap()
    }
}

impl Drop for Kas {
    fn drop(&mut self) {
        // For a look after a failure: `KMUTATE_KEEP_KAS=1` leaves it running.
        if std::env::var_os("KMUTATE_KEEP_KAS").is_some() {
            eprintln!(
                "kube-apiserver left running: KUBECONFIG={}",
                self.kubeconfig.display()
            );
            return;
        }
        let _ = Command::new("bash")
            .arg(&self.script)
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

/// The API of `object`'s kind (found by discovery), in its namespace if any.
pub async fn api_for(client: &Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap_or_default();
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovery of {api_version} {kind}: {e}"));
    api_of(
        client,
        &resource,
        caps.scope == kube::discovery::Scope::Namespaced,
        object,
    )
}

fn api_of(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    object: &Value,
) -> Api<DynamicObject> {
    match object["metadata"]["namespace"].as_str() {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, resource),
        _ if namespaced => Api::default_namespaced_with(client.clone(), resource),
        _ => Api::all_with(client.clone(), resource),
    }
}

fn dynamic(object: &Value) -> DynamicObject {
    serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("{e}: {object}"))
}

fn name(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Creates `object` (a real create); the apiserver's error if it refuses.
pub async fn create(client: &Client, object: &Value) -> Result<Value, kube::Error> {
    let api = api_for(client, object).await;
    let created = api.create(&PostParams::default(), &dynamic(object)).await?;
    Ok(serde_json::to_value(created).unwrap())
}

/// A server-side dry-run create of `object`: what admission makes of it.
pub async fn dry_run_create(client: &Client, object: &Value) -> Result<Value, kube::Error> {
    let api = api_for(client, object).await;
    let params = PostParams {
        dry_run: true,
        field_manager: None,
    };
    let created = api.create(&params, &dynamic(object)).await?;
    Ok(serde_json::to_value(created).unwrap())
}

/// Server-side applies `object` (creating or updating it), forcing conflicts.
pub async fn apply(client: &Client, object: &Value) -> Value {
    let api = api_for(client, object).await;
    let applied = api
        .patch(
            &name(object),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {object}: {e}"));
    serde_json::to_value(applied).unwrap()
}

/// Deletes `object` (gone already is fine).
pub async fn delete(client: &Client, object: &Value) {
    let api = api_for(client, object).await;
    match api.delete(&name(object), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting {}: {e}", name(object)),
    }
}

/// Installs kmutate's CRDs (`deploy/crds/`) and waits until the apiserver
/// serves them.
pub async fn install_crds(client: &Client) {
    for file in [
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("deploy/crds/{file}.yaml"));
        for crd in super::documents(&path) {
            apply(client, &crd).await;
        }
    }
    let gvk = GroupVersionKind::gvk("kmutate.dev", "v1", "MutatingAdmissionPolicy");
    super::eventually(std::time::Duration::from_secs(30), || async {
        kube::discovery::pinned_kind(client, &gvk).await.ok()
    })
    .await
    .expect("kmutate.dev/v1 served");
}

/// Makes sure Namespace `ns` exists with its `default` ServiceAccount (no
/// controller-manager makes it here, and Pods need it to be admitted).
pub async fn namespace_with_service_account(client: &Client, ns: &str) {
    let namespaces: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Namespace"),
            "namespaces",
        ),
    );
    if namespaces.get_opt(ns).await.unwrap().is_none() {
        create(
            client,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await
        .unwrap();
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": ns}});
    match create(client, &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("ServiceAccount default in {ns}: {e}"),
    }
}

/// `object` without what the apiserver sets anew on every create: the
/// volatile metadata, its uid wherever it was copied (a Job's
/// `controller-uid` selector and labels) replaced by `<uid>`, and the
/// random suffix of the service-account token volume by `xxxxx`.
pub fn without_volatile_metadata(object: &Value) -> Value {
    let mut o = object.clone();
    let uid = o["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "uid",
            "creationTimestamp",
            "managedFields",
            "resourceVersion",
        ] {
            m.remove(k);
        }
    }
    replace_text(&mut o, if uid.is_empty() { "\0" } else { &uid });
    o
}

/// The ServiceAccount plugin's token volume ends in 5 random characters.
const TOKEN_VOLUME: &str = "kube-api-access-";

fn replace_text(v: &mut Value, uid: &str) {
    match v {
        Value::String(s) if s.contains(uid) => *s = s.replace(uid, "<uid>"),
        Value::String(s) if s.starts_with(TOKEN_VOLUME) && s.len() == TOKEN_VOLUME.len() + 5 => {
            *s = format!("{TOKEN_VOLUME}xxxxx");
        }
        Value::Array(items) => items.iter_mut().for_each(|i| replace_text(i, uid)),
        Value::Object(m) => m.values_mut().for_each(|i| replace_text(i, uid)),
        _ => {}
    }
}

/// The message of an apiserver error, else the error.
pub fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}
