//! Forwarding an upgrade request (SPDY or WebSocket) to the runtime's streaming server: the
//! client's request goes on as it came, and only once the runtime answers `101 Switching
//! Protocols` does the client get that answer and the two connections get spliced byte for
//! byte. Any other answer is passed back as a plain response and the client connection is
//! not upgraded (CVE-2018-1002105: never leave a half-upgraded connection).

use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

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

fn text(code: StatusCode, msg: impl Into<String>) -> Response {
    let mut resp = (code, msg.into()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Hop-by-hop headers of a plain (not upgraded) response, which are not passed on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// Sends the upgrade request `req` to `url` (an `http://host:port/path` of the runtime's
/// streaming server), adding the client's query, and splices the connections on success.
pub async fn upgrade(mut req: Request<Body>, url: &str) -> Response {
    if !is_upgrade(req.headers()) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required");
    }
    let target: http::Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("bad streaming URL {url:?}: {e}"),
            );
        }
    };
    if target.scheme_str() != Some("http") {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("unsupported streaming URL {url:?}"),
        );
    }
    let Some(authority) = target.authority().cloned() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("streaming URL {url:?} has no host"),
        );
    };
    let mut path = target.path().to_string();
    match (target.query(), req.uri().query()) {
        (Some(a), Some(b)) => path = format!("{path}?{a}&{b}"),
        (Some(q), None) | (None, Some(q)) => path = format!("{path}?{q}"),
        (None, None) => {}
    }
    let port = authority.port_u16().unwrap_or(80);
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let stream = match tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error dialing backend: {e}"),
            );
        }
        Err(_) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error dialing backend: timed out",
            );
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(x) => x,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error dialing backend: {e}"),
            );
        }
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming backend connection ended");
        }
    });
    let mut out = Request::builder().method(req.method().clone()).uri(path);
    for (k, v) in req.headers() {
        if k != header::HOST {
            out = out.header(k, v);
        }
    }
    out = out.header(header::HOST, authority.as_str());
    let out = match out.body(Empty::<Bytes>::new()) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = match sender.send_request(out).await {
        Ok(r) => r,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error proxying to the streaming server: {e}"),
            );
        }
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Refused: answer with what the runtime said and close; nothing is upgraded.
        let status = resp.status();
        let headers = resp.headers().clone();
        let body =
            match tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect()).await {
                Ok(Ok(b)) => b.to_bytes(),
                _ => Bytes::new(),
            };
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = status;
        for (k, v) in &headers {
            if !HOP_BY_HOP.contains(&k.as_str()) {
                r.headers_mut().append(k, v.clone());
            }
        }
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *r.headers_mut() = resp.headers().clone();
    tokio::spawn(async move {
        let (client, backend) = match tokio::join!(client_upgrade, backend_upgrade) {
            (Ok(c), Ok(b)) => (c, b),
            (c, b) => {
                tracing::debug!(
                    client = ?c.err(),
                    backend = ?b.err(),
                    "upgrade did not complete"
                );
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut backend = TokioIo::new(backend);
        match tokio::io::copy_bidirectional(&mut client, &mut backend).await {
            Ok((up, down)) => tracing::debug!(up, down, "stream closed"),
            Err(e) => tracing::debug!(error = %e, "stream ended"),
        }
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_requests() {
        let mut h = HeaderMap::new();
        assert!(!is_upgrade(&h));
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(!is_upgrade(&h));
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert!(is_upgrade(&h));
    }
}
