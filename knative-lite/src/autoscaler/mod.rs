//! Knative's Pod Autoscaler (KPA) for every revision: each tick it reads every node's
//! router counters (as Knative's autoscaler scrapes its queue-proxies), turns them into
//! the revision's concurrency and request rate, lets the revision's [`decider`] pick a pod
//! count, and sets the count on the revision's Deployment through its scale subresource,
//! with the resourceVersion read, so a request's activation racing a scale to zero wins.
//! A Function's revision counts the pool pods it took as pods of its own: its Deployment
//! makes up only the difference, and at zero those pods are deleted (the pool has made
//! their replacements already). Each tick's numbers go to the metrics under Knative's
//! autoscaler names ([`crate::metrics`]).

pub mod config;
pub mod decider;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use minik8s_controllers::informers::{Cache, Informers};
use minik8s_controllers::util::pods;
use tracing::Instrument;

use crate::conditions;
use crate::function::{GATEWAY_PORT, labels as fn_labels};
use crate::gateway::STATS_PATH;
use crate::metrics::{self, RevisionLabels, Scaling};
use crate::revision::deployment_name;
use crate::route::SYSTEM_NAMESPACE;
use crate::router::backends::Stats;
use crate::serving::Revision;
use config::{Config, Metric, Params};
use decider::{Decider, Sample};

/// How often the autoscaler decides.
pub const TICK: Duration = Duration::from_secs(1);

type Key = (String, String);

/// The last counters read from each node's router.
struct Scraper {
    http: HttpClient<HttpConnector, Empty<Bytes>>,
    last: HashMap<(SocketAddr, Key), (Instant, Stats)>,
}

#[derive(serde::Deserialize)]
struct StatsBody {
    revisions: Vec<Stats>,
}

impl Scraper {
    fn new() -> Scraper {
        Scraper {
            http: minik8s_proxy::forward::http_client(),
            last: HashMap::new(),
        }
    }

    async fn fetch(&self, addr: SocketAddr) -> Option<Vec<Stats>> {
        let uri = format!("http://{addr}{STATS_PATH}");
        let get = async {
            let resp = self.http.get(uri.parse().ok()?).await.ok()?;
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            serde_json::from_slice::<StatsBody>(&body).ok()
        };
        tokio::time::timeout(TICK.mul_f64(0.8), get)
            .await
            .ok()
            .flatten()
            .map(|b| b.revisions)
    }

    /// Each revision's sample since the last scrape, summed over `routers`.
    async fn scrape(&mut self, routers: &[SocketAddr]) -> HashMap<Key, Sample> {
        let fetched = futures::future::join_all(routers.iter().map(|a| self.fetch(*a))).await;
        let now = Instant::now();
        let mut samples: HashMap<Key, Sample> = HashMap::new();
        for (addr, stats) in routers.iter().zip(fetched) {
            for s in stats.into_iter().flatten() {
                let key = (s.namespace.clone(), s.name.clone());
                let sample = samples.entry(key.clone()).or_default();
                match self.last.get(&(*addr, key.clone())) {
                    Some((then, prev)) if s.requests >= prev.requests => {
                        let dt = now.saturating_duration_since(*then).as_secs_f64().max(1e-3);
                        sample.concurrency +=
                            (s.concurrency_seconds - prev.concurrency_seconds).max(0.0) / dt;
                        sample.rps += (s.requests - prev.requests) as f64 / dt;
                    }
                    // First sight (or the router restarted): what is in flight now.
                    _ => sample.concurrency += s.in_flight as f64,
                }
                self.last.insert((*addr, key), (now, s));
            }
        }
        self.last
            .retain(|_, (then, _)| now.saturating_duration_since(*then) < Duration::from_secs(60));
        samples
    }
}

struct Autoscaler {
    client: kube::Client,
    revisions: Cache<Revision>,
    deployments: Cache<Deployment>,
    nodes: Cache<Node>,
    specialized: Cache<Pod>,
    config: Cache<ConfigMap>,
    deciders: HashMap<Key, Decider>,
    /// The labels of each revision's series in the metrics, to drop them when it goes.
    labels: HashMap<Key, RevisionLabels>,
}

