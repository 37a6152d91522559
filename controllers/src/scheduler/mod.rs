//! The scheduler (upstream's kube-scheduler with its default profile): it places every pod
//! that names `default-scheduler` (or no scheduler) and no node.
//!
//! One task owns all state, as upstream's single scheduling loop does: it takes pod and node
//! watch events, keeps the per-node accounting ([`cache`]) and the queue of waiting pods
//! ([`queue`]) up to date, and decides one pod at a time from memory, never listing anything.
//! Only the API calls (bind, status, events) run concurrently, as upstream's binding cycle
//! does, and a decision is counted on its node at once ([`cache::Cache::assume`]) so the next
//! decision sees it. A pod whose claims wait for their first consumer has them bound (or
//! provisioned) on the chosen node first ([`volume_binding`]), in its binding task, so that
//! waiting for them holds up no other pod. A bind goes through the `pods/binding` subresource, which refuses a pod
//! already bound or replaced by a new one of the same name (the UID travels in the Binding).

pub mod algorithm;
pub mod cache;
pub mod filters;
mod listers;
pub mod load;
pub mod metrics;
pub mod pod_affinity;
pub mod preemption;
pub mod queue;
pub mod resources;
pub mod scoring;
pub mod topology_spread;
pub mod volume_binding;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::util::events::Recorder;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Binding, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::informers::{Change, Informers};
use crate::leader::{LeaderElectionConfig, run_while_leader};
use crate::util::pods::is_terminal;
use cache::{Cache, NodeState, PodInfo};
use listers::Listers;
use metrics::{AttemptResult, PendingPods};
use queue::{QueuedPod, SchedulingQueue};
pub use scoring::ScoringStrategy;

/// The name pods give in `spec.schedulerName` and the reporter of this scheduler's events.
pub const SCHEDULER_NAME: &str = "default-scheduler";
/// Binds in flight at once. Upstream binds each pod in a goroutine of its own; a bound keeps
/// a burst from opening thousands of requests at once.
const BIND_PARALLELISM: usize = 64;
/// How long the scheduler waits for its caches of other kinds before it starts.
const LISTERS_SYNC_LIMIT: Duration = Duration::from_secs(30);
/// How often pods left unschedulable for long are looked at (upstream's flush period).
const LEFTOVER_FLUSH_PERIOD: Duration = Duration::from_secs(30);

/// Flags named after kube-scheduler's (the strategy is this project's own).
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    pub scoring_strategy: ScoringStrategy,
    pub leader_elect: bool,
    /// How long a pod's binding waits for its claims to be bound (VolumeBinding's
    /// `bindTimeoutSeconds`).
    pub bind_timeout: Duration,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            scoring_strategy: ScoringStrategy::default(),
            leader_elect: true,
            bind_timeout: volume_binding::DEFAULT_BIND_TIMEOUT,
        }
    }
}

/// The scheduler: leader-elected through the `kube-scheduler` Lease unless told otherwise;
/// returns after `shutdown`.
/// Schedules through `client` (its writes go out as the scheduler) from the process's shared
/// `informers`, until `shutdown`.
pub async fn run(
    informers: Arc<Informers>,
    client: Client,
    options: SchedulerOptions,
    shutdown: impl Future<Output = ()>,
) {
    if !options.leader_elect {
        tokio::select! {
            _ = run_scheduler(informers, client, options) => {}
            _ = shutdown => {}
        }
        return;
    }
    run_while_leader(
        client.clone(),
        LeaderElectionConfig::new("kube-scheduler"),
        || run_scheduler(informers.clone(), client.clone(), options.clone()),
        shutdown,
    )
    .await
}

/// Schedules until dropped (its API calls are dropped with it).
pub async fn run_scheduler(informers: Arc<Informers>, client: Client, options: SchedulerOptions) {
    let strategy = options.scoring_strategy;
    tracing::info!(%strategy, "starting the scheduler");
    Scheduler::new(client, strategy, options.bind_timeout)
        .run(&informers)
        .await
}

/// Whether this scheduler is responsible for the pod.
fn responsible(pod: &Pod) -> bool {
    matches!(
        pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()),
        None | Some("") | Some(SCHEDULER_NAME)
    )
}

