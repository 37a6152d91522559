//! Forwarding a request to an aggregated API server, as upstream's proxy handler: over TLS to
//! a ready endpoint of the APIService's Service, checking its certificate against the
//! caBundle and `<service>.<namespace>.svc` (or not at all with insecureSkipTLSVerify),
//! presenting the front-proxy client certificate, and saying who the user is only in the
//! front-proxy headers, which the aggregated server trusts because of that certificate. The
//! client's own credentials never leave this server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use hyper_util::rt::TokioIo;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::TlsConnector;

use crate::auth::{Extra, UserInfo};
use crate::proxy_transport::AnyCertificate;

/// Upstream's front-proxy (requestheader) header names.
pub const USER_HEADER: &str = "X-Remote-User";
pub const GROUP_HEADER: &str = "X-Remote-Group";
pub const EXTRA_PREFIX: &str = "X-Remote-Extra-";
/// The name in the certificate the server presents to aggregated servers.
pub const CLIENT_NAME: &str = "front-proxy-client";

/// Request headers that describe this hop or carry the client's credentials.
const DROPPED: &[&str] = &[
    "authorization",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The front-proxy client identity.
#[derive(Clone)]
pub struct ClientIdentity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: Arc<PrivateKeyDer<'static>>,
}

impl ClientIdentity {
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, String> {
        let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
            .map_err(|e| e.to_string())?
            .ok_or("no private key")?;
        Ok(ClientIdentity {
            certs,
            key: Arc::new(key),
        })
    }
}

/// Where and how to reach one aggregated server.
#[derive(Clone)]
pub struct Upstream {
    pub addr: SocketAddr,
    /// `<service>.<namespace>.svc`.
    pub server_name: String,
    pub ca_bundle: Vec<u8>,
    pub insecure: bool,
}

fn connector(
    upstream: &Upstream,
    identity: Option<&ClientIdentity>,
) -> Result<TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if upstream.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut upstream.ca_bundle.as_slice()) {
            let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
            roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
        }
        builder.with_root_certificates(roots)
    };
    let mut config = match identity {
        Some(id) => builder
            .with_client_auth_cert(id.certs.clone(), id.key.clone_key())
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Sends `req` to `upstream` and returns its answer, streaming.
pub async fn send(
    upstream: &Upstream,
    identity: Option<&ClientIdentity>,
    req: http::Request<Body>,
    timeout: Duration,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let connect = async {
        let tls = connector(upstream, identity)?;
        let tcp = tokio::net::TcpStream::connect(upstream.addr)
            .await
            .map_err(|e| format!("dial tcp {}: connect: {e}", upstream.addr))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(upstream.server_name.clone()).map_err(|e| e.to_string())?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok::<_, String>(sender)
    };
    let mut sender = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| "i/o timeout".to_string())??;
    sender.send_request(req).await.map_err(|e| e.to_string())
}

/// The request to forward: the client's method, path, query, headers (less its
/// credentials and hop-by-hop ones) and body, with the user in the front-proxy headers.
pub fn forwarded(
    req: http::Request<Body>,
    upstream: &Upstream,
    user: &UserInfo,
    extra: &Extra,
) -> http::Request<Body> {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut out = http::Request::builder().method(parts.method).uri(path);
    for (k, v) in &parts.headers {
        let name = k.as_str();
        if DROPPED.contains(&name)
            || name.starts_with("impersonate-")
            || name.starts_with("x-remote-")
        {
            continue;
        }
        out = out.header(k, v);
    }
    out = out.header(http::header::HOST, upstream.server_name.as_str());
    out = out.header(USER_HEADER, user.name.as_str());
    for g in &user.groups {
        out = out.header(GROUP_HEADER, g.as_str());
    }
    for (k, values) in extra {
        let name = format!("{EXTRA_PREFIX}{}", escape_key(k));
        for v in values {
            out = out.header(name.as_str(), v.as_str());
        }
    }
    match out.body(body) {
        Ok(req) => req,
        Err(e) => {
            // Only a header value the client sent could be invalid here; it goes unsent.
            tracing::warn!(error = %e, "dropping a request header that cannot be forwarded");
            http::Request::new(Body::empty())
        }
    }
}

/// An extra key as a header name: percent-encoded as upstream does (`url.PathEscape`), so
/// keys such as `authentication.kubernetes.io/pod-name` survive the trip.
fn escape_key(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The aggregated server's answer as this server's response.
pub fn response(resp: http::Response<hyper::body::Incoming>) -> Response {
    let (mut parts, body) = resp.into_parts();
    for h in [
        "connection",
        "keep-alive",
        "transfer-encoding",
        "proxy-connection",
    ] {
        parts.headers.remove(h);
    }
    Response::from_parts(parts, Body::new(body))
}

#[cfg(test)]
mod tests {
    #[test]
    fn extra_keys_are_escaped() {
        assert_eq!(
            super::escape_key("authentication.kubernetes.io/pod-name"),
            "authentication.kubernetes.io%2Fpod-name"
        );
        assert_eq!(super::escape_key("scopes"), "scopes");
    }
}
