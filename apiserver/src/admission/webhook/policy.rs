//! ValidatingAdmissionPolicies (upstream's ValidatingAdmissionPolicy plugin): validation
//! written as CEL in the API instead of served by a webhook, so a rule needs no server to
//! run and cannot be down. A policy applies through its bindings; each binding may narrow
//! what it matches and says what a failed rule does (Deny refuses the write; Warn returns
//! a `Warning` header; Audit, with no audit log here, goes to the server's log). Policies
//! run before validating webhooks, as upstream.

use std::collections::BTreeMap;
use std::sync::Weak;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, RuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use minik8s_api::ApiError;
use minik8s_api::crd::cel;
use minik8s_api::strategy::BuiltIn;
use serde_json::{Map, Value};

use super::matching::{self, Request};
use crate::registry::generic::GenericRegistry;

pub struct PolicySources {
    pub policies: Weak<GenericRegistry<BuiltIn<ValidatingAdmissionPolicy>>>,
    pub bindings: Weak<GenericRegistry<BuiltIn<ValidatingAdmissionPolicyBinding>>>,
}

/// A named rule without its resourceNames, for the shared rule matching.
fn plain(rule: &NamedRuleWithOperations) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: rule.api_groups.clone(),
        api_versions: rule.api_versions.clone(),
        operations: rule.operations.clone(),
        resources: rule.resources.clone(),
        scope: rule.scope.clone(),
    }
}

fn named_rule_matches(
    rule: &NamedRuleWithOperations,
    req: &Request,
    equivalent: bool,
    name: &str,
) -> bool {
    let names = rule.resource_names.as_deref().unwrap_or_default();
    matching::rule_matches(&plain(rule), req, equivalent)
        && (names.is_empty() || names.iter().any(|n| n == name))
}

