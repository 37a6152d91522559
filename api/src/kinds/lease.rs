//! coordination.k8s.io Leases: leader election and node heartbeats.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, or_empty, string, text};
use crate::validation::{Errors, FieldError, Path};

impl Kind for Lease {
    const COLUMNS: &'static [Column] = LEASE_COLUMNS;
    const CREATE_ON_UPDATE: bool = true;
    const UNCONDITIONAL_UPDATE: bool = false;

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else { return };
        if let Some(d) = spec.lease_duration_seconds
            && d <= 0
        {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("leaseDurationSeconds"),
                d,
                "must be greater than 0",
            ));
        }
        if let Some(t) = spec.lease_transitions
            && t < 0
        {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("leaseTransitions"),
                t,
                "must be greater than or equal to 0",
            ));
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(lease_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const LEASE_COLUMNS: &[Column] = &[NAME, string("Holder", doc::LEASE_HOLDER_IDENTITY), AGE];

fn lease_cells(lease: &Lease, now: Timestamp) -> Vec<Value> {
    let holder = or_empty(lease.spec.as_ref().and_then(|s| s.holder_identity.as_ref()));
    vec![
        name(&lease.metadata),
        text(holder),
        age(&lease.metadata, now),
    ]
}

mod doc {
    pub const LEASE_HOLDER_IDENTITY: &str = "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn lease_row() {
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n1"},
            "spec": {"holderIdentity": "n1"}});
        assert_eq!(
            row_of::<Lease>(lease),
            vec![json!("n1"), json!("n1"), json!("<unknown>")]
        );
    }
}
