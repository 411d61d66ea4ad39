//! Schema-aware warnings: a field selection on `object` or `oldObject`
//! (`object.spec.replicaz`, `has(object.spec.replicaz)`,
//! `object.?spec.?replicaz`, and through comprehension variables over a
//! declared list: `object.spec.template.spec.containers.all(c, c.imagez)`)
//! that the schema of the policy's kinds does not declare, and the same on
//! `params` against the schema of the policy's `paramKind`.
//!
//! Upstream declares `object` and `oldObject` `dyn` for MutatingAdmissionPolicy
//! expressions, so such a selection compiles and fails (or is absent) at run
//! time; for ValidatingAdmissionPolicies it type-checks them against each
//! matched kind's schema and reports `undefined field '<name>'` as a warning
//! per kind (`policy/validating/typechecking.go`). kmutate does the same for
//! mutating policies, as a warning that never refuses the policy, and only
//! where it is certain: every resource the policy's `matchConstraints` name
//! (no wildcards, no subresources) has a known schema, and the field is
//! absent from all of them. Maps with free keys (`labels`,
//! `x-kubernetes-preserve-unknown-fields`, untyped values) end the check.

use super::check::render_issue;
use super::CelEnvironment;
use crate::api::{PatchType, Policy};
use crate::request::{GroupVersionKind, GroupVersionResource};
use crate::schema::model::{SchemaData, TypeSpec};
use crate::schema::SchemaStore;
use cel::common::ast::{operators, Expr, IdedExpr, LiteralValue, SourceInfo};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A field selection the policy's kinds do not declare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy {policy:?}: {field}: warning: {path}: {message}")]
pub struct FieldWarning {
    /// The policy name.
    pub policy: String,
    /// The expression's field path, e.g. `spec.mutations[0].applyConfiguration.expression`.
    pub field: String,
    /// The selection, up to the undeclared field: `object.spec.replicaz`.
    pub path: String,
    /// Upstream's type-checking warning, one block per kind:
    /// `apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replicaz'`,
    /// then the source line and a caret under the selection.
    pub message: String,
}

/// What the warnings need to know of the resources: the kind each one
/// serves (the matching stage's resource table answers it; the CEL layer
/// sits below matching and does not depend on it).
pub trait ResourceKinds {
    /// The kind of resource `gvr`, when known.
    fn kind_of(&self, gvr: &GroupVersionResource) -> Option<GroupVersionKind>;
}

/// The warnings of every expression of `policy`, against the schemas of the
/// kinds its `matchConstraints` name; none when some kind is unknown.
pub fn policy_field_warnings(
    policy: &Policy,
    table: &dyn ResourceKinds,
    schemas: &SchemaStore,
) -> Vec<FieldWarning> {
    let Some(kinds) = matched_kinds(policy, table, schemas) else {
        return Vec::new();
    };
    let params = param_kind(policy, schemas);
    let mut out = Vec::new();
    for (field, source) in expressions(policy) {
        for (path, message) in expression_warnings(&source, &kinds, params.as_ref()) {
            out.push(FieldWarning {
                policy: policy.name.clone(),
                field: field.clone(),
                path,
                message,
            });
        }
    }
    out
}

/// Every expression of the policy with its field path, as the compile
/// errors name them.
fn expressions(policy: &Policy) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, c) in policy.match_conditions.iter().enumerate() {
        out.push((
            format!("spec.matchConditions[{i}].expression"),
            c.expression.clone(),
        ));
    }
    for (i, v) in policy.variables.iter().enumerate() {
        out.push((
            format!("spec.variables[{i}].expression"),
            v.expression.clone(),
        ));
    }
    for (i, m) in policy.mutations.iter().enumerate() {
        let sub = match m.patch_type {
            PatchType::ApplyConfiguration => "applyConfiguration",
            PatchType::JsonPatch => "jsonPatch",
        };
        out.push((
            format!("spec.mutations[{i}].{sub}.expression"),
            m.expression.clone(),
        ));
    }
    out
}

/// One matched kind and its schema.
struct Kind {
    gvk: GroupVersionKind,
    schema: Arc<SchemaData>,
    root: TypeSpec,
}

