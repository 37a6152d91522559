//! ServiceAccount issuer discovery, as kube-apiserver serves it: an OpenID Connect provider
//! configuration at `/.well-known/openid-configuration` and the signing key set at
//! `/openid/v1/jwks`. With them a relying party outside the cluster (a cloud's workload
//! identity federation, Vault, any OIDC library) verifies a ServiceAccount token with nothing
//! but the issuer URL, never calling the API server's TokenReview.
//!
//! Both documents are rendered once at start, as upstream's `openidConfigProvider` does: the
//! key does not change while the server runs. Their bytes are upstream's: go-jose's field
//! order, padded curve coordinates, no trailing newline.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Where the provider configuration is served (upstream's `OpenIDConfigPath`).
pub const OPENID_CONFIG_PATH: &str = "/.well-known/openid-configuration";
/// Where the key set is served (upstream's `JWKSPath`).
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// How long relying parties may cache either document: upstream's static keys' one hour.
pub const CACHE_CONTROL: &str = "public, max-age=3600";
/// RFC 7517's media type of a key set.
pub const JWKS_CONTENT_TYPE: &str = "application/jwk-set+json";

/// A public signing key as a JSON Web Key, its members in go-jose's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    #[serde(rename = "use")]
    pub use_: String,
    pub kty: String,
    pub kid: String,
    pub crv: String,
    pub alg: String,
    /// The point's coordinates, big-endian, padded to the curve's size, base64url.
    pub x: String,
    pub y: String,
}

/// Coordinates of a P-256 point are 32 bytes each.
const P256_COORDINATE_LEN: usize = 32;

impl Jwk {
    /// The JWK of a P-256 public key given as an uncompressed point (`0x04 || X || Y`, as
    /// ring gives it), for ES256 signatures; `None` for anything else.
    pub fn es256(uncompressed_point: &[u8], kid: &str) -> Option<Jwk> {
        let (tag, xy) = uncompressed_point.split_first()?;
        if *tag != 0x04 || xy.len() != 2 * P256_COORDINATE_LEN {
            return None;
        }
        let (x, y) = xy.split_at(P256_COORDINATE_LEN);
        Some(Jwk {
            use_: "sig".into(),
            kty: "EC".into(),
            kid: kid.into(),
            crv: "P-256".into(),
            alg: "ES256".into(),
            x: URL_SAFE_NO_PAD.encode(x),
            y: URL_SAFE_NO_PAD.encode(y),
        })
    }

    /// The uncompressed point again (what a verifier hands to its crypto library).
    pub fn uncompressed_point(&self) -> Option<Vec<u8>> {
        if self.kty != "EC" || self.crv != "P-256" {
            return None;
        }
        let x = URL_SAFE_NO_PAD.decode(&self.x).ok()?;
        let y = URL_SAFE_NO_PAD.decode(&self.y).ok()?;
        if x.len() != P256_COORDINATE_LEN || y.len() != P256_COORDINATE_LEN {
            return None;
        }
        let mut point = Vec::with_capacity(1 + 2 * P256_COORDINATE_LEN);
        point.push(0x04);
        point.extend_from_slice(&x);
        point.extend_from_slice(&y);
        Some(point)
    }
}

/// A JSON Web Key Set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwkSet {
    pub keys: Vec<Jwk>,
}

/// The subset of OIDC provider metadata upstream serves, in its order: what a relying party
/// needs to verify ID tokens (no login endpoints).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderMetadata {
    pub issuer: String,
    pub jwks_uri: String,
    pub response_types_supported: Vec<String>,
    pub subject_types_supported: Vec<String>,
    pub id_token_signing_alg_values_supported: Vec<String>,
}

/// Why the discovery endpoints are not served; upstream's messages.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DiscoveryError {
    #[error("empty issuer URL")]
    EmptyIssuer,
    #[error("issuer URL must use https scheme, got: {0}")]
    IssuerScheme(String),
    #[error("issuer URL may not include a query, got: {0}")]
    IssuerQuery(String),
    #[error("issuer URL may not include a fragment, got: {0}")]
    IssuerFragment(String),
    #[error("jwksURI requires https scheme, parsed as: {0}")]
    JwksScheme(String),
    #[error(
        "attempted to build jwks_uri from external address {0}, but could not construct a valid URL. Error: empty address"
    )]
    EmptyAddress(String),
    #[error("no keys provided for validating keyset")]
    NoKeys,
}

/// The two documents, rendered.
#[derive(Clone, Debug)]
pub struct Discovery {
    pub config_json: Bytes,
    pub keyset_json: Bytes,
}

