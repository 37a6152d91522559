//! Authentication: who is asking. X.509 client certificates signed by the cluster CA (CN is
//! the user, O the groups) and bearer tokens from a static token file (upstream's
//! `--token-auth-file` CSV). Authorization is a later issue: any authenticated user may act.

use std::collections::HashMap;
use std::path::Path;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use minik8s_api::ApiError;

use crate::handlers::codec::status_response;

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

#[derive(Clone, Debug, Default)]
pub struct Authenticator {
    tokens: HashMap<String, UserInfo>,
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
fn public(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    ) || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}

/// Middleware: attaches a `UserInfo` to the request or answers 401.
pub async fn authenticate(
    State(auth): State<std::sync::Arc<Authenticator>>,
    mut req: Request,
    next: Next,
) -> Response {
    let bearer = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|t| t.trim().to_string());
    let user = match (req.extensions().get::<ClientCertIdentity>(), bearer) {
        (_, Some(token)) => match auth.token(&token) {
            Some(u) => Some(u),
            None => return status_response(&ApiError::unauthorized()),
        },
        (Some(cert), None) => Some(cert.0.clone()),
        (None, None) => None,
    };
    match user {
        Some(mut u) => {
            if !u.groups.iter().any(|g| g == "system:authenticated") {
                u.groups.push("system:authenticated".into());
            }
            req.extensions_mut().insert(u);
            next.run(req).await
        }
        None if public(req.uri().path()) => {
            req.extensions_mut().insert(UserInfo::anonymous());
            next.run(req).await
        }
        None => status_response(&ApiError::unauthorized()),
    }
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
}
