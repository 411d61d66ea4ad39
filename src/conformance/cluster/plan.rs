//! A case made into what the cluster runner creates and sends: every name
//! that must be unique to the run rewritten, consistently.
//!
//! - Namespaces become `kmc-RUN-INDEX-NAME` (their labels kept); every
//!   namespaced object, `paramRef.namespace`, the request and the expected
//!   object follow, and a `kubernetes.io/metadata.name` value in a
//!   namespace selector is rewritten too.
//! - Policies and bindings become `kmc-RUN-INDEX-NAME` (`policyName` and
//!   the quoted names in an expected denial follow): one prefix keeps them
//!   in the order of their own names, which kmutate runs them in. Other cluster-scoped
//!   objects (params) keep their names, and their case runs alone.
//! - Each binding gets a namespace selector on the case's namespaces
//!   (ANDed with its own), so cases running at once never see each other's
//!   policies; cases a namespace cannot isolate (cluster-scoped requests,
//!   cluster-wide RBAC for `authorizer` decisions) run alone.
//! - CustomResourceDefinitions keep their names: they are shared by the
//!   cases of a run that define them alike.

use super::apiserver::Collection;
use crate::conformance::{case_request, policy_documents, Case};
use crate::matching::{ResourceTable, Scope, NAMESPACE_NAME_LABEL};
use crate::request::{GroupVersionKind, UserInfo};
use serde_json::{json, Value as Json};
use std::collections::BTreeMap;

/// What the runner does with a case.
#[derive(Debug)]
pub enum Planned {
    /// Run it.
    Run(Box<Plan>),
    /// A live cluster cannot express it: the reason.
    Skip(String),
    /// It cannot be read: the reason.
    Invalid(String),
}

/// What the case expects.
#[derive(Debug, Clone)]
pub enum Expectation {
    /// This object (renamed).
    Object(Json),
    /// A denial whose message contains this text (renamed).
    Rejected(String),
}

/// An object to create and later delete.
#[derive(Debug, Clone)]
pub struct ClusterObject {
    /// Where it goes.
    pub collection: Collection,
    /// Its name.
    pub name: String,
    /// The object.
    pub object: Json,
}

/// A case made ready for a cluster.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The case's name.
    pub case: String,
    /// Why a failure of the case may be the runner's renaming rather than
    /// the case's: it is then skipped with this reason.
    pub renamed_text: Option<String>,
    /// Namespaces, ServiceAccounts, RBAC, params and other resources, in
    /// creation order.
    pub setup: Vec<ClusterObject>,
    /// The CustomResourceDefinitions the case needs (shared by the run).
    pub crds: Vec<Json>,
    /// The policies, then the bindings.
    pub policies: Vec<ClusterObject>,
    /// The object an UPDATE finds stored, created before the policies.
    pub stored: Option<ClusterObject>,
    /// `CREATE` or `UPDATE`.
    pub operation: String,
    /// The request's collection.
    pub collection: Collection,
    /// The request's object name.
    pub name: String,
    /// The request's subresource.
    pub subresource: String,
    /// The case's user (`None`: the kubeconfig's own).
    pub user: Option<UserInfo>,
    /// The request's object.
    pub object: Json,
    /// The case's object as written (renamed), the base of its change.
    pub case_object: Json,
    /// The expectation.
    pub expect: Expectation,
    /// Warnings the case expects, if it says.
    pub warnings: Option<Vec<String>>,
    /// Runs with no other case at once.
    pub exclusive: bool,
    /// The case's namespaces (renamed).
    pub namespaces: Vec<String>,
    /// Every name the run gave, with the case's own: (renamed, original),
    /// longest first.
    pub renames: Vec<(String, String)>,
}

impl Plan {
    /// `text` with the case's own names back.
    pub fn original_names(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (renamed, orig) in &self.renames {
            if out.contains(renamed.as_str()) {
                out = out.replace(renamed.as_str(), orig);
            }
        }
        out
    }

