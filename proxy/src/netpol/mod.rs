//! NetworkPolicy enforcement on a node, as kube-router's or Calico's policy mode do it: the
//! node filters the traffic of its own pods, so every pod is covered by exactly the node it
//! runs on (ingress to it and egress from it). Like the proxier it is an API client fed by
//! watches (Pods, Namespaces, NetworkPolicies), syncing through the same bounded-frequency
//! runner, and it speaks the proxier's kernel language: iptables chains in the filter table or
//! an nftables table of its own. A sync renders everything (a node holds few pods) and touches
//! the kernel only when the text changed, or every [`REPAIR_PERIOD`] to put back what someone
//! removed.

pub mod model;
pub mod render;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use minik8s_informers::{Cache, Informers};
use tokio::sync::Notify;
use tracing::Instrument;

use crate::cache::poke_on_change;
use crate::iptables::render::saved_chains;
use crate::iptables::{Error, Iptables, Periods, runner};
use crate::nftables::Nft;
use render::{IPTABLES_CHAIN, IPTABLES_JUMP, IPTABLES_PREFIXES, NFT_TABLE};

pub use model::{PodRules, pod_rules};

/// How often unchanged rules are written again anyway.
pub const REPAIR_PERIOD: Duration = Duration::from_secs(300);

/// Where the rules go: the proxier's mode.
#[derive(Clone)]
pub enum Backend {
    Iptables(Arc<dyn Iptables>),
    Nftables(Arc<dyn Nft>),
}

/// Applies rendered rules, skipping writes that would change nothing.
pub struct Enforcer {
    backend: Backend,
    applied: Option<(String, Instant)>,
}

impl Enforcer {
    pub fn new(backend: Backend) -> Enforcer {
        Enforcer {
            backend,
            applied: None,
        }
    }

    /// Makes the kernel enforce `pods`' rules; whether it wrote anything.
    pub fn sync(&mut self, pods: &[PodRules]) -> Result<bool, Error> {
        let text = match &self.backend {
            Backend::Iptables(_) => render::iptables_restore(pods, &[]),
            Backend::Nftables(_) => render::nft_script(pods),
        };
        if let Some((last, at)) = &self.applied
            && *last == text
            && at.elapsed() < REPAIR_PERIOD
        {
            return Ok(false);
        }
        self.applied = None;
        match &self.backend {
            Backend::Iptables(ipt) => sync_iptables(ipt.as_ref(), pods, &text)?,
            Backend::Nftables(nft) => nft.run(&text)?,
        }
        self.applied = Some((text, Instant::now()));
        Ok(true)
    }
}

fn jump_line() -> String {
    let args: Vec<String> = IPTABLES_JUMP
        .iter()
        .map(|a| {
            if a.contains(' ') {
                format!("\"{a}\"")
            } else {
                a.to_string()
            }
        })
        .collect();
    format!("-A FORWARD {}", args.join(" "))
}

/// Our chains (stale ones removed), then the jump first in FORWARD; `wanted` is `pods`'
/// rules rendered without stale chains.
fn sync_iptables(ipt: &dyn Iptables, pods: &[PodRules], wanted: &str) -> Result<(), Error> {
    let saved = ipt.save("filter")?;
    let stale: Vec<String> = saved_chains(&saved, "filter")
        .into_iter()
        .filter(|c| IPTABLES_PREFIXES.iter().any(|p| c.starts_with(p)))
        .filter(|c| !wanted.contains(&format!(":{c} ")))
        .collect();
    if stale.is_empty() {
        ipt.restore(wanted)?;
    } else {
        ipt.restore(&render::iptables_restore(pods, &stale))?;
    }
    let first_forward = saved.lines().find(|l| l.starts_with("-A FORWARD "));
    if first_forward != Some(jump_line().as_str()) {
        while ipt.check("filter", "FORWARD", IPTABLES_JUMP)? {
            ipt.delete("filter", "FORWARD", IPTABLES_JUMP)?;
        }
        ipt.insert("filter", "FORWARD", IPTABLES_JUMP)?;
    }
    Ok(())
}

/// Removes whatever either backend made, if it is there.
pub fn cleanup(ipt: &dyn Iptables, nft: &dyn Nft) -> Result<(), Error> {
    let nft_result = cleanup_nftables(nft);
    cleanup_iptables(ipt)?;
    nft_result
}

/// Removes our nftables table, if it is there.
pub fn cleanup_nftables(nft: &dyn Nft) -> Result<(), Error> {
    nft.run(&format!(
        "add table ip {NFT_TABLE}\ndelete table ip {NFT_TABLE}\n"
    ))
}

