//! Service-account tokens, as upstream's bound tokens: JWTs the API server signs for the
//! TokenRequest API (`serviceaccounts/<name>/token`) and accepts back as bearer tokens. A
//! token names its service account by name and uid (and the Pod, Secret or Node it is bound
//! to), so deleting or re-creating that object revokes it without any token list to keep.
//! The key is an ECDSA P-256 key of its own (`pki/sa.key`), so tokens are ES256, which
//! upstream accepts for EC keys.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::api::core::v1::{Node, Pod, Secret, ServiceAccount};
use minik8s_api::strategy::BuiltIn;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use serde::{Deserialize, Serialize};

use crate::auth::{Extra, UserInfo};
use crate::registry::generic::GenericRegistry;
use crate::registry::typed::Registries;

pub mod discovery;
pub mod options;

pub use options::Options;

/// The issuer (and default audience) kubeadm clusters use; `--service-account-issuer`'s
/// default here.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Upstream's `ExpirationExtensionSeconds`: a year, the lifetime the server gives the tokens
/// ServiceAccount admission's projection asks for (see [`WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS`]),
/// so clients that never reread the file keep working; `warnafter` records when they
/// should have.
pub const EXPIRATION_EXTENSION_SECONDS: i64 = 24 * 365 * 60 * 60;
/// Upstream's `WarnOnlyBoundTokenExpirationSeconds`: an hour and seven seconds, a lifetime no
/// client asks for by itself, so the server can tell the admission-made projection apart.
pub const WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS: i64 = 60 * 60 + 7;

/// go-jose's default leeway for `exp` and `nbf`, in seconds.
const LEEWAY: i64 = 60;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("service account key {0}: not a PKCS#8 P-256 key")]
    Key(String),
    #[error("signing failed")]
    Sign,
    #[error("malformed token")]
    Malformed,
    #[error("invalid signature")]
    Signature,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token audiences {0:?} do not include this server's")]
    Audience(Vec<String>),
    #[error("token was issued by {0:?}")]
    Issuer(String),
    /// Invalid `--service-account-*` flags, every problem in upstream's words.
    #[error("{0}")]
    Flags(String),
}

/// A `{name, uid}` reference in the `kubernetes.io` claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Ref>,
    #[serde(default)]
    pub serviceaccount: Ref,
    /// When a token whose lifetime the server extended should have been replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warnafter: Option<i64>,
}

/// `aud` is a string or a list of strings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// The claims of a service-account token, named as upstream's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    #[serde(with = "audience")]
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub iss: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
    pub nbf: i64,
    pub sub: String,
}

mod audience {
    use super::Audience;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(aud: &[String], s: S) -> Result<S::Ok, S::Error> {
        aud.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(match Audience::deserialize(d)? {
            Audience::One(a) => vec![a],
            Audience::Many(a) => a,
        })
    }
}

/// `system:serviceaccount:<namespace>:<name>`.
pub fn username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The namespace and name of a service-account user name.
pub fn split_username(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// The groups every service account of `namespace` is in.
pub fn groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
    ]
}

/// Signs and verifies tokens with the service-account key.
pub struct TokenSigner {
    key: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
    /// The `iss` of the tokens this server issues: the first `--service-account-issuer`.
    pub issuer: String,
    /// Every `--service-account-issuer`: tokens of earlier issuers still authenticate.
    pub issuers: Vec<String>,
    /// What the server itself accepts: tokens for other audiences are not for it.
    pub audiences: Vec<String>,
}

/// DER prefix of a P-256 SubjectPublicKeyInfo, before the uncompressed point.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

