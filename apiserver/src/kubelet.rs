//! Calling kubelets: HTTPS to a node's kubelet API with the API server's kubelet-client
//! certificate (`kube-apiserver-kubelet-client`), the kubelet's serving certificate checked
//! against the cluster CA. Plain requests stream their answers back; upgrade requests (exec,
//! attach, port-forward) are forwarded as they came and spliced byte for byte only once the
//! kubelet answers `101 Switching Protocols`. Any other answer goes back to the client as a
//! plain response on a connection that is then closed: a refused upgrade never leaves an open
//! tunnel to the kubelet (CVE-2018-1002105).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, Request};
use k8s_openapi::api::core::v1::Node;
use minik8s_api::ApiError;
use rustls::RootCertStore;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

pub use crate::proxy_transport::is_upgrade;
use crate::proxy_transport::{Sender, handshake, outgoing, splice};
use crate::server::ServerError;

/// The user of the API server's client certificate for kubelets, as upstream names it.
pub const APISERVER_CLIENT: &str = "kube-apiserver-kubelet-client";

/// How to reach kubelets.
pub struct KubeletClient {
    tls: TlsConnector,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient").finish_non_exhaustive()
    }
}

/// Where a node's kubelet listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KubeletAddress {
    pub ip: IpAddr,
    pub port: u16,
}

/// The kubelet address of `node`: its InternalIP (else ExternalIP) and the port it
/// advertises in `status.daemonEndpoints`; `port` overrides that.
pub fn kubelet_address(node: &Node, port: Option<u16>) -> Result<KubeletAddress, ApiError> {
    let status = node.status.as_ref();
    let addresses = status.and_then(|s| s.addresses.clone()).unwrap_or_default();
    let ip = ["InternalIP", "ExternalIP"]
        .iter()
        .find_map(|t| {
            addresses
                .iter()
                .filter(|a| a.type_ == *t)
                .find_map(|a| a.address.parse::<IpAddr>().ok())
        })
        .ok_or_else(|| {
            let known: Vec<String> = addresses
                .iter()
                .map(|a| format!("{{{} {}}}", a.type_, a.address))
                .collect();
            ApiError::internal(format!(
                "no preferred addresses found; known addresses: [{}]",
                known.join(" ")
            ))
        })?;
    let advertised = status
        .and_then(|s| s.daemon_endpoints.as_ref())
        .and_then(|d| d.kubelet_endpoint.as_ref())
        .map(|e| e.port)
        .filter(|p| *p > 0 && *p <= i32::from(u16::MAX))
        .map(|p| p as u16);
    Ok(KubeletAddress {
        ip,
        port: port.or(advertised).unwrap_or(10250),
    })
}

fn tls_error(e: impl std::fmt::Display) -> ServerError {
    ServerError::Tls(e.to_string())
}

/// Headers of the client that never reach a kubelet: its credentials are the API server's.
const CLIENT_ONLY: &[&str] = &[
    "authorization",
    "cookie",
    "impersonate-user",
    "impersonate-group",
];

fn unreachable(addr: KubeletAddress, e: impl std::fmt::Display) -> ApiError {
    ApiError {
        code: 500,
        reason: "InternalError",
        message: format!(
            "error dialing backend: dial tcp {}: {e}",
            SocketAddr::new(addr.ip, addr.port)
        ),
        details: None,
    }
}

impl KubeletClient {
    /// A client trusting `ca_pem` for kubelets and presenting `cert_pem`/`key_pem`.
    pub fn new(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Self, ServerError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
            roots.add(cert.map_err(tls_error)?).map_err(tls_error)?;
        }
        let certs = rustls_pemfile::certs(&mut cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(tls_error)?;
        let key = rustls_pemfile::private_key(&mut key_pem.as_bytes())
            .map_err(tls_error)?
            .ok_or_else(|| tls_error("kubelet client key missing"))?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(tls_error)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(KubeletClient {
            tls: TlsConnector::from(Arc::new(config)),
        })
    }

    /// An HTTP/1.1 connection to the kubelet, upgrades allowed.
    async fn connect(&self, addr: KubeletAddress) -> Result<Sender, ApiError> {
        let sock = SocketAddr::new(addr.ip, addr.port);
        let tcp = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::TcpStream::connect(sock),
        )
        .await
        .map_err(|_| unreachable(addr, "i/o timeout"))?
        .map_err(|e| unreachable(addr, e))?;
        let _ = tcp.set_nodelay(true);
        let tls = tokio::time::timeout(
            Duration::from_secs(10),
            self.tls.connect(ServerName::IpAddress(addr.ip.into()), tcp),
        )
        .await
        .map_err(|_| unreachable(addr, "tls handshake timeout"))?
        .map_err(|e| unreachable(addr, format!("tls: {e}")))?;
        handshake(tls).await.map_err(|e| unreachable(addr, e))
    }

    /// Sends `method path_and_query` with `headers` and `body` to the kubelet; the answer's
    /// body streams as the kubelet writes it.
    pub async fn send(
        &self,
        addr: KubeletAddress,
        method: http::Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<http::Response<hyper::body::Incoming>, ApiError> {
        let mut sender = self.connect(addr).await?;
        let req = outgoing(
            method,
            path_and_query,
            headers,
            CLIENT_ONLY,
            false,
            &host_header(addr),
            body,
        )?;
        sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(addr, e))
    }

    /// Forwards the upgrade request `req` to `path_and_query` on the kubelet. On `101` the
    /// client gets the kubelet's answer and both connections are spliced; on anything else
    /// the client gets the kubelet's answer and `Connection: close`.
    pub async fn upgrade(
        &self,
        addr: KubeletAddress,
        req: Request<Body>,
        path_and_query: &str,
    ) -> Result<Response, ApiError> {
        let sender = self.connect(addr).await?;
        let out = outgoing(
            req.method().clone(),
            path_and_query,
            req.headers(),
            CLIENT_ONLY,
            true,
            &host_header(addr),
            Body::empty(),
        )?;
        splice(sender, req, out, |e| unreachable(addr, e)).await
    }
}

fn host_header(addr: KubeletAddress) -> String {
    SocketAddr::new(addr.ip, addr.port).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {
                "addresses": [
                    {"type": "Hostname", "address": "n"},
                    {"type": "ExternalIP", "address": "192.0.2.9"},
                    {"type": "InternalIP", "address": "10.1.2.3"}
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 12250}}
            }
        }))
        .unwrap();
        assert_eq!(
            kubelet_address(&node, None).unwrap(),
            KubeletAddress {
                ip: "10.1.2.3".parse().unwrap(),
                port: 12250
            }
        );
        assert_eq!(kubelet_address(&node, Some(1)).unwrap().port, 1);
        let bare: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"addresses": [{"type": "Hostname", "address": "n"}]}
        }))
        .unwrap();
        let err = kubelet_address(&bare, None).unwrap_err();
        assert!(
            err.message.contains("no preferred addresses found"),
            "{err:?}"
        );
    }
}
