//! Strategic merge patch (`application/strategic-merge-patch+json`), as upstream's
//! `k8s.io/apimachinery/pkg/util/strategicpatch` applies it on the server: maps merge
//! recursively and `null` deletes; lists whose field has patch strategy `merge` merge by their
//! merge key (lists of maps) or as sets (lists of scalars), other lists are replaced; and the
//! directives `$patch: replace|delete|merge`, `$retainKeys`, `$setElementOrder/<field>` and
//! `$deleteFromPrimitiveList/<field>`.
//!
//! The patch strategy and merge key of each field come from the kind's [`Schema`].

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::schema::{Schema, TypeRef};

const DIRECTIVE: &str = "$patch";
const DELETE: &str = "delete";
const REPLACE: &str = "replace";
const MERGE: &str = "merge";
const RETAIN_KEYS_STRATEGY: &str = "retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Why a strategic merge patch failed, by the status upstream answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmpError {
    /// 400: a malformed directive.
    BadRequest(String),
    /// 422: what the patch asks for is not possible.
    Invalid(String),
    /// Any other failure (upstream answers 500 with the message).
    Other(String),
}

impl std::fmt::Display for SmpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SmpError::BadRequest(m) | SmpError::Invalid(m) | SmpError::Other(m) => f.write_str(m),
        }
    }
}

fn bad_retain_keys() -> SmpError {
    SmpError::BadRequest("invalid patch format of retainKeys".into())
}

fn bad_set_element_order() -> SmpError {
    SmpError::BadRequest("invalid patch format of setElementOrder list".into())
}

fn bad_primitive_list() -> SmpError {
    SmpError::BadRequest("invalid patch format of primitive list".into())
}

/// Go's `%v` of a decoded JSON value, for messages that quote upstream's.
pub fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// Go's name of the type a decoded JSON value has.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "%!s(<nil>)",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn bad_arg_type(expected: &str, actual: &Value) -> SmpError {
    SmpError::Other(format!(
        "expected a {expected}, but received a {}",
        go_type(actual)
    ))
}

fn no_merge_key(m: &Map<String, Value>, key: &str) -> SmpError {
    SmpError::Other(format!(
        "map: {} does not contain declared merge key: {key}",
        go_fmt(&Value::Object(m.clone()))
    ))
}

/// The kinds of list elements upstream tells apart (`reflect.Type` of decoded JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ElemKind {
    Map,
    Slice,
    String,
    Int,
    Float,
    Bool,
    Nil,
}

fn elem_kind(v: &Value) -> ElemKind {
    match v {
        Value::Object(_) => ElemKind::Map,
        Value::Array(_) => ElemKind::Slice,
        Value::String(_) => ElemKind::String,
        Value::Number(n) if n.is_f64() => ElemKind::Float,
        Value::Number(_) => ElemKind::Int,
        Value::Bool(_) => ElemKind::Bool,
        Value::Null => ElemKind::Nil,
    }
}

/// Applies `patch` to `original`, both JSON objects, for an object of `schema`'s root type.
pub fn apply(schema: &Schema, original: Value, patch: Value) -> Result<Value, SmpError> {
    let original = match original {
        Value::Object(m) => m,
        _ => return Err(SmpError::BadRequest("invalid JSON document".into())),
    };
    let patch = match patch {
        Value::Object(m) => m,
        _ => return Err(SmpError::BadRequest("invalid JSON document".into())),
    };
    let m = Merger { schema };
    m.merge_map(schema.root(), original, patch)
        .map(Value::Object)
}

struct Merger<'a> {
    schema: &'a Schema,
}

/// A field's patch metadata: the type below it, its strategy (retainKeys set apart) and
/// its merge key.
struct Meta {
    ty: TypeRef,
    strategy: String,
    merge_key: String,
}

fn extract_key(s: &str, prefix: &str) -> Result<String, SmpError> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ => Err(match prefix {
            DELETE_FROM_PRIMITIVE_LIST => bad_primitive_list(),
            SET_ELEMENT_ORDER => bad_set_element_order(),
            _ => SmpError::Other(format!("fail to find unknown prefix {prefix:?} in {s}\n")),
        }),
    }
}

