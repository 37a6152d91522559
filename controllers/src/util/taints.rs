//! Taints and tolerations with upstream's matching rules (k8s.io/api/core/v1's
//! `Toleration.ToleratesTaint` and `MatchTaint`): the node lifecycle controller writes the
//! taints, the taint eviction controller and the scheduler read them, and all must agree.

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

pub const NO_EXECUTE: &str = "NoExecute";
pub const NO_SCHEDULE: &str = "NoSchedule";

/// Whether `toleration` tolerates `taint`: same effect (or none), and the key and value match
/// by the operator; an empty key with `Exists` tolerates every taint.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// Taints are the same taint when key and effect match (upstream's `MatchTaint`).
pub fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

pub fn node_taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(key: &str, op: &str, value: Option<&str>, effect: &str) -> Toleration {
        Toleration {
            key: (!key.is_empty()).then(|| key.into()),
            operator: (!op.is_empty()).then(|| op.into()),
            value: value.map(Into::into),
            effect: (!effect.is_empty()).then(|| effect.into()),
            toleration_seconds: None,
        }
    }

    #[test]
    fn matching_follows_upstream() {
        let t = taint(UNREACHABLE, None, NO_EXECUTE);
        assert!(tolerates(
            &toleration(UNREACHABLE, "Exists", None, NO_EXECUTE),
            &t
        ));
        assert!(tolerates(&toleration(UNREACHABLE, "Exists", None, ""), &t));
        assert!(tolerates(&toleration("", "Exists", None, ""), &t));
        assert!(!tolerates(
            &toleration(UNREACHABLE, "Exists", None, NO_SCHEDULE),
            &t
        ));
        assert!(!tolerates(
            &toleration(NOT_READY, "Exists", None, NO_EXECUTE),
            &t
        ));
        // Equal (the default operator) compares values; no value equals an empty one.
        assert!(tolerates(
            &toleration(UNREACHABLE, "", None, NO_EXECUTE),
            &t
        ));
        assert!(!tolerates(
            &toleration(UNREACHABLE, "Equal", Some("x"), NO_EXECUTE),
            &t
        ));
        let valued = taint("dedicated", Some("gpu"), NO_SCHEDULE);
        assert!(tolerates(
            &toleration("dedicated", "Equal", Some("gpu"), ""),
            &valued
        ));
        assert!(!tolerates(
            &toleration("dedicated", "Equal", Some("cpu"), ""),
            &valued
        ));
    }
}
