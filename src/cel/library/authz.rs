//! Kubernetes CEL library: authz, with its selectors extension
//! (`k8s.io/apiserver/pkg/cel/library/authz.go`, `Authz` and
//! `AuthzSelectors`): the `authorizer` variable and the checks built on it.
//!
//! ```text
//! authorizer.group('').resource('pods').namespace('default').check('create').allowed()
//! authorizer.path('/healthz').check('get').reason()
//! authorizer.serviceAccount('ns', 'sa').group('apps').resource('deployments').check('list')
//! authorizer.requestResource.subresource('status').check('update').errored()
//! ```
//!
//! Types, as `type(x)` names them: `kubernetes.authorization.Authorizer`,
//! `.PathCheck`, `.GroupCheck`, `.ResourceCheck` and `.Decision`.
//!
//! # How the values reach the authorizer
//!
//! The builder values (`Authorizer`, `PathCheck`, `GroupCheck`,
//! `ResourceCheck`) borrow the [`Authorizer`] of the admission, so they are
//! not `'static` and cannot be downcast from a `dyn Val`. An overload
//! therefore reaches its receiver through the one dynamically dispatched
//! capability that can return a value of the receiver's lifetime,
//! [`Indexer::get`]: it indexes the receiver with a private, `'static`
//! `Operation` key (`group('apps')`, `check('get')`, ...), which no
//! expression can write, and the receiver answers with the next builder or
//! the decision. Indexing with anything else (`authorizer.foo`) is an error,
//! as upstream's `undefined field`. A [`Decision`](DecisionValue) borrows
//! nothing and is an ordinary `'static` value.

use crate::authorizer::{
    AuthorizationAttributes, AuthorizationTarget, Authorizer, Decision, ResourceAttributes,
};
use crate::request::{AdmissionRequest, UserInfo};
use cel::common::traits::Indexer;
use cel::common::types::{self, CelBool, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use std::any::Any;
use std::borrow::Cow;
use std::sync::Arc;

/// The variable name of the authorizer.
pub const AUTHORIZER_VAR: &str = "authorizer";
/// The variable name of the check prefilled from the request's resource.
pub const REQUEST_RESOURCE_VAR: &str = "authorizer.requestResource";

/// `kubernetes.authorization.Authorizer`.
pub static AUTHORIZER_TYPE: Type =
    Type::new_unspecified_type("kubernetes.authorization.Authorizer");
/// `kubernetes.authorization.PathCheck`.
pub static PATH_CHECK_TYPE: Type = Type::new_unspecified_type("kubernetes.authorization.PathCheck");
/// `kubernetes.authorization.GroupCheck`.
pub static GROUP_CHECK_TYPE: Type =
    Type::new_unspecified_type("kubernetes.authorization.GroupCheck");
/// `kubernetes.authorization.ResourceCheck`.
pub static RESOURCE_CHECK_TYPE: Type =
    Type::new_unspecified_type("kubernetes.authorization.ResourceCheck");
/// `kubernetes.authorization.Decision`.
pub static DECISION_TYPE: Type = Type::new_unspecified_type("kubernetes.authorization.Decision");
/// The type of the private operation keys; never visible to an expression.
static OPERATION_TYPE: Type = Type::new_unspecified_type("kmutate.internal.AuthzOperation");

/// The `authorizer` variable: checks as the request's user. The value
/// borrows the authorizer and the request.
pub fn authorizer_value<'a>(
    authorizer: &'a dyn Authorizer,
    request: &'a AdmissionRequest,
) -> Box<dyn Val + 'a> {
    Box::new(AuthzValue {
        request: Some(request),
        ..AuthzValue::root(authorizer, &request.user_info)
    })
}

/// The `authorizer.requestResource` variable: a `ResourceCheck` of the
/// request's (not the matched) group and resource, its subresource,
/// namespace and name, as upstream's `NewResourceAuthorizerVal`.
pub fn request_resource_value<'a>(
    authorizer: &'a dyn Authorizer,
    request: &'a AdmissionRequest,
) -> Box<dyn Val + 'a> {
    Box::new(AuthzValue {
        stage: Stage::ResourceCheck,
        group: Cow::Borrowed(&request.resource.group),
        resource: Cow::Borrowed(&request.resource.resource),
        subresource: Cow::Borrowed(&request.sub_resource),
        namespace: Cow::Borrowed(&request.namespace),
        name: Cow::Borrowed(&request.name),
        ..AuthzValue::root(authorizer, &request.user_info)
    })
}

/// Both variables, named, as an activation takes its inputs.
pub fn activation_inputs<'a>(
    authorizer: &'a dyn Authorizer,
    request: &'a AdmissionRequest,
) -> [(&'static str, Box<dyn Val + 'a>); 2] {
    [
        (AUTHORIZER_VAR, authorizer_value(authorizer, request)),
        (
            REQUEST_RESOURCE_VAR,
            request_resource_value(authorizer, request),
        ),
    ]
}

