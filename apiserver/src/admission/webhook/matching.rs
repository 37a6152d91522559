//! Which writes a webhook or policy is called for (upstream's admission/plugin/webhook/
//! predicates): its rules (operations, groups, versions, resources and subresources,
//! scope), its namespace and object selectors, then its CEL matchConditions.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::{MatchCondition, RuleWithOperations};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use minik8s_api::crd::cel;
use minik8s_api::selector::Selector;
use serde_json::Value;

/// The write being admitted, as the predicates see it.
pub struct Request<'a> {
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// The object's namespace; `""` for cluster-scoped objects.
    pub namespace: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
}

fn listed(list: Option<&Vec<String>>, value: &str) -> bool {
    list.into_iter().flatten().any(|v| v == "*" || v == value)
}

/// Whether `rule`'s resources name `resource`/`subresource` (upstream's `resource()`):
/// `*` is every resource but no subresource, `*/*` everything, `pods/*` every
/// subresource of pods, `*/status` the status of everything.
fn names_resource(entries: Option<&Vec<String>>, resource: &str, subresource: &str) -> bool {
    entries.into_iter().flatten().any(|entry| {
        if entry == "*/*" {
            return true;
        }
        let (res, sub) = entry.split_once('/').unwrap_or((entry, ""));
        (res == "*" || res == resource) && (sub == "*" || sub == subresource)
    })
}

/// Whether one rule matches; `any_version` for matchPolicy Equivalent, under which a rule
/// naming another version of the same resource matches too (this server serves one
/// version of a resource at a time in storage, so it is the same object).
pub fn rule_matches(rule: &RuleWithOperations, req: &Request, any_version: bool) -> bool {
    let scope_ok = match rule.scope.as_deref().unwrap_or("*") {
        "Cluster" => req.namespace.is_empty(),
        "Namespaced" => !req.namespace.is_empty(),
        _ => true,
    };
    scope_ok
        && listed(rule.operations.as_ref(), req.operation)
        && listed(rule.api_groups.as_ref(), req.group)
        && (any_version || listed(rule.api_versions.as_ref(), req.version))
        && names_resource(rule.resources.as_ref(), req.resource, req.subresource)
}

pub fn rules_match(
    rules: Option<&Vec<RuleWithOperations>>,
    req: &Request,
    equivalent: bool,
) -> bool {
    rules
        .into_iter()
        .flatten()
        .any(|r| rule_matches(r, req, equivalent))
}

fn labels(obj: Option<&Value>) -> BTreeMap<String, String> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default()
}

fn selects(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let s = Selector::from_label_selector(selector).map_err(|e| e.to_string())?;
    Ok(s.matches(Some(labels)))
}

/// Whether the selector is missing or selects everything.
pub fn selects_all(selector: Option<&LabelSelector>) -> bool {
    selector.is_none_or(|s| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    })
}

/// The objectSelector: it selects the object or the object it replaces.
pub fn object_selected(selector: Option<&LabelSelector>, req: &Request) -> Result<bool, String> {
    if selects_all(selector) {
        return Ok(true);
    }
    Ok(selects(selector, &labels(req.object))? || selects(selector, &labels(req.old))?)
}

