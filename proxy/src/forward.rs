//! Forwarding one HTTP request to an endpoint already chosen, shared by the Ingress proxy
//! and knative-lite's function gateway so both speak HTTP the same way: the same
//! `X-Forwarded-*` headers, the same pooled client, the same error answers. A caller that
//! counts requests in flight hands a guard that lives as long as the response body, so a
//! streamed answer is counted until its last byte.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// What a caller keeps while its request is in flight: told the status the request was
/// answered with (the backend's, or 502 when the backend failed), then dropped with the
/// response body, so it can time the whole answer.
pub trait InFlight: Send + Sync {
    fn answered(&mut self, _status: StatusCode) {}
}

/// Held while a request is in flight; dropped with the response body.
pub type Guard = Box<dyn InFlight>;

/// A backend's response body with the caller's guard attached.
pub struct Guarded {
    inner: Incoming,
    _guard: Option<Guard>,
}

impl hyper::body::Body for Guarded {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pub type Body = Either<Guarded, Full<Bytes>>;

/// A request's body as forwarded: streamed from the client, or read already.
pub type RequestBody = Either<Incoming, Full<Bytes>>;

/// A short text answer of the proxy's own.
pub fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(format!("{text}\n")))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    r
}

/// The Host a request was sent to.
pub fn request_host<B>(req: &Request<B>) -> String {
    req.headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
        .unwrap_or_default()
}

/// A pooled HTTP/1.1 client to endpoints.
#[derive(Clone)]
pub struct Forwarder {
    client: HttpClient<HttpConnector, RequestBody>,
}

/// A pooled HTTP/1.1 client to pods and nodes, with request bodies of type `B`.
pub fn http_client<B>() -> HttpClient<HttpConnector, B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
{
    let mut connector = HttpConnector::new();
    // A request's head and body go in separate writes: without this, Nagle's algorithm
    // and the endpoint's delayed ACK hold the body for 40 ms.
    connector.set_nodelay(true);
    HttpClient::builder(TokioExecutor::new()).build(connector)
}

impl Default for Forwarder {
    fn default() -> Self {
        Forwarder {
            client: http_client(),
        }
    }
}

impl Forwarder {
    /// Sends `req` to `endpoint` with `path` (path and query) as its target: 502 when the
    /// endpoint fails.
    pub async fn forward(
        &self,
        mut req: Request<RequestBody>,
        endpoint: SocketAddr,
        path: &str,
        peer: SocketAddr,
        guard: Option<Guard>,
    ) -> Response<Body> {
        let host = request_host(&req);
        let Ok(uri) = format!("http://{endpoint}{path}").parse::<Uri>() else {
            return plain(StatusCode::BAD_REQUEST, "bad request target");
        };
        *req.uri_mut() = uri;
        let headers = req.headers_mut();
        let forwarded_for = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(prev) => format!("{prev}, {}", peer.ip()),
            None => peer.ip().to_string(),
        };
        if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
            headers.insert("x-forwarded-for", v);
        }
        if let Ok(v) = HeaderValue::from_str(&host) {
            headers.insert("x-forwarded-host", v);
        }
        headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        let mut guard = guard;
        let answered = |guard: &mut Option<Guard>, status| {
            if let Some(g) = guard.as_mut() {
                g.answered(status);
            }
        };
        match self.client.request(req).await {
            Ok(resp) => {
                answered(&mut guard, resp.status());
                resp.map(|inner| {
                    Either::Left(Guarded {
                        inner,
                        _guard: guard,
                    })
                })
            }
            Err(e) => {
                tracing::debug!(%endpoint, error = %e, "backend failed");
                answered(&mut guard, StatusCode::BAD_GATEWAY);
                plain(StatusCode::BAD_GATEWAY, "bad gateway")
            }
        }
    }
}

/// Accepts HTTP/1.1 and HTTP/2 connections on `listener` until `shutdown`, answering each
/// request with `handle`.
pub async fn serve<H, F>(
    listener: TcpListener,
    handle: H,
    shutdown: impl std::future::Future<Output = ()>,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let accept = async {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let handle = handle.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let response = handle(req, peer);
                    async move { Ok::<_, Infallible>(response.await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    tokio::select! {
        _ = accept => {}
        _ = shutdown => {}
    }
}
