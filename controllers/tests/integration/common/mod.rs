//! A cluster for workload controller tests: the in-process API server, hollow nodes, the
//! stand-in scheduler of `support`, and the controllers under test as tasks.

#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use minik8s_controllers::hollow::{self, HollowConfig};
use testkit::{Backend, InProcess};
use tokio::task::JoinHandle;

pub const WAIT: Duration = Duration::from_secs(60);

pub struct Cluster {
    pub api: InProcess,
    pub client: Client,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Cluster {
    /// The API server, three hollow nodes and the binder.
    pub async fn start() -> anyhow::Result<Cluster> {
        testkit::init_tracing();
        let api = InProcess::start(Backend::Sqlite).await?;
        let client = api.client();
        let config = HollowConfig {
            count: 3,
            ..Default::default()
        };
        let nodes = config.node_names();
        let hollow = tokio::spawn({
            let client = client.clone();
            async move {
                if let Err(e) = hollow::run(client, config).await {
                    panic!("hollow nodes: {e}");
                }
            }
        });
        let binder = tokio::spawn(crate::support::run_binder(client.clone(), nodes));
        Ok(Cluster {
            api,
            client,
            tasks: vec![hollow, binder],
        })
    }

    pub fn spawn(&mut self, f: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(f));
    }
}

/// Pods that are not being deleted, finished pods included.
pub fn live(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

pub fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

pub fn owned_by<'a, K: kube::Resource>(pods: &'a [Pod], owner: &K) -> Vec<&'a Pod> {
    pods.iter()
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == owner.meta().uid.as_ref())
        })
        .collect()
}

/// Waits until the replica controller `name` (a ReplicaSet or a ReplicationController, whose
/// statuses share their fields) owns exactly `n` live pods, all Ready, and its status says so
/// for its latest generation.
pub async fn settled<K>(owners: &Api<K>, pods: &Api<Pod>, name: &str, n: usize) -> Vec<Pod>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    testkit::eventually(WAIT, &format!("{name} settled at {n}"), || async {
        let owner = owners.get(name).await.ok()?;
        let all = pods.list(&Default::default()).await.ok()?.items;
        let owned: Vec<Pod> = owned_by(&all, &owner).into_iter().cloned().collect();
        let object = serde_json::to_value(&owner).ok()?;
        let status = &object["status"];
        let count = n as i64;
        let ok = owned.len() == n
            && live(&owned).len() == n
            && owned.iter().all(ready)
            && [
                "replicas",
                "readyReplicas",
                "availableReplicas",
                "fullyLabeledReplicas",
            ]
            .iter()
            .all(|field| status[field] == count)
            && status["observedGeneration"] == object["metadata"]["generation"];
        ok.then_some(owned)
    })
    .await
}

/// Reasons of the events about `name` from `reporter`.
pub async fn event_reasons(client: &Client, ns: &str, name: &str, reporter: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let Ok(list) = events.list(&Default::default()).await else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reporting_controller.as_deref() == Some(reporter))
        .filter_map(|e| e.reason)
        .collect()
}

/// Returns once every write sent before it has been committed: a write of its own goes
/// through the store's single writer after them. A controller stopped mid-request may still
/// have writes in flight, as a crashed leader may; leader election keeps its successor from
/// starting before they land, and this stands in for that gap.
pub async fn writes_settled(client: &Client) {
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let barrier: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"generateName": "barrier-"}}))
            .unwrap();
    maps.create(&PostParams::default(), &barrier).await.unwrap();
}
