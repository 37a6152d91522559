//! knative-lite: minik8s's serverless layer. Its first door is Knative Serving's API
//! unchanged (`serving.knative.dev/v1` Service, Configuration, Revision and Route), so users
//! bring their Knative manifests; the kinds are CRDs defined here once, in Rust, and
//! registered by the API server when the cluster starts. The controllers are ordinary API
//! clients on the process's shared informers and the controller skeleton of
//! `minik8s-controllers`, like every other controller of the cluster.

pub mod autoscaler;
pub mod conditions;
pub mod configuration;
pub mod function;
pub mod gateway;
pub mod metrics;
pub mod revision;
pub mod route;
pub mod router;
pub mod service;
pub mod serving;
pub mod workflow;

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use minik8s_controllers::informers::Informers;
use minik8s_controllers::leader::{LeaderElectionConfig, run_while_leader};

/// The CustomResourceDefinitions of the kinds this crate serves.
pub fn crds() -> Vec<CustomResourceDefinition> {
    [
        serving::Service::crd(),
        serving::Configuration::crd(),
        serving::Revision::crd(),
        serving::Route::crd(),
        function::Function::crd(),
        workflow::Workflow::crd(),
        workflow::WorkflowRun::crd(),
    ]
    .into_iter()
    .map(container_names_optional)
    .collect()
}

/// Knative lets a revision's container go unnamed (it becomes `user-container`), where the
/// PodSpec schema requires a name: the schema says so as Knative's CRDs do.
fn container_names_optional(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(required) = map
                    .get_mut("properties")
                    .and_then(|p| p.get_mut("containers"))
                    .and_then(|c| c.get_mut("items"))
                    .and_then(|i| i.get_mut("required"))
                    .and_then(|r| r.as_array_mut())
                {
                    required.retain(|f| f != "name");
                }
                map.values_mut().for_each(walk);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes");
    walk(&mut value);
    serde_json::from_value(value).expect("the same CRD")
}

/// Writes `status` as `obj`'s unless it has it already; the write carries the
/// resourceVersion read, so a status computed from an old object fails with 409 and is
/// computed again.
async fn write_status<K, S>(
    client: &kube::Client,
    obj: &K,
    current: Option<&S>,
    status: &S,
) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(());
    }
    use kube::ResourceExt;
    let api: kube::Api<K> =
        kube::Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": obj.resource_version()},
        "status": status,
    });
    api.patch_status(
        &obj.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// The Lease (in kube-system) that one of several processes takes to run the controllers.
pub const LEASE: &str = "knative-serving-controller";

/// Runs the controllers, leader-elected through [`LEASE`] unless `leader_elect` is false;
/// returns after `shutdown`.
pub async fn run_elected(
    informers: Arc<Informers>,
    leader_elect: bool,
    shutdown: impl Future<Output = ()>,
) {
    if !leader_elect {
        tokio::select! {
            _ = run(informers) => {}
            _ = shutdown => {}
        }
        return;
    }
    let config = LeaderElectionConfig::new(LEASE);
    run_while_leader(
        informers.client(),
        config,
        || run(informers.clone()),
        shutdown,
    )
    .await
}

/// Runs every knative-lite controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    tokio::join!(
        service::run(informers.clone()),
        configuration::run(informers.clone()),
        revision::run(informers.clone()),
        route::run(informers.clone()),
        autoscaler::run(informers.clone()),
        function::controller::run(informers.clone()),
        workflow::controller::run(informers),
    );
}
