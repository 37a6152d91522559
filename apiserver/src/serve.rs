//! HTTPS serving with rustls: every connection may present a client certificate signed by
//! the cluster CA; its identity rides along in each request's extensions. HTTP/1.1 and
//! HTTP/2 are negotiated with ALPN; upgrades (exec, port-forward) pass through.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::auth::{ClientCertIdentity, user_from_certificate};
use crate::pki::Pki;
use crate::server::ServerError;

/// The address a request's connection came from (sources of audit events).
#[derive(Clone, Copy, Debug)]
pub struct RemoteAddr(pub std::net::SocketAddr);

fn tls_error(e: impl std::fmt::Display) -> ServerError {
    ServerError::Tls(e.to_string())
}

/// The TLS settings of the API server: its serving certificate, and client certificates
/// verified against the cluster CA but not required (tokens and anonymous health checks).
pub fn tls_config(pki: &Pki) -> Result<rustls::ServerConfig, ServerError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pki.ca.cert_pem.as_bytes()) {
        roots.add(cert.map_err(tls_error)?).map_err(tls_error)?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(tls_error)?;
    let certs = rustls_pemfile::certs(&mut pki.serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(tls_error)?;
    let key = rustls_pemfile::private_key(&mut pki.serving.key_pem.as_bytes())
        .map_err(tls_error)?
        .ok_or_else(|| tls_error("serving key missing"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(tls_error)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts TLS connections on `listener` until `shutdown` resolves.
pub async fn serve_tls(
    listener: TcpListener,
    tls: rustls::ServerConfig,
    app: Router,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = &mut shutdown => return Ok(()),
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "tls handshake failed");
                    return;
                }
            };
            let identity = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|c| user_from_certificate(c.as_ref()));
            let service =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let mut req = req.map(axum::body::Body::new);
                    if let Some(user) = identity.clone() {
                        req.extensions_mut().insert(ClientCertIdentity(user));
                    }
                    req.extensions_mut().insert(RemoteAddr(peer));
                    app.clone().oneshot(req)
                });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http2().max_concurrent_streams(1000);
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(tls), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
