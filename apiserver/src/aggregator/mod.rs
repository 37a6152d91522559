//! The aggregation layer (upstream's kube-aggregator): an APIService with a Service hands
//! a group version to another API server, which clients reach through this one: requests
//! are proxied to it, its resources appear in discovery, and the APIService's `Available`
//! condition says whether it answers. Built-in group versions have APIServices too, marked
//! Local, so `kubectl get apiservices` lists every group version served, as upstream.
//!
//! What is aggregated is derived from the APIService objects after every write of one (the
//! registry's write hook) and every 30 s, when each aggregated server's discovery is read
//! again; nothing is kept that the API does not say.

pub mod proxy;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock, Weak};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResourceList, ObjectMeta};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceCondition, APIServiceSpec, APIServiceStatus,
};
use minik8s_api::registry::{ResourceInfo, Subresource};
use minik8s_api::validation::NameRule;
use minik8s_api::{ApiError, meta};
use tokio::sync::Notify;

use crate::admission::webhook::client::Resolver;
use crate::auth::{Extra, UserInfo};
use crate::registry::generic::{ListQuery, Reservation, WriteHooks};
use crate::server::ApiServer;
use proxy::{ClientIdentity, Upstream};

/// How often availability and discovery are checked without a change (upstream's resync).
const RESYNC: Duration = Duration::from_secs(30);
/// How long a discovery check may take (upstream's 5 s).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a proxied request may take to be answered (streams may then last longer).
const PROXY_TIMEOUT: Duration = Duration::from_secs(30);

/// One aggregated group version.
#[derive(Clone, Debug)]
pub struct Backend {
    pub name: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub service: String,
    pub port: i32,
    pub ca_bundle: Vec<u8>,
    pub insecure: bool,
    /// What it serves, from its discovery; empty until read.
    pub resources: Vec<ResourceInfo>,
}

#[derive(Default)]
pub struct Aggregator {
    backends: RwLock<BTreeMap<(String, String), Backend>>,
    identity: OnceLock<ClientIdentity>,
    changed: Notify,
}

/// Tells the aggregator about every write of an APIService.
struct Changed(Weak<Aggregator>);

impl WriteHooks<APIService> for Changed {
    fn begin_create(&self, _: &mut APIService, _: bool) -> Result<Reservation, ApiError> {
        Ok(Reservation::default())
    }
    fn begin_update(
        &self,
        _: &mut APIService,
        _: &APIService,
        _: bool,
    ) -> Result<Reservation, ApiError> {
        Ok(Reservation::default())
    }
    fn removed(&self, _: &APIService) {
        self.notify();
    }
    fn wrote(&self, _: &str, _: Option<&[u8]>, _: crate::storage::Revision) {
        self.notify();
    }
}

impl Changed {
    fn notify(&self) {
        if let Some(a) = self.0.upgrade() {
            a.changed.notify_one();
        }
    }
}

/// The resources an APIResourceList names, as this server describes its own.
fn resource_infos(group: &str, version: &str, list: &APIResourceList) -> Vec<ResourceInfo> {
    let mut out: Vec<ResourceInfo> = Vec::new();
    for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
        out.push(ResourceInfo {
            group: group.to_string(),
            version: version.to_string(),
            kind: r.kind.clone(),
            list_kind: format!("{}List", r.kind),
            plural: r.name.clone(),
            singular: if r.singular_name.is_empty() {
                r.kind.to_lowercase()
            } else {
                r.singular_name.clone()
            },
            namespaced: r.namespaced,
            short_names: r.short_names.clone().unwrap_or_default(),
            categories: r.categories.clone().unwrap_or_default(),
            verbs: r.verbs.clone(),
            subresources: Vec::new(),
            name_rule: NameRule::PathSegment,
        });
    }
    for r in &list.resources {
        let Some((parent, sub)) = r.name.split_once('/') else {
            continue;
        };
        if let Some(p) = out.iter_mut().find(|p| p.plural == parent) {
            p.subresources.push(Subresource {
                name: sub.to_string(),
                kind: r.kind.clone(),
                group: r.group.clone().unwrap_or_else(|| group.to_string()),
                version: r.version.clone().unwrap_or_else(|| version.to_string()),
                verbs: r.verbs.clone(),
            });
        }
    }
    out
}

