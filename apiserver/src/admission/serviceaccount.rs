//! Upstream's ServiceAccount admission plugin (plugin/pkg/admission/serviceaccount): every pod
//! runs as a service account that exists (`default` unless it names one), and gets the API
//! credentials in-cluster clients look for at `/var/run/secrets/kubernetes.io/serviceaccount`:
//! a projected volume of a bound token, the cluster CA and its namespace.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ConfigMapProjection, DownwardAPIProjection, DownwardAPIVolumeFile, KeyToPath,
    LocalObjectReference, ObjectFieldSelector, Pod, PodSpec, ProjectedVolumeSource, ServiceAccount,
    ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};
use minik8s_api::strategy::BuiltIn;
use minik8s_api::{ApiError, Target, meta};

use crate::registry::generic::{CreateAdmission, GenericRegistry};
use crate::serviceaccount::WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS;
use crate::storage::Event;

pub const PLUGIN_NAME: &str = "ServiceAccount";
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where the token, CA and namespace are mounted in every container.
pub const DEFAULT_API_TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The projected volume's name is this plus a dash and five random characters.
pub const VOLUME_NAME_PREFIX: &str = "kube-api-access";
/// The ConfigMap the root-CA publisher keeps in every namespace.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
const ENFORCE_MOUNTABLE_SECRETS_ANNOTATION: &str = "kubernetes.io/enforce-mountable-secrets";

/// How long a pod create waits for the `default` account of its namespace to appear
/// (upstream retries a live read ten times, 100–200 ms apart): the ServiceAccount
/// controller creates it moments after the namespace.
const DEFAULT_ACCOUNT_WAIT: Duration = Duration::from_secs(2);

pub struct ServiceAccountAdmission {
    accounts: Arc<GenericRegistry<BuiltIn<ServiceAccount>>>,
}

impl ServiceAccountAdmission {
    pub fn new(accounts: Arc<GenericRegistry<BuiltIn<ServiceAccount>>>) -> Self {
        ServiceAccountAdmission { accounts }
    }

    /// The account, or `None` when it does not exist. A missing `default` is waited for.
    async fn account(&self, ns: &str, name: &str) -> Result<Option<ServiceAccount>, ApiError> {
        let store = self.accounts.store();
        let revision = store.current_revision().await.map_err(ApiError::internal)?;
        match self.accounts.get(Some(ns), name).await {
            Ok(sa) => return Ok(Some(sa)),
            Err(e) if e.code == 404 && name == DEFAULT_SERVICE_ACCOUNT => {}
            Err(e) if e.code == 404 => return Ok(None),
            Err(e) => return Err(e),
        }
        // Watch for the create from the revision read before the miss, so none is lost.
        let key = self.accounts.key(Some(ns), name);
        let mut events = store
            .watch(&key, revision)
            .await
            .map_err(ApiError::internal)?;
        let created = async {
            while let Some(event) = events.next().await {
                if let Ok(Event::Put { kv, .. }) = event
                    && kv.key == key
                {
                    return self.accounts.decode(&kv).ok();
                }
            }
            None
        };
        Ok(tokio::time::timeout(DEFAULT_ACCOUNT_WAIT, created)
            .await
            .ok()
            .flatten())
    }
}

#[async_trait]
impl CreateAdmission<Pod> for ServiceAccountAdmission {
    async fn admit(&self, pod: &mut Pod, _dry_run: bool) -> Result<(), ApiError> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        // Named as upstream's admission errors name an object whose name is not generated
        // yet: by its generateName.
        let name = pod
            .metadata
            .generate_name
            .clone()
            .filter(|g| !g.is_empty())
            .or_else(|| pod.metadata.name.clone())
            .unwrap_or_default();
        let forbidden = |why: String| {
            ApiError::forbidden(
                Target {
                    group: "",
                    resource: "pods",
                    name: &name,
                },
                &why,
            )
        };
        let mirror = pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION));
        let spec = pod.spec.get_or_insert_with(Default::default);
        if mirror {
            return check_mirror_pod(spec).map_err(|why| forbidden(why.into()));
        }
        let account_name = spec
            .service_account_name
            .get_or_insert_with(|| DEFAULT_SERVICE_ACCOUNT.to_string());
        if account_name.is_empty() {
            *account_name = DEFAULT_SERVICE_ACCOUNT.to_string();
        }
        let account_name = account_name.clone();
        let Some(account) = self.account(&ns, &account_name).await? else {
            return Err(forbidden(format!(
                "error looking up service account {ns}/{account_name}: serviceaccount \"{account_name}\" not found"
            )));
        };
        if enforces_mountable_secrets(&account) {
            limit_secret_references(&account, spec).map_err(forbidden)?;
        }
        if should_automount(&account, spec) {
            mount_token(spec);
        }
        if spec
            .image_pull_secrets
            .as_ref()
            .is_none_or(|s| s.is_empty())
        {
            let secrets: Vec<LocalObjectReference> = account
                .image_pull_secrets
                .iter()
                .flatten()
                .map(|s| LocalObjectReference {
                    name: s.name.clone(),
                })
                .collect();
            spec.image_pull_secrets = (!secrets.is_empty()).then_some(secrets);
        }
        Ok(())
    }
}

