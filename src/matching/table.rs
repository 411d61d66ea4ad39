//! The resource table: which resource (plural) and scope each kind has, which
//! kind each resource and subresource takes, and which resources are
//! equivalent (the same objects served at another group/version).
//!
//! Built-in entries come from the `k8s-openapi` v1_36 types; custom resources
//! from CustomResourceDefinition objects.

use crate::request::{ClusterObjects, GroupVersionKind, GroupVersionResource};
use k8s_openapi::Resource;
use serde_json::Value;
use std::cmp::Ordering;

/// Where the objects of a resource live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// In a namespace.
    Namespaced,
    /// Cluster-wide.
    Cluster,
}

/// One resource at one group/version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// The group/version/resource (plural).
    pub gvr: GroupVersionResource,
    /// The kind of its objects.
    pub kind: GroupVersionKind,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// Its subresources with the kind each one takes, e.g. `("scale", autoscaling/v1 Scale)`.
    pub subresources: Vec<(String, GroupVersionKind)>,
    /// Whether the API server registers this version: built-in GA versions and
    /// versions enabled with [`ResourceTable::serve_version`]; every
    /// `spec.versions` entry of a CRD (the CRD handler registers them all).
    pub served: bool,
    /// Whether a CustomResourceDefinition defines it.
    pub custom: bool,
    /// Resources with the same identity are equivalent (upstream: the storage
    /// prefix; for a CRD its group/plural).
    identity: String,
}

impl ResourceInfo {
    /// The kind of `subresource` ("" for the resource itself), when it exists.
    pub fn subresource_kind(&self, subresource: &str) -> Option<&GroupVersionKind> {
        if subresource.is_empty() {
            return Some(&self.kind);
        }
        self.subresources
            .iter()
            .find(|(s, _)| s == subresource)
            .map(|(_, k)| k)
    }
}

/// A CustomResourceDefinition the table could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CustomResourceDefinition {name:?}: {reason}")]
pub struct CrdError {
    /// `metadata.name` of the CRD ("" when absent).
    pub name: String,
    /// What is wrong.
    pub reason: String,
}

/// Kinds, resources, scopes and equivalent versions of built-in resources
/// and CRDs.
#[derive(Clone, Debug)]
pub struct ResourceTable {
    /// In API server registration order (equivalents are tried in this order).
    resources: Vec<ResourceInfo>,
    /// Kinds only reachable as subresources (Scale, Eviction, TokenRequest).
    subresource_kinds: Vec<GroupVersionKind>,
}

impl Default for ResourceTable {
    fn default() -> Self {
        ResourceTable::builtin()
    }
}

// ---------------------------------------------------------------------------
// Built-in types, from k8s-openapi.

/// Scope of a k8s-openapi type, read off its `Resource::Scope`.
#[derive(Clone, Copy)]
enum TypeScope {
    Namespaced,
    Cluster,
    Subresource,
}

trait ScopeOf {
    const SCOPE: TypeScope;
}
impl ScopeOf for k8s_openapi::NamespaceResourceScope {
    const SCOPE: TypeScope = TypeScope::Namespaced;
}
impl ScopeOf for k8s_openapi::ClusterResourceScope {
    const SCOPE: TypeScope = TypeScope::Cluster;
}
impl ScopeOf for k8s_openapi::SubResourceScope {
    const SCOPE: TypeScope = TypeScope::Subresource;
}

struct BuiltinType {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    scope: TypeScope,
}

macro_rules! builtin_types {
    ($($ty:ty),* $(,)?) => {
        &[$(BuiltinType {
            group: <$ty as Resource>::GROUP,
            version: <$ty as Resource>::VERSION,
            kind: <$ty as Resource>::KIND,
            plural: <$ty as Resource>::URL_PATH_SEGMENT,
            scope: <<$ty as Resource>::Scope as ScopeOf>::SCOPE,
        }),*]
    };
}

