//! The data path of Knative Routes: a request whose Host is a Route's (or one of its tags')
//! goes to a ready pod of the revision the traffic table picks, by `percent`, on the port
//! the revision's container listens on. The table is rebuilt from the Routes' status, the
//! Revisions and their pods whenever one changes, and read by the node's Ingress proxy on
//! port 80 before its Ingress rules (Knative's hosts are its own) and by the function
//! gateway. What lives longer than one table, each revision's requests in flight and its
//! counters, is in [`backends`]; bringing a pod to a revision that has none, in
//! [`activator`].

pub mod activator;
pub mod backends;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::watcher;
use minik8s_controllers::informers::Informers;
use minik8s_controllers::util::pods;
use minik8s_proxy::cache::poke_on_change;
use minik8s_proxy::forward;
use minik8s_proxy::ingress::{HostRoutes, PickFuture, Picked};
use tokio::sync::Notify;

use crate::function;
use crate::function::packages::{self, Installer};
use crate::gateway::VIA_ROUTER;
use crate::metrics::{self, RevisionLabels};
use crate::revision::user_port;
use crate::serving::{Revision, Route, labels};
use activator::Activator;
use backends::{Backends, Endpoint, InFlight, Stats, Wait};

/// How long a request waits for a pod when the revision sets no `timeoutSeconds`
/// (Knative's `revision-timeout-seconds`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a held request asks the activator again while its revision has no pod.
const REPOKE: Duration = Duration::from_secs(1);

type Key = (String, String);

/// One revision in the current table.
#[derive(Clone, Debug)]
struct Target {
    backends: Arc<Backends>,
    revision: Option<Arc<Revision>>,
}

/// One host's traffic: `(cumulative percent, revision)`, and a counter that walks the
/// percentages so that every 100 requests split exactly as the table says. The counter
/// outlives rebuilds of the table (any pod's change rebuilds it).
#[derive(Debug, Default)]
struct Split {
    targets: Vec<(u64, Target)>,
    next: Arc<AtomicUsize>,
}

impl Split {
    fn choose(&self) -> Option<&Target> {
        let total = self.targets.last().map_or(1, |(c, _)| *c).max(1);
        let n = self.next.fetch_add(1, Ordering::Relaxed) as u64 % total;
        self.targets.iter().find(|(c, _)| n < *c).map(|(_, t)| t)
    }
}

/// The routing table.
#[derive(Debug, Default)]
pub struct Table {
    hosts: HashMap<String, Split>,
    /// (namespace, function) → its Route's host.
    functions: HashMap<Key, String>,
}

fn host_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    Some(rest.split(['/', ':']).next()?.to_lowercase())
}

/// Ready, and not on its way out: a pod requests may go to.
pub fn pod_ready(pod: &Pod) -> bool {
    pods::is_active(pod) && pods::is_ready(pod)
}

/// A revision's `containerConcurrency`; 0: no limit.
fn limit_of(rev: &Revision) -> usize {
    rev.spec
        .container_concurrency
        .and_then(|c| usize::try_from(c).ok())
        .unwrap_or(0)
}

fn key_of(ns: &str, name: &str) -> Key {
    (ns.to_string(), name.to_string())
}

