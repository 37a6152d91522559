//! Service networking on a node: the proxier (kube-proxy, iptables or nftables mode), cluster
//! DNS, an Ingress proxy and NetworkPolicy enforcement. All are plain API clients fed by
//! watches (the shared informers of their process, see `cache`); the first three share one
//! notion of which endpoints serve (`endpoints`).

pub mod cache;
pub mod dns;
pub mod endpoints;
pub mod forward;
pub mod ingress;
pub mod iptables;
pub mod metrics;
pub mod netpol;
pub mod nftables;
