//! ConfigMaps and Secrets: the key rules they share, and Secrets' write-only `stringData`.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, num, or_empty, string, text};
use crate::validation::{Errors, FieldError, Path, immutable};

impl Kind for ConfigMap {
    const COLUMNS: &'static [Column] = CONFIG_MAP_COLUMNS;

    fn default_fields(&mut self) {
        self.data.get_or_insert_with(BTreeMap::new);
    }

    fn validate(&self, errs: &mut Errors) {
        let mut total = 0;
        for (k, v) in self.data.iter().flatten() {
            validate_config_key(k, &Path::new("data"), errs);
            total += v.len();
        }
        for (k, v) in self.binary_data.iter().flatten() {
            validate_config_key(k, &Path::new("binaryData"), errs);
            if self.data.as_ref().is_some_and(|d| d.contains_key(k)) {
                errs.push(FieldError::invalid(
                    &Path::new("data").key(k),
                    k,
                    "duplicate of key present in binaryData",
                ));
            }
            total += v.0.len();
        }
        if total > 1024 * 1024 {
            errs.push(FieldError::too_long(&Path::new(""), 1024 * 1024));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if old.immutable == Some(true) {
            if self.immutable != Some(true) {
                errs.push(FieldError::forbidden(
                    &Path::new("immutable"),
                    "field is immutable when `immutable` is set",
                ));
            }
            if self.data != old.data {
                errs.push(FieldError::forbidden(
                    &Path::new("data"),
                    "field is immutable when `immutable` is set",
                ));
            }
            if self.binary_data != old.binary_data {
                errs.push(FieldError::forbidden(
                    &Path::new("binaryData"),
                    "field is immutable when `immutable` is set",
                ));
            }
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(config_map_cells(self, now))
    }
}

/// ConfigMap and Secret keys: `[-._a-zA-Z0-9]+`, not `.` or `..`, at most 253 bytes.
fn validate_config_key(k: &str, path: &Path, errs: &mut Errors) {
    let ok = !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && !k.starts_with("..")
        && k.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.');
    if !ok {
        errs.push(FieldError::invalid(
            &path.key(k),
            k,
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        ));
    }
}

impl Kind for Secret {
    const COLUMNS: &'static [Column] = SECRET_COLUMNS;
    const FIELDS: &'static [&'static str] = &["type"];

    fn default_fields(&mut self) {
        self.type_.get_or_insert_with(|| "Opaque".into());
        fold_string_data(self);
    }

    fn validate(&self, errs: &mut Errors) {
        let mut total = 0;
        for (k, v) in self.data.iter().flatten() {
            validate_config_key(k, &Path::new("data"), errs);
            total += v.0.len();
        }
        for (k, v) in self.string_data.iter().flatten() {
            validate_config_key(k, &Path::new("stringData"), errs);
            total += v.len();
        }
        if total > 1024 * 1024 {
            errs.push(FieldError::too_long(&Path::new("data"), 1024 * 1024));
        }
        let has = |k: &str| {
            self.data.as_ref().is_some_and(|d| d.contains_key(k))
                || self.string_data.as_ref().is_some_and(|d| d.contains_key(k))
        };
        match self.type_.as_deref() {
            Some("kubernetes.io/tls") => {
                for k in ["tls.crt", "tls.key"] {
                    if !has(k) {
                        errs.push(FieldError::required(&Path::new("data").key(k), ""));
                    }
                }
            }
            Some("kubernetes.io/dockerconfigjson") if !has(".dockerconfigjson") => {
                errs.push(FieldError::required(
                    &Path::new("data").key(".dockerconfigjson"),
                    "",
                ));
            }
            Some("kubernetes.io/basic-auth") if !has("username") && !has("password") => {
                errs.push(FieldError::required(&Path::new("data").key("username"), ""));
            }
            Some("kubernetes.io/ssh-auth") if !has("ssh-privatekey") => {
                errs.push(FieldError::required(
                    &Path::new("data").key("ssh-privatekey"),
                    "",
                ));
            }
            _ => {}
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        immutable(&self.type_, &old.type_, &Path::new("type"), errs);
        if old.immutable == Some(true) {
            if self.immutable != Some(true) {
                errs.push(FieldError::forbidden(
                    &Path::new("immutable"),
                    "field is immutable when `immutable` is set",
                ));
            }
            if self.data != old.data {
                errs.push(FieldError::forbidden(
                    &Path::new("data"),
                    "field is immutable when `immutable` is set",
                ));
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "type" => self.type_.clone(),
            _ => None,
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(secret_cells(self, now))
    }
}

/// `stringData` is write-only: it is merged into `data` and never stored.
fn fold_string_data(s: &mut Secret) {
    if let Some(sd) = s.string_data.take() {
        let data = s.data.get_or_insert_with(BTreeMap::new);
        for (k, v) in sd {
            data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const CONFIG_MAP_COLUMNS: &[Column] = &[NAME, string("Data", doc::CONFIG_MAP_DATA), AGE];

const SECRET_COLUMNS: &[Column] = &[
    NAME,
    string("Type", doc::SECRET_TYPE),
    string("Data", doc::SECRET_DATA),
    AGE,
];

fn config_map_cells(cm: &ConfigMap, now: Timestamp) -> Vec<Value> {
    let n = cm.data.as_ref().map_or(0, BTreeMap::len)
        + cm.binary_data.as_ref().map_or(0, BTreeMap::len);
    vec![name(&cm.metadata), num(n as i64), age(&cm.metadata, now)]
}

fn secret_cells(secret: &Secret, now: Timestamp) -> Vec<Value> {
    // stringData is merged into data on the way in, so its keys count too.
    let keys: BTreeSet<&String> = secret
        .data
        .iter()
        .flat_map(BTreeMap::keys)
        .chain(secret.string_data.iter().flat_map(BTreeMap::keys))
        .collect();
    vec![
        name(&secret.metadata),
        text(or_empty(secret.type_.as_ref())),
        num(keys.len() as i64),
        age(&secret.metadata, now),
    ]
}

mod doc {
    pub const SECRET_TYPE: &str = "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types";
    pub const SECRET_DATA: &str = "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4";
    pub const CONFIG_MAP_DATA: &str = "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn config_map_and_secret_rows() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
            "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AAE="}});
        assert_eq!(
            row_of::<ConfigMap>(cm),
            vec![json!("cm"), json!(3), json!("<unknown>")]
        );
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "type": "Opaque", "data": {"a": "MQ=="}, "stringData": {"a": "x", "b": "y"}});
        assert_eq!(
            row_of::<Secret>(secret),
            vec![json!("s"), json!("Opaque"), json!(2), json!("<unknown>")]
        );
    }
}
