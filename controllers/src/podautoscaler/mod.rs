//! The horizontal-pod-autoscaler controller, as kube-controller-manager's
//! (pkg/controller/podautoscaler): every sync period, and when an HPA's spec changes, it reads
//! the target's `/scale`, the usage of the target's pods from the resource metrics API, computes
//! the replica count upstream's algorithm proposes, limits it by the HPA's behavior, writes the
//! scale, and records status, conditions and events. A failed sync is recorded in the status
//! and tried again at the next period, as upstream's queue does, rather than backed off.

pub mod behavior;
mod conditions;
mod metrics;
pub mod replica_calculator;
mod sync;
pub use sync::reconciliations;
mod target;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::ObjectRef;

use crate::informers::{Cache, Change, Informers};
use crate::util::clock::{Clock, RealClock};
use crate::util::events::Recorder;
use crate::util::runtime;

pub use replica_calculator::CalculatorConfig;

/// Flags of kube-controller-manager's HPA controller.
#[derive(Clone, Debug)]
pub struct HpaOptions {
    /// `--horizontal-pod-autoscaler-sync-period`.
    pub sync_period: Duration,
    /// `--horizontal-pod-autoscaler-tolerance`, `--horizontal-pod-autoscaler-cpu-initialization-period`
    /// and `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub calculator: CalculatorConfig,
    /// `--horizontal-pod-autoscaler-downscale-stabilization`: the scale-down window of HPAs
    /// without a behavior.
    pub downscale_stabilization: Duration,
}

impl Default for HpaOptions {
    fn default() -> Self {
        HpaOptions {
            sync_period: Duration::from_secs(15),
            calculator: CalculatorConfig::default(),
            downscale_stabilization: Duration::from_secs(300),
        }
    }
}

/// What one HPA's syncs remember between them (upstream keeps the same in memory): the
/// recommendations of the stabilization window and the scale events the policies count.
pub type Histories = Mutex<HashMap<String, behavior::History>>;

struct Ctx {
    client: Client,
    recorder: Recorder,
    pods: Cache<Pod>,
    targets: target::Targets,
    options: HpaOptions,
    clock: Arc<dyn Clock>,
    histories: Histories,
}

pub async fn run(informers: Arc<Informers>, options: HpaOptions) {
    run_with(informers, options, Arc::new(RealClock)).await
}

pub async fn run_with(informers: Arc<Informers>, options: HpaOptions, clock: Arc<dyn Clock>) {
    let client = informers.client();
    let hpas = informers.of::<HorizontalPodAutoscaler>();
    let pods = informers.of::<Pod>();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "horizontal-pod-autoscaler".into(),
            instance: None,
        },
    );
    let ctx = Arc::new(Ctx {
        client,
        recorder,
        pods: pods.store(),
        targets: target::Targets::default(),
        options,
        clock,
        histories: Mutex::default(),
    });
    if ctx.pods.wait_until_ready().await.is_err() {
        return;
    }
    let forget = ctx.clone();
    let store = hpas.store();
    // New HPAs, spec changes and deletions; the status writes of this controller are not
    // changes it needs to act on, and the sync period brings every HPA back anyway.
    let queue = hpas.changes().flat_map(move |change| {
        let hpas: Vec<Arc<HorizontalPodAutoscaler>> = match change {
            Change::Applied {
                object,
                previous: Some(previous),
            } if previous.metadata.generation == object.metadata.generation => Vec::new(),
            Change::Applied { object, .. } => vec![object],
            Change::Deleted(object) => {
                forget.forget(&key_of(&object));
                Vec::new()
            }
            Change::Synced => store.state(),
        };
        futures::stream::iter(hpas.into_iter().map(|h| ObjectRef::from_obj(h.as_ref())))
    });
    runtime::run(
        "horizontalpodautoscaler",
        hpas.store(),
        queue,
        sync::reconcile,
        ctx,
    )
    .await
}

impl Ctx {
    /// Runs `f` on the history of HPA `key` (never across an await: the lock is std's).
    fn with_history<T>(&self, key: &str, f: impl FnOnce(&mut behavior::History) -> T) -> T {
        let mut histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
        f(histories.entry(key.to_string()).or_default())
    }

    fn forget(&self, key: &str) {
        self.histories
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

fn key_of(hpa: &HorizontalPodAutoscaler) -> String {
    format!(
        "{}/{}",
        hpa.metadata.namespace.as_deref().unwrap_or(""),
        hpa.metadata.name.as_deref().unwrap_or("")
    )
}
