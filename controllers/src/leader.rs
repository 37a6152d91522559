//! Leader election through a `coordination.k8s.io/v1` Lease, with client-go's rules, so that
//! two controller-managers (or schedulers) never act at once and a standby takes over within a
//! lease duration of the leader dying.
//!
//! Expiry is judged by this process's own clock from the moment it last saw the lease change
//! (client-go's `observedTime`), never by comparing `renewTime` with the local clock: the
//! holders' clocks may disagree. Every write carries the resourceVersion it was based on, so two
//! candidates racing for an expired lease cannot both win.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio::time::Instant;

/// client-go's defaults for kube-controller-manager and kube-scheduler.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease is honoured after it was last seen renewed.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// A lease in `kube-system` named `name`, held as `<hostname>_<random>`.
    pub fn new(name: &str) -> Self {
        LeaderElectionConfig {
            namespace: "kube-system".into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// `<hostname>_<random hex>`, as upstream components name themselves.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}_{:016x}", rand::random::<u64>())
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lost the lease {0}: not renewed within the renew deadline")]
    Lost(String),
}

/// One candidate for one lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    /// The lease as last read, and when this process saw it change.
    observed: Option<(Lease, Instant)>,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn holder(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaderElectionConfig) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Waits until this candidate holds the lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "acquired the lease");
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "acquiring the lease"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews the lease every retry period; returns when a renewal failed for a whole renew
    /// deadline, that is when leadership is lost.
    pub async fn keep_renewing(&mut self) -> LeaderError {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewed = Instant::now(),
                Ok(false) => return LeaderError::Lost(self.config.name.clone()),
                Err(e) => tracing::warn!(error = %e, "renewing the lease"),
            }
            if last_renewed.elapsed() > self.config.renew_deadline {
                return LeaderError::Lost(self.config.name.clone());
            }
        }
    }

    /// Gives the lease up so a standby takes over at once (client-go's ReleaseOnCancel).
    pub async fn release(&mut self) {
        let Some((mut lease, _)) = self.observed.clone() else {
            return;
        };
        if holder(&lease) != self.config.identity {
            return;
        }
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        if let Err(e) = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(error = %e, "releasing the lease");
        }
    }

    /// One attempt: `Ok(true)` when this candidate holds the lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = self.config.identity.clone();
        let duration_secs = self.config.lease_duration.as_secs() as i32;
        let current = match self.api.get_opt(&self.config.name).await? {
            Some(l) => l,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(me),
                        lease_duration_seconds: Some(duration_secs),
                        acquire_time: Some(now()),
                        renew_time: Some(now()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                let created = self.api.create(&PostParams::default(), &lease).await?;
                self.observed = Some((created, Instant::now()));
                return Ok(true);
            }
        };
        // Remember when the lease last changed, by this process's clock.
        let changed = match &self.observed {
            Some((seen, _)) => seen.resource_version() != current.resource_version(),
            None => true,
        };
        if changed {
            self.observed = Some((current.clone(), Instant::now()));
        }
        let observed_at = self
            .observed
            .as_ref()
            .map(|(_, t)| *t)
            .unwrap_or_else(Instant::now);
        let spec = current.spec.clone().unwrap_or_default();
        let current_holder = holder(&current).to_string();
        let held_by_me = current_holder == me;
        let their_duration =
            Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        if !held_by_me && !current_holder.is_empty() && observed_at.elapsed() < their_duration {
            return Ok(false);
        }
        let mut lease = current;
        let spec = lease.spec.get_or_insert_with(Default::default);
        if !held_by_me {
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(me);
        spec.lease_duration_seconds = Some(duration_secs);
        spec.renew_time = Some(now());
        // `replace` sends the resourceVersion read above: a racing candidate gets a 409.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observed = Some((updated, Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Runs `work` while this process leads; when leadership is lost the work is dropped (so it
/// must own its tasks) and the election starts over. Returns when `shutdown` completes, after
/// releasing the lease.
pub async fn run_while_leader<W, Fut>(
    client: Client,
    config: LeaderElectionConfig,
    mut work: W,
    shutdown: impl Future<Output = ()>,
) where
    W: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut elector = LeaderElector::new(client, config);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = elector.acquire() => {}
        }
        let lost = tokio::select! {
            _ = &mut shutdown => {
                elector.release().await;
                return;
            }
            lost = elector.keep_renewing() => lost,
            _ = work() => {
                elector.release().await;
                return;
            }
        };
        tracing::error!(error = %lost, "leadership lost; stopping and standing for election again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_host_and_random() {
        let a = default_identity();
        let b = default_identity();
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
