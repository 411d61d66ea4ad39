//! The structured-merge-diff (SMD) schema model: atoms, type references and
//! their resolution (sigs.k8s.io/structured-merge-diff/v6 `schema`).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde_json::Value;

/// Name of SMD's untyped atomic type (kube-openapi schemaconv `untypedDef`).
pub(crate) const UNTYPED_ATOMIC: &str = "__untyped_atomic_";
/// Name of SMD's deduced type (kube-openapi schemaconv `deducedDef`).
pub(crate) const UNTYPED_DEDUCED: &str = "__untyped_deduced_";

/// A scalar type (SMD `schema.Scalar`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    Numeric,
    String,
    Boolean,
    Untyped,
}

impl Scalar {
    pub(crate) fn parse(s: &str) -> Option<Scalar> {
        match s {
            "numeric" => Some(Scalar::Numeric),
            "string" => Some(Scalar::String),
            "boolean" => Some(Scalar::Boolean),
            "untyped" => Some(Scalar::Untyped),
            _ => None,
        }
    }
}

/// How the items of a list or map relate (SMD `schema.ElementRelationship`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relationship {
    Atomic,
    Associative,
    Separable,
}

impl Relationship {
    pub(crate) fn parse(s: &str) -> Option<Relationship> {
        match s {
            "atomic" => Some(Relationship::Atomic),
            "associative" => Some(Relationship::Associative),
            "separable" => Some(Relationship::Separable),
            _ => None,
        }
    }
}

/// A list type (SMD `schema.List`).
#[derive(Debug)]
pub(crate) struct ListDef {
    pub(crate) element: TypeSpec,
    pub(crate) relationship: Option<Relationship>,
    pub(crate) keys: Vec<String>,
}

/// One field of a map/struct type (SMD `schema.StructField`).
#[derive(Debug)]
pub(crate) struct FieldDef {
    pub(crate) ty: TypeSpec,
    pub(crate) default: Option<Value>,
}

/// The hasher of the maps and sets the schema walks and merges look up on
/// every step (field and type names, list-item identities): foldhash,
/// randomly seeded, costs far less than SipHash there.
pub(crate) type FastHash = foldhash::fast::RandomState;

/// A map keyed by names a schema declares (field names): the keys come from
/// schemas, not from requests.
type SchemaMap<V> = HashMap<String, V, FastHash>;

/// A map or struct type (SMD `schema.Map`).
#[derive(Debug, Default)]
pub(crate) struct MapDef {
    fields: SchemaMap<FieldDef>,
    /// Type of the keys not in `fields`; `None` means they are not allowed.
    pub(crate) element: Option<TypeSpec>,
    /// Unset means the default (separable).
    pub(crate) relationship: Option<Relationship>,
}

impl MapDef {
    pub(crate) fn new(
        fields: HashMap<String, FieldDef>,
        element: Option<TypeSpec>,
        relationship: Option<Relationship>,
    ) -> MapDef {
        MapDef {
            fields: fields.into_iter().collect(),
            element,
            relationship,
        }
    }

    /// The declared field `name` (SMD `Map.FindField`).
    pub(crate) fn field(&self, name: &str) -> Option<&FieldDef> {
        self.fields.get(name)
    }
}

/// The name of a schema type, interned: the process keeps one copy of each
/// distinct name, so names compare and hash by address. Every step of every
/// walk over an object resolves a name; this spares hashing and comparing
/// names like `io.k8s.api.core.v1.PodSpec` each time.
#[derive(Clone)]
pub(crate) struct TypeName(Arc<str>);

impl TypeName {
    /// The interned copy of `name` (schemas are loaded rarely; the lock is
    /// never taken on the request path).
    pub(crate) fn new(name: &str) -> TypeName {
        static NAMES: OnceLock<Mutex<HashSet<Arc<str>>>> = OnceLock::new();
        let mut names = NAMES
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(interned) = names.get(name) {
            return TypeName(interned.clone());
        }
        let interned: Arc<str> = Arc::from(name);
        names.insert(interned.clone());
        TypeName(interned)
    }

    fn address(&self) -> usize {
        Arc::as_ptr(&self.0) as *const u8 as usize
    }
}

impl PartialEq for TypeName {
    fn eq(&self, other: &TypeName) -> bool {
        self.address() == other.address()
    }
}

impl Eq for TypeName {}

impl Hash for TypeName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.address().hash(state);
    }
}

impl Deref for TypeName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// A set of possible types for one value (SMD `schema.Atom`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Atom {
    pub(crate) scalar: Option<Scalar>,
    pub(crate) list: Option<Arc<ListDef>>,
    pub(crate) map: Option<Arc<MapDef>>,
}

/// A reference to a type: named, or inlined (SMD `schema.TypeRef`).
#[derive(Clone, Debug)]
pub(crate) enum TypeSpec {
    /// A named type, optionally overriding its element relationship.
    Named {
        name: TypeName,
        relationship: Option<Relationship>,
    },
    /// An inlined atom.
    Inline(Atom),
}

impl TypeSpec {
    pub(crate) fn named(name: &str) -> TypeSpec {
        TypeSpec::Named {
            name: TypeName::new(name),
            relationship: None,
        }
    }

    pub(crate) fn scalar(s: Scalar) -> TypeSpec {
        TypeSpec::Inline(Atom {
            scalar: Some(s),
            ..Atom::default()
        })
    }

