//! The Roles and RoleBindings of upstream's `namespace_policy.go`, in `kube-system` and
//! `kube-public`: leader election of the scheduler and the controller-manager, reading the
//! client CA for extension API servers, and the bootstrap token controllers.

use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use super::*;

const KUBE_SYSTEM: &str = "kube-system";
const KUBE_PUBLIC: &str = "kube-public";

pub(super) fn roles() -> Vec<Role> {
    let leader_locking = |name: &str| {
        role(
            KUBE_SYSTEM,
            name,
            vec![
                rule(
                    &["watch", "get", "list", "create", "update"],
                    &[COORDINATION],
                    &["leases"],
                ),
                rule(
                    &["watch", "get", "list", "create", "update"],
                    &[COORDINATION],
                    &["leasecandidates"],
                ),
            ],
        )
    };
    vec![
        // Extension API servers read the client CA that authenticates requests proxied to
        // them.
        role(
            KUBE_SYSTEM,
            "extension-apiserver-authentication-reader",
            vec![named(
                rule(READ, &[LEGACY], &["configmaps"]),
                &["extension-apiserver-authentication"],
            )],
        ),
        leader_locking("system::leader-locking-kube-controller-manager"),
        leader_locking("system::leader-locking-kube-scheduler"),
        // The bootstrap signer reads the bootstrap tokens...
        role(
            KUBE_SYSTEM,
            "system:controller:bootstrap-signer",
            vec![rule(READ, &[LEGACY], &["secrets"])],
        ),
        role(
            KUBE_SYSTEM,
            "system:controller:cloud-provider",
            vec![rule(
                &["create", "get", "list", "watch"],
                &[LEGACY],
                &["configmaps"],
            )],
        ),
        role(
            KUBE_SYSTEM,
            "system:controller:token-cleaner",
            vec![
                rule(&["delete", "get", "list", "watch"], &[LEGACY], &["secrets"]),
                events_rule(),
            ],
        ),
        // ...and signs the `cluster-info` ConfigMap with them.
        role(
            KUBE_PUBLIC,
            "system:controller:bootstrap-signer",
            vec![
                rule(READ, &[LEGACY], &["configmaps"]),
                named(
                    rule(&["update"], &[LEGACY], &["configmaps"]),
                    &["cluster-info"],
                ),
                events_rule(),
            ],
        ),
    ]
}

pub(super) fn role_bindings() -> Vec<RoleBinding> {
    let controller = |namespace: &str, name: &str| {
        let role = format!("system:controller:{name}");
        role_binding(
            namespace,
            &role,
            &role,
            vec![service_account(KUBE_SYSTEM, name)],
        )
    };
    vec![
        role_binding(
            KUBE_SYSTEM,
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            vec![
                user("system:kube-controller-manager"),
                user("system:kube-scheduler"),
            ],
        ),
        role_binding(
            KUBE_SYSTEM,
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            vec![
                user("system:kube-controller-manager"),
                service_account(KUBE_SYSTEM, "kube-controller-manager"),
                service_account(KUBE_SYSTEM, "leader-election-controller"),
            ],
        ),
        role_binding(
            KUBE_SYSTEM,
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            vec![
                user("system:kube-scheduler"),
                service_account(KUBE_SYSTEM, "kube-scheduler"),
            ],
        ),
        controller(KUBE_SYSTEM, "bootstrap-signer"),
        controller(KUBE_SYSTEM, "cloud-provider"),
        controller(KUBE_SYSTEM, "token-cleaner"),
        controller(KUBE_PUBLIC, "bootstrap-signer"),
    ]
}