impl Discovery {
    /// Upstream's `NewOpenIDMetadataProvider`: `issuer` must be an https URL without query or
    /// fragment; `jwks_uri` (`--service-account-jwks-uri`) must be https and defaults to
    /// `https://<external_address>/openid/v1/jwks`.
    pub fn new(
        issuer: &str,
        jwks_uri: Option<&str>,
        external_address: &str,
        keys: Vec<Jwk>,
    ) -> Result<Discovery, DiscoveryError> {
        if issuer.is_empty() {
            return Err(DiscoveryError::EmptyIssuer);
        }
        let parts = UrlParts::of(issuer);
        if parts.scheme != "https" {
            return Err(DiscoveryError::IssuerScheme(issuer.into()));
        }
        if !parts.query.is_empty() {
            return Err(DiscoveryError::IssuerQuery(issuer.into()));
        }
        if !parts.fragment.is_empty() {
            return Err(DiscoveryError::IssuerFragment(issuer.into()));
        }
        let jwks_uri = match jwks_uri.filter(|u| !u.is_empty()) {
            Some(uri) if UrlParts::of(uri).scheme != "https" => {
                return Err(DiscoveryError::JwksScheme(uri.into()));
            }
            Some(uri) => uri.to_string(),
            None if external_address.is_empty() => {
                return Err(DiscoveryError::EmptyAddress(external_address.into()));
            }
            None => format!("https://{external_address}{JWKS_PATH}"),
        };
        if keys.is_empty() {
            return Err(DiscoveryError::NoKeys);
        }
        // Sorted and without repeats, as upstream's `sets.String.List()`.
        let mut algs: Vec<String> = keys.iter().map(|k| k.alg.clone()).collect();
        algs.sort();
        algs.dedup();
        let metadata = ProviderMetadata {
            issuer: issuer.into(),
            jwks_uri,
            response_types_supported: vec!["id_token".into()],
            subject_types_supported: vec!["public".into()],
            id_token_signing_alg_values_supported: algs,
        };
        let config_json = serde_json::to_vec(&metadata).expect("metadata serializes");
        let keyset_json = serde_json::to_vec(&JwkSet { keys }).expect("keys serialize");
        Ok(Discovery {
            config_json: config_json.into(),
            keyset_json: keyset_json.into(),
        })
    }
}

/// The pieces of a URL the checks look at, as Go's `url.Parse` splits them: the scheme
/// (lowercased) before the first `:` when it is a valid scheme, the query after `?` and the
/// fragment after `#`.
struct UrlParts<'a> {
    scheme: String,
    query: &'a str,
    fragment: &'a str,
}

impl<'a> UrlParts<'a> {
    fn of(url: &'a str) -> UrlParts<'a> {
        let (rest, fragment) = url.split_once('#').unwrap_or((url, ""));
        let (_, query) = rest.split_once('?').unwrap_or((rest, ""));
        let scheme = match rest.split_once(':') {
            Some((s, _))
                if s.starts_with(|c: char| c.is_ascii_alphabetic())
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                s.to_ascii_lowercase()
            }
            _ => String::new(),
        };
        UrlParts {
            scheme,
            query,
            fragment,
        }
    }
}

