//! Upstream's RBAC bootstrap policy (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`): the
//! roles and bindings every cluster starts with, so that the components, the controllers and
//! `kubectl` users get exactly the permissions upstream grants them, and Helm charts that bind
//! `admin`, `edit` or `view` mean what they say. The API server reconciles them at every start
//! ([`reconcile`]) the way upstream's `rbac/bootstrap-roles` post-start hook does.
//!
//! The set is upstream's for the Kubernetes version this server reports (1.32) with that
//! version's default feature gates: roles of controllers behind gates that were off by default
//! then (resource claims, service CIDRs, volume attributes classes, SELinux warnings, storage
//! version migration, cluster trust bundles) are left out.
//!
//! Every list in a rule is sorted and without duplicates, as upstream's rule builder leaves
//! it, so the stored objects read as upstream's do.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
    Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

mod bindings;
mod cluster_roles;
mod controller_roles;
pub mod minik8s;
mod namespaced;
mod reconcile;
#[cfg(test)]
mod tests;

pub use reconcile::{
    BindingResult, Operation, RoleResult, compute_reconciled_binding, compute_reconciled_role,
    reconcile,
};

/// The label every bootstrap object carries.
pub const BOOTSTRAPPING_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
/// `"false"` on an object keeps reconciliation away from it (upstream's
/// `rbacv1.AutoUpdateAnnotationKey`).
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The labels that add a ClusterRole's rules to `admin`, `edit` and `view`.
pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

// API groups, named as upstream's policy names them.
const LEGACY: &str = "";
const APPS: &str = "apps";
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTOSCALING: &str = "autoscaling";
const BATCH: &str = "batch";
const CERTIFICATES: &str = "certificates.k8s.io";
const COORDINATION: &str = "coordination.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const EVENTS: &str = "events.k8s.io";
const EXTENSIONS: &str = "extensions";
const NETWORKING: &str = "networking.k8s.io";
const NODE: &str = "node.k8s.io";
const POLICY: &str = "policy";
const STORAGE: &str = "storage.k8s.io";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// Upstream's whole bootstrap policy, in the order it reconciles it.
#[derive(Clone, Debug)]
pub struct Policy {
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

/// The bootstrap policy: the cluster roles then the controllers' roles, their bindings, and the
/// roles and bindings in `kube-system` and `kube-public`.
pub fn policy() -> Policy {
    let mut cluster_roles = cluster_roles::cluster_roles();
    let controllers = controller_roles::controller_roles();
    let mut cluster_role_bindings = bindings::cluster_role_bindings();
    cluster_role_bindings.extend(controllers.iter().map(controller_roles::binding));
    cluster_roles.extend(controllers);
    cluster_roles.extend(minik8s::cluster_roles());
    cluster_role_bindings.extend(minik8s::cluster_role_bindings());
    Policy {
        cluster_roles,
        cluster_role_bindings,
        roles: namespaced::roles(),
        role_bindings: namespaced::role_bindings(),
    }
}

fn sorted(items: &[&str]) -> Vec<String> {
    items
        .iter()
        .map(|s| s.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Upstream's `NewRule(verbs...).Groups(groups...).Resources(resources...)`.
fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: sorted(verbs),
        api_groups: Some(sorted(groups)),
        resources: Some(sorted(resources)),
        ..Default::default()
    }
}

/// `rule` limited to the objects named (upstream's `.Names(...)`).
fn named(mut rule: PolicyRule, names: &[&str]) -> PolicyRule {
    rule.resource_names = Some(sorted(names));
    rule
}

/// Upstream's `NewRule(verbs...).URLs(urls...)`.
fn urls(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: sorted(verbs),
        non_resource_urls: Some(sorted(urls)),
        ..Default::default()
    }
}

/// Writing events, in both groups that serve them (upstream's `eventsRule()`).
fn events_rule() -> PolicyRule {
    rule(
        &["create", "update", "patch"],
        &[LEGACY, EVENTS],
        &["events"],
    )
}

/// The bootstrap label and the autoupdate annotation, with `labels` besides.
fn meta(name: &str, namespace: Option<&str>, labels: &[(&str, &str)]) -> ObjectMeta {
    let mut all: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    all.insert(
        BOOTSTRAPPING_LABEL.0.to_string(),
        BOOTSTRAPPING_LABEL.1.to_string(),
    );
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: Some(all),
        annotations: Some(BTreeMap::from([(
            AUTOUPDATE_ANNOTATION.to_string(),
            "true".to_string(),
        )])),
        ..Default::default()
    }
}

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    labelled_cluster_role(name, &[], rules)
}

fn labelled_cluster_role(
    name: &str,
    labels: &[(&str, &str)],
    rules: Vec<PolicyRule>,
) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, None, labels),
        rules: Some(rules),
        aggregation_rule: None,
    }
}

/// A ClusterRole whose rules are those of the ClusterRoles labelled `label: "true"`, kept by
/// the clusterrole-aggregation controller.
fn aggregated_cluster_role(name: &str, label: &str, labels: &[(&str, &str)]) -> ClusterRole {
    ClusterRole {
        metadata: meta(name, None, labels),
        rules: None,
        aggregation_rule: Some(AggregationRule {
            cluster_role_selectors: Some(vec![LabelSelector {
                match_labels: Some(BTreeMap::from([(label.to_string(), "true".to_string())])),
                ..Default::default()
            }]),
        }),
    }
}

fn role(namespace: &str, name: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: meta(name, Some(namespace), &[]),
        rules: Some(rules),
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: RBAC_GROUP.into(),
        kind: kind.into(),
        name: name.into(),
    }
}

/// A ClusterRoleBinding of the ClusterRole of the same name (upstream's `NewClusterBinding`).
fn cluster_binding(name: &str, subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(name, None, &[]),
        role_ref: role_ref("ClusterRole", name),
        subjects: (!subjects.is_empty()).then_some(subjects),
    }
}

/// A RoleBinding in `namespace` of the Role `role` there (upstream's `NewRoleBinding`).
fn role_binding(namespace: &str, name: &str, role: &str, subjects: Vec<Subject>) -> RoleBinding {
    RoleBinding {
        metadata: meta(name, Some(namespace), &[]),
        role_ref: role_ref("Role", role),
        subjects: Some(subjects),
    }
}

fn subject(kind: &str, name: &str) -> Subject {
    Subject {
        api_group: Some(RBAC_GROUP.into()),
        kind: kind.into(),
        name: name.into(),
        namespace: None,
    }
}

fn user(name: &str) -> Subject {
    subject("User", name)
}

fn group(name: &str) -> Subject {
    subject("Group", name)
}

fn service_account(namespace: &str, name: &str) -> Subject {
    Subject {
        // As the API server defaults it: service accounts are in the core group.
        api_group: Some(String::new()),
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
    }
}
