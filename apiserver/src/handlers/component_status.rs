//! `v1` ComponentStatus, computed on each read as upstream's componentstatus REST storage
//! does, and deprecated with the same warning. Upstream probes the scheduler's and the
//! controller manager's `/healthz` on fixed local ports; here they run as API clients that may
//! be anywhere, so their health is what they prove through the API: the leader Lease each
//! renews in `kube-system`, fresh within its duration. etcd-0 is the store, answering.

use std::sync::Arc;

use async_trait::async_trait;
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ComponentCondition, ComponentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, ResourceInfo, Target};
use serde::Serialize;

use super::codec;
use super::render::{self, Renderer};
use super::request::Verb;
use super::resource::{ApiRequest, Endpoint};
use crate::registry::generic::GenericRegistry;
use crate::registry::typed;
use crate::registry::watch_cache::Encoded;
use crate::server::ApiServer;
use crate::storage::DynStore;

const WARNING: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// The components, as upstream names them, and the Lease that shows each alive.
const LEASED: &[(&str, &str)] = &[
    ("controller-manager", "kube-controller-manager"),
    ("scheduler", "kube-scheduler"),
];
const ETCD: &str = "etcd-0";

pub struct ComponentStatusEndpoint {
    info: ResourceInfo,
    leases: Arc<GenericRegistry<BuiltIn<Lease>>>,
    store: DynStore,
}

impl ComponentStatusEndpoint {
    /// Leases must be registered first.
    pub fn new(server: &ApiServer) -> Self {
        ComponentStatusEndpoint {
            info: typed::info::<ComponentStatus>(),
            leases: server.registry::<Lease>(),
            store: server.store.clone(),
        }
    }

    async fn leased(&self, name: &str, lease: &str) -> ComponentStatus {
        let now = jiff::Timestamp::now();
        let health = match self.leases.get(Some("kube-system"), lease).await {
            Ok(l) => {
                let spec = l.spec.unwrap_or_default();
                let holder = spec.holder_identity.unwrap_or_default();
                let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
                match spec.renew_time.map(|t| t.0) {
                    Some(at) if !holder.is_empty() => {
                        let age = now.duration_since(at).as_secs();
                        if age <= duration {
                            Ok(())
                        } else {
                            Err(format!(
                                "lease kube-system/{lease} held by {holder} was last renewed {age}s ago, past its {duration}s duration"
                            ))
                        }
                    }
                    _ => Err(format!("lease kube-system/{lease} is held by no one")),
                }
            }
            Err(e) if e.code == 404 => Err(format!(
                "no lease kube-system/{lease}: the component has not started"
            )),
            Err(e) => Err(e.message),
        };
        status(name, health)
    }

    async fn etcd(&self) -> ComponentStatus {
        let health = self.store.current_revision().await;
        status(ETCD, health.map(|_| ()).map_err(|e| e.to_string()))
    }

    async fn all(&self) -> Vec<ComponentStatus> {
        let mut out = Vec::new();
        for (name, lease) in LEASED {
            out.push(self.leased(name, lease).await);
        }
        out.push(self.etcd().await);
        out
    }

    async fn dispatch(&self, req: &ApiRequest) -> Result<Response, ApiError> {
        let t = &req.target;
        if t.namespace.is_some() || t.subresource.is_some() {
            return Err(ApiError::path_not_found());
        }
        let name = t.name.as_deref().unwrap_or_default();
        let renderer = Renderer {
            render: render::negotiate(&req.headers, req.param("includeObject"))?,
            kind: self.info.kind.clone(),
            api_version: self.info.api_version(),
            list_kind: self.info.list_kind.clone(),
            printer: Arc::new(BuiltIn::<ComponentStatus>::new(self.info.clone())),
        };
        let target = Target {
            group: "",
            resource: "componentstatuses",
            name,
        };
        let resp = match (&t.verb, t.name.is_some()) {
            (Verb::List, false) => {
                let items: Vec<Computed> = self.all().await.into_iter().map(Computed::of).collect();
                renderer.list(&items, ListMeta::default())
            }
            (Verb::Get, true) => {
                let found = match name {
                    ETCD => Some(self.etcd().await),
                    _ => match LEASED.iter().find(|(n, _)| *n == name) {
                        Some((n, lease)) => Some(self.leased(n, lease).await),
                        None => None,
                    },
                };
                let Some(found) = found else {
                    return Err(ApiError::not_found(target));
                };
                renderer.object(StatusCode::OK, &found)
            }
            (verb, _) => return Err(ApiError::method_not_supported(target, verb.as_str())),
        };
        Ok(codec::with_warnings(resp, &[WARNING.to_string()]))
    }
}

fn status(name: &str, health: Result<(), String>) -> ComponentStatus {
    let condition = match health {
        Ok(()) => ComponentCondition {
            type_: "Healthy".into(),
            status: "True".into(),
            message: Some("ok".into()),
            error: None,
        },
        Err(e) => ComponentCondition {
            type_: "Healthy".into(),
            status: "False".into(),
            message: None,
            error: Some(e),
        },
    };
    ComponentStatus {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        conditions: Some(vec![condition]),
    }
}

/// A computed status, encoded once for the list renderer.
#[derive(Serialize)]
#[serde(transparent)]
struct Computed {
    #[serde(skip)]
    json: Bytes,
    status: ComponentStatus,
}

impl Computed {
    fn of(status: ComponentStatus) -> Self {
        let mut value = serde_json::to_value(&status).unwrap_or_default();
        value["kind"] = "ComponentStatus".into();
        value["apiVersion"] = "v1".into();
        Computed {
            json: Bytes::from(serde_json::to_vec(&value).unwrap_or_default()),
            status,
        }
    }
}

impl Encoded for Computed {
    fn json(&self) -> Bytes {
        self.json.clone()
    }
}

#[async_trait]
impl Endpoint for ComponentStatusEndpoint {
    fn info(&self) -> &ResourceInfo {
        &self.info
    }

    async fn serve(&self, req: ApiRequest) -> Response {
        match self.dispatch(&req).await {
            Ok(resp) => resp,
            Err(e) => render::error_response(&req.headers, &e),
        }
    }
}
