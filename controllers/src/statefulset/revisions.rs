//! A StatefulSet's revisions (upstream's `getStatefulSetRevisions`, `newRevision`,
//! `ApplyRevision` and `truncateHistory`): the update revision is the one holding the set's
//! template (the newest equal one is reused, renumbered to the top when it is not already
//! there, which is how `kubectl rollout undo` takes effect); the current revision is the one
//! `status.currentRevision` names, or the update revision on a set's first sync.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;

use super::identity::revision_of;
use crate::util::history::{
    self, create_revision, find_equal, next_revision, renumber, template_of, template_patch,
};
use crate::util::reconciler::Error;

/// The revision holding `set`'s template, numbered `number`, named with `collision_count`
/// (upstream's `newRevision`): the template's labels, the set's annotations.
pub fn new_revision(set: &StatefulSet, number: i64, collision_count: i32) -> ControllerRevision {
    let template = set
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let mut revision = history::new_revision(
        set,
        labels,
        template_patch(&template),
        number,
        collision_count,
    );
    revision.metadata.annotations = Some(set.annotations().clone());
    revision
}

/// `set` with the template `revision` holds (upstream's `ApplyRevision`).
pub fn apply_revision(set: &StatefulSet, revision: &ControllerRevision) -> StatefulSet {
    let mut applied = set.clone();
    if let (Some(spec), Some(template)) = (applied.spec.as_mut(), template_of(revision)) {
        spec.template = template;
    }
    applied
}

/// The current and update revisions and the collision count, creating or renumbering the
/// update revision as needed. `revisions` are the set's, sorted.
pub async fn current_and_update(
    api: &Api<ControllerRevision>,
    set: &StatefulSet,
    revisions: &[Arc<ControllerRevision>],
) -> Result<(Arc<ControllerRevision>, Arc<ControllerRevision>, i32), Error> {
    let mut collision_count = set
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let wanted = new_revision(set, next_revision(revisions), collision_count);
    let equal = find_equal(revisions, &wanted);
    let update = match (equal.last(), revisions.last()) {
        // The newest revision already holds the template: nothing changed.
        (Some(eq), Some(last)) if history::equal_revision(last, eq) => Arc::clone(last),
        // An older revision holds it: a rollback, renumbered to the top.
        (Some(eq), _) => Arc::new(renumber(api, eq, wanted.revision).await?),
        (None, _) => {
            Arc::new(create_revision(api, &set.name_any(), &wanted, &mut collision_count).await?)
        }
    };
    let current_name = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current = revisions
        .iter()
        .find(|r| Some(r.name_any()) == current_name)
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok((current, update, collision_count))
}

/// The revisions past `revisionHistoryLimit` to delete, keeping the current and update
/// revisions and any a pod was made from (upstream's `truncateHistory`).
pub fn to_truncate(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    revisions: &[Arc<ControllerRevision>],
    current: &str,
    update: &str,
) -> Vec<Arc<ControllerRevision>> {
    let mut live: HashSet<String> = [current.to_string(), update.to_string()].into();
    live.extend(pods.iter().map(|p| revision_of(p).to_string()));
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10);
    history::to_truncate(revisions, &live, limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statefulset::testing::set;
    use crate::util::history::HASH_LABEL;

    #[test]
    fn a_revision_holds_the_template_and_restores_it() {
        let mut s = set(
            serde_json::json!({"metadata": {"annotations": {"kubernetes.io/change-cause": "v1"}}}),
        );
        let r = new_revision(&s, 1, 0);
        assert!(r.name_any().starts_with("web-"));
        assert_eq!(r.name_any(), format!("web-{}", r.labels()[HASH_LABEL]));
        assert_eq!(r.labels()["app"], "web");
        assert_eq!(r.annotations()["kubernetes.io/change-cause"], "v1");
        let original = s.clone();
        s.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("other".into());
        let restored = apply_revision(&s, &r);
        assert_eq!(
            restored.spec.unwrap().template,
            original.spec.unwrap().template
        );
        // Another template, another name.
        assert_ne!(new_revision(&s, 1, 0).name_any(), r.name_any());
    }

    #[test]
    fn history_keeps_live_revisions() {
        let s = set(serde_json::json!({"spec": {"revisionHistoryLimit": 1}}));
        let revs: Vec<_> = (1..=4)
            .map(|n| {
                let mut r = new_revision(&s, n, 0);
                r.metadata.name = Some(format!("web-r{n}"));
                Arc::new(r)
            })
            .collect();
        let mut pod = crate::statefulset::identity::new_pod(&s, 0);
        crate::statefulset::identity::set_revision(&mut pod, "web-r1");
        let gone: Vec<String> = to_truncate(&s, &[Arc::new(pod)], &revs, "web-r4", "web-r4")
            .iter()
            .map(|r| r.name_any())
            .collect();
        assert_eq!(gone, ["web-r2"]);
    }
}
