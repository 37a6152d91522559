//! The audit log (`--audit-policy-file`, `--audit-log-path`), as kube-apiserver writes it: the
//! policy picks a level for each request from who asks what; each stage of the request
//! (received, response started for long-running ones, complete, panic) is one
//! `audit.k8s.io/v1` Event line, with the request and response bodies when the level asks.
//!
//! Two layers: [`init`] runs first for every request and gives it its audit ID (the
//! `Audit-Id` response header, or the one the client sent); [`record`] runs once the user is
//! known and writes the events. Code serving the request adds annotations to its event with
//! [`annotate`] (authorization decisions, admission).

pub mod event;
pub mod log;
pub mod policy;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::authentication::v1::UserInfo as UserInfoV1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Status};
use minik8s_api::rbac::Attributes;

use self::event::{Event, ObjectReference, source_ips, strip_managed_fields};
use self::log::{LogBackend, Rotation};
use self::policy::{Level, Policy, RequestAudit, Stage};
use crate::auth::{Extra, UserExtra, UserInfo};
use crate::handlers::request::{self, Target};
use crate::server::ApiServer;

/// The request and response header naming a request's audit ID.
pub const AUDIT_ID_HEADER: &str = "audit-id";

/// The audit flags, named as kube-apiserver's.
#[derive(Clone, Debug, Default)]
pub struct AuditOptions {
    /// `--audit-policy-file`: without it nothing is audited.
    pub policy_file: Option<PathBuf>,
    /// `--audit-log-path`: a file, or `-` for standard output.
    pub log_path: Option<String>,
    /// `--audit-log-maxage` (days), `--audit-log-maxbackup`, `--audit-log-maxsize` (MB).
    pub log_max_age: u64,
    pub log_max_backup: usize,
    pub log_max_size: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit policy: {0}")]
    Policy(#[from] policy::PolicyError),
    #[error("audit log {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
}

/// The policy and where its events go.
#[derive(Debug)]
pub struct Auditor {
    policy: Policy,
    log: LogBackend,
}

impl Auditor {
    /// The auditor the flags ask for; `None` when they leave auditing off (no policy or no
    /// log path, as upstream).
    pub fn from_options(options: &AuditOptions) -> Result<Option<Arc<Auditor>>, AuditError> {
        let (Some(policy), Some(path)) = (&options.policy_file, &options.log_path) else {
            return Ok(None);
        };
        let policy = Policy::load(policy)?;
        let log = LogBackend::open(
            path,
            Rotation {
                max_size_mb: options.log_max_size,
                max_backups: options.log_max_backup,
                max_age_days: options.log_max_age,
            },
        )
        .map_err(|source| AuditError::Log {
            path: path.clone(),
            source,
        })?;
        Ok(Some(Arc::new(Auditor { policy, log })))
    }

    fn write(&self, event: &Event, omit: &[Stage]) {
        if omit.contains(&event.stage) {
            return;
        }
        match serde_json::to_vec(event) {
            Ok(mut line) => {
                line.push(b'\n');
                self.log.write_line(&line);
            }
            Err(e) => tracing::error!(error = %e, "encoding an audit event failed"),
        }
    }
}

/// A request's audit ID, set by [`init`].
#[derive(Clone, Debug)]
pub struct AuditId(pub String);

/// The user who made a request that acts as another (impersonation): set by authentication
/// beside the `UserInfo` it acts as.
#[derive(Clone, Debug)]
pub struct Impersonator {
    pub user: UserInfo,
    pub extra: Extra,
}

/// The annotations of a request's audit event, shared by whatever serves it.
#[derive(Clone, Debug, Default)]
pub struct Annotations(Arc<Mutex<BTreeMap<String, String>>>);

impl Annotations {
    /// Adds `key`; a key already set keeps its first value, as upstream's
    /// `AddAuditAnnotation`.
    pub fn add(&self, key: &str, value: &str) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(key) {
            Some(existing) if existing != value => {
                tracing::warn!(key, existing = %existing, value, "audit annotation already set");
            }
            Some(_) => {}
            None => {
                map.insert(key.to_string(), value.to_string());
            }
        }
    }

