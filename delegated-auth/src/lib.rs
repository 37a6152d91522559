//! Upstream's delegated authentication and authorization, shared by every component that
//! serves a port of its own (the kubelet's API, the controller-manager's and the scheduler's
//! secure ports): the component holds no users or policy, it asks the API server. A client is
//! the user its verified certificate names, else the user a TokenReview says its bearer token
//! stands for; whether that user may act is a SubjectAccessReview. Both answers are cached for
//! the component's TTLs, as upstream's webhook caches keep them.
//!
//! What the request is asking for (a node's subresource, a non-resource URL) and how a refusal
//! is worded stay with each component: they differ as upstream's do.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{HeaderMap, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewSpec};
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

pub const AUTHENTICATED: &str = "system:authenticated";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";

impl User {
    /// `system:anonymous`, for a request with no credential where anonymous requests are
    /// allowed.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..Default::default()
        }
    }

    /// Upstream's `AuthenticatedGroupAdder`: every authenticated user is in
    /// `system:authenticated`.
    pub fn with_authenticated_group(mut self) -> User {
        if !self
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }

    /// The review of whether this user may do what `spec` (its attributes) asks, the user's
    /// fields filled in.
    pub fn access_review(&self, spec: SubjectAccessReviewSpec) -> SubjectAccessReviewSpec {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        SubjectAccessReviewSpec {
            user: some(&self.name),
            uid: some(&self.uid),
            groups: (!self.groups.is_empty()).then(|| self.groups.clone()),
            extra: (!self.extra.is_empty()).then(|| self.extra.clone()),
            ..spec
        }
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

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("TokenReview: {0}")]
    TokenReview(kube::Error),
    #[error("{0}")]
    Rejected(String),
    #[error("SubjectAccessReview: {0}")]
    AccessReview(kube::Error),
}

/// How long the API server's answers are kept (upstream's
/// `--authentication-token-webhook-cache-ttl`, `--authorization-webhook-cache-authorized-ttl`
/// and `--authorization-webhook-cache-unauthorized-ttl`; their defaults differ by component).
#[derive(Clone, Copy, Debug)]
pub struct CacheTtls {
    pub token: Duration,
    pub authorized: Duration,
    pub unauthorized: Duration,
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

    fn get_at(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(expires, _)| *expires > now)
            .map(|(_, v)| v.clone())
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

/// The token of an `Authorization: Bearer` header as upstream's bearer-token authenticator
/// reads it: `None` when there is none, an empty token being an error.
pub fn bearer_token(headers: &HeaderMap) -> Option<Result<String, AuthError>> {
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

/// Asks the API server, through the component's own client, who a token is and what a user
/// may do, remembering the answers.
pub struct Delegated {
    client: kube::Client,
    ttls: CacheTtls,
    /// TokenReview answers by the token's SHA-256: the user, or `None` for a token the API
    /// server did not take (without an error).
    tokens: TtlCache<[u8; 32], Option<User>>,
    /// SubjectAccessReview answers by their spec.
    decisions: TtlCache<String, bool>,
}

impl std::fmt::Debug for Delegated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delegated")
            .field("ttls", &self.ttls)
            .finish_non_exhaustive()
    }
}

impl Delegated {
    pub fn new(client: kube::Client, ttls: CacheTtls) -> Delegated {
        Delegated {
            client,
            ttls,
            tokens: TtlCache::new(),
            decisions: TtlCache::new(),
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The user `token` stands for according to a TokenReview, `None` for a token the API
    /// server does not take.
    pub async fn token_user(&self, token: String) -> Result<Option<User>, AuthError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(user) = self.tokens.get_at(&key, Instant::now()) {
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
            .insert_at(key, user.clone(), self.ttls.token, Instant::now());
        Ok(user)
    }

    /// Whether the API server allows what `spec` asks (see [`User::access_review`]), and the
    /// reason it gave (empty when the answer came from the cache).
    pub async fn allowed(
        &self,
        spec: SubjectAccessReviewSpec,
    ) -> Result<(bool, String), AuthError> {
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(allowed) = self.decisions.get_at(&key, Instant::now()) {
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
            true => self.ttls.authorized,
            false => self.ttls.unauthorized,
        };
        self.decisions
            .insert_at(key, status.allowed, ttl, Instant::now());
        Ok((status.allowed, status.reason.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

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
        assert_eq!(token(&[("authorization", "bearer  ")]), None);
        assert_eq!(token(&[("authorization", "Bearer  x")]), Some(None));
    }

    #[test]
    fn users_get_the_authenticated_group() {
        let cert_user = User::from(&Identity {
            user: "alice".into(),
            groups: vec!["dev".into()],
        });
        assert_eq!(cert_user.groups, ["dev", AUTHENTICATED]);
        let user = User {
            name: "u".into(),
            groups: vec![AUTHENTICATED.into(), "g".into()],
            ..Default::default()
        }
        .with_authenticated_group();
        assert_eq!(user.groups, [AUTHENTICATED, "g"]);
        assert_eq!(User::anonymous().groups, [UNAUTHENTICATED]);
        assert_eq!(
            User::anonymous().with_authenticated_group().groups,
            [UNAUTHENTICATED]
        );
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
        let now = Instant::now();
        for i in 0..CACHE_SIZE + 1 {
            cache.insert_at(i, (), Duration::from_secs(60), now);
        }
        let len = cache.entries.lock().unwrap().len();
        assert!(len <= CACHE_SIZE, "{len}");
        assert_eq!(cache.get_at(&CACHE_SIZE, now), Some(()));
    }
}
