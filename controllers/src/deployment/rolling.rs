//! The RollingUpdate strategy (upstream's `rolling.go`): grow the new ReplicaSet while the
//! total stays within `replicas + maxSurge`, shrink old ones while availability stays at
//! least `replicas - maxUnavailable`, one step per sync; each step is triggered by the status
//! change the previous one caused.

use k8s_openapi::api::apps::v1::ReplicaSet;

use super::sync::{by_creation, new_rs_new_replicas, replace_in};
use super::util::*;
use super::{Error, Syncer};

impl Syncer {
    /// Upstream's `rolloutRolling`.
    pub(super) async fn rollout_rolling(&mut self, list: Vec<ReplicaSet>) -> Result<(), Error> {
        let (mut new, mut old) = self.new_and_old(&list, true).await?;
        let Some(new_rs) = new.clone() else {
            return Ok(());
        };
        let all: Vec<ReplicaSet> = old.iter().chain(new.iter()).cloned().collect();
        if self.reconcile_new(&all, new_rs).await.map(|(scaled, rs)| {
            replace_in(&mut new, &mut old, rs);
            scaled
        })? {
            return self.sync_rollout_status(&old, new.as_ref()).await;
        }
        if self.reconcile_old(&mut new, &mut old).await? {
            return self.sync_rollout_status(&old, new.as_ref()).await;
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        let status = calculate_status(&all, new.as_ref(), &self.d);
        if deployment_complete(&self.d, &status) {
            self.cleanup(&old).await?;
        }
        self.sync_rollout_status(&old, new.as_ref()).await
    }

    /// Upstream's `reconcileNewReplicaSet`.
    async fn reconcile_new(
        &mut self,
        all: &[ReplicaSet],
        new: ReplicaSet,
    ) -> Result<(bool, ReplicaSet), Error> {
        let want = spec_replicas(&self.d);
        let current = rs_replicas(&new);
        if current == want {
            return Ok((false, new));
        }
        if current > want {
            return self.scale_and_record(new, want).await;
        }
        let all: Vec<&ReplicaSet> = all.iter().collect();
        let size = new_rs_new_replicas(&self.d, &all, &new);
        self.scale_and_record(new, size).await
    }

    /// Upstream's `reconcileOldReplicaSets`: first drop old replicas that are not available
    /// anyway (they block nothing if gone), then scale old ReplicaSets down as far as the
    /// availability floor allows.
    async fn reconcile_old(
        &mut self,
        new: &mut Option<ReplicaSet>,
        old: &mut [ReplicaSet],
    ) -> Result<bool, Error> {
        let old_count = replica_count(old.iter().filter(|rs| rs_replicas(rs) > 0));
        if old_count == 0 {
            return Ok(false);
        }
        let Some(new_rs) = new.as_ref() else {
            return Ok(false);
        };
        let all_count = replica_count(old.iter().chain([new_rs]));
        let min_available = spec_replicas(&self.d) - max_unavailable(&self.d);
        let new_unavailable = rs_replicas(new_rs) - rs_available(new_rs);
        let max_scaled_down = all_count - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        let cleaned = self.cleanup_unhealthy(new, old, max_scaled_down).await?;
        let scaled = self.scale_down_old(new, old).await?;
        Ok(cleaned + scaled > 0)
    }

    /// Upstream's `cleanupUnhealthyReplicas`.
    async fn cleanup_unhealthy(
        &mut self,
        new: &mut Option<ReplicaSet>,
        old: &mut [ReplicaSet],
        max_cleanup: i32,
    ) -> Result<i32, Error> {
        let targets = active_oldest_first(old);
        let mut total = 0;
        for rs in targets {
            if total >= max_cleanup {
                break;
            }
            let (replicas, available) = (rs_replicas(&rs), rs_available(&rs));
            if replicas == available {
                continue;
            }
            let count = (max_cleanup - total).min(replicas - available);
            let (_, updated) = self.scale_and_record(rs, replicas - count).await?;
            replace_in(new, old, updated);
            total += count;
        }
        Ok(total)
    }

    /// Upstream's `scaleDownOldReplicaSetsForRollingUpdate`: oldest first, never below the
    /// availability floor.
    async fn scale_down_old(
        &mut self,
        new: &mut Option<ReplicaSet>,
        old: &mut [ReplicaSet],
    ) -> Result<i32, Error> {
        let min_available = spec_replicas(&self.d) - max_unavailable(&self.d);
        let available = available_replica_count(old.iter().chain(new.iter()));
        if available <= min_available {
            return Ok(0);
        }
        let targets = active_oldest_first(old);
        let to_scale = available - min_available;
        let mut total = 0;
        for rs in targets {
            if total >= to_scale {
                break;
            }
            let count = rs_replicas(&rs).min(to_scale - total);
            let size = rs_replicas(&rs) - count;
            let (_, updated) = self.scale_and_record(rs, size).await?;
            replace_in(new, old, updated);
            total += count;
        }
        Ok(total)
    }
}

/// The ReplicaSets with replicas, oldest first: the order old ones are scaled down in.
fn active_oldest_first(sets: &[ReplicaSet]) -> Vec<ReplicaSet> {
    let mut active: Vec<ReplicaSet> = sets
        .iter()
        .filter(|rs| rs_replicas(rs) > 0)
        .cloned()
        .collect();
    active.sort_by(by_creation);
    active
}