    fn snapshot(&self) -> BTreeMap<String, String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

tokio::task_local! {
    static CURRENT: Annotations;
}

/// Adds an annotation to the audit event of the request being served on this task (a no-op
/// when the request is not audited). Authorizers add `authorization.k8s.io/decision` and
/// `authorization.k8s.io/reason`; with the request's extensions at hand,
/// `extensions.get::<Annotations>()` reaches the same map.
pub fn annotate(key: &str, value: &str) {
    let _ = CURRENT.try_with(|a| a.add(key, value));
}

/// Middleware, outermost: the request's audit ID, from its `Audit-Id` header or new, sent
/// back on every response.
pub async fn init(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(AUDIT_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(AuditId(id.clone()));
    let mut resp = next.run(req).await;
    if let Ok(value) = http::HeaderValue::from_str(&id) {
        resp.headers_mut().insert(AUDIT_ID_HEADER, value);
    }
    resp
}

fn user_v1(user: &UserInfo, extra: &Extra) -> UserInfoV1 {
    UserInfoV1 {
        username: Some(user.name.clone()),
        uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
        groups: Some(user.groups.clone()).filter(|g| !g.is_empty()),
        extra: Some(extra.clone()).filter(|e| !e.is_empty()),
    }
}

/// Upstream's long-running requests: watches, proxies, and the attach, exec, log,
/// port-forward and proxy subresources. Their events include `ResponseStarted`.
fn long_running(target: Option<&Target>) -> bool {
    match target {
        Some(Target::Resource(r)) => {
            r.verb == request::Verb::Watch
                || r.subresource.as_deref().is_some_and(|s| {
                    matches!(s, "attach" | "exec" | "proxy" | "log" | "portforward")
                })
        }
        _ => false,
    }
}

/// The attributes the policy is matched against (those of the authorizers, for the user who
/// made the request), and what the request names.
fn describe(req: &Request) -> (Attributes, Option<Target>) {
    let user = match req.extensions().get::<Impersonator>() {
        Some(i) => i.user.clone(),
        None => req
            .extensions()
            .get::<UserInfo>()
            .cloned()
            .unwrap_or_else(UserInfo::anonymous),
    };
    let attrs = crate::handlers::layers::attributes(&user, req.method(), req.uri());
    let target = request::parse(req.method(), req.uri().path(), req.uri().query());
    (attrs, target)
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// A request body or response body as the event records it: JSON (YAML apply patches are
/// turned into JSON); other encodings are left out.
fn as_json(body: &[u8], content_type: Option<&str>) -> Option<serde_json::Value> {
    if body.is_empty() {
        return None;
    }
    let ct = content_type.unwrap_or("application/json");
    if ct.contains("yaml") {
        return serde_yaml::from_slice(body).ok();
    }
    if ct.contains("json") {
        return serde_json::from_slice(body).ok();
    }
    None
}

/// One request's event as it is written at each stage.
struct Recorder {
    auditor: Arc<Auditor>,
    config: RequestAudit,
    event: Event,
    annotations: Annotations,
}

impl Recorder {
    fn emit(&mut self, stage: Stage) {
        self.event.stage = stage;
        self.event.stage_timestamp = if stage == Stage::RequestReceived {
            self.event.request_received_timestamp.clone()
        } else {
            now()
        };
        self.event.annotations = self.annotations.snapshot();
        self.auditor.write(&self.event, &self.config.omit_stages);
    }

    fn keep_object(&self, mut object: serde_json::Value) -> serde_json::Value {
        if self.config.omit_managed_fields {
            strip_managed_fields(&mut object);
        }
        object
    }
}

/// The `responseStatus` of a response: a Status body's fields, else its code.
fn response_status(code: u16, body: Option<&serde_json::Value>) -> Status {
    let from_body = body
        .filter(|b| b["kind"] == "Status")
        .and_then(|b| serde_json::from_value::<Status>(b.clone()).ok());
    match from_body {
        Some(s) => Status {
            status: s.status,
            message: s.message,
            reason: s.reason,
            details: s.details,
            code: Some(code as i32),
            ..Default::default()
        },
        None => Status {
            code: Some(code as i32),
            ..Default::default()
        },
    }
}

/// Middleware, after authentication: writes the request's events when the policy asks.
pub async fn record(State(server): State<Arc<ApiServer>>, req: Request, next: Next) -> Response {
    let Some(auditor) = server.audit.get().cloned() else {
        return next.run(req).await;
    };
    let (attrs, target) = describe(&req);
    let config = auditor.policy.evaluate(&attrs);
    if config.level == Level::None {
        return next.run(req).await;
    }
    let ext = req.extensions();
    let (user, extra, impersonated) = match ext.get::<Impersonator>() {
        Some(i) => {
            let acting = ext.get::<UserInfo>().cloned().unwrap_or_default();
            let acting_extra = ext
                .get::<UserExtra>()
                .map(|e| e.0.clone())
                .unwrap_or_default();
            (
                i.user.clone(),
                i.extra.clone(),
                Some(user_v1(&acting, &acting_extra)),
            )
        }
        None => (
            ext.get::<UserInfo>()
                .cloned()
                .unwrap_or_else(UserInfo::anonymous),
            ext.get::<UserExtra>()
                .map(|e| e.0.clone())
                .unwrap_or_default(),
            None,
        ),
    };
    let object_ref = match &target {
        Some(Target::Resource(r)) => Some(ObjectReference {
            resource: r.resource.clone(),
            namespace: r.namespace.clone().unwrap_or_default(),
            name: r.name.clone().unwrap_or_default(),
            api_group: r.group.clone(),
            api_version: r.version.clone(),
            subresource: r.subresource.clone().unwrap_or_default(),
            ..Default::default()
        }),
        _ => None,
    };
    let received = now();
    let annotations = Annotations::default();
    let mut rec = Recorder {
        event: Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: config.level,
            audit_id: ext
                .get::<AuditId>()
                .map(|a| a.0.clone())
                .unwrap_or_default(),
            stage: Stage::RequestReceived,
            request_uri: req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default(),
            verb: attrs.verb.clone(),
            user: user_v1(&user, &extra),
            impersonated_user: impersonated,
            source_ips: source_ips(
                req.headers(),
                ext.get::<crate::serve::RemoteAddr>().map(|a| a.0.ip()),
            ),
            user_agent: req
                .headers()
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            object_ref,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: received.clone(),
            stage_timestamp: received,
            annotations: BTreeMap::new(),
        },
        auditor,
        config,
        annotations: annotations.clone(),
    };
    let long_running = long_running(target.as_ref());
    let connect =
        matches!(&target, Some(Target::Resource(r)) if crate::handlers::connect::is_connect(r));
    let mut req = req;
    // The request's object: written objects name themselves (a create's name) at Metadata,
    // and are recorded whole from Request.
    if matches!(&target, Some(Target::Resource(_))) && !connect && !long_running {
        let content_type = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let (parts, body) = req.into_parts();
        let body = match crate::handlers::layers::read_body(body).await {
            Ok(body) => body,
            Err(resp) => return resp,
        };
        if let Some(object) = as_json(&body, content_type.as_deref()) {
            if let Some(r) = rec.event.object_ref.as_mut() {
                r.complete_from(&object);
            }
            if rec.config.level >= Level::Request {
                rec.event.request_object = Some(rec.keep_object(object));
            }
        }
        req = Request::from_parts(parts, Body::from(body));
    }
    req.extensions_mut().insert(annotations.clone());
    rec.emit(Stage::RequestReceived);
    let run = CURRENT.scope(annotations, next.run(req));
    let resp = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            rec.event.response_status = Some(Status {
                code: Some(500),
                status: Some("Failure".into()),
                reason: Some("InternalError".into()),
                message: Some(format!("APIServer panic'd: {what}")),
                ..Default::default()
            });
            rec.emit(Stage::Panic);
            std::panic::resume_unwind(panic);
        }
    };
    finish(rec, resp, target.as_ref(), long_running).await
}

