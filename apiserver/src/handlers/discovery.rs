//! Discovery, legacy and aggregated: how clients learn what is served. Built from the same
//! resource table the router dispatches on, so the two always agree.

use axum::response::Response;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};
use kube_core::discovery::v2::{
    APIGroupDiscovery, APIGroupDiscoveryList, APIResourceDiscovery, APISubresourceDiscovery,
    APIVersionDiscovery, GroupVersionKind,
};
use minik8s_api::ResourceInfo;
use minik8s_api::crd::version::compare_priority;
use minik8s_api::registry::group_order;

use super::codec::json;

/// Which aggregated discovery version the client asked for, if any.
pub fn wants_aggregated(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())?;
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if p.contains("as=APIGroupDiscoveryList") && p.contains("g=apidiscovery.k8s.io") {
            if p.contains("v=v2beta1") {
                return Some("v2beta1");
            }
            if p.contains("v=v2") {
                return Some("v2");
            }
        }
        if p.starts_with("application/json") && !p.contains("as=") {
            // Plain JSON comes before any aggregated type: the client prefers the legacy document.
            return None;
        }
    }
    None
}

fn gvk(group: &str, version: &str, kind: &str) -> Option<GroupVersionKind> {
    Some(GroupVersionKind {
        group: Some(group.into()),
        version: Some(version.into()),
        kind: Some(kind.into()),
    })
}

fn resource_discovery(r: &ResourceInfo) -> APIResourceDiscovery {
    APIResourceDiscovery {
        resource: Some(r.plural.clone()),
        response_kind: gvk(&r.group, &r.version, &r.kind),
        scope: Some(
            if r.namespaced {
                "Namespaced"
            } else {
                "Cluster"
            }
            .into(),
        ),
        singular_resource: Some(r.singular.clone()),
        verbs: r.verbs.clone(),
        short_names: r.short_names.clone(),
        categories: r.categories.clone(),
        subresources: r
            .subresources
            .iter()
            .map(|s| APISubresourceDiscovery {
                subresource: Some(s.name.clone()),
                response_kind: gvk(&s.group, &s.version, &s.kind),
                accepted_types: vec![],
                verbs: s.verbs.clone(),
            })
            .collect(),
    }
}

/// A group's versions, preferred first, each with its resources.
type Versions<'a> = Vec<(String, Vec<&'a ResourceInfo>)>;

/// Groups in discovery order, each with its versions (preferred first) and their resources.
fn grouped(resources: &[ResourceInfo]) -> Vec<(String, Versions<'_>)> {
    let mut groups: Vec<(String, Versions<'_>)> = Vec::new();
    let order = group_order();
    let mut sorted: Vec<&ResourceInfo> = resources.iter().collect();
    sorted.sort_by_key(|r| {
        order
            .iter()
            .position(|g| *g == r.group)
            .unwrap_or(usize::MAX)
    });
    for r in sorted {
        let gi = match groups.iter().position(|(g, _)| *g == r.group) {
            Some(i) => i,
            None => {
                groups.push((r.group.clone(), Vec::new()));
                groups.len() - 1
            }
        };
        let versions = &mut groups[gi].1;
        match versions.iter_mut().find(|(v, _)| *v == r.version) {
            Some((_, list)) => list.push(r),
            None => versions.push((r.version.clone(), vec![r])),
        }
    }
    // A group's preferred version first, as upstream orders versions (custom resources' groups
    // may serve several).
    for (_, versions) in &mut groups {
        versions.sort_by(|(a, _), (b, _)| compare_priority(a, b));
    }
    groups
}

fn aggregated(resources: &[ResourceInfo], core: bool, version: &str) -> Response {
    let items = grouped(resources)
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(group, versions)| APIGroupDiscovery {
            metadata: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(group.clone()),
                ..Default::default()
            }),
            versions: versions
                .into_iter()
                .map(|(v, rs)| APIVersionDiscovery {
                    version: Some(v),
                    resources: rs.into_iter().map(resource_discovery).collect(),
                    freshness: Some("Current".into()),
                })
                .collect(),
        })
        .collect();
    let list = APIGroupDiscoveryList {
        metadata: None,
        items,
    };
    let mut value = serde_json::to_value(list).unwrap_or_default();
    value["kind"] = "APIGroupDiscoveryList".into();
    value["apiVersion"] = format!("apidiscovery.k8s.io/{version}").into();
    value["metadata"] = serde_json::json!({});
    let mut resp = json(StatusCode::OK, &value);
    let ct = format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&ct).expect("valid header"),
    );
    resp
}

