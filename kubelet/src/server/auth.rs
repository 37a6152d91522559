//! Who may use the kubelet's API, decided as upstream's kubelet decides it with
//! `--anonymous-auth=false`, `--authentication-token-webhook` and `--authorization-mode=Webhook`:
//! the kubelet holds no users or policy of its own, it asks the API server.
//!
//! A client is the user its certificate names (signed by the cluster CA: CN the user, each O a
//! group), else the user a bearer token stands for according to a TokenReview; a request with
//! neither is refused with 401 `Unauthorized`. The user then needs the `nodes` resource of
//! this node with the subresource the path maps to ([`subresources`]: `/stats` is `stats`,
//! `/metrics` is `metrics`, `/logs` is `log`, everything else, exec and logs of containers
//! included, is `proxy`), asked with a SubjectAccessReview. Both answers are cached as
//! upstream's webhook defaults do (tokens 2m, allowed 5m, denied 30s), so that a busy scrape
//! or a log stream reconnecting costs the API server nothing.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};

/// The user a client certificate names: CN, and each O as a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

impl Identity {
    /// The subject of a certificate the TLS layer verified against the cluster CA.
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

/// An authenticated user, as a SubjectAccessReview names it.
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
    /// Upstream's `AuthenticatedGroupAdder`: every authenticated user is in
    /// `system:authenticated`.
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
    }
}

/// How long answers of the API server are kept, upstream's kubelet flags.
#[derive(Clone, Debug)]
pub struct AuthOptions {
    /// `--authentication-token-webhook-cache-ttl`: TokenReview answers.
    pub token_ttl: Duration,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub unauthorized_ttl: Duration,
    /// The `KubeletFineGrainedAuthz` feature gate: `/pods`, `/healthz`, `/configz` and
    /// `/statusz` are first checked on their own subresource, then on `proxy`. Alpha, and off,
    /// in 1.32, the version this cluster serves.
    pub fine_grained: bool,
}

impl Default for AuthOptions {
    fn default() -> Self {
        AuthOptions {
            token_ttl: Duration::from_secs(120),
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
            fine_grained: false,
        }
    }
}

/// The API verb of a request to the kubelet, from its HTTP method (upstream's
/// `nodeAuthorizerAttributesGetter`). Upgrades are not special: a websocket exec is a GET
/// (`get`), an SPDY one a POST (`create`); other methods have no verb.
pub fn verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

/// Whether `sub` is `path` or below it (a trailing `/` of `path` ignored), upstream's
/// `isSubpath`.
fn is_subpath(sub: &str, path: &str) -> bool {
    let path = path.strip_suffix('/').unwrap_or(path);
    sub == path || (sub.starts_with(path) && sub.as_bytes().get(path.len()) == Some(&b'/'))
}

/// The `nodes` subresources a request for `path` is authorized on, in the order they are
/// tried: the first one allowed lets the request in.
pub fn subresources(path: &str, fine_grained: bool) -> Vec<&'static str> {
    let mut subresources = Vec::new();
    if fine_grained {
        let specific = [
            ("/pods", "pods"),
            ("/healthz", "healthz"),
            ("/configz", "configz"),
            ("/statusz", "statusz"),
            ("/runningpods/", "pods"),
        ];
        if let Some((_, s)) = specific.iter().find(|(p, _)| is_subpath(path, p)) {
            subresources.push(*s);
        }
    }
    let coarse = [
        ("/stats/", "stats"),
        ("/metrics", "metrics"),
        ("/logs/", "log"),
        ("/checkpoint/", "checkpoint"),
    ];
    subresources.push(
        coarse
            .iter()
            .find(|(p, _)| is_subpath(path, p))
            .map_or("proxy", |(_, s)| *s),
    );
    subresources
}

/// Upstream's refusal: one line naming the user, the verb and every subresource tried.
pub fn forbidden_message(user: &str, verb: &str, subresources: &[&str]) -> String {
    format!(
        "Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
        subresources.join(" ")
    )
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

/// Entries a cache holds at most (upstream's webhook caches are LRUs of about this size).
const CACHE_SIZE: usize = 4096;

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        self.get_at(key, Instant::now())
    }

    fn get_at(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, v)| v.clone())
    }

    fn insert(&self, key: K, value: V, ttl: Duration) {
        self.insert_at(key, value, ttl, Instant::now());
    }

    fn insert_at(&self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() {
            return;
        }
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

/// Authentication and authorization of the kubelet's API, delegated to the API server
/// through the kubelet's own client.
pub struct NodeAuth {
    client: kube::Client,
    node_name: String,
    options: AuthOptions,
    /// TokenReview answers by the token's SHA-256: the user, or `None` for a token the API
    /// server did not take (without an error).
    tokens: TtlCache<[u8; 32], Option<User>>,
    /// SubjectAccessReview answers by their spec.
    decisions: TtlCache<String, bool>,
}

impl std::fmt::Debug for NodeAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAuth")
            .field("node_name", &self.node_name)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The websocket subprotocol that carries a bearer token (browsers cannot set headers).
const WEBSOCKET_TOKEN_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";

/// The token of an `Authorization: Bearer` header: `None` when there is none, an empty
/// token being an error.
fn bearer_token(headers: &HeaderMap) -> Option<Result<String, AuthError>> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    Some(if token.is_empty() {
        Err(AuthError::Rejected("invalid bearer token".into()))
    } else {
        Ok(token.to_string())
    })
}

