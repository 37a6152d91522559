//! HTTP routing: health, version, metrics, discovery and OpenAPI endpoints, and the dispatcher
//! that hands every `/api` and `/apis` resource request to the resource's endpoint.

pub mod authentication;
pub mod authorization;
pub mod codec;
pub mod connect;
pub mod custom;
pub mod discovery;
pub mod fieldmanager;
pub mod health;
pub mod layers;
pub mod metrics_api;
pub mod namespaces;
pub mod openapi;
pub mod pods;
pub mod render;
pub mod request;
pub mod resource;
pub mod serviceaccounts;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures::StreamExt;
use http::{StatusCode, header};
use minik8s_api::ApiError;
use tracing::Instrument;

use self::codec::{Failure, json, status_response};
use self::request::{Target, Verb};
use self::resource::ApiRequest;
use crate::auth::{self, UserInfo};
use crate::server::ApiServer;

/// The whole HTTP API of the server, testable without sockets.
pub fn router(server: Arc<ApiServer>) -> Router {
    // Upstream serves the discovery roots and /version with a trailing slash too (clients
    // such as kr8s and the Python client ask for `/api/`).
    Router::new()
        .merge(health::routes())
        .route("/version", get(version))
        .route("/version/", get(version))
        .route("/metrics", get(metrics))
        .route("/api", get(api_root))
        .route("/api/", get(api_root))
        .route("/apis", get(apis_root))
        .route("/apis/", get(apis_root_slash))
        .route("/api/{*rest}", any(api))
        .route("/apis/{*rest}", any(api))
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::index))
        .route("/openapi/v3/{*path}", get(openapi::group_version))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            server.auth.clone(),
            layers::authenticate,
        ))
        .with_state(server)
}

async fn version() -> Response {
    json(StatusCode::OK, &crate::server::version_info())
}

async fn metrics(State(server): State<Arc<ApiServer>>) -> Response {
    let mut resp = server.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

async fn not_found() -> Failure {
    Failure(ApiError::path_not_found())
}

async fn api_root(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    discovery::core_versions(&server.resources(), req.headers(), &server.address)
}

async fn apis_root(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    discovery::groups(&server.resources(), req.headers(), true)
}

async fn apis_root_slash(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    discovery::groups(&server.resources(), req.headers(), false)
}

async fn api(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let target = match request::parse(&parts.method, parts.uri.path(), parts.uri.query()) {
        Some(t) => t,
        None => return status_response(&ApiError::path_not_found()),
    };
    let resources = || server.resources();
    let r = match target {
        Target::Group { group } => {
            return discovery::group(&resources(), &group)
                .unwrap_or_else(|| status_response(&ApiError::path_not_found()));
        }
        Target::GroupVersion { group, version } => {
            return discovery::resource_list(&resources(), &group, &version)
                .unwrap_or_else(|| status_response(&ApiError::path_not_found()));
        }
        Target::Resource(r) => r,
    };
    let Some(endpoint) = server.endpoint(&r.group, &r.version, &r.resource) else {
        return status_response(&ApiError::path_not_found());
    };
    let verb = r.verb.clone();
    let resource = r.resource.clone();
    let subresource = r.subresource.clone().unwrap_or_default();
    let span = tracing::info_span!(
        "request",
        verb = verb.as_str(),
        resource = %resource,
        subresource = %subresource,
        namespace = r.namespace.as_deref().unwrap_or(""),
        name = r.name.as_deref().unwrap_or(""),
    );
    if connect::is_connect(&r) {
        // Served by a kubelet: the body (if any) and upgrades pass through unread.
        let resp = connect::serve(&server, r, Request::from_parts(parts, body))
            .instrument(span.clone())
            .await;
        let code = resp.status().as_u16().to_string();
        server
            .metrics
            .requests
            .with_label_values(&[verb.as_str(), &resource, &subresource, &code])
            .inc();
        span.in_scope(|| tracing::debug!(code = %code, elapsed_ms = started.elapsed().as_millis() as u64, "served"));
        return resp;
    }
    let body = match axum::body::to_bytes(body, codec::MAX_BODY_BYTES + 1).await {
        Ok(b) if b.len() <= codec::MAX_BODY_BYTES => b,
        _ => {
            return status_response(&ApiError::request_entity_too_large(format!(
                "limit is {}",
                codec::MAX_BODY_BYTES
            )));
        }
    };
    let query = parts
        .uri
        .query()
        .map(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).unwrap_or_default())
        .unwrap_or_default();
    let user = parts
        .extensions
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(UserInfo::anonymous);
    let extra = parts
        .extensions
        .get::<auth::UserExtra>()
        .map(|e| e.0.clone())
        .unwrap_or_default();
    let req = ApiRequest {
        target: r,
        query,
        headers: parts.headers,
        body,
        user,
        extra,
    };
    let resp = endpoint.serve(req).instrument(span.clone()).await;
    let code = resp.status().as_u16().to_string();
    server
        .metrics
        .requests
        .with_label_values(&[verb.as_str(), &resource, &subresource, &code])
        .inc();
    server
        .metrics
        .request_duration
        .with_label_values(&[verb.as_str(), &resource, &subresource])
        .observe(started.elapsed().as_secs_f64());
    span.in_scope(|| tracing::debug!(code = %code, elapsed_ms = started.elapsed().as_millis() as u64, "served"));
    if verb == Verb::Watch && resp.status() == StatusCode::OK {
        return count_watch(&server, &resource, resp);
    }
    resp
}

/// Keeps the open-watch gauge true for as long as the stream body lives.
fn count_watch(server: &ApiServer, resource: &str, resp: Response) -> Response {
    struct Open(prometheus::IntGauge);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    let gauge = server.metrics.watches.with_label_values(&[resource]);
    gauge.inc();
    let open = Open(gauge);
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _keep = &open;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}
