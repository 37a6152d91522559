//! Caches of Services and EndpointSlices kept current by watches (kube-rs reflectors). Each
//! component owns its caches and is poked through `changed` after every watch event; the work
//! itself always reads the caches, never the events.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
#[error("the Service and EndpointSlice caches never filled")]
pub struct NotReady;

/// Caches of Services and EndpointSlices kept current by watches; every change pokes `changed`.
#[derive(Clone)]
pub struct Caches {
    pub services: Store<Service>,
    pub slices: Store<EndpointSlice>,
    pub changed: Arc<Notify>,
}

impl Caches {
    /// Starts the watches (all namespaces) in the background.
    pub fn start(client: Client) -> Caches {
        let changed = Arc::new(Notify::new());
        let services = watch::<Service>(Api::all(client.clone()), changed.clone());
        let slices = watch::<EndpointSlice>(Api::all(client), changed.clone());
        Caches {
            services,
            slices,
            changed,
        }
    }

    /// Waits until both caches hold a complete first list.
    pub async fn ready(&self) -> Result<(), NotReady> {
        self.services
            .wait_until_ready()
            .await
            .map_err(|_| NotReady)?;
        self.slices.wait_until_ready().await.map_err(|_| NotReady)
    }

    pub fn services(&self) -> Vec<Service> {
        self.services
            .state()
            .iter()
            .map(|s| (**s).clone())
            .collect()
    }

    pub fn slices(&self) -> Vec<EndpointSlice> {
        self.slices.state().iter().map(|s| (**s).clone()).collect()
    }
}

/// Starts a reflector for `api` that pokes `changed` after every event.
pub fn watch<K>(api: Api<K>, changed: Arc<Notify>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.notify_one(),
                Err(e) => tracing::warn!(error = %e, "watch failed"),
            }
        }
    });
    store
}