/// Mirror pods (the API's copies of a kubelet's static pods) may reference no account and no
/// secret: their spec comes from the node, never from this plugin.
fn check_mirror_pod(spec: &PodSpec) -> Result<(), &'static str> {
    if spec
        .service_account_name
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Err("a mirror pod may not reference service accounts");
    }
    if !secret_names(spec).is_empty() {
        return Err("a mirror pod may not reference secrets");
    }
    let token_projection = spec.volumes.iter().flatten().any(|v| {
        v.projected
            .as_ref()
            .and_then(|p| p.sources.as_ref())
            .is_some_and(|s| s.iter().any(|s| s.service_account_token.is_some()))
    });
    if token_projection {
        return Err("a mirror pod may not use ServiceAccountToken volume projections");
    }
    Ok(())
}

/// Every Secret a pod spec names (upstream's `VisitPodSecretNames` over the volume sources
/// this server knows, containers' env and envFrom, and image pull secrets).
fn secret_names(spec: &PodSpec) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    names.extend(
        spec.image_pull_secrets
            .iter()
            .flatten()
            .map(|s| s.name.as_str()),
    );
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for c in containers {
        names.extend(
            c.env_from
                .iter()
                .flatten()
                .filter_map(|e| Some(e.secret_ref.as_ref()?.name.as_str())),
        );
        names.extend(c.env.iter().flatten().filter_map(|e| {
            Some(
                e.value_from
                    .as_ref()?
                    .secret_key_ref
                    .as_ref()?
                    .name
                    .as_str(),
            )
        }));
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = &v.secret {
            names.extend(s.secret_name.as_deref());
        }
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            names.extend(p.secret.as_ref().map(|s| s.name.as_str()));
        }
    }
    names
}

/// The account's `kubernetes.io/enforce-mountable-secrets` annotation, read as Go's
/// `strconv.ParseBool` reads it.
fn enforces_mountable_secrets(account: &ServiceAccount) -> bool {
    account
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ENFORCE_MOUNTABLE_SECRETS_ANNOTATION))
        .is_some_and(|v| matches!(v.as_str(), "1" | "t" | "T" | "TRUE" | "true" | "True"))
}

/// Upstream's `limitSecretReferences`: a pod of an account that enforces mountable secrets
/// may use only the secrets the account lists (and its image pull secrets).
fn limit_secret_references(account: &ServiceAccount, spec: &PodSpec) -> Result<(), String> {
    let sa = account.metadata.name.as_deref().unwrap_or_default();
    let mountable: Vec<&str> = account
        .secrets
        .iter()
        .flatten()
        .filter_map(|s| s.name.as_deref())
        .collect();
    let allowed = |name: &str| mountable.contains(&name);
    for v in spec.volumes.iter().flatten() {
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref())
            && !allowed(name)
        {
            return Err(format!(
                "volume with secret.secretName=\"{name}\" is not allowed because service account {sa} does not reference that secret"
            ));
        }
    }
    let groups = [
        (
            "init container",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("container", spec.containers.as_slice()),
    ];
    for (what, containers) in groups {
        for c in containers {
            for e in c.env.iter().flatten() {
                if let Some(r) = e
                    .value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.as_ref())
                    && !allowed(&r.name)
                {
                    return Err(format!(
                        "{what} {} with envVar {} referencing secret.secretName=\"{}\" is not allowed because service account {sa} does not reference that secret",
                        c.name, e.name, r.name
                    ));
                }
            }
            for e in c.env_from.iter().flatten() {
                if let Some(r) = &e.secret_ref
                    && !allowed(&r.name)
                {
                    return Err(format!(
                        "{what} {} with envFrom referencing secret.secretName=\"{}\" is not allowed because service account {sa} does not reference that secret",
                        c.name, r.name
                    ));
                }
            }
        }
    }
    let pull: Vec<&str> = account
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    for (i, s) in spec.image_pull_secrets.iter().flatten().enumerate() {
        if !pull.contains(&s.name.as_str()) {
            return Err(format!(
                "imagePullSecrets[{i}].name=\"{}\" is not allowed because service account {sa} does not reference that imagePullSecret",
                s.name
            ));
        }
    }
    Ok(())
}