/// Every resource type of the v1_36 API tree (core first: the legacy group is
/// installed first, which orders the core/events.k8s.io `events` pair).
/// The discovery-only meta types (APIGroup, Status, ...) are left out.
const BUILTIN_TYPES: &[BuiltinType] = builtin_types!(
    // core/v1
    k8s_openapi::api::core::v1::Binding,
    k8s_openapi::api::core::v1::ComponentStatus,
    k8s_openapi::api::core::v1::ConfigMap,
    k8s_openapi::api::core::v1::Endpoints,
    k8s_openapi::api::core::v1::Event,
    k8s_openapi::api::core::v1::LimitRange,
    k8s_openapi::api::core::v1::Namespace,
    k8s_openapi::api::core::v1::Node,
    k8s_openapi::api::core::v1::PersistentVolume,
    k8s_openapi::api::core::v1::PersistentVolumeClaim,
    k8s_openapi::api::core::v1::Pod,
    k8s_openapi::api::core::v1::PodTemplate,
    k8s_openapi::api::core::v1::ReplicationController,
    k8s_openapi::api::core::v1::ResourceQuota,
    k8s_openapi::api::core::v1::Secret,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::core::v1::ServiceAccount,
    // admissionregistration.k8s.io
    k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicyBinding,
    k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    k8s_openapi::api::admissionregistration::v1alpha1::MutatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1alpha1::MutatingAdmissionPolicyBinding,
    k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1beta1::MutatingAdmissionPolicyBinding,
    // internal.apiserver.k8s.io
    k8s_openapi::api::apiserverinternal::v1alpha1::StorageVersion,
    // apps
    k8s_openapi::api::apps::v1::ControllerRevision,
    k8s_openapi::api::apps::v1::DaemonSet,
    k8s_openapi::api::apps::v1::Deployment,
    k8s_openapi::api::apps::v1::ReplicaSet,
    k8s_openapi::api::apps::v1::StatefulSet,
    // authentication.k8s.io
    k8s_openapi::api::authentication::v1::SelfSubjectReview,
    k8s_openapi::api::authentication::v1::TokenRequest,
    k8s_openapi::api::authentication::v1::TokenReview,
    // authorization.k8s.io
    k8s_openapi::api::authorization::v1::LocalSubjectAccessReview,
    k8s_openapi::api::authorization::v1::SelfSubjectAccessReview,
    k8s_openapi::api::authorization::v1::SelfSubjectRulesReview,
    k8s_openapi::api::authorization::v1::SubjectAccessReview,
    // autoscaling
    k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler,
    k8s_openapi::api::autoscaling::v1::Scale,
    k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
    // batch
    k8s_openapi::api::batch::v1::CronJob,
    k8s_openapi::api::batch::v1::Job,
    // certificates.k8s.io
    k8s_openapi::api::certificates::v1::CertificateSigningRequest,
    k8s_openapi::api::certificates::v1alpha1::ClusterTrustBundle,
    k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle,
    k8s_openapi::api::certificates::v1beta1::PodCertificateRequest,
    // coordination.k8s.io
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::coordination::v1alpha2::LeaseCandidate,
    k8s_openapi::api::coordination::v1beta1::LeaseCandidate,
    // discovery.k8s.io
    k8s_openapi::api::discovery::v1::EndpointSlice,
    // events.k8s.io
    k8s_openapi::api::events::v1::Event,
    // flowcontrol.apiserver.k8s.io
    k8s_openapi::api::flowcontrol::v1::FlowSchema,
    k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration,
    // networking.k8s.io
    k8s_openapi::api::networking::v1::Ingress,
    k8s_openapi::api::networking::v1::IngressClass,
    k8s_openapi::api::networking::v1::IPAddress,
    k8s_openapi::api::networking::v1::NetworkPolicy,
    k8s_openapi::api::networking::v1::ServiceCIDR,
    k8s_openapi::api::networking::v1beta1::IPAddress,
    k8s_openapi::api::networking::v1beta1::ServiceCIDR,
    // node.k8s.io
    k8s_openapi::api::node::v1::RuntimeClass,
    // policy
    k8s_openapi::api::policy::v1::Eviction,
    k8s_openapi::api::policy::v1::PodDisruptionBudget,
    // rbac.authorization.k8s.io
    k8s_openapi::api::rbac::v1::ClusterRole,
    k8s_openapi::api::rbac::v1::ClusterRoleBinding,
    k8s_openapi::api::rbac::v1::Role,
    k8s_openapi::api::rbac::v1::RoleBinding,
    // resource.k8s.io
    k8s_openapi::api::resource::v1::DeviceClass,
    k8s_openapi::api::resource::v1::ResourceClaim,
    k8s_openapi::api::resource::v1::ResourceClaimTemplate,
    k8s_openapi::api::resource::v1::ResourceSlice,
    k8s_openapi::api::resource::v1alpha3::DeviceTaintRule,
    k8s_openapi::api::resource::v1alpha3::ResourcePoolStatusRequest,
    k8s_openapi::api::resource::v1beta1::DeviceClass,
    k8s_openapi::api::resource::v1beta1::ResourceClaim,
    k8s_openapi::api::resource::v1beta1::ResourceClaimTemplate,
    k8s_openapi::api::resource::v1beta1::ResourceSlice,
    k8s_openapi::api::resource::v1beta2::DeviceClass,
    k8s_openapi::api::resource::v1beta2::DeviceTaintRule,
    k8s_openapi::api::resource::v1beta2::ResourceClaim,
    k8s_openapi::api::resource::v1beta2::ResourceClaimTemplate,
    k8s_openapi::api::resource::v1beta2::ResourceSlice,
    // scheduling.k8s.io
    k8s_openapi::api::scheduling::v1::PriorityClass,
    k8s_openapi::api::scheduling::v1alpha2::PodGroup,
    k8s_openapi::api::scheduling::v1alpha2::Workload,
    // storage.k8s.io
    k8s_openapi::api::storage::v1::CSIDriver,
    k8s_openapi::api::storage::v1::CSINode,
    k8s_openapi::api::storage::v1::CSIStorageCapacity,
    k8s_openapi::api::storage::v1::StorageClass,
    k8s_openapi::api::storage::v1::VolumeAttachment,
    k8s_openapi::api::storage::v1::VolumeAttributesClass,
    k8s_openapi::api::storage::v1beta1::VolumeAttributesClass,
    // storagemigration.k8s.io
    k8s_openapi::api::storagemigration::v1beta1::StorageVersionMigration,
    // apiextensions.k8s.io
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    // apiregistration.k8s.io
    k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService,
);

