//! An `audit.k8s.io/v1` Event, the line the log holds for each stage of a request, with the
//! fields in upstream's order.

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Status};
use serde::Serialize;

use super::policy::{Level, Stage};

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: UserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "status_fields"
    )]
    pub response_status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<serde_json::Value>,
    pub request_received_timestamp: MicroTime,
    pub stage_timestamp: MicroTime,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A Status as upstream's event holds it: its fields without `kind` and `apiVersion`.
fn status_fields<S: serde::Serializer>(status: &Option<Status>, s: S) -> Result<S::Ok, S::Error> {
    let mut value = serde_json::to_value(status).map_err(serde::ser::Error::custom)?;
    if let Some(map) = value.as_object_mut() {
        map.remove("kind");
        map.remove("apiVersion");
    }
    value.serialize(s)
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

impl ObjectReference {
    /// Completes the reference from the request's object, as upstream's `LogRequestObject`
    /// (a create names its object in the body).
    pub fn complete_from(&mut self, object: &serde_json::Value) {
        let meta = &object["metadata"];
        let fill = |field: &mut String, value: &serde_json::Value| {
            if field.is_empty()
                && let Some(v) = value.as_str()
            {
                *field = v.to_string();
            }
        };
        fill(&mut self.namespace, &meta["namespace"]);
        fill(&mut self.name, &meta["name"]);
        fill(&mut self.uid, &meta["uid"]);
        fill(&mut self.resource_version, &meta["resourceVersion"]);
    }
}

/// The addresses a request came from, as upstream's `utilnet.SourceIPs`: the
/// `X-Forwarded-For` chain, `X-Real-Ip` if not in it, then the peer unless it ends the chain.
pub fn source_ips(headers: &http::HeaderMap, peer: Option<std::net::IpAddr>) -> Vec<String> {
    let mut ips: Vec<std::net::IpAddr> = Vec::new();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(chain) = header("x-forwarded-for") {
        ips.extend(
            chain
                .split(',')
                .filter_map(|p| p.trim().parse::<std::net::IpAddr>().ok()),
        );
    }
    if let Some(ip) = header("x-real-ip").and_then(|v| v.trim().parse().ok())
        && !ips.contains(&ip)
    {
        ips.push(ip);
    }
    if let Some(peer) = peer
        && ips.last() != Some(&peer)
    {
        ips.push(peer);
    }
    ips.iter().map(|ip| ip.to_string()).collect()
}

/// Removes `metadata.managedFields` from an object or from each item of a list.
pub fn strip_managed_fields(object: &mut serde_json::Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    if let Some(items) = object.get_mut("items").and_then(|i| i.as_array_mut()) {
        for item in items {
            if let Some(meta) = item.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("managedFields");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn source_ips_follow_the_proxy_chain_then_the_peer() {
        let mut h = http::HeaderMap::new();
        let peer = Some("10.0.0.9".parse().unwrap());
        assert_eq!(source_ips(&h, peer), ["10.0.0.9"]);
        h.insert(
            "x-forwarded-for",
            "1.2.3.4, bogus, 10.0.0.9".parse().unwrap(),
        );
        h.insert("x-real-ip", "5.6.7.8".parse().unwrap());
        assert_eq!(
            source_ips(&h, peer),
            ["1.2.3.4", "10.0.0.9", "5.6.7.8", "10.0.0.9"]
        );
        h.remove("x-real-ip");
        assert_eq!(source_ips(&h, peer), ["1.2.3.4", "10.0.0.9"]);
    }

    #[test]
    fn managed_fields_go_from_objects_and_list_items() {
        let mut obj = json!({"metadata": {"name": "a", "managedFields": [{}]}});
        strip_managed_fields(&mut obj);
        assert_eq!(obj, json!({"metadata": {"name": "a"}}));
        let mut list = json!({"metadata": {}, "items": [{"metadata": {"managedFields": []}}]});
        strip_managed_fields(&mut list);
        assert_eq!(list, json!({"metadata": {}, "items": [{"metadata": {}}]}));
    }

    #[test]
    fn a_create_names_its_object_from_the_body() {
        let mut r = ObjectReference {
            resource: "configmaps".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        r.complete_from(&json!({"metadata": {"name": "c", "namespace": "other"}}));
        assert_eq!(r.name, "c");
        assert_eq!(r.namespace, "default");
    }
}
