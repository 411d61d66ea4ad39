//! The static types the compile-time checks know, as far as they can be
//! known without upstream's full type checker: literals, aggregates of
//! them, the conversions and operators whose result type is fixed, and the
//! variables upstream declares `dyn` (`object`, `oldObject`, `params`).
//! Anything else is [`Ty::Unknown`], which no check ever reports on.

use cel::common::ast::{operators, EntryExpr, Expr, IdedExpr, LiteralValue};
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

impl Ty {
    /// Whether the type is fully known (no [`Ty::Unknown`] anywhere in it).
    pub(super) fn is_known(&self) -> bool {
        match self {
            Ty::Unknown => false,
            Ty::List(e) => e.is_known(),
            Ty::Map(k, v) => k.is_known() && v.is_known(),
            _ => true,
        }
    }

    /// Whether the type is fully known and has no `dyn` in it: the values
    /// of such a type have this runtime type.
    pub(super) fn is_concrete(&self) -> bool {
        match self {
            Ty::Unknown | Ty::Dyn => false,
            Ty::List(e) => e.is_concrete(),
            Ty::Map(k, v) => k.is_concrete() && v.is_concrete(),
            _ => true,
        }
    }

    /// cel-go's name of the type (`FormatCELType`).
    pub(super) fn name(&self) -> String {
        match self {
            Ty::Unknown | Ty::Dyn => "dyn".into(),
            Ty::Null => "null_type".into(),
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
        }
    }

    /// Whether the type is a number type.
    pub(super) fn is_number(&self) -> bool {
        matches!(self, Ty::Int | Ty::Uint | Ty::Double)
    }

    /// Whether the type is neither a list nor a map.
    pub(super) fn is_scalar(&self) -> bool {
        !matches!(self, Ty::List(_) | Ty::Map(..))
    }

    /// Whether `string` occurs in the type.
    pub(super) fn has_string(&self) -> bool {
        match self {
            Ty::String => true,
            Ty::List(e) => e.has_string(),
            Ty::Map(k, v) => k.has_string() || v.has_string(),
            _ => false,
        }
    }

    /// Whether `null_type` occurs in the type (`null` is assignable to
    /// several types: checks leave it alone).
    pub(super) fn has_null(&self) -> bool {
        match self {
            Ty::Null => true,
            Ty::List(e) => e.has_null(),
            Ty::Map(k, v) => k.has_null() || v.has_null(),
            _ => false,
        }
    }
}

/// The variables upstream declares `dyn` for every MutatingAdmissionPolicy
/// expression (`k8s.io/apiserver/pkg/admission/plugin/cel/compile.go`,
/// `createEnvForOpts`). `request` and `namespaceObject` have declared object
/// types ([`OBJECT_VARIABLES`]); `authorizer` and `variables.*` are left
/// unknown here.
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
        } else if let (Some(t), "variables") = (&self.variables, name) {
            t.clone()
        } else if let Some((_, o)) = OBJECT_VARIABLES.iter().find(|(v, _)| *v == name) {
            Ty::Object(o)
        } else {
            Ty::Unknown
        }
    }
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
            _ => Ty::Unknown,
        },
        Expr::List(l) => {
            if !l.optional_indices.is_empty() || l.elements.is_empty() {
                return Ty::Unknown;
            }
            let elem = join(l.elements.iter().map(|x| type_of(x, scope)));
            if elem.is_known() {
                Ty::List(Box::new(elem))
            } else {
                Ty::Unknown
            }
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
            let target = call.target.as_deref().map(|t| type_of(t, scope));
            let args: Vec<Ty> = call.args.iter().map(|a| type_of(a, scope)).collect();
            call_type(&call.func_name, target.as_ref(), &args)
        }
        Expr::Comprehension(_) | Expr::Struct(_) | Expr::Unspecified => Ty::Unknown,
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
        (operators::ADD, None) => match same_args() {
            t @ (Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes | Ty::List(_)) => t,
            _ => Ty::Unknown,
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
        (operators::CONDITIONAL, None) if args.len() == 3 => join(args[1..].iter().cloned()),
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
