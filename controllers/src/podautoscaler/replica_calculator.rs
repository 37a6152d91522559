//! How many replicas a Resource or ContainerResource metric asks for, as kube-controller-manager's
//! ReplicaCalculator decides it: pods that are starting, unready or missing samples must not
//! drive a scale in the wrong direction, so they are set aside and then counted pessimistically.
//! Kept free of I/O so the controller's fetches and these rules are tested apart.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use minik8s_api::quantity::Quantity;

use crate::util::pods::ready_condition;

/// One pod's sample from the resource metrics API: the usage in thousandths of the unit
/// (millicores for cpu, milli-bytes for memory), or for a ContainerResource metric that one
/// container's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodMetric {
    pub timestamp: Timestamp,
    pub window: Duration,
    pub value: i64,
}

/// Samples by pod name.
pub type PodMetrics = HashMap<String, PodMetric>;

/// The controller's flags that shape the calculation (upstream's
/// `--horizontal-pod-autoscaler-tolerance`, `-cpu-initialization-period` and
/// `-initial-readiness-delay`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CalculatorConfig {
    /// How far from 1.0 the usage ratio must be before the replica count changes.
    pub tolerance: f64,
    /// How long after a pod starts its cpu samples may still be start-up noise.
    pub cpu_initialization_period: Duration,
    /// How long after a pod starts an unready pod is taken as "never ready yet".
    pub delay_of_initial_readiness_status: Duration,
}

impl Default for CalculatorConfig {
    fn default() -> Self {
        CalculatorConfig {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(5 * 60),
            delay_of_initial_readiness_status: Duration::from_secs(30),
        }
    }
}

impl CalculatorConfig {
    fn within_tolerance(&self, usage_ratio: f64) -> bool {
        (1.0 - self.tolerance) <= usage_ratio && usage_ratio <= (1.0 + self.tolerance)
    }
}

/// The answer for a Utilization target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    pub replicas: i32,
    /// The current utilization, in percent of the requests.
    pub utilization: i32,
    /// The current average usage per pod, in thousandths of the unit.
    pub raw_average_value: i64,
}

/// The answer for an AverageValue target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawReplicas {
    pub replicas: i32,
    /// The current average usage per pod, in thousandths of the unit.
    pub average_value: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum CalcError {
    #[error("no pods returned by selector while calculating replica count")]
    NoPods,
    #[error("did not receive metrics for targeted pods (pods might be unready)")]
    NoMetrics,
    #[error("missing request for {resource} in container {container} of Pod {pod}")]
    MissingRequest {
        resource: String,
        container: String,
        pod: String,
    },
    #[error("invalid request {quantity:?} for {resource} in container {container} of Pod {pod}")]
    InvalidRequest {
        quantity: String,
        resource: String,
        container: String,
        pod: String,
    },
    #[error("container {container} not found in Pod {pod}")]
    ContainerNotFound { container: String, pod: String },
    #[error("no metrics returned matched known pods")]
    NoMatchingMetrics,
}

/// Desired replicas for a target utilization (percent of the pods' requests) of `resource`,
/// summed over the pods' containers or, with `container`, for that container alone (upstream's
/// `GetResourceReplicas`).
#[allow(clippy::too_many_arguments)]
pub fn resource_replicas(
    current_replicas: i32,
    target_utilization: i32,
    resource: &str,
    container: Option<&str>,
    pods: &[Arc<Pod>],
    metrics: &PodMetrics,
    now: Timestamp,
    config: &CalculatorConfig,
) -> Result<Replicas, CalcError> {
    if pods.is_empty() {
        return Err(CalcError::NoPods);
    }
    let groups = group_pods(pods, metrics, resource, now, config);
    let mut metrics = usable_metrics(metrics, &groups);
    if metrics.is_empty() {
        return Err(CalcError::NoMetrics);
    }
    let requests = pod_requests(pods, container, resource)?;

    let current = utilization_ratio(&metrics, &requests, target_utilization)?;
    let usage_ratio = current.ratio;
    let answer = |replicas| Replicas {
        replicas,
        utilization: current.utilization,
        raw_average_value: current.raw_average_value,
    };

    let scale_up_with_unready = !groups.unready.is_empty() && usage_ratio > 1.0;
    if !scale_up_with_unready && groups.missing.is_empty() {
        if config.within_tolerance(usage_ratio) {
            return Ok(answer(current_replicas));
        }
        return Ok(answer(ceil_replicas(usage_ratio, groups.ready_count)));
    }

    if usage_ratio < 1.0 {
        // Scaling down: a pod without a sample is taken as using all it asked for (or the target,
        // when that is above 100 %), so that it cannot deepen the scale-down.
        let fallback = i128::from(target_utilization.max(100));
        for name in &groups.missing {
            let request = i128::from(requests.get(name).copied().unwrap_or(0));
            let value = clamp_i64(request * fallback / 100);
            metrics.insert(name.clone(), PodMetric::value_only(value));
        }
    } else if usage_ratio > 1.0 {
        // Scaling up: a pod without a sample is taken as idle, so that it cannot inflate it.
        for name in &groups.missing {
            metrics.insert(name.clone(), PodMetric::value_only(0));
        }
    }
    if scale_up_with_unready {
        for name in &groups.unready {
            metrics.insert(name.clone(), PodMetric::value_only(0));
        }
    }

    let new_ratio = utilization_ratio(&metrics, &requests, target_utilization)?.ratio;
    if config.within_tolerance(new_ratio) || direction_flipped(usage_ratio, new_ratio) {
        return Ok(answer(current_replicas));
    }
    let new_replicas = ceil_replicas(new_ratio, metrics.len());
    if count_moves_against(new_ratio, new_replicas, current_replicas) {
        return Ok(answer(current_replicas));
    }
    Ok(answer(new_replicas))
}

