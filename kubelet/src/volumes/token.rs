//! Service-account tokens for projected volumes, as upstream's kubelet token manager
//! (pkg/kubelet/token): a TokenRequest bound to the pod, kept in memory and asked for again
//! once 80 % of its lifetime has passed or it is a day old, whichever comes first. The pod's
//! periodic volume refresh rewrites the file when the token changed, atomically.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount, ServiceAccountTokenProjection};
use kube::Api;
use kube::api::PostParams;

/// Tokens are refreshed at least this often, however long they live.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Spread of the refresh time, so that pods started together do not refresh together.
const MAX_JITTER: Duration = Duration::from_secs(10);

/// Upstream's cache key: who the token is for and what it is bound to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    service_account: String,
    audiences: Vec<String>,
    expiration_seconds: Option<i64>,
    pod_uid: String,
}

#[derive(Clone, Debug)]
struct Cached {
    token: String,
    expires: Timestamp,
    /// The lifetime asked for.
    expiration_seconds: i64,
    /// Drawn once per token, below [`MAX_JITTER`].
    jitter: Duration,
}

/// Whether a token that expires at `expires` and was asked for `expiration_seconds` must be
/// replaced at `now`.
fn requires_refresh(
    now: Timestamp,
    expires: Timestamp,
    expiration_seconds: i64,
    jitter: Duration,
) -> bool {
    let jitter = jitter.as_secs() as i64;
    let expires = expires.as_second();
    let issued = expires - expiration_seconds;
    let now = now.as_second();
    if now > issued + MAX_TTL.as_secs() as i64 - jitter {
        return true;
    }
    now > expires - expiration_seconds * 20 / 100 - jitter
}

/// The tokens this node's pods hold.
#[derive(Clone, Default)]
pub struct TokenManager {
    cache: Arc<Mutex<HashMap<Key, Cached>>>,
}

impl std::fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenManager").finish_non_exhaustive()
    }
}

impl TokenManager {
    /// The token for one `serviceAccountToken` projection of `pod`: the cached one while it is
    /// fresh, else a new one. When asking fails, a cached token that has not expired serves.
    pub async fn token(
        &self,
        client: &kube::Client,
        pod: &Pod,
        projection: &ServiceAccountTokenProjection,
    ) -> Result<String, String> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let service_account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let audiences: Vec<String> = projection
            .audience
            .iter()
            .filter(|a| !a.is_empty())
            .cloned()
            .collect();
        let key = Key {
            namespace: namespace.clone(),
            service_account: service_account.clone(),
            audiences: audiences.clone(),
            expiration_seconds: projection.expiration_seconds,
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let now = Timestamp::now();
        let cached = self.cache.lock().expect("token cache").get(&key).cloned();
        if let Some(c) = &cached
            && !requires_refresh(now, c.expires, c.expiration_seconds, c.jitter)
        {
            return Ok(c.token.clone());
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences,
                expiration_seconds: projection.expiration_seconds,
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
        let result = api
            .create_token_request(&service_account, &PostParams::default(), &request)
            .await;
        let fresh = result
            .map_err(|e| super::api_error("serviceaccount", &service_account, e))
            .and_then(|tr| {
                let status = tr
                    .status
                    .ok_or("the token request came back without a token")?;
                Ok(Cached {
                    token: status.token,
                    expires: status.expiration_timestamp.0,
                    expiration_seconds: tr
                        .spec
                        .expiration_seconds
                        .or(projection.expiration_seconds)
                        .unwrap_or(3600),
                    jitter: Duration::from_secs(rand::random_range(0..MAX_JITTER.as_secs())),
                })
            });
        match (fresh, cached) {
            (Ok(c), _) => {
                let token = c.token.clone();
                self.cache.lock().expect("token cache").insert(key, c);
                Ok(token)
            }
            (Err(e), Some(c)) if c.expires > now => {
                tracing::warn!(error = %e, service_account, "token refresh failed; the current token still serves");
                Ok(c.token)
            }
            (Err(e), _) => Err(format!("failed to fetch token: {e}")),
        }
    }

    /// Forgets the tokens of a pod that is gone.
    pub fn forget_pod(&self, pod_uid: &str) {
        self.cache
            .lock()
            .expect("token cache")
            .retain(|k, _| k.pod_uid != pod_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn refresh_after_80_percent_of_the_lifetime() {
        let issued = 1_000_000;
        let life = 3600;
        let expires = at(issued + life);
        let none = Duration::ZERO;
        assert!(!requires_refresh(at(issued), expires, life, none));
        assert!(!requires_refresh(at(issued + 2880), expires, life, none));
        assert!(requires_refresh(at(issued + 2881), expires, life, none));
        // The jitter only ever brings the refresh forward.
        assert!(requires_refresh(
            at(issued + 2875),
            expires,
            life,
            Duration::from_secs(9)
        ));
    }

    #[test]
    fn refresh_after_a_day_however_long_the_token_lives() {
        let issued = 1_000_000;
        let life = 7 * 24 * 3600;
        let expires = at(issued + life);
        let none = Duration::ZERO;
        assert!(!requires_refresh(
            at(issued + 24 * 3600),
            expires,
            life,
            none
        ));
        assert!(requires_refresh(
            at(issued + 24 * 3600 + 1),
            expires,
            life,
            none
        ));
    }
}
