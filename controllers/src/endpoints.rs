//! The Endpoints controller (upstream's pkg/controller/endpoint): for every Service with a
//! selector, an Endpoints object of the same name listing the selected pods' addresses (ready
//! and not ready) per set of resolved ports, for clients that still read Endpoints.
//!
//! Keyed by Service. Upstream's Endpoints carry no ownerReference: the controller deletes a
//! deleted Service's Endpoints itself, which is why it runs on a key queue fed by reflectors
//! (a Service that left the cache is still reconciled) rather than `kube::runtime::Controller`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::util::events::Recorder;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::ObjectRef;

use crate::informers::Cache;
use kube::{Client, Resource, ResourceExt};

use crate::informers::Informers;
use crate::util::pods::is_ready;
use crate::util::queue::KeyQueue;
use crate::util::reconciler::{Error, guarded};
use crate::util::service_pods::{
    HEADLESS_LABEL, LAST_CHANGE_TRIGGER_TIME, Memberships, TriggerTimeTracker, find_port,
    format_time, is_headless, key, pod_ips_of, reflect, selects, service_key,
    should_pod_be_in_endpoints, should_set_hostname,
};
use kube::runtime::controller::Action;

/// Upstream's default `--concurrent-endpoint-syncs`.
const WORKERS: usize = 5;

struct Ctx {
    client: Client,
    services: Cache<Service>,
    pods: Cache<Pod>,
    endpoints: Cache<Endpoints>,
    triggers: TriggerTimeTracker,
    recorder: Recorder,
}

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let client = informers.client();
    let queue = KeyQueue::named("endpoint");
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
    let q = queue.clone();
    let (endpoints, endpoints_run) = reflect(
        informers.of::<Endpoints>(),
        move |e: &Endpoints, deleted| {
            // A deleted Endpoints of a selected Service is made again.
            if deleted {
                q.add(key(
                    e.namespace().as_deref().unwrap_or_default(),
                    &e.name_any(),
                ));
            }
        },
    );
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "endpoint-controller".into(),
                instance: None,
            },
        ),
        client,
        services,
        pods,
        endpoints,
        triggers: TriggerTimeTracker::default(),
    });
    let workers = async {
        let ready = futures::future::join3(
            ctx.services.wait_until_ready(),
            ctx.pods.wait_until_ready(),
            ctx.endpoints.wait_until_ready(),
        )
        .await;
        if ready.0.is_err() || ready.1.is_err() || ready.2.is_err() {
            return;
        }
        futures::future::join_all((0..WORKERS).map(|_| worker(ctx.clone(), queue.clone()))).await;
    };
    tokio::join!(services_run, pods_run, endpoints_run, workers);
}

async fn worker(ctx: Arc<Ctx>, queue: KeyQueue) {
    loop {
        let key = queue.next().await;
        let work = async { sync(&ctx, &key).await.map(|()| Action::await_change()) };
        match guarded("endpoint", key.clone(), work).await {
            Ok(_) => queue.forget(&key),
            Err(e) => {
                tracing::warn!(service = %key, error = %e, "syncing endpoints failed");
                queue.add_rate_limited(&key);
            }
        }
        queue.done(&key);
    }
}

