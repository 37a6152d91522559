//! `minik8s prometheus-sd`: Prometheus's Kubernetes service discovery, served as HTTP SD.
//! Debian's Prometheus is built without `kubernetes_sd_configs` (Debian dropped it for
//! client-go's dependencies), so `hack/up.sh --monitoring` runs this beside it: it watches
//! the cluster as Prometheus would (with Prometheus's ServiceAccount token, so RBAC decides
//! what it sees) and answers `GET /sd/<role>` (node, pod, endpoints) with the targets and
//! `__meta_kubernetes_*` labels Prometheus's own discovery gives ([`targets`]); Prometheus
//! reads them with `http_sd_configs` and relabels them as on Kubernetes.

pub mod targets;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use minik8s_informers::{Cache, Informers};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub client: crate::control::ClientArgs,
    /// Where to serve the targets (loopback: Prometheus runs on this machine).
    #[arg(long, default_value = "127.0.0.1:9099")]
    pub listen: SocketAddr,
}

/// The watched objects the roles are computed from.
#[derive(Clone)]
struct Caches {
    nodes: Cache<Node>,
    pods: Cache<Pod>,
    endpoints: Cache<Endpoints>,
    services: Cache<Service>,
}

impl Caches {
    fn new(informers: &Informers) -> Caches {
        Caches {
            nodes: informers.of::<Node>().store(),
            pods: informers.of::<Pod>().store(),
            endpoints: informers.of::<Endpoints>().store(),
            services: informers.of::<Service>().store(),
        }
    }

    /// A role's targets; `None` for a role this does not serve, or before its caches hold a
    /// first complete list (Prometheus keeps its last targets on an error).
    fn role(&self, role: &str) -> Option<Vec<targets::Target>> {
        match role {
            "node" => self
                .nodes
                .is_ready()
                .then(|| targets::nodes(&self.nodes.state())),
            "pod" => self
                .pods
                .is_ready()
                .then(|| targets::pods(&self.pods.state())),
            "endpoints" => {
                (self.endpoints.is_ready() && self.services.is_ready() && self.pods.is_ready())
                    .then(|| {
                        targets::endpoints(
                            &self.endpoints.state(),
                            &self.services.state(),
                            &self.pods.state(),
                        )
                    })
            }
            _ => None,
        }
    }
}

async fn serve_role(State(caches): State<Arc<Caches>>, Path(role): Path<String>) -> Response {
    if !matches!(role.as_str(), "node" | "pod" | "endpoints") {
        return (StatusCode::NOT_FOUND, format!("no role {role:?}\n")).into_response();
    }
    match caches.role(&role) {
        Some(t) => {
            let groups: Vec<serde_json::Value> = t.iter().map(targets::Target::to_json).collect();
            axum::Json(groups).into_response()
        }
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the caches are not synced yet\n",
        )
            .into_response(),
    }
}

fn router(caches: Arc<Caches>) -> Router {
    Router::new()
        .route("/sd/{role}", get(serve_role))
        .with_state(caches)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = args.client.client().await?;
    let informers = Informers::new(client);
    let caches = Arc::new(Caches::new(&informers));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(listen = %args.listen, "serving Prometheus HTTP service discovery");
    axum::serve(listener, router(caches))
        .with_graceful_shutdown(crate::shutdown_signal())
        .await?;
    Ok(())
}
