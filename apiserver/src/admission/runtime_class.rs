//! Upstream's RuntimeClass admission plugin (plugin/pkg/admission/runtimeclass): a pod that
//! names a RuntimeClass carries that class's pod overhead (so the scheduler and quotas count
//! what the runtime itself costs) and its scheduling constraints (so it lands only on nodes
//! that have the handler). A class that does not exist refuses the pod, and an overhead the
//! pod states itself must be the class's.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Target};

use crate::registry::generic::{CreateAdmission, GenericRegistry, Phase};

pub const PLUGIN_NAME: &str = "RuntimeClass";

/// The plugin's mutating half ([`Phase::Mutate`]: overhead and scheduling filled in) or its
/// validating half ([`Phase::Final`]: the overhead checked again after every mutation).
pub struct RuntimeClassAdmission {
    classes: Arc<GenericRegistry<BuiltIn<RuntimeClass>>>,
    phase: Phase,
}

impl RuntimeClassAdmission {
    pub fn new(classes: Arc<GenericRegistry<BuiltIn<RuntimeClass>>>, phase: Phase) -> Self {
        RuntimeClassAdmission { classes, phase }
    }
}

fn forbidden(pod: &Pod, why: String) -> ApiError {
    ApiError::forbidden(
        Target {
            group: "",
            resource: "pods",
            name: super::name_in_errors(&pod.metadata),
        },
        &why,
    )
}

/// Quantities compared by value (`1000m` is `1`), as upstream's semantic equality.
fn same_resources(a: &BTreeMap<String, Quantity>, b: &BTreeMap<String, Quantity>) -> bool {
    let value =
        |q: &Quantity| minik8s_api::quantity::Quantity::parse(&q.0).map(|q| q.milli_value());
    a.len() == b.len()
        && a.iter().all(|(k, q)| {
            b.get(k)
                .is_some_and(|r| value(q).is_some() && value(q) == value(r))
        })
}

#[async_trait]
impl CreateAdmission<Pod> for RuntimeClassAdmission {
    fn phase(&self) -> Phase {
        self.phase
    }

    async fn admit(&self, pod: &mut Pod, _dry_run: bool) -> Result<(), ApiError> {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.clone())
            .filter(|n| !n.is_empty());
        let class = match &name {
            None => None,
            Some(name) => match self.classes.get(None, name).await {
                Ok(class) => Some(class),
                Err(e) if e.code == 404 => {
                    return Err(forbidden(
                        pod,
                        format!("pod rejected: RuntimeClass {name:?} not found"),
                    ));
                }
                Err(e) => return Err(e),
            },
        };
        let overhead = class
            .as_ref()
            .and_then(|c| c.overhead.as_ref())
            .and_then(|o| o.pod_fixed.clone());
        let spec = pod.spec.get_or_insert_with(Default::default);
        match (&spec.overhead, overhead) {
            (Some(_), None) => {
                return Err(forbidden(
                    pod,
                    "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead".into(),
                ));
            }
            (Some(given), Some(wanted)) if !same_resources(given, &wanted) => {
                return Err(forbidden(
                    pod,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                ));
            }
            (None, Some(wanted)) if self.phase == Phase::Mutate => spec.overhead = Some(wanted),
            (None, Some(_)) => {
                return Err(forbidden(
                    pod,
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                ));
            }
            _ => {}
        }
        if self.phase != Phase::Mutate {
            return Ok(());
        }
        let Some(scheduling) = class.and_then(|c| c.scheduling) else {
            return Ok(());
        };
        let selector = spec.node_selector.get_or_insert_with(Default::default);
        for (key, value) in scheduling.node_selector.into_iter().flatten() {
            match selector.get(&key) {
                Some(have) if *have != value => {
                    let why = format!(
                        "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; pod.spec.nodeSelector[{key}] = {have}"
                    );
                    return Err(forbidden(pod, why));
                }
                _ => {
                    selector.insert(key, value);
                }
            }
        }
        if selector.is_empty() {
            spec.node_selector = None;
        }
        for toleration in scheduling.tolerations.into_iter().flatten() {
            let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
            if !tolerations.contains(&toleration) {
                tolerations.push(toleration);
            }
        }
        Ok(())
    }
}
