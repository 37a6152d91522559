//! The roles of the controller-manager's controllers (upstream's `controller_policy.go`): one
//! `system:controller:<name>` ClusterRole per controller, bound to the `kube-system`
//! ServiceAccount `<name>` that the controller runs as under
//! `--use-service-account-credentials`.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

use super::*;

/// The prefix of every controller's role.
pub const CONTROLLER_ROLE_PREFIX: &str = "system:controller:";

const ADMISSION_REGISTRATION: &str = "admissionregistration.k8s.io";
const RESOURCE_METRICS: &str = "metrics.k8s.io";
const CUSTOM_METRICS: &str = "custom.metrics.k8s.io";
const EXTERNAL_METRICS: &str = "external.metrics.k8s.io";

/// The ConfigMap in which the API server records the last use of a legacy token.
const LEGACY_TOKEN_TRACKING: &str = "kube-apiserver-legacy-service-account-token-tracking";

fn controller(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    cluster_role(&format!("{CONTROLLER_ROLE_PREFIX}{name}"), rules)
}

/// The binding of a controller's role to the controller's ServiceAccount.
pub(super) fn binding(role: &ClusterRole) -> ClusterRoleBinding {
    let name = role.metadata.name.as_deref().unwrap_or_default();
    let account = name.strip_prefix(CONTROLLER_ROLE_PREFIX).unwrap_or(name);
    cluster_binding(name, vec![service_account("kube-system", account)])
}

pub(super) fn controller_roles() -> Vec<ClusterRole> {
    vec![
        controller("attachdetach-controller", attach_detach()),
        controller(
            "clusterrole-aggregation-controller",
            // Full power over cluster roles, to write whatever the aggregation gathers.
            vec![rule(
                &["escalate", "get", "list", "watch", "update", "patch"],
                &[RBAC_GROUP],
                &["clusterroles"],
            )],
        ),
        controller("cronjob-controller", cronjob()),
        controller("daemon-set-controller", daemonset()),
        controller("deployment-controller", deployment()),
        controller("disruption-controller", disruption()),
        controller("endpoint-controller", endpoint()),
        controller("endpointslice-controller", endpointslice()),
        controller(
            "endpointslicemirroring-controller",
            endpointslice_mirroring(),
        ),
        controller("expand-controller", expand()),
        controller("ephemeral-volume-controller", ephemeral_volume()),
        controller(
            "generic-garbage-collector",
            // List, watch, read, update and delete anything.
            vec![
                rule(
                    &["get", "list", "watch", "patch", "update", "delete"],
                    &["*"],
                    &["*"],
                ),
                events_rule(),
            ],
        ),
        controller("horizontal-pod-autoscaler", horizontal_pod_autoscaler()),
        controller("job-controller", job()),
        controller(
            "namespace-controller",
            vec![
                rule(
                    &["get", "list", "watch", "delete"],
                    &[LEGACY],
                    &["namespaces"],
                ),
                rule(
                    &["update"],
                    &[LEGACY],
                    &["namespaces/finalize", "namespaces/status"],
                ),
                rule(
                    &["get", "list", "watch", "delete", "deletecollection"],
                    &["*"],
                    &["*"],
                ),
            ],
        ),
        controller("node-controller", node_lifecycle()),
        controller("persistent-volume-binder", persistent_volume_binder()),
        controller(
            "pod-garbage-collector",
            vec![
                rule(&["list", "watch", "delete"], &[LEGACY], &["pods"]),
                rule(READ, &[LEGACY], &["nodes"]),
                rule(&["patch"], &[LEGACY], &["pods/status"]),
            ],
        ),
        controller("replicaset-controller", replicaset()),
        controller("replication-controller", replication()),
        controller(
            "resourcequota-controller",
            vec![
                // Quota counts anything, so it reads everything.
                rule(&["list", "watch"], &["*"], &["*"]),
                rule(&["update"], &[LEGACY], &["resourcequotas/status"]),
                events_rule(),
            ],
        ),
        controller(
            "route-controller",
            vec![
                rule(&["list", "watch"], &[LEGACY], &["nodes"]),
                rule(&["patch"], &[LEGACY], &["nodes/status"]),
                events_rule(),
            ],
        ),
        controller(
            "service-account-controller",
            vec![
                rule(&["create"], &[LEGACY], &["serviceaccounts"]),
                events_rule(),
            ],
        ),
        controller(
            "service-controller",
            vec![
                rule(READ, &[LEGACY], &["services"]),
                rule(&["patch", "update"], &[LEGACY], &["services/status"]),
                rule(&["list", "watch"], &[LEGACY], &["nodes"]),
                events_rule(),
            ],
        ),
        controller("statefulset-controller", statefulset()),
        controller(
            "ttl-controller",
            vec![
                rule(&["update", "patch", "list", "watch"], &[LEGACY], &["nodes"]),
                events_rule(),
            ],
        ),
        controller("certificate-controller", certificate()),
        controller(
            "pvc-protection-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update"],
                    &[LEGACY],
                    &["persistentvolumeclaims"],
                ),
                rule(&["list", "watch", "get"], &[LEGACY], &["pods"]),
                events_rule(),
            ],
        ),
        controller(
            "pv-protection-controller",
            vec![
                rule(
                    &["get", "list", "watch", "update"],
                    &[LEGACY],
                    &["persistentvolumes"],
                ),
                events_rule(),
            ],
        ),
        controller(
            "ttl-after-finished-controller",
            vec![
                rule(&["get", "list", "watch", "delete"], &[BATCH], &["jobs"]),
                events_rule(),
            ],
        ),
        controller(
            "root-ca-cert-publisher",
            vec![
                rule(&["create", "update"], &[LEGACY], &["configmaps"]),
                events_rule(),
            ],
        ),
        controller(
            "validatingadmissionpolicy-status-controller",
            vec![
                rule(
                    READ,
                    &[ADMISSION_REGISTRATION],
                    &["validatingadmissionpolicies"],
                ),
                rule(
                    &["get", "patch", "update"],
                    &[ADMISSION_REGISTRATION],
                    &["validatingadmissionpolicies/status"],
                ),
                events_rule(),
            ],
        ),
        controller(
            "legacy-service-account-token-cleaner",
            vec![
                named(
                    rule(&["get"], &[LEGACY], &["configmaps"]),
                    &[LEGACY_TOKEN_TRACKING],
                ),
                rule(&["patch", "delete"], &[LEGACY], &["secrets"]),
            ],
        ),
    ]
}

