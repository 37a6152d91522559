//! The plugin side of the framework: what a device plugin implements ([`Plugin`]) and
//! [`serve`], which serves it on its socket in the device-plugins directory and keeps it
//! registered with the kubelet. As upstream plugins do, it registers again, on a fresh
//! socket, whenever the kubelet's `kubelet.sock` is made anew: a kubelet that starts removes
//! every socket in the directory, so a restarted kubelet finds its plugins again this way.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::api::v1beta1::device_plugin_server::{self, DevicePluginServer};
use crate::api::v1beta1::registration_client::RegistrationClient;
use crate::api::v1beta1::{
    AllocateRequest, AllocateResponse, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, Empty, ListAndWatchResponse, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse,
    RegisterRequest,
};
use crate::dirwatch::{Change, DirWatch};
use crate::{KUBELET_SOCKET, VERSION, uds};

/// How long registration keeps trying a `kubelet.sock` that exists but does not answer yet (a
/// kubelet between making its socket and serving on it) before waiting for a new one.
const REGISTER_PATIENCE: Duration = Duration::from_secs(5);

/// A device plugin: one extended resource and its devices.
#[async_trait::async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// The extended resource its devices make up (`vendor-domain/name`).
    fn resource_name(&self) -> String;

    /// What the kubelet is to call besides Allocate.
    fn options(&self) -> DevicePluginOptions {
        DevicePluginOptions::default()
    }

    /// The devices (with their health) now; the receiver sees each later change, which
    /// ListAndWatch sends on to the kubelet.
    fn devices(&self) -> watch::Receiver<Vec<Device>>;

    /// The devices the plugin would rather give to one container (only asked when its options
    /// say it answers): by default the ones it must include, then the first available.
    async fn preferred_allocation(
        &self,
        request: &ContainerPreferredAllocationRequest,
    ) -> Result<Vec<String>, Status> {
        Ok(first_available(request))
    }

    /// What one container given `device_ids` needs: device nodes, mounts, environment,
    /// annotations.
    async fn allocate(&self, device_ids: &[String]) -> Result<ContainerAllocateResponse, Status>;

    /// Readies devices before a container that holds them starts (only called when its
    /// options ask for it).
    async fn pre_start_container(&self, _device_ids: &[String]) -> Result<(), Status> {
        Ok(())
    }
}

/// The default preferred allocation: the devices that must be included, then available ones
/// in the order given, up to the size asked for.
pub fn first_available(request: &ContainerPreferredAllocationRequest) -> Vec<String> {
    let size = usize::try_from(request.allocation_size).unwrap_or(0);
    let mut out: Vec<String> = Vec::with_capacity(size);
    for id in request
        .must_include_device_i_ds
        .iter()
        .chain(&request.available_device_i_ds)
    {
        if out.len() >= size {
            break;
        }
        if !out.contains(id) {
            out.push(id.clone());
        }
    }
    out
}

/// The file name of a resource's socket: `example.com/dev` serves on `example.com_dev.sock`.
pub fn socket_name(resource: &str) -> String {
    format!("{}.sock", resource.replace('/', "_"))
}

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The kubelet refused the registration (unsupported version, invalid or taken name):
    /// upstream's plugins stop then.
    #[error("registering {resource} with the kubelet: {message}")]
    Refused { resource: String, message: String },
    #[error("serving the device plugin: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Where a plugin serves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The device-plugins directory: the kubelet's socket is there, the plugin's goes there.
    pub dir: PathBuf,
    /// The plugin's socket's file name in `dir`.
    pub socket: String,
}

impl ServeOptions {
    /// The plugin of `resource` in `dir`, on [`socket_name`]'s socket.
    pub fn new(dir: impl Into<PathBuf>, resource: &str) -> ServeOptions {
        ServeOptions {
            dir: dir.into(),
            socket: socket_name(resource),
        }
    }
}

