//! The node lifecycle controller (upstream pkg/controller/nodelifecycle): the only judge of
//! whether a node is alive. A kubelet proves it is by renewing its Lease in `kube-node-lease`
//! (or posting a new Ready heartbeat); when neither happens for the grace period the node's
//! conditions become Unknown, its pods stop counting as Ready (so Services and workload
//! controllers stop relying on them) and it is tainted so that the scheduler avoids it and the
//! taint eviction controller moves pods off it.
//!
//! Upstream polls every node each `--node-monitor-period`; here each node is requeued for the
//! moment its grace period runs out, and lease renewals and status posts arrive by watch.
//! Like upstream, no NoExecute taint is placed while every node looks down (the control plane
//! is then the likelier culprit) or while a small zone is partially disrupted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::util::events::Recorder;
use futures::channel::mpsc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::Instrument;

use crate::informers::{Index, Informers};
use crate::util::taints::{self, NO_EXECUTE, NO_SCHEDULE};

use crate::informers::Cache;
use crate::util::reconciler::Error;
use crate::util::runtime::Controller;

pub const REPORTER: &str = "node-controller";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Nodes with this label never count towards a zone's disruption.
const EXCLUDE_DISRUPTION_LABEL: &str = "node.kubernetes.io/exclude-disruption";
/// Condition types the controller turns Unknown; NetworkUnavailable belongs to the network.
const MONITORED_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];
/// Zones larger than this keep evicting (slowly, upstream) while partially disrupted.
const LARGE_CLUSTER_THRESHOLD: usize = 50;
const UNHEALTHY_ZONE_THRESHOLD: f64 = 0.55;

/// Flags named after kube-controller-manager's.
#[derive(Clone, Debug)]
pub struct NodeLifecycleConfig {
    /// `--node-monitor-grace-period`: how long a node may go without a heartbeat.
    pub node_monitor_grace_period: Duration,
    /// `--node-startup-grace-period`: the same for a node that never posted a Ready condition.
    pub node_startup_grace_period: Duration,
}

impl Default for NodeLifecycleConfig {
    fn default() -> Self {
        NodeLifecycleConfig {
            node_monitor_grace_period: Duration::from_secs(40),
            node_startup_grace_period: Duration::from_secs(60),
        }
    }
}

/// The last heartbeat seen from a node, by this process's clock (upstream's nodeHealthData:
/// the clocks of kubelets are never compared with ours).
struct Health {
    /// A node re-created under the same name starts afresh.
    uid: Option<String>,
    probe: Instant,
    heartbeat: Option<Time>,
    lease_renew: Option<Timestamp>,
    /// Marking the node's pods NotReady failed and is owed.
    mark_pods_pending: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ZoneState {
    Normal,
    PartialDisruption,
    FullDisruption,
}

struct Ctx {
    client: Client,
    config: NodeLifecycleConfig,
    nodes: Cache<Node>,
    leases: Cache<Lease>,
    pods_by_node: Index<Pod>,
    recorder: Recorder,
    health: Mutex<HashMap<String, Health>>,
    zones: Mutex<Zones>,
    /// The zone states last acted on.
    states: Mutex<BTreeMap<String, ZoneState>>,
    /// Reconciles every node when a zone's state changes.
    all: mpsc::UnboundedSender<()>,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>, config: NodeLifecycleConfig) {
    let client = informers.client();
    let lease_informer = informers.selected::<Lease>(
        watcher::Config::default().fields(&format!("metadata.namespace={NODE_LEASE_NAMESPACE}")),
        NODE_LEASE_NAMESPACE,
    );
    let leases = lease_informer.store();
    let lease_stream = lease_informer.touched();
    let pods_by_node = informers.of::<Pod>().by_node();
    let nodes = informers.of::<Node>();
    let (all, all_rx) = mpsc::unbounded();
    let controller = Controller::for_shared_stream(nodes.touched(), nodes.store().kube_store())
        .reconcile_all_on(all_rx);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
        nodes: nodes.store(),
        leases,
        pods_by_node,
        recorder: Recorder::new(
            client,
            Reporter {
                controller: REPORTER.into(),
                instance: None,
            },
        ),
        health: Mutex::default(),
        zones: Mutex::default(),
        states: Mutex::default(),
        all,
    });
    // Renewals reach the node of the same name, after the lease store has them.
    controller
        .watches_shared_stream(lease_stream, |lease: Arc<Lease>| {
            Some(ObjectRef::<Node>::new(&lease.name_any()))
        })
        .run("node_lifecycle_controller", reconcile, ctx)
        .await;
}

