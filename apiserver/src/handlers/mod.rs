//! HTTP routing: health, version, metrics, discovery and OpenAPI endpoints, and the dispatcher
//! that hands every `/api` and `/apis` resource request to the resource's endpoint.

pub mod authentication;
pub mod authorization;
pub mod certificates;
pub mod codec;
pub mod component_status;
pub mod connect;
pub mod custom;
pub mod discovery;
pub mod eviction;
pub mod fieldmanager;
pub mod health;
pub mod layers;
pub mod metrics_api;
pub mod namespaces;
pub mod openapi;
pub mod openid;
pub mod pods;
pub mod proxy;
pub mod render;
pub mod request;
pub mod resource;
pub mod scale;
pub mod serviceaccounts;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use http::{StatusCode, header};
use minik8s_api::ApiError;

use self::codec::{Failure, json, status_response};
use self::layers::RequestInfo;
use self::request::Target;
use self::resource::ApiRequest;
use crate::auth::{self, UserInfo};
use crate::server::ApiServer;

/// The whole HTTP API of the server, testable without sockets.
pub fn router(server: Arc<ApiServer>) -> Router {
    // The last layer added runs first: the target is parsed once, then the request is
    // observed (span, metrics) with its body read inside, as upstream counts 413s too.
    let resources = any(api)
        .layer(middleware::from_fn(layers::limit_body))
        .layer(middleware::from_fn_with_state(
            server.clone(),
            layers::observe,
        ))
        .layer(middleware::from_fn_with_state(
            server.clone(),
            layers::request_info,
        ));
    // Upstream serves the discovery roots and /version with a trailing slash too (clients
    // such as kr8s and the Python client ask for `/api/`).
    Router::new()
        .merge(health::routes().layer(middleware::from_fn_with_state(
            server.clone(),
            layers::observe_health,
        )))
        .merge(openid::routes())
        .route("/version", get(version))
        .route("/version/", get(version))
        .route("/metrics", get(metrics))
        .route("/api", get(api_root))
        .route("/api/", get(api_root))
        .route("/apis", get(apis_root))
        .route("/apis/", get(apis_root_slash))
        .route("/api/{*rest}", resources.clone())
        .route("/apis/{*rest}", resources)
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::index))
        .route("/openapi/v3/{*path}", get(openapi::group_version))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            server.clone(),
            layers::authorize,
        ))
        // Counted in flight once authenticated, as upstream's maxinflight filter.
        .layer(middleware::from_fn_with_state(
            server.clone(),
            layers::inflight,
        ))
        // Audited once the user is known, before authorization (which annotates the event).
        .layer(middleware::from_fn_with_state(
            server.clone(),
            crate::audit::record,
        ))
        .layer(middleware::from_fn_with_state(
            server.auth.clone(),
            layers::authenticate,
        ))
        .layer(middleware::from_fn(crate::audit::init))
        // Static files that hold no data, served to anyone: see `dashboard`'s docs.
        .merge(crate::dashboard::routes())
        .with_state(server)
}

async fn version() -> Response {
    json(StatusCode::OK, &crate::server::version_info())
}

async fn metrics(State(server): State<Arc<ApiServer>>) -> Response {
    server
        .metrics
        .count_objects(&stored_resources(&server))
        .await;
    let mut resp = server.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// The resources kept in the store, each once (its versions share the objects): upstream's
/// group-resource (`apiserver_storage_objects`'s label) and the key root. Those without
/// list and watch (reviews, bindings, metrics, component statuses) keep nothing.
fn stored_resources(server: &ApiServer) -> Vec<(String, String)> {
    let mut seen = std::collections::BTreeMap::new();
    for info in server.resources() {
        if !(info.has_verb("list") && info.has_verb("watch")) {
            continue;
        }
        let label = match info.group.as_str() {
            "" => info.plural.clone(),
            group => format!("{}.{group}", info.plural),
        };
        seen.entry(info.key_root()).or_insert(label);
    }
    seen.into_iter()
        .map(|(root, label)| (label, root))
        .collect()
}

async fn not_found() -> Failure {
    Failure(ApiError::path_not_found())
}

async fn api_root(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    discovery::core_versions(
        &server.discovery_resources(),
        req.headers(),
        &server.address,
    )
}

async fn apis_root(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    discovery::groups(&server.discovery_resources(), req.headers(), true)
}

async fn apis_root_slash(State(server): State<Arc<ApiServer>>, req: Request) -> Response {
    discovery::groups(&server.discovery_resources(), req.headers(), false)
}

/// The aggregated server a request goes to: a group version served by another API server
/// (none of this server's own resources is there).
fn aggregated(server: &ApiServer, target: &Target) -> Option<crate::aggregator::Backend> {
    let (group, version) = match target {
        Target::Resource(r) => (&r.group, &r.version),
        Target::GroupVersion { group, version } => (group, version),
        Target::Group { .. } => return None,
    };
    if server.endpoints_of(group, version) {
        return None;
    }
    server.aggregator.backend(group, version)
}

/// Proxies `req` to an aggregated server as the request's user.
async fn proxy(server: &ApiServer, backend: &crate::aggregator::Backend, req: Request) -> Response {
    let user = req
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(UserInfo::anonymous);
    let extra = req
        .extensions()
        .get::<auth::UserExtra>()
        .map(|e| e.0.clone())
        .unwrap_or_default();
    server
        .aggregator
        .proxy(server, backend, req, &user, &extra)
        .await
}

/// Dispatches a request under `/api` or `/apis` by the target [`layers::request_info`]
/// attached; the layers around it have opened its span, counted it and read its body.
async fn api(State(server): State<Arc<ApiServer>>, mut req: Request) -> Response {
    let Some(info) = req.extensions_mut().remove::<RequestInfo>() else {
        return status_response(&ApiError::path_not_found());
    };
    if let Some(backend) = aggregated(&server, &info.target) {
        return proxy(&server, &backend, req).await;
    }
    let (r, endpoint) = match (info.target, info.endpoint) {
        (Target::Group { group }, _) => {
            return discovery::group(&server.discovery_resources(), &group)
                .unwrap_or_else(|| status_response(&ApiError::path_not_found()));
        }
        (Target::GroupVersion { group, version }, _) => {
            return discovery::resource_list(&server.resources(), &group, &version)
                .unwrap_or_else(|| status_response(&ApiError::path_not_found()));
        }
        (Target::Resource(r), Some(endpoint)) => (r, endpoint),
        (Target::Resource(_), None) => return status_response(&ApiError::path_not_found()),
    };
    if connect::is_kubelet(&r) {
        // Served by a kubelet: the body (if any) and upgrades pass through unread.
        return connect::serve(&server, r, req).await;
    }
    if proxy::is_proxy(&r) {
        // Served by a pod: the body (if any) and upgrades pass through unread.
        return proxy::serve(&server, r, req).await;
    }
    let (parts, body) = req.into_parts();
    // Already read whole by `limit_body`; this only takes it out.
    let body = match layers::read_body(body).await {
        Ok(body) => body,
        Err(resp) => return resp,
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
    endpoint.serve(req).await
}
