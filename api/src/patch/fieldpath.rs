//! Field paths and sets of field paths, as structured-merge-diff's `fieldpath` package has
//! them: what `metadata.managedFields[].fieldsV1` encodes (`f:` for a field, `k:` for an item
//! of a list keyed by fields, `v:` for an item of a set, `.` for "this node itself").

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::schema::{Schema, TypeRef};

/// One step of a path into an object.
#[derive(Clone, Debug)]
pub enum PathElement {
    /// A field of a struct or a key of a map.
    Field(String),
    /// An item of an associative list, by the values of its key fields (sorted by name).
    Key(Vec<(String, Value)>),
    /// An item of a set (an associative list of scalars), by its value.
    Value(Value),
    /// An item of a list by position (upstream keeps it for completeness; unused by kinds).
    Index(usize),
}

impl PathElement {
    pub fn field(name: &str) -> Self {
        PathElement::Field(name.to_string())
    }

    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The `fieldsV1` key of this element: `f:name`, `k:{"name":"c"}`, `v:"x"`, `i:3`.
    pub fn to_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut out = String::from("k:{");
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(name.clone()).to_string());
                    out.push(':');
                    out.push_str(&value.to_string());
                }
                out.push('}');
                out
            }
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `fieldsV1` key; `Ok(None)` for element types this version does not know.
    pub fn from_key(key: &str) -> Result<Option<PathElement>, String> {
        let bytes = key.as_bytes();
        if bytes.len() < 2 {
            return Err("key must be 2 characters long:".into());
        }
        if bytes[1] != b':' {
            return Err(format!("missing colon: {key}"));
        }
        let rest = &key[2..];
        match bytes[0] {
            b'f' => Ok(Some(PathElement::Field(rest.to_string()))),
            b'v' => serde_json::from_str(rest)
                .map(|v| Some(PathElement::Value(v)))
                .map_err(|e| e.to_string()),
            b'k' => {
                let map: Map<String, Value> =
                    serde_json::from_str(rest).map_err(|e| e.to_string())?;
                let mut fields: Vec<(String, Value)> = map.into_iter().collect();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(Some(PathElement::Key(fields)))
            }
            b'i' => rest
                .parse()
                .map(|i| Some(PathElement::Index(i)))
                .map_err(|e: std::num::ParseIntError| e.to_string()),
            _ => Ok(None),
        }
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((an, av), (bn, bv)) in a.iter().zip(b) {
                    let c = an.cmp(bn).then_with(|| compare_values(av, bv));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// How upstream prints a value in a path: strings quoted, numbers and booleans bare.
pub fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(value_to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", value_to_string(v)))
            .collect::<Vec<_>>()
            .join(""),
    }
}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", value_to_string(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", value_to_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A path from the root of an object.
pub type Path = Vec<PathElement>;

/// Prints a path as upstream does: `.spec.containers[name="c"].image`.
pub fn path_string(path: &[PathElement]) -> String {
    path.iter().map(|pe| pe.to_string()).collect()
}

fn number_order(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Upstream's total order of values: numbers, strings, booleans, lists, maps, null.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x.cmp(&y)
            } else {
                number_order(a)
                    .partial_cmp(&number_order(b))
                    .unwrap_or(Ordering::Equal)
            }
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let c = compare_values(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            for ((lk, lv), (rk, rv)) in x.iter().zip(y) {
                let c = lk.cmp(rk).then_with(|| compare_values(lv, rv));
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => rank(a).cmp(&rank(b)),
    }
}

/// A set of paths, stored as a tree: `members` end here, `children` continue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn new() -> Self {
        Set::default()
    }

    /// A set of the given paths.
    pub fn from_paths<'a>(paths: impl IntoIterator<Item = &'a [PathElement]>) -> Self {
        let mut s = Set::new();
        for p in paths {
            s.insert(p);
        }
        s
    }

    /// Adds a path; the empty path (the whole object) is not tracked, as upstream.
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(Set::is_empty)
    }

    pub fn has_member(&self, pe: &PathElement) -> bool {
        self.members.contains(pe)
    }

    /// The paths under `pe`, relative to it.
    pub fn with_prefix(&self, pe: &PathElement) -> Option<&Set> {
        self.children.get(pe).filter(|c| !c.is_empty())
    }

    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    pub fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let i = child.intersection(theirs);
                if !i.is_empty() {
                    children.insert(pe.clone(), i);
                }
            }
        }
        Set { members, children }
    }

    /// Paths of `self` not in `other`; a parent minus its child stays, a child minus its
    /// parent stays.
    pub fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let d = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !d.is_empty() {
                children.insert(pe.clone(), d);
            }
        }
        Set { members, children }
    }

    /// Like [`Set::difference`], but a member of `other` also removes everything below it.
    pub fn recursive_difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let d = match other.children.get(pe) {
                Some(theirs) => child.recursive_difference(theirs),
                None => child.clone(),
            };
            if !d.is_empty() {
                children.insert(pe.clone(), d);
            }
        }
        Set { members, children }
    }

    /// Every path, members of a node before its children, in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for m in &self.members {
            let mut p = prefix.clone();
            p.push(m.clone());
            out.push(p);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Adds as members the struct fields (not map keys) that have children, as upstream does
    /// before pruning, so that removing a field's children can remove the field too.
    pub fn ensure_named_fields_are_members(&self, schema: &Schema, t: TypeRef) -> Set {
        let mut members = self.members.clone();
        let map = schema.map_of(t);
        let list = schema.list_of(t);
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let mut child_type = None;
            match pe {
                PathElement::Field(name) => {
                    if let Some((m, _)) = map {
                        if m.fields.contains_key(name) {
                            members.insert(pe.clone());
                        }
                        child_type = schema.map_field_type(m, name);
                    }
                }
                PathElement::Key(_) => child_type = list.map(|l| l.elem),
                _ => {}
            }
            let child = match child_type {
                Some(ct) => child.ensure_named_fields_are_members(schema, ct),
                None => child.clone(),
            };
            children.insert(pe.clone(), child);
        }
        Set { members, children }
    }

    /// The `fieldsV1` JSON of this set.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1(false))
    }

    fn fields_v1(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self && !(self.members.is_empty() && self.children.is_empty()) {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        for m in &self.members {
            if !self.children.contains_key(m) {
                out.insert(m.to_key(), Value::Object(Map::new()));
            }
        }
        for (pe, child) in &self.children {
            let is_member = self.members.contains(pe);
            out.insert(pe.to_key(), Value::Object(child.fields_v1(is_member)));
        }
        out
    }

    /// Parses `fieldsV1` JSON.
    pub fn from_fields_v1(v: &Value) -> Result<Set, String> {
        let Value::Object(m) = v else {
            return Err("fieldsV1 must be an object".into());
        };
        let (set, _) = Self::read(m)?;
        Ok(set.unwrap_or_default())
    }

    /// The children of an object node, and whether the node itself is a member.
    fn read(m: &Map<String, Value>) -> Result<(Option<Set>, bool), String> {
        let mut children: Option<Set> = None;
        let mut is_member = false;
        for (key, value) in m {
            if key == "." {
                is_member = true;
                continue;
            }
            let Some(pe) = PathElement::from_key(key)? else {
                continue;
            };
            let Value::Object(inner) = value else {
                return Err(format!("expected an object at {key}"));
            };
            let (grandchildren, child_member) = Self::read(inner)?;
            let set = children.get_or_insert_with(Set::new);
            if child_member {
                set.members.insert(pe.clone());
            }
            if let Some(g) = grandchildren {
                set.children.insert(pe, g);
            }
        }
        if children.is_none() {
            is_member = true;
        }
        Ok((children, is_member))
    }
}

