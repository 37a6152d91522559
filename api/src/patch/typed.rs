//! Operations on objects read through their [`Schema`], as structured-merge-diff's `typed`
//! package does them: the set of fields an object sets, what changed between two versions,
//! merging an applied configuration into an object, and removing a set of fields.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::fieldpath::{Path, PathElement, Set, path_string};
use super::schema::{DEDUCED, ListType, Relationship, Schema, Shape, TypeRef};

/// What changed from one version of an object to the next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    pub removed: Set,
    pub modified: Set,
    pub added: Set,
}

impl Comparison {
    pub fn is_same(&self) -> bool {
        self.removed.is_empty() && self.modified.is_empty() && self.added.is_empty()
    }

    /// Drops paths under `exclude` (fields an operation may not change).
    pub fn exclude(&mut self, exclude: &Set) {
        if exclude.is_empty() {
            return;
        }
        self.removed = self.removed.recursive_difference(exclude);
        self.modified = self.modified.recursive_difference(exclude);
        self.added = self.added.recursive_difference(exclude);
    }
}

/// Equality as upstream's: integers and floats compare by value.
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x.is_f64() || y.is_f64() {
                x.as_f64() == y.as_f64()
            } else {
                x == y
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(l, r)| values_equal(l, r))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| values_equal(v, w)))
        }
        _ => a == b,
    }
}

static NULL: Value = Value::Null;

fn as_list(v: Option<&Value>) -> Option<&Vec<Value>> {
    v.and_then(Value::as_array)
}

fn as_map(v: Option<&Value>) -> Option<&Map<String, Value>> {
    v.and_then(Value::as_object)
}

/// The path element of a list item: its key fields, or its value for a set.
pub fn list_item_element(
    schema: &Schema,
    list: &ListType,
    item: &Value,
) -> Result<PathElement, String> {
    if list.relationship != Relationship::Associative {
        return Err("invalid indexing of non-associative list".into());
    }
    if list.keys.is_empty() {
        return match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => {
                Err("associative list without keys has an element that's an explicit null".into())
            }
            v => Ok(PathElement::Value(v.clone())),
        };
    }
    let m = match item {
        Value::Null => return Err("associative list with keys may not have a null element".into()),
        Value::Object(m) => m,
        _ => return Err("associative list with keys may not have non-map elements".into()),
    };
    let mut fields = Vec::new();
    for key in &list.keys {
        if let Some(v) = m.get(key) {
            fields.push((key.clone(), v.clone()));
        } else if let Some(default) = schema.field(list.elem, key).and_then(|f| f.default.clone()) {
            fields.push((key.clone(), default));
        }
    }
    if fields.is_empty() {
        return Err(format!(
            "associative list with keys has an element that omits all key fields {:?} (and doesn't have default values for any key fields)",
            list.keys
        ));
    }
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(PathElement::Key(fields))
}

/// Typed operations over one schema.
#[derive(Clone, Copy)]
pub struct Typed<'a> {
    pub schema: &'a Schema,
}

/// The shape to walk two values with; `None` when they disagree (treated as one leaf).
fn pair_shape<'a>(
    schema: &'a Schema,
    t: TypeRef,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
) -> Option<Shape<'a>> {
    let l = lhs.map(|v| schema.shape(t, Some(v)));
    let r = rhs.map(|v| schema.shape(t, Some(v)));
    match (l, r) {
        (Some(l), None) => l,
        (None, Some(r)) => r,
        (Some(l), Some(r)) => {
            let same = matches!(
                (&l, &r),
                (Some(Shape::Scalar), Some(Shape::Scalar))
                    | (Some(Shape::List(_)), Some(Shape::List(_)))
                    | (Some(Shape::Map(..)), Some(Shape::Map(..)))
            );
            if same { r } else { None }
        }
        (None, None) => None,
    }
}

impl<'a> Typed<'a> {
    pub fn new(schema: &'a Schema) -> Self {
        Typed { schema }
    }

    fn root(&self) -> TypeRef {
        self.schema.root()
    }

