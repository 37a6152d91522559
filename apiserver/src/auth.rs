//! Authentication: who is asking. X.509 client certificates signed by the cluster CA (CN is
//! the user, O the groups), bearer tokens from a static token file (upstream's
//! `--token-auth-file` CSV) and service-account tokens the server signed itself. Then
//! impersonation (`Impersonate-*` headers), as upstream's filter, which only admins may use
//! until there is RBAC. Authorization is a later issue: any authenticated user may act.
//! Bootstrap tokens ([`bootstrap`]) when `--enable-bootstrap-token-auth` is on.

pub mod bootstrap;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use http::HeaderMap;
use minik8s_api::{ApiError, Target};

use crate::serviceaccount::{self, ServiceAccountTokens};

/// A user's extra attributes (upstream's `user.Info.GetExtra()`).
pub type Extra = BTreeMap<String, Vec<String>>;

/// The extra attributes of the request's user, beside its `UserInfo` in the extensions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserExtra(pub Extra);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    pub fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
        }
    }
}

/// The identity a TLS connection proved with its client certificate; the server puts it in
/// every request's extensions.
#[derive(Clone, Debug)]
pub struct ClientCertIdentity(pub UserInfo);

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("reading token file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("token file {path} line {line}: {why}")]
    Parse {
        path: String,
        line: usize,
        why: String,
    },
}

#[derive(Clone, Default)]
pub struct Authenticator {
    /// `--anonymous-auth` (see `ServeOptions::anonymous_auth`).
    pub anonymous: Option<bool>,
    /// Who may impersonate whom.
    pub authorizer: Option<Arc<crate::authz::Authorizer>>,
    tokens: HashMap<String, UserInfo>,
    /// Set once the store and the service-account key exist.
    service_accounts: OnceLock<Arc<ServiceAccountTokens>>,
    /// `--enable-bootstrap-token-auth`.
    bootstrap_tokens: Option<Arc<bootstrap::BootstrapTokens>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.tokens.len())
            .field("service_accounts", &self.service_accounts.get().is_some())
            .field("bootstrap_tokens", &self.bootstrap_tokens.is_some())
            .finish()
    }
}

/// Splits one CSV line, honouring double quotes (groups are a quoted comma list).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields.into_iter().map(|f| f.trim().to_string()).collect()
}

impl Authenticator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads `token,user,uid[,"group1,group2"]` lines.
    pub fn from_token_file(path: &Path) -> Result<Self, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut auth = Authenticator::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let f = csv_fields(line);
            if f.len() < 3 || f[0].is_empty() || f[1].is_empty() {
                return Err(AuthError::Parse {
                    path: path.display().to_string(),
                    line: i + 1,
                    why: "expected token,user,uid[,\"groups\"]".into(),
                });
            }
            let groups = f
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            auth.add_token(
                &f[0],
                UserInfo {
                    name: f[1].clone(),
                    uid: f[2].clone(),
                    groups,
                },
            );
        }
        Ok(auth)
    }

    pub fn add_token(&mut self, token: &str, user: UserInfo) {
        self.tokens.insert(token.to_string(), user);
    }

    pub fn token(&self, token: &str) -> Option<UserInfo> {
        self.tokens.get(token).cloned()
    }

    /// Enables service-account tokens (a second call changes nothing).
    pub fn set_service_accounts(&self, tokens: Arc<ServiceAccountTokens>) {
        let _ = self.service_accounts.set(tokens);
    }

    pub fn service_accounts(&self) -> Option<&Arc<ServiceAccountTokens>> {
        self.service_accounts.get()
    }

    /// Accepts bootstrap tokens, read from the Secrets in `store`.
    pub fn enable_bootstrap_tokens(&mut self, store: &crate::storage::DynStore) {
        self.bootstrap_tokens = Some(Arc::new(bootstrap::BootstrapTokens::start(store)));
    }

    /// The user of a bearer token: a static token, a bootstrap token, else a
    /// service-account token (the forms do not overlap).
    pub async fn bearer(&self, token: &str) -> Option<(UserInfo, Extra)> {
        if let Some(u) = self.token(token) {
            return Some((u, Extra::new()));
        }
        if let Some(tokens) = &self.bootstrap_tokens
            && minik8s_api::bootstrap_token::parse(token).is_some()
        {
            return tokens.authenticate(token).map(|u| (u, Extra::new()));
        }
        self.service_accounts.get()?.authenticate(token).await
    }
}

