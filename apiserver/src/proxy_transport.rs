//! How the API server reaches pods for the `pods/proxy` and `services/proxy` subresources,
//! as upstream's proxy transport: plain HTTP, or HTTPS that does not verify the backend's
//! certificate (a pod is addressed by its IP, so there is no name a certificate could be
//! checked against) and presents none. Connections are opened by a [`ClusterDialer`]
//! (upstream's egress selector for the `cluster` network): direct TCP unless one is installed
//! on the server. The pieces every proxied request shares with the kubelet client (the
//! HTTP/1.1 handshake, the headers a proxy drops, the guarded upgrade splice) live here.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use minik8s_api::ApiError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Opens TCP connections to addresses on the cluster network (pod IPs).
pub trait ClusterDialer: Send + Sync + 'static {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'static, std::io::Result<TcpStream>>;
}

/// Hop-by-hop headers, not passed on by a proxy (besides an upgrade's own).
pub(crate) const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
];

/// Whether the request asks to switch protocols (`Connection: Upgrade` and an `Upgrade`).
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && headers.contains_key(header::UPGRADE)
}

pub(crate) type Sender = hyper::client::conn::http1::SendRequest<Body>;

/// An HTTP/1.1 client connection over `io`, upgrades allowed.
pub(crate) async fn handshake<T>(io: T) -> Result<Sender, hyper::Error>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "backend connection ended");
        }
    });
    Ok(sender)
}

/// The request to send on: `method path_and_query`, the client's `headers` less the host,
/// the hop-by-hop ones (unless `upgrade`) and `dropped`, and `Host: host`.
pub(crate) fn outgoing(
    method: http::Method,
    path_and_query: &str,
    headers: &HeaderMap,
    dropped: &[&str],
    upgrade: bool,
    host: &str,
    body: Body,
) -> Result<Request<Body>, ApiError> {
    let mut req = Request::builder().method(method).uri(path_and_query);
    for (k, v) in headers {
        let name = k.as_str();
        if k != header::HOST && (upgrade || !HOP_BY_HOP.contains(&name)) && !dropped.contains(&name)
        {
            req = req.header(k, v);
        }
    }
    req.header(header::HOST, host)
        .body(body)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Sends the upgrade request `out` (built from `req`) on `sender`. On `101` the client gets
/// the backend's answer and both connections are spliced; on anything else the client gets
/// the backend's answer and `Connection: close`, so a refused upgrade never leaves an open
/// tunnel (CVE-2018-1002105).
pub(crate) async fn splice(
    mut sender: Sender,
    mut req: Request<Body>,
    out: Request<Body>,
    failed: impl FnOnce(hyper::Error) -> ApiError,
) -> Result<Response, ApiError> {
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = sender.send_request(out).await.map_err(failed)?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = resp.status();
        let headers = resp.headers().clone();
        let body =
            match tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect()).await {
                Ok(Ok(b)) => b.to_bytes(),
                _ => Bytes::new(),
            };
        tracing::debug!(%status, "the backend refused the upgrade");
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = status;
        for (k, v) in &headers {
            if !HOP_BY_HOP.contains(&k.as_str()) && k != header::CONTENT_LENGTH {
                r.headers_mut().append(k, v.clone());
            }
        }
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Ok(r);
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *r.headers_mut() = resp.headers().clone();
    // The request stays a long-running one in the metrics while its tunnel is open.
    let held = req.extensions_mut().remove::<crate::metrics::LongRunning>();
    tokio::spawn(async move {
        let _held = held;
        let (client, backend) = match tokio::join!(client_upgrade, backend_upgrade) {
            (Ok(c), Ok(b)) => (c, b),
            (c, b) => {
                tracing::debug!(client = ?c.err(), backend = ?b.err(), "upgrade did not complete");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut backend = TokioIo::new(backend);
        match tokio::io::copy_bidirectional(&mut client, &mut backend).await {
            Ok((up, down)) => tracing::debug!(up, down, "upgraded stream closed"),
            Err(e) => tracing::debug!(error = %e, "upgraded stream ended"),
        }
    });
    Ok(r)
}

/// Accepts any certificate: pods are reached by IP, with nothing to verify against (and an
/// APIService with `insecureSkipTLSVerify` asks for no verification). Signatures are still
/// checked, so the handshake proves the peer holds the key of the certificate it sent.
#[derive(Debug)]
pub(crate) struct AnyCertificate(pub(crate) Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls() -> &'static TlsConnector {
    static TLS: OnceLock<TlsConnector> = OnceLock::new();
    TLS.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsConnector::from(Arc::new(config))
    })
}

/// Where a proxied request goes: `scheme://addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend {
    pub https: bool,
    pub addr: SocketAddr,
}

impl Backend {
    /// The `Host` the backend is sent (upstream sets the location's host).
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

/// Upstream's answer when the backend cannot be reached through the proxy.
pub fn unreachable(e: impl std::fmt::Display) -> ApiError {
    ApiError {
        code: 503,
        reason: "ServiceUnavailable",
        message: format!("error trying to reach service: {e}"),
        details: None,
    }
}

/// An HTTP/1.1 connection to `backend`, through `dialer` when one is installed.
pub(crate) async fn connect(
    dialer: Option<&Arc<dyn ClusterDialer>>,
    backend: Backend,
) -> Result<Sender, ApiError> {
    let addr = backend.addr;
    let dial = async {
        match dialer {
            Some(d) => d.dial(addr).await,
            None => TcpStream::connect(addr).await,
        }
    };
    let tcp = tokio::time::timeout(Duration::from_secs(30), dial)
        .await
        .map_err(|_| unreachable(format!("dial tcp {addr}: i/o timeout")))?
        .map_err(|e| unreachable(format!("dial tcp {addr}: connect: {e}")))?;
    let _ = tcp.set_nodelay(true);
    if !backend.https {
        return handshake(tcp).await.map_err(unreachable);
    }
    let tls = tokio::time::timeout(
        Duration::from_secs(10),
        tls().connect(ServerName::IpAddress(addr.ip().into()), tcp),
    )
    .await
    .map_err(|_| unreachable("net/http: TLS handshake timeout"))?
    .map_err(|e| unreachable(format!("tls: {e}")))?;
    handshake(tls).await.map_err(unreachable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_requests() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        assert!(!is_upgrade(&h));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(is_upgrade(&h));
    }

    #[test]
    fn outgoing_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("apiserver"));
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        h.insert("authorization", HeaderValue::from_static("Bearer x"));
        h.insert("x-custom", HeaderValue::from_static("1"));
        let req = outgoing(
            http::Method::GET,
            "/a?b=c",
            &h,
            &["authorization"],
            false,
            "10.0.0.1:80",
            Body::empty(),
        )
        .unwrap();
        assert_eq!(req.uri(), "/a?b=c");
        assert_eq!(req.headers()[header::HOST], "10.0.0.1:80");
        assert_eq!(req.headers()["x-custom"], "1");
        assert!(!req.headers().contains_key(header::CONNECTION));
        assert!(!req.headers().contains_key("authorization"));
    }
}
