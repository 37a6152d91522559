//! `metrics.k8s.io/v1beta1`, what `kubectl top` reads: served by the API server itself instead
//! of an aggregated metrics-server, with metrics-server's semantics. Usage comes from each
//! node's kubelet (`/stats/summary`), scraped when asked for and at most once per resolution
//! period; CPU is a rate over the cumulative CPU time of the last two scrapes, so a node is
//! scraped twice, a second apart, the first time it is asked about. Nodes, pods and containers
//! without two samples are left out of lists and are NotFound to a get, as in metrics-server.
//! Only nodes that advertise a kubelet endpoint are scraped (hollow nodes do not).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::response::Response;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use minik8s_api::selector::{FieldSelector, Selector};
use minik8s_api::validation::NameRule;
use minik8s_api::{ApiError, ResourceInfo, Target};
use serde::{Deserialize, Serialize};

use super::connect;
use super::render;
use super::request::Verb;
use super::resource::{ApiRequest, Endpoint};
use crate::kubelet::kubelet_address;
use crate::registry::generic::ListQuery;
use crate::server::ApiServer;

const GROUP: &str = "metrics.k8s.io";
const VERSION: &str = "v1beta1";

/// How long a scrape stays current (metrics-server's default `--metric-resolution`).
const RESOLUTION: Duration = Duration::from_secs(15);
/// The gap between the two first scrapes of a node: a rate needs two readings.
const FIRST_WINDOW: Duration = Duration::from_secs(1);
/// How long a kubelet may take to answer (metrics-server's default `--kubelet-request-timeout`
/// is 10s).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// `metrics.k8s.io/v1beta1` NodeMetrics.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetrics {
    pub kind: String,
    pub api_version: String,
    pub metadata: ObjectMeta,
    pub timestamp: Time,
    pub window: String,
    pub usage: BTreeMap<String, Quantity>,
}

