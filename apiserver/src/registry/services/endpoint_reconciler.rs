//! Which API servers the `kubernetes` Service's endpoints list (upstream's endpoint
//! reconcilers, `--endpoint-reconciler-type`). With `lease`, the default, every API server
//! keeps a key `/registry/masterleases/<ip>` that expires unless rewritten within the TTL, and
//! every reconcile writes the endpoints from the keys still alive: a server that dies drops
//! out one TTL later, one that shuts down removes its key and rewrites the endpoints at once.
//! `master-count` trusts `--apiserver-count` instead, and `none` leaves the endpoints alone.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::core::v1::{EndpointAddress, EndpointSubset, Endpoints};
use minik8s_api::ApiError;

use super::controlplane;
use crate::registry::typed::Registries;
use crate::server::ApiServer;
use crate::storage::{DynStore, StoreError};

/// Where the API servers' leases live, as upstream keys them under etcd's `/registry` prefix.
pub const MASTER_LEASES_PREFIX: &str = "/registry/masterleases/";

/// How long a lease lives unless refreshed (upstream's `DefaultEndpointReconcilerTTL`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// How often each API server refreshes its lease and rewrites the endpoints (upstream's
/// `DefaultEndpointReconcilerInterval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// `--endpoint-reconciler-type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReconcilerType {
    /// Endpoints from the API servers' leases in storage.
    #[default]
    Lease,
    /// Endpoints kept at `--apiserver-count` addresses, this server's always among them.
    MasterCount,
    /// The endpoints are left to someone else.
    None,
}

impl FromStr for ReconcilerType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lease" => Ok(ReconcilerType::Lease),
            "master-count" => Ok(ReconcilerType::MasterCount),
            "none" => Ok(ReconcilerType::None),
            other => Err(format!(
                "invalid endpoint reconciler type {other:?}: must be one of lease, master-count, none"
            )),
        }
    }
}

/// The endpoint reconciler's settings.
#[derive(Clone, Debug)]
pub struct ReconcilerOptions {
    pub kind: ReconcilerType,
    /// `--apiserver-count`, for `master-count`.
    pub apiserver_count: usize,
    /// How long a lease outlives its last refresh.
    pub ttl: Duration,
    /// How often the endpoints are reconciled.
    pub interval: Duration,
}

impl Default for ReconcilerOptions {
    fn default() -> Self {
        ReconcilerOptions {
            kind: ReconcilerType::Lease,
            apiserver_count: 1,
            ttl: DEFAULT_TTL,
            interval: DEFAULT_INTERVAL,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{0}")]
    Api(#[from] ApiError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error(
        "no API server IP addresses were listed in storage, refusing to erase all endpoints for the kubernetes Service"
    )]
    NoLeases,
}

/// The addresses the endpoints list for the live `leases`: each once, in upstream's
/// (lexicographic) order. None at all means storage is wrong, since the caller has just
/// refreshed its own lease: the endpoints are then left as they are.
pub fn lease_addresses(
    leases: impl IntoIterator<Item = String>,
) -> Result<Vec<String>, ReconcileError> {
    let mut ips: Vec<String> = leases.into_iter().collect();
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        return Err(ReconcileError::NoLeases);
    }
    Ok(ips)
}

/// The addresses for `master-count`: the listed ones and `own`; past `count`, the ones right
/// after `own` (wrapping around) are dropped, so that servers which agree on the count
/// converge on the same list.
pub fn master_count_addresses(current: &[String], own: &str, count: usize) -> Vec<String> {
    let mut ips: Vec<String> = current.to_vec();
    ips.push(own.to_string());
    ips.sort();
    ips.dedup();
    let count = count.max(1);
    if ips.len() > count {
        let at = ips.iter().position(|ip| ip == own).expect("own address");
        let drop: Vec<String> = (1..=ips.len() - count)
            .map(|k| ips[(at + k) % ips.len()].clone())
            .collect();
        ips.retain(|ip| !drop.contains(ip));
    }
    ips
}

/// The addresses the stored endpoints list now.
fn listed(endpoints: &Endpoints) -> Vec<String> {
    endpoints
        .subsets
        .iter()
        .flatten()
        .flat_map(|s| s.addresses.iter().flatten())
        .map(|a| a.ip.clone())
        .collect()
}

/// The lease of one API server, stored as upstream's: an Endpoints object with one address.
fn lease_value(ip: &str) -> Bytes {
    let lease = Endpoints {
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: ip.to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        }]),
        ..Default::default()
    };
    Bytes::from(serde_json::to_vec(&lease).expect("an Endpoints serializes"))
}

fn lease_ip(value: &[u8]) -> Option<String> {
    let lease: Endpoints = serde_json::from_slice(value).ok()?;
    lease
        .subsets?
        .into_iter()
        .next()?
        .addresses?
        .into_iter()
        .next()
        .map(|a| a.ip)
        .filter(|ip| !ip.is_empty())
}

