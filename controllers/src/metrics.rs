//! One Prometheus registry per component this crate runs, apart from the process's default
//! one: an all-in-one server runs the API server, the controller-manager and the scheduler in
//! one process, and each serves only its own series on its own port (with `process_*`, which
//! describe the process they share), as the separate upstream binaries do.

use std::sync::LazyLock;

use prometheus::{Encoder, Registry, TextEncoder};

/// The controller-manager's series: the work queues of every controller (`workqueue_*`) and
/// what controllers count themselves.
pub fn controller_manager() -> &'static Registry {
    static REGISTRY: LazyLock<Registry> = LazyLock::new(with_process);
    &REGISTRY
}

/// The scheduler's series (`scheduler_*`).
pub fn scheduler() -> &'static Registry {
    static REGISTRY: LazyLock<Registry> = LazyLock::new(with_process);
    &REGISTRY
}

/// A registry holding the process collector (`process_*`, read from /proc when scraped).
fn with_process() -> Registry {
    let registry = Registry::new();
    #[cfg(target_os = "linux")]
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("a new registry takes the process collector");
    registry
}

/// Registers `collector` in `registry`; a second registration of the same series (a
/// component started twice in one process, as tests do) keeps the first.
pub fn register<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: &C,
) {
    let _ = registry.register(Box::new(collector.clone()));
}

/// The Prometheus text exposition of `registry`.
pub fn render(registry: &Registry) -> String {
    let mut buf = Vec::new();
    TextEncoder::new()
        .encode(&registry.gather(), &mut buf)
        .expect("text encoding");
    String::from_utf8(buf).expect("utf-8 metrics")
}