/// Desired replicas for a target average usage per pod of `resource` (in thousandths of the
/// unit), as upstream's `GetRawResourceReplicas`.
#[allow(clippy::too_many_arguments)]
pub fn raw_resource_replicas(
    current_replicas: i32,
    target_average_value: i64,
    resource: &str,
    container: Option<&str>,
    pods: &[Arc<Pod>],
    metrics: &PodMetrics,
    now: Timestamp,
    config: &CalculatorConfig,
) -> Result<RawReplicas, CalcError> {
    // The samples were already narrowed to the container by whoever fetched them; the
    // container only matters for requests, which an AverageValue target does not use.
    let _ = container;
    if pods.is_empty() {
        return Err(CalcError::NoPods);
    }
    let groups = group_pods(pods, metrics, resource, now, config);
    let mut metrics = usable_metrics(metrics, &groups);
    if metrics.is_empty() {
        return Err(CalcError::NoMetrics);
    }

    let (usage_ratio, average_value) = average_usage_ratio(&metrics, target_average_value);
    let answer = |replicas| RawReplicas {
        replicas,
        average_value,
    };

    let scale_up_with_unready = !groups.unready.is_empty() && usage_ratio > 1.0;
    if !scale_up_with_unready && groups.missing.is_empty() {
        if config.within_tolerance(usage_ratio) {
            return Ok(answer(current_replicas));
        }
        return Ok(answer(ceil_replicas(usage_ratio, groups.ready_count)));
    }

    if usage_ratio < 1.0 {
        // Scaling down: a pod without a sample is taken as using exactly the target.
        for name in &groups.missing {
            metrics.insert(name.clone(), PodMetric::value_only(target_average_value));
        }
    } else if usage_ratio > 1.0 {
        for name in &groups.missing {
            metrics.insert(name.clone(), PodMetric::value_only(0));
        }
    }
    if scale_up_with_unready {
        for name in &groups.unready {
            metrics.insert(name.clone(), PodMetric::value_only(0));
        }
    }

    let (new_ratio, _) = average_usage_ratio(&metrics, target_average_value);
    if config.within_tolerance(new_ratio) || direction_flipped(usage_ratio, new_ratio) {
        return Ok(answer(current_replicas));
    }
    let new_replicas = ceil_replicas(new_ratio, metrics.len());
    if count_moves_against(new_ratio, new_replicas, current_replicas) {
        return Ok(answer(current_replicas));
    }
    Ok(answer(new_replicas))
}

impl PodMetric {
    /// A stand-in sample for a pod that had none; only its value is ever read.
    fn value_only(value: i64) -> PodMetric {
        PodMetric {
            timestamp: Timestamp::UNIX_EPOCH,
            window: Duration::ZERO,
            value,
        }
    }
}

/// How the target's pods count toward the calculation (upstream's `groupPods`).
#[derive(Debug, Default, PartialEq, Eq)]
struct PodGroups {
    /// Pods whose samples are used as they are.
    ready_count: usize,
    /// Pending pods, and for cpu pods whose samples may still be start-up noise.
    unready: BTreeSet<String>,
    /// Pods without a sample.
    missing: BTreeSet<String>,
    /// Deleted and failed pods: they will not come back, so they do not count at all.
    ignored: BTreeSet<String>,
}

fn group_pods(
    pods: &[Arc<Pod>],
    metrics: &PodMetrics,
    resource: &str,
    now: Timestamp,
    config: &CalculatorConfig,
) -> PodGroups {
    let mut groups = PodGroups::default();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("");
        if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
            groups.ignored.insert(name);
            continue;
        }
        if phase == "Pending" {
            groups.unready.insert(name);
            continue;
        }
        let Some(metric) = metrics.get(&name) else {
            groups.missing.insert(name);
            continue;
        };
        if resource == "cpu" && cpu_sample_unusable(pod, metric, now, config) {
            groups.unready.insert(name);
            continue;
        }
        groups.ready_count += 1;
    }
    groups
}

/// Whether a pod's cpu sample may reflect start-up rather than load: the pod is unready while
/// starting, its sample predates one full window since it turned ready, or it has been unready
/// ever since it started.
fn cpu_sample_unusable(
    pod: &Pod,
    metric: &PodMetric,
    now: Timestamp,
    config: &CalculatorConfig,
) -> bool {
    let condition = ready_condition(pod);
    let start = pod.status.as_ref().and_then(|s| s.start_time.as_ref());
    let (Some(condition), Some(start)) = (condition, start) else {
        return true;
    };
    // A condition that never recorded a transition is as old as can be.
    let transition = condition
        .last_transition_time
        .as_ref()
        .map_or(Timestamp::MIN, |t| t.0);
    let unready = condition.status == "False";
    if plus(start.0, config.cpu_initialization_period) > now {
        unready || metric.timestamp < plus(transition, metric.window)
    } else {
        unready && plus(start.0, config.delay_of_initial_readiness_status) > transition
    }
}

/// The samples that take part: those of ignored and unready pods are set aside.
fn usable_metrics(metrics: &PodMetrics, groups: &PodGroups) -> PodMetrics {
    metrics
        .iter()
        .filter(|(name, _)| !groups.ignored.contains(*name) && !groups.unready.contains(*name))
        .map(|(name, metric)| (name.clone(), *metric))
        .collect()
}

/// Each pod's request for `resource`, in thousandths of the unit: the sum over its containers
/// (restartable init containers included, as they run alongside), or `container`'s alone.
fn pod_requests(
    pods: &[Arc<Pod>],
    container: Option<&str>,
    resource: &str,
) -> Result<HashMap<String, i64>, CalcError> {
    pods.iter()
        .map(|pod| {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let request = pod_request(pod, &name, container, resource)?;
            Ok((name, request))
        })
        .collect()
}

fn pod_request(
    pod: &Pod,
    pod_name: &str,
    container: Option<&str>,
    resource: &str,
) -> Result<i64, CalcError> {
    let spec = pod.spec.as_ref();
    let regular = spec.map(|s| s.containers.iter()).into_iter().flatten();
    let sidecars = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut total: i128 = 0;
    for c in regular.chain(sidecars) {
        match container {
            Some(wanted) if wanted != c.name => continue,
            Some(_) => return container_request(c, pod_name, resource).map(clamp_i64),
            None => total += container_request(c, pod_name, resource)?,
        }
    }
    match container {
        Some(wanted) => Err(CalcError::ContainerNotFound {
            container: wanted.to_string(),
            pod: pod_name.to_string(),
        }),
        None => Ok(clamp_i64(total)),
    }
}

