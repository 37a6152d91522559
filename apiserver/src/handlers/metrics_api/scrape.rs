//! Readings from kubelets and the rates made of them. As in metrics-server, nodes are scraped
//! in the background, every resolution, and requests are answered from each node's last two
//! scrapes without waiting on a kubelet: CPU is a rate over the cumulative CPU time between
//! them. A loaded kubelet that answers late, or not once, thus costs no reading to a caller
//! (the HPA controller asks every resolution and would otherwise see gaps of minutes on a
//! busy node). A node's task starts with the first request about it, which waits for two
//! scrapes a second apart, and stops when no request came for a while.
//!
//! What is kept belongs to one node object: a node deleted and created again under the same
//! name starts over instead of having a rate computed against its predecessor's counters, and
//! nodes that are gone are forgotten, so the histories do not grow with every node the cluster
//! ever had. Pods are matched by namespace and name, as metrics-server matches them (a static
//! pod's uid on the kubelet is not its mirror pod's): each scrape holds only the pods the
//! kubelet still runs, and a pod re-created under the same name has containers started anew,
//! which have no rate until read twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::body::Body;
use futures::future::BoxFuture;
use http::Method;
use http_body_util::BodyExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use minik8s_api::ApiError;
use serde::Deserialize;
use tokio::sync::watch;

use super::super::connect;
use super::{API_VERSION, ContainerMetrics, NodeMetrics, PodMetrics};
use crate::kubelet::kubelet_address;
use crate::server::ApiServer;

/// How long a scrape stays current (metrics-server's default `--metric-resolution`).
pub const RESOLUTION: Duration = Duration::from_secs(15);
/// The gap between the two first scrapes of a node: a rate needs two readings.
const FIRST_WINDOW: Duration = Duration::from_secs(1);
/// How long a kubelet may take to answer: longer than metrics-server's
/// `--kubelet-request-timeout` (10s), since no request waits on a scrape but a node's first,
/// and a late answer from a kubelet on a node busy starting pods is still a reading (on 2
/// cores under the conformance run, answers took more than 15 s for minutes).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2 * RESOLUTION.as_secs());
/// How long a node is scraped after the last request about it.
const IDLE: Duration = Duration::from_secs(600);

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

/// A node's last two scrapes, and how many scrapes of it failed.
#[derive(Clone, Debug, Default)]
pub struct History {
    last: Option<Sample>,
    prev: Option<Sample>,
    failures: u64,
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

    /// Whether there are two readings and the last is at most `stale` old at `now`.
    fn current(&self, now: Timestamp, stale: Duration) -> bool {
        self.prev.is_some()
            && self
                .last
                .as_ref()
                .is_some_and(|l| now.duration_since(l.at).unsigned_abs() <= stale)
    }

    /// The node's metrics, if there are two readings of it.
    pub fn node_metrics(&self, node: &Node) -> Option<NodeMetrics> {
        let (last, prev) = self.pair()?;
        let u = usage(last.node.as_ref()?, last.at, prev.node.as_ref()?, prev.at)?;
        Some(NodeMetrics {
            kind: "NodeMetrics".into(),
            api_version: API_VERSION.into(),
            metadata: ObjectMeta {
                name: node.metadata.name.clone(),
                labels: node.metadata.labels.clone(),
                creation_timestamp: Some(Time(Timestamp::now())),
                ..Default::default()
            },
            timestamp: Time(u.at),
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
            api_version: API_VERSION.into(),
            metadata: ObjectMeta {
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                labels: pod.metadata.labels.clone(),
                creation_timestamp: Some(Time(Timestamp::now())),
                ..Default::default()
            },
            timestamp: Time(e.at),
            window: go_duration(e.window),
            containers,
        })
    }

    /// Keeps `s` as the last reading; the one before becomes the previous one unless it is
    /// more than `stale` older (a rate over such a gap would not be current).
    fn push(&mut self, s: Sample, stale: Duration) {
        let gap = |l: &Sample| s.at.duration_since(l.at).unsigned_abs();
        self.prev = self.last.take().filter(|l| gap(l) <= stale);
        self.last = Some(s);
    }
}

/// Scrapes one node: the kubelet's summary, or why not.
pub type Source = Arc<dyn Fn(Node) -> BoxFuture<'static, Result<Sample, ApiError>> + Send + Sync>;

