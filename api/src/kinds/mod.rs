//! Built-in kinds, one module per kind (or per small family sharing its rules): everything
//! upstream keeps per kind, as a `Kind` implementation on the k8s-openapi type, in one place:
//! defaulting, the registry strategy, validation, and how `kubectl get` prints it (its Table
//! columns and row, upstream's printer). A new kind is a new module here, and an entry in the
//! registry.

pub mod apps;
pub mod batch;
pub mod config;
pub mod custom_resource_definition;
pub mod endpoint_slice;
pub mod endpoints;
pub mod events;
pub mod hpa;
pub mod ingress;
pub mod lease;
pub mod namespace;
pub mod node;
pub mod pod;
pub mod rbac;
pub mod service;
pub mod service_account;
pub mod storage;
