//! What every request goes through before its handler, as tower layers of the router:
//! authentication (and impersonation).

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use minik8s_api::ApiError;

use super::codec::status_response;
use crate::auth::{
    Authenticator, ClientCertIdentity, Extra, UserExtra, UserInfo, impersonate, public,
};

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
        None if public(req.uri().path()) => (UserInfo::anonymous(), Extra::new()),
        None => return status_response(&ApiError::unauthorized()),
    };
    let (user, extra) = match impersonate(&user, req.headers()) {
        Ok(Some(acting)) => {
            tracing::debug!(user = %user.name, as_user = %acting.0.name, "impersonating");
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
