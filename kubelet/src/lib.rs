//! The node agent: runs pods on containerd through the CRI. Arrives with the kubelet issue;
//! until then this crate only holds its place in the workspace.
