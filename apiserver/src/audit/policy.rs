//! `--audit-policy-file`: upstream's `audit.k8s.io/v1` Policy, and which rule a request
//! meets (the first that matches; none means no event).

use std::path::Path;

use minik8s_api::rbac::Attributes;
use serde::{Deserialize, Serialize};

/// How much of a request is recorded, in increasing order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
pub enum Level {
    #[default]
    None,
    Metadata,
    Request,
    RequestResponse,
}

/// The points of a request's life an event is written at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// What the policy asks for one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestAudit {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let shown = path.display().to_string();
        let data = std::fs::read(path)
            .map_err(|e| PolicyError(format!("failed to read file path {shown:?}: {e}")))?;
        Self::parse(&data).map_err(|e| PolicyError(format!("{e} from file {shown}")))
    }

    pub fn parse(data: &[u8]) -> Result<Policy, PolicyError> {
        let policy: Policy = serde_yaml::from_slice(data)
            .map_err(|e| PolicyError(format!("failed decoding: {e}")))?;
        if policy.kind != "Policy"
            || !matches!(
                policy.api_version.as_str(),
                "audit.k8s.io/v1" | "audit.k8s.io/v1beta1" | "audit.k8s.io/v1alpha1"
            )
        {
            return Err(PolicyError(format!(
                "failed decoding: no kind {:?} is registered for version {:?}",
                policy.kind, policy.api_version
            )));
        }
        let errors = policy.validate();
        if !errors.is_empty() {
            return Err(PolicyError(if errors.len() == 1 {
                errors.into_iter().next().unwrap_or_default()
            } else {
                format!("[{}]", errors.join(", "))
            }));
        }
        if policy.rules.is_empty() {
            return Err(PolicyError("loaded illegal policy with 0 rules".into()));
        }
        Ok(policy)
    }

    /// Upstream's `ValidatePolicy`, as far as the fields go.
    fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let path = format!("rules[{i}]");
            if !rule.non_resource_urls.is_empty()
                && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
            {
                errors.push(format!(
                    "{path}.nonResourceURLs: Invalid value: {}: rules cannot apply to both regular resources and non-resource URLs",
                    go_list(&rule.non_resource_urls)
                ));
            }
            for (j, url) in rule.non_resource_urls.iter().enumerate() {
                let star = url.find('*');
                if star.is_some_and(|at| at != url.len() - 1) {
                    errors.push(format!("{path}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL rules may only use wildcards ('*') at the end"));
                } else if url != "*" && !url.starts_with('/') {
                    errors.push(format!("{path}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character"));
                }
            }
            for (j, gr) in rule.resources.iter().enumerate() {
                let at = format!("{path}.resources[{j}]");
                if gr.group.contains('/') {
                    errors.push(format!(
                        "{at}.group: Invalid value: {:?}: group name must not contain '/'",
                        gr.group
                    ));
                }
                if !gr.resource_names.is_empty() && gr.resources.is_empty() {
                    errors.push(format!(
                        "{at}.resourceNames: Invalid value: {}: using resourceNames requires at least one resource",
                        go_list(&gr.resource_names)
                    ));
                }
            }
        }
        errors
    }

    /// What to record of a request with `attrs`: the first matching rule's level and
    /// stages to leave out (with the policy's own), or nothing.
    pub fn evaluate(&self, attrs: &Attributes) -> RequestAudit {
        for rule in &self.rules {
            if rule_matches(rule, attrs) {
                let mut omit_stages = self.omit_stages.clone();
                for stage in &rule.omit_stages {
                    if !omit_stages.contains(stage) {
                        omit_stages.push(*stage);
                    }
                }
                return RequestAudit {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                };
            }
        }
        RequestAudit::default()
    }
}