/// Whether `constraints` select the write (upstream's matching.Matcher).
fn resources_match(
    constraints: &MatchResources,
    req: &Request,
    name: &str,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, String> {
    let equivalent = constraints.match_policy.as_deref() != Some("Exact");
    let included = constraints
        .resource_rules
        .iter()
        .flatten()
        .any(|r| named_rule_matches(r, req, equivalent, name));
    let excluded = constraints
        .exclude_resource_rules
        .iter()
        .flatten()
        .any(|r| named_rule_matches(r, req, equivalent, name));
    if !included || excluded {
        return Ok(false);
    }
    Ok(matching::namespace_selected(
        constraints.namespace_selector.as_ref(),
        req,
        namespace_labels,
    )? && matching::object_selected(constraints.object_selector.as_ref(), req)?)
}

/// Upstream's HTTP codes of the reasons a validation may give.
fn refusal(reason: &str, message: String) -> ApiError {
    match reason {
        "Unauthorized" => ApiError::new(401, "Unauthorized", message),
        "Forbidden" => ApiError::new(403, "Forbidden", message),
        "RequestEntityTooLarge" => ApiError::new(413, "RequestEntityTooLarge", message),
        _ => ApiError::new(422, "Invalid", message),
    }
}

/// Evaluates the policy's variables in order, each seeing those before it.
fn variables(policy: &ValidatingAdmissionPolicy, base: &[(&str, &Value)]) -> Value {
    let mut vars = Map::new();
    for v in policy
        .spec
        .as_ref()
        .and_then(|s| s.variables.as_ref())
        .into_iter()
        .flatten()
    {
        let current = Value::Object(vars.clone());
        let mut all: Vec<(&str, &Value)> = base.to_vec();
        all.push(("variables", &current));
        let value = cel::evaluate_json(&v.expression, &all).unwrap_or(Value::Null);
        vars.insert(v.name.clone(), value);
    }
    Value::Object(vars)
}

/// Runs every bound policy that matches the write; the first Deny refusal is the answer.
pub async fn admit(
    sources: &PolicySources,
    bindings: Vec<ValidatingAdmissionPolicyBinding>,
    req: &Request<'_>,
    name: &str,
    request: &Value,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Result<(), ApiError> {
    if bindings.is_empty() {
        return Ok(());
    }
    let policies = super::cached(&sources.policies).await;
    let null = Value::Null;
    let namespace_object = match (req.namespace, namespace_labels) {
        ("", _) | (_, None) => Value::Null,
        (ns, Some(labels)) => serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": labels},
        }),
    };
    let base = [
        ("object", req.object.unwrap_or(&null)),
        ("oldObject", req.old.unwrap_or(&null)),
        ("request", request),
        ("params", &null),
        ("namespaceObject", &namespace_object),
    ];
    for binding in &bindings {
        let Some(bspec) = &binding.spec else { continue };
        let policy_name = bspec.policy_name.as_deref().unwrap_or_default();
        let Some(policy) = policies
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(policy_name))
        else {
            continue;
        };
        let Some(spec) = &policy.spec else { continue };
        let binding_name = binding.metadata.name.as_deref().unwrap_or_default();
        let fail_closed = spec.failure_policy.as_deref() != Some("Ignore");
        let header = format!(
            "ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request"
        );
        let fail = |why: String| -> Result<(), ApiError> {
            if fail_closed {
                Err(refusal("Invalid", format!("{header}: {why}")))
            } else {
                tracing::warn!(policy = policy_name, binding = binding_name, error = %why, "policy failed; failurePolicy Ignore");
                Ok(())
            }
        };
        let matched = spec
            .match_constraints
            .as_ref()
            .map(|c| resources_match(c, req, name, namespace_labels))
            .unwrap_or(Ok(false))
            .and_then(|m| match (m, &bspec.match_resources) {
                (true, Some(narrower)) => resources_match(narrower, req, name, namespace_labels),
                (m, _) => Ok(m),
            });
        match matched {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                fail(e)?;
                continue;
            }
        }
        if spec.param_kind.is_some() {
            // Parameter resources are not read here yet: a binding that needs them acts
            // as upstream does when its parameters are missing.
            if bspec
                .param_ref
                .as_ref()
                .and_then(|p| p.parameter_not_found_action.as_deref())
                == Some("Allow")
            {
                continue;
            }
            fail("no params found for policy binding with `Deny` parameterNotFoundAction".into())?;
            continue;
        }
        match matching::conditions_match(spec.match_conditions.as_ref(), &base) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                fail(e)?;
                continue;
            }
        }
        let vars = variables(policy, &base);
        let mut all: Vec<(&str, &Value)> = base.to_vec();
        all.push(("variables", &vars));
        let actions = bspec.validation_actions.as_deref().unwrap_or_default();
        let deny = actions.iter().any(|a| a == "Deny");
        for v in spec.validations.iter().flatten() {
            let why = match cel::evaluate_bool(&v.expression, &all) {
                Ok(Some(true)) => continue,
                Ok(Some(false)) => {
                    let message = v
                        .message_expression
                        .as_deref()
                        .and_then(|e| cel::evaluate_string(e, &all).ok().flatten())
                        .filter(|m| !m.trim().is_empty())
                        .or_else(|| v.message.clone())
                        .unwrap_or_else(|| format!("failed expression: {}", v.expression));
                    if deny {
                        let reason = v.reason.as_deref().unwrap_or("Invalid");
                        return Err(refusal(reason, format!("{header}: {message}")));
                    }
                    if actions.iter().any(|a| a == "Warn") {
                        super::warn(format!(
                            "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {message}"
                        ));
                    }
                    if actions.iter().any(|a| a == "Audit") {
                        // No audit log here to annotate: the server's log has it.
                        tracing::info!(policy = policy_name, binding = binding_name, %message, "validation failed (Audit)");
                    }
                    continue;
                }
                Ok(None) => format!(
                    "expression '{}' resulted in error: must evaluate to bool",
                    v.expression
                ),
                Err(e) => format!("expression '{}' resulted in error: {e}", v.expression),
            };
            if deny {
                fail(why)?;
            } else if actions.iter().any(|a| a == "Warn") {
                super::warn(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {why}"
                ));
            }
        }
    }
    Ok(())
}