fn container_request(c: &Container, pod_name: &str, resource: &str) -> Result<i128, CalcError> {
    let quantity = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource))
        .ok_or_else(|| CalcError::MissingRequest {
            resource: resource.to_string(),
            container: c.name.clone(),
            pod: pod_name.to_string(),
        })?;
    Quantity::parse(&quantity.0)
        .map(|q| q.milli_value())
        .ok_or_else(|| CalcError::InvalidRequest {
            quantity: quantity.0.clone(),
            resource: resource.to_string(),
            container: c.name.clone(),
            pod: pod_name.to_string(),
        })
}

struct Utilization {
    ratio: f64,
    utilization: i32,
    raw_average_value: i64,
}

/// Usage over requests, in whole percent, against the target (upstream's
/// `GetResourceUtilizationRatio`); samples of pods without a known request are extraneous.
fn utilization_ratio(
    metrics: &PodMetrics,
    requests: &HashMap<String, i64>,
    target_utilization: i32,
) -> Result<Utilization, CalcError> {
    let mut metrics_total: i128 = 0;
    let mut requests_total: i128 = 0;
    let mut entries: i128 = 0;
    for (name, metric) in metrics {
        let Some(request) = requests.get(name) else {
            continue;
        };
        metrics_total += i128::from(metric.value);
        requests_total += i128::from(*request);
        entries += 1;
    }
    if requests_total == 0 {
        return Err(CalcError::NoMatchingMetrics);
    }
    let percent = metrics_total * 100 / requests_total;
    let utilization =
        i32::try_from(percent).unwrap_or(if percent < 0 { i32::MIN } else { i32::MAX });
    Ok(Utilization {
        ratio: f64::from(utilization) / f64::from(target_utilization),
        utilization,
        raw_average_value: clamp_i64(metrics_total / entries),
    })
}

/// The average sample against the target average (upstream's `GetMetricUsageRatio`).
fn average_usage_ratio(metrics: &PodMetrics, target: i64) -> (f64, i64) {
    let total: i128 = metrics.values().map(|m| i128::from(m.value)).sum();
    let count = i128::try_from(metrics.len()).unwrap_or(i128::MAX).max(1);
    let average = clamp_i64(total / count);
    (average as f64 / target as f64, average)
}

/// `ceil(ratio × count)`, saturating at the bounds of a replica count.
fn ceil_replicas(ratio: f64, count: usize) -> i32 {
    (ratio * count as f64).ceil() as i32
}

/// Whether filling in the set-aside pods turned a scale-up into a scale-down or back.
fn direction_flipped(before: f64, after: f64) -> bool {
    (before < 1.0 && after > 1.0) || (before > 1.0 && after < 1.0)
}

/// Whether counting more pods than are current would move the count against the ratio.
fn count_moves_against(ratio: f64, replicas: i32, current: i32) -> bool {
    (ratio < 1.0 && replicas > current) || (ratio > 1.0 && replicas < current)
}

fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

