//! The ServiceAccount issuer discovery endpoints, as upstream's `OpenIDMetadataServer`:
//! pre-rendered bytes with a public cache lifetime (overriding the API's `no-cache`), so
//! relying parties and the proxies between them can keep them. They are authorized like any
//! non-resource path (the `system:service-account-issuer-discovery` role); a server whose
//! issuer is not an https URL has no discovery and answers 404.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use minik8s_api::ApiError;

use super::codec::Failure;
use crate::server::ApiServer;
use crate::serviceaccount::discovery::{
    CACHE_CONTROL, Discovery, JWKS_CONTENT_TYPE, JWKS_PATH, OPENID_CONFIG_PATH,
};

pub fn routes() -> Router<Arc<ApiServer>> {
    Router::new()
        .route(OPENID_CONFIG_PATH, get(configuration))
        .route(JWKS_PATH, get(keys))
}

fn discovery(server: &ApiServer) -> Option<&Discovery> {
    server.auth.service_accounts()?.discovery.as_ref()
}

fn document(body: &Bytes, content_type: &'static str) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static(CACHE_CONTROL),
            ),
        ],
        body.clone(),
    )
        .into_response()
}

async fn configuration(State(server): State<Arc<ApiServer>>) -> Response {
    match discovery(&server) {
        Some(d) => document(&d.config_json, "application/json"),
        None => Failure(ApiError::path_not_found()).into_response(),
    }
}

async fn keys(State(server): State<Arc<ApiServer>>) -> Response {
    match discovery(&server) {
        Some(d) => document(&d.keyset_json, JWKS_CONTENT_TYPE),
        None => Failure(ApiError::path_not_found()).into_response(),
    }
}