    /// `value` with the case's own names back in every string.
    pub fn original_names_in(&self, value: &Json) -> Json {
        match value {
            Json::String(s) => Json::String(self.original_names(s)),
            Json::Array(items) => {
                Json::Array(items.iter().map(|i| self.original_names_in(i)).collect())
            }
            Json::Object(m) => Json::Object(
                m.iter()
                    .map(|(k, v)| (self.original_names(k), self.original_names_in(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

fn list<'a>(doc: &'a Json, key: &str) -> &'a [Json] {
    doc.get(key)
        .and_then(Json::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn str_at<'a>(v: &'a Json, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// Cluster-scoped objects the apiserver creates through admission by itself
/// (a Service's cluster IP is an IPAddress), left out of every binding
/// unless the case's request is for one.
const SYSTEM_CLUSTER_RESOURCES: [(&str, &str); 2] = [
    ("networking.k8s.io", "ipaddresses"),
    ("networking.k8s.io", "servicecidrs"),
];

/// The renaming of one case.
struct Names {
    prefix: String,
    namespaces: BTreeMap<String, String>,
}

impl Names {
    fn namespace(&mut self, orig: &str) -> String {
        if let Some(n) = self.namespaces.get(orig) {
            return n.clone();
        }
        let mut n = format!("{}-{orig}", self.prefix);
        n.truncate(63);
        let n = n.trim_end_matches('-').to_string();
        self.namespaces.insert(orig.to_string(), n.clone());
        n
    }

    /// A namespace the case keeps its name for.
    fn keep_namespace(&mut self, orig: &str) {
        self.namespaces.insert(orig.to_string(), orig.to_string());
    }

    /// A fresh namespace name as long as `orig` (a policy may read its
    /// size), made from the run's prefix; the prefixed name where `orig`
    /// is too short to be fresh.
    fn namespace_of_same_length(&mut self, orig: &str) -> String {
        if orig.len() < 5 {
            return self.namespace(orig);
        }
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&self.prefix, orig).hash(&mut hasher);
        let mut bits = hasher.finish();
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let name: String = (0..orig.len())
            .map(|i| {
                // A DNS label starts with a letter here and ends with one.
                let range = if i == 0 || i + 1 == orig.len() {
                    26
                } else {
                    36
                };
                let c = ALPHABET[(bits % range) as usize] as char;
                bits = bits.rotate_right(5) ^ 0x9e37_79b9_7f4a_7c15;
                c
            })
            .collect();
        self.namespaces.insert(orig.to_string(), name.clone());
        name
    }

    fn unique(&self, orig: &str) -> String {
        format!("{}-{orig}", self.prefix)
    }

    fn rename_namespace_of(&mut self, object: &mut Json) {
        if let Some(ns) = object
            .get("metadata")
            .and_then(|m| m.get("namespace"))
            .and_then(Json::as_str)
            .map(str::to_string)
        {
            object["metadata"]["namespace"] = Json::from(self.namespace(&ns));
        }
    }

    /// The `kubernetes.io/metadata.name` values of a label selector.
    fn rewrite_selector(&mut self, selector: &mut Json) {
        if let Some(v) = selector
            .get_mut("matchLabels")
            .and_then(|m| m.get_mut(NAMESPACE_NAME_LABEL))
        {
            if let Some(s) = v.as_str().map(str::to_string) {
                *v = Json::from(self.namespace(&s));
            }
        }
        if let Some(exprs) = selector
            .get_mut("matchExpressions")
            .and_then(Json::as_array_mut)
        {
            for e in exprs {
                if e["key"] != NAMESPACE_NAME_LABEL {
                    continue;
                }
                if let Some(values) = e.get_mut("values").and_then(Json::as_array_mut) {
                    for v in values {
                        if let Some(s) = v.as_str().map(str::to_string) {
                            *v = Json::from(self.namespace(&s));
                        }
                    }
                }
            }
        }
    }
}

fn collection_of(
    table: &ResourceTable,
    object: &Json,
    what: &str,
) -> Result<(Collection, String), String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let name = str_at(object, &["metadata", "name"])
        .ok_or_else(|| format!("{what} {api_version} {kind} has no metadata.name"))?
        .to_string();
    let info = table
        .resource_for_kind(&GroupVersionKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        })
        .ok_or_else(|| format!("{what} {api_version} {kind} {name}: unknown kind"))?;
    let namespace = match info.scope {
        Scope::Namespaced => Some(
            str_at(object, &["metadata", "namespace"])
                .unwrap_or("default")
                .to_string(),
        ),
        Scope::Cluster => None,
    };
    Ok((
        Collection {
            group: info.gvr.group.clone(),
            version: info.gvr.version.clone(),
            resource: info.gvr.resource.clone(),
            namespace,
        },
        name,
    ))
}

fn admission_collection(version: &str, resource: &str) -> Collection {
    Collection {
        group: "admissionregistration.k8s.io".into(),
        version: version.into(),
        resource: resource.into(),
        namespace: None,
    }
}

fn rbac(resource: &str, namespace: Option<&str>) -> Collection {
    Collection {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: namespace.map(str::to_string),
    }
}

/// A role granting `rules` to `subjects` (in `namespace`, or cluster-wide).
fn grant(
    name: &str,
    namespace: Option<&str>,
    rules: Vec<Json>,
    subjects: Vec<Json>,
) -> Vec<ClusterObject> {
    let (role_kind, role_res, binding_kind, binding_res) = match namespace {
        Some(_) => ("Role", "roles", "RoleBinding", "rolebindings"),
        None => (
            "ClusterRole",
            "clusterroles",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
    };
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = Json::from(ns);
    }
    vec![
        ClusterObject {
            collection: rbac(role_res, namespace),
            name: name.into(),
            object: json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": role_kind,
                "metadata": metadata, "rules": rules}),
        },
        ClusterObject {
            collection: rbac(binding_res, namespace),
            name: name.into(),
            object: json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding_kind,
                "metadata": metadata,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
                "subjects": subjects}),
        },
    ]
}