/// The pod's preference wins, then the account's; tokens are mounted by default.
fn should_automount(account: &ServiceAccount, spec: &PodSpec) -> bool {
    spec.automount_service_account_token
        .or(account.automount_service_account_token)
        .unwrap_or(true)
}

/// Upstream's `TokenVolumeSource`: a bound token, the cluster CA and the namespace.
pub fn token_volume_source() -> ProjectedVolumeSource {
    ProjectedVolumeSource {
        default_mode: Some(0o644),
        sources: Some(vec![
            VolumeProjection {
                service_account_token: Some(ServiceAccountTokenProjection {
                    path: "token".into(),
                    expiration_seconds: Some(WARN_ONLY_BOUND_TOKEN_EXPIRATION_SECONDS),
                    audience: None,
                }),
                ..Default::default()
            },
            VolumeProjection {
                config_map: Some(ConfigMapProjection {
                    name: ROOT_CA_CONFIG_MAP.into(),
                    items: Some(vec![KeyToPath {
                        key: "ca.crt".into(),
                        path: "ca.crt".into(),
                        mode: None,
                    }]),
                    optional: None,
                }),
                ..Default::default()
            },
            VolumeProjection {
                downward_api: Some(DownwardAPIProjection {
                    items: Some(vec![DownwardAPIVolumeFile {
                        path: "namespace".into(),
                        field_ref: Some(ObjectFieldSelector {
                            api_version: Some("v1".into()),
                            field_path: "metadata.namespace".into(),
                        }),
                        ..Default::default()
                    }]),
                }),
                ..Default::default()
            },
        ]),
    }
}

