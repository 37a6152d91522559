//! Admission and container start: the devices each container gets (once, at admission, as
//! upstream's `Allocate`), and what they add to the container at each start (upstream's
//! `GetDeviceRunContainerOptions`, with PreStartContainer when the plugin asks for it).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod};
use minik8s_deviceplugin::api::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, ContainerPreferredAllocationRequest,
    PreStartContainerRequest, PreferredAllocationRequest,
};

use super::allocation::{self, RunOptions};
use super::{AllocateError, Allocation, DeviceManager};

/// A gRPC failure as Go's client prints it, which upstream's messages carry.
fn rpc_error(s: &tonic::Status) -> String {
    format!("rpc error: code = {:?} desc = {}", s.code(), s.message())
}

impl DeviceManager {
    /// Gives every container of `pod` that asks for a device resource its devices, or says
    /// why it cannot (then the pod is rejected). Containers that already hold devices (an
    /// earlier admission, or the checkpoint after a restart) keep them.
    pub async fn admit(&self, pod: &Pod) -> Result<(), AllocateError> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let init: Vec<&Container> = spec.init_containers.iter().flatten().collect();
        let containers = init.iter().copied().chain(spec.containers.iter());
        let wanted: Vec<(&Container, Vec<(String, usize)>)> = containers
            .map(|c| (c, allocation::requests(c, |r| self.is_device_resource(r))))
            .filter(|(_, r)| !r.is_empty())
            .collect();
        if wanted.is_empty() || self.holds_all(&uid, &wanted) {
            return Ok(());
        }
        let _one_at_a_time = self.admitting.lock().await;
        self.release_inactive();
        let init_names: BTreeSet<&str> = init.iter().map(|c| c.name.as_str()).collect();
        for (c, requests) in &wanted {
            for (resource, needed) in requests {
                self.allocate(&uid, &c.name, resource, *needed, &init_names)
                    .await?;
            }
        }
        Ok(())
    }

    fn holds_all(&self, uid: &str, wanted: &[(&Container, Vec<(String, usize)>)]) -> bool {
        let state = self.state.lock().expect("device manager");
        let Some(pod) = state.pods.get(uid) else {
            return false;
        };
        wanted.iter().all(|(c, requests)| {
            requests
                .iter()
                .all(|(r, _)| pod.get(&c.name).is_some_and(|held| held.contains_key(r)))
        })
    }

    /// Devices of one resource for one container: upstream's `devicesToAllocate` and
    /// `allocateContainerResources`, with their error messages.
    async fn allocate(
        &self,
        uid: &str,
        container: &str,
        resource: &str,
        needed: usize,
        init_names: &BTreeSet<&str>,
    ) -> Result<(), AllocateError> {
        let (available, mut client, options) = {
            let state = self.state.lock().expect("device manager");
            let held = state
                .pods
                .get(uid)
                .and_then(|p| p.get(container))
                .is_some_and(|c| c.contains_key(resource));
            if held {
                return Ok(());
            }
            let Some(r) = state.resources.get(resource) else {
                return Err(AllocateError(format!(
                    "cannot allocate unregistered device {resource}"
                )));
            };
            if r.healthy.is_empty() {
                return Err(AllocateError(format!(
                    "no healthy devices present; cannot allocate unhealthy devices {resource}"
                )));
            }
            // The pod's init containers have finished by the time the next container runs:
            // their devices may be given again within the pod (upstream's reuse).
            let in_use = state.in_use(resource, |u, name| u == uid && init_names.contains(name));
            let available: BTreeSet<String> = r.healthy.difference(&in_use).cloned().collect();
            if available.len() < needed {
                return Err(AllocateError(format!(
                    "requested number of devices unavailable for {resource}. Requested: {needed}, Available: {}",
                    available.len()
                )));
            }
            let Some(client) = r.client.clone() else {
                return Err(AllocateError(format!(
                    "cannot allocate unregistered device {resource}"
                )));
            };
            (available, client, r.options)
        };
        let preferred = if options.get_preferred_allocation_available {
            let request = PreferredAllocationRequest {
                container_requests: vec![ContainerPreferredAllocationRequest {
                    available_device_i_ds: available.iter().cloned().collect(),
                    must_include_device_i_ds: Vec::new(),
                    allocation_size: needed as i32,
                }],
            };
            match client.get_preferred_allocation(request).await {
                Ok(r) => r
                    .into_inner()
                    .container_responses
                    .into_iter()
                    .next()
                    .map(|c| c.device_i_ds),
                Err(s) => {
                    tracing::warn!(%resource, error = %rpc_error(&s), "GetPreferredAllocation failed; choosing without it");
                    None
                }
            }
        } else {
            None
        };
        let ids = allocation::pick(&available, preferred.as_deref(), needed);
        let request = AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids.clone(),
            }],
        };
        let response = client
            .allocate(request)
            .await
            .map_err(|s| AllocateError(rpc_error(&s)))?
            .into_inner();
        let [response] = <[_; 1]>::try_from(response.container_responses).map_err(|r| {
            AllocateError(format!(
                "allocateContainerResources: unexpected response length ({}) from the {resource} plugin",
                r.len()
            ))
        })?;
        tracing::info!(pod_uid = %uid, %container, %resource, devices = ?ids, "devices allocated");
        let mut state = self.state.lock().expect("device manager");
        state
            .pods
            .entry(uid.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default()
            .insert(resource.to_string(), Allocation { ids, response });
        self.save(&state);
        Ok(())
    }

    /// What the container's devices add to its CRI config; calls PreStartContainer for the
    /// plugins that ask for it. An error fails the container's start.
    pub async fn run_options(&self, pod: &Pod, container: &str) -> Result<RunOptions, String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let held: Vec<(String, Allocation, bool, Option<_>)> = {
            let state = self.state.lock().expect("device manager");
            let Some(c) = state.pods.get(&uid).and_then(|p| p.get(container)) else {
                return Ok(RunOptions::default());
            };
            c.iter()
                .map(|(resource, a)| {
                    let r = state.resources.get(resource);
                    let pre_start = r.is_some_and(|r| r.options.pre_start_required);
                    (
                        resource.clone(),
                        a.clone(),
                        pre_start,
                        r.and_then(|r| r.client.clone()),
                    )
                })
                .collect()
        };
        let mut options = RunOptions::default();
        for (resource, a, pre_start, client) in held {
            if pre_start {
                let Some(mut client) = client else {
                    return Err(format!("plugin resource {resource} is not available"));
                };
                let request = PreStartContainerRequest {
                    devices_ids: a.ids.clone(),
                };
                client
                    .pre_start_container(request)
                    .await
                    .map_err(|s| rpc_error(&s))?;
            }
            options.add(&resource, &a.response);
        }
        Ok(options)
    }
}
