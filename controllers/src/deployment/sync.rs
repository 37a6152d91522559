//! What every strategy shares (upstream's `sync.go`): finding or creating the new ReplicaSet
//! and keeping revisions in order, proportional scaling when `spec.replicas` changes in the
//! middle of a rollout, pruning old ReplicaSets beyond `revisionHistoryLimit`, and status.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::apps::v1::{DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::events::EventType;

use super::util::*;
use super::{Error, Syncer};
use crate::util::controller_ref::{controller_ref, is_controlled_by};

/// Older first; ties by name (upstream's `ReplicaSetsByCreationTimestamp`).
pub(super) fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let t = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
    t(a).cmp(&t(b))
        .then_with(|| a.name_any().cmp(&b.name_any()))
}

/// The oldest ReplicaSet whose template is the Deployment's (upstream's `FindNewReplicaSet`).
fn find_new(
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    list: &[ReplicaSet],
) -> Option<ReplicaSet> {
    let mut sorted: Vec<&ReplicaSet> = list.iter().collect();
    sorted.sort_by(|a, b| by_creation(a, b));
    sorted
        .into_iter()
        .find(|rs| equal_ignore_hash(&rs_template(rs), template))
        .cloned()
}

fn active(sets: &[ReplicaSet]) -> Vec<ReplicaSet> {
    sets.iter()
        .filter(|rs| rs_replicas(rs) > 0)
        .cloned()
        .collect()
}

impl Syncer {
    fn template(&self) -> k8s_openapi::api::core::v1::PodTemplateSpec {
        self.d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default()
    }

    /// Writes `status`; the working copy becomes what the API returned.
    pub(super) async fn write_status(&mut self, status: DeploymentStatus) -> Result<(), Error> {
        let mut d = self.d.clone();
        d.status = Some(status);
        self.d = self
            .deployments
            .replace_status(&d.name_any(), &PostParams::default(), &d)
            .await?;
        Ok(())
    }

    async fn write_own_status(&mut self) -> Result<(), Error> {
        let status = self.d.status.clone().unwrap_or_default();
        self.write_status(status).await
    }

    fn set_revision(&mut self, revision: &str) -> bool {
        let a = self
            .d
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        if a.get(REVISION_ANNOTATION).map(String::as_str) == Some(revision) {
            return false;
        }
        a.insert(REVISION_ANNOTATION.into(), revision.into());
        true
    }

    /// Upstream's `checkPausedConditions`: pausing and resuming show in Progressing.
    pub(super) async fn check_paused_conditions(&mut self) -> Result<(), Error> {
        if !has_progress_deadline(&self.d) {
            return Ok(());
        }
        let paused = self.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let mut status = self.d.status.clone().unwrap_or_default();
        let reason = condition(&status, PROGRESSING).and_then(|c| c.reason.clone());
        let changed = if paused && reason.as_deref() != Some(PAUSED_REASON) {
            set_condition(
                &mut status,
                new_condition(
                    PROGRESSING,
                    "Unknown",
                    PAUSED_REASON,
                    "Deployment is paused".into(),
                ),
            );
            true
        } else if !paused && reason.as_deref() == Some(PAUSED_REASON) {
            set_condition(
                &mut status,
                new_condition(
                    PROGRESSING,
                    "Unknown",
                    RESUMED_REASON,
                    "Deployment is resumed".into(),
                ),
            );
            true
        } else {
            false
        };
        if changed {
            self.write_status(status).await?;
        }
        Ok(())
    }

    /// Some active ReplicaSet was sized for another `spec.replicas` (upstream's
    /// `isScalingEvent`): a scale, not a rollout.
    pub(super) fn is_scaling_event(&self, list: &[ReplicaSet]) -> bool {
        let want = spec_replicas(&self.d);
        list.iter().filter(|rs| rs_replicas(rs) > 0).any(|rs| {
            rs.annotations()
                .get(DESIRED_REPLICAS_ANNOTATION)
                .and_then(|v| v.parse::<i32>().ok())
                .is_some_and(|desired| desired != want)
        })
    }

    /// The new ReplicaSet (created when `create`) and all old ones, with the new one's
    /// revision and annotations brought up to date (upstream's
    /// `getAllReplicaSetsAndSyncRevision`).
    pub(super) async fn new_and_old(
        &mut self,
        list: &[ReplicaSet],
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), Error> {
        let template = self.template();
        let existing = find_new(&template, list);
        let old: Vec<ReplicaSet> = list
            .iter()
            .filter(|rs| existing.as_ref().is_none_or(|n| n.uid() != rs.uid()))
            .cloned()
            .collect();
        let new = self.new_rs(existing, &old, create).await?;
        Ok((new, old))
    }

