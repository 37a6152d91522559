//! The node agent: registers the node, runs this node's pods on containerd through the CRI,
//! and reports their status. Everything it knows comes from the API server and the runtime;
//! it keeps no files of its own as the source of truth.

pub mod pod;
pub mod runtime;
pub mod volumes;