/// The kind a subresource takes: its parent's kind, or a fixed group/version/kind.
type SubKind = Option<(&'static str, &'static str, &'static str)>;

const SCALE: SubKind = Some(("autoscaling", "v1", "Scale"));

/// The subresources of one built-in group/resource: (group, resource,
/// [(subresource, kind)]).
type BuiltinSubresources = (
    &'static str,
    &'static str,
    &'static [(&'static str, SubKind)],
);

/// Subresources of built-in resources as the v1.36 registries install them.
/// A `None` kind is the parent's kind.
const BUILTIN_SUBRESOURCES: &[BuiltinSubresources] = &[
    (
        "",
        "pods",
        &[
            ("status", None),
            ("binding", Some(("", "v1", "Binding"))),
            ("eviction", Some(("policy", "v1", "Eviction"))),
            ("ephemeralcontainers", None),
            ("resize", None),
            ("exec", Some(("", "v1", "PodExecOptions"))),
            ("attach", Some(("", "v1", "PodAttachOptions"))),
            ("portforward", Some(("", "v1", "PodPortForwardOptions"))),
            ("proxy", Some(("", "v1", "PodProxyOptions"))),
        ],
    ),
    (
        "",
        "nodes",
        &[
            ("status", None),
            ("proxy", Some(("", "v1", "NodeProxyOptions"))),
        ],
    ),
    (
        "",
        "services",
        &[
            ("status", None),
            ("proxy", Some(("", "v1", "ServiceProxyOptions"))),
        ],
    ),
    ("", "namespaces", &[("status", None), ("finalize", None)]),
    ("", "persistentvolumes", &[("status", None)]),
    ("", "persistentvolumeclaims", &[("status", None)]),
    (
        "",
        "replicationcontrollers",
        &[("status", None), ("scale", SCALE)],
    ),
    ("", "resourcequotas", &[("status", None)]),
    (
        "",
        "serviceaccounts",
        &[(
            "token",
            Some(("authentication.k8s.io", "v1", "TokenRequest")),
        )],
    ),
    ("apps", "deployments", &[("status", None), ("scale", SCALE)]),
    ("apps", "replicasets", &[("status", None), ("scale", SCALE)]),
    (
        "apps",
        "statefulsets",
        &[("status", None), ("scale", SCALE)],
    ),
    ("apps", "daemonsets", &[("status", None)]),
    ("batch", "jobs", &[("status", None)]),
    ("batch", "cronjobs", &[("status", None)]),
    (
        "autoscaling",
        "horizontalpodautoscalers",
        &[("status", None)],
    ),
    ("policy", "poddisruptionbudgets", &[("status", None)]),
    ("networking.k8s.io", "ingresses", &[("status", None)]),
    ("networking.k8s.io", "servicecidrs", &[("status", None)]),
    (
        "certificates.k8s.io",
        "certificatesigningrequests",
        &[("status", None), ("approval", None)],
    ),
    (
        "certificates.k8s.io",
        "podcertificaterequests",
        &[("status", None)],
    ),
    (
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        &[("status", None)],
    ),
    ("apiregistration.k8s.io", "apiservices", &[("status", None)]),
    (
        "flowcontrol.apiserver.k8s.io",
        "flowschemas",
        &[("status", None)],
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations",
        &[("status", None)],
    ),
    ("storage.k8s.io", "volumeattachments", &[("status", None)]),
    ("resource.k8s.io", "resourceclaims", &[("status", None)]),
    (
        "storagemigration.k8s.io",
        "storageversionmigrations",
        &[("status", None)],
    ),
    (
        "internal.apiserver.k8s.io",
        "storageversions",
        &[("status", None)],
    ),
];

