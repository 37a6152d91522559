//! An Ingress controller that is itself the proxy: the routing table is rebuilt from watches
//! (Ingresses, IngressClasses, Services, EndpointSlices) and swapped in without a restart, and
//! every request is forwarded straight to a ready endpoint (not through the Service's virtual
//! IP), round-robin, as ingress-nginx does.

pub mod routes;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use futures::future::join_all;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::{
    Ingress, IngressClass, IngressLoadBalancerIngress, IngressLoadBalancerStatus, IngressStatus,
};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::net::TcpListener;

use minik8s_informers::Informers;

use crate::cache::{Caches, poke_on_change};
pub use routes::{DEFAULT_CLASS_ANNOTATION, Routed, Routes};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

type Body = Either<Incoming, Full<Bytes>>;

/// The proxy: the current table and a pooled HTTP client.
pub struct Proxy {
    routes: RwLock<Arc<Routes>>,
    hosts: Option<Arc<dyn HostRoutes>>,
    client: HttpClient<HttpConnector, Incoming>,
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(format!("{text}\n")))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    r
}

impl Proxy {
    pub fn new(routes: Routes) -> Arc<Proxy> {
        Self::with_hosts(routes, None)
    }

    /// A proxy that asks `hosts` first.
    pub fn with_hosts(routes: Routes, hosts: Option<Arc<dyn HostRoutes>>) -> Arc<Proxy> {
        Arc::new(Proxy {
            routes: RwLock::new(Arc::new(routes)),
            hosts,
            client: HttpClient::builder(TokioExecutor::new()).build_http(),
        })
    }

    pub fn set_routes(&self, routes: Routes) {
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(routes);
    }

    fn routes(&self) -> Arc<Routes> {
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The endpoint the Ingress rules pick for `host` and `path`, or the status and text
    /// that say why there is none.
    fn route_ingress(
        &self,
        routes: &Routes,
        host: &str,
        path: &str,
    ) -> Result<SocketAddr, (StatusCode, String)> {
        match routes.route(host, path) {
            Routed::NoMatch => Err((StatusCode::NOT_FOUND, "default backend - 404".into())),
            Routed::Backend(b) => b.pick().ok_or_else(|| {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no endpoints for {}", b.service),
                )
            }),
        }
    }

    /// Forwards one request: 404 when no rule matches, 503 when the backend has no ready
    /// endpoint, 502 when the endpoint fails.
    pub async fn handle(&self, mut req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(|a| a.to_string()))
            .unwrap_or_default();
        let routes = self.routes();
        let picked = self
            .hosts
            .as_ref()
            .and_then(|h| h.pick(&routes::bare_host(&host)));
        let endpoint = match picked {
            Some(Ok(endpoint)) => endpoint,
            Some(Err(why)) => return plain(StatusCode::SERVICE_UNAVAILABLE, &why),
            None => match self.route_ingress(&routes, &host, req.uri().path()) {
                Ok(endpoint) => endpoint,
                Err((status, why)) => return plain(status, &why),
            },
        };
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
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
        match self.client.request(req).await {
            Ok(resp) => resp.map(Either::Left),
            Err(e) => {
                tracing::debug!(%endpoint, error = %e, "backend failed");
                plain(StatusCode::BAD_GATEWAY, "bad gateway")
            }
        }
    }

    /// Accepts HTTP/1.1 and HTTP/2 connections until `shutdown`.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let accept = async {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                let proxy = self.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let proxy = proxy.clone();
                        async move { Ok::<_, Infallible>(proxy.handle(req, peer).await) }
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
}

/// What the Ingress proxy needs to run.
/// Hosts routed by another component (knative-lite's Routes), asked before the Ingress
/// rules: such hosts are that component's own.
pub trait HostRoutes: Send + Sync + std::fmt::Debug {
    /// `None`: not one of its hosts; `Some(Ok(addr))`: send the request there;
    /// `Some(Err(why))`: its host, with nowhere to send it now (503).
    fn pick(&self, host: &str) -> Option<Result<SocketAddr, String>>;
}

#[derive(Clone, Debug)]
pub struct IngressConfig {
    pub bind: SocketAddr,
    /// Published in `status.loadBalancer.ingress` of the Ingresses we serve (with
    /// `publish_node_addresses`, only while no node has an InternalIP).
    pub addresses: Vec<IpAddr>,
    /// Publish the InternalIPs of every node instead (every node runs this proxy), so that
    /// the proxies of all nodes want the same status and do not overwrite each other's.
    pub publish_node_addresses: bool,
    /// Hosts served ahead of the Ingresses.
    pub hosts: Option<Arc<dyn HostRoutes>>,
}

/// Nodes with this label are hollow (no containers, no Ingress proxy): not published.
const HOLLOW_LABEL: &str = "minik8s.io/hollow";

