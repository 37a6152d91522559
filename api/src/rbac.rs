//! Role-based access control's matching, as upstream's `rbac/v1` helpers define it: which
//! request a PolicyRule covers, whom a binding's subject names, and which rules an aggregated
//! ClusterRole gathers. Pure, so the API server's authorizer, the access reviews, escalation
//! checks, the aggregation controller and the bootstrap policy's tests all read rules the same
//! way.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Subject};

use crate::selector::{Selector, SelectorError};

/// The verb, resource and path of one request, as an authorizer sees them (upstream's
/// `authorizer.Attributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    /// `""` at the cluster scope.
    pub namespace: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// A request for a path that is no resource (`/healthz`, `/api`): its path.
    pub path: String,
    pub resource_request: bool,
}

impl Attributes {
    /// A resource request.
    pub fn resource(user: &str, groups: &[&str], verb: &str, group: &str, resource: &str) -> Self {
        Attributes {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            resource_request: true,
            ..Default::default()
        }
    }

    /// A request for a path that is no resource.
    pub fn non_resource(user: &str, groups: &[&str], verb: &str, path: &str) -> Self {
        Attributes {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = namespace.into();
        self
    }

    pub fn named(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = subresource.into();
        self
    }

    /// `resource/subresource`, or the resource alone.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

pub const ALL: &str = "*";

fn has(list: &Option<Vec<String>>, item: &str) -> bool {
    list.iter().flatten().any(|v| v == ALL || v == item)
}

/// Whether `rule` allows the request.
pub fn rule_allows(rule: &PolicyRule, a: &Attributes) -> bool {
    if !rule.verbs.iter().any(|v| v == ALL || *v == a.verb) {
        return false;
    }
    if !a.resource_request {
        return rule.non_resource_urls.iter().flatten().any(|url| {
            url == ALL
                || *url == a.path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| a.path.starts_with(prefix))
        });
    }
    has(&rule.api_groups, &a.api_group) && resource_matches(rule, a) && name_matches(rule, a)
}

fn resource_matches(rule: &PolicyRule, a: &Attributes) -> bool {
    let combined = a.combined_resource();
    rule.resources.iter().flatten().any(|r| {
        r == ALL
            || *r == combined
            || (!a.subresource.is_empty() && r.strip_prefix("*/") == Some(a.subresource.as_str()))
    })
}

fn name_matches(rule: &PolicyRule, a: &Attributes) -> bool {
    match &rule.resource_names {
        None => true,
        Some(names) if names.is_empty() => true,
        Some(names) => names.contains(&a.name),
    }
}

/// Whether any of `rules` allows the request.
pub fn rules_allow(rules: &[PolicyRule], a: &Attributes) -> bool {
    rules.iter().any(|r| rule_allows(r, a))
}

/// A ServiceAccount's user name.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// Whether `subject` of a binding in `binding_namespace` (`""` for a ClusterRoleBinding)
/// names the user.
pub fn subject_matches(
    subject: &Subject,
    user: &str,
    groups: &[String],
    binding_namespace: &str,
) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user,
        "Group" => groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = subject
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            // `system:serviceaccount:<ns>:<name>`, compared without building it.
            user.strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.strip_prefix(ns))
                .and_then(|rest| rest.strip_prefix(':'))
                == Some(subject.name.as_str())
        }
        _ => false,
    }
}

/// Upstream's message for a request no authorizer allowed.
pub fn forbidden_message(a: &Attributes) -> String {
    if !a.resource_request {
        return format!("User {:?} cannot {} path {:?}", a.user, a.verb, a.path);
    }
    let resource = a.combined_resource();
    if a.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            a.user, a.verb, resource, a.api_group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            a.user, a.verb, resource, a.api_group, a.namespace
        )
    }
}

/// A rule, for tests and for the bootstrap policy: verbs, API groups, resources.
pub fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        api_groups: strings(groups),
        resources: strings(resources),
        ..Default::default()
    }
}

