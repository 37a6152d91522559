//! What the two kinds of hollow node agree on (the light loop in the controllers crate and
//! the hollow kubelets in the kubelet crate): the annotations with which a test states what
//! its pods do, and the addresses they report. The addresses exist only as strings: nothing
//! is ever sent to them.

use std::net::Ipv4Addr;

/// Every light hollow node carries this label, valued with its name prefix.
pub const HOLLOW_LABEL: &str = "minik8s.io/hollow";
/// Pods whose restartPolicy is not Always end with this code (default 0: Succeeded).
pub const EXIT_CODE_ANNOTATION: &str = "hollow.minik8s.io/exit-code";
/// How long such pods run first, in seconds (default 0).
pub const RUN_SECONDS_ANNOTATION: &str = "hollow.minik8s.io/run-seconds";
/// `"false"`: the pod runs but is not Ready (it may flip at any time).
pub const READY_ANNOTATION: &str = "hollow.minik8s.io/ready";

/// Node `index`'s address: `100.127.0.0/16` + index.
pub fn node_address(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(100, 127, (index / 256) as u8, (index % 256) as u8)
}

/// The first address of node `index`'s pod range when the cluster assigns none: the
/// `index`th /24 of `100.64.0.0/10`.
pub fn pod_subnet(index: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 0, 0)) + ((index as u32) << 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_do_not_overlap_between_nodes() {
        assert_eq!(node_address(0), Ipv4Addr::new(100, 127, 0, 0));
        assert_eq!(node_address(257), Ipv4Addr::new(100, 127, 1, 1));
        assert_eq!(pod_subnet(1), Ipv4Addr::new(100, 64, 1, 0));
        assert_eq!(pod_subnet(1000), Ipv4Addr::new(100, 67, 232, 0));
    }
}