/// Upstream's split of `merge,retainKeys`: the strategy that is not `retainKeys`.
fn non_retain_strategy(strategies: &[String]) -> Result<String, SmpError> {
    match strategies {
        [] => Ok(String::new()),
        [one] if one == RETAIN_KEYS_STRATEGY => Ok(String::new()),
        [one] => Ok(one.clone()),
        [a, b] if a == RETAIN_KEYS_STRATEGY => Ok(b.clone()),
        [a, b] if b == RETAIN_KEYS_STRATEGY => Ok(a.clone()),
        other => Err(SmpError::Other(format!(
            "unexpected patch strategy: [{}]",
            other.join(" ")
        ))),
    }
}

/// A copy of `v` without list items and map values that are `$patch` directives; `None`
/// when `v` itself is one.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

fn same_kind(a: &Value, b: &Value) -> bool {
    matches!(
        (a, b),
        (Value::Object(_), Value::Object(_)) | (Value::Array(_), Value::Array(_))
    ) || (!a.is_object()
        && !a.is_array()
        && !b.is_object()
        && !b.is_array()
        && !a.is_null()
        && elem_kind(a) == elem_kind(b))
}

fn contains_directive(v: &Value) -> bool {
    v.as_object().is_some_and(|m| m.contains_key(DIRECTIVE))
}

/// The kind shared by every element of `lists`.
fn slice_element_kind(lists: &[&[Value]]) -> Result<ElemKind, SmpError> {
    let mut prev: Option<ElemKind> = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let k = elem_kind(v);
        match prev {
            None => {
                if k == ElemKind::Slice {
                    return Err(SmpError::Invalid("lists of lists are not supported".into()));
                }
                if k == ElemKind::Nil {
                    return Err(SmpError::Other(
                        "list elements may not be null in a merging list".into(),
                    ));
                }
                prev = Some(k);
            }
            Some(p) if p != k => {
                let all = Value::Array(lists.iter().map(|l| Value::Array(l.to_vec())).collect());
                return Err(SmpError::Other(format!(
                    "list element types are not identical: {}",
                    go_fmt(&all)
                )));
            }
            Some(_) => {}
        }
    }
    prev.ok_or_else(|| SmpError::Other("no elements in any of the given slices".into()))
}