fn plus(t: Timestamp, d: Duration) -> Timestamp {
    t.saturating_add(d).unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    //! Upstream's replica_calculator_test.go cases for Resource and ContainerResource metrics,
    //! with its fixture: pods `test-pod-N` with two containers that each request the pod's
    //! quantity, samples one per container summed as the metrics client does, Go's zero time
    //! where upstream leaves a time unset, and the testing calculator flags (tolerance 0.1, cpu
    //! initialization 2 min, readiness delay 10 s).

    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    const CONTAINERS_PER_POD: i64 = 2;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    /// Go's zero `time.Time`, which upstream's fixture uses for unset times.
    fn go_zero() -> Timestamp {
        "0001-01-01T00:00:00Z".parse().unwrap()
    }

    fn hot() -> Timestamp {
        now()
    }

    fn cool() -> Timestamp {
        now().checked_sub(Duration::from_secs(180)).unwrap()
    }

    fn ago(secs: u64) -> Timestamp {
        now().checked_sub(Duration::from_secs(secs)).unwrap()
    }

    fn testing_config() -> CalculatorConfig {
        CalculatorConfig {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(120),
            delay_of_initial_readiness_status: Duration::from_secs(10),
        }
    }

    /// Upstream's `makePodMetricLevels`: every container of pod i uses `levels[i]`.
    fn levels(per_pod: &[i64]) -> Vec<Vec<i64>> {
        per_pod
            .iter()
            .map(|&l| vec![l; CONTAINERS_PER_POD as usize])
            .collect()
    }

    fn requests(n: usize, q: &str) -> Vec<String> {
        vec![q.to_string(); n]
    }

    /// One of upstream's `replicaCalcTestCase`s with a `resource`.
    #[derive(Default)]
    struct Case {
        current: i32,
        expected_replicas: i32,
        expected_error: Option<&'static str>,
        requests: Vec<String>,
        levels: Vec<Vec<i64>>,
        metric_pod_names: Vec<&'static str>,
        target: i32,
        expected_utilization: i32,
        expected_value: i64,
        container: Option<&'static str>,
        readiness: Vec<&'static str>,
        start_times: Vec<Timestamp>,
        phases: Vec<&'static str>,
        deleted: Vec<bool>,
    }

    impl Case {
        fn pods(&self) -> Vec<Arc<Pod>> {
            let count = (self.current as usize).max(self.phases.len());
            (0..count).map(|i| Arc::new(self.pod(i))).collect()
        }

        fn pod(&self, i: usize) -> Pod {
            let readiness = self.readiness.get(i).copied().unwrap_or("True");
            let start = self.start_times.get(i).copied().unwrap_or_else(go_zero);
            let phase = self.phases.get(i).copied().unwrap_or("Running");
            let resources = self.requests.get(i).map(|q| ResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "cpu".to_string(),
                    K8sQuantity(q.clone()),
                )])),
                ..Default::default()
            });
            let container = |name: &str| Container {
                name: name.to_string(),
                resources: resources.clone(),
                ..Default::default()
            };
            Pod {
                metadata: ObjectMeta {
                    name: Some(format!("test-pod-{i}")),
                    namespace: Some("test-namespace".to_string()),
                    deletion_timestamp: self
                        .deleted
                        .get(i)
                        .copied()
                        .unwrap_or(false)
                        .then(|| Time(now())),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers: vec![container("container1"), container("container2")],
                    ..Default::default()
                }),
                status: Some(PodStatus {
                    phase: Some(phase.to_string()),
                    start_time: Some(Time(start)),
                    conditions: Some(vec![PodCondition {
                        type_: "Ready".to_string(),
                        status: readiness.to_string(),
                        last_transition_time: Some(Time(go_zero())),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            }
        }

        /// What the resource metrics client makes of the fixture's samples: a pod's sum when
        /// every container reported, or the named container's usage.
        fn metrics(&self) -> PodMetrics {
            let mut out = PodMetrics::new();
            for (i, containers) in self.levels.iter().enumerate() {
                let name = self
                    .metric_pod_names
                    .get(i)
                    .map_or_else(|| format!("test-pod-{i}"), |n| n.to_string());
                let value = match self.container {
                    None => (containers.len() >= CONTAINERS_PER_POD as usize)
                        .then(|| containers.iter().sum()),
                    Some(c) => {
                        let index: usize = c.trim_start_matches("container").parse().unwrap();
                        containers.get(index - 1).copied()
                    }
                };
                if let Some(value) = value {
                    let metric = PodMetric {
                        timestamp: go_zero(),
                        window: Duration::from_secs(60),
                        value,
                    };
                    out.insert(name, metric);
                }
            }
            out
        }

        fn run(&self) {
            let got = resource_replicas(
                self.current,
                self.target,
                "cpu",
                self.container,
                &self.pods(),
                &self.metrics(),
                now(),
                &testing_config(),
            );
            match self.expected_error {
                Some(expected) => {
                    let err = got.expect_err("there should be an error");
                    assert!(
                        err.to_string().contains(expected),
                        "error {err:?} should contain {expected:?}"
                    );
                }
                None => {
                    let got = got.expect("there should be no error");
                    assert_eq!(
                        got,
                        Replicas {
                            replicas: self.expected_replicas,
                            utilization: self.expected_utilization,
                            raw_average_value: self.expected_value,
                        }
                    );
                }
            }
        }
    }

    #[test]
    fn disjoint_resources_metrics() {
        Case {
            current: 1,
            expected_error: Some("no metrics returned matched known pods"),
            requests: requests(1, "1.0"),
            levels: levels(&[100]),
            metric_pod_names: vec!["an-older-pod-name"],
            target: 100,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up() {
        Case {
            current: 3,
            expected_replicas: 5,
            requests: requests(3, "1.0"),
            levels: levels(&[300, 500, 700]),
            target: 30,
            expected_utilization: 50,
            expected_value: CONTAINERS_PER_POD * 500,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn container_scale_up() {
        Case {
            current: 3,
            expected_replicas: 5,
            requests: requests(3, "1.0"),
            levels: vec![vec![1000, 300], vec![1000, 500], vec![1000, 700]],
            target: 30,
            expected_utilization: 50,
            expected_value: 500,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_unready_less_scale() {
        Case {
            current: 3,
            expected_replicas: 4,
            readiness: vec!["False", "True", "True"],
            requests: requests(3, "1.0"),
            levels: levels(&[300, 500, 700]),
            target: 30,
            expected_utilization: 60,
            expected_value: CONTAINERS_PER_POD * 600,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_container_hot_cpu_less_scale() {
        Case {
            current: 3,
            expected_replicas: 4,
            start_times: vec![hot(), cool(), cool()],
            requests: requests(3, "1.0"),
            levels: vec![vec![0, 300], vec![0, 500], vec![0, 700]],
            target: 30,
            expected_utilization: 60,
            expected_value: 600,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_hot_cpu_less_scale() {
        Case {
            current: 3,
            expected_replicas: 4,
            start_times: vec![hot(), cool(), cool()],
            requests: requests(3, "1.0"),
            levels: levels(&[300, 500, 700]),
            target: 30,
            expected_utilization: 60,
            expected_value: CONTAINERS_PER_POD * 600,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_unready_no_scale() {
        Case {
            current: 3,
            expected_replicas: 3,
            readiness: vec!["True", "False", "False"],
            requests: requests(3, "1.0"),
            levels: levels(&[400, 500, 700]),
            target: 30,
            expected_utilization: 40,
            expected_value: CONTAINERS_PER_POD * 400,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_hot_cpu_no_scale() {
        Case {
            current: 3,
            expected_replicas: 3,
            readiness: vec!["True", "False", "False"],
            start_times: vec![cool(), hot(), hot()],
            requests: requests(3, "1.0"),
            levels: levels(&[400, 500, 700]),
            target: 30,
            expected_utilization: 40,
            expected_value: CONTAINERS_PER_POD * 400,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_ignores_failed_pods() {
        Case {
            current: 2,
            expected_replicas: 4,
            readiness: vec!["True", "True", "False", "False"],
            phases: vec!["Running", "Running", "Failed", "Failed"],
            requests: requests(4, "1.0"),
            levels: levels(&[500, 700]),
            target: 30,
            expected_utilization: 60,
            expected_value: CONTAINERS_PER_POD * 600,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_container_metric_scale_up_ignores_failed_pods() {
        Case {
            current: 2,
            expected_replicas: 4,
            readiness: vec!["True", "True", "False", "False"],
            phases: vec!["Running", "Running", "Failed", "Failed"],
            requests: requests(4, "1.0"),
            levels: vec![vec![1000, 500], vec![9000, 700], vec![1000], vec![9000]],
            target: 30,
            expected_utilization: 60,
            expected_value: 600,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_container_ignores_failed_pods() {
        Case {
            current: 2,
            expected_replicas: 4,
            readiness: vec!["True", "True", "False", "False"],
            phases: vec!["Running", "Running", "Failed", "Failed"],
            requests: requests(4, "1.0"),
            levels: vec![vec![1000, 500], vec![9000, 700]],
            target: 30,
            expected_utilization: 60,
            expected_value: 600,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_ignores_deletion_pods() {
        Case {
            current: 2,
            expected_replicas: 4,
            readiness: vec!["True", "True", "False", "False"],
            phases: vec!["Running"; 4],
            deleted: vec![false, false, true, true],
            requests: requests(4, "1.0"),
            levels: levels(&[500, 700]),
            target: 30,
            expected_utilization: 60,
            expected_value: CONTAINERS_PER_POD * 600,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_up_container_ignores_deletion_pods() {
        Case {
            current: 2,
            expected_replicas: 4,
            readiness: vec!["True", "True", "False", "False"],
            phases: vec!["Running"; 4],
            deleted: vec![false, false, true, true],
            requests: requests(4, "1.0"),
            levels: levels(&[500, 700]),
            target: 30,
            expected_utilization: 60,
            expected_value: 600,
            container: Some("container1"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down() {
        Case {
            current: 5,
            expected_replicas: 3,
            requests: requests(5, "1.0"),
            levels: levels(&[100, 300, 500, 250, 250]),
            target: 50,
            expected_utilization: 28,
            expected_value: CONTAINERS_PER_POD * 280,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn container_scale_down() {
        Case {
            current: 5,
            expected_replicas: 3,
            requests: requests(5, "1.0"),
            levels: vec![
                vec![1000, 100],
                vec![1000, 300],
                vec![1000, 500],
                vec![1000, 250],
                vec![1000, 250],
            ],
            target: 50,
            expected_utilization: 28,
            expected_value: 280,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_exclude_unready_pods() {
        Case {
            current: 5,
            expected_replicas: 2,
            readiness: vec!["True", "True", "True", "False", "False"],
            requests: requests(5, "1.0"),
            levels: levels(&[100, 300, 500, 250, 250]),
            target: 50,
            expected_utilization: 30,
            expected_value: CONTAINERS_PER_POD * 300,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_container_exclude_unready_pods() {
        Case {
            current: 5,
            expected_replicas: 2,
            readiness: vec!["True", "True", "True", "False", "False"],
            requests: requests(5, "1.0"),
            levels: vec![
                vec![1000, 100],
                vec![1000, 300],
                vec![1000, 500],
                vec![1000, 250],
                vec![1000, 250],
            ],
            target: 50,
            expected_utilization: 30,
            expected_value: 300,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_exclude_unscheduled_pods() {
        Case {
            current: 5,
            expected_replicas: 1,
            readiness: vec!["True", "False", "False", "False", "False"],
            phases: vec!["Running", "Pending", "Pending", "Pending", "Pending"],
            requests: requests(5, "1.0"),
            levels: levels(&[100]),
            target: 50,
            expected_utilization: 10,
            expected_value: CONTAINERS_PER_POD * 100,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_container_exclude_unscheduled_pods() {
        Case {
            current: 5,
            expected_replicas: 1,
            readiness: vec!["True", "False", "False", "False", "False"],
            phases: vec!["Running", "Pending", "Pending", "Pending", "Pending"],
            requests: requests(5, "1.0"),
            levels: vec![
                vec![1000, 100],
                vec![1000, 300],
                vec![1000, 500],
                vec![1000, 250],
                vec![1000, 250],
            ],
            target: 50,
            expected_utilization: 10,
            expected_value: 100,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_ignore_hot_cpu_pods() {
        Case {
            current: 5,
            expected_replicas: 2,
            start_times: vec![cool(), cool(), cool(), hot(), hot()],
            requests: requests(5, "1.0"),
            levels: levels(&[100, 300, 500, 250, 250]),
            target: 50,
            expected_utilization: 30,
            expected_value: CONTAINERS_PER_POD * 300,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_container_ignore_hot_cpu_pods() {
        Case {
            current: 5,
            expected_replicas: 2,
            start_times: vec![cool(), cool(), cool(), hot(), hot()],
            requests: requests(5, "1.0"),
            levels: vec![
                vec![1000, 100],
                vec![1000, 300],
                vec![1000, 500],
                vec![1000, 1000],
                vec![1000, 1000],
            ],
            target: 50,
            expected_utilization: 30,
            expected_value: 300,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    fn five_running_two_failed() -> Vec<&'static str> {
        vec![
            "Running", "Running", "Running", "Running", "Running", "Failed", "Failed",
        ]
    }

    fn five_ready_two_unready() -> Vec<&'static str> {
        vec!["True", "True", "True", "True", "True", "False", "False"]
    }

    #[test]
    fn scale_down_ignores_failed_pods() {
        Case {
            current: 5,
            expected_replicas: 3,
            readiness: five_ready_two_unready(),
            phases: five_running_two_failed(),
            requests: requests(7, "1.0"),
            levels: levels(&[100, 300, 500, 250, 250]),
            target: 50,
            expected_utilization: 28,
            expected_value: CONTAINERS_PER_POD * 280,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_container_ignores_failed_pods() {
        Case {
            current: 5,
            expected_replicas: 3,
            readiness: five_ready_two_unready(),
            phases: five_running_two_failed(),
            requests: requests(7, "1.0"),
            levels: vec![
                vec![1000, 100],
                vec![1000, 300],
                vec![1000, 500],
                vec![1000, 250],
                vec![1000, 250],
            ],
            target: 50,
            expected_utilization: 28,
            expected_value: 280,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn scale_down_ignores_deletion_pods() {
        Case {
            current: 5,
            expected_replicas: 3,
            readiness: five_ready_two_unready(),
            phases: vec!["Running"; 7],
            deleted: vec![false, false, false, false, false, true, true],
            requests: requests(7, "1.0"),
            levels: levels(&[100, 300, 500, 250, 250]),
            target: 50,
            expected_utilization: 28,
            expected_value: CONTAINERS_PER_POD * 280,
            ..Case::default()
        }
        .run();
    }

    /// Regression test for kubernetes/kubernetes#83561.
    #[test]
    fn scale_down_ignores_deletion_pods_still_running() {
        Case {
            current: 5,
            expected_replicas: 3,
            readiness: five_ready_two_unready(),
            phases: vec!["Running"; 7],
            deleted: vec![false, false, false, false, false, true, true],
            requests: requests(7, "1.0"),
            levels: vec![
                vec![1000, 100],
                vec![1000, 300],
                vec![1000, 500],
                vec![1000, 250],
                vec![1000, 250],
            ],
            target: 50,
            expected_utilization: 28,
            expected_value: 280,
            container: Some("container2"),
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn tolerance() {
        Case {
            current: 3,
            expected_replicas: 3,
            requests: vec!["0.9".into(), "1.0".into(), "1.1".into()],
            levels: levels(&[1010, 1030, 1020]),
            target: 100,
            expected_utilization: 102,
            expected_value: CONTAINERS_PER_POD * 1020,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn superfluous_metrics() {
        Case {
            current: 4,
            expected_replicas: 24,
            requests: requests(4, "1.0"),
            levels: levels(&[4000, 9500, 3000, 7000, 3200, 2000]),
            target: 100,
            expected_utilization: 587,
            expected_value: CONTAINERS_PER_POD * 5875,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics() {
        Case {
            current: 4,
            expected_replicas: 3,
            requests: requests(4, "1.0"),
            levels: levels(&[400, 95]),
            target: 100,
            expected_utilization: 24,
            expected_value: 495,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn empty_metrics() {
        Case {
            current: 4,
            expected_error: Some(
                "did not receive metrics for targeted pods (pods might be unready)",
            ),
            requests: requests(3, "1.0"),
            levels: levels(&[]),
            target: 100,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn empty_cpu_request() {
        Case {
            current: 1,
            expected_error: Some("missing request for"),
            requests: Vec::new(),
            levels: levels(&[200]),
            target: 100,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn no_pods() {
        let err = resource_replicas(
            1,
            50,
            "cpu",
            None,
            &[],
            &PodMetrics::new(),
            now(),
            &testing_config(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no pods returned by selector while calculating replica count"
        );
    }

    #[test]
    fn missing_metrics_no_change_eq() {
        Case {
            current: 2,
            expected_replicas: 2,
            requests: requests(2, "1.0"),
            levels: levels(&[1000]),
            target: 100,
            expected_utilization: 100,
            expected_value: CONTAINERS_PER_POD * 1000,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_no_change_gt() {
        Case {
            current: 2,
            expected_replicas: 2,
            requests: requests(2, "1.0"),
            levels: levels(&[1900]),
            target: 100,
            expected_utilization: 190,
            expected_value: CONTAINERS_PER_POD * 1900,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_no_change_lt() {
        Case {
            current: 2,
            expected_replicas: 2,
            requests: requests(2, "1.0"),
            levels: levels(&[600]),
            target: 100,
            expected_utilization: 60,
            expected_value: CONTAINERS_PER_POD * 600,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_unready_change() {
        Case {
            current: 3,
            expected_replicas: 3,
            readiness: vec!["False", "True", "True"],
            requests: requests(3, "1.0"),
            levels: levels(&[100, 450]),
            target: 50,
            expected_utilization: 45,
            expected_value: CONTAINERS_PER_POD * 450,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_hot_cpu_no_change() {
        Case {
            current: 3,
            expected_replicas: 3,
            start_times: vec![hot(), cool(), cool()],
            requests: requests(3, "1.0"),
            levels: levels(&[100, 450]),
            target: 50,
            expected_utilization: 45,
            expected_value: CONTAINERS_PER_POD * 450,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_unready_scale_up() {
        Case {
            current: 3,
            expected_replicas: 4,
            readiness: vec!["False", "True", "True"],
            requests: requests(3, "1.0"),
            levels: levels(&[100, 2000]),
            target: 50,
            expected_utilization: 200,
            expected_value: CONTAINERS_PER_POD * 2000,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_hot_cpu_scale_up() {
        Case {
            current: 3,
            expected_replicas: 4,
            readiness: vec!["False", "True", "True"],
            start_times: vec![hot(), cool(), cool()],
            requests: requests(3, "1.0"),
            levels: levels(&[100, 2000]),
            target: 50,
            expected_utilization: 200,
            expected_value: CONTAINERS_PER_POD * 2000,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_unready_scale_down() {
        Case {
            current: 4,
            expected_replicas: 3,
            readiness: vec!["False", "True", "True", "True"],
            requests: requests(4, "1.0"),
            levels: levels(&[100, 100, 100]),
            target: 50,
            expected_utilization: 10,
            expected_value: CONTAINERS_PER_POD * 100,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn missing_metrics_scale_down_target_over_100() {
        Case {
            current: 4,
            expected_replicas: 2,
            readiness: vec!["False", "True", "True", "True"],
            requests: vec!["1.0".into(), "1.0".into(), "2.0".into(), "2.0".into()],
            levels: levels(&[200, 100, 100]),
            target: 300,
            expected_utilization: 6,
            expected_value: CONTAINERS_PER_POD * 100,
            ..Case::default()
        }
        .run();
    }

    #[test]
    fn during_rolling_update_with_max_surge() {
        Case {
            current: 2,
            expected_replicas: 2,
            phases: vec!["Running"; 3],
            requests: requests(3, "1.0"),
            levels: levels(&[100, 100]),
            target: 50,
            expected_utilization: 10,
            expected_value: CONTAINERS_PER_POD * 100,
            ..Case::default()
        }
        .run();
    }

    /// Upstream's TestReplicaCalcComputedToleranceAlgImplementation: a target just past the
    /// tolerance scales, one just inside it does not.
    #[test]
    fn computed_tolerance_alg_implementation() {
        let start_pods = 10;
        let total_used: i64 = 10 * 150;
        let total_requested: i64 = 2 * total_used;
        let requested_to_used = (total_requested / total_used) as f64;
        let per_pod_requested = total_requested / 10;

        let target = (1.0 / (requested_to_used * (1.0 - 0.1))).abs() + 0.01;
        let final_cpu_percent_target = (target * 100.0) as i32;
        let resources_used_ratio = total_used as f64 / (total_requested as f64 * target);
        let final_pods = (resources_used_ratio * f64::from(start_pods)).ceil() as i32;

        let mut case = Case {
            current: start_pods,
            expected_replicas: final_pods,
            levels: levels(&[total_used / 10; 10]),
            requests: [100, -100, 10, -10, 2, -2, 1, -1, 0, 0]
                .iter()
                .map(|d| format!("{}m", per_pod_requested + d))
                .collect(),
            target: final_cpu_percent_target,
            expected_utilization: (total_used * 100 / total_requested) as i32,
            expected_value: CONTAINERS_PER_POD * total_used / 10,
            ..Case::default()
        };
        case.run();

        let target = (1.0 / (requested_to_used * (1.0 - 0.1))).abs() + 0.004;
        case.target = (target * 100.0) as i32;
        case.expected_replicas = start_pods;
        case.run();
    }

    /// Upstream's TestGroupPods table.
    #[test]
    fn group_pods_table() {
        struct PodSpecish {
            name: &'static str,
            phase: &'static str,
            start: Option<Timestamp>,
            ready: Option<(&'static str, Timestamp)>,
            deleted: bool,
        }
        let pod = |p: &PodSpecish| {
            Arc::new(Pod {
                metadata: ObjectMeta {
                    name: Some(p.name.to_string()),
                    deletion_timestamp: p.deleted.then(|| Time(Timestamp::from_second(1).unwrap())),
                    ..Default::default()
                },
                spec: None,
                status: Some(PodStatus {
                    phase: Some(p.phase.to_string()),
                    start_time: p.start.map(Time),
                    conditions: p.ready.map(|(status, at)| {
                        vec![PodCondition {
                            type_: "Ready".to_string(),
                            status: status.to_string(),
                            last_transition_time: Some(Time(at)),
                            ..Default::default()
                        }]
                    }),
                    ..Default::default()
                }),
            })
        };
        let metric = |value, timestamp, window_secs| PodMetric {
            timestamp,
            window: Duration::from_secs(window_secs),
            value,
        };
        let simple =
            |name: &'static str, phase: &'static str, start: Option<Timestamp>| PodSpecish {
                name,
                phase,
                start,
                ready: None,
                deleted: false,
            };
        type Row = (
            &'static str,
            Vec<PodSpecish>,
            Vec<(&'static str, PodMetric)>,
            &'static str,
            usize,
            Vec<&'static str>,
            Vec<&'static str>,
            Vec<&'static str>,
        );
        let rows: Vec<Row> = vec![
            ("void", vec![], vec![], "cpu", 0, vec![], vec![], vec![]),
            (
                "count in a ready pod - memory",
                vec![simple("bentham", "Succeeded", None)],
                vec![("bentham", metric(1, now(), 60))],
                "memory",
                1,
                vec![],
                vec![],
                vec![],
            ),
            (
                "unready a pod without ready condition - CPU",
                vec![simple("lucretius", "Succeeded", Some(now()))],
                vec![("lucretius", metric(1, go_zero(), 0))],
                "cpu",
                0,
                vec!["lucretius"],
                vec![],
                vec![],
            ),
            (
                "count in a ready pod with fresh metrics during initialization period - CPU",
                vec![PodSpecish {
                    ready: Some(("True", ago(30))),
                    ..simple("bentham", "Succeeded", Some(ago(60)))
                }],
                vec![("bentham", metric(1, now(), 30))],
                "cpu",
                1,
                vec![],
                vec![],
                vec![],
            ),
            (
                "unready a ready pod without fresh metrics during initialization period - CPU",
                vec![PodSpecish {
                    ready: Some(("True", ago(30))),
                    ..simple("bentham", "Succeeded", Some(ago(60)))
                }],
                vec![("bentham", metric(1, now(), 60))],
                "cpu",
                0,
                vec!["bentham"],
                vec![],
                vec![],
            ),
            (
                "unready an unready pod during initialization period - CPU",
                vec![PodSpecish {
                    ready: Some(("False", ago(9 * 60 + 54))),
                    ..simple("lucretius", "Succeeded", Some(ago(600)))
                }],
                vec![("lucretius", metric(1, go_zero(), 0))],
                "cpu",
                0,
                vec!["lucretius"],
                vec![],
                vec![],
            ),
            (
                "count in a ready pod without fresh metrics after initialization period - CPU",
                vec![PodSpecish {
                    ready: Some(("True", ago(180))),
                    ..simple("bentham", "Succeeded", Some(ago(180)))
                }],
                vec![("bentham", metric(1, ago(120), 60))],
                "cpu",
                1,
                vec![],
                vec![],
                vec![],
            ),
            (
                "count in an unready pod that was ready after initialization period - CPU",
                vec![PodSpecish {
                    ready: Some(("False", ago(9 * 60))),
                    ..simple("lucretius", "Succeeded", Some(ago(600)))
                }],
                vec![("lucretius", metric(1, go_zero(), 0))],
                "cpu",
                1,
                vec![],
                vec![],
                vec![],
            ),
            (
                "unready pod that has never been ready after initialization period - CPU",
                vec![PodSpecish {
                    ready: Some(("False", ago(9 * 60 + 50))),
                    ..simple("lucretius", "Succeeded", Some(ago(600)))
                }],
                vec![("lucretius", metric(1, go_zero(), 0))],
                "cpu",
                1,
                vec![],
                vec![],
                vec![],
            ),
            (
                "a missing pod",
                vec![simple("epicurus", "Succeeded", Some(ago(180)))],
                vec![],
                "cpu",
                0,
                vec![],
                vec!["epicurus"],
                vec![],
            ),
            (
                "several pods",
                vec![
                    simple("lucretius", "Succeeded", Some(now())),
                    PodSpecish {
                        ready: Some(("True", ago(180))),
                        ..simple("niccolo", "Succeeded", Some(ago(180)))
                    },
                    simple("epicurus", "Succeeded", Some(ago(180))),
                ],
                vec![
                    ("lucretius", metric(1, go_zero(), 0)),
                    ("niccolo", metric(1, go_zero(), 0)),
                ],
                "cpu",
                1,
                vec!["lucretius"],
                vec!["epicurus"],
                vec![],
            ),
            (
                "pending pods are unreadied",
                vec![simple("unscheduled", "Pending", None)],
                vec![],
                "cpu",
                0,
                vec!["unscheduled"],
                vec![],
                vec![],
            ),
            (
                "ignore pods with deletion timestamps",
                vec![PodSpecish {
                    deleted: true,
                    ..simple("deleted", "Pending", None)
                }],
                vec![("deleted", metric(1, go_zero(), 0))],
                "cpu",
                0,
                vec![],
                vec![],
                vec!["deleted"],
            ),
            (
                "ignore pods in a failed state",
                vec![simple("failed", "Failed", None)],
                vec![("failed", metric(1, go_zero(), 0))],
                "cpu",
                0,
                vec![],
                vec![],
                vec!["failed"],
            ),
        ];
        let set = |names: Vec<&str>| names.into_iter().map(String::from).collect();
        for (name, pods, metrics, resource, ready, unready, missing, ignored) in rows {
            let pods: Vec<_> = pods.iter().map(pod).collect();
            let metrics: PodMetrics = metrics
                .into_iter()
                .map(|(n, m)| (n.to_string(), m))
                .collect();
            let got = group_pods(&pods, &metrics, resource, now(), &testing_config());
            let want = PodGroups {
                ready_count: ready,
                unready: set(unready),
                missing: set(missing),
                ignored: set(ignored),
            };
            assert_eq!(got, want, "{name}");
        }
    }

    /// Upstream's TestCalculatePodRequests table, plus the named container being absent.
    #[test]
    fn calculate_pod_requests() {
        let container = |name: &str, request: Option<&str>| Container {
            name: name.to_string(),
            resources: request.map(|q| ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".to_string(), K8sQuantity(q.into()))])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = |containers: Vec<Container>, init: Vec<Container>| {
            Arc::new(Pod {
                metadata: ObjectMeta {
                    name: Some("test-pod".to_string()),
                    namespace: Some("test-namespace".to_string()),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers,
                    init_containers: Some(init),
                    ..Default::default()
                }),
                status: None,
            })
        };
        let two = || {
            pod(
                vec![
                    container("container1", Some("100m")),
                    container("container2", Some("50m")),
                ],
                vec![],
            )
        };
        let want = |v: i64| HashMap::from([("test-pod".to_string(), v)]);

        assert_eq!(pod_requests(&[], None, "cpu").unwrap(), HashMap::new());
        assert_eq!(pod_requests(&[two()], None, "cpu").unwrap(), want(150));
        assert_eq!(
            pod_requests(&[two()], Some("container1"), "cpu").unwrap(),
            want(100)
        );

        let missing = pod(vec![container("container1", None)], vec![]);
        assert_eq!(
            pod_requests(&[missing], None, "cpu")
                .unwrap_err()
                .to_string(),
            "missing request for cpu in container container1 of Pod test-pod"
        );

        let mut sidecar = container("restartable-container1", Some("50m"));
        sidecar.restart_policy = Some("Always".to_string());
        let with_init = pod(
            vec![container("container1", Some("100m"))],
            vec![container("init-container1", Some("20m")), sidecar],
        );
        assert_eq!(pod_requests(&[with_init], None, "cpu").unwrap(), want(150));

        assert_eq!(
            pod_requests(&[two()], Some("container3"), "cpu")
                .unwrap_err()
                .to_string(),
            "container container3 not found in Pod test-pod"
        );
    }

    /// Upstream's plain-metric (custom metric) cases, run through the AverageValue path of a
    /// resource without start-up rules (memory), plus one for cpu where they apply.
    mod raw {
        use super::*;

        fn run_raw(
            current: i32,
            target: i64,
            resource: &str,
            pods: &Case,
            samples: &[i64],
        ) -> RawReplicas {
            let metrics = samples
                .iter()
                .enumerate()
                .map(|(i, &value)| {
                    let metric = PodMetric {
                        timestamp: go_zero(),
                        window: Duration::from_secs(60),
                        value,
                    };
                    (format!("test-pod-{i}"), metric)
                })
                .collect();
            raw_resource_replicas(
                current,
                target,
                resource,
                None,
                &pods.pods(),
                &metrics,
                now(),
                &testing_config(),
            )
            .unwrap()
        }

        fn pods(current: i32) -> Case {
            Case {
                current,
                ..Case::default()
            }
        }

        fn want(replicas: i32, average_value: i64) -> RawReplicas {
            RawReplicas {
                replicas,
                average_value,
            }
        }

        #[test]
        fn scale_up_cm() {
            let got = run_raw(3, 15000, "memory", &pods(3), &[20000, 10000, 30000]);
            assert_eq!(got, want(4, 20000));
        }

        #[test]
        fn scale_up_cm_unready_hot_cpu_no_less_scale() {
            let fixture = Case {
                readiness: vec!["True", "True", "False"],
                start_times: vec![cool(), cool(), hot()],
                ..pods(3)
            };
            let got = run_raw(3, 15000, "memory", &fixture, &[50000, 10000, 30000]);
            assert_eq!(got, want(6, 30000));
        }

        #[test]
        fn scale_up_cm_unready_hot_cpu_scale_would_scale_down() {
            let fixture = Case {
                readiness: vec!["False", "True", "False"],
                start_times: vec![hot(), cool(), hot()],
                ..pods(3)
            };
            let got = run_raw(3, 15000, "memory", &fixture, &[50000, 15000, 30000]);
            assert_eq!(got, want(7, 31666));
        }

        /// Not an upstream case: the same samples as above for cpu, where the starting unready
        /// pod is set aside and then counted as idle.
        #[test]
        fn scale_up_cpu_unready_hot_pod_counted_idle() {
            let fixture = Case {
                readiness: vec!["True", "True", "False"],
                start_times: vec![cool(), cool(), hot()],
                ..pods(3)
            };
            let got = run_raw(3, 15000, "cpu", &fixture, &[50000, 10000, 30000]);
            assert_eq!(got, want(4, 30000));
        }

        #[test]
        fn scale_down_cm() {
            let got = run_raw(5, 20000, "memory", &pods(5), &[12000; 5]);
            assert_eq!(got, want(3, 12000));
        }

        #[test]
        fn tolerance_cm() {
            let got = run_raw(3, 20000, "memory", &pods(3), &[20000, 21000, 21000]);
            assert_eq!(got, want(3, 20666));
        }

        #[test]
        fn missing_metrics_no_change_eq() {
            let got = run_raw(5, 20000, "memory", &pods(5), &[20000, 19000, 21000]);
            assert_eq!(got, want(5, 20000));
        }

        #[test]
        fn during_rolling_update_with_max_surge_cm() {
            let fixture = Case {
                phases: vec!["Running"; 3],
                ..pods(2)
            };
            let got = run_raw(2, 17000, "memory", &fixture, &[10000, 10000]);
            assert_eq!(got, want(2, 10000));
        }

        #[test]
        fn no_metrics() {
            let err = raw_resource_replicas(
                2,
                100,
                "memory",
                None,
                &pods(2).pods(),
                &PodMetrics::new(),
                now(),
                &testing_config(),
            )
            .unwrap_err();
            assert!(matches!(err, CalcError::NoMetrics));
        }
    }
}
