//! Controller history, as upstream's pkg/controller/history: a controller snapshots each pod
//! template it runs as a ControllerRevision it owns, so `kubectl rollout history` can list the
//! templates and `kubectl rollout undo` can patch an old one back in. A revision's data is the
//! strategic merge patch that restores the template (`{"spec":{"template":{...,"$patch":
//! "replace"}}}`), which is what kubectl applies; its `revision` number orders the history and
//! is moved forward when an old template comes back, instead of writing a duplicate.
//!
//! The StatefulSet controller names revisions `<parent>-<hash>` with the hash of the data and
//! the collision count (upstream's `HashControllerRevision`, FNV-1 32 bits); the DaemonSet
//! controller names them after its template hash (see `daemonset`). Both share listing,
//! adoption, creation with collision handling, renumbering and truncation from here.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use minik8s_api::selector::Selector;
use serde_json::Value;

use super::controller_ref::{claim, controller_of, controller_ref};
use super::hash::{fnv32, safe_encode};
use crate::informers::ByController;

/// The label holding the hash of a revision's data (upstream's `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// `kubectl rollout history`'s column: the annotation copied from the parent.
pub const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

/// Upstream's `ControllerRevisionName`: `<prefix>-<hash>`, the prefix cut to 223 bytes so the
/// name stays within 253.
pub fn revision_name(prefix: &str, hash: &str) -> String {
    let mut cut = prefix.len().min(223);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hash}", &prefix[..cut])
}

/// The bytes a revision's data is written and compared as: compact JSON, keys sorted (as Go's
/// `json.Marshal` of the maps upstream builds the patch from).
pub fn data_bytes(data: &Value) -> Vec<u8> {
    serde_json::to_vec(data).unwrap_or_default()
}

/// Upstream's `HashControllerRevision`: FNV-1 over the data, then the collision count in
/// decimal when given, safe-encoded.
pub fn hash_revision(data: &Value, probe: Option<i32>) -> String {
    let mut bytes = data_bytes(data);
    if let Some(p) = probe {
        bytes.extend_from_slice(p.to_string().as_bytes());
    }
    safe_encode(&fnv32(&bytes).to_string())
}

/// The patch that puts `template` back (upstream's `getPatch` of the StatefulSet and
/// DaemonSet controllers): only the template, marked to replace the whole of it.
pub fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut template =
        serde_json::to_value(template).unwrap_or_else(|_| Value::Object(Default::default()));
    if let Some(m) = template.as_object_mut() {
        m.insert("$patch".into(), Value::String("replace".into()));
    }
    serde_json::json!({"spec": {"template": template}})
}

/// The template a revision restores (upstream's `ApplyRevision` for the template, the only
/// thing the patch holds).
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut template = revision
        .data
        .as_ref()?
        .0
        .get("spec")?
        .get("template")?
        .clone();
    template.as_object_mut()?.remove("$patch");
    serde_json::from_value(template).ok()
}

/// The data of a revision, or null.
pub fn data_of(revision: &ControllerRevision) -> &Value {
    static NULL: Value = Value::Null;
    revision.data.as_ref().map_or(&NULL, |d| &d.0)
}

/// Upstream's `NewControllerRevision`: owned by `parent` through its controller reference,
/// labelled with the template's labels and the hash, named `<parent>-<hash>`.
pub fn new_revision<K: Resource<DynamicType = ()>>(
    parent: &K,
    template_labels: Option<&BTreeMap<String, String>>,
    data: Value,
    revision: i64,
    collision_count: i32,
) -> ControllerRevision {
    let hash = hash_revision(&data, Some(collision_count));
    let mut labels = template_labels.cloned().unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.clone());
    let mut cr = ControllerRevision {
        data: Some(RawExtension(data)),
        revision,
        ..Default::default()
    };
    cr.metadata.name = Some(revision_name(&parent.name_any(), &hash));
    cr.metadata.namespace = parent.namespace();
    cr.metadata.labels = Some(labels);
    cr.metadata.owner_references = Some(vec![controller_ref(parent)]);
    cr
}

/// Upstream's `EqualRevision`: the same data (hash labels, when both parse as numbers and
/// differ, settle it sooner).
pub fn equal_revision(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    let hash = |r: &ControllerRevision| {
        r.labels()
            .get(HASH_LABEL)
            .and_then(|h| h.parse::<i32>().ok())
    };
    if let (Some(x), Some(y)) = (hash(a), hash(b))
        && x != y
    {
        return false;
    }
    data_of(a) == data_of(b)
}

