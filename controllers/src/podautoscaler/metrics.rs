//! Pod usage from the resource metrics API (`metrics.k8s.io/v1beta1` PodMetrics), reduced to
//! one value per pod as upstream's metrics client does: a pod counts only when every one of its
//! containers reports the resource (or, for a ContainerResource metric, the named container
//! does). The API's kinds are not in k8s-openapi, so their few fields are declared here.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::api::ListParams;
use minik8s_api::quantity::Quantity as Parsed;
use serde::Deserialize;

use super::replica_calculator::PodMetric;
use crate::util::duration::parse_go;

#[derive(Debug, Deserialize)]
struct PodMetricsList {
    #[serde(default)]
    items: Vec<PodMetrics>,
}

#[derive(Debug, Deserialize)]
pub struct PodMetrics {
    pub metadata: ObjectMeta,
    pub timestamp: Time,
    #[serde(default)]
    pub window: String,
    #[serde(default)]
    pub containers: Vec<ContainerMetrics>,
}

#[derive(Debug, Deserialize)]
pub struct ContainerMetrics {
    pub name: String,
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
}

/// Why no usage could be had; the messages are upstream's.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("unable to fetch metrics from resource metrics API: {0}")]
    Fetch(kube::Error),
    #[error("no metrics returned from resource metrics API")]
    Empty,
    #[error("failed to get container metrics: {0}")]
    Container(String),
}

/// The PodMetrics of the pods `selector` picks in `namespace`.
pub async fn list(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> Result<Vec<PodMetrics>, MetricsError> {
    let request = list_request(namespace, selector)
        .map_err(|e| MetricsError::Fetch(kube::Error::BuildRequest(e)))?;
    let list: PodMetricsList = client.request(request).await.map_err(MetricsError::Fetch)?;
    Ok(list.items)
}

/// The list request, built (and its selector encoded) by kube's request builder.
fn list_request(
    namespace: &str,
    selector: &str,
) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
    kube::core::Request::new(format!(
        "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods"
    ))
    .list(&ListParams::default().labels(selector))
}

/// Usage of `resource` per pod, in thousandths (millicores, millibytes), with the time and
/// window of its reading: every container summed, or only `container`'s.
pub fn per_pod(
    items: &[PodMetrics],
    resource: &str,
    container: Option<&str>,
) -> Result<HashMap<String, PodMetric>, MetricsError> {
    if items.is_empty() {
        return Err(MetricsError::Empty);
    }
    let mut out = HashMap::new();
    for pod in items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let window = parse_go(&pod.window).unwrap_or(Duration::ZERO);
        let value = match container {
            Some(wanted) => {
                let Some(c) = pod.containers.iter().find(|c| c.name == wanted) else {
                    continue;
                };
                match milli(c.usage.get(resource)) {
                    Some(v) => v,
                    None => {
                        let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
                        return Err(MetricsError::Container(format!(
                            "failed to get resource {resource} for container {wanted} in pod {namespace}/{name}"
                        )));
                    }
                }
            }
            None => {
                let values: Option<Vec<i64>> = pod
                    .containers
                    .iter()
                    .map(|c| milli(c.usage.get(resource)))
                    .collect();
                match values {
                    Some(v) if !v.is_empty() => v.iter().sum(),
                    _ => continue,
                }
            }
        };
        out.insert(
            name,
            PodMetric {
                timestamp: pod.timestamp.0,
                window,
                value,
            },
        );
    }
    Ok(out)
}

fn milli(q: Option<&Quantity>) -> Option<i64> {
    let v = Parsed::parse(&q?.0)?.milli_value();
    i64::try_from(v).ok()
}

/// `value` thousandths as a Quantity, printed as upstream's `NewMilliQuantity(v, DecimalSI)`.
pub fn milli_quantity(value: i64) -> Quantity {
    let text = Parsed::parse(&format!("{value}m"))
        .and_then(|q| q.canonical())
        .unwrap_or_else(|| format!("{value}m"));
    Quantity(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, containers: &[(&str, &[(&str, &str)])]) -> PodMetrics {
        PodMetrics {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            timestamp: Time("2026-01-01T00:00:00Z".parse().unwrap()),
            window: "15s".into(),
            containers: containers
                .iter()
                .map(|(c, usage)| ContainerMetrics {
                    name: c.to_string(),
                    usage: usage
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn pods_sum_their_containers_and_skip_incomplete_ones() {
        let items = vec![
            pod("a", &[("x", &[("cpu", "100m")]), ("y", &[("cpu", "50m")])]),
            pod("b", &[("x", &[("cpu", "1")]), ("y", &[("memory", "1Mi")])]),
        ];
        let m = per_pod(&items, "cpu", None).unwrap();
        assert_eq!(m["a"].value, 150);
        assert_eq!(m["a"].window, Duration::from_secs(15));
        assert!(!m.contains_key("b"));
        let m = per_pod(&items, "cpu", Some("x")).unwrap();
        assert_eq!((m["a"].value, m["b"].value), (100, 1000));
        let err = per_pod(&items, "cpu", Some("y")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed to get container metrics: failed to get resource cpu for container y in pod ns/b"
        );
        assert_eq!(
            per_pod(&[], "cpu", None).unwrap_err().to_string(),
            "no metrics returned from resource metrics API"
        );
    }

    #[test]
    fn milli_quantities_print_as_upstream() {
        assert_eq!(milli_quantity(250).0, "250m");
        assert_eq!(milli_quantity(1000).0, "1");
        assert_eq!(milli_quantity(52_428_800_000).0, "52428800");
        let request = list_request("ns", "app=a,b!=c").unwrap();
        assert_eq!(
            request.uri().path(),
            "/apis/metrics.k8s.io/v1beta1/namespaces/ns/pods"
        );
        let query: Vec<&str> = request
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .collect();
        assert_eq!(query, ["labelSelector=app%3Da%2Cb%21%3Dc"]);
    }
}
