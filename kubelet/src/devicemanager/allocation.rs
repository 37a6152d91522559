//! Pure parts of allocation: what a container asks for, which devices it gets, and how the
//! plugins' answers become part of its CRI config.

use std::collections::{BTreeMap, BTreeSet};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Container;

use minik8s_deviceplugin::api::v1beta1::ContainerAllocateResponse;

/// The device resources a container asks for, with how many of each: its limits (equal to
/// its requests for extended resources), of the resources `known` says plugins serve.
pub fn requests(c: &Container, known: impl Fn(&str) -> bool) -> Vec<(String, usize)> {
    let Some(r) = c.resources.as_ref() else {
        return Vec::new();
    };
    let limits = r.limits.iter().flatten();
    // Requests alone are taken too: an extended resource's limit defaults to its request.
    let requests = r
        .requests
        .iter()
        .flatten()
        .filter(|(k, _)| !r.limits.as_ref().is_some_and(|l| l.contains_key(*k)));
    limits
        .chain(requests)
        .filter(|(name, _)| known(name))
        .filter_map(|(name, q)| {
            let n = minik8s_api::quantity::parse(&q.0)?;
            (n >= 1.0).then(|| (name.clone(), n.round() as usize))
        })
        .collect()
}

/// Picks `needed` devices from `available`: the plugin's preferred ones when it gave a
/// usable answer (exactly `needed` devices, all available), else the first in order.
pub fn pick(
    available: &BTreeSet<String>,
    preferred: Option<&[String]>,
    needed: usize,
) -> Vec<String> {
    if let Some(p) = preferred {
        let distinct: BTreeSet<&String> = p.iter().collect();
        if p.len() == needed && distinct.len() == needed && p.iter().all(|d| available.contains(d))
        {
            return p.to_vec();
        }
    }
    available.iter().take(needed).cloned().collect()
}

/// What a container's devices add to its CRI config, merged from every plugin's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<cri::Mount>,
    pub devices: Vec<cri::Device>,
    pub annotations: BTreeMap<String, String>,
    pub cdi_devices: Vec<String>,
}

impl RunOptions {
    /// Adds one plugin's answer. As upstream, the first of two values for one variable,
    /// container path or annotation stands (and the clash is logged).
    pub fn add(&mut self, resource: &str, r: &ContainerAllocateResponse) {
        let mut envs: Vec<_> = r.envs.iter().collect();
        envs.sort();
        for (k, v) in envs {
            match self.envs.iter().find(|(name, _)| name == k) {
                Some((_, old)) if old != v => {
                    tracing::warn!(%resource, env = %k, "environment variable set by two device plugins")
                }
                Some(_) => {}
                None => self.envs.push((k.clone(), v.clone())),
            }
        }
        for m in &r.mounts {
            if self
                .mounts
                .iter()
                .any(|o| o.container_path == m.container_path)
            {
                continue;
            }
            self.mounts.push(cri::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.read_only,
                ..Default::default()
            });
        }
        for d in &r.devices {
            if self
                .devices
                .iter()
                .any(|o| o.container_path == d.container_path)
            {
                continue;
            }
            self.devices.push(cri::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
            });
        }
        for (k, v) in &r.annotations {
            self.annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        for c in &r.cdi_devices {
            if !self.cdi_devices.contains(&c.name) {
                self.cdi_devices.push(c.name.clone());
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == RunOptions::default()
    }

    /// Applies the devices to a container's config: their variables before the container's
    /// own (which win where both set one, as upstream's order gives), their mounts and
    /// device nodes beside the volumes, their annotations beside the kubelet's.
    pub fn apply(&self, config: &mut cri::ContainerConfig) {
        let mut envs: Vec<cri::KeyValue> = self
            .envs
            .iter()
            .map(|(k, v)| cri::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect();
        envs.append(&mut config.envs);
        config.envs = envs;
        for m in &self.mounts {
            if !config
                .mounts
                .iter()
                .any(|o| o.container_path == m.container_path)
            {
                config.mounts.push(m.clone());
            }
        }
        config.devices.extend(self.devices.iter().cloned());
        for (k, v) in &self.annotations {
            config
                .annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        config.cdi_devices.extend(
            self.cdi_devices
                .iter()
                .map(|name| cri::CdiDevice { name: name.clone() }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use minik8s_deviceplugin::api::v1beta1::{DeviceSpec, Mount};

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn requests_take_limits_of_known_resources() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "resources": {
                "limits": {"example.com/dev": "2", "cpu": "1"},
                "requests": {"example.com/dev": "2", "other.io/x": "1"}
            }
        }))
        .unwrap();
        let known = |r: &str| r == "example.com/dev" || r == "other.io/x";
        let mut got = requests(&c, known);
        got.sort();
        assert_eq!(
            got,
            vec![
                ("example.com/dev".to_string(), 2),
                ("other.io/x".to_string(), 1)
            ]
        );
    }

    #[test]
    fn pick_takes_a_usable_preference_only() {
        let available = set(&["a", "b", "c"]);
        let pref = vec!["c".to_string()];
        assert_eq!(pick(&available, Some(&pref), 1), vec!["c"]);
        let bad = vec!["z".to_string()];
        assert_eq!(pick(&available, Some(&bad), 1), vec!["a"]);
        assert_eq!(pick(&available, None, 2), vec!["a", "b"]);
    }

    #[test]
    fn apply_puts_device_envs_first_and_merges() {
        let mut opts = RunOptions::default();
        opts.add(
            "example.com/dev",
            &ContainerAllocateResponse {
                envs: [("DEV".to_string(), "a".to_string())].into(),
                mounts: vec![Mount {
                    container_path: "/dev/fake/a".into(),
                    host_path: "/tmp/a".into(),
                    read_only: true,
                }],
                devices: vec![DeviceSpec {
                    container_path: "/dev/x".into(),
                    host_path: "/dev/x".into(),
                    permissions: "rw".into(),
                }],
                annotations: [("k".to_string(), "v".to_string())].into(),
                cdi_devices: Vec::new(),
            },
        );
        let mut config = cri::ContainerConfig {
            envs: vec![cri::KeyValue {
                key: "OWN".into(),
                value: "1".into(),
            }],
            ..Default::default()
        };
        opts.apply(&mut config);
        assert_eq!(config.envs[0].key, "DEV");
        assert_eq!(config.envs[1].key, "OWN");
        assert_eq!(config.mounts[0].host_path, "/tmp/a");
        assert!(config.mounts[0].readonly);
        assert_eq!(config.devices[0].permissions, "rw");
        assert_eq!(config.annotations["k"], "v");
    }
}
