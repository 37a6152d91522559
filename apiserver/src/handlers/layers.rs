//! What requests go through before their handler, as tower layers of the router, so each
//! cross-cutting concern is written once and the handlers only serve: authentication (and
//! impersonation) for every path; for `/api` and `/apis`, the parsed request target
//! (upstream's WithRequestInfo), a tracing span with the request metrics, and the body limit;
//! for every authenticated request, the count of requests in flight.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use http::StatusCode;
use minik8s_api::ApiError;
use tracing::Instrument;

use super::codec::{MAX_BODY_BYTES, status_response};
use super::connect;
use super::request::{self, ResourceRequest, Target, Verb};
use super::resource::Endpoint;
use crate::auth::{
    Authenticator, ClientCertIdentity, Extra, UserExtra, UserInfo, impersonate, public,
};
use crate::metrics::{COMPONENT, LongRunning, RequestLabels, dry_run_label, is_mutating};
use crate::server::ApiServer;

/// Middleware: attaches a `UserInfo` (and its `UserExtra`) to the request or answers 401;
/// then applies impersonation headers.
pub async fn authenticate(
    State(auth): State<std::sync::Arc<Authenticator>>,
    mut req: Request,
    next: Next,
) -> Response {
    let bearer = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_string());
    let user = match (req.extensions().get::<ClientCertIdentity>(), bearer) {
        (_, Some(token)) => match auth.bearer(&token).await {
            Some(u) => Some(u),
            None => return status_response(&ApiError::unauthorized()),
        },
        (Some(cert), None) => Some((cert.0.clone(), Extra::new())),
        (None, None) => None,
    };
    let (user, extra) = match user {
        Some((mut u, extra)) => {
            if !u.groups.iter().any(|g| g == "system:authenticated") {
                u.groups.push("system:authenticated".into());
            }
            (u, extra)
        }
        None => match auth.anonymous {
            Some(true) => (UserInfo::anonymous(), Extra::new()),
            None if public(req.uri().path()) => (UserInfo::anonymous(), Extra::new()),
            _ => return status_response(&ApiError::unauthorized()),
        },
    };
    let (user, extra) = match impersonate(&user, req.headers(), auth.authorizer.as_deref()) {
        Ok(Some(acting)) => {
            tracing::debug!(user = %user.name, as_user = %acting.0.name, "impersonating");
            req.extensions_mut().insert(crate::audit::Impersonator {
                user: user.clone(),
                extra: extra.clone(),
            });
            let headers = req.headers_mut();
            let names: Vec<_> = headers
                .keys()
                .filter(|k| k.as_str().starts_with("impersonate-"))
                .cloned()
                .collect();
            for name in names {
                headers.remove(name);
            }
            acting
        }
        Ok(None) => (user, extra),
        Err(e) => return status_response(&e),
    };
    req.extensions_mut().insert(user);
    req.extensions_mut().insert(UserExtra(extra));
    next.run(req).await
}

/// The attributes authorizers judge a request by (upstream's `GetAuthorizerAttributes`).
pub fn attributes(
    user: &UserInfo,
    method: &http::Method,
    uri: &http::Uri,
) -> minik8s_api::rbac::Attributes {
    let mut a = minik8s_api::rbac::Attributes {
        user: user.name.clone(),
        groups: user.groups.clone(),
        path: uri.path().to_string(),
        ..Default::default()
    };
    match request::parse(method, uri.path(), uri.query()) {
        Some(Target::Resource(r)) => {
            a.resource_request = true;
            a.verb = r.verb.as_str().to_string();
            a.api_group = r.group;
            a.namespace = r.namespace.unwrap_or_default();
            a.resource = r.resource;
            a.subresource = r.subresource.unwrap_or_default();
            a.name = r.name.unwrap_or_default();
        }
        _ => a.verb = method.as_str().to_lowercase(),
    }
    a
}

/// Middleware: the request is served only when the authorizer chain allows its user to;
/// otherwise 403 with upstream's message.
pub async fn authorize(State(server): State<Arc<ApiServer>>, req: Request, next: Next) -> Response {
    let Some(authorizer) = &server.options.authorizer else {
        return next.run(req).await;
    };
    let Some(user) = req.extensions().get::<UserInfo>() else {
        return next.run(req).await;
    };
    let a = attributes(user, req.method(), req.uri());
    let decision = authorizer.authorize(&a);
    if decision == crate::authz::Decision::Allow {
        crate::audit::annotate("authorization.k8s.io/decision", "allow");
        return next.run(req).await;
    }
    let why = crate::authz::forbidden_reason(&a, &decision);
    crate::audit::annotate("authorization.k8s.io/decision", "forbid");
    if let crate::authz::Decision::Deny(r) | crate::authz::Decision::NoOpinion(r) = &decision
        && !r.is_empty()
    {
        crate::audit::annotate("authorization.k8s.io/reason", r);
    }
    tracing::debug!(user = %a.user, verb = %a.verb, resource = %a.combined_resource(), path = %a.path, "forbidden");
    let err = if a.resource_request {
        ApiError::forbidden(
            minik8s_api::Target {
                group: &a.api_group,
                resource: &a.resource,
                name: &a.name,
            },
            &why,
        )
    } else {
        ApiError::new(403, "Forbidden", format!("forbidden: {why}"))
    };
    status_response(&err)
}

