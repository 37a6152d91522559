//! Pods on this node: what the runtime holds for each ([`model`]), what to do next
//! ([`actions`]), when to retry ([`backoff`]) and what to report ([`status`]).

pub mod actions;
pub mod backoff;
pub mod ephemeral;
pub mod manager;
pub mod model;
pub mod spec;
mod start;
pub mod status;
pub mod worker;