/// What Go's `url.Parse` refuses in a string, as its messages say it: an empty scheme before
/// a colon, control characters and broken `%` escapes. `None` when it parses.
pub fn url_parse_error(s: &str) -> Option<String> {
    if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Some(format!(
            "parse {s:?}: net/url: invalid control character in URL"
        ));
    }
    if s.starts_with(':') {
        return Some(format!("parse {s:?}: missing protocol scheme"));
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let escape = bytes.get(i..i + 3);
            let valid =
                escape.is_some_and(|e| e[1].is_ascii_hexdigit() && e[2].is_ascii_hexdigit());
            if !valid {
                let shown = &s[i..(i + 3).min(s.len())];
                return Some(format!("parse {s:?}: invalid URL escape {shown:?}"));
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 point whose coordinates start with zero bytes, which must stay (go-jose pads
    /// coordinates to the curve's size).
    fn point() -> Vec<u8> {
        let mut p = vec![0x04];
        p.extend((0..32u8).map(|i| if i < 2 { 0 } else { i }));
        p.extend((0..32u8).map(|i| 0xff - i));
        p
    }

    #[test]
    fn jwk_members_and_order_are_go_joses() {
        let jwk = Jwk::es256(&point(), "key-1").unwrap();
        let json = serde_json::to_string(&jwk).unwrap();
        let x = URL_SAFE_NO_PAD.encode(&point()[1..33]);
        let y = URL_SAFE_NO_PAD.encode(&point()[33..]);
        assert_eq!(
            json,
            format!(
                r#"{{"use":"sig","kty":"EC","kid":"key-1","crv":"P-256","alg":"ES256","x":"{x}","y":"{y}"}}"#
            )
        );
        assert!(x.starts_with("AAA"), "leading zero bytes are kept: {x}");
        assert_eq!(x.len(), 43, "32 bytes, unpadded base64url");
        assert_eq!(jwk.uncompressed_point().unwrap(), point());
    }

    #[test]
    fn jwk_refuses_what_is_not_an_uncompressed_p256_point() {
        assert!(Jwk::es256(&point()[..64], "k").is_none());
        let mut compressed = point();
        compressed[0] = 0x02;
        assert!(Jwk::es256(&compressed, "k").is_none());
        let mut jwk = Jwk::es256(&point(), "k").unwrap();
        jwk.x = URL_SAFE_NO_PAD.encode([1u8; 31]);
        assert!(jwk.uncompressed_point().is_none());
    }

    #[test]
    fn jwk_from_a_real_key_verifies_its_signatures() {
        use ring::signature::{self, EcdsaKeyPair, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let der = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .unwrap();
        let key = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            der.as_ref(),
            &rng,
        )
        .unwrap();
        let jwk = Jwk::es256(key.public_key().as_ref(), "k").unwrap();
        // Through JSON, as a relying party receives it.
        let jwk: Jwk = serde_json::from_slice(&serde_json::to_vec(&jwk).unwrap()).unwrap();
        let sig = key.sign(&rng, b"payload").unwrap();
        let public = jwk.uncompressed_point().unwrap();
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &public)
            .verify(b"payload", sig.as_ref())
            .unwrap();
    }

    #[test]
    fn documents_are_upstreams() {
        let jwk = Jwk::es256(&point(), "k").unwrap();
        let d = Discovery::new(
            "https://kubernetes.default.svc.cluster.local",
            None,
            "10.0.0.1:6443",
            vec![jwk.clone()],
        )
        .unwrap();
        assert_eq!(
            std::str::from_utf8(&d.config_json).unwrap(),
            r#"{"issuer":"https://kubernetes.default.svc.cluster.local","jwks_uri":"https://10.0.0.1:6443/openid/v1/jwks","response_types_supported":["id_token"],"subject_types_supported":["public"],"id_token_signing_alg_values_supported":["ES256"]}"#
        );
        let keys: serde_json::Value = serde_json::from_slice(&d.keyset_json).unwrap();
        assert_eq!(keys, serde_json::json!({"keys": [jwk]}));
        let d = Discovery::new(
            "https://issuer.example",
            Some("https://keys.example/jwks"),
            "10.0.0.1:6443",
            vec![Jwk::es256(&point(), "k").unwrap()],
        )
        .unwrap();
        let config: ProviderMetadata = serde_json::from_slice(&d.config_json).unwrap();
        assert_eq!(config.jwks_uri, "https://keys.example/jwks");
    }

    #[test]
    fn issuers_and_uris_that_oidc_refuses() {
        let keys = || vec![Jwk::es256(&point(), "k").unwrap()];
        let err = |issuer: &str, jwks: Option<&str>, addr: &str| {
            Discovery::new(issuer, jwks, addr, keys())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err("", None, "a:1"), "empty issuer URL");
        assert_eq!(
            err("http://issuer", None, "a:1"),
            "issuer URL must use https scheme, got: http://issuer"
        );
        assert_eq!(
            err("kubernetes.default.svc", None, "a:1"),
            "issuer URL must use https scheme, got: kubernetes.default.svc"
        );
        assert_eq!(
            err("https://issuer?a=b", None, "a:1"),
            "issuer URL may not include a query, got: https://issuer?a=b"
        );
        assert_eq!(
            err("https://issuer#top", None, "a:1"),
            "issuer URL may not include a fragment, got: https://issuer#top"
        );
        assert_eq!(
            err("https://issuer", Some("http://keys"), "a:1"),
            "jwksURI requires https scheme, parsed as: http://keys"
        );
        assert!(err("https://issuer", None, "").contains("empty address"));
        assert_eq!(
            Discovery::new("https://issuer", None, "a:1", vec![]).unwrap_err(),
            DiscoveryError::NoKeys
        );
        // An empty query or fragment is none (Go's RawQuery and Fragment are empty).
        assert!(Discovery::new("HTTPS://issuer?#", None, "a:1", keys()).is_ok());
    }

    #[test]
    fn url_parse_errors_are_gos() {
        assert_eq!(url_parse_error("https://issuer.example/a%20b"), None);
        assert_eq!(url_parse_error("urn:k8s:issuer"), None);
        assert_eq!(
            url_parse_error(":issuer").unwrap(),
            r#"parse ":issuer": missing protocol scheme"#
        );
        assert_eq!(
            url_parse_error("https://a/%zz").unwrap(),
            r#"parse "https://a/%zz": invalid URL escape "%zz""#
        );
        assert_eq!(
            url_parse_error("https://a/%2").unwrap(),
            r#"parse "https://a/%2": invalid URL escape "%2""#
        );
        assert!(
            url_parse_error("https://a/\n")
                .unwrap()
                .ends_with("net/url: invalid control character in URL")
        );
    }
}
