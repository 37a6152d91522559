//! What the Endpoints and EndpointSlice controllers share, with upstream's definitions
//! (pkg/controller/util/endpoint, pkg/api/v1/pod): which pods a Service selects, which of them
//! are endpoints, which container port a service port means for each pod, and the
//! `endpoints.kubernetes.io/last-change-trigger-time` bookkeeping.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::pods::{is_ready, is_terminal};
use crate::informers::Cache;
use crate::informers::{Change, Informer};

/// The annotation both controllers set on what they write.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// Set (empty) on what a headless Service's endpoints carry.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

pub fn service_key(svc: &Service) -> String {
    key(
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default(),
    )
}

pub fn pod_key(pod: &Pod) -> String {
    key(
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

pub fn is_headless(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .is_some_and(|s| s.cluster_ip.as_deref() == Some("None"))
}

/// Whether the Service has a selector at all: selectorless Services' endpoints are managed
/// by someone else.
pub fn has_selector(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| s.selector.is_some())
}

/// Whether `svc` selects `pod` (same namespace, every selector label matches).
pub fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(selector) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    if svc.metadata.namespace != pod.metadata.namespace {
        return false;
    }
    let labels = pod.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// Upstream's ShouldPodBeInEndpoints: not finished, has an IP, and (unless terminating pods
/// are wanted) not being deleted.
pub fn should_pod_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    if is_terminal(pod) {
        return false;
    }
    let has_ip = pod.status.as_ref().is_some_and(|s| {
        s.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
            || s.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty())
    });
    has_ip && (include_terminating || pod.metadata.deletion_timestamp.is_none())
}

/// Upstream's ShouldSetHostname: the pod names this Service as its subdomain.
pub fn should_set_hostname(pod: &Pod, svc: &Service) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.hostname.as_deref().is_some_and(|h| !h.is_empty())
        && spec.subdomain.as_deref() == svc.metadata.name.as_deref()
        && pod.metadata.namespace == svc.metadata.namespace
}

/// The container port a service port targets on `pod` (upstream's FindPort): a number as is,
/// a name looked up among the pod's container ports of the same protocol.
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        Some(IntOrString::String(name)) => {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
        Some(IntOrString::Int(n)) => Some(*n),
        None => Some(port.port),
    }
}

pub fn pod_is_serving(pod: &Pod) -> bool {
    is_ready(pod)
}

/// The pod's IPs of one family ("IPv4" or "IPv6").
pub fn pod_ips_of(pod: &Pod, family: &str) -> Vec<String> {
    let Some(status) = &pod.status else {
        return Vec::new();
    };
    let mut ips: Vec<String> = status
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.clone())
        .collect();
    if ips.is_empty() {
        ips.extend(status.pod_ip.clone());
    }
    ips.retain(|ip| {
        ip.parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_ipv6() == (family == "IPv6"))
    });
    ips
}

/// Upstream's TriggerTimeTracker: the earliest change (a pod's Ready transition, the
/// Service's creation) since the previous sync of a Service, for
/// `endpoints.kubernetes.io/last-change-trigger-time`.
#[derive(Debug, Default)]
pub struct TriggerTimeTracker {
    states: Mutex<HashMap<String, TriggerState>>,
}

#[derive(Debug, Default)]
struct TriggerState {
    pods: HashMap<String, Timestamp>,
    service: Option<Timestamp>,
}

impl TriggerTimeTracker {
    /// The trigger time to export for this sync, if any.
    pub fn compute(&self, svc: &Service, pods: &[&Pod]) -> Option<Timestamp> {
        let key = service_key(svc);
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let known = states.contains_key(&key);
        let state = states.entry(key).or_default();
        let mut min: Option<Timestamp> = None;
        let mut seen = HashMap::new();
        for pod in pods {
            let Some(t) = super::pods::ready_condition(pod)
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0)
            else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if state.pods.get(&name).is_none_or(|last| t > *last) {
                min = Some(min.map_or(t, |m| m.min(t)));
            }
            seen.insert(name, t);
        }
        let created = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(c) = created
            && state.service.is_none_or(|last| c > last)
        {
            min = Some(min.map_or(c, |m| m.min(c)));
        }
        state.pods = seen;
        state.service = created;
        if known { min } else { created }
    }

    pub fn forget(&self, svc_key: &str) {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(svc_key);
    }
}

/// Formats a trigger time as upstream does (RFC 3339 in UTC, no trailing zero digits).
pub fn format_time(t: Timestamp) -> String {
    t.to_string()
}

/// Which Services each pod belonged to when last seen, so a pod whose labels changed also
/// wakes the Services it left (upstream compares old and new pods in its update handler).
#[derive(Debug, Default)]
pub struct Memberships {
    by_pod: Mutex<HashMap<String, HashSet<String>>>,
}

impl Memberships {
    /// The Services to sync for a pod event: those selecting it now and those it was in.
    pub fn services_for(
        &self,
        pod: &Pod,
        deleted: bool,
        services: &Cache<Service>,
    ) -> HashSet<String> {
        let now: HashSet<String> = if deleted {
            HashSet::new()
        } else {
            services
                .state()
                .iter()
                .filter(|s| selects(s, pod))
                .map(|s| service_key(s))
                .collect()
        };
        let mut by_pod = self.by_pod.lock().unwrap_or_else(|e| e.into_inner());
        let key = pod_key(pod);
        let before = if deleted {
            by_pod.remove(&key).unwrap_or_default()
        } else {
            by_pod.insert(key, now.clone()).unwrap_or_default()
        };
        now.union(&before).cloned().collect()
    }
}

/// Follows a shared informer, calling `on_change(object, deleted)` for every change after the
/// cache holds it, and for every cached object after a sync. Returns the cache and the future
/// that follows.
pub fn reflect<K, F>(
    informer: Informer<K>,
    on_change: F,
) -> (Cache<K>, impl std::future::Future<Output = ()> + Send)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    F: Fn(&K, bool) + Send + 'static,
{
    let store = informer.store();
    let changes = informer.changes();
    let cache = store.clone();
    let run = async move {
        futures::pin_mut!(changes);
        while let Some(change) = changes.next().await {
            match change {
                Change::Applied { object, .. } => on_change(&object, false),
                Change::Deleted(object) => on_change(&object, true),
                Change::Synced => {
                    for object in cache.state() {
                        on_change(&object, false);
                    }
                }
            }
        }
    };
    (store, run)
}

/// The labels of what is written for `svc`: its own labels, minus the controller's reserved
/// ones, plus `service.kubernetes.io/headless` for headless Services.
pub fn inherited_labels(svc: &Service, reserved: &[&str]) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = svc
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !reserved.contains(&k.as_str()) && k != HEADLESS_LABEL)
        .collect();
    if is_headless(svc) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels
}
