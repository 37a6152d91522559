//! Writing a StatefulSet's status (upstream's `updateStatefulSetStatus`): a rollout is complete
//! once every replica is updated and ready, and then the update revision becomes the current
//! one; the status is written only when a field upstream compares changed, with the
//! resourceVersion read (a conflict retries the sync).

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use crate::util::reconciler::Error;

/// Upstream's `completeRollingUpdate`.
pub fn complete_rolling_update(set: &StatefulSet, status: &mut StatefulSetStatus) {
    let rolling = set
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    let updated = status.updated_replicas.unwrap_or(0);
    if rolling
        && updated == status.replicas
        && status.ready_replicas.unwrap_or(0) == status.replicas
    {
        status.current_replicas = status.updated_replicas;
        status.current_revision = status.update_revision.clone();
    }
}

/// Upstream's `inconsistentStatus`: whether `status` differs from the set's in what is written.
pub fn inconsistent(set: &StatefulSet, status: &StatefulSetStatus) -> bool {
    let old = set.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    status.observed_generation.unwrap_or(0) > old.observed_generation.unwrap_or(0)
        || status.replicas != old.replicas
        || n(status.current_replicas) != n(old.current_replicas)
        || n(status.ready_replicas) != n(old.ready_replicas)
        || n(status.updated_replicas) != n(old.updated_replicas)
        || status.current_revision != old.current_revision
        || n(status.available_replicas) != n(old.available_replicas)
        || status.update_revision != old.update_revision
}

/// Completes the rollout if it is, and writes `status` when it changed.
pub async fn write(
    api: &Api<StatefulSet>,
    set: &StatefulSet,
    mut status: StatefulSetStatus,
) -> Result<(), Error> {
    complete_rolling_update(set, &mut status);
    if !inconsistent(set, &status) {
        return Ok(());
    }
    let mut updated = set.clone();
    updated.status = Some(status);
    api.replace_status(&set.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::testing::set;

    fn status(replicas: i32, ready: i32, updated: i32) -> StatefulSetStatus {
        StatefulSetStatus {
            replicas,
            ready_replicas: Some(ready),
            updated_replicas: Some(updated),
            current_replicas: Some(replicas - updated),
            current_revision: Some("web-old".into()),
            update_revision: Some("web-new".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_finished_rollout_makes_the_update_revision_current() {
        let s = set(serde_json::json!({}));
        let mut st = status(3, 3, 2);
        complete_rolling_update(&s, &mut st);
        assert_eq!(st.current_revision.as_deref(), Some("web-old"));
        let mut st = status(3, 3, 3);
        complete_rolling_update(&s, &mut st);
        assert_eq!(st.current_revision.as_deref(), Some("web-new"));
        assert_eq!(st.current_replicas, Some(3));
        // OnDelete never completes this way.
        let on_delete = set(serde_json::json!({"spec": {"updateStrategy": {"type": "OnDelete"}}}));
        let mut st = status(3, 3, 3);
        complete_rolling_update(&on_delete, &mut st);
        assert_eq!(st.current_revision.as_deref(), Some("web-old"));
    }

    #[test]
    fn only_compared_fields_make_a_write() {
        let mut s = set(serde_json::json!({}));
        s.status = Some(status(3, 3, 2));
        let mut st = status(3, 3, 2);
        assert!(!inconsistent(&s, &st));
        st.collision_count = Some(1);
        assert!(!inconsistent(&s, &st));
        st.ready_replicas = Some(2);
        assert!(inconsistent(&s, &st));
    }
}
