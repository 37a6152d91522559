//! The types of one kind's objects, as strategic merge patch and server-side apply need them:
//! for every field, its type (struct, map, list or scalar), how its lists merge (atomic, set,
//! or map keyed by fields), whether its maps and structs are atomic or granular, and its
//! strategic-merge-patch strategy and merge key.
//!
//! Built from OpenAPI v3 definitions with upstream's `x-kubernetes-*` extensions (built-in
//! kinds' documents, or a CustomResourceDefinition's `openAPIV3Schema`), converted as
//! kube-openapi's `schemaconv` converts them for structured-merge-diff. Parts of an object the
//! schema does not describe are "deduced": maps granular, lists atomic.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

/// How the items of a list or the fields of a map relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relationship {
    /// Replaced as a whole; one owner.
    Atomic,
    /// Fields owned and merged one by one (maps and structs).
    Separable,
    /// Items owned and merged one by one, by key or by value (lists).
    Associative,
}

pub type NodeId = usize;

/// A reference to a type, with the map relationship a field may override
/// (`x-kubernetes-map-type` next to a `$ref`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeRef {
    pub node: NodeId,
    pub map_relationship: Option<Relationship>,
}

impl TypeRef {
    pub const fn of(node: NodeId) -> Self {
        TypeRef {
            node,
            map_relationship: None,
        }
    }
}

/// A field of a struct.
#[derive(Clone, Debug)]
pub struct Field {
    pub ty: TypeRef,
    /// The schema's default, used for missing key fields of list items.
    pub default: Option<Value>,
    /// `x-kubernetes-patch-strategy`, split at commas (`merge`, `replace`, `retainKeys`).
    pub patch_strategies: Vec<String>,
    /// `x-kubernetes-patch-merge-key`.
    pub merge_key: Option<String>,
}

#[derive(Clone, Debug)]
pub struct ListType {
    pub elem: TypeRef,
    pub relationship: Relationship,
    /// Key fields of an associative list of maps; empty for a set of scalars.
    pub keys: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct MapType {
    /// Declared fields (a struct); may be empty.
    pub fields: BTreeMap<String, Field>,
    /// The type of undeclared keys; `None` when a struct allows no other fields.
    pub elem: Option<TypeRef>,
    pub relationship: Relationship,
}

/// What a value of a type may be: any combination of scalar, list and map.
#[derive(Clone, Debug, Default)]
pub struct Atom {
    /// The definition's name, when it is a named definition.
    pub name: Option<String>,
    pub scalar: bool,
    pub list: Option<ListType>,
    pub map: Option<MapType>,
}

/// The types of one kind.
#[derive(Clone, Debug)]
pub struct Schema {
    atoms: Vec<Atom>,
    root: TypeRef,
}

/// Anything, replaced as a whole.
pub const UNTYPED: NodeId = 0;
/// Anything; maps granular, lists atomic.
pub const DEDUCED: NodeId = 1;

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";
const REF_PREFIX: &str = "#/components/schemas/";

/// Schema defaults of list-map key fields that k8s-openapi's schemas do not carry but
/// upstream's do (`+default="TCP"`): without them an applied port without a protocol would
/// not match the stored, defaulted one.
const KEY_DEFAULTS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.ContainerPort", "protocol", "TCP"),
    ("io.k8s.api.core.v1.ServicePort", "protocol", "TCP"),
];

fn common_atoms() -> Vec<Atom> {
    let untyped = Atom {
        name: Some("__untyped_atomic_".into()),
        scalar: true,
        list: Some(ListType {
            elem: TypeRef::of(UNTYPED),
            relationship: Relationship::Atomic,
            keys: Vec::new(),
        }),
        map: Some(MapType {
            fields: BTreeMap::new(),
            elem: Some(TypeRef::of(UNTYPED)),
            relationship: Relationship::Atomic,
        }),
    };
    let deduced = Atom {
        name: Some("__untyped_deduced_".into()),
        scalar: true,
        list: Some(ListType {
            elem: TypeRef::of(UNTYPED),
            relationship: Relationship::Atomic,
            keys: Vec::new(),
        }),
        map: Some(MapType {
            fields: BTreeMap::new(),
            elem: Some(TypeRef::of(DEDUCED)),
            relationship: Relationship::Separable,
        }),
    };
    vec![untyped, deduced]
}

