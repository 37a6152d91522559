//! The RBAC authorizer, as upstream's: a request is allowed when a rule of a role bound to
//! its user allows it — a ClusterRole through a ClusterRoleBinding anywhere, a Role or
//! ClusterRole through a RoleBinding in the request's namespace. RBAC never denies: what no
//! rule allows is left to the next authorizer.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
};
use minik8s_api::rbac::{self, Attributes};

use super::cache::ObjectCache;
use crate::storage::DynStore;

/// The roles and bindings, from the store.
#[derive(Debug)]
pub struct Rbac {
    cluster_roles: Arc<ObjectCache<ClusterRole>>,
    cluster_role_bindings: Arc<ObjectCache<ClusterRoleBinding>>,
    roles: Arc<ObjectCache<Role>>,
    role_bindings: Arc<ObjectCache<RoleBinding>>,
}

impl Rbac {
    pub fn start(store: &DynStore) -> Rbac {
        let cache = |dir: &str| format!("/registry/{dir}/");
        Rbac {
            cluster_roles: ObjectCache::start(store.clone(), cache("clusterroles")),
            cluster_role_bindings: ObjectCache::start(store.clone(), cache("clusterrolebindings")),
            roles: ObjectCache::start(store.clone(), cache("roles")),
            role_bindings: ObjectCache::start(store.clone(), cache("rolebindings")),
        }
    }

    pub fn synced(&self) -> bool {
        self.cluster_roles.synced()
            && self.cluster_role_bindings.synced()
            && self.roles.synced()
            && self.role_bindings.synced()
    }

    /// A ClusterRole's rules (none when it does not exist).
    pub fn cluster_role_rules(&self, name: &str) -> Rules {
        Rules(self.cluster_roles.named(name).map(Of::Cluster))
    }

    /// The rules a role reference of a binding in `namespace` (`""`: cluster) grants.
    pub fn role_rules(&self, role: &RoleRef, namespace: &str) -> Rules {
        Rules(self.find_role(role, namespace))
    }

    /// [`Rbac::role_rules`], or `None` when the role does not exist.
    pub fn find_role_rules(&self, role: &RoleRef, namespace: &str) -> Option<Rules> {
        self.find_role(role, namespace).map(|r| Rules(Some(r)))
    }

    fn find_role(&self, role: &RoleRef, namespace: &str) -> Option<Of> {
        match role.kind.as_str() {
            "ClusterRole" => self.cluster_roles.named(&role.name).map(Of::Cluster),
            "Role" if !namespace.is_empty() => self
                .roles
                .named(&format!("{namespace}/{}", role.name))
                .map(Of::Namespaced),
            _ => None,
        }
    }

    /// Calls `visit` with the rules of every role bound to the user, cluster-wide first and
    /// then in `namespace`, until it returns true; whether it did.
    fn visit_rules(
        &self,
        user: &str,
        groups: &[String],
        namespace: &str,
        visit: &mut dyn FnMut(&[PolicyRule]) -> bool,
    ) -> bool {
        for binding in self.cluster_role_bindings.under("") {
            let applies = binding
                .subjects
                .iter()
                .flatten()
                .any(|s| rbac::subject_matches(s, user, groups, ""));
            if applies && visit(&self.role_rules(&binding.role_ref, "")) {
                return true;
            }
        }
        if namespace.is_empty() {
            return false;
        }
        for binding in self.role_bindings.under(&format!("{namespace}/")) {
            let applies = binding
                .subjects
                .iter()
                .flatten()
                .any(|s| rbac::subject_matches(s, user, groups, namespace));
            if applies && visit(&self.role_rules(&binding.role_ref, namespace)) {
                return true;
            }
        }
        false
    }

    /// Whether a role bound to the request's user allows it.
    pub fn allows(&self, a: &Attributes) -> bool {
        self.visit_rules(&a.user, &a.groups, &a.namespace, &mut |rules| {
            rbac::rules_allow(rules, a)
        })
    }

    /// Every rule that applies to the user in `namespace` (`""`: cluster-wide only), as a
    /// SelfSubjectRulesReview lists them and escalation checks cover them.
    pub fn rules_for(&self, user: &str, groups: &[String], namespace: &str) -> Vec<PolicyRule> {
        let mut out = Vec::new();
        self.visit_rules(user, groups, namespace, &mut |rules| {
            out.extend_from_slice(rules);
            false
        });
        out
    }
}

enum Of {
    Cluster(Arc<ClusterRole>),
    Namespaced(Arc<Role>),
}

/// A role's rules, borrowed from the cache's copy of the role: authorizing a request clones
/// no rules.
pub struct Rules(Option<Of>);

impl std::ops::Deref for Rules {
    type Target = [PolicyRule];

    fn deref(&self) -> &[PolicyRule] {
        let rules = match &self.0 {
            Some(Of::Cluster(r)) => r.rules.as_deref(),
            Some(Of::Namespaced(r)) => r.rules.as_deref(),
            None => None,
        };
        rules.unwrap_or_default()
    }
}
