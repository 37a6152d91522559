//! The EndpointSlice controller (upstream's pkg/controller/endpointslice): for every Service
//! with a selector, slices of at most 100 endpoints listing the selected pods' addresses, their
//! readiness, and the container ports the service ports resolve to on each pod.
//!
//! Keyed by Service (`namespace/name`). Watches Services, pods, nodes (for zones) and the
//! slices it manages. Slices are written with the resourceVersion they were read at; a slice
//! this controller wrote but its cache does not show yet (by generation, as upstream's
//! EndpointSliceTracker) makes the sync wait for the cache rather than act on a stale view,
//! so it never creates a duplicate slice. Deleted Services' slices go with their
//! ownerReferences (the garbage collector), as upstream.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::util::events::Recorder;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::ObjectRef;

use crate::informers::Cache;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use crate::informers::Informers;
use crate::util::controller_ref::controller_ref;
use crate::util::queue::KeyQueue;
use crate::util::reconciler::{Error, guarded};
use crate::util::service_pods::{
    LAST_CHANGE_TRIGGER_TIME, Memberships, TriggerTimeTracker, find_port, format_time,
    inherited_labels, key, pod_ips_of, reflect, selects, service_key, should_pod_be_in_endpoints,
    should_set_hostname,
};
use kube::runtime::controller::Action;

pub const CONTROLLER_NAME: &str = "endpointslice-controller.k8s.io";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Upstream's default `--max-endpoints-per-slice`.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Upstream's default `--concurrent-service-endpoint-syncs`.
const WORKERS: usize = 5;

#[derive(Clone, Debug)]
pub struct Config {
    pub max_endpoints_per_slice: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_endpoints_per_slice: MAX_ENDPOINTS_PER_SLICE,
        }
    }
}

/// Generations of the slices this controller wrote, per Service; `None` when it deleted it.
#[derive(Debug, Default)]
struct SliceTracker {
    by_service: Mutex<HashMap<String, HashMap<String, Option<i64>>>>,
}

impl SliceTracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Option<i64>>>> {
        self.by_service.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wrote(&self, svc: &str, slice: &EndpointSlice) {
        if let Some(uid) = slice.metadata.uid.clone() {
            self.lock()
                .entry(svc.to_string())
                .or_default()
                .insert(uid, Some(slice.metadata.generation.unwrap_or(0)));
        }
    }

    fn deleted(&self, svc: &str, uid: &str) {
        self.lock()
            .entry(svc.to_string())
            .or_default()
            .insert(uid.to_string(), None);
    }

    /// A slice left the cache: expected (if this controller deleted it) or not.
    fn observe_deletion(&self, svc: &str, uid: &str) {
        if let Some(m) = self.lock().get_mut(svc) {
            m.remove(uid);
        }
    }

    /// Whether the cache lags behind this controller's own writes.
    fn stale(&self, svc: &str, slices: &[Arc<EndpointSlice>]) -> bool {
        let mut all = self.lock();
        let Some(tracked) = all.get_mut(svc) else {
            return false;
        };
        let mut stale = false;
        tracked.retain(|uid, generation| {
            let cached = slices
                .iter()
                .find(|s| s.metadata.uid.as_deref() == Some(uid.as_str()));
            match (cached, *generation) {
                (Some(_), None) => {
                    stale = true;
                    true
                }
                (None, None) => false,
                (Some(s), Some(g)) => {
                    let behind = s.metadata.generation.unwrap_or(0) < g;
                    stale |= behind;
                    behind
                }
                (None, Some(_)) => {
                    stale = true;
                    true
                }
            }
        });
        stale
    }

    fn forget(&self, svc: &str) {
        self.lock().remove(svc);
    }
}

struct Ctx {
    client: Client,
    services: Cache<Service>,
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    slices: Cache<EndpointSlice>,
    tracker: SliceTracker,
    triggers: TriggerTimeTracker,
    recorder: Recorder,
    config: Config,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    run_with(informers, Config::default()).await
}