/// A `'static` copy of `v` if it is a `Decision`, for a memo that must
/// outlive the evaluation (a policy variable). The builders borrow the
/// admission's authorizer and request and have none.
pub fn to_static(v: &dyn Val) -> Option<Box<dyn Val + 'static>> {
    v.downcast_ref::<DecisionValue>()
        .map(|d| Box::new(d.clone()) as Box<dyn Val + 'static>)
}

/// Registers the types and functions on `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    for t in [
        &AUTHORIZER_TYPE,
        &PATH_CHECK_TYPE,
        &GROUP_CHECK_TYPE,
        &RESOURCE_CHECK_TYPE,
        &DECISION_TYPE,
    ] {
        env.add_type(t.to_owned())?;
    }
    let string = || vec![types::STRING_TYPE];
    let member =
        |env: &mut Env, name: &str, id: &str, on: &Type, op: cel::common::functions::Function| {
            env.add_member_overload(name, id, on.to_owned(), string(), op)
        };
    member(env, "path", "authorizer_path", &AUTHORIZER_TYPE, path)?;
    member(env, "group", "authorizer_group", &AUTHORIZER_TYPE, group)?;
    env.add_member_overload(
        "serviceAccount",
        "authorizer_serviceaccount",
        AUTHORIZER_TYPE.to_owned(),
        vec![types::STRING_TYPE, types::STRING_TYPE],
        service_account,
    )?;
    member(
        env,
        "resource",
        "groupcheck_resource",
        &GROUP_CHECK_TYPE,
        resource,
    )?;
    member(
        env,
        "subresource",
        "resourcecheck_subresource",
        &RESOURCE_CHECK_TYPE,
        subresource,
    )?;
    member(
        env,
        "namespace",
        "resourcecheck_namespace",
        &RESOURCE_CHECK_TYPE,
        namespace,
    )?;
    member(
        env,
        "name",
        "resourcecheck_name",
        &RESOURCE_CHECK_TYPE,
        name,
    )?;
    member(env, "check", "pathcheck_check", &PATH_CHECK_TYPE, check)?;
    member(
        env,
        "check",
        "resourcecheck_check",
        &RESOURCE_CHECK_TYPE,
        check,
    )?;
    // AuthzSelectors: in the base environment from 1.31 while the
    // AuthorizeWithSelectors feature is on, which it is in 1.36.
    member(
        env,
        "fieldSelector",
        "authorizer_fieldselector",
        &RESOURCE_CHECK_TYPE,
        field_selector,
    )?;
    member(
        env,
        "labelSelector",
        "authorizer_labelselector",
        &RESOURCE_CHECK_TYPE,
        label_selector,
    )?;
    cel::add_member_overload!(env, fn decision_errored: (DecisionValue) -> CelBool,
        name = "errored", id = "decision_errored")?;
    cel::add_member_overload!(env, fn decision_error: (DecisionValue) -> CelString,
        name = "error", id = "decision_error")?;
    cel::add_member_overload!(env, fn decision_allowed: (DecisionValue) -> CelBool,
        name = "allowed", id = "decision_allowed")?;
    cel::add_member_overload!(env, fn decision_reason: (DecisionValue) -> CelString,
        name = "reason", id = "decision_reason")?;
    Ok(())
}

/// Which of the builder types a value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Authorizer,
    PathCheck,
    GroupCheck,
    ResourceCheck,
}

impl Stage {
    fn cel_type(self) -> &'static Type {
        match self {
            Stage::Authorizer => &AUTHORIZER_TYPE,
            Stage::PathCheck => &PATH_CHECK_TYPE,
            Stage::GroupCheck => &GROUP_CHECK_TYPE,
            Stage::ResourceCheck => &RESOURCE_CHECK_TYPE,
        }
    }
}

/// Who a check is made as: the request's user, or the service account of
/// `serviceAccount(namespace, name)`.
#[derive(Clone, Debug)]
enum Principal<'a> {
    Request(&'a UserInfo),
    ServiceAccount(Arc<UserInfo>),
}

impl Principal<'_> {
    fn user(&self) -> &UserInfo {
        match self {
            Principal::Request(u) => u,
            Principal::ServiceAccount(u) => u,
        }
    }
}

/// An `Authorizer`, `PathCheck`, `GroupCheck` or `ResourceCheck`: who asks,
/// of which authorizer, and the check built so far (each field "" until
/// set). Borrows the request's strings where it can.
#[derive(Clone)]
pub struct AuthzValue<'a> {
    stage: Stage,
    authorizer: &'a dyn Authorizer,
    principal: Principal<'a>,
    path: Cow<'a, str>,
    group: Cow<'a, str>,
    resource: Cow<'a, str>,
    subresource: Cow<'a, str>,
    namespace: Cow<'a, str>,
    name: Cow<'a, str>,
    field_selector: Cow<'a, str>,
    label_selector: Cow<'a, str>,
    /// The admission request, on the `authorizer` variable: selecting
    /// `requestResource` on it gives the `authorizer.requestResource`
    /// variable (an activation may resolve that name by selection).
    request: Option<&'a AdmissionRequest>,
}