fn condition<'a>(node: &'a Node, ty: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)
}

fn ready_status(node: &Node) -> &str {
    condition(node, "Ready").map_or("Unknown", |c| c.status.as_str())
}

/// Upstream's zone key: region and zone labels (current or beta), empty when neither is set.
fn zone_key(node: &Node) -> String {
    let labels = node.labels();
    let get = |a: &str, b: &str| {
        labels
            .get(a)
            .or_else(|| labels.get(b))
            .cloned()
            .unwrap_or_default()
    };
    let region = get(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    let zone = get(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    format!("{region}:\x00:{zone}")
}

/// Upstream's ComputeZoneState from a zone's counted nodes and how many of them are not Ready.
fn zone_state(counted: usize, not_ready: usize) -> ZoneState {
    if not_ready > 0 && not_ready == counted {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / counted as f64 >= UNHEALTHY_ZONE_THRESHOLD {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// Nodes and not-Ready nodes of one zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ZoneCount {
    /// Every node of the zone, excluded ones too (the size that decides "large").
    size: usize,
    /// Nodes that count towards disruption.
    counted: usize,
    not_ready: usize,
}

/// What a node contributes to its zone's count.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ZoneMember {
    zone: String,
    counted: bool,
    ready: bool,
}

impl ZoneMember {
    fn of(node: &Node) -> Self {
        ZoneMember {
            zone: zone_key(node),
            counted: !node.labels().contains_key(EXCLUDE_DISRUPTION_LABEL),
            ready: ready_status(node) == "True",
        }
    }
}

/// The zones' counts, kept up to date node by node: at 5,000 nodes, recounting every node on
/// each of the 500 lease renewals a second was a quarter of the server's CPU. Upstream counts
/// once per `--node-monitor-period`; here each reconcile moves its own node between counts,
/// and a recount from the cache every [`RECOUNT`] drops nodes that are gone.
#[derive(Default)]
struct Zones {
    members: HashMap<String, ZoneMember>,
    counts: BTreeMap<String, ZoneCount>,
    recounted: Option<Instant>,
}

/// How often the counts are rebuilt from the node cache (upstream's node monitor period).
const RECOUNT: Duration = Duration::from_secs(5);

impl Zones {
    fn add(&mut self, m: &ZoneMember, sign: isize) {
        let c = self.counts.entry(m.zone.clone()).or_default();
        let step = |v: &mut usize| *v = v.saturating_add_signed(sign);
        step(&mut c.size);
        if m.counted {
            step(&mut c.counted);
            if !m.ready {
                step(&mut c.not_ready);
            }
        }
        if c.size == 0 {
            self.counts.remove(&m.zone);
        }
    }

    /// Counts `node` as it is now.
    fn observe(&mut self, name: &str, node: &Node) {
        let member = ZoneMember::of(node);
        if self.members.get(name) == Some(&member) {
            return;
        }
        if let Some(old) = self.members.remove(name) {
            self.add(&old, -1);
        }
        self.add(&member, 1);
        self.members.insert(name.to_string(), member);
    }

    /// Counts every cached node afresh when the last recount is older than [`RECOUNT`].
    fn recount_if_due(&mut self, nodes: &Cache<Node>, now: Instant) {
        if self
            .recounted
            .is_some_and(|at| now.duration_since(at) < RECOUNT)
        {
            return;
        }
        self.members.clear();
        self.counts.clear();
        for node in nodes.state() {
            self.observe(&node.name_any(), &node);
        }
        self.recounted = Some(now);
    }

    fn states(&self) -> BTreeMap<String, ZoneState> {
        self.counts
            .iter()
            .filter(|(_, c)| c.counted > 0)
            .map(|(zone, c)| (zone.clone(), zone_state(c.counted, c.not_ready)))
            .collect()
    }

    fn size(&self, zone: &str) -> usize {
        self.counts.get(zone).map_or(0, |c| c.size)
    }
}

/// Whether NoExecute taints may be placed in `zone` (upstream's eviction rate limits: zero
/// when every zone is down, and in small partially disrupted zones).
fn may_taint(states: &BTreeMap<String, ZoneState>, zone: &str, zone_size: usize) -> bool {
    if !states.is_empty() && states.values().all(|s| *s == ZoneState::FullDisruption) {
        return false;
    }
    match states.get(zone) {
        Some(ZoneState::PartialDisruption) => zone_size > LARGE_CLUSTER_THRESHOLD,
        _ => true,
    }
}

/// Upstream's tryUpdateNodeHealth past the grace period: every monitored condition Unknown
/// (added if the kubelet never posted it). Returns whether anything changed.
fn mark_unknown(node: &mut Node, now: &Time) -> bool {
    let created = node.metadata.creation_timestamp.clone();
    let conditions = node
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    let mut changed = false;
    for ty in MONITORED_CONDITIONS {
        match conditions.iter_mut().find(|c| c.type_ == ty) {
            None => {
                conditions.push(NodeCondition {
                    type_: ty.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: created.clone(),
                    last_transition_time: Some(now.clone()),
                });
                changed = true;
            }
            Some(c) if c.status != "Unknown" => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(now.clone());
                changed = true;
            }
            Some(_) => {}
        }
    }
    changed
}

/// The taints this controller owns that `node` should carry (key, effect).
fn desired_taints(node: &Node, no_execute_allowed: bool) -> Vec<(&'static str, &'static str)> {
    let mut want = Vec::new();
    let ready = ready_status(node);
    if no_execute_allowed {
        match ready {
            "False" => want.push((taints::NOT_READY, NO_EXECUTE)),
            "Unknown" => want.push((taints::UNREACHABLE, NO_EXECUTE)),
            _ => {}
        }
    }
    match ready {
        "False" => want.push((taints::NOT_READY, NO_SCHEDULE)),
        "Unknown" => want.push((taints::UNREACHABLE, NO_SCHEDULE)),
        _ => {}
    }
    for (ty, key) in [
        ("MemoryPressure", taints::MEMORY_PRESSURE),
        ("DiskPressure", taints::DISK_PRESSURE),
        ("PIDPressure", taints::PID_PRESSURE),
        ("NetworkUnavailable", taints::NETWORK_UNAVAILABLE),
    ] {
        if condition(node, ty).is_some_and(|c| c.status == "True") {
            want.push((key, NO_SCHEDULE));
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        want.push((taints::UNSCHEDULABLE, NO_SCHEDULE));
    }
    want
}

const OWNED_TAINTS: [&str; 7] = [
    taints::NOT_READY,
    taints::UNREACHABLE,
    taints::MEMORY_PRESSURE,
    taints::DISK_PRESSURE,
    taints::PID_PRESSURE,
    taints::NETWORK_UNAVAILABLE,
    taints::UNSCHEDULABLE,
];

/// The node's taints with the controller's own brought to `want`; None when already so.
/// Taints it keeps keep their timeAdded; new NoExecute ones are stamped now.
fn retaint(node: &Node, want: &[(&str, &str)], now: &Time) -> Option<Vec<Taint>> {
    let current = taints::node_taints(node);
    let owned = |t: &Taint| {
        OWNED_TAINTS.contains(&t.key.as_str())
            && (t.effect == NO_EXECUTE
                && matches!(t.key.as_str(), taints::NOT_READY | taints::UNREACHABLE)
                || t.effect == NO_SCHEDULE)
    };
    let mut next: Vec<Taint> = current
        .iter()
        .filter(|t| !owned(t) || want.contains(&(t.key.as_str(), t.effect.as_str())))
        .cloned()
        .collect();
    for (key, effect) in want {
        if !next.iter().any(|t| t.key == *key && t.effect == *effect) {
            next.push(Taint {
                key: (*key).into(),
                effect: (*effect).into(),
                value: None,
                time_added: (*effect == NO_EXECUTE).then(|| now.clone()),
            });
        }
    }
    (next.len() != current.len() || next.iter().zip(current).any(|(a, b)| a != b)).then_some(next)
}

async fn publish(
    ctx: &Ctx,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, reference).await {
        tracing::debug!(error = %e, "publishing event");
    }
}

/// Upstream's MarkPodsNotReady: the Ready condition of every pod on the node turns False.
async fn mark_pods_not_ready(ctx: &Ctx, node: &str) -> Result<(), kube::Error> {
    let pods = ctx.pods_by_node.get(node);
    let mut first_error = None;
    for pod in pods {
        let mut pod = (*pod).clone();
        let Some(status) = pod.status.as_mut() else {
            continue;
        };
        let Some(cond) = status
            .conditions
            .iter_mut()
            .flatten()
            .find(|c| c.type_ == "Ready")
        else {
            continue;
        };
        if cond.status == "False" {
            continue;
        }
        cond.status = "False".into();
        cond.last_transition_time = Some(Time(Timestamp::now()));
        let api: Api<Pod> =
            Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
        // The write carries the resourceVersion read: a newer status wins, and we retry.
        match api
            .replace_status(&pod.name_any(), &PostParams::default(), &pod)
            .await
        {
            Ok(_) => {
                publish(
                    ctx,
                    &pod.object_ref(&()),
                    EventType::Warning,
                    "NodeNotReady",
                    "Node is not ready".into(),
                )
                .await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::info!(pod = %pod.name_any(), error = %e, "marking pod not ready failed");
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = node.name_any();
    let span = tracing::info_span!("reconcile", controller = "node-lifecycle", node = %name);
    reconcile_node(node, ctx).instrument(span).await
}

async fn reconcile_node(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    // Judging nodes before the leases are known would find every one silent.
    let _ = ctx.leases.wait_until_ready().await;
    let _ = ctx.pods_by_node.wait_until_ready().await;
    let name = node.name_any();
    let api: Api<Node> = Api::all(ctx.client.clone());
    let ready = condition(&node, "Ready").cloned();
    let lease_renew = ctx
        .leases
        .get(&ObjectRef::new(&name).within(NODE_LEASE_NAMESPACE))
        .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0));
    let grace = if ready.is_some() {
        ctx.config.node_monitor_grace_period
    } else {
        ctx.config.node_startup_grace_period
    };
    let now = Instant::now();
    let (probe, first_seen, mark_pending) = {
        let mut health = ctx.health.lock().expect("health");
        let first_seen = health.get(&name).is_none_or(|h| h.uid != node.metadata.uid);
        if first_seen {
            health.remove(&name);
        }
        let h = health.entry(name.clone()).or_insert_with(|| {
            // A node that never posted status counts from its creation, as upstream's.
            let probe = match (&ready, &node.metadata.creation_timestamp) {
                (None, Some(created)) => {
                    let age = Timestamp::now().duration_since(created.0);
                    now.checked_sub(Duration::try_from(age).unwrap_or_default())
                        .unwrap_or(now)
                }
                _ => now,
            };
            Health {
                uid: node.metadata.uid.clone(),
                probe,
                heartbeat: ready.as_ref().and_then(|c| c.last_heartbeat_time.clone()),
                lease_renew,
                mark_pods_pending: false,
            }
        });
        let heartbeat = ready.as_ref().and_then(|c| c.last_heartbeat_time.clone());
        if ready.is_some() && heartbeat != h.heartbeat {
            h.heartbeat = heartbeat;
            h.probe = now;
        }
        if lease_renew.is_some() && lease_renew > h.lease_renew {
            h.lease_renew = lease_renew;
            h.probe = now;
        }
        (h.probe, first_seen, h.mark_pods_pending)
    };
    if first_seen {
        publish(
            &ctx,
            &node.object_ref(&()),
            EventType::Normal,
            "RegisteredNode",
            format!("Node {name} event: Registered Node {name} in Controller"),
        )
        .await;
    }

    let observed_ready = ready
        .as_ref()
        .map_or("Unknown", |c| c.status.as_str())
        .to_string();
    let mut current = (*node).clone();
    let expires = probe + grace;
    if now >= expires && mark_unknown(&mut current, &Time(Timestamp::now())) {
        tracing::info!(silent_for = ?now.duration_since(probe), "node stopped posting status");
        current = api
            .replace_status(&name, &PostParams::default(), &current)
            .await?;
    }

    let current_ready = ready_status(&current).to_string();
    if current_ready != "True" && (observed_ready == "True" || mark_pending) {
        if observed_ready == "True" {
            publish(
                &ctx,
                &current.object_ref(&()),
                EventType::Normal,
                "NodeNotReady",
                format!("Node {name} status is now: NodeNotReady"),
            )
            .await;
        }
        let marked = mark_pods_not_ready(&ctx, &name).await;
        if let Some(h) = ctx.health.lock().expect("health").get_mut(&name) {
            h.mark_pods_pending = marked.is_err();
        }
        marked?;
    } else if current_ready == "True"
        && let Some(h) = ctx.health.lock().expect("health").get_mut(&name)
    {
        h.mark_pods_pending = false;
    }

    // Zone disruption decides whether NoExecute taints may go on; a change reconciles all.
    let zone = zone_key(&current);
    let (states, zone_size) = {
        let mut zones = ctx.zones.lock().expect("zones");
        zones.recount_if_due(&ctx.nodes, now);
        zones.observe(&name, &current);
        (zones.states(), zones.size(&zone))
    };
    let changed = {
        let mut last = ctx.states.lock().expect("zone states");
        let changed = *last != states;
        *last = states.clone();
        changed
    };
    if changed {
        let _ = ctx.all.unbounded_send(());
    }
    let want = desired_taints(&current, may_taint(&states, &zone, zone_size));
    if let Some(next) = retaint(&current, &want, &Time(Timestamp::now())) {
        tracing::info!(taints = ?want, "updating node taints");
        current.spec.get_or_insert_with(Default::default).taints = Some(next);
        api.replace(&name, &PostParams::default(), &current).await?;
    }

    Ok(if now < expires {
        Action::requeue(expires - now + Duration::from_millis(50))
    } else {
        Action::await_change()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ready: &str, labels: &[(&str, &str)]) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "labels": labels.iter().cloned().collect::<BTreeMap<_, _>>()},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap()
    }

    #[test]
    fn unknown_as_upstream() {
        let mut n = node("True", &[]);
        let now = Time(Timestamp::now());
        assert!(mark_unknown(&mut n, &now));
        let c = condition(&n, "Ready").unwrap();
        assert_eq!(c.status, "Unknown");
        assert_eq!(c.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            c.message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
        let never = condition(&n, "PIDPressure").unwrap();
        assert_eq!(never.reason.as_deref(), Some("NodeStatusNeverUpdated"));
        assert!(!mark_unknown(&mut n, &now));
    }

    #[test]
    fn taints_follow_conditions() {
        let now = Time(Timestamp::now());
        let n = node("Unknown", &[]);
        let want = desired_taints(&n, true);
        assert_eq!(
            want,
            vec![
                (taints::UNREACHABLE, NO_EXECUTE),
                (taints::UNREACHABLE, NO_SCHEDULE)
            ]
        );
        let next = retaint(&n, &want, &now).unwrap();
        assert_eq!(next.len(), 2);
        assert!(next[0].time_added.is_some() && next[1].time_added.is_none());
        let mut tainted = n.clone();
        tainted.spec.get_or_insert_with(Default::default).taints = Some(next);
        assert_eq!(retaint(&tainted, &want, &now), None);
        // Ready again: the controller's taints go, others stay.
        let mut back = tainted.clone();
        back.spec
            .as_mut()
            .unwrap()
            .taints
            .as_mut()
            .unwrap()
            .push(Taint {
                key: "dedicated".into(),
                effect: NO_SCHEDULE.into(),
                ..Default::default()
            });
        back.status = node("True", &[]).status;
        let next = retaint(&back, &desired_taints(&back, true), &now).unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].key, "dedicated");
        // Not ready swaps unreachable for not-ready.
        let nr = node("False", &[]);
        assert_eq!(
            desired_taints(&nr, true)[0],
            (taints::NOT_READY, NO_EXECUTE)
        );
        assert_eq!(
            desired_taints(&nr, false),
            vec![(taints::NOT_READY, NO_SCHEDULE)]
        );
    }

    #[test]
    fn zone_counts_follow_each_node() {
        let mut zones = Zones::default();
        let a = [("topology.kubernetes.io/zone", "a")];
        for i in 0..4 {
            zones.observe(&format!("n{i}"), &node("True", &a));
        }
        zones.observe("x", &node("False", &[(EXCLUDE_DISRUPTION_LABEL, "")]));
        assert_eq!(zones.size(":\x00:a"), 4);
        assert_eq!(zones.size(""), 1);
        // The excluded node's zone counts no node: it has no state.
        assert_eq!(
            zones.states(),
            BTreeMap::from([(":\x00:a".to_string(), ZoneState::Normal)])
        );
        for i in 0..3 {
            zones.observe(&format!("n{i}"), &node("Unknown", &a));
        }
        assert_eq!(zones.states()[":\x00:a"], ZoneState::PartialDisruption);
        // A node seen again in the same state is not counted twice; one that recovers moves back.
        zones.observe("n0", &node("Unknown", &a));
        zones.observe("n3", &node("False", &a));
        assert_eq!(zones.states()[":\x00:a"], ZoneState::FullDisruption);
        zones.observe("n3", &node("True", &a));
        zones.observe("n2", &node("True", &a));
        assert_eq!(zones.states()[":\x00:a"], ZoneState::Normal);
        assert_eq!(zones.size(":\x00:a"), 4);
    }

    #[test]
    fn disruption_as_upstream() {
        assert_eq!(zone_state(1, 1), ZoneState::FullDisruption);
        assert_eq!(zone_state(2, 1), ZoneState::Normal);
        assert_eq!(zone_state(4, 3), ZoneState::PartialDisruption);
        let all_down = BTreeMap::from([(String::new(), ZoneState::FullDisruption)]);
        assert!(!may_taint(&all_down, "", 1));
        let mixed = BTreeMap::from([
            (String::new(), ZoneState::FullDisruption),
            ("r:\x00:z".to_string(), ZoneState::Normal),
        ]);
        assert!(may_taint(&mixed, "", 1));
        let partial = BTreeMap::from([(String::new(), ZoneState::PartialDisruption)]);
        assert!(!may_taint(&partial, "", 4));
        assert_eq!(
            zone_key(&node("True", &[("topology.kubernetes.io/zone", "a")])),
            ":\x00:a"
        );
    }
}