    /// Upstream's `getNewReplicaSet`.
    async fn new_rs(
        &mut self,
        existing: Option<ReplicaSet>,
        old: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>, Error> {
        let new_revision = max_revision(old) + 1;
        let min_ready = self.d.spec.as_ref().and_then(|s| s.min_ready_seconds);
        if let Some(mut rs) = existing {
            let annotations = set_new_rs_annotations(&self.d, &mut rs, new_revision, true);
            let spec = rs.spec.get_or_insert_with(Default::default);
            let min_ready_changed = spec.min_ready_seconds.unwrap_or(0) != min_ready.unwrap_or(0);
            if annotations || min_ready_changed {
                spec.min_ready_seconds = min_ready;
                rs = self
                    .sets
                    .replace(&rs.name_any(), &PostParams::default(), &rs)
                    .await?;
            }
            let revision = rs
                .annotations()
                .get(REVISION_ANNOTATION)
                .cloned()
                .unwrap_or_default();
            let mut needs_update = self.set_revision(&revision);
            let mut status = self.d.status.clone().unwrap_or_default();
            if has_progress_deadline(&self.d) && condition(&status, PROGRESSING).is_none() {
                set_condition(
                    &mut status,
                    new_condition(
                        PROGRESSING,
                        "True",
                        FOUND_NEW_RS_REASON,
                        format!("Found new replica set {:?}", rs.name_any()),
                    ),
                );
                self.d.status = Some(status);
                needs_update = true;
            }
            if needs_update {
                self.write_own_status().await?;
            }
            return Ok(Some(rs));
        }
        if !create {
            return Ok(None);
        }

        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let mut template = self.template();
        let hash = compute_hash(&template, collision_count);
        template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH_LABEL.into(), hash.clone());
        let mut selector = self
            .d
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_TEMPLATE_HASH_LABEL.into(), hash.clone());
        let name = format!("{}-{hash}", self.d.name_any());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: self.d.namespace(),
                owner_references: Some(vec![controller_ref(&self.d)]),
                labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: min_ready,
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain([&rs]).collect();
        let replicas = new_rs_new_replicas(&self.d, &all, &rs);
        set_rs_replicas(&mut rs, replicas);
        set_new_rs_annotations(&self.d, &mut rs, new_revision, false);

