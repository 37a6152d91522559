//! The cluster-wide roles of upstream's `ClusterRoles()`: the user-facing roles (`admin`,
//! `edit`, `view` and what aggregates into them), discovery, and the roles of the components.

use k8s_openapi::api::rbac::v1::ClusterRole;

use super::*;

pub(super) fn cluster_roles() -> Vec<ClusterRole> {
    let mut roles = vec![
        // A "root" role which can do absolutely anything.
        cluster_role(
            "cluster-admin",
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        // Just enough to discover API versions for negotiation, and health.
        cluster_role(
            "system:discovery",
            vec![urls(
                &["get"],
                &[
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/version",
                    "/version/",
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
            )],
        ),
        // What a user may learn about themselves.
        cluster_role(
            "system:basic-user",
            vec![
                rule(
                    &["create"],
                    &[AUTHORIZATION],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(&["create"], &[AUTHENTICATION], &["selfsubjectreviews"]),
            ],
        ),
        // What anyone, even anonymous, may read.
        cluster_role(
            "system:public-info-viewer",
            vec![urls(
                &["get"],
                &["/livez", "/readyz", "/healthz", "/version", "/version/"],
            )],
        ),
        // The namespace administrator: `edit` and the power to grant permissions.
        aggregated_cluster_role("admin", AGGREGATE_TO_ADMIN, &[]),
        // A namespace's editor: everything but roles, bindings and the quota.
        aggregated_cluster_role("edit", AGGREGATE_TO_EDIT, &[(AGGREGATE_TO_ADMIN, "true")]),
        // A namespace's reader: everything but secrets and what could escalate.
        aggregated_cluster_role("view", AGGREGATE_TO_VIEW, &[(AGGREGATE_TO_EDIT, "true")]),
        labelled_cluster_role(
            "system:aggregate-to-admin",
            &[(AGGREGATE_TO_ADMIN, "true")],
            vec![
                rule(
                    &["create"],
                    &[AUTHORIZATION],
                    &["localsubjectaccessreviews"],
                ),
                rule(READ_WRITE, &[RBAC_GROUP], &["roles", "rolebindings"]),
            ],
        ),
        labelled_cluster_role(
            "system:aggregate-to-edit",
            &[(AGGREGATE_TO_EDIT, "true")],
            aggregate_to_edit(),
        ),
        labelled_cluster_role(
            "system:aggregate-to-view",
            &[(AGGREGATE_TO_VIEW, "true")],
            aggregate_to_view(),
        ),
        // Heapster's reads of the cluster's state.
        cluster_role("system:heapster", heapster()),
        cluster_role("system:node", node()),
        cluster_role("system:node-problem-detector", node_problem_detector()),
        cluster_role("system:kubelet-api-admin", kubelet_api_admin()),
        cluster_role(
            "system:node-bootstrapper",
            vec![rule(
                &["create", "get", "list", "watch"],
                &[CERTIFICATES],
                &["certificatesigningrequests"],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            vec![
                rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
                rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
            ],
        ),
        cluster_role(
            "system:kube-aggregator",
            vec![rule(READ, &[LEGACY], &["services", "endpoints"])],
        ),
        cluster_role(
            "system:monitoring",
            vec![urls(
                &["get"],
                &[
                    "/metrics",
                    "/metrics/slis",
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/livez/*",
                    "/readyz/*",
                    "/healthz/*",
                ],
            )],
        ),
        cluster_role("system:kube-controller-manager", kube_controller_manager()),
        cluster_role(
            "system:kube-dns",
            vec![rule(
                &["list", "watch"],
                &[LEGACY],
                &["endpoints", "services"],
            )],
        ),
        cluster_role(
            "system:persistent-volume-provisioner",
            persistent_volume_provisioner(),
        ),
        cluster_role("system:kube-scheduler", kube_scheduler()),
        cluster_role("system:volume-scheduler", volume_scheduler()),
        cluster_role("system:node-proxier", node_proxier()),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![urls(
                &["get"],
                &["/.well-known/openid-configuration", "/openid/v1/jwks"],
            )],
        ),
    ];
    roles.extend(certificate_roles());
    roles
}

fn aggregate_to_edit() -> Vec<PolicyRule> {
    let pods = [
        "pods",
        "pods/attach",
        "pods/proxy",
        "pods/exec",
        "pods/portforward",
    ];
    vec![
        // Read what the user may write but `view` cannot read.
        rule(
            READ,
            &[LEGACY],
            &[
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
                "secrets",
                "services/proxy",
            ],
        ),
        rule(&["impersonate"], &[LEGACY], &["serviceaccounts"]),
        rule(WRITE, &[LEGACY], &pods),
        rule(&["create"], &[LEGACY], &["pods/eviction"]),
        rule(
            WRITE,
            &[LEGACY],
            &[
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/proxy",
                "persistentvolumeclaims",
                "configmaps",
                "secrets",
                "events",
            ],
        ),
        rule(&["create"], &[LEGACY], &["serviceaccounts/token"]),
        rule(
            WRITE,
            &[APPS],
            &[
                "statefulsets",
                "statefulsets/scale",
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "replicasets",
                "replicasets/scale",
            ],
        ),
        rule(WRITE, &[AUTOSCALING], &["horizontalpodautoscalers"]),
        rule(WRITE, &[BATCH], &["jobs", "cronjobs"]),
        rule(
            WRITE,
            &[EXTENSIONS],
            &[
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "ingresses",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
                "networkpolicies",
            ],
        ),
        rule(WRITE, &[POLICY], &["poddisruptionbudgets"]),
        rule(WRITE, &[NETWORKING], &["ingresses", "networkpolicies"]),
        rule(READ_WRITE, &[COORDINATION], &["leases"]),
    ]
}

fn aggregate_to_view() -> Vec<PolicyRule> {
    vec![
        rule(
            READ,
            &[LEGACY],
            &[
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps",
            ],
        ),
        rule(
            READ,
            &[LEGACY],
            &[
                "limitranges",
                "resourcequotas",
                "bindings",
                "events",
                "pods/status",
                "resourcequotas/status",
                "namespaces/status",
                "replicationcontrollers/status",
                "pods/log",
            ],
        ),
        // Reading namespaces at the namespace scope reads *this* namespace: a sign of which
        // namespaces the user may use.
        rule(READ, &[LEGACY], &["namespaces"]),
        rule(READ, &[DISCOVERY], &["endpointslices"]),
        rule(
            READ,
            &[APPS],
            &[
                "controllerrevisions",
                "statefulsets",
                "statefulsets/status",
                "statefulsets/scale",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/status",
                "deployments/scale",
                "replicasets",
                "replicasets/status",
                "replicasets/scale",
            ],
        ),
        rule(
            READ,
            &[AUTOSCALING],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        rule(
            READ,
            &[BATCH],
            &["jobs", "cronjobs", "cronjobs/status", "jobs/status"],
        ),
        rule(
            READ,
            &[EXTENSIONS],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
                "networkpolicies",
            ],
        ),
        rule(
            READ,
            &[POLICY],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        rule(
            READ,
            &[NETWORKING],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ]
}

fn heapster() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[LEGACY], &["events", "pods", "nodes", "namespaces"]),
        rule(READ, &[EXTENSIONS], &["deployments"]),
    ]
}

/// What kubelets need to run pods; the Node authorizer narrows it to each node's own objects.
fn node() -> Vec<PolicyRule> {
    vec![
        // Checking API access; these creates change nothing.
        rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
        rule(
            &["create"],
            &[AUTHORIZATION],
            &["subjectaccessreviews", "localsubjectaccessreviews"],
        ),
        // The service lister, for services' environment variables.
        rule(READ, &[LEGACY], &["services"]),
        // Nodes register themselves.
        rule(&["create", "get", "list", "watch"], &[LEGACY], &["nodes"]),
        rule(&["update", "patch"], &[LEGACY], &["nodes/status"]),
        rule(&["update", "patch"], &[LEGACY], &["nodes"]),
        rule(&["create", "update", "patch"], &[LEGACY], &["events"]),
        rule(READ, &[LEGACY], &["pods"]),
        // Mirror pods.
        rule(&["create", "delete"], &[LEGACY], &["pods"]),
        rule(&["update", "patch"], &[LEGACY], &["pods/status"]),
        rule(&["create"], &[LEGACY], &["pods/eviction"]),
        // Image pull secrets, secret and config map volumes and environment variables.
        rule(READ, &[LEGACY], &["secrets", "configmaps"]),
        // Persistent volumes.
        rule(
            &["get"],
            &[LEGACY],
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        rule(&["get"], &[LEGACY], &["endpoints"]),
        // Client certificate rotation.
        rule(
            &["create", "get", "list", "watch"],
            &[CERTIFICATES],
            &["certificatesigningrequests"],
        ),
        // The node's lease.
        rule(
            &["get", "create", "update", "patch", "delete"],
            &[COORDINATION],
            &["leases"],
        ),
        rule(&["get"], &[STORAGE], &["volumeattachments"]),
        // Projected service account tokens.
        rule(&["create"], &[LEGACY], &["serviceaccounts/token"]),
        // Volume expansion.
        rule(
            &["get", "update", "patch"],
            &[LEGACY],
            &["persistentvolumeclaims/status"],
        ),
        rule(READ, &[STORAGE], &["csidrivers"]),
        rule(
            &["create", "delete", "get", "patch", "update"],
            &[STORAGE],
            &["csinodes"],
        ),
        rule(READ, &[NODE], &["runtimeclasses"]),
    ]
}

fn node_problem_detector() -> Vec<PolicyRule> {
    vec![
        rule(&["get"], &[LEGACY], &["nodes"]),
        rule(&["patch"], &[LEGACY], &["nodes/status"]),
        events_rule(),
    ]
}

/// Full access to the kubelet API.
fn kubelet_api_admin() -> Vec<PolicyRule> {
    vec![
        // The API server's node proxy, and kubectl's.
        rule(READ, &[LEGACY], &["nodes"]),
        rule(&["proxy"], &[LEGACY], &["nodes"]),
        rule(
            &["*"],
            &[LEGACY],
            &["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"],
        ),
    ]
}

/// Enough for the controller-manager to start: its shared informers, and the service accounts
/// and tokens that give each controller its own identity.
fn kube_controller_manager() -> Vec<PolicyRule> {
    vec![
        events_rule(),
        // Leader election.
        rule(&["create"], &[COORDINATION], &["leases"]),
        named(
            rule(&["get", "update"], &[COORDINATION], &["leases"]),
            &["kube-controller-manager"],
        ),
        // Service accounts and their tokens for each controller.
        rule(&["create"], &[LEGACY], &["secrets", "serviceaccounts"]),
        rule(&["delete"], &[LEGACY], &["secrets"]),
        rule(
            &["get"],
            &[LEGACY],
            &["namespaces", "secrets", "serviceaccounts", "configmaps"],
        ),
        rule(&["update"], &[LEGACY], &["secrets", "serviceaccounts"]),
        // Checking API access; these creates change nothing.
        rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
        rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
        // Shared informers.
        rule(&["list", "watch"], &["*"], &["*"]),
        rule(&["create"], &[LEGACY], &["serviceaccounts/token"]),
    ]
}

fn persistent_volume_provisioner() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "create", "delete"],
            &[LEGACY],
            &["persistentvolumes"],
        ),
        // Update is needed to set the claim's status.
        rule(
            &["get", "list", "watch", "update"],
            &[LEGACY],
            &["persistentvolumeclaims"],
        ),
        rule(READ, &[STORAGE], &["storageclasses"]),
        // Watching the provisioning pod's events.
        rule(&["watch"], &[LEGACY], &["events"]),
        events_rule(),
    ]
}

fn kube_scheduler() -> Vec<PolicyRule> {
    vec![
        events_rule(),
        // Leader election.
        rule(&["create"], &[COORDINATION], &["leases"]),
        named(
            rule(&["get", "update"], &[COORDINATION], &["leases"]),
            &["kube-scheduler"],
        ),
        rule(READ, &[LEGACY], &["nodes"]),
        rule(&["get", "list", "watch", "delete"], &[LEGACY], &["pods"]),
        rule(&["create"], &[LEGACY], &["pods/binding", "bindings"]),
        rule(&["patch", "update"], &[LEGACY], &["pods/status"]),
        // Spreading by controller.
        rule(READ, &[LEGACY], &["replicationcontrollers", "services"]),
        rule(READ, &[APPS, EXTENSIONS], &["replicasets"]),
        rule(READ, &[APPS], &["statefulsets"]),
        // Preemption.
        rule(READ, &[POLICY], &["poddisruptionbudgets"]),
        // Volume predicates.
        rule(
            READ,
            &[LEGACY],
            &["persistentvolumeclaims", "persistentvolumes"],
        ),
        // Authentication and authorization delegation.
        rule(&["create"], &[AUTHENTICATION], &["tokenreviews"]),
        rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
        rule(READ, &[STORAGE], &["csinodes"]),
        rule(READ, &[LEGACY], &["namespaces"]),
        rule(READ, &[STORAGE], &["csidrivers"]),
        rule(READ, &[STORAGE], &["csistoragecapacities"]),
    ]
}

fn volume_scheduler() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "update", "patch"],
            &[LEGACY],
            &["persistentvolumes"],
        ),
        rule(READ, &[STORAGE], &["storageclasses"]),
        rule(
            &["get", "list", "watch", "update", "patch"],
            &[LEGACY],
            &["persistentvolumeclaims"],
        ),
    ]
}

fn node_proxier() -> Vec<PolicyRule> {
    vec![
        rule(&["list", "watch"], &[LEGACY], &["services", "endpoints"]),
        rule(READ, &[LEGACY], &["nodes"]),
        events_rule(),
        rule(&["list", "watch"], &[DISCOVERY], &["endpointslices"]),
    ]
}

/// Who may ask for node client certificates, and who may approve requests to each signer.
fn certificate_roles() -> Vec<ClusterRole> {
    let csr_create = |sub: &str| {
        cluster_role(
            &format!("system:certificates.k8s.io:certificatesigningrequests:{sub}"),
            vec![rule(
                &["create"],
                &[CERTIFICATES],
                &[&format!("certificatesigningrequests/{sub}")],
            )],
        )
    };
    let approver = |role: &str, signer: &str| {
        cluster_role(
            &format!("system:certificates.k8s.io:{role}"),
            vec![named(
                rule(&["approve"], &[CERTIFICATES], &["signers"]),
                &[signer],
            )],
        )
    };
    vec![
        csr_create("nodeclient"),
        csr_create("selfnodeclient"),
        approver("legacy-unknown-approver", "kubernetes.io/legacy-unknown"),
        approver("kubelet-serving-approver", "kubernetes.io/kubelet-serving"),
        approver(
            "kube-apiserver-client-approver",
            "kubernetes.io/kube-apiserver-client",
        ),
        approver(
            "kube-apiserver-client-kubelet-approver",
            "kubernetes.io/kube-apiserver-client-kubelet",
        ),
    ]
}