/// Mounts the token volume read-only at the default path in every container (init
/// containers too) that has nothing mounted there, adding the volume if one needs it.
fn mount_token(spec: &mut PodSpec) {
    let prefix = format!("{VOLUME_NAME_PREFIX}-");
    let existing = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name.starts_with(&prefix))
        .map(|v| v.name.clone());
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| meta::generate_name(&prefix));
    let mount = VolumeMount {
        name: volume_name.clone(),
        read_only: Some(true),
        mount_path: DEFAULT_API_TOKEN_MOUNT_PATH.into(),
        ..Default::default()
    };
    let mut needs_volume = false;
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut());
    for c in containers {
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        if !mounts
            .iter()
            .any(|m| m.mount_path == DEFAULT_API_TOKEN_MOUNT_PATH)
        {
            mounts.push(mount.clone());
            needs_volume = true;
        }
    }
    if existing.is_none() && needs_volume {
        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: volume_name,
            projected: Some(token_volume_source()),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn spec(containers: &[&str], init: &[&str]) -> PodSpec {
        let c = |n: &&str| Container {
            name: n.to_string(),
            ..Default::default()
        };
        PodSpec {
            containers: containers.iter().map(c).collect(),
            init_containers: (!init.is_empty()).then(|| init.iter().map(c).collect()),
            ..Default::default()
        }
    }

    #[test]
    fn token_is_mounted_in_every_container_once() {
        let mut s = spec(&["a", "b"], &["i"]);
        mount_token(&mut s);
        let volumes = s.volumes.clone().unwrap();
        assert_eq!(volumes.len(), 1);
        let name = &volumes[0].name;
        assert!(
            name.starts_with("kube-api-access-") && name.len() == 21,
            "{name}"
        );
        assert_eq!(volumes[0].projected, Some(token_volume_source()));
        for c in s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
        {
            let m = &c.volume_mounts.as_ref().unwrap()[0];
            assert_eq!(m.name, *name);
            assert_eq!(m.mount_path, DEFAULT_API_TOKEN_MOUNT_PATH);
            assert_eq!(m.read_only, Some(true));
        }
        // Admitting the same spec again changes nothing.
        let before = s.clone();
        mount_token(&mut s);
        assert_eq!(s, before);
    }

    #[test]
    fn a_container_with_its_own_mount_there_is_left_alone() {
        let mut s = spec(&["a"], &[]);
        s.containers[0].volume_mounts = Some(vec![VolumeMount {
            name: "mine".into(),
            mount_path: DEFAULT_API_TOKEN_MOUNT_PATH.into(),
            ..Default::default()
        }]);
        mount_token(&mut s);
        assert_eq!(s.volumes, None);
        assert_eq!(s.containers[0].volume_mounts.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn accounts_that_enforce_mountable_secrets_limit_references() {
        let mut sa: ServiceAccount = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "builder",
                "annotations": {"kubernetes.io/enforce-mountable-secrets": "true"}},
            "secrets": [{"name": "ok"}],
            "imagePullSecrets": [{"name": "pull"}]
        }))
        .unwrap();
        assert!(enforces_mountable_secrets(&sa));
        let pod = |v: serde_json::Value| -> PodSpec { serde_json::from_value(v).unwrap() };
        let fine = pod(serde_json::json!({"containers": [{"name": "c",
            "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "ok", "key": "k"}}}]}],
            "volumes": [{"name": "v", "secret": {"secretName": "ok"}}],
            "imagePullSecrets": [{"name": "pull"}]}));
        assert_eq!(limit_secret_references(&sa, &fine), Ok(()));
        let volume = pod(serde_json::json!({"containers": [{"name": "c"}],
            "volumes": [{"name": "v", "secret": {"secretName": "other"}}]}));
        assert_eq!(
            limit_secret_references(&sa, &volume).unwrap_err(),
            "volume with secret.secretName=\"other\" is not allowed because service account builder does not reference that secret"
        );
        let init = pod(serde_json::json!({"containers": [{"name": "c"}],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "other"}}]}]}));
        assert_eq!(
            limit_secret_references(&sa, &init).unwrap_err(),
            "init container i with envFrom referencing secret.secretName=\"other\" is not allowed because service account builder does not reference that secret"
        );
        let pull = pod(serde_json::json!({"containers": [{"name": "c"}],
            "imagePullSecrets": [{"name": "pull"}, {"name": "ok"}]}));
        assert_eq!(
            limit_secret_references(&sa, &pull).unwrap_err(),
            "imagePullSecrets[1].name=\"ok\" is not allowed because service account builder does not reference that imagePullSecret"
        );
        sa.metadata.annotations = None;
        assert!(!enforces_mountable_secrets(&sa));
    }

    #[test]
    fn mirror_pods_reference_no_account_or_secret() {
        let pod = |v: serde_json::Value| -> PodSpec { serde_json::from_value(v).unwrap() };
        assert_eq!(
            check_mirror_pod(&pod(serde_json::json!({"containers": []}))),
            Ok(())
        );
        assert_eq!(
            check_mirror_pod(&pod(
                serde_json::json!({"containers": [], "serviceAccountName": "x"})
            )),
            Err("a mirror pod may not reference service accounts")
        );
        assert_eq!(
            check_mirror_pod(&pod(serde_json::json!({"containers": [],
                "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s"}}]}}]}))),
            Err("a mirror pod may not reference secrets")
        );
        assert_eq!(
            check_mirror_pod(&pod(serde_json::json!({"containers": [],
                "volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}))),
            Err("a mirror pod may not use ServiceAccountToken volume projections")
        );
    }

    #[test]
    fn automount_preference_pod_then_account_then_true() {
        let mut sa = ServiceAccount::default();
        let mut s = spec(&["a"], &[]);
        assert!(should_automount(&sa, &s));
        sa.automount_service_account_token = Some(false);
        assert!(!should_automount(&sa, &s));
        s.automount_service_account_token = Some(true);
        assert!(should_automount(&sa, &s));
        sa.automount_service_account_token = None;
        s.automount_service_account_token = Some(false);
        assert!(!should_automount(&sa, &s));
    }
}
