//! Golden tests of the iptables and nftables renderings: each `golden/<name>.input.yaml` (a
//! `ProxyConfig` document followed by Services and EndpointSlices) must render to
//! `golden/<name>.iptables` and `golden/<name>.nft`.
//! `UPDATE_GOLDEN=1 cargo test -p minik8s-proxy --test golden` rewrites the outputs; review the
//! diff before committing.

use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use minik8s_proxy::iptables::{ProxyConfig, ProxyState, render};
use serde::Deserialize;

fn load(path: &Path) -> anyhow::Result<ProxyState> {
    let text = std::fs::read_to_string(path)?;
    let mut state = ProxyState::default();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_json::Value::deserialize(doc)?;
        match value["kind"].as_str() {
            Some("ProxyConfig") => {
                state.config = ProxyConfig {
                    hostname: value["hostname"].as_str().unwrap_or_default().into(),
                    cluster_cidr: value["clusterCIDR"].as_str().map(String::from),
                    masquerade_all: value["masqueradeAll"].as_bool().unwrap_or(false),
                }
            }
            Some("Service") => state
                .services
                .push(serde_json::from_value::<Service>(value)?),
            Some("EndpointSlice") => state
                .slices
                .push(serde_json::from_value::<EndpointSlice>(value)?),
            other => anyhow::bail!("{}: unexpected kind {other:?}", path.display()),
        }
    }
    Ok(state)
}

/// Renders every fixture with `render` and compares with `golden/<name>.<ext>` (or rewrites it
/// with `UPDATE_GOLDEN`).
fn check_golden(ext: &str, render: fn(&ProxyState) -> String) -> anyhow::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for entry in entries {
        let path = entry.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".input.yaml"))
        else {
            continue;
        };
        let rendered = render(&load(&path)?);
        let golden = dir.join(format!("{name}.{ext}"));
        if update {
            std::fs::write(&golden, &rendered)?;
        } else {
            let want = std::fs::read_to_string(&golden)?;
            if want != rendered {
                panic!(
                    "{name}: rendered rules differ from {}\n--- rendered ---\n{rendered}",
                    golden.display()
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} golden fixtures found");
    Ok(())
}

#[test]
fn rendered_rules_match_golden_files() -> anyhow::Result<()> {
    check_golden("iptables", render)
}

/// The same fixtures through the nftables mode: `golden/<name>.nft` is the full-sync script.
#[test]
fn rendered_nftables_match_golden_files() -> anyhow::Result<()> {
    check_golden("nft", minik8s_proxy::nftables::render)
}