    /// Problems that make `value` not an object of this schema (unknown fields, lists whose
    /// items lack keys, duplicate keys unless `allow_duplicates`), worded as upstream.
    pub fn validate(&self, value: &Value, allow_duplicates: bool) -> Vec<String> {
        let mut errs = Vec::new();
        self.validate_at(
            self.root(),
            value,
            allow_duplicates,
            &mut Vec::new(),
            &mut errs,
        );
        errs
    }

    fn validate_at(
        &self,
        t: TypeRef,
        v: &Value,
        allow_duplicates: bool,
        path: &mut Vec<String>,
        errs: &mut Vec<String>,
    ) {
        let err = |path: &[String], msg: String| {
            let p: String = path.concat();
            if p.is_empty() {
                msg
            } else {
                format!("{p}: {msg}")
            }
        };
        match self.schema.shape(t, Some(v)) {
            Some(Shape::Scalar) | None => {}
            Some(Shape::List(l)) => {
                let items = match v {
                    Value::Null => return,
                    Value::Array(items) => items,
                    other => {
                        errs.push(err(path, format!("expected list, got {other}")));
                        return;
                    }
                };
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    let pe = if l.relationship != Relationship::Associative {
                        PathElement::Index(i)
                    } else {
                        match list_item_element(self.schema, l, item) {
                            Ok(pe) => pe,
                            Err(e) => {
                                errs.push(err(path, format!("element {i}: {e}")));
                                return;
                            }
                        }
                    };
                    if l.relationship == Relationship::Associative
                        && !seen.insert(pe.clone())
                        && !allow_duplicates
                    {
                        errs.push(err(path, format!("duplicate entries for key {pe}")));
                    }
                    path.push(pe.to_string());
                    self.validate_at(l.elem, item, allow_duplicates, path, errs);
                    path.pop();
                }
            }
            Some(Shape::Map(m, _)) => {
                let obj = match v {
                    Value::Null => return,
                    Value::Object(obj) => obj,
                    other => {
                        errs.push(err(path, format!("expected map, got {other}")));
                        return;
                    }
                };
                for (k, val) in obj {
                    let pe = PathElement::Field(k.clone());
                    let Some(ft) = self.schema.map_field_type(m, k) else {
                        path.push(pe.to_string());
                        errs.push(err(path, "field not declared in schema".into()));
                        path.pop();
                        return;
                    };
                    path.push(pe.to_string());
                    self.validate_at(ft, val, allow_duplicates, path, errs);
                    path.pop();
                }
            }
        }
    }

    /// The fields `value` sets.
    pub fn to_field_set(&self, value: &Value) -> Set {
        let mut set = Set::new();
        self.collect_set(self.root(), value, &mut Vec::new(), &mut set);
        set
    }

    fn collect_set(&self, t: TypeRef, v: &Value, path: &mut Path, set: &mut Set) {
        match self.schema.shape(t, Some(v)) {
            None => {}
            Some(Shape::Scalar) => set.insert(path),
            Some(Shape::List(l)) => {
                if l.relationship == Relationship::Atomic {
                    set.insert(path);
                    return;
                }
                let Value::Array(items) = v else { return };
                let pes: Vec<Option<PathElement>> = items
                    .iter()
                    .map(|i| list_item_element(self.schema, l, i).ok())
                    .collect();
                let mut seen = BTreeSet::new();
                let mut duplicates = BTreeSet::new();
                for pe in pes.iter().flatten() {
                    if !seen.insert(pe.clone()) && duplicates.insert(pe.clone()) {
                        path.push(pe.clone());
                        set.insert(path);
                        path.pop();
                    }
                }
                for (item, pe) in items.iter().zip(pes) {
                    let Some(pe) = pe else { continue };
                    if duplicates.contains(&pe) {
                        continue;
                    }
                    path.push(pe);
                    self.collect_set(l.elem, item, path, set);
                    set.insert(path);
                    path.pop();
                }
            }
            Some(Shape::Map(m, rel)) => {
                if rel == Relationship::Atomic {
                    set.insert(path);
                    return;
                }
                let Value::Object(obj) = v else { return };
                for (k, val) in obj {
                    let ft = self
                        .schema
                        .map_field_type(m, k)
                        .unwrap_or(TypeRef::of(DEDUCED));
                    path.push(PathElement::Field(k.clone()));
                    self.collect_set(ft, val, path, set);
                    let empty_map = val.as_object().is_some_and(Map::is_empty);
                    if val.is_null() || empty_map || !m.fields.contains_key(k) {
                        set.insert(path);
                    }
                    path.pop();
                }
            }
        }
    }

    /// What changed from `lhs` to `rhs` (`None` is an object that does not exist).
    pub fn compare(&self, lhs: Option<&Value>, rhs: Option<&Value>) -> Comparison {
        let mut c = Comparison::default();
        if lhs.is_some() || rhs.is_some() {
            self.compare_at(self.root(), lhs, rhs, &mut Vec::new(), &mut c);
        }
        c
    }

    fn compare_at(
        &self,
        t: TypeRef,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        path: &mut Path,
        c: &mut Comparison,
    ) {
        let leaf = |path: &Path, c: &mut Comparison| match (lhs, rhs) {
            (None, _) => c.added.insert(path),
            (_, None) => c.removed.insert(path),
            (Some(l), Some(r)) if !values_equal(l, r) => c.modified.insert(path),
            _ => {}
        };
        let mut in_leaf = false;
        match pair_shape(self.schema, t, lhs, rhs) {
            None | Some(Shape::Scalar) => {
                leaf(path, c);
                in_leaf = true;
            }
            Some(Shape::List(l)) => {
                let (ll, rl) = (as_list(lhs), as_list(rhs));
                let empty = ll.is_none_or(Vec::is_empty) && rl.is_none_or(Vec::is_empty);
                if l.relationship == Relationship::Atomic || empty {
                    leaf(path, c);
                    in_leaf = true;
                } else {
                    self.compare_list_items(l, ll, rl, path, c);
                }
            }
            Some(Shape::Map(m, rel)) => {
                let (lm, rm) = (as_map(lhs), as_map(rhs));
                let empty = lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty);
                if rel == Relationship::Atomic || empty {
                    leaf(path, c);
                    in_leaf = true;
                } else {
                    let keys: BTreeSet<&String> =
                        lm.into_iter().chain(rm).flat_map(|m| m.keys()).collect();
                    for k in keys {
                        let ft = self
                            .schema
                            .map_field_type(m, k)
                            .unwrap_or(TypeRef::of(DEDUCED));
                        path.push(PathElement::Field(k.clone()));
                        self.compare_at(
                            ft,
                            lm.and_then(|m| m.get(k)),
                            rm.and_then(|m| m.get(k)),
                            path,
                            c,
                        );
                        path.pop();
                    }
                }
            }
        }
        if !in_leaf {
            if lhs.is_none() {
                c.added.insert(path);
            } else if rhs.is_none() {
                c.removed.insert(path);
            }
        }
    }

    fn compare_list_items(
        &self,
        l: &ListType,
        lhs: Option<&Vec<Value>>,
        rhs: Option<&Vec<Value>>,
        path: &mut Path,
        c: &mut Comparison,
    ) {
        let mut order: Vec<PathElement> = Vec::new();
        let mut lvalues: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
        let mut rvalues: BTreeMap<PathElement, Vec<&Value>> = BTreeMap::new();
        for item in lhs.into_iter().flatten() {
            let Ok(pe) = list_item_element(self.schema, l, item) else {
                continue;
            };
            let entry = lvalues.entry(pe.clone()).or_default();
            if entry.is_empty() {
                order.push(pe);
            }
            entry.push(item);
        }
        for item in rhs.into_iter().flatten() {
            let Ok(pe) = list_item_element(self.schema, l, item) else {
                continue;
            };
            let entry = rvalues.entry(pe.clone()).or_default();
            if entry.is_empty() && !lvalues.contains_key(&pe) {
                order.push(pe);
            }
            entry.push(item);
        }
        for pe in order {
            let ll = lvalues.get(&pe).map(Vec::as_slice).unwrap_or_default();
            let rl = rvalues.get(&pe).map(Vec::as_slice).unwrap_or_default();
            path.push(pe);
            match (ll.len(), rl.len()) {
                (0, 0) => {}
                (0 | 1, 0 | 1) => {
                    self.compare_at(l.elem, ll.first().copied(), rl.first().copied(), path, c)
                }
                (a, b) if a >= 2 && b >= 2 => {
                    let equal = a == b && ll.iter().zip(rl).all(|(x, y)| values_equal(x, y));
                    if !equal {
                        c.modified.insert(path);
                    }
                }
                (a, _) if a >= 2 => {
                    if let Some(r) = rl.first() {
                        self.compare_at(l.elem, None, Some(r), path, c);
                    }
                    c.removed.insert(path);
                }
                _ => {
                    if let Some(lv) = ll.first() {
                        self.compare_at(l.elem, Some(lv), None, path, c);
                    }
                    c.added.insert(path);
                }
            }
            path.pop();
        }
    }

    /// `config` merged into `live`: the config's values win, lists merge by key.
    pub fn merge(&self, live: &Value, config: &Value) -> Value {
        self.merge_at(self.root(), Some(live), Some(config))
            .unwrap_or(Value::Object(Map::new()))
    }

    fn merge_at(&self, t: TypeRef, lhs: Option<&Value>, rhs: Option<&Value>) -> Option<Value> {
        let leaf = || rhs.or(lhs).cloned();
        match pair_shape(self.schema, t, lhs, rhs) {
            None | Some(Shape::Scalar) => leaf(),
            Some(Shape::List(l)) => {
                let (ll, rl) = (as_list(lhs), as_list(rhs));
                let empty = ll.is_none_or(Vec::is_empty) && rl.is_none_or(Vec::is_empty);
                if l.relationship == Relationship::Atomic || empty {
                    return leaf();
                }
                let out = self.merge_list_items(
                    l,
                    ll.map(Vec::as_slice).unwrap_or_default(),
                    rl.map(Vec::as_slice).unwrap_or_default(),
                );
                (!out.is_empty()).then_some(Value::Array(out))
            }
            Some(Shape::Map(m, rel)) => {
                let (lm, rm) = (as_map(lhs), as_map(rhs));
                let empty = lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty);
                if rel == Relationship::Atomic || empty {
                    return leaf();
                }
                let keys: BTreeSet<&String> =
                    lm.into_iter().chain(rm).flat_map(|m| m.keys()).collect();
                let mut out = Map::new();
                for k in keys {
                    let ft = self
                        .schema
                        .map_field_type(m, k)
                        .unwrap_or(TypeRef::of(DEDUCED));
                    if let Some(v) =
                        self.merge_at(ft, lm.and_then(|m| m.get(k)), rm.and_then(|m| m.get(k)))
                    {
                        out.insert(k.clone(), v);
                    }
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
        }
    }

    /// Upstream's ordering of merged list items: live items keep their places, applied
    /// items follow the configuration's order around the items both share.
    fn merge_list_items(&self, l: &ListType, lhs: &[Value], rhs: &[Value]) -> Vec<Value> {
        let (rpes, _, robs) = index_items(self.schema, l, rhs, false);
        let (lpes, lvals, lobs) = index_items(self.schema, l, lhs, true);
        let shared: Vec<&PathElement> = rpes.iter().filter(|pe| lobs.contains_key(pe)).collect();
        let mut shared = shared.into_iter();
        let mut next_shared = shared.next();
        let mut merged_rhs: BTreeSet<PathElement> = BTreeSet::new();
        let mut out = Vec::new();
        let (mut li, mut ri) = (0, 0);
        while li < lpes.len() || ri < rpes.len() {
            if li < lpes.len() && ri < rpes.len() {
                let pe = &lpes[li];
                if *pe == rpes[ri] {
                    merged_rhs.insert(pe.clone());
                    if let Some(v) =
                        self.merge_at(l.elem, lobs.get(pe).copied(), robs.get(pe).copied())
                    {
                        out.push(v);
                    }
                    li += 1;
                    ri += 1;
                    next_shared = shared.next();
                    continue;
                }
                if robs.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                    li += 1;
                    continue;
                }
            }
            if li < lpes.len() {
                let pe = &lpes[li];
                if !robs.contains_key(pe) {
                    if let Some(v) = self.merge_at(l.elem, Some(lvals[li]), None) {
                        out.push(v);
                    }
                    li += 1;
                    continue;
                } else if merged_rhs.contains(pe) {
                    li += 1;
                }
            }
            if ri < rpes.len() {
                let pe = &rpes[ri];
                merged_rhs.insert(pe.clone());
                if let Some(v) = self.merge_at(l.elem, lobs.get(pe).copied(), robs.get(pe).copied())
                {
                    out.push(v);
                }
                ri += 1;
                if next_shared == Some(pe) {
                    next_shared = shared.next();
                }
            }
        }
        out
    }

    /// `value` without the fields in `set` (emptied lists and maps become null, as upstream).
    pub fn remove_items(&self, value: &Value, set: &Set) -> Value {
        self.remove_at(self.root(), value, set)
    }

    fn remove_at(&self, t: TypeRef, v: &Value, set: &Set) -> Value {
        match self.schema.shape(t, Some(v)) {
            None | Some(Shape::Scalar) => v.clone(),
            Some(Shape::List(l)) => {
                let Value::Array(items) = v else {
                    return Value::Null;
                };
                if items.is_empty() || l.relationship == Relationship::Atomic {
                    return Value::Null;
                }
                let mut out = Vec::new();
                for item in items {
                    let Ok(pe) = list_item_element(self.schema, l, item) else {
                        out.push(item.clone());
                        continue;
                    };
                    if set.has_member(&pe) {
                        continue;
                    }
                    match set.with_prefix(&pe) {
                        Some(sub) => out.push(self.remove_at(l.elem, item, sub)),
                        None => out.push(item.clone()),
                    }
                }
                if out.is_empty() {
                    Value::Null
                } else {
                    Value::Array(out)
                }
            }
            Some(Shape::Map(m, rel)) => {
                let Value::Object(obj) = v else {
                    return Value::Null;
                };
                if obj.is_empty() || rel == Relationship::Atomic {
                    return Value::Null;
                }
                let mut out = Map::new();
                for (k, val) in obj {
                    let pe = PathElement::Field(k.clone());
                    if set.has_member(&pe) {
                        continue;
                    }
                    let ft = self
                        .schema
                        .map_field_type(m, k)
                        .unwrap_or(TypeRef::of(DEDUCED));
                    let val = match set.with_prefix(&pe) {
                        Some(sub) => self.remove_at(ft, val, sub),
                        None => val.clone(),
                    };
                    out.insert(k.clone(), val);
                }
                if out.is_empty() {
                    Value::Null
                } else {
                    Value::Object(out)
                }
            }
        }
    }

    /// [`Set::ensure_named_fields_are_members`] from the root.
    pub fn with_named_fields(&self, set: &Set) -> Set {
        set.ensure_named_fields_are_members(self.schema, self.root())
    }
}

