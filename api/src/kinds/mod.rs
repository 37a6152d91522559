//! Built-in kinds, one module per kind (or per small family sharing its rules): everything
//! upstream keeps per kind, as a `Kind` implementation on the k8s-openapi type, in one place:
//! defaulting, the registry strategy, validation, and how `kubectl get` prints it (its Table
//! columns and row, upstream's printer). A new kind is a new module here, and an entry in the
//! registry.

pub mod admission_registration;
pub mod api_service;
pub mod apps;
pub mod batch;
pub mod certificates;
pub mod component_status;
pub mod config;
pub mod csi;
pub mod custom_resource_definition;
pub mod endpoint_slice;
pub mod endpoints;
pub mod events;
pub mod flowcontrol;
pub mod hpa;
pub mod ingress;
pub mod lease;
pub mod limit_range;
pub mod namespace;
pub mod network_policy;
pub mod node;
pub mod pod;
pub mod pod_disruption_budget;
pub mod pod_template;
pub mod priority_class;
pub mod rbac;
pub mod replication_controller;
pub mod resource_quota;
pub mod runtime_class;
pub mod service;
pub mod service_account;
pub mod storage;