fn is_websocket(headers: &HeaderMap) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    has(header::CONNECTION, "upgrade") && has(header::UPGRADE, "websocket")
}

/// The token of a websocket request's `base64url.bearer.authorization.k8s.io.<token>`
/// subprotocol, and the other subprotocols (what the header keeps once the token is used).
fn websocket_token(headers: &HeaderMap) -> Option<Result<(String, Vec<String>), AuthError>> {
    if !is_websocket(headers) {
        return None;
    }
    let invalid = || {
        AuthError::Rejected(
            "invalid base64.websocket.authorization.k8s.io subprotocol encoding".into(),
        )
    };
    let mut token = None;
    let mut others = Vec::new();
    let protocols = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim);
    for protocol in protocols {
        let Some(encoded) = protocol.strip_prefix(WEBSOCKET_TOKEN_PREFIX) else {
            others.push(protocol.to_string());
            continue;
        };
        if token.is_some() {
            return Some(Err(AuthError::Rejected(
                "multiple base64.websocket.authorization.k8s.io subprotocols specified".into(),
            )));
        }
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        match decoded {
            Some(t) => token = Some(t),
            None => return Some(Err(invalid())),
        }
    }
    let token = token.filter(|t| !t.is_empty())?;
    if others.is_empty() {
        return Some(Err(AuthError::Rejected(
            "missing additional subprotocol".into(),
        )));
    }
    Some(Ok((token, others)))
}

impl NodeAuth {
    /// Asks the API server through `client` about requests to node `node_name`.
    pub fn new(client: kube::Client, node_name: &str, options: AuthOptions) -> NodeAuth {
        NodeAuth {
            client,
            node_name: node_name.to_string(),
            options,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
        }
    }

    /// Who sent the request, as upstream's union of authenticators: the certificate, else
    /// the bearer token, else a websocket's token subprotocol. `Ok(None)`: none of them.
    /// The credential a token came in is removed from the request once it is used.
    pub async fn authenticate(
        &self,
        identity: Option<&Identity>,
        headers: &mut HeaderMap,
    ) -> Result<Option<User>, AuthError> {
        if let Some(id) = identity {
            return Ok(Some(User::from(id).with_authenticated_group()));
        }
        let mut error = None;
        if let Some(token) = bearer_token(headers) {
            match self.token_user(token).await {
                Ok(Some(user)) => {
                    headers.remove(header::AUTHORIZATION);
                    return Ok(Some(user));
                }
                Ok(None) => error = Some(AuthError::Rejected("invalid bearer token".into())),
                Err(e) => error = Some(e),
            }
        }
        if let Some(found) = websocket_token(headers) {
            match found {
                Ok((token, others)) => match self.token_user(Ok(token)).await {
                    Ok(Some(user)) => {
                        headers.remove(header::SEC_WEBSOCKET_PROTOCOL);
                        if let Ok(v) = HeaderValue::from_str(&others.join(",")) {
                            headers.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
                        }
                        return Ok(Some(user));
                    }
                    Ok(None) => error = Some(AuthError::Rejected("invalid bearer token".into())),
                    Err(e) => error = Some(e),
                },
                Err(e) => error = Some(e),
            }
        }
        error.map_or(Ok(None), Err)
    }

    async fn token_user(
        &self,
        token: Result<String, AuthError>,
    ) -> Result<Option<User>, AuthError> {
        let token = token?;
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

    /// Whether the API server allows `user` to `verb` this node's `subresource`.
    pub async fn allowed(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
    ) -> Result<bool, AuthError> {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let spec = SubjectAccessReviewSpec {
            user: some(&user.name),
            uid: some(&user.uid),
            groups: (!user.groups.is_empty()).then(|| user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: some(verb),
                version: Some("v1".into()),
                resource: Some("nodes".into()),
                subresource: some(subresource),
                name: some(&self.node_name),
                ..Default::default()
            }),
            non_resource_attributes: None,
        };
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(allowed) = self.decisions.get(&key) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let allowed = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(AuthError::AccessReview)?
            .status
            .is_some_and(|s| s.allowed);
        let ttl = match allowed {
            true => self.options.authorized_ttl,
            false => self.options.unauthorized_ttl,
        };
        self.decisions.insert(key, allowed, ttl);
        Ok(allowed)
    }
}

