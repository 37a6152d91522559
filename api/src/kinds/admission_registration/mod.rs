//! admissionregistration.k8s.io: webhooks and CEL policies that take part in admitting every
//! later request. A configuration the server accepts is one it must act on for each write
//! it matches, often before anyone looks at it again, so what it could never call or match
//! (an endpoint that is not https, a rule that names no resources, a review version the server
//! does not speak, a binding that would both deny and warn) is refused when it is written, not
//! discovered when a request fails. Defaults are upstream's, so a stored object reads the same
//! here as from Kubernetes, and so does what `kubectl get` prints.
//!
//! What both families share lives here: rules, match resources and match conditions.
//! CEL expressions are checked for presence and shape only; none is compiled.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, RuleWithOperations,
};

use crate::validation::{
    ErrorKind, Errors, FieldError, Path, path_segment_name, qualified_name, validate_label_selector,
};

mod policy;
mod webhooks;

/// Upstream's sets, listed sorted as its `sets.String.List()` prints them in errors.
const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
/// At most this many match conditions per webhook or policy.
const MAX_MATCH_CONDITIONS: usize = 64;

// ---------------------------------------------------------------------------------------------
// Defaults (upstream's pkg/apis/admissionregistration/v1/defaults.go).

/// `SetDefaults_Rule`: a rule without a scope matches both scopes.
fn default_scope(scope: &mut Option<String>) {
    scope.get_or_insert_with(|| "*".into());
}

fn default_rules(rules: &mut Option<Vec<RuleWithOperations>>) {
    for rule in rules.iter_mut().flatten() {
        default_scope(&mut rule.scope);
    }
}

/// `SetDefaults_MatchResources`, and the rules inside.
fn default_match_resources(mr: &mut MatchResources) {
    mr.match_policy.get_or_insert_with(|| "Equivalent".into());
    mr.namespace_selector.get_or_insert_with(Default::default);
    mr.object_selector.get_or_insert_with(Default::default);
    for rule in mr
        .resource_rules
        .iter_mut()
        .flatten()
        .chain(mr.exclude_resource_rules.iter_mut().flatten())
    {
        default_scope(&mut rule.scope);
    }
}

// ---------------------------------------------------------------------------------------------
// Validation (upstream's pkg/apis/admissionregistration/validation).

/// A rule's fields, whether of a `RuleWithOperations` or a `NamedRuleWithOperations`.
struct Rule<'a> {
    operations: &'a [String],
    api_groups: &'a [String],
    api_versions: &'a [String],
    resources: &'a [String],
    scope: Option<&'a str>,
}

impl<'a> From<&'a RuleWithOperations> for Rule<'a> {
    fn from(r: &'a RuleWithOperations) -> Self {
        Rule {
            operations: r.operations.as_deref().unwrap_or_default(),
            api_groups: r.api_groups.as_deref().unwrap_or_default(),
            api_versions: r.api_versions.as_deref().unwrap_or_default(),
            resources: r.resources.as_deref().unwrap_or_default(),
            scope: r.scope.as_deref(),
        }
    }
}

impl<'a> From<&'a NamedRuleWithOperations> for Rule<'a> {
    fn from(r: &'a NamedRuleWithOperations) -> Self {
        Rule {
            operations: r.operations.as_deref().unwrap_or_default(),
            api_groups: r.api_groups.as_deref().unwrap_or_default(),
            api_versions: r.api_versions.as_deref().unwrap_or_default(),
            resources: r.resources.as_deref().unwrap_or_default(),
            scope: r.scope.as_deref(),
        }
    }
}