impl std::fmt::Debug for AuthzValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct(self.stage.cel_type().name());
        d.field("user", &self.principal.user().username);
        match self.stage {
            Stage::Authorizer => {}
            Stage::PathCheck => {
                d.field("path", &self.path);
            }
            Stage::GroupCheck | Stage::ResourceCheck => {
                d.field("group", &self.group)
                    .field("resource", &self.resource)
                    .field("subresource", &self.subresource)
                    .field("namespace", &self.namespace)
                    .field("name", &self.name)
                    .field("fieldSelector", &self.field_selector)
                    .field("labelSelector", &self.label_selector);
            }
        }
        d.finish()
    }
}

impl<'a> AuthzValue<'a> {
    fn root(authorizer: &'a dyn Authorizer, user: &'a UserInfo) -> AuthzValue<'a> {
        AuthzValue {
            stage: Stage::Authorizer,
            authorizer,
            principal: Principal::Request(user),
            path: Cow::Borrowed(""),
            group: Cow::Borrowed(""),
            resource: Cow::Borrowed(""),
            subresource: Cow::Borrowed(""),
            namespace: Cow::Borrowed(""),
            name: Cow::Borrowed(""),
            field_selector: Cow::Borrowed(""),
            label_selector: Cow::Borrowed(""),
            request: None,
        }
    }

    /// The value `op` makes of this one; `Self: 'v` lets the result keep the
    /// authorizer's borrow.
    fn apply<'v>(&self, op: &Operation) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let next = |stage: Stage, edit: &dyn Fn(&mut AuthzValue<'a>)| {
            let mut v = self.clone();
            v.stage = stage;
            edit(&mut v);
            Ok(Box::new(v) as Box<dyn Val + 'v>)
        };
        match (self.stage, op) {
            (Stage::Authorizer, Operation::Path(p)) => {
                if p.trim().is_empty() {
                    return Err(ExecutionError::function_error(
                        "path",
                        "path must not be empty",
                    ));
                }
                next(Stage::PathCheck, &|v| v.path = Cow::Owned(p.clone()))
            }
            (Stage::Authorizer, Operation::Group(g)) => {
                next(Stage::GroupCheck, &|v| v.group = Cow::Owned(g.clone()))
            }
            (Stage::Authorizer, Operation::ServiceAccount { namespace, name }) => {
                // upstream validates the name first
                if !is_dns1123_subdomain(name) {
                    return Err(ExecutionError::function_error(
                        "serviceAccount",
                        "Invalid service account name",
                    ));
                }
                if !is_dns1123_label(namespace) {
                    return Err(ExecutionError::function_error(
                        "serviceAccount",
                        "Invalid service account namespace",
                    ));
                }
                let user = Arc::new(service_account_user(namespace, name));
                next(Stage::Authorizer, &|v| {
                    v.principal = Principal::ServiceAccount(user.clone())
                })
            }
            (Stage::GroupCheck, Operation::Resource(r)) => {
                if r.trim().is_empty() {
                    return Err(ExecutionError::function_error(
                        "resource",
                        "resource must not be empty",
                    ));
                }
                next(Stage::ResourceCheck, &|v| {
                    v.resource = Cow::Owned(r.clone())
                })
            }
            (Stage::ResourceCheck, Operation::Subresource(s)) => next(Stage::ResourceCheck, &|v| {
                v.subresource = Cow::Owned(s.clone())
            }),
            (Stage::ResourceCheck, Operation::Namespace(n)) => next(Stage::ResourceCheck, &|v| {
                v.namespace = Cow::Owned(n.clone())
            }),
            (Stage::ResourceCheck, Operation::Name(n)) => {
                next(Stage::ResourceCheck, &|v| v.name = Cow::Owned(n.clone()))
            }
            (Stage::ResourceCheck, Operation::FieldSelector(s)) => {
                next(Stage::ResourceCheck, &|v| {
                    v.field_selector = Cow::Owned(s.clone())
                })
            }
            (Stage::ResourceCheck, Operation::LabelSelector(s)) => {
                next(Stage::ResourceCheck, &|v| {
                    v.label_selector = Cow::Owned(s.clone())
                })
            }
            (Stage::PathCheck | Stage::ResourceCheck, Operation::Check(verb)) => {
                Ok(Box::new(DecisionValue(self.authorize(verb))))
            }
            (stage, op) => Err(ExecutionError::no_such_member_overload(
                op.function(),
                vec![stage.cel_type().name().to_string()],
            )),
        }
    }

    /// Asks the authorizer: upstream's `pathCheckVal.Authorize` and
    /// `resourceCheckVal.Authorize` (API version `*`).
    fn authorize(&self, verb: &str) -> Decision {
        let target = if self.stage == Stage::PathCheck {
            AuthorizationTarget::NonResource {
                path: self.path.to_string(),
            }
        } else {
            AuthorizationTarget::Resource(ResourceAttributes {
                api_group: self.group.to_string(),
                api_version: "*".into(),
                resource: self.resource.to_string(),
                subresource: self.subresource.to_string(),
                namespace: self.namespace.to_string(),
                name: self.name.to_string(),
                field_selector: self.field_selector.to_string(),
                label_selector: self.label_selector.to_string(),
            })
        };
        self.authorizer.authorize(&AuthorizationAttributes {
            user: self.principal.user().clone(),
            verb: verb.to_string(),
            target,
        })
    }
}