fn attach_detach() -> Vec<PolicyRule> {
    vec![
        rule(
            &["list", "watch"],
            &[LEGACY],
            &["persistentvolumes", "persistentvolumeclaims"],
        ),
        rule(READ, &[LEGACY], &["nodes"]),
        rule(&["patch", "update"], &[LEGACY], &["nodes/status"]),
        rule(&["list", "watch"], &[LEGACY], &["pods"]),
        events_rule(),
        rule(
            &["get", "create", "delete", "list", "watch"],
            &[STORAGE],
            &["volumeattachments"],
        ),
        rule(READ, &[STORAGE], &["csidrivers"]),
        rule(READ, &[STORAGE], &["csinodes"]),
    ]
}

fn cronjob() -> Vec<PolicyRule> {
    vec![
        rule(&["get", "list", "watch", "update"], &[BATCH], &["cronjobs"]),
        rule(
            &[
                "get", "list", "watch", "create", "update", "delete", "patch",
            ],
            &[BATCH],
            &["jobs"],
        ),
        rule(&["update"], &[BATCH], &["cronjobs/status"]),
        rule(&["update"], &[BATCH], &["cronjobs/finalizers"]),
        rule(&["list", "watch", "delete"], &[LEGACY], &["pods"]),
        events_rule(),
    ]
}

fn daemonset() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[EXTENSIONS, APPS], &["daemonsets"]),
        rule(&["update"], &[EXTENSIONS, APPS], &["daemonsets/status"]),
        rule(&["update"], &[EXTENSIONS, APPS], &["daemonsets/finalizers"]),
        rule(&["list", "watch"], &[LEGACY], &["nodes"]),
        rule(
            &["list", "watch", "create", "delete", "patch"],
            &[LEGACY],
            &["pods"],
        ),
        rule(&["create"], &[LEGACY], &["pods/binding"]),
        rule(
            &[
                "get", "list", "watch", "create", "delete", "update", "patch",
            ],
            &[APPS],
            &["controllerrevisions"],
        ),
        events_rule(),
    ]
}

