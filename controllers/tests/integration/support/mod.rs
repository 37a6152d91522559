//! Test stand-ins for components other helpers own: a binder that places unscheduled pods on
//! hollow nodes through pods/binding, as the scheduler would, honouring the node a DaemonSet
//! pod's required node affinity names.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

pub const WAIT: Duration = Duration::from_secs(30);

struct Binder {
    client: Client,
    nodes: Vec<String>,
    next: AtomicUsize,
}

/// The node named by `matchFields metadata.name In [..]` in the pod's required node affinity.
pub fn affinity_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields
            .iter()
            .flatten()
            .find(|r| r.key == "metadata.name" && r.operator == "In")
            .and_then(|r| r.values.as_ref()?.first().cloned())
    })
}

async fn bind(pod: Arc<Pod>, b: Arc<Binder>) -> Result<Action, kube::Error> {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
        || pod.metadata.deletion_timestamp.is_some()
    {
        return Ok(Action::await_change());
    }
    let node = affinity_node(&pod)
        .unwrap_or_else(|| b.nodes[b.next.fetch_add(1, Ordering::Relaxed) % b.nodes.len()].clone());
    let api: Api<Pod> = Api::namespaced(b.client.clone(), &pod.namespace().unwrap_or_default());
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(pod.name_any()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node),
            ..Default::default()
        },
    };
    match api
        .create_subresource::<_, serde_json::Value>(
            "binding",
            &pod.name_any(),
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Action::await_change()),
        Err(e) => Err(e),
    }
}

/// Binds every pod without a node to one of `nodes` until dropped.
pub async fn run_binder(client: Client, nodes: Vec<String>) {
    let binder = Arc::new(Binder {
        client: client.clone(),
        nodes,
        next: AtomicUsize::new(0),
    });
    Controller::new(
        Api::<Pod>::all(client),
        watcher::Config::default().fields("spec.nodeName="),
    )
    .run(
        bind,
        |_, _, _| Action::requeue(Duration::from_millis(200)),
        binder,
    )
    .for_each(|_| async {})
    .await
}
