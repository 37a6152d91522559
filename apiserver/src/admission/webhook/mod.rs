//! Admission webhooks (upstream's MutatingAdmissionWebhook and ValidatingAdmissionWebhook
//! plugins): operators register HTTPS endpoints that see, and may patch or refuse, the
//! writes their rules name. Mutating webhooks run one after another in the order of their
//! configurations' names, and those asking for reinvocation run once more when a later one
//! changed the object; validating webhooks run together and any refusal refuses the write.
//! Only clients' requests are sent out: writes the server makes itself are not, and nor are
//! the webhook configurations and policies themselves, so a broken webhook can always be
//! removed.

pub mod client;
pub mod matching;
pub mod policy;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Kind};
use serde_json::{Value, json};

use crate::auth::{Extra, UserInfo};
use crate::registry::external::{Attributes, ExternalAdmission};
use crate::registry::generic::{GenericRegistry, ListQuery};
use matching::Request;

/// The group whose objects configure admission: never sent to webhooks.
const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";

/// Who is writing, for the AdmissionReview's userInfo, and the warnings admission has for
/// them: set around each client request.
#[derive(Clone, Debug)]
pub struct Caller {
    pub user: UserInfo,
    pub extra: Extra,
    /// Sent back as `Warning` headers (webhooks' warnings, policies' Warn actions).
    pub warnings: Arc<Mutex<Vec<String>>>,
}

tokio::task_local! {
    static CALLER: Caller;
}

/// Runs `f` (a client's request) with `caller` as the user its writes are admitted for.
pub async fn serve_as<F: Future>(caller: Caller, f: F) -> F::Output {
    CALLER.scope(caller, f).await
}

fn caller() -> Option<Caller> {
    CALLER.try_with(Caller::clone).ok()
}

/// The user of the client request being served, if any (authorization's escalation checks).
pub(crate) fn current_caller() -> Option<Caller> {
    caller()
}

/// Adds `message` to the warnings of the client's response, as upstream's
/// `warning.AddWarning` (a message already there is not repeated, so an update admitted
/// again after a conflict warns once); outside a client's request it is only logged.
pub fn warn(message: String) {
    let pushed = CALLER.try_with(|c| {
        let mut warnings = c.warnings.lock().unwrap_or_else(|e| e.into_inner());
        if !warnings.contains(&message) {
            warnings.push(message.clone());
        }
    });
    if pushed.is_err() {
        tracing::warn!(%message, "admission warning");
    }
}

/// One webhook, mutating or validating, with its configuration's defaults applied.
#[derive(Clone)]
struct Hook {
    name: String,
    client_config: WebhookClientConfig,
    rules: Option<Vec<RuleWithOperations>>,
    fail_closed: bool,
    equivalent: bool,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    side_effects: String,
    timeout: Duration,
    review_versions: Vec<String>,
    match_conditions: Option<Vec<MatchCondition>>,
    reinvoke: bool,
}

/// A [`Hook`] of a MutatingWebhook or a ValidatingWebhook: the same fields, two types.
macro_rules! hook {
    ($w:expr) => {
        Hook {
            name: $w.name.clone(),
            client_config: $w.client_config.clone(),
            rules: $w.rules.clone(),
            fail_closed: $w.failure_policy.as_deref() != Some("Ignore"),
            equivalent: $w.match_policy.as_deref() != Some("Exact"),
            namespace_selector: $w.namespace_selector.clone(),
            object_selector: $w.object_selector.clone(),
            side_effects: $w.side_effects.clone(),
            timeout: Duration::from_secs($w.timeout_seconds.unwrap_or(10).clamp(1, 30) as u64),
            review_versions: $w.admission_review_versions.clone(),
            match_conditions: $w.match_conditions.clone(),
            reinvoke: false,
        }
    };
}

impl Hook {
    fn mutating(w: &MutatingWebhook) -> Hook {
        Hook {
            reinvoke: w.reinvocation_policy.as_deref() == Some("IfNeeded"),
            ..hook!(w)
        }
    }

    fn validating(w: &ValidatingWebhook) -> Hook {
        hook!(w)
    }
}

