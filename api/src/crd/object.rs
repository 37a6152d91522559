//! The object type of custom resources: typed metadata (so the generic registry can read and
//! set it like any kind's) and everything else as JSON, as upstream's `Unstructured`.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A custom resource: `metadata` typed, the rest (`apiVersion`, `kind`, `spec`, `status`, ...)
/// as JSON. Serializes with sorted keys, as Go's encoding of a map does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CustomObject {
    pub metadata: ObjectMeta,
    /// Every top-level field but `metadata`.
    pub content: Map<String, Value>,
}

impl CustomObject {
    pub fn api_version(&self) -> Option<&str> {
        self.content.get("apiVersion").and_then(Value::as_str)
    }

    pub fn kind(&self) -> Option<&str> {
        self.content.get("kind").and_then(Value::as_str)
    }

    pub fn set_api_version(&mut self, api_version: &str) {
        self.content
            .insert("apiVersion".into(), Value::String(api_version.into()));
    }

    /// The whole object as JSON.
    pub fn to_value(&self) -> Value {
        let mut m = self.content.clone();
        m.insert(
            "metadata".into(),
            serde_json::to_value(&self.metadata).unwrap_or_else(|_| Value::Object(Map::new())),
        );
        Value::Object(m)
    }
}

impl Serialize for CustomObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.content.len() + 1))?;
        let mut meta_done = false;
        for (k, v) in &self.content {
            if !meta_done && k.as_str() > "metadata" {
                map.serialize_entry("metadata", &self.metadata)?;
                meta_done = true;
            }
            if k == "metadata" {
                continue;
            }
            map.serialize_entry(k, v)?;
        }
        if !meta_done {
            map.serialize_entry("metadata", &self.metadata)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for CustomObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CustomObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<CustomObject, A::Error> {
                let mut content = Map::new();
                let mut metadata = ObjectMeta::default();
                while let Some(key) = access.next_key::<String>()? {
                    if key == "metadata" {
                        let value: Value = access.next_value()?;
                        if !value.is_null() {
                            metadata = serde_json::from_value(value)
                                .map_err(|e| de::Error::custom(format!("metadata: {e}")))?;
                        }
                    } else {
                        let value: Value = access.next_value()?;
                        content.insert(key, value);
                    }
                }
                Ok(CustomObject { metadata, content })
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_sorted() {
        let v = json!({"spec": {"b": 1, "a": [1.5, null]}, "kind": "CronTab", "apiVersion": "x.io/v1",
                       "metadata": {"name": "a", "bogus": 1}, "status": {}, "zzz": true});
        let o: CustomObject = serde_json::from_value(v).unwrap();
        assert_eq!(o.metadata.name.as_deref(), Some("a"));
        assert_eq!(o.kind(), Some("CronTab"));
        let text = serde_json::to_string(&o).unwrap();
        assert_eq!(
            text,
            r#"{"apiVersion":"x.io/v1","kind":"CronTab","metadata":{"name":"a"},"spec":{"a":[1.5,null],"b":1},"status":{},"zzz":true}"#
        );
        let back: CustomObject = serde_json::from_str(&text).unwrap();
        assert_eq!(back, o);
        assert!(serde_json::from_value::<CustomObject>(json!({"metadata": {"name": 5}})).is_err());
        assert!(serde_json::from_value::<CustomObject>(json!([1])).is_err());
    }
}
