//! The node agent: runs pods on containerd through the CRI. So far it holds what a node needs
//! before the first pod: a private containerd (`containerd`), and images built on the machine
//! and imported into containerd without a registry (`images`).

pub mod containerd;
pub mod images;
