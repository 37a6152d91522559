//! What nodes actually use, for the load-aware strategies `LeastCpu` and `LeastMem`, as the
//! Trimaran plugins of kubernetes-sigs/scheduler-plugins do it: requests say what pods may
//! use, the kubelets' measurements say what they do. The node metrics
//! (`metrics.k8s.io/v1beta1` NodeMetrics, which the kubelets' stats feed) are read every
//! [`REFRESH_PERIOD`] (the resource metrics API has no watch, so it is sampled as the HPA
//! samples it), and the pods placed since are added on top by their requests, so a burst of
//! pods does not all land on the node that was idle at the last sample.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use minik8s_api::quantity::Quantity as Parsed;
use serde::Deserialize;
use tokio::time::Instant;

use super::cache::PodInfo;

/// How often the node metrics are read.
pub const REFRESH_PERIOD: Duration = Duration::from_secs(15);
/// How long a placed pod's requests are counted on top of the measurements: long enough
/// for it to start and show in a sample (the kubelet's stats window is 10–15 s).
pub const PLACED_WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Deserialize)]
struct NodeMetricsList {
    #[serde(default)]
    items: Vec<NodeMetrics>,
}

#[derive(Debug, Deserialize)]
struct NodeMetrics {
    metadata: ObjectMeta,
    #[serde(default)]
    usage: HashMap<String, Quantity>,
}

/// Each node's measured use (millicores, bytes).
pub type Measured = HashMap<String, (i64, i64)>;

/// Reads every node's measured cpu and memory use.
pub async fn fetch(client: &Client) -> Result<Measured, kube::Error> {
    let request = kube::core::Request::new("/apis/metrics.k8s.io/v1beta1/nodes")
        .list(&Default::default())
        .map_err(kube::Error::BuildRequest)?;
    let list: NodeMetricsList = client.request(request).await?;
    let value = |m: &NodeMetrics, r: &str, milli: bool| {
        m.usage.get(r).and_then(|q| Parsed::parse(&q.0)).map(|q| {
            let v = if milli { q.milli_value() } else { q.value() };
            i64::try_from(v).unwrap_or(i64::MAX)
        })
    };
    Ok(list
        .items
        .iter()
        .filter_map(|m| {
            let cpu = value(m, "cpu", true)?;
            let memory = value(m, "memory", false)?;
            Some((m.metadata.name.clone()?, (cpu, memory)))
        })
        .collect())
}

#[derive(Default)]
struct State {
    measured: Measured,
    /// Pods placed recently: node, cpu and memory requests (with defaults), when.
    placed: Vec<(String, i64, i64, Instant)>,
}

/// The measurements and the pods placed since, shared by the loop and its refresh task.
#[derive(Clone, Default)]
pub struct NodeLoads(Arc<Mutex<State>>);

impl NodeLoads {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new sample replaces the old.
    pub fn record(&self, measured: Measured) {
        self.state().measured = measured;
    }

    /// `pod` was placed on `node` at `now`.
    pub fn placed(&self, node: &str, pod: &PodInfo, now: Instant) {
        let mut state = self.state();
        state
            .placed
            .retain(|p| now.duration_since(p.3) < PLACED_WINDOW);
        state
            .placed
            .push((node.to_string(), pod.nonzero.0, pod.nonzero.1, now));
    }

    /// What `node` is expected to use at `now` (millicores, bytes): its last measurement and
    /// the requests of the pods placed there recently; `None` when it has not been measured.
    pub fn predicted(&self, node: &str, now: Instant) -> Option<(i64, i64)> {
        let state = self.state();
        let (mut cpu, mut memory) = *state.measured.get(node)?;
        for (n, c, m, at) in &state.placed {
            if n == node && now.duration_since(*at) < PLACED_WINDOW {
                cpu += c;
                memory += m;
            }
        }
        Some((cpu, memory))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn placed_pods_count_on_top_of_the_measurement_for_a_while() {
        let loads = NodeLoads::default();
        let now = Instant::now();
        assert_eq!(loads.predicted("a", now), None);
        loads.record([("a".to_string(), (500, 1 << 30))].into());
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]},
        }))
        .unwrap();
        loads.placed("a", &PodInfo::new(&pod), now);
        assert_eq!(
            loads.predicted("a", now),
            Some((750, (1 << 30) + (64 << 20)))
        );
        assert_eq!(
            loads.predicted("a", now + PLACED_WINDOW),
            Some((500, 1 << 30))
        );
    }
}
