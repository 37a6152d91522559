//! The PodResources API (`v1`) on `<root>/pod-resources/kubelet.sock`: which of this node's
//! running pods holds which devices, and every device the node has, for monitoring agents.
//! Devices are listed one per entry, as upstream does.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::net::UnixListener;
use tonic::{Request, Response, Status};

use minik8s_deviceplugin::api::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use minik8s_deviceplugin::api::podresources::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, ContainerDevices,
    ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse, ListPodResourcesRequest,
    ListPodResourcesResponse, PodResources,
};
use minik8s_deviceplugin::uds;

use super::DeviceManager;

struct Service {
    manager: Arc<DeviceManager>,
}

fn devices(resource: &str, ids: &[String]) -> Vec<ContainerDevices> {
    ids.iter()
        .map(|id| ContainerDevices {
            resource_name: resource.to_string(),
            device_ids: vec![id.clone()],
            topology: None,
        })
        .collect()
}

impl Service {
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.manager.active_pods().unwrap_or_default()
    }

    /// A pod's containers (init containers first, as upstream lists restartable ones) with
    /// their devices.
    fn pod_resources(&self, pod: &Pod) -> PodResources {
        let held = self
            .manager
            .pod_devices(pod.metadata.uid.as_deref().unwrap_or_default());
        let spec = pod.spec.as_ref();
        let init = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten();
        let app = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
        let containers = init
            .chain(app)
            .map(|c| ContainerResources {
                name: c.name.clone(),
                devices: held
                    .get(&c.name)
                    .map(|by_resource| {
                        by_resource
                            .iter()
                            .flat_map(|(resource, ids)| devices(resource, ids))
                            .collect()
                    })
                    .unwrap_or_default(),
                ..Default::default()
            })
            .collect();
        PodResources {
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            containers,
        }
    }
}

#[async_trait::async_trait]
impl PodResourcesLister for Service {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        let pod_resources = self.pods().iter().map(|p| self.pod_resources(p)).collect();
        Ok(Response::new(ListPodResourcesResponse { pod_resources }))
    }

    async fn get_allocatable_resources(
        &self,
        _: Request<AllocatableResourcesRequest>,
    ) -> Result<Response<AllocatableResourcesResponse>, Status> {
        let devices = self
            .manager
            .all_devices()
            .iter()
            .flat_map(|(resource, ids)| devices(resource, ids))
            .collect();
        Ok(Response::new(AllocatableResourcesResponse {
            devices,
            ..Default::default()
        }))
    }

    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        let r = request.into_inner();
        let pod = self.pods().into_iter().find(|p| {
            p.metadata.name.as_deref() == Some(r.pod_name.as_str())
                && p.metadata.namespace.as_deref() == Some(r.pod_namespace.as_str())
        });
        let Some(pod) = pod else {
            return Err(Status::unknown(format!(
                "pod {} in namespace {} not found",
                r.pod_name, r.pod_namespace
            )));
        };
        Ok(Response::new(GetPodResourcesResponse {
            pod_resources: Some(self.pod_resources(&pod)),
        }))
    }
}

/// Serves PodResources until the future is dropped.
pub(super) async fn serve(manager: Arc<DeviceManager>, listener: UnixListener) {
    let service = PodResourcesListerServer::new(Service { manager });
    if let Err(e) = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming(uds::incoming(listener))
        .await
    {
        tracing::error!(error = %e, "pod resources server failed");
    }
}