fn assigned_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// What a finished background task reports back to the loop.
enum Outcome {
    Bound {
        uid: String,
    },
    BindFailed {
        queued: QueuedPod,
        error: kube::Error,
    },
    /// Its claims could not be bound (VolumeBinding's PreBind); the message says why.
    PreBindFailed {
        queued: QueuedPod,
        message: String,
    },
    Recorded,
    /// A sample of the nodes' measured use (load-aware strategies).
    Loads(Result<load::Measured, kube::Error>),
}

/// What woke the loop.
enum Step {
    Pod(Change<Pod>),
    Node(Change<Node>),
    /// A claim changed (upstream's hint: pods using it may fit now).
    Claim(Change<PersistentVolumeClaim>),
    /// A volume or class changed: any pod with claims may fit now.
    Storage,
    TaskDone(Outcome),
    BackoffExpired,
    FlushLeftovers,
    RefreshLoads,
    Schedule,
    Stop,
}

struct Scheduler {
    client: Client,
    recorder: Recorder,
    strategy: ScoringStrategy,
    nodes: BTreeMap<String, NodeState>,
    cache: Cache,
    queue: SchedulingQueue,
    /// The node chosen last (RoundRobin continues after it).
    last_node: Option<String>,
    /// Where the next search for feasible nodes starts (upstream's nextStartNodeIndex).
    next_start_node: usize,
    /// The API calls in flight; dropped (aborted) with the scheduler.
    tasks: JoinSet<Outcome>,
    binds: Arc<Semaphore>,
    pods_synced: bool,
    nodes_synced: bool,
    listers: Option<Listers>,
    /// Pods nominated to a node by preemption, by UID: the node and the pod.
    nominated: HashMap<String, (String, PodInfo)>,
    /// The nodes' measured use, for the load-aware strategies.
    loads: load::NodeLoads,
    /// Volumes and claims being bound for pods in their binding tasks.
    assumed_volumes: volume_binding::Assumed,
    /// What binding tasks wait on for claims to be bound.
    bind_watch: Option<volume_binding::BindWatch>,
    bind_timeout: Duration,
    /// Pods this scheduler would place but for their scheduling gates, by UID.
    gated: HashSet<String>,
    /// `scheduler_pending_pods` of this scheduler.
    pending: Arc<PendingPods>,
}

impl Scheduler {
    fn new(client: Client, strategy: ScoringStrategy, bind_timeout: Duration) -> Self {
        let reporter = Reporter {
            controller: SCHEDULER_NAME.into(),
            instance: None,
        };
        Scheduler {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            strategy,
            nodes: BTreeMap::new(),
            cache: Cache::default(),
            queue: SchedulingQueue::default(),
            last_node: None,
            next_start_node: 0,
            tasks: JoinSet::new(),
            binds: Arc::new(Semaphore::new(BIND_PARALLELISM)),
            pods_synced: false,
            nodes_synced: false,
            listers: None,
            nominated: HashMap::new(),
            loads: load::NodeLoads::default(),
            assumed_volumes: volume_binding::Assumed::default(),
            bind_watch: None,
            bind_timeout,
            gated: HashSet::new(),
            pending: PendingPods::register(),
        }
    }