/// The namespaceSelector, given the labels of the object's namespace (`None` when the
/// object is cluster-scoped). Namespaces themselves are matched by their own labels.
pub fn namespace_selected(
    selector: Option<&LabelSelector>,
    req: &Request,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, String> {
    if selects_all(selector) {
        return Ok(true);
    }
    if req.group.is_empty() && req.resource == "namespaces" {
        return Ok(selects(selector, &labels(req.object))? || selects(selector, &labels(req.old))?);
    }
    match namespace_labels {
        None => Ok(true),
        Some(l) => selects(selector, l),
    }
}

/// Upstream's verdict on matchConditions: all true matches; any false does not, whatever
/// the others; an error (with none false) is the error.
pub fn conditions_match(
    conditions: Option<&Vec<MatchCondition>>,
    vars: &[(&str, &Value)],
) -> Result<bool, String> {
    let mut error = None;
    for c in conditions.into_iter().flatten() {
        match cel::evaluate_bool(&c.expression, vars) {
            Ok(Some(true)) => {}
            Ok(Some(false)) => return Ok(false),
            Ok(None) => {
                error.get_or_insert_with(|| {
                    format!("matchCondition {:?} did not evaluate to a bool", c.name)
                });
            }
            Err(e) => {
                error.get_or_insert_with(|| {
                    format!("failed to evaluate matchCondition {:?}: {e}", c.name)
                });
            }
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(
        ops: &[&str],
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
    ) -> RuleWithOperations {
        let v = |s: &[&str]| Some(s.iter().map(|x| x.to_string()).collect());
        RuleWithOperations {
            operations: v(ops),
            api_groups: v(groups),
            api_versions: v(versions),
            resources: v(resources),
            scope: None,
        }
    }

    fn pod_create<'a>(sub: &'a str, obj: Option<&'a Value>) -> Request<'a> {
        Request {
            operation: "CREATE",
            group: "",
            version: "v1",
            resource: "pods",
            subresource: sub,
            namespace: "default",
            object: obj,
            old: None,
        }
    }

    #[test]
    fn rules() {
        let req = pod_create("", None);
        assert!(rule_matches(
            &rule(&["CREATE"], &[""], &["v1"], &["pods"]),
            &req,
            false
        ));
        assert!(rule_matches(
            &rule(&["*"], &["*"], &["*"], &["*"]),
            &req,
            false
        ));
        assert!(!rule_matches(
            &rule(&["UPDATE"], &[""], &["v1"], &["pods"]),
            &req,
            false
        ));
        assert!(!rule_matches(
            &rule(&["CREATE"], &["apps"], &["v1"], &["pods"]),
            &req,
            false
        ));
        assert!(!rule_matches(
            &rule(&["CREATE"], &[""], &["v2"], &["pods"]),
            &req,
            false
        ));
        assert!(rule_matches(
            &rule(&["CREATE"], &[""], &["v2"], &["pods"]),
            &req,
            true
        ));
        let status = pod_create("status", None);
        assert!(!rule_matches(
            &rule(&["*"], &["*"], &["*"], &["*"]),
            &status,
            false
        ));
        assert!(!rule_matches(
            &rule(&["*"], &[""], &["v1"], &["pods"]),
            &status,
            false
        ));
        assert!(rule_matches(
            &rule(&["*"], &[""], &["v1"], &["pods/*"]),
            &status,
            false
        ));
        assert!(rule_matches(
            &rule(&["*"], &[""], &["v1"], &["*/status"]),
            &status,
            false
        ));
        assert!(rule_matches(
            &rule(&["*"], &[""], &["v1"], &["*/*"]),
            &status,
            false
        ));
        let mut cluster = rule(&["*"], &["*"], &["*"], &["*"]);
        cluster.scope = Some("Cluster".into());
        assert!(!rule_matches(&cluster, &req, false));
        cluster.scope = Some("Namespaced".into());
        assert!(rule_matches(&cluster, &req, false));
    }

    #[test]
    fn selectors() {
        let obj = json!({"metadata": {"labels": {"app": "web"}}});
        let req = pod_create("", Some(&obj));
        let sel = |k: &str, v: &str| LabelSelector {
            match_labels: Some([(k.to_string(), v.to_string())].into()),
            ..Default::default()
        };
        assert!(object_selected(None, &req).unwrap());
        assert!(object_selected(Some(&sel("app", "web")), &req).unwrap());
        assert!(!object_selected(Some(&sel("app", "db")), &req).unwrap());
        let ns: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        assert!(namespace_selected(Some(&sel("env", "prod")), &req, Some(&ns)).unwrap());
        assert!(!namespace_selected(Some(&sel("env", "dev")), &req, Some(&ns)).unwrap());
        assert!(namespace_selected(Some(&sel("env", "dev")), &req, None).unwrap());
    }

    #[test]
    fn conditions() {
        let obj = json!({"metadata": {"name": "a", "labels": {"skip": "yes"}}});
        let cond = |name: &str, e: &str| MatchCondition {
            name: name.into(),
            expression: e.into(),
        };
        let vars = [("object", &obj)];
        assert!(conditions_match(None, &vars).unwrap());
        let skip = vec![cond("not-skipped", "!('skip' in object.metadata.labels)")];
        assert!(!conditions_match(Some(&skip), &vars).unwrap());
        let broken = vec![cond("broken", "object.nope.x == 1"), cond("false", "false")];
        assert!(!conditions_match(Some(&broken), &vars).unwrap());
        let broken = vec![cond("broken", "object.nope.x == 1")];
        assert!(
            conditions_match(Some(&broken), &vars)
                .unwrap_err()
                .contains("broken")
        );
    }
}