/// The API servers' leases in the store (upstream's `storageLeases`).
struct MasterLeases {
    store: DynStore,
    ttl: Duration,
}

impl MasterLeases {
    async fn update(&self, ip: &str) -> Result<(), StoreError> {
        self.store
            .put_expiring(
                &format!("{MASTER_LEASES_PREFIX}{ip}"),
                lease_value(ip),
                self.ttl,
            )
            .await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self
            .store
            .list_expiring(MASTER_LEASES_PREFIX)
            .await?
            .into_iter()
            .filter_map(|(_, value)| lease_ip(&value))
            .collect())
    }

    async fn remove(&self, ip: &str) -> Result<(), StoreError> {
        self.store
            .delete_expiring(&format!("{MASTER_LEASES_PREFIX}{ip}"))
            .await
    }
}

/// One API server's endpoint reconciler: the lease it keeps and the endpoints it writes.
pub struct EndpointReconciler {
    kind: ReconcilerType,
    apiserver_count: usize,
    leases: MasterLeases,
    ip: IpAddr,
    port: u16,
    /// Upstream's `reconcilingLock` with `stopReconcilingCalled`: once stopped, a reconcile
    /// still in its period must not bring the lease back.
    stopped: tokio::sync::Mutex<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl EndpointReconciler {
    pub fn new(store: DynStore, advertised: SocketAddr, options: &ReconcilerOptions) -> Self {
        EndpointReconciler {
            kind: options.kind,
            apiserver_count: options.apiserver_count,
            leases: MasterLeases {
                store,
                ttl: options.ttl,
            },
            ip: advertised.ip(),
            port: advertised.port(),
            stopped: tokio::sync::Mutex::new(false),
            task: Mutex::new(None),
        }
    }

    async fn current(registries: &Registries) -> Result<Vec<String>, ApiError> {
        match registries
            .get::<Endpoints>()
            .get(Some("default"), "kubernetes")
            .await
        {
            Ok(e) => Ok(listed(&e)),
            Err(e) if e.code == 404 => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    async fn sync(&self, registries: &Registries, ips: &[String]) -> Result<(), ReconcileError> {
        controlplane::sync_endpoints(registries, ips, self.port, self.ip.is_ipv6()).await?;
        Ok(())
    }

    /// Refreshes this server's lease and writes the endpoints from the live ones.
    pub async fn reconcile(&self, registries: &Registries) -> Result<(), ReconcileError> {
        let stopped = self.stopped.lock().await;
        if *stopped {
            return Ok(());
        }
        let own = self.ip.to_string();
        let ips = match self.kind {
            ReconcilerType::None => return Ok(()),
            ReconcilerType::MasterCount => {
                let current = Self::current(registries).await?;
                master_count_addresses(&current, &own, self.apiserver_count)
            }
            ReconcilerType::Lease => {
                // Refreshed whatever happens below, so other servers keep listing this one.
                self.leases.update(&own).await?;
                lease_addresses(self.leases.list().await?)?
            }
        };
        self.sync(registries, &ips).await
    }

    /// Stops reconciling and takes this server out of the endpoints now (graceful shutdown).
    pub async fn stop(&self, registries: &Registries) -> Result<(), ReconcileError> {
        let mut stopped = self.stopped.lock().await;
        *stopped = true;
        if let Some(task) = self.task.lock().expect("reconciler task").take() {
            task.abort();
        }
        let own = self.ip.to_string();
        let ips = match self.kind {
            ReconcilerType::None => return Ok(()),
            ReconcilerType::MasterCount => {
                let mut ips = Self::current(registries).await?;
                ips.retain(|ip| *ip != own);
                ips
            }
            ReconcilerType::Lease => {
                self.leases.remove(&own).await?;
                lease_addresses(self.leases.list().await?)?
            }
        };
        self.sync(registries, &ips).await
    }
}

/// Starts `server`'s endpoint reconciler: one reconcile now, then one every
/// `options.interval` (with the `kubernetes` Service kept too, as upstream's controller
/// does) until [`ApiServer::stop_endpoint_reconciler`] or the server goes away.
pub async fn start(server: &Arc<ApiServer>, options: &ReconcilerOptions) {
    let Ok(advertised) = server.address.parse::<SocketAddr>() else {
        tracing::warn!(address = %server.address, "no endpoints for the `kubernetes` service: the advertised address is not ip:port");
        return;
    };
    let reconciler = Arc::new(EndpointReconciler::new(
        server.store.clone(),
        advertised,
        options,
    ));
    if server.endpoint_reconciler.set(reconciler.clone()).is_err() {
        return;
    }
    if let Err(e) = reconciler.reconcile(&server.registries).await {
        tracing::warn!(error = %e, "reconciling the endpoints of the `kubernetes` service");
    }
    if reconciler.kind == ReconcilerType::None {
        return;
    }
    let weak: Weak<ApiServer> = Arc::downgrade(server);
    let interval = options.interval;
    let task = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let Some(server) = weak.upgrade() else { return };
            let Some(reconciler) = server.endpoint_reconciler.get() else {
                return;
            };
            if let Err(e) = controlplane::ensure_service(
                &server.registries,
                &server.services,
                advertised.port(),
            )
            .await
            {
                tracing::warn!(error = %e, "reconciling the `kubernetes` service");
            }
            if let Err(e) = reconciler.reconcile(&server.registries).await {
                tracing::warn!(error = %e, "reconciling the endpoints of the `kubernetes` service");
            }
        }
    });
    *reconciler.task.lock().expect("reconciler task") = Some(task);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn live_leases_are_listed_once_in_upstreams_order() {
        let ips = lease_addresses(strings(&["10.0.0.9", "10.0.0.10", "10.0.0.2", "10.0.0.9"]));
        // Lexicographic, as upstream's sorted string set: .10 before .2 before .9.
        assert_eq!(
            ips.unwrap(),
            strings(&["10.0.0.10", "10.0.0.2", "10.0.0.9"])
        );
    }

