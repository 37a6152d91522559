//! The bootstrap token authenticator (`--enable-bootstrap-token-auth`), as upstream's
//! plugin/pkg/auth/authenticator/token/bootstrap: a bearer token `<id>.<secret>` is the user
//! `system:bootstrap:<id>` when the Secret `kube-system/bootstrap-token-<id>` says so. This is
//! how a node that holds only a token and the cluster's CA certificate asks for its client
//! certificate. The Secrets are read from a cache that follows the store, as upstream reads
//! them from an informer's lister: a request costs no store read, and a token deleted or
//! expired stops working as soon as the cache sees it.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use minik8s_api::bootstrap_token::{self as token, Expiry};

use super::UserInfo;
use crate::authz::cache::ObjectCache;
use crate::storage::DynStore;

/// The store keys of kube-system's Secrets.
const PREFIX: &str = "/registry/secrets/kube-system/";

#[derive(Debug)]
pub struct BootstrapTokens {
    secrets: Arc<ObjectCache<Secret>>,
}

impl BootstrapTokens {
    /// Follows kube-system's Secrets in `store`.
    pub fn start(store: &DynStore) -> BootstrapTokens {
        BootstrapTokens {
            secrets: ObjectCache::start(store.clone(), PREFIX.into()),
        }
    }

    /// Whether the cache has listed once.
    pub fn synced(&self) -> bool {
        self.secrets.synced()
    }

    /// The user of `bearer`, if it is a bootstrap token its Secret accepts now; `None` for
    /// every other bearer token too.
    pub fn authenticate(&self, bearer: &str) -> Option<UserInfo> {
        let (id, secret_part) = token::parse(bearer)?;
        let name = token::secret_name(id);
        let Some(secret) = self.secrets.named(&name) else {
            tracing::debug!(secret = %name, "no secret to match bootstrap bearer token");
            return None;
        };
        match check(&secret, id, secret_part, Timestamp::now()) {
            Ok(user) => Some(user),
            Err(why) => {
                tracing::debug!(
                    "Bootstrap secret {}/{name} matching bearer token {why}",
                    token::NAMESPACE
                );
                None
            }
        }
    }
}

/// Compares in time that depends only on the lengths, so a wrong guess tells nothing of how
/// much of it was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Upstream's checks of the Secret `secret` for the token `id.secret_part` at `now`, in its
/// order; the error completes upstream's log line "Bootstrap secret ... matching bearer token".
fn check(secret: &Secret, id: &str, secret_part: &str, now: Timestamp) -> Result<UserInfo, String> {
    if secret.metadata.deletion_timestamp.is_some() {
        return Err("is deleted and awaiting removal".into());
    }
    if secret.type_.as_deref() != Some(token::SECRET_TYPE) || secret.data.is_none() {
        return Err(format!(
            "has invalid type, expected {}.",
            token::SECRET_TYPE
        ));
    }
    if !constant_time_eq(
        token::data(secret, token::SECRET_KEY).as_bytes(),
        secret_part.as_bytes(),
    ) {
        return Err(format!("has invalid value for key {}.", token::SECRET_KEY));
    }
    if token::data(secret, token::ID_KEY) != id {
        return Err(format!("has invalid value for key {}.", token::ID_KEY));
    }
    if token::expiry(secret, now) == Expiry::Expired {
        return Err("has expired.".into());
    }
    if token::data(secret, token::USAGE_AUTHENTICATION) != "true" {
        return Err(format!("not marked {}=true.", token::USAGE_AUTHENTICATION));
    }
    let groups = token::groups(secret).map_err(|e| {
        format!(
            "has invalid value for key {}: {e}.",
            token::EXTRA_GROUPS_KEY
        )
    })?;
    Ok(UserInfo {
        name: format!("{}{id}", token::USER_PREFIX),
        uid: String::new(),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const ID: &str = "abcdef";
    const SECRET: &str = "0123456789abcdef";

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        let mut data: std::collections::BTreeMap<String, ByteString> = [
            (token::ID_KEY, ID),
            (token::SECRET_KEY, SECRET),
            (token::USAGE_AUTHENTICATION, "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
        for (k, v) in pairs {
            data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
        }
        Secret {
            type_: Some(token::SECRET_TYPE.into()),
            data: Some(data),
            ..Default::default()
        }
    }

    fn now() -> Timestamp {
        "2025-06-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_valid_token_is_its_bootstrap_user() {
        let user = check(&secret(&[]), ID, SECRET, now()).unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(user.groups, vec!["system:bootstrappers"]);
        let user = check(
            &secret(&[
                (token::EXTRA_GROUPS_KEY, "system:bootstrappers:workers"),
                (token::EXPIRATION_KEY, "2025-06-02T00:00:00Z"),
            ]),
            ID,
            SECRET,
            now(),
        )
        .unwrap();
        assert_eq!(
            user.groups,
            vec!["system:bootstrappers", "system:bootstrappers:workers"]
        );
    }

    #[test]
    fn upstreams_refusals() {
        let refused = |s: Secret, secret_part: &str| check(&s, ID, secret_part, now()).unwrap_err();
        assert_eq!(
            refused(secret(&[]), "0123456789abcdeX"),
            "has invalid value for key token-secret."
        );
        assert_eq!(
            refused(secret(&[(token::ID_KEY, "zzzzzz")]), SECRET),
            "has invalid value for key token-id."
        );
        assert_eq!(
            refused(
                secret(&[(token::EXPIRATION_KEY, "2025-05-31T23:59:59Z")]),
                SECRET
            ),
            "has expired."
        );
        assert_eq!(
            refused(secret(&[(token::USAGE_AUTHENTICATION, "false")]), SECRET),
            "not marked usage-bootstrap-authentication=true."
        );
        assert!(
            refused(
                secret(&[(token::EXTRA_GROUPS_KEY, "system:masters")]),
                SECRET
            )
            .starts_with("has invalid value for key auth-extra-groups: bootstrap group")
        );
        let mut opaque = secret(&[]);
        opaque.type_ = Some("Opaque".into());
        assert_eq!(
            refused(opaque, SECRET),
            "has invalid type, expected bootstrap.kubernetes.io/token."
        );
        let mut deleting = secret(&[]);
        deleting.metadata.deletion_timestamp = Some(Time(now()));
        assert_eq!(refused(deleting, SECRET), "is deleted and awaiting removal");
    }

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
