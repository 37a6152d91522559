//! apps/v1 ControllerRevisions: the snapshots of a template that DaemonSets and StatefulSets
//! roll back to. A snapshot is history, so its data never changes; only its revision number
//! may be moved (a controller renumbers a revision it reuses).

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, num, string, text};
use crate::validation::{ErrorKind, Errors, FieldError, Path};

impl Kind for ControllerRevision {
    const COLUMNS: &'static [Column] = CONTROLLER_REVISION_COLUMNS;

    fn validate(&self, errs: &mut Errors) {
        if self.data.is_none() {
            errs.push(FieldError::required(
                &Path::new("data"),
                "data is mandatory",
            ));
        }
        if self.revision < 0 {
            errs.push(FieldError::invalid(
                &Path::new("revision"),
                self.revision,
                "must be greater than or equal to 0",
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if self.data != old.data {
            // Upstream prints the decoded object as the value; minik8s leaves it out.
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &Path::new("data"),
                None,
                "field is immutable",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(controller_revision_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const CONTROLLER_REVISION_COLUMNS: &[Column] = &[
    NAME,
    string("Controller", "Controller of the object"),
    string("Revision", doc::CONTROLLER_REVISION_REVISION),
    AGE,
];

fn controller_revision_cells(cr: &ControllerRevision, now: Timestamp) -> Vec<Value> {
    vec![
        name(&cr.metadata),
        text(controller(cr)),
        num(cr.revision),
        age(&cr.metadata, now),
    ]
}

/// The controlling owner as `kind.group/name` in lower case (`daemonset.apps/fluentd`), or
/// `<none>`.
fn controller(cr: &ControllerRevision) -> String {
    let Some(owner) = cr
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    else {
        return "<none>".to_string();
    };
    let group = match owner.api_version.split_once('/') {
        Some((group, _)) => group,
        None => "",
    };
    let kind = match (owner.kind.as_str(), group) {
        ("", "") => return owner.name.clone(),
        (kind, "") => kind.to_string(),
        (kind, group) => format!("{kind}.{group}"),
    };
    format!("{}/{}", kind.to_lowercase(), owner.name)
}

mod doc {
    pub const CONTROLLER_REVISION_REVISION: &str =
        "revision indicates the revision of the state represented by Data.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    fn revision(data: Value, revision: i64) -> ControllerRevision {
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": "web-7d4b9c", "namespace": "default"}, "data": data, "revision": revision}))
        .unwrap()
    }

    fn errors(new: &ControllerRevision, old: Option<&ControllerRevision>) -> Vec<String> {
        let mut errs = Vec::new();
        match old {
            Some(old) => new.validate_update(old, &mut errs),
            None => new.validate(&mut errs),
        }
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn validation() {
        let old = revision(json!({"spec": {"template": {}}}), 1);
        assert!(errors(&old, None).is_empty());
        assert_eq!(
            errors(&revision(json!(null), -1), None),
            [
                "data: Required value: data is mandatory",
                "revision: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
        // The number may move; the snapshot may not.
        assert!(errors(&revision(json!({"spec": {"template": {}}}), 5), Some(&old)).is_empty());
        assert_eq!(
            errors(&revision(json!({"spec": {}}), 1), Some(&old)),
            ["data: Invalid value: field is immutable"]
        );
    }

    #[test]
    fn controller_revision_rows() {
        let row = |owners: Value| {
            row_of::<ControllerRevision>(
                json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": "fluentd-5b8f", "creationTimestamp": ago(60), "ownerReferences": owners},
                "data": {}, "revision": 3}),
            )
        };
        assert_eq!(
            row(
                json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fluentd", "uid": "u", "controller": true}])
            ),
            vec![
                json!("fluentd-5b8f"),
                json!("daemonset.apps/fluentd"),
                json!(3),
                json!("60s")
            ]
        );
        assert_eq!(
            row(
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": true}])
            )[1],
            "pod/p"
        );
        assert_eq!(
            row(
                json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u"}])
            )[1],
            "<none>"
        );
        assert_eq!(row(json!([]))[1], "<none>");
    }
}