/// The path elements of a list's items, the items, and each element's item (null for
/// duplicates when `dedup_null`, as upstream marks them).
type Indexed<'v> = (
    Vec<PathElement>,
    Vec<&'v Value>,
    BTreeMap<PathElement, &'v Value>,
);

fn index_items<'v>(
    schema: &Schema,
    l: &ListType,
    items: &'v [Value],
    dedup_null: bool,
) -> Indexed<'v> {
    let mut pes = Vec::new();
    let mut values = Vec::new();
    let mut observed: BTreeMap<PathElement, &'v Value> = BTreeMap::new();
    for item in items {
        let Ok(pe) = list_item_element(schema, l, item) else {
            continue;
        };
        if observed.contains_key(&pe) {
            if dedup_null {
                observed.insert(pe.clone(), &NULL);
            }
        } else {
            observed.insert(pe.clone(), item);
        }
        pes.push(pe);
        values.push(item);
    }
    (pes, values, observed)
}

/// Formats validation errors as upstream joins them.
pub fn join_errors(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => {
            let mut out = String::from("errors:");
            for e in many {
                out.push_str("\n  ");
                out.push_str(e);
            }
            out
        }
    }
}

/// A path as upstream prints it, for messages.
pub fn display(path: &[PathElement]) -> String {
    path_string(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        let defs = json!({
            "Obj": {"type": "object", "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                }},
                "spec": {"allOf": [{"$ref": "#/components/schemas/Spec"}]},
            }},
            "Spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                    "properties": {"app": {"type": "string"}}},
                "args": {"type": "array", "items": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"},
                    "x-kubernetes-list-type": "set"},
                "containers": {"type": "array", "items": {"$ref": "#/components/schemas/C"},
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
            }},
            "C": {"type": "object", "properties": {
                "name": {"type": "string"}, "image": {"type": "string"},
                "ports": {"type": "array", "items": {"$ref": "#/components/schemas/P"},
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["containerPort", "protocol"]},
            }},
            "P": {"type": "object", "properties": {
                "containerPort": {"type": "integer"},
                "protocol": {"type": "string", "default": "TCP"},
            }},
        });
        Schema::from_definitions(defs.as_object().unwrap(), "Obj")
    }

    #[test]
    fn field_sets() {
        let s = schema();
        let t = Typed::new(&s);
        let obj = json!({
            "metadata": {"labels": {"app": "x"}},
            "spec": {"replicas": 1, "selector": {"app": "x"}, "args": ["a"],
                "finalizers": ["f"],
                "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]},
        });
        let set = t.to_field_set(&obj);
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:args": {}, "f:replicas": {}, "f:selector": {},
                    "f:finalizers": {"v:\"f\"": {}},
                    "f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:name": {}, "f:image": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}}}}},
                },
            })
        );
        assert!(t.validate(&obj, false).is_empty());
        let bad = json!({"spec": {"nope": 1, "containers": [{"name": "a"}, {"name": "a"}]}});
        assert_eq!(
            t.validate(&bad, false),
            vec![
                ".spec.containers: duplicate entries for key [name=\"a\"]".to_string(),
                ".spec.nope: field not declared in schema".to_string()
            ]
        );
    }

    #[test]
    fn compare_and_merge() {
        let s = schema();
        let t = Typed::new(&s);
        let live = json!({"spec": {"replicas": 1, "containers": [
            {"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}});
        let new = json!({"spec": {"replicas": 2, "containers": [
            {"name": "b", "image": "2"}, {"name": "c", "image": "1"}]}});
        let c = t.compare(Some(&live), Some(&new));
        let paths = |s: &Set| s.paths().iter().map(|p| display(p)).collect::<Vec<_>>();
        assert_eq!(
            paths(&c.modified),
            vec![".spec.replicas", ".spec.containers[name=\"b\"].image"]
        );
        assert_eq!(
            paths(&c.added),
            vec![
                ".spec.containers[name=\"c\"]",
                ".spec.containers[name=\"c\"].image",
                ".spec.containers[name=\"c\"].name"
            ]
        );
        assert_eq!(
            paths(&c.removed),
            vec![
                ".spec.containers[name=\"a\"]",
                ".spec.containers[name=\"a\"].image",
                ".spec.containers[name=\"a\"].name"
            ]
        );
        let merged = t.merge(&live, &json!({"spec": {"containers": [{"name": "c", "image": "x"}, {"name": "a", "image": "y"}]}}));
        assert_eq!(
            merged,
            json!({"spec": {"replicas": 1, "containers": [
                {"name": "c", "image": "x"}, {"name": "a", "image": "y"}, {"name": "b", "image": "1"}]}})
        );
        let mut rm = Set::new();
        rm.insert(&[
            PathElement::field("spec"),
            PathElement::field("containers"),
            PathElement::Key(vec![("name".into(), json!("a"))]),
        ]);
        rm.insert(&[PathElement::field("spec"), PathElement::field("replicas")]);
        assert_eq!(
            t.remove_items(&live, &rm),
            json!({"spec": {"containers": [{"name": "b", "image": "1"}]}})
        );
    }
}
