//! `metrics.k8s.io/v1beta1`, what `kubectl top` and the HPA controller read: served by the API
//! server itself instead of an aggregated metrics-server, with metrics-server's semantics.
//! Usage comes from each node's kubelet (`/stats/summary`, see [`scrape`]). Nodes, pods and
//! containers without two readings are left out of lists and are NotFound to a get, as in
//! metrics-server. Only nodes that advertise a kubelet endpoint are scraped (hollow nodes do
//! not).
//!
//! The kinds are described in OpenAPI under upstream's names (`kubectl explain podmetrics`),
//! and print as metrics-server's Tables ([`table`]).

mod scrape;
mod table;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use axum::response::Response;
use http::StatusCode;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta, Time};
use minik8s_api::selector::{FieldSelector, Selector};
use minik8s_api::validation::NameRule;
use minik8s_api::{ApiError, ResourceInfo, Target};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use self::scrape::{History, Scraper, Timing, has_kubelet, kubelet_source};
use self::table::MetricsPrinter;
use super::openapi::{Gvk, KindSchema};
use super::render::{self, Render, Renderer};
use super::request::Verb;
use super::resource::{ApiRequest, Endpoint};
use crate::registry::generic::ListQuery;
use crate::registry::watch_cache::Cached;
use crate::server::ApiServer;

const GROUP: &str = "metrics.k8s.io";
const VERSION: &str = "v1beta1";
const API_VERSION: &str = "metrics.k8s.io/v1beta1";

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const TIMESTAMP_DOC: &str = "The following fields define time interval from which metrics were collected from the interval [Timestamp-Window, Timestamp].";
const USAGE_DOC: &str = "The memory usage is the memory working set.";

/// NodeMetrics sets resource usage metrics of a node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics")]
pub struct NodeMetrics {
    #[serde(default)]
    #[schemars(description = KIND_DOC)]
    pub kind: String,
    #[serde(default)]
    #[schemars(description = API_VERSION_DOC)]
    pub api_version: String,
    #[serde(default)]
    #[schemars(description = METADATA_DOC)]
    pub metadata: ObjectMeta,
    #[schemars(description = TIMESTAMP_DOC)]
    pub timestamp: Time,
    pub window: String,
    #[schemars(description = USAGE_DOC)]
    pub usage: BTreeMap<String, Quantity>,
}

/// PodMetrics sets resource usage metrics of a pod.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics")]
pub struct PodMetrics {
    #[serde(default)]
    #[schemars(description = KIND_DOC)]
    pub kind: String,
    #[serde(default)]
    #[schemars(description = API_VERSION_DOC)]
    pub api_version: String,
    #[serde(default)]
    #[schemars(description = METADATA_DOC)]
    pub metadata: ObjectMeta,
    #[schemars(description = TIMESTAMP_DOC)]
    pub timestamp: Time,
    pub window: String,
    #[schemars(
        description = "Metrics for all containers are collected within the same time window.",
        extend("x-kubernetes-list-type" = "atomic")
    )]
    pub containers: Vec<ContainerMetrics>,
}

/// ContainerMetrics sets resource usage metrics of a container.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, JsonSchema)]
#[schemars(rename = "io.k8s.metrics.pkg.apis.metrics.v1beta1.ContainerMetrics")]
pub struct ContainerMetrics {
    #[schemars(description = "Container name corresponding to the one from pod.spec.containers.")]
    pub name: String,
    #[schemars(description = USAGE_DOC)]
    pub usage: BTreeMap<String, Quantity>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Nodes,
    Pods,
}

pub struct MetricsEndpoint {
    info: ResourceInfo,
    kind: Kind,
    server: Weak<ApiServer>,
    scraper: Arc<Scraper>,
}

fn info(kind: &str, plural: &str, namespaced: bool) -> ResourceInfo {
    ResourceInfo {
        group: GROUP.into(),
        version: VERSION.into(),
        kind: kind.into(),
        list_kind: format!("{kind}List"),
        plural: plural.into(),
        singular: String::new(),
        namespaced,
        short_names: vec![],
        categories: vec![],
        verbs: vec!["get".into(), "list".into()],
        subresources: vec![],
        name_rule: NameRule::Dns1123Subdomain,
    }
}