fn user_subject(name: &str) -> Json {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name})
}

/// Plans `case`, the `index`th of run `run`.
pub fn plan(case: &Case, index: usize, run: &str) -> Planned {
    match plan_case(case, index, run) {
        Ok(p) => p,
        Err(e) => Planned::Invalid(format!("{}: {e}", case.source)),
    }
}

fn plan_case(case: &Case, index: usize, run: &str) -> Result<Planned, String> {
    let doc = &case.doc;
    let (request, _, table) = case_request(case)?;
    let request = &request;
    let (policies, bindings) = policy_documents(case)?;
    let policy_text = serde_json::to_string(&policies).unwrap_or_default();
    if request.operation == "CONNECT" {
        return Ok(Planned::Skip(
            "CONNECT: the apiserver admits a CONNECT only when it opens the connection \
             (exec, attach, port-forward to a running Pod), never as a dry run"
                .into(),
        ));
    }
    if !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
        return Ok(Planned::Skip(format!(
            "operation {}: the runner sends CREATE and UPDATE",
            request.operation
        )));
    }
    if request.dry_run != Some(true) && policy_text.contains("dryRun") {
        return Ok(Planned::Skip(
            "non-dry-run request.dryRun: the policies read request.dryRun, and every \
             request the runner sends is a dry run"
                .into(),
        ));
    }
    // Why a failure is not the case's (a renamed name's text), if it may be.
    let mut renamed_text = None;
    if request.operation == "UPDATE"
        && request.resource.group.is_empty()
        && request.resource.resource == "namespaces"
    {
        let name = if request.name.is_empty() {
            doc.get("object")
                .and_then(|o| str_at(o, &["metadata", "name"]))
                .unwrap_or_default()
        } else {
            request.name.as_str()
        };
        let quoted = [format!("\\\"{name}\\\""), format!("'{name}'")];
        if !name.is_empty() && quoted.iter().any(|q| policy_text.contains(q.as_str())) {
            renamed_text = Some(format!(
                "text of an updated Namespace's name: the policies compare the name {name:?}, \
                 and the Namespace an UPDATE needs is created under a fresh name of the same \
                 length (a Namespace's name is never free again: deleted, it stays Terminating)"
            ));
        }
    }
    if policy_text.contains("request.uid") {
        return Ok(Planned::Skip(
            "request.uid: the apiserver gives each request a uid of its own".into(),
        ));
    }
    let grants = list(doc, "authorizer").iter().any(|d| d["allowed"] == true);
    if grants && policy_text.contains(".reason()") {
        return Ok(Planned::Skip(
            "reason of an allowed authorizer decision: the runner grants it by RBAC, \
             whose reason names the run's own RoleBinding"
                .into(),
        ));
    }
    let object = doc
        .get("object")
        .filter(|o| !o.is_null())
        .cloned()
        .ok_or("the case has no object")?;
    let mut names = Names {
        prefix: format!("kmc-{run}-{index}"),
        namespaces: BTreeMap::new(),
    };
    let table = &table;
    let mut setup = Vec::new();
    let mut crds = Vec::new();
    let mut namespace_objects = Vec::new();
    let mut others = Vec::new();
    let mut keeps_cluster_names = false;
    for (i, r) in list(doc, "resources").iter().enumerate() {
        let kind = r["kind"].as_str().unwrap_or_default();
        if kind == "CustomResourceDefinition" {
            crds.push(r.clone());
            continue;
        }
        if kind == "Namespace" && r["apiVersion"] == "v1" {
            let orig = str_at(r, &["metadata", "name"])
                .ok_or(format!("resources[{i}]: Namespace has no metadata.name"))?;
            let mut ns = r.clone();
            ns["metadata"]["name"] = Json::from(names.namespace(orig));
            namespace_objects.push(ns);
            continue;
        }
        let (collection, name) = collection_of(table, r, &format!("resources[{i}]"))?;
        let mut o = r.clone();
        let (collection, name) = match collection.namespace {
            Some(ns) => {
                let renamed = names.namespace(&ns);
                o["metadata"]["namespace"] = Json::from(renamed.as_str());
                (
                    Collection {
                        namespace: Some(renamed),
                        ..collection
                    },
                    name,
                )
            }
            // A cluster-scoped object keeps its name (a policy may read
            // it, as params.metadata.name): the case runs alone.
            None => {
                keeps_cluster_names = true;
                (collection, name)
            }
        };
        others.push(ClusterObject {
            collection,
            name,
            object: o,
        });
    }
    // The request.
    let gvr = &request.resource;
    let cluster_scoped = match table.scope_of(gvr) {
        Some(scope) => scope == Scope::Cluster,
        None => request.namespace.is_empty(),
    };
    let namespace = (!cluster_scoped).then(|| names.namespace(&request.namespace));
    // A cluster-scoped object keeps its name where it can, since a policy
    // may read it (`size(object.metadata.name)`), and its case runs alone:
    // a dry-run CREATE stores nothing, and an object created for an UPDATE
    // is deleted after. A Namespace is never deleted for good (it stays
    // Terminating without a controller manager): one updated gets a fresh
    // name of the same length.
    let object_orig_name = if request.name.is_empty() {
        str_at(&object, &["metadata", "name"])
            .unwrap_or_default()
            .to_string()
    } else {
        request.name.clone()
    };
    let is_namespace = gvr.group.is_empty() && gvr.resource == "namespaces";
    let object_name = match (cluster_scoped, is_namespace) {
        (false, _) => object_orig_name.clone(),
        (true, false) => object_orig_name.clone(),
        (true, true) if request.operation == "CREATE" => {
            names.keep_namespace(&object_orig_name);
            object_orig_name.clone()
        }
        (true, true) => names.namespace_of_same_length(&object_orig_name),
    };
    let rename_object = |o: &mut Json| {
        if cluster_scoped && o["metadata"]["name"] == object_orig_name.as_str() {
            o["metadata"]["name"] = Json::from(object_name.as_str());
        }
    };
    let collection = Collection {
        group: gvr.group.clone(),
        version: gvr.version.clone(),
        resource: gvr.resource.clone(),
        namespace: namespace.clone(),
    };
    if gvr.resource.is_empty() {
        return Err("the request's resource is unknown: give request.resource".into());
    }
    let kind = &request.kind;
    let known = table
        .resource(gvr)
        .is_some_and(|r| !r.custom || crds.iter().any(|c| defines(c, &gvr.group, &gvr.resource)));
    if !known && request.sub_resource.is_empty() {
        crds.push(deduced_crd(
            &gvr.group,
            &gvr.version,
            &gvr.resource,
            &kind.kind,
            namespace.is_some(),
        ));
    }
    let mut object = object;
    names.rename_namespace_of(&mut object);
    rename_object(&mut object);
    let as_written = object.clone();
    if request.sub_resource.is_empty() || request.sub_resource == "ephemeralcontainers" {
        complete_minimal(&mut object, None);
    }
    let case_object = object.clone();
    let old_object = doc.get("oldObject").filter(|o| !o.is_null()).cloned();
    let stored = match (request.operation.as_str(), old_object) {
        ("UPDATE", None) => return Err("an UPDATE case needs oldObject".into()),
        ("UPDATE", Some(mut old)) => {
            names.rename_namespace_of(&mut old);
            rename_object(&mut old);
            complete_minimal(&mut old, None);
            Some(stored_object(request, &collection, old)?)
        }
        _ => None,
    };
    // Policies and bindings.
    let mut policy_names = BTreeMap::new();
    let mut planned_policies = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let orig = str_at(p, &["metadata", "name"])
            .ok_or(format!("policies[{i}] has no metadata.name"))?;
        let renamed = names.unique(orig);
        policy_names.insert(orig.to_string(), renamed.clone());
        let mut p = p.clone();
        p["metadata"]["name"] = Json::from(renamed.as_str());
        if let Some(sel) = p
            .get_mut("spec")
            .and_then(|s| s.get_mut("matchConstraints"))
            .and_then(|m| m.get_mut("namespaceSelector"))
        {
            names.rewrite_selector(sel);
        }
        planned_policies.push(ClusterObject {
            collection: admission_collection(api_version_of(&p), "mutatingadmissionpolicies"),
            name: renamed,
            object: p,
        });
    }
    let mut binding_names = BTreeMap::new();
    let mut planned_bindings = Vec::new();
    for (i, b) in bindings.iter().enumerate() {
        let orig = str_at(b, &["metadata", "name"])
            .ok_or(format!("bindings[{i}] has no metadata.name"))?;
        let renamed = names.unique(orig);
        binding_names.insert(orig.to_string(), renamed.clone());
        let mut b = b.clone();
        b["metadata"]["name"] = Json::from(renamed.as_str());
        if let Some(spec) = b.get_mut("spec").and_then(Json::as_object_mut) {
            if let Some(p) = spec.get("policyName").and_then(Json::as_str) {
                if let Some(n) = policy_names.get(p) {
                    spec.insert("policyName".into(), Json::from(n.as_str()));
                }
            }
            if let Some(param) = spec.get_mut("paramRef").and_then(Json::as_object_mut) {
                if let Some(ns) = param.get("namespace").and_then(Json::as_str) {
                    let ns = names.namespace(ns);
                    param.insert("namespace".into(), Json::from(ns));
                }
            }
        }
        planned_bindings.push(b);
    }
    // Namespaces the objects name but the case does not list.
    let listed: Vec<String> = namespace_objects
        .iter()
        .filter_map(|n| str_at(n, &["metadata", "name"]).map(str::to_string))
        .collect();
    let case_namespaces: Vec<String> = names.namespaces.values().cloned().collect();
    for ns in &case_namespaces {
        if is_namespace && *ns == object_name {
            continue;
        }
        if !listed.contains(ns) {
            namespace_objects
                .push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        }
    }
    // Isolation: each binding acts in the case's namespaces only.
    for b in &mut planned_bindings {
        let name = b["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let spec = &mut b["spec"];
        if !spec["matchResources"].is_object() {
            spec["matchResources"] = json!({});
        }
        let sel = &mut spec["matchResources"]["namespaceSelector"];
        if !sel.is_object() {
            *sel = json!({});
        }
        names.rewrite_selector(sel);
        if !sel["matchExpressions"].is_array() {
            sel["matchExpressions"] = json!([]);
        }
        if let Some(exprs) = sel["matchExpressions"]
            .as_array_mut()
            .filter(|_| !case_namespaces.is_empty())
        {
            exprs.push(json!({"key": NAMESPACE_NAME_LABEL, "operator": "In",
                "values": case_namespaces}));
        }
        // The apiserver's own cluster-scoped objects, which a namespace
        // selector cannot keep apart: a Service's IPAddress, created
        // through admission when another case stores a Service.
        if !SYSTEM_CLUSTER_RESOURCES.contains(&(gvr.group.as_str(), gvr.resource.as_str())) {
            let exclude = &mut spec["matchResources"]["excludeResourceRules"];
            if !exclude.is_array() {
                *exclude = json!([]);
            }
            if let Some(rules) = exclude.as_array_mut() {
                rules.push(
                    json!({"apiGroups": ["networking.k8s.io"], "apiVersions": ["*"],
                    "operations": ["*"], "resources": ["ipaddresses", "servicecidrs"],
                    "scope": "Cluster"}),
                );
            }
        }
        planned_policies.push(ClusterObject {
            collection: admission_collection(api_version_of(b), "mutatingadmissionpolicybindings"),
            name,
            object: b.clone(),
        });
    }
    for ns in &namespace_objects {
        let name = ns["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // The Namespace the request creates, or its stored object.
        if is_namespace && name == object_name {
            continue;
        }
        setup.push(ClusterObject {
            collection: Collection {
                group: String::new(),
                version: "v1".into(),
                resource: "namespaces".into(),
                namespace: None,
            },
            name,
            object: ns.clone(),
        });
    }
    // Pods are admitted only with their ServiceAccount.
    if gvr.group.is_empty() && gvr.resource == "pods" {
        if let Some(ns) = &namespace {
            let sa = str_at(&object, &["spec", "serviceAccountName"])
                .unwrap_or("default")
                .to_string();
            setup.push(ClusterObject {
                collection: Collection {
                    group: String::new(),
                    version: "v1".into(),
                    resource: "serviceaccounts".into(),
                    namespace: Some(ns.clone()),
                },
                name: sa.clone(),
                object: json!({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": sa, "namespace": ns}}),
            });
        }
    }
    // RBAC: the user may send the request; the `authorizer` decisions.
    let user = (!request.user_info.username.is_empty()).then(|| request.user_info.clone());
    let mut exclusive = namespace.is_none() || keeps_cluster_names;
    if let Some(u) = &user {
        let verb = if request.operation == "CREATE" {
            "create"
        } else {
            "update"
        };
        let resource = if request.sub_resource.is_empty() {
            gvr.resource.clone()
        } else {
            format!("{}/{}", gvr.resource, request.sub_resource)
        };
        let mut rules =
            vec![json!({"apiGroups": [gvr.group], "resources": [resource], "verbs": [verb]})];
        if gvr.group == "rbac.authorization.k8s.io" {
            rules.push(
                json!({"apiGroups": [gvr.group], "resources": [gvr.resource],
                "verbs": ["escalate", "bind"]}),
            );
        }
        setup.extend(grant(
            &format!("{}-request", names.prefix),
            namespace.as_deref(),
            rules,
            vec![user_subject(&u.username)],
        ));
    }
    for (i, d) in list(doc, "authorizer").iter().enumerate() {
        if d["allowed"] != true {
            continue;
        }
        exclusive = true;
        let verb = d["verb"].as_str().unwrap_or("*");
        let subject = d["user"]
            .as_str()
            .or(user.as_ref().map(|u| u.username.as_str()))
            .map(user_subject);
        let Some(subject) = subject else {
            continue;
        };
        let rule = match d["path"].as_str() {
            Some(path) => json!({"nonResourceURLs": [path], "verbs": [verb]}),
            None => {
                let mut resource = d["resource"].as_str().unwrap_or("*").to_string();
                if let Some(s) = d["subresource"].as_str().filter(|s| !s.is_empty()) {
                    resource = format!("{resource}/{s}");
                }
                let mut rule = json!({"apiGroups": [d["group"].as_str().unwrap_or("*")],
                    "resources": [resource], "verbs": [verb]});
                if let Some(n) = d["name"].as_str().filter(|n| !n.is_empty()) {
                    rule["resourceNames"] = json!([n]);
                }
                rule
            }
        };
        // The namespace as the case's CEL names it: decisions are not renamed.
        let ns = d["namespace"]
            .as_str()
            .filter(|n| !n.is_empty() && d["path"].is_null());
        setup.extend(grant(
            &format!("{}-authorizer-{i}", names.prefix),
            ns,
            vec![rule],
            vec![subject],
        ));
    }
    setup.extend(others);
    // The expectation.
    let expect = doc.get("expect").cloned().unwrap_or(Json::Null);
    let expectation = match (expect.get("object"), expect.get("rejected")) {
        (Some(o), None) => {
            let mut o = o.clone();
            names.rename_namespace_of(&mut o);
            rename_object(&mut o);
            if request.sub_resource.is_empty() || request.sub_resource == "ephemeralcontainers" {
                complete_minimal(&mut o, Some(&as_written));
            }
            Expectation::Object(o)
        }
        (None, Some(r)) => {
            let text = r
                .get("messageContains")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_string();
            Expectation::Rejected(text)
        }
        _ => return Err("expect must hold exactly one of object / rejected".into()),
    };
    let warnings = expect.get("warnings").and_then(Json::as_array).map(|w| {
        w.iter()
            .filter_map(Json::as_str)
            .map(str::to_string)
            .collect()
    });
    let mut renames: Vec<(String, String)> = names
        .namespaces
        .iter()
        .chain(&policy_names)
        .chain(&binding_names)
        .filter(|(orig, renamed)| orig != renamed)
        .map(|(orig, renamed)| (renamed.clone(), orig.clone()))
        .collect();
    renames.sort_by_key(|(renamed, _)| std::cmp::Reverse(renamed.len()));
    Ok(Planned::Run(Box::new(Plan {
        case: case.name.clone(),
        renamed_text,
        setup,
        crds,
        policies: planned_policies,
        stored,
        operation: request.operation.clone(),
        collection,
        name: object_name.clone(),
        subresource: request.sub_resource.clone(),
        user,
        object,
        case_object,
        expect: expectation,
        warnings,
        exclusive,
        namespaces: case_namespaces,
        renames,
    })))
}

fn api_version_of(o: &Json) -> &str {
    o["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map_or("v1", |(_, v)| v)
}

fn defines(crd: &Json, group: &str, resource: &str) -> bool {
    crd["spec"]["group"] == group && crd["spec"]["names"]["plural"] == resource
}

/// The object an UPDATE finds stored: the old object, or, for the `scale`
/// subresource, the Deployment (or other workload) it scales.
fn stored_object(
    request: &crate::request::AdmissionRequest,
    collection: &Collection,
    old: Json,
) -> Result<ClusterObject, String> {
    let name = str_at(&old, &["metadata", "name"])
        .map(str::to_string)
        .unwrap_or_else(|| request.name.clone());
    if request.sub_resource == "scale" {
        let replicas = old["spec"]["replicas"].as_i64().unwrap_or(1);
        let api_version = if collection.group.is_empty() {
            collection.version.clone()
        } else {
            format!("{}/{}", collection.group, collection.version)
        };
        let kind = match collection.resource.as_str() {
            "deployments" => "Deployment",
            "statefulsets" => "StatefulSet",
            "replicasets" => "ReplicaSet",
            other => return Err(format!("the scale of {other}: the runner builds a Deployment, StatefulSet or ReplicaSet to scale")),
        };
        let labels = json!({"app": name});
        let object = json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": collection.namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause"}]}}}});
        return Ok(ClusterObject {
            collection: collection.clone(),
            name,
            object,
        });
    }
    Ok(ClusterObject {
        collection: collection.clone(),
        name,
        object: old,
    })
}

