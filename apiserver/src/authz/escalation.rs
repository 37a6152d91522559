//! RBAC's escalation prevention, as upstream's rbac registries: a user may write a role only
//! with rules they hold themselves (or with the `escalate` verb on it), and bind a role only
//! when they hold its rules (or have the `bind` verb on it); an aggregationRule, which can
//! gather anything, needs every permission. Without it, anyone who may edit roles would be
//! cluster-admin.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef,
};
use minik8s_api::rbac::{self, ALL, Attributes};
use minik8s_api::{ApiError, Target};

use super::Authorizer;
use crate::admission::webhook;
use crate::auth::UserInfo;
use crate::registry::generic::{CreateAdmission, Phase, UpdateAdmission};

const GROUP: &str = "rbac.authorization.k8s.io";

/// One rule broken down to one verb on one group/resource/name (or one path).
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |v: &str| vec![v.to_string()];
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                let names = rule.resource_names.clone().unwrap_or_default();
                if names.is_empty() {
                    out.push(PolicyRule {
                        verbs: one(verb),
                        api_groups: Some(one(group)),
                        resources: Some(one(resource)),
                        ..Default::default()
                    });
                }
                for name in names {
                    out.push(PolicyRule {
                        verbs: one(verb),
                        api_groups: Some(one(group)),
                        resources: Some(one(resource)),
                        resource_names: Some(vec![name]),
                        ..Default::default()
                    });
                }
            }
        }
        for url in rule.non_resource_urls.iter().flatten() {
            out.push(PolicyRule {
                verbs: one(verb),
                non_resource_urls: Some(one(url)),
                ..Default::default()
            });
        }
    }
    out
}

fn has(set: &[String], v: &str) -> bool {
    set.iter().any(|s| s == v)
}

fn resource_covered(owner: &[String], resource: &str) -> bool {
    if has(owner, ALL) || has(owner, resource) {
        return true;
    }
    match resource.split_once('/') {
        Some((_, sub)) => has(owner, &format!("*/{sub}")),
        None => false,
    }
}

fn url_covered(owner: &[String], url: &str) -> bool {
    owner
        .iter()
        .any(|o| o == ALL || o == url || o.strip_suffix('*').is_some_and(|p| url.starts_with(p)))
}

/// Whether `owner` covers the atomic rule `sub`, as upstream's `ruleCovers`.
fn covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let list = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    let verbs_ok = sub
        .verbs
        .iter()
        .all(|v| has(&owner.verbs, ALL) || has(&owner.verbs, v));
    let groups = list(&owner.api_groups);
    let groups_ok = list(&sub.api_groups)
        .iter()
        .all(|g| has(&groups, ALL) || has(&groups, g));
    let resources = list(&owner.resources);
    let resources_ok = list(&sub.resources)
        .iter()
        .all(|r| resource_covered(&resources, r));
    let urls = list(&owner.non_resource_urls);
    let urls_ok = list(&sub.non_resource_urls)
        .iter()
        .all(|u| url_covered(&urls, u));
    let owner_names = list(&owner.resource_names);
    let names_ok = owner_names.is_empty()
        || (!list(&sub.resource_names).is_empty()
            && list(&sub.resource_names)
                .iter()
                .all(|n| has(&owner_names, n)));
    verbs_ok && groups_ok && resources_ok && urls_ok && names_ok
}

/// The rules of `wanted` that `held` does not cover, broken down.
pub fn not_covered(held: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(breakdown)
        .filter(|atomic| !held.iter().any(|h| covers(h, atomic)))
        .collect()
}

/// Upstream's `CompactString` of a rule: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`.
pub fn compact(rule: &PolicyRule) -> String {
    let quoted = |v: &[String]| {
        let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
        format!("[{}]", items.join(" "))
    };
    let mut parts = Vec::new();
    let mut field = |name: &str, v: &Option<Vec<String>>| {
        if let Some(v) = v.as_ref().filter(|v| !v.is_empty()) {
            parts.push(format!("{name}:{}", quoted(v)));
        }
    };
    field("APIGroups", &rule.api_groups);
    field("Resources", &rule.resources);
    field("NonResourceURLs", &rule.non_resource_urls);
    field("ResourceNames", &rule.resource_names);
    field("Verbs", &Some(rule.verbs.clone()));
    format!("{{{}}}", parts.join(", "))
}

/// What the writer of a role or binding is checked as.
struct Writer {
    user: UserInfo,
}

impl Writer {
    /// The user of the request being served; none for the server's own writes, which may
    /// do anything (upstream's `EscalationAllowed` without a user).
    fn current() -> Option<Writer> {
        let caller = webhook::current_caller()?;
        if caller.user.groups.iter().any(|g| g == super::MASTERS) {
            return None;
        }
        Some(Writer { user: caller.user })
    }