/// `validateRuleWithOperations`: the operations, then the rule itself.
fn validate_rule_with_operations(rule: &Rule, path: &Path, errs: &mut Errors) {
    let ops = path.child("operations");
    if rule.operations.is_empty() {
        errs.push(FieldError::required(&ops, ""));
    }
    if rule.operations.len() > 1 && has_wildcard(rule.operations) {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            &ops,
            Some(go_slice(
                "admissionregistration.OperationType",
                rule.operations,
            )),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in rule.operations.iter().enumerate() {
        if !OPERATIONS.contains(&op.as_str()) {
            errs.push(FieldError::not_supported(&ops.index(i), op, OPERATIONS));
        }
    }
    validate_rule(rule, path, errs);
}

/// `validateRule`, with subresources allowed (as every caller of it in v1 allows them).
fn validate_rule(rule: &Rule, path: &Path, errs: &mut Errors) {
    let groups = path.child("apiGroups");
    if rule.api_groups.is_empty() {
        errs.push(FieldError::required(&groups, ""));
    }
    if rule.api_groups.len() > 1 && has_wildcard(rule.api_groups) {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            &groups,
            Some(go_slice("string", rule.api_groups)),
            "if '*' is present, must not specify other API groups",
        ));
    }
    // The core group is the empty string, so an empty group is no error.
    let versions = path.child("apiVersions");
    if rule.api_versions.is_empty() {
        errs.push(FieldError::required(&versions, ""));
    }
    if rule.api_versions.len() > 1 && has_wildcard(rule.api_versions) {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            &versions,
            Some(go_slice("string", rule.api_versions)),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, v) in rule.api_versions.iter().enumerate() {
        if v.is_empty() {
            errs.push(FieldError::required(&versions.index(i), ""));
        }
    }
    validate_resources(rule.resources, &path.child("resources"), errs);
    if let Some(scope) = rule.scope
        && !SCOPES.contains(&scope)
    {
        errs.push(FieldError::not_supported(
            &path.child("scope"),
            scope,
            SCOPES,
        ));
    }
}