/// `metrics.k8s.io/v1beta1` PodMetrics.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodMetrics {
    pub kind: String,
    pub api_version: String,
    pub metadata: ObjectMeta,
    pub timestamp: Time,
    pub window: String,
    pub containers: Vec<ContainerMetrics>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ContainerMetrics {
    pub name: String,
    pub usage: BTreeMap<String, Quantity>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct List<T> {
    kind: &'static str,
    api_version: String,
    metadata: BTreeMap<String, String>,
    items: Vec<T>,
}

/// The part of the kubelet's Summary API (`statsapi.Summary`) metrics are made of.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    #[serde(default)]
    pub node: SummaryNode,
    #[serde(default)]
    pub pods: Vec<SummaryPod>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryNode {
    pub cpu: Option<SummaryCpu>,
    pub memory: Option<SummaryMemory>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryCpu {
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryMemory {
    pub working_set_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryPod {
    pub pod_ref: SummaryPodRef,
    #[serde(default)]
    pub containers: Vec<SummaryContainer>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct SummaryPodRef {
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SummaryContainer {
    pub name: String,
    #[serde(default)]
    pub start_time: String,
    pub cpu: Option<SummaryCpu>,
    pub memory: Option<SummaryMemory>,
}

/// One reading of a node or container: cumulative CPU time and the working set.
#[derive(Clone, Debug, PartialEq)]
struct Point {
    cpu_ns: u64,
    memory: u64,
    start: String,
}

fn point(cpu: &Option<SummaryCpu>, mem: &Option<SummaryMemory>, start: &str) -> Option<Point> {
    Some(Point {
        cpu_ns: cpu.as_ref()?.usage_core_nano_seconds?,
        memory: mem.as_ref()?.working_set_bytes?,
        start: start.to_string(),
    })
}

/// One scrape of a node's kubelet, stamped with when the answer came.
#[derive(Clone, Debug)]
pub struct Sample {
    at: Timestamp,
    node: Option<Point>,
    /// Containers by (namespace, pod), then by name.
    pods: BTreeMap<(String, String), BTreeMap<String, Point>>,
}

impl Sample {
    pub fn new(at: Timestamp, s: &Summary) -> Sample {
        let pods = s
            .pods
            .iter()
            .map(|p| {
                let containers = p
                    .containers
                    .iter()
                    .filter_map(|c| {
                        point(&c.cpu, &c.memory, &c.start_time).map(|pt| (c.name.clone(), pt))
                    })
                    .collect();
                (
                    (p.pod_ref.namespace.clone(), p.pod_ref.name.clone()),
                    containers,
                )
            })
            .collect();
        Sample {
            at,
            node: point(&s.node.cpu, &s.node.memory, ""),
            pods,
        }
    }
}

/// A node's last two scrapes.
#[derive(Clone, Debug, Default)]
pub struct History {
    last: Option<Sample>,
    prev: Option<Sample>,
}

/// Usage between two readings, as metrics-server's `resourceUsage`: `None` when the thing
/// restarted in between (start time changed, or the counter went down).
struct Usage {
    cpu_nano_cores: u64,
    memory: u64,
    at: Timestamp,
    window: Duration,
}

fn usage(last: &Point, last_at: Timestamp, prev: &Point, prev_at: Timestamp) -> Option<Usage> {
    if last.start != prev.start || last.cpu_ns < prev.cpu_ns {
        return None;
    }
    let window = Duration::try_from(last_at.duration_since(prev_at)).ok()?;
    if window.is_zero() {
        return None;
    }
    let rate = (last.cpu_ns - prev.cpu_ns) as f64 / window.as_secs_f64();
    Some(Usage {
        cpu_nano_cores: rate as u64,
        memory: last.memory,
        at: last_at,
        window,
    })
}

/// A CPU rate in nanocores as upstream's DecimalSI quantity prints it (`12345n`, `5m`, `2`).
pub fn cpu_quantity(nano: u64) -> Quantity {
    let s = if nano == 0 {
        "0".to_string()
    } else if nano.is_multiple_of(1_000_000_000) {
        (nano / 1_000_000_000).to_string()
    } else if nano.is_multiple_of(1_000_000) {
        format!("{}m", nano / 1_000_000)
    } else if nano.is_multiple_of(1_000) {
        format!("{}u", nano / 1_000)
    } else {
        format!("{nano}n")
    };
    Quantity(s)
}

/// Bytes as upstream's BinarySI quantity prints them (`1024` is `1Ki`, `1000` stays `1000`).
pub fn memory_quantity(bytes: u64) -> Quantity {
    if bytes == 0 {
        return Quantity("0".into());
    }
    let mut v = bytes;
    let mut suffix = "";
    for s in ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
        if !v.is_multiple_of(1024) {
            break;
        }
        v /= 1024;
        suffix = s;
    }
    Quantity(format!("{v}{suffix}"))
}

/// A duration as Go's `time.Duration.String()` prints it (`1.002s`, `1m0.5s`), to the
/// millisecond.
pub fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let secs = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        let frac = format!("{:03}", rest % 1000);
        format!("{}.{}s", rest / 1000, frac.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else if ms < 1000 {
        format!("{ms}ms")
    } else {
        secs
    }
}

fn time(t: Timestamp) -> Time {
    Time(t)
}

fn usage_map(u: &Usage) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), cpu_quantity(u.cpu_nano_cores)),
        ("memory".to_string(), memory_quantity(u.memory)),
    ])
}

impl History {
    fn pair(&self) -> Option<(&Sample, &Sample)> {
        Some((self.last.as_ref()?, self.prev.as_ref()?))
    }

    /// The node's metrics, if there are two readings of it.
    pub fn node_metrics(&self, node: &Node) -> Option<NodeMetrics> {
        let (last, prev) = self.pair()?;
        let u = usage(last.node.as_ref()?, last.at, prev.node.as_ref()?, prev.at)?;
        Some(NodeMetrics {
            kind: "NodeMetrics".into(),
            api_version: format!("{GROUP}/{VERSION}"),
            metadata: ObjectMeta {
                name: node.metadata.name.clone(),
                labels: node.metadata.labels.clone(),
                creation_timestamp: Some(time(Timestamp::now())),
                ..Default::default()
            },
            timestamp: time(u.at),
            window: go_duration(u.window),
            usage: usage_map(&u),
        })
    }

    /// The pod's metrics, if every container of it has two readings (metrics-server leaves
    /// out a pod with a container seen only once, and a container that restarted).
    pub fn pod_metrics(&self, pod: &Pod) -> Option<PodMetrics> {
        let (last, prev) = self.pair()?;
        let key = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let last_pod = last.pods.get(&key)?;
        let prev_pod = prev.pods.get(&key)?;
        let mut containers = Vec::new();
        let mut earliest: Option<Usage> = None;
        for (name, l) in last_pod {
            let p = prev_pod.get(name)?;
            let Some(u) = usage(l, last.at, p, prev.at) else {
                continue;
            };
            containers.push(ContainerMetrics {
                name: name.clone(),
                usage: usage_map(&u),
            });
            if earliest.as_ref().is_none_or(|e| e.at > u.at) {
                earliest = Some(u);
            }
        }
        let e = earliest?;
        Some(PodMetrics {
            kind: "PodMetrics".into(),
            api_version: format!("{GROUP}/{VERSION}"),
            metadata: ObjectMeta {
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                labels: pod.metadata.labels.clone(),
                creation_timestamp: Some(time(Timestamp::now())),
                ..Default::default()
            },
            timestamp: time(e.at),
            window: go_duration(e.window),
            containers,
        })
    }