/// Where the configurations and what webhooks need are read from; the server's own
/// registries, held weakly since every registry holds this admission.
pub struct Sources {
    pub mutating: Weak<GenericRegistry<BuiltIn<MutatingWebhookConfiguration>>>,
    pub validating: Weak<GenericRegistry<BuiltIn<ValidatingWebhookConfiguration>>>,
    pub namespaces: Weak<GenericRegistry<BuiltIn<Namespace>>>,
    pub resolver: client::Resolver,
    pub policies: policy::PolicySources,
}

/// The webhook half of the server's external admission.
#[derive(Default)]
pub struct Webhooks {
    sources: OnceLock<Sources>,
}

/// Reads every object of a registry from its watch cache (upstream's informers: webhooks
/// are found as the cache has them).
async fn cached<K: Kind>(registry: &Weak<GenericRegistry<BuiltIn<K>>>) -> Vec<K> {
    let Some(registry) = registry.upgrade() else {
        return Vec::new();
    };
    let query = ListQuery {
        resource_version: Some("0".into()),
        ..Default::default()
    };
    match registry.list(None, &query).await {
        Ok(list) => list.items,
        Err(e) => {
            tracing::warn!(error = %e.message, kind = <K as k8s_openapi::Resource>::KIND, "listing admission configurations");
            Vec::new()
        }
    }
}

/// Upstream's metav1.StatusReason values a webhook may give a refusal.
fn reason(name: &str) -> &'static str {
    const REASONS: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    REASONS.iter().find(|r| **r == name).copied().unwrap_or("")
}

/// A webhook's refusal (upstream's webhookerrors.ToStatusErr).
fn denied(webhook: &str, status: Option<&Value>) -> ApiError {
    let field = |k: &str| {
        status
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_u64)
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400) as u16;
    let by = format!("admission webhook {webhook:?} denied the request");
    let (message, why) = (field("message"), field("reason"));
    let message = match (message.is_empty(), why.is_empty()) {
        (false, _) => format!("{by}: {message}"),
        (true, false) => format!("{by}: {why}"),
        (true, true) => format!("{by} without explanation"),
    };
    ApiError::new(code, reason(&why), message)
}

/// The AdmissionReview sent to `hook` about the write.
fn review(
    hook: &Hook,
    attrs: &Attributes<'_>,
    caller: &Caller,
    object: Option<&Value>,
    uid: &str,
) -> Value {
    let api_version = if hook.review_versions.iter().any(|v| v == "v1") {
        "admission.k8s.io/v1"
    } else {
        "admission.k8s.io/v1beta1"
    };
    let request = admission_request(attrs, caller, object, uid);
    json!({"apiVersion": api_version, "kind": "AdmissionReview", "request": request})
}

/// The AdmissionRequest of the write (also CEL's `request`).
fn admission_request(
    attrs: &Attributes<'_>,
    caller: &Caller,
    object: Option<&Value>,
    uid: &str,
) -> Value {
    let info = attrs.info;
    let kind = match attrs.kind {
        Some([group, version, kind]) => json!({"group": group, "version": version, "kind": kind}),
        None => json!({"group": info.group, "version": info.version, "kind": info.kind}),
    };
    let resource = json!({"group": info.group, "version": info.version, "resource": info.plural});
    let options = match attrs.operation.as_str() {
        "CREATE" => Some("CreateOptions"),
        "UPDATE" => Some("UpdateOptions"),
        "DELETE" => Some("DeleteOptions"),
        _ => None,
    };
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "operation": attrs.operation.as_str(),
        "userInfo": {
            "username": caller.user.name,
            "groups": caller.user.groups,
        },
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": attrs.old.cloned().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": options.map_or(Value::Null, |o| json!({"apiVersion": "meta.k8s.io/v1", "kind": o})),
    });
    let r = request.as_object_mut().expect("object");
    if !caller.user.uid.is_empty() {
        r["userInfo"]["uid"] = Value::from(caller.user.uid.clone());
    }
    if !caller.extra.is_empty() {
        r["userInfo"]["extra"] = json!(caller.extra);
    }
    if !attrs.name.is_empty() {
        r.insert("name".into(), Value::from(attrs.name));
    }
    if let Some(ns) = attrs.namespace {
        r.insert("namespace".into(), Value::from(ns));
    }
    if let Some(sub) = attrs.subresource {
        r.insert("subResource".into(), Value::from(sub));
        r.insert("requestSubResource".into(), Value::from(sub));
    }
    request
}

