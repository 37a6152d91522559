//! Registries: the storage-facing half of each resource (upstream's `registry` packages).

pub mod apply;
pub mod external;
pub mod generic;
pub mod namespaces;
pub mod services;
pub mod typed;
pub mod watch_cache;

#[cfg(test)]
mod consistent_read_tests;
