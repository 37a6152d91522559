//! kube-apiserver's ServiceAccount token flags, checked as upstream checks them at start:
//! `--service-account-issuer` (repeatable: the first issues, all are accepted, so a cluster
//! can move to a new issuer without invalidating the tokens pods already hold),
//! `--service-account-jwks-uri` and `--service-account-max-token-expiration`.

use std::time::Duration;

use super::discovery::url_parse_error;
use super::{EXPIRATION_EXTENSION_SECONDS, ISSUER, WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS};

/// The bounds of `--service-account-max-token-expiration`: an hour to 2^32 seconds.
const MAX_EXPIRATION_LOW: u64 = 60 * 60;
const MAX_EXPIRATION_HIGH: u64 = 1 << 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `--service-account-issuer`: the first is the `iss` of new tokens and the issuer
    /// discovery names; tokens of any of them authenticate.
    pub issuers: Vec<String>,
    /// `--service-account-jwks-uri`: the `jwks_uri` discovery announces instead of this
    /// server's own `/openid/v1/jwks`.
    pub jwks_uri: Option<String>,
    /// `--service-account-max-token-expiration`: longer TokenRequests are shortened to it.
    pub max_token_expiration: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            issuers: vec![ISSUER.into()],
            jwks_uri: None,
            max_token_expiration: None,
        }
    }
}

impl Options {
    /// Every problem with the flags, in upstream's words (its `Validate` and `Complete`).
    /// `extend_expiration` is `--service-account-extend-token-expiration`, whose conflicts
    /// with the maximum are only warned about.
    pub fn validate(&self, extend_expiration: bool) -> Vec<String> {
        let mut errs = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for issuer in &self.issuers {
            if issuer.contains(':')
                && let Some(e) = url_parse_error(issuer)
            {
                errs.push(format!(
                    "service-account-issuer {issuer:?} contained a ':' but was not a valid URL: {e}"
                ));
                continue;
            }
            if issuer.is_empty() {
                errs.push("service-account-issuer should not be an empty string".into());
                continue;
            }
            if !seen.insert(issuer.as_str()) {
                errs.push(format!(
                    "service-account-issuer {issuer:?} is already specified"
                ));
            }
        }
        if self.issuers.is_empty() {
            errs.push("service-account-issuer is a required flag".into());
        }
        if let Some(uri) = self.jwks_uri.as_deref().filter(|u| !u.is_empty()) {
            if let Some(e) = url_parse_error(uri) {
                errs.push(format!("service-account-jwks-uri must be a valid URL: {e}"));
            } else if !uri
                .split_once(':')
                .is_some_and(|(s, _)| s.eq_ignore_ascii_case("https"))
            {
                errs.push(format!(
                    "service-account-jwks-uri requires https scheme, parsed as: {uri}"
                ));
            }
        }
        if let Some(max) = self.max_token_expiration.filter(|d| !d.is_zero()) {
            if max < Duration::from_secs(MAX_EXPIRATION_LOW)
                || max > Duration::from_secs(MAX_EXPIRATION_HIGH)
            {
                errs.push(
                    "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"
                        .into(),
                );
            } else if extend_expiration {
                if max.as_secs() < WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS as u64 {
                    tracing::warn!(
                        "service-account-extend-token-expiration is true, in order to correctly trigger safe transition logic, service-account-max-token-expiration must be set longer than {} seconds (currently {:?})",
                        WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS,
                        max
                    );
                }
                if max.as_secs() < EXPIRATION_EXTENSION_SECONDS as u64 {
                    tracing::warn!(
                        "service-account-extend-token-expiration is true, enabling tokens valid up to {} seconds, which is longer than service-account-max-token-expiration set to {:?}",
                        EXPIRATION_EXTENSION_SECONDS,
                        max
                    );
                }
            }
        }
        errs
    }

    /// [`Options::validate`] as one error, joined as upstream's aggregate error is.
    pub fn check(&self, extend_expiration: bool) -> Result<(), super::TokenError> {
        let errs = self.validate(extend_expiration);
        match errs.as_slice() {
            [] => Ok(()),
            [one] => Err(super::TokenError::Flags(one.clone())),
            many => Err(super::TokenError::Flags(format!("[{}]", many.join(", ")))),
        }
    }

    /// The maximum lifetime of a requested token in seconds, `None` for no maximum (an unset
    /// or zero flag).
    pub fn max_expiration_seconds(&self) -> Option<i64> {
        self.max_token_expiration
            .filter(|d| !d.is_zero())
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_issuers(issuers: &[&str]) -> Options {
        Options {
            issuers: issuers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_valid() {
        let o = Options::default();
        assert_eq!(o.issuers, vec![ISSUER.to_string()]);
        assert!(o.validate(true).is_empty());
        assert_eq!(o.max_expiration_seconds(), None);
    }

    #[test]
    fn issuers_as_upstream_checks_them() {
        assert!(
            with_issuers(&["https://new.example", ISSUER, "plain-string"])
                .validate(true)
                .is_empty()
        );
        assert_eq!(
            with_issuers(&["https://a", "", "https://a", ":bad"]).validate(true),
            vec![
                "service-account-issuer should not be an empty string".to_string(),
                "service-account-issuer \"https://a\" is already specified".into(),
                "service-account-issuer \":bad\" contained a ':' but was not a valid URL: parse \":bad\": missing protocol scheme".into(),
            ]
        );
        assert_eq!(
            with_issuers(&["", ""]).check(true).unwrap_err().to_string(),
            "[service-account-issuer should not be an empty string, service-account-issuer should not be an empty string]"
        );
        assert_eq!(
            with_issuers(&[]).validate(true),
            vec!["service-account-issuer is a required flag".to_string()]
        );
    }

    #[test]
    fn jwks_uri_must_be_https() {
        let jwks = |uri: &str| Options {
            jwks_uri: Some(uri.into()),
            ..Default::default()
        };
        assert!(jwks("https://keys.example/jwks").validate(true).is_empty());
        assert_eq!(
            jwks("http://keys.example/jwks").validate(true),
            vec![
                "service-account-jwks-uri requires https scheme, parsed as: http://keys.example/jwks"
                    .to_string()
            ]
        );
        assert_eq!(
            jwks("https://keys/%zz").validate(true),
            vec![
                "service-account-jwks-uri must be a valid URL: parse \"https://keys/%zz\": invalid URL escape \"%zz\""
                    .to_string()
            ]
        );
    }

    #[test]
    fn max_expiration_bounds() {
        let max = |secs: u64| Options {
            max_token_expiration: Some(Duration::from_secs(secs)),
            ..Default::default()
        };
        for ok in [0, 3600, 7200, 1 << 32] {
            assert!(max(ok).validate(true).is_empty(), "{ok}");
        }
        for bad in [1, 3599, (1 << 32) + 1] {
            assert_eq!(
                max(bad).validate(false),
                vec![
                    "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"
                        .to_string()
                ],
                "{bad}"
            );
        }
        assert_eq!(max(0).max_expiration_seconds(), None, "zero is unset");
        assert_eq!(max(7200).max_expiration_seconds(), Some(7200));
    }
}
