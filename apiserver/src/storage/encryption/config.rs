//! `--encryption-provider-config`: upstream's `EncryptionConfiguration`
//! (`apiserver.config.k8s.io/v1`), checked as upstream checks it, into a transformer per
//! group-resource.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use serde::Deserialize;

use super::providers::{Provider, ProviderKind, Transformer};

/// Why the file was refused; the messages are upstream's.
#[derive(Debug, thiserror::Error)]
#[error("error while parsing file: {0}")]
pub struct ConfigError(pub String);

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EncryptionConfiguration {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    resources: Vec<ResourceConfiguration>,
}

#[derive(Debug, Deserialize)]
struct ResourceConfiguration {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<ProviderConfiguration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderConfiguration {
    aesgcm: Option<KeysConfiguration>,
    aescbc: Option<KeysConfiguration>,
    secretbox: Option<KeysConfiguration>,
    identity: Option<serde_json::Value>,
    kms: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
struct KeysConfiguration {
    #[serde(default)]
    keys: Vec<Key>,
}

#[derive(Debug, Deserialize)]
struct Key {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
}

/// A group and resource, as the configuration names them (`secrets`, `deployments.apps`,
/// `*.apps`, `*.` for every core resource, `*.*` for all).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    /// Upstream's `schema.ParseGroupResource`: the group follows the first dot.
    pub fn parse(s: &str) -> GroupResource {
        match s.split_once('.') {
            Some((resource, group)) => GroupResource {
                group: group.into(),
                resource: resource.into(),
            },
            None => GroupResource {
                group: String::new(),
                resource: s.into(),
            },
        }
    }
}

/// The transformer of each configured group-resource.
#[derive(Clone, Debug, Default)]
pub struct Transformers {
    by_resource: BTreeMap<GroupResource, Transformer>,
}

impl Transformers {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Transformers, ConfigError> {
        let data = std::fs::read(path).map_err(|e| {
            ConfigError(format!(
                "error opening encryption provider configuration file {:?}: {e}",
                path.display().to_string()
            ))
        })?;
        if data.is_empty() {
            return Err(ConfigError(format!(
                "encryption provider configuration file {:?} is empty",
                path.display().to_string()
            )));
        }
        Self::parse(&data)
    }

    /// Parses and checks a configuration (YAML or JSON).
    pub fn parse(data: &[u8]) -> Result<Transformers, ConfigError> {
        let config: EncryptionConfiguration =
            serde_yaml::from_slice(data).map_err(|e| ConfigError(e.to_string()))?;
        let gv = config.api_version.as_str();
        if config.kind != "EncryptionConfiguration"
            || !matches!(gv, "apiserver.config.k8s.io/v1" | "apiserver.k8s.io/v1")
        {
            return Err(ConfigError(format!(
                "no kind {:?} is registered for version {gv:?}",
                config.kind
            )));
        }
        let errors = validate(&config);
        if !errors.is_empty() {
            return Err(ConfigError(aggregate(errors)));
        }
        let mut lists: BTreeMap<GroupResource, Vec<Provider>> = BTreeMap::new();
        for entry in &config.resources {
            let providers = entry
                .providers
                .iter()
                .map(provider)
                .collect::<Result<Vec<_>, _>>()?;
            for resource in &entry.resources {
                lists
                    .entry(GroupResource::parse(resource))
                    .or_default()
                    .extend(providers.iter().cloned());
            }
        }
        Ok(Transformers {
            by_resource: lists
                .into_iter()
                .map(|(gr, providers)| (gr, Transformer::new(providers)))
                .collect(),
        })
    }

    /// The transformer of `group`/`resource`: its own, else its group's (`*.<group>`), else
    /// the one for everything (`*.*`); `None` stores it as it is.
    pub fn for_resource(&self, group: &str, resource: &str) -> Option<&Transformer> {
        let find = |group: &str, resource: &str| {
            self.by_resource.get(&GroupResource {
                group: group.into(),
                resource: resource.into(),
            })
        };
        find(group, resource)
            .or_else(|| find(group, "*"))
            .or_else(|| find("*", "*"))
    }

