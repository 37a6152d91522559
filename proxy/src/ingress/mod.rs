//! An Ingress controller that is itself the proxy: the routing table is rebuilt from watches
//! (Ingresses, IngressClasses, Services, EndpointSlices) and swapped in without a restart, and
//! every request is forwarded straight to a ready endpoint (not through the Service's virtual
//! IP), round-robin, as ingress-nginx does.

pub mod routes;

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use futures::future::join_all;
use http::{Request, Response, StatusCode};
use http_body_util::Either;
use hyper::body::Incoming;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::{
    Ingress, IngressClass, IngressLoadBalancerIngress, IngressLoadBalancerStatus, IngressStatus,
};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::net::TcpListener;

use minik8s_informers::Informers;

use crate::cache::{Caches, poke_on_change};
use crate::forward::{self, Body, Forwarder, Guard, plain};
pub use routes::{DEFAULT_CLASS_ANNOTATION, Routed, Routes};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// The proxy: the current table, and what forwards.
pub struct Proxy {
    routes: RwLock<Arc<Routes>>,
    hosts: Option<Arc<dyn HostRoutes>>,
    forwarder: Forwarder,
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
            forwarder: Forwarder::default(),
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
        let host = forward::request_host(&req);
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        let picked = self
            .hosts
            .as_ref()
            .and_then(|h| h.pick(&routes::bare_host(&host)));
        let (endpoint, guard) = match picked {
            Some(pick) => match pick.await {
                Ok(p) => {
                    p.apply(&mut req);
                    (p.endpoint, p.guard)
                }
                Err((status, why)) => return plain(status, &why),
            },
            None => match self.route_ingress(&self.routes(), &host, req.uri().path()) {
                Ok(endpoint) => (endpoint, None),
                Err((status, why)) => return plain(status, &why),
            },
        };
        self.forwarder
            .forward(req.map(Either::Left), endpoint, &path, peer, guard)
            .await
    }

    /// Accepts HTTP/1.1 and HTTP/2 connections until `shutdown`.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let handle = move |req, peer| {
            let proxy = self.clone();
            async move { proxy.handle(req, peer).await }
        };
        forward::serve(listener, handle, shutdown).await
    }
}

/// Where a request for one of [`HostRoutes`]' hosts goes, what to hold while it is in
/// flight, and headers to add to it.
pub struct Picked {
    pub endpoint: SocketAddr,
    pub guard: Option<Guard>,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl Picked {
    /// Adds the headers to `req`.
    pub fn apply<B>(&self, req: &mut Request<B>) {
        for (name, value) in &self.headers {
            req.headers_mut().insert(name.clone(), value.clone());
        }
    }
}

/// The answer of [`HostRoutes::pick`]: an endpoint, or the status and text to answer with.
pub type PickFuture =
    Pin<Box<dyn std::future::Future<Output = Result<Picked, (StatusCode, String)>> + Send>>;

/// Hosts routed by another component (knative-lite's Routes), asked before the Ingress
/// rules: such hosts are that component's own.
pub trait HostRoutes: Send + Sync + std::fmt::Debug {
    /// `None`: not one of its hosts; otherwise where to send the request once the future
    /// resolves (it may wait, as an activator holds requests for a revision with no pod).
    fn pick(&self, host: &str) -> Option<PickFuture>;
}

/// What the Ingress proxy needs to run.
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