/// The revisions equal to `needle`, in their order (upstream's `FindEqualRevisions`).
pub fn find_equal<'a>(
    revisions: &'a [Arc<ControllerRevision>],
    needle: &ControllerRevision,
) -> Vec<&'a Arc<ControllerRevision>> {
    revisions
        .iter()
        .filter(|r| equal_revision(r, needle))
        .collect()
}

/// Sorts by revision number, then creation time, then name (upstream's
/// `SortControllerRevisions`).
pub fn sort_revisions(revisions: &mut [Arc<ControllerRevision>]) {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                let t =
                    |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
                t(a).cmp(&t(b))
            })
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
}

/// The number the next revision gets: one past the newest of sorted `revisions`, or 1.
pub fn next_revision(sorted: &[Arc<ControllerRevision>]) -> i64 {
    sorted.last().map_or(1, |r| r.revision + 1)
}

/// The highest revision number, 0 for none (the DaemonSet controller's `maxRevision`).
pub fn max_revision(revisions: &[Arc<ControllerRevision>]) -> i64 {
    revisions.iter().map(|r| r.revision).max().unwrap_or(0)
}

/// The revisions to delete so that at most `limit` revisions remain besides the live ones
/// (named in `live`), oldest first (the StatefulSet controller's `truncateHistory`).
/// `sorted` is in revision order.
pub fn to_truncate(
    sorted: &[Arc<ControllerRevision>],
    live: &HashSet<String>,
    limit: i32,
) -> Vec<Arc<ControllerRevision>> {
    let history: Vec<&Arc<ControllerRevision>> = sorted
        .iter()
        .filter(|r| !live.contains(&r.name_any()))
        .collect();
    let limit = limit.max(0) as usize;
    if history.len() <= limit {
        return Vec::new();
    }
    history[..history.len() - limit]
        .iter()
        .map(|r| Arc::clone(r))
        .collect()
}

/// The revisions `parent` owns in the cache, after adopting the orphans its selector matches
/// and releasing owned ones it no longer matches (upstream's `ControllerRevision`
/// ref manager and the StatefulSet controller's `adoptOrphanRevisions`).
pub async fn owned_revisions<K>(
    parent: &K,
    parent_api: &Api<K>,
    revisions: &ByController<ControllerRevision>,
    selector: &Selector,
) -> Result<Vec<Arc<ControllerRevision>>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let ns = parent.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(parent_api.clone().into_client(), &ns);
    let candidates = revisions
        .controlled_by(&parent.uid().unwrap_or_default(), Some(&ns))
        .into_iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(ns.as_str()));
    claim(parent, parent_api, &api, selector, candidates).await
}

/// Creates `revision`, renamed after its hash with the collision count (upstream's
/// `CreateControllerRevision`): a revision of that name with the same data is already the
/// one wanted; one with other data is a hash collision, escaped by counting it in
/// `collision_count` and trying the next name.
pub async fn create_revision(
    api: &Api<ControllerRevision>,
    parent_name: &str,
    revision: &ControllerRevision,
    collision_count: &mut i32,
) -> Result<ControllerRevision, kube::Error> {
    let mut clone = revision.clone();
    loop {
        let hash = hash_revision(data_of(revision), Some(*collision_count));
        clone.metadata.name = Some(revision_name(parent_name, &hash));
        match api.create(&PostParams::default(), &clone).await {
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                let existing = api.get(&clone.name_any()).await?;
                if data_of(&existing) == data_of(&clone) {
                    return Ok(existing);
                }
                *collision_count += 1;
            }
            other => return other,
        }
    }
}

/// Moves `revision` to number `number` (upstream's `UpdateControllerRevision`); a conflict
/// is returned, to be retried from a fresher cache.
pub async fn renumber(
    api: &Api<ControllerRevision>,
    revision: &ControllerRevision,
    number: i64,
) -> Result<ControllerRevision, kube::Error> {
    if revision.revision == number {
        return Ok(revision.clone());
    }
    let mut clone = revision.clone();
    clone.revision = number;
    api.replace(&revision.name_any(), &PostParams::default(), &clone)
        .await
}

