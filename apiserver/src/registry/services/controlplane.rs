//! The `kubernetes` Service in `default` and its Endpoints and EndpointSlice, which tell
//! in-cluster clients where the API server is (upstream's kubernetesservice controller and
//! endpoints reconciler). Kept at startup: the Service gets the first address of the service
//! range and port 443 → the secure port, the endpoints the advertised address.

use std::collections::BTreeMap;
use std::net::SocketAddr;

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

/// Ensures the `kubernetes` Service and its endpoints for an API server at `advertised`,
/// written through the served registries so the Service's cluster IP is allocated by
/// `services` as any other Service's is.
pub async fn reconcile(
    registries: &Registries,
    services: &ServiceAllocator,
    advertised: SocketAddr,
) -> Result<(), ApiError> {
    let ip = advertised.ip();
    let port = i32::from(advertised.port());
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
                target_port: Some(IntOrString::Int(port)),
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
    .await?;

    let ep = Endpoints {
        metadata: meta(&[("endpointslice.kubernetes.io/skip-mirror", "true")]),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: ip.to_string(),
                ..Default::default()
            }]),
            ports: Some(vec![EndpointPort {
                name: Some("https".into()),
                port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }]),
    };
    ensure(
        &registries.get::<Endpoints>(),
        ep,
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

    let slice = EndpointSlice {
        metadata: meta(&[("kubernetes.io/service-name", "kubernetes")]),
        address_type: if ip.is_ipv6() { "IPv6" } else { "IPv4" }.into(),
        endpoints: vec![Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ports: Some(vec![SlicePort {
            name: Some("https".into()),
            port: Some(port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    };
    ensure(
        &registries.get::<EndpointSlice>(),
        slice,
        |cur, want| {
            cur.endpoints != want.endpoints
                || cur.ports != want.ports
                || cur.address_type != want.address_type
        },
        |cur, want| EndpointSlice {
            metadata: cur.metadata.clone(),
            ..want
        },
    )
    .await?;
    Ok(())
}