/// `GET /api`.
pub fn core_versions(resources: &[ResourceInfo], headers: &HeaderMap, address: &str) -> Response {
    if let Some(v) = wants_aggregated(headers) {
        return aggregated(resources, true, v);
    }
    let mut value = serde_json::to_value(APIVersions {
        versions: vec!["v1".into()],
        server_address_by_client_cidrs: vec![ServerAddressByClientCIDR {
            client_cidr: "0.0.0.0/0".into(),
            server_address: address.into(),
        }],
    })
    .unwrap_or_default();
    value["kind"] = "APIVersions".into();
    json(StatusCode::OK, &value)
}

fn api_group(group: &str, versions: &Versions<'_>) -> APIGroup {
    let gvs: Vec<GroupVersionForDiscovery> = versions
        .iter()
        .map(|(v, _)| GroupVersionForDiscovery {
            group_version: format!("{group}/{v}"),
            version: v.clone(),
        })
        .collect();
    APIGroup {
        name: group.to_string(),
        preferred_version: gvs.first().cloned(),
        server_address_by_client_cidrs: None,
        versions: gvs,
    }
}

/// `GET /apis`; aggregated discovery only when `aggregated_ok` (upstream serves `/apis/` from its
/// plain handler, which never negotiates it).
pub fn groups(resources: &[ResourceInfo], headers: &HeaderMap, aggregated_ok: bool) -> Response {
    if aggregated_ok && let Some(v) = wants_aggregated(headers) {
        return aggregated(resources, false, v);
    }
    let groups = grouped(resources)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| api_group(g, versions))
        .collect();
    let mut value = serde_json::to_value(APIGroupList { groups }).unwrap_or_default();
    value["kind"] = "APIGroupList".into();
    value["apiVersion"] = "v1".into();
    json(StatusCode::OK, &value)
}

/// `GET /apis/<group>`; `None` for a group not served.
pub fn group(resources: &[ResourceInfo], name: &str) -> Option<Response> {
    let groups = grouped(resources);
    let (g, versions) = groups.iter().find(|(g, _)| g == name && !g.is_empty())?;
    let mut value = serde_json::to_value(api_group(g, versions)).unwrap_or_default();
    value["kind"] = "APIGroup".into();
    value["apiVersion"] = "v1".into();
    Some(json(StatusCode::OK, &value))
}

/// `GET /api/v1` or `/apis/<group>/<version>`; `None` for a group version not served.
pub fn resource_list(resources: &[ResourceInfo], group: &str, version: &str) -> Option<Response> {
    let mut list: Vec<APIResource> = Vec::new();
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        list.push(APIResource {
            name: r.plural.clone(),
            singular_name: r.singular.clone(),
            namespaced: r.namespaced,
            kind: r.kind.clone(),
            verbs: r.verbs.clone(),
            short_names: (!r.short_names.is_empty()).then(|| r.short_names.clone()),
            categories: (!r.categories.is_empty()).then(|| r.categories.clone()),
            ..Default::default()
        });
        for s in &r.subresources {
            // A subresource of another group version names both (kubectl finds
            // `pods/eviction` only so).
            let other = s.group != r.group || s.version != r.version;
            list.push(APIResource {
                name: format!("{}/{}", r.plural, s.name),
                singular_name: String::new(),
                namespaced: r.namespaced,
                group: other.then(|| s.group.clone()),
                version: other.then(|| s.version.clone()),
                kind: s.kind.clone(),
                verbs: s.verbs.clone(),
                ..Default::default()
            });
        }
    }
    if list.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut value = serde_json::to_value(APIResourceList {
        group_version: gv,
        resources: list,
    })
    .unwrap_or_default();
    value["kind"] = "APIResourceList".into();
    value["apiVersion"] = "v1".into();
    Some(json(StatusCode::OK, &value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_negotiation() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static(kube_core::discovery::v2::ACCEPT_AGGREGATED_DISCOVERY_V2),
        );
        assert_eq!(wants_aggregated(&h), Some("v2"));
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, */*"),
        );
        assert_eq!(wants_aggregated(&h), None);
    }
}