/// What a webhook answered, once checked.
struct Answer {
    allowed: bool,
    status: Option<Value>,
    patch: Option<json_patch::Patch>,
    warnings: Vec<String>,
}

/// Checks a webhook's AdmissionReview answer (upstream's VerifyAdmissionResponse).
fn answer(body: &Value, uid: &str, mutating: bool) -> Result<Answer, String> {
    let resp = body
        .get("response")
        .ok_or("received invalid webhook response: response is missing")?;
    let got = resp.get("uid").and_then(Value::as_str).unwrap_or_default();
    if got != uid {
        return Err(format!("expected response.uid=\"{uid}\", got \"{got}\""));
    }
    let allowed = resp
        .get("allowed")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let patch = match resp.get("patch").and_then(Value::as_str) {
        None | Some("") => None,
        Some(_) if !mutating => {
            return Err("validating webhook may not return a patch".into());
        }
        Some(encoded) => {
            match resp.get("patchType").and_then(Value::as_str) {
                Some("JSONPatch") => {}
                Some(other) => {
                    return Err(format!("expected patchType \"JSONPatch\", got {other:?}"));
                }
                None => {
                    return Err("webhook returned response.patch but not response.patchType".into());
                }
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("decoding the patch: {e}"))?;
            Some(serde_json::from_slice(&bytes).map_err(|e| format!("decoding the patch: {e}"))?)
        }
    };
    let warnings = resp
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    Ok(Answer {
        allowed,
        status: resp.get("status").cloned(),
        patch,
        warnings,
    })
}

impl Webhooks {
    /// Starts calling webhooks; until then (and in servers that never bind), none is called.
    pub fn bind(&self, sources: Sources) {
        let _ = self.sources.set(sources);
    }

