//! Service networking (iptables proxier, cluster DNS, Ingress). Arrives with the networking
//! issue; until then this crate only holds its place in the workspace.
