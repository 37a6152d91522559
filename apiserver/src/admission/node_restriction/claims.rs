//! PersistentVolumeClaims: a kubelet records how far a volume's expansion got on the node,
//! in the claim's status, and changes nothing else of any claim (upstream's admitPVCStatus,
//! with RecoverVolumeExpansionFailure on as upstream's default since 1.32).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use minik8s_api::strategy::Kind;
use minik8s_api::{ApiError, Target};
use serde_json::Value;

use super::{NodeRestriction, Verdict, for_node, refuse};
use crate::registry::generic::{
    CreateAdmission, DeleteAdmission, Part, Phase, Removal, UpdateAdmission,
};

/// The status fields a node may change: the resize's progress.
const RESIZE_STATUS: &[&str] = &[
    "capacity",
    "conditions",
    "allocatedResources",
    "allocatedResourceStatuses",
];

fn target(name: &str) -> Target<'_> {
    Target {
        group: "",
        resource: "persistentvolumeclaims",
        name,
    }
}

fn only_status() -> Verdict {
    refuse("may only update PVC status")
}

/// A claim as compared: defaulted (as upstream decodes both), without what may change (and
/// what says nothing: resourceVersion, managedFields), absent and empty values alike as
/// upstream's semantic equality has them.
fn comparable(claim: &PersistentVolumeClaim) -> Value {
    let mut claim = claim.clone();
    Kind::default_fields(&mut claim);
    let mut v = serde_json::to_value(&claim).unwrap_or_default();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        for field in RESIZE_STATUS {
            status.remove(*field);
        }
    }
    prune(&mut v);
    v
}

fn prune(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.values_mut().for_each(prune);
            map.retain(|_, v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()));
        }
        Value::Array(items) => items.iter_mut().for_each(prune),
        _ => {}
    }
}

/// The fields that differ, one `-path: old` and `+path: new` line each (upstream prints a
/// `cmp.Diff`, whose layout is deliberately unstable; the fields are the point).
fn diff(path: &str, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<String>) {
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                diff(&p, a.get(k), b.get(k), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            if let Some(a) = a {
                out.push(format!("-{path}: {a}"));
            }
            if let Some(b) = b {
                out.push(format!("+{path}: {b}"));
            }
        }
    }
}

/// A kubelet's update of a claim's status.
pub(super) fn status_update(
    node: &str,
    new: &PersistentVolumeClaim,
    old: &PersistentVolumeClaim,
) -> Verdict {
    let (old, new) = (comparable(old), comparable(new));
    if old == new {
        return Ok(());
    }
    let mut lines = Vec::new();
    diff("", Some(&old), Some(&new), &mut lines);
    refuse(format!(
        "node {node:?} is not allowed to update fields other than status.quantity and status.conditions: {}",
        lines.join("\n")
    ))
}

#[async_trait]
impl CreateAdmission<PersistentVolumeClaim> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, c: &mut PersistentVolumeClaim, _: bool) -> Result<(), ApiError> {
        let name = crate::admission::name_in_errors(&c.metadata).to_string();
        for_node(target(&name), |_| only_status())
    }
}

#[async_trait]
impl UpdateAdmission<PersistentVolumeClaim> for NodeRestriction {
    fn admits(&self, part: Part) -> bool {
        part == self.part
    }
    async fn admit_update(
        &self,
        c: &mut PersistentVolumeClaim,
        old: &PersistentVolumeClaim,
        _: bool,
    ) -> Result<(), ApiError> {
        let name = old.metadata.name.clone().unwrap_or_default();
        for_node(target(&name), |node| match self.part {
            Part::Status => status_update(node, c, old),
            _ => only_status(),
        })
    }
}

#[async_trait]
impl DeleteAdmission<PersistentVolumeClaim> for NodeRestriction {
    async fn admit_delete(&self, r: &Removal<'_, PersistentVolumeClaim>) -> Result<(), ApiError> {
        for_node(target(r.name), |_| only_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(status: Value, labels: Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "default", "resourceVersion": "7",
                "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn only_the_resize_status() {
        let old = claim(
            json!({"phase": "Bound", "capacity": {"storage": "1Gi"}}),
            json!({"app": "a"}),
        );
        let cases = [
            (
                "capacity, conditions and allocation",
                claim(
                    json!({"phase": "Bound", "capacity": {"storage": "2Gi"},
                        "conditions": [{"type": "FileSystemResizePending", "status": "True"}],
                        "allocatedResources": {"storage": "2Gi"},
                        "allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}}),
                    json!({"app": "a"}),
                ),
                Ok(()),
            ),
            (
                "the phase",
                claim(
                    json!({"phase": "Lost", "capacity": {"storage": "1Gi"}}),
                    json!({"app": "a"}),
                ),
                refuse(
                    "node \"n1\" is not allowed to update fields other than status.quantity and status.conditions: -status.phase: \"Bound\"\n+status.phase: \"Lost\"",
                ),
            ),
            (
                "a label",
                claim(
                    json!({"phase": "Bound", "capacity": {"storage": "1Gi"}}),
                    json!({"app": "b"}),
                ),
                refuse(
                    "node \"n1\" is not allowed to update fields other than status.quantity and status.conditions: -metadata.labels.app: \"a\"\n+metadata.labels.app: \"b\"",
                ),
            ),
        ];
        for (what, new, want) in cases {
            assert_eq!(status_update("n1", &new, &old), want, "{what}");
        }
    }
}