        let created = match self.sets.create(&PostParams::default(), &rs).await {
            Ok(created) => {
                if replicas > 0 {
                    self.event(
                        EventType::Normal,
                        "ScalingReplicaSet",
                        format!("Scaled up replica set {name} from 0 to {replicas}"),
                    )
                    .await;
                }
                let mut status = self.d.status.clone().unwrap_or_default();
                self.set_revision(&new_revision.to_string());
                if has_progress_deadline(&self.d) {
                    set_condition(
                        &mut status,
                        new_condition(
                            PROGRESSING,
                            "True",
                            NEW_RS_REASON,
                            format!("Created new replica set {name:?}"),
                        ),
                    );
                }
                self.d.status = Some(status);
                self.write_own_status().await?;
                created
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // The name is taken: ours with the same template after all (a cache that
                // lags), or a hash collision, escaped by counting it into the next hash.
                let existing = self.sets.get(&name).await?;
                if is_controlled_by(&existing, &self.d)
                    && equal_ignore_hash(&rs_template(&existing), &self.template())
                {
                    let revision = existing
                        .annotations()
                        .get(REVISION_ANNOTATION)
                        .cloned()
                        .unwrap_or_default();
                    if self.set_revision(&revision) {
                        self.write_own_status().await?;
                    }
                    existing
                } else {
                    let mut status = self.d.status.clone().unwrap_or_default();
                    status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                    self.write_status(status).await?;
                    return Err(Error::Kube(kube::Error::Api(s)));
                }
            }
            Err(e) => {
                if has_progress_deadline(&self.d) {
                    let mut status = self.d.status.clone().unwrap_or_default();
                    set_condition(
                        &mut status,
                        new_condition(
                            PROGRESSING,
                            "False",
                            FAILED_RS_CREATE_REASON,
                            format!("Failed to create new replica set {name:?}: {e}"),
                        ),
                    );
                    self.write_status(status).await?;
                }
                self.event(
                    EventType::Warning,
                    "FailedCreate",
                    format!("Failed to create new replica set {name:?}: {e}"),
                )
                .await;
                return Err(e.into());
            }
        };
        Ok(Some(created))
    }

    /// Scaling only, no rollout: paused Deployments and `spec.replicas` changes (upstream's
    /// `sync`).
    pub(super) async fn sync(&mut self, list: Vec<ReplicaSet>) -> Result<(), Error> {
        let (mut new, mut old) = self.new_and_old(&list, false).await?;
        self.scale(&mut new, &mut old).await?;
        let paused = self.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        if paused {
            self.cleanup(&old).await?;
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        let status = calculate_status(&all, new.as_ref(), &self.d);
        self.write_status_if_changed(status).await
    }

    pub(super) async fn sync_status_only(&mut self, list: &[ReplicaSet]) -> Result<(), Error> {
        let (new, old) = self.new_and_old(list, false).await?;
        let all: Vec<&ReplicaSet> = old.iter().chain(new.as_ref()).collect();
        let status = calculate_status(&all, new.as_ref(), &self.d);
        self.write_status_if_changed(status).await
    }

    pub(super) async fn write_status_if_changed(
        &mut self,
        status: DeploymentStatus,
    ) -> Result<(), Error> {
        if self.d.status.as_ref() == Some(&status) {
            return Ok(());
        }
        self.write_status(status).await
    }

    /// Upstream's `scale`: the one active ReplicaSet takes all replicas; otherwise a change
    /// of `spec.replicas` during a rolling update is spread over the ReplicaSets in proportion
    /// to their size, leftovers going to the largest.
    async fn scale(
        &mut self,
        new: &mut Option<ReplicaSet>,
        old: &mut [ReplicaSet],
    ) -> Result<(), Error> {
        let want = spec_replicas(&self.d);
        // Upstream's `FindActiveOrLatest`.
        let mut all: Vec<ReplicaSet> = old.iter().chain(new.iter()).cloned().collect();
        let actives = active(&all);
        let target = match actives.len() {
            0 => new
                .clone()
                .or_else(|| old.iter().max_by(|a, b| by_creation(a, b)).cloned()),
            1 => actives.into_iter().next(),
            _ => None,
        };
        if !all.is_empty()
            && let Some(rs) = target
        {
            if rs_replicas(&rs) != want {
                let (_, updated) = self.scale_and_record(rs, want).await?;
                replace_in(new, old, updated);
            }
            return Ok(());
        }
        if is_saturated(&self.d, new.as_ref()) {
            for rs in active(old) {
                let (_, updated) = self.scale_and_record(rs, 0).await?;
                replace_in(new, old, updated);
            }
            return Ok(());
        }
        if !is_rolling_update(&self.d) {
            return Ok(());
        }
        all.retain(|rs| rs_replicas(rs) > 0);
        let current = replica_count(&all);
        let allowed = if want > 0 {
            want + max_surge(&self.d)
        } else {
            0
        };
        let to_add = allowed - current;
        let operation = match to_add.cmp(&0) {
            Ordering::Greater => {
                // Larger first, newer first among equals.
                all.sort_by(|a, b| {
                    rs_replicas(b)
                        .cmp(&rs_replicas(a))
                        .then_with(|| by_creation(b, a))
                });
                "up"
            }
            Ordering::Less => {
                // Larger first, older first among equals.
                all.sort_by(|a, b| {
                    rs_replicas(b)
                        .cmp(&rs_replicas(a))
                        .then_with(|| by_creation(a, b))
                });
                "down"
            }
            Ordering::Equal => "",
        };
        let mut added = 0;
        let mut sizes: HashMap<String, i32> = HashMap::new();
        for rs in &all {
            let size = if to_add != 0 {
                let p = self.proportion(rs, to_add, added);
                added += p;
                rs_replicas(rs) + p
            } else {
                rs_replicas(rs)
            };
            sizes.insert(rs.name_any(), size);
        }
        for (i, rs) in all.into_iter().enumerate() {
            let mut size = sizes[&rs.name_any()];
            if i == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            let (_, updated) = self.scale_rs(rs, size, operation).await?;
            replace_in(new, old, updated);
        }
        Ok(())
    }

    /// Upstream's `GetProportion`.
    fn proportion(&self, rs: &ReplicaSet, to_add: i32, added: i32) -> i32 {
        if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
            return 0;
        }
        let fraction = self.fraction(rs);
        let allowed = to_add - added;
        if to_add > 0 {
            fraction.min(allowed)
        } else {
            fraction.max(allowed)
        }
    }

    /// Upstream's `getReplicaSetFraction`: the ReplicaSet's share of the new size, by the
    /// size it was made for (`max-replicas`).
    fn fraction(&self, rs: &ReplicaSet) -> i32 {
        let want = spec_replicas(&self.d);
        if want == 0 {
            return -rs_replicas(rs);
        }
        let deployment_replicas = want + max_surge(&self.d);
        let annotated = rs
            .annotations()
            .get(MAX_REPLICAS_ANNOTATION)
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or_else(|| self.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
        if annotated == 0 {
            return 0;
        }
        let size = f64::from(rs_replicas(rs) * deployment_replicas) / f64::from(annotated);
        size.round() as i32 - rs_replicas(rs)
    }

    /// Scales when the size differs; returns whether it did and the ReplicaSet as it is now.
    pub(super) async fn scale_and_record(
        &mut self,
        rs: ReplicaSet,
        size: i32,
    ) -> Result<(bool, ReplicaSet), Error> {
        let current = rs_replicas(&rs);
        if current == size {
            return Ok((false, rs));
        }
        let op = if current < size { "up" } else { "down" };
        self.scale_rs(rs, size, op).await
    }

    /// Sets the size and the replicas annotations, with the resourceVersion the decision was
    /// made on (upstream's `scaleReplicaSet`).
    async fn scale_rs(
        &mut self,
        mut rs: ReplicaSet,
        size: i32,
        op: &str,
    ) -> Result<(bool, ReplicaSet), Error> {
        let old_size = rs_replicas(&rs);
        let size_changed = old_size != size;
        let want = spec_replicas(&self.d);
        let annotations_changed =
            set_replicas_annotations(&mut rs, want, want + max_surge(&self.d));
        if !size_changed && !annotations_changed {
            return Ok((false, rs));
        }
        set_rs_replicas(&mut rs, size);
        let updated = self
            .sets
            .replace(&rs.name_any(), &PostParams::default(), &rs)
            .await?;
        if size_changed {
            tracing::info!(replica_set = %rs.name_any(), from = old_size, to = size, "scaled");
            self.event(
                EventType::Normal,
                "ScalingReplicaSet",
                format!(
                    "Scaled {op} replica set {} from {old_size} to {size}",
                    rs.name_any()
                ),
            )
            .await;
        }
        Ok((size_changed, updated))
    }

    /// Deletes the oldest revisions beyond `revisionHistoryLimit` that no longer run anything
    /// (upstream's `cleanupDeployment`).
    pub(super) async fn cleanup(&mut self, old: &[ReplicaSet]) -> Result<(), Error> {
        if !has_revision_history_limit(&self.d) {
            return Ok(());
        }
        let limit = self
            .d
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10);
        let mut cleanable: Vec<&ReplicaSet> = old
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let diff = cleanable.len() as i64 - i64::from(limit);
        if diff <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| {
            revision(a)
                .cmp(&revision(b))
                .then_with(|| by_creation(a, b))
        });
        for rs in cleanable.into_iter().take(diff as usize) {
            let status = rs.status.clone().unwrap_or_default();
            if status.replicas != 0
                || rs_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > status.observed_generation.unwrap_or(0)
            {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: rs.uid(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match self.sets.delete(&rs.name_any(), &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Upstream's `NewRSNewReplicas`: how far the new ReplicaSet may grow now.
pub(super) fn new_rs_new_replicas(
    d: &k8s_openapi::api::apps::v1::Deployment,
    all: &[&ReplicaSet],
    new: &ReplicaSet,
) -> i32 {
    let want = spec_replicas(d);
    if !is_rolling_update(d) {
        return want;
    }
    let surge = max_surge(d);
    let current = replica_count(all.iter().copied());
    let max_total = want + surge;
    if current >= max_total {
        return rs_replicas(new);
    }
    let up = (max_total - current).min(want - rs_replicas(new));
    rs_replicas(new) + up
}

/// Puts an updated ReplicaSet back where it came from.
pub(super) fn replace_in(
    new: &mut Option<ReplicaSet>,
    old: &mut [ReplicaSet],
    updated: ReplicaSet,
) {
    if let Some(n) = new.as_mut()
        && n.uid() == updated.uid()
    {
        *n = updated;
        return;
    }
    if let Some(o) = old.iter_mut().find(|o| o.uid() == updated.uid()) {
        *o = updated;
    }
}