/// The kinds of the resources `matchConstraints.resourceRules` name, each
/// with its schema; `None` when a rule has a wildcard or a subresource, or
/// a resource or its schema is unknown.
fn matched_kinds(
    policy: &Policy,
    table: &dyn ResourceKinds,
    schemas: &SchemaStore,
) -> Option<Vec<Kind>> {
    let rules = &policy.match_constraints.resource_rules;
    if rules.is_empty() {
        return None;
    }
    let mut kinds: Vec<Kind> = Vec::new();
    for rule in rules {
        let wild = |v: &[String]| v.is_empty() || v.iter().any(|s| s.contains('*'));
        if wild(&rule.api_groups)
            || wild(&rule.api_versions)
            || wild(&rule.resources)
            || rule.resources.iter().any(|r| r.contains('/'))
        {
            return None;
        }
        for group in &rule.api_groups {
            for version in &rule.api_versions {
                for resource in &rule.resources {
                    let gvr = GroupVersionResource {
                        group: group.clone(),
                        version: version.clone(),
                        resource: resource.clone(),
                    };
                    let gvk = table.kind_of(&gvr)?;
                    let ty = schemas.lookup(&gvk.group, &gvk.version, &gvk.kind)?;
                    if !kinds.iter().any(|k| k.gvk == gvk) {
                        kinds.push(Kind {
                            gvk,
                            schema: ty.schema,
                            root: ty.spec,
                        });
                    }
                }
            }
        }
    }
    Some(kinds)
}

/// The policy's `paramKind` with its schema, when both are known.
fn param_kind(policy: &Policy, schemas: &SchemaStore) -> Option<Kind> {
    let pk = policy.param_kind.as_ref()?;
    let (group, version) = pk
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &pk.api_version));
    let ty = schemas.lookup(group, version, &pk.kind)?;
    Some(Kind {
        gvk: GroupVersionKind {
            group: group.to_string(),
            version: version.to_string(),
            kind: pk.kind.clone(),
        },
        schema: ty.schema,
        root: ty.spec,
    })
}

/// Go's `schema.GroupVersionKind.String()`.
fn gvk_string(gvk: &GroupVersionKind) -> String {
    format!("{}/{}, Kind={}", gvk.group, gvk.version, gvk.kind)
}

/// The warnings of one expression, (path, message) each, in source order
/// (none when it does not parse).
fn expression_warnings(
    source: &str,
    kinds: &[Kind],
    params: Option<&Kind>,
) -> Vec<(String, String)> {
    // The parser recurses per nesting level: parse on a large stack, as
    // compiling does (once per expression, at load time).
    crate::parallel::with_large_stack(|| {
        if super::check_nesting(source).is_err() {
            return Vec::new();
        }
        let env = CelEnvironment::shared();
        let parser = env
            .env()
            .parser()
            .max_recursion_depth(super::MAX_PARSE_DEPTH);
        let Ok((ast, info)) = parser.parse_with_source_info(source) else {
            return Vec::new();
        };
        let mut walker = Walker {
            kinds,
            params: params.map(std::slice::from_ref).unwrap_or_default(),
            info: &info,
            bound: Vec::new(),
            found: BTreeMap::new(),
        };
        walker.visit(&ast);
        walker.found.into_values().collect()
    })
    .unwrap_or_default()
}

/// The elements of a list every kind declares: the path written to reach
/// them (`object.spec.containers[*]`) and their type in each kind.
#[derive(Clone)]
struct Element {
    path: String,
    specs: Vec<TypeSpec>,
    /// Whether the list is in `params` (else in `object`/`oldObject`).
    params: bool,
}

/// One step of a selection chain.
enum Step {
    /// A field (or a map key given as a string literal), with the node that selects it.
    Field(String, u64),
    /// A list element or a map value of any key.
    Element,
}

struct Walker<'a> {
    kinds: &'a [Kind],
    /// The param kind, when the policy has one whose schema is known.
    params: &'a [Kind],
    info: &'a SourceInfo,
    /// Comprehension variables in scope, innermost last (they shadow
    /// `object`): those ranging over a list the schemas declare carry its
    /// element's type in each kind.
    bound: Vec<(String, Option<Element>)>,
    /// (path, message) by source offset (a chain and its sub-chains meet
    /// the same absent field once).
    found: BTreeMap<u32, (String, String)>,
}