/// Lets a request through only when its user is authenticated and allowed (upstream's
/// `InstallAuthFilter`): 401 `Unauthorized` without a user, 403 with upstream's message
/// when no subresource the path maps to is allowed, 500 when the API server cannot say.
pub async fn filter(State(auth): State<Arc<NodeAuth>>, mut req: Request, next: Next) -> Response {
    let identity = req.extensions().get::<Identity>().cloned();
    let user = match auth
        .authenticate(identity.as_ref(), req.headers_mut())
        .await
    {
        Ok(Some(user)) => user,
        Ok(None) => return super::text(StatusCode::UNAUTHORIZED, "Unauthorized"),
        Err(e) => {
            tracing::warn!(error = %e, "kubelet API: unable to authenticate the request");
            return super::text(StatusCode::UNAUTHORIZED, "Unauthorized");
        }
    };
    let verb = verb(req.method());
    let subresources = subresources(req.uri().path(), auth.options.fine_grained);
    for subresource in &subresources {
        match auth.allowed(&user, verb, subresource).await {
            Ok(true) => return next.run(req).await,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, user = %user.name, verb, subresource, "kubelet API: authorization error");
                return super::text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "Authorization error (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                        user.name
                    ),
                );
            }
        }
    }
    tracing::debug!(user = %user.name, verb, ?subresources, "kubelet API: forbidden");
    super::text(
        StatusCode::FORBIDDEN,
        forbidden_message(&user.name, verb, &subresources),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_from_methods() {
        for (method, verb_) in [
            (Method::POST, "create"),
            (Method::GET, "get"),
            (Method::PUT, "update"),
            (Method::PATCH, "patch"),
            (Method::DELETE, "delete"),
            (Method::HEAD, ""),
            (Method::OPTIONS, ""),
        ] {
            assert_eq!(verb(&method), verb_, "{method}");
        }
    }

    #[test]
    fn subpaths() {
        for (sub, path, want) in [
            ("", "", true),
            ("/foo", "/foo", true),
            ("/foo/", "/foo/", true),
            ("/foo", "/", true),
            ("/foo/bar", "/", true),
            ("/foo/", "/foo", true),
            ("/foo/bar", "/foo", true),
            ("/foo", "/bar", false),
            ("/foo", "/foobar", false),
            ("/foobar", "/foo", false),
        ] {
            assert_eq!(is_subpath(sub, path), want, "{sub:?} under {path:?}");
        }
    }

    /// Upstream's `AuthzTestCases`: every path of the kubelet's API and its subresources,
    /// with and without fine-grained authorization.
    #[test]
    fn paths_to_subresources() {
        let coarse: &[(&str, &[&str])] = &[
            ("/attach/ns/pod/c", &["proxy"]),
            ("/attach/ns/pod/uid/c", &["proxy"]),
            ("/checkpoint/ns/pod/c", &["checkpoint"]),
            ("/configz", &["proxy"]),
            ("/statusz", &["proxy"]),
            ("/containerLogs/ns/pod/c", &["proxy"]),
            ("/debug/flags/v", &["proxy"]),
            ("/debug/pprof/heap", &["proxy"]),
            ("/exec/ns/pod/c", &["proxy"]),
            ("/exec/ns/pod/uid/c", &["proxy"]),
            ("/healthz", &["proxy"]),
            ("/healthz/log", &["proxy"]),
            ("/healthz/syncloop", &["proxy"]),
            ("/logs/", &["log"]),
            ("/logs/messages", &["log"]),
            ("/metrics", &["metrics"]),
            ("/metrics/slis", &["metrics"]),
            ("/metrics/cadvisor", &["metrics"]),
            ("/metrics/probes", &["metrics"]),
            ("/metrics/resource", &["metrics"]),
            ("/pods", &["proxy"]),
            ("/pods/", &["proxy"]),
            ("/portForward/ns/pod", &["proxy"]),
            ("/portForward/ns/pod/uid", &["proxy"]),
            ("/run/ns/pod/c", &["proxy"]),
            ("/runningpods/", &["proxy"]),
            ("/stats/", &["stats"]),
            ("/stats/summary", &["stats"]),
            ("/statsx", &["proxy"]),
            ("/spec/", &["proxy"]),
        ];
        for (path, want) in coarse {
            assert_eq!(subresources(path, false), *want, "{path}");
            let fine: Vec<&str> = match *path {
                "/healthz" | "/healthz/log" | "/healthz/syncloop" => vec!["healthz", "proxy"],
                "/pods" | "/pods/" | "/runningpods/" => vec!["pods", "proxy"],
                "/configz" => vec!["configz", "proxy"],
                "/statusz" => vec!["statusz", "proxy"],
                _ => want.to_vec(),
            };
            assert_eq!(subresources(path, true), fine, "{path} (fine-grained)");
        }
    }

    #[test]
    fn refusals() {
        assert_eq!(
            forbidden_message("system:node:n2", "get", &["stats"]),
            "Forbidden (user=system:node:n2, verb=get, resource=nodes, subresource(s)=[stats])\n"
        );
        assert_eq!(
            forbidden_message("u", "get", &["pods", "proxy"]),
            "Forbidden (user=u, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn bearer_tokens() {
        let token = |pairs: &[(&str, &str)]| bearer_token(&headers(pairs)).map(|r| r.ok());
        assert_eq!(token(&[]), None);
        assert_eq!(
            token(&[("authorization", "Bearer abc")]),
            Some(Some("abc".into()))
        );
        assert_eq!(
            token(&[("authorization", "  bearer abc  ")]),
            Some(Some("abc".into()))
        );
        assert_eq!(token(&[("authorization", "Basic abc")]), None);
        assert_eq!(token(&[("authorization", "Bearer")]), None);
        assert_eq!(token(&[("authorization", "Bearer  x")]), Some(None));
    }

    #[test]
    fn websocket_tokens() {
        let upgrade = [("connection", "Upgrade"), ("upgrade", "websocket")];
        let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("secret");
        let with = |protocols: &str| {
            let mut pairs = upgrade.to_vec();
            pairs.push(("sec-websocket-protocol", protocols));
            websocket_token(&headers(&pairs))
        };
        let found = with(&format!(
            "v5.channel.k8s.io, {WEBSOCKET_TOKEN_PREFIX}{encoded}"
        ));
        let (token, others) = found.unwrap().unwrap();
        assert_eq!(token, "secret");
        assert_eq!(others, ["v5.channel.k8s.io"]);
        // Another subprotocol must remain to be answered with.
        let err = with(&format!("{WEBSOCKET_TOKEN_PREFIX}{encoded}"))
            .unwrap()
            .unwrap_err();
        assert_eq!(err.to_string(), "missing additional subprotocol");
        assert!(
            with(&format!("v5.channel.k8s.io, {WEBSOCKET_TOKEN_PREFIX}!!"))
                .unwrap()
                .is_err()
        );
        assert!(with("v5.channel.k8s.io").is_none());
        // Only websocket upgrades carry tokens this way.
        let plain = headers(&[(
            "sec-websocket-protocol",
            &format!("v5.channel.k8s.io, {WEBSOCKET_TOKEN_PREFIX}{encoded}"),
        )]);
        assert!(websocket_token(&plain).is_none());
    }

    #[test]
    fn certificate_users_are_authenticated() {
        let user = User::from(&Identity {
            user: "kube-apiserver-kubelet-client".into(),
            groups: vec![],
        })
        .with_authenticated_group();
        assert_eq!(user.groups, ["system:authenticated"]);
        let user = User {
            name: "u".into(),
            groups: vec!["system:authenticated".into(), "g".into()],
            ..Default::default()
        }
        .with_authenticated_group();
        assert_eq!(user.groups, ["system:authenticated", "g"]);
    }

    #[test]
    fn answers_expire() {
        let cache: TtlCache<&str, bool> = TtlCache::new();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        cache.insert_at("denied", false, Duration::from_secs(30), t0);
        cache.insert_at("allowed", true, Duration::from_secs(300), t0);
        cache.insert_at("never", true, Duration::ZERO, t0);
        assert_eq!(cache.get_at(&"denied", at(29)), Some(false));
        assert_eq!(cache.get_at(&"never", t0), None);
        assert_eq!(cache.get_at(&"denied", at(31)), None);
        assert_eq!(cache.get_at(&"allowed", at(31)), Some(true));
        assert_eq!(cache.get_at(&"allowed", at(301)), None);
    }

    #[test]
    fn a_full_cache_makes_room() {
        let cache: TtlCache<usize, ()> = TtlCache::new();
        for i in 0..CACHE_SIZE + 1 {
            cache.insert(i, (), Duration::from_secs(60));
        }
        let len = cache.entries.lock().unwrap().len();
        assert!(len <= CACHE_SIZE, "{len}");
        assert_eq!(cache.get(&CACHE_SIZE), Some(()));
    }
}