/// `validateResources`: `resource`, `resource/subresource`, with `*` on either side, and no
/// wildcard next to what it already covers.
fn validate_resources(resources: &[String], path: &Path, errs: &mut Errors) {
    if resources.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    let mut with_wildcard_subresource = Vec::<&str>::new();
    let mut subresource_of_wildcard = Vec::<&str>::new();
    let mut double_wildcard = false;
    let mut single_wildcard = false;
    // As upstream, the last resource without a subresource decides.
    let mut without_subresource = false;
    for (i, rs) in resources.iter().enumerate() {
        if rs.is_empty() {
            errs.push(FieldError::required(&path.index(i), ""));
            continue;
        }
        double_wildcard |= rs == "*/*";
        single_wildcard |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            without_subresource = rs != "*";
            continue;
        };
        if with_wildcard_subresource.contains(&res) {
            errs.push(FieldError::invalid(
                &path.index(i),
                rs,
                format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if subresource_of_wildcard.contains(&sub) {
            errs.push(FieldError::invalid(
                &path.index(i),
                rs,
                format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            with_wildcard_subresource.push(res);
        }
        if res == "*" {
            subresource_of_wildcard.push(sub);
        }
    }
    if resources.len() > 1 && double_wildcard {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            Some(go_slice("string", resources)),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single_wildcard && without_subresource {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            Some(go_slice("string", resources)),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
}

/// `validateNamedRuleWithOperations`: resource names are path segments, each once.
fn validate_named_rule(rule: &NamedRuleWithOperations, path: &Path, errs: &mut Errors) {
    let names_path = path.child("resourceNames");
    let names = rule.resource_names.as_deref().unwrap_or_default();
    for (i, name) in names.iter().enumerate() {
        for msg in path_segment_name(name) {
            errs.push(FieldError::invalid(&names_path.index(i), name, msg));
        }
        if names[..i].contains(name) {
            errs.push(FieldError::duplicate(&names_path.index(i), name));
        }
    }
    validate_rule_with_operations(&rule.into(), path, errs);
}

/// `validateMatchResources`. Selectors are validated strictly: the type came after upstream
/// stopped accepting invalid label values in them.
fn validate_match_resources(mr: &MatchResources, path: &Path, errs: &mut Errors) {
    match mr.match_policy.as_deref() {
        None => errs.push(FieldError::required(&path.child("matchPolicy"), "")),
        Some(p) if !MATCH_POLICIES.contains(&p) => errs.push(FieldError::not_supported(
            &path.child("matchPolicy"),
            p,
            MATCH_POLICIES,
        )),
        Some(_) => {}
    }
    for (field, selector) in [
        ("namespaceSelector", &mr.namespace_selector),
        ("objectSelector", &mr.object_selector),
    ] {
        match selector {
            None => errs.push(FieldError::required(&path.child(field), "")),
            Some(s) => validate_label_selector(s, &path.child(field), errs),
        }
    }
    for (field, rules) in [
        ("resourceRules", &mr.resource_rules),
        ("excludeResourceRules", &mr.exclude_resource_rules),
    ] {
        for (i, rule) in rules.iter().flatten().enumerate() {
            validate_named_rule(rule, &path.child(field).index(i), errs);
        }
    }
}

/// `validateMatchConditions`: at most 64, each named uniquely with a qualified name and with
/// an expression.
fn validate_match_conditions(conditions: &[MatchCondition], path: &Path, errs: &mut Errors) {
    if conditions.len() > MAX_MATCH_CONDITIONS {
        errs.push(FieldError::new(
            ErrorKind::TooMany,
            path,
            Some(conditions.len().to_string()),
            format!("must have at most {MAX_MATCH_CONDITIONS} items"),
        ));
    }
    for (i, c) in conditions.iter().enumerate() {
        let p = path.index(i);
        if c.expression.trim().is_empty() {
            errs.push(FieldError::required(&p.child("expression"), ""));
        }
        if c.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else {
            for msg in qualified_name(&c.name) {
                errs.push(FieldError::invalid(&p.child("name"), &c.name, msg));
            }
            if conditions[..i].iter().any(|o| o.name == c.name) {
                errs.push(FieldError::duplicate(&p.child("name"), &c.name));
            }
        }
    }
}

fn has_wildcard(items: &[String]) -> bool {
    items.iter().any(|s| s == "*")
}

/// A Go slice of a string type as `%#v` prints it in a field error: `[]string{"a", "b"}`.
fn go_slice(type_name: &str, items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]{type_name}{{{}}}", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errors(f: impl FnOnce(&mut Errors)) -> Vec<String> {
        let mut errs = Vec::new();
        f(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn rule(body: serde_json::Value) -> RuleWithOperations {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn rules() {
        let ok = rule(
            json!({"operations": ["CREATE", "UPDATE"], "apiGroups": [""],
            "apiVersions": ["v1"], "resources": ["pods", "pods/status", "*/scale"], "scope": "Namespaced"}),
        );
        assert_eq!(
            errors(|e| validate_rule_with_operations(&(&ok).into(), &Path::new("r"), e)),
            Vec::<String>::new()
        );
        let bad = rule(
            json!({"operations": ["*", "PATCH"], "apiGroups": ["*", "apps"],
            "apiVersions": ["v1", ""], "resources": ["*", "pods", "pods/*", "pods/log"], "scope": "Global"}),
        );
        assert_eq!(
            errors(|e| validate_rule_with_operations(&(&bad).into(), &Path::new("r"), e)),
            vec![
                "r.operations: Invalid value: []admissionregistration.OperationType{\"*\", \"PATCH\"}: if '*' is present, must not specify other operations",
                "r.operations[1]: Unsupported value: \"PATCH\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\"",
                "r.apiGroups: Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other API groups",
                "r.apiVersions[1]: Required value",
                "r.resources[3]: Invalid value: \"pods/log\": if 'pods/*' is present, must not specify pods/log",
                "r.resources: Invalid value: []string{\"*\", \"pods\", \"pods/*\", \"pods/log\"}: if '*' is present, must not specify other resources without subresources",
                "r.scope: Unsupported value: \"Global\": supported values: \"*\", \"Cluster\", \"Namespaced\"",
            ]
        );
        let empty = rule(json!({}));
        assert_eq!(
            errors(|e| validate_rule_with_operations(&(&empty).into(), &Path::new("r"), e)),
            vec![
                "r.operations: Required value",
                "r.apiGroups: Required value",
                "r.apiVersions: Required value",
                "r.resources: Required value",
            ]
        );
    }

    #[test]
    fn match_conditions() {
        let mut conditions: Vec<MatchCondition> = serde_json::from_value(json!([
            {"name": "a", "expression": "true"},
            {"name": "a", "expression": " "},
            {"name": "-x", "expression": "true"},
        ]))
        .unwrap();
        assert_eq!(
            errors(|e| validate_match_conditions(&conditions, &Path::new("m"), e)),
            vec![
                "m[1].expression: Required value",
                "m[1].name: Duplicate value: \"a\"",
                "m[2].name: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ]
        );
        conditions = (0..65)
            .map(|i| MatchCondition {
                name: format!("c{i}"),
                expression: "true".into(),
            })
            .collect();
        assert_eq!(
            errors(|e| validate_match_conditions(&conditions, &Path::new("m"), e)),
            vec!["m: Too many: 65: must have at most 64 items"]
        );
    }
}
