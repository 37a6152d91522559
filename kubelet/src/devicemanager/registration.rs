//! The Registration service on `<root>/device-plugins/kubelet.sock`, with upstream's checks
//! and messages: the API version, the resource name, and a socket the kubelet can dial.

use std::sync::Arc;

use tokio::net::UnixListener;
use tonic::{Request, Response, Status};

use minik8s_deviceplugin::api::v1beta1::registration_server::{Registration, RegistrationServer};
use minik8s_deviceplugin::api::v1beta1::{Empty, RegisterRequest};
use minik8s_deviceplugin::{VERSION, is_extended_resource_name, uds};

use super::DeviceManager;

struct Service {
    manager: Arc<DeviceManager>,
}

#[async_trait::async_trait]
impl Registration for Service {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        tracing::info!(resource = %r.resource_name, endpoint = %r.endpoint, "device plugin registration");
        if r.version != VERSION {
            let message = format!(
                "requested API version {:?} is not supported by kubelet. Supported versions are [{VERSION:?}]",
                r.version
            );
            tracing::info!(resource = %r.resource_name, %message, "bad device plugin registration");
            return Err(Status::unknown(message));
        }
        if !is_extended_resource_name(&r.resource_name) {
            let message = format!("the ResourceName {:?} is invalid", r.resource_name);
            tracing::info!(resource = %r.resource_name, %message, "bad device plugin registration");
            return Err(Status::unknown(message));
        }
        // Upstream joins the endpoint to its directory; a path that leaves it is refused.
        if r.endpoint.is_empty() || r.endpoint.contains('/') {
            return Err(Status::unknown(format!(
                "invalid device plugin endpoint {:?}",
                r.endpoint
            )));
        }
        let path = self.manager.dir.join(&r.endpoint);
        let channel = uds::connect(&path)
            .await
            .map_err(|e| Status::unknown(format!("failed to dial device plugin: {e}")))?;
        self.manager.register_plugin(
            r.resource_name,
            r.endpoint,
            channel,
            r.options.unwrap_or_default(),
        );
        Ok(Response::new(Empty {}))
    }
}

/// Serves registrations until the future is dropped.
pub(super) async fn serve(manager: Arc<DeviceManager>, listener: UnixListener) {
    let service = RegistrationServer::new(Service { manager });
    if let Err(e) = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming(uds::incoming(listener))
        .await
    {
        tracing::error!(error = %e, "device plugin registration server failed");
    }
}
