//! Every CRI call counted and timed once, in one place, as upstream's
//! `instrumentedRuntimeService` wraps its runtime: the kubelet talks to its runtime only
//! through this wrapper, so `kubelet_runtime_operations_*` see every call, whoever makes it
//! (pod workers, the relist, the API's stats and exec).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use k8s_cri::v1 as cri;

use super::{Result, Runtime};
use crate::metrics::RuntimeMetrics;

/// A runtime whose calls are recorded in `metrics` under upstream's operation names.
pub struct Instrumented {
    inner: Arc<dyn Runtime>,
    metrics: RuntimeMetrics,
}

impl Instrumented {
    pub fn new(inner: Arc<dyn Runtime>, metrics: RuntimeMetrics) -> Instrumented {
        Instrumented { inner, metrics }
    }

    async fn timed<T>(&self, operation: &str, call: impl Future<Output = Result<T>>) -> Result<T> {
        let started = Instant::now();
        let result = call.await;
        self.metrics
            .record(operation, started.elapsed(), result.is_err());
        result
    }
}

#[async_trait]
impl Runtime for Instrumented {
    async fn version(&self) -> Result<cri::VersionResponse> {
        self.timed("version", self.inner.version()).await
    }

    async fn status(&self) -> Result<cri::StatusResponse> {
        self.timed("status", self.inner.status()).await
    }

    async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let started = Instant::now();
        let result = self
            .timed(
                "run_podsandbox",
                self.inner.run_pod_sandbox(config, runtime_handler),
            )
            .await;
        self.metrics
            .record_run_sandbox(runtime_handler, started.elapsed(), result.is_err());
        result
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.timed("stop_podsandbox", self.inner.stop_pod_sandbox(id))
            .await
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.timed("remove_podsandbox", self.inner.remove_pod_sandbox(id))
            .await
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        self.timed("podsandbox_status", self.inner.pod_sandbox_status(id))
            .await
    }

    async fn list_pod_sandboxes(&self) -> Result<Vec<cri::PodSandbox>> {
        self.timed("list_podsandbox", self.inner.list_pod_sandboxes())
            .await
    }

    async fn list_pod_sandboxes_labeled(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>> {
        self.timed(
            "list_podsandbox",
            self.inner.list_pod_sandboxes_labeled(labels),
        )
        .await
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        sandbox: cri::PodSandboxConfig,
    ) -> Result<String> {
        self.timed(
            "create_container",
            self.inner.create_container(sandbox_id, config, sandbox),
        )
        .await
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.timed("start_container", self.inner.start_container(id))
            .await
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        self.timed(
            "stop_container",
            self.inner.stop_container(id, timeout_seconds),
        )
        .await
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.timed("remove_container", self.inner.remove_container(id))
            .await
    }

    async fn list_containers(&self) -> Result<Vec<cri::Container>> {
        self.timed("list_containers", self.inner.list_containers())
            .await
    }

    async fn list_containers_labeled(
        &self,
        labels: HashMap<String, String>,
    ) -> Result<Vec<cri::Container>> {
        self.timed(
            "list_containers",
            self.inner.list_containers_labeled(labels),
        )
        .await
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        self.timed("container_status", self.inner.container_status(id))
            .await
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_seconds: i64,
    ) -> Result<cri::ExecSyncResponse> {
        self.timed("exec_sync", self.inner.exec_sync(id, cmd, timeout_seconds))
            .await
    }

    async fn exec(&self, req: cri::ExecRequest) -> Result<String> {
        self.timed("exec", self.inner.exec(req)).await
    }

    async fn attach(&self, req: cri::AttachRequest) -> Result<String> {
        self.timed("attach", self.inner.attach(req)).await
    }

    async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String> {
        self.timed("port_forward", self.inner.port_forward(req))
            .await
    }

    async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>> {
        self.timed("list_container_stats", self.inner.list_container_stats())
            .await
    }

    async fn list_pod_sandbox_stats(&self) -> Result<Vec<cri::PodSandboxStats>> {
        self.timed("list_podsandbox_stats", self.inner.list_pod_sandbox_stats())
            .await
    }

    async fn update_pod_cidr(&self, cidr: &str) -> Result<()> {
        self.timed("update_runtime_config", self.inner.update_pod_cidr(cidr))
            .await
    }

    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        self.timed("image_status", self.inner.image_status(image))
            .await
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        self.timed("pull_image", self.inner.pull_image(image)).await
    }

    async fn list_images(&self) -> Result<Vec<cri::Image>> {
        self.timed("list_images", self.inner.list_images()).await
    }

    async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        self.timed("image_fs_info", self.inner.image_fs_info())
            .await
    }

    /// Not a CRI call: passed through uncounted.
    async fn simulated_probe(
        &self,
        container_id: &str,
        kind: crate::probe::Kind,
    ) -> Option<std::result::Result<(), String>> {
        self.inner.simulated_probe(container_id, kind).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::KubeletMetrics;
    use crate::runtime::fake::FakeRuntime;

    #[tokio::test]
    async fn calls_are_recorded_under_upstreams_names() {
        let metrics = KubeletMetrics::new("n1");
        let rt = Instrumented::new(
            Arc::new(FakeRuntime::with_images(&["busybox:1.36"])),
            metrics.runtime.clone(),
        );
        rt.version().await.unwrap();
        rt.list_containers().await.unwrap();
        rt.list_containers_labeled(HashMap::new()).await.unwrap();
        assert!(rt.container_status("missing").await.is_err());
        let text = metrics.render();
        for (series, want) in [
            (
                "kubelet_runtime_operations_total{operation_type=\"version\"}",
                "1",
            ),
            (
                "kubelet_runtime_operations_total{operation_type=\"list_containers\"}",
                "2",
            ),
            (
                "kubelet_runtime_operations_total{operation_type=\"container_status\"}",
                "1",
            ),
            (
                "kubelet_runtime_operations_errors_total{operation_type=\"container_status\"}",
                "1",
            ),
        ] {
            assert!(
                text.contains(&format!("{series} {want}\n")),
                "{series}: {text}"
            );
        }
        assert!(
            !text.contains("kubelet_runtime_operations_errors_total{operation_type=\"version\"}")
        );
    }
}