    fn push(&mut self, s: Sample) {
        self.prev = self.last.take();
        self.last = Some(s);
    }
}

/// Nodes' scrape histories, each behind its own lock so that one slow kubelet does not hold
/// up the others.
#[derive(Default)]
pub struct Scraper {
    nodes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<History>>>>,
}

impl Scraper {
    fn entry(&self, node: &str) -> Arc<tokio::sync::Mutex<History>> {
        self.nodes
            .lock()
            .expect("scraper lock")
            .entry(node.to_string())
            .or_default()
            .clone()
    }

    /// The node's history, scraped anew when its last scrape is older than the resolution
    /// (and twice when there was none). `None` for a node whose kubelet is not reachable.
    async fn history(&self, server: &ApiServer, node: &Node) -> Option<History> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let entry = self.entry(&name);
        let mut h = entry.lock().await;
        let fresh = |h: &History| {
            h.last.as_ref().is_some_and(|l| {
                Timestamp::now()
                    .duration_since(l.at)
                    .unsigned_abs()
                    .lt(&RESOLUTION)
            })
        };
        if h.prev.is_some() && fresh(&h) {
            return Some(h.clone());
        }
        let mut s = match scrape(server, node).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(node = %name, error = %e.message, "scraping the kubelet failed");
                return None;
            }
        };
        if h.last.is_none() {
            h.push(s);
            tokio::time::sleep(FIRST_WINDOW).await;
            s = scrape(server, node).await.ok()?;
        }
        h.push(s);
        Some(h.clone())
    }
}

/// Whether the node advertises a kubelet to scrape.
fn has_kubelet(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.daemon_endpoints.as_ref())
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .is_some_and(|e| e.port > 0)
}