impl TokenSigner {
    /// Loads the key at `path` (PKCS#8 PEM), creating it when missing.
    pub fn load_or_create(path: &Path) -> Result<Self, TokenError> {
        let io = |source| TokenError::Io {
            path: path.display().to_string(),
            source,
        };
        let pem = match std::fs::read_to_string(path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let rng = SystemRandom::new();
                let der =
                    EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                        .map_err(|_| TokenError::Key(path.display().to_string()))?;
                let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
                let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
                for line in b64.as_bytes().chunks(64) {
                    pem.push_str(std::str::from_utf8(line).expect("base64 is ascii"));
                    pem.push('\n');
                }
                pem.push_str("-----END PRIVATE KEY-----\n");
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, &pem).map_err(io)?;
                {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
                        .map_err(io)?;
                }
                std::fs::rename(&tmp, path).map_err(io)?;
                pem
            }
            Err(e) => return Err(io(e)),
        };
        let der = rustls_pemfile::private_key(&mut pem.as_bytes())
            .ok()
            .flatten()
            .ok_or_else(|| TokenError::Key(path.display().to_string()))?;
        Self::from_pkcs8(der.secret_der())
            .ok_or_else(|| TokenError::Key(path.display().to_string()))
    }

    pub fn from_pkcs8(der: &[u8]) -> Option<Self> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .ok()?;
        // Upstream's key id: the SHA-256 of the DER public key, base64url.
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(key.public_key().as_ref());
        let kid = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Some(TokenSigner {
            key,
            kid,
            rng,
            issuer: ISSUER.into(),
            issuers: vec![ISSUER.into()],
            audiences: vec![ISSUER.into()],
        })
    }

    /// Issues as the first of `issuers` and accepts tokens of all of them. The server's
    /// audiences are the issuers, as upstream's `--api-audiences` defaults to them.
    pub fn set_issuers(&mut self, issuers: &[String]) {
        if let Some(first) = issuers.first() {
            self.issuer = first.clone();
            self.issuers = issuers.to_vec();
            self.audiences = issuers.to_vec();
        }
    }

    /// The `kid` header of the tokens this signer signs.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as the JWK issuer discovery serves.
    pub fn jwk(&self) -> discovery::Jwk {
        discovery::Jwk::es256(self.key.public_key().as_ref(), &self.kid)
            .expect("a P-256 key pair's public key is an uncompressed point")
    }

    pub fn sign(&self, claims: &Claims) -> Result<String, TokenError> {
        let header = serde_json::json!({"alg": "ES256", "kid": self.kid});
        let body = serde_json::to_vec(claims).map_err(|_| TokenError::Sign)?;
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(body)
        );
        let sig = self
            .key
            .sign(&self.rng, input.as_bytes())
            .map_err(|_| TokenError::Sign)?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())))
    }

    /// Checks the signature, issuer, audience and validity window of `token` at `now`
    /// (seconds since the epoch).
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(body), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).map_err(|_| TokenError::Malformed);
        let header: serde_json::Value =
            serde_json::from_slice(&decode(header)?).map_err(|_| TokenError::Malformed)?;
        if header.get("alg").and_then(|a| a.as_str()) != Some("ES256") {
            return Err(TokenError::Signature);
        }
        let signed = &token[..token.len() - sig.len() - 1];
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        )
        .verify(signed.as_bytes(), &decode(sig)?)
        .map_err(|_| TokenError::Signature)?;
        let claims: Claims =
            serde_json::from_slice(&decode(body)?).map_err(|_| TokenError::Malformed)?;
        if !self.issuers.contains(&claims.iss) {
            return Err(TokenError::Issuer(claims.iss));
        }
        if !claims.aud.iter().any(|a| self.audiences.contains(a)) {
            return Err(TokenError::Audience(claims.aud));
        }
        if now > claims.exp + LEEWAY {
            return Err(TokenError::Expired);
        }
        if now + LEEWAY < claims.nbf {
            return Err(TokenError::NotYetValid);
        }
        Ok(claims)
    }
}

/// What a token is bound to, besides its service account.
#[derive(Clone, Debug, Default)]
pub struct Binding {
    pub pod: Option<Pod>,
    pub secret: Option<Secret>,
    pub node: Option<Node>,
}