    fn attributes(&self, verb: &str, resource: &str, namespace: &str, name: &str) -> Attributes {
        Attributes {
            user: self.user.name.clone(),
            groups: self.user.groups.clone(),
            verb: verb.into(),
            namespace: namespace.into(),
            api_group: GROUP.into(),
            resource: resource.into(),
            name: name.into(),
            resource_request: true,
            ..Default::default()
        }
    }

    /// Upstream's `ConfirmNoEscalation`: the user holds every rule of `rules` in `namespace`.
    fn confirm(
        &self,
        authorizer: &Authorizer,
        namespace: &str,
        rules: &[PolicyRule],
    ) -> Result<(), String> {
        let (held, _) = authorizer.rules_for(&self.user.name, &self.user.groups, namespace);
        let missing = not_covered(&held, rules);
        if missing.is_empty() {
            return Ok(());
        }
        let mut lines: Vec<String> = missing.iter().map(compact).collect();
        lines.sort();
        lines.dedup();
        let groups: Vec<String> = self.user.groups.iter().map(|g| format!("{g:?}")).collect();
        Err(format!(
            "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            self.user.name,
            groups.join(" "),
            lines.join("\n")
        ))
    }
}

fn forbidden(resource: &str, name: &str, why: &str) -> ApiError {
    ApiError::forbidden(
        Target {
            group: GROUP,
            resource,
            name,
        },
        why,
    )
}

/// The escalation check of one of the four RBAC kinds.
pub struct Escalation {
    authorizer: Arc<Authorizer>,
}

impl Escalation {
    pub fn new(authorizer: Arc<Authorizer>) -> Arc<Escalation> {
        Arc::new(Escalation { authorizer })
    }