/// Removes the jump from FORWARD and our chains, if they are there.
pub fn cleanup_iptables(ipt: &dyn Iptables) -> Result<(), Error> {
    while ipt
        .check("filter", "FORWARD", IPTABLES_JUMP)
        .unwrap_or(false)
    {
        ipt.delete("filter", "FORWARD", IPTABLES_JUMP)?;
    }
    let ours: Vec<String> = saved_chains(&ipt.save("filter")?, "filter")
        .into_iter()
        .filter(|c| c == IPTABLES_CHAIN || IPTABLES_PREFIXES.iter().any(|p| c.starts_with(p)))
        .collect();
    if ours.is_empty() {
        return Ok(());
    }
    ipt.restore(&crate::iptables::apply::delete_chains("filter", &ours))
}

/// The objects policies are worked out from, each change poking `changed`.
struct Caches {
    pods: Cache<Pod>,
    namespaces: Cache<Namespace>,
    policies: Cache<NetworkPolicy>,
    changed: Arc<Notify>,
}

/// Enforces the policies for the pods of `node` until `shutdown`. Leftovers of the other
/// backend (a node that switched proxy modes) are removed first.
pub async fn run(
    informers: &Informers,
    node: String,
    backend: Backend,
    other: impl FnOnce() -> Result<(), Error> + Send + 'static,
    periods: Periods,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let changed = Arc::new(Notify::new());
    let caches = Caches {
        pods: poke_on_change(&informers.of::<Pod>(), &changed),
        namespaces: poke_on_change(&informers.of::<Namespace>(), &changed),
        policies: poke_on_change(&informers.of::<NetworkPolicy>(), &changed),
        changed,
    };
    tokio::select! {
        r = async {
            caches.pods.wait_until_ready().await?;
            caches.namespaces.wait_until_ready().await?;
            caches.policies.wait_until_ready().await
        } => r.map_err(|_| crate::cache::NotReady)?,
        _ = tokio::time::sleep(Duration::from_secs(300)) => return Err(crate::cache::NotReady.into()),
    }
    if let Err(e) = tokio::task::spawn_blocking(other)
        .await
        .unwrap_or_else(|e| Err(Error::Failed("cleanup".into(), e.to_string())))
    {
        tracing::debug!(error = %e, "no leftovers of the other policy backend removed");
    }
    let enforcer = Arc::new(std::sync::Mutex::new(Enforcer::new(backend)));
    runner::bounded_frequency(periods, caches.changed.clone(), shutdown, || {
        let pods = caches.pods.state();
        let namespaces = caches.namespaces.state();
        let policies = caches.policies.state();
        let node = node.clone();
        let enforcer = enforcer.clone();
        let span = tracing::info_span!("sync_network_policies", policies = policies.len());
        async move {
            let result = tokio::task::spawn_blocking(move || {
                let rules = pod_rules(&node, &pods, &namespaces, &policies);
                let mut enforcer = enforcer.lock().unwrap_or_else(|e| e.into_inner());
                enforcer.sync(&rules).map(|wrote| (wrote, rules.len()))
            })
            .await
            .unwrap_or_else(|e| Err(Error::Failed("sync".into(), e.to_string())));
            match result {
                Ok((true, isolated)) => tracing::info!(isolated, "network policy rules written"),
                Ok((false, _)) => {}
                Err(e) => tracing::error!(error = %e, "syncing network policy rules failed"),
            }
        }
        .instrument(span)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::FakeIptables;
    use crate::nftables::FakeNft;

    fn isolated() -> Vec<PodRules> {
        vec![PodRules {
            key: "a/web".into(),
            ip: "10.244.0.2".parse().unwrap(),
            ingress: Some(vec![]),
            egress: None,
        }]
    }

    #[test]
    fn unchanged_rules_are_not_written_again() {
        let fake = Arc::new(FakeNft::default());
        let mut enforcer = Enforcer::new(Backend::Nftables(fake.clone()));
        assert!(enforcer.sync(&isolated()).unwrap());
        assert!(!enforcer.sync(&isolated()).unwrap());
        assert!(enforcer.sync(&[]).unwrap());
        assert_eq!(fake.scripts.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_iptables_jump_is_put_first_in_forward() {
        let fake = Arc::new(FakeIptables::default());
        let mut enforcer = Enforcer::new(Backend::Iptables(fake.clone()));
        assert!(enforcer.sync(&isolated()).unwrap());
        let restored = fake.restored.lock().unwrap().clone();
        assert_eq!(restored, [render::iptables_restore(&isolated(), &[])]);
        assert_eq!(
            *fake.jumps.lock().unwrap(),
            [format!("filter FORWARD {}", IPTABLES_JUMP.join(" "))]
        );
        assert_eq!(
            jump_line(),
            "-A FORWARD -m comment --comment \"minik8s network policies\" -j MK8S-NETPOL"
        );
    }
}
