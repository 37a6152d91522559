//! The controller-manager: every controller in one process, started together once this process
//! holds the `kube-controller-manager` Lease, and stopped together when it loses it.

use std::future::Future;

use std::sync::Arc;

use crate::informers::Informers;
use tokio::task::JoinSet;

use crate::leader::{LeaderElectionConfig, run_while_leader};

/// Flags named after kube-controller-manager's.
#[derive(Clone, Debug)]
pub struct ControllerManagerOptions {
    /// `*` for all, `name` to enable one, `-name` to disable one (upstream's `--controllers`).
    pub controllers: Vec<String>,
    pub leader_elect: bool,
    /// `--cluster-cidr` and `--node-cidr-mask-size` of the node IPAM controller.
    pub node_ipam: crate::nodeipam::NodeIpamConfig,
    /// The contents of `--root-ca-file`: the CA bundle published in every namespace.
    pub root_ca: Option<String>,
    /// The `--horizontal-pod-autoscaler-*` flags.
    pub hpa: crate::podautoscaler::HpaOptions,
    /// The `--cluster-signing-*` flags: the CA the CSR signing controller signs with.
    pub signing: Option<crate::csrsigning::SigningOptions>,
    /// `--use-service-account-credentials`: the client each controller writes through, made
    /// for its ServiceAccount's name (see [`service_account_of`]); `None`: the manager's own.
    pub credentials: Option<Credentials>,
}

/// Makes the client of a controller's ServiceAccount (in kube-system) from its name.
#[derive(Clone)]
pub struct Credentials(pub Arc<dyn Fn(&str) -> kube::Client + Send + Sync>);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials")
    }
}

/// The ServiceAccount (in kube-system) a controller acts as with
/// `--use-service-account-credentials`: upstream's names, whose `system:controller:<name>`
/// ClusterRoles the bootstrap policy binds.
pub fn service_account_of(controller: &str) -> Option<&'static str> {
    Some(match controller {
        "replicaset" => "replicaset-controller",
        "replicationcontroller" => "replication-controller",
        "deployment" => "deployment-controller",
        "job" => "job-controller",
        "cronjob" => "cronjob-controller",
        "daemonset" => "daemon-set-controller",
        "statefulset" => "statefulset-controller",
        "ttl-after-finished" => "ttl-after-finished-controller",
        "garbagecollector" => "generic-garbage-collector",
        "namespace" => "namespace-controller",
        "serviceaccount" => "service-account-controller",
        "endpoint" => "endpoint-controller",
        "endpointslice" => "endpointslice-controller",
        "node-lifecycle-controller" | "taint-eviction-controller" | NODE_IPAM => "node-controller",
        "pod-garbage-collector" => "pod-garbage-collector",
        crate::disruption::NAME => "disruption-controller",
        "resourcequota" => "resourcequota-controller",
        "persistentvolume-binder" => "persistent-volume-binder",
        "persistentvolume-protection" => "pv-protection-controller",
        "persistentvolumeclaim-protection" => "pvc-protection-controller",
        "persistentvolume-expander" => "expand-controller",
        "ephemeral-volume" => "ephemeral-volume-controller",
        "clusterrole-aggregation" => "clusterrole-aggregation-controller",
        ROOT_CA_PUBLISHER => "root-ca-cert-publisher",
        HPA => "horizontal-pod-autoscaler",
        crate::csrsigning::NAME | crate::csrapproving::NAME => "certificate-controller",
        crate::tokencleaner::NAME => "token-cleaner",
        _ => return None,
    })
}

impl ControllerManagerOptions {
    /// The informers controller `name` runs on: the shared caches, writing through its
    /// ServiceAccount's client when credentials are on.
    fn informers_for(&self, informers: &Arc<Informers>, name: &str) -> Arc<Informers> {
        match (&self.credentials, service_account_of(name)) {
            (Some(credentials), Some(sa)) => informers.with_client((credentials.0)(sa)),
            _ => informers.clone(),
        }
    }
}

impl Default for ControllerManagerOptions {
    fn default() -> Self {
        ControllerManagerOptions {
            controllers: vec!["*".into()],
            leader_elect: true,
            node_ipam: Default::default(),
            root_ca: None,
            hpa: Default::default(),
            signing: None,
            credentials: None,
        }
    }
}

impl ControllerManagerOptions {
    /// Whether `name` runs under `--controllers`, as upstream decides it.
    pub fn enabled(&self, name: &str) -> bool {
        let mut on = false;
        for c in &self.controllers {
            if c == name {
                return true;
            }
            if c.strip_prefix('-') == Some(name) {
                return false;
            }
            if c == "*" {
                on = true;
            }
        }
        on
    }
}

/// The controllers by name, each a future that runs until dropped.
type Starter = fn(Arc<Informers>) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

