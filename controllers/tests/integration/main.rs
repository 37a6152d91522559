//! The controllers' integration tests, one module per controller, in one test binary: each
//! binary links the whole in-process API server and client stack again, which cost CI about
//! 45 s per file when every file was a binary of its own.

mod common;
mod support;

mod clientbuilder;
mod clusterroleaggregation;
mod controller_ref;
mod cronjob;
mod csrapproving;
mod daemonset;
mod deployment;
mod disruption;
mod endpoints;
mod ephemeral;
mod garbagecollector;
mod hollow;
mod job;
mod leader;
mod metrics;
mod namespace;
mod nodeipam;
mod nodelifecycle;
mod podgc;
mod replicaset;
mod replication;
mod resourcequota;
mod rootcacertpublisher;
mod scheduler;
mod scheduler_devices;
mod scheduler_pods;
mod scheduler_volumes;
mod serviceaccount;
mod statefulset;
mod tokencleaner;
mod volume;