fn deployment() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "update"],
            &[EXTENSIONS, APPS],
            &["deployments"],
        ),
        rule(&["update"], &[EXTENSIONS, APPS], &["deployments/status"]),
        rule(
            &["update"],
            &[EXTENSIONS, APPS],
            &["deployments/finalizers"],
        ),
        rule(
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
            &[APPS, EXTENSIONS],
            &["replicasets"],
        ),
        rule(&["get", "list", "watch", "update"], &[LEGACY], &["pods"]),
        events_rule(),
    ]
}

fn disruption() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[EXTENSIONS, APPS], &["deployments"]),
        rule(READ, &[APPS, EXTENSIONS], &["replicasets"]),
        rule(READ, &[LEGACY], &["replicationcontrollers"]),
        rule(READ, &[POLICY], &["poddisruptionbudgets"]),
        rule(READ, &[APPS], &["statefulsets"]),
        rule(&["update"], &[POLICY], &["poddisruptionbudgets/status"]),
        rule(&["patch", "update"], &[LEGACY], &["pods/status"]),
        rule(&["get"], &["*"], &["*/scale"]),
        events_rule(),
    ]
}

fn endpoint() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[LEGACY], &["services", "pods"]),
        rule(
            &["get", "list", "watch", "create", "update", "delete"],
            &[LEGACY],
            &["endpoints"],
        ),
        rule(&["create"], &[LEGACY], &["endpoints/restricted"]),
        events_rule(),
    ]
}

fn endpointslice() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[LEGACY], &["services", "pods", "nodes"]),
        // Slices owned by a Service block its deletion, which takes its finalizers.
        rule(&["update"], &[LEGACY], &["services/finalizers"]),
        rule(
            &["get", "list", "watch", "create", "update", "delete"],
            &[DISCOVERY],
            &["endpointslices"],
        ),
        events_rule(),
    ]
}

fn endpointslice_mirroring() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[LEGACY], &["services", "endpoints"]),
        rule(&["update"], &[LEGACY], &["services/finalizers"]),
        rule(&["update"], &[LEGACY], &["endpoints/finalizers"]),
        rule(
            &["get", "list", "watch", "create", "update", "delete"],
            &[DISCOVERY],
            &["endpointslices"],
        ),
        events_rule(),
    ]
}

fn expand() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "update", "patch"],
            &[LEGACY],
            &["persistentvolumes"],
        ),
        rule(
            &["update", "patch"],
            &[LEGACY],
            &["persistentvolumeclaims/status"],
        ),
        rule(READ, &[LEGACY], &["persistentvolumeclaims"]),
        events_rule(),
        // The portworx volume plugin.
        rule(&["get"], &[LEGACY], &["services"]),
    ]
}

fn ephemeral_volume() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[LEGACY], &["pods"]),
        rule(&["update"], &[LEGACY], &["pods/finalizers"]),
        rule(
            &["get", "list", "watch", "create"],
            &[LEGACY],
            &["persistentvolumeclaims"],
        ),
        events_rule(),
    ]
}

fn horizontal_pod_autoscaler() -> Vec<PolicyRule> {
    vec![
        rule(READ, &[AUTOSCALING], &["horizontalpodautoscalers"]),
        rule(
            &["update"],
            &[AUTOSCALING],
            &["horizontalpodautoscalers/status"],
        ),
        rule(&["get", "update"], &["*"], &["*/scale"]),
        rule(&["list", "watch"], &[LEGACY], &["pods"]),
        // Resource, custom and external metrics.
        rule(&["list", "watch"], &[RESOURCE_METRICS], &["pods"]),
        rule(READ, &[CUSTOM_METRICS], &["*"]),
        rule(READ, &[EXTERNAL_METRICS], &["*"]),
        events_rule(),
    ]
}

fn job() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "update", "patch"],
            &[BATCH],
            &["jobs"],
        ),
        rule(&["update"], &[BATCH], &["jobs/status"]),
        rule(&["update"], &[BATCH], &["jobs/finalizers"]),
        rule(
            &["list", "watch", "create", "delete", "patch"],
            &[LEGACY],
            &["pods"],
        ),
        events_rule(),
    ]
}

