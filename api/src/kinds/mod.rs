//! Built-in kinds: upstream's defaulting, registry strategy and validation for each, as
//! `Kind` implementations on the k8s-openapi types.

pub mod apps;
pub mod batch;
pub mod core;
pub mod events;
pub mod other;
pub mod pod;