/// The periods of the scraping tasks; tests shorten them.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How often a node is scraped.
    pub resolution: Duration,
    /// The gap between the two first scrapes of a node: a rate needs two readings.
    pub first_window: Duration,
    /// How long one scrape may take, and a node's first request wait.
    pub timeout: Duration,
    /// How old the last reading may be and still answer.
    pub stale: Duration,
    /// How long a node is scraped after the last request about it.
    pub idle: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            resolution: RESOLUTION,
            first_window: FIRST_WINDOW,
            timeout: SCRAPE_TIMEOUT,
            stale: 3 * RESOLUTION,
            idle: IDLE,
        }
    }
}

/// Whether a task scrapes the node, and when a request last asked about it: one lock, so
/// that a task never stops just as a request counts on it.
struct Asked {
    at: Instant,
    running: bool,
}

/// What is kept of one node object, shared by the requests that read it and the task that
/// scrapes it.
struct NodeScrapes {
    /// The node as a request last saw it: where its kubelet listens.
    node: Mutex<Node>,
    history: watch::Sender<History>,
    asked: Mutex<Asked>,
}

impl NodeScrapes {
    /// Counts a request; true when no task scrapes the node and the caller is to start one.
    fn ask(&self) -> bool {
        let mut asked = self.asked.lock().expect("asked lock");
        asked.at = Instant::now();
        !std::mem::replace(&mut asked.running, true)
    }

    /// Whether the task is to scrape again: not once no request came for `idle`.
    fn keep_running(&self, idle: Duration) -> bool {
        let mut asked = self.asked.lock().expect("asked lock");
        asked.running = asked.at.elapsed() < idle;
        asked.running
    }
}

/// The history of one node object.
struct Entry {
    uid: String,
    scrapes: Arc<NodeScrapes>,
}

/// Nodes' scrape histories by name, each node scraped by a task of its own, so that one slow
/// kubelet does not hold up the others nor the requests, which are answered from what the
/// tasks last read.
pub struct Scraper {
    source: Source,
    timing: Timing,
    nodes: Mutex<HashMap<String, Entry>>,
    /// When the histories were last checked against the nodes that exist.
    pruned: Mutex<Option<Instant>>,
}

impl Scraper {
    pub fn new(source: Source, timing: Timing) -> Scraper {
        Scraper {
            source,
            timing,
            nodes: Mutex::default(),
            pruned: Mutex::default(),
        }
    }

    /// The scrapes of this node object (new ones when the name was another object's), with
    /// the node object kept as the latest seen.
    fn entry(&self, node: &Node) -> Arc<NodeScrapes> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let uid = node.metadata.uid.as_deref().unwrap_or_default();
        let mut nodes = self.nodes.lock().expect("scraper lock");
        match nodes.get(name) {
            Some(e) if e.uid == uid => {
                *e.scrapes.node.lock().expect("node lock") = node.clone();
                e.scrapes.clone()
            }
            _ => {
                let scrapes = Arc::new(NodeScrapes {
                    node: Mutex::new(node.clone()),
                    history: watch::Sender::new(History::default()),
                    asked: Mutex::new(Asked {
                        at: Instant::now(),
                        running: false,
                    }),
                });
                let entry = Entry {
                    uid: uid.to_string(),
                    scrapes: Arc::clone(&scrapes),
                };
                nodes.insert(name.to_string(), entry);
                scrapes
            }
        }
    }

    /// Whether a resolution has passed since the histories were last pruned; if so, the
    /// caller is to prune them now.
    pub fn prune_due(&self) -> bool {
        let mut pruned = self.pruned.lock().expect("scraper prune lock");
        if pruned.is_some_and(|at| at.elapsed() < self.timing.resolution) {
            return false;
        }
        *pruned = Some(Instant::now());
        true
    }

    /// Forgets every node not in `live`, by name and uid; their tasks end.
    pub fn retain(&self, live: &HashMap<String, String>) {
        self.nodes
            .lock()
            .expect("scraper lock")
            .retain(|name, e| live.get(name) == Some(&e.uid));
    }

    /// The names of the nodes with a history.
    #[cfg(test)]
    fn known(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .nodes
            .lock()
            .expect("scraper lock")
            .keys()
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// The node's last two readings, starting the task that scrapes it if none does. Only a
    /// node with no current readings is waited on, until its two first scrapes or a failed
    /// one. `None` while its kubelet is not answering.
    pub async fn history(&self, node: &Node) -> Option<History> {
        let scrapes = self.entry(node);
        if scrapes.ask() {
            tokio::spawn(scrape_node(
                Arc::downgrade(&scrapes),
                self.source.clone(),
                self.timing,
            ));
        }
        let stale = self.timing.stale;
        let mut rx = scrapes.history.subscribe();
        let failures = rx.borrow().failures;
        let _ = tokio::time::timeout(
            self.timing.timeout,
            rx.wait_for(|h| h.current(Timestamp::now(), stale) || h.failures > failures),
        )
        .await;
        let h = rx.borrow().clone();
        h.current(Timestamp::now(), stale).then_some(h)
    }
}