/// Serves `plugin` and keeps it registered with the kubelet until an error ends it: the
/// kubelet refused the registration, or the socket could not be made. A kubelet that is not
/// there yet is waited for.
pub async fn serve<P: Plugin>(plugin: Arc<P>, options: ServeOptions) -> Result<(), PluginError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PluginError::Io { path, source }
    };
    std::fs::create_dir_all(&options.dir).map_err(io_err(&options.dir))?;
    // Watching before the first registration: a kubelet that starts in between is seen.
    let mut watch = DirWatch::new(&options.dir).map_err(io_err(&options.dir))?;
    let resource = plugin.resource_name();
    let socket = options.dir.join(&options.socket);
    loop {
        let listener = uds::bind(&socket).map_err(io_err(&socket))?;
        let (stop, stopped) = watch::channel(false);
        let service = Service {
            plugin: plugin.clone(),
            stopped: stopped.clone(),
        };
        let mut until_stopped = stopped.clone();
        let _server = AbortOnDrop(tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DevicePluginServer::new(service))
                .serve_with_incoming_shutdown(uds::incoming(listener), async move {
                    let _ = until_stopped.wait_for(|s| *s).await;
                }),
        ));
        match register(&options, plugin.as_ref()).await {
            Ok(()) => {
                tracing::info!(%resource, socket = %socket.display(), "registered with the kubelet")
            }
            Err(RegisterError::Refused(status)) => {
                let _ = stop.send(true);
                return Err(PluginError::Refused {
                    resource,
                    message: status.message().to_string(),
                });
            }
            Err(RegisterError::Unreachable(e)) => {
                tracing::info!(%resource, error = %e, "kubelet not there; waiting for it");
            }
        }
        // A kubelet that starts makes its socket anew: serve again, from a fresh socket (it
        // removed ours), and register with it.
        loop {
            let changes = watch.next().await.map_err(io_err(&options.dir))?;
            let kubelet_started = changes
                .iter()
                .any(|c| *c == Change::Created(KUBELET_SOCKET.into()));
            if kubelet_started {
                break;
            }
        }
        tracing::info!(%resource, "kubelet socket recreated; registering again");
        let _ = stop.send(true);
    }
}

/// The serving task of one generation, ended with it: when [`serve`] returns or is dropped,
/// the socket stops answering and (the generation's stop sender gone with it) every
/// ListAndWatch stream ends, so the kubelet sees the plugin go.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum RegisterError {
    /// Nothing answered on the kubelet's socket.
    Unreachable(String),
    /// The kubelet answered no.
    Refused(Status),
}

async fn register(options: &ServeOptions, plugin: &dyn Plugin) -> Result<(), RegisterError> {
    let kubelet = options.dir.join(KUBELET_SOCKET);
    let deadline = tokio::time::Instant::now() + REGISTER_PATIENCE;
    let mut wait = Duration::from_millis(10);
    let channel = loop {
        match uds::connect(&kubelet).await {
            Ok(c) => break c,
            // A socket file with nobody behind it yet may be a kubelet starting.
            Err(_) if kubelet.exists() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            Err(e) => return Err(RegisterError::Unreachable(e.to_string())),
        }
    };
    let request = RegisterRequest {
        version: VERSION.into(),
        endpoint: options.socket.clone(),
        resource_name: plugin.resource_name(),
        options: Some(plugin.options()),
    };
    match RegistrationClient::new(channel).register(request).await {
        Ok(_) => Ok(()),
        // A kubelet that could not dial us back removed our socket as it started (it clears
        // the directory before making its own): its kubelet.sock event, already queued,
        // brings a fresh socket and another registration. Anything else is a refusal.
        Err(s)
            if s.code() == tonic::Code::Unavailable
                || s.message().starts_with("failed to dial device plugin") =>
        {
            Err(RegisterError::Unreachable(s.message().to_string()))
        }
        Err(s) => Err(RegisterError::Refused(s)),
    }
}

/// The gRPC face of a plugin for one serving generation: its ListAndWatch streams end when
/// the generation is stopped, so the kubelet it served sees the plugin go.
struct Service<P> {
    plugin: Arc<P>,
    stopped: watch::Receiver<bool>,
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[async_trait::async_trait]
impl<P: Plugin> device_plugin_server::DevicePlugin for Service<P> {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(self.plugin.options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(&self, _: Request<Empty>) -> Result<Response<DeviceStream>, Status> {
        let devices = self.plugin.devices();
        let stopped = self.stopped.clone();
        let stream = futures::stream::unfold(
            (devices, stopped, true),
            |(mut devices, mut stopped, first)| async move {
                if !first {
                    tokio::select! {
                        changed = devices.changed() => changed.ok()?,
                        _ = stopped.wait_for(|s| *s) => return None,
                    }
                }
                let list = devices.borrow_and_update().clone();
                let response = ListAndWatchResponse { devices: list };
                Some((Ok(response), (devices, stopped, false)))
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let mut container_responses = Vec::new();
        for r in &request.get_ref().container_requests {
            container_responses.push(ContainerPreferredAllocationResponse {
                device_i_ds: self.plugin.preferred_allocation(r).await?,
            });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let mut container_responses = Vec::new();
        for r in &request.get_ref().container_requests {
            container_responses.push(self.plugin.allocate(&r.devices_ids).await?);
        }
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        request: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        self.plugin
            .pre_start_container(&request.get_ref().devices_ids)
            .await?;
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferred_allocation_keeps_the_required_devices_first() {
        let request = ContainerPreferredAllocationRequest {
            available_device_i_ds: vec!["a".into(), "b".into(), "c".into()],
            must_include_device_i_ds: vec!["c".into()],
            allocation_size: 2,
        };
        assert_eq!(first_available(&request), vec!["c", "a"]);
    }

    #[test]
    fn socket_names() {
        assert_eq!(socket_name("example.com/dev"), "example.com_dev.sock");
    }
}