/// The Available condition of an aggregated server, and its discovery when it answered.
struct Check {
    status: &'static str,
    reason: &'static str,
    message: String,
    resources: Vec<ResourceInfo>,
}

impl Aggregator {
    /// The write hook the APIService registry gets.
    pub fn hooks(self: &Arc<Self>) -> Arc<dyn WriteHooks<APIService>> {
        Arc::new(Changed(Arc::downgrade(self)))
    }

    /// The certificate presented to aggregated servers.
    pub fn set_identity(&self, cert_pem: &str, key_pem: &str) -> Result<(), String> {
        let _ = self
            .identity
            .set(ClientIdentity::from_pem(cert_pem, key_pem)?);
        Ok(())
    }

    /// The aggregated server of a group version, if one is registered.
    pub fn backend(&self, group: &str, version: &str) -> Option<Backend> {
        self.backends
            .read()
            .expect("aggregator lock")
            .get(&(group.to_string(), version.to_string()))
            .cloned()
    }

    /// The resources of every aggregated server, for discovery.
    pub fn resources(&self) -> Vec<ResourceInfo> {
        self.backends
            .read()
            .expect("aggregator lock")
            .values()
            .flat_map(|b| b.resources.iter().cloned())
            .collect()
    }

    fn resolver(server: &ApiServer) -> Resolver {
        Resolver {
            services: Arc::downgrade(&server.registry()),
            slices: Arc::downgrade(&server.registry()),
        }
    }

    async fn upstream(server: &ApiServer, b: &Backend) -> Result<Upstream, (&'static str, String)> {
        let addr = Self::resolver(server)
            .endpoint(&b.namespace, &b.service, b.port)
            .await
            .map_err(|e| {
                if e.starts_with("no endpoints") {
                    (
                        "MissingEndpoints",
                        format!(
                            "endpoints for service/{} in {:?} have no addresses",
                            b.service, b.namespace
                        ),
                    )
                } else {
                    (
                        "ServiceNotFound",
                        format!(
                            "service/{} in {:?} is not present: {e}",
                            b.service, b.namespace
                        ),
                    )
                }
            })?;
        Ok(Upstream {
            addr,
            server_name: format!("{}.{}.svc", b.service, b.namespace),
            ca_bundle: b.ca_bundle.clone(),
            insecure: b.insecure,
        })
    }

    /// Proxies a client's request to the aggregated server of its group version.
    pub async fn proxy(
        &self,
        server: &ApiServer,
        backend: &Backend,
        req: http::Request<Body>,
        user: &UserInfo,
        extra: &Extra,
    ) -> Response {
        let unavailable = |message: String| {
            crate::handlers::codec::status_response(&ApiError::new(
                503,
                "ServiceUnavailable",
                message,
            ))
        };
        let upstream = match Self::upstream(server, backend).await {
            Ok(u) => u,
            Err((_, message)) => return unavailable(message),
        };
        let req = proxy::forwarded(req, &upstream, user, extra);
        match proxy::send(&upstream, self.identity.get(), req, PROXY_TIMEOUT).await {
            Ok(resp) => proxy::response(resp),
            Err(e) => {
                tracing::warn!(apiservice = %backend.name, error = %e, "proxying to an aggregated server");
                unavailable(format!("error trying to reach service: {e}"))
            }
        }
    }