/// What to do with a value of some type, once the value is known: upstream's `deduceAtom`
/// then `handleAtom`.
pub enum Shape<'a> {
    Scalar,
    List(&'a ListType),
    Map(&'a MapType, Relationship),
}

impl Schema {
    /// A schema that describes nothing: every object is deduced.
    pub fn deduced() -> Schema {
        Schema {
            atoms: common_atoms(),
            root: TypeRef::of(DEDUCED),
        }
    }

    /// The types reachable from definition `root` of OpenAPI v3 `definitions`
    /// (`$ref`s name `#/components/schemas/<name>`).
    pub fn from_definitions(definitions: &Map<String, Value>, root: &str) -> Schema {
        let mut b = Builder {
            defs: definitions,
            atoms: common_atoms(),
            names: HashMap::new(),
            queue: Vec::new(),
        };
        let root = TypeRef::of(b.named(root));
        while let Some((name, id)) = b.queue.pop() {
            b.parse_named(&name, id);
        }
        Schema {
            atoms: b.atoms,
            root,
        }
    }

    /// The types of a single self-contained schema, such as a CRD's `openAPIV3Schema`.
    pub fn from_schema(schema: &Value) -> Schema {
        let mut defs = Map::new();
        defs.insert("__root".into(), schema.clone());
        Schema::from_definitions(&defs, "__root")
    }

    /// A schema in structured-merge-diff's own YAML form (`types: [{name, map|list|scalar}]`),
    /// as its tests write them.
    #[doc(hidden)]
    pub fn from_smd(doc: &Value, root: &str) -> Schema {
        let mut atoms = common_atoms();
        let mut names: HashMap<String, NodeId> = HashMap::new();
        names.insert("__untyped_atomic_".into(), UNTYPED);
        names.insert("__untyped_deduced_".into(), DEDUCED);
        let types = doc
            .get("types")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for t in &types {
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
            if !names.contains_key(name) {
                atoms.push(Atom::default());
                names.insert(name.to_string(), atoms.len() - 1);
            }
        }
        fn relationship(v: Option<&Value>) -> Option<Relationship> {
            match v.and_then(Value::as_str) {
                Some("atomic") => Some(Relationship::Atomic),
                Some("associative") => Some(Relationship::Associative),
                Some("separable") => Some(Relationship::Separable),
                _ => None,
            }
        }
        fn type_ref(v: &Value, names: &HashMap<String, NodeId>, atoms: &mut Vec<Atom>) -> TypeRef {
            let map_relationship = relationship(v.get("elementRelationship"));
            if let Some(n) = v.get("namedType").and_then(Value::as_str) {
                return TypeRef {
                    node: names.get(n).copied().unwrap_or(DEDUCED),
                    map_relationship,
                };
            }
            let atom = atom(v, names, atoms);
            atoms.push(atom);
            TypeRef {
                node: atoms.len() - 1,
                map_relationship,
            }
        }
        fn atom(v: &Value, names: &HashMap<String, NodeId>, atoms: &mut Vec<Atom>) -> Atom {
            let mut a = Atom {
                scalar: v.get("scalar").is_some(),
                ..Default::default()
            };
            if let Some(l) = v.get("list") {
                a.list = Some(ListType {
                    elem: l
                        .get("elementType")
                        .map(|e| type_ref(e, names, atoms))
                        .unwrap_or(TypeRef::of(UNTYPED)),
                    relationship: relationship(l.get("elementRelationship"))
                        .unwrap_or(Relationship::Atomic),
                    keys: l
                        .get("keys")
                        .and_then(Value::as_array)
                        .map(|k| {
                            k.iter()
                                .filter_map(|k| k.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                });
            }
            if let Some(m) = v.get("map") {
                let mut fields = BTreeMap::new();
                for f in m
                    .get("fields")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                    let ty = f
                        .get("type")
                        .map(|t| type_ref(t, names, atoms))
                        .unwrap_or(TypeRef::of(DEDUCED));
                    fields.insert(
                        name.to_string(),
                        Field {
                            ty,
                            default: f.get("default").cloned(),
                            patch_strategies: Vec::new(),
                            merge_key: None,
                        },
                    );
                }
                a.map = Some(MapType {
                    fields,
                    elem: m.get("elementType").map(|e| type_ref(e, names, atoms)),
                    relationship: relationship(m.get("elementRelationship"))
                        .unwrap_or(Relationship::Separable),
                });
            }
            a
        }
        for t in &types {
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
            if name == "__untyped_atomic_" || name == "__untyped_deduced_" {
                continue;
            }
            let mut a = atom(t, &names, &mut atoms);
            a.name = Some(name.to_string());
            atoms[names[name]] = a;
        }
        Schema {
            root: TypeRef::of(names.get(root).copied().unwrap_or(DEDUCED)),
            atoms,
        }
    }

    pub fn root(&self) -> TypeRef {
        self.root
    }

    pub fn atom(&self, t: TypeRef) -> &Atom {
        &self.atoms[t.node]
    }

    /// The map part of a type and its relationship (a field's override applied).
    pub fn map_of(&self, t: TypeRef) -> Option<(&MapType, Relationship)> {
        let m = self.atom(t).map.as_ref()?;
        Some((m, t.map_relationship.unwrap_or(m.relationship)))
    }

    pub fn list_of(&self, t: TypeRef) -> Option<&ListType> {
        self.atom(t).list.as_ref()
    }

    /// The type of key `name` of a map type: the declared field, else the element type.
    pub fn map_field_type(&self, m: &MapType, name: &str) -> Option<TypeRef> {
        m.fields.get(name).map(|f| f.ty).or(m.elem)
    }

    /// The type of field `name` under `t`, deduced when the schema does not say.
    pub fn field_type(&self, t: TypeRef, name: &str) -> TypeRef {
        self.map_of(t)
            .and_then(|(m, _)| self.map_field_type(m, name))
            .unwrap_or(TypeRef::of(DEDUCED))
    }

    /// The declared field `name` under `t`, for its patch strategy and merge key.
    pub fn field(&self, t: TypeRef, name: &str) -> Option<&Field> {
        self.map_of(t).and_then(|(m, _)| m.fields.get(name))
    }

    /// How to treat `value` (absent or null counts as nothing in particular) of type `t`.
    pub fn shape(&self, t: TypeRef, value: Option<&Value>) -> Option<Shape<'_>> {
        let atom = self.atom(t);
        let map = || self.map_of(t).map(|(m, r)| Shape::Map(m, r));
        let list = || atom.list.as_ref().map(Shape::List);
        let scalar = || atom.scalar.then_some(Shape::Scalar);
        let deduced = match value {
            Some(Value::Object(_)) => map(),
            Some(Value::Array(_)) => list(),
            Some(Value::String(_) | Value::Number(_) | Value::Bool(_)) => scalar(),
            _ => None,
        };
        deduced.or_else(map).or_else(scalar).or_else(list)
    }

    /// Whether `t` is a struct with declared fields (not a free-form map).
    pub fn is_struct(&self, t: TypeRef) -> bool {
        self.map_of(t).is_some_and(|(m, _)| !m.fields.is_empty())
    }
}

struct Builder<'a> {
    defs: &'a Map<String, Value>,
    atoms: Vec<Atom>,
    names: HashMap<String, NodeId>,
    queue: Vec<(String, NodeId)>,
}

fn extension<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    s.get(name)
}

