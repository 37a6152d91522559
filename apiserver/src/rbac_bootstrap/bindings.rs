//! The cluster-wide bindings of upstream's `ClusterRoleBindings()`: who holds the default
//! roles. The controllers' bindings come with their roles.

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;

use super::*;

pub(super) fn cluster_role_bindings() -> Vec<ClusterRoleBinding> {
    vec![
        cluster_binding("cluster-admin", vec![group("system:masters")]),
        cluster_binding("system:monitoring", vec![group("system:monitoring")]),
        cluster_binding("system:discovery", vec![group("system:authenticated")]),
        cluster_binding("system:basic-user", vec![group("system:authenticated")]),
        cluster_binding(
            "system:public-info-viewer",
            vec![
                group("system:authenticated"),
                group("system:unauthenticated"),
            ],
        ),
        cluster_binding("system:node-proxier", vec![user("system:kube-proxy")]),
        cluster_binding(
            "system:kube-controller-manager",
            vec![user("system:kube-controller-manager")],
        ),
        cluster_binding(
            "system:kube-dns",
            vec![service_account("kube-system", "kube-dns")],
        ),
        cluster_binding("system:kube-scheduler", vec![user("system:kube-scheduler")]),
        cluster_binding(
            "system:volume-scheduler",
            vec![user("system:kube-scheduler")],
        ),
        // Bound to no one: the Node authorizer grants nodes what they need since 1.7. The
        // binding stays so that tightening reconciliation can drop the old `system:nodes`
        // subject.
        cluster_binding("system:node", vec![]),
        cluster_binding(
            "system:service-account-issuer-discovery",
            vec![group("system:serviceaccounts")],
        ),
    ]
}
