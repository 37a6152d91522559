//! Structural schemas: a CRD version's `openAPIV3Schema` in the shape the server works with,
//! and what upstream's apiextensions-apiserver does with it besides validation: pruning of
//! unknown fields, removal of nulls that may not be null, and defaulting.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use regex::Regex;
use serde_json::{Map, Value};

/// What `additionalProperties` allows.
#[derive(Clone, Debug)]
pub enum Additional {
    /// `additionalProperties: true`: any value.
    Any,
    /// Values of undeclared keys follow this schema (maps).
    Schema(Box<Schema>),
}

/// One node of a structural schema.
#[derive(Clone, Debug, Default)]
pub struct Schema {
    pub type_: Option<String>,
    pub nullable: bool,
    /// A format upstream checks (others are dropped, as upstream strips them).
    pub format: Option<String>,
    pub properties: BTreeMap<String, Schema>,
    pub additional_properties: Option<Additional>,
    pub items: Option<Box<Schema>>,
    pub required: Vec<String>,
    pub enum_: Option<Vec<Value>>,
    pub pattern: Option<(String, Arc<Regex>)>,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: bool,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub unique_items: bool,
    pub default: Option<Value>,
    pub preserve_unknown_fields: bool,
    pub int_or_string: bool,
    pub embedded_resource: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    /// `x-kubernetes-validations`: CEL rules.
    pub validations: Vec<super::cel::Rule>,
}

/// The formats upstream validates (`apiextensions-apiserver/pkg/apiserver/validation`), by
/// their normalized name (dashes removed).
const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

fn u64_of(v: Option<&Value>) -> Option<u64> {
    let v = v?;
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

fn schemas(v: Option<&Value>) -> Vec<Schema> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().map(Schema::parse).collect())
        .unwrap_or_default()
}

impl Schema {
    /// Reads a JSONSchemaProps document leniently: what does not parse is left out.
    pub fn parse(v: &Value) -> Schema {
        let Some(m) = v.as_object() else {
            return Schema::default();
        };
        let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
        let string = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        let number = |k: &str| m.get(k).and_then(Value::as_f64);
        let format =
            string("format").filter(|f| SUPPORTED_FORMATS.contains(&f.replace('-', "").as_str()));
        let pattern =
            string("pattern").and_then(|p| Regex::new(&p).ok().map(|re| (p, Arc::new(re))));
        let additional_properties = match m.get("additionalProperties") {
            Some(Value::Bool(true)) => Some(Additional::Any),
            Some(v @ Value::Object(_)) => Some(Additional::Schema(Box::new(Schema::parse(v)))),
            _ => None,
        };
        let items = match m.get("items") {
            Some(v @ Value::Object(_)) => Some(Box::new(Schema::parse(v))),
            Some(Value::Array(a)) => a.first().map(|v| Box::new(Schema::parse(v))),
            _ => None,
        };
        Schema {
            type_: string("type").filter(|t| !t.is_empty()),
            nullable: flag("nullable"),
            format,
            properties: m
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| {
                    p.iter()
                        .map(|(k, v)| (k.clone(), Schema::parse(v)))
                        .collect()
                })
                .unwrap_or_default(),
            additional_properties,
            items,
            required: m
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            enum_: m.get("enum").and_then(Value::as_array).cloned(),
            pattern,
            minimum: number("minimum"),
            maximum: number("maximum"),
            exclusive_minimum: flag("exclusiveMinimum"),
            exclusive_maximum: flag("exclusiveMaximum"),
            multiple_of: number("multipleOf"),
            min_length: u64_of(m.get("minLength")),
            max_length: u64_of(m.get("maxLength")),
            min_items: u64_of(m.get("minItems")),
            max_items: u64_of(m.get("maxItems")),
            min_properties: u64_of(m.get("minProperties")),
            max_properties: u64_of(m.get("maxProperties")),
            unique_items: flag("uniqueItems"),
            default: m.get("default").cloned(),
            preserve_unknown_fields: flag("x-kubernetes-preserve-unknown-fields"),
            int_or_string: flag("x-kubernetes-int-or-string"),
            embedded_resource: flag("x-kubernetes-embedded-resource"),
            list_type: string("x-kubernetes-list-type"),
            list_map_keys: m
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            all_of: schemas(m.get("allOf")),
            any_of: schemas(m.get("anyOf")),
            one_of: schemas(m.get("oneOf")),
            not: m.get("not").map(|v| Box::new(Schema::parse(v))),
            validations: super::cel::Rule::parse_all(v),
        }
    }

    /// The schema of the values of an undeclared key, if the node is a map.
    fn additional(&self) -> Option<Option<&Schema>> {
        match &self.additional_properties {
            None => None,
            Some(Additional::Any) => Some(None),
            Some(Additional::Schema(s)) => Some(Some(s)),
        }
    }

    /// The schema of field `key`: a declared property or the map's value schema.
    pub fn field(&self, key: &str) -> Option<&Schema> {
        self.properties
            .get(key)
            .or_else(|| self.additional().flatten())
    }
}