fn reference(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Ref {
    Ref {
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
    }
}

/// The claims upstream's `serviceaccount.Claims` makes, at `now`.
pub fn claims(
    issuer: &str,
    sa: &ServiceAccount,
    bound: &Binding,
    expiration_seconds: i64,
    audiences: &[String],
    now: i64,
) -> Claims {
    let namespace = sa.metadata.namespace.clone().unwrap_or_default();
    let name = sa.metadata.name.clone().unwrap_or_default();
    Claims {
        aud: audiences.to_vec(),
        exp: now + expiration_seconds,
        iat: now,
        iss: issuer.into(),
        jti: uuid::Uuid::new_v4().to_string(),
        kubernetes: KubernetesClaims {
            namespace: namespace.clone(),
            node: bound.node.as_ref().map(|n| reference(&n.metadata)),
            pod: bound.pod.as_ref().map(|p| reference(&p.metadata)),
            secret: bound.secret.as_ref().map(|s| reference(&s.metadata)),
            serviceaccount: reference(&sa.metadata),
            warnafter: None,
        },
        nbf: now,
        sub: username(&namespace, &name),
    }
}

/// Issues tokens and authenticates them against the objects they name.
pub struct ServiceAccountTokens {
    pub signer: TokenSigner,
    pub service_accounts: Arc<GenericRegistry<BuiltIn<ServiceAccount>>>,
    pub pods: Arc<GenericRegistry<BuiltIn<Pod>>>,
    pub secrets: Arc<GenericRegistry<BuiltIn<Secret>>>,
    pub nodes: Arc<GenericRegistry<BuiltIn<Node>>>,
    /// `--service-account-extend-token-expiration`.
    pub extend_expiration: bool,
    /// `--service-account-max-token-expiration` in seconds: TokenRequests asking more are
    /// shortened to it.
    pub max_expiration: Option<i64>,
    /// The issuer discovery documents; `None` when the issuer is not an https URL (upstream
    /// then serves no discovery either).
    pub discovery: Option<discovery::Discovery>,
}

/// Why a bound object no longer vouches for a token.
fn still_bound(
    claimed: Option<&Ref>,
    found: Result<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, ()>,
    now: i64,
) -> bool {
    let Some(claimed) = claimed else { return true };
    let Ok(meta) = found else { return false };
    let deleted_long_ago = meta
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| t.0.as_second() < now - LEEWAY);
    !deleted_long_ago && meta.uid.as_deref() == Some(claimed.uid.as_str())
}

impl ServiceAccountTokens {
    /// Reads the objects tokens name through the server's registries.
    pub fn new(signer: TokenSigner, registries: &Registries) -> Self {
        ServiceAccountTokens {
            signer,
            service_accounts: registries.get(),
            pods: registries.get(),
            secrets: registries.get(),
            nodes: registries.get(),
            extend_expiration: true,
            max_expiration: None,
            discovery: None,
        }
    }