/// A CRD for a custom kind the case gives no CRD for: a schema that keeps
/// every field (lists atomic, maps granular, as the in-process runner
/// deduces).
fn deduced_crd(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Json {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group,
            "names": {"plural": plural, "kind": kind, "listKind": format!("{kind}List"),
                "singular": kind.to_lowercase()},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{"name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

/// The image the runner gives a container a `[no-defaulting]` case leaves
/// without one.
pub const FILLER_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The label the runner gives a workload a minimal case leaves without a
/// selector.
pub const FILLER_LABEL: &str = "kmutate.dev/conformance";

/// Completes a minimal (`[no-defaulting]`) workload so that the apiserver's
/// validation, which runs after admission, accepts it: a selector and
/// matching template labels when the workload has no selector, a container
/// when the pod spec has none, an image for each container without one.
/// The runner completes the case's object and its expected object alike, so
/// the change the case expects is unchanged: completing an expected object
/// (`of` the case's object as written), a container gets an image only
/// where the case's object has it without one, so a container a policy
/// adds without an image stays without one (and validation refuses it as
/// it refuses the answer).
pub fn complete_minimal(object: &mut Json, of: Option<&Json>) {
    let object_had_containers = has_containers(of.unwrap_or(object));
    let expected = of.is_some();
    let api_version = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let name = str_at(object, &["metadata", "name"])
        .unwrap_or("object")
        .to_string();
    let pod_spec: Option<&mut Json> = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Pod") => {
            if !object["spec"].is_object() {
                object["spec"] = json!({});
            }
            Some(&mut object["spec"])
        }
        ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
            if !object["spec"].is_object() {
                object["spec"] = json!({});
            }
            let spec = &mut object["spec"];
            if spec["selector"].is_null() {
                spec["selector"] = json!({"matchLabels": {FILLER_LABEL: name}});
                if !spec["template"]["metadata"]["labels"].is_object() {
                    if !spec["template"].is_object() {
                        spec["template"] = json!({});
                    }
                    if !spec["template"]["metadata"].is_object() {
                        spec["template"]["metadata"] = json!({});
                    }
                    spec["template"]["metadata"]["labels"] = json!({});
                }
                spec["template"]["metadata"]["labels"][FILLER_LABEL] = Json::from(name);
            }
            if !spec["template"]["spec"].is_object() {
                spec["template"]["spec"] = json!({});
            }
            Some(&mut spec["template"]["spec"])
        }
        _ => None,
    };
    let Some(pod_spec) = pod_spec else {
        return;
    };
    let has_containers = pod_spec["containers"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    if !object_had_containers && (!expected || !has_containers) {
        let filler = json!({"name": "kmutate-filler", "image": FILLER_IMAGE});
        match pod_spec["containers"].as_array_mut() {
            Some(list) => list.insert(0, filler),
            None => pod_spec["containers"] = json!([filler]),
        }
    }
    for list in ["containers", "initContainers"] {
        let imageless_in_object = |name: &Json| {
            of.is_none_or(|o| {
                pod_spec_of(o)[list].as_array().is_some_and(|items| {
                    items
                        .iter()
                        .any(|i| i["name"] == *name && i["image"].is_null())
                })
            })
        };
        if let Some(items) = pod_spec[list].as_array_mut() {
            for c in items {
                if c.is_object() && c["image"].is_null() && imageless_in_object(&c["name"]) {
                    c["image"] = Json::from(FILLER_IMAGE);
                }
            }
        }
    }
}

/// The pod spec of a Pod or workload.
fn pod_spec_of(object: &Json) -> &Json {
    if object["kind"] == "Pod" {
        &object["spec"]
    } else {
        &object["spec"]["template"]["spec"]
    }
}

/// Whether the pod spec of a workload or Pod has a container.
pub fn has_containers(object: &Json) -> bool {
    pod_spec_of(object)["containers"]
        .as_array()
        .is_some_and(|c| !c.is_empty())
}