async fn scrape(server: &ApiServer, node: &Node) -> Result<Sample, ApiError> {
    let addr = kubelet_address(node, None)?;
    let kubelet = connect::client(server)?;
    let fetch = async {
        let resp = kubelet
            .send(
                addr,
                Method::GET,
                "/stats/summary?only_cpu_and_memory=true",
                &Default::default(),
                Body::empty(),
            )
            .await?;
        if !resp.status().is_success() {
            return Err(connect::kubelet_failure(resp).await);
        }
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(ApiError::internal)?
            .to_bytes();
        serde_json::from_slice::<Summary>(&body)
            .map_err(|e| ApiError::internal(format!("decoding the kubelet's summary: {e}")))
    };
    let summary = tokio::time::timeout(SCRAPE_TIMEOUT, fetch)
        .await
        .map_err(|_| ApiError::internal("the kubelet did not answer in time"))??;
    Ok(Sample::new(Timestamp::now(), &summary))
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

/// Serves `nodes` and `pods` of `metrics.k8s.io/v1beta1`, sharing one scraper.
pub fn register(server: &Arc<ApiServer>) {
    let scraper = Arc::new(Scraper::default());
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

fn list_response<T: Serialize>(req: &ApiRequest, kind: &'static str, items: Vec<T>) -> Response {
    render::write_response(
        &req.headers,
        StatusCode::OK,
        &List {
            kind,
            api_version: format!("{GROUP}/{VERSION}"),
            metadata: BTreeMap::new(),
            items,
        },
    )
}

impl MetricsEndpoint {
    async fn node_metrics(&self, server: &ApiServer, nodes: &[Node]) -> Vec<NodeMetrics> {
        let scraped = futures::future::join_all(nodes.iter().filter(|n| has_kubelet(n)).map(
            |n| async move {
                let h = self.scraper.history(server, n).await?;
                h.node_metrics(n)
            },
        ))
        .await;
        scraped.into_iter().flatten().collect()
    }

    async fn pod_metrics(
        &self,
        server: &ApiServer,
        pods: &[Pod],
    ) -> Result<Vec<PodMetrics>, ApiError> {
        let node_names: std::collections::BTreeSet<String> = pods
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
                Some((name.clone(), self.scraper.history(server, &node).await?))
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
        Ok(out)
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
                Ok(render::write_response(&req.headers, StatusCode::OK, &m))
            }
            (Verb::List, Kind::Nodes) => {
                let nodes = server
                    .registry::<Node>()
                    .list(None, &list_query(req)?)
                    .await?;
                let mut items = self.node_metrics(&server, &nodes.items).await;
                items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                Ok(list_response(req, "NodeMetricsList", items))
            }
            (Verb::Get, Kind::Pods) => {
                let ns = req.namespace().unwrap_or_default();
                let pod: Pod = server.registry::<Pod>().get(Some(ns), req.name()).await?;
                let m = self
                    .pod_metrics(&server, std::slice::from_ref(&pod))
                    .await?;
                let qualified = format!("{ns}/{}", req.name());
                let m = m.into_iter().next().ok_or_else(|| {
                    ApiError::not_found(Target {
                        name: &qualified,
                        ..target
                    })
                })?;
                Ok(render::write_response(&req.headers, StatusCode::OK, &m))
            }
            (Verb::List, Kind::Pods) => {
                let pods = server
                    .registry::<Pod>()
                    .list(req.namespace(), &list_query(req)?)
                    .await?;
                let items = self.pod_metrics(&server, &pods.items).await?;
                Ok(list_response(req, "PodMetricsList", items))
            }
            (verb, _) => Err(ApiError::method_not_supported(target, verb.as_str())),
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

    fn summary(node_cpu: u64, c_cpu: u64, start: &str) -> Summary {
        serde_json::from_value(serde_json::json!({
            "node": {"nodeName": "n", "cpu": {"time": "x", "usageCoreNanoSeconds": node_cpu},
                     "memory": {"time": "x", "workingSetBytes": 2048}},
            "pods": [{"podRef": {"name": "p", "namespace": "ns", "uid": "u"},
                      "containers": [{"name": "c", "startTime": start,
                                      "cpu": {"usageCoreNanoSeconds": c_cpu},
                                      "memory": {"workingSetBytes": 1000}}]}]
        }))
        .unwrap()
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn named<T: Default>(f: impl FnOnce(&mut T, ObjectMeta), name: &str, ns: Option<&str>) -> T {
        let mut t = T::default();
        f(
            &mut t,
            ObjectMeta {
                name: Some(name.into()),
                namespace: ns.map(Into::into),
                ..Default::default()
            },
        );
        t
    }

    #[test]
    fn rates_need_two_readings_of_the_same_instance() {
        let node: Node = named(|n: &mut Node, m| n.metadata = m, "n", None);
        let pod: Pod = named(|p: &mut Pod, m| p.metadata = m, "p", Some("ns"));
        let mut h = History::default();
        h.push(Sample::new(at(0), &summary(1_000_000_000, 0, "s1")));
        assert!(h.node_metrics(&node).is_none());
        assert!(h.pod_metrics(&pod).is_none());
        // 0.5 cores of the node and 50m of the container over two seconds.
        h.push(Sample::new(
            at(2000),
            &summary(2_000_000_000, 100_000_000, "s1"),
        ));
        let n = h.node_metrics(&node).unwrap();
        assert_eq!(n.usage["cpu"], Quantity("500m".into()));
        assert_eq!(n.usage["memory"], Quantity("2Ki".into()));
        assert_eq!(n.window, "2s");
        assert_eq!(n.timestamp, Time(at(2000)));
        let p = h.pod_metrics(&pod).unwrap();
        assert_eq!(p.containers.len(), 1);
        assert_eq!(p.containers[0].name, "c");
        assert_eq!(p.containers[0].usage["cpu"], Quantity("50m".into()));
        assert_eq!(p.containers[0].usage["memory"], Quantity("1000".into()));
        // A restarted container has no rate until it is read twice again.
        h.push(Sample::new(at(3000), &summary(2_500_000_000, 1_000, "s2")));
        assert!(h.pod_metrics(&pod).is_none());
        assert_eq!(
            h.node_metrics(&node).unwrap().usage["cpu"],
            Quantity("500m".into())
        );
        let other: Pod = named(|p: &mut Pod, m| p.metadata = m, "q", Some("ns"));
        assert!(h.pod_metrics(&other).is_none());
    }

    #[test]
    fn quantities_and_durations_print_as_upstream() {
        assert_eq!(cpu_quantity(0).0, "0");
        assert_eq!(cpu_quantity(1_234).0, "1234n");
        assert_eq!(cpu_quantity(5_000).0, "5u");
        assert_eq!(cpu_quantity(2_000_000_000).0, "2");
        assert_eq!(memory_quantity(1000).0, "1000");
        assert_eq!(memory_quantity(3 * 1024 * 1024).0, "3Mi");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_millis(15_020)), "15.02s");
        assert_eq!(go_duration(Duration::from_millis(60_500)), "1m0.5s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    }
}
