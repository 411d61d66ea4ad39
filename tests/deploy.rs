//! The container image and the cluster manifests against what the binary
//! does: the Dockerfile builds and starts the binary that exists; the
//! Deployment's flags are `kmutate serve`'s; the MutatingWebhookConfiguration
//! calls the Service, port and path that the Pods serve; the probes, the
//! certificate and the ConfigMaps fit together; a server started with the
//! Deployment's own flags and files answers like the cluster would see it;
//! and every metric and label the Grafana dashboard and the alerts query is
//! one kmutate exports.
//!
//! Schema validation of the manifests is `tools/validate_manifests.py`'s job
//! (run by `.ci/run`); cert-manager's and the Prometheus Operator's kinds are
//! not in the Kubernetes schemas, so the fields checked here are the ones the
//! wiring depends on.

mod support;

use clap::{Args as _, FromArgMatches as _};
use kmutate::engine::{Engine, EngineSources};
use kmutate::webhook::cli::ServeArgs;
use kmutate::webhook::client::{get_plain, Client};
use kmutate::webhook::metrics::{ErrorType, Metrics, RequestResult};
use kmutate::webhook::server::{HEALTHZ_PATH, MUTATE_PATH, READYZ_PATH};
use kmutate::webhook::tls::{self, CertFiles};
use kmutate::webhook::validate::VALIDATE_PATH;
use kmutate::webhook::{start, ServeConfig, TlsSource};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[path = "deploy/promql.rs"]
mod promql;
use promql::{parse_query, Matcher};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The documents of a YAML file under the repository.
fn yaml(path: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&read(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// The objects `kubectl apply -k deploy/` installs (the kustomization's
/// resources; its generated ConfigMaps are checked apart).
fn installed() -> Vec<Value> {
    let kustomization = &yaml("deploy/kustomization.yaml")[0];
    let mut out = Vec::new();
    for resource in kustomization["resources"].as_array().expect("resources") {
        out.extend(yaml(&format!("deploy/{}", resource.as_str().unwrap())));
    }
    out
}

/// The line before `failurePolicy:` in the manifest at `path` is a comment
/// (the choice is explained where it is made).
fn assert_failure_policy_explained(path: &str) {
    let text = read(path);
    let explained = text
        .lines()
        .take_while(|l| !l.trim_start().starts_with("failurePolicy:"))
        .last()
        .unwrap();
    assert!(
        explained.trim_start().starts_with('#'),
        "{path}: a comment explains failurePolicy"
    );
}

/// The one object of `kind` named `name` among `objects`.
fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name} in deploy/");
    found[0]
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

fn u64_of(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// The kmutate container of the Deployment.
fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The container port a probe or Service `targetPort` names (by name or
/// number).
fn container_port(container: &Value, port: &Value) -> u64 {
    if let Some(n) = port.as_u64() {
        return n;
    }
    let name = str_of(port, "port");
    container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == name)
        .map(|p| u64_of(&p["containerPort"], "containerPort"))
        .unwrap_or_else(|| panic!("no container port named {name}"))
}

/// The Deployment's arguments, read by `kmutate serve`'s own parser.
fn serve_args(deployment: &Value) -> ServeArgs {
    let args: Vec<String> = container(deployment)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| str_of(a, "arg").to_string())
        .collect();
    let command = ServeArgs::augment_args(clap::Command::new("serve"));
    let matches = command
        .try_get_matches_from(std::iter::once("serve".to_string()).chain(args))
        .unwrap_or_else(|e| panic!("the Deployment's args are not `kmutate serve` flags: {e}"));
    ServeArgs::from_arg_matches(&matches).expect("serve args")
}

/// The volume mounted at the folder holding `path`, with its mount path.
fn volume_of<'a>(deployment: &'a Value, path: &Path) -> (&'a Value, PathBuf) {
    let mounts = container(deployment)["volumeMounts"]
        .as_array()
        .expect("volumeMounts");
    let mount = mounts
        .iter()
        .find(|m| path.starts_with(str_of(&m["mountPath"], "mountPath")))
        .unwrap_or_else(|| panic!("{} is on no volume", path.display()));
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    let volume = volumes
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("no volume {}", mount["name"]));
    (
        volume,
        PathBuf::from(str_of(&mount["mountPath"], "mountPath")),
    )
}

