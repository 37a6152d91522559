//! The Recreate strategy (upstream's `recreate.go`): every old pod is gone, not merely
//! scaled away, before the new ReplicaSet gets any replicas, so two versions never run at once.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::sync::replace_in;
use super::util::*;
use super::{Error, Syncer};
use crate::util::pods::phase;

impl Syncer {
    /// Upstream's `rolloutRecreate`.
    pub(super) async fn rollout_recreate(
        &mut self,
        list: Vec<ReplicaSet>,
        pods: &HashMap<String, Vec<Arc<Pod>>>,
    ) -> Result<(), Error> {
        let (mut new, mut old) = self.new_and_old(&list, false).await?;
        let mut scaled = false;
        for rs in old.clone().into_iter().filter(|rs| rs_replicas(rs) > 0) {
            let (s, updated) = self.scale_and_record(rs, 0).await?;
            scaled |= s;
            replace_in(&mut new, &mut old, updated);
        }
        if scaled {
            return self.sync_rollout_status(&old, new.as_ref()).await;
        }
        if old_pods_running(new.as_ref(), &old, pods) {
            return self.sync_rollout_status(&old, new.as_ref()).await;
        }
        if new.is_none() {
            (new, old) = self.new_and_old(&list, true).await?;
        }
        if let Some(rs) = new.clone() {
            let want = spec_replicas(&self.d);
            let (_, updated) = self.scale_and_record(rs, want).await?;
            new = Some(updated);
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        let status = calculate_status(&all, new.as_ref(), &self.d);
        if deployment_complete(&self.d, &status) {
            self.cleanup(&old).await?;
        }
        self.sync_rollout_status(&old, new.as_ref()).await
    }
}

/// Whether any pod of an old ReplicaSet still runs or may run (terminating counts: it has
/// not stopped yet).
fn old_pods_running(
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
    pods: &HashMap<String, Vec<Arc<Pod>>>,
) -> bool {
    if actual_replica_count(old) > 0 {
        return true;
    }
    let new_uid = new.and_then(|rs| rs.uid());
    pods.iter()
        .filter(|(uid, _)| Some(*uid) != new_uid.as_ref())
        .flat_map(|(_, list)| list)
        .any(|p| !matches!(phase(p), "Failed" | "Succeeded"))
}
