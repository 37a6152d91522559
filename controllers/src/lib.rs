//! Controllers and the scheduler that turn intent into pods. Arrive with their issue; until
//! then this crate only holds its place in the workspace.
