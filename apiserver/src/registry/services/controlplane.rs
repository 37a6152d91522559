//! The `kubernetes` Service in `default` and its Endpoints and EndpointSlice, which tell
//! in-cluster clients where the API servers are (upstream's kubernetesservice controller and
//! endpoints adapter). The Service gets the first address of the service range and port 443
//! → the secure port; which addresses the endpoints list is the endpoint reconciler's choice
//! ([`super::endpoint_reconciler`]), written here as upstream's adapter writes it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use minik8s_api::ApiError;
use minik8s_api::strategy::{BuiltIn, Kind};

use super::ServiceAllocator;
use crate::registry::generic::{GenericRegistry, Part};
use crate::registry::typed::Registries;

fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some("kubernetes".into()),
        namespace: Some("default".into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

/// Creates the object, or updates it when `differs` says the stored one is not as wanted.
async fn ensure<K: Kind>(
    reg: &GenericRegistry<BuiltIn<K>>,
    want: K,
    differs: impl Fn(&K, &K) -> bool,
    merge: impl Fn(&K, K) -> K,
) -> Result<(), ApiError> {
    let current = match reg.get(Some("default"), "kubernetes").await {
        Ok(c) => c,
        Err(e) if e.code == 404 => {
            return match reg.create(Some("default"), want, false).await {
                Ok(_) => Ok(()),
                // Another server made it meanwhile.
                Err(e) if e.code == 409 => Ok(()),
                Err(e) => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    if differs(&current, &want) {
        let body = merge(&current, want);
        reg.update(Some("default"), "kubernetes", body, Part::Main, false)
            .await?;
    }
    Ok(())
}

/// Ensures the `kubernetes` Service, port 443 → `port`, written through the served registries
/// so its cluster IP is allocated by `services` as any other Service's is.
pub async fn ensure_service(
    registries: &Registries,
    services: &ServiceAllocator,
    port: u16,
) -> Result<(), ApiError> {
    let labels = [("component", "apiserver"), ("provider", "kubernetes")];
    let svc = Service {
        metadata: meta(&labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(services.first_ip().to_string()),
            session_affinity: Some("None".into()),
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                protocol: Some("TCP".into()),
                port: 443,
                target_port: Some(IntOrString::Int(i32::from(port))),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    ensure(
        &registries.get::<Service>(),
        svc,
        |cur, want| {
            let ports = |s: &Service| s.spec.as_ref().and_then(|s| s.ports.clone());
            ports(cur) != ports(want) || cur.metadata.labels != want.metadata.labels
        },
        |cur, want| {
            let mut out = cur.clone();
            out.metadata.labels = want.metadata.labels;
            if let (Some(o), Some(w)) = (out.spec.as_mut(), want.spec) {
                o.ports = w.ports;
            }
            out
        },
    )
    .await
}

/// The one port every API server serves on (all of them must agree, as upstream requires).
pub fn endpoint_ports(port: u16) -> Vec<EndpointPort> {
    vec![EndpointPort {
        name: Some("https".into()),
        port: i32::from(port),
        protocol: Some("TCP".into()),
        ..Default::default()
    }]
}

/// The Endpoints listing `ips` (sorted, as given) on `ports`: one subset, the label that keeps
/// the mirroring controller away.
pub fn endpoints_for(ips: &[String], ports: &[EndpointPort]) -> Endpoints {
    Endpoints {
        metadata: meta(&[("endpointslice.kubernetes.io/skip-mirror", "true")]),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(
                ips.iter()
                    .map(|ip| EndpointAddress {
                        ip: ip.clone(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: Some(ports.to_vec()),
            ..Default::default()
        }]),
    }
}

/// The EndpointSlice `kubernetes` of `address_type` listing `ips`, each ready.
pub fn slice_for(ips: &[String], ports: &[EndpointPort], address_type: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: meta(&[("kubernetes.io/service-name", "kubernetes")]),
        address_type: address_type.into(),
        endpoints: ips
            .iter()
            .map(|ip| Endpoint {
                addresses: vec![ip.clone()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ports: Some(
            ports
                .iter()
                .map(|p| SlicePort {
                    name: p.name.clone(),
                    port: Some(p.port),
                    protocol: p.protocol.clone(),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

/// Writes the Endpoints and the EndpointSlice `kubernetes` to list `ips` of the service's
/// family (`ipv6`) on `port`, touching neither when it already does (upstream's
/// `EndpointsAdapter.Sync`).
pub async fn sync_endpoints(
    registries: &Registries,
    ips: &[String],
    port: u16,
    ipv6: bool,
) -> Result<(), ApiError> {
    let ips: Vec<String> = ips
        .iter()
        .filter(|ip| ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6() == ipv6))
        .cloned()
        .collect();
    let ports = endpoint_ports(port);
    ensure(
        &registries.get::<Endpoints>(),
        endpoints_for(&ips, &ports),
        |cur, want| cur.subsets != want.subsets || cur.metadata.labels != want.metadata.labels,
        |cur, want| Endpoints {
            metadata: ObjectMeta {
                labels: want.metadata.labels,
                ..cur.metadata.clone()
            },
            subsets: want.subsets,
        },
    )
    .await?;
    let address_type = if ipv6 { "IPv6" } else { "IPv4" };
    ensure(
        &registries.get::<EndpointSlice>(),
        slice_for(&ips, &ports, address_type),
        |cur, want| {
            cur.endpoints != want.endpoints
                || cur.ports != want.ports
                || cur.address_type != want.address_type
                || cur.metadata.labels != want.metadata.labels
        },
        |cur, want| EndpointSlice {
            metadata: ObjectMeta {
                labels: want.metadata.labels,
                ..cur.metadata.clone()
            },
            ..want
        },
    )
    .await
}