/// Writes the events of the response: `ResponseStarted` and, when its stream ends,
/// `ResponseComplete` for a long-running request; else `ResponseComplete` with the response's
/// object when the level asks for it.
async fn finish(
    mut rec: Recorder,
    resp: Response,
    target: Option<&Target>,
    long_running: bool,
) -> Response {
    let code = resp.status().as_u16();
    if long_running {
        rec.event.response_status = Some(response_status(code, None));
        rec.emit(Stage::ResponseStarted);
        return complete_when_done(rec, resp);
    }
    // The body is read when it is recorded, or when it is a failure's Status.
    let wanted = matches!(
        target,
        Some(Target::Resource(_)) | Some(Target::Group { .. }) | Some(Target::GroupVersion { .. })
    ) && (rec.config.level == Level::RequestResponse || code >= 300);
    if !wanted {
        rec.event.response_status = Some(response_status(code, None));
        rec.emit(Stage::ResponseComplete);
        return resp;
    }
    let content_type = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (parts, body) = resp.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(error = %e, "reading a response for the audit log failed");
            rec.event.response_status = Some(response_status(code, None));
            rec.emit(Stage::ResponseComplete);
            return Response::from_parts(parts, Body::empty());
        }
    };
    let object = as_json(&body, content_type.as_deref());
    rec.event.response_status = Some(response_status(code, object.as_ref()));
    if rec.config.level == Level::RequestResponse {
        rec.event.response_object = object.map(|o| rec.keep_object(o));
    }
    rec.emit(Stage::ResponseComplete);
    Response::from_parts(parts, Body::from(body))
}