impl Walker<'_> {
    fn visit(&mut self, e: &IdedExpr) {
        self.check_chain(e);
        match &e.expr {
            Expr::Comprehension(c) => {
                self.visit(&c.iter_range);
                self.visit(&c.accu_init);
                let element = if c.iter_var2.is_none() {
                    self.elements_of(&c.iter_range)
                } else {
                    None
                };
                self.bound.push((c.iter_var.clone(), element));
                self.bound
                    .extend(c.iter_var2.iter().map(|v| (v.clone(), None)));
                self.bound.push((c.accu_var.clone(), None));
                let n = 2 + usize::from(c.iter_var2.is_some());
                for x in [&c.loop_cond, &c.loop_step, &c.result] {
                    self.visit(x);
                }
                let keep = self.bound.len().saturating_sub(n);
                self.bound.truncate(keep);
            }
            // Two-variable comprehensions are still calls in the parsed
            // tree: their first two arguments name variables.
            Expr::Call(call) if is_two_variable_macro(&call.func_name, call.args.len()) => {
                if let Some(t) = &call.target {
                    self.visit(t);
                }
                let names: Vec<(String, Option<Element>)> = call.args[..2]
                    .iter()
                    .filter_map(|a| match &a.expr {
                        Expr::Ident(n) => Some((n.clone(), None)),
                        _ => None,
                    })
                    .collect();
                let n = names.len();
                self.bound.extend(names);
                for a in &call.args[2..] {
                    self.visit(a);
                }
                let keep = self.bound.len().saturating_sub(n);
                self.bound.truncate(keep);
            }
            _ => super::ast::for_each_child(e, &mut |c| self.visit(c)),
        }
    }

    /// Where a chain's root starts: how its path is written (`object`,
    /// `oldObject`, `params`, or a variable over declared list elements),
    /// the kinds whose schemas it is in, and its type in each; `None` for
    /// anything else.
    fn root(&self, name: &str) -> Option<Root<'_>> {
        if let Some((_, element)) = self.bound.iter().rev().find(|(n, _)| n == name) {
            let element = element.as_ref()?;
            let kinds = if element.params {
                self.params
            } else {
                self.kinds
            };
            return Some(Root {
                path: element.path.clone(),
                kinds,
                starts: element.specs.clone(),
                params: element.params,
            });
        }
        let (kinds, params) = match name {
            "object" | "oldObject" => (self.kinds, false),
            "params" if !self.params.is_empty() => (self.params, true),
            _ => return None,
        };
        Some(Root {
            path: name.to_string(),
            kinds,
            starts: kinds.iter().map(|k| k.root.clone()).collect(),
            params,
        })
    }

    /// The elements of the list `range` selects, when every kind declares it
    /// as a list.
    fn elements_of(&self, range: &IdedExpr) -> Option<Element> {
        let mut steps = Vec::new();
        let name = chain(range, &mut steps)?;
        steps.reverse();
        let Root {
            mut path,
            kinds,
            starts,
            params,
        } = self.root(&name)?;
        let mut specs = Vec::new();
        for (kind, start) in kinds.iter().zip(starts) {
            let spec = walk(kind, start, &steps)?;
            let list = kind.schema.resolve(&spec)?.list?;
            specs.push(list.def.element.clone());
        }
        push_path(&mut path, &steps);
        path.push_str("[*]");
        Some(Element {
            path,
            specs,
            params,
        })
    }

    /// If `e` selects from `object`, `oldObject` or a variable over their
    /// declared list elements, walks the schemas along the selection and
    /// records a warning at the first field every kind lacks.
    fn check_chain(&mut self, e: &IdedExpr) {
        let mut steps = Vec::new();
        let Some(root) = chain(e, &mut steps) else {
            return;
        };
        let Some(root) = self.root(&root) else {
            return;
        };
        steps.reverse();
        let Some((index, id)) = first_absent(root.kinds, &root.starts, &steps) else {
            return;
        };
        let Step::Field(name, _) = &steps[index] else {
            return;
        };
        let Some((offset, _)) = self.info.offset_for(id) else {
            return;
        };
        let mut path = root.path;
        push_path(&mut path, &steps[..=index]);
        // As `policy/validating/typechecking.go` reports it: the checker's
        // error for each kind, prefixed with the kind.
        let issue = render_issue(
            &self.info.source,
            offset,
            &format!("undefined field '{name}'"),
        );
        let message = self
            .kinds
            .iter()
            .map(|k| format!("{}: {issue}", gvk_string(&k.gvk)))
            .collect::<Vec<_>>()
            .join("\n");
        self.found.insert(offset, (path, message));
    }
}