fn go_list(items: &[String]) -> String {
    format!(
        "[]string{{{}}}",
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn has(list: &[String], s: &str) -> bool {
    list.iter().any(|x| x == s)
}

fn rule_matches(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !rule.users.is_empty() && !has(&rule.users, &attrs.user) {
        return false;
    }
    if !rule.user_groups.is_empty() && !attrs.groups.iter().any(|g| has(&rule.user_groups, g)) {
        return false;
    }
    if !rule.verbs.is_empty() && !has(&rule.verbs, &attrs.verb) {
        return false;
    }
    if !rule.namespaces.is_empty() || !rule.resources.is_empty() {
        return matches_resource(rule, attrs);
    }
    if !rule.non_resource_urls.is_empty() {
        return !attrs.resource_request
            && rule
                .non_resource_urls
                .iter()
                .any(|spec| path_matches(&attrs.path, spec));
    }
    true
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

fn matches_resource(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !attrs.resource_request {
        return false;
    }
    // Cluster-scoped resources have the namespace "".
    if !rule.namespaces.is_empty() && !has(&rule.namespaces, &attrs.namespace) {
        return false;
    }
    if rule.resources.is_empty() {
        return true;
    }
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    rule.resources.iter().any(|gr| {
        if gr.group != attrs.api_group {
            return false;
        }
        if gr.resources.is_empty() {
            return true;
        }
        if !gr.resource_names.is_empty() && !has(&gr.resource_names, &attrs.name) {
            return false;
        }
        gr.resources.iter().any(|res| {
            res == &combined
                || res == "*"
                || (!attrs.subresource.is_empty()
                    && res.strip_prefix("*/") == Some(attrs.subresource.as_str()))
                || res.strip_suffix("/*") == Some(attrs.resource.as_str())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Policy {
        Policy::parse(format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{yaml}").as_bytes())
            .unwrap()
    }

    fn get(resource: &str, ns: &str, name: &str) -> Attributes {
        let mut a = Attributes::resource(
            "alice",
            &["devs", "system:authenticated"],
            "get",
            "",
            resource,
        );
        a.namespace = ns.into();
        a.name = name.into();
        a
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let p = policy(
            "rules:\n- level: None\n  users: [system:kube-proxy]\n- level: Metadata\n  resources: [{group: '', resources: [secrets]}]\n- level: RequestResponse\n",
        );
        assert_eq!(
            p.evaluate(&get("secrets", "default", "s")).level,
            Level::Metadata
        );
        assert_eq!(
            p.evaluate(&get("pods", "default", "p")).level,
            Level::RequestResponse
        );
        let mut proxy = get("secrets", "default", "s");
        proxy.user = "system:kube-proxy".into();
        assert_eq!(p.evaluate(&proxy).level, Level::None);
    }

    #[test]
    fn no_matching_rule_means_none() {
        let p = policy("rules:\n- level: Metadata\n  verbs: [create]\n");
        assert_eq!(p.evaluate(&get("pods", "", "")), RequestAudit::default());
    }

    #[test]
    fn users_groups_verbs_and_namespaces_narrow_a_rule() {
        let p = policy(
            "rules:\n- level: Request\n  userGroups: [devs]\n  verbs: [get, list]\n  namespaces: [team]\n",
        );
        assert_eq!(p.evaluate(&get("pods", "team", "p")).level, Level::Request);
        assert_eq!(p.evaluate(&get("pods", "other", "p")).level, Level::None);
        let mut outsider = get("pods", "team", "p");
        outsider.groups = vec!["ops".into()];
        assert_eq!(p.evaluate(&outsider).level, Level::None);
        let mut write = get("pods", "team", "p");
        write.verb = "create".into();
        assert_eq!(p.evaluate(&write).level, Level::None);
        // A namespaces rule never matches a non-resource request.
        let health = Attributes::non_resource("alice", &["devs"], "get", "/healthz");
        assert_eq!(p.evaluate(&health).level, Level::None);
    }

    #[test]
    fn resources_match_subresources_wildcards_and_names() {
        let p = policy(
            "rules:\n- level: Request\n  resources:\n  - group: ''\n    resources: ['pods/log', '*/status', 'deployments/*']\n  - group: ''\n    resources: [configmaps]\n    resourceNames: [controller-leader]\n",
        );
        let with_sub = |r: &str, s: &str| {
            let mut a = get(r, "ns", "x");
            a.subresource = s.into();
            p.evaluate(&a).level
        };
        assert_eq!(with_sub("pods", "log"), Level::Request);
        assert_eq!(with_sub("pods", ""), Level::None);
        assert_eq!(with_sub("nodes", "status"), Level::Request);
        assert_eq!(with_sub("deployments", "scale"), Level::Request);
        assert_eq!(with_sub("pods", "exec"), Level::None);
        assert_eq!(
            p.evaluate(&get("configmaps", "ns", "controller-leader"))
                .level,
            Level::Request
        );
        assert_eq!(
            p.evaluate(&get("configmaps", "ns", "other")).level,
            Level::None
        );
        // A group's rule with no resources matches all of the group's.
        let apps = policy("rules:\n- level: Metadata\n  resources: [{group: apps}]\n");
        let mut deploy = get("deployments", "ns", "d");
        deploy.api_group = "apps".into();
        assert_eq!(apps.evaluate(&deploy).level, Level::Metadata);
        assert_eq!(apps.evaluate(&get("pods", "ns", "p")).level, Level::None);
    }

    #[test]
    fn non_resource_urls_match_by_prefix() {
        let p = policy("rules:\n- level: Metadata\n  nonResourceURLs: ['/healthz*', /version]\n");
        let at = |path: &str| {
            p.evaluate(&Attributes::non_resource("u", &[], "get", path))
                .level
        };
        assert_eq!(at("/healthz"), Level::Metadata);
        assert_eq!(at("/healthz/etcd"), Level::Metadata);
        assert_eq!(at("/version"), Level::Metadata);
        assert_eq!(at("/metrics"), Level::None);
        assert_eq!(p.evaluate(&get("pods", "", "")).level, Level::None);
    }

    #[test]
    fn stages_and_managed_fields_combine_policy_and_rule() {
        let p = policy(
            "omitStages: [RequestReceived]\nomitManagedFields: true\nrules:\n- level: Metadata\n  omitStages: [ResponseStarted]\n  omitManagedFields: false\n  verbs: [watch]\n- level: Metadata\n",
        );
        let mut watch = get("pods", "", "");
        watch.verb = "watch".into();
        let r = p.evaluate(&watch);
        assert_eq!(
            r.omit_stages,
            vec![Stage::RequestReceived, Stage::ResponseStarted]
        );
        assert!(!r.omit_managed_fields);
        let r = p.evaluate(&get("pods", "", ""));
        assert_eq!(r.omit_stages, vec![Stage::RequestReceived]);
        assert!(r.omit_managed_fields);
    }

    #[test]
    fn bad_policies_are_refused() {
        let parse = |yaml: &str| {
            Policy::parse(format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{yaml}").as_bytes())
        };
        assert_eq!(
            parse("rules: []").unwrap_err().0,
            "loaded illegal policy with 0 rules"
        );
        assert!(parse("rules:\n- level: Loud\n").is_err());
        let both = parse("rules:\n- level: Metadata\n  namespaces: [a]\n  nonResourceURLs: [/x]\n");
        assert!(
            both.unwrap_err()
                .0
                .ends_with("rules cannot apply to both regular resources and non-resource URLs")
        );
        assert!(parse("rules:\n- level: Metadata\n  nonResourceURLs: ['/a*b']\n").is_err());
    }
}
