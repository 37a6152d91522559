//! The Progressing condition and the progress deadline (upstream's `progress.go`): a rollout
//! that makes no progress for `progressDeadlineSeconds` is marked ProgressDeadlineExceeded,
//! which `kubectl rollout status` reports as a failure. Nothing is rolled back automatically.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::util::*;
use super::{Error, Syncer};

impl Syncer {
    /// Upstream's `syncRolloutStatus`.
    pub(super) async fn sync_rollout_status(
        &mut self,
        old: &[ReplicaSet],
        new: Option<&ReplicaSet>,
    ) -> Result<(), Error> {
        let all: Vec<&ReplicaSet> = old.iter().chain(new).collect();
        let mut status = calculate_status(&all, new, &self.d);
        if !has_progress_deadline(&self.d) {
            remove_condition(&mut status, PROGRESSING);
        }
        let d_status = self.d.status.clone().unwrap_or_default();
        let current = condition(&d_status, PROGRESSING).cloned();
        let complete = status.replicas == status.updated_replicas
            && current
                .as_ref()
                .is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE_REASON));
        let subject = match new {
            Some(rs) => format!("ReplicaSet {:?}", rs.name_any()),
            None => format!("Deployment {:?}", self.d.name_any()),
        };
        if has_progress_deadline(&self.d) && !complete {
            if deployment_complete(&self.d, &status) {
                set_condition(
                    &mut status,
                    new_condition(
                        PROGRESSING,
                        "True",
                        NEW_RS_AVAILABLE_REASON,
                        format!("{subject} has successfully progressed."),
                    ),
                );
            } else if deployment_progressing(&self.d, &status) {
                let mut c = new_condition(
                    PROGRESSING,
                    "True",
                    REPLICA_SET_UPDATED_REASON,
                    format!("{subject} is progressing."),
                );
                // Progress moves lastUpdateTime (the deadline counts from it), not the
                // transition time, and replaces the reason.
                if let Some(cur) = &current {
                    if cur.status == "True" {
                        c.last_transition_time = cur.last_transition_time.clone();
                    }
                    remove_condition(&mut status, PROGRESSING);
                }
                set_condition(&mut status, c);
            } else if deployment_timed_out(&self.d, &status, Timestamp::now()) {
                set_condition(
                    &mut status,
                    new_condition(
                        PROGRESSING,
                        "False",
                        TIMED_OUT_REASON,
                        format!("{subject} has timed out progressing."),
                    ),
                );
            }
        }
        match replica_failure(old, new) {
            Some(c) => set_condition(&mut status, c),
            None => remove_condition(&mut status, REPLICA_FAILURE),
        }
        if self.d.status.as_ref() == Some(&status) {
            self.requeue = self.stuck_requeue(&status);
            return Ok(());
        }
        self.write_status(status).await
    }

    /// When to check the deadline of a rollout that is neither complete nor timed out
    /// (upstream's `requeueStuckDeployment`).
    fn stuck_requeue(
        &self,
        status: &k8s_openapi::api::apps::v1::DeploymentStatus,
    ) -> Option<Duration> {
        let c = condition(status, PROGRESSING)?;
        if !has_progress_deadline(&self.d)
            || deployment_complete(&self.d, status)
            || c.reason.as_deref() == Some(TIMED_OUT_REASON)
        {
            return None;
        }
        let deadline = self.d.spec.as_ref()?.progress_deadline_seconds?;
        let from = c.last_update_time.as_ref()?.0;
        let after = (from + SignedDuration::from_secs(i64::from(deadline)))
            .duration_since(Timestamp::now());
        let after = Duration::try_from(after).unwrap_or_default();
        Some(after.max(Duration::from_millis(100)))
    }
}

/// The first ReplicaFailure of the new ReplicaSet, else of an old one, as a Deployment
/// condition (upstream's `getReplicaFailures`).
fn replica_failure(
    old: &[ReplicaSet],
    new: Option<&ReplicaSet>,
) -> Option<k8s_openapi::api::apps::v1::DeploymentCondition> {
    new.into_iter().chain(old).find_map(|rs| {
        let c = rs
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == REPLICA_FAILURE)?;
        Some(k8s_openapi::api::apps::v1::DeploymentCondition {
            type_: REPLICA_FAILURE.into(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_update_time: c.last_transition_time.clone(),
            last_transition_time: c.last_transition_time.clone(),
        })
    })
}