/// Serves `nodes` and `pods` of `metrics.k8s.io/v1beta1`, sharing one scraper, and describes
/// their kinds in OpenAPI (the list kinds are described from the items).
pub fn register(server: &Arc<ApiServer>) {
    let scraper = Arc::new(Scraper::new(
        kubelet_source(Arc::downgrade(server)),
        Timing::default(),
    ));
    for (kind, plural, namespaced, k) in [
        ("NodeMetrics", "nodes", false, Kind::Nodes),
        ("PodMetrics", "pods", true, Kind::Pods),
    ] {
        server.register(Arc::new(MetricsEndpoint {
            info: info(kind, plural, namespaced),
            kind: k,
            server: Arc::downgrade(server),
            scraper: scraper.clone(),
        }));
    }
    server.openapi.register_schema(
        Gvk::new(GROUP, VERSION, "NodeMetrics"),
        KindSchema::of::<NodeMetrics>(),
    );
    server.openapi.register_schema(
        Gvk::new(GROUP, VERSION, "PodMetrics"),
        KindSchema::of::<PodMetrics>(),
    );
}

fn list_query(req: &ApiRequest) -> Result<ListQuery, ApiError> {
    let labels = match req.param("labelSelector") {
        Some(s) => Selector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Selector::everything(),
    };
    let fields = match req.param("fieldSelector") {
        Some(s) => FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.0))?,
        None => FieldSelector::default(),
    };
    Ok(ListQuery {
        labels,
        fields,
        ..Default::default()
    })
}