/// What a request under `/api` or `/apis` names, parsed once by [`request_info`] for the layers
/// after it and the dispatcher.
#[derive(Clone)]
pub struct RequestInfo {
    pub target: Target,
    /// The endpoint serving the named resource; `None` for discovery paths and for resources
    /// not served.
    pub endpoint: Option<Arc<dyn Endpoint>>,
}

impl RequestInfo {
    /// The resource request and its endpoint, when the request names a served resource.
    pub fn served(&self) -> Option<(&ResourceRequest, &Arc<dyn Endpoint>)> {
        match (&self.target, &self.endpoint) {
            (Target::Resource(r), Some(endpoint)) => Some((r, endpoint)),
            _ => None,
        }
    }
}

/// The served resource a request names, if any, as [`request_info`] attached it.
fn served(req: &Request) -> Option<&ResourceRequest> {
    let info = req.extensions().get::<RequestInfo>()?;
    info.served().map(|(r, _)| r)
}

/// Middleware: attaches the [`RequestInfo`] of the path; a path that names nothing gets none.
pub async fn request_info(
    State(server): State<Arc<ApiServer>>,
    mut req: Request,
    next: Next,
) -> Response {
    let uri = req.uri();
    if let Some(target) = request::parse(req.method(), uri.path(), uri.query()) {
        let endpoint = match &target {
            Target::Resource(r) => server.endpoint(&r.group, &r.version, &r.resource),
            Target::Group { .. } | Target::GroupVersion { .. } => None,
        };
        req.extensions_mut()
            .insert(RequestInfo { target, endpoint });
    }
    next.run(req).await
}

/// Subresources upstream counts as `CONNECT` and serves as long-running requests.
const CONNECT_SUBRESOURCES: &[&str] = &["log", "exec", "portforward", "attach", "proxy"];

fn is_connect_subresource(r: &ResourceRequest) -> bool {
    r.subresource
        .as_deref()
        .is_some_and(|s| CONNECT_SUBRESOURCES.contains(&s))
}

/// Upstream's long-running check (`BasicLongRunningRequestCheck`): watches and the
/// streaming subresources, which are neither limited nor counted in flight.
fn is_long_running(r: &ResourceRequest) -> bool {
    r.verb == Verb::Watch || is_connect_subresource(r)
}

/// The labels upstream's request metrics give `r` (`cleanVerb`, `CleanScope`, `cleanDryRun`).
fn request_labels(r: &ResourceRequest, req: &Request) -> RequestLabels {
    let apply = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/apply-patch"));
    let verb = if is_connect_subresource(r) {
        "CONNECT"
    } else {
        match r.verb {
            Verb::Get => "GET",
            Verb::List => "LIST",
            Verb::Watch => "WATCH",
            Verb::Create => "POST",
            Verb::Update => "PUT",
            Verb::Patch if apply => "APPLY",
            Verb::Patch => "PATCH",
            Verb::Delete | Verb::DeleteCollection => "DELETE",
            Verb::Unnamed => "other",
        }
    };
    let scope = if r.name.is_some() || r.verb == Verb::Create {
        "resource"
    } else if r.namespace.is_some() {
        "namespace"
    } else {
        "cluster"
    };
    RequestLabels {
        verb,
        dry_run: dry_run_label(req.uri().query()),
        group: r.group.clone(),
        version: r.version.clone(),
        resource: r.resource.clone(),
        subresource: r.subresource.clone().unwrap_or_default(),
        scope,
        component: COMPONENT,
    }
}

/// Middleware: counts and times the requests of the health endpoints' roots (`/healthz`,
/// `/livez`, `/readyz`) in the request metrics, as upstream instruments them: the path as
/// the subresource, no component.
pub async fn observe_health(
    State(server): State<Arc<ApiServer>>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path();
    if !matches!(path, "/healthz" | "/livez" | "/readyz") {
        return next.run(req).await;
    }
    let labels = RequestLabels {
        verb: "GET",
        subresource: path.to_string(),
        ..Default::default()
    };
    let started = Instant::now();
    let resp = next.run(req).await;
    server
        .metrics
        .observe_request(&labels, resp.status().as_u16(), started.elapsed());
    resp
}

