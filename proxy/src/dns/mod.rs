//! Cluster DNS as the Kubernetes DNS specification and CoreDNS's `kubernetes` plugin answer it.
//! The zone is rebuilt from the Service and EndpointSlice caches (the process's shared
//! informers) whenever they change, so a query is one map lookup; names outside the cluster domain (and reverse names we
//! do not own) are relayed unchanged to the resolvers of /etc/resolv.conf.

pub mod metrics;
pub mod server;
pub mod service;
pub mod zone;

pub use metrics::{DnsMetrics, Proto};
pub use server::{DnsConfig, Server, run, upstreams_from_resolv_conf};
pub use zone::{Answer, Zone};