/// Built-in group/resources stored together (kube-apiserver's cohabiting
/// resources that are still served in v1.36), so equivalent.
const COHABITING: &[(&str, &str, &str)] = &[
    ("", "events", "/events"),
    ("events.k8s.io", "events", "/events"),
];

fn gvk(group: &str, version: &str, kind: &str) -> GroupVersionKind {
    GroupVersionKind {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
    }
}

fn gvr(group: &str, version: &str, resource: &str) -> GroupVersionResource {
    GroupVersionResource {
        group: group.to_string(),
        version: version.to_string(),
        resource: resource.to_string(),
    }
}

/// A Kubernetes version string split for ordering: (stability, major, minor),
/// stability 2 = GA, 1 = beta, 0 = alpha; `None` when not of that form.
fn parse_kube_version(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if digits_end == 0 {
        return None;
    }
    let major: u64 = rest[..digits_end].parse().ok()?;
    let rest = &rest[digits_end..];
    if rest.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, rest) = if let Some(r) = rest.strip_prefix("alpha") {
        (0, r)
    } else if let Some(r) = rest.strip_prefix("beta") {
        (1, r)
    } else {
        return None;
    };
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stability, major, rest.parse().ok()?))
}

/// Kube-aware version priority (v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > other,
/// others alphabetically): `Less` means `a` comes first.
pub(crate) fn version_priority(a: &str, b: &str) -> Ordering {
    match (parse_kube_version(a), parse_kube_version(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Whether a version is GA (`v1`, `v2`, ...): only those are served by default.
fn is_ga(version: &str) -> bool {
    matches!(parse_kube_version(version), Some((2, _, _)))
}

impl ResourceTable {
    /// The built-in resources of v1.36 (no CRDs).
    pub fn builtin() -> Self {
        let mut resources = Vec::new();
        let mut subresource_kinds = Vec::new();
        for t in BUILTIN_TYPES {
            let kind = gvk(t.group, t.version, t.kind);
            let scope = match t.scope {
                TypeScope::Namespaced => Scope::Namespaced,
                TypeScope::Cluster => Scope::Cluster,
                TypeScope::Subresource => {
                    subresource_kinds.push(kind);
                    continue;
                }
            };
            let subresources = BUILTIN_SUBRESOURCES
                .iter()
                .find(|(g, r, _)| *g == t.group && *r == t.plural)
                .map(|(_, _, subs)| {
                    subs.iter()
                        .map(|(name, k)| {
                            let k = match k {
                                Some((g, v, k)) => gvk(g, v, k),
                                None => kind.clone(),
                            };
                            (name.to_string(), k)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let identity = COHABITING
                .iter()
                .find(|(g, r, _)| *g == t.group && *r == t.plural)
                .map(|(_, _, id)| id.to_string())
                .unwrap_or_else(|| format!("{}/{}", t.group, t.plural));
            resources.push(ResourceInfo {
                gvr: gvr(t.group, t.version, t.plural),
                kind,
                scope,
                subresources,
                served: is_ga(t.version),
                custom: false,
                identity,
            });
        }
        // Registration order: groups in install order (as listed), versions
        // of a group by priority (the API server installs PrioritizedVersions).
        let mut group_order: Vec<String> = Vec::new();
        for r in &resources {
            if !group_order.contains(&r.gvr.group) {
                group_order.push(r.gvr.group.clone());
            }
        }
        resources.sort_by(|a, b| {
            let ga = group_order.iter().position(|g| *g == a.gvr.group);
            let gb = group_order.iter().position(|g| *g == b.gvr.group);
            ga.cmp(&gb)
                .then_with(|| version_priority(&a.gvr.version, &b.gvr.version))
        });
        ResourceTable {
            resources,
            subresource_kinds,
        }
    }

    /// The built-in resources plus every readable CRD of `crds` (pass
    /// `cluster.crds()`; unreadable CRDs are skipped, [`ResourceTable::add_crd`]
    /// says why).
    pub fn new(crds: &[Value]) -> Self {
        let mut table = ResourceTable::builtin();
        for crd in crds {
            let _ = table.add_crd(crd);
        }
        table
    }

    /// Adds (or replaces) the resources a CustomResourceDefinition defines.
    pub fn add_crd(&mut self, crd: &Value) -> Result<(), CrdError> {
        let entries = crd_resources(crd)?;
        if let Some(first) = entries.first() {
            let identity = first.identity.clone();
            self.resources
                .retain(|r| !(r.custom && r.identity == identity));
        }
        self.resources.extend(entries);
        Ok(())
    }

    /// Marks a built-in group/version as served (as `--runtime-config` would).
    pub fn serve_version(&mut self, group: &str, version: &str) {
        for r in &mut self.resources {
            if r.gvr.group == group && r.gvr.version == version {
                r.served = true;
            }
        }
    }

    /// Every resource, in registration order.
    pub fn resources(&self) -> &[ResourceInfo] {
        &self.resources
    }

    /// The resource `gvr`.
    pub fn resource(&self, gvr: &GroupVersionResource) -> Option<&ResourceInfo> {
        self.resources.iter().find(|r| r.gvr == *gvr)
    }

    /// The (top-level) resource whose objects are of kind `gvk`.
    pub fn resource_for_kind(&self, gvk: &GroupVersionKind) -> Option<&ResourceInfo> {
        self.resources.iter().find(|r| r.kind == *gvk)
    }

    /// The kind that `subresource` ("" for the resource itself) of `gvr` takes.
    pub fn kind_for(
        &self,
        gvr: &GroupVersionResource,
        subresource: &str,
    ) -> Option<GroupVersionKind> {
        self.resource(gvr)?.subresource_kind(subresource).cloned()
    }

    /// Whether `gvk` is the kind of some resource or subresource in the table.
    pub fn knows_kind(&self, gvk: &GroupVersionKind) -> bool {
        self.subresource_kinds.contains(gvk)
            || self
                .resources
                .iter()
                .any(|r| r.kind == *gvk || r.subresources.iter().any(|(_, k)| k == gvk))
    }

    /// Whether objects of `api_version`/`kind` are namespaced (`group` is the
    /// API group of `api_version`); `None` for an unknown kind.
    pub fn is_namespaced(&self, group: &str, api_version: &str, kind: &str) -> Option<bool> {
        let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
        let info = self.resource_for_kind(&gvk(group, version, kind))?;
        Some(info.scope == Scope::Namespaced)
    }

    /// The scope of `gvr`.
    pub fn scope_of(&self, gvr: &GroupVersionResource) -> Option<Scope> {
        self.resource(gvr).map(|r| r.scope)
    }

    /// The resources equivalent to `gvr` (itself included when registered) that
    /// have `subresource`, in registration order: upstream
    /// `EquivalentResourceMapper.EquivalentResourcesFor`.
    pub fn equivalents(&self, gvr: &GroupVersionResource, subresource: &str) -> Vec<&ResourceInfo> {
        let Some(me) = self.resource(gvr) else {
            return Vec::new();
        };
        self.resources
            .iter()
            .filter(|r| r.identity == me.identity)
            .filter(|r| r.served || r.gvr == *gvr)
            .filter(|r| r.subresource_kind(subresource).is_some())
            .collect()
    }

    /// The unique resource having `subresource` of kind `kind`, if only one has.
    pub(crate) fn unique_parent_of(
        &self,
        subresource: &str,
        kind: &GroupVersionKind,
    ) -> Option<&ResourceInfo> {
        let mut found = self
            .resources
            .iter()
            .filter(|r| r.subresource_kind(subresource) == Some(kind));
        let first = found.next()?;
        match found.next() {
            None => Some(first),
            Some(_) => None,
        }
    }

    /// A table holding only the CRDs of `cluster` that define `group`/`plural`.
    pub(crate) fn crds_for(cluster: &ClusterObjects, group: &str, plural: &str) -> Self {
        let mut table = ResourceTable {
            resources: Vec::new(),
            subresource_kinds: Vec::new(),
        };
        for crd in cluster.crds() {
            if let Ok(entries) = crd_resources(crd) {
                if entries
                    .first()
                    .is_some_and(|e| e.gvr.group == group && e.gvr.resource == plural)
                {
                    table.resources = entries;
                }
            }
        }
        table
    }

    /// Registers a resource with an explicit equivalence identity (tests).
    #[cfg(test)]
    pub(crate) fn register(
        &mut self,
        gvr: GroupVersionResource,
        kind: GroupVersionKind,
        subresources: Vec<(String, GroupVersionKind)>,
        identity: &str,
    ) {
        self.resources.push(ResourceInfo {
            gvr,
            kind,
            scope: Scope::Namespaced,
            subresources,
            served: true,
            custom: true,
            identity: identity.to_string(),
        });
    }

    /// An empty table (tests).
    #[cfg(test)]
    pub(crate) fn empty() -> Self {
        ResourceTable {
            resources: Vec::new(),
            subresource_kinds: Vec::new(),
        }
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The resources one CRD defines, one per `spec.versions` entry, in order.
fn crd_resources(crd: &Value) -> Result<Vec<ResourceInfo>, CrdError> {
    let name = str_at(crd, "/metadata/name")
        .unwrap_or_default()
        .to_string();
    let err = |reason: &str| CrdError {
        name: name.clone(),
        reason: reason.to_string(),
    };
    let group = str_at(crd, "/spec/group").ok_or_else(|| err("spec.group is missing"))?;
    // The handler serves status.acceptedNames; fall back to spec.names.
    let plural = str_at(crd, "/status/acceptedNames/plural")
        .or_else(|| str_at(crd, "/spec/names/plural"))
        .ok_or_else(|| err("spec.names.plural is missing"))?;
    let kind = str_at(crd, "/status/acceptedNames/kind")
        .or_else(|| str_at(crd, "/spec/names/kind"))
        .ok_or_else(|| err("spec.names.kind is missing"))?;
    let scope = match str_at(crd, "/spec/scope") {
        Some("Namespaced") => Scope::Namespaced,
        Some("Cluster") => Scope::Cluster,
        Some(other) => {
            return Err(err(&format!(
                "spec.scope {other:?} is neither Namespaced nor Cluster"
            )))
        }
        None => return Err(err("spec.scope is missing")),
    };
    // apiextensions.k8s.io/v1beta1 had one top-level `subresources` and `version`.
    let top_subresources = crd.pointer("/spec/subresources");
    let mut versions: Vec<(&str, Option<&Value>)> = Vec::new();
    if let Some(list) = crd.pointer("/spec/versions").and_then(Value::as_array) {
        for v in list {
            let vname =
                str_at(v, "/name").ok_or_else(|| err("a spec.versions entry has no name"))?;
            versions.push((vname, v.get("subresources").or(top_subresources)));
        }
    }
    if versions.is_empty() {
        if let Some(v) = str_at(crd, "/spec/version") {
            versions.push((v, top_subresources));
        }
    }
    if versions.is_empty() {
        return Err(err("spec.versions is empty"));
    }
    let identity = format!("crd:{group}/{plural}");
    Ok(versions
        .into_iter()
        .map(|(version, subs)| {
            let kind = gvk(group, version, kind);
            let mut subresources = Vec::new();
            if subs
                .and_then(|s| s.get("status"))
                .is_some_and(|s| !s.is_null())
            {
                subresources.push(("status".to_string(), kind.clone()));
            }
            if subs
                .and_then(|s| s.get("scale"))
                .is_some_and(|s| !s.is_null())
            {
                subresources.push(("scale".to_string(), gvk("autoscaling", "v1", "Scale")));
            }
            ResourceInfo {
                gvr: gvr(group, version, plural),
                kind,
                scope,
                subresources,
                served: true,
                custom: true,
                identity: identity.clone(),
            }
        })
        .collect())
}

impl crate::cel::field_warnings::ResourceKinds for ResourceTable {
    fn kind_of(&self, gvr: &GroupVersionResource) -> Option<GroupVersionKind> {
        self.resource(gvr).map(|r| r.kind.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_kinds_resources_and_scopes() {
        let t = ResourceTable::builtin();
        let pods = t.resource_for_kind(&gvk("", "v1", "Pod")).unwrap();
        assert_eq!(pods.gvr, gvr("", "v1", "pods"));
        assert_eq!(pods.scope, Scope::Namespaced);
        let ns = t.resource_for_kind(&gvk("", "v1", "Namespace")).unwrap();
        assert_eq!(ns.scope, Scope::Cluster);
        assert_eq!(
            t.resource_for_kind(&gvk("apps", "v1", "Deployment"))
                .unwrap()
                .gvr,
            gvr("apps", "v1", "deployments")
        );
        assert_eq!(
            t.kind_for(&gvr("apps", "v1", "deployments"), "scale"),
            Some(gvk("autoscaling", "v1", "Scale"))
        );
        assert_eq!(
            t.kind_for(&gvr("", "v1", "pods"), "status"),
            Some(gvk("", "v1", "Pod"))
        );
        assert_eq!(t.kind_for(&gvr("", "v1", "pods"), "nope"), None);
        assert!(t.knows_kind(&gvk("autoscaling", "v1", "Scale")));
        assert!(t
            .resource_for_kind(&gvk("autoscaling", "v1", "Scale"))
            .is_none());
        for (g, v, r) in [
            ("batch", "v1", "jobs"),
            ("networking.k8s.io", "v1", "ingresses"),
            ("rbac.authorization.k8s.io", "v1", "clusterroles"),
            ("policy", "v1", "poddisruptionbudgets"),
            ("storage.k8s.io", "v1", "storageclasses"),
            ("autoscaling", "v2", "horizontalpodautoscalers"),
            (
                "admissionregistration.k8s.io",
                "v1",
                "mutatingadmissionpolicies",
            ),
            ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            ("scheduling.k8s.io", "v1", "priorityclasses"),
            ("coordination.k8s.io", "v1", "leases"),
            ("discovery.k8s.io", "v1", "endpointslices"),
            ("certificates.k8s.io", "v1", "certificatesigningrequests"),
            ("node.k8s.io", "v1", "runtimeclasses"),
            ("flowcontrol.apiserver.k8s.io", "v1", "flowschemas"),
            ("resource.k8s.io", "v1", "resourceclaims"),
        ] {
            assert!(t.resource(&gvr(g, v, r)).is_some(), "{g}/{v} {r}");
        }
    }

    // The binding index (`matching::index`) files bindings by resource name
    // and relies on this.
    #[test]
    fn equivalent_resources_share_their_resource_name() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": false},
                    {"name": "v2", "served": true, "storage": true}]}});
        let t = ResourceTable::new(&[crd]);
        for r in &t.resources {
            for e in t.equivalents(&r.gvr, "") {
                assert_eq!(e.gvr.resource, r.gvr.resource, "{:?} ~ {:?}", r.gvr, e.gvr);
            }
        }
    }

    #[test]
    fn builtin_equivalents_are_served_versions_in_priority_order() {
        let t = ResourceTable::builtin();
        let hpa: Vec<_> = t
            .equivalents(&gvr("autoscaling", "v1", "horizontalpodautoscalers"), "")
            .into_iter()
            .map(|r| r.gvr.version.clone())
            .collect();
        assert_eq!(hpa, ["v2", "v1"]);
        let events: Vec<_> = t
            .equivalents(&gvr("", "v1", "events"), "")
            .into_iter()
            .map(|r| r.gvr.group.clone())
            .collect();
        assert_eq!(events, ["", "events.k8s.io"]);
        // Beta versions are off by default...
        let claims = t.equivalents(&gvr("resource.k8s.io", "v1", "resourceclaims"), "status");
        assert_eq!(claims.len(), 1);
        // ...unless enabled.
        let mut t2 = t.clone();
        t2.serve_version("resource.k8s.io", "v1beta2");
        t2.serve_version("resource.k8s.io", "v1beta1");
        let v: Vec<_> = t2
            .equivalents(&gvr("resource.k8s.io", "v1", "resourceclaims"), "status")
            .into_iter()
            .map(|r| r.gvr.version.clone())
            .collect();
        assert_eq!(v, ["v1", "v1beta2", "v1beta1"]);
        // A request at a non-served version still sees itself.
        assert_eq!(
            t.equivalents(&gvr("resource.k8s.io", "v1beta1", "resourceclaims"), "")
                .len(),
            2
        );
    }

    #[test]
    fn version_ordering() {
        let mut v = vec!["v1alpha1", "v1", "foo", "v2", "v1beta1", "v1beta2", "v10"];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "kind": "Widget"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.r", "statusReplicasPath": ".status.r"}}},
                    {"name": "v2", "served": true, "storage": false}
                ]
            }
        })
    }

    #[test]
    fn crd_entries() {
        let cluster = ClusterObjects::new(vec![widget_crd()]);
        let t = ResourceTable::new(cluster.crds());
        let w1 = t.resource(&gvr("example.com", "v1", "widgets")).unwrap();
        assert_eq!(w1.kind, gvk("example.com", "v1", "Widget"));
        assert_eq!(w1.scope, Scope::Namespaced);
        assert!(w1.custom);
        assert_eq!(
            t.is_namespaced("example.com", "example.com/v1", "Widget"),
            Some(true)
        );
        assert_eq!(t.is_namespaced("", "v1", "Namespace"), Some(false));
        assert_eq!(t.is_namespaced("", "v1", "Nope"), None);
        assert_eq!(
            t.kind_for(&gvr("example.com", "v1", "widgets"), "scale"),
            Some(gvk("autoscaling", "v1", "Scale"))
        );
        assert_eq!(
            t.kind_for(&gvr("example.com", "v2", "widgets"), "status"),
            None
        );
        assert_eq!(
            t.resource_for_kind(&gvk("example.com", "v2", "Widget"))
                .unwrap()
                .gvr,
            gvr("example.com", "v2", "widgets")
        );
        let eq: Vec<_> = t
            .equivalents(&gvr("example.com", "v2", "widgets"), "")
            .into_iter()
            .map(|r| r.gvr.version.clone())
            .collect();
        assert_eq!(eq, ["v1", "v2"]);
        // Only v1 has the status subresource.
        assert_eq!(
            t.equivalents(&gvr("example.com", "v1", "widgets"), "status")
                .len(),
            1
        );
        // Re-adding replaces.
        let mut t2 = t.clone();
        t2.add_crd(&widget_crd()).unwrap();
        assert_eq!(t2.resources().len(), t.resources().len());
    }

    #[test]
    fn bad_crds_are_reported_not_panicked() {
        let mut t = ResourceTable::builtin();
        for bad in [
            json!(null),
            json!("x"),
            json!({"spec": {}}),
            json!({"spec": {"group": "g", "names": {"plural": "p", "kind": "K"}, "scope": "Cluster"}}),
            json!({"spec": {"group": "g", "names": {"plural": "p", "kind": "K"}, "scope": "Weird", "versions": [{"name": "v1"}]}}),
            json!({"spec": {"group": "g", "names": {"plural": "p", "kind": "K"}, "scope": "Cluster", "versions": [{}]}}),
        ] {
            assert!(t.add_crd(&bad).is_err(), "{bad}");
        }
        let legacy = json!({"metadata": {"name": "a.b"}, "spec": {"group": "b", "version": "v1beta1",
            "names": {"plural": "as", "kind": "A"}, "scope": "Cluster", "subresources": {"status": {}}}});
        t.add_crd(&legacy).unwrap();
        assert_eq!(t.scope_of(&gvr("b", "v1beta1", "as")), Some(Scope::Cluster));
        assert_eq!(
            t.kind_for(&gvr("b", "v1beta1", "as"), "status"),
            Some(gvk("b", "v1beta1", "A"))
        );
    }
}
