//! ComponentStatus: the control plane's health as `kubectl get componentstatuses` shows it.
//! Upstream deprecated it in 1.19 but still serves it, and scripts and monitoring still ask.
//! Nothing is stored: the server computes each status on read (see the API server's
//! `handlers::component_status`); this is how one prints.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ComponentStatus;

use crate::strategy::Kind;
use crate::table::{Column, NAME, Row, name, string, text};

impl Kind for ComponentStatus {
    const COLUMNS: &'static [Column] = &[
        NAME,
        string("Status", "Status of the component conditions"),
        string("Message", "Message of the component conditions"),
        string("Error", "Error of the component conditions"),
    ];

    fn row(&self, _now: Timestamp) -> Row {
        let healthy = self
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Healthy");
        let (status, message, error) = match healthy {
            Some(c) => (
                if c.status == "True" {
                    "Healthy"
                } else {
                    "Unhealthy"
                },
                c.message.clone().unwrap_or_default(),
                c.error.clone().unwrap_or_default(),
            ),
            None => ("Unknown", String::new(), String::new()),
        };
        Row::new(vec![
            name(&self.metadata),
            text(status),
            text(message),
            text(error),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_as_upstream_prints_them() {
        let cs: ComponentStatus = serde_json::from_value(json!({"metadata": {"name": "etcd-0"},
            "conditions": [{"type": "Healthy", "status": "False", "message": "",
                "error": "timed out"}]}))
        .unwrap();
        assert_eq!(
            cs.row(Timestamp::now()).cells,
            vec![
                json!("etcd-0"),
                json!("Unhealthy"),
                json!(""),
                json!("timed out")
            ]
        );
    }
}