/// The user of a verified client certificate: CN is the name, each O a group.
pub fn user_from_certificate(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(UserInfo {
        name,
        uid: String::new(),
        groups,
    })
}

/// Paths anyone may read, as upstream's system:public-info-viewer allows.
pub fn public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    ) || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

/// One thing a request asks to act as, with what upstream's filter authorizes it as.
struct Impersonation<'a> {
    group: &'static str,
    resource: &'static str,
    subresource: String,
    namespace: &'a str,
    name: &'a str,
}

/// Decodes the `%XX` escapes of an `Impersonate-Extra-` key (upstream's `unescapeExtraKey`).
fn unescape_extra_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&key[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// Upstream's impersonation filter: `Ok(None)` when the request asks for none, the user and
/// extra to act as when `requester` may impersonate each part, else its 403 (or the 500 for
/// groups, extras or a uid without a user). `system:masters` may, and whoever the authorizer
/// allows the `impersonate` verb on each part.
pub fn impersonate(
    requester: &UserInfo,
    headers: &HeaderMap,
    authorizer: Option<&crate::authz::Authorizer>,
) -> Result<Option<(UserInfo, Extra)>, ApiError> {
    let values = |name: &str| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    };
    let user = values("impersonate-user").first().copied().unwrap_or("");
    let groups_asked = values("impersonate-group");
    let uid = values("impersonate-uid").first().copied().unwrap_or("");
    let mut extras: Vec<(String, &str)> = Vec::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-")
            && let Ok(v) = value.to_str()
        {
            extras.push((unescape_extra_key(key), v));
        }
    }
    if user.is_empty() && groups_asked.is_empty() && uid.is_empty() && extras.is_empty() {
        return Ok(None);
    }
    let mut asks = Vec::new();
    let mut name = String::new();
    let mut groups: Vec<String> = Vec::new();
    let sa = serviceaccount::split_username(user);
    if !user.is_empty() {
        name = user.to_string();
        match sa {
            Some((namespace, sa_name)) => asks.push(Impersonation {
                group: "",
                resource: "serviceaccounts",
                subresource: String::new(),
                namespace,
                name: sa_name,
            }),
            None => asks.push(Impersonation {
                group: "",
                resource: "users",
                subresource: String::new(),
                namespace: "",
                name: user,
            }),
        }
    }
    for g in &groups_asked {
        asks.push(Impersonation {
            group: "",
            resource: "groups",
            subresource: String::new(),
            namespace: "",
            name: g,
        });
        groups.push(g.to_string());
    }
    let mut extra = Extra::new();
    for (key, value) in &extras {
        asks.push(Impersonation {
            group: "authentication.k8s.io",
            resource: "userextras",
            subresource: key.clone(),
            namespace: "",
            name: value,
        });
        extra
            .entry(key.clone())
            .or_default()
            .push(value.to_string());
    }
    if !uid.is_empty() {
        asks.push(Impersonation {
            group: "authentication.k8s.io",
            resource: "uids",
            subresource: String::new(),
            namespace: "",
            name: uid,
        });
    }
    if user.is_empty() {
        return Err(ApiError::internal(
            "requested impersonation of groups, extra or uid without impersonating a user",
        ));
    }
    let admin = requester.groups.iter().any(|g| g == "system:masters");
    for ask in &asks {
        let allowed = authorizer.is_some_and(|a| {
            a.allows(&minik8s_api::rbac::Attributes {
                user: requester.name.clone(),
                groups: requester.groups.clone(),
                verb: "impersonate".into(),
                namespace: ask.namespace.into(),
                api_group: ask.group.into(),
                resource: ask.resource.into(),
                subresource: ask.subresource.clone(),
                name: ask.name.into(),
                resource_request: true,
                ..Default::default()
            })
        });
        if admin || allowed {
            continue;
        }
        let resource = if ask.subresource.is_empty() {
            ask.resource.to_string()
        } else {
            format!("{}/{}", ask.resource, ask.subresource)
        };
        let scope = if ask.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", ask.namespace)
        };
        return Err(ApiError::forbidden(
            Target {
                group: ask.group,
                resource: ask.resource,
                name: ask.name,
            },
            &format!(
                "User \"{}\" cannot impersonate resource \"{resource}\" in API group \"{}\" {scope}",
                requester.name, ask.group
            ),
        ));
    }
    if let Some((namespace, _)) = sa
        && groups_asked.is_empty()
    {
        groups = serviceaccount::groups(namespace);
    }
    if name != "system:anonymous" {
        if !groups
            .iter()
            .any(|g| g == "system:authenticated" || g == "system:unauthenticated")
        {
            groups.push("system:authenticated".into());
        }
    } else if !groups.iter().any(|g| g == "system:unauthenticated") {
        groups.push("system:unauthenticated".into());
    }
    Ok(Some((
        UserInfo {
            name,
            uid: uid.to_string(),
            groups,
        },
        extra,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "# comment\nabc,alice,1,\"dev,ops\"\ndef,bob,2\n").unwrap();
        let a = Authenticator::from_token_file(&path).unwrap();
        assert_eq!(a.token("abc").unwrap().groups, vec!["dev", "ops"]);
        assert_eq!(a.token("def").unwrap().name, "bob");
        assert!(a.token("nope").is_none());
        std::fs::write(&path, "justatoken\n").unwrap();
        assert!(Authenticator::from_token_file(&path).is_err());
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    #[test]
    fn impersonation() {
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        assert_eq!(impersonate(&admin, &HeaderMap::new(), None).unwrap(), None);
        let (jane, extra) = impersonate(&admin, &headers(&[("Impersonate-User", "jane")]), None)
            .unwrap()
            .unwrap();
        assert_eq!(jane, user("jane", &["system:authenticated"]));
        assert!(extra.is_empty());
        let (u, extra) = impersonate(
            &admin,
            &headers(&[
                ("Impersonate-User", "jane"),
                ("Impersonate-Group", "dev"),
                ("Impersonate-Group", "ops"),
                ("Impersonate-Uid", "1234"),
                ("Impersonate-Extra-Scopes", "view"),
                ("Impersonate-Extra-Scopes", "edit"),
                ("Impersonate-Extra-example.com%2fteam", "a"),
            ]),
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(u.groups, vec!["dev", "ops", "system:authenticated"]);
        assert_eq!(u.uid, "1234");
        assert_eq!(extra["scopes"], vec!["view", "edit"]);
        assert_eq!(extra["example.com/team"], vec!["a"]);
        // A service account gets its fixed groups unless groups are asked for.
        let (sa, _) = impersonate(
            &admin,
            &headers(&[("Impersonate-User", "system:serviceaccount:ns1:bot")]),
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            sa.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:ns1",
                "system:authenticated"
            ]
        );
        let (anon, _) = impersonate(
            &admin,
            &headers(&[("Impersonate-User", "system:anonymous")]),
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(anon.groups, vec!["system:unauthenticated"]);
        // Groups without a user.
        let err = impersonate(&admin, &headers(&[("Impersonate-Group", "dev")]), None).unwrap_err();
        assert_eq!(err.code, 500);
        // Someone who is not an admin.
        let bob = user("bob", &["system:authenticated"]);
        let err = impersonate(&bob, &headers(&[("Impersonate-User", "jane")]), None).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "users \"jane\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        let err = impersonate(
            &bob,
            &headers(&[("Impersonate-User", "system:serviceaccount:ns1:bot")]),
            None,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "serviceaccounts \"bot\" is forbidden: User \"bob\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"ns1\""
        );
    }
}
