//! Nodes: registered by kubelets, cordoned through `spec.unschedulable`.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use crate::kinds::resource_quota::validate_quantity_value;
use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, string, text};
use crate::validation::{Errors, FieldError, Path, qualified_name};

impl Kind for Node {
    const COLUMNS: &'static [Column] = NODE_COLUMNS;
    const FIELDS: &'static [&'static str] = &["spec.unschedulable"];

    spec_and_status!();

    fn default_fields(&mut self) {
        if let Some(status) = self.status.as_mut()
            && status.allocatable.is_none()
        {
            status.allocatable = status.capacity.clone();
        }
    }

    fn validate(&self, errs: &mut Errors) {
        for (i, t) in self
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .enumerate()
        {
            let p = Path::new("spec").child("taints").index(i);
            for e in qualified_name(&t.key) {
                errs.push(FieldError::invalid(&p.child("key"), &t.key, e));
            }
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()) {
                errs.push(FieldError::not_supported(
                    &p.child("effect"),
                    &t.effect,
                    &["NoExecute", "NoSchedule", "PreferNoSchedule"],
                ));
            }
        }
        // ValidateNode: every quantity in capacity and allocatable (device plugins' extended
        // resources among them, which count whole devices) is valid for its resource.
        if let Some(status) = &self.status {
            for (field, list) in [
                ("capacity", &status.capacity),
                ("allocatable", &status.allocatable),
            ] {
                let p = Path::new("status").child(field);
                for (k, v) in list.iter().flatten() {
                    validate_quantity_value(k, v, &p.child(k), errs);
                }
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "spec.unschedulable" => Some(
                self.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
                    .to_string(),
            ),
            _ => None,
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(node_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const NODE_COLUMNS: &[Column] = &[
    NAME,
    string("Status", "The status of the node"),
    string("Roles", "The roles of the node"),
    AGE,
    string("Version", doc::NODE_KUBELET_VERSION),
    string("Internal-IP", doc::NODE_ADDRESSES).wide(),
    string("External-IP", doc::NODE_ADDRESSES).wide(),
    string("OS-Image", doc::NODE_OS_IMAGE).wide(),
    string("Kernel-Version", doc::NODE_KERNEL_VERSION).wide(),
    string("Container-Runtime", doc::NODE_CONTAINER_RUNTIME_VERSION).wide(),
];

const LABEL_NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
const NODE_LABEL_ROLE: &str = "kubernetes.io/role";

fn node_cells(node: &Node, now: Timestamp) -> Vec<Value> {
    let status = node.status.clone().unwrap_or_default();
    // Only Ready is reported; the last condition of a type wins.
    let ready = status
        .conditions
        .iter()
        .flatten()
        .rfind(|c| c.type_ == "Ready");
    let mut states: Vec<&str> = Vec::new();
    match ready {
        Some(c) if c.status == "True" => states.push("Ready"),
        Some(_) => states.push("NotReady"),
        None => states.push("Unknown"),
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        states.push("SchedulingDisabled");
    }

    let roles: BTreeSet<&str> = node
        .metadata
        .labels
        .iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix(LABEL_NODE_ROLE_PREFIX) {
                (!role.is_empty()).then_some(role)
            } else if k == NODE_LABEL_ROLE && !v.is_empty() {
                Some(v.as_str())
            } else {
                None
            }
        })
        .collect();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    };

    let info = status.node_info.clone().unwrap_or_default();
    let address = |type_: &str| {
        status
            .addresses
            .iter()
            .flatten()
            .find(|a| a.type_ == type_)
            .map_or_else(|| "<none>".to_string(), |a| a.address.clone())
    };
    let known = |s: String| {
        if s.is_empty() {
            "<unknown>".to_string()
        } else {
            s
        }
    };
    vec![
        name(&node.metadata),
        text(states.join(",")),
        text(roles),
        age(&node.metadata, now),
        text(info.kubelet_version),
        text(address("InternalIP")),
        text(address("ExternalIP")),
        text(known(info.os_image)),
        text(known(info.kernel_version)),
        text(known(info.container_runtime_version)),
    ]
}

