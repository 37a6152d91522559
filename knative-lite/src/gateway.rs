//! Every node's function gateway: `/function/<name>[.<namespace>]` calls a Function over
//! HTTP at the path the OpenFaaS gateway uses, `/async-function/...` queues the call and
//! answers 202 at once, `/_minik8s/stats` gives the autoscaler this node's counters, and
//! `/metrics` the functions' metrics under Knative's names ([`crate::metrics`]).
//! Calls go through the same router as Knative hosts, so a Function scales, holds requests
//! while it has no pod and splits traffic exactly as a Knative Service does.
//! `/workflow/<name>[.<namespace>]` runs a Workflow of functions ([`workflow`]).

pub mod workflow;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use minik8s_proxy::forward::{self, Body, Forwarder, RequestBody, plain};
use tokio::net::TcpListener;

use crate::metrics;
use crate::router::Router;

/// The path of the autoscaler's counters.
pub const STATS_PATH: &str = "/_minik8s/stats";
/// The path of the functions' Prometheus metrics ([`metrics`]).
pub const METRICS_PATH: &str = "/metrics";
/// On a request one node's router sends another's: `<namespace>/<revision>`, served from
/// the receiving node's pods of that revision.
pub const VIA_ROUTER: &str = "x-minik8s-revision";

/// A call the path names: which function, and the rest of the path for it.
#[derive(Debug, PartialEq)]
pub struct Call {
    pub namespace: String,
    pub name: String,
    pub path: String,
    pub asynchronous: bool,
}

/// Reads `/function/<name>[.<namespace>][/rest][?query]`.
pub fn parse(path_and_query: &str) -> Option<Call> {
    let (rest, asynchronous) = if let Some(r) = path_and_query.strip_prefix("/function/") {
        (r, false)
    } else {
        (path_and_query.strip_prefix("/async-function/")?, true)
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (target, tail) = rest.split_at(end);
    let (name, namespace) = target.split_once('.').unwrap_or((target, "default"));
    if name.is_empty() || namespace.is_empty() {
        return None;
    }
    let path = match tail {
        "" => "/".to_string(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_string(),
    };
    Some(Call {
        namespace: namespace.to_string(),
        name: name.to_string(),
        path,
        asynchronous,
    })
}

pub struct Gateway {
    router: Arc<Router>,
    forwarder: Forwarder,
    /// Creates and watches workflow runs.
    client: kube::Client,
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(value.to_string()))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

impl Gateway {
    pub fn new(router: Arc<Router>, client: kube::Client) -> Arc<Gateway> {
        Arc::new(Gateway {
            router,
            forwarder: Forwarder::default(),
            client,
        })
    }

    pub async fn handle(&self, mut req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let target = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        if target == STATS_PATH {
            let stats = serde_json::to_value(self.router.stats()).unwrap_or_default();
            return json(StatusCode::OK, &serde_json::json!({ "revisions": stats }));
        }
        if req.uri().path() == METRICS_PATH {
            let mut r = Response::new(Either::Right(Full::new(Bytes::from(
                metrics::metrics().encode(),
            ))));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            return r;
        }
        // Another node's router sends a revision's request to this node's pods, whose
        // containerConcurrency this router holds.
        if let Some((ns, name)) = req
            .headers()
            .get(VIA_ROUTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once('/'))
            .map(|(ns, name)| (ns.to_string(), name.to_string()))
        {
            let Some(pick) = self.router.route_local(&ns, &name) else {
                return plain(StatusCode::NOT_FOUND, "no such revision on this node");
            };
            return match pick.await {
                Ok(p) => {
                    self.forwarder
                        .forward(req.map(Either::Left), p.endpoint, &target, peer, p.guard)
                        .await
                }
                Err((status, why)) => plain(status, &why),
            };
        }
        if let Some(target) = workflow::parse(&target) {
            return workflow::handle(&self.client, req, target).await;
        }
        let Some(call) = parse(&target) else {
            return plain(StatusCode::NOT_FOUND, "not found");
        };
        let table = self.router.table();
        let Some(host) = table.function_host(&call.namespace, &call.name) else {
            return plain(
                StatusCode::NOT_FOUND,
                &format!(
                    "function {} not found in namespace {}",
                    call.name, call.namespace
                ),
            );
        };
        let Some(pick) = self.router.route(host) else {
            return plain(StatusCode::NOT_FOUND, "function has no route");
        };
        if !call.asynchronous {
            return match pick.await {
                Ok(p) => {
                    p.apply(&mut req);
                    self.forwarder
                        .forward(req.map(Either::Left), p.endpoint, &call.path, peer, p.guard)
                        .await
                }
                Err((status, why)) => plain(status, &why),
            };
        }
        // Queued: the body is read now, the call made in the background.
        let (parts, body) = req.into_parts();
        let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
            return plain(StatusCode::BAD_REQUEST, "reading the request body failed");
        };
        let mut req: Request<RequestBody> =
            Request::from_parts(parts, Either::Right(Full::new(body)));
        let forwarder = self.forwarder.clone();
        tokio::spawn(async move {
            let status = match pick.await {
                Ok(p) => {
                    p.apply(&mut req);
                    let resp = forwarder
                        .forward(req, p.endpoint, &call.path, peer, p.guard)
                        .await;
                    let status = resp.status();
                    let _ = resp.into_body().collect().await;
                    status
                }
                Err((status, _)) => status,
            };
            tracing::info!(function = %call.name, namespace = %call.namespace, %status, "async call done");
        });
        json(
            StatusCode::ACCEPTED,
            &serde_json::json!({"status": "accepted"}),
        )
    }
}

/// Serves the gateway on `listener` until `shutdown`.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let handle = move |req, peer| {
        let gateway = gateway.clone();
        async move { gateway.handle(req, peer).await }
    };
    forward::serve(listener, handle, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_openfaas_writes_them() {
        let call = parse("/function/hello").unwrap();
        assert_eq!(
            (
                call.namespace.as_str(),
                call.name.as_str(),
                call.path.as_str()
            ),
            ("default", "hello", "/")
        );
        let call = parse("/async-function/hello.team-a/sub/path?x=1").unwrap();
        assert_eq!(
            (
                call.namespace.as_str(),
                call.name.as_str(),
                call.path.as_str()
            ),
            ("team-a", "hello", "/sub/path?x=1")
        );
        assert!(call.asynchronous);
        assert_eq!(parse("/function/hello?x=1").unwrap().path, "/?x=1");
        assert!(parse("/function/").is_none());
        assert!(parse("/functions/hello").is_none());
    }
}