fn node_lifecycle() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "update", "delete", "patch"],
            &[LEGACY],
            &["nodes"],
        ),
        rule(&["patch", "update"], &[LEGACY], &["nodes/status"]),
        // Deleting pods.
        rule(&["patch", "update"], &[LEGACY], &["pods/status"]),
        rule(&["list", "watch", "get", "delete"], &[LEGACY], &["pods"]),
        events_rule(),
    ]
}

fn persistent_volume_binder() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "update", "create", "delete"],
            &[LEGACY],
            &["persistentvolumes"],
        ),
        rule(&["update"], &[LEGACY], &["persistentvolumes/status"]),
        rule(
            &["get", "list", "watch", "update"],
            &[LEGACY],
            &["persistentvolumeclaims"],
        ),
        rule(&["update"], &[LEGACY], &["persistentvolumeclaims/status"]),
        rule(
            &["list", "watch", "get", "create", "delete"],
            &[LEGACY],
            &["pods"],
        ),
        rule(READ, &[STORAGE], &["storageclasses"]),
        rule(&["list", "watch"], &[LEGACY], &["nodes"]),
        events_rule(),
        // The recycler watches its pod.
        rule(&["watch"], &[LEGACY], &["events"]),
        // The portworx volume plugin.
        rule(&["get"], &[LEGACY], &["services"]),
    ]
}

fn replicaset() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "update"],
            &[APPS, EXTENSIONS],
            &["replicasets"],
        ),
        rule(&["update"], &[APPS, EXTENSIONS], &["replicasets/status"]),
        rule(
            &["update"],
            &[APPS, EXTENSIONS],
            &["replicasets/finalizers"],
        ),
        rule(
            &["list", "watch", "patch", "create", "delete"],
            &[LEGACY],
            &["pods"],
        ),
        events_rule(),
    ]
}

fn replication() -> Vec<PolicyRule> {
    vec![
        // 1.0 controllers needed get and update; old controllers would break without them.
        rule(
            &["get", "list", "watch", "update"],
            &[LEGACY],
            &["replicationcontrollers"],
        ),
        rule(&["update"], &[LEGACY], &["replicationcontrollers/status"]),
        rule(
            &["update"],
            &[LEGACY],
            &["replicationcontrollers/finalizers"],
        ),
        rule(
            &["list", "watch", "patch", "create", "delete"],
            &[LEGACY],
            &["pods"],
        ),
        events_rule(),
    ]
}

fn statefulset() -> Vec<PolicyRule> {
    vec![
        rule(&["list", "watch"], &[LEGACY], &["pods"]),
        rule(READ, &[APPS], &["statefulsets"]),
        rule(&["update"], &[APPS], &["statefulsets/status"]),
        rule(&["update"], &[APPS], &["statefulsets/finalizers"]),
        rule(
            &["get", "create", "delete", "update", "patch"],
            &[LEGACY],
            &["pods"],
        ),
        rule(
            &[
                "get", "create", "delete", "update", "patch", "list", "watch",
            ],
            &[APPS],
            &["controllerrevisions"],
        ),
        rule(
            &["get", "create", "list", "watch"],
            &[LEGACY],
            &["persistentvolumeclaims"],
        ),
        rule(
            &["update", "delete"],
            &[LEGACY],
            &["persistentvolumeclaims"],
        ),
        rule(&["update"], &[LEGACY], &["pods/finalizers"]),
        events_rule(),
    ]
}

fn certificate() -> Vec<PolicyRule> {
    vec![
        rule(
            &["get", "list", "watch", "delete"],
            &[CERTIFICATES],
            &["certificatesigningrequests"],
        ),
        rule(
            &["update"],
            &[CERTIFICATES],
            &[
                "certificatesigningrequests/status",
                "certificatesigningrequests/approval",
            ],
        ),
        named(
            rule(&["approve"], &[CERTIFICATES], &["signers"]),
            &["kubernetes.io/kube-apiserver-client-kubelet"],
        ),
        named(
            rule(&["sign"], &[CERTIFICATES], &["signers"]),
            &[
                "kubernetes.io/legacy-unknown",
                "kubernetes.io/kube-apiserver-client",
                "kubernetes.io/kube-apiserver-client-kubelet",
                "kubernetes.io/kubelet-serving",
            ],
        ),
        rule(&["create"], &[AUTHORIZATION], &["subjectaccessreviews"]),
        events_rule(),
    ]
}