/// The InternalIPs of the nodes that run real node agents, sorted and without repeats, so
/// every proxy that sees the same nodes computes the same list.
pub fn node_addresses<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = nodes
        .into_iter()
        .filter(|n| {
            !n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(HOLLOW_LABEL))
        })
        .flat_map(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.addresses.clone())
                .unwrap_or_default()
        })
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

fn wanted_status(addresses: &[IpAddr]) -> IngressStatus {
    IngressStatus {
        load_balancer: Some(IngressLoadBalancerStatus {
            ingress: Some(
                addresses
                    .iter()
                    .map(|ip| IngressLoadBalancerIngress {
                        ip: Some(ip.to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        }),
    }
}

/// Sets `status.loadBalancer` of the Ingresses we serve to our addresses, with the
/// resourceVersion we read (a conflict is retried on the watch event that follows it).
async fn update_statuses(client: &Client, ingresses: &[Ingress], addresses: &[IpAddr]) {
    let want = wanted_status(addresses);
    let writes = ingresses
        .iter()
        .filter(|i| i.status.as_ref() != Some(&want))
        .map(|i| {
            let mut updated = i.clone();
            updated.status = Some(want.clone());
            let ns = i.metadata.namespace.clone().unwrap_or_default();
            let name = i.metadata.name.clone().unwrap_or_default();
            let api: Api<Ingress> = Api::namespaced(client.clone(), &ns);
            async move {
                if let Err(e) = api
                    .replace_status(&name, &PostParams::default(), &updated)
                    .await
                {
                    tracing::debug!(ingress = %format!("{ns}/{name}"), error = %e, "status update failed");
                }
            }
        });
    join_all(writes).await;
}

/// Runs the Ingress proxy until `shutdown`: routes from the caches of `informers`, statuses
/// written through `client`.
pub async fn run(
    client: Client,
    informers: &Informers,
    config: IngressConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let listener = TcpListener::bind(config.bind)
        .await
        .map_err(|e| Error::Bind(config.bind, e))?;
    tracing::info!(bind = %config.bind, "serving ingress");
    let caches = Caches::from_informers(informers);
    let ingresses = poke_on_change(&informers.of::<Ingress>(), &caches.changed);
    let classes = poke_on_change(&informers.of::<IngressClass>(), &caches.changed);
    let nodes = config
        .publish_node_addresses
        .then(|| poke_on_change(&informers.of::<Node>(), &caches.changed));
    let proxy = Proxy::with_hosts(Routes::default(), config.hosts.clone());
    let updater = {
        let proxy = proxy.clone();
        tokio::spawn(async move {
            if caches.ready().await.is_err()
                || ingresses.wait_until_ready().await.is_err()
                || classes.wait_until_ready().await.is_err()
            {
                return;
            }
            if let Some(nodes) = &nodes
                && nodes.wait_until_ready().await.is_err()
            {
                return;
            }
            loop {
                let all: Vec<Ingress> = ingresses.state().iter().map(|i| (**i).clone()).collect();
                let cls: Vec<IngressClass> =
                    classes.state().iter().map(|c| (**c).clone()).collect();
                proxy.set_routes(Routes::build(
                    &all,
                    &cls,
                    &caches.services(),
                    &caches.slices(),
                ));
                let ours: Vec<Ingress> = all
                    .into_iter()
                    .filter(|i| routes::is_ours(i, &cls))
                    .collect();
                let published = match &nodes {
                    Some(nodes) => {
                        let ips = node_addresses(nodes.state().iter().map(|n| &**n));
                        if ips.is_empty() {
                            config.addresses.clone()
                        } else {
                            ips
                        }
                    }
                    None => config.addresses.clone(),
                };
                update_statuses(&client, &ours, &published).await;
                caches.changed.notified().await;
            }
        })
    };
    proxy.serve(listener, shutdown).await;
    updater.abort();
    Ok(())
}

/// The name of the IngressClass we serve.
pub const CLASS_NAME: &str = "minik8s";

/// Creates the `minik8s` IngressClass, marked as the default class, unless a class of that
/// name exists (then it is left as its owner made it).
pub async fn ensure_class(client: &Client) -> Result<(), kube::Error> {
    let api: Api<IngressClass> = Api::all(client.clone());
    if api.get_opt(CLASS_NAME).await?.is_some() {
        return Ok(());
    }
    let class = IngressClass {
        metadata: kube::api::ObjectMeta {
            name: Some(CLASS_NAME.into()),
            annotations: Some([(DEFAULT_CLASS_ANNOTATION.to_string(), "true".to_string())].into()),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::networking::v1::IngressClassSpec {
            controller: Some(routes::CONTROLLER.into()),
            ..Default::default()
        }),
    };
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}
