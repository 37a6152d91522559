//! Bringing a pod to a revision that has none, as Knative's activator does for the requests
//! it holds: a revision of a Function takes a warm pod from its namespace's pool and loads
//! the function into it (Fission's pool manager: tens of milliseconds, not a pod start);
//! any other revision, or a Function whose pool is empty, has its Deployment scaled from
//! zero to one. Both writes carry the resourceVersion read, so two nodes' activators never
//! take the same pod, and the autoscaler's scale to zero racing a request loses with a 409.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use minik8s_controllers::informers::Cache;
use minik8s_controllers::util::controller_ref::controller_ref;

use super::backends::Backends;
use crate::function::packages::{self, Installer};
use crate::function::{self, labels as fn_labels};
use crate::metrics::{self, ColdStart, RevisionLabels};
use crate::revision::{deployment_name, user_port};
use crate::serving::{Revision, labels};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no warm {0} pod in namespace {1}")]
    PoolEmpty(String, String),
    #[error("loading the function into pod {0}: {1}")]
    Specialize(String, String),
    #[error("installing the function's requirements: {0}")]
    Requirements(String),
}

/// The activator of one router.
pub struct Activator {
    client: kube::Client,
    /// Warm pods of the pools (those labelled [`fn_labels::POOL`]).
    pool: Cache<Pod>,
    /// This node's address: its own pool pods are taken first.
    node_ip: Option<IpAddr>,
    busy: Mutex<HashSet<(String, String)>>,
    http: HttpClient<HttpConnector, Full<Bytes>>,
    packages: Arc<Installer>,
}

/// The function a runtime pod loads, from the revision's environment.
#[derive(Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Specialization {
    pub source: String,
    pub handler: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_packages: Option<String>,
}

impl Specialization {
    /// `None` unless `rev` runs a Function on a pooled runtime.
    pub fn of(rev: &Revision) -> Option<Specialization> {
        rev.labels().get(fn_labels::FUNCTION)?;
        let env = rev.spec.pod.containers.first()?.env.as_ref()?;
        let get = |name: &str| {
            env.iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        };
        Some(Specialization {
            source: get(function::env::SOURCE)?,
            handler: get(function::env::HANDLER)
                .unwrap_or_else(|| function::DEFAULT_HANDLER.into()),
            name: get(function::env::NAME).unwrap_or_else(|| "function".into()),
            site_packages: get(function::env::SITE_PACKAGES),
        })
    }
}

impl std::fmt::Debug for Activator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activator")
            .field("node_ip", &self.node_ip)
            .finish_non_exhaustive()
    }
}

impl Activator {
    pub fn new(
        client: kube::Client,
        pool: Cache<Pod>,
        node_ip: Option<IpAddr>,
        packages: Arc<Installer>,
    ) -> Activator {
        Activator {
            client,
            pool,
            node_ip,
            busy: Mutex::new(HashSet::new()),
            http: minik8s_proxy::forward::http_client(),
            packages,
        }
    }