    pub fn is_empty(&self) -> bool {
        self.by_resource.is_empty()
    }
}

fn provider(config: &ProviderConfiguration) -> Result<Provider, ConfigError> {
    let (kind, keys) = match config {
        ProviderConfiguration {
            aesgcm: Some(k), ..
        } => (ProviderKind::AesGcm, k),
        ProviderConfiguration {
            aescbc: Some(k), ..
        } => (ProviderKind::AesCbc, k),
        ProviderConfiguration {
            secretbox: Some(k), ..
        } => (ProviderKind::Secretbox, k),
        ProviderConfiguration {
            identity: Some(_), ..
        } => return Ok(Provider::identity()),
        _ => {
            return Err(ConfigError(
                "KMS providers are not supported by minik8s; use aescbc, aesgcm or secretbox"
                    .into(),
            ));
        }
    };
    let keys = keys
        .keys
        .iter()
        .map(|k| (k.name.clone(), decode(&k.secret).unwrap_or_default()))
        .collect();
    // Sizes were checked by `validate`.
    Provider::keyed(kind, keys)
        .ok_or_else(|| ConfigError("secret is not of the expected length".into()))
}

fn decode(secret: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(secret)
        .ok()
}

/// Go's aggregate of field errors: one as itself, several in brackets.
fn aggregate(errors: Vec<String>) -> String {
    if errors.len() == 1 {
        errors.into_iter().next().unwrap_or_default()
    } else {
        format!("[{}]", errors.join(", "))
    }
}

/// Upstream's `ValidateEncryptionConfiguration`, for the providers served here.
fn validate(config: &EncryptionConfiguration) -> Vec<String> {
    let mut errors = Vec::new();
    if config.resources.is_empty() {
        errors.push("resources: Required value: at least one resources is required".into());
        return errors;
    }
    for (i, entry) in config.resources.iter().enumerate() {
        let r = format!("resources[{i}].resources");
        let p = format!("resources[{i}].providers");
        if entry.resources.is_empty() {
            errors.push(format!("{r}: Required value: at least one {r} is required"));
        }
        errors.extend(validate_resources(&entry.resources, &r));
        if entry.providers.is_empty() {
            errors.push(format!("{p}: Required value: at least one {p} is required"));
        }
        for (j, provider) in entry.providers.iter().enumerate() {
            let path = format!("{p}[{j}]");
            let given = [
                provider.kms.is_some(),
                provider.aesgcm.is_some(),
                provider.aescbc.is_some(),
                provider.secretbox.is_some(),
                provider.identity.is_some(),
            ]
            .iter()
            .filter(|x| **x)
            .count();
            if given == 0 {
                errors.push(format!("{path}: Invalid value: provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"));
                continue;
            }
            if given > 1 {
                errors.push(format!("{path}: Invalid value: more than one provider specified in a single element, should split into different list elements"));
                continue;
            }
            let (name, keys, sizes): (&str, _, &[usize]) = match provider {
                ProviderConfiguration {
                    aesgcm: Some(k), ..
                } => ("aesgcm", k, &[16, 24, 32]),
                ProviderConfiguration {
                    aescbc: Some(k), ..
                } => ("aescbc", k, &[16, 24, 32]),
                ProviderConfiguration {
                    secretbox: Some(k), ..
                } => ("secretbox", k, &[32]),
                _ => continue,
            };
            errors.extend(validate_keys(
                &keys.keys,
                &format!("{path}.{name}.keys"),
                sizes,
            ));
        }
    }
    errors
}

fn validate_keys(keys: &[Key], path: &str, sizes: &[usize]) -> Vec<String> {
    let mut errors = Vec::new();
    if keys.is_empty() {
        errors.push(format!(
            "{path}: Required value: at least one keys is required"
        ));
        return errors;
    }
    let expected = format!(
        "[{}]",
        sizes
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    for (i, key) in keys.iter().enumerate() {
        let path = format!("{path}[{i}]");
        if key.name.is_empty() {
            errors.push(format!(
                "{path}.name: Required value: name is a mandatory field for a key"
            ));
        }
        if key.secret.is_empty() {
            errors.push(format!(
                "{path}.secret: Required value: secret is a mandatory field for a key"
            ));
            continue;
        }
        match decode(&key.secret) {
            None => errors.push(format!(
                "{path}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded"
            )),
            Some(secret) if !sizes.contains(&secret.len()) => errors.push(format!(
                "{path}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {expected}",
                secret.len()
            )),
            Some(_) => {}
        }
    }
    errors
}

fn validate_resources(resources: &[String], path: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let quoted = format!(
        "[]string{{{}}}",
        resources
            .iter()
            .map(|r| format!("{r:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let parsed: Vec<GroupResource> = resources.iter().map(|r| GroupResource::parse(r)).collect();
    let mut duplicate = false;
    let mut overlap = false;
    for (i, a) in parsed.iter().enumerate() {
        for (j, b) in parsed.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b {
                duplicate = true;
                continue;
            }
            if (a.group == "*" && a.resource == "*")
                || (a.group == b.group && (a.resource == "*" || b.resource == "*"))
            {
                overlap = true;
            }
        }
    }
    if duplicate {
        errors.push(format!(
            "{path}: Invalid value: {quoted}: the same resource cannot be specified multiple times"
        ));
    }
    if overlap {
        errors.push(format!("{path}: Invalid value: {quoted}: using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked"));
    }
    for (j, (res, gr)) in resources.iter().zip(&parsed).enumerate() {
        let invalid = |msg: &str| format!("{path}[{j}]: Invalid value: {res:?}: {msg}");
        if res.to_lowercase() != *res {
            errors.push(invalid("resource name should not contain capital letters"));
        } else if res == "*" {
            errors.push(invalid("use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"));
        } else if matches!(
            res.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            errors.push(invalid(
                "resources which do not have REST API/s cannot be encrypted",
            ));
        } else if gr.group == "events.k8s.io" {
            errors.push(invalid("'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file"));
        } else if gr.group == "extensions" {
            errors.push(invalid(
                "'extensions' group has been removed and cannot be used for encryption",
            ));
        } else if gr.group == "*" && gr.resource != "*" {
            errors.push(invalid(
                "encrypting the same resource across groups is not supported",
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY32: &str = "c2VjcmV0IGlzIHNlY3VyZSwgb3IgaXMgaXQ/IDMyYiE="; // 32 bytes

    fn config(resources: &str, providers: &str) -> String {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: {resources}\n  providers: {providers}\n"
        )
    }

    #[test]
    fn resources_map_to_their_providers_with_wildcards() {
        let yaml = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets, '*.apps']\n  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: {KEY32}\n  - identity: {{}}\n- resources: ['*.*']\n  providers:\n  - secretbox:\n      keys:\n      - name: k\n        secret: {KEY32}\n"
        );
        let t = Transformers::parse(yaml.as_bytes()).unwrap();
        let w = |g: &str, r: &str| {
            t.for_resource(g, r)
                .unwrap()
                .to_storage(b"x", b"/k")
                .unwrap()
        };
        assert!(w("", "secrets").starts_with(b"k8s:enc:aescbc:v1:key1:"));
        assert!(w("apps", "deployments").starts_with(b"k8s:enc:aescbc:v1:key1:"));
        assert!(w("", "configmaps").starts_with(b"k8s:enc:secretbox:v1:k:"));
    }

    #[test]
    fn unlisted_resources_are_not_transformed() {
        let yaml = config(
            "[secrets]",
            &format!("[{{aesgcm: {{keys: [{{name: k, secret: {KEY32}}}]}}}}]"),
        );
        let t = Transformers::parse(yaml.as_bytes()).unwrap();
        assert!(t.for_resource("", "configmaps").is_none());
        assert!(t.for_resource("", "secrets").is_some());
    }

    #[test]
    fn bad_configurations_are_refused_with_upstreams_messages() {
        let short = config(
            "[secrets]",
            "[{aescbc: {keys: [{name: k, secret: c2hvcnQ=}]}}]",
        );
        assert_eq!(
            Transformers::parse(short.as_bytes())
                .unwrap_err()
                .to_string(),
            "error while parsing file: resources[0].providers[0].aescbc.keys[0].secret: Invalid value: \"REDACTED\": secret is not of the expected length, got 5, expected one of [16 24 32]"
        );
        let none = config("[secrets]", "[]");
        assert_eq!(
            Transformers::parse(none.as_bytes())
                .unwrap_err()
                .to_string(),
            "error while parsing file: resources[0].providers: Required value: at least one resources[0].providers is required"
        );
        let two = config(
            "[secrets]",
            &format!("[{{identity: {{}}, secretbox: {{keys: [{{name: k, secret: {KEY32}}}]}}}}]"),
        );
        assert!(
            Transformers::parse(two.as_bytes())
                .unwrap_err()
                .to_string()
                .ends_with("more than one provider specified in a single element, should split into different list elements")
        );
        let star = config("['*']", "[{identity: {}}]");
        assert!(
            Transformers::parse(star.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("use '*.' to encrypt all the resources")
        );
        let kind = "apiVersion: v1\nkind: ConfigMap\n";
        assert!(Transformers::parse(kind.as_bytes()).is_err());
    }
}