impl Table {
    /// The table for these objects; each revision's [`Backends`] is taken from (or added
    /// to) `registry`, so requests in flight outlive the table, and each host's split
    /// counter from `counters`.
    fn build(
        routes: &[Arc<Route>],
        revisions: &[Arc<Revision>],
        pods: &[Arc<Pod>],
        node_ip: Option<IpAddr>,
        registry: &mut HashMap<Key, Arc<Backends>>,
        counters: &mut HashMap<String, Arc<AtomicUsize>>,
    ) -> Table {
        let mut table = Table::default();
        let by_key: HashMap<Key, &Arc<Revision>> = revisions
            .iter()
            .map(|r| (key_of(&r.namespace().unwrap_or_default(), &r.name_any()), r))
            .collect();
        // Per revision: its pods here, and (with a containerConcurrency) how many it has on
        // each other node, whose router holds their limit.
        let mut local: HashMap<Key, Vec<SocketAddr>> = HashMap::new();
        let mut remote: HashMap<Key, BTreeMap<IpAddr, usize>> = HashMap::new();
        for pod in pods
            .iter()
            .filter(|p| pod_ready(p) && function::specialization_intact(p))
        {
            let ns = pod.namespace().unwrap_or_default();
            let Some(rev) = pod.labels().get(labels::REVISION) else {
                continue;
            };
            let key = key_of(&ns, rev);
            let status = pod.status.as_ref();
            let (Some(rev), Some(ip)) = (
                by_key.get(&key),
                status
                    .and_then(|s| s.pod_ip.as_deref())
                    .and_then(|ip| ip.parse().ok()),
            ) else {
                continue;
            };
            let host: Option<IpAddr> = status
                .and_then(|s| s.host_ip.as_deref())
                .and_then(|ip| ip.parse().ok());
            match (node_ip, host) {
                (Some(me), Some(host)) if host != me && limit_of(rev) > 0 => {
                    *remote.entry(key).or_default().entry(host).or_default() += 1;
                }
                _ => {
                    let port = u16::try_from(user_port(rev)).unwrap_or(8080);
                    local
                        .entry(key)
                        .or_default()
                        .push(SocketAddr::new(ip, port));
                }
            }
        }
        for (key, rev) in &by_key {
            let limit = limit_of(rev);
            let mut endpoints: Vec<Endpoint> = local
                .remove(key)
                .unwrap_or_default()
                .into_iter()
                .map(|addr| Endpoint::pod(addr, limit))
                .collect();
            for (host, n) in remote.remove(key).unwrap_or_default() {
                endpoints.push(Endpoint {
                    addr: SocketAddr::new(host, function::GATEWAY_PORT),
                    limit: limit * n,
                    via_router: true,
                });
            }
            endpoints.sort();
            registry
                .entry(key.clone())
                .or_insert_with(|| Backends::new(&key.0, &key.1))
                .set_pods(&endpoints);
        }
        // Revisions gone: no pod of theirs is picked again, and their backends go once
        // nothing is in flight on them.
        registry.retain(|key, b| {
            let kept = by_key.contains_key(key);
            if !kept {
                b.set_pods(&[]);
            }
            kept || !b.idle()
        });
        let target = |ns: &str, rev: &str| {
            let key = key_of(ns, rev);
            registry.get(&key).map(|b| Target {
                backends: b.clone(),
                revision: by_key.get(&key).map(|r| (*r).clone()),
            })
        };
        for route in routes {
            let ns = route.namespace().unwrap_or_default();
            let Some(status) = &route.status else {
                continue;
            };
            let mut split = Split::default();
            let mut total = 0u64;
            for t in &status.traffic {
                let (Some(rev), Some(p)) = (&t.revision_name, t.percent) else {
                    continue;
                };
                let Some(target) = target(&ns, rev) else {
                    continue;
                };
                // A tag's own host sends everything to its target.
                if let Some(host) = t.url.as_deref().and_then(host_of) {
                    table.hosts.insert(
                        host,
                        Split {
                            targets: vec![(1, target.clone())],
                            next: Arc::default(),
                        },
                    );
                }
                if p <= 0 {
                    continue;
                }
                total += p as u64;
                split.targets.push((total, target));
            }
            if let Some(host) = status.url.as_deref().and_then(host_of)
                && !split.targets.is_empty()
            {
                if let Some(f) = route.labels().get(function::labels::FUNCTION) {
                    table.functions.insert(key_of(&ns, f), host.clone());
                }
                split.next = counters.entry(host.clone()).or_default().clone();
                table.hosts.insert(host, split);
            }
        }
        counters.retain(|host, _| table.hosts.contains_key(host));
        table
    }

    fn choose(&self, host: &str) -> Option<&Target> {
        self.hosts.get(host)?.choose()
    }

    /// The host of function `name` in `namespace`.
    pub fn function_host(&self, namespace: &str, name: &str) -> Option<&str> {
        self.functions
            .get(&key_of(namespace, name))
            .map(String::as_str)
    }
}