    async fn mutating_hooks(&self, sources: &Sources) -> Vec<Hook> {
        let mut configs = cached(&sources.mutating).await;
        configs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        configs
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten().map(Hook::mutating))
            .collect()
    }

    async fn validating_hooks(&self, sources: &Sources) -> Vec<Hook> {
        let mut configs = cached(&sources.validating).await;
        configs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        configs
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten().map(Hook::validating))
            .collect()
    }

    /// The labels of the write's namespace, when it is namespaced.
    async fn namespace_labels(
        &self,
        sources: &Sources,
        attrs: &Attributes<'_>,
    ) -> Option<BTreeMap<String, String>> {
        let ns = attrs.namespace?;
        let namespaces = sources.namespaces.upgrade()?;
        Some(
            namespaces
                .get(None, ns)
                .await
                .ok()
                .and_then(|n| n.metadata.labels)
                .unwrap_or_default(),
        )
    }

    /// Whether `hook` is called for this write; `Err` when its matchConditions fail to
    /// evaluate and it fails closed.
    fn matches(
        &self,
        hook: &Hook,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        namespace_labels: Option<&BTreeMap<String, String>>,
        caller: &Caller,
    ) -> Result<bool, ApiError> {
        let req = predicate_request(attrs, object);
        if !matching::rules_match(hook.rules.as_ref(), &req, hook.equivalent) {
            return Ok(false);
        }
        let selected =
            matching::namespace_selected(hook.namespace_selector.as_ref(), &req, namespace_labels)
                .and_then(|ns| {
                    Ok(ns && matching::object_selected(hook.object_selector.as_ref(), &req)?)
                });
        match selected {
            Ok(false) => return Ok(false),
            Ok(true) => {}
            Err(e) => return Err(ApiError::internal(format!("webhook {:?}: {e}", hook.name))),
        }
        if hook.match_conditions.as_ref().is_none_or(Vec::is_empty) {
            return Ok(true);
        }
        let null = Value::Null;
        let request = admission_request(attrs, caller, object, "");
        let vars = [
            ("object", object.unwrap_or(&null)),
            ("oldObject", attrs.old.unwrap_or(&null)),
            ("request", &request),
        ];
        match matching::conditions_match(hook.match_conditions.as_ref(), &vars) {
            Ok(m) => Ok(m),
            Err(e) if hook.fail_closed => Err(ApiError::internal(format!(
                "failed calling webhook {:?}: {e}",
                hook.name
            ))),
            Err(e) => {
                tracing::warn!(webhook = %hook.name, error = %e, "matchConditions failed; failurePolicy Ignore");
                Ok(false)
            }
        }
    }

    /// Calls `hook`; `Ok(None)` when the call failed and the hook fails open.
    async fn call(
        &self,
        sources: &Sources,
        hook: &Hook,
        attrs: &Attributes<'_>,
        caller: &Caller,
        object: Option<&Value>,
        mutating: bool,
    ) -> Result<Option<Answer>, ApiError> {
        if attrs.dry_run && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            )));
        }
        let uid = minik8s_api::meta::new_uid();
        let body = review(hook, attrs, caller, object, &uid);
        let ca = hook
            .client_config
            .ca_bundle
            .as_ref()
            .map(|b| b.0.clone())
            .unwrap_or_default();
        let result = async {
            let target = sources
                .resolver
                .target(&hook.client_config, hook.timeout)
                .await?;
            let reply = client::post(&target, &ca, &body, hook.timeout).await?;
            answer(&reply, &uid, mutating)
        }
        .await;
        match result {
            Ok(a) => {
                for w in &a.warnings {
                    warn(w.clone());
                }
                Ok(Some(a))
            }
            Err(e) if hook.fail_closed => Err(ApiError::internal(format!(
                "failed calling webhook {:?}: failed to call webhook: {e}",
                hook.name
            ))),
            Err(e) => {
                tracing::warn!(webhook = %hook.name, error = %e, "failed calling webhook; failurePolicy Ignore");
                Ok(None)
            }
        }
    }

    /// Calls the mutating hook at `i` on `obj`; `Ok(true)` when it changed it.
    async fn mutate_once(
        &self,
        sources: &Sources,
        hook: &Hook,
        attrs: &Attributes<'_>,
        caller: &Caller,
        obj: &mut Value,
    ) -> Result<bool, ApiError> {
        let Some(answer) = self
            .call(sources, hook, attrs, caller, Some(obj), true)
            .await?
        else {
            return Ok(false);
        };
        if !answer.allowed {
            return Err(denied(&hook.name, answer.status.as_ref()));
        }
        let Some(patch) = answer.patch else {
            return Ok(false);
        };
        let mut patched = obj.clone();
        json_patch::patch(&mut patched, &patch).map_err(|e| {
            ApiError::internal(format!(
                "admission webhook {:?} returned a patch that does not apply: {e}",
                hook.name
            ))
        })?;
        let changed = patched != *obj;
        *obj = patched;
        Ok(changed)
    }
}

fn predicate_request<'a>(attrs: &'a Attributes<'a>, object: Option<&'a Value>) -> Request<'a> {
    Request {
        operation: attrs.operation.as_str(),
        group: &attrs.info.group,
        version: &attrs.info.version,
        resource: &attrs.info.plural,
        subresource: attrs.subresource.unwrap_or_default(),
        namespace: attrs.namespace.unwrap_or_default(),
        object,
        old: attrs.old,
    }
}

/// Whether a write is one webhooks are told about.
fn sent_out(attrs: &Attributes<'_>) -> bool {
    attrs.info.group != ADMISSION_GROUP
}

#[async_trait::async_trait]
impl ExternalAdmission for Webhooks {
    async fn active(&self, info: &minik8s_api::ResourceInfo) -> bool {
        let (Some(sources), Some(_)) = (self.sources.get(), caller()) else {
            return false;
        };
        info.group != ADMISSION_GROUP
            && (!cached(&sources.mutating).await.is_empty()
                || !cached(&sources.validating).await.is_empty()
                || !cached(&sources.policies.bindings).await.is_empty())
    }

