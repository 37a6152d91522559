//! Who may read the controller-manager's and the scheduler's secure port, decided as
//! upstream's delegated authentication and authorization decide it
//! (`--authentication-kubeconfig`, `--authorization-kubeconfig`): the component holds no
//! users or policy of its own, it asks the API server.
//!
//! A client is the user its certificate names (verified against the client CA: CN the user,
//! each O a group), else the user a bearer token stands for according to a TokenReview; a
//! request with neither is `system:anonymous`, as upstream's delegated authentication allows
//! anonymous requests. A token the API server does not take is refused with 401. The user
//! then needs the verb on the path (a non-resource URL), asked with a SubjectAccessReview,
//! except on the paths always allowed (`--authorization-always-allow-paths`: `/healthz`,
//! `/readyz` and `/livez`). Answers are cached for upstream's ten seconds.
//!
//! Who a client is and the API server's answers come from `minik8s_delegated_auth`, which the
//! kubelet's API shares; what is asked (a non-resource URL) and how a refusal reads are this
//! port's, as upstream's.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReviewSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusDetails};
pub use minik8s_delegated_auth::{AuthError, Identity, User};
use minik8s_delegated_auth::{CacheTtls, Delegated, bearer_token};

/// Upstream's delegated authentication and authorization flags of the component.
#[derive(Clone, Debug)]
pub struct AuthOptions {
    /// `--authentication-token-webhook-cache-ttl`.
    pub token_ttl: Duration,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub unauthorized_ttl: Duration,
    /// `--authorization-always-allow-paths`: a trailing `*` matches any rest.
    pub always_allow_paths: Vec<String>,
}

impl Default for AuthOptions {
    fn default() -> Self {
        AuthOptions {
            token_ttl: Duration::from_secs(10),
            authorized_ttl: Duration::from_secs(10),
            unauthorized_ttl: Duration::from_secs(10),
            always_allow_paths: ["/healthz", "/readyz", "/livez"].map(String::from).to_vec(),
        }
    }
}

/// Authentication and authorization of a component's port, delegated to the API server
/// through the component's own client.
pub struct DelegatedAuth {
    delegated: Delegated,
    options: AuthOptions,
}

impl std::fmt::Debug for DelegatedAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegatedAuth")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl DelegatedAuth {
    pub fn new(client: kube::Client, options: AuthOptions) -> DelegatedAuth {
        let ttls = CacheTtls {
            token: options.token_ttl,
            authorized: options.authorized_ttl,
            unauthorized: options.unauthorized_ttl,
        };
        DelegatedAuth {
            delegated: Delegated::new(client, ttls),
            options,
        }
    }

    /// Who sent the request: the certificate's user, else the bearer token's, else
    /// `Ok(None)`. A token the API server does not take is an error (401).
    pub async fn authenticate(
        &self,
        identity: Option<&Identity>,
        headers: &HeaderMap,
    ) -> Result<Option<User>, AuthError> {
        if let Some(id) = identity {
            return Ok(Some(User::from(id)));
        }
        let Some(token) = bearer_token(headers) else {
            return Ok(None);
        };
        match self.delegated.token_user(token?).await? {
            Some(user) => Ok(Some(user)),
            None => Err(AuthError::Rejected("invalid bearer token".into())),
        }
    }

    /// Whether `path` is let in without asking (`--authorization-always-allow-paths`).
    pub fn always_allowed(&self, path: &str) -> bool {
        self.options
            .always_allow_paths
            .iter()
            .any(|p| match p.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => path == p,
            })
    }

    /// Whether the API server allows `user` to `verb` the non-resource URL `path`, and the
    /// reason it gave.
    pub async fn allowed(
        &self,
        user: &User,
        verb: &str,
        path: &str,
    ) -> Result<(bool, String), AuthError> {
        let spec = user.access_review(SubjectAccessReviewSpec {
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some(verb.to_string()),
            }),
            ..Default::default()
        });
        self.delegated.allowed(spec).await
    }
}

/// A `metav1.Status` failure, as upstream's filters answer.
pub fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = Status {
        code: Some(i32::from(code.as_u16())),
        message: Some(message),
        reason: Some(reason.into()),
        status: Some("Failure".into()),
        details: (code == StatusCode::FORBIDDEN).then(StatusDetails::default),
        ..Default::default()
    };
    let mut resp = (code, serde_json::to_string(&body).unwrap_or_default()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Upstream's `Forbidden` message for a non-resource URL.
pub fn forbidden_message(user: &str, verb: &str, path: &str, reason: &str) -> String {
    let mut message = format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\"");
    if !reason.is_empty() {
        message.push_str(": ");
        message.push_str(reason);
    }
    message
}

/// Lets a request through only when its user may (upstream's `WithAuthentication` and
/// `WithAuthorization` with delegated authenticators and authorizers): 401 for a credential
/// the API server does not take, 403 when the user may not, 500 when it cannot say.
pub async fn filter(State(auth): State<Arc<DelegatedAuth>>, req: Request, next: Next) -> Response {
    let identity = req.extensions().get::<Identity>().cloned();
    let user = match auth.authenticate(identity.as_ref(), req.headers()).await {
        Ok(Some(user)) => user,
        Ok(None) => User::anonymous(),
        Err(e) => {
            tracing::debug!(error = %e, "unable to authenticate the request");
            return status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unauthorized".into(),
            );
        }
    };
    let path = req.uri().path().to_string();
    if auth.always_allowed(&path) {
        return next.run(req).await;
    }
    let verb = req.method().as_str().to_lowercase();
    match auth.allowed(&user, &verb, &path).await {
        Ok((true, _)) => next.run(req).await,
        Ok((false, reason)) => {
            tracing::debug!(user = %user.name, %verb, %path, "forbidden");
            status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                forbidden_message(&user.name, &verb, &path, &reason),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, user = %user.name, %verb, %path, "authorization error");
            status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("Internal Server Error: \"{path}\": {e}"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_statuses_are_upstreams() {
        assert_eq!(
            forbidden_message("system:anonymous", "get", "/metrics", ""),
            "forbidden: User \"system:anonymous\" cannot get path \"/metrics\""
        );
        let cert_user = User::from(&Identity {
            user: "alice".into(),
            groups: vec!["dev".into()],
        });
        assert_eq!(cert_user.groups, ["dev", "system:authenticated"]);
        assert_eq!(User::anonymous().groups, ["system:unauthenticated"]);
    }

    #[tokio::test]
    async fn the_health_paths_are_always_allowed() {
        let client = kube::Client::new(
            tower::service_fn(|_: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no server"))
            }),
            "default",
        );
        let auth = DelegatedAuth::new(client, AuthOptions::default());
        assert!(auth.always_allowed("/healthz"));
        assert!(auth.always_allowed("/livez"));
        assert!(!auth.always_allowed("/healthz/etcd"));
        assert!(!auth.always_allowed("/metrics"));
        let prefixed = AuthOptions {
            always_allow_paths: vec!["/healthz*".into()],
            ..Default::default()
        };
        let auth = DelegatedAuth::new(auth.delegated.client().clone(), prefixed);
        assert!(auth.always_allowed("/healthz/etcd"));
    }
}