/// Writes `ResponseComplete` when the streamed body of a long-running response ends (or the
/// client goes away).
fn complete_when_done(rec: Recorder, resp: Response) -> Response {
    struct Complete(Recorder);
    impl Drop for Complete {
        fn drop(&mut self) {
            self.0.emit(Stage::ResponseComplete);
        }
    }
    let done = Complete(rec);
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _keep = &done;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_status_keeps_its_fields() {
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"x\" not found", "reason": "NotFound",
            "details": {"name": "x", "kind": "configmaps"}, "code": 404
        });
        let encode = |status| {
            let mut v = serde_json::to_value(event_with(status)).unwrap();
            v["responseStatus"].take()
        };
        let s = encode(response_status(404, Some(&body)));
        assert_eq!(
            s,
            serde_json::json!({
                "metadata": {}, "status": "Failure", "message": "configmaps \"x\" not found",
                "reason": "NotFound", "details": {"name": "x", "kind": "configmaps"}, "code": 404
            })
        );
        let ok = encode(response_status(200, None));
        assert_eq!(ok, serde_json::json!({"metadata": {}, "code": 200}));
    }

    fn event_with(status: Status) -> Event {
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "id".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/".into(),
            verb: "get".into(),
            user: UserInfoV1::default(),
            impersonated_user: None,
            source_ips: vec![],
            user_agent: String::new(),
            object_ref: None,
            response_status: Some(status),
            request_object: None,
            response_object: None,
            request_received_timestamp: now(),
            stage_timestamp: now(),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn long_running_requests_are_watches_and_streams() {
        let parse = |m: http::Method, p: &str, q: Option<&str>| request::parse(&m, p, q);
        let watch = parse(http::Method::GET, "/api/v1/pods", Some("watch=true"));
        assert!(long_running(watch.as_ref()));
        let logs = parse(http::Method::GET, "/api/v1/namespaces/d/pods/p/log", None);
        assert!(long_running(logs.as_ref()));
        let get = parse(http::Method::GET, "/api/v1/namespaces/d/pods/p", None);
        assert!(!long_running(get.as_ref()));
    }
}
