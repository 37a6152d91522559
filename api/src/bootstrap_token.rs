//! Bootstrap tokens, as upstream's `k8s.io/cluster-bootstrap` defines them: a short-lived
//! bearer token `<id>.<secret>` kept as a Secret `kube-system/bootstrap-token-<id>` of type
//! `bootstrap.kubernetes.io/token`, with which a machine that holds nothing else (a node about
//! to join) authenticates as `system:bootstrap:<id>` in `system:bootstrappers`. One
//! definition of the format, the expiry and the extra groups, shared by the API server's
//! authenticator, the token cleaner and `minik8s token`, so the three cannot disagree.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The type of the Secrets that hold bootstrap tokens.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Where the Secrets live.
pub const NAMESPACE: &str = "kube-system";
/// Secrets are named `bootstrap-token-<id>`.
pub const SECRET_PREFIX: &str = "bootstrap-token-";
pub const ID_KEY: &str = "token-id";
pub const SECRET_KEY: &str = "token-secret";
/// An RFC 3339 time after which the token is invalid (and deleted); optional.
pub const EXPIRATION_KEY: &str = "expiration";
pub const DESCRIPTION_KEY: &str = "description";
/// Comma-separated groups the token authenticates in besides [`DEFAULT_GROUP`].
pub const EXTRA_GROUPS_KEY: &str = "auth-extra-groups";
/// `usage-bootstrap-<usage>: "true"` marks what the token may be used for.
pub const USAGE_PREFIX: &str = "usage-bootstrap-";
pub const USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
pub const USAGE_SIGNING: &str = "usage-bootstrap-signing";
/// The usages upstream knows (`KnownTokenUsages`).
pub const KNOWN_USAGES: &[&str] = &["signing", "authentication"];
/// The user a token authenticates as is this prefix and its id.
pub const USER_PREFIX: &str = "system:bootstrap:";
/// The group every bootstrap token authenticates in.
pub const DEFAULT_GROUP: &str = "system:bootstrappers";
/// Upstream's patterns, quoted in its error messages.
pub const TOKEN_PATTERN: &str = r"\A([a-z0-9]{6})\.([a-z0-9]{16})\z";
pub const ID_PATTERN: &str = r"\A([a-z0-9]{6})\z";
pub const GROUP_PATTERN: &str = r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z";

const ID_LEN: usize = 6;
const SECRET_LEN: usize = 16;
const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

fn lower_alnum(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

/// Whether `id` is a token id (`[a-z0-9]{6}`).
pub fn valid_id(id: &str) -> bool {
    lower_alnum(id, ID_LEN)
}

/// The id and the secret of a token `[a-z0-9]{6}.[a-z0-9]{16}`; `None` for anything else
/// (a bearer token of another kind).
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    (valid_id(id) && lower_alnum(secret, SECRET_LEN)).then_some((id, secret))
}

/// The name of the Secret of token `id`.
pub fn secret_name(id: &str) -> String {
    format!("{SECRET_PREFIX}{id}")
}

/// The token id a Secret's name carries (`bootstrap-token-<id>`).
pub fn id_of_secret_name(name: &str) -> Option<&str> {
    name.strip_prefix(SECRET_PREFIX).filter(|id| valid_id(id))
}

/// A random token, each character drawn evenly from `[a-z0-9]` (upstream discards the
/// random bytes past the last whole multiple of 36 for the same reason).
pub fn generate() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    let mut draw = |len: usize| -> String {
        (0..len)
            .map(|_| {
                let b = loop {
                    let b: u8 = rng.random();
                    if b < 252 {
                        break b;
                    }
                };
                ALPHABET[usize::from(b) % ALPHABET.len()] as char
            })
            .collect()
    };
    let id = draw(ID_LEN);
    let secret = draw(SECRET_LEN);
    format!("{id}.{secret}")
}

/// Upstream's `ValidateBootstrapGroupName`, with its message.
pub fn validate_group(name: &str) -> Result<(), String> {
    let ok = name
        .strip_prefix("system:bootstrappers:")
        .is_some_and(|rest| {
            !rest.is_empty()
                && rest.len() <= 256
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'-')
                && rest
                    .bytes()
                    .last()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bootstrap group {name:?} is invalid (must match {GROUP_PATTERN})"
        ))
    }
}

/// Upstream's `ValidateUsages`, with its message.
pub fn validate_usages(usages: &[String]) -> Result<(), String> {
    let mut invalid: Vec<&str> = usages
        .iter()
        .map(String::as_str)
        .filter(|u| !KNOWN_USAGES.contains(u))
        .collect();
    invalid.sort_unstable();
    invalid.dedup();
    if invalid.is_empty() {
        return Ok(());
    }
    Err(format!(
        "invalid bootstrap token usage string: {}, valid usage options: {}",
        invalid.join(","),
        KNOWN_USAGES.join(",")
    ))
}