fn map_relationship(s: &Value) -> Option<Relationship> {
    match extension(s, "x-kubernetes-map-type").and_then(Value::as_str) {
        Some("atomic") => Some(Relationship::Atomic),
        Some("granular") => Some(Relationship::Separable),
        _ => None,
    }
}

fn list_relationship(s: &Value) -> (Relationship, Vec<String>) {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    if let Some(t) = extension(s, "x-kubernetes-list-type").and_then(Value::as_str) {
        return match t {
            "set" => (Relationship::Associative, Vec::new()),
            "map" => (
                Relationship::Associative,
                strings(extension(s, "x-kubernetes-list-map-keys")),
            ),
            _ => (Relationship::Atomic, Vec::new()),
        };
    }
    match extension(s, "x-kubernetes-patch-strategy").and_then(Value::as_str) {
        Some("merge" | "merge,retainKeys") => {
            match extension(s, "x-kubernetes-patch-merge-key").and_then(Value::as_str) {
                Some(key) => (Relationship::Associative, vec![key.to_string()]),
                None => (Relationship::Associative, Vec::new()),
            }
        }
        _ => (Relationship::Atomic, Vec::new()),
    }
}

fn type_name(s: &Value) -> &str {
    match s.get("type") {
        Some(Value::String(t)) => t,
        // A list of types: the first that is not "null".
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or(""),
        _ => "",
    }
}

fn ref_of(s: &Value) -> Option<&str> {
    let direct = s.get("$ref").and_then(Value::as_str);
    let via_all_of = || match s.get("allOf").and_then(Value::as_array) {
        Some(all) if all.len() == 1 => all[0].get("$ref").and_then(Value::as_str),
        _ => None,
    };
    let r = direct.or_else(via_all_of)?;
    Some(
        r.strip_prefix(REF_PREFIX)
            .unwrap_or_else(|| r.rsplit('/').next().unwrap_or(r)),
    )
}