/// Where a chain starts.
struct Root<'k> {
    /// How it is written.
    path: String,
    /// The kinds whose schemas it is in.
    kinds: &'k [Kind],
    /// Its type in each.
    starts: Vec<TypeSpec>,
    /// Whether it is in `params` (else in `object`/`oldObject`).
    params: bool,
}

/// The index and node of the first field step that none of `kinds`
/// declares (from `starts`), if every kind lacks it.
fn first_absent(kinds: &[Kind], starts: &[TypeSpec], steps: &[Step]) -> Option<(usize, u64)> {
    let mut first: Option<(usize, u64)> = None;
    for (kind, start) in kinds.iter().zip(starts) {
        let (i, id) = absent_in(kind, start.clone(), steps)?;
        match first {
            None => first = Some((i, id)),
            Some((j, _)) if j == i => {}
            // The kinds disagree on where the selection leaves the
            // schema: report nothing rather than guess.
            Some(_) => return None,
        }
    }
    first
}

/// Appends the written form of `steps` to `path`.
fn push_path(path: &mut String, steps: &[Step]) {
    for s in steps {
        match s {
            Step::Field(f, _) => {
                path.push('.');
                path.push_str(f);
            }
            Step::Element => path.push_str("[*]"),
        }
    }
}

/// Where one step leads in a schema.
enum Next {
    /// To a value of this type.
    Type(TypeSpec),
    /// To a field the map type does not declare (and has no free keys).
    Absent,
    /// Somewhere this check cannot follow (a scalar, an unknown type).
    Unknown,
}

/// Where `step` leads from a value of type `spec` in `kind`'s schema.
fn next(kind: &Kind, spec: &TypeSpec, step: &Step) -> Next {
    let Some(resolved) = kind.schema.resolve(spec) else {
        return Next::Unknown;
    };
    let found = match step {
        Step::Field(name, _) => match &resolved.map {
            Some(map) => match map.def.field(name) {
                Some(f) => Some(f.ty.clone()),
                None => match &map.def.element {
                    Some(e) => Some(e.clone()),
                    None => return Next::Absent,
                },
            },
            None => None,
        },
        Step::Element => match (&resolved.list, &resolved.map) {
            (Some(l), _) => Some(l.def.element.clone()),
            (None, Some(m)) => m.def.element.clone(),
            (None, None) => None,
        },
    };
    found.map_or(Next::Unknown, Next::Type)
}

/// The type `steps` lead to from `start` in `kind`'s schema, when every
/// step is declared.
fn walk(kind: &Kind, start: TypeSpec, steps: &[Step]) -> Option<TypeSpec> {
    let mut spec = start;
    for step in steps {
        match next(kind, &spec, step) {
            Next::Type(t) => spec = t,
            Next::Absent | Next::Unknown => return None,
        }
    }
    Some(spec)
}

/// Where, along `steps` from `start`, `kind`'s schema lacks a field: its
/// index and node.
fn absent_in(kind: &Kind, start: TypeSpec, steps: &[Step]) -> Option<(usize, u64)> {
    let mut spec = start;
    for (i, step) in steps.iter().enumerate() {
        match next(kind, &spec, step) {
            Next::Type(t) => spec = t,
            Next::Unknown => return None,
            Next::Absent => {
                let Step::Field(name, id) = step else {
                    return None;
                };
                // `apiVersion` and `kind` are always present (at the root;
                // elsewhere, left alone too).
                if i == 0 && (name == "apiVersion" || name == "kind") {
                    return None;
                }
                return Some((i, *id));
            }
        }
    }
    None
}

/// The root identifier of a selection chain, its steps pushed outermost
/// first; `None` when `e` is not a chain over an identifier.
fn chain(e: &IdedExpr, steps: &mut Vec<Step>) -> Option<String> {
    match &e.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(s) => {
            steps.push(Step::Field(s.field.clone(), e.id));
            chain(&s.operand, steps)
        }
        Expr::Call(call) if call.target.is_none() && call.args.len() == 2 => {
            let key = match &call.args[1].expr {
                Expr::Literal(LiteralValue::String(s)) => Some(s.inner().to_string()),
                _ => None,
            };
            match (call.func_name.as_str(), key) {
                // `a.?b`: the parser writes `_?._(a, 'b')`.
                (operators::OPT_SELECT, Some(k)) => steps.push(Step::Field(k, e.id)),
                (operators::INDEX | operators::OPT_INDEX, Some(k)) => {
                    steps.push(Step::Field(k, e.id))
                }
                (operators::INDEX | operators::OPT_INDEX, None) => steps.push(Step::Element),
                _ => return None,
            }
            chain(&call.args[0], steps)
        }
        _ => None,
    }
}

