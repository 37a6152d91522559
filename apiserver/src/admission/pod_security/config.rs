//! The plugin's configuration as kube-apiserver takes it: a `PodSecurityConfiguration`
//! (pod-security.admission.config.k8s.io/v1) inside the `AdmissionConfiguration` file named by
//! `--admission-control-config-file`, embedded or by `path`. Only the PodSecurity entry is
//! read; a file without one leaves the defaults (everything privileged, nothing exempt).

use std::path::Path;

use serde::Deserialize;

use super::api::{Level, LevelVersion, Policy, Version};
use super::{Configuration, Exemptions};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("PodSecurity configuration: {0}")]
    Invalid(String),
}

#[derive(Deserialize)]
struct AdmissionConfiguration {
    #[serde(default)]
    plugins: Vec<PluginEntry>,
}

#[derive(Deserialize)]
struct PluginEntry {
    name: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    configuration: Option<serde_yaml::Value>,
}

#[derive(Default, Deserialize)]
struct PodSecurityConfiguration {
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    exemptions: ExemptionsFile,
}

#[derive(Default, Deserialize)]
struct Defaults {
    enforce: Option<String>,
    #[serde(rename = "enforce-version")]
    enforce_version: Option<String>,
    audit: Option<String>,
    #[serde(rename = "audit-version")]
    audit_version: Option<String>,
    warn: Option<String>,
    #[serde(rename = "warn-version")]
    warn_version: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExemptionsFile {
    #[serde(default)]
    usernames: Vec<String>,
    #[serde(default)]
    runtime_classes: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn parse<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    serde_yaml::from_str(text).map_err(|source| ConfigError::Parse {
        path: path.display().to_string(),
        source,
    })
}

/// The PodSecurity configuration of the admission configuration file at `path`.
pub fn load(path: &Path) -> Result<Configuration, ConfigError> {
    let admission: AdmissionConfiguration = parse(&read(path)?, path)?;
    let Some(entry) = admission
        .plugins
        .into_iter()
        .find(|p| p.name == super::PLUGIN_NAME)
    else {
        return Ok(Configuration::default());
    };
    let file: PodSecurityConfiguration = match (entry.configuration, entry.path) {
        (Some(embedded), _) => {
            serde_yaml::from_value(embedded).map_err(|source| ConfigError::Parse {
                path: path.display().to_string(),
                source,
            })?
        }
        (None, Some(relative)) => {
            let target = path.parent().unwrap_or(Path::new(".")).join(relative);
            parse(&read(&target)?, &target)?
        }
        (None, None) => PodSecurityConfiguration::default(),
    };
    from_file(file)
}

fn level_version(
    mode: &str,
    level: Option<String>,
    version: Option<String>,
) -> Result<LevelVersion, ConfigError> {
    let level = match level.as_deref() {
        None | Some("") => Level::Privileged,
        Some(l) => Level::parse(l)
            .map_err(|(_, why)| ConfigError::Invalid(format!("defaults.{mode}: {l:?}: {why}")))?,
    };
    let version = match version.as_deref() {
        None | Some("") => Version::Latest,
        Some(v) => Version::parse(v).map_err(|(_, why)| {
            ConfigError::Invalid(format!("defaults.{mode}-version: {v:?}: {why}"))
        })?,
    };
    Ok(LevelVersion { level, version })
}

fn from_file(file: PodSecurityConfiguration) -> Result<Configuration, ConfigError> {
    let d = file.defaults;
    Ok(Configuration {
        defaults: Policy {
            enforce: level_version("enforce", d.enforce, d.enforce_version)?,
            audit: level_version("audit", d.audit, d.audit_version)?,
            warn: level_version("warn", d.warn, d.warn_version)?,
        },
        exemptions: Exemptions {
            usernames: file.exemptions.usernames,
            runtime_classes: file.exemptions.runtime_classes,
            namespaces: file.exemptions.namespaces,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_embedded_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admission.yaml");
        std::fs::write(
            &path,
            r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: v1.30
      warn: restricted
    exemptions:
      usernames: ["system:serviceaccount:kube-system:replicaset-controller"]
      namespaces: [kube-system]
"#,
        )
        .unwrap();
        let c = load(&path).unwrap();
        assert_eq!(c.defaults.enforce.to_string(), "baseline:v1.30");
        assert_eq!(c.defaults.warn.to_string(), "restricted:latest");
        assert_eq!(c.defaults.audit, LevelVersion::PRIVILEGED_LATEST);
        assert_eq!(c.exemptions.namespaces, ["kube-system"]);
        assert_eq!(c.exemptions.usernames.len(), 1);
    }

    #[test]
    fn reads_a_configuration_by_path_and_rejects_bad_levels() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admission.yaml");
        std::fs::write(
            &path,
            "plugins:\n- name: PodSecurity\n  path: podsecurity.yaml\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("podsecurity.yaml"),
            "defaults:\n  enforce: strict\n",
        )
        .unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains(r#"defaults.enforce: "strict""#), "{err}");
        std::fs::write(
            dir.path().join("podsecurity.yaml"),
            "exemptions:\n  runtimeClasses: [kata]\n",
        )
        .unwrap();
        assert_eq!(load(&path).unwrap().exemptions.runtime_classes, ["kata"]);
        std::fs::write(&path, "plugins: []\n").unwrap();
        assert_eq!(load(&path).unwrap(), Configuration::default());
    }
}