    #[test]
    fn no_live_lease_leaves_the_endpoints_alone() {
        let err = lease_addresses(Vec::new()).unwrap_err();
        assert!(matches!(err, ReconcileError::NoLeases));
        assert_eq!(
            err.to_string(),
            "no API server IP addresses were listed in storage, refusing to erase all endpoints for the kubernetes Service"
        );
    }

    #[test]
    fn master_count_adds_its_own_and_drops_the_ones_after_it() {
        // Room for everyone: own address added.
        assert_eq!(
            master_count_addresses(&strings(&["10.0.0.1"]), "10.0.0.2", 3),
            strings(&["10.0.0.1", "10.0.0.2"])
        );
        // Too many: the ones right after the own address go, wrapping around.
        assert_eq!(
            master_count_addresses(
                &strings(&["10.0.0.1", "10.0.0.2", "10.0.0.4"]),
                "10.0.0.3",
                2
            ),
            strings(&["10.0.0.2", "10.0.0.3"])
        );
        assert_eq!(
            master_count_addresses(&strings(&["10.0.0.1", "10.0.0.2"]), "10.0.0.3", 2),
            strings(&["10.0.0.2", "10.0.0.3"])
        );
        // Already right: unchanged.
        assert_eq!(
            master_count_addresses(&strings(&["10.0.0.1", "10.0.0.3"]), "10.0.0.3", 2),
            strings(&["10.0.0.1", "10.0.0.3"])
        );
    }

    #[test]
    fn leases_are_stored_as_upstreams_endpoints() {
        let value = lease_value("192.0.2.7");
        let json: serde_json::Value = serde_json::from_slice(&value).unwrap();
        assert_eq!(json["kind"], "Endpoints");
        assert_eq!(json["subsets"][0]["addresses"][0]["ip"], "192.0.2.7");
        assert_eq!(lease_ip(&value).as_deref(), Some("192.0.2.7"));
        assert_eq!(lease_ip(b"not json"), None);
    }

    #[test]
    fn reconciler_types_parse_as_the_flag_spells_them() {
        assert_eq!("lease".parse(), Ok(ReconcilerType::Lease));
        assert_eq!("master-count".parse(), Ok(ReconcilerType::MasterCount));
        assert_eq!("none".parse(), Ok(ReconcilerType::None));
        assert!("leases".parse::<ReconcilerType>().is_err());
    }

    #[tokio::test]
    async fn leases_expire_and_are_removed_in_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store: DynStore = Arc::new(
            crate::storage::SqliteStore::open(
                crate::storage::SqliteOptions::new(dir.path().join("state.db")),
                crate::metrics::Metrics::new().store.clone(),
            )
            .unwrap(),
        );
        let live = MasterLeases {
            store: store.clone(),
            ttl: Duration::from_secs(60),
        };
        let dead = MasterLeases {
            store,
            ttl: Duration::ZERO,
        };
        live.update("10.0.0.1").await.unwrap();
        live.update("10.0.0.2").await.unwrap();
        dead.update("10.0.0.3").await.unwrap();
        assert_eq!(
            lease_addresses(live.list().await.unwrap()).unwrap(),
            strings(&["10.0.0.1", "10.0.0.2"])
        );
        live.remove("10.0.0.1").await.unwrap();
        assert_eq!(live.list().await.unwrap(), strings(&["10.0.0.2"]));
    }
}