mod doc {
    pub const NODE_KUBELET_VERSION: &str = "Kubelet Version reported by the node.";
    pub const NODE_OS_IMAGE: &str =
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).";
    pub const NODE_KERNEL_VERSION: &str =
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).";
    pub const NODE_CONTAINER_RUNTIME_VERSION: &str = "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).";
    pub const NODE_ADDRESSES: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn node(labels: Value, spec: Value, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "n1", "labels": labels, "creationTimestamp": ago(2 * 86400 + 3600)},
               "spec": spec, "status": status})
    }

    #[test]
    fn node_rows() {
        let status_of = |spec: Value, conditions: Value| {
            row_of::<Node>(node(json!({}), spec, json!({"conditions": conditions})))[1].clone()
        };
        let ready = json!([{"type": "Ready", "status": "True"}]);
        assert_eq!(status_of(json!({}), ready.clone()), "Ready");
        assert_eq!(
            status_of(json!({"unschedulable": true}), ready),
            "Ready,SchedulingDisabled"
        );
        assert_eq!(
            status_of(json!({}), json!([{"type": "Ready", "status": "False"}])),
            "NotReady"
        );
        assert_eq!(
            status_of(json!({}), json!([{"type": "Ready", "status": "Unknown"}])),
            "NotReady"
        );
        assert_eq!(
            status_of(
                json!({}),
                json!([{"type": "MemoryPressure", "status": "True"}])
            ),
            "Unknown"
        );
        assert_eq!(
            status_of(json!({"unschedulable": true}), json!([])),
            "Unknown,SchedulingDisabled"
        );

        let roles = |labels: Value| row_of::<Node>(node(labels, json!({}), json!({})))[2].clone();
        assert_eq!(roles(json!({})), "<none>");
        assert_eq!(
            roles(
                json!({"node-role.kubernetes.io/master": "", "node-role.kubernetes.io/control-plane": "",
                         "node-role.kubernetes.io/proxy": "", "kubernetes.io/role": "node",
                         "node-role.kubernetes.io/": "x"})
            ),
            "control-plane,master,node,proxy"
        );
        assert_eq!(roles(json!({"kubernetes.io/role": "node"})), "node");
        assert_eq!(roles(json!({"kubernetes.io/role": ""})), "<none>");

        let full = row_of::<Node>(node(
            json!({}),
            json!({}),
            json!({"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "ExternalIP", "address": "2.2.2.2"}, {"type": "InternalIP", "address": "3.3.3.3"},
                                     {"type": "ExternalIP", "address": "4.4.4.4"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                                    "kernelVersion": "", "containerRuntimeVersion": "containerd://1.7.0",
                                    "architecture": "amd64", "bootID": "", "machineID": "", "operatingSystem": "linux",
                                    "systemUUID": "", "kubeProxyVersion": ""}}),
        ));
        assert_eq!(
            full,
            vec![
                json!("n1"),
                json!("Ready"),
                json!("<none>"),
                json!("2d1h"),
                json!("v1.32.0"),
                json!("3.3.3.3"),
                json!("2.2.2.2"),
                json!("Debian GNU/Linux 12 (bookworm)"),
                json!("<unknown>"),
                json!("containerd://1.7.0")
            ]
        );
        let bare = row_of::<Node>(node(json!({}), json!({}), json!({})));
        assert_eq!(
            bare[4..],
            [
                json!(""),
                json!("<none>"),
                json!("<none>"),
                json!("<unknown>"),
                json!("<unknown>"),
                json!("<unknown>")
            ]
        );
    }

    #[test]
    fn capacity_counts_whole_devices() {
        let errors = |status: Value| {
            let n: Node = serde_json::from_value(node(json!({}), json!({}), status)).unwrap();
            let mut errs = Vec::new();
            n.validate(&mut errs);
            errs.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert!(
            errors(json!({"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "8"},
                          "allocatable": {"cpu": "3500m", "example.com/dev": "0"}}))
            .is_empty()
        );
        assert_eq!(
            errors(json!({"capacity": {"nvidia.com/gpu": "1500m"}, "allocatable": {"cpu": "-1"}})),
            [
                "status.capacity.nvidia.com/gpu: Invalid value: 1500m: must be an integer",
                "status.allocatable.cpu: Invalid value: \"-1\": must be greater than or equal to 0",
            ]
        );
    }
}
