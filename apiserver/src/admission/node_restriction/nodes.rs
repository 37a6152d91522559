//! Nodes: a kubelet writes only its own Node, and never what steers workloads to it — its
//! taints, its config source, or labels other than the ones kubelets own (upstream's
//! admitNode and getForbiddenLabels, with `k8s.io/kubelet`'s list of kubelet labels).

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use minik8s_api::{ApiError, Target};

use super::{NodeRestriction, Verdict, for_node, refuse};
use crate::registry::generic::{
    CreateAdmission, DeleteAdmission, Part, Phase, Removal, UpdateAdmission,
};

/// Labels a node may not set on itself, in any subdomain: administrators steer workloads
/// with them (`v1.LabelNamespaceNodeRestriction`).
const RESTRICTED_NAMESPACE: &str = "node-restriction.kubernetes.io";

/// The `kubernetes.io` and `k8s.io` labels kubelets set on their Nodes (upstream's
/// `kubeletLabels`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];

/// Label namespaces (and their subdomains) kubelets own (`kubeletLabelNamespaces`).
const KUBELET_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn target(name: &str) -> Target<'_> {
    Target {
        group: "",
        resource: "nodes",
        name,
    }
}

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or_default()
}

fn in_domain(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_NAMESPACES
            .iter()
            .any(|d| in_domain(label_namespace(key), d))
}

/// Whether a node may not add, change or remove label `key` itself.
fn forbidden_label(key: &str) -> bool {
    let namespace = label_namespace(key);
    let kubernetes = in_domain(namespace, "kubernetes.io") || in_domain(namespace, "k8s.io");
    in_domain(namespace, RESTRICTED_NAMESPACE) || (kubernetes && !is_kubelet_label(key))
}