/// The current table, swapped whole on every change.
#[derive(Debug, Default)]
pub struct Router {
    table: RwLock<Arc<Table>>,
    registry: Mutex<HashMap<Key, Arc<Backends>>>,
    counters: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    activator: Option<Arc<Activator>>,
    /// This node's address: pods elsewhere of a revision with a containerConcurrency are
    /// reached through their node's router.
    node_ip: Option<IpAddr>,
}

impl Router {
    pub fn new(activator: Option<Arc<Activator>>, node_ip: Option<IpAddr>) -> Router {
        Router {
            activator,
            node_ip,
            ..Default::default()
        }
    }

    pub fn table(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn rebuild(&self, routes: &[Arc<Route>], revisions: &[Arc<Revision>], pods: &[Arc<Pod>]) {
        let table = {
            let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
            Table::build(
                routes,
                revisions,
                pods,
                self.node_ip,
                &mut registry,
                &mut counters,
            )
        };
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
    }

    /// The counters of every revision this router has seen, for the autoscaler.
    pub fn stats(&self) -> Vec<Stats> {
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<Stats> = registry.values().map(|b| b.stats()).collect();
        all.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        all
    }

    /// Where the next request for `host` goes, once a pod of the chosen revision has a
    /// free slot; `None` when no Route has that host.
    pub fn route(&self, host: &str) -> Option<PickFuture> {
        let target = self.table().choose(host)?.clone();
        let activator = self.activator.clone();
        Some(Box::pin(async move {
            let activate = || {
                if let (Some(a), Some(rev)) = (&activator, &target.revision) {
                    a.activate(rev.clone(), target.backends.clone());
                }
            };
            let timeout = target
                .revision
                .as_ref()
                .and_then(|r| r.spec.timeout_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
            let who = match &target.revision {
                Some(rev) => RevisionLabels::of(rev),
                None => RevisionLabels::named(&target.backends.namespace, &target.backends.name),
            };
            take(&target.backends, Some(who), timeout, activate).await
        }))
    }

    /// Where a request another node's router sent for revision `name` goes: one of this
    /// node's pods of it, once one has a free slot.
    pub fn route_local(&self, namespace: &str, name: &str) -> Option<PickFuture> {
        let backends = self
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key_of(namespace, name))?
            .clone();
        Some(Box::pin(async move {
            take(&backends, None, DEFAULT_TIMEOUT, || {}).await
        }))
    }
}

/// One request through the router, from its arrival to the end of its answer: counted in
/// flight for the autoscaler while it lives, and in the revision's request metrics when
/// it ends (with the status it was answered with, and whether it was held for a pod).
struct Served {
    in_flight: InFlight,
    /// `None` for a request another node's router sent: that router counts it.
    who: Option<RevisionLabels>,
    arrived: Instant,
    held: bool,
    status: StatusCode,
}

impl forward::InFlight for Served {
    fn answered(&mut self, status: StatusCode) {
        self.status = status;
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(who) = &self.who {
            metrics::metrics().request(who, self.status, self.arrived.elapsed(), self.held);
        }
    }
}

/// Takes an endpoint of `backends` for one request: `who` (the revision's labels) for
/// requests from clients (counted for the autoscaler and in the metrics; may go through
/// another node's router), `None` for those another router sent (this node's pods only).
async fn take(
    backends: &Arc<Backends>,
    who: Option<RevisionLabels>,
    timeout: Duration,
    activate: impl Fn(),
) -> Result<Picked, (StatusCode, String)> {
    let first_hop = who.is_some();
    let mut req = Served {
        in_flight: backends.arrive(first_hop),
        who,
        arrived: Instant::now(),
        held: false,
        status: StatusCode::SERVICE_UNAVAILABLE,
    };
    let b = backends;
    let held = std::sync::atomic::AtomicBool::new(false);
    let taken = b
        .take(&mut req.in_flight, timeout, REPOKE, !first_hop, || {
            held.store(true, Ordering::Relaxed);
            activate()
        })
        .await;
    req.held = held.into_inner();
    match taken {
        Ok(endpoint) => {
            let mut headers = Vec::new();
            if endpoint.via_router
                && let Ok(v) = HeaderValue::from_str(&format!("{}/{}", b.namespace, b.name))
            {
                headers.push((HeaderName::from_static(VIA_ROUTER), v));
            }
            Ok(Picked {
                endpoint: endpoint.addr,
                guard: Some(Box::new(req)),
                headers,
            })
        }
        Err(Wait::NoPods) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("revision {}/{} has no ready pod", b.namespace, b.name),
        )),
        Err(Wait::Busy) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "revision {}/{} had no free pod within its timeout",
                b.namespace, b.name
            ),
        )),
    }
}

