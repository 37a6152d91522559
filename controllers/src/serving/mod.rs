//! The secure port of the controller-manager (upstream's 10257) and of the scheduler
//! (10259): HTTPS serving `/metrics` (the component's own registry with `process_*`) and
//! the health paths, behind delegated authentication and authorization ([`auth`]), as
//! upstream's components serve them. Prometheus scrapes them with a ServiceAccount token or
//! a client certificate whose user `system:monitoring` (or another role granting
//! `nonResourceURLs: ["/metrics"]`) lets in.
//!
//! The serving certificate comes from whoever runs the component: the cluster CA in an
//! all-in-one server, `--tls-cert-file`, or else one made up at start, self-signed, as
//! upstream's components make one without `--tls-cert-file`.

pub mod auth;

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{StatusCode, header};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

pub use auth::{AuthOptions, DelegatedAuth, Identity};

/// Upstream's default secure ports.
pub const CONTROLLER_MANAGER_PORT: u16 = 10257;
pub const SCHEDULER_PORT: u16 = 10259;

/// Whose port it is: which registry `/metrics` serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    ControllerManager,
    Scheduler,
}

impl Component {
    pub fn name(self) -> &'static str {
        match self {
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }

    fn registry(self) -> &'static prometheus::Registry {
        match self {
            Component::ControllerManager => crate::metrics::controller_manager(),
            Component::Scheduler => crate::metrics::scheduler(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error("tls: {0}")]
    Tls(String),
    #[error("serving certificate: {0}")]
    Certificate(#[from] rcgen::Error),
}

fn tls_error(e: impl std::fmt::Display) -> ServingError {
    ServingError::Tls(e.to_string())
}

/// A certificate and its key, PEM encoded.
#[derive(Clone, Debug)]
pub struct CertKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A self-signed serving certificate, as upstream's `MaybeDefaultWithSelfSignedCerts` makes
/// one: `localhost@<unix time>`, for `localhost`, 127.0.0.1 and the bind address.
pub fn self_signed(bind: IpAddr) -> Result<CertKey, ServingError> {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
    let now = jiff::Timestamp::now();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("localhost@{}", now.as_second()),
    );
    let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
    if !bind.is_unspecified() && !ips.contains(&bind) {
        ips.push(bind);
    }
    params
        .subject_alt_names
        .extend(ips.into_iter().map(rcgen::SanType::IpAddress));
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let start = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
    params.not_before = start;
    params.not_after = start + time::Duration::days(365);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// TLS serving `serving`, verifying the client certificates it is shown against
/// `client_ca_pem` (none are taken without one; tokens still authenticate).
pub fn tls_config(
    serving: &CertKey,
    client_ca_pem: Option<&str>,
) -> Result<rustls::ServerConfig, ServingError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = rustls_pemfile::certs(&mut serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(tls_error)?;
    let key = rustls_pemfile::private_key(&mut serving.key_pem.as_bytes())
        .map_err(tls_error)?
        .ok_or_else(|| tls_error("serving key missing"))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    let builder = match client_ca_pem {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut ca.as_bytes()) {
                roots.add(cert.map_err(tls_error)?).map_err(tls_error)?;
            }
            // A certificate is optional (tokens and anonymous requests come without one);
            // one presented must chain to the CA.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(tls_error)?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(tls_error)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The component's port, testable without sockets: a verified client certificate is an
/// [`Identity`] extension of the request.
pub fn router(component: Component, auth: Arc<DelegatedAuth>) -> Router {
    Router::new()
        .route("/metrics", get(move || metrics(component)))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
        .layer(middleware::from_fn_with_state(auth, auth::filter))
}

async fn ok() -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "ok").into_response()
}

async fn metrics(component: Component) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(component.registry()),
    )
        .into_response()
}

/// Serves `app` over TLS on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    app: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "secure port: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "secure port: tls handshake failed");
                    return;
                }
            };
            let identity = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| Identity::from_certificate(c.as_ref()));
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let mut req: Request = req.map(Body::new);
                    if let Some(id) = identity.clone() {
                        req.extensions_mut().insert(id);
                    }
                    app.clone().oneshot(req)
                });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(%peer, error = %e, "secure port: connection ended with an error");
            }
        });
    }
}

/// Binds `address` and serves `component`'s port there until `shutdown`; the port's
/// requests are judged through `client`. Returns the address bound (a port 0 picks one).
pub async fn start(
    component: Component,
    address: std::net::SocketAddr,
    tls: rustls::ServerConfig,
    client: kube::Client,
    options: AuthOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let auth = Arc::new(DelegatedAuth::new(client, options));
    tracing::info!(component = component.name(), address = %bound, "serving securely");
    tokio::spawn(serve(listener, tls, router(component, auth), shutdown));
    Ok(bound)
}

/// The client CA of delegated authentication when no `--client-ca-file` is given: the
/// `client-ca-file` of `kube-system/extension-apiserver-authentication`, as upstream's
/// components read it.
pub async fn cluster_client_ca(client: &kube::Client) -> Option<String> {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "kube-system");
    match api.get_opt("extension-apiserver-authentication").await {
        Ok(Some(cm)) => cm.data?.remove("client-ca-file"),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "reading the client CA of extension-apiserver-authentication");
            None
        }
    }
}
