//! A small HTTPS server on loopback for tests that need the API server to call out
//! (admission webhooks, aggregated API servers): its certificate comes from a CA of its own,
//! which the test passes as the caBundle; client certificates are accepted, not checked,
//! and noted.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use minik8s_apiserver::pki::{Pki, ServingNames};
use serde_json::Value;

/// What a handler sees of one request.
pub struct Seen<'a> {
    pub path: &'a str,
    pub headers: &'a http::HeaderMap,
    pub body: &'a [u8],
    pub client_cert: bool,
}

/// The running server: where it is and the CA that signed its certificate.
pub struct HttpsServer {
    pub addr: SocketAddr,
    pub ca_pem: String,
    _dir: tempfile::TempDir,
}

/// Serves `handler` (status code and JSON body) with a certificate for `names`.
pub async fn serve<H>(names: ServingNames, handler: H) -> HttpsServer
where
    H: Fn(Seen<'_>) -> (u16, Value) + Send + Sync + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::ensure(dir.path(), &names).unwrap();
    let certs = rustls_pemfile::certs(&mut pki.serving.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pemfile::private_key(&mut pki.serving.key_pem.as_bytes())
        .unwrap()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_client_cert_verifier(Arc::new(AnyClient))
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let handler = handler.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let client_cert = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|c| !c.is_empty());
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let handler = handler.clone();
                    async move {
                        use http_body_util::BodyExt;
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await?.to_bytes();
                        let (code, out) = handler(Seen {
                            path: parts.uri.path(),
                            headers: &parts.headers,
                            body: &body,
                            client_cert,
                        });
                        Ok::<_, hyper::Error>(
                            http::Response::builder()
                                .status(code)
                                .header("content-type", "application/json")
                                .body(http_body_util::Full::new(bytes::Bytes::from(
                                    out.to_string(),
                                )))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    HttpsServer {
        addr,
        ca_pem: pki.ca.cert_pem,
        _dir: dir,
    }
}

/// Asks for a client certificate and accepts any (the caller notes whether one came).
#[derive(Debug)]
struct AnyClient;

impl rustls::server::danger::ClientCertVerifier for AnyClient {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Ok(rustls::server::danger::ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
