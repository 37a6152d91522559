//! The minik8s API server: Kubernetes API paths and semantics over a durable store.
//!
//! `storage` is the only code that touches the data; `registry` holds the semantics every
//! resource shares; `handlers` speaks HTTP; `server` and `serve` wire it up. `router` builds
//! the whole HTTP API so tests can drive it without a socket.

pub mod admission;
pub mod aggregator;
pub mod audit;
pub mod auth;
pub mod authz;
pub mod builtin;
pub mod crds;
pub mod dashboard;
pub mod handlers;
pub mod kubelet;
pub mod metrics;
pub mod pki;
mod policy_params;
pub mod protobuf;
pub mod proxy_transport;
pub mod rbac_bootstrap;
pub mod registry;
pub mod serve;
pub mod server;
pub mod serviceaccount;
pub mod storage;

pub use handlers::router;
pub use server::{ApiServer, Config, Prepared, ServerError, prepare};
