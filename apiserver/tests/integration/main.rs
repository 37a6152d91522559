//! The API server's integration tests, one module per area, in one test binary: each binary
//! links the whole server and client stack again, which cost CI about 45 s per file when
//! every file was a binary of its own.

mod access_reviews;
mod admission;
mod admission_webhooks;
mod aggregation;
mod api_resources;
mod apiserver_endpoints;
mod audit;
mod bootstrap_tokens;
mod compat;
mod component_status;
mod crd;
mod dashboard;
mod encryption;
mod ephemeral_containers;
mod extended_resources;
mod hpa_versions;
mod https_server;
mod issuer_discovery;
mod kube_client;
mod layers;
mod metrics;
mod metrics_api;
mod nonresource;
mod openapi;
mod patch;
mod pod_security;
mod policy;
mod protobuf;
mod proxy;
mod rbac;
mod rbac_bootstrap;
mod rest;
mod serviceaccounts;
mod services;
mod storage;
mod store;