/// Deletes `revision`; one already gone is fine.
pub async fn delete_revision(
    api: &Api<ControllerRevision>,
    revision: &ControllerRevision,
) -> Result<(), kube::Error> {
    match api
        .delete(&revision.name_any(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `revision` is controlled by the object with `uid`.
pub fn controlled_by(revision: &ControllerRevision, uid: &str) -> bool {
    controller_of(revision).is_some_and(|r| r.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }))
        .unwrap()
    }

    fn parent() -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web",
                     "template": {"metadata": {"labels": {"app": "web"}}}},
        }))
        .unwrap()
    }

    fn rev(name: &str, number: i64, image: &str, created: i64) -> Arc<ControllerRevision> {
        let mut r = new_revision(&parent(), None, template_patch(&template(image)), number, 0);
        r.metadata.name = Some(name.into());
        r.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        ));
        Arc::new(r)
    }

    #[test]
    fn the_patch_replaces_the_template_and_gives_it_back() {
        let t = template("busybox:1.36");
        let patch = template_patch(&t);
        assert_eq!(patch["spec"]["template"]["$patch"], "replace");
        assert_eq!(patch.as_object().unwrap().len(), 1);
        // Compact, keys sorted: what upstream's json.Marshal of maps writes.
        let text = String::from_utf8(data_bytes(&patch)).unwrap();
        assert!(
            text.starts_with(r#"{"spec":{"template":{"$patch":"replace","metadata""#),
            "{text}"
        );
        let r = new_revision(&parent(), None, patch, 1, 0);
        assert_eq!(template_of(&r), Some(t));
    }

    #[test]
    fn revisions_are_named_after_the_hash_of_data_and_collisions() {
        let p = parent();
        let data = template_patch(&template("a"));
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        let r = new_revision(&p, Some(&labels), data.clone(), 3, 0);
        let hash = hash_revision(&data, Some(0));
        assert_eq!(r.name_any(), format!("web-{hash}"));
        assert_eq!(r.labels()[HASH_LABEL], hash);
        assert_eq!(r.labels()["app"], "web");
        assert_eq!(r.revision, 3);
        let owner = &r.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("StatefulSet", Some(true))
        );
        // The hash is FNV-1 of the bytes and the count, safe-encoded.
        let mut bytes = data_bytes(&data);
        bytes.push(b'0');
        assert_eq!(hash, safe_encode(&fnv32(&bytes).to_string()));
        assert_ne!(hash, hash_revision(&data, Some(1)));
        assert_ne!(
            hash,
            hash_revision(&template_patch(&template("b")), Some(0))
        );
        assert!(hash.len() <= 10);
        // Long parents are cut so the name fits in 253 bytes.
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
    }

    #[test]
    fn equal_revisions_have_equal_data() {
        let a = rev("web-a", 1, "a", 1);
        let b = rev("web-b", 2, "b", 2);
        let a2 = rev("web-a2", 3, "a", 3);
        assert!(equal_revision(&a, &a2));
        assert!(!equal_revision(&a, &b));
        let all = vec![a.clone(), b.clone(), a2.clone()];
        let found: Vec<String> = find_equal(&all, &a).iter().map(|r| r.name_any()).collect();
        assert_eq!(found, ["web-a", "web-a2"]);
    }

    #[test]
    fn sorting_and_numbering() {
        let mut all = vec![
            rev("c", 2, "c", 5),
            rev("b", 1, "b", 9),
            rev("a", 1, "a", 9),
            rev("d", 1, "d", 1),
        ];
        sort_revisions(&mut all);
        let names: Vec<String> = all.iter().map(|r| r.name_any()).collect();
        assert_eq!(names, ["d", "a", "b", "c"]);
        assert_eq!(next_revision(&all), 3);
        assert_eq!(next_revision(&[]), 1);
        assert_eq!(max_revision(&all), 2);
    }

    #[test]
    fn truncation_keeps_the_live_and_the_newest() {
        let all: Vec<_> = (1..=6)
            .map(|n| rev(&format!("r{n}"), n, &n.to_string(), n))
            .collect();
        let live: HashSet<String> = ["r1".to_string(), "r6".to_string()].into();
        let gone: Vec<String> = to_truncate(&all, &live, 2)
            .iter()
            .map(|r| r.name_any())
            .collect();
        // History besides the live r1 and r6: r2..r5; two are kept, the newest.
        assert_eq!(gone, ["r2", "r3"]);
        assert!(to_truncate(&all, &live, 10).is_empty());
        assert_eq!(to_truncate(&all, &live, 0).len(), 4);
    }
}