    /// Reads the aggregated server's discovery (upstream's availability check).
    async fn check(&self, server: &ApiServer, b: &Backend) -> Check {
        let failed = |reason: &'static str, message: String| Check {
            status: "False",
            reason,
            message,
            resources: Vec::new(),
        };
        let upstream = match Self::upstream(server, b).await {
            Ok(u) => u,
            Err((reason, message)) => return failed(reason, message),
        };
        let path = format!("/apis/{}/{}", b.group, b.version);
        let url = format!("https://{}{path}", upstream.addr);
        let req = http::Request::get(&path)
            .header(http::header::HOST, upstream.server_name.as_str())
            .header(http::header::ACCEPT, "application/json")
            .body(Body::empty())
            .expect("a valid request");
        let answer = async {
            let resp = proxy::send(&upstream, self.identity.get(), req, CHECK_TIMEOUT).await?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if !status.is_success() {
                return Err(format!("bad status from {url}: {}", status.as_u16()));
            }
            serde_json::from_slice::<APIResourceList>(&body).map_err(|e| e.to_string())
        };
        match tokio::time::timeout(CHECK_TIMEOUT, answer).await {
            Ok(Ok(list)) => Check {
                status: "True",
                reason: "Passed",
                message: "all checks passed".into(),
                resources: resource_infos(&b.group, &b.version, &list),
            },
            Ok(Err(e)) => failed(
                "FailedDiscoveryCheck",
                format!("failing or missing response from {url}: {e}"),
            ),
            Err(_) => failed(
                "FailedDiscoveryCheck",
                format!("failing or missing response from {url}: context deadline exceeded"),
            ),
        }
    }

    /// Brings the aggregated backends and every APIService's Available condition up to date.
    async fn sync(&self, server: &ApiServer) {
        let registry = server.registry::<APIService>();
        let all = match registry.list(None, &ListQuery::default()).await {
            Ok(l) => l.items,
            Err(e) => {
                tracing::warn!(error = %e.message, "listing APIServices");
                return;
            }
        };
        let mut backends = BTreeMap::new();
        for api in &all {
            let name = api.metadata.name.clone().unwrap_or_default();
            let spec = api.spec.clone().unwrap_or_default();
            let check = match &spec.service {
                None => Check {
                    status: "True",
                    reason: "Local",
                    message: "Local APIServices are always available".into(),
                    resources: Vec::new(),
                },
                Some(svc) => {
                    let mut backend = Backend {
                        name: name.clone(),
                        group: spec.group.clone().unwrap_or_default(),
                        version: spec.version.clone().unwrap_or_default(),
                        namespace: svc.namespace.clone().unwrap_or_default(),
                        service: svc.name.clone().unwrap_or_default(),
                        port: svc.port.unwrap_or(443),
                        ca_bundle: spec
                            .ca_bundle
                            .as_ref()
                            .map(|b| b.0.clone())
                            .unwrap_or_default(),
                        insecure: spec.insecure_skip_tls_verify.unwrap_or(false),
                        resources: Vec::new(),
                    };
                    let check = self.check(server, &backend).await;
                    backend.resources = check.resources.clone();
                    backends.insert((backend.group.clone(), backend.version.clone()), backend);
                    check
                }
            };
            set_available(server, api, &check).await;
        }
        *self.backends.write().expect("aggregator lock") = backends;
    }

    /// Follows APIServices until the server goes away.
    pub fn start(self: &Arc<Self>, server: &Arc<ApiServer>) {
        let this = Arc::downgrade(self);
        let weak = Arc::downgrade(server);
        tokio::spawn(async move {
            loop {
                let (Some(aggregator), Some(server)) = (this.upgrade(), weak.upgrade()) else {
                    return;
                };
                if server.shutting_down() {
                    return;
                }
                aggregator.sync(&server).await;
                drop(server);
                let _ = tokio::time::timeout(RESYNC, aggregator.changed.notified()).await;
            }
        });
    }
}

/// Writes `check` as the APIService's Available condition, when it says something new.
async fn set_available(server: &ApiServer, api: &APIService, check: &Check) {
    let current = api
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
    if current.is_some_and(|c| {
        c.status == check.status
            && c.reason.as_deref() == Some(check.reason)
            && c.message.as_deref() == Some(check.message.as_str())
    }) {
        return;
    }
    let name = api.metadata.name.clone().unwrap_or_default();
    let result = server
        .registry::<APIService>()
        .guaranteed_update(None, &name, None, false, |mut current| {
            let status = current.status.get_or_insert_with(APIServiceStatus::default);
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            let previous = conditions.iter().position(|c| c.type_ == "Available");
            let transition = match previous.map(|i| &conditions[i]) {
                Some(c) if c.status == check.status => c.last_transition_time.clone(),
                _ => Some(meta::now()),
            };
            let condition = APIServiceCondition {
                type_: "Available".into(),
                status: check.status.into(),
                reason: Some(check.reason.into()),
                message: Some(check.message.clone()),
                last_transition_time: transition,
            };
            match previous {
                Some(i) => conditions[i] = condition,
                None => conditions.push(condition),
            }
            Ok(current)
        })
        .await;
    if let Err(e) = result
        && e.code != 404
    {
        tracing::warn!(apiservice = %name, error = %e.message, "updating the Available condition");
    }
}