impl Autoscaler {
    async fn tick(&mut self, scraper: &mut Scraper) {
        let revisions = self.revisions.state();
        if revisions.is_empty() {
            self.deciders.clear();
            for who in std::mem::take(&mut self.labels).values() {
                metrics::metrics().forget(who);
            }
            return;
        }
        let routers: Vec<SocketAddr> =
            minik8s_proxy::ingress::node_addresses(self.nodes.state().iter().map(|n| &**n))
                .into_iter()
                .map(|ip| SocketAddr::new(ip, GATEWAY_PORT))
                .collect();
        let samples = scraper.scrape(&routers).await;
        let config = Config::from_config_map(self.config.state().first().map(|c| &**c));
        let now = Instant::now();
        let specialized = self.specialized.state();
        for rev in &revisions {
            // As Knative's scale target initialization: a revision keeps its initial scale
            // until it has been Ready once (one whose image cannot be pulled is not scaled
            // away before it can say so).
            let initialized = rev
                .status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.status.conditions, "ContainerHealthy"));
            if !initialized {
                continue;
            }
            let key = (rev.namespace().unwrap_or_default(), rev.name_any());
            let dkey = ObjectRef::new(&deployment_name(&key.1)).within(&key.0);
            let Some(deployment) = self.deployments.get(&dkey) else {
                continue;
            };
            let (taken, emptied): (Vec<&Arc<Pod>>, Vec<&Arc<Pod>>) = specialized
                .iter()
                .filter(|p| {
                    p.namespace().as_deref() == Some(key.0.as_str())
                        && p.labels().get(fn_labels::SPECIALIZED) == Some(&key.1)
                        && p.metadata.deletion_timestamp.is_none()
                })
                .partition(|p| crate::function::specialization_intact(p));
            // Their container restarted (the node did): they serve nothing now.
            if !emptied.is_empty() {
                self.release(&key.0, &emptied).await;
            }
            let replicas = deployment
                .spec
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(0);
            let ready_replicas = deployment
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            let taken_ready = taken.iter().filter(|p| pods::is_ready(p)).count() as i32;
            let params = Params::for_revision(&config, rev);
            let sample = samples.get(&key).copied().unwrap_or_default();
            let decision = self
                .deciders
                .entry(key.clone())
                .or_insert_with(|| Decider::new(now))
                .decide(
                    &params,
                    now,
                    sample,
                    ready_replicas + taken_ready,
                    replicas + taken.len() as i32,
                );
            let want = (decision.desired - taken.len() as i32).max(0);
            let who = RevisionLabels::of(rev);
            metrics::metrics().scaling(
                &who,
                &Scaling {
                    desired: decision.desired,
                    requested: want + taken.len() as i32,
                    actual: ready_replicas + taken_ready,
                    stable: decision.stable,
                    panic: decision.panic,
                    target: params.target,
                    rps: params.metric == Metric::Rps,
                    panicking: decision.panicking,
                },
            );
            self.labels.insert(key.clone(), who);
            if decision.desired == 0 && !taken.is_empty() {
                self.release(&key.0, &taken).await;
            }
            if want != replicas {
                let span = tracing::info_span!("autoscale", revision = %key.1, namespace = %key.0);
                span.in_scope(|| {
                    tracing::info!(
                        from = replicas,
                        to = want,
                        stable = decision.stable,
                        panic = decision.panic,
                        panicking = decision.panicking,
                        "scaling"
                    )
                });
                self.scale(&deployment, want).instrument(span).await;
            }
        }
        self.deciders.retain(|k, _| {
            revisions
                .iter()
                .any(|r| r.namespace().as_deref() == Some(k.0.as_str()) && r.name_any() == k.1)
        });
        let deciders = &self.deciders;
        self.labels.retain(|k, who| {
            let kept = deciders.contains_key(k);
            if !kept {
                metrics::metrics().forget(who);
            }
            kept
        });
    }

    async fn scale(&self, deployment: &Deployment, replicas: i32) {
        let api: Api<Deployment> = Api::namespaced(
            self.client.clone(),
            &deployment.namespace().unwrap_or_default(),
        );
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": deployment.resource_version()},
            "spec": {"replicas": replicas},
        });
        if let Err(e) = api
            .patch_scale(
                &deployment.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            // A 409 means someone (an activator) changed it since: decided again next tick.
            tracing::debug!(deployment = %deployment.name_any(), error = %e, "scaling failed");
        }
    }

    /// Deletes the pool pods a revision took (they drain what they have in flight).
    async fn release(&self, ns: &str, pods: &[&Arc<Pod>]) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        for pod in pods {
            if let Err(e) = api.delete(&pod.name_any(), &DeleteParams::default()).await {
                tracing::debug!(pod = %pod.name_any(), error = %e, "deleting a specialized pod failed");
            }
        }
    }
}

/// Runs the autoscaler until dropped.
pub async fn run(informers: Arc<Informers>) {
    let revisions = informers.of::<Revision>();
    let deployments = informers.of::<Deployment>();
    let nodes = informers.of::<Node>();
    let specialized = informers.selected::<Pod>(
        watcher::Config::default().labels(fn_labels::SPECIALIZED),
        fn_labels::SPECIALIZED,
    );
    let selection = format!(
        "metadata.namespace={SYSTEM_NAMESPACE},metadata.name={}",
        config::CONFIG_AUTOSCALER
    );
    let config =
        informers.selected::<ConfigMap>(watcher::Config::default().fields(&selection), &selection);
    let mut autoscaler = Autoscaler {
        client: informers.client(),
        revisions: revisions.store(),
        deployments: deployments.store(),
        nodes: nodes.store(),
        specialized: specialized.store(),
        config: config.store(),
        deciders: HashMap::new(),
        labels: HashMap::new(),
    };
    for ready in [
        autoscaler.revisions.wait_until_ready().await,
        autoscaler.deployments.wait_until_ready().await,
        autoscaler.nodes.wait_until_ready().await,
        autoscaler.specialized.wait_until_ready().await,
        autoscaler.config.wait_until_ready().await,
    ] {
        if ready.is_err() {
            return;
        }
    }
    let mut scraper = Scraper::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        autoscaler.tick(&mut scraper).await;
    }
}