pub async fn run_with(informers: Arc<Informers>, config: Config) {
    let client = informers.client();
    let queue = KeyQueue::named("endpoint_slice");
    let memberships = Arc::new(Memberships::default());
    let q = queue.clone();
    let (services, services_run) = reflect(informers.of::<Service>(), move |s: &Service, _| {
        q.add(service_key(s))
    });
    let (q, known, m) = (queue.clone(), services.clone(), memberships.clone());
    let (pods, pods_run) = reflect(informers.of::<Pod>(), move |p: &Pod, deleted| {
        for k in m.services_for(p, deleted, &known) {
            q.add(k);
        }
    });
    let (nodes, nodes_run) = reflect(informers.of::<Node>(), |_: &Node, _| {});
    let ctx_slot: Arc<std::sync::OnceLock<Arc<Ctx>>> = Arc::default();
    let (q, slot) = (queue.clone(), ctx_slot.clone());
    let managed = format!("{MANAGED_BY_LABEL}={CONTROLLER_NAME}");
    let (slices, slices_run) = reflect(
        informers.selected::<EndpointSlice>(watcher::Config::default().labels(&managed), &managed),
        move |s: &EndpointSlice, deleted| {
            let Some(name) = s.labels().get(SERVICE_NAME_LABEL) else {
                return;
            };
            let svc = key(s.namespace().as_deref().unwrap_or_default(), name);
            if deleted && let (Some(ctx), Some(uid)) = (slot.get(), s.metadata.uid.as_deref()) {
                ctx.tracker.observe_deletion(&svc, uid);
            }
            q.add(svc);
        },
    );
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "endpoint-slice-controller".into(),
                instance: None,
            },
        ),
        client,
        services,
        pods,
        nodes,
        slices,
        tracker: SliceTracker::default(),
        triggers: TriggerTimeTracker::default(),
        config,
    });
    let _ = ctx_slot.set(ctx.clone());
    let workers = async {
        let ready = futures::future::join4(
            ctx.services.wait_until_ready(),
            ctx.pods.wait_until_ready(),
            ctx.nodes.wait_until_ready(),
            ctx.slices.wait_until_ready(),
        )
        .await;
        if ready.0.is_err() || ready.1.is_err() || ready.2.is_err() || ready.3.is_err() {
            return;
        }
        futures::future::join_all((0..WORKERS).map(|_| worker(ctx.clone(), queue.clone()))).await;
    };
    tokio::join!(services_run, pods_run, nodes_run, slices_run, workers);
}

async fn worker(ctx: Arc<Ctx>, queue: KeyQueue) {
    loop {
        let key = queue.next().await;
        let work = async { sync(&ctx, &key).await.map(|()| Action::await_change()) };
        match guarded("endpointslice", key.clone(), work).await {
            Ok(_) => queue.forget(&key),
            Err(e) => {
                if !matches!(e, Error::Stale(_)) {
                    tracing::warn!(service = %key, error = %e, "syncing endpoint slices failed");
                    warn_service(&ctx, &key, &e).await;
                }
                queue.add_rate_limited(&key);
            }
        }
        queue.done(&key);
    }
}

async fn warn_service(ctx: &Ctx, key: &str, e: &Error) {
    let Some((ns, name)) = key.split_once('/') else {
        return;
    };
    let Some(svc) = ctx.services.get(&ObjectRef::new(name).within(ns)) else {
        return;
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "FailedToUpdateEndpointSlices".into(),
        note: Some(format!(
            "Error updating Endpoint Slices for Service {key}: {e}"
        )),
        action: "UpdateEndpointSlices".into(),
        secondary: None,
    };
    if let Err(err) = ctx.recorder.publish(&ev, &svc.object_ref(&())).await {
        tracing::debug!(error = %err, "publishing an event failed");
    }
}

fn address_type(svc: &Service) -> String {
    svc.spec
        .as_ref()
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first().cloned())
        .unwrap_or_else(|| "IPv4".into())
}

/// Ports sorted, as the key that groups endpoints into slices.
fn ports_key(ports: &[EndpointPort]) -> String {
    let mut v: Vec<(String, i32, String)> = ports
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port.unwrap_or(0),
                p.protocol.clone().unwrap_or_default(),
            )
        })
        .collect();
    v.sort();
    format!("{v:?}")
}