/// The value of `key` in the Secret's data, as a string (`""` when absent).
pub fn data<'a>(secret: &'a Secret, key: &str) -> &'a str {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| std::str::from_utf8(&v.0).ok())
        .unwrap_or_default()
}

/// When a token stops being valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No `expiration`.
    Never,
    /// Valid for this long still.
    In(Duration),
    /// Past its expiration, or one that does not parse (upstream treats both alike).
    Expired,
}

/// Upstream's `GetExpiration` at `now`.
pub fn expiry(secret: &Secret, now: Timestamp) -> Expiry {
    let text = data(secret, EXPIRATION_KEY);
    if text.is_empty() {
        return Expiry::Never;
    }
    let Ok(at) = text.parse::<Timestamp>() else {
        return Expiry::Expired;
    };
    match at.duration_since(now).as_millis() {
        ms if ms <= 0 => Expiry::Expired,
        ms => Expiry::In(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))),
    }
}

/// Upstream's `GetGroups`: [`DEFAULT_GROUP`] and the valid extra groups, sorted and
/// deduplicated; an invalid extra group invalidates the token.
pub fn groups(secret: &Secret) -> Result<Vec<String>, String> {
    let mut groups = vec![DEFAULT_GROUP.to_string()];
    let extra = data(secret, EXTRA_GROUPS_KEY);
    if !extra.is_empty() {
        for group in extra.split(',') {
            validate_group(group)?;
            groups.push(group.to_string());
        }
    }
    groups.sort();
    groups.dedup();
    Ok(groups)
}

/// A bootstrap token as `kubeadm token` handles it: what goes into its Secret and what a
/// listing shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    pub secret: String,
    pub description: String,
    pub expires: Option<Timestamp>,
    /// Without the `usage-bootstrap-` prefix: `signing`, `authentication`.
    pub usages: Vec<String>,
    pub groups: Vec<String>,
}

impl BootstrapToken {
    /// The full token, `<id>.<secret>`.
    pub fn token(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }

    /// The Secret that holds it (kubeadm's `BootstrapTokenToSecret`): the expiry in UTC to
    /// the second, each usage `"true"`, the groups comma-joined.
    pub fn to_secret(&self) -> Secret {
        let mut data = BTreeMap::new();
        let mut put = |k: String, v: &str| {
            data.insert(k, ByteString(v.as_bytes().to_vec()));
        };
        put(ID_KEY.into(), &self.id);
        put(SECRET_KEY.into(), &self.secret);
        if !self.description.is_empty() {
            put(DESCRIPTION_KEY.into(), &self.description);
        }
        if let Some(at) = self.expires {
            let at = Timestamp::from_second(at.as_second()).unwrap_or(at);
            put(EXPIRATION_KEY.into(), &at.to_string());
        }
        for usage in &self.usages {
            put(format!("{USAGE_PREFIX}{usage}"), "true");
        }
        if !self.groups.is_empty() {
            put(EXTRA_GROUPS_KEY.into(), &self.groups.join(","));
        }
        Secret {
            metadata: ObjectMeta {
                name: Some(secret_name(&self.id)),
                namespace: Some(NAMESPACE.into()),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(data),
            ..Default::default()
        }
    }

    /// The token a Secret holds (kubeadm's `BootstrapTokenFromSecret`), or why it holds none.
    pub fn from_secret(secret: &Secret) -> Result<BootstrapToken, String> {
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        let id = data(secret, ID_KEY);
        if id.is_empty() {
            return Err(format!(
                "bootstrap Token Secret has no token-id data: {name}"
            ));
        }
        if name != secret_name(id) {
            return Err(format!(
                "bootstrap token name is not of the form '{SECRET_PREFIX}(token-id)'. Actual: {name:?}. Expected: {:?}",
                secret_name(id)
            ));
        }
        let token_secret = data(secret, SECRET_KEY);
        if parse(&format!("{id}.{token_secret}")).is_none() {
            return Err(format!(
                "bootstrap Token Secret {name} holds no valid token (must match {TOKEN_PATTERN})"
            ));
        }
        let expiration = data(secret, EXPIRATION_KEY);
        let expires = if expiration.is_empty() {
            None
        } else {
            Some(expiration.parse::<Timestamp>().map_err(|e| {
                format!("can't parse expiration time of bootstrap token {name:?}: {e}")
            })?)
        };
        let mut usages: Vec<String> = secret
            .data
            .iter()
            .flatten()
            .filter(|(_, v)| v.0 == b"true")
            .filter_map(|(k, _)| k.strip_prefix(USAGE_PREFIX).map(str::to_string))
            .collect();
        usages.sort();
        let groups = data(secret, EXTRA_GROUPS_KEY);
        Ok(BootstrapToken {
            id: id.to_string(),
            secret: token_secret.to_string(),
            description: data(secret, DESCRIPTION_KEY).to_string(),
            expires,
            usages,
            groups: if groups.is_empty() {
                Vec::new()
            } else {
                groups.split(',').map(str::to_string).collect()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn tokens_parse_only_in_the_upstream_form() {
        assert_eq!(
            parse("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "ABCDEF.0123456789abcdef",
            "abcdef.0123456789abcdef0",
            "abcdef.0123456789abcdef.x",
            "eyJhbGciOiJSUzI1NiJ9.e30.sig",
            "",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert!(valid_id("07401b"));
        assert!(!valid_id("07401"));
        assert_eq!(id_of_secret_name("bootstrap-token-07401b"), Some("07401b"));
        assert_eq!(id_of_secret_name("bootstrap-token-0740"), None);
        assert_eq!(id_of_secret_name("other-07401b"), None);
    }

    #[test]
    fn generated_tokens_parse() {
        let a = generate();
        let b = generate();
        assert!(parse(&a).is_some(), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn extra_groups_must_be_bootstrappers_subgroups() {
        assert!(validate_group("system:bootstrappers:kubeadm:default-node-token").is_ok());
        assert!(validate_group("system:bootstrappers:a").is_ok());
        for bad in [
            "system:bootstrappers",
            "system:bootstrappers:",
            "system:bootstrappers:a-",
            "system:bootstrappers:A",
            "system:masters",
            "system:bootstrappers:a b",
        ] {
            assert!(validate_group(bad).is_err(), "{bad}");
        }
        assert_eq!(
            validate_group("system:masters").unwrap_err(),
            r#"bootstrap group "system:masters" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#
        );
        let long = format!("system:bootstrappers:{}", "a".repeat(256));
        assert!(validate_group(&long).is_ok());
        let longer = format!("system:bootstrappers:{}", "a".repeat(257));
        assert!(validate_group(&longer).is_err());
    }

    #[test]
    fn groups_always_hold_the_default_sorted() {
        assert_eq!(groups(&secret(&[])).unwrap(), vec![DEFAULT_GROUP]);
        assert_eq!(
            groups(&secret(&[(
                EXTRA_GROUPS_KEY,
                "system:bootstrappers:b,system:bootstrappers:a,system:bootstrappers:a"
            )]))
            .unwrap(),
            vec![
                "system:bootstrappers",
                "system:bootstrappers:a",
                "system:bootstrappers:b"
            ]
        );
        assert!(
            groups(&secret(&[(
                EXTRA_GROUPS_KEY,
                "system:bootstrappers:a,system:masters"
            )]))
            .is_err()
        );
    }

    #[test]
    fn expiry_follows_upstream() {
        let now: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(expiry(&secret(&[]), now), Expiry::Never);
        assert_eq!(
            expiry(&secret(&[(EXPIRATION_KEY, "2025-01-01T01:00:00Z")]), now),
            Expiry::In(Duration::from_secs(3600))
        );
        assert_eq!(
            expiry(
                &secret(&[(EXPIRATION_KEY, "2025-01-01T02:00:00+02:00")]),
                now
            ),
            Expiry::Expired
        );
        assert_eq!(
            expiry(&secret(&[(EXPIRATION_KEY, "2025-01-01T00:00:00Z")]), now),
            Expiry::Expired
        );
        assert_eq!(
            expiry(&secret(&[(EXPIRATION_KEY, "tomorrow")]), now),
            Expiry::Expired
        );
    }

    #[test]
    fn usages_are_checked() {
        assert!(validate_usages(&["signing".into(), "authentication".into()]).is_ok());
        assert_eq!(
            validate_usages(&["signing".into(), "b".into(), "a".into()]).unwrap_err(),
            "invalid bootstrap token usage string: a,b, valid usage options: signing,authentication"
        );
    }

    #[test]
    fn secrets_round_trip_as_kubeadm_writes_them() {
        let token = BootstrapToken {
            id: "abcdef".into(),
            secret: "0123456789abcdef".into(),
            description: "joins nodes".into(),
            expires: Some("2025-01-01T00:00:00.5Z".parse().unwrap()),
            usages: vec!["authentication".into(), "signing".into()],
            groups: vec!["system:bootstrappers:workers".into()],
        };
        let s = token.to_secret();
        assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE));
        assert_eq!(data(&s, EXPIRATION_KEY), "2025-01-01T00:00:00Z");
        assert_eq!(data(&s, USAGE_AUTHENTICATION), "true");
        assert_eq!(data(&s, USAGE_SIGNING), "true");
        assert_eq!(data(&s, EXTRA_GROUPS_KEY), "system:bootstrappers:workers");
        let back = BootstrapToken::from_secret(&s).unwrap();
        assert_eq!(back.token(), "abcdef.0123456789abcdef");
        assert_eq!(back.usages, token.usages);
        assert_eq!(back.groups, token.groups);
        assert_eq!(back.description, "joins nodes");
        assert_eq!(back.expires, Some("2025-01-01T00:00:00Z".parse().unwrap()));
        let mut renamed = s.clone();
        renamed.metadata.name = Some("bootstrap-token-zzzzzz".into());
        assert!(BootstrapToken::from_secret(&renamed).is_err());
    }
}
