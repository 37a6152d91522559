//! What several controllers share, with upstream's semantics (pkg/controller's
//! controller_utils.go and controller_ref_manager.go).

pub mod clock;
pub mod controller_ref;
pub mod duration;
pub mod events;
pub mod expectations;
pub mod hash;
pub mod history;
pub mod pods;
pub mod queue;
pub mod reconciler;
pub mod runtime;
pub mod service_pods;
pub mod taints;
pub mod workqueue;
