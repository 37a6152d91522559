//! NodeMetrics and PodMetrics as Tables, which `kubectl get nodes.metrics.k8s.io` asks for:
//! metrics-server's columns (`pkg/api/table.go`), a quantity column per resource, named as
//! the resource, and a pod's usage the sum of its containers'. metrics-server leaves out the
//! columns of an empty list; here they are always there, which kubectl prints the same.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use minik8s_api::quantity::Quantity as Parsed;
use minik8s_api::table::{ColumnDefinition, Row};
use serde::Deserialize;
use serde_json::Value;

use super::super::render::Printer;
use super::ContainerMetrics;
use super::scrape::{cpu_quantity, memory_quantity};

/// The resources the metrics report, in metrics-server's (sorted) column order.
const RESOURCES: [&str; 2] = ["cpu", "memory"];

/// Prints both kinds: they differ only in where the usage is.
pub struct MetricsPrinter;

/// What a row is made of, in either kind.
#[derive(Deserialize)]
struct Printed {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    window: String,
    /// A NodeMetrics' usage.
    usage: Option<BTreeMap<String, Quantity>>,
    /// A PodMetrics' containers.
    #[serde(default)]
    containers: Vec<ContainerMetrics>,
}

fn column(name: &str, format: &str, description: &str) -> ColumnDefinition {
    ColumnDefinition {
        name: name.into(),
        type_: "string".into(),
        format: format.into(),
        description: description.into(),
        priority: 0,
    }
}

/// The sum of `quantities` of `resource`, printed as the metrics print it. Sums are exact for
/// what the metrics hold (nanocores, bytes) well past any node's size.
fn total<'a>(resource: &str, quantities: impl Iterator<Item = &'a Quantity>) -> String {
    let sum: f64 = quantities
        .filter_map(|q| Parsed::parse(&q.0))
        .map(|q| q.as_f64())
        .sum();
    match resource {
        "cpu" => cpu_quantity((sum * 1e9).round() as u64).0,
        _ => memory_quantity(sum.round() as u64).0,
    }
}

impl Printer for MetricsPrinter {
    fn columns(&self) -> Vec<ColumnDefinition> {
        let mut columns = vec![column("Name", "name", "Name of the resource")];
        columns.extend(RESOURCES.iter().map(|r| column(r, "quantity", "")));
        columns.push(column("Window", "duration", ""));
        columns
    }

    fn row(&self, object: &Value, _now: jiff::Timestamp) -> Result<Row, serde_json::Error> {
        let m = Printed::deserialize(object)?;
        let mut cells = vec![Value::from(m.metadata.name.unwrap_or_default())];
        for r in RESOURCES {
            let printed = match &m.usage {
                Some(usage) => total(r, usage.get(r).into_iter()),
                None => total(r, m.containers.iter().filter_map(|c| c.usage.get(r))),
            };
            cells.push(Value::from(printed));
        }
        cells.push(Value::from(m.window));
        Ok(Row::new(cells))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cells(object: Value) -> Vec<Value> {
        MetricsPrinter
            .row(&object, jiff::Timestamp::now())
            .unwrap()
            .cells
    }

    #[test]
    fn columns_are_metrics_servers() {
        let columns = MetricsPrinter.columns();
        let described: Vec<(&str, &str, &str, &str, i32)> = columns
            .iter()
            .map(|c| {
                let c = (&c.name, &c.type_, &c.format, &c.description, c.priority);
                (c.0.as_str(), c.1.as_str(), c.2.as_str(), c.3.as_str(), c.4)
            })
            .collect();
        assert_eq!(
            described,
            [
                ("Name", "string", "name", "Name of the resource", 0),
                ("cpu", "string", "quantity", "", 0),
                ("memory", "string", "quantity", "", 0),
                ("Window", "string", "duration", "", 0),
            ]
        );
    }

    #[test]
    fn a_node_row_is_its_usage() {
        let node = json!({"kind": "NodeMetrics", "metadata": {"name": "n1"},
            "timestamp": "2026-01-01T00:00:00Z", "window": "15.02s",
            "usage": {"cpu": "250m", "memory": "512Mi"}});
        assert_eq!(
            cells(node),
            [json!("n1"), json!("250m"), json!("512Mi"), json!("15.02s")]
        );
        // A resource the kubelet did not report prints as upstream's zero quantity.
        let bare = json!({"metadata": {"name": "n2"}, "window": "1s", "usage": {}});
        assert_eq!(
            cells(bare),
            [json!("n2"), json!("0"), json!("0"), json!("1s")]
        );
    }

    #[test]
    fn a_pod_row_adds_up_its_containers() {
        let pod = json!({"kind": "PodMetrics", "metadata": {"name": "web", "namespace": "ns"},
        "timestamp": "2026-01-01T00:00:00Z", "window": "14.5s",
        "containers": [
            {"name": "a", "usage": {"cpu": "12345n", "memory": "4Mi"}},
            {"name": "b", "usage": {"cpu": "5m", "memory": "1Mi"}},
            {"name": "c", "usage": {"cpu": "1", "memory": "1000"}},
        ]});
        assert_eq!(
            cells(pod),
            [
                json!("web"),
                json!("1005012345n"),
                json!("5243880"),
                json!("14.5s")
            ]
        );
        let two = json!({"metadata": {"name": "db"}, "window": "15s", "containers": [
            {"name": "a", "usage": {"cpu": "10m", "memory": "4Mi"}},
            {"name": "b", "usage": {"cpu": "15m", "memory": "1Mi"}}]});
        assert_eq!(
            cells(two),
            [json!("db"), json!("25m"), json!("5Mi"), json!("15s")]
        );
        let empty = json!({"metadata": {"name": "none"}, "window": "", "containers": []});
        assert_eq!(
            cells(empty),
            [json!("none"), json!("0"), json!("0"), json!("")]
        );
    }
}
