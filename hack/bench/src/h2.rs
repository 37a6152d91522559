//! A bare HTTP/2 client (hyper + rustls, no kube-rs): bodies go out as prepared bytes and
//! come back as bytes, so the client's own cost per request is as small as it gets. Requests
//! are multiplexed as concurrent streams over a few TLS connections.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::ConfigExt;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

#[derive(Clone)]
pub struct H2 {
    conns: Arc<Vec<SendRequest<Full<Bytes>>>>,
    next: Arc<AtomicUsize>,
    base: String,
    /// `Authorization` of every request (a bearer token); none: the kubeconfig's client
    /// certificate identifies the client.
    authorization: Option<http::HeaderValue>,
}

pub async fn kube_config(kubeconfig: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    Ok(
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?,
    )
}

/// `n` TLS connections negotiating HTTP/2 to the server of `kubeconfig`, authenticated with
/// its client certificate, and the server's base URL.
pub async fn tls_connections(
    kubeconfig: &Path,
    n: usize,
) -> anyhow::Result<(Vec<TlsStream<TcpStream>>, String)> {
    connect_tls(kube_config(kubeconfig).await?, n).await
}

async fn connect_tls(
    config: kube::Config,
    n: usize,
) -> anyhow::Result<(Vec<TlsStream<TcpStream>>, String)> {
    let mut tls = config.rustls_client_config()?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let uri = &config.cluster_url;
    let host = uri.host().context("server URL without host")?.to_string();
    let port = uri.port_u16().unwrap_or(443);
    let mut streams = Vec::new();
    for _ in 0..n.max(1) {
        let tcp = TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())?;
        let stream = connector.connect(name, tcp).await?;
        if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
            bail!("the server did not negotiate HTTP/2");
        }
        streams.push(stream);
    }
    Ok((streams, format!("https://{host}:{port}")))
}

impl H2 {
    /// Opens `connections` HTTP/2 connections to the server of `kubeconfig`.
    pub async fn connect(kubeconfig: &Path, connections: usize) -> anyhow::Result<H2> {
        let (streams, base) = tls_connections(kubeconfig, connections).await?;
        Self::handshake(streams, base, None).await
    }

    /// Opens `connections` HTTP/2 connections to the server of `kubeconfig` (its CA only,
    /// no client certificate) whose requests carry `token` as their bearer token.
    pub async fn connect_with_token(
        kubeconfig: &Path,
        token: &str,
        connections: usize,
    ) -> anyhow::Result<H2> {
        let mut config = kube_config(kubeconfig).await?;
        config.auth_info = Default::default();
        let (streams, base) = connect_tls(config, connections).await?;
        let bearer = http::HeaderValue::from_str(&format!("Bearer {token}"))?;
        Self::handshake(streams, base, Some(bearer)).await
    }

    async fn handshake(
        streams: Vec<TlsStream<TcpStream>>,
        base: String,
        authorization: Option<http::HeaderValue>,
    ) -> anyhow::Result<H2> {
        let mut conns = Vec::new();
        for stream in streams {
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .initial_stream_window_size(4 << 20)
                .initial_connection_window_size(16 << 20)
                .handshake(TokioIo::new(stream))
                .await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            conns.push(send);
        }
        Ok(H2 {
            conns: Arc::new(conns),
            next: Arc::new(AtomicUsize::new(0)),
            base,
            authorization,
        })
    }

    /// Sends one request on the next connection in turn; returns the status and whole body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        self.request_as(method, path, body, "application/json")
            .await
    }

    /// `request` with a body of `content_type` (a patch type, say).
    pub async fn request_as(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: &str,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        let mut send = self.conns[i].clone();
        send.ready().await?;
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::CONTENT_TYPE, content_type);
        if let Some(auth) = &self.authorization {
            req = req.header(http::header::AUTHORIZATION, auth.clone());
        }
        let req = req.body(Full::new(body))?;
        let resp = send.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }

    /// A request that must answer `want`.
    pub async fn expect(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        want: StatusCode,
    ) -> anyhow::Result<Bytes> {
        let (status, body) = self.request(method.clone(), path, body).await?;
        if status != want {
            bail!(
                "{method} {path}: {status} (wanted {want}): {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            );
        }
        Ok(body)
    }
}
