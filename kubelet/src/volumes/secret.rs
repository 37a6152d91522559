//! secret: the keys of a Secret as files (mode 0644 unless `defaultMode`/`items` say otherwise),
//! written by the atomic writer on a tmpfs of the volume's own, so they never touch the disk.

use k8s_openapi::api::core::v1::{KeyToPath, Secret};
use kube::Api;

use super::atomic_writer::{FileProjection, Payload};

pub(crate) const PLUGIN: &str = "kubernetes.io~secret";

/// The Secret, `None` when it is missing and optional; `secret "x" not found` otherwise.
pub(crate) async fn get(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    optional: bool,
) -> Result<Option<Secret>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(s)) => Ok(Some(s)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(format!("secret {name:?} not found")),
        Err(e) => Err(super::api_error("secret", name, e)),
    }
}

/// Upstream's secret.MakePayload (only `data`: the API server folds `stringData` into it).
pub(crate) fn make_payload(
    items: Option<&[KeyToPath]>,
    secret: Option<&Secret>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let data = secret.and_then(|s| s.data.as_ref());
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data.into_iter().flatten() {
                payload.insert(
                    k.clone(),
                    FileProjection {
                        data: v.0.clone(),
                        mode: default_mode as u32,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(content) = data.and_then(|d| d.get(&item.key)) else {
                    if optional {
                        continue;
                    }
                    return Err(format!("references non-existent secret key: {}", item.key));
                };
                payload.insert(
                    item.path.clone(),
                    FileProjection {
                        data: content.0.clone(),
                        mode: item.mode.unwrap_or(default_mode) as u32,
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

    fn secret() -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"},
            "data": {"user": "YWRtaW4=", "pass": "czNjcjN0"}
        }))
        .unwrap()
    }

    #[test]
    fn keys_items_and_modes() {
        let p = make_payload(None, Some(&secret()), 0o644, false).unwrap();
        assert_eq!(p["user"].data, b"admin");
        assert_eq!(p["pass"].data, b"s3cr3t");
        assert!(p.values().all(|f| f.mode == 0o644));
        let items = [KeyToPath {
            key: "pass".into(),
            path: "db/password".into(),
            mode: Some(0o400),
        }];
        let p = make_payload(Some(&items), Some(&secret()), 0o644, false).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p["db/password"].mode, 0o400);
        let missing = [KeyToPath {
            key: "nope".into(),
            path: "x".into(),
            mode: None,
        }];
        assert_eq!(
            make_payload(Some(&missing), Some(&secret()), 0o644, false),
            Err("references non-existent secret key: nope".into())
        );
        assert_eq!(
            make_payload(Some(&missing), None, 0o644, true),
            Ok(Payload::new())
        );
    }
}