    /// Starts bringing a pod to `rev` unless this activator is at it already.
    pub fn activate(self: &Arc<Self>, rev: Arc<Revision>, backends: Arc<Backends>) {
        let key = (rev.namespace().unwrap_or_default(), rev.name_any());
        if !self
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone())
        {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let specialized = match Specialization::of(&rev) {
                Some(spec) => Some(this.specialize(&rev, &spec).await),
                None => None,
            };
            let who = RevisionLabels::of(&rev);
            match specialized {
                Some(Ok(addr)) => {
                    metrics::metrics().cold_start(&who, ColdStart::Pool);
                    backends.add_pod(addr)
                }
                other => {
                    if let Some(Err(e)) = other {
                        tracing::info!(revision = %key.1, error = %e, "no pool pod; scaling from zero");
                    }
                    match this.scale_from_zero(&rev).await {
                        Ok(true) => metrics::metrics().cold_start(&who, ColdStart::Deployment),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(revision = %key.1, error = %e, "scaling from zero failed")
                        }
                    }
                }
            }
            this.busy
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        });
    }

    /// Sets the revision's Deployment to one replica if it has none: whether this did.
    async fn scale_from_zero(&self, rev: &Revision) -> Result<bool, kube::Error> {
        let ns = rev.namespace().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &ns);
        let name = deployment_name(&rev.name_any());
        let scale = api.get_scale(&name).await?;
        if scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0 {
            return Ok(false);
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": scale.metadata.resource_version},
            "spec": {"replicas": 1},
        });
        match api
            .patch_scale(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(true),
            // Someone scaled it meanwhile: the next poke looks again.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Warm pods of the pool in `ns`, this node's first.
    fn candidates(&self, ns: &str, runtime: &str) -> Vec<Arc<Pod>> {
        let mut pods: Vec<Arc<Pod>> = self
            .pool
            .state()
            .into_iter()
            .filter(|p| {
                p.namespace().as_deref() == Some(ns)
                    && p.labels().get(fn_labels::POOL).map(String::as_str) == Some(runtime)
                    && super::pod_ready(p)
            })
            .collect();
        let local = |p: &Pod| {
            let host = p.status.as_ref().and_then(|s| s.host_ip.as_deref());
            self.node_ip.is_some_and(|ip| host == Some(&ip.to_string()))
        };
        pods.sort_by_key(|p| (!local(p), p.name_any()));
        pods
    }

    /// Takes a warm pod for `rev`, loads the function into it, and gives it the revision's
    /// labels: its address once it serves the function.
    async fn specialize(&self, rev: &Revision, spec: &Specialization) -> Result<SocketAddr, Error> {
        let ns = rev.namespace().unwrap_or_default();
        if let Some(requirements) = rev.annotations().get(packages::ANNOTATION) {
            self.packages
                .ensure(requirements)
                .await
                .map_err(Error::Requirements)?;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        for pod in self.candidates(&ns, function::PYTHON3) {
            let name = pod.name_any();
            let Some(ip) = pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse::<IpAddr>().ok())
            else {
                continue;
            };
            let Some(started) = function::container_started(&pod) else {
                continue;
            };
            // The claim: out of the pool (its ReplicaSet makes another), owned by the
            // revision, so it goes when the revision does.
            let claim = serde_json::json!({"metadata": {
                "resourceVersion": pod.resource_version(),
                "labels": {fn_labels::POOL: null, fn_labels::SPECIALIZED: rev.name_any()},
                "annotations": {fn_labels::SPECIALIZED_STARTED: started},
                "ownerReferences": [controller_ref(rev)],
            }});
            match pods
                .patch(&name, &PatchParams::default(), &Patch::Merge(&claim))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => continue,
                Err(e) => return Err(e.into()),
            }
            let addr = SocketAddr::new(ip, u16::try_from(user_port(rev)).unwrap_or(8080));
            if let Err(why) = self.load(addr, spec).await {
                let _ = pods.delete(&name, &DeleteParams::default()).await;
                return Err(Error::Specialize(name, why));
            }
            let mut revision_labels = rev.labels().clone();
            revision_labels.insert(labels::REVISION.into(), rev.name_any());
            let relabel = serde_json::json!({"metadata": {"labels": revision_labels}});
            pods.patch(&name, &PatchParams::default(), &Patch::Merge(&relabel))
                .await?;
            tracing::info!(revision = %rev.name_any(), pod = %name, "specialized a pool pod");
            return Ok(addr);
        }
        Err(Error::PoolEmpty(function::PYTHON3.into(), ns))
    }

    /// POSTs the function to the runtime's `/v1/specialize`.
    async fn load(&self, addr: SocketAddr, spec: &Specialization) -> Result<(), String> {
        let body = serde_json::to_vec(spec).map_err(|e| e.to_string())?;
        let req = http::Request::post(format!("http://{addr}/v1/specialize"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = self.http.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
        }
    }
}
