//! How long a controller waits before retrying a failed sync.

use std::fmt::Display;
use std::time::Duration;

use kube::runtime::controller::Action;

/// The retry after a failed sync of `key`: soon after a conflict (the cache is behind a
/// write and the watch event is on its way), after a second otherwise.
pub fn retry(key: &str, kube_error: Option<&kube::Error>, error: &dyn Display) -> Action {
    if let Some(kube::Error::Api(s)) = kube_error
        && s.code == 409
    {
        tracing::debug!(%key, %error, "conflict");
        return Action::requeue(Duration::from_millis(100));
    }
    tracing::warn!(%key, %error, "sync failed");
    Action::requeue(Duration::from_secs(1))
}