/// Scrapes a node every resolution (the second time after the first window) until its
/// entry is forgotten or no request asked about it for a while. A failed scrape leaves the
/// readings before it, which answer until they are stale.
async fn scrape_node(scrapes: Weak<NodeScrapes>, source: Source, timing: Timing) {
    loop {
        let Some(state) = scrapes.upgrade() else {
            return;
        };
        if !state.keep_running(timing.idle) {
            return;
        }
        let node = state.node.lock().expect("node lock").clone();
        let name = node.metadata.name.clone().unwrap_or_default();
        let started = Instant::now();
        let next = match tokio::time::timeout(timing.timeout, source(node)).await {
            Ok(Ok(sample)) => {
                let mut first = false;
                state.history.send_modify(|h| {
                    h.push(sample, timing.stale);
                    first = h.prev.is_none();
                });
                if first {
                    timing.first_window
                } else {
                    timing.resolution
                }
            }
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.message,
                    _ => format!("no answer in {:?}", timing.timeout),
                };
                tracing::warn!(node = %name, %error, "scraping the kubelet's summary failed");
                state.history.send_modify(|h| h.failures += 1);
                timing.resolution
            }
        };
        drop(state);
        tokio::time::sleep_until((started + next).into()).await;
    }
}

/// Reads nodes' summaries from their kubelets, through the server's kubelet client.
pub fn kubelet_source(server: Weak<ApiServer>) -> Source {
    Arc::new(move |node: Node| {
        let server = server.clone();
        Box::pin(async move {
            let server = server
                .upgrade()
                .ok_or_else(|| ApiError::internal("the server is shutting down"))?;
            scrape(&server, &node).await
        })
    })
}

/// Whether the node advertises a kubelet to scrape.
pub fn has_kubelet(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.daemon_endpoints.as_ref())
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .is_some_and(|e| e.port > 0)
}

