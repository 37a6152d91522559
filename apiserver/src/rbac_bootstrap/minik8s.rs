//! What minik8s runs beyond upstream's components, and the roles that say what each may do:
//! knative-lite's controllers and data path (the activator specializes pool pods and wakes
//! revisions, the gateway starts workflow runs), the node's network services that upstream
//! ships as add-ons (cluster DNS keeps its Service, the Ingress proxy writes Ingress status,
//! NetworkPolicy enforcement reads policies and pods), and the local-path provisioner, which
//! writes volumes as the node it runs on (k3s runs it as an add-on with the same rules).

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};

use super::{LEGACY, READ, READ_WRITE, cluster_role, rule};

/// The ServiceAccount knative-lite's controllers act as.
pub const KNATIVE_NAMESPACE: &str = "knative-serving";
pub const KNATIVE_ACCOUNT: &str = "controller";
/// The user the node's network services (proxy, DNS, Ingress, function gateway) act as.
pub const NODE_NETWORK_USER: &str = "system:kube-proxy";

const KNATIVE_ROLE: &str = "system:minik8s:knative-lite";
const NETWORK_ROLE: &str = "system:minik8s:node-network";

fn knative_lite() -> Vec<PolicyRule> {
    let all = &["*"];
    vec![
        rule(
            all,
            &[
                "serving.knative.dev",
                "functions.minik8s.io",
                "autoscaling.internal.knative.dev",
                "networking.internal.knative.dev",
            ],
            all,
        ),
        rule(
            READ_WRITE,
            &[LEGACY],
            &["pods", "services", "endpoints", "configmaps", "events"],
        ),
        rule(READ, &[LEGACY], &["namespaces", "nodes", "secrets"]),
        rule(
            READ_WRITE,
            &["apps"],
            &["deployments", "deployments/scale", "replicasets"],
        ),
        rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            &["create", "patch", "update"],
            &["events.k8s.io"],
            &["events"],
        ),
    ]
}

fn node_network() -> Vec<PolicyRule> {
    vec![
        rule(
            READ,
            &[LEGACY],
            &["pods", "namespaces", "services", "endpoints", "nodes"],
        ),
        // Cluster DNS keeps its own Service and endpoints.
        rule(
            &["create", "update", "patch"],
            &[LEGACY],
            &["services", "endpoints"],
        ),
        rule(READ_WRITE, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            READ,
            &["networking.k8s.io"],
            &["networkpolicies", "ingresses", "ingressclasses"],
        ),
        rule(&["create"], &["networking.k8s.io"], &["ingressclasses"]),
        rule(
            &["update", "patch"],
            &["networking.k8s.io"],
            &["ingresses/status"],
        ),
        // TLS Ingresses' certificates.
        rule(&["get", "list", "watch"], &[LEGACY], &["secrets"]),
    ]
}

/// minik8s's own cluster roles.
pub fn cluster_roles() -> Vec<ClusterRole> {
    vec![
        cluster_role(KNATIVE_ROLE, knative_lite()),
        cluster_role(NETWORK_ROLE, node_network()),
    ]
}

fn binding(name: &str, role: &str, subjects: serde_json::Value) -> ClusterRoleBinding {
    let mut b: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }))
    .expect("a ClusterRoleBinding");
    b.metadata.name = Some(name.into());
    b
}

/// Who has minik8s's roles.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        binding(
            KNATIVE_ROLE,
            KNATIVE_ROLE,
            serde_json::json!([
                {"kind": "ServiceAccount", "name": KNATIVE_ACCOUNT, "namespace": KNATIVE_NAMESPACE},
                // The node's function gateway and activator run Knative's data path.
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": NODE_NETWORK_USER},
            ]),
        ),
        binding(
            NETWORK_ROLE,
            NETWORK_ROLE,
            serde_json::json!([
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": NODE_NETWORK_USER},
            ]),
        ),
        binding(
            "system:minik8s:local-path-provisioner",
            "system:persistent-volume-provisioner",
            serde_json::json!([
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:nodes"},
            ]),
        ),
    ]
}