/// A name and uid, all a pruning needs of a node.
#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl MetricsEndpoint {
    fn renderer(&self, req: &ApiRequest) -> Result<Renderer, ApiError> {
        let render = render::negotiate(&req.headers, req.param("includeObject"))?;
        if render == Render::Protobuf {
            // metrics-server's kinds have no protobuf form here.
            return Err(ApiError::not_acceptable(&[
                "application/json",
                "application/yaml",
            ]));
        }
        Ok(Renderer {
            render,
            kind: self.info.kind.clone(),
            api_version: API_VERSION.into(),
            list_kind: self.info.list_kind.clone(),
            printer: Arc::new(MetricsPrinter),
        })
    }

    /// Forgets the scrapes of nodes that are gone, once per resolution: a consistent list of
    /// the nodes from the watch cache, names and uids only.
    async fn prune(&self, server: &ApiServer) {
        if !self.scraper.prune_due() {
            return;
        }
        let listed = server
            .registry::<Node>()
            .list_shared(None, &ListQuery::default())
            .await;
        let nodes = match listed {
            Ok(out) => out.items,
            Err(e) => {
                tracing::debug!(error = %e.message, "listing nodes to prune metrics failed");
                return;
            }
        };
        let live: HashMap<String, String> = nodes
            .iter()
            .filter_map(|n| serde_json::from_slice::<Named>(&n.json()).ok())
            .map(|n| {
                let m = n.metadata;
                (m.name.unwrap_or_default(), m.uid.unwrap_or_default())
            })
            .collect();
        self.scraper.retain(&live);
    }

    async fn node_metrics(&self, server: &ApiServer, nodes: &[Node]) -> Vec<NodeMetrics> {
        self.prune(server).await;
        let scraped = futures::future::join_all(nodes.iter().filter(|n| has_kubelet(n)).map(
            |n| async move {
                let h = self.scraper.history(n).await?;
                h.node_metrics(n)
            },
        ))
        .await;
        scraped.into_iter().flatten().collect()
    }

    async fn pod_metrics(&self, server: &ApiServer, pods: &[Pod]) -> Vec<PodMetrics> {
        self.prune(server).await;
        let node_names: BTreeSet<String> = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .filter(|n| !n.is_empty())
            .collect();
        let nodes = server.registry::<Node>();
        let histories = futures::future::join_all(node_names.iter().map(|name| {
            let nodes = &nodes;
            async move {
                let node = nodes.get(None, name).await.ok()?;
                if !has_kubelet(&node) {
                    return None;
                }
                Some((name.clone(), self.scraper.history(&node).await?))
            }
        }))
        .await;
        let histories: BTreeMap<String, History> = histories.into_iter().flatten().collect();
        let mut out: Vec<PodMetrics> = pods
            .iter()
            .filter_map(|p| {
                let node = p.spec.as_ref()?.node_name.as_ref()?;
                histories.get(node)?.pod_metrics(p)
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        out
    }

    /// The objects `req` lists, from the watch cache as a consistent read.
    async fn list<K>(server: &ApiServer, req: &ApiRequest) -> Result<Vec<K>, ApiError>
    where
        K: minik8s_api::strategy::Kind,
    {
        let out = server
            .registry::<K>()
            .list_shared(req.namespace(), &list_query(req)?)
            .await?;
        out.items
            .iter()
            .map(|c| c.decode().map_err(ApiError::internal))
            .collect()
    }

    async fn dispatch(&self, req: &ApiRequest) -> Result<Response, ApiError> {
        let server = self
            .server
            .upgrade()
            .ok_or_else(|| ApiError::internal("the server is shutting down"))?;
        let t = &req.target;
        let resource = match self.kind {
            Kind::Nodes => "nodemetrics",
            Kind::Pods => "podmetrics",
        };
        let target = Target {
            group: GROUP,
            resource,
            name: t.name.as_deref().unwrap_or_default(),
        };
        if t.subresource.is_some() {
            return Err(ApiError::path_not_found());
        }
        if !matches!(t.verb, Verb::Get | Verb::List) {
            return Err(ApiError::method_not_supported(target, t.verb.as_str()));
        }
        let renderer = self.renderer(req)?;
        match (&t.verb, self.kind) {
            (Verb::Get, Kind::Nodes) => {
                let node: Node = server.registry::<Node>().get(None, req.name()).await?;
                let m = self
                    .node_metrics(&server, std::slice::from_ref(&node))
                    .await;
                let m = m
                    .into_iter()
                    .next()
                    .ok_or_else(|| ApiError::not_found(target))?;
                Ok(renderer.object(StatusCode::OK, &m))
            }
            (_, Kind::Nodes) => {
                let nodes: Vec<Node> = Self::list(&server, req).await?;
                let mut items = self.node_metrics(&server, &nodes).await;
                items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                let items: Vec<_> = items.into_iter().map(Cached::new).collect();
                Ok(renderer.list(&items, ListMeta::default()))
            }
            (Verb::Get, Kind::Pods) => {
                let ns = req.namespace().unwrap_or_default();
                let pod: Pod = server.registry::<Pod>().get(Some(ns), req.name()).await?;
                let m = self.pod_metrics(&server, std::slice::from_ref(&pod)).await;
                let qualified = format!("{ns}/{}", req.name());
                let m = m.into_iter().next().ok_or_else(|| {
                    ApiError::not_found(Target {
                        name: &qualified,
                        ..target
                    })
                })?;
                Ok(renderer.object(StatusCode::OK, &m))
            }
            (_, Kind::Pods) => {
                let pods: Vec<Pod> = Self::list(&server, req).await?;
                let items = self.pod_metrics(&server, &pods).await;
                let items: Vec<_> = items.into_iter().map(Cached::new).collect();
                Ok(renderer.list(&items, ListMeta::default()))
            }
        }
    }
}

#[async_trait]
impl Endpoint for MetricsEndpoint {
    fn info(&self) -> &ResourceInfo {
        &self.info
    }

    async fn serve(&self, req: ApiRequest) -> Response {
        match self.dispatch(&req).await {
            Ok(resp) => resp,
            Err(e) => render::error_response(&req.headers, &e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::openapi::kind_definitions;

    #[test]
    fn kinds_are_described_under_upstream_names() {
        let gvk = Gvk::new(GROUP, VERSION, "PodMetrics");
        let (name, defs) = kind_definitions(&gvk, Some(&KindSchema::of::<PodMetrics>()));
        assert_eq!(name, "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics");
        let pod = &defs[&name];
        assert_eq!(
            pod["description"],
            "PodMetrics sets resource usage metrics of a pod."
        );
        let required: BTreeSet<&str> = pod["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        assert_eq!(
            required,
            BTreeSet::from(["containers", "timestamp", "window"])
        );
        assert_eq!(
            pod["properties"]["containers"]["x-kubernetes-list-type"],
            "atomic"
        );
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            serde_json::json!([{"group": GROUP, "kind": "PodMetrics", "version": VERSION}])
        );
        let container = &defs["io.k8s.metrics.pkg.apis.metrics.v1beta1.ContainerMetrics"];
        assert_eq!(
            container["properties"]["usage"]["additionalProperties"]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"
        );
    }
}
