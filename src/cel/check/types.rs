//! The static types the compile-time checks know, as far as they can be
//! known without upstream's full type checker: literals, aggregates of
//! them, the conversions and operators whose result type is fixed, and the
//! variables upstream declares `dyn` (`object`, `oldObject`, `params`).
//! Anything else is [`Ty::Unknown`], which no check ever reports on.

use crate::cel::ast::ENTRIES_FN;
use cel::common::ast::{operators, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use std::sync::Arc;

/// A static type, named as cel-go's `FormatCELType` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ty {
    /// Not known here (a variable of unknown type, a macro's result, ...).
    Unknown,
    /// Upstream's checker types it `dyn`.
    Dyn,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    /// A value of one of [`OPAQUE`]'s types (its cel-go name).
    Opaque(&'static str),
    /// An object of a type Kubernetes declares with its fields
    /// (`request`, `namespaceObject`).
    Object(&'static ObjectType),
    /// `variables`: the policy's variables declared so far, with the types
    /// of their expressions (upstream's composited `variables` object).
    Variables(Arc<[(String, Ty)]>),
    /// `optional_type(T)` (cel-go's `cel.OptionalTypes()`).
    Optional(Box<Ty>),
    /// `type(T)`: the value of `type(x)` for an `x` of type `T`.
    Type(Box<Ty>),
    /// An element of a two-variable comprehension's rewritten range: a
    /// `[key, value]` pair whose `[0]` and `[1]` have these types (see
    /// `rewrite::two_var_comprehension`). Never reported on.
    Entry(Box<Ty>, Box<Ty>),
}

/// An object type Kubernetes declares for a variable
/// (`plugin/cel/compile.go` `BuildRequestType`, `BuildNamespaceType`).
#[derive(Debug)]
pub(super) struct ObjectType {
    name: &'static str,
    fields: &'static [(&'static str, FieldType)],
}

