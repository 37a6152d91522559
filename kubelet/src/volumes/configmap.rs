//! configMap: the keys of a ConfigMap as files (all of them, or `items` key→path with their
//! own modes), written by the atomic writer on a disk-backed emptyDir.

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath};
use kube::Api;

use super::atomic_writer::{FileProjection, Payload};

pub(crate) const PLUGIN: &str = "kubernetes.io~configmap";

/// The ConfigMap, `None` when it is missing and optional; `configmap "x" not found` (the
/// kubelet's object cache wording) when it is missing and required.
pub(crate) async fn get(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Option<ConfigMap>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(cm)) => Ok(Some(cm)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(format!("configmap {name:?} not found")),
        Err(e) => Err(super::api_error("configmap", name, e)),
    }
}

/// Upstream's configmap.MakePayload. A missing optional ConfigMap is an empty one.
pub(crate) fn make_payload(
    items: Option<&[KeyToPath]>,
    config_map: Option<&ConfigMap>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let empty = ConfigMap::default();
    let cm = config_map.unwrap_or(&empty);
    let data = cm.data.as_ref();
    let binary = cm.binary_data.as_ref();
    let mut payload = Payload::new();
    let mode = |m: Option<i32>| m.unwrap_or(default_mode) as u32;
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data.into_iter().flatten() {
                payload.insert(
                    k.clone(),
                    FileProjection {
                        data: v.as_bytes().to_vec(),
                        mode: mode(None),
                    },
                );
            }
            for (k, v) in binary.into_iter().flatten() {
                payload.insert(
                    k.clone(),
                    FileProjection {
                        data: v.0.clone(),
                        mode: mode(None),
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let content = if let Some(s) = data.and_then(|d| d.get(&item.key)) {
                    s.as_bytes().to_vec()
                } else if let Some(b) = binary.and_then(|d| d.get(&item.key)) {
                    b.0.clone()
                } else if optional {
                    continue;
                } else {
                    return Err(format!(
                        "configmap references non-existent config key: {}",
                        item.key
                    ));
                };
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: content,
                        mode: mode(item.mode),
                    },
                );
            }
        }
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"},
            "data": {"a": "1", "b": "2"},
            "binaryData": {"bin": "AAE="}
        }))
        .unwrap()
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn all_keys_with_the_default_mode() {
        let p = make_payload(None, Some(&cm()), 0o644, false).unwrap();
        assert_eq!(p.keys().collect::<Vec<_>>(), ["a", "b", "bin"]);
        assert_eq!(p["a"].data, b"1");
        assert_eq!(p["bin"].data, [0, 1]);
        assert!(p.values().all(|f| f.mode == 0o644));
    }

    #[test]
    fn items_map_keys_to_paths_and_modes() {
        let items = [item("a", "dir/x", Some(0o400)), item("bin", "y", None)];
        let p = make_payload(Some(&items), Some(&cm()), 0o640, false).unwrap();
        assert_eq!(p.keys().collect::<Vec<_>>(), ["dir/x", "y"]);
        assert_eq!(p["dir/x"].mode, 0o400);
        assert_eq!(p["y"].mode, 0o640);
        let missing = [item("nope", "z", None)];
        assert_eq!(
            make_payload(Some(&missing), Some(&cm()), 0o644, false),
            Err("configmap references non-existent config key: nope".into())
        );
        // Optional: missing keys are skipped.
        assert_eq!(
            make_payload(Some(&missing), Some(&cm()), 0o644, true),
            Ok(Payload::new())
        );
    }

    #[test]
    fn optional_missing_config_map_is_empty() {
        assert_eq!(make_payload(None, None, 0o644, true), Ok(Payload::new()));
        let items = [item("a", "x", None)];
        assert_eq!(
            make_payload(Some(&items), None, 0o644, true),
            Ok(Payload::new())
        );
    }
}