impl fmt::Display for Set {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in self.paths() {
            writeln!(f, "{}", path_string(&p))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(name: &str) -> PathElement {
        PathElement::field(name)
    }

    #[test]
    fn fields_v1_round_trip() {
        let key = PathElement::Key(vec![("name".into(), json!("c"))]);
        let mut s = Set::new();
        s.insert(&[f("metadata"), f("labels"), f("app")]);
        s.insert(&[f("spec"), f("containers"), key.clone()]);
        s.insert(&[f("spec"), f("containers"), key.clone(), f("image")]);
        s.insert(&[f("spec"), f("containers"), key.clone(), f("name")]);
        let v = s.to_fields_v1();
        assert_eq!(
            v,
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}
            })
        );
        assert_eq!(Set::from_fields_v1(&v).unwrap(), s);
        assert_eq!(
            path_string(&[f("spec"), f("containers"), key, f("image")]),
            ".spec.containers[name=\"c\"].image"
        );
    }

    #[test]
    fn set_operations() {
        let mut a = Set::new();
        a.insert(&[f("spec"), f("replicas")]);
        a.insert(&[f("spec"), f("paused")]);
        let mut b = Set::new();
        b.insert(&[f("spec"), f("replicas")]);
        b.insert(&[f("status")]);
        assert_eq!(
            a.intersection(&b).paths(),
            vec![vec![f("spec"), f("replicas")]]
        );
        assert_eq!(a.difference(&b).paths(), vec![vec![f("spec"), f("paused")]]);
        assert_eq!(a.union(&b).paths().len(), 3);
        let mut spec = Set::new();
        spec.insert(&[f("spec")]);
        assert_eq!(a.difference(&spec), a);
        assert!(a.recursive_difference(&spec).is_empty());
        let ports = PathElement::Key(vec![
            ("containerPort".into(), json!(80)),
            ("protocol".into(), json!("TCP")),
        ]);
        assert_eq!(
            ports.to_key(),
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}"
        );
        assert_eq!(ports.to_string(), "[containerPort=80,protocol=\"TCP\"]");
        assert_eq!(PathElement::from_key(&ports.to_key()).unwrap(), Some(ports));
    }
}
