//! `--use-service-account-credentials` for a controller-manager that reaches its API server
//! over the network (upstream's `DynamicControllerClientBuilder`, controller-manager's
//! pkg/clientbuilder): each controller writes as its own ServiceAccount in kube-system, so
//! that the `system:controller:<name>` roles say what it may do, and none of them holds the
//! manager's own credentials. The manager's client makes sure the account exists and asks
//! the TokenRequest API (`serviceaccounts/<name>/token`) for a token, asked for again before
//! it expires (and at once after the server refused it); the controllers' clients reach the
//! same server, trusting the same CA, with nothing but that token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{HeaderValue, Request, StatusCode};
use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

use crate::manager::Credentials;

/// Upstream's floor under a token's lifetime, against clock skew between us and the server.
const MIN_LIFETIME: Duration = Duration::from_secs(600);
/// Tries of a token request, and the first pause between them (doubled each time).
const TRIES: u32 = 4;
const FIRST_RETRY: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to get token for {namespace}/{name}: {source}")]
    Token {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the token request for {namespace}/{name} came back without a token")]
    NoToken { namespace: String, name: String },
    #[error("building the controllers' client: {0}")]
    Client(#[source] kube::Error),
}

/// How tokens are asked for and when they are replaced.
#[derive(Clone, Debug)]
pub struct TokenOptions {
    /// The `expirationSeconds` each TokenRequest asks for (upstream: an hour).
    pub expiration_seconds: i64,
    /// How much of a token's lifetime, in percent, is left when it is replaced (upstream: 20).
    pub leeway_percent: u32,
    /// Replace each token this long after it was issued instead (tests).
    pub refresh_every: Option<Duration>,
}

impl Default for TokenOptions {
    fn default() -> Self {
        TokenOptions {
            expiration_seconds: 3600,
            leeway_percent: 20,
            refresh_every: None,
        }
    }
}

impl TokenOptions {
    /// How long a token that lives `lifetime` more is used.
    fn use_for(&self, lifetime: Duration) -> Duration {
        if let Some(every) = self.refresh_every {
            return every;
        }
        let lifetime = lifetime.max(MIN_LIFETIME);
        lifetime - lifetime * self.leeway_percent.min(100) / 100
    }
}

struct Cached {
    token: String,
    replace_at: Instant,
    expires_at: Instant,
}

/// The tokens of one ServiceAccount: one at a time, shared by every client of the account.
pub struct TokenSource {
    manager: kube::Client,
    namespace: String,
    name: String,
    options: TokenOptions,
    cached: tokio::sync::Mutex<Option<Cached>>,
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Upstream's `getOrCreateServiceAccount`: the namespace is created too when it is missing
/// and the manager may (failing that is only logged).
async fn get_or_create_account(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<ServiceAccount, kube::Error> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    match accounts.get(name).await {
        Ok(sa) => return Ok(sa),
        Err(e) if !is_status(&e, 404) => return Err(e),
        Err(_) => {}
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if let Err(e) = namespaces.get(namespace).await
        && is_status(&e, 404)
    {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        if let Err(e) = namespaces.create(&PostParams::default(), &ns).await
            && !is_status(&e, 409)
        {
            tracing::info!(namespace, error = %e, "create non-exist namespace");
        }
    }
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match accounts.create(&PostParams::default(), &sa).await {
        // Another manager created it meanwhile.
        Err(e) if is_status(&e, 409) => accounts.get(name).await,
        created => created,
    }
}

impl TokenSource {
    pub fn new(
        manager: kube::Client,
        namespace: &str,
        name: &str,
        options: TokenOptions,
    ) -> TokenSource {
        TokenSource {
            manager,
            namespace: namespace.into(),
            name: name.into(),
            options,
            cached: Default::default(),
        }
    }

    /// The account's current token, asked for when there is none yet or it is due to be
    /// replaced. A failed replacement keeps the token that still works.
    pub async fn token(&self) -> Result<String, Error> {
        let mut cached = self.cached.lock().await;
        let now = Instant::now();
        if let Some(c) = cached.as_ref()
            && now < c.replace_at
        {
            return Ok(c.token.clone());
        }
        match self.request().await {
            Ok(fresh) => {
                let token = fresh.token.clone();
                *cached = Some(fresh);
                Ok(token)
            }
            Err(e) => match cached.as_ref() {
                Some(c) if now < c.expires_at => {
                    tracing::error!(error = %e, "Unable to rotate token");
                    Ok(c.token.clone())
                }
                _ => Err(e),
            },
        }
    }

    /// Forgets `token` once the server refused it, so that the next request asks anew.
    pub async fn forget(&self, token: &str) {
        let mut cached = self.cached.lock().await;
        if cached.as_ref().is_some_and(|c| c.token == token) {
            *cached = None;
        }
    }

    async fn request(&self) -> Result<Cached, Error> {
        let mut pause = FIRST_RETRY;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_request().await {
                Ok(fresh) => return Ok(fresh),
                Err(Error::Token { source, .. }) if tries < TRIES => {
                    tracing::info!(
                        namespace = %self.namespace,
                        service_account = %self.name,
                        error = %source,
                        "get token failed"
                    );
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }

    async fn try_request(&self) -> Result<Cached, Error> {
        let failed = |source| Error::Token {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        };
        get_or_create_account(&self.manager, &self.namespace, &self.name)
            .await
            .map_err(failed)?;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(self.options.expiration_seconds),
                ..Default::default()
            },
            ..Default::default()
        };
        let accounts: Api<ServiceAccount> = Api::namespaced(self.manager.clone(), &self.namespace);
        let issued = accounts
            .create_token_request(&self.name, &PostParams::default(), &request)
            .await
            .map_err(failed)?;
        let Some(status) = issued.status.filter(|s| !s.token.is_empty()) else {
            return Err(Error::NoToken {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
            });
        };
        let now = Instant::now();
        let lifetime = Timestamp::now()
            .duration_until(status.expiration_timestamp.0)
            .try_into()
            .unwrap_or(Duration::ZERO);
        Ok(Cached {
            token: status.token,
            replace_at: now + self.options.use_for(lifetime),
            expires_at: now + lifetime,
        })
    }
}

/// Makes the controllers' clients: one TokenSource per ServiceAccount, every client over one
/// connection pool that carries no credentials of its own.
pub struct DynamicClientBuilder {
    manager: kube::Client,
    /// The API server as the manager's kubeconfig names it, without its credentials.
    anonymous: kube::Client,
    /// Where the accounts live.
    namespace: String,
    /// The namespace the controllers' clients default to, as the manager's.
    default_namespace: String,
    options: TokenOptions,
    sources: Mutex<HashMap<String, Arc<TokenSource>>>,
}

impl DynamicClientBuilder {
    /// `config` is the manager's own (address, CA, credentials); `manager` its client,
    /// which provisions the accounts and their tokens in `namespace`.
    pub fn new(
        manager: kube::Client,
        config: &kube::Config,
        namespace: &str,
        options: TokenOptions,
    ) -> Result<DynamicClientBuilder, Error> {
        let mut cluster = config.clone();
        cluster.auth_info = Default::default();
        let anonymous = kube::Client::try_from(cluster).map_err(Error::Client)?;
        Ok(DynamicClientBuilder {
            manager,
            anonymous,
            namespace: namespace.into(),
            default_namespace: config.default_namespace.clone(),
            options,
            sources: Default::default(),
        })
    }

    /// The token source of ServiceAccount `name`, made once.
    pub fn tokens(&self, name: &str) -> Arc<TokenSource> {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(TokenSource::new(
                    self.manager.clone(),
                    &self.namespace,
                    name,
                    self.options.clone(),
                ))
            })
            .clone()
    }

    /// A client that acts as ServiceAccount `name`.
    pub fn client(&self, name: &str) -> kube::Client {
        let tokens = self.tokens(name);
        let anonymous = self.anonymous.clone();
        let service = tower::service_fn(move |mut req: Request<kube::client::Body>| {
            let (tokens, anonymous) = (tokens.clone(), anonymous.clone());
            async move {
                let token = tokens.token().await?;
                let value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|e| Box::new(e) as tower::BoxError)?;
                req.headers_mut().insert(AUTHORIZATION, value);
                let response = anonymous.send(req).await?;
                if response.status() == StatusCode::UNAUTHORIZED {
                    tokens.forget(&token).await;
                }
                Ok::<_, tower::BoxError>(response)
            }
        });
        kube::Client::new(service, self.default_namespace.clone())
    }

    /// The controller-manager's credentials: each controller's client from its account.
    pub fn credentials(self: Arc<Self>) -> Credentials {
        Credentials(Arc::new(move |name: &str| self.client(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_replaced_with_a_fifth_of_their_life_left() {
        let o = TokenOptions::default();
        assert_eq!(
            o.use_for(Duration::from_secs(3600)),
            Duration::from_secs(2880)
        );
        // Never sooner than upstream's floor allows, whatever the clocks say.
        assert_eq!(o.use_for(Duration::from_secs(60)), Duration::from_secs(480));
        let every = TokenOptions {
            refresh_every: Some(Duration::from_secs(1)),
            ..Default::default()
        };
        assert_eq!(
            every.use_for(Duration::from_secs(3600)),
            Duration::from_secs(1)
        );
    }
}