/// Upstream's discovery priorities, in this server's discovery order.
fn priority(index: usize) -> i32 {
    18000 - 100 * index as i32
}

/// A Local APIService for every built-in group version (upstream's autoregistration).
pub fn local_api_services() -> Vec<APIService> {
    let order = minik8s_api::registry::group_order();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for r in minik8s_api::registry::built_in() {
        if !seen.insert((r.group.clone(), r.version.clone())) {
            continue;
        }
        let index = order
            .iter()
            .position(|g| *g == r.group)
            .unwrap_or(order.len());
        out.push(APIService {
            metadata: ObjectMeta {
                name: Some(format!("{}.{}", r.version, r.group)),
                labels: Some(
                    [(
                        "kube-aggregator.kubernetes.io/automanaged".to_string(),
                        "onstart".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(APIServiceSpec {
                group: Some(r.group.clone()),
                version: Some(r.version.clone()),
                group_priority_minimum: priority(index),
                version_priority: 15,
                ..Default::default()
            }),
            status: None,
        });
    }
    out
}

/// The `kube-system/extension-apiserver-authentication` ConfigMap aggregated servers read
/// to trust this server's front-proxy certificate and headers (upstream's
/// ClusterAuthenticationTrust controller).
pub fn authentication_config_map(ca_pem: &str) -> ConfigMap {
    let list = |v: &[&str]| serde_json::to_string(v).unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("extension-apiserver-authentication".into()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        data: Some(
            [
                ("client-ca-file".to_string(), ca_pem.to_string()),
                (
                    "requestheader-client-ca-file".to_string(),
                    ca_pem.to_string(),
                ),
                (
                    "requestheader-allowed-names".to_string(),
                    list(&[proxy::CLIENT_NAME]),
                ),
                (
                    "requestheader-username-headers".to_string(),
                    list(&[proxy::USER_HEADER]),
                ),
                (
                    "requestheader-group-headers".to_string(),
                    list(&[proxy::GROUP_HEADER]),
                ),
                (
                    "requestheader-extra-headers-prefix".to_string(),
                    list(&[proxy::EXTRA_PREFIX]),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_becomes_resources() {
        let list: APIResourceList = serde_json::from_value(serde_json::json!({
            "groupVersion": "wardle.example.com/v1alpha1",
            "resources": [
                {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
                 "verbs": ["get", "list"], "shortNames": ["fl"]},
                {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder",
                 "verbs": ["get", "update"]},
            ],
        }))
        .unwrap();
        let infos = resource_infos("wardle.example.com", "v1alpha1", &list);
        assert_eq!(infos.len(), 1);
        let f = &infos[0];
        assert_eq!(
            (f.plural.as_str(), f.kind.as_str(), f.namespaced),
            ("flunders", "Flunder", true)
        );
        assert_eq!(f.short_names, vec!["fl"]);
        assert_eq!(f.subresources[0].name, "status");
        assert_eq!(f.subresources[0].group, "wardle.example.com");
    }

    #[test]
    fn every_built_in_group_version_is_local() {
        let local = local_api_services();
        let names: Vec<String> = local
            .iter()
            .filter_map(|a| a.metadata.name.clone())
            .collect();
        assert!(names.contains(&"v1.".to_string()));
        assert!(names.contains(&"v1.apps".to_string()));
        assert!(names.contains(&"v2.autoscaling".to_string()));
        assert!(
            local
                .iter()
                .all(|a| a.spec.as_ref().is_some_and(|s| s.service.is_none()))
        );
    }
}
