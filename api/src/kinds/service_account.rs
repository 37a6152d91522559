//! ServiceAccounts; their tokens are the apiserver's business (handlers/serviceaccounts).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ServiceAccount;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, num, string};

impl Kind for ServiceAccount {
    const COLUMNS: &'static [Column] = SERVICE_ACCOUNT_COLUMNS;
    const RETURN_DELETED: bool = true;

    fn row(&self, now: Timestamp) -> Row {
        Row::new(service_account_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const SERVICE_ACCOUNT_COLUMNS: &[Column] =
    &[NAME, string("Secrets", doc::SERVICE_ACCOUNT_SECRETS), AGE];

fn service_account_cells(sa: &ServiceAccount, now: Timestamp) -> Vec<Value> {
    let n = sa.secrets.as_ref().map_or(0, Vec::len);
    vec![name(&sa.metadata), num(n as i64), age(&sa.metadata, now)]
}

mod doc {
    pub const SERVICE_ACCOUNT_SECRETS: &str = "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn service_account_row() {
        let sa =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        assert_eq!(
            row_of::<ServiceAccount>(sa),
            vec![json!("default"), json!(0), json!("<unknown>")]
        );
    }
}
