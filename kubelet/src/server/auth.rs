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

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReviewSpec};
pub use minik8s_delegated_auth::{AuthError, Identity, User};
use minik8s_delegated_auth::{CacheTtls, Delegated, bearer_token};

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

/// Authentication and authorization of the kubelet's API, delegated to the API server
/// through the kubelet's own client.
pub struct NodeAuth {
    delegated: Delegated,
    node_name: String,
    options: AuthOptions,
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
        let ttls = CacheTtls {
            token: options.token_ttl,
            authorized: options.authorized_ttl,
            unauthorized: options.unauthorized_ttl,
        };
        NodeAuth {
            delegated: Delegated::new(client, ttls),
            node_name: node_name.to_string(),
            options,
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
            return Ok(Some(User::from(id)));
        }
        let mut error = None;
        if let Some(token) = bearer_token(headers) {
            let found = match token {
                Ok(token) => self.delegated.token_user(token).await,
                Err(e) => Err(e),
            };
            match found {
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
                Ok((token, others)) => match self.delegated.token_user(token).await {
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

    /// Whether the API server allows `user` to `verb` this node's `subresource`.
    pub async fn allowed(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
    ) -> Result<bool, AuthError> {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let spec = user.access_review(SubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: some(verb),
                version: Some("v1".into()),
                resource: Some("nodes".into()),
                subresource: some(subresource),
                name: some(&self.node_name),
                ..Default::default()
            }),
            ..Default::default()
        });
        Ok(self.delegated.allowed(spec).await?.0)
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
        });
        assert_eq!(user.groups, ["system:authenticated"]);
        let user = User {
            name: "u".into(),
            groups: vec!["system:authenticated".into(), "g".into()],
            ..Default::default()
        }
        .with_authenticated_group();
        assert_eq!(user.groups, ["system:authenticated", "g"]);
    }
}
