//! The ReplicationController controller (upstream's `pkg/controller/replication`): the
//! ReplicaSet sync run on core/v1 ReplicationControllers.
//!
//! Upstream wraps its ReplicaSet controller in a conversion layer rather than keeping a second
//! implementation, so the two kinds scale, adopt, release and report status identically; this
//! module is that layer, as a [`Replicated`] implementation. Only the selector differs in
//! substance: a label map, read as `matchLabels`. Pods get a controller reference to the
//! ReplicationController itself (`v1`, `ReplicationController`), and its events are reported
//! by `replication-controller`, as upstream's.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{
    PodTemplateSpec, ReplicationController, ReplicationControllerCondition,
    ReplicationControllerStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use minik8s_api::selector::{Selector, SelectorError};

use super::Replicated;
use crate::informers::Informers;

/// Upstream's name of the controller in `--controllers`.
pub const NAME: &str = "replicationcontroller";

/// Runs the controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    super::run_for::<ReplicationController>(informers).await
}

impl Replicated for ReplicationController {
    const NAME: &'static str = NAME;
    const QUEUE: &'static str = "replicationmanager";
    const REPORTER: &'static str = "replication-controller";

    fn selector(&self) -> Result<Selector, SelectorError> {
        let selector = LabelSelector {
            match_labels: self.spec.as_ref().and_then(|s| s.selector.clone()),
            match_expressions: None,
        };
        Selector::from_label_selector(Some(&selector))
    }

    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.as_ref())
    }

    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }

    fn replica_status(&self) -> ReplicaSetStatus {
        let status = self.status.clone().unwrap_or_default();
        ReplicaSetStatus {
            replicas: status.replicas,
            fully_labeled_replicas: status.fully_labeled_replicas,
            ready_replicas: status.ready_replicas,
            available_replicas: status.available_replicas,
            observed_generation: status.observed_generation,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| ReplicaSetCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                        last_transition_time: c.last_transition_time,
                    })
                    .collect()
            }),
            terminating_replicas: None,
        }
    }

    fn set_replica_status(&mut self, status: ReplicaSetStatus) {
        self.status = Some(ReplicationControllerStatus {
            replicas: status.replicas,
            fully_labeled_replicas: status.fully_labeled_replicas,
            ready_replicas: status.ready_replicas,
            available_replicas: status.available_replicas,
            observed_generation: status.observed_generation,
            conditions: status.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| ReplicationControllerCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                        last_transition_time: c.last_transition_time,
                    })
                    .collect()
            }),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::controller_ref::controller_ref;

    fn rc(selector: serde_json::Value) -> ReplicationController {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "a", "uid": "uid-web"},
            "spec": {
                "replicas": 2,
                "minReadySeconds": 5,
                "selector": selector,
                "template": {"metadata": {"labels": {"app": "web"}}},
            },
            "status": {
                "replicas": 1,
                "readyReplicas": 1,
                "observedGeneration": 3,
                "conditions": [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_label_map_selects_as_match_labels() {
        let web = rc(serde_json::json!({"app": "web"}));
        let s = web.selector().unwrap();
        let labels = |app: &str| std::collections::BTreeMap::from([("app".into(), app.into())]);
        assert!(s.matches(Some(&labels("web"))));
        assert!(!s.matches(Some(&labels("db"))));
        assert_eq!((web.replicas(), web.min_ready_seconds()), (2, 5));
        // An absent selector is the empty one, which the sync refuses to act on.
        assert!(rc(serde_json::Value::Null).selector().unwrap().is_empty());
    }

    #[test]
    fn status_round_trips_through_the_replica_set_form() {
        let mut rc = rc(serde_json::json!({"app": "web"}));
        let before = rc.status.clone();
        let status = rc.replica_status();
        assert_eq!(status.replicas, 1);
        assert_eq!(status.observed_generation, Some(3));
        let condition = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (condition.type_.as_str(), condition.reason.as_deref()),
            ("ReplicaFailure", Some("FailedCreate"))
        );
        rc.set_replica_status(status);
        assert_eq!(rc.status, before);
    }

    #[test]
    fn pods_are_owned_by_the_replication_controller() {
        let owner = controller_ref(&rc(serde_json::json!({"app": "web"})));
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("v1", "ReplicationController", Some(true), Some(true))
        );
    }
}