fn endpoint_for(ctx: &Ctx, svc: &Service, pod: &Pod, family: &str) -> Endpoint {
    let serving = crate::util::pods::is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let zone = node_name
        .as_deref()
        .and_then(|n| ctx.nodes.get(&ObjectRef::new(n)))
        .and_then(|n| n.labels().get(ZONE_LABEL).cloned())
        .filter(|z| !z.is_empty());
    Endpoint {
        addresses: pod_ips_of(pod, family),
        conditions: Some(EndpointConditions {
            ready: Some(publish || (serving && !terminating)),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: should_set_hostname(pod, svc)
            .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
            .flatten(),
        node_name,
        zone,
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn owned_by(slice: &EndpointSlice, svc: &Service) -> bool {
    slice.owner_references().iter().any(|o| {
        o.controller == Some(true)
            && o.kind == "Service"
            && o.api_version == "v1"
            && Some(&o.uid) == svc.metadata.uid.as_ref()
    })
}

/// One slice as it will be: the stored one (if any) and its endpoints.
struct Planned {
    existing: Option<Arc<EndpointSlice>>,
    ports: Vec<EndpointPort>,
    endpoints: Vec<Endpoint>,
}

async fn sync(ctx: &Ctx, svc_key: &str) -> Result<(), Error> {
    let Some((ns, name)) = svc_key.split_once('/') else {
        return Ok(());
    };
    let Some(svc) = ctx.services.get(&ObjectRef::new(name).within(ns)) else {
        ctx.triggers.forget(svc_key);
        ctx.tracker.forget(svc_key);
        return Ok(());
    };
    let Some(spec) = &svc.spec else { return Ok(()) };
    // Selectorless Services have their slices made by someone else; ExternalName Services have
    // none (upstream leaves any that exist alone).
    if spec.selector.is_none()
        || spec.type_.as_deref() == Some("ExternalName")
        || svc.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    let existing: Vec<Arc<EndpointSlice>> = ctx
        .slices
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
                && s.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(CONTROLLER_NAME)
        })
        .collect();
    if ctx.tracker.stale(svc_key, &existing) {
        return Err(Error::Stale(svc_key.to_string()));
    }
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| selects(&svc, p))
        .collect();
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let trigger = ctx.triggers.compute(&svc, &pod_refs);
    let family = address_type(&svc);

    // Desired endpoints, grouped by their resolved ports, keyed by address.
    let mut desired: BTreeMap<String, (Vec<EndpointPort>, BTreeMap<String, Endpoint>)> =
        BTreeMap::new();
    for pod in &pods {
        if !should_pod_be_in_endpoints(pod, true) {
            continue;
        }
        let ep = endpoint_for(ctx, &svc, pod, &family);
        let Some(addr) = ep.addresses.first().cloned() else {
            continue;
        };
        let ports: Vec<EndpointPort> = spec
            .ports
            .iter()
            .flatten()
            .filter_map(|sp| {
                Some(EndpointPort {
                    name: Some(sp.name.clone().unwrap_or_default()),
                    port: Some(find_port(pod, sp)?),
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                })
            })
            .collect();
        desired
            .entry(ports_key(&ports))
            .or_insert_with(|| (ports, BTreeMap::new()))
            .1
            .insert(addr, ep);
    }

    // Existing slices keep the desired endpoints they hold; the rest go.
    let mut plans: Vec<Planned> = Vec::new();
    let mut delete: Vec<Arc<EndpointSlice>> = Vec::new();
    for slice in existing {
        let key = ports_key(slice.ports.as_deref().unwrap_or_default());
        let group = desired.get_mut(&key);
        match group {
            Some((ports, eps)) if owned_by(&slice, &svc) && slice.address_type == family => {
                let kept: Vec<Endpoint> = slice
                    .endpoints
                    .iter()
                    .filter_map(|e| eps.remove(e.addresses.first()?))
                    .collect();
                plans.push(Planned {
                    ports: ports.clone(),
                    existing: Some(slice),
                    endpoints: kept,
                });
            }
            _ if owned_by(&slice, &svc)
                && slice.address_type == family
                && slice.endpoints.is_empty() =>
            {
                // Possibly the placeholder: decided below.
                plans.push(Planned {
                    ports: slice.ports.clone().unwrap_or_default(),
                    existing: Some(slice),
                    endpoints: Vec::new(),
                });
            }
            _ => delete.push(slice),
        }
    }
    // New endpoints fill slices with room (fullest first), then new slices.
    let max = ctx.config.max_endpoints_per_slice.max(1);
    for (key, (ports, eps)) in desired {
        let mut rest: Vec<Endpoint> = eps.into_values().collect();
        let mut with_room: Vec<usize> = (0..plans.len())
            .filter(|i| ports_key(&plans[*i].ports) == key && plans[*i].endpoints.len() < max)
            .collect();
        with_room.sort_by_key(|i| std::cmp::Reverse(plans[*i].endpoints.len()));
        for i in with_room {
            let room = max - plans[i].endpoints.len();
            let take = room.min(rest.len());
            plans[i].endpoints.extend(rest.drain(..take));
        }
        while !rest.is_empty() {
            let take = max.min(rest.len());
            plans.push(Planned {
                existing: None,
                ports: ports.clone(),
                endpoints: rest.drain(..take).collect(),
            });
        }
    }
    // Empty slices go, but a Service with no endpoints keeps one empty placeholder slice.
    let nonempty = plans.iter().any(|p| !p.endpoints.is_empty());
    let mut placeholder_kept = false;
    plans.retain(|p| {
        if !p.endpoints.is_empty() {
            return true;
        }
        let keep = !nonempty && !placeholder_kept && p.existing.is_some() && p.ports.is_empty();
        if keep {
            placeholder_kept = true;
        } else if let Some(s) = &p.existing {
            delete.push(s.clone());
        }
        keep
    });
    if !nonempty && !placeholder_kept {
        plans.push(Planned {
            existing: None,
            ports: Vec::new(),
            endpoints: Vec::new(),
        });
    }

    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    let mut labels = inherited_labels(&svc, &[SERVICE_NAME_LABEL, MANAGED_BY_LABEL]);
    labels.insert(SERVICE_NAME_LABEL.into(), name.into());
    labels.insert(MANAGED_BY_LABEL.into(), CONTROLLER_NAME.into());
    let trigger = trigger.map(format_time);
    for plan in plans {
        let mut endpoints = plan.endpoints;
        endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        match plan.existing {
            Some(old) => {
                if old.endpoints == endpoints
                    && old.metadata.labels.as_ref() == Some(&labels)
                    && old.ports.clone().unwrap_or_default() == plan.ports
                {
                    continue;
                }
                let mut new = (*old).clone();
                new.endpoints = endpoints;
                new.ports = Some(plan.ports);
                new.metadata.labels = Some(labels.clone());
                set_trigger(&mut new.metadata, trigger.as_deref());
                let stored = api
                    .replace(&new.name_any(), &PostParams::default(), &new)
                    .await?;
                ctx.tracker.wrote(svc_key, &stored);
            }
            None => {
                let mut new = EndpointSlice {
                    metadata: ObjectMeta {
                        generate_name: Some(slice_prefix(name)),
                        namespace: Some(ns.into()),
                        labels: Some(labels.clone()),
                        owner_references: Some(vec![controller_ref(svc.as_ref())]),
                        ..Default::default()
                    },
                    address_type: family.clone(),
                    endpoints,
                    ports: Some(plan.ports),
                };
                set_trigger(&mut new.metadata, trigger.as_deref());
                let stored = api.create(&PostParams::default(), &new).await?;
                ctx.tracker.wrote(svc_key, &stored);
            }
        }
    }
    for slice in delete {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: slice.metadata.uid.clone(),
                resource_version: slice.metadata.resource_version.clone(),
            }),
            ..Default::default()
        };
        match api.delete(&slice.name_any(), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(uid) = &slice.metadata.uid {
            ctx.tracker.deleted(svc_key, uid);
        }
    }
    Ok(())
}

fn set_trigger(meta: &mut ObjectMeta, trigger: Option<&str>) {
    let annotations = meta.annotations.get_or_insert_with(Default::default);
    match trigger {
        Some(t) => {
            annotations.insert(LAST_CHANGE_TRIGGER_TIME.into(), t.into());
        }
        None => {
            annotations.remove(LAST_CHANGE_TRIGGER_TIME);
        }
    }
    if annotations.is_empty() {
        meta.annotations = None;
    }
}

/// `<service>-`, shortened so a generated name stays a valid name.
fn slice_prefix(service: &str) -> String {
    let mut prefix = format!("{service}-");
    if prefix.len() > 253 - 5 {
        prefix.truncate(253 - 5);
    }
    prefix
}