const META_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Upstream's pruning: drops every field the schema does not specify, except below
/// `x-kubernetes-preserve-unknown-fields`, and keeps `apiVersion`, `kind` and `metadata` of
/// embedded resources. `root` treats the node as a resource (its metadata fields stay).
pub fn prune(x: &mut Value, s: Option<&Schema>, root: bool) {
    prune_node(x, s, root);
}

fn prune_node(x: &mut Value, s: Option<&Schema>, embedded: bool) {
    let embedded = embedded || s.is_some_and(|s| s.embedded_resource);
    if let Some(s) = s
        && s.preserve_unknown_fields
    {
        skip_prune(x, s, embedded);
        return;
    }
    match x {
        Value::Object(map) => {
            let Some(s) = s else {
                map.clear();
                return;
            };
            let mut remove = Vec::new();
            for (k, v) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(k) {
                    prune_node(v, Some(prop), false);
                } else if let Some(additional) = s.additional() {
                    // additionalProperties: true keeps the value as it is.
                    if let Some(a) = additional {
                        prune_node(v, Some(a), false);
                    }
                } else {
                    remove.push(k.clone());
                }
            }
            for k in remove {
                map.remove(&k);
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for v in items {
                prune_node(v, item_schema, false);
            }
        }
        _ => {}
    }
}

