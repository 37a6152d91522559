//! Table output of custom resources, as upstream's CRD table convertor: a `Name` column, then
//! one column per `additionalPrinterColumns` entry of the served version (an `Age` column of
//! `.metadata.creationTimestamp` when the version declares none).

use jiff::Timestamp;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::jsonpath::{JsonPath, go_print};
use crate::table::{ColumnDefinition, Row, translate_timestamp_since};

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_TIMESTAMP_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// The columns of one served version.
#[derive(Clone, Debug)]
pub struct Columns {
    definitions: Vec<ColumnDefinition>,
    /// Each custom column's path (`None` when it did not parse) and type.
    paths: Vec<(Option<JsonPath>, String)>,
}

impl Columns {
    /// Columns from a version's `additionalPrinterColumns`; upstream's default `Age` column
    /// when there are none.
    pub fn new(columns: &[CustomResourceColumnDefinition]) -> Columns {
        let default_age = [CustomResourceColumnDefinition {
            name: "Age".into(),
            type_: "date".into(),
            description: Some(CREATION_TIMESTAMP_DOC.into()),
            json_path: ".metadata.creationTimestamp".into(),
            ..Default::default()
        }];
        let columns = if columns.is_empty() {
            &default_age[..]
        } else {
            columns
        };
        let mut definitions = vec![ColumnDefinition {
            name: "Name".into(),
            type_: "string".into(),
            format: "name".into(),
            description: NAME_DOC.into(),
            priority: 0,
        }];
        let mut paths = Vec::new();
        for c in columns {
            definitions.push(ColumnDefinition {
                name: c.name.clone(),
                type_: c.type_.clone(),
                format: c.format.clone().unwrap_or_default(),
                description: c
                    .description
                    .clone()
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| {
                        format!(
                            "Custom resource definition column (in JSONPath format): {}",
                            c.json_path
                        )
                    }),
                priority: c.priority.unwrap_or(0),
            });
            paths.push((JsonPath::parse(&c.json_path).ok(), c.type_.clone()));
        }
        Columns { definitions, paths }
    }

    pub fn definitions(&self) -> Vec<ColumnDefinition> {
        self.definitions.clone()
    }

    /// The cells of one object's row.
    pub fn row(&self, object: &Value, now: Timestamp) -> Row {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let mut cells = vec![Value::String(name.to_string())];
        for (path, type_) in &self.paths {
            let value = path.as_ref().and_then(|p| p.first(object));
            cells.push(match value {
                None => Value::Null,
                Some(v) => cell(type_, v, now),
            });
        }
        Row {
            cells,
            conditions: Vec::new(),
        }
    }
}

/// Upstream's `cellForJSONValue`, and `string` columns printed as JSONPath prints them.
fn cell(type_: &str, v: &Value, now: Timestamp) -> Value {
    if v.is_null() {
        return Value::Null;
    }
    match type_ {
        "string" => Value::String(go_print(v)),
        "integer" => match v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)) {
            Some(i) => Value::from(i),
            None => Value::Null,
        },
        "number" => match v.as_f64() {
            Some(f) => serde_json::Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            None => Value::Null,
        },
        "boolean" => match v {
            Value::Bool(_) => v.clone(),
            _ => Value::Null,
        },
        "date" => match v.as_str() {
            Some("") => Value::String("<unknown>".into()),
            Some(s) => match s.parse::<Timestamp>() {
                Ok(t) => Value::String(translate_timestamp_since(Some(&Time(t)), now)),
                Err(_) => Value::String("<invalid>".into()),
            },
            None => Value::Null,
        },
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn columns_and_cells() {
        let cols = Columns::new(&[
            CustomResourceColumnDefinition {
                name: "Replicas".into(),
                type_: "integer".into(),
                json_path: ".spec.replicas".into(),
                ..Default::default()
            },
            CustomResourceColumnDefinition {
                name: "Image".into(),
                type_: "string".into(),
                json_path: ".spec.image".into(),
                priority: Some(1),
                description: Some("the image".into()),
                ..Default::default()
            },
            CustomResourceColumnDefinition {
                name: "Created".into(),
                type_: "date".into(),
                json_path: ".metadata.creationTimestamp".into(),
                ..Default::default()
            },
        ]);
        let defs = cols.definitions();
        assert_eq!(
            defs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["Name", "Replicas", "Image", "Created"]
        );
        assert_eq!(
            defs[1].description,
            "Custom resource definition column (in JSONPath format): .spec.replicas"
        );
        assert_eq!(defs[2].priority, 1);
        let now: Timestamp = "2024-01-01T00:10:00Z".parse().unwrap();
        let obj = json!({"metadata": {"name": "a", "creationTimestamp": "2024-01-01T00:00:00Z"},
                         "spec": {"replicas": 3.0}});
        assert_eq!(
            cols.row(&obj, now).cells,
            vec![json!("a"), json!(3), Value::Null, json!("10m")]
        );
        let default = Columns::new(&[]);
        assert_eq!(default.definitions()[1].name, "Age");
        assert_eq!(default.row(&obj, now).cells[1], json!("10m"));
    }
}