    /// Applies the flags: the issuers, the maximum lifetime and issuer discovery, whose
    /// default `jwks_uri` is on `external_address` (host and port). A discovery that cannot
    /// be built is logged and left out, as upstream leaves its endpoints out.
    pub fn configure(&mut self, options: &Options, external_address: &str) {
        self.signer.set_issuers(&options.issuers);
        self.max_expiration = options.max_expiration_seconds();
        self.discovery = match discovery::Discovery::new(
            &self.signer.issuer,
            options.jwks_uri.as_deref(),
            external_address,
            vec![self.signer.jwk()],
        ) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::error!(
                    "Could not construct pre-rendered responses for ServiceAccountIssuerDiscovery endpoints. Endpoints will not be enabled. Error: {e}"
                );
                None
            }
        };
    }

    /// The user a bearer token stands for, as upstream's service-account authenticator
    /// and validator decide: `None` for anything not (or no longer) valid.
    pub async fn authenticate(&self, token: &str) -> Option<(UserInfo, Extra)> {
        let now = jiff::Timestamp::now().as_second();
        let claims = match self.signer.verify(token, now) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "service account token rejected");
                return None;
            }
        };
        let k = &claims.kubernetes;
        let ns = k.namespace.as_str();
        let sa = self
            .service_accounts
            .get(Some(ns), &k.serviceaccount.name)
            .await
            .ok();
        if !still_bound(
            Some(&k.serviceaccount),
            sa.as_ref().map(|s| &s.metadata).ok_or(()),
            now,
        ) {
            tracing::debug!(namespace = ns, name = %k.serviceaccount.name, "token's service account is gone");
            return None;
        }
        if let Some(secret) = &k.secret {
            let found = self.secrets.get(Some(ns), &secret.name).await.ok();
            if !still_bound(
                Some(secret),
                found.as_ref().map(|s| &s.metadata).ok_or(()),
                now,
            ) {
                return None;
            }
        }
        if let Some(pod) = &k.pod {
            let found = self.pods.get(Some(ns), &pod.name).await.ok();
            if !still_bound(
                Some(pod),
                found.as_ref().map(|p| &p.metadata).ok_or(()),
                now,
            ) {
                return None;
            }
        }
        if let Some(node) = &k.node
            && k.pod.is_none()
        {
            let found = self.nodes.get(None, &node.name).await.ok();
            if !still_bound(
                Some(node),
                found.as_ref().map(|n| &n.metadata).ok_or(()),
                now,
            ) {
                return None;
            }
        }
        let mut extra = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            if !value.is_empty() {
                extra.insert(
                    format!("authentication.kubernetes.io/{key}"),
                    vec![value.into()],
                );
            }
        };
        if let Some(pod) = &k.pod {
            put("pod-name", &pod.name);
            put("pod-uid", &pod.uid);
        }
        if let Some(node) = &k.node {
            put("node-name", &node.name);
            put("node-uid", &node.uid);
        }
        if !claims.jti.is_empty() {
            put("credential-id", &format!("JTI={}", claims.jti));
        }
        let user = UserInfo {
            name: username(ns, &k.serviceaccount.name),
            uid: k.serviceaccount.uid.clone(),
            groups: groups(ns),
        };
        Some((user, extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa() -> ServiceAccount {
        ServiceAccount {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("default".into()),
                namespace: Some("ns1".into()),
                uid: Some("sa-uid".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn signs_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sa.key");
        let signer = TokenSigner::load_or_create(&path).unwrap();
        let again = TokenSigner::load_or_create(&path).unwrap();
        assert_eq!(signer.kid, again.kid, "the key is kept");
        let now = 1_700_000_000;
        let c = claims(
            ISSUER,
            &sa(),
            &Binding::default(),
            3600,
            &[ISSUER.into()],
            now,
        );
        assert_eq!(c.sub, "system:serviceaccount:ns1:default");
        let token = signer.sign(&c).unwrap();
        assert_eq!(again.verify(&token, now + 10).unwrap(), c);
        assert!(matches!(
            signer.verify(&token, now + 3600 + LEEWAY + 1),
            Err(TokenError::Expired)
        ));
        // Another key's signature does not verify.
        let other = TokenSigner::load_or_create(&dir.path().join("other.key")).unwrap();
        assert!(matches!(
            other.verify(&token, now),
            Err(TokenError::Signature)
        ));
        // Tampered claims do not verify.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let mut forged = c.clone();
        forged.kubernetes.serviceaccount.name = "admin".into();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert!(matches!(
            signer.verify(&parts.join("."), now),
            Err(TokenError::Signature)
        ));
        // A token for another audience is not for the API server.
        let vault = claims(
            ISSUER,
            &sa(),
            &Binding::default(),
            3600,
            &["vault".into()],
            now,
        );
        assert!(matches!(
            signer.verify(&signer.sign(&vault).unwrap(), now),
            Err(TokenError::Audience(_))
        ));
        assert!(matches!(
            signer.verify("not-a-token", now),
            Err(TokenError::Malformed)
        ));
    }

    #[test]
    fn the_first_issuer_issues_and_all_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let mut signer = TokenSigner::load_or_create(&dir.path().join("sa.key")).unwrap();
        let issuers = vec!["https://new.example".to_string(), ISSUER.to_string()];
        signer.set_issuers(&issuers);
        assert_eq!(signer.issuer, "https://new.example");
        assert_eq!(signer.audiences, issuers);
        let now = 1_700_000_000;
        let sign = |iss: &str| {
            let c = claims(iss, &sa(), &Binding::default(), 3600, &[ISSUER.into()], now);
            signer.sign(&c).unwrap()
        };
        assert_eq!(
            signer.verify(&sign(ISSUER), now).unwrap().iss,
            ISSUER,
            "the earlier issuer's tokens still verify"
        );
        assert!(signer.verify(&sign("https://new.example"), now).is_ok());
        assert!(matches!(
            signer.verify(&sign("https://other.example"), now),
            Err(TokenError::Issuer(i)) if i == "https://other.example"
        ));
        // The JWK carries the tokens' kid and the key that verifies them.
        let jwk = signer.jwk();
        assert_eq!(jwk.kid, signer.kid());
        let token = sign(ISSUER);
        let header: serde_json::Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(token.split('.').next().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(header, serde_json::json!({"alg": "ES256", "kid": jwk.kid}));
        let (signed, sig) = token.rsplit_once('.').unwrap();
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            jwk.uncompressed_point().unwrap(),
        )
        .verify(signed.as_bytes(), &URL_SAFE_NO_PAD.decode(sig).unwrap())
        .unwrap();
    }

    #[test]
    fn usernames() {
        assert_eq!(
            split_username("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(split_username("system:serviceaccount:ns"), None);
        assert_eq!(split_username("jane"), None);
        assert_eq!(
            groups("a"),
            vec!["system:serviceaccounts", "system:serviceaccounts:a"]
        );
    }
}