fn skip_prune(x: &mut Value, s: &Schema, embedded: bool) {
    match x {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(k) {
                    prune_node(v, Some(prop), false);
                } else if let Some(Some(a)) = s.additional() {
                    prune_node(v, Some(a), false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = s.items.as_deref() {
                for v in items {
                    skip_prune(v, item, item.embedded_resource);
                }
            }
        }
        _ => {}
    }
}

fn non_nullable_without_default(x: &Value, s: Option<&Schema>) -> bool {
    x.is_null() && s.is_some_and(|s| !s.nullable && s.default.is_none())
}

/// Upstream's `PruneNonNullableNullsWithoutDefaults`: map entries that are null although
/// their schema neither allows null nor has a default are dropped.
pub fn prune_nulls(x: &mut Value, s: Option<&Schema>) {
    match x {
        Value::Object(map) => {
            let mut remove = Vec::new();
            for (k, v) in map.iter_mut() {
                let field = s.and_then(|s| s.field(k));
                if non_nullable_without_default(v, field) {
                    remove.push(k.clone());
                } else {
                    prune_nulls(v, field);
                }
            }
            for k in remove {
                map.remove(&k);
            }
        }
        Value::Array(items) => {
            let item = s.and_then(|s| s.items.as_deref());
            for v in items {
                prune_nulls(v, item);
            }
        }
        _ => {}
    }
}

fn non_nullable_null(x: &Value, s: Option<&Schema>) -> bool {
    x.is_null() && s.is_some_and(|s| !s.nullable)
}

/// Upstream's structural defaulting: missing fields (and nulls that may not be null) with a
/// `default` get it; defaulted values are defaulted further.
pub fn apply_defaults(x: &mut Value, s: &Schema) {
    match x {
        Value::Object(map) => {
            for (k, prop) in &s.properties {
                let Some(default) = &prop.default else {
                    continue;
                };
                let missing = map.get(k).is_none_or(|v| non_nullable_null(v, Some(prop)));
                if missing {
                    map.insert(k.clone(), default.clone());
                }
            }
            for (k, v) in map.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    apply_defaults(v, prop);
                } else if let Some(Some(a)) = s.additional() {
                    if non_nullable_null(v, Some(a))
                        && let Some(d) = &a.default
                    {
                        *v = d.clone();
                    }
                    apply_defaults(v, a);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = s.items.as_deref() {
                for v in items {
                    if non_nullable_null(v, Some(item))
                        && let Some(d) = &item.default
                    {
                        *v = d.clone();
                    }
                    apply_defaults(v, item);
                }
            }
        }
        _ => {}
    }
}

/// Upstream's metadata coercion of embedded resources: their `metadata` is decoded as
/// ObjectMeta and written back, which drops fields ObjectMeta does not have. Metadata that
/// does not decode is left for validation to report.
pub fn coerce_embedded_metadata(x: &mut Value, s: Option<&Schema>, root: bool) {
    let Some(s) = s else { return };
    match x {
        Value::Object(map) => {
            if s.embedded_resource
                && !root
                && let Some(meta) = map.get_mut("metadata")
                && let Ok(decoded) = serde_json::from_value::<ObjectMeta>(meta.clone())
                && let Ok(encoded) = serde_json::to_value(&decoded)
            {
                *meta = encoded;
            }
            for (k, v) in map.iter_mut() {
                if root && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                coerce_embedded_metadata(v, s.field(k), false);
            }
        }
        Value::Array(items) => {
            for v in items {
                coerce_embedded_metadata(v, s.items.as_deref(), false);
            }
        }
        _ => {}
    }
}

/// What the decoder does to a custom resource's content before defaulting: pruning, dropping
/// of forbidden nulls (unless the CRD preserves unknown fields) and metadata coercion of
/// embedded resources.
pub fn prune_content(content: &mut Map<String, Value>, s: Option<&Schema>, preserve_unknown: bool) {
    let mut x = Value::Object(std::mem::take(content));
    if !preserve_unknown {
        prune(&mut x, s, true);
        prune_nulls(&mut x, s);
    }
    coerce_embedded_metadata(&mut x, s, true);
    if let Value::Object(m) = x {
        *content = m;
    }
}

/// Defaulting of a custom resource's content.
pub fn default_content(content: &mut Map<String, Value>, s: &Schema) {
    let mut x = Value::Object(std::mem::take(content));
    apply_defaults(&mut x, s);
    if let Value::Object(m) = x {
        *content = m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::parse(&json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "replicas": {"type": "integer", "default": 1},
                        "image": {"type": "string"},
                        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                 "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                     "x-kubernetes-preserve-unknown-fields": true},
                        "nested": {"type": "object", "default": {}, "properties": {"x": {"type": "string", "default": "dx"}}},
                        "maybe": {"type": "string", "nullable": true},
                    },
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            },
        }))
    }

    #[test]
    fn prunes_unknown_fields() {
        let s = schema();
        let mut v = json!({
            "apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"}, "junk": 1,
            "spec": {"replicas": 2, "bogus": true, "tags": [{"k": "v", "z": 1}], "labels": {"a": "b"},
                     "free": {"anything": {"deep": 1}, "known": {"a": "x", "b": "y"}},
                     "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1}, "spec": {}}},
            "status": {"whatever": [1, 2]},
        });
        prune(&mut v, Some(&s), true);
        assert_eq!(
            v,
            json!({
                "apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x"},
                "spec": {"replicas": 2, "tags": [{"k": "v"}], "labels": {"a": "b"},
                         "free": {"anything": {"deep": 1}, "known": {"a": "x"}},
                         "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1}, "spec": {}}},
                "status": {"whatever": [1, 2]},
            })
        );
        coerce_embedded_metadata(&mut v, Some(&s), true);
        assert_eq!(v["spec"]["template"]["metadata"], json!({"name": "p"}));
    }

    #[test]
    fn defaults_and_nulls() {
        let s = schema();
        let mut v = json!({"spec": {"image": null, "maybe": null, "replicas": null}});
        prune_nulls(&mut v, Some(&s));
        assert_eq!(v, json!({"spec": {"maybe": null, "replicas": null}}));
        apply_defaults(&mut v, &s);
        assert_eq!(
            v,
            json!({"spec": {"maybe": null, "replicas": 1, "nested": {"x": "dx"}}})
        );
        // A missing parent gets no defaults of its children.
        let mut v = json!({});
        apply_defaults(&mut v, &s);
        assert_eq!(v, json!({}));
    }
}