async fn scrape(server: &ApiServer, node: &Node) -> Result<Sample, ApiError> {
    let addr = kubelet_address(node, None)?;
    let kubelet = connect::client(server)?;
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
    let summary = serde_json::from_slice::<Summary>(&body)
        .map_err(|e| ApiError::internal(format!("decoding the kubelet's summary: {e}")))?;
    Ok(Sample::new(Timestamp::now(), &summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(30);

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

    fn meta(name: &str, ns: Option<&str>, uid: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    fn node(name: &str, uid: &str) -> Node {
        Node {
            metadata: meta(name, None, uid),
            ..Default::default()
        }
    }

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: meta(name, Some("ns"), "u"),
            ..Default::default()
        }
    }

    #[test]
    fn rates_need_two_readings_of_the_same_instance() {
        let node = node("n", "n1");
        let pod = pod("p");
        let mut h = History::default();
        h.push(Sample::new(at(0), &summary(1_000_000_000, 0, "s1")), STALE);
        assert!(h.node_metrics(&node).is_none());
        assert!(h.pod_metrics(&pod).is_none());
        // 0.5 cores of the node and 50m of the container over two seconds.
        h.push(
            Sample::new(at(2000), &summary(2_000_000_000, 100_000_000, "s1")),
            STALE,
        );
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
        // A restarted container (or the container of a pod re-created under the same name) has
        // no rate until it is read twice again.
        h.push(
            Sample::new(at(3000), &summary(2_500_000_000, 1_000, "s2")),
            STALE,
        );
        assert!(h.pod_metrics(&pod).is_none());
        assert_eq!(
            h.node_metrics(&node).unwrap().usage["cpu"],
            Quantity("500m".into())
        );
        assert!(h.pod_metrics(&self::pod("q")).is_none());
    }

    #[test]
    fn readings_answer_until_stale_and_a_stale_one_makes_no_rate() {
        let stale = STALE;
        let mut h = History::default();
        assert!(!h.current(at(0), stale));
        h.push(Sample::new(at(0), &summary(0, 0, "s")), stale);
        // One reading makes no rate.
        assert!(!h.current(at(10), stale));
        h.push(Sample::new(at(1000), &summary(1, 1, "s")), stale);
        assert!(h.current(at(1000), stale));
        assert!(h.current(at(31_000), stale));
        assert!(!h.current(at(31_001), stale));
        // After a gap longer than `stale` the reading before is no base for a rate.
        h.push(Sample::new(at(40_000), &summary(2, 2, "s")), stale);
        assert!(!h.current(at(40_000), stale));
        assert!(h.node_metrics(&node("n", "n1")).is_none());
    }

    /// A source answering `ok` times, then failing; it counts its calls.
    fn source(ok: usize, calls: Arc<std::sync::atomic::AtomicUsize>) -> Source {
        Arc::new(move |_node: Node| {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) as u64;
            Box::pin(async move {
                if n as usize >= ok {
                    return Err(ApiError::internal("kubelet down"));
                }
                let cpu = (n + 1) * 1_000_000_000;
                Ok(Sample::new(Timestamp::now(), &summary(cpu, cpu, "s")))
            })
        })
    }

    fn fast() -> Timing {
        Timing {
            resolution: Duration::from_millis(50),
            first_window: Duration::from_millis(10),
            timeout: Duration::from_millis(500),
            stale: Duration::from_millis(150),
            idle: Duration::from_millis(300),
        }
    }

    /// Polls `f` until it holds, for at most ten seconds.
    async fn eventually(mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "condition not met in time");
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn nodes_are_scraped_in_the_background_until_idle_or_forgotten() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let calls = Arc::new(AtomicUsize::new(0));
        let scraper = Scraper::new(source(usize::MAX, calls.clone()), fast());
        let n = node("n", "n1");
        // The first request waits for the two first scrapes.
        let h = scraper.history(&n).await.expect("two readings");
        assert!(h.node_metrics(&n).is_some());
        assert!(calls.load(SeqCst) >= 2);
        // Later ones are answered from what the task scrapes every resolution.
        let seen = calls.load(SeqCst);
        eventually(|| calls.load(SeqCst) >= seen + 2).await;
        assert!(scraper.history(&n).await.is_some());
        // Nobody asks: the task stops; the next request starts it again.
        let scrapes = scraper.entry(&n);
        eventually(|| !scrapes.asked.lock().unwrap().running).await;
        assert!(scraper.history(&n).await.is_some());
        assert!(scrapes.asked.lock().unwrap().running);
        // A forgotten node's task lets go of its state.
        let weak = Arc::downgrade(&scrapes);
        drop(scrapes);
        scraper.retain(&HashMap::new());
        eventually(|| weak.strong_count() == 0).await;
    }

    #[tokio::test]
    async fn a_kubelet_that_stops_answering_has_no_readings_once_they_are_stale() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let calls = Arc::new(AtomicUsize::new(0));
        let scraper = Scraper::new(source(3, calls.clone()), fast());
        let n = node("n", "n1");
        assert!(scraper.history(&n).await.is_some());
        eventually(|| calls.load(SeqCst) >= 5).await;
        let scrapes = scraper.entry(&n);
        let failing = || scrapes.history.borrow().failures >= 2;
        eventually(failing).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while scraper.history(&n).await.is_some() {
            assert!(Instant::now() < deadline, "stale readings still answer");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A node whose kubelet never answers: the first request returns without readings
        // once the first scrape failed.
        let calls = Arc::new(AtomicUsize::new(0));
        let down = Scraper::new(source(0, calls.clone()), fast());
        assert!(down.history(&n).await.is_none());
        assert!(calls.load(SeqCst) >= 1);
    }

    fn idle_scraper() -> Scraper {
        Scraper::new(source(0, Arc::default()), Timing::default())
    }

    #[test]
    fn deleted_and_recreated_nodes_are_forgotten() {
        let scraper = idle_scraper();
        let a = scraper.entry(&node("a", "a1"));
        scraper.entry(&node("b", "b1"));
        // The same node object: the same history.
        assert!(Arc::ptr_eq(&a, &scraper.entry(&node("a", "a1"))));
        // Deleted and created again under the same name: a history of its own.
        let again = scraper.entry(&node("a", "a2"));
        assert!(!Arc::ptr_eq(&a, &again));
        assert_eq!(scraper.known(), ["a", "b"]);
        // "b" deleted; "a" is the object "a2" now: an old uid is not kept alive either.
        scraper.retain(&HashMap::from([("a".to_string(), "a2".to_string())]));
        assert_eq!(scraper.known(), ["a"]);
        scraper.retain(&HashMap::from([("a".to_string(), "a3".to_string())]));
        assert_eq!(scraper.known(), Vec::<String>::new());
    }

    #[test]
    fn pruning_is_due_once_per_resolution() {
        let scraper = idle_scraper();
        assert!(scraper.prune_due());
        assert!(!scraper.prune_due());
        *scraper.pruned.lock().unwrap() = Instant::now().checked_sub(RESOLUTION);
        assert!(scraper.prune_due());
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