    fn check_role(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        rules: &[PolicyRule],
        aggregates: bool,
    ) -> Result<(), ApiError> {
        let Some(writer) = Writer::current() else {
            return Ok(());
        };
        if !self.authorizer.rbac_enabled()
            || self
                .authorizer
                .allows(&writer.attributes("escalate", resource, namespace, name))
        {
            return Ok(());
        }
        if aggregates {
            let everything = [
                rbac::rule(&["*"], &["*"], &["*"]),
                rbac::non_resource_rule(&["*"], &["*"]),
            ];
            if writer.confirm(&self.authorizer, "", &everything).is_err() {
                return Err(forbidden(
                    resource,
                    name,
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
        }
        writer
            .confirm(&self.authorizer, namespace, rules)
            .map_err(|why| forbidden(resource, name, &why))
    }

    fn check_binding(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        role: &RoleRef,
    ) -> Result<(), ApiError> {
        let Some(writer) = Writer::current() else {
            return Ok(());
        };
        if !self.authorizer.rbac_enabled() {
            return Ok(());
        }
        let role_resource = if role.kind == "ClusterRole" {
            "clusterroles"
        } else {
            "roles"
        };
        let bind = writer.attributes("bind", role_resource, namespace, &role.name);
        if self.authorizer.allows(&bind) {
            return Ok(());
        }
        let Some(rules) = self.authorizer.role_ref_rules(role, namespace) else {
            let plural = if role.kind == "ClusterRole" {
                "clusterroles"
            } else {
                "roles"
            };
            let why = format!("{plural}.{GROUP} {:?} not found", role.name);
            return Err(forbidden(resource, name, &why));
        };
        writer
            .confirm(&self.authorizer, namespace, &rules)
            .map_err(|why| forbidden(resource, name, &why))
    }
}

fn ns_name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

#[async_trait]
impl CreateAdmission<Role> for Escalation {
    fn phase(&self) -> Phase {
        Phase::Final
    }
    async fn admit(&self, r: &mut Role, _: bool) -> Result<(), ApiError> {
        let (ns, name) = ns_name(&r.metadata);
        self.check_role(
            "roles",
            &ns,
            &name,
            r.rules.as_deref().unwrap_or_default(),
            false,
        )
    }
}

#[async_trait]
impl UpdateAdmission<Role> for Escalation {
    async fn admit_update(&self, r: &mut Role, old: &Role, _: bool) -> Result<(), ApiError> {
        if r.rules == old.rules {
            return Ok(());
        }
        let (ns, name) = ns_name(&r.metadata);
        self.check_role(
            "roles",
            &ns,
            &name,
            r.rules.as_deref().unwrap_or_default(),
            false,
        )
    }
}

#[async_trait]
impl CreateAdmission<ClusterRole> for Escalation {
    fn phase(&self) -> Phase {
        Phase::Final
    }
    async fn admit(&self, r: &mut ClusterRole, _: bool) -> Result<(), ApiError> {
        let (_, name) = ns_name(&r.metadata);
        let rules = r.rules.clone().unwrap_or_default();
        self.check_role(
            "clusterroles",
            "",
            &name,
            &rules,
            r.aggregation_rule.is_some(),
        )
    }
}

#[async_trait]
impl UpdateAdmission<ClusterRole> for Escalation {
    async fn admit_update(
        &self,
        r: &mut ClusterRole,
        old: &ClusterRole,
        _: bool,
    ) -> Result<(), ApiError> {
        if r.rules == old.rules && r.aggregation_rule == old.aggregation_rule {
            return Ok(());
        }
        let (_, name) = ns_name(&r.metadata);
        let rules = r.rules.clone().unwrap_or_default();
        // An aggregated role's rules are the aggregation controller's to write.
        let rules = if r.aggregation_rule.is_some() && r.aggregation_rule == old.aggregation_rule {
            Vec::new()
        } else {
            rules
        };
        let aggregates = r.aggregation_rule.is_some() && r.aggregation_rule != old.aggregation_rule;
        self.check_role("clusterroles", "", &name, &rules, aggregates)
    }
}

#[async_trait]
impl CreateAdmission<RoleBinding> for Escalation {
    fn phase(&self) -> Phase {
        Phase::Final
    }
    async fn admit(&self, b: &mut RoleBinding, _: bool) -> Result<(), ApiError> {
        let (ns, name) = ns_name(&b.metadata);
        self.check_binding("rolebindings", &ns, &name, &b.role_ref)
    }
}

#[async_trait]
impl UpdateAdmission<RoleBinding> for Escalation {
    async fn admit_update(
        &self,
        b: &mut RoleBinding,
        old: &RoleBinding,
        _: bool,
    ) -> Result<(), ApiError> {
        if b.subjects == old.subjects && b.role_ref == old.role_ref {
            return Ok(());
        }
        let (ns, name) = ns_name(&b.metadata);
        self.check_binding("rolebindings", &ns, &name, &b.role_ref)
    }
}

#[async_trait]
impl CreateAdmission<ClusterRoleBinding> for Escalation {
    fn phase(&self) -> Phase {
        Phase::Final
    }
    async fn admit(&self, b: &mut ClusterRoleBinding, _: bool) -> Result<(), ApiError> {
        let (_, name) = ns_name(&b.metadata);
        self.check_binding("clusterrolebindings", "", &name, &b.role_ref)
    }
}

#[async_trait]
impl UpdateAdmission<ClusterRoleBinding> for Escalation {
    async fn admit_update(
        &self,
        b: &mut ClusterRoleBinding,
        old: &ClusterRoleBinding,
        _: bool,
    ) -> Result<(), ApiError> {
        if b.subjects == old.subjects && b.role_ref == old.role_ref {
            return Ok(());
        }
        let (_, name) = ns_name(&b.metadata);
        self.check_binding("clusterrolebindings", "", &name, &b.role_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_rules_cover_what_they_grant() {
        let held = vec![
            rbac::rule(&["get", "list"], &[""], &["pods", "*/log"]),
            rbac::non_resource_rule(&["get"], &["/api/*"]),
        ];
        assert!(not_covered(&held, &[rbac::rule(&["get"], &[""], &["pods"])]).is_empty());
        assert!(not_covered(&held, &[rbac::rule(&["get"], &[""], &["pods/log"])]).is_empty());
        assert!(not_covered(&held, &[rbac::non_resource_rule(&["get"], &["/api/v1"])]).is_empty());
        let missing = not_covered(
            &held,
            &[rbac::rule(&["get", "delete"], &["", "apps"], &["pods"])],
        );
        let mut lines: Vec<String> = missing.iter().map(compact).collect();
        lines.sort();
        assert_eq!(
            lines,
            [
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}",
                "{APIGroups:[\"apps\"], Resources:[\"pods\"], Verbs:[\"delete\"]}",
                "{APIGroups:[\"apps\"], Resources:[\"pods\"], Verbs:[\"get\"]}",
            ]
        );
        let mut named = rbac::rule(&["get"], &[""], &["secrets"]);
        named.resource_names = Some(vec!["a".into()]);
        assert!(
            !not_covered(
                &[named.clone()],
                &[rbac::rule(&["get"], &[""], &["secrets"])]
            )
            .is_empty()
        );
        assert!(not_covered(&[rbac::rule(&["get"], &[""], &["secrets"])], &[named]).is_empty());
    }
}
