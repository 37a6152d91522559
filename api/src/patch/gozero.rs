//! The fields upstream's Go types always serialize: non-pointer structs (`resources: {}`,
//! `spec.template: {}`) and fields without `omitempty` (`creationTimestamp: null`,
//! `containers: null`). Upstream's field manager compares Go-typed objects, so these fields
//! exist on both sides of every comparison; filling them in before comparing makes the owned
//! fields (and `.` members) of built-in kinds come out as upstream's. The table is data from
//! upstream's Go types (`hack/update-go-zero-fields.py`).

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::schema::{Schema, TypeRef};

static TABLE: LazyLock<HashMap<String, Map<String, Value>>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("go-zero-fields.json")).expect("go-zero-fields.json parses")
});

/// Whether objects of `schema`'s root type are Go-typed upstream (built-in kinds).
pub fn applies(schema: &Schema) -> bool {
    schema
        .atom(schema.root())
        .name
        .as_ref()
        .is_some_and(|n| TABLE.contains_key(n))
}

/// `value` with the fields a Go-typed object would have, for comparing.
pub fn filled(schema: &Schema, value: &Value) -> Value {
    let mut v = value.clone();
    fill(schema, schema.root(), &mut v, true);
    v
}

/// Adds to `value` the fields upstream serializes as non-null zero values when they are unset
/// (`status: {replicas: 0}`, `resources: {}`), so objects read back as they do from
/// upstream: clients' typed models expect them. Nulls are left out: a missing field reads the
/// same. Returns whether anything was added.
pub fn fill_zero_values(schema: &Schema, value: &mut Value) -> bool {
    fill(schema, schema.root(), value, false)
}

fn fill(schema: &Schema, t: TypeRef, v: &mut Value, nulls: bool) -> bool {
    let mut added = false;
    match v {
        Value::Object(m) => {
            if let Some(zeros) = schema.atom(t).name.as_ref().and_then(|n| TABLE.get(n)) {
                for (field, zero) in zeros {
                    if !m.contains_key(field) && (nulls || !zero.is_null()) {
                        m.insert(field.clone(), zero.clone());
                        added = true;
                    }
                }
            }
            let Some((mt, _)) = schema.map_of(t) else {
                return added;
            };
            for (k, child) in m.iter_mut() {
                if let Some(ft) = schema.map_field_type(mt, k) {
                    added |= fill(schema, ft, child, nulls);
                }
            }
        }
        Value::Array(items) => {
            if let Some(l) = schema.list_of(t) {
                for item in items {
                    added |= fill(schema, l.elem, item, nulls);
                }
            }
        }
        _ => {}
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fills_go_zero_fields() {
        let defs = json!({
            "io.k8s.api.apps.v1.Deployment": {"type": "object", "properties": {
                "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
                "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}]},
                "status": {"type": "object"},
            }},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {
                "name": {"type": "string"}, "creationTimestamp": {"type": "string"}}},
            "io.k8s.api.apps.v1.DeploymentSpec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "selector": {"type": "object"},
                "strategy": {"type": "object"},
                "template": {"type": "object"},
            }},
        });
        let s =
            Schema::from_definitions(defs.as_object().unwrap(), "io.k8s.api.apps.v1.Deployment");
        assert!(applies(&s));
        assert_eq!(
            filled(&s, &json!({"spec": {"replicas": 1}})),
            json!({
                "metadata": {"creationTimestamp": null},
                "spec": {"replicas": 1, "selector": null, "strategy": {}, "template": {}},
                "status": {},
            })
        );
        let mut v = json!({"spec": {"replicas": 1}});
        assert!(fill_zero_values(&s, &mut v));
        assert_eq!(
            v,
            json!({"metadata": {}, "spec": {"replicas": 1, "strategy": {}, "template": {}}, "status": {}})
        );
        assert!(!fill_zero_values(&s, &mut v), "nothing left to add");
        assert!(!applies(&Schema::deduced()));
    }
}