/// The index of the first map in `list` whose `key` equals `value`.
fn find_map_by_key(list: &[Value], key: &str, value: &Value) -> Result<Option<usize>, SmpError> {
    for (i, v) in list.iter().enumerate() {
        let Value::Object(m) = v else {
            return Err(SmpError::Other(format!("value for key {i} is not a map")));
        };
        if m.get(key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// The items `to delete` (maps with `$patch: delete`) split from the others.
fn extract_to_delete(list: Vec<Value>) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut keep = Vec::new();
    let mut delete = Vec::new();
    for v in list {
        let Value::Object(m) = &v else {
            return Err(bad_arg_type("map[string]interface {}", &v));
        };
        if m.get(DIRECTIVE).and_then(Value::as_str) == Some(DELETE) {
            delete.push(v);
        } else {
            keep.push(v);
        }
    }
    Ok((keep, delete))
}

fn sort_key(v: &Value, merge_key: &str, kind: ElemKind) -> Option<Value> {
    if kind == ElemKind::Map {
        Some(v.as_object()?.get(merge_key)?.clone())
    } else {
        Some(v.clone())
    }
}

/// Upstream's `index`: where `v` is in `list`, matching maps by merge key (a missing key
/// matches a missing key).
fn index_of(list: &[Value], v: &Value, merge_key: &str, kind: ElemKind) -> Option<usize> {
    let want = sort_key(v, merge_key, kind);
    list.iter()
        .position(|item| sort_key(item, merge_key, kind) == want)
}

fn validate_merge_key_in_lists(merge_key: &str, lists: &[&[Value]]) -> Result<(), SmpError> {
    for item in lists.iter().flat_map(|l| l.iter()) {
        let Value::Object(m) = item else {
            return Err(bad_arg_type("map[string]interface {}", item));
        };
        if !m.contains_key(merge_key) {
            return Err(no_merge_key(m, merge_key));
        }
    }
    Ok(())
}

/// Sorts `to_sort` by the positions of its items in `order` (stable), `$patch: delete` items
/// last.
fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<Vec<Value>, SmpError> {
    let (mut to_sort, to_delete) = if kind == ElemKind::Map {
        validate_merge_key_in_lists(merge_key, &[&to_sort, order])?;
        extract_to_delete(to_sort)?
    } else {
        (to_sort, Vec::new())
    };
    to_sort.sort_by(|a, b| {
        match (
            index_of(order, a, merge_key, kind),
            index_of(order, b, merge_key, kind),
        ) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => Ordering::Equal,
        }
    });
    to_sort.extend(to_delete);
    Ok(to_sort)
}

/// Merges two sorted lists: the relative orders of both are kept, and a server-only item goes
/// before the first patch item it precedes in the server's order.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Vec<Value> {
    let less = |l: &Value, r: &Value| -> Option<bool> {
        let li = index_of(server_order, l, merge_key, kind)?;
        let ri = index_of(server_order, r, merge_key, kind)?;
        Some(li < ri)
    };
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (Some(l), Some(r)) => {
                if less(l, r) == Some(true) {
                    out.extend(left.next());
                } else {
                    out.extend(right.next());
                }
            }
        }
    }
    out
}

fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: ElemKind,
) -> Result<Vec<Value>, SmpError> {
    let patch = normalize_slice_order(patch, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted(
        server_only,
        patch,
        server_order,
        merge_key,
        kind,
    ))
}

fn partition_primitives(list: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    list.into_iter().partition(|v| by.contains(v))
}

fn partition_maps(
    list: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut in_patch = Vec::new();
    let mut server_only = Vec::new();
    for v in list {
        let Value::Object(m) = &v else {
            return Err(bad_arg_type("map[string]interface {}", &v));
        };
        let Some(key) = m.get(merge_key) else {
            return Err(no_merge_key(m, merge_key));
        };
        if find_map_by_key(by, merge_key, key)?.is_some() {
            in_patch.push(v);
        } else {
            server_only.push(v);
        }
    }
    Ok((in_patch, server_only))
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, SmpError> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let Value::Object(l) = left else {
        return Err(bad_arg_type("map[string]interface {}", left));
    };
    let Value::Object(r) = right else {
        return Err(bad_arg_type("map[string]interface {}", right));
    };
    let lk = l.get(merge_key).ok_or_else(|| no_merge_key(l, merge_key))?;
    let rk = r.get(merge_key).ok_or_else(|| no_merge_key(r, merge_key))?;
    Ok(lk == rk)
}

