//! The data path of Knative Routes: a request whose Host is a Route's (or one of its tags')
//! goes to a ready pod of the revision the traffic table picks, by `percent`, on the port
//! the revision's container listens on. The table is rebuilt from the Routes' status, the
//! Revisions and their pods whenever one changes, and read by the node's Ingress proxy on
//! port 80 before its Ingress rules (Knative's hosts are its own).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::watcher;
use minik8s_controllers::informers::Informers;
use minik8s_proxy::cache::poke_on_change;
use minik8s_proxy::ingress::HostRoutes;
use tokio::sync::Notify;

use crate::revision::user_port;
use crate::serving::{Revision, Route, labels};

/// The ready endpoints of one revision, taken in turn.
#[derive(Debug, Default)]
struct Endpoints {
    addrs: Vec<SocketAddr>,
    next: AtomicUsize,
}

/// One host's traffic: `(cumulative percent, revision)`, and a counter that walks the
/// percentages so that every 100 requests split exactly as the table says.
#[derive(Debug, Default)]
struct Split {
    targets: Vec<(u64, (String, String))>,
    next: AtomicUsize,
}

/// The routing table.
#[derive(Debug, Default)]
pub struct Table {
    hosts: HashMap<String, Split>,
    revisions: HashMap<(String, String), Endpoints>,
}

fn host_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))?;
    Some(rest.split(['/', ':']).next()?.to_lowercase())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True")
}

impl Table {
    pub fn build(routes: &[Arc<Route>], revisions: &[Arc<Revision>], pods: &[Arc<Pod>]) -> Table {
        let mut table = Table::default();
        let ports: HashMap<(String, String), u16> = revisions
            .iter()
            .map(|r| {
                let port = u16::try_from(user_port(r)).unwrap_or(8080);
                ((r.namespace().unwrap_or_default(), r.name_any()), port)
            })
            .collect();
        for pod in pods.iter().filter(|p| pod_ready(p)) {
            let ns = pod.namespace().unwrap_or_default();
            let Some(rev) = pod.labels().get(labels::REVISION) else {
                continue;
            };
            let key = (ns, rev.clone());
            let (Some(port), Some(ip)) = (
                ports.get(&key),
                pod.status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_deref())
                    .and_then(|ip| ip.parse().ok()),
            ) else {
                continue;
            };
            table
                .revisions
                .entry(key)
                .or_default()
                .addrs
                .push(SocketAddr::new(ip, *port));
        }
        for e in table.revisions.values_mut() {
            e.addrs.sort();
        }
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
                if p <= 0 {
                    continue;
                }
                total += p as u64;
                split.targets.push((total, (ns.clone(), rev.clone())));
                // A tag's own host sends everything to its target.
                if let Some(host) = t.url.as_deref().and_then(host_of) {
                    table.hosts.insert(
                        host,
                        Split {
                            targets: vec![(1, (ns.clone(), rev.clone()))],
                            next: AtomicUsize::new(0),
                        },
                    );
                }
            }
            if let Some(host) = status.url.as_deref().and_then(host_of)
                && !split.targets.is_empty()
            {
                table.hosts.insert(host, split);
            }
        }
        table
    }

    /// Where a request for `host` goes: `None` when no Route has that host.
    pub fn pick(&self, host: &str) -> Option<Result<SocketAddr, String>> {
        let split = self.hosts.get(host)?;
        let total = split.targets.last().map_or(1, |(c, _)| *c).max(1);
        let n = split.next.fetch_add(1, Ordering::Relaxed) as u64 % total;
        let (_, key) = split.targets.iter().find(|(c, _)| n < *c)?;
        let picked = self.revisions.get(key).and_then(|e| {
            (!e.addrs.is_empty())
                .then(|| e.addrs[e.next.fetch_add(1, Ordering::Relaxed) % e.addrs.len()])
        });
        Some(picked.ok_or_else(|| format!("revision {}/{} has no ready pod", key.0, key.1)))
    }
}

/// The current table, swapped whole on every change.
#[derive(Debug, Default)]
pub struct Router {
    table: RwLock<Arc<Table>>,
}

impl Router {
    pub fn set(&self, table: Table) {
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(table);
    }
}

impl HostRoutes for Router {
    fn pick(&self, host: &str) -> Option<Result<SocketAddr, String>> {
        self.table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .pick(host)
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
        router.set(Table::build(
            &routes.state(),
            &revisions.state(),
            &pods.state(),
        ));
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

    #[test]
    fn split_by_percent_and_tags() {
        let mut route = Route::new("hello", RouteSpec::default());
        route.metadata.namespace = Some("default".into());
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
        let table = Table::build(
            &[Arc::new(route)],
            &[revision("hello-00001"), revision("hello-00002")],
            &[
                pod("hello-00001", "10.244.0.5"),
                pod("hello-00002", "10.244.0.6"),
            ],
        );
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..500 {
            let addr = table.pick("hello.default.example.com").unwrap().unwrap();
            *counts.entry(addr.to_string()).or_default() += 1;
        }
        assert_eq!(counts["10.244.0.5:8080"], 400);
        assert_eq!(counts["10.244.0.6:8080"], 100);
        for _ in 0..3 {
            let tagged = table
                .pick("latest-hello.default.example.com")
                .unwrap()
                .unwrap();
            assert_eq!(tagged.to_string(), "10.244.0.6:8080");
        }
        assert!(table.pick("other.default.example.com").is_none());
        let empty = Table::build(&[], &[revision("x")], &[]);
        assert!(empty.pick("hello.default.example.com").is_none());
    }
}