impl Val for AuthzValue<'_> {
    fn get_type(&self) -> &Type {
        self.stage.cel_type()
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        // Per-instance type (see `Val::cel_type`): never named in a macro.
        panic!("AuthzValue has a per-instance CEL type")
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
}

impl Indexer for AuthzValue<'_> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        if let Some(op) = idx.downcast_ref::<Operation>() {
            return self.apply(op).map(CowVal::Owned);
        }
        let field = idx.downcast_ref::<CelString>().map(|f| f.inner());
        match (self.stage, &self.principal, self.request, field) {
            (Stage::Authorizer, Principal::Request(_), Some(request), Some("requestResource")) => {
                Ok(CowVal::Owned(request_resource_value(
                    self.authorizer,
                    request,
                )))
            }
            _ => Err(no_field(idx)),
        }
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

/// Selecting a field of these object types is upstream's compile error
/// `undefined field 'f'`; here it is an evaluation error of the same words.
fn no_field(idx: &dyn Val) -> ExecutionError {
    match idx.downcast_ref::<CelString>() {
        Some(field) => {
            ExecutionError::function_error("_._", format!("undefined field '{}'", field.inner()))
        }
        None => ExecutionError::UnexpectedType {
            got: idx.get_type().name().to_string(),
            want: "string".into(),
        },
    }
}

/// A `kubernetes.authorization.Decision`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionValue(pub Decision);

impl Val for DecisionValue {
    fn get_type(&self) -> &Type {
        &DECISION_TYPE
    }

    fn cel_type() -> &'static Type {
        &DECISION_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for DecisionValue {}

impl Indexer for DecisionValue {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        Err(no_field(idx))
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        Err(no_field(idx))
    }
}

fn decision_errored(d: &DecisionValue) -> CelBool {
    CelBool::from(d.0.error.is_some())
}

fn decision_error(d: &DecisionValue) -> CelString<'static> {
    CelString::from(d.0.error.clone().unwrap_or_default())
}

fn decision_allowed(d: &DecisionValue) -> CelBool {
    CelBool::from(d.0.is_allowed())
}

fn decision_reason(d: &DecisionValue) -> CelString<'static> {
    CelString::from(d.0.reason.clone())
}

/// The private key a builder overload indexes its receiver with.
#[derive(Clone, Debug)]
enum Operation {
    Path(String),
    Group(String),
    ServiceAccount { namespace: String, name: String },
    Resource(String),
    Subresource(String),
    Namespace(String),
    Name(String),
    FieldSelector(String),
    LabelSelector(String),
    Check(String),
}

impl Operation {
    fn function(&self) -> &'static str {
        match self {
            Operation::Path(_) => "path",
            Operation::Group(_) => "group",
            Operation::ServiceAccount { .. } => "serviceAccount",
            Operation::Resource(_) => "resource",
            Operation::Subresource(_) => "subresource",
            Operation::Namespace(_) => "namespace",
            Operation::Name(_) => "name",
            Operation::FieldSelector(_) => "fieldSelector",
            Operation::LabelSelector(_) => "labelSelector",
            Operation::Check(_) => "check",
        }
    }
}

impl Val for Operation {
    fn get_type(&self) -> &Type {
        &OPERATION_TYPE
    }

    fn cel_type() -> &'static Type {
        &OPERATION_TYPE
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Operation {}

/// The string argument at `i` (the overloads are declared for strings).
fn string_arg(args: &[CowVal<'_, '_>], i: usize) -> Result<String, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelString>())
        .map(|s| s.inner().to_string())
        .ok_or_else(|| ExecutionError::function_error("authorizer", "no such overload"))
}

/// Hands `op` to the receiver, `args[0]`.
fn invoke<'b, 'v>(
    args: &[CowVal<'b, 'v>],
    op: Operation,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let target: &(dyn Val + 'v) = &*args[0];
    let indexer = target.as_indexer().ok_or_else(|| {
        ExecutionError::no_such_member_overload(
            op.function(),
            vec![target.get_type().name().to_string()],
        )
    })?;
    Ok(CowVal::Owned(indexer.get(&op)?.into_owned()))
}

macro_rules! one_string_builder {
    ($($fn:ident => $op:ident),* $(,)?) => {
        $(
            fn $fn<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
                let arg = string_arg(&args, 1)?;
                invoke(&args, Operation::$op(arg))
            }
        )*
    };
}

one_string_builder! {
    path => Path,
    group => Group,
    resource => Resource,
    subresource => Subresource,
    namespace => Namespace,
    name => Name,
    field_selector => FieldSelector,
    label_selector => LabelSelector,
    check => Check,
}

fn service_account<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let namespace = string_arg(&args, 1)?;
    let name = string_arg(&args, 2)?;
    invoke(&args, Operation::ServiceAccount { namespace, name })
}