/// The items of the patch list must appear in the `$setElementOrder` list, in its order.
fn validate_patch_with_set_order(
    patch_list: &[Value],
    order: &[Value],
    merge_key: &str,
) -> Result<(), SmpError> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete = if merge_key.is_empty() {
        patch_list.to_vec()
    } else {
        extract_to_delete(patch_list.to_vec())?.0
    };
    let (mut pi, mut si) = (0, 0);
    while pi < non_delete.len() && si < order.len() {
        if contains_directive(&non_delete[pi]) {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(&non_delete[pi], &order[si], merge_key)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= order.len() {
        return Err(SmpError::Other(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            go_fmt(&Value::Array(patch_list.to_vec())),
            go_fmt(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

impl Merger<'_> {
    fn meta(&self, t: TypeRef, key: &str) -> Result<Meta, SmpError> {
        match self.schema.field(t, key) {
            Some(f) => Ok(Meta {
                ty: f.ty,
                strategy: non_retain_strategy(&f.patch_strategies)?,
                merge_key: f.merge_key.clone().unwrap_or_default(),
            }),
            None => Ok(Meta {
                ty: self.schema.field_type(t, key),
                strategy: String::new(),
                merge_key: String::new(),
            }),
        }
    }

    /// The patch metadata of a list field, with the type of its items (upstream takes a
    /// field that is not a list as a list of its own type).
    fn slice_meta(&self, t: TypeRef, key: &str) -> Result<Meta, SmpError> {
        let mut m = self.meta(t, key)?;
        if let Some(l) = self.schema.list_of(m.ty) {
            m.ty = l.elem;
        }
        Ok(m)
    }

    fn merge_map(
        &self,
        t: TypeRef,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
    ) -> Result<Map<String, Value>, SmpError> {
        if let Some(directive) = patch.get(DIRECTIVE) {
            return match directive.as_str() {
                Some(REPLACE) => {
                    patch.remove(DIRECTIVE);
                    Ok(patch)
                }
                Some(DELETE) => Ok(Map::new()),
                _ => Err(SmpError::Other(format!(
                    "unknown patch type: {} in map: {}",
                    go_fmt(directive),
                    go_fmt(&Value::Object(patch.clone()))
                ))),
            };
        }
        apply_retain_keys(&mut original, &mut patch)?;
        self.merge_set_element_order(t, &mut original, &mut patch)?;
        for (key, patch_v) in patch {
            let (key, delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
                (extract_key(&key, DELETE_FROM_PRIMITIVE_LIST)?, true)
            } else {
                (key, false)
            };
            if patch_v.is_null() {
                original.remove(&key);
                continue;
            }
            let take_patch = |original: &mut Map<String, Value>, mut v: Value| {
                discard_nulls(&mut v);
                match remove_directives(v) {
                    Some(v) => original.insert(key.clone(), v),
                    None => original.remove(&key),
                };
            };
            let Some(current) = original.remove(&key) else {
                if !delete_list {
                    take_patch(&mut original, patch_v);
                }
                continue;
            };
            if !same_kind(&current, &patch_v) {
                if delete_list {
                    original.insert(key, current);
                } else {
                    take_patch(&mut original, patch_v);
                }
                continue;
            }
            match (current, patch_v) {
                (Value::Object(o), Value::Object(p)) => {
                    let meta = self.meta(t, &key)?;
                    let merged = if meta.strategy != REPLACE {
                        self.merge_map(meta.ty, o, p)?
                    } else {
                        p
                    };
                    original.insert(key, Value::Object(merged));
                }
                (Value::Array(o), Value::Array(p)) => {
                    let meta = self.slice_meta(t, &key)?;
                    let merged = self.merge_slice_handler(o, p, &meta, delete_list)?;
                    original.insert(key, Value::Array(merged));
                }
                (_, p) => take_patch(&mut original, p),
            }
        }
        Ok(original)
    }

    fn merge_slice_handler(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        meta: &Meta,
        delete_list: bool,
    ) -> Result<Vec<Value>, SmpError> {
        if meta.strategy == MERGE || delete_list {
            self.merge_slice(original, patch, meta, delete_list)
        } else {
            Ok(patch)
        }
    }

    fn merge_slice(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        meta: &Meta,
        delete_list: bool,
    ) -> Result<Vec<Value>, SmpError> {
        self.merge_slice_aliased(original, patch, meta, delete_list)
            .map(|(merged, _)| merged)
    }

    /// [`Merger::merge_slice`], and what the caller's view of `original` holds afterwards:
    /// upstream deletes and appends within the original list's backing array (a list decoded
    /// from the stored object has no spare capacity), and `$setElementOrder` orders by that
    /// view.
    fn merge_slice_aliased(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        meta: &Meta,
        delete_list: bool,
    ) -> Result<(Vec<Value>, Option<Vec<Value>>), SmpError> {
        if original.is_empty() && patch.is_empty() {
            return Ok((original, None));
        }
        let kind = slice_element_kind(&[&original, &patch])?;
        let merge_key = meta.merge_key.as_str();
        if kind != ElemKind::Map {
            if delete_list {
                return Ok((
                    original
                        .into_iter()
                        .filter(|v| !patch.contains(v))
                        .collect(),
                    None,
                ));
            }
            let mut merged: Vec<Value> = Vec::new();
            for v in original.iter().chain(&patch) {
                if !merged.contains(v) {
                    merged.push(v.clone());
                }
            }
            let (in_patch, server_only) = partition_primitives(merged, &patch);
            let out = normalize_element_order(in_patch, server_only, &patch, &original, "", kind)?;
            return Ok((out, None));
        }
        if merge_key.is_empty() {
            return Err(SmpError::Other(
                "cannot merge lists without merge key for struct".into(),
            ));
        }
        let mut list = AliasedList::new(original);
        let patch = merge_special_elements(&mut list, patch, merge_key)?;
        let original = list.items().to_vec();
        self.merge_without_special_elements(&mut list, &patch, meta)?;
        let view = list.view();
        let (in_patch, server_only) = partition_maps(list.into_items(), &patch, merge_key)?;
        let out =
            normalize_element_order(in_patch, server_only, &patch, &original, merge_key, kind)?;
        Ok((out, Some(view)))
    }

    fn merge_without_special_elements(
        &self,
        original: &mut AliasedList,
        patch: &[Value],
        meta: &Meta,
    ) -> Result<(), SmpError> {
        for v in patch {
            let Value::Object(m) = v else {
                return Err(bad_arg_type("map[string]interface {}", v));
            };
            let Some(key) = m.get(&meta.merge_key) else {
                return Err(no_merge_key(m, &meta.merge_key));
            };
            match find_map_by_key(original.items(), &meta.merge_key, key)? {
                Some(i) => {
                    let current = match &original.items()[i] {
                        Value::Object(o) => o.clone(),
                        _ => Map::new(),
                    };
                    let merged = self.merge_map(meta.ty, current, m.clone())?;
                    original.set(i, Value::Object(merged));
                }
                None => original.push(v.clone()),
            }
        }
        Ok(())
    }

    /// `$setElementOrder/<field>`: merges the field's list now and orders it as the directive
    /// says, items only the server has keeping their places.
    fn merge_set_element_order(
        &self,
        t: TypeRef,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
    ) -> Result<(), SmpError> {
        let keys: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for key in keys {
            let order = patch.remove(&key).unwrap_or(Value::Null);
            let Value::Array(order) = order else {
                return Err(bad_arg_type("[]interface {}", &order));
            };
            let field = extract_key(&key, SET_ELEMENT_ORDER)?;
            let as_list = |v: Option<&Value>| -> Result<Option<Vec<Value>>, SmpError> {
                match v {
                    None => Ok(None),
                    Some(Value::Array(a)) => Ok(Some(a.clone())),
                    Some(other) => Err(bad_arg_type("[]interface {}", other)),
                }
            };
            let original_list = as_list(original.get(&field))?;
            let patch_list = as_list(patch.get(&field))?;
            let meta = self.slice_meta(t, &field)?;
            validate_patch_with_set_order(
                patch_list.as_deref().unwrap_or_default(),
                &order,
                &meta.merge_key,
            )?;
            let mut server_view = None;
            let merged = match (&original_list, &patch_list) {
                (Some(o), None) => o.clone(),
                (None, Some(p)) => match remove_directives(Value::Array(p.clone())) {
                    Some(Value::Array(a)) => a,
                    _ => continue,
                },
                (Some(o), Some(p)) if meta.strategy == MERGE => {
                    let (merged, view) =
                        self.merge_slice_aliased(o.clone(), p.clone(), &meta, false)?;
                    server_view = view;
                    merged
                }
                (Some(o), Some(p)) => {
                    self.merge_slice_handler(o.clone(), p.clone(), &meta, false)?
                }
                (None, None) => continue,
            };
            let (in_order, server_only) = if meta.merge_key.is_empty() {
                partition_primitives(merged, &order)
            } else {
                partition_maps(merged, &order, &meta.merge_key)?
            };
            let original_items = server_view.or(original_list).unwrap_or_default();
            let kind =
                slice_element_kind(&[&original_items, patch_list.as_deref().unwrap_or_default()])?;
            let both = normalize_element_order(
                in_order,
                server_only,
                &order,
                &original_items,
                &meta.merge_key,
                kind,
            )?;
            original.insert(field.clone(), Value::Array(both));
            patch.remove(&field);
        }
        Ok(())
    }
}

/// `$retainKeys`: clears the fields of `original` the list does not name; every field the
/// patch sets must be named.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), SmpError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(bad_retain_keys());
    };
    let named = |k: &str| retain.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !named(k) {
            return Err(bad_retain_keys());
        }
    }
    original.retain(|k, _| named(k));
    Ok(())
}

/// `$patch` items of a list of maps: `delete` removes the original items with that key,
/// `replace` makes the patch's other items the whole list.
fn merge_special_elements(
    original: &mut AliasedList,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<Vec<Value>, SmpError> {
    let mut rest = Vec::new();
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = &v else {
            return Err(bad_arg_type("map[string]interface {}", &v));
        };
        let Some(directive) = m.get(DIRECTIVE) else {
            rest.push(v);
            continue;
        };
        match directive.as_str() {
            Some(DELETE) => {
                let Some(key) = m.get(merge_key) else {
                    return Err(no_merge_key(m, merge_key));
                };
                while let Some(i) = find_map_by_key(original.items(), merge_key, key)? {
                    original.remove(i);
                }
            }
            Some(REPLACE) => replace = true,
            Some(MERGE) => {
                return Err(SmpError::Other(
                    "merging lists cannot yet be specified in the patch".into(),
                ));
            }
            _ => {
                return Err(SmpError::Other(format!(
                    "unknown patch type: {} in map: {}",
                    go_fmt(directive),
                    go_fmt(&v)
                )));
            }
        }
    }
    if replace {
        original.replace(rest);
        return Ok(Vec::new());
    }
    Ok(rest)
}

/// A list as a Go slice over its original backing array (no spare capacity): removals shift
/// items left within the array, appends fill the freed places until it is full, then move
/// the list elsewhere. `view` is what a holder of the original slice sees.
struct AliasedList {
    backing: Vec<Value>,
    len: usize,
    /// Set once the list no longer shares the original array.
    moved: Option<Vec<Value>>,
}

impl AliasedList {
    fn new(items: Vec<Value>) -> Self {
        AliasedList {
            len: items.len(),
            backing: items,
            moved: None,
        }
    }

    fn items(&self) -> &[Value] {
        match &self.moved {
            Some(m) => m,
            None => &self.backing[..self.len],
        }
    }

    fn set(&mut self, i: usize, v: Value) {
        match &mut self.moved {
            Some(m) => m[i] = v,
            None => self.backing[i] = v,
        }
    }

    fn remove(&mut self, i: usize) {
        match &mut self.moved {
            Some(m) => {
                m.remove(i);
            }
            None => {
                for j in i..self.len - 1 {
                    self.backing[j] = self.backing[j + 1].clone();
                }
                self.len -= 1;
            }
        }
    }

    fn push(&mut self, v: Value) {
        match &mut self.moved {
            Some(m) => m.push(v),
            None if self.len < self.backing.len() => {
                self.backing[self.len] = v;
                self.len += 1;
            }
            None => {
                let mut m = self.backing[..self.len].to_vec();
                m.push(v);
                self.moved = Some(m);
            }
        }
    }

    /// The whole list becomes `items` (a new slice; the original array stays as it is).
    fn replace(&mut self, items: Vec<Value>) {
        self.moved = Some(items);
    }

    fn view(&self) -> Vec<Value> {
        self.backing.clone()
    }

    fn into_items(self) -> Vec<Value> {
        match self.moved {
            Some(m) => m,
            None => {
                let mut b = self.backing;
                b.truncate(self.len);
                b
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        let defs = json!({
            "Pod": {"type": "object", "properties": {
                "metadata": {"allOf": [{"$ref": "#/components/schemas/Meta"}]},
                "spec": {"allOf": [{"$ref": "#/components/schemas/PodSpec"}]},
            }},
            "Meta": {"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "finalizers": {"type": "array", "items": {"type": "string"},
                    "x-kubernetes-patch-strategy": "merge"},
            }},
            "PodSpec": {"type": "object", "properties": {
                "containers": {"type": "array", "items": {"$ref": "#/components/schemas/Container"},
                    "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                "volumes": {"type": "array", "items": {"$ref": "#/components/schemas/Volume"},
                    "x-kubernetes-patch-strategy": "merge,retainKeys",
                    "x-kubernetes-patch-merge-key": "name"},
                "tolerations": {"type": "array", "items": {"type": "object"}},
                "strategy": {"allOf": [{"$ref": "#/components/schemas/Strategy"}],
                    "x-kubernetes-patch-strategy": "retainKeys"},
                "replaced": {"type": "object", "x-kubernetes-patch-strategy": "replace"},
            }},
            "Container": {"type": "object", "properties": {
                "name": {"type": "string"}, "image": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string"}},
                "env": {"type": "array", "items": {"type": "object"},
                    "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
            }},
            "Volume": {"type": "object", "properties": {
                "name": {"type": "string"}, "hostPath": {"type": "object"},
                "emptyDir": {"type": "object"},
            }},
            "Strategy": {"type": "object", "properties": {
                "type": {"type": "string"}, "rollingUpdate": {"type": "object"},
            }},
        });
        Schema::from_definitions(defs.as_object().unwrap(), "Pod")
    }

    fn smp(original: Value, patch: Value) -> Result<Value, SmpError> {
        apply(&schema(), original, patch)
    }

    #[test]
    fn maps_merge_and_null_deletes() {
        let out = smp(
            json!({"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}}),
            json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": null, "y": 1}}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "p", "labels": {"b": "2", "c": "3"}}, "spec": {"y": 1}})
        );
    }

    #[test]
    fn lists_merge_by_key_or_are_replaced() {
        let original = json!({"spec": {
            "containers": [{"name": "a", "image": "1", "args": ["x"]}, {"name": "b", "image": "1"}],
            "tolerations": [{"key": "k1"}],
        }});
        let out = smp(
            original,
            json!({"spec": {
                "containers": [{"name": "b", "image": "2", "args": ["y"]}, {"name": "c", "image": "3"}],
                "tolerations": [{"key": "k2"}],
            }}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"spec": {
                "containers": [{"name": "a", "image": "1", "args": ["x"]},
                    {"name": "b", "image": "2", "args": ["y"]}, {"name": "c", "image": "3"}],
                "tolerations": [{"key": "k2"}],
            }})
        );
    }

    #[test]
    fn primitive_lists_with_merge_are_sets() {
        let out = smp(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]}}),
        )
        .unwrap();
        assert_eq!(out, json!({"metadata": {"finalizers": ["c", "a"]}}));
        let out = smp(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c"]}}),
        )
        .unwrap();
        // Upstream puts new items before the server's when nothing orders them.
        assert_eq!(out, json!({"metadata": {"finalizers": ["c", "a", "b"]}}));
    }

    #[test]
    fn patch_directives() {
        let original = json!({"spec": {"containers": [
            {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
            {"name": "b", "image": "1"}]}});
        // $patch: delete of a list item by merge key.
        let out = smp(
            original.clone(),
            json!({"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);
        // $patch: replace of a list.
        let out = smp(
            original.clone(),
            json!({"spec": {"containers": [{"name": "z", "image": "9"}, {"$patch": "replace"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "z", "image": "9"}])
        );
        // $patch: replace of a map, and $patch: delete of a map.
        let out = smp(
            original.clone(),
            json!({"spec": {"$patch": "replace", "tolerations": []}}),
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"tolerations": []}}));
        let out = smp(original.clone(), json!({"spec": {"$patch": "delete"}})).unwrap();
        assert_eq!(out, json!({"spec": {}}));
        // Nested: delete one env var of one container.
        let out = smp(
            original.clone(),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "$patch": "delete"}]}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "Y", "value": "2"}])
        );
        // Unknown directives.
        assert!(matches!(
            smp(original.clone(), json!({"spec": {"$patch": "bogus"}})),
            Err(SmpError::Other(m)) if m.starts_with("unknown patch type: bogus in map:")
        ));
        assert_eq!(
            smp(
                original,
                json!({"spec": {"containers": [{"$patch": "merge"}]}})
            ),
            Err(SmpError::Other(
                "merging lists cannot yet be specified in the patch".into()
            ))
        );
    }

    #[test]
    fn set_element_order() {
        let original = json!({"spec": {"containers": [
            {"name": "a", "image": "1"}, {"name": "b", "image": "1"}, {"name": "c", "image": "1"}]}});
        // kubectl apply: reorder, change b, drop nothing.
        let out = smp(
            original.clone(),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "b"}, {"name": "a"}],
                "containers": [{"name": "b", "image": "2"}],
            }}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "c", "image": "1"}, {"name": "b", "image": "2"}, {"name": "a", "image": "1"}])
        );
        // Deleting one item while keeping the order of the rest.
        let out = smp(
            original,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
                "containers": [{"name": "b", "$patch": "delete"}],
            }}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "1"}, {"name": "c", "image": "1"}])
        );
        // Primitive lists.
        let out = smp(
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["b", "c", "a"], "finalizers": ["c"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "c", "a"]));
        // An order that contradicts the patch list.
        assert!(matches!(
            smp(
                json!({"spec": {"containers": [{"name": "a"}]}}),
                json!({"spec": {"$setElementOrder/containers": [{"name": "a"}],
                    "containers": [{"name": "x"}]}})
            ),
            Err(SmpError::Other(m)) if m.starts_with("The order in patch list:")
        ));
        assert_eq!(
            smp(json!({}), json!({"$setElementOrder": []})),
            Err(bad_set_element_order())
        );
    }

    #[test]
    fn retain_keys() {
        // Switching the deployment strategy type drops the old rollingUpdate.
        let out = smp(
            json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}}),
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"strategy": {"type": "Recreate"}}}));
        // A volume switching source.
        let out = smp(
            json!({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}}),
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["emptyDir", "name"], "emptyDir": {}}]}}),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}})
        );
        // Fields set by the patch must be retained.
        assert_eq!(
            smp(
                json!({"spec": {"strategy": {}}}),
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}})
            ),
            Err(bad_retain_keys())
        );
    }

    #[test]
    fn replace_strategy_and_errors() {
        let out = smp(
            json!({"spec": {"replaced": {"a": 1, "b": 2}}}),
            json!({"spec": {"replaced": {"c": 3}}}),
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"replaced": {"c": 3}}}));
        assert!(matches!(
            smp(
                json!({"spec": {"containers": [{"name": "a"}]}}),
                json!({"spec": {"containers": [{"image": "x"}]}})
            ),
            Err(SmpError::Other(m)) if m == "map: map[image:x] does not contain declared merge key: name"
        ));
        assert_eq!(
            smp(
                json!({"metadata": {"finalizers": []}}),
                json!({"metadata": {"finalizers": [["x"]]}})
            ),
            Err(SmpError::Invalid("lists of lists are not supported".into()))
        );
        assert_eq!(
            smp(json!({}), json!({"$deleteFromPrimitiveList": ["x"]})),
            Err(bad_primitive_list())
        );
        // New fields from the patch lose their nulls and directives.
        let out = smp(
            json!({}),
            json!({"spec": {"a": null, "b": {"$patch": "delete"}, "c": 1}}),
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"c": 1}}));
    }
}
