//! The container runtime as the kubelet sees it: the CRI (runtime.v1) calls it makes, behind a
//! trait so that pod logic is tested against a recording fake and run against containerd.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Debug, Clone, thiserror::Error)]
#[error("{operation}: {message}")]
pub struct RuntimeError {
    pub operation: &'static str,
    pub code: tonic::Code,
    pub message: String,
}

impl RuntimeError {
    pub fn is_not_found(&self) -> bool {
        self.code == tonic::Code::NotFound
    }
}

pub type Result<T> = std::result::Result<T, RuntimeError>;

/// The CRI calls the kubelet makes.
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    async fn version(&self) -> Result<cri::VersionResponse>;
    async fn status(&self) -> Result<cri::StatusResponse>;
    /// `runtime_handler` is the RuntimeClass's handler, empty for the runtime's default.
    async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String>;
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus>;
    async fn list_pod_sandboxes(&self) -> Result<Vec<cri::PodSandbox>>;
    /// Sandboxes carrying every one of `labels`.
    async fn list_pod_sandboxes_labeled(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>>;
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox: cri::PodSandboxConfig,
    ) -> Result<String>;
    async fn start_container(&self, id: &str) -> Result<()>;
    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()>;
    async fn remove_container(&self, id: &str) -> Result<()>;
    async fn list_containers(&self) -> Result<Vec<cri::Container>>;
    /// Containers carrying every one of `labels`.
    async fn list_containers_labeled(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::Container>>;
    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus>;
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_seconds: i64,
    ) -> Result<cri::ExecSyncResponse>;
    /// A URL on the runtime's streaming server for an exec session.
    async fn exec(&self, req: cri::ExecRequest) -> Result<String>;
    async fn attach(&self, req: cri::AttachRequest) -> Result<String>;
    async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String>;
    async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>>;
    async fn list_pod_sandbox_stats(&self) -> Result<Vec<cri::PodSandboxStats>>;
    async fn update_pod_cidr(&self, cidr: &str) -> Result<()>;
    /// The image if present; `None` when the runtime does not have it.
    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>>;
    /// Pulls an image, returning its reference (image ID).
    async fn pull_image(&self, image: &str) -> Result<String>;
    async fn list_images(&self) -> Result<Vec<cri::Image>>;
    async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse>;
    /// The result of a `kind` probe of a container, answered by a runtime whose containers
    /// have nothing to dial or exec into (a hollow node's). `None`, as for every real runtime:
    /// the kubelet runs the probe itself.
    async fn simulated_probe(
        &self,
        _container_id: &str,
        _kind: crate::probe::Kind,
    ) -> Option<std::result::Result<(), String>> {
        None
    }
}

/// A CRI runtime over a unix socket (containerd's CRI plugin).
#[derive(Clone)]
pub struct CriRuntime {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    pub socket: PathBuf,
}

fn err(operation: &'static str) -> impl Fn(tonic::Status) -> RuntimeError {
    move |s| RuntimeError {
        operation,
        code: s.code(),
        message: s.message().to_string(),
    }
}

impl CriRuntime {
    /// Connects to the CRI socket; fails fast when nothing listens there.
    pub async fn connect(socket: &Path) -> Result<CriRuntime> {
        let path = socket.to_path_buf();
        let channel = Endpoint::try_from("http://[::]:50051")
            .expect("static endpoint")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .map_err(|e| RuntimeError {
                operation: "connect",
                code: tonic::Code::Unavailable,
                message: format!("{}: {e}", socket.display()),
            })?;
        let limit = 64 * 1024 * 1024;
        Ok(CriRuntime {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(limit),
            images: ImageServiceClient::new(channel).max_decoding_message_size(limit),
            socket: socket.to_path_buf(),
        })
    }
}

#[async_trait]
impl Runtime for CriRuntime {
    async fn version(&self) -> Result<cri::VersionResponse> {
        let req = cri::VersionRequest {
            version: "v1".into(),
        };
        Ok(self
            .runtime
            .clone()
            .version(req)
            .await
            .map_err(err("Version"))?
            .into_inner())
    }

    async fn status(&self) -> Result<cri::StatusResponse> {
        let req = cri::StatusRequest { verbose: false };
        Ok(self
            .runtime
            .clone()
            .status(req)
            .await
            .map_err(err("Status"))?
            .into_inner())
    }

