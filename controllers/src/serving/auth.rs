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
//! The kubelet asks the same questions about its `nodes/*` resource
//! (`minik8s_kubelet::server::auth`); the two stay apart because no crate both depend on is
//! a place for an HTTP filter.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusDetails};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

/// The user a verified client certificate names: CN, and each O as a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

impl Identity {
    /// The subject of a certificate the TLS layer verified against the client CA.
    pub fn from_certificate(der: &[u8]) -> Option<Identity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let user = subject
            .iter_common_name()
            .next()?
            .as_str()
            .ok()?
            .to_string();
        let groups = subject
            .iter_organization()
            .filter_map(|o| o.as_str().ok().map(str::to_string))
            .collect();
        Some(Identity { user, groups })
    }
}

/// An authenticated (or anonymous) user, as a SubjectAccessReview names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";

impl User {
    fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..Default::default()
        }
    }

    /// Upstream's `AuthenticatedGroupAdder`.
    fn with_authenticated_group(mut self) -> User {
        if !self
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

impl From<&Identity> for User {
    fn from(id: &Identity) -> User {
        User {
            name: id.user.clone(),
            groups: id.groups.clone(),
            ..Default::default()
        }
        .with_authenticated_group()
    }
}

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

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("TokenReview: {0}")]
    TokenReview(kube::Error),
    #[error("{0}")]
    Rejected(String),
    #[error("SubjectAccessReview: {0}")]
    AccessReview(kube::Error),
}

/// Answers kept until they expire; a full map drops what has expired, then everything.
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

/// Entries a cache holds at most.
const CACHE_SIZE: usize = 4096;

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let now = Instant::now();
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, v)| v.clone())
    }

    fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CACHE_SIZE {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= CACHE_SIZE {
                entries.clear();
            }
        }
        entries.insert(key, (now + ttl, value));
    }
}

/// Authentication and authorization of a component's port, delegated to the API server
/// through the component's own client.
pub struct DelegatedAuth {
    client: kube::Client,
    options: AuthOptions,
    /// TokenReview answers by the token's SHA-256: the user, or `None` for a token the API
    /// server did not take.
    tokens: TtlCache<[u8; 32], Option<User>>,
    /// SubjectAccessReview answers by their spec.
    decisions: TtlCache<String, bool>,
}

impl std::fmt::Debug for DelegatedAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelegatedAuth")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The token of an `Authorization: Bearer` header: `None` when there is none.
fn bearer_token(headers: &HeaderMap) -> Option<Result<String, AuthError>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    Some(if token.is_empty() {
        Err(AuthError::Rejected("invalid bearer token".into()))
    } else {
        Ok(token.to_string())
    })
}

impl DelegatedAuth {
    pub fn new(client: kube::Client, options: AuthOptions) -> DelegatedAuth {
        DelegatedAuth {
            client,
            options,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
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
        match self.token_user(token?).await? {
            Some(user) => Ok(Some(user)),
            None => Err(AuthError::Rejected("invalid bearer token".into())),
        }
    }

    async fn token_user(&self, token: String) -> Result<Option<User>, AuthError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(user) = self.tokens.get(&key) {
            return Ok(user);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let status = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::TokenReview)?
            .status
            .unwrap_or_default();
        let user = if status.authenticated == Some(true) {
            let info = status.user.unwrap_or_default();
            Some(
                User {
                    name: info.username.unwrap_or_default(),
                    uid: info.uid.unwrap_or_default(),
                    groups: info.groups.unwrap_or_default(),
                    extra: info.extra.unwrap_or_default(),
                }
                .with_authenticated_group(),
            )
        } else if let Some(e) = status.error.filter(|e| !e.is_empty()) {
            // As upstream: a review's error is not kept, the next request asks again.
            return Err(AuthError::Rejected(e));
        } else {
            None
        };
        self.tokens
            .insert(key, user.clone(), self.options.token_ttl);
        Ok(user)
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
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let spec = SubjectAccessReviewSpec {
            user: some(&user.name),
            uid: some(&user.uid),
            groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some(verb.to_string()),
            }),
            resource_attributes: None,
        };
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(allowed) = self.decisions.get(&key) {
            return Ok((allowed, String::new()));
        }
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let status = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::AccessReview)?
            .status
            .unwrap_or_default();
        let ttl = match status.allowed {
            true => self.options.authorized_ttl,
            false => self.options.unauthorized_ttl,
        };
        self.decisions.insert(key, status.allowed, ttl);
        Ok((status.allowed, status.reason.unwrap_or_default()))
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
    fn bearer_tokens_are_read_from_the_header() {
        let mut h = HeaderMap::new();
        assert!(bearer_token(&h).is_none());
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer_token(&h).unwrap().unwrap(), "abc");
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert!(bearer_token(&h).is_none());
        h.insert(header::AUTHORIZATION, "bearer  ".parse().unwrap());
        assert!(bearer_token(&h).is_none_or(|t| t.is_err()));
    }

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
        assert_eq!(cert_user.groups, ["dev", AUTHENTICATED]);
        assert_eq!(User::anonymous().groups, [UNAUTHENTICATED]);
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
        let auth = DelegatedAuth::new(auth.client.clone(), prefixed);
        assert!(auth.always_allowed("/healthz/etcd"));
    }
}
