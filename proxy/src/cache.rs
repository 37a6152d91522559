//! The Services and EndpointSlices a proxy component works from, read from the process's shared
//! informers: in `minik8s server` the controllers, the proxier, DNS and the Ingress proxy hold
//! one cache of each kind between them instead of one each. Each component still gets its own
//! `changed`, poked after every change: a `Notify` wakes one waiter, so two components sharing
//! one would steal each other's wake-ups. The work itself always reads the caches, never the
//! changes.

use std::sync::{Arc, Weak};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use minik8s_informers::{Cache, Informer, Informers};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
#[error("the Service and EndpointSlice caches never filled")]
pub struct NotReady;

/// Caches of Services and EndpointSlices kept current by watches; every change pokes `changed`.
#[derive(Clone)]
pub struct Caches {
    pub services: Cache<Service>,
    pub slices: Cache<EndpointSlice>,
    pub changed: Arc<Notify>,
}

impl Caches {
    /// The Service and EndpointSlice caches of `informers` (all namespaces; their watches start
    /// now unless another component started them), with a `changed` of their own.
    pub fn from_informers(informers: &Informers) -> Caches {
        let changed = Arc::new(Notify::new());
        let services = poke_on_change(&informers.of::<Service>(), &changed);
        let slices = poke_on_change(&informers.of::<EndpointSlice>(), &changed);
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

/// The cache of `informer`, poking `changed` after every change of it (a subscriber that fell
/// behind is poked too: it rereads the whole cache anyway). The poking stops at the first
/// change after everyone holding `changed` is gone.
pub fn poke_on_change<K>(informer: &Informer<K>, changed: &Arc<Notify>) -> Cache<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    // Subscribed here, before the caller reads the cache: no change can fall in between.
    let changes = informer.changes();
    let changed: Weak<Notify> = Arc::downgrade(changed);
    tokio::spawn(async move {
        let mut changes = std::pin::pin!(changes);
        while changes.next().await.is_some() {
            match changed.upgrade() {
                Some(changed) => changed.notify_one(),
                None => return,
            }
        }
    });
    informer.store()
}