    async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.to_string(),
        };
        Ok(self
            .runtime
            .clone()
            .run_pod_sandbox(req)
            .await
            .map_err(err("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .stop_pod_sandbox(req)
            .await
            .map_err(err("StopPodSandbox"))?;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .remove_pod_sandbox(req)
            .await
            .map_err(err("RemovePodSandbox"))?;
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        };
        let resp = self
            .runtime
            .clone()
            .pod_sandbox_status(req)
            .await
            .map_err(err("PodSandboxStatus"))?;
        resp.into_inner().status.ok_or_else(|| RuntimeError {
            operation: "PodSandboxStatus",
            code: tonic::Code::Internal,
            message: "empty status".into(),
        })
    }

    async fn list_pod_sandboxes_labeled(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>> {
        let filter = cri::PodSandboxFilter {
            label_selector: labels,
            ..Default::default()
        };
        let req = cri::ListPodSandboxRequest {
            filter: Some(filter),
        };
        Ok(self
            .runtime
            .clone()
            .list_pod_sandbox(req)
            .await
            .map_err(err("ListPodSandbox"))?
            .into_inner()
            .items)
    }

    async fn list_pod_sandboxes(&self) -> Result<Vec<cri::PodSandbox>> {
        let req = cri::ListPodSandboxRequest { filter: None };
        Ok(self
            .runtime
            .clone()
            .list_pod_sandbox(req)
            .await
            .map_err(err("ListPodSandbox"))?
            .into_inner()
            .items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox: cri::PodSandboxConfig,
    ) -> Result<String> {
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox),
        };
        Ok(self
            .runtime
            .clone()
            .create_container(req)
            .await
            .map_err(err("CreateContainer"))?
            .into_inner()
            .container_id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let req = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .start_container(req)
            .await
            .map_err(err("StartContainer"))?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        let req = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_seconds,
        };
        self.runtime
            .clone()
            .stop_container(req)
            .await
            .map_err(err("StopContainer"))?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let req = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .remove_container(req)
            .await
            .map_err(err("RemoveContainer"))?;
        Ok(())
    }

    async fn list_containers_labeled(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::Container>> {
        let filter = cri::ContainerFilter {
            label_selector: labels,
            ..Default::default()
        };
        let req = cri::ListContainersRequest {
            filter: Some(filter),
        };
        Ok(self
            .runtime
            .clone()
            .list_containers(req)
            .await
            .map_err(err("ListContainers"))?
            .into_inner()
            .containers)
    }

    async fn list_containers(&self) -> Result<Vec<cri::Container>> {
        let req = cri::ListContainersRequest { filter: None };
        Ok(self
            .runtime
            .clone()
            .list_containers(req)
            .await
            .map_err(err("ListContainers"))?
            .into_inner()
            .containers)
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        let resp = self
            .runtime
            .clone()
            .container_status(req)
            .await
            .map_err(err("ContainerStatus"))?;
        resp.into_inner().status.ok_or_else(|| RuntimeError {
            operation: "ContainerStatus",
            code: tonic::Code::Internal,
            message: "empty status".into(),
        })
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_seconds: i64,
    ) -> Result<cri::ExecSyncResponse> {
        let req = cri::ExecSyncRequest {
            container_id: id.into(),
            cmd,
            timeout: timeout_seconds,
        };
        Ok(self
            .runtime
            .clone()
            .exec_sync(req)
            .await
            .map_err(err("ExecSync"))?
            .into_inner())
    }

    async fn exec(&self, req: cri::ExecRequest) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .exec(req)
            .await
            .map_err(err("Exec"))?
            .into_inner()
            .url)
    }

    async fn attach(&self, req: cri::AttachRequest) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .attach(req)
            .await
            .map_err(err("Attach"))?
            .into_inner()
            .url)
    }

    async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String> {
        Ok(self
            .runtime
            .clone()
            .port_forward(req)
            .await
            .map_err(err("PortForward"))?
            .into_inner()
            .url)
    }

    async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>> {
        let req = cri::ListContainerStatsRequest { filter: None };
        Ok(self
            .runtime
            .clone()
            .list_container_stats(req)
            .await
            .map_err(err("ListContainerStats"))?
            .into_inner()
            .stats)
    }

    async fn list_pod_sandbox_stats(&self) -> Result<Vec<cri::PodSandboxStats>> {
        let req = cri::ListPodSandboxStatsRequest { filter: None };
        Ok(self
            .runtime
            .clone()
            .list_pod_sandbox_stats(req)
            .await
            .map_err(err("ListPodSandboxStats"))?
            .into_inner()
            .stats)
    }

    async fn update_pod_cidr(&self, cidr: &str) -> Result<()> {
        let req = cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri::RuntimeConfig {
                network_config: Some(cri::NetworkConfig {
                    pod_cidr: cidr.into(),
                }),
            }),
        };
        self.runtime
            .clone()
            .update_runtime_config(req)
            .await
            .map_err(err("UpdateRuntimeConfig"))?;
        Ok(())
    }

    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        let req = cri::ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        Ok(self
            .images
            .clone()
            .image_status(req)
            .await
            .map_err(err("ImageStatus"))?
            .into_inner()
            .image)
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        let req = cri::PullImageRequest {
            image: Some(image_spec(image)),
            auth: None,
            sandbox_config: None,
        };
        Ok(self
            .images
            .clone()
            .pull_image(req)
            .await
            .map_err(err("PullImage"))?
            .into_inner()
            .image_ref)
    }

    async fn list_images(&self) -> Result<Vec<cri::Image>> {
        let req = cri::ListImagesRequest { filter: None };
        Ok(self
            .images
            .clone()
            .list_images(req)
            .await
            .map_err(err("ListImages"))?
            .into_inner()
            .images)
    }

    async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        Ok(self
            .images
            .clone()
            .image_fs_info(cri::ImageFsInfoRequest {})
            .await
            .map_err(err("ImageFsInfo"))?
            .into_inner())
    }
}

pub fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.into(),
        ..Default::default()
    }
}

pub mod fake;
pub mod instrumented;
pub mod pod_ips;

pub use instrumented::Instrumented;
