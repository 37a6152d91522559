//! Namespaces: the `default` namespace that may not go, and deletion that waits until the
//! namespace is empty (Terminating, finalized by the namespace controller).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, NamespaceSpec, NamespaceStatus};
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, or_empty, string, text};
use crate::validation::{Errors, FieldError, Path, qualified_name};

impl Kind for Namespace {
    const COLUMNS: &'static [Column] = NAMESPACE_COLUMNS;
    const FIELDS: &'static [&'static str] = &["status.phase"];
    const RETURN_DELETED: bool = true;

    fn default_fields(&mut self) {
        if let Some(name) = self.metadata.name.clone() {
            self.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert("kubernetes.io/metadata.name".into(), name);
        }
        let status = self.status.get_or_insert_with(NamespaceStatus::default);
        status.phase.get_or_insert_with(|| "Active".into());
    }

    fn prepare_create(&mut self) {
        self.status = Some(NamespaceStatus {
            phase: Some("Active".into()),
            ..Default::default()
        });
        let finalizers = self
            .spec
            .get_or_insert_with(NamespaceSpec::default)
            .finalizers
            .get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == "kubernetes") {
            finalizers.push("kubernetes".into());
        }
    }

    fn keep_status(&mut self, old: &Self) {
        self.status = old.status.clone();
        // spec.finalizers changes only through the finalize subresource.
        self.spec = old.spec.clone();
    }

    fn keep_spec(&mut self, old: &Self) {
        self.spec = old.spec.clone();
    }

    fn validate(&self, errs: &mut Errors) {
        for (i, f) in self
            .spec
            .iter()
            .flat_map(|s| s.finalizers.iter().flatten())
            .enumerate()
        {
            for e in qualified_name(f) {
                errs.push(FieldError::invalid(
                    &Path::new("spec").child("finalizers").index(i),
                    f,
                    e,
                ));
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "status.phase" => self.status.as_ref().and_then(|s| s.phase.clone()),
            _ => None,
        }
    }

    fn begin_delete(&mut self) -> bool {
        self.status.get_or_insert_with(Default::default).phase = Some("Terminating".into());
        !self.finalized()
    }

    fn finalized(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.finalizers.as_ref())
            .is_none_or(|f| f.is_empty())
    }

    fn deletion_forbidden(&self) -> Option<&'static str> {
        match self.metadata.name.as_deref() {
            Some("default" | "kube-system" | "kube-public") => {
                Some("this namespace may not be deleted")
            }
            _ => None,
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(namespace_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const NAMESPACE_COLUMNS: &[Column] = &[NAME, string("Status", "The status of the namespace"), AGE];

fn namespace_cells(ns: &Namespace, now: Timestamp) -> Vec<Value> {
    let phase = or_empty(ns.status.as_ref().and_then(|s| s.phase.as_ref()));
    vec![name(&ns.metadata), text(phase), age(&ns.metadata, now)]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn namespace_row() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "creationTimestamp": ago(86400 * 30)},
            "status": {"phase": "Active"}});
        assert_eq!(
            row_of::<Namespace>(ns),
            vec![json!("default"), json!("Active"), json!("30d")]
        );
    }
}