/// The files of the kustomize-generated ConfigMap `name`.
fn generated_files(name: &str) -> Vec<String> {
    let kustomization = &yaml("deploy/kustomization.yaml")[0];
    let generator = kustomization["configMapGenerator"]
        .as_array()
        .expect("configMapGenerator")
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no generated ConfigMap {name}"));
    assert_eq!(generator["namespace"], "kmutate");
    generator["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| str_of(f, "file").to_string())
        .collect()
}

// ---------------------------------------------------------------- Dockerfile

/// The Dockerfile's instructions, continuation lines joined, comments left out.
fn dockerfile() -> Vec<(String, String)> {
    let text = read("Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(part) = line.strip_suffix('\\') {
            current.push_str(part);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (instruction, rest) = current.split_once(' ').unwrap_or((&current, ""));
        out.push((instruction.to_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    out
}

#[test]
fn dockerfile_builds_like_ci_and_runs_kmutate_serve() {
    let instructions = dockerfile();
    let of = |name: &str| -> Vec<&String> {
        instructions
            .iter()
            .filter(|(i, _)| i == name)
            .map(|(_, r)| r)
            .collect()
    };
    let froms = of("FROM");
    assert_eq!(froms.len(), 2, "a build stage and a final stage");
    // The build stage's toolchain is at least the crate's rust-version.
    let tag = froms[0]
        .split_once("rust:")
        .map(|(_, t)| t)
        .expect("the build stage is a rust image");
    let version = |v: &str| -> Vec<u64> {
        v.split(['.', '-'])
            .take(2)
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    assert!(
        version(tag) >= version(env!("CARGO_PKG_RUST_VERSION")),
        "{tag} is older than rust-version {}",
        env!("CARGO_PKG_RUST_VERSION")
    );
    assert!(
        froms[0].ends_with(" AS build"),
        "the build stage is named build: {}",
        froms[0]
    );
    // Same Debian release in both stages (the binary links the build
    // stage's glibc).
    assert!(froms[0].contains("bookworm") && froms[1].contains("debian12"));
    assert!(
        froms[1].contains("distroless"),
        "small final image: {}",
        froms[1]
    );

    // The release build CI makes, with the lock file.
    let builds: Vec<&String> = of("RUN")
        .into_iter()
        .filter(|r| r.contains("cargo build"))
        .collect();
    assert_eq!(builds.len(), 1);
    let build = builds[0];
    assert!(build.contains("cargo build --release --locked"), "{build}");
    // The binary it takes is the one Cargo builds (CARGO_BIN_EXE_kmutate
    // exists only if the crate has a binary target of that name).
    let binary = Path::new(env!("CARGO_BIN_EXE_kmutate"))
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    assert!(
        build.contains(&format!("target/release/{binary} ")),
        "{build}"
    );

    // The final stage runs the copied binary's `serve`, as a numeric
    // non-root user (so that runAsNonRoot can check it).
    let copied = of("COPY")
        .into_iter()
        .find(|c| c.starts_with("--from=build"))
        .expect("COPY --from=build");
    let destination = copied.split_whitespace().last().unwrap();
    let entrypoint: Vec<String> =
        serde_json::from_str(of("ENTRYPOINT")[0]).expect("ENTRYPOINT is a JSON array");
    assert_eq!(entrypoint, [destination, "serve"]);
    assert!(destination.ends_with(&format!("/{binary}")));
    let user = of("USER")[0];
    let uid: u64 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric USER");
    assert_ne!(uid, 0);
    let deployment = object(&installed(), "Deployment", "kmutate").clone();
    assert_eq!(
        u64_of(
            &deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"],
            "runAsUser"
        ),
        uid
    );

    // `serve` is a subcommand of the binary.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_kmutate"))
        .args(["serve", "--help"])
        .output()
        .expect("runs kmutate");
    assert!(help.status.success(), "kmutate serve --help fails");
    assert!(String::from_utf8_lossy(&help.stdout).contains("--tls-cert"));

    // Ports the image documents are the defaults of `kmutate serve`.
    let defaults = ServeArgs::from_arg_matches(
        &ServeArgs::augment_args(clap::Command::new("serve")).get_matches_from(["serve"]),
    )
    .unwrap();
    assert_eq!(
        of("EXPOSE")[0],
        &format!(
            "{} {}",
            defaults.listen.port(),
            defaults.metrics_listen.port()
        )
    );
}

#[test]
fn docker_build_context_holds_everything_the_build_reads() {
    let instructions = dockerfile();
    let sources: Vec<String> = instructions
        .iter()
        .filter(|(i, r)| i == "COPY" && !r.starts_with("--from"))
        .flat_map(|(_, r)| {
            let words: Vec<&str> = r.split_whitespace().collect();
            words[..words.len() - 1]
                .iter()
                .map(|w| w.to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(sources, ["Cargo.toml", "Cargo.lock", "src", "deploy/crds"]);
    // .dockerignore lets them through.
    let ignore = read(".dockerignore");
    for source in &sources {
        assert!(
            ignore
                .lines()
                .any(|l| l == format!("!{source}") || l == format!("!{source}/")),
            ".dockerignore keeps out {source}"
        );
    }
    // No build script, and every file the sources include is under src/.
    assert!(
        !repo("build.rs").exists(),
        "copy build.rs in the Dockerfile"
    );
    let manifest = read("Cargo.toml");
    assert!(!manifest.contains("\nbuild ="), "copy the build script");
    let src = repo("src").canonicalize().unwrap();
    let crds = repo("deploy/crds").canonicalize().unwrap();
    let mut stack = vec![src.clone()];
    let mut checked = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for macro_name in ["include_str!(\"", "include_bytes!(\""] {
                for (at, _) in text.match_indices(macro_name) {
                    let rest = &text[at + macro_name.len()..];
                    let included = &rest[..rest.find('"').unwrap()];
                    let target = dir
                        .join(included)
                        .canonicalize()
                        .unwrap_or_else(|e| panic!("{}: {included}: {e}", path.display()));
                    assert!(
                        target.starts_with(&src) || target.starts_with(&crds),
                        "{} includes {}, outside src/ and deploy/crds/ (all the image copies)",
                        path.display(),
                        target.display()
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 0, "found the schema table include");
}

// ------------------------------------------------------------ deploy wiring

#[test]
fn deployment_flags_ports_probes_and_volumes_fit() {
    let objects = installed();
    let deployment = object(&objects, "Deployment", "kmutate");
    assert_eq!(deployment["metadata"]["namespace"], "kmutate");
    let c = container(deployment);
    let serve = serve_args(deployment);

    // Listeners on the container's named ports.
    assert_eq!(
        serve.listen.port() as u64,
        container_port(c, &json!("https"))
    );
    assert_eq!(
        serve.metrics_listen.port() as u64,
        container_port(c, &json!("metrics"))
    );

    // Probes: the paths kmutate serves, over HTTPS on the webhook port.
    for (probe, path) in [
        ("livenessProbe", HEALTHZ_PATH),
        ("readinessProbe", READYZ_PATH),
    ] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(get["scheme"], "HTTPS", "{probe}");
        assert_eq!(
            container_port(c, &get["port"]),
            serve.listen.port() as u64,
            "{probe}"
        );
    }

    // TLS files from the Secret cert-manager writes.
    let cert = serve.tls_cert.as_ref().expect("--tls-cert");
    let key = serve.tls_key.as_ref().expect("--tls-key");
    let (volume, mount) = volume_of(deployment, cert);
    assert_eq!(volume_of(deployment, key).1, mount);
    let certificate = object(&objects, "Certificate", "kmutate-serving");
    assert_eq!(
        volume["secret"]["secretName"],
        certificate["spec"]["secretName"]
    );
    // cert-manager's Secret keys.
    assert_eq!(cert.strip_prefix(&mount).unwrap(), Path::new("tls.crt"));
    assert_eq!(key.strip_prefix(&mount).unwrap(), Path::new("tls.key"));

    // Policies and bindings from the generated ConfigMaps, mounted as
    // folders.
    for (paths, map) in [
        (&serve.policies, "kmutate-policies"),
        (&serve.bindings, "kmutate-bindings"),
    ] {
        assert_eq!(paths.len(), 1);
        let (volume, mount) = volume_of(deployment, &paths[0]);
        assert_eq!(mount, paths[0], "the whole mount is read");
        assert_eq!(volume["configMap"]["name"], map);
        assert!(!generated_files(map).is_empty());
    }

    // kmutate answers before the API server gives up on the webhook.
    let webhook = &object(&objects, "MutatingWebhookConfiguration", "kmutate")["webhooks"][0];
    let webhook_timeout = Duration::from_secs(u64_of(&webhook["timeoutSeconds"], "timeoutSeconds"));
    assert!(serve.timeout < webhook_timeout);
    // In-flight requests drain before the kubelet kills the process.
    let pod = &deployment["spec"]["template"]["spec"];
    let pre_stop = Duration::from_secs(u64_of(
        &c["lifecycle"]["preStop"]["sleep"]["seconds"],
        "preStop sleep",
    ));
    let grace = Duration::from_secs(u64_of(
        &pod["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    ));
    assert!(pre_stop + serve.drain_timeout < grace);

    // Restricted Pod Security, the namespace's enforced profile.
    let namespace = object(&objects, "Namespace", "kmutate");
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    for resource in ["cpu", "memory"] {
        assert!(c["resources"]["requests"][resource].is_string());
        assert!(c["resources"]["limits"][resource].is_string());
    }

    // Two replicas on different nodes where possible, one kept by the PDB.
    let replicas = u64_of(&deployment["spec"]["replicas"], "replicas");
    assert_eq!(replicas, 2);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(deployment["spec"]["selector"]["matchLabels"], *labels);
    let anti = &pod["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(anti["labelSelector"]["matchLabels"], *labels);
    let pdb = object(&objects, "PodDisruptionBudget", "kmutate");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], *labels);
    assert!(u64_of(&pdb["spec"]["minAvailable"], "minAvailable") < replicas);

    // The image is this version's.
    let image = str_of(&c["image"], "image");
    assert_eq!(image, format!("kmutate:{}", env!("CARGO_PKG_VERSION")));
    let kustomization = &yaml("deploy/kustomization.yaml")[0];
    assert_eq!(kustomization["images"][0]["name"], "kmutate");
    assert_eq!(
        kustomization["images"][0]["newTag"],
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn webhook_calls_the_service_port_and_path_kmutate_serves() {
    let objects = installed();
    let configuration = object(&objects, "MutatingWebhookConfiguration", "kmutate");
    let webhooks = configuration["webhooks"].as_array().expect("webhooks");
    assert_eq!(webhooks.len(), 1);
    let webhook = &webhooks[0];
    let target = &webhook["clientConfig"]["service"];
    let service = object(&objects, "Service", str_of(&target["name"], "service"));
    assert_eq!(service["metadata"]["namespace"], target["namespace"]);
    assert_eq!(target["path"], MUTATE_PATH);

    // Service port → container port → kmutate's --listen.
    let port = service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["port"] == target["port"])
        .unwrap_or_else(|| panic!("the Service has no port {}", target["port"]));
    assert_eq!(port["name"], "https");
    let deployment = object(&objects, "Deployment", "kmutate");
    assert_eq!(
        deployment["metadata"]["namespace"],
        service["metadata"]["namespace"]
    );
    let c = container(deployment);
    assert_eq!(
        container_port(c, &port["targetPort"]),
        serve_args(deployment).listen.port() as u64
    );
    // The Service selects the Pods.
    let labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (k, v) in service["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(labels.get(k), Some(v), "the Service selects {k}={v}");
    }
    let metrics = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("a metrics port");
    assert_eq!(
        container_port(c, &metrics["targetPort"]),
        serve_args(deployment).metrics_listen.port() as u64
    );

    // What the issue asks of the webhook.
    assert_eq!(webhook["reinvocationPolicy"], "IfNeeded");
    assert_eq!(webhook["matchPolicy"], "Equivalent");
    assert_eq!(webhook["sideEffects"], "None");
    assert_eq!(webhook["admissionReviewVersions"], json!(["v1", "v1beta1"]));
    assert!(["Ignore", "Fail"].contains(&str_of(&webhook["failurePolicy"], "failurePolicy")));
    assert_failure_policy_explained("deploy/webhook.yaml");
    let excluded = webhook["namespaceSelector"]["matchExpressions"]
        .as_array()
        .expect("matchExpressions")
        .iter()
        .find(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
        .expect("a NotIn on kubernetes.io/metadata.name");
    let excluded: Vec<&str> = excluded["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(excluded.contains(&"kube-system"));
    assert!(excluded.contains(&str_of(&deployment["metadata"]["namespace"], "namespace")));

    // The CA bundle comes from the serving Certificate, valid for the name
    // the API server calls: SERVICE.NAMESPACE.svc.
    let inject = str_of(
        &configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "inject-ca-from",
    );
    let (namespace, name) = inject.split_once('/').expect("NAMESPACE/NAME");
    let certificate = object(&objects, "Certificate", name);
    assert_eq!(certificate["metadata"]["namespace"], namespace);
    let host = format!(
        "{}.{}.svc",
        str_of(&target["name"], "name"),
        str_of(&target["namespace"], "namespace")
    );
    assert!(
        certificate["spec"]["dnsNames"]
            .as_array()
            .expect("dnsNames")
            .contains(&json!(host)),
        "the certificate is valid for {host}"
    );
    // Its issuer chain exists in the same namespace, ending at a CA
    // certificate issued by a self-signed issuer.
    let issuer = object(
        &objects,
        "Issuer",
        str_of(&certificate["spec"]["issuerRef"]["name"], "issuerRef"),
    );
    assert_eq!(issuer["metadata"]["namespace"], namespace);
    let ca_secret = &issuer["spec"]["ca"]["secretName"];
    let ca = objects
        .iter()
        .find(|o| o["kind"] == "Certificate" && o["spec"]["secretName"] == *ca_secret)
        .expect("the CA Certificate");
    assert_eq!(ca["spec"]["isCA"], true);
    let root = object(
        &objects,
        "Issuer",
        str_of(&ca["spec"]["issuerRef"]["name"], "issuerRef"),
    );
    assert!(root["spec"]["selfSigned"].is_object());

    // The Pods run as the ServiceAccount the RBAC bindings name.
    let account = str_of(
        &deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "serviceAccountName",
    );
    let sa = object(&objects, "ServiceAccount", account);
    for binding in ["kmutate", "kmutate-params"] {
        let b = object(&objects, "ClusterRoleBinding", binding);
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": account, "namespace": sa["metadata"]["namespace"]}])
        );
        object(
            &objects,
            "ClusterRole",
            str_of(&b["roleRef"]["name"], "roleRef"),
        );
    }
}

/// The ValidatingWebhookConfiguration (issue 47) calls the same Service
/// and certificate as the mutating one, on the path kmutate validates on,
/// for the kmutate.dev objects (not their status, which kmutate writes) and
/// nothing else; its failurePolicy is explained.
#[test]
fn validating_webhook_calls_validate_for_kmutate_dev_objects_only() {
    let objects = installed();
    let mutating = object(&objects, "MutatingWebhookConfiguration", "kmutate");
    let validating = object(&objects, "ValidatingWebhookConfiguration", "kmutate");
    let webhooks = validating["webhooks"].as_array().expect("webhooks");
    assert_eq!(webhooks.len(), 1);
    let webhook = &webhooks[0];
    let service = &webhook["clientConfig"]["service"];
    let mutating_service = &mutating["webhooks"][0]["clientConfig"]["service"];
    for key in ["name", "namespace", "port"] {
        assert_eq!(service[key], mutating_service[key], "{key}");
    }
    assert_eq!(service["path"], VALIDATE_PATH);
    let inject = "cert-manager.io/inject-ca-from";
    assert_eq!(
        validating["metadata"]["annotations"][inject], mutating["metadata"]["annotations"][inject],
        "the same CA injection"
    );
    assert_eq!(
        webhook["rules"],
        json!([{"apiGroups": ["kmutate.dev"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["mutatingadmissionpolicies", "mutatingadmissionpolicybindings"],
            "scope": "Cluster"}])
    );
    // The resources are the CRDs' own.
    for crd in [
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    ] {
        let crd = &yaml(&format!("deploy/crds/{crd}.yaml"))[0];
        assert_eq!(crd["spec"]["group"], "kmutate.dev");
        assert!(webhook["rules"][0]["resources"]
            .as_array()
            .unwrap()
            .contains(&crd["spec"]["names"]["plural"]));
        assert_eq!(crd["spec"]["versions"][0]["name"], "v1");
    }
    assert_eq!(webhook["sideEffects"], "None");
    assert_eq!(webhook["admissionReviewVersions"], json!(["v1"]));
    assert_eq!(webhook["failurePolicy"], "Ignore");
    assert_failure_policy_explained("deploy/validating-webhook.yaml");
}

#[test]
fn config_folder_is_listed_whole_and_loads_cleanly() {
    for (folder, map) in [
        ("config/policies", "kmutate-policies"),
        ("config/bindings", "kmutate-bindings"),
    ] {
        let mut on_disk: Vec<String> = std::fs::read_dir(repo("deploy").join(folder))
            .unwrap()
            .flatten()
            .map(|e| format!("{folder}/{}", e.file_name().to_string_lossy()))
            .collect();
        on_disk.sort();
        let mut listed = generated_files(map);
        listed.sort();
        assert_eq!(on_disk, listed, "kustomization.yaml lists deploy/{folder}");
    }
    let engine = Engine::load(
        &EngineSources {
            policies: vec![repo("deploy/config/policies")],
            bindings: vec![repo("deploy/config/bindings")],
            resources: Vec::new(),
        },
        Box::new(kmutate::authorizer::AlwaysDeny),
    );
    assert_eq!(engine.problems(), &[] as &[String]);
    assert!(engine.policies() >= 1 && engine.bindings() >= 1);
}

/// Lays `files` out like kubelet's atomic writer fills a ConfigMap or Secret
/// volume: the files in a hidden timestamped folder, `..data` pointing at
/// it, and one link per file.
#[cfg(unix)]
fn atomic_writer_volume(dir: &Path, files: &[(String, Vec<u8>)]) {
    let stamp = dir.join("..2026_11_30_12_00_00.000000001");
    std::fs::create_dir_all(&stamp).unwrap();
    for (name, bytes) in files {
        std::fs::write(stamp.join(name), bytes).unwrap();
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(stamp.file_name().unwrap(), dir.join("..data")).unwrap();
}

/// A server started with the Deployment's own flags, its ConfigMaps' files
/// and a certificate for the Certificate's names, spoken to as the API
/// server would: by the Service's host name, on the webhook's path, with
/// the probes' paths, and scraped on the metrics port.
#[cfg(unix)]
#[test]
fn deployment_as_written_serves_the_webhook() {
    let objects = installed();
    let deployment = object(&objects, "Deployment", "kmutate");
    let mut serve = serve_args(deployment);
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-pod");
    let _ = std::fs::remove_dir_all(&root);
    let in_pod = |path: &Path| root.join(path.strip_prefix("/").unwrap());

    // The ConfigMap volumes, from the generator's files.
    for (paths, map) in [
        (&mut serve.policies, "kmutate-policies"),
        (&mut serve.bindings, "kmutate-bindings"),
    ] {
        let files: Vec<(String, Vec<u8>)> = generated_files(map)
            .iter()
            .map(|f| {
                let name = Path::new(f)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .to_string();
                (name, std::fs::read(repo("deploy").join(f)).unwrap())
            })
            .collect();
        let dir = in_pod(&paths[0]);
        atomic_writer_volume(&dir, &files);
        *paths = vec![dir];
    }

    // The Secret volume, as cert-manager fills it for the Certificate.
    let certificate = object(&objects, "Certificate", "kmutate-serving");
    let names: Vec<String> = certificate["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| str_of(n, "dnsName").to_string())
        .collect();
    let (ca, ca_pem) = tls::new_ca("kmutate-ca").unwrap();
    let leaf = tls::issue(&ca, "kmutate", &names, true).unwrap();
    let cert = serve.tls_cert.clone().unwrap();
    let tls_dir = in_pod(cert.parent().unwrap());
    atomic_writer_volume(
        &tls_dir,
        &[
            ("ca.crt".into(), ca_pem.into_bytes()),
            ("tls.crt".into(), leaf.cert_pem.into_bytes()),
            ("tls.key".into(), leaf.key_pem.into_bytes()),
        ],
    );
    let files = CertFiles {
        cert: in_pod(&cert),
        key: in_pod(serve.tls_key.as_ref().unwrap()),
    };

    let service = object(&objects, "Service", "kmutate");
    let host = format!(
        "{}.{}.svc",
        str_of(&service["metadata"]["name"], "name"),
        str_of(&service["metadata"]["namespace"], "namespace")
    );
    let webhook = &object(&objects, "MutatingWebhookConfiguration", "kmutate")["webhooks"][0];
    let path = str_of(&webhook["clientConfig"]["service"]["path"], "path").to_string();
    let c = container(deployment);
    let liveness = str_of(&c["livenessProbe"]["httpGet"]["path"], "path").to_string();
    let readiness = str_of(&c["readinessProbe"]["httpGet"]["path"], "path").to_string();

    let config = ServeConfig {
        sources: EngineSources {
            policies: serve.policies.clone(),
            bindings: serve.bindings.clone(),
            resources: Vec::new(),
        },
        // The Deployment's ports may be taken here: free ones, same routes.
        listen: "127.0.0.1:0".parse().unwrap(),
        metrics_listen: Some("127.0.0.1:0".parse().unwrap()),
        tls: TlsSource::Files(files),
        timeout: serve.timeout,
        drain_timeout: serve.drain_timeout,
        ..ServeConfig::new()
    };
    let ca_file = tls_dir.join("ca.crt");
    let pod = |labels: Value| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "demo", "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}
        })
    };
    let review = |object: &Value| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "demo",
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": object,
                "oldObject": null,
                "dryRun": false,
            }
        }))
        .unwrap()
    };

    support::run(Duration::from_secs(60), async {
        {
            let server = start(config).await.expect("server starts");
            assert!(server.wait_ready(Duration::from_secs(30)).await);
            // Each ConfigMap file loads once (not again through the
            // atomic writer's hidden folder).
            let engine = server.engine().unwrap();
            assert_eq!(engine.problems(), &[] as &[String]);
            assert_eq!(engine.policies(), generated_files("kmutate-policies").len());

            let client_config = tls::client_config(&ca_file, None, &[]).unwrap();
            let client = Client::new(server.addr(), &host, client_config, false).unwrap();
            let mut conn = client
                .connect()
                .await
                .expect("TLS as SERVICE.NAMESPACE.svc");
            for probe in [&liveness, &readiness] {
                let r = conn.get(probe).await.unwrap();
                assert_eq!(r.status, 200, "{probe}: {}", r.text());
            }

            // The opted-in Pod gets the starter policy's label; another
            // passes unchanged.
            let opted_in = pod(json!({"kmutate.dev/demo": "true"}));
            let r = conn.post(&path, review(&opted_in)).await.unwrap();
            assert_eq!(r.status, 200, "{}", r.text());
            let response = &r.json().unwrap()["response"];
            assert_eq!(response["allowed"], true);
            assert_eq!(response["uid"], "u-1");
            use base64::Engine as _;
            let patch: json_patch::Patch = serde_json::from_slice(
                &base64::engine::general_purpose::STANDARD
                    .decode(str_of(&response["patch"], "patch"))
                    .unwrap(),
            )
            .unwrap();
            let mut patched = opted_in.clone();
            json_patch::patch(&mut patched, &patch).unwrap();
            assert_eq!(
                patched["metadata"]["labels"]["kmutate.dev/mutated-by"],
                "kmutate-demo"
            );
            let other = pod(json!({"app": "x"}));
            let r = conn.post(&path, review(&other)).await.unwrap();
            let response = &r.json().unwrap()["response"];
            assert_eq!(response["allowed"], true);
            assert!(response.get("patch").is_none(), "{response}");

            // Prometheus scrapes the metrics port.
            let r = get_plain(server.metrics_addr().unwrap(), "/metrics")
                .await
                .unwrap();
            assert_eq!(r.status, 200);
            assert!(r.text().contains("kmutate_webhook_requests_total{"));
            server.shutdown().await;
        }
    });
}

// ------------------------------------------------------- dashboard, alerts

/// Labels Prometheus adds to every scraped series (the target's labels).
const TARGET_LABELS: [&str; 7] = [
    "job",
    "instance",
    "namespace",
    "pod",
    "service",
    "endpoint",
    "container",
];

/// Labels whose values are a closed set: a query naming another value
/// matches nothing, forever.
const CLOSED_LABELS: [&str; 2] = ["result", "error_type"];

/// Every `RequestResult`; the match makes a new variant a compile error here.
fn all_request_results() -> Vec<RequestResult> {
    use RequestResult::*;
    let all = vec![Allowed, Patched, Denied, Timeout, Panic, Invalid, TooLarge];
    for r in &all {
        match r {
            Allowed | Patched | Denied | Timeout | Panic | Invalid | TooLarge => {}
        }
    }
    all
}

/// Every `ErrorType`; the match makes a new variant a compile error here.
fn all_error_types() -> Vec<ErrorType> {
    use ErrorType::*;
    let all = vec![NoError, CompileError, InvalidError, OutOfBudget];
    for e in &all {
        match e {
            NoError | CompileError | InvalidError | OutOfBudget => {}
        }
    }
    all
}

/// Series name → label → values seen, from the OpenMetrics text of a
/// registry that has seen one observation of each kind (every value of the
/// closed labels), plus Prometheus' own `up`.
fn exported_series() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let m = Metrics::new();
    for e in all_error_types() {
        m.observe_check("p", "b", Duration::from_millis(2), e);
    }
    for r in all_request_results() {
        m.observe_request("CREATE", "pods", r, Duration::from_millis(3));
    }
    m.in_flight().inc();
    m.observe_reinvocation();
    m.set_loaded(1, 1, 0);
    m.observe_cert_reload(true);
    m.observe_cert_reload(false);
    m.observe_binding_change("p", "b", false);
    m.observe_binding_change("p", "b", true);
    m.observe_monitor_error("p", "b");
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for line in m.encode().lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => continue,
        };
        let labels = out.entry(name.to_string()).or_default();
        if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.split_once('}')) {
            for pair in split_labels(inner.0) {
                let (k, v) = pair.split_once('=').unwrap();
                labels
                    .entry(k.to_string())
                    .or_default()
                    .insert(v.trim_matches('"').to_string());
            }
        }
    }
    out.entry("up".into()).or_default();
    out
}

/// `a="x",b="y,z"` → [`a="x"`, `b="y,z"`].
fn split_labels(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, ch) in text.char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// What is wrong in `expr`: metrics kmutate does not export, labels those
/// metrics do not have, values a closed label never takes.
fn query_problems(
    expr: &str,
    exported: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
) -> Vec<String> {
    let query = parse_query(expr);
    let mut problems = Vec::new();
    if query.selectors.is_empty() {
        problems.push(format!("{expr:?} queries no metric"));
    }
    let has_label = |metric: &str, label: &str| {
        TARGET_LABELS.contains(&label)
            || label == "__name__"
            || exported.get(metric).is_some_and(|l| l.contains_key(label))
    };
    for (metric, matchers) in &query.selectors {
        let Some(labels) = exported.get(metric) else {
            problems.push(format!("{expr:?}: kmutate exports no metric {metric}"));
            continue;
        };
        for m in matchers {
            if !has_label(metric, &m.label) {
                problems.push(format!("{expr:?}: {metric} has no label {}", m.label));
                continue;
            }
            if !CLOSED_LABELS.contains(&m.label.as_str()) {
                continue;
            }
            let known = &labels[&m.label];
            let values: Vec<&str> = if m.op.contains('~') {
                m.value.split('|').collect()
            } else {
                vec![m.value.as_str()]
            };
            for v in values {
                if !known.contains(v) {
                    problems.push(format!(
                        "{expr:?}: {metric}'s {} is never {v:?} (it is one of {known:?})",
                        m.label
                    ));
                }
            }
        }
    }
    for (labels, metrics) in &query.groupings {
        for label in labels {
            if !metrics.iter().any(|m| has_label(m, label)) {
                problems.push(format!(
                    "{expr:?}: grouping by {label}, which none of {metrics:?} has"
                ));
            }
        }
    }
    problems
}

/// Every `expr` of the dashboard's panels (rows' nested panels too).
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    out
}

#[test]
fn promql_reader_finds_metrics_labels_and_groupings() {
    let q = parse_query(
        r#"histogram_quantile(0.99, sum by (le, resource) (rate(kmutate_webhook_request_duration_seconds_bucket{result!="denied"}[$__rate_interval])))"#,
    );
    assert_eq!(
        q.selectors,
        [(
            "kmutate_webhook_request_duration_seconds_bucket".to_string(),
            vec![Matcher {
                label: "result".into(),
                op: "!=".into(),
                value: "denied".into()
            }]
        )]
    );
    assert_eq!(
        q.groupings,
        [(
            vec!["le".to_string(), "resource".to_string()],
            vec!["kmutate_webhook_request_duration_seconds_bucket".to_string()]
        )]
    );
    // A trailing `by`, binary operators, offsets and absent().
    let q = parse_query(
        "sum(rate(a_total[5m])) by (x) > 3 * sum(rate(b_total[1h] offset 5m)) or absent(up{job=\"k\"})",
    );
    let names: Vec<&str> = q.selectors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a_total", "b_total", "up"]);
    assert_eq!(
        q.groupings,
        [(vec!["x".to_string()], vec!["a_total".to_string()])]
    );

    // The checks fail on what does not exist: a metric, a label, a value.
    let exported = exported_series();
    let problems = |e: &str| query_problems(e, &exported);
    assert_eq!(
        problems("sum(rate(kmutate_webhook_requests_total[5m]))"),
        [] as [String; 0]
    );
    assert_eq!(
        problems("sum(rate(kmutate_webhook_request_total[5m]))").len(),
        1,
        "a misspelt metric"
    );
    assert_eq!(
        problems("sum by (policy) (rate(kmutate_webhook_requests_total[5m]))").len(),
        1,
        "a label the metric lacks"
    );
    assert_eq!(
        problems(r#"sum(rate(kmutate_webhook_requests_total{result="deny"}[5m]))"#).len(),
        1,
        "a value the label never takes"
    );
    assert_eq!(
        problems(r#"kmutate_certificate_reloads_total{result=~"error|success"}"#),
        [] as [String; 0]
    );
}

#[test]
fn dashboard_and_alerts_query_only_what_kmutate_exports() {
    let exported = exported_series();
    // The histograms' series are there (one observation of each kind).
    for series in [
        "kmutate_webhook_request_duration_seconds_bucket",
        "kmutate_webhook_request_duration_seconds_sum",
        "kmutate_webhook_request_duration_seconds_count",
        "apiserver_mutating_admission_policy_check_duration_seconds_bucket",
        "apiserver_mutating_admission_policy_check_total",
    ] {
        assert!(exported.contains_key(series), "{series} in {exported:?}");
    }

    let dashboard: Value = serde_json::from_str(&read("dashboards/kmutate.json")).unwrap();
    let panels = dashboard_queries(&dashboard);
    let rules = &yaml("deploy/prometheus-rules.yaml")[0];
    assert_eq!(rules["kind"], "PrometheusRule");
    let mut alerts = Vec::new();
    for group in rules["spec"]["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            alerts.push((
                str_of(&rule["alert"], "alert").to_string(),
                str_of(&rule["expr"], "expr").to_string(),
            ));
        }
    }

    let mut problems = Vec::new();
    for expr in panels.iter().chain(alerts.iter().map(|(_, e)| e)) {
        problems.extend(query_problems(expr, &exported));
    }
    assert_eq!(problems, [] as [String; 0]);

    // What the issue asks the dashboard to show, and the alerts to watch.
    let queried = |exprs: &[String], metric: &str| {
        exprs
            .iter()
            .any(|e| parse_query(e).selectors.iter().any(|(m, _)| m == metric))
    };
    for metric in [
        "kmutate_webhook_requests_total",
        "kmutate_webhook_request_duration_seconds_bucket",
        "apiserver_mutating_admission_policy_check_total",
        "kmutate_policy_load_errors",
        "kmutate_reinvocations_total",
        "kmutate_policies_loaded",
        "kmutate_webhook_requests_in_flight",
        "kmutate_mutations_applied_total",
        "kmutate_monitor_changes_total",
        "kmutate_monitor_errors_total",
    ] {
        assert!(queried(&panels, metric), "the dashboard shows {metric}");
    }
    assert!(panels.iter().any(|e| e.contains("histogram_quantile(0.5,")));
    assert!(panels
        .iter()
        .any(|e| e.contains("histogram_quantile(0.99,")));
    let names: Vec<&str> = alerts.iter().map(|(n, _)| n.as_str()).collect();
    for alert in [
        "KmutateLatencyHigh",
        "KmutateDenialsSpike",
        "KmutatePolicyLoadErrors",
        "KmutateNotReady",
        "KmutateDown",
    ] {
        assert!(names.contains(&alert), "alert {alert} in {names:?}");
    }

    // Panels are distinct and placed.
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert!(ids.insert(panel["id"].as_u64().expect("panel id")));
        assert!(panel["gridPos"]["w"].as_u64().is_some());
    }
}

/// `--manage-webhook` (issue 49) names the shipped webhook configuration,
/// whose ceiling lets through every rule the library needs, and the RBAC
/// grants exactly what managing it takes: that configuration's rules and the
/// Lease, in the Deployment's namespace, to the Deployment's account.
#[test]
fn managed_webhook_rules_have_their_configuration_ceiling_and_rbac() {
    use kmutate::matching::webhook_rules::{webhook_rules, within, WebhookRule};
    use kmutate::registration::configuration::CEILING_ANNOTATION;
    let objects = installed();
    let deployment = object(&objects, "Deployment", "kmutate");
    let name = serve_args(deployment)
        .manage_webhook
        .expect("the Deployment manages its webhook's rules");
    let configuration = object(&objects, "MutatingWebhookConfiguration", &name);
    let ceiling: Vec<WebhookRule> = serde_json::from_value(
        kmutate::api::load::parse_documents(str_of(
            &configuration["metadata"]["annotations"][CEILING_ANNOTATION],
            CEILING_ANNOTATION,
        ))
        .unwrap()
        .remove(0),
    )
    .expect("the ceiling is a list of rules");
    let library = kmutate::api::load::load_paths(&[repo("policies"), repo("bindings")]);
    let needed = webhook_rules(&library.policies, &library.bindings);
    assert!(!needed.is_empty());
    assert_eq!(
        within(&needed, &ceiling),
        needed,
        "the ceiling cuts the library's rules"
    );
    // The ceiling keeps to what the unmanaged rules allowed: creates and updates.
    for rule in &ceiling {
        assert_eq!(rule.operations, ["CREATE", "UPDATE"]);
    }

    let role_grants = |role: &Value, group: &str, resource: &str, verb: &str| -> Vec<Value> {
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["apiGroups"].as_array().unwrap().contains(&json!(group))
                    && r["resources"]
                        .as_array()
                        .unwrap()
                        .contains(&json!(resource))
                    && r["verbs"].as_array().unwrap().contains(&json!(verb))
            })
            .map(|r| r["resourceNames"].clone())
            .collect()
    };
    let cluster_role = object(&objects, "ClusterRole", "kmutate");
    for verb in ["get", "patch"] {
        assert_eq!(
            role_grants(
                cluster_role,
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                verb
            ),
            [json!([name])],
            "{verb} on the configuration, by name only"
        );
    }
    let namespace = &deployment["metadata"]["namespace"];
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == *namespace)
        .expect("a Role in the Deployment's namespace");
    let lease = format!("{name}-webhook-rules");
    for verb in ["get", "update"] {
        assert_eq!(
            role_grants(role, "coordination.k8s.io", "leases", verb),
            [json!([lease])]
        );
    }
    assert_eq!(
        role_grants(role, "coordination.k8s.io", "leases", "create"),
        [Value::Null]
    );
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "RoleBinding" && o["roleRef"]["name"] == role["metadata"]["name"])
        .expect("the Role is bound");
    assert_eq!(binding["metadata"]["namespace"], *namespace);
    let account = &deployment["spec"]["template"]["spec"]["serviceAccountName"];
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account, "namespace": namespace}])
    );
}
