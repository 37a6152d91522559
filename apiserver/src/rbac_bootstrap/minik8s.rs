//! What minik8s runs beyond upstream's components, and the roles that say what each may do:
//! knative-lite's controllers and data path (the activator specializes pool pods and wakes
//! revisions, the gateway starts workflow runs), the node's network services that upstream
//! ships as add-ons (cluster DNS keeps its Service, the Ingress proxy writes Ingress status,
//! NetworkPolicy enforcement reads policies and pods), and the local-path provisioner, which
//! writes volumes as the node it runs on (k3s runs it as an add-on with the same rules).
//! And kubelet TLS bootstrap out of the box, as kubeadm binds it: bootstrap tokens may ask
//! for node client certificates, nodes may renew theirs, and the approving controller may
//! approve nodes' serving certificates (a minik8s rule, see docs/security.md).
//! The API server's own client for kubelets is given `system:kubelet-api-admin` here, as
//! kubeadm's bootstrap does, instead of being a cluster admin.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule};

use super::{LEGACY, READ, READ_WRITE, cluster_role, rule};

/// The ServiceAccount knative-lite's controllers act as.
pub const KNATIVE_NAMESPACE: &str = "knative-serving";
pub const KNATIVE_ACCOUNT: &str = "controller";
/// The user the node's network services (proxy, DNS, Ingress, function gateway) act as.
pub const NODE_NETWORK_USER: &str = "system:kube-proxy";

const KNATIVE_ROLE: &str = "system:minik8s:knative-lite";
const NETWORK_ROLE: &str = "system:minik8s:node-network";
const NODE_SERVICES_ROLE: &str = "system:minik8s:node-services";

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

/// What a node that joined with a bootstrap token needs for its proxier, NetworkPolicy
/// enforcement and Ingress proxy, which act as the node there (it holds no other identity):
/// upstream's `system:node-proxier` and reads of policies and Ingresses, no Secrets.
fn node_services() -> Vec<PolicyRule> {
    vec![
        rule(
            READ,
            &[LEGACY],
            &["pods", "namespaces", "services", "endpoints", "nodes"],
        ),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            READ,
            &["networking.k8s.io"],
            &["networkpolicies", "ingresses", "ingressclasses"],
        ),
        rule(
            &["update", "patch"],
            &["networking.k8s.io"],
            &["ingresses/status"],
        ),
        rule(
            &["create", "patch", "update"],
            &[LEGACY, "events.k8s.io"],
            &["events"],
        ),
    ]
}

/// minik8s's own cluster roles.
pub fn cluster_roles() -> Vec<ClusterRole> {
    vec![
        cluster_role(KNATIVE_ROLE, knative_lite()),
        cluster_role(NETWORK_ROLE, node_network()),
        cluster_role(NODE_SERVICES_ROLE, node_services()),
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

/// Who has minik8s's roles, and upstream roles that minik8s's own users hold.
pub fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        // The API server calls kubelets (logs, exec, port-forward, node proxy, metrics) with
        // its kubelet-client certificate, which is in no group: kubelets let it in because
        // this role is bound to it, as kubeadm's bootstrap binds it.
        binding(
            "system:minik8s:apiserver-kubelet-client",
            "system:kubelet-api-admin",
            serde_json::json!([
                {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": crate::kubelet::APISERVER_CLIENT},
            ]),
        ),
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
            NODE_SERVICES_ROLE,
            NODE_SERVICES_ROLE,
            serde_json::json!([
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:nodes"},
            ]),
        ),
        // kubeadm's `kubeadm:kubelet-bootstrap`: bootstrap tokens create CSRs and watch them.
        binding(
            "system:minik8s:kubelet-bootstrap",
            "system:node-bootstrapper",
            serde_json::json!([
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:bootstrappers"},
            ]),
        ),
        // kubeadm's `kubeadm:node-autoapprove-bootstrap`: their node client CSRs are approved.
        binding(
            "system:minik8s:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            serde_json::json!([
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:bootstrappers"},
            ]),
        ),
        // kubeadm's `kubeadm:node-autoapprove-certificate-rotation`: nodes renew their own.
        binding(
            "system:minik8s:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            serde_json::json!([
                {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:nodes"},
            ]),
        ),
        // The approving controller also approves nodes' own serving certificates.
        binding(
            "system:minik8s:kubelet-serving-approver",
            "system:certificates.k8s.io:kubelet-serving-approver",
            serde_json::json!([
                {"kind": "ServiceAccount", "name": "certificate-controller", "namespace": "kube-system"},
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
