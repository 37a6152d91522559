//! Calling a webhook: an HTTPS POST of the AdmissionReview to its URL, or to a ready
//! endpoint of its Service (upstream's endpoint routing, so the call does not depend on a
//! proxy on the server's own machine), trusting only the configuration's caBundle and
//! checking the certificate against `<service>.<namespace>.svc` as upstream does.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::WebhookClientConfig;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use minik8s_api::strategy::BuiltIn;
use rustls::RootCertStore;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio_rustls::TlsConnector;

use crate::registry::generic::{GenericRegistry, ListQuery};

/// The most a webhook's answer may be (upstream's limit on admission responses).
const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// The system's trusted roots, used when a configuration has no caBundle.
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Where a webhook is: the URL shown in errors, the address to dial and the TLS name.
pub struct Target {
    pub url: String,
    pub addr: SocketAddr,
    pub server_name: String,
    pub path_and_query: String,
}

/// Services and their endpoints, to find a Service webhook's address.
pub struct Resolver {
    pub services: std::sync::Weak<GenericRegistry<BuiltIn<Service>>>,
    pub slices: std::sync::Weak<GenericRegistry<BuiltIn<EndpointSlice>>>,
}

impl Resolver {
    /// Where `config` points, with upstream's `?timeout=` query.
    pub async fn target(
        &self,
        config: &WebhookClientConfig,
        timeout: Duration,
    ) -> Result<Target, String> {
        let query = format!("timeout={}s", timeout.as_secs());
        if let Some(url) = &config.url {
            return url_target(url, &query);
        }
        let Some(svc) = &config.service else {
            return Err("neither url nor service is set".into());
        };
        let port = svc.port.unwrap_or(443);
        let path = svc.path.clone().unwrap_or_else(|| "/".into());
        let host = format!("{}.{}.svc", svc.name, svc.namespace);
        let url = format!("https://{host}:{port}{path}?{query}");
        let addr = self
            .endpoint(&svc.namespace, &svc.name, port)
            .await
            .map_err(|e| format!("Post {url:?}: {e}"))?;
        Ok(Target {
            url,
            addr,
            server_name: host,
            path_and_query: format!("{path}?{query}"),
        })
    }

    /// A ready endpoint of the Service's `port` (upstream's ResolveEndpoint).
    pub async fn endpoint(&self, ns: &str, name: &str, port: i32) -> Result<SocketAddr, String> {
        let (Some(services), Some(slices)) = (self.services.upgrade(), self.slices.upgrade())
        else {
            return Err("the server is shutting down".into());
        };
        let service = services
            .get(Some(ns), name)
            .await
            .map_err(|_| format!("service \"{name}\" not found"))?;
        let service_port = service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .and_then(|ports| ports.iter().find(|p| p.port == port))
            .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
        let query = ListQuery {
            labels: minik8s_api::selector::Selector::parse(&format!(
                "kubernetes.io/service-name={name}"
            ))
            .map_err(|e| e.to_string())?,
            ..Default::default()
        };
        let all = slices.list(Some(ns), &query).await.map_err(|e| e.message)?;
        for slice in &all.items {
            let Some(p) = slice.ports.iter().flatten().find(|p| {
                p.name.as_deref().unwrap_or_default()
                    == service_port.name.as_deref().unwrap_or_default()
            }) else {
                continue;
            };
            let Some(port) = p.port else { continue };
            for endpoint in &slice.endpoints {
                let ready = endpoint
                    .conditions
                    .as_ref()
                    .and_then(|c| c.ready)
                    .unwrap_or(true);
                let ip = endpoint
                    .addresses
                    .first()
                    .and_then(|a| a.parse::<IpAddr>().ok());
                if let (true, Some(ip)) = (ready, ip) {
                    return Ok(SocketAddr::new(ip, port as u16));
                }
            }
        }
        Err(format!("no endpoints available for service \"{name}\""))
    }
}

/// A webhook given by URL: `https://host[:port]/path`, host a name or an address.
fn url_target(url: &str, query: &str) -> Result<Target, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("parse {url:?}: {e}"))?;
    let host = uri
        .host()
        .ok_or_else(|| format!("parse {url:?}: no host"))?
        .trim_matches(['[', ']'])
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let path = uri.path().to_string();
    let path_and_query = match uri.query() {
        Some(q) => format!("{path}?{q}&{query}"),
        None => format!("{path}?{query}"),
    };
    let ip = match host.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => {
            use std::net::ToSocketAddrs;
            (host.as_str(), port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .map(|a| a.ip())
                .ok_or_else(|| format!("Post {url:?}: dial tcp: lookup {host}: no such host"))?
        }
    };
    let full = format!(
        "https://{}{path_and_query}",
        uri.authority().map(|a| a.as_str()).unwrap_or(&host)
    );
    Ok(Target {
        url: full,
        addr: SocketAddr::new(ip, port),
        server_name: host,
        path_and_query,
    })
}

/// The TLS client of a caBundle (the system's roots when it is empty).
fn tls(ca_bundle: &[u8]) -> Result<TlsConnector, String> {
    let pem = if ca_bundle.is_empty() {
        std::fs::read(SYSTEM_ROOTS).unwrap_or_default()
    } else {
        ca_bundle.to_vec()
    };
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// POSTs `review` to `target` and returns the answer's JSON; errors read as upstream's
/// (`Post "<url>": <why>`).
pub async fn post(
    target: &Target,
    ca_bundle: &[u8],
    review: &Value,
    timeout: Duration,
) -> Result<Value, String> {
    let call = async {
        let connector = tls(ca_bundle)?;
        let tcp = tokio::net::TcpStream::connect(target.addr)
            .await
            .map_err(|e| format!("dial tcp {}: connect: {e}", target.addr))?;
        let _ = tcp.set_nodelay(true);
        let name = match target.server_name.parse::<IpAddr>() {
            Ok(ip) => ServerName::IpAddress(ip.into()),
            Err(_) => {
                ServerName::try_from(target.server_name.clone()).map_err(|e| format!("tls: {e}"))?
            }
        };
        let stream = connector
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: failed to verify certificate: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
        let req = http::Request::post(&target.path_and_query)
            .header(http::header::HOST, target.server_name.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .body(Body::from(body))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "the server responded with status {}: {}",
                status.as_u16(),
                String::from_utf8_lossy(&bytes).trim()
            ));
        }
        serde_json::from_slice::<Value>(&bytes)
            .map_err(|e| format!("unable to decode the response: {e}"))
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) if e.starts_with("the server responded") || e.starts_with("unable to") => Err(e),
        Ok(Err(e)) => Err(format!("Post {:?}: {e}", target.url)),
        Err(_) => Err(format!("Post {:?}: context deadline exceeded", target.url)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_targets() {
        let t = url_target("https://127.0.0.1:9443/validate", "timeout=10s").unwrap();
        assert_eq!(t.addr, "127.0.0.1:9443".parse().unwrap());
        assert_eq!(t.server_name, "127.0.0.1");
        assert_eq!(t.path_and_query, "/validate?timeout=10s");
        assert_eq!(t.url, "https://127.0.0.1:9443/validate?timeout=10s");
        let t = url_target("https://[::1]/m?x=1", "timeout=5s").unwrap();
        assert_eq!(t.addr, "[::1]:443".parse().unwrap());
        assert_eq!(t.path_and_query, "/m?x=1&timeout=5s");
    }
}