/// The labels that differ between `a` and `b` and that the node may not change, sorted.
fn forbidden_changes(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Vec<String> {
    let changed: BTreeSet<&String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .collect();
    changed
        .into_iter()
        .filter(|k| forbidden_label(k))
        .cloned()
        .collect()
}

fn labels(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

fn own(node: &str, name: &str) -> Verdict {
    if name != node {
        return refuse(format!(
            "node {node:?} is not allowed to modify node {name:?}"
        ));
    }
    Ok(())
}

/// A Node a kubelet registers.
pub(super) fn create(node: &str, n: &Node) -> Verdict {
    own(node, n.metadata.name.as_deref().unwrap_or_default())?;
    if n.spec.as_ref().is_some_and(|s| s.config_source.is_some()) {
        // Upstream's wording, pods and all.
        return refuse(format!(
            "node {node:?} is not allowed to create pods with a non-nil configSource"
        ));
    }
    let bad = forbidden_changes(&labels(n), &BTreeMap::new());
    if !bad.is_empty() {
        return refuse(format!(
            "node {node:?} is not allowed to set the following labels: {}",
            bad.join(", ")
        ));
    }
    Ok(())
}

/// An update of a kubelet's Node, its status included.
pub(super) fn update(node: &str, name: &str, new: &Node, old: &Node) -> Verdict {
    own(node, name)?;
    let config_source = |n: &Node| n.spec.as_ref().and_then(|s| s.config_source.clone());
    // Only a new non-nil source: old kubelets drop the field in status updates.
    if config_source(new).is_some() && config_source(new) != config_source(old) {
        return refuse(format!(
            "node {node:?} is not allowed to update configSource to a new non-nil configSource"
        ));
    }
    let taints = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
    };
    if taints(new) != taints(old) {
        return refuse(format!("node {node:?} is not allowed to modify taints"));
    }
    let bad = forbidden_changes(&labels(new), &labels(old));
    if !bad.is_empty() {
        // Upstream's message has no subject here.
        return refuse(format!(
            "is not allowed to modify labels: {}",
            bad.join(", ")
        ));
    }
    Ok(())
}

#[async_trait]
impl CreateAdmission<Node> for NodeRestriction {
    fn phase(&self) -> Phase {
        Phase::Validate
    }
    async fn admit(&self, n: &mut Node, _: bool) -> Result<(), ApiError> {
        let name = n.metadata.name.clone().unwrap_or_default();
        for_node(target(&name), |node| create(node, n))
    }
}

#[async_trait]
impl UpdateAdmission<Node> for NodeRestriction {
    fn admits(&self, part: Part) -> bool {
        part == self.part
    }
    async fn admit_update(&self, n: &mut Node, old: &Node, _: bool) -> Result<(), ApiError> {
        let name = old.metadata.name.clone().unwrap_or_default();
        for_node(target(&name), |node| update(node, &name, n, old))
    }
}

#[async_trait]
impl DeleteAdmission<Node> for NodeRestriction {
    async fn admit_delete(&self, r: &Removal<'_, Node>) -> Result<(), ApiError> {
        for_node(target(r.name), |node| own(node, r.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn node(v: Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn forbidden(why: &str) -> Verdict {
        refuse(why)
    }

    #[test]
    fn which_labels_a_kubelet_may_set() {
        let cases = [
            ("kubernetes.io/hostname", false),
            ("topology.kubernetes.io/zone", false),
            ("node.kubernetes.io/instance-type", false),
            (
                "node.kubernetes.io/exclude-from-external-load-balancers",
                false,
            ),
            ("foo.node.kubernetes.io/bar", false),
            ("kubelet.kubernetes.io/anything", false),
            ("example.com/pool", false),
            ("pool", false),
            ("node-restriction.kubernetes.io/pool", true),
            ("team.node-restriction.kubernetes.io/pool", true),
            ("node-role.kubernetes.io/control-plane", true),
            ("kubernetes.io/role", true),
            ("k8s.io/anything", true),
            ("foo.k8s.io/anything", true),
            ("notkubernetes.io/x", false),
        ];
        for (key, want) in cases {
            assert_eq!(forbidden_label(key), want, "{key}");
        }
    }

    #[test]
    fn registering_itself() {
        let cases = [
            (
                "its own node with kubelet labels",
                json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux", "zone": "a"}}}),
                Ok(()),
            ),
            (
                "another node",
                json!({"metadata": {"name": "n2"}}),
                forbidden("node \"n1\" is not allowed to modify node \"n2\""),
            ),
            (
                "restricted labels",
                json!({"metadata": {"name": "n1", "labels": {
                    "node-restriction.kubernetes.io/b": "x", "node-role.kubernetes.io/a": ""}}}),
                forbidden(
                    "node \"n1\" is not allowed to set the following labels: node-restriction.kubernetes.io/b, node-role.kubernetes.io/a",
                ),
            ),
            (
                "a config source",
                json!({"metadata": {"name": "n1"}, "spec": {"configSource": {"configMap": {
                    "name": "c", "namespace": "kube-system", "kubeletConfigKey": "k"}}}}),
                forbidden("node \"n1\" is not allowed to create pods with a non-nil configSource"),
            ),
        ];
        for (what, n, want) in cases {
            assert_eq!(create("n1", &node(n)), want, "{what}");
        }
    }

    #[test]
    fn updating_itself() {
        let base = json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux",
            "node-restriction.kubernetes.io/pool": "a"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
        let changed = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            node(v)
        };
        let cases = [
            (
                "a label of its own",
                changed(&|v| v["metadata"]["labels"]["zone"] = json!("b")),
                Ok(()),
            ),
            (
                "a restricted label",
                changed(&|v| {
                    v["metadata"]["labels"]["node-restriction.kubernetes.io/pool"] = json!("b")
                }),
                forbidden("is not allowed to modify labels: node-restriction.kubernetes.io/pool"),
            ),
            (
                "a restricted label removed",
                changed(&|v| v["metadata"]["labels"] = json!({"kubernetes.io/os": "linux"})),
                forbidden("is not allowed to modify labels: node-restriction.kubernetes.io/pool"),
            ),
            (
                "its taints",
                changed(&|v| v["spec"]["taints"] = json!([])),
                forbidden("node \"n1\" is not allowed to modify taints"),
            ),
            (
                "a new config source",
                changed(&|v| {
                    v["spec"]["configSource"] = json!({"configMap": {
                    "name": "c", "namespace": "kube-system", "kubeletConfigKey": "k"}})
                }),
                forbidden(
                    "node \"n1\" is not allowed to update configSource to a new non-nil configSource",
                ),
            ),
        ];
        let old = node(base.clone());
        for (what, new, want) in cases {
            assert_eq!(update("n1", "n1", &new, &old), want, "{what}");
        }
        assert_eq!(
            update("n1", "n2", &old, &old),
            forbidden("node \"n1\" is not allowed to modify node \"n2\"")
        );
    }
}