fn controllers() -> Vec<(&'static str, Starter)> {
    vec![
        ("replicaset", |c| Box::pin(crate::replicaset::run(c))),
        (crate::replicaset::replication::NAME, |c| {
            Box::pin(crate::replicaset::replication::run(c))
        }),
        ("deployment", |c| Box::pin(crate::deployment::run(c))),
        ("job", |c| Box::pin(crate::job::run(c))),
        ("cronjob", |c| Box::pin(crate::cronjob::run(c))),
        ("daemonset", |c| Box::pin(crate::daemonset::run(c))),
        ("statefulset", |c| Box::pin(crate::statefulset::run(c))),
        ("ttl-after-finished", |c| {
            Box::pin(crate::ttl_after_finished::run(c))
        }),
        ("garbagecollector", |c| {
            Box::pin(crate::garbagecollector::run(c.client()))
        }),
        ("namespace", |c| Box::pin(crate::namespace::run(c))),
        ("serviceaccount", |c| {
            Box::pin(crate::serviceaccount::run(c))
        }),
        ("endpoint", |c| Box::pin(crate::endpoints::run(c))),
        ("endpointslice", |c| Box::pin(crate::endpointslice::run(c))),
        ("node-lifecycle-controller", |c| {
            Box::pin(crate::nodelifecycle::run(c, Default::default()))
        }),
        ("taint-eviction-controller", |c| {
            Box::pin(crate::tainteviction::run(c))
        }),
        ("pod-garbage-collector", |c| {
            Box::pin(crate::podgc::run(c, Default::default()))
        }),
        (crate::disruption::NAME, |c| {
            Box::pin(crate::disruption::run(c))
        }),
        (crate::resourcequota::NAME, |c| {
            Box::pin(crate::resourcequota::run(c))
        }),
        (crate::volume::binder::NAME, |c| {
            Box::pin(crate::volume::binder::run(c))
        }),
        (crate::volume::pv_protection::NAME, |c| {
            Box::pin(crate::volume::pv_protection::run(c))
        }),
        (crate::volume::pvc_protection::NAME, |c| {
            Box::pin(crate::volume::pvc_protection::run(c))
        }),
        (crate::volume::expander::NAME, |c| {
            Box::pin(crate::volume::expander::run(c))
        }),
        (crate::ephemeral::NAME, |c| {
            Box::pin(crate::ephemeral::run(c))
        }),
        (crate::clusterroleaggregation::NAME, |c| {
            Box::pin(crate::clusterroleaggregation::run(c))
        }),
        (crate::csrapproving::NAME, |c| {
            Box::pin(crate::csrapproving::run(c))
        }),
        // Upstream leaves it off unless named (kubeadm names it); minik8s's clusters use
        // bootstrap tokens out of the box, so it runs with `*`.
        (crate::tokencleaner::NAME, |c| {
            Box::pin(crate::tokencleaner::run(c))
        }),
    ]
}

/// Started apart from `controllers()` because they take flags.
const NODE_IPAM: &str = "node-ipam-controller";
const ROOT_CA_PUBLISHER: &str = "root-ca-certificate-publisher-controller";
const HPA: &str = "horizontal-pod-autoscaler-controller";

async fn node_ipam(informers: Arc<Informers>, config: crate::nodeipam::NodeIpamConfig) {
    if let Err(e) = crate::nodeipam::run(informers, config).await {
        tracing::error!(error = %e, "node-ipam-controller cannot start");
    }
}

/// Runs the enabled controllers, on the process's shared informers, until they are dropped.
pub async fn run_controllers(informers: Arc<Informers>, options: &ControllerManagerOptions) {
    let mut set = JoinSet::new();
    for (name, start) in controllers() {
        if options.enabled(name) {
            tracing::info!(controller = name, "starting controller");
            set.spawn(start(options.informers_for(&informers, name)));
        }
    }
    if options.enabled(NODE_IPAM) {
        tracing::info!(controller = NODE_IPAM, "starting controller");
        set.spawn(node_ipam(
            options.informers_for(&informers, NODE_IPAM),
            options.node_ipam.clone(),
        ));
    }
    if options.enabled(HPA) {
        tracing::info!(controller = HPA, "starting controller");
        set.spawn(crate::podautoscaler::run(
            options.informers_for(&informers, HPA),
            options.hpa.clone(),
        ));
    }
    if options.enabled(crate::csrsigning::NAME) {
        // As upstream, it runs only when there is a CA to sign with.
        match &options.signing {
            Some(signing) => {
                tracing::info!(controller = crate::csrsigning::NAME, "starting controller");
                set.spawn(crate::csrsigning::run(
                    options.informers_for(&informers, crate::csrsigning::NAME),
                    signing.clone(),
                ));
            }
            None => tracing::info!(
                controller = crate::csrsigning::NAME,
                "not starting: no --cluster-signing-cert-file and --cluster-signing-key-file"
            ),
        }
    }
    if options.enabled(ROOT_CA_PUBLISHER) {
        // As upstream, it runs only when there is a CA to publish.
        match &options.root_ca {
            Some(ca) => {
                tracing::info!(controller = ROOT_CA_PUBLISHER, "starting controller");
                set.spawn(crate::rootcacertpublisher::run(
                    options.informers_for(&informers, ROOT_CA_PUBLISHER),
                    ca.clone(),
                ));
            }
            None => tracing::info!(
                controller = ROOT_CA_PUBLISHER,
                "not starting: no --root-ca-file"
            ),
        }
    }
    while let Some(done) = set.join_next().await {
        if let Err(e) = done {
            tracing::error!(error = %e, "a controller stopped");
        }
    }
    std::future::pending::<()>().await
}

/// The controller-manager: leader-elected unless told otherwise; returns after `shutdown`.
pub async fn run(
    informers: Arc<Informers>,
    options: ControllerManagerOptions,
    shutdown: impl Future<Output = ()>,
) {
    if !options.leader_elect {
        tokio::select! {
            _ = run_controllers(informers, &options) => {}
            _ = shutdown => {}
        }
        return;
    }
    let config = LeaderElectionConfig::new("kube-controller-manager");
    run_while_leader(
        informers.client(),
        config,
        || run_controllers(informers.clone(), &options),
        shutdown,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_flag_follows_upstream() {
        let o = |c: &[&str]| ControllerManagerOptions {
            controllers: c.iter().map(|s| s.to_string()).collect(),
            leader_elect: false,
            ..Default::default()
        };
        assert!(o(&["*"]).enabled("replicaset"));
        assert!(!o(&["*", "-replicaset"]).enabled("replicaset"));
        assert!(o(&["replicaset"]).enabled("replicaset"));
        assert!(!o(&["job"]).enabled("replicaset"));
    }
}
