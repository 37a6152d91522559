//! Registries: the storage-facing half of each resource (upstream's `registry` packages).

pub mod apply;
pub mod crd_controller;
pub mod custom;
pub mod generic;
pub mod namespaces;
pub mod services;