    async fn mutate(&self, attrs: &Attributes<'_>, obj: &mut Value) -> Result<(), ApiError> {
        let (Some(sources), Some(caller)) = (self.sources.get(), caller()) else {
            return Ok(());
        };
        if !sent_out(attrs) {
            return Ok(());
        }
        let hooks = self.mutating_hooks(sources).await;
        if hooks.is_empty() {
            return Ok(());
        }
        let ns_labels = self.namespace_labels(sources, attrs).await;
        // How many changes the object had seen when each hook last ran.
        let mut seen: Vec<Option<usize>> = vec![None; hooks.len()];
        let mut changes = 0;
        for (i, hook) in hooks.iter().enumerate() {
            if !self.matches(hook, attrs, Some(obj), ns_labels.as_ref(), &caller)? {
                continue;
            }
            if self.mutate_once(sources, hook, attrs, &caller, obj).await? {
                changes += 1;
            }
            seen[i] = Some(changes);
        }
        // Reinvocation: once more, in order, for the hooks that asked for it and ran before
        // a change they did not see.
        for (i, hook) in hooks.iter().enumerate() {
            let Some(at) = seen[i] else { continue };
            if !hook.reinvoke || at == changes {
                continue;
            }
            if !self.matches(hook, attrs, Some(obj), ns_labels.as_ref(), &caller)? {
                continue;
            }
            self.mutate_once(sources, hook, attrs, &caller, obj).await?;
        }
        Ok(())
    }

    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>) -> Result<(), ApiError> {
        let (Some(sources), Some(caller)) = (self.sources.get(), caller()) else {
            return Ok(());
        };
        if !sent_out(attrs) {
            return Ok(());
        }
        let hooks = self.validating_hooks(sources).await;
        let bindings = cached(&sources.policies.bindings).await;
        if hooks.is_empty() && bindings.is_empty() {
            return Ok(());
        }
        let ns_labels = self.namespace_labels(sources, attrs).await;
        policy::admit(
            &sources.policies,
            bindings,
            &predicate_request(attrs, obj),
            attrs.name,
            &admission_request(attrs, &caller, obj, ""),
            ns_labels.as_ref(),
        )
        .await?;
        let mut called = Vec::new();
        for hook in &hooks {
            if self.matches(hook, attrs, obj, ns_labels.as_ref(), &caller)? {
                called.push(hook);
            }
        }
        let answers = futures::future::join_all(
            called
                .iter()
                .map(|hook| self.call(sources, hook, attrs, &caller, obj, false)),
        )
        .await;
        for (hook, answer) in called.iter().zip(answers) {
            if let Some(a) = answer?
                && !a.allowed
            {
                return Err(denied(&hook.name, a.status.as_ref()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_as_upstream() {
        let e = denied(
            "deny.example.com",
            Some(&json!({"code": 403, "reason": "Forbidden", "message": "no"})),
        );
        assert_eq!(e.code, 403);
        assert_eq!(e.reason, "Forbidden");
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request: no"
        );
        let e = denied("d.example.com", None);
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"d.example.com\" denied the request without explanation"
        );
        let e = denied(
            "d.example.com",
            Some(&json!({"code": 200, "reason": "Odd"})),
        );
        assert_eq!((e.code, e.reason), (400, ""));
        assert_eq!(
            e.message,
            "admission webhook \"d.example.com\" denied the request: Odd"
        );
    }

    #[test]
    fn answers_are_checked() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(r#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#);
        let body = json!({"response": {"uid": "u1", "allowed": true, "patch": patch, "patchType": "JSONPatch"}});
        let a = answer(&body, "u1", true).unwrap();
        assert!(a.allowed && a.patch.is_some());
        assert!(answer(&body, "u1", false).is_err());
        assert_eq!(
            answer(&body, "u2", true).err().unwrap(),
            "expected response.uid=\"u2\", got \"u1\""
        );
        let no_type = json!({"response": {"uid": "u1", "allowed": true, "patch": patch}});
        assert!(answer(&no_type, "u1", true).is_err());
        assert!(answer(&json!({}), "u1", true).is_err());
    }
}
