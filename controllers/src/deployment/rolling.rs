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
        // Upstream's `cleanupUnhealthyReplicas`, then its
        // `scaleDownOldReplicaSetsForRollingUpdate` on what the first left.
        let plan = unhealthy_cleanup(old, max_scaled_down);
        let cleaned = self.shrink(new, old, plan).await?;
        let plan = old_scale_down(new.as_ref(), old, min_available);
        let scaled = self.shrink(new, old, plan).await?;
        Ok(cleaned + scaled > 0)
    }

    /// Gives old ReplicaSets the smaller sizes of `plan`; returns how many replicas went.
    async fn shrink(
        &mut self,
        new: &mut Option<ReplicaSet>,
        old: &mut [ReplicaSet],
        plan: Vec<(ReplicaSet, i32)>,
    ) -> Result<i32, Error> {
        let mut total = 0;
        for (rs, size) in plan {
            total += rs_replicas(&rs) - size;
            let (_, updated) = self.scale_and_record(rs, size).await?;
            replace_in(new, old, updated);
        }
        Ok(total)
    }
}

/// The old ReplicaSets to shrink, oldest first, with their new sizes: by as many replicas as
/// are available beyond `min_available`. A ReplicaSet counts at most its size as available:
/// right after it was scaled down its status still counts the pods it is about to delete,
/// and counting those would take availability below the floor.
fn old_scale_down(
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
    min_available: i32,
) -> Vec<(ReplicaSet, i32)> {
    let available: i32 = old
        .iter()
        .chain(new)
        .map(|rs| rs_available(rs).min(rs_replicas(rs)))
        .sum();
    shrink_oldest_first(old, available - min_available, rs_replicas)
}

/// The old ReplicaSets to shrink by their unavailable replicas, oldest first, at most
/// `max_cleanup` replicas in all, with their new sizes. A ReplicaSet whose status still counts
/// more available replicas than its (just lowered) size has none unavailable: its status lags
/// its spec, and taking the difference would scale it up.
fn unhealthy_cleanup(old: &[ReplicaSet], max_cleanup: i32) -> Vec<(ReplicaSet, i32)> {
    shrink_oldest_first(old, max_cleanup, |rs| rs_replicas(rs) - rs_available(rs))
}

/// New sizes for the active ReplicaSets, oldest first, each losing what `removable` says it
/// can spare (nothing if that is not positive), `budget` replicas at most in all.
fn shrink_oldest_first(
    old: &[ReplicaSet],
    budget: i32,
    removable: impl Fn(&ReplicaSet) -> i32,
) -> Vec<(ReplicaSet, i32)> {
    let mut plan = Vec::new();
    let mut total = 0;
    for rs in active_oldest_first(old) {
        if total >= budget {
            break;
        }
        let count = removable(&rs).min(budget - total);
        if count <= 0 {
            continue;
        }
        total += count;
        let size = rs_replicas(&rs) - count;
        plan.push((rs, size));
    }
    plan
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    fn rs(name: &str, created: &str, replicas: i32, available: i32) -> ReplicaSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"replicas": replicas, "selector": {}},
            "status": {"replicas": replicas.max(available), "availableReplicas": available},
        }))
        .unwrap()
    }

    fn sizes(plan: Vec<(ReplicaSet, i32)>) -> Vec<(String, i32)> {
        plan.into_iter().map(|(rs, n)| (rs.name_any(), n)).collect()
    }

    #[test]
    fn cleanup_takes_unavailable_replicas_oldest_first_up_to_the_limit() {
        let old = [
            rs("b", "2026-01-02T00:00:00Z", 3, 1),
            rs("a", "2026-01-01T00:00:00Z", 2, 1),
            rs("c", "2026-01-03T00:00:00Z", 2, 2),
        ];
        assert_eq!(
            sizes(unhealthy_cleanup(&old, 2)),
            [("a".into(), 1), ("b".into(), 2)]
        );
        assert_eq!(
            sizes(unhealthy_cleanup(&old, 10)),
            [("a".into(), 1), ("b".into(), 1)]
        );
    }

    #[test]
    fn scale_down_keeps_the_available_floor_oldest_first() {
        let new = rs("n", "2026-01-03T00:00:00Z", 2, 2);
        let old = [
            rs("b", "2026-01-02T00:00:00Z", 2, 2),
            rs("a", "2026-01-01T00:00:00Z", 1, 1),
        ];
        // 5 available, 3 must stay: the oldest goes first.
        assert_eq!(
            sizes(old_scale_down(Some(&new), &old, 3)),
            [("a".into(), 0), ("b".into(), 1)]
        );
        assert!(old_scale_down(Some(&new), &old, 5).is_empty());
    }

    #[test]
    fn scale_down_does_not_count_pods_a_set_is_about_to_delete() {
        // "a" was just scaled from 3 to 2; its status still counts 3 available.
        let new = rs("n", "2026-01-03T00:00:00Z", 3, 1);
        let old = [rs("a", "2026-01-01T00:00:00Z", 2, 3)];
        // Truly available: 2 + 1; the floor is 3, so nothing may go.
        assert!(old_scale_down(Some(&new), &old, 3).is_empty());
    }

    #[test]
    fn cleanup_never_scales_up_a_set_whose_status_lags_its_size() {
        // Just scaled from 2 to 1; the status still reports 2 available.
        let old = [rs("a", "2026-01-01T00:00:00Z", 1, 2)];
        assert!(unhealthy_cleanup(&old, 1).is_empty());
    }
}