impl Builder<'_> {
    fn push(&mut self, atom: Atom) -> NodeId {
        self.atoms.push(atom);
        self.atoms.len() - 1
    }

    fn named(&mut self, name: &str) -> NodeId {
        if let Some(id) = self.names.get(name) {
            return *id;
        }
        if !self.defs.contains_key(name) {
            return DEDUCED;
        }
        let id = self.push(Atom::default());
        self.names.insert(name.to_string(), id);
        self.queue.push((name.to_string(), id));
        id
    }

    fn parse_named(&mut self, name: &str, id: NodeId) {
        let mut atom = match name {
            QUANTITY => Atom {
                scalar: true,
                ..Default::default()
            },
            RAW_EXTENSION => self.atoms[UNTYPED].clone(),
            _ => {
                let defs = self.defs;
                let s = &defs[name];
                let mut atom = self.parse(s, false);
                if let Some(m) = atom.map.as_mut() {
                    for (def, field, value) in KEY_DEFAULTS {
                        if *def == name
                            && let Some(f) = m.fields.get_mut(*field)
                        {
                            f.default
                                .get_or_insert_with(|| Value::String(value.to_string()));
                        }
                    }
                }
                atom
            }
        };
        atom.name = Some(name.to_string());
        self.atoms[id] = atom;
    }

    fn parse(&mut self, s: &Value, preserve: bool) -> Atom {
        let preserve =
            preserve || s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        match type_name(s) {
            "" => Atom {
                name: None,
                scalar: true,
                list: Some(self.parse_list(s, preserve)),
                map: Some(self.parse_object(s, preserve)),
            },
            "object" => Atom {
                map: Some(self.parse_object(s, preserve)),
                ..Default::default()
            },
            "array" => Atom {
                list: Some(self.parse_list(s, preserve)),
                ..Default::default()
            },
            _ => Atom {
                scalar: true,
                ..Default::default()
            },
        }
    }

    fn make_ref(&mut self, s: &Value, preserve: bool) -> TypeRef {
        if let Some(name) = ref_of(s) {
            return TypeRef {
                node: self.named(name),
                map_relationship: map_relationship(s),
            };
        }
        let atom = self.parse(s, preserve);
        TypeRef::of(self.push(atom))
    }

    fn parse_object(&mut self, s: &Value, preserve: bool) -> MapType {
        let mut fields = BTreeMap::new();
        let props = s.get("properties").and_then(Value::as_object);
        for (name, member) in props.into_iter().flatten() {
            let ty = self.make_ref(member, preserve);
            let field = Field {
                ty,
                default: member.get("default").cloned(),
                patch_strategies: extension(member, "x-kubernetes-patch-strategy")
                    .and_then(Value::as_str)
                    .map(|s| s.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
                merge_key: extension(member, "x-kubernetes-patch-merge-key")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            };
            fields.insert(name.clone(), field);
        }
        let elem = match s.get("additionalProperties") {
            None => (preserve || fields.is_empty()).then_some(TypeRef::of(DEDUCED)),
            Some(Value::Bool(true)) => Some(TypeRef::of(DEDUCED)),
            Some(Value::Bool(false)) => None,
            Some(schema) => Some(self.make_ref(schema, preserve)),
        };
        MapType {
            fields,
            elem,
            relationship: map_relationship(s).unwrap_or(Relationship::Separable),
        }
    }

    fn parse_list(&mut self, s: &Value, preserve: bool) -> ListType {
        let (relationship, keys) = list_relationship(s);
        let elem = match s.get("items") {
            Some(items @ Value::Object(_)) => self.make_ref(items, preserve),
            _ => TypeRef::of(UNTYPED),
        };
        ListType {
            elem,
            relationship,
            keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_upstream_extensions() {
        let defs = json!({
            "Pod": {"type": "object", "properties": {
                "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}]},
                "spec": {"allOf": [{"$ref": "#/components/schemas/PodSpec"}]},
            }},
            "Meta": {"type": "object", "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"},
                    "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"},
            }},
            "PodSpec": {"type": "object", "properties": {
                "containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"},
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                    "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"},
                    "x-kubernetes-map-type": "atomic"},
                "tolerations": {"type": "array", "items": {"type": "object"}},
            }},
            "Container": {"type": "object", "properties": {"name": {"type": "string"}}},
        });
        let s = Schema::from_definitions(defs.as_object().unwrap(), "Pod");
        let spec = s.field_type(s.root(), "spec");
        let containers = s.field(spec, "containers").unwrap();
        assert_eq!(containers.merge_key.as_deref(), Some("name"));
        assert_eq!(containers.patch_strategies, vec!["merge"]);
        let list = s.list_of(containers.ty).unwrap();
        assert_eq!(list.relationship, Relationship::Associative);
        assert_eq!(list.keys, vec!["name"]);
        assert_eq!(s.atom(list.elem).name.as_deref(), Some("Container"));
        let ns = s.field_type(spec, "nodeSelector");
        assert_eq!(s.map_of(ns).unwrap().1, Relationship::Atomic);
        let tol = s.list_of(s.field_type(spec, "tolerations")).unwrap();
        assert_eq!(tol.relationship, Relationship::Atomic);
        let meta = s.field_type(s.root(), "metadata");
        let fin = s.list_of(s.field_type(meta, "finalizers")).unwrap();
        assert_eq!(fin.relationship, Relationship::Associative);
        assert!(fin.keys.is_empty());
        // Unknown fields are deduced.
        assert_eq!(s.field_type(spec, "nope").node, DEDUCED);
    }
}
