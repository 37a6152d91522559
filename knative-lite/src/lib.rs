//! Functions that scale to zero, on top of minik8s. Arrives with its issue; until then this
//! crate only holds its place in the workspace.
