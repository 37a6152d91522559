//! The loops that turn intent into pods: the controller-manager's controllers, the scheduler,
//! and hollow nodes for tests and scale runs. Every one is an ordinary kube-rs client of the
//! API (watch, reflector cache, reconcile by key, requeue with backoff), so they prove the API
//! works for third-party controllers too.

pub mod clientbuilder;
pub mod clusterroleaggregation;
pub mod cronjob;
pub mod csrapproving;
pub mod csrsigning;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod ephemeral;
pub mod garbagecollector;
pub mod hollow;
/// The shared informers, in a crate of their own so the proxy and the kubelet can use them.
pub use minik8s_informers as informers;
pub mod job;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod rootcacertpublisher;
pub mod scheduler;
pub mod serviceaccount;
pub mod serving;
pub mod statefulset;
pub mod tainteviction;
pub mod tokencleaner;
pub mod ttl_after_finished;
pub mod util;
pub mod volume;