    /// The name used in SMD error messages ("inlined type" when inlined).
    pub(crate) fn display_name(&self) -> &str {
        match self {
            TypeSpec::Named { name, .. } => name,
            TypeSpec::Inline(_) => "inlined type",
        }
    }
}

/// A list type as seen through a type reference (relationship override
/// applied), borrowed from the schema: walks resolve types at every node,
/// and reference counts shared by every worker would cost more than the walk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListView<'s> {
    pub(crate) def: &'s ListDef,
    pub(crate) relationship: Option<Relationship>,
}

/// A map type as seen through a type reference (relationship override
/// applied), borrowed from the schema like [`ListView`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapView<'s> {
    pub(crate) def: &'s MapDef,
    pub(crate) relationship: Option<Relationship>,
}

/// A resolved atom (SMD `Schema.Resolve` result).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Resolved<'s> {
    pub(crate) scalar: Option<Scalar>,
    pub(crate) list: Option<ListView<'s>>,
    pub(crate) map: Option<MapView<'s>>,
}

impl<'s> Resolved<'s> {
    fn from_atom(atom: &'s Atom) -> Resolved<'s> {
        Resolved {
            scalar: atom.scalar,
            list: atom.list.as_deref().map(|def| ListView {
                def,
                relationship: def.relationship,
            }),
            map: atom.map.as_deref().map(|def| MapView {
                def,
                relationship: def.relationship,
            }),
        }
    }

    /// SMD `deduceAtom`: keep only the member matching the value's kind, if
    /// the atom has one; otherwise the whole atom (validation then fails
    /// with a useful message).
    pub(crate) fn deduce(&self, v: Option<&Value>) -> Resolved<'s> {
        match v {
            Some(Value::Bool(_)) | Some(Value::Number(_)) | Some(Value::String(_))
                if self.scalar.is_some() =>
            {
                Resolved {
                    scalar: self.scalar,
                    ..Resolved::default()
                }
            }
            Some(Value::Array(_)) if self.list.is_some() => Resolved {
                list: self.list,
                ..Resolved::default()
            },
            Some(Value::Object(_)) if self.map.is_some() => Resolved {
                map: self.map,
                ..Resolved::default()
            },
            _ => *self,
        }
    }

    /// Whether two atoms deduced from the same atom are equal (SMD `Atom.Equals`).
    pub(crate) fn same_members(&self, other: &Resolved<'_>) -> bool {
        self.scalar.is_some() == other.scalar.is_some()
            && self.list.is_some() == other.list.is_some()
            && self.map.is_some() == other.map.is_some()
    }
}

/// A set of named types, possibly layered over a parent set.
pub(crate) struct SchemaData {
    types: HashMap<TypeName, Atom, FastHash>,
    parent: Option<Arc<SchemaData>>,
}

impl fmt::Debug for SchemaData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaData")
            .field("types", &self.types.len())
            .field("parent", &self.parent.is_some())
            .finish()
    }
}

impl SchemaData {
    pub(crate) fn new(types: HashMap<String, Atom>, parent: Option<Arc<SchemaData>>) -> SchemaData {
        SchemaData {
            types: types
                .into_iter()
                .map(|(name, atom)| (TypeName::new(&name), atom))
                .collect(),
            parent,
        }
    }

    fn named(&self, name: &TypeName) -> Option<&Atom> {
        match self.types.get(name) {
            Some(a) => Some(a),
            None => self.parent.as_ref().and_then(|p| p.named(name)),
        }
    }

    /// SMD `Schema.Resolve`: the atom a type reference designates, with the
    /// reference's relationship override applied to its map (or else list).
    pub(crate) fn resolve<'s>(&'s self, spec: &'s TypeSpec) -> Option<Resolved<'s>> {
        match spec {
            TypeSpec::Inline(atom) => Some(Resolved::from_atom(atom)),
            TypeSpec::Named { name, relationship } => {
                let mut r = Resolved::from_atom(self.named(name)?);
                if let Some(rel) = relationship {
                    if let Some(m) = r.map.as_mut() {
                        m.relationship = Some(*rel);
                    } else if let Some(l) = r.list.as_mut() {
                        l.relationship = Some(*rel);
                    } else {
                        return None;
                    }
                }
                Some(r)
            }
        }
    }
}

/// The two types every converted schema has (kube-openapi schemaconv
/// `addCommonTypes`): untyped-atomic and deduced.
pub(crate) fn common_types() -> [(String, Atom); 2] {
    let untyped_list = Arc::new(ListDef {
        element: TypeSpec::named(UNTYPED_ATOMIC),
        relationship: Some(Relationship::Atomic),
        keys: Vec::new(),
    });
    let atomic = Atom {
        scalar: Some(Scalar::Untyped),
        list: Some(untyped_list.clone()),
        map: Some(Arc::new(MapDef::new(
            HashMap::new(),
            Some(TypeSpec::named(UNTYPED_ATOMIC)),
            Some(Relationship::Atomic),
        ))),
    };
    let deduced = Atom {
        scalar: Some(Scalar::Untyped),
        list: Some(untyped_list),
        map: Some(Arc::new(MapDef::new(
            HashMap::new(),
            Some(TypeSpec::named(UNTYPED_DEDUCED)),
            Some(Relationship::Separable),
        ))),
    };
    [
        (UNTYPED_ATOMIC.to_string(), atomic),
        (UNTYPED_DEDUCED.to_string(), deduced),
    ]
}