impl HostRoutes for Router {
    fn pick(&self, host: &str) -> Option<PickFuture> {
        self.route(host)
    }
}

/// A router for this node, its table kept current in the background, with an activator
/// that takes pods from the pools (this node's first, by `node_ip`).
pub fn start(informers: &Arc<Informers>, node_ip: Option<std::net::IpAddr>) -> Arc<Router> {
    let pool = informers.selected::<Pod>(
        watcher::Config::default().labels(function::labels::POOL),
        function::labels::POOL,
    );
    let installer = Arc::new(Installer::default());
    let activator = Activator::new(informers.client(), pool.store(), node_ip, installer.clone());
    let router = Arc::new(Router::new(Some(Arc::new(activator)), node_ip));
    tokio::spawn(run(router.clone(), informers.clone()));
    tokio::spawn(install_requirements(installer, informers.clone()));
    router
}

/// Installs on this node the requirements every revision names, as revisions appear, so
/// that their pods find them when they start.
async fn install_requirements(installer: Arc<Installer>, informers: Arc<Informers>) {
    let mut revisions = std::pin::pin!(informers.of::<Revision>().touched());
    while let Some(rev) = futures::StreamExt::next(&mut revisions).await {
        let Some(requirements) = rev.annotations().get(packages::ANNOTATION).cloned() else {
            continue;
        };
        let installer = installer.clone();
        tokio::spawn(async move {
            if let Err(e) = installer.ensure(&requirements).await {
                tracing::warn!(revision = %rev.name_any(), error = %e, "a function's requirements did not install");
            }
        });
    }
}