/// The user of a service account (`serviceaccount.ServiceAccountInfo.UserInfo`
/// with no UID, pod or credential).
fn service_account_user(namespace: &str, name: &str) -> UserInfo {
    UserInfo {
        username: format!("system:serviceaccount:{namespace}:{name}"),
        groups: vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{namespace}"),
        ],
        ..Default::default()
    }
}

/// RFC 1123 label: at most 63 of `[a-z0-9-]`, alphanumeric at both ends
/// (apimachinery `IsDNS1123Label`, behind `ValidateNamespaceName`).
fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_label_chars(s)
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels without
/// the per-label length limit (apimachinery `IsDNS1123Subdomain`, behind
/// `ValidateServiceAccountName`).
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_chars)
}

fn is_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authorizer::{AlwaysDeny, DecisionKind, FixedAuthorizer};
    use crate::cel::{error_text, CelEnvironment};
    use crate::request::GroupVersionResource;
    use std::sync::Mutex;

    /// Upstream's `fakeAuthorizer` (admission/plugin/cel/filter_test.go):
    /// `matching` gets `on_match`, everything else `default`. Records every
    /// check it is asked.
    struct Fake {
        matching: Option<AuthorizationAttributes>,
        on_match: Decision,
        default: Decision,
        asked: Mutex<Vec<AuthorizationAttributes>>,
    }

    impl Fake {
        fn answering(default: Decision) -> Fake {
            Fake {
                matching: None,
                on_match: Decision::allow(""),
                default,
                asked: Mutex::new(Vec::new()),
            }
        }

        /// `newAuthzAllowMatch`: allow exactly `m`, deny the rest.
        fn allow_match(m: AuthorizationAttributes) -> Fake {
            Fake {
                matching: Some(m),
                ..Fake::answering(Decision::deny(""))
            }
        }

        fn last(&self) -> AuthorizationAttributes {
            self.asked.lock().unwrap().last().cloned().expect("a check")
        }
    }

    impl Authorizer for Fake {
        fn authorize(&self, a: &AuthorizationAttributes) -> Decision {
            self.asked.lock().unwrap().push(a.clone());
            if self.matching.as_ref() == Some(a) {
                self.on_match.clone()
            } else {
                self.default.clone()
            }
        }
    }

    /// `denyAll`: deny with reason "fake reason".
    fn deny_all() -> Fake {
        Fake::answering(Decision::deny("fake reason"))
    }

    /// `errorAll`: no opinion, error "fake authz error".
    fn error_all() -> Fake {
        Fake::answering(Decision {
            kind: DecisionKind::NoOpinion,
            reason: String::new(),
            error: Some("fake authz error".into()),
        })
    }

    /// upstream `newValidAttribute`: user nil, namespace "default", name "foo".
    fn plain_request() -> AdmissionRequest {
        AdmissionRequest {
            namespace: "default".into(),
            name: "foo".into(),
            ..Default::default()
        }
    }

    /// upstream `endpointCreateAttributes`.
    fn endpoint_create() -> AdmissionRequest {
        AdmissionRequest {
            resource: GroupVersionResource {
                group: String::new(),
                version: "v1".into(),
                resource: "endpoints".into(),
            },
            namespace: "default".into(),
            name: "endpoints1".into(),
            ..Default::default()
        }
    }

    fn eval(
        src: &str,
        authz: &dyn Authorizer,
        request: &AdmissionRequest,
    ) -> Result<String, String> {
        let env = CelEnvironment::shared();
        let expr = env.compile(src).map_err(|e| e.to_string())?;
        let mut ctx = env.context();
        for (name, v) in activation_inputs(authz, request) {
            ctx.add_variable_as_val(name, v);
        }
        let v = expr.evaluate(&ctx).map_err(|e| error_text(&e))?;
        if let Some(b) = v.downcast_ref::<CelBool>() {
            return Ok(b.inner().to_string());
        }
        if let Some(s) = v.downcast_ref::<CelString>() {
            return Ok(s.inner().to_string());
        }
        if let Some(t) = v.downcast_ref::<types::CelType>() {
            return Ok(format!("type:{}", t.name()));
        }
        Ok(format!("{v:?}"))
    }

    fn resource(
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
        verb: &str,
    ) -> AuthorizationAttributes {
        AuthorizationAttributes {
            user: UserInfo::default(),
            verb: verb.into(),
            target: AuthorizationTarget::Resource(ResourceAttributes {
                api_group: group.into(),
                api_version: "*".into(),
                resource: resource.into(),
                subresource: subresource.into(),
                namespace: namespace.into(),
                name: name.into(),
                ..Default::default()
            }),
        }
    }

    fn path_attrs(path: &str, verb: &str) -> AuthorizationAttributes {
        AuthorizationAttributes {
            user: UserInfo::default(),
            verb: verb.into(),
            target: AuthorizationTarget::NonResource { path: path.into() },
        }
    }

    /// (expression, authorizer, request, expected result or `Err(substring)`).
    type Case = (
        &'static str,
        Fake,
        AdmissionRequest,
        Result<&'static str, &'static str>,
    );

    fn run(cases: Vec<Case>) {
        for (src, authz, req, want) in cases {
            let got = eval(src, &authz, &req);
            match (&got, want) {
                (Ok(g), Ok(w)) if g == w => {}
                (Err(g), Err(w)) if g.contains(w) => {}
                _ => panic!("{src}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn upstream_filter_test_authorizer_cases() {
        // staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/filter_test.go TestFilter
        let endpoints_create = || resource("", "endpoints", "", "", "", "create");
        let all_fields = || resource("apps", "deployments", "status", "test", "backend", "create");
        let mut sa = resource("", "endpoints", "", "default", "endpoints1", "custom-verb");
        sa.user = UserInfo {
            username: "system:serviceaccount:default:test-serviceaccount".into(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:default".into(),
            ],
            ..Default::default()
        };
        let mut status = endpoint_create();
        status.sub_resource = "status".into();
        status.operation = "UPDATE".into();
        run(vec![
            // "test authorizer allow resource check"
            (
                "authorizer.group('').resource('endpoints').check('create').allowed()",
                Fake::allow_match(endpoints_create()),
                plain_request(),
                Ok("true"),
            ),
            (
                "authorizer.group('').resource('endpoints').check('create').errored()",
                Fake::allow_match(endpoints_create()),
                plain_request(),
                Ok("false"),
            ),
            // "test authorizer allow resource check with all fields"
            (
                "authorizer.group('apps').resource('deployments').subresource('status').namespace('test').name('backend').check('create').allowed()",
                Fake::allow_match(all_fields()),
                plain_request(),
                Ok("true"),
            ),
            // "test authorizer not allowed resource check one incorrect field"
            (
                "authorizer.group('apps').resource('deployments').subresource('status').namespace('test').name('backend').check('create').allowed()",
                Fake::allow_match(resource("apps", "deployments-xxxx", "status", "test", "backend", "create")),
                plain_request(),
                Ok("false"),
            ),
            // "test authorizer reason"
            (
                "authorizer.group('').resource('endpoints').check('create').reason() == 'fake reason'",
                deny_all(),
                plain_request(),
                Ok("true"),
            ),
            // "test authorizer error"
            (
                "authorizer.group('').resource('endpoints').check('create').errored()",
                error_all(),
                plain_request(),
                Ok("true"),
            ),
            (
                "authorizer.group('').resource('endpoints').check('create').error() == 'fake authz error'",
                error_all(),
                plain_request(),
                Ok("true"),
            ),
            (
                "authorizer.group('').resource('endpoints').check('create').allowed()",
                error_all(),
                plain_request(),
                Ok("false"),
            ),
            // "test authorizer allow path check"
            (
                "authorizer.path('/healthz').check('get').allowed()",
                Fake::allow_match(path_attrs("/healthz", "get")),
                plain_request(),
                Ok("true"),
            ),
            // "test authorizer decision is denied path check"
            (
                "authorizer.path('/healthz').check('get').allowed() == false",
                deny_all(),
                plain_request(),
                Ok("true"),
            ),
            // "test request resource authorizer allow check"
            (
                "authorizer.requestResource.check('custom-verb').allowed()",
                Fake::allow_match(resource("", "endpoints", "", "default", "endpoints1", "custom-verb")),
                endpoint_create(),
                Ok("true"),
            ),
            // "test subresource request resource authorizer allow check"
            (
                "authorizer.requestResource.check('custom-verb').allowed()",
                Fake::allow_match(resource("", "endpoints", "status", "default", "endpoints1", "custom-verb")),
                status,
                Ok("true"),
            ),
            // "test serviceAccount authorizer allow check"
            (
                "authorizer.serviceAccount('default', 'test-serviceaccount').group('').resource('endpoints').namespace('default').name('endpoints1').check('custom-verb').allowed()",
                Fake::allow_match(sa),
                endpoint_create(),
                Ok("true"),
            ),
        ]);
    }

    #[test]
    fn upstream_doc_examples_and_errors() {
        // The examples of the authz.go doc comments, and their errors.
        let deny = || Fake::answering(Decision::deny(""));
        run(vec![
            ("authorizer.path('')", deny(), plain_request(), Err("path must not be empty")),
            ("authorizer.path('  ')", deny(), plain_request(), Err("path must not be empty")),
            (
                "authorizer.group('apps').resource('')",
                deny(),
                plain_request(),
                Err("resource must not be empty"),
            ),
            (
                "authorizer.group('apps').resource('  ')",
                deny(),
                plain_request(),
                Err("resource must not be empty"),
            ),
            (
                "authorizer.serviceAccount('not@a#valid!namespace', 'validname')",
                deny(),
                plain_request(),
                Err("Invalid service account namespace"),
            ),
            (
                "authorizer.serviceAccount('valid.example.com', 'invalid@*name')",
                deny(),
                plain_request(),
                Err("Invalid service account name"),
            ),
            (
                "authorizer.serviceAccount('default', '')",
                deny(),
                plain_request(),
                Err("Invalid service account name"),
            ),
            (
                "authorizer.serviceAccount('', 'sa')",
                deny(),
                plain_request(),
                Err("Invalid service account namespace"),
            ),
            // the leading '/' of a path is not required
            (
                "authorizer.path('healthz').check('get').allowed()",
                Fake::allow_match(path_attrs("healthz", "get")),
                plain_request(),
                Ok("true"),
            ),
            // '' unsets subresource and name, and is the cluster scope
            (
                "authorizer.group('example.com').resource('widgets').subresource('scale').subresource('').namespace('ns').namespace('').name('x').name('').check('get').allowed()",
                Fake::allow_match(resource("example.com", "widgets", "", "", "", "get")),
                plain_request(),
                Ok("true"),
            ),
            // the request resource check can be refined
            (
                "authorizer.requestResource.subresource('scale').check('update').allowed()",
                Fake::allow_match(resource("", "endpoints", "scale", "default", "endpoints1", "update")),
                endpoint_create(),
                Ok("true"),
            ),
            (
                "authorizer.group('apps').resource('deployments').check('update').error()",
                deny(),
                plain_request(),
                Ok(""),
            ),
            (
                "authorizer.path('/healthz').check('GET').reason()",
                Fake::answering(Decision::allow("because")),
                plain_request(),
                Ok("because"),
            ),
            (
                "authorizer.path('/healthz').check('get').allowed()",
                Fake::answering(Decision::no_opinion("")),
                plain_request(),
                Ok("false"),
            ),
        ]);
    }

    // An activation may resolve `authorizer.requestResource` by selecting
    // `requestResource` on `authorizer`: the root authorizer answers it with
    // the request's ResourceCheck (and only the root one).
    #[test]
    fn request_resource_is_a_field_of_the_request_authorizer() {
        let authz = Fake::allow_match(resource(
            "",
            "endpoints",
            "scale",
            "default",
            "endpoints1",
            "update",
        ));
        let request = endpoint_create();
        let env = CelEnvironment::shared();
        let mut ctx = env.context();
        ctx.add_variable_as_val(AUTHORIZER_VAR, authorizer_value(&authz, &request));
        let value = |src: &str| {
            let expr = env.compile(src).unwrap();
            expr.evaluate(&ctx)
                .map(|v| v.downcast_ref::<CelBool>().map(|b| *b.inner()))
                .map_err(|e| error_text(&e))
        };
        assert_eq!(
            value("authorizer.requestResource.subresource('scale').check('update').allowed()"),
            Ok(Some(true))
        );
        assert_eq!(
            value("authorizer.requestResource.check('update').allowed()"),
            Ok(Some(false))
        );
        assert_eq!(
            value("authorizer.serviceAccount('ns', 'sa').requestResource"),
            Err("undefined field 'requestResource'".into())
        );
    }

    #[test]
    fn type_names_are_upstreams() {
        let d = || Fake::answering(Decision::deny(""));
        let r = plain_request;
        run(vec![
            ("type(authorizer)", d(), r(), Ok("type:kubernetes.authorization.Authorizer")),
            ("type(authorizer.path('/x'))", d(), r(), Ok("type:kubernetes.authorization.PathCheck")),
            ("type(authorizer.group(''))", d(), r(), Ok("type:kubernetes.authorization.GroupCheck")),
            (
                "type(authorizer.group('').resource('pods'))",
                d(),
                r(),
                Ok("type:kubernetes.authorization.ResourceCheck"),
            ),
            (
                "type(authorizer.requestResource)",
                d(),
                r(),
                Ok("type:kubernetes.authorization.ResourceCheck"),
            ),
            (
                "type(authorizer.path('/x').check('get'))",
                d(),
                r(),
                Ok("type:kubernetes.authorization.Decision"),
            ),
            (
                "type(authorizer) == kubernetes.authorization.Authorizer",
                d(),
                r(),
                Ok("true"),
            ),
            (
                "type(authorizer.serviceAccount('ns', 'sa')) == kubernetes.authorization.Authorizer",
                d(),
                r(),
                Ok("true"),
            ),
        ]);
    }

    #[test]
    fn wrong_receivers_and_arguments_are_errors() {
        // Upstream's checker refuses these when compiling (texts from
        // maporacle, k8s.io/apiserver v0.36.2).
        let d = || Fake::answering(Decision::deny(""));
        let r = plain_request;
        run(vec![
            (
                "authorizer.group(1)",
                d(),
                r(),
                Err("found no matching overload for 'group' applied to 'kubernetes.authorization.Authorizer.(int)'"),
            ),
            (
                "authorizer.path('/x').resource('pods')",
                d(),
                r(),
                Err("found no matching overload for 'resource' applied to 'kubernetes.authorization.PathCheck.(string)'"),
            ),
            (
                "authorizer.check('get')",
                d(),
                r(),
                Err("found no matching overload for 'check' applied to 'kubernetes.authorization.Authorizer.(string)'"),
            ),
            (
                "authorizer.group('').check('get')",
                d(),
                r(),
                Err("found no matching overload for 'check' applied to 'kubernetes.authorization.GroupCheck.(string)'"),
            ),
            (
                "authorizer.path('/x').check(1)",
                d(),
                r(),
                Err("found no matching overload for 'check' applied to 'kubernetes.authorization.PathCheck.(int)'"),
            ),
            (
                "authorizer.serviceAccount('ns')",
                d(),
                r(),
                Err("found no matching overload for 'serviceAccount' applied to 'kubernetes.authorization.Authorizer.(string)'"),
            ),
            (
                "authorizer.group('').resource('pods').allowed()",
                d(),
                r(),
                Err("found no matching overload for 'allowed' applied to 'kubernetes.authorization.ResourceCheck.()'"),
            ),
            (
                "'x'.check('get')",
                d(),
                r(),
                Err("found no matching overload for 'check' applied to 'string.(string)'"),
            ),
            ("authorizer.foo", d(), r(), Err("undefined field 'foo'")),
            (
                "authorizer.group('').resource('pods').check('get').foo",
                d(),
                r(),
                Err("undefined field 'foo'"),
            ),
        ]);
    }

    #[test]
    fn checks_carry_upstreams_attributes() {
        let f = Fake::answering(Decision::deny(""));
        let mut req = endpoint_create();
        req.user_info = UserInfo {
            username: "alice".into(),
            groups: vec!["devs".into()],
            ..Default::default()
        };
        eval("authorizer.group('apps').resource('deployments').fieldSelector('spec.nodeName=mynode').labelSelector('app=example').check('list')", &f, &req).unwrap();
        let a = f.last();
        assert_eq!(a.user, req.user_info);
        assert_eq!(a.verb, "list");
        let r = a.resource().unwrap();
        assert_eq!(
            (r.api_group.as_str(), r.api_version.as_str()),
            ("apps", "*")
        );
        assert_eq!(r.field_selector, "spec.nodeName=mynode");
        assert_eq!(r.label_selector, "app=example");
        eval("authorizer.path('/metrics').check('get')", &f, &req).unwrap();
        assert_eq!(f.last().path(), Some("/metrics"));
        assert_eq!(f.last().user.username, "alice");
        eval(
            "authorizer.serviceAccount('kube-system', 'builder').path('/x').check('get')",
            &f,
            &req,
        )
        .unwrap();
        assert_eq!(
            f.last().user,
            service_account_user("kube-system", "builder")
        );
        // serviceAccount does not change the `authorizer` it is called on
        eval("authorizer.path('/y').check('get')", &f, &req).unwrap();
        assert_eq!(f.last().user.username, "alice");
    }

    #[test]
    fn fixed_and_deny_all_authorizers_through_cel() {
        // FORMAT.md: the first matching entry decides; unlisted checks are denied.
        let fixed = FixedAuthorizer::from_json(&serde_json::json!([
            {"user": "alice", "resource": "secrets", "namespace": "default", "verb": "create", "allowed": true, "reason": "ok"},
        ]))
        .unwrap();
        let mut req = plain_request();
        let src = "authorizer.group('').resource('secrets').namespace('default').check('create')";
        req.user_info.username = "alice".into();
        let env = CelEnvironment::shared();
        for (user, allowed, reason) in [("alice", "true", "ok"), ("bob", "false", "")] {
            req.user_info.username = user.into();
            assert_eq!(
                eval(&format!("{src}.allowed()"), &fixed, &req).unwrap(),
                allowed
            );
            assert_eq!(
                eval(&format!("{src}.reason()"), &fixed, &req).unwrap(),
                reason
            );
        }
        let deny = AlwaysDeny;
        let expr = env.compile(&format!("{src}.allowed()")).unwrap();
        let mut ctx = env.context();
        ctx.add_variable_as_val(AUTHORIZER_VAR, authorizer_value(&deny, &req));
        let v = expr.evaluate(&ctx).unwrap();
        assert_eq!(v.downcast_ref::<CelBool>().map(|b| *b.inner()), Some(false));
    }

    #[test]
    fn decisions_can_outlive_the_evaluation() {
        let f = Fake::answering(Decision::allow("yes"));
        let req = plain_request();
        let env = CelEnvironment::shared();
        let expr = env.compile("authorizer.path('/x').check('get')").unwrap();
        let kept = {
            let mut ctx = env.context();
            for (name, v) in activation_inputs(&f, &req) {
                ctx.add_variable_as_val(name, v);
            }
            let v = expr.evaluate(&ctx).unwrap();
            to_static(&*v).expect("a decision")
        };
        assert_eq!(
            kept.downcast_ref::<DecisionValue>(),
            Some(&DecisionValue(Decision::allow("yes")))
        );
        let root = authorizer_value(&f, &req);
        assert!(to_static(&*root).is_none());
    }

    #[test]
    fn dns_names() {
        assert!(is_dns1123_label("default"));
        assert!(is_dns1123_label("a-1"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("valid.example.com"));
        assert!(is_dns1123_subdomain(&"a".repeat(70)));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain(""));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }
}
