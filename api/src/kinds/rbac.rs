//! RBAC: Roles, ClusterRoles and their bindings; the rules and subjects they share.

use jiff::Timestamp;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, or_empty, string, text};
use crate::validation::{Errors, FieldError, Path, path_segment_name};

fn validate_rules(rules: &[PolicyRule], namespaced: bool, errs: &mut Errors) {
    for (i, r) in rules.iter().enumerate() {
        let p = Path::new("rules").index(i);
        if r.verbs.is_empty() {
            errs.push(FieldError::required(
                &p.child("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let has_urls = r.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty());
        let has_resources = r.resources.as_ref().is_some_and(|u| !u.is_empty());
        if has_urls {
            if namespaced {
                errs.push(FieldError::invalid(
                    &p.child("nonResourceURLs"),
                    "",
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if has_resources || r.api_groups.as_ref().is_some_and(|g| !g.is_empty()) {
                errs.push(FieldError::invalid(
                    &p.child("nonResourceURLs"),
                    "",
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if r.api_groups.as_ref().is_none_or(|g| g.is_empty()) {
            errs.push(FieldError::required(
                &p.child("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if !has_resources {
            errs.push(FieldError::required(
                &p.child("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

impl Kind for Role {
    const CREATE_ON_UPDATE: bool = true;

    fn validate(&self, errs: &mut Errors) {
        validate_rules(self.rules.as_deref().unwrap_or_default(), true, errs);
    }
}

impl Kind for ClusterRole {
    const CREATE_ON_UPDATE: bool = true;

    fn validate(&self, errs: &mut Errors) {
        validate_rules(self.rules.as_deref().unwrap_or_default(), false, errs);
    }
}

fn default_role_ref(r: &mut RoleRef) {
    if r.api_group.is_empty() {
        r.api_group = "rbac.authorization.k8s.io".into();
    }
}

/// Upstream's `SetDefaults_Subject`: users and groups are RBAC's; a ServiceAccount's group is
/// the core one, which (an empty string in Go) is left out of the object.
fn default_subjects(subjects: &mut [Subject]) {
    for s in subjects {
        if s.kind == "ServiceAccount" {
            if s.api_group.as_deref() == Some("") {
                s.api_group = None;
            }
        } else if s.api_group.as_deref().unwrap_or_default().is_empty() {
            s.api_group = Some("rbac.authorization.k8s.io".into());
        }
    }
}

fn validate_binding(role_ref: &RoleRef, subjects: &[Subject], cluster: bool, errs: &mut Errors) {
    let rp = Path::new("roleRef");
    if role_ref.api_group != "rbac.authorization.k8s.io" {
        errs.push(FieldError::not_supported(
            &rp.child("apiGroup"),
            &role_ref.api_group,
            &["rbac.authorization.k8s.io"],
        ));
    }
    let kinds: &[&str] = if cluster {
        &["ClusterRole"]
    } else {
        &["ClusterRole", "Role"]
    };
    if !kinds.contains(&role_ref.kind.as_str()) {
        errs.push(FieldError::not_supported(
            &rp.child("kind"),
            &role_ref.kind,
            kinds,
        ));
    }
    if role_ref.name.is_empty() {
        errs.push(FieldError::required(&rp.child("name"), ""));
    } else {
        for e in path_segment_name(&role_ref.name) {
            errs.push(FieldError::invalid(&rp.child("name"), &role_ref.name, e));
        }
    }
    for (i, s) in subjects.iter().enumerate() {
        let sp = Path::new("subjects").index(i);
        if s.name.is_empty() {
            errs.push(FieldError::required(&sp.child("name"), ""));
        }
        match s.kind.as_str() {
            "ServiceAccount" => {
                if s.api_group.as_deref().is_some_and(|g| !g.is_empty()) {
                    errs.push(FieldError::not_supported(
                        &sp.child("apiGroup"),
                        s.api_group.as_deref().unwrap_or(""),
                        &[""],
                    ));
                }
                if cluster && s.namespace.as_deref().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(&sp.child("namespace"), ""));
                }
            }
            "User" | "Group" => {
                if s.api_group.as_deref() != Some("rbac.authorization.k8s.io") {
                    errs.push(FieldError::not_supported(
                        &sp.child("apiGroup"),
                        s.api_group.as_deref().unwrap_or(""),
                        &["rbac.authorization.k8s.io"],
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &sp.child("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

fn role_ref_unchanged(new: &RoleRef, old: &RoleRef, errs: &mut Errors) {
    if new != old {
        errs.push(FieldError::invalid(
            &Path::new("roleRef"),
            format!("{new:?}"),
            "cannot change roleRef",
        ));
    }
}

/// RoleBinding and ClusterRoleBinding: one shape, apart from their columns and whether the
/// role they bind may be a namespaced Role.
macro_rules! binding_kind {
    ($kind:ty, $columns:expr, $cluster:expr) => {
        impl Kind for $kind {
            const COLUMNS: &'static [Column] = $columns;
            const CREATE_ON_UPDATE: bool = true;

            fn default_fields(&mut self) {
                default_role_ref(&mut self.role_ref);
                default_subjects(self.subjects.as_deref_mut().unwrap_or_default());
            }

            fn validate(&self, errs: &mut Errors) {
                validate_binding(
                    &self.role_ref,
                    self.subjects.as_deref().unwrap_or_default(),
                    $cluster,
                    errs,
                );
            }

            fn validate_update(&self, old: &Self, errs: &mut Errors) {
                self.validate(errs);
                role_ref_unchanged(&self.role_ref, &old.role_ref, errs);
            }

            fn row(&self, now: Timestamp) -> Row {
                Row::new(binding_cells(
                    &self.metadata,
                    &self.role_ref,
                    self.subjects.as_deref(),
                    now,
                ))
            }
        }
    };
}

binding_kind!(RoleBinding, ROLE_BINDING_COLUMNS, false);
binding_kind!(ClusterRoleBinding, CLUSTER_ROLE_BINDING_COLUMNS, true);

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    string("Role", doc::ROLE_BINDING_ROLE_REF),
    AGE,
    string("Users", "Users in the roleBinding").wide(),
    string("Groups", "Groups in the roleBinding").wide(),
    string("ServiceAccounts", "ServiceAccounts in the roleBinding").wide(),
];

const CLUSTER_ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    string("Role", doc::CLUSTER_ROLE_BINDING_ROLE_REF),
    AGE,
    string("Users", "Users in the clusterRoleBinding").wide(),
    string("Groups", "Groups in the clusterRoleBinding").wide(),
    string(
        "ServiceAccounts",
        "ServiceAccounts in the clusterRoleBinding",
    )
    .wide(),
];

fn binding_cells(
    meta: &ObjectMeta,
    role_ref: &RoleRef,
    subjects: Option<&[Subject]>,
    now: Timestamp,
) -> Vec<Value> {
    let mut users = Vec::new();
    let mut groups = Vec::new();
    let mut service_accounts = Vec::new();
    for s in subjects.unwrap_or(&[]) {
        match s.kind.as_str() {
            "ServiceAccount" => {
                service_accounts.push(format!("{}/{}", or_empty(s.namespace.as_ref()), s.name));
            }
            "User" => users.push(s.name.clone()),
            "Group" => groups.push(s.name.clone()),
            _ => {}
        }
    }
    vec![
        name(meta),
        text(format!("{}/{}", role_ref.kind, role_ref.name)),
        age(meta, now),
        text(users.join(", ")),
        text(groups.join(", ")),
        text(service_accounts.join(", ")),
    ]
}

mod doc {
    pub const ROLE_BINDING_ROLE_REF: &str = "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";
    pub const CLUSTER_ROLE_BINDING_ROLE_REF: &str = "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn binding_rows() {
        let rb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "rb"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                         {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}, {"kind": "User", "name": "bob"}]});
        assert_eq!(
            row_of::<RoleBinding>(rb),
            vec![
                json!("rb"),
                json!("ClusterRole/view"),
                json!("<unknown>"),
                json!("alice, bob"),
                json!("devs"),
                json!("ci/bot")
            ]
        );
        let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}});
        assert_eq!(
            row_of::<ClusterRoleBinding>(crb),
            vec![
                json!("admin"),
                json!("ClusterRole/cluster-admin"),
                json!("<unknown>"),
                json!(""),
                json!(""),
                json!("")
            ]
        );
    }
}