/// A rule for paths that are no resources.
pub fn non_resource_rule(verbs: &[&str], urls: &[&str]) -> PolicyRule {
    PolicyRule {
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        non_resource_urls: Some(urls.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

/// Two rules that allow the same, as upstream's semantic equality reads them: an empty list
/// is no list.
fn same_rule(a: &PolicyRule, b: &PolicyRule) -> bool {
    let list = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
    a.verbs == b.verbs
        && list(&a.api_groups) == list(&b.api_groups)
        && list(&a.resources) == list(&b.resources)
        && list(&a.resource_names) == list(&b.resource_names)
        && list(&a.non_resource_urls) == list(&b.non_resource_urls)
}

/// Whether two lists of rules are the same, rule by rule.
pub fn same_rules(a: &[PolicyRule], b: &[PolicyRule]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_rule(x, y))
}

/// The rules an aggregated ClusterRole holds, as upstream's ClusterRoleAggregationController
/// computes them: for each of its `clusterRoleSelectors` in order, the rules of the matching
/// ClusterRoles other than itself, by name, each rule once. `None` when `role` aggregates
/// nothing.
pub fn aggregate<R: std::borrow::Borrow<ClusterRole>>(
    role: &ClusterRole,
    all: &[R],
) -> Result<Option<Vec<PolicyRule>>, SelectorError> {
    let Some(aggregation) = &role.aggregation_rule else {
        return Ok(None);
    };
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in aggregation.cluster_role_selectors.iter().flatten() {
        let selector = Selector::from_label_selector(Some(selector))?;
        let mut matching: Vec<&ClusterRole> = all
            .iter()
            .map(|r| r.borrow())
            .filter(|r| r.metadata.name != role.metadata.name)
            .filter(|r| selector.matches(r.metadata.labels.as_ref()))
            .collect();
        matching.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for r in matching {
            for rule in r.rules.iter().flatten() {
                if !rules.iter().any(|have| same_rule(have, rule)) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Ok(Some(rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(verb: &str) -> Attributes {
        Attributes::resource("u", &[], verb, "", "pods").in_namespace("ns")
    }

    #[test]
    fn rules_cover_verbs_groups_resources_and_names() {
        let r = rule(&["get", "list"], &[""], &["pods"]);
        assert!(rule_allows(&r, &pods("get")));
        assert!(!rule_allows(&r, &pods("delete")));
        assert!(!rule_allows(
            &r,
            &Attributes::resource("u", &[], "get", "apps", "pods")
        ));
        assert!(!rule_allows(&r, &pods("get").subresource("log")));
        assert!(rule_allows(
            &rule(&["*"], &["*"], &["*"]),
            &pods("delete").subresource("exec")
        ));
        assert!(rule_allows(
            &rule(&["get"], &[""], &["pods/log"]),
            &pods("get").subresource("log")
        ));
        assert!(rule_allows(
            &rule(&["get"], &[""], &["*/scale"]),
            &pods("get").subresource("scale")
        ));
        assert!(!rule_allows(
            &rule(&["get"], &[""], &["*/scale"]),
            &pods("get")
        ));
        let mut named = rule(&["get"], &[""], &["pods"]);
        named.resource_names = Some(vec!["a".into()]);
        assert!(rule_allows(&named, &pods("get").named("a")));
        assert!(!rule_allows(&named, &pods("get").named("b")));
        assert!(!rule_allows(&named, &pods("get")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let r = non_resource_rule(&["get"], &["/healthz", "/api/*"]);
        let path = |p: &str| Attributes::non_resource("u", &[], "get", p);
        assert!(rule_allows(&r, &path("/healthz")));
        assert!(rule_allows(&r, &path("/api/v1")));
        assert!(!rule_allows(&r, &path("/apis")));
        // A resource rule never covers a path, nor the reverse.
        assert!(!rule_allows(
            &rule(&["get"], &["*"], &["*"]),
            &path("/healthz")
        ));
        assert!(!rule_allows(&r, &pods("get")));
    }

    #[test]
    fn subjects_name_users_groups_and_service_accounts() {
        let s = |kind: &str, name: &str, ns: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(String::from),
            ..Default::default()
        };
        let groups = vec!["dev".to_string()];
        assert!(subject_matches(
            &s("User", "jane", None),
            "jane",
            &groups,
            ""
        ));
        assert!(subject_matches(
            &s("Group", "dev", None),
            "bob",
            &groups,
            ""
        ));
        let sa = "system:serviceaccount:ns1:bot";
        assert!(subject_matches(
            &s("ServiceAccount", "bot", Some("ns1")),
            sa,
            &[],
            ""
        ));
        assert!(subject_matches(
            &s("ServiceAccount", "bot", None),
            sa,
            &[],
            "ns1"
        ));
        assert!(!subject_matches(
            &s("ServiceAccount", "bot", None),
            sa,
            &[],
            "ns2"
        ));
    }

    #[test]
    fn forbidden_messages_read_as_upstream() {
        assert_eq!(
            forbidden_message(&pods("list")),
            "User \"u\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
        assert_eq!(
            forbidden_message(
                &Attributes::resource("u", &[], "get", "apps", "deployments").subresource("scale")
            ),
            "User \"u\" cannot get resource \"deployments/scale\" in API group \"apps\" at the cluster scope"
        );
        assert_eq!(
            forbidden_message(&Attributes::non_resource("u", &[], "get", "/metrics")),
            "User \"u\" cannot get path \"/metrics\""
        );
    }

    fn role(name: &str, labels: &[(&str, &str)], rules: Vec<PolicyRule>) -> ClusterRole {
        let mut r = ClusterRole {
            rules: Some(rules),
            ..Default::default()
        };
        r.metadata.name = Some(name.into());
        r.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        r
    }

    fn aggregating(name: &str, labels: &[&str]) -> ClusterRole {
        let mut r = role(name, &[], vec![]);
        r.rules = None;
        r.aggregation_rule = Some(k8s_openapi::api::rbac::v1::AggregationRule {
            cluster_role_selectors: Some(
                labels
                    .iter()
                    .map(
                        |l| k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                            match_labels: Some([(l.to_string(), "true".to_string())].into()),
                            ..Default::default()
                        },
                    )
                    .collect(),
            ),
        });
        r
    }

    #[test]
    fn aggregation_gathers_by_selector_then_name_each_rule_once() {
        let get = rule(&["get"], &[""], &["pods"]);
        let list = rule(&["list"], &[""], &["pods"]);
        let mut same_as_get = get.clone();
        same_as_get.resource_names = Some(vec![]);
        let watch = rule(&["watch"], &["apps"], &["deployments"]);
        let target = aggregating("agg", &["a", "b"]);
        let all = vec![
            role("z", &[("a", "true")], vec![list.clone(), get.clone()]),
            role("y", &[("a", "true")], vec![get.clone()]),
            role("x", &[("b", "true")], vec![watch.clone(), same_as_get]),
            role("w", &[("c", "true")], vec![rule(&["*"], &["*"], &["*"])]),
            target.clone(),
        ];
        let rules = aggregate(&target, &all).unwrap().unwrap();
        assert!(same_rules(&rules, &[get, list, watch]), "{rules:?}");
        // Not an aggregated role.
        assert_eq!(aggregate(&all[0], &all).unwrap(), None);
        // A role labelled for itself does not feed itself.
        let mut selfish = aggregating("selfish", &["a"]);
        selfish.metadata.labels = Some([("a".to_string(), "true".to_string())].into());
        selfish.rules = Some(vec![rule(&["delete"], &[""], &["secrets"])]);
        let rules = aggregate(&selfish, std::slice::from_ref(&selfish))
            .unwrap()
            .unwrap();
        assert!(rules.is_empty());
    }
}