impl PartialEq for ObjectType {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for ObjectType {}

impl ObjectType {
    /// The type of the field `name`, if the type declares it.
    pub(super) fn field(&self, name: &str) -> Option<Ty> {
        self.fields
            .iter()
            .find(|(f, _)| *f == name)
            .map(|(_, t)| t.ty())
    }
}

/// The type of a field of an [`ObjectType`].
#[derive(Debug)]
enum FieldType {
    String,
    Bool,
    Int,
    Timestamp,
    Dyn,
    Object(&'static ObjectType),
    StringList,
    ObjectList(&'static ObjectType),
    StringMap,
    StringListMap,
}

impl FieldType {
    fn ty(&self) -> Ty {
        let string_list = || Ty::List(Box::new(Ty::String));
        match self {
            FieldType::String => Ty::String,
            FieldType::Bool => Ty::Bool,
            FieldType::Int => Ty::Int,
            FieldType::Timestamp => Ty::Opaque("google.protobuf.Timestamp"),
            FieldType::Dyn => Ty::Dyn,
            FieldType::Object(o) => Ty::Object(o),
            FieldType::StringList => string_list(),
            FieldType::ObjectList(o) => Ty::List(Box::new(Ty::Object(o))),
            FieldType::StringMap => Ty::Map(Box::new(Ty::String), Box::new(Ty::String)),
            FieldType::StringListMap => Ty::Map(Box::new(Ty::String), Box::new(string_list())),
        }
    }
}

static GROUP_VERSION_KIND: ObjectType = ObjectType {
    name: "kubernetes.GroupVersionKind",
    fields: &[
        ("group", FieldType::String),
        ("version", FieldType::String),
        ("kind", FieldType::String),
    ],
};

static GROUP_VERSION_RESOURCE: ObjectType = ObjectType {
    name: "kubernetes.GroupVersionResource",
    fields: &[
        ("group", FieldType::String),
        ("version", FieldType::String),
        ("resource", FieldType::String),
    ],
};

static USER_INFO: ObjectType = ObjectType {
    name: "kubernetes.UserInfo",
    fields: &[
        ("username", FieldType::String),
        ("uid", FieldType::String),
        ("groups", FieldType::StringList),
        ("extra", FieldType::StringListMap),
    ],
};

/// `request` (`uid`, `object` and `oldObject` are left out upstream).
static ADMISSION_REQUEST: ObjectType = ObjectType {
    name: "kubernetes.AdmissionRequest",
    fields: &[
        ("kind", FieldType::Object(&GROUP_VERSION_KIND)),
        ("resource", FieldType::Object(&GROUP_VERSION_RESOURCE)),
        ("subResource", FieldType::String),
        ("requestKind", FieldType::Object(&GROUP_VERSION_KIND)),
        (
            "requestResource",
            FieldType::Object(&GROUP_VERSION_RESOURCE),
        ),
        ("requestSubResource", FieldType::String),
        ("name", FieldType::String),
        ("namespace", FieldType::String),
        ("operation", FieldType::String),
        ("userInfo", FieldType::Object(&USER_INFO)),
        ("dryRun", FieldType::Bool),
        ("options", FieldType::Dyn),
    ],
};

static NAMESPACE_SPEC: ObjectType = ObjectType {
    name: "kubernetes.NamespaceSpec",
    fields: &[("finalizers", FieldType::StringList)],
};

static NAMESPACE_CONDITION: ObjectType = ObjectType {
    name: "kubernetes.NamespaceCondition",
    fields: &[
        ("status", FieldType::String),
        ("type", FieldType::String),
        ("lastTransitionTime", FieldType::Timestamp),
        ("message", FieldType::String),
        ("reason", FieldType::String),
    ],
};

static NAMESPACE_STATUS: ObjectType = ObjectType {
    name: "kubernetes.NamespaceStatus",
    fields: &[
        ("conditions", FieldType::ObjectList(&NAMESPACE_CONDITION)),
        ("phase", FieldType::String),
    ],
};

/// `namespaceObject.metadata`: upstream declares these fields only (its
/// uid is spelt `UID`).
static NAMESPACE_METADATA: ObjectType = ObjectType {
    name: "kubernetes.NamespaceMetadata",
    fields: &[
        ("name", FieldType::String),
        ("generateName", FieldType::String),
        ("namespace", FieldType::String),
        ("labels", FieldType::StringMap),
        ("annotations", FieldType::StringMap),
        ("UID", FieldType::String),
        ("creationTimestamp", FieldType::Timestamp),
        ("deletionGracePeriodSeconds", FieldType::Int),
        ("deletionTimestamp", FieldType::Timestamp),
        ("generation", FieldType::Int),
        ("resourceVersion", FieldType::String),
        ("finalizers", FieldType::StringList),
    ],
};

static NAMESPACE: ObjectType = ObjectType {
    name: "kubernetes.Namespace",
    fields: &[
        ("metadata", FieldType::Object(&NAMESPACE_METADATA)),
        ("spec", FieldType::Object(&NAMESPACE_SPEC)),
        ("status", FieldType::Object(&NAMESPACE_STATUS)),
    ],
};

/// The variables Kubernetes declares with object types.
const OBJECT_VARIABLES: &[(&str, &ObjectType)] = &[
    ("request", &ADMISSION_REQUEST),
    ("namespaceObject", &NAMESPACE),
];

/// The abstract types the constructors of Kubernetes' libraries and of CEL
/// return: (constructor, cel-go type name, a valid string argument).
pub(super) const OPAQUE: &[(&str, &str, &str)] = &[
    ("quantity", "kubernetes.Quantity", "0"),
    ("url", "kubernetes.URL", "https://example.com/"),
    ("ip", "net.IP", "192.168.0.1"),
    ("cidr", "net.CIDR", "192.168.0.0/24"),
    ("semver", "kubernetes.Semver", "1.0.0"),
    ("duration", "google.protobuf.Duration", "1s"),
    (
        "timestamp",
        "google.protobuf.Timestamp",
        "2000-01-01T00:00:00Z",
    ),
];

/// `format.dns1123Label()` and the other named formats of Kubernetes'
/// format library.
pub(super) const NAMED_FORMAT: &str = "kubernetes.NamedFormat";

/// The authorizer library's types (`k8s.io/apiserver/pkg/cel/library/authz.go`).
pub(super) const AUTHORIZER: &str = "kubernetes.authorization.Authorizer";
const GROUP_CHECK: &str = "kubernetes.authorization.GroupCheck";
const RESOURCE_CHECK: &str = "kubernetes.authorization.ResourceCheck";
const PATH_CHECK: &str = "kubernetes.authorization.PathCheck";
const DECISION: &str = "kubernetes.authorization.Decision";

/// The methods upstream declares on the authorizer library's types, which
/// no value can stand in for when probing (they need the request's
/// authorizer): (receiver, method, count of `string` arguments, result).
const AUTHZ_METHODS: &[(&str, &str, usize, &str)] = &[
    (AUTHORIZER, "group", 1, GROUP_CHECK),
    (AUTHORIZER, "path", 1, PATH_CHECK),
    (AUTHORIZER, "serviceAccount", 2, AUTHORIZER),
    (GROUP_CHECK, "resource", 1, RESOURCE_CHECK),
    (RESOURCE_CHECK, "subresource", 1, RESOURCE_CHECK),
    (RESOURCE_CHECK, "namespace", 1, RESOURCE_CHECK),
    (RESOURCE_CHECK, "name", 1, RESOURCE_CHECK),
    (RESOURCE_CHECK, "fieldSelector", 1, RESOURCE_CHECK),
    (RESOURCE_CHECK, "labelSelector", 1, RESOURCE_CHECK),
    (RESOURCE_CHECK, "check", 1, DECISION),
    (PATH_CHECK, "check", 1, DECISION),
    (DECISION, "allowed", 0, "bool"),
    (DECISION, "errored", 0, "bool"),
    (DECISION, "reason", 0, "string"),
    (DECISION, "error", 0, "string"),
];

/// Whether `t` is one of the authorizer library's types.
pub(super) fn is_authz(t: &Ty) -> bool {
    matches!(t, Ty::Opaque(n) if n.starts_with("kubernetes.authorization."))
}

/// The result of the authorizer library's method `name` on `receiver` with
/// arguments of types `args`, `None` when upstream declares no such overload.
pub(super) fn authz_method(receiver: &Ty, name: &str, args: &[Ty]) -> Option<Ty> {
    let Ty::Opaque(r) = receiver else { return None };
    let (.., result) = AUTHZ_METHODS.iter().find(|(on, m, n, _)| {
        on == r && *m == name && *n == args.len() && args.iter().all(|a| *a == Ty::String)
    })?;
    Some(match *result {
        "bool" => Ty::Bool,
        "string" => Ty::String,
        other => Ty::Opaque(other),
    })
}

/// The element types the lists extension's `sort` and `sortBy` accept
/// (cel-go `ext/lists.go`'s comparable types).
pub(super) fn is_sortable(t: &Ty) -> bool {
    match t {
        Ty::Int | Ty::Uint | Ty::Double | Ty::Bool | Ty::String | Ty::Bytes => true,
        Ty::Opaque(n) => n.starts_with("google.protobuf."),
        _ => false,
    }
}

/// Whether values of types `a` and `b` may meet where upstream wants one
/// type (`_==_`, `@in`, a map key): the same type, or a `null` where the
/// other type is one `null` is assignable to (an object, a message, an
/// optional). Numbers of different types do not meet.
pub(super) fn compatible(a: &Ty, b: &Ty) -> bool {
    let takes_null = |t: &Ty| {
        matches!(
            t,
            Ty::Null | Ty::Opaque(_) | Ty::Object(_) | Ty::Optional(_) | Ty::Dyn | Ty::Unknown
        )
    };
    match (a, b) {
        (Ty::Null, t) | (t, Ty::Null) => takes_null(t),
        (Ty::List(x), Ty::List(y)) => compatible(x, y),
        (Ty::Map(k1, v1), Ty::Map(k2, v2)) => compatible(k1, k2) && compatible(v1, v2),
        (Ty::Optional(x), Ty::Optional(y)) => compatible(x, y),
        // `type(1) == string` is no error upstream.
        (Ty::Type(_), Ty::Type(_)) => true,
        _ => a == b,
    }
}

/// One type for two where upstream's inference joins them: a part not
/// known yet (`[]`'s element) takes the other's; else they must agree.
/// Whether `a` and `b` are of different kinds among the plain ones (a
/// string and a list, say): no `dyn` inside either makes them one type.
pub(super) fn different_kinds(a: &Ty, b: &Ty) -> bool {
    let kind = |t: &Ty| match t {
        Ty::Bool
        | Ty::Int
        | Ty::Uint
        | Ty::Double
        | Ty::String
        | Ty::Bytes
        | Ty::List(_)
        | Ty::Map(..) => Some(std::mem::discriminant(t)),
        _ => None,
    };
    matches!((kind(a), kind(b)), (Some(x), Some(y)) if x != y)
}

fn unify(a: &Ty, b: &Ty) -> Ty {
    match (a, b) {
        (Ty::Unknown, t) | (t, Ty::Unknown) => t.clone(),
        (Ty::List(x), Ty::List(y)) => Ty::List(Box::new(unify(x, y))),
        (Ty::Map(k1, v1), Ty::Map(k2, v2)) => {
            Ty::Map(Box::new(unify(k1, k2)), Box::new(unify(v1, v2)))
        }
        (Ty::Optional(x), Ty::Optional(y)) => Ty::Optional(Box::new(unify(x, y))),
        _ if a == b => a.clone(),
        _ => Ty::Unknown,
    }
}

impl Ty {
    /// Whether the type is fully known (no [`Ty::Unknown`] anywhere in it).
    pub(super) fn is_known(&self) -> bool {
        match self {
            Ty::Unknown | Ty::Entry(..) => false,
            Ty::List(e) | Ty::Optional(e) | Ty::Type(e) => e.is_known(),
            Ty::Map(k, v) => k.is_known() && v.is_known(),
            _ => true,
        }
    }

    /// Whether the type is fully known and has no `dyn` in it: the values
    /// of such a type have this runtime type.
    pub(super) fn is_concrete(&self) -> bool {
        match self {
            Ty::Unknown | Ty::Dyn | Ty::Entry(..) => false,
            Ty::List(e) | Ty::Optional(e) | Ty::Type(e) => e.is_concrete(),
            Ty::Map(k, v) => k.is_concrete() && v.is_concrete(),
            _ => true,
        }
    }

    /// cel-go's name of the type (`FormatCELType`).
    pub(super) fn name(&self) -> String {
        match self {
            Ty::Unknown | Ty::Dyn | Ty::Entry(..) => "dyn".into(),
            Ty::Null => "null".into(),
            Ty::Bool => "bool".into(),
            Ty::Int => "int".into(),
            Ty::Uint => "uint".into(),
            Ty::Double => "double".into(),
            Ty::String => "string".into(),
            Ty::Bytes => "bytes".into(),
            Ty::List(e) => format!("list({})", e.name()),
            Ty::Map(k, v) => format!("map({}, {})", k.name(), v.name()),
            Ty::Opaque(name) => (*name).into(),
            Ty::Object(o) => o.name.into(),
            Ty::Variables(_) => "kubernetes.variables".into(),
            Ty::Optional(e) => format!("optional_type({})", e.name()),
            Ty::Type(e) => format!("type({})", e.name()),
        }
    }

    /// Whether the type is a number type.
    pub(super) fn is_number(&self) -> bool {
        matches!(self, Ty::Int | Ty::Uint | Ty::Double)
    }

    /// Whether a comprehension cannot range over a value of this type
    /// (cel-go: `must be list, map, or dynamic`).
    pub(super) fn is_not_range(&self) -> bool {
        self.is_concrete() && !matches!(self, Ty::List(_) | Ty::Map(..) | Ty::Null)
    }

    /// Whether `string` occurs in the type.
    pub(super) fn has_string(&self) -> bool {
        match self {
            Ty::String => true,
            Ty::List(e) | Ty::Optional(e) => e.has_string(),
            Ty::Map(k, v) => k.has_string() || v.has_string(),
            _ => false,
        }
    }

    /// Whether `null_type` occurs in the type (`null` is assignable to
    /// several types: checks leave it alone).
    pub(super) fn has_null(&self) -> bool {
        match self {
            Ty::Null => true,
            Ty::List(e) | Ty::Optional(e) => e.has_null(),
            Ty::Map(k, v) => k.has_null() || v.has_null(),
            _ => false,
        }
    }
}

/// The variables upstream declares `dyn` for every MutatingAdmissionPolicy
/// expression (`k8s.io/apiserver/pkg/admission/plugin/cel/compile.go`,
/// `createEnvForOpts`). `request` and `namespaceObject` have declared object
/// types ([`OBJECT_VARIABLES`]), `variables` the declared variables' and
/// `authorizer` is
/// typed by the library's types.
const DYN_VARIABLES: &[&str] = &["object", "oldObject", "params"];

/// Variables bound by the comprehensions around an expression, innermost last.
#[derive(Default)]
pub(super) struct Scope {
    bound: Vec<(String, Ty)>,
    /// The type of `variables`, when the declared variables are known.
    variables: Option<Ty>,
}

impl Scope {
    /// A scope where `variables` has the declared variables' types.
    pub(super) fn with_variables(declared: &[(String, Ty)]) -> Scope {
        Scope {
            bound: Vec::new(),
            variables: Some(Ty::Variables(declared.into())),
        }
    }

    /// Binds `name` to `ty` until the matching [`Scope::pop`].
    pub(super) fn push(&mut self, name: &str, ty: Ty) {
        self.bound.push((name.to_string(), ty));
    }

    /// Whether a comprehension around the expression binds `name`.
    pub(super) fn binds(&self, name: &str) -> bool {
        self.bound.iter().any(|(n, _)| n == name)
    }

    /// Unbinds the last `n` names.
    pub(super) fn pop(&mut self, n: usize) {
        let keep = self.bound.len().saturating_sub(n);
        self.bound.truncate(keep);
    }

    fn lookup(&self, name: &str) -> Ty {
        if let Some((_, ty)) = self.bound.iter().rev().find(|(n, _)| n == name) {
            return ty.clone();
        }
        if DYN_VARIABLES.contains(&name) {
            Ty::Dyn
        } else if name == "authorizer" {
            Ty::Opaque(AUTHORIZER)
        } else if let Some(t) = type_name(name) {
            // `int`, `string`, ...: the type values cel-go declares.
            Ty::Type(Box::new(t))
        } else if let (Some(t), "variables") = (&self.variables, name) {
            t.clone()
        } else if let Some((_, o)) = OBJECT_VARIABLES.iter().find(|(v, _)| *v == name) {
            Ty::Object(o)
        } else {
            Ty::Unknown
        }
    }
}

/// The type a type name denotes (`int` is `type(int)`'s value).
fn type_name(name: &str) -> Option<Ty> {
    Some(match name {
        "bool" => Ty::Bool,
        "int" => Ty::Int,
        "uint" => Ty::Uint,
        "double" => Ty::Double,
        "string" => Ty::String,
        "bytes" => Ty::Bytes,
        _ => return None,
    })
}

/// The type of a literal.
pub(super) fn literal_type(l: &LiteralValue) -> Ty {
    match l {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(_) => Ty::Bytes,
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::String(_) => Ty::String,
        LiteralValue::UInt(_) => Ty::Uint,
        LiteralValue::Null => Ty::Null,
    }
}

/// The element type of a homogeneous run of element types, else unknown.
fn join(types: impl IntoIterator<Item = Ty>) -> Ty {
    let mut joined: Option<Ty> = None;
    for t in types {
        match &joined {
            None => joined = Some(t),
            Some(j) if *j == t => {}
            Some(_) => return Ty::Unknown,
        }
    }
    joined.unwrap_or(Ty::Unknown)
}

/// The type of the iteration variable of a comprehension over `range`.
pub(super) fn iteration_type(range: &Ty) -> Ty {
    match range {
        Ty::List(e) => (**e).clone(),
        Ty::Map(k, _) => (**k).clone(),
        Ty::Dyn => Ty::Dyn,
        _ => Ty::Unknown,
    }
}

/// The static type of `e` in `scope`.
pub(super) fn type_of(e: &IdedExpr, scope: &mut Scope) -> Ty {
    match &e.expr {
        Expr::Literal(l) => literal_type(l),
        Expr::Ident(name) => scope.lookup(name),
        Expr::Select(s) if s.test => Ty::Bool,
        Expr::Select(s) => match type_of(&s.operand, scope) {
            Ty::Dyn => Ty::Dyn,
            Ty::Map(k, v) if *k == Ty::String => *v,
            Ty::Object(o) => o.field(&s.field).unwrap_or(Ty::Unknown),
            Ty::Variables(vs) => vs
                .iter()
                .find(|(n, _)| *n == s.field)
                .map_or(Ty::Unknown, |(_, t)| t.clone()),
            Ty::Opaque(AUTHORIZER) if s.field == "requestResource" => Ty::Opaque(RESOURCE_CHECK),
            _ => Ty::Unknown,
        },
        // `[]`: a list whose element type the uses tell (see `unify`).
        Expr::List(l) if l.elements.is_empty() => Ty::List(Box::new(Ty::Unknown)),
        Expr::List(l) => {
            if !l.optional_indices.is_empty() {
                return Ty::Unknown;
            }
            let elem = join(l.elements.iter().map(|x| type_of(x, scope)));
            if elem.is_known() {
                Ty::List(Box::new(elem))
            } else {
                Ty::Unknown
            }
        }
        Expr::Map(m) if m.entries.is_empty() => {
            Ty::Map(Box::new(Ty::Unknown), Box::new(Ty::Unknown))
        }
        Expr::Map(m) => {
            let mut keys = Vec::new();
            let mut values = Vec::new();
            for en in &m.entries {
                match &en.expr {
                    EntryExpr::MapEntry(me) if !me.optional => {
                        keys.push(type_of(&me.key, scope));
                        values.push(type_of(&me.value, scope));
                    }
                    _ => return Ty::Unknown,
                }
            }
            let (k, v) = (join(keys), join(values));
            if k.is_known() && v.is_known() {
                Ty::Map(Box::new(k), Box::new(v))
            } else {
                Ty::Unknown
            }
        }
        Expr::Call(call) => {
            if let Some(q) = qualified_call(call, scope) {
                let args: Vec<Ty> = call.args.iter().map(|a| type_of(a, scope)).collect();
                return qualified_call_type(&q, &args);
            }
            let target = call.target.as_deref().map(|t| type_of(t, scope));
            let args: Vec<Ty> = call.args.iter().map(|a| type_of(a, scope)).collect();
            // `pair[0]`, `pair[1]` of a two-variable comprehension's entry.
            if let ([Ty::Entry(k, v), _], [_, i], operators::INDEX) = (
                args.as_slice(),
                call.args.as_slice(),
                call.func_name.as_str(),
            ) {
                return match &i.expr {
                    Expr::Literal(LiteralValue::Int(i)) if **i == 0 => (**k).clone(),
                    Expr::Literal(LiteralValue::Int(i)) if **i == 1 => (**v).clone(),
                    _ => Ty::Unknown,
                };
            }
            call_type(&call.func_name, target.as_ref(), &args)
        }
        Expr::Comprehension(c) => {
            let (iter, accu) = comprehension_types(c, scope);
            scope.push(&c.iter_var, iter);
            scope.push(&c.accu_var, accu);
            let result = type_of(&c.result, scope);
            scope.pop(2);
            result
        }
        Expr::Struct(_) | Expr::Unspecified => Ty::Unknown,
    }
}

/// The types of a comprehension's iteration variable and accumulator.
/// Upstream infers the accumulator's from its initial value and the step:
/// `[]` (`map`, `filter`) takes its element type from `accu + [x]`.
pub(super) fn comprehension_types(c: &ComprehensionExpr, scope: &mut Scope) -> (Ty, Ty) {
    let iter = iteration_type(&type_of(&c.iter_range, scope));
    let init = type_of(&c.accu_init, scope);
    if init.is_known() {
        return (iter, init);
    }
    scope.push(&c.iter_var, iter.clone());
    scope.push(&c.accu_var, init.clone());
    let step = type_of(&c.loop_step, scope);
    scope.pop(2);
    let accu = unify(&init, &step);
    (iter, if accu.is_known() { accu } else { init })
}

/// The qualified name of a library function `call` names
/// (`sets.contains(a, b)`, `optional.of(x)`), when its target is the
/// prefix of one and no comprehension variable of that name.
pub(super) fn qualified_call(call: &cel::common::ast::CallExpr, scope: &Scope) -> Option<String> {
    let Some(Expr::Ident(prefix)) = call.target.as_deref().map(|t| &t.expr) else {
        return None;
    };
    let known = matches!(
        prefix.as_str(),
        "optional" | "sets" | "lists" | "format" | "strings" | "jsonpatch"
    );
    (known && !scope.binds(prefix)).then(|| format!("{prefix}.{}", call.func_name))
}

/// The result type of the library function `q` (qualified) on `args`.
fn qualified_call_type(q: &str, args: &[Ty]) -> Ty {
    match (q, args) {
        ("optional.of" | "optional.ofNonZeroValue", [t]) => Ty::Optional(Box::new(t.clone())),
        ("optional.none", []) => Ty::Optional(Box::new(Ty::Unknown)),
        ("optional.unwrap", [Ty::List(e)]) => match &**e {
            Ty::Optional(t) => Ty::List(t.clone()),
            _ => Ty::Unknown,
        },
        ("sets.contains" | "sets.equivalent" | "sets.intersects", [_, _]) => Ty::Bool,
        ("lists.range", [Ty::Int]) => Ty::List(Box::new(Ty::Int)),
        ("strings.quote" | "jsonpatch.escapeKey", [Ty::String]) => Ty::String,
        ("format.named", [Ty::String]) => Ty::Optional(Box::new(Ty::Opaque(NAMED_FORMAT))),
        (f, []) if f.starts_with("format.") => Ty::Opaque(NAMED_FORMAT),
        _ => Ty::Unknown,
    }
}

/// The operators whose every overload returns a bool.
pub(super) const BOOL_OPERATORS: [&str; 10] = [
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::LESS,
    operators::LESS_EQUALS,
    operators::GREATER,
    operators::GREATER_EQUALS,
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::LOGICAL_NOT,
    operators::IN,
];

/// The string methods that return a bool.
pub(super) const STRING_PREDICATES: [&str; 4] = ["startsWith", "endsWith", "contains", "matches"];

/// The result type of a call, where every overload that can apply to these
/// argument types returns the same type.
fn call_type(name: &str, target: Option<&Ty>, args: &[Ty]) -> Ty {
    let same_args = || join(args.iter().cloned());
    match (name, target) {
        (operators::INDEX, None) if args.len() == 2 => match &args[0] {
            Ty::List(e) if args[1] == Ty::Int => (**e).clone(),
            Ty::Map(k, v) if **k == args[1] => (**v).clone(),
            Ty::Dyn => Ty::Dyn,
            _ => Ty::Unknown,
        },
        ("dyn", None) if args.len() == 1 => Ty::Dyn,
        ("int", None) if args.len() == 1 => Ty::Int,
        ("uint", None) if args.len() == 1 => Ty::Uint,
        ("double", None) if args.len() == 1 => Ty::Double,
        ("string", None) if args.len() == 1 => Ty::String,
        ("bytes", None) if args.len() == 1 => Ty::Bytes,
        ("bool", None) if args.len() == 1 => Ty::Bool,
        ("size", _) => Ty::Int,
        (op, None) if BOOL_OPERATORS.contains(&op) => Ty::Bool,
        (operators::ADD, None) => match args {
            [a @ Ty::List(_), b @ Ty::List(_)] => unify(a, b),
            _ => match same_args() {
                t @ (Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes) => t,
                _ => Ty::Unknown,
            },
        },
        (operators::SUBSTRACT | operators::MULTIPLY | operators::DIVIDE, None) => {
            match same_args() {
                t if t.is_number() => t,
                _ => Ty::Unknown,
            }
        }
        (operators::MODULO, None) => match same_args() {
            t @ (Ty::Int | Ty::Uint) => t,
            _ => Ty::Unknown,
        },
        (operators::NEGATE, None) => match same_args() {
            t @ (Ty::Int | Ty::Double) => t,
            _ => Ty::Unknown,
        },
        (operators::CONDITIONAL, None) if args.len() == 3 => unify(&args[1], &args[2]),
        (ENTRIES_FN, None) => match args {
            [Ty::List(e)] => Ty::List(Box::new(Ty::Entry(Box::new(Ty::Int), e.clone()))),
            [Ty::Map(k, v)] => Ty::List(Box::new(Ty::Entry(k.clone(), v.clone()))),
            _ => Ty::Unknown,
        },
        ("type", None) if args.len() == 1 => Ty::Type(Box::new(args[0].clone())),
        (operators::OPT_SELECT | operators::OPT_INDEX, None) => match args.first() {
            Some(Ty::Dyn) => Ty::Optional(Box::new(Ty::Dyn)),
            _ => Ty::Unknown,
        },
        ("hasValue", Some(Ty::Optional(_))) => Ty::Bool,
        ("value", Some(Ty::Optional(t))) => (**t).clone(),
        ("orValue", Some(Ty::Optional(t))) => unify(t, args.first().unwrap_or(&Ty::Unknown)),
        ("or", Some(o @ Ty::Optional(_))) => unify(o, args.first().unwrap_or(&Ty::Unknown)),
        ("first" | "last", Some(Ty::List(e))) if args.is_empty() => Ty::Optional(e.clone()),
        ("unwrapOpt", Some(Ty::List(e))) => match &**e {
            Ty::Optional(t) => Ty::List(t.clone()),
            _ => Ty::Unknown,
        },
        ("validate", Some(Ty::Opaque(NAMED_FORMAT))) if args == [Ty::String] => {
            Ty::Optional(Box::new(Ty::List(Box::new(Ty::String))))
        }
        (method, Some(r)) if is_authz(r) => authz_method(r, method, args).unwrap_or(Ty::Unknown),
        (method, Some(Ty::String)) if STRING_PREDICATES.contains(&method) => Ty::Bool,
        (
            "lowerAscii" | "upperAscii" | "replace" | "substring" | "trim" | "charAt" | "find",
            Some(Ty::String),
        ) => Ty::String,
        ("indexOf" | "lastIndexOf", Some(Ty::String)) => Ty::Int,
        ("split" | "findAll", Some(Ty::String)) => Ty::List(Box::new(Ty::String)),
        ("join", Some(Ty::List(e))) if **e == Ty::String => Ty::String,
        // The constructors of the abstract types, on the argument types
        // upstream declares for them.
        (ctor, None) if args == [Ty::String] || (ctor == "timestamp" && args == [Ty::Int]) => {
            match OPAQUE.iter().find(|(c, _, _)| *c == ctor) {
                Some((_, ty, _)) => Ty::Opaque(ty),
                None => Ty::Unknown,
            }
        }
        _ => Ty::Unknown,
    }
}