/// `all(k, v, p)`, `transformList(i, v, ...)` and the other two-variable
/// comprehensions of cel-go's `ext.TwoVarComprehensions`.
fn is_two_variable_macro(name: &str, args: usize) -> bool {
    match name {
        "all" | "exists" | "existsOne" | "exists_one" => args == 3,
        "transformList" | "transformMap" | "transformMapEntry" => args == 3 || args == 4,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{policy_from_json, SourceRef};
    use crate::matching::ResourceTable;
    use serde_json::{json, Value};

    fn policy(rules: Value, expression: &str) -> Policy {
        let doc = json!({
            "apiVersion": "admissionregistration.k8s.io/v1beta1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "p"},
            "spec": {
                "matchConstraints": {"resourceRules": rules},
                "mutations": [{"patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": expression}}]
            }
        });
        policy_from_json(&doc, SourceRef::default()).expect("valid policy")
    }

    fn rule(group: &str, resources: &[&str]) -> Value {
        json!([{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": resources}])
    }

    fn warnings_with(rules: Value, expression: &str, crds: &[Value]) -> Vec<FieldWarning> {
        let table = ResourceTable::new(crds);
        let schemas = SchemaStore::with_crds(crds);
        policy_field_warnings(&policy(rules, expression), &table, &schemas)
    }

    fn warnings(rules: Value, expression: &str) -> Vec<FieldWarning> {
        warnings_with(rules, expression, &[])
    }

    // The Kubernetes documentation's type-checking example
    // (reference/access-authn-authz/validating-admission-policy, "Type
    // checking"): one warning block per matched kind.
    // `policy/validating/typechecking.go` types `params` with the schema
    // of the paramKind as well; kmutate warns the same way.
    #[test]
    fn params_fields_are_checked_against_the_param_kind() {
        let with_params = |expression: &str| {
            let mut p = policy(rule("apps", &["deployments"]), expression);
            p.param_kind = Some(crate::api::ParamKind {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            });
            let table = ResourceTable::new(&[]);
            policy_field_warnings(&p, &table, &SchemaStore::with_crds(&[]))
        };
        let w = with_params("params.dataz.x == 'y'");
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].path, "params.dataz");
        assert_eq!(
            w[0].message,
            "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'dataz'\n | params.dataz.x == 'y'\n | ......^"
        );
        // `data` is a map of free keys; `metadata` is declared.
        assert!(with_params("params.data.x == 'y' && params.metadata.name != ''").is_empty());
        // Through a comprehension over a declared list of the param kind.
        let w = with_params("params.metadata.ownerReferences.all(r, r.kindz != '')");
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].path, "params.metadata.ownerReferences[*].kindz");
        // Without a paramKind nothing is known of `params`.
        assert!(warnings(rule("apps", &["deployments"]), "params.dataz == 1").is_empty());
    }

    #[test]
    fn upstream_documentation_examples() {
        let w = warnings(rule("apps", &["deployments"]), "object.replicas > 1");
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].path, "object.replicas");
        assert_eq!(
            w[0].message,
            "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^"
        );
        assert_eq!(
            w[0].to_string(),
            format!(
                "policy \"p\": spec.mutations[0].applyConfiguration.expression: warning: object.replicas: {}",
                w[0].message
            )
        );
        let w = warnings(
            rule("apps", &["deployments", "replicasets"]),
            "object.replicas > 1",
        );
        assert_eq!(
            w[0].message,
            "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^\napps/v1, Kind=ReplicaSet: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^"
        );
    }

    #[test]
    fn selections_that_leave_the_schema() {
        let deployments = || rule("apps", &["deployments"]);
        for (expression, path) in [
            ("object.spec.replicaz == 1", "object.spec.replicaz"),
            ("has(object.spec.replicaz)", "object.spec.replicaz"),
            (
                "object.?spec.?replicaz.orValue(1) == 1",
                "object.spec.replicaz",
            ),
            (
                "oldObject.spec.template.spec.containerz.size() > 0",
                "oldObject.spec.template.spec.containerz",
            ),
            (
                "object.spec.template.spec.containers[0].imagez == ''",
                "object.spec.template.spec.containers[*].imagez",
            ),
            ("object.spec.replicaz.foo.bar == 1", "object.spec.replicaz"),
            // comprehension variables over declared lists have their type
            (
                "object.spec.template.spec.containers.all(c, c.imagez != '')",
                "object.spec.template.spec.containers[*].imagez",
            ),
            (
                "object.spec.template.spec.containers.map(c, c.ports.filter(p, p.containerPortz > 0))",
                "object.spec.template.spec.containers[*].ports[*].containerPortz",
            ),
            (
                "object.spec.template.spec.containers.all(object, object.imagez == '')",
                "object.spec.template.spec.containers[*].imagez",
            ),
        ] {
            let w = warnings(deployments(), expression);
            assert_eq!(w.len(), 1, "{expression}: {w:?}");
            assert_eq!(w[0].path, path, "{expression}");
            assert!(
                w[0].message
                    .starts_with("apps/v1, Kind=Deployment: ERROR: <input>:1:"),
                "{expression}"
            );
        }
        let w = warnings(
            rule("", &["configmaps"]),
            "Object{data: {'a': object.metadata.namez}}",
        );
        assert_eq!(w[0].path, "object.metadata.namez");
        assert!(w[0]
            .message
            .starts_with("/v1, Kind=ConfigMap: ERROR: <input>:1:"));
    }

    #[test]
    fn declared_and_free_fields_are_not_warned() {
        for expression in [
            "object.spec.replicas > 1",
            "has(object.metadata.labels) && object.metadata.labels.app == 'x'",
            "object.metadata.annotations['example.com/x'] == 'y'",
            "object.apiVersion == 'apps/v1' && object.kind == 'Deployment'",
            "object.spec.template.spec.containers.all(c, c.image != '')",
            "object.spec.template.spec.containers.exists(c, c.ports.all(p, p.containerPort > 0))",
            "object.metadata.labels.all(k, k.foo == 'x')",
            "object.spec.template.spec.containers.all(i, c, c.imagez != '')",
            "[1].all(object, object.foo == 1)",
            "[{'a': 1}].exists(object, object.a == 1)",
            "params.spec.replicaz == 1",
            "variables.spec.replicaz == 1",
        ] {
            let w = warnings(rule("apps", &["deployments"]), expression);
            assert!(w.is_empty(), "{expression}: {w:?}");
        }
    }

    #[test]
    fn only_when_every_matched_kind_is_known() {
        let any_version = json!([{"apiGroups": ["apps"], "apiVersions": ["*"],
            "operations": ["CREATE"], "resources": ["deployments"]}]);
        assert!(warnings(any_version, "object.spec.replicaz == 1").is_empty());
        assert!(warnings(
            rule("apps", &["deployments/scale"]),
            "object.spec.replicaz == 1"
        )
        .is_empty());
        assert!(warnings(
            rule("example.com", &["widgets"]),
            "object.spec.replicaz == 1"
        )
        .is_empty());
        // absent from Deployment, declared by ReplicaSet's status: no warning
        assert!(warnings(
            rule("apps", &["deployments", "replicasets"]),
            "object.status.fullyLabeledReplicas == 1"
        )
        .is_empty());
    }

    #[test]
    fn custom_resources_and_preserved_unknown_fields() {
        let crd = crate::schema::test_widget_crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}));
        let widgets = || rule("example.com", &["widgets"]);
        let w = warnings_with(
            widgets(),
            "object.spec.sise == 1",
            std::slice::from_ref(&crd),
        );
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].path, "object.spec.sise");
        assert!(w[0].message.starts_with(
            "example.com/v1, Kind=Widget: ERROR: <input>:1:12: undefined field 'sise'"
        ));
        for ok in [
            "object.spec.size == 1",
            "object.spec.extra.anything.at.all == 1",
            "object.metadata.name == 'w'",
        ] {
            assert!(
                warnings_with(widgets(), ok, std::slice::from_ref(&crd)).is_empty(),
                "{ok}"
            );
        }
    }
}