    async fn run(mut self, informers: &Informers) {
        let listers = Listers::new(informers);
        listers.wait_until_ready(LISTERS_SYNC_LIMIT).await;
        self.listers = Some(listers);
        let (pod_informer, node_informer) = (informers.of::<Pod>(), informers.of::<Node>());
        let (pod_cache, node_cache) = (pod_informer.store(), node_informer.store());
        let pods = pod_informer.changes();
        let nodes = node_informer.changes();
        let (claim_informer, volume_informer) = (
            informers.of::<PersistentVolumeClaim>(),
            informers.of::<PersistentVolume>(),
        );
        self.bind_watch = Some(volume_binding::BindWatch {
            claims: claim_informer.clone(),
            volumes: volume_informer.clone(),
            pods: pod_informer.store(),
            nodes: node_informer.store(),
            timeout: self.bind_timeout,
        });
        let claims = claim_informer.changes();
        let storage = futures::stream::select(
            volume_informer.changes().map(|_| ()),
            informers.of::<StorageClass>().changes().map(|_| ()),
        );
        futures::pin_mut!(pods, nodes, claims, storage);
        let mut leftovers = tokio::time::interval(LEFTOVER_FLUSH_PERIOD);
        let mut loads = tokio::time::interval(load::REFRESH_PERIOD);
        let load_aware = self.strategy.load_aware();
        loop {
            let backoff_expiry = self.queue.next_backoff_expiry();
            let can_schedule = self.pods_synced && self.nodes_synced && self.queue.has_active();
            let step = tokio::select! {
                change = pods.next() => match change {
                    Some(change) => Step::Pod(change),
                    None => Step::Stop,
                },
                change = nodes.next() => match change {
                    Some(change) => Step::Node(change),
                    None => Step::Stop,
                },
                change = claims.next() => match change {
                    Some(change) => Step::Claim(change),
                    None => Step::Stop,
                },
                change = storage.next() => match change {
                    Some(()) => Step::Storage,
                    None => Step::Stop,
                },
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => match done {
                    Ok(outcome) => Step::TaskDone(outcome),
                    Err(e) => {
                        tracing::error!(error = %e, "a scheduler task failed");
                        Step::TaskDone(Outcome::Recorded)
                    }
                },
                _ = tokio::time::sleep_until(backoff_expiry.unwrap_or_else(Instant::now)),
                    if backoff_expiry.is_some() => Step::BackoffExpired,
                _ = leftovers.tick() => Step::FlushLeftovers,
                _ = loads.tick(), if load_aware => Step::RefreshLoads,
                _ = std::future::ready(()), if can_schedule => Step::Schedule,
            };
            let now = Instant::now();
            match step {
                Step::Pod(change) => self.on_pod_change(change, &pod_cache, now),
                Step::Node(change) => self.on_node_change(change, &node_cache, now),
                Step::Claim(change) => match change.object() {
                    Some(claim) => {
                        let (ns, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
                        self.queue.move_unschedulable_if(now, |p| {
                            volume_binding::uses_claim(p, &ns, &name)
                        });
                    }
                    None => self
                        .queue
                        .move_unschedulable_if(now, volume_binding::has_claims),
                },
                Step::Storage => self
                    .queue
                    .move_unschedulable_if(now, volume_binding::has_claims),
                Step::TaskDone(outcome) => self.on_outcome(outcome, now),
                Step::BackoffExpired => self.queue.flush_backoff(now),
                Step::FlushLeftovers => self.queue.flush_unschedulable_leftovers(now),
                Step::RefreshLoads => {
                    let client = self.client.clone();
                    self.tasks
                        .spawn(async move { Outcome::Loads(load::fetch(&client).await) });
                }
                Step::Schedule => self.schedule_one(now),
                Step::Stop => return,
            }
            let (active, backoff, unschedulable) = self.queue.counts();
            self.pending
                .set(active, backoff, unschedulable, self.gated.len());
        }
    }

    fn on_pod_change(&mut self, change: Change<Pod>, cache: &Store<Pod>, now: Instant) {
        match change {
            Change::Applied { object, .. } => self.on_pod(object, now),
            Change::Deleted(pod) => {
                let uid = pod.uid().unwrap_or_default();
                self.queue.remove(&uid);
                self.gated.remove(&uid);
                self.nominated.remove(&uid);
                if self.cache.remove(&uid) {
                    self.queue.move_all_unschedulable(now);
                }
            }
            Change::Synced => {
                // The cache holds every pod there is: take each, forget the rest.
                let pods = cache.state();
                let seen: HashSet<String> = pods.iter().filter_map(|p| p.uid()).collect();
                for pod in pods {
                    self.on_pod(pod, now);
                }
                let mut freed = false;
                for uid in self.cache.bound_uids() {
                    if !seen.contains(&uid) {
                        freed |= self.cache.remove(&uid);
                    }
                }
                for uid in self.queue.uids() {
                    if !seen.contains(&uid) {
                        self.queue.remove(&uid);
                    }
                }
                self.gated.retain(|uid| seen.contains(uid));
                if freed {
                    self.queue.move_all_unschedulable(now);
                }
                self.pods_synced = true;
            }
        }
    }

    /// A pod added or changed: bound ones are counted on their node, waiting ones queued.
    fn on_pod(&mut self, pod: Arc<Pod>, now: Instant) {
        let uid = pod.uid().unwrap_or_default();
        if let Some(node) = assigned_node(&pod) {
            self.queue.remove(&uid);
            self.gated.remove(&uid);
            self.nominated.remove(&uid);
            if is_terminal(&pod) {
                // A finished pod frees its node.
                if self.cache.remove(&uid) {
                    self.queue.move_all_unschedulable(now);
                }
            } else if self.cache.is_assumed(&uid) {
                self.cache.add_bound(&uid, node, PodInfo::new(&pod));
            } else if self.cache.node_of(&uid) != Some(node) || self.cache.group_differs(&uid, &pod)
            {
                // Placed by someone else, or its labels changed: pods that other pods kept
                // out may fit now.
                self.cache.add_bound(&uid, node, PodInfo::new(&pod));
                self.queue.move_pod_waiters(now);
            }
            return;
        }
        if self.cache.is_assumed(&uid) {
            // Being bound: an older version of the pod.
            return;
        }
        // Pods with scheduling gates wait outside the queue until the gates are removed.
        let gated = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty());
        let waiting =
            responsible(&pod) && pod.metadata.deletion_timestamp.is_none() && !is_terminal(&pod);
        if waiting && gated {
            self.gated.insert(uid.clone());
        } else {
            self.gated.remove(&uid);
        }
        if waiting && !gated {
            self.queue.add_or_update(pod, now);
        } else {
            self.queue.remove(&uid);
        }
    }