/// Upstream's RepackSubsets: one subset per distinct set of addresses, holding every port
/// those addresses serve; addresses and ports sorted.
fn repack(entries: Vec<(EndpointAddress, bool, Option<EndpointPort>)>) -> Vec<EndpointSubset> {
    /// Addresses by (ip, pod uid), with whether they are ready.
    type Addresses = BTreeMap<(String, String), (EndpointAddress, bool)>;
    let port_key = |p: &Option<EndpointPort>| {
        p.as_ref().map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port,
                p.protocol.clone().unwrap_or_default(),
                p.app_protocol.clone().unwrap_or_default(),
            )
        })
    };
    // Port → addresses offering it (ready wins over not ready).
    let mut by_port: BTreeMap<_, (Option<EndpointPort>, Addresses)> = BTreeMap::new();
    for (addr, ready, port) in entries {
        let k = (
            addr.ip.clone(),
            addr.target_ref
                .as_ref()
                .and_then(|r| r.uid.clone())
                .unwrap_or_default(),
        );
        let slot = by_port
            .entry(port_key(&port))
            .or_insert_with(|| (port, BTreeMap::new()));
        let e = slot.1.entry(k).or_insert((addr, ready));
        e.1 |= ready;
    }
    // Address set → ports.
    let mut by_addrs: BTreeMap<String, (Vec<EndpointPort>, Addresses)> = BTreeMap::new();
    for (_, (port, addrs)) in by_port {
        let k = format!(
            "{:?}",
            addrs.iter().map(|(k, (_, r))| (k, *r)).collect::<Vec<_>>()
        );
        let slot = by_addrs.entry(k).or_insert_with(|| (Vec::new(), addrs));
        slot.0.extend(port);
    }
    by_addrs
        .into_values()
        .map(|(ports, addrs)| {
            let (ready, not_ready): (Vec<_>, Vec<_>) = addrs.into_values().partition(|(_, r)| *r);
            let list = |v: Vec<(EndpointAddress, bool)>| {
                let v: Vec<EndpointAddress> = v.into_iter().map(|(a, _)| a).collect();
                (!v.is_empty()).then_some(v)
            };
            EndpointSubset {
                addresses: list(ready),
                not_ready_addresses: list(not_ready),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect()
}

fn desired_subsets(svc: &Service, pods: &[&Pod]) -> Vec<EndpointSubset> {
    let Some(spec) = &svc.spec else {
        return Vec::new();
    };
    let publish = spec.publish_not_ready_addresses.unwrap_or(false);
    let family = spec
        .ip_families
        .as_ref()
        .and_then(|f| f.first().cloned())
        .unwrap_or_else(|| "IPv4".into());
    let service_ports = spec.ports.as_deref().unwrap_or_default();
    let mut entries = Vec::new();
    for pod in pods {
        if !should_pod_be_in_endpoints(pod, publish) {
            continue;
        }
        let Some(ip) = pod_ips_of(pod, &family).into_iter().next() else {
            continue;
        };
        let addr = EndpointAddress {
            ip,
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            hostname: should_set_hostname(pod, svc)
                .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
                .flatten(),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.metadata.namespace.clone(),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            }),
        };
        let ready = publish || is_ready(pod);
        if service_ports.is_empty() {
            // Headless Services may have no ports.
            if is_headless(svc) {
                entries.push((addr, ready, None));
            }
            continue;
        }
        for sp in service_ports {
            let Some(port) = find_port(pod, sp) else {
                continue;
            };
            entries.push((
                addr.clone(),
                ready,
                Some(EndpointPort {
                    name: sp.name.clone().filter(|n| !n.is_empty()),
                    port,
                    protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: sp.app_protocol.clone(),
                }),
            ));
        }
    }
    repack(entries)
}

async fn sync(ctx: &Ctx, svc_key: &str) -> Result<(), Error> {
    let Some((ns, name)) = svc_key.split_once('/') else {
        return Ok(());
    };
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), ns);
    let Some(svc) = ctx.services.get(&ObjectRef::new(name).within(ns)) else {
        // The Service is gone: so are its Endpoints.
        ctx.triggers.forget(svc_key);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(());
    };
    let Some(spec) = &svc.spec else { return Ok(()) };
    if spec.type_.as_deref() == Some("ExternalName") || spec.selector.is_none() {
        return Ok(());
    }
    let pods: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| selects(&svc, p))
        .collect();
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let trigger = ctx.triggers.compute(&svc, &pod_refs);
    let subsets = desired_subsets(&svc, &pod_refs);

    let current = ctx.endpoints.get(&ObjectRef::new(name).within(ns));
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if is_headless(&svc) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    if let Some(cur) = &current
        && cur.subsets.clone().unwrap_or_default() == subsets
        && cur.metadata.labels.clone().unwrap_or_default() == labels
    {
        return Ok(());
    }
    let mut new = match &current {
        Some(cur) => (**cur).clone(),
        None => Endpoints {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            subsets: None,
        },
    };
    new.subsets = (!subsets.is_empty()).then_some(subsets);
    new.metadata.labels = (!labels.is_empty()).then_some(labels);
    let annotations = new
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    match trigger {
        Some(t) => {
            annotations.insert(LAST_CHANGE_TRIGGER_TIME.into(), format_time(t));
        }
        None => {
            annotations.remove(LAST_CHANGE_TRIGGER_TIME);
        }
    }
    if annotations.is_empty() {
        new.metadata.annotations = None;
    }
    let result = match &current {
        Some(_) => api.replace(name, &PostParams::default(), &new).await,
        None => api.create(&PostParams::default(), &new).await,
    };
    match result {
        Ok(_) => Ok(()),
        // A terminating namespace refuses new objects: nothing to do.
        Err(kube::Error::Api(e)) if current.is_none() && e.code == 403 => Ok(()),
        Err(e) => {
            let ev = Event {
                type_: EventType::Warning,
                reason: "FailedToUpdateEndpoint".into(),
                note: Some(format!("Failed to update endpoint {svc_key}: {e}")),
                action: "UpdateEndpoint".into(),
                secondary: None,
            };
            if let Err(err) = ctx.recorder.publish(&ev, &new.object_ref(&())).await {
                tracing::debug!(error = %err, "publishing an event failed");
            }
            Err(e.into())
        }
    }
}
