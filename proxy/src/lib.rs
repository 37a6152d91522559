//! Service networking on a node: the proxier (kube-proxy, iptables or nftables mode), cluster
//! DNS and an Ingress proxy. All three are plain API clients fed by watches of Services and
//! EndpointSlices (the shared informers of their process, see `cache`), and share one notion of
//! which endpoints serve (`endpoints`).

pub mod cache;
pub mod dns;
pub mod endpoints;
pub mod forward;
pub mod ingress;
pub mod iptables;
pub mod nftables;