/// Keeps `router`'s table current from `informers` until dropped. Only pods that carry a
/// revision label are watched.
pub async fn run(router: Arc<Router>, informers: Arc<Informers>) {
    let changed = Arc::new(Notify::new());
    let routes = poke_on_change(&informers.of::<Route>(), &changed);
    let revisions = poke_on_change(&informers.of::<Revision>(), &changed);
    let pods = poke_on_change(
        &informers.selected::<Pod>(
            watcher::Config::default().labels(labels::REVISION),
            labels::REVISION,
        ),
        &changed,
    );
    if routes.wait_until_ready().await.is_err()
        || revisions.wait_until_ready().await.is_err()
        || pods.wait_until_ready().await.is_err()
    {
        return;
    }
    loop {
        router.rebuild(&routes.state(), &revisions.state(), &pods.state());
        changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::{RevisionSpec, RouteSpec, RouteStatus, TrafficTarget};
    use std::collections::BTreeMap;

    fn pod(rev: &str, ip: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{rev}-{ip}"), "namespace": "default",
                             "labels": {labels::REVISION: rev}},
                "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap(),
        )
    }

    fn revision(name: &str) -> Arc<Revision> {
        let mut r = Revision::new(name, RevisionSpec::default());
        r.metadata.namespace = Some("default".into());
        Arc::new(r)
    }

    async fn pick(router: &Router, host: &str) -> Option<String> {
        let picked = router.route(host)?.await.unwrap();
        Some(picked.endpoint.to_string())
    }

    #[tokio::test]
    async fn split_by_percent_and_tags() {
        let mut route = Route::new("hello", RouteSpec::default());
        route.metadata.namespace = Some("default".into());
        route.metadata.labels = Some(BTreeMap::from([(
            function::labels::FUNCTION.to_string(),
            "hello".to_string(),
        )]));
        route.status = Some(RouteStatus {
            url: Some("http://hello.default.example.com".into()),
            traffic: vec![
                TrafficTarget {
                    revision_name: Some("hello-00001".into()),
                    percent: Some(80),
                    ..Default::default()
                },
                TrafficTarget {
                    revision_name: Some("hello-00002".into()),
                    percent: Some(20),
                    tag: Some("latest".into()),
                    url: Some("http://latest-hello.default.example.com".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let route = Arc::new(route);
        let revisions = [revision("hello-00001"), revision("hello-00002")];
        let pods = [
            pod("hello-00001", "10.244.0.5"),
            pod("hello-00002", "10.244.0.6"),
        ];
        let router = Router::default();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..500 {
            // Rebuilds (any pod's change makes one) do not restart the split.
            if i % 7 == 0 {
                router.rebuild(std::slice::from_ref(&route), &revisions, &pods);
            }
            let addr = pick(&router, "hello.default.example.com").await.unwrap();
            *counts.entry(addr).or_default() += 1;
        }
        assert_eq!(counts["10.244.0.5:8080"], 400);
        assert_eq!(counts["10.244.0.6:8080"], 100);
        for _ in 0..3 {
            let tagged = pick(&router, "latest-hello.default.example.com").await;
            assert_eq!(tagged.as_deref(), Some("10.244.0.6:8080"));
        }
        assert!(router.route("other.default.example.com").is_none());
        assert_eq!(
            router.table().function_host("default", "hello"),
            Some("hello.default.example.com")
        );
        let stats = router.stats();
        assert_eq!(stats.len(), 2);
        assert_eq!(stats[0].requests + stats[1].requests, 503);
        router.rebuild(&[], &[revision("x")], &[]);
        assert!(router.route("hello.default.example.com").is_none());
        assert_eq!(router.stats().len(), 1);
    }

    /// With a containerConcurrency, a pod on another node is reached through that node's
    /// router, with the revision named in a header; without one, straight.
    #[tokio::test]
    async fn limited_revisions_go_through_the_pods_node() {
        let mut route = Route::new("cc", RouteSpec::default());
        route.metadata.namespace = Some("default".into());
        route.status = Some(RouteStatus {
            url: Some("http://cc.default.example.com".into()),
            traffic: vec![TrafficTarget {
                revision_name: Some("cc-00001".into()),
                percent: Some(100),
                ..Default::default()
            }],
            ..Default::default()
        });
        let mut rev = Revision::new("cc-00001", RevisionSpec::default());
        rev.metadata.namespace = Some("default".into());
        rev.spec.container_concurrency = Some(1);
        let on = |ip: &str, host: &str| -> Arc<Pod> {
            let mut p = (*pod("cc-00001", ip)).clone();
            p.status.as_mut().unwrap().host_ip = Some(host.into());
            Arc::new(p)
        };
        let router = Router::new(None, Some("172.30.0.1".parse().unwrap()));
        router.rebuild(
            &[Arc::new(route)],
            &[Arc::new(rev)],
            &[
                on("10.244.0.5", "172.30.0.1"),
                on("10.244.1.5", "172.30.0.2"),
            ],
        );
        let first = router
            .route("cc.default.example.com")
            .unwrap()
            .await
            .unwrap();
        let second = router
            .route("cc.default.example.com")
            .unwrap()
            .await
            .unwrap();
        let mut got = [first, second];
        got.sort_by_key(|p| p.endpoint);
        assert_eq!(got[0].endpoint.to_string(), "10.244.0.5:8080");
        assert!(got[0].headers.is_empty());
        assert_eq!(got[1].endpoint.to_string(), "172.30.0.2:8080");
        assert_eq!(got[1].headers[0].1, "default/cc-00001");
        // The other node's router serves it from its own pods only.
        let local = router.route_local("default", "cc-00001").unwrap();
        drop(got);
        assert_eq!(local.await.unwrap().endpoint.to_string(), "10.244.0.5:8080");
    }
}
