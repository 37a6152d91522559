//! The schema rules a CRD version must meet before it is stored, as apiextensions-apiserver
//! checks them: the generic OpenAPI checks (`additionalProperties` beside `properties`,
//! `x-kubernetes-preserve-unknown-fields: false`, `uniqueItems`) and the structural-schema
//! invariants (every specified field has a type, arrays have items, the root is an object,
//! `metadata` names only `name`/`generateName`, value validations inside
//! `anyOf`/`allOf`/`oneOf`/`not` carry no structure). Without them a schema could not be
//! used for pruning, defaulting and server-side apply, which all walk its structure.

use serde_json::{Map, Value};

use crate::validation::{ErrorKind, FieldError, Path};

const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// Where a schema node sits, for the "type must not be empty" messages.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

fn obj(v: &Value) -> Option<&Map<String, Value>> {
    v.as_object()
}

fn str_of<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

fn flag(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn properties(m: &Map<String, Value>) -> Option<&Map<String, Value>> {
    m.get("properties").and_then(Value::as_object)
}

/// The schemas under `allOf`, `anyOf` and `oneOf`, with their junctor and index.
fn junctions(m: &Map<String, Value>) -> impl Iterator<Item = (&'static str, usize, &Value)> {
    ["allOf", "anyOf", "oneOf"].into_iter().flat_map(move |j| {
        m.get(j)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(move |(i, s)| (j, i, s))
    })
}

/// Every error of one version's `openAPIV3Schema` at `path`.
pub fn validate_schema(schema: &Value, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    openapi(schema, path, &mut errs);
    invariants(schema, Level::Root, path, &mut errs);
    errs.extend(super::cel::compile_errors(schema, path));
    errs
}

/// The generic checks of `ValidateCustomResourceDefinitionOpenAPISchema`.
fn openapi(schema: &Value, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(m) = obj(schema) else { return };
    if let Some(t) = m.get("type").and_then(Value::as_str)
        && !t.is_empty()
        && !TYPES.contains(&t)
    {
        errs.push(FieldError::not_supported(&path.child("type"), t, TYPES));
    }
    if m.get("uniqueItems").and_then(Value::as_bool) == Some(true) {
        errs.push(FieldError::forbidden(
            &path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if m.get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(false)
    {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            false,
            "must be true or undefined",
        ));
    }
    if let Some(additional) = m.get("additionalProperties") {
        let props = properties(m).is_some_and(|p| !p.is_empty());
        // `true` is allowed beside properties; `false` or a schema are not.
        if props && additional != &Value::Bool(true) {
            errs.push(FieldError::forbidden(
                &path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if additional.is_object() {
            openapi(additional, &path.child("additionalProperties"), errs);
        }
    }
    if let Some(props) = properties(m) {
        for (k, v) in props {
            openapi(v, &path.child("properties").key(k), errs);
        }
    }
    if let Some(items) = m.get("items") {
        if items.is_array() {
            errs.push(FieldError::forbidden(
                &path.child("items"),
                "items must be a schema object and not an array",
            ));
        } else {
            openapi(items, &path.child("items"), errs);
        }
    }
    for (junctor, i, s) in junctions(m) {
        openapi(s, &path.child(junctor).index(i), errs);
    }
    if let Some(not) = m.get("not") {
        openapi(not, &path.child("not"), errs);
    }
    for (i, rule) in m
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if rule
            .get("rule")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(FieldError::required(
                &path
                    .child("x-kubernetes-validations")
                    .index(i)
                    .child("rule"),
                "rule is not specified",
            ));
        }
    }
}

/// `IntOrString`'s two allowed spellings under `x-kubernetes-int-or-string`:
/// `anyOf: [{type: integer}, {type: string}]`, alone or as `allOf[0].anyOf`.
fn int_or_string_any_of(v: Option<&Value>) -> bool {
    let Some(list) = v.and_then(Value::as_array) else {
        return false;
    };
    let types: Vec<Option<&str>> = list
        .iter()
        .map(|s| s.get("type").and_then(Value::as_str))
        .collect();
    types == [Some("integer"), Some("string")]
}

/// Upstream's `validateStructuralInvariants`.
fn invariants(schema: &Value, level: Level, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(m) = obj(schema) else { return };
    let ty = str_of(m, "type");
    let embedded = flag(m, "x-kubernetes-embedded-resource");
    let int_or_string = flag(m, "x-kubernetes-int-or-string");
    let preserve = flag(m, "x-kubernetes-preserve-unknown-fields");
    if ty == "array" && m.get("items").is_none() {
        errs.push(FieldError::required(
            &path.child("items"),
            "must be specified",
        ));
    }
    if let Some(items) = m.get("items").filter(|i| i.is_object()) {
        invariants(items, Level::Item, &path.child("items"), errs);
    }
    if let Some(props) = properties(m) {
        for (k, v) in props {
            invariants(v, Level::Field, &path.child("properties").key(k), errs);
        }
    }
    if let Some(additional) = m.get("additionalProperties").filter(|a| a.is_object()) {
        invariants(
            additional,
            Level::Field,
            &path.child("additionalProperties"),
            errs,
        );
    }
    if int_or_string && !ty.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("type"),
            ty,
            "must be empty if x-kubernetes-int-or-string is true",
        ));
    }
    // The value validations beside the structure.
    let skip_any_of = int_or_string && int_or_string_any_of(m.get("anyOf"));
    let skip_all_of_any_of = int_or_string
        && int_or_string_any_of(
            m.get("allOf")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(|f| f.get("anyOf")),
        );
    for (junctor, i, s) in junctions(m) {
        if junctor == "anyOf" && skip_any_of {
            continue;
        }
        let skip = junctor == "allOf" && i == 0 && skip_all_of_any_of;
        nested(s, skip, &path.child(junctor).index(i), errs);
    }
    if let Some(not) = m.get("not") {
        nested(not, false, &path.child("not"), errs);
    }
    let check_metadata = level == Level::Root || embedded;
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(FieldError::required(
                &path.child("type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(FieldError::invalid(
                &path.child("type"),
                ty,
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty() && !embedded && !int_or_string {
        let why = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(&path.child("type"), why));
    }
    if embedded && m.get("additionalProperties").is_some() {
        errs.push(FieldError::forbidden(
            &path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(FieldError::invalid(
            &path.child("type"),
            ty,
            "must be object at the root",
        ));
    }
    let props = properties(m);
    if check_metadata && let Some(props) = props {
        for (field, want) in [
            ("kind", "string"),
            ("apiVersion", "string"),
            ("metadata", "object"),
        ] {
            if let Some(p) = props.get(field).and_then(Value::as_object) {
                let t = str_of(p, "type");
                if t != want {
                    errs.push(FieldError::invalid(
                        &path.child("properties").key(field).child("type"),
                        t,
                        format!("must be {want}"),
                    ));
                }
            }
        }
    }
    if level == Level::Root
        && let Some(meta) = props
            .and_then(|p| p.get("metadata"))
            .and_then(Value::as_object)
    {
        // Only `type`, and `properties` naming just name and generateName, may be said.
        let extra_props =
            properties(meta).is_some_and(|p| p.keys().any(|k| k != "name" && k != "generateName"));
        let other_keys = meta
            .keys()
            .any(|k| !matches!(k.as_str(), "type" | "properties" | "default"));
        if extra_props || other_keys {
            errs.push(FieldError::forbidden(
                &path.child("properties").key("metadata"),
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && props.is_none_or(|p| p.is_empty()) {
        errs.push(FieldError::required(
            &path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// Upstream's `validateNestedValueValidation`: a schema inside a junctor only validates.
fn nested(schema: &Value, skip_any_of: bool, path: &Path, errs: &mut Vec<FieldError>) {
    let Some(m) = obj(schema) else { return };
    for (junctor, i, s) in junctions(m) {
        if junctor == "anyOf" && skip_any_of {
            continue;
        }
        nested(s, false, &path.child(junctor).index(i), errs);
    }
    if let Some(not) = m.get("not") {
        nested(not, false, &path.child("not"), errs);
    }
    if let Some(items) = m.get("items").filter(|i| i.is_object()) {
        nested(items, false, &path.child("items"), errs);
    }
    if let Some(props) = properties(m) {
        for (k, v) in props {
            nested(v, false, &path.child("properties").key(k), errs);
        }
    }
    let forbid = |errs: &mut Vec<FieldError>, key: &str, why: &str| {
        errs.push(FieldError::new(
            ErrorKind::Forbidden,
            &path.child(key),
            None,
            why,
        ))
    };
    if !str_of(m, "type").is_empty() {
        forbid(errs, "type", "must be empty to be structural");
    }
    if m.get("additionalProperties").is_some() {
        forbid(
            errs,
            "additionalProperties",
            "must be undefined to be structural",
        );
    }
    if m.get("default").is_some() {
        forbid(errs, "default", "must be undefined to be structural");
    }
    if !str_of(m, "title").is_empty() {
        forbid(errs, "title", "must be empty to be structural");
    }
    if !str_of(m, "description").is_empty() {
        forbid(errs, "description", "must be empty to be structural");
    }
    if flag(m, "nullable") {
        forbid(errs, "nullable", "must be false to be structural");
    }
    if m.get("x-kubernetes-preserve-unknown-fields").is_some() {
        forbid(
            errs,
            "x-kubernetes-preserve-unknown-fields",
            "must be undefined to be structural",
        );
    }
    for key in [
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    ] {
        if flag(m, key) {
            forbid(errs, key, "must be false to be structural");
        }
    }
    for key in [
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
    ] {
        if m.get(key).is_some() {
            forbid(errs, key, "must be undefined to be structural");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msgs(schema: Value) -> Vec<String> {
        let path = Path::new("spec")
            .child("versions")
            .index(0)
            .child("schema")
            .child("openAPIV3Schema");
        validate_schema(&schema, &path)
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn structural_errors() {
        assert!(
            msgs(json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"n": {"type": "integer"}}},
                "port": {"x-kubernetes-int-or-string": true},
                "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "ip": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}},
            }}))
            .is_empty()
        );
        assert_eq!(
            msgs(json!({"type": "object", "properties": {"spec": {"properties": {}}}})),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
            ]
        );
        assert_eq!(
            msgs(json!({"properties": {"list": {"type": "array"}}})),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[list].items: Required value: must be specified",
                "spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root",
            ]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"a": {"type": "string"}},
                        "additionalProperties": {"type": "string"}})
            ),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            ]
        );
        assert_eq!(
            msgs(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": false})),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
            ]
        );
        assert_eq!(
            msgs(json!({"type": "string"})),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"
            ]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"a": {"type": "string",
                        "anyOf": [{"type": "string", "description": "x"}]}}})
            ),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[a].anyOf[0].type: Forbidden: must be empty to be structural",
                "spec.versions[0].schema.openAPIV3Schema.properties[a].anyOf[0].description: Forbidden: must be empty to be structural",
            ]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"metadata": {"type": "object",
                        "properties": {"labels": {"type": "object"}}}}})
            ),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            ]
        );
        assert_eq!(
            msgs(json!({"type": "object", "properties": {"a": {"type": "thing"}}})),
            vec![
                "spec.versions[0].schema.openAPIV3Schema.properties[a].type: Unsupported value: \"thing\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
            ]
        );
    }
}
