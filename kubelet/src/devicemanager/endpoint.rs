//! One registered plugin: the kubelet's connection to its socket and its ListAndWatch stream,
//! which keeps the resource's healthy and unhealthy devices. When the stream ends the plugin
//! is gone: its devices all count as unhealthy (allocatable 0, capacity kept) until it
//! registers again or the grace period drops the resource, as upstream.

use std::collections::BTreeSet;
use std::sync::Arc;

use minik8s_deviceplugin::HEALTHY;
use minik8s_deviceplugin::api::v1beta1::device_plugin_client::DevicePluginClient;
use minik8s_deviceplugin::api::v1beta1::{DevicePluginOptions, Empty};
use tonic::transport::Channel;

use super::{DeviceManager, Resource};

impl DeviceManager {
    /// Takes a registration: the resource is now served by the plugin on `channel` (its
    /// socket, `endpoint` in the device-plugins directory). Its stream runs in
    /// [`DeviceManager::run`].
    pub(super) fn register_plugin(
        self: &Arc<Self>,
        resource: String,
        endpoint: String,
        channel: Channel,
        options: DevicePluginOptions,
    ) {
        let generation = {
            let mut state = self.state.lock().expect("device manager");
            state.next_generation += 1;
            let generation = state.next_generation;
            let r = state
                .resources
                .entry(resource.clone())
                .or_insert_with(|| Resource::stopped(tokio::time::Instant::now()));
            r.generation = generation;
            r.options = options;
            r.client = None;
            generation
        };
        let this = self.clone();
        let task = Box::pin(async move {
            this.serve_endpoint(&resource, &endpoint, channel, generation)
                .await;
        });
        if self.spawn.send(task).is_err() {
            tracing::warn!("device manager not running; registration dropped");
        }
    }

    async fn serve_endpoint(
        &self,
        resource: &str,
        endpoint: &str,
        channel: Channel,
        generation: u64,
    ) {
        let path = self.dir.join(endpoint);
        let result = async {
            let mut client = DevicePluginClient::new(channel);
            let mut stream = client
                .list_and_watch(Empty {})
                .await
                .map_err(|s| s.message().to_string())?
                .into_inner();
            {
                let mut state = self.state.lock().expect("device manager");
                match state.resources.get_mut(resource) {
                    Some(r) if r.generation == generation => {
                        r.client = Some(client);
                        r.stopped_at = None;
                    }
                    // A newer registration took over.
                    _ => return Ok(()),
                }
            }
            tracing::info!(%resource, endpoint = %path.display(), "device plugin connected");
            while let Some(update) = stream.message().await.map_err(|s| s.message().to_string())? {
                let (healthy, unhealthy): (Vec<_>, Vec<_>) =
                    update.devices.into_iter().partition(|d| d.health == HEALTHY);
                let healthy: BTreeSet<String> = healthy.into_iter().map(|d| d.id).collect();
                let unhealthy: BTreeSet<String> = unhealthy.into_iter().map(|d| d.id).collect();
                let mut state = self.state.lock().expect("device manager");
                let Some(r) = state.resources.get_mut(resource).filter(|r| r.generation == generation)
                else {
                    return Ok(());
                };
                if r.healthy == healthy && r.unhealthy == unhealthy {
                    continue;
                }
                tracing::info!(%resource, healthy = healthy.len(), unhealthy = ?unhealthy, "devices updated");
                r.healthy = healthy;
                r.unhealthy = unhealthy;
                self.save(&state);
                drop(state);
                self.changed();
            }
            Ok::<(), String>(())
        }
        .await;
        if let Err(e) = &result {
            tracing::warn!(%resource, error = %e, "device plugin connection failed");
        }
        self.disconnected(resource, generation);
    }

    /// The plugin of this registration went away: its devices are unhealthy until it comes
    /// back, and the resource leaves the node after the grace period.
    fn disconnected(&self, resource: &str, generation: u64) {
        let mut state = self.state.lock().expect("device manager");
        let Some(r) = state
            .resources
            .get_mut(resource)
            .filter(|r| r.generation == generation)
        else {
            return;
        };
        tracing::info!(%resource, "device plugin disconnected");
        let healthy = std::mem::take(&mut r.healthy);
        r.unhealthy.extend(healthy);
        r.client = None;
        r.stopped_at = Some(tokio::time::Instant::now());
        self.save(&state);
        drop(state);
        self.changed();
        // Another look once the grace period is over, for the node status to drop it.
        let changes = self.changes.clone();
        let grace = self.grace;
        let _ = self.spawn.send(Box::pin(async move {
            tokio::time::sleep(grace).await;
            changes.send_modify(|n| *n += 1);
        }));
    }
}
