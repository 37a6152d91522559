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
    /// Where bindings' parameter objects are read (the server itself).
    pub params: Weak<dyn ParamSource>,
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
        let params = match &spec.param_kind {
            None => vec![Value::Null],
            Some(kind) => {
                let found = match &sources.params.upgrade() {
                    Some(source) => {
                        load_params(source.as_ref(), kind, bspec.param_ref.as_ref(), req).await
                    }
                    None => Err("the server is shutting down".to_string()),
                };
                match found {
                    Ok(found) if !found.is_empty() => found,
                    Ok(_) => {
                        let action = bspec
                            .param_ref
                            .as_ref()
                            .and_then(|p| p.parameter_not_found_action.as_deref());
                        if action != Some("Allow") {
                            fail("no params found for policy binding with `Deny` parameterNotFoundAction".into())?;
                        }
                        continue;
                    }
                    Err(e) => {
                        fail(e)?;
                        continue;
                    }
                }
            }
        };
        let binding = Bound {
            policy,
            binding,
            header: &header,
            fail: &fail,
        };
        for param in &params {
            let mut all = base.to_vec();
            all[3] = ("params", param);
            binding.evaluate(&all)?;
        }
    }
    Ok(())
}

/// A policy as one binding applies it.
struct Bound<'a> {
    policy: &'a ValidatingAdmissionPolicy,
    binding: &'a ValidatingAdmissionPolicyBinding,
    header: &'a str,
    fail: &'a dyn Fn(String) -> Result<(), ApiError>,
}

impl Bound<'_> {
    /// The policy's match conditions, then its validations, against `base` (the request's
    /// variables with one parameter object).
    fn evaluate(&self, base: &[(&str, &Value)]) -> Result<(), ApiError> {
        let (Some(spec), Some(bspec)) = (&self.policy.spec, &self.binding.spec) else {
            return Ok(());
        };
        let policy_name = self.policy.metadata.name.as_deref().unwrap_or_default();
        let binding_name = self.binding.metadata.name.as_deref().unwrap_or_default();
        match matching::conditions_match(spec.match_conditions.as_ref(), base) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => return (self.fail)(e),
        }
        let vars = variables(self.policy, base);
        let mut all: Vec<(&str, &Value)> = base.to_vec();
        all.push(("variables", &vars));
        let actions = bspec.validation_actions.as_deref().unwrap_or_default();
        let deny = actions.iter().any(|a| a == "Deny");
        let warn = |message: &str| {
            if actions.iter().any(|a| a == "Warn") {
                super::warn(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {message}"
                ));
            }
        };
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
                        return Err(refusal(reason, format!("{}: {message}", self.header)));
                    }
                    warn(&message);
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
                (self.fail)(why)?;
            } else {
                warn(&why);
            }
        }
        Ok(())
    }
}

/// Reads parameter objects of any kind, the server's own and custom resources alike.
#[async_trait::async_trait]
pub trait ParamSource: Send + Sync {
    /// Whether `kind` of `api_version` is namespaced; an error when it is not served.
    fn namespaced(&self, api_version: &str, kind: &str) -> Result<bool, String>;
    /// The object `name`, or every object, of the kind in `namespace` (`None`: cluster-scoped).
    async fn fetch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Result<Vec<Value>, String>;
}

/// A binding's parameter objects, as upstream's policy dispatcher finds them: `paramRef.name`
/// or its selector, in `paramRef.namespace` or, for a namespaced kind, the request's.
async fn load_params(
    source: &dyn ParamSource,
    kind: &k8s_openapi::api::admissionregistration::v1::ParamKind,
    param_ref: Option<&k8s_openapi::api::admissionregistration::v1::ParamRef>,
    req: &Request<'_>,
) -> Result<Vec<Value>, String> {
    let Some(param_ref) = param_ref else {
        return Err("policy binding does not specify paramRef".into());
    };
    let (api_version, kind_name) = (
        kind.api_version.as_deref().unwrap_or_default(),
        kind.kind.as_deref().unwrap_or_default(),
    );
    let namespaced = source.namespaced(api_version, kind_name).map_err(|e| {
        format!("failed to find resource referenced by paramKind: '{api_version}, Kind={kind_name}': {e}")
    })?;
    let namespace = match (namespaced, param_ref.namespace.as_deref()) {
        (false, _) => None,
        (true, Some(ns)) if !ns.is_empty() => Some(ns),
        (true, _) if req.namespace.is_empty() => {
            return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
        }
        (true, _) => Some(req.namespace),
    };
    let name = param_ref.name.as_deref().filter(|n| !n.is_empty());
    let objects = source
        .fetch(api_version, kind_name, namespace, name)
        .await?;
    if name.is_some() {
        return Ok(objects);
    }
    let selector =
        minik8s_api::selector::Selector::from_label_selector(param_ref.selector.as_ref())
            .map_err(|e| e.to_string())?;
    Ok(objects
        .into_iter()
        .filter(|o| {
            let labels: Option<BTreeMap<String, String>> =
                serde_json::from_value(o["metadata"]["labels"].clone()).ok();
            selector.matches(labels.as_ref())
        })
        .collect())
}