    fn on_node_change(&mut self, change: Change<Node>, cache: &Store<Node>, now: Instant) {
        match change {
            Change::Applied { object, .. } => self.on_node(object, now),
            Change::Deleted(node) => {
                self.nodes.remove(&node.name_any());
            }
            Change::Synced => {
                let nodes = cache.state();
                let seen: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
                for node in nodes {
                    self.on_node(node, now);
                }
                self.nodes.retain(|name, _| seen.contains(name));
                self.nodes_synced = true;
            }
        }
    }

    fn on_node(&mut self, node: Arc<Node>, now: Instant) {
        let state = NodeState::new(node);
        let name = state.node.name_any();
        let helps = match self.nodes.get(&name) {
            None => true,
            Some(old) => old.differs_for_scheduling(&state),
        };
        self.nodes.insert(name, state);
        if helps {
            self.queue.move_all_unschedulable(now);
        }
    }

    fn on_outcome(&mut self, outcome: Outcome, now: Instant) {
        let (queued, error) = match outcome {
            Outcome::BindFailed { queued, error } => {
                self.assumed_volumes.forget(&queued.uid());
                (queued, error)
            }
            Outcome::PreBindFailed { queued, message } => {
                let uid = queued.uid();
                self.assumed_volumes.forget(&uid);
                let still_waiting = self.cache.is_assumed(&uid);
                self.cache.forget(&uid);
                tracing::warn!(pod = %format!("{}/{}", queued.pod.namespace().unwrap_or_default(), queued.pod.name_any()), %message, "binding volumes failed");
                if still_waiting {
                    let pod = queued.pod.clone();
                    self.queue.requeue_backoff(queued, now);
                    self.spawn_failure_record(pod, message);
                }
                // Its node has room again.
                self.queue.move_all_unschedulable(now);
                return;
            }
            Outcome::Loads(Ok(measured)) => return self.loads.record(measured),
            Outcome::Loads(Err(error)) => {
                tracing::warn!(%error, "reading the node metrics failed; load-aware scores use the last sample");
                return;
            }
            Outcome::Bound { uid } => return self.assumed_volumes.forget(&uid),
            Outcome::Recorded => return,
        };
        let uid = queued.uid();
        let pod = queued.pod.clone();
        // Not assumed any more: deleted, or the watch saw it bound after all.
        let still_waiting = self.cache.is_assumed(&uid);
        self.cache.forget(&uid);
        tracing::warn!(pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), %error, "binding failed");
        let gone = matches!(&error, kube::Error::Api(s) if s.code == 404 || s.code == 409);
        if still_waiting && !gone {
            self.queue.requeue_backoff(queued, now);
            let message = format!("Binding rejected: {error}");
            self.spawn_failure_record(pod, message);
        }
    }

    fn schedule_one(&mut self, now: Instant) {
        let Some(queued) = self.queue.pop() else {
            return;
        };
        let pod = queued.pod.clone();
        let uid = queued.uid();
        let span = tracing::debug_span!("schedule", pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()));
        let _enter = span.enter();
        let info = PodInfo::new(&pod);
        let listers = self.listers.as_ref();
        let own_constraints = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        let namespace_labels = |name: &str| listers.and_then(|l| l.namespace_labels(name));
        let nominated = self
            .nominated
            .iter()
            .filter(|(other, (_, p))| **other != uid && p.priority >= info.priority)
            .map(|(_, (node, p))| (node.as_str(), p))
            .collect();
        let loads = self.loads.clone();
        let load = move |node: &str| loads.predicted(node, now);
        let view = listers.map(|l| volume_binding::View {
            listers: &l.storage,
            assumed: &self.assumed_volumes,
        });
        let context = algorithm::Context {
            volumes: view.as_ref().map(|v| v as &dyn volume_binding::Objects),
            namespace_labels: &namespace_labels,
            default_spread_selector: listers
                .filter(|_| !own_constraints)
                .map(|l| l.default_selector(&pod)),
            nominated,
            load: &load,
        };
        let decision = algorithm::schedule(
            &pod,
            &info,
            &self.nodes,
            &self.cache,
            &context,
            self.strategy,
            self.last_node.as_deref(),
            &mut self.next_start_node,
            |n| rand::random_range(0..n.max(1)),
        );
        let preemption = match &decision {
            Err(algorithm::ScheduleError::Unfit { preemptable, .. })
                if !preemptable.is_empty() && preemption::eligible(&pod, &info, &self.cache) =>
            {
                let (_, filters) =
                    algorithm::pod_filters(&pod, &info, &self.nodes, &self.cache, &context);
                let budgets: Vec<preemption::Budget> = listers
                    .map(|l| {
                        l.budgets
                            .state()
                            .iter()
                            .map(|b| preemption::Budget::of(b))
                            .collect()
                    })
                    .unwrap_or_default();
                preemption::choose(
                    &pod,
                    &info,
                    preemptable,
                    &self.nodes,
                    &self.cache,
                    &filters,
                    &budgets,
                )
            }
            _ => None,
        };
        // VolumeBinding's Reserve: what binding the claims on the chosen node takes.
        let node_volumes = match (&decision, &context.volumes) {
            (Ok(node), Some(objects)) if volume_binding::has_claims(&pod) => {
                volume_binding::prefilter(&pod, *objects)
                    .ok()
                    .flatten()
                    .and_then(|claims| volume_binding::filter(&claims, &self.nodes[node].node).ok())
                    .filter(|v| !v.all_bound())
            }
            _ => None,
        };
        match decision {
            Ok(node) => {
                tracing::debug!(%node, "assuming");
                if let Some(volumes) = &node_volumes {
                    self.assumed_volumes.assume(&uid, volumes.clone());
                }
                let watch = self.bind_watch.clone();
                self.nominated.remove(&uid);
                if self.strategy.load_aware() {
                    self.loads.placed(&node, &info, now);
                }
                self.cache.assume(&uid, &node, info);
                self.queue.move_pod_waiters(now);
                self.last_node = Some(node.clone());
                let client = self.client.clone();
                let recorder = self.recorder.clone();
                let binds = self.binds.clone();
                self.tasks.spawn(
                    async move {
                        if let (Some(volumes), Some(watch)) = (node_volumes, watch)
                            && let Err(message) = volume_binding::bind_volumes(
                                client.clone(),
                                watch,
                                &queued.pod,
                                &node,
                                volumes,
                            )
                            .await
                        {
                            metrics::attempt(AttemptResult::Error, now.elapsed());
                            return Outcome::PreBindFailed { queued, message };
                        }
                        let permit = binds.acquire_owned().await;
                        let outcome = bind(client, recorder, queued, node, permit).await;
                        // Upstream's attempt ends with the binding cycle.
                        let result = match &outcome {
                            Outcome::Bound { .. } => AttemptResult::Scheduled,
                            _ => AttemptResult::Error,
                        };
                        metrics::attempt(result, now.elapsed());
                        outcome
                    }
                    .instrument(span.clone()),
                );
            }
            Err(e) => {
                // No node fits, or there are none: upstream's UnschedulableAndUnresolvable.
                metrics::attempt(AttemptResult::Unschedulable, now.elapsed());
                let mut message = e.to_string();
                if let Some(choice) = preemption {
                    tracing::info!(node = %choice.node, victims = choice.victims.len(), "preempting");
                    message = e.without_preemption();
                    self.nominated
                        .insert(uid.clone(), (choice.node.clone(), info));
                    let client = self.client.clone();
                    let recorder = self.recorder.clone();
                    let preemptor = pod.clone();
                    self.tasks.spawn(
                        async move {
                            preemption::evict_and_nominate(client, recorder, preemptor, choice)
                                .await;
                            Outcome::Recorded
                        }
                        .instrument(span.clone()),
                    );
                }
                tracing::debug!(%message, "unschedulable");
                self.queue
                    .requeue_unschedulable(queued, now, e.waits_on_pods());
                self.spawn_failure_record(pod, message);
            }
        }
    }

    fn spawn_failure_record(&mut self, pod: Arc<Pod>, message: String) {
        let client = self.client.clone();
        let recorder = self.recorder.clone();
        self.tasks
            .spawn(async move { record_unschedulable(client, recorder, pod, message).await });
    }
}