/// Middleware: counts each authenticated request that is not long-running in
/// `apiserver_current_inflight_requests` while it is served (upstream's maxinflight filter,
/// after authentication), by whether it reads or writes.
pub async fn inflight(State(server): State<Arc<ApiServer>>, req: Request, next: Next) -> Response {
    let uri = req.uri();
    let verb = match request::parse(req.method(), uri.path(), uri.query()) {
        Some(Target::Resource(r)) if is_long_running(&r) => return next.run(req).await,
        Some(Target::Resource(r)) => r.verb.as_str().to_string(),
        _ => req.method().as_str().to_lowercase(),
    };
    let _counted = server.metrics.inflight.start(is_mutating(&verb));
    next.run(req).await
}

/// Middleware: a tracing span around each request to a served resource, which is counted in
/// `apiserver_request_total` and timed in `apiserver_request_duration_seconds` with
/// upstream's labels. A long-running request (a watch, logs, exec, attach, port-forward,
/// proxy) is counted in `apiserver_longrunning_requests` for as long as its stream (or its
/// upgraded connection) lives, and counted and timed when it ends, as upstream records it
/// when its handler returns; the events a watch sends are counted in
/// `apiserver_watch_events_total`.
pub async fn observe(
    State(server): State<Arc<ApiServer>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(r) = served(&req) else {
        return next.run(req).await;
    };
    let started = Instant::now();
    let verb = r.verb.clone();
    let labels = request_labels(r, &req);
    let watched_kind = req
        .extensions()
        .get::<RequestInfo>()
        .and_then(|i| i.endpoint.as_ref())
        .map(|e| e.info().kind.clone());
    let long_running = is_long_running(r);
    let connect = connect::is_connect(r);
    let span = tracing::info_span!(
        "request",
        verb = verb.as_str(),
        resource = %labels.resource,
        subresource = %labels.subresource,
        namespace = r.namespace.as_deref().unwrap_or(""),
        name = r.name.as_deref().unwrap_or(""),
    );
    // Writes and connects are admitted for their user (admission webhooks are told who).
    let writes = matches!(
        verb,
        Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
    ) || connect;
    let caller = req
        .extensions()
        .get::<UserInfo>()
        .filter(|_| writes)
        .map(|user| crate::admission::webhook::Caller {
            user: user.clone(),
            extra: req
                .extensions()
                .get::<UserExtra>()
                .map(|e| e.0.clone())
                .unwrap_or_default(),
            warnings: Default::default(),
        });
    let hold =
        long_running.then(|| LongRunning::start(server.metrics.clone(), labels.clone(), started));
    if let Some(hold) = &hold {
        req.extensions_mut().insert(hold.clone());
    }
    let run = next.run(req).instrument(span.clone());
    let resp = match caller {
        Some(caller) => {
            let warnings = caller.warnings.clone();
            let resp = crate::admission::webhook::serve_as(caller, run).await;
            let warnings = std::mem::take(&mut *warnings.lock().unwrap_or_else(|e| e.into_inner()));
            super::codec::with_warnings(resp, &warnings)
        }
        None => run.await,
    };
    let code = resp.status().as_u16();
    span.in_scope(|| {
        tracing::debug!(
            code,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "served"
        )
    });
    let Some(hold) = hold else {
        server
            .metrics
            .observe_request(&labels, code, started.elapsed());
        return resp;
    };
    hold.answered(code);
    let events = match (
        &watched_kind,
        verb == Verb::Watch && resp.status() == StatusCode::OK,
    ) {
        (Some(kind), true) => Some(WatchEvents {
            count: server.metrics.watch_events.with_label_values(&[
                &labels.group,
                &labels.version,
                kind,
            ]),
            sizes: server.metrics.watch_event_sizes.with_label_values(&[
                &labels.group,
                &labels.version,
                kind,
            ]),
        }),
        _ => None,
    };
    held_until_sent(resp, hold, events)
}

/// A watch's event counters: each frame of its body is one event.
struct WatchEvents {
    count: prometheus::IntCounter,
    sizes: prometheus::Histogram,
}

/// Keeps `hold` for as long as the response body streams, counting watch events on the way.
fn held_until_sent(resp: Response, hold: LongRunning, events: Option<WatchEvents>) -> Response {
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _keep = &hold;
        if let (Some(events), Ok(bytes)) = (&events, &chunk) {
            events.count.inc();
            events.sizes.observe(bytes.len() as f64);
        }
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Middleware: reads the whole body of a request to a served resource, answering 413 past
/// [`MAX_BODY_BYTES`], so a client cannot make the server buffer without bound. Connect
/// requests (logs, exec, attach, port-forward, proxy) pass unread: their bodies stream to a
/// kubelet.
pub async fn limit_body(req: Request, next: Next) -> Response {
    if served(&req).is_none_or(connect::is_connect) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match read_body(body).await {
        Ok(body) => next.run(Request::from_parts(parts, Body::from(body))).await,
        Err(resp) => resp,
    }
}

/// The whole of `body`, or the 413 Status for a body over [`MAX_BODY_BYTES`] (or one that
/// could not be read).
pub async fn read_body(body: Body) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| {
            status_response(&ApiError::request_entity_too_large(format!(
                "limit is {MAX_BODY_BYTES}"
            )))
        })
}
