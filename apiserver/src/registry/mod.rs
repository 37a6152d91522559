//! Registries: the storage-facing half of each resource (upstream's `registry` packages).

pub mod generic;