/// Binds through `pods/binding` holding `permit`, then tells the pod's story.
async fn bind(
    client: Client,
    recorder: Recorder,
    queued: QueuedPod,
    node: String,
    permit: Result<OwnedSemaphorePermit, AcquireError>,
) -> Outcome {
    let pod = &queued.pod;
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.uid(),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.clone()),
            ..Default::default()
        },
    };
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let result = api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await;
    // The event is not part of the bind: it must not hold up the next one.
    drop(permit);
    match result {
        Ok(_) => {
            let event = Event {
                type_: EventType::Normal,
                reason: "Scheduled".into(),
                note: Some(format!(
                    "Successfully assigned {namespace}/{name} to {node}"
                )),
                action: "Binding".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &pod.object_ref(&())).await {
                tracing::debug!(error = %e, "recording the Scheduled event");
            }
            Outcome::Bound { uid: queued.uid() }
        }
        Err(error) => Outcome::BindFailed { queued, error },
    }
}

/// A `FailedScheduling` event, and the PodScheduled condition set to False with the same
/// message (written only when it changes, as upstream, so a waiting pod is not rewritten on
/// every attempt).
async fn record_unschedulable(
    client: Client,
    recorder: Recorder,
    pod: Arc<Pod>,
    message: String,
) -> Outcome {
    let event = Event {
        type_: EventType::Warning,
        reason: "FailedScheduling".into(),
        note: Some(message.clone()),
        action: "Scheduling".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(error = %e, "recording the FailedScheduling event");
    }
    let existing = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    if existing.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message.as_str())
    }) {
        return Outcome::Recorded;
    }
    let transition =
        existing
            .filter(|c| c.status == "False")
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::now(),
                )
            });
    // The UID makes the patch fail on a new pod of the same name.
    let patch = serde_json::json!({
        "metadata": {"uid": pod.uid()},
        "status": {"conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": transition,
        }]},
    });
    let api: Api<Pod> = Api::namespaced(client, &pod.namespace().unwrap_or_default());
    if let Err(e) = api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
    {
        tracing::debug!(error = %e, "setting PodScheduled=False");
    }
    Outcome::Recorded
}
