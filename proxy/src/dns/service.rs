//! The `kube-dns` Service in `kube-system`, which pods with dnsPolicy ClusterFirst reach at the
//! kubelet's `--cluster-dns` address. Our DNS server is not a pod but part of the node process,
//! so the Service has no selector and its Endpoints and EndpointSlice are written here, pointing
//! at the address the server listens on: the endpoints controllers leave selector-less Services
//! alone, as upstream's do, so nobody fights over them. A `kube-dns` Service that already has a
//! selector (someone runs their own DNS pods) is left entirely to its owner.
//!
//! What we write is kept: a watch on the three objects brings any change (or deletion) back to
//! the wanted state; every write carries the resourceVersion it read.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "kube-dns";
/// Who manages the EndpointSlice (the endpointslice controller only touches its own).
pub const MANAGED_BY: &str = "dns.minik8s.io";

/// Where the `kube-dns` Service lives and where its traffic goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeDns {
    /// The Service's cluster IP (the kubelet's `--cluster-dns`).
    pub cluster_ip: std::net::IpAddr,
    /// The DNS server's address as pods reach it (UDP and TCP).
    pub endpoint: SocketAddr,
}

fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(NAME.into()),
        namespace: Some(NAMESPACE.into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
}

/// The Service as kubeadm names it (ports `dns` and `dns-tcp`), without a selector.
pub fn service(want: &KubeDns) -> Service {
    let port = |name: &str, protocol: &str| ServicePort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        port: 53,
        target_port: Some(IntOrString::Int(i32::from(want.endpoint.port()))),
        ..Default::default()
    };
    Service {
        metadata: meta(&[
            ("k8s-app", "kube-dns"),
            ("kubernetes.io/cluster-service", "true"),
            ("kubernetes.io/name", "KubeDNS"),
        ]),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(want.cluster_ip.to_string()),
            cluster_ips: Some(vec![want.cluster_ip.to_string()]),
            ports: Some(vec![port("dns", "UDP"), port("dns-tcp", "TCP")]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Endpoints: the DNS server's address, on both ports. Not mirrored into another slice.
pub fn endpoints(want: &KubeDns) -> Endpoints {
    let port = |name: &str, protocol: &str| EndpointPort {
        name: Some(name.into()),
        port: i32::from(want.endpoint.port()),
        protocol: Some(protocol.into()),
        ..Default::default()
    };
    Endpoints {
        metadata: meta(&[
            ("k8s-app", "kube-dns"),
            ("endpointslice.kubernetes.io/skip-mirror", "true"),
        ]),
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: want.endpoint.ip().to_string(),
                ..Default::default()
            }]),
            ports: Some(vec![port("dns", "UDP"), port("dns-tcp", "TCP")]),
            ..Default::default()
        }]),
    }
}

/// The EndpointSlice, owned by the Service (so it goes when the Service goes).
pub fn slice(want: &KubeDns, owner: &Service) -> EndpointSlice {
    let port = |name: &str, protocol: &str| SlicePort {
        name: Some(name.into()),
        port: Some(i32::from(want.endpoint.port())),
        protocol: Some(protocol.into()),
        ..Default::default()
    };
    let mut metadata = meta(&[
        ("k8s-app", "kube-dns"),
        ("kubernetes.io/service-name", NAME),
        ("endpointslice.kubernetes.io/managed-by", MANAGED_BY),
    ]);
    metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: NAME.into(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    EndpointSlice {
        metadata,
        address_type: if want.endpoint.is_ipv6() {
            "IPv6"
        } else {
            "IPv4"
        }
        .into(),
        endpoints: vec![Endpoint {
            addresses: vec![want.endpoint.ip().to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            ..Default::default()
        }],
        ports: Some(vec![port("dns", "UDP"), port("dns-tcp", "TCP")]),
    }
}

/// Creates `want`, or replaces the stored object (with its resourceVersion) when `differs`.
async fn ensure<K>(
    api: &Api<K>,
    want: K,
    differs: impl Fn(&K, &K) -> bool,
    merge: impl Fn(K, K) -> K,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    match api.get_opt(NAME).await? {
        None => match api.create(&PostParams::default(), &want).await {
            Err(kube::Error::Api(s)) if s.code == 409 => api.get(NAME).await,
            other => other,
        },
        Some(current) if differs(&current, &want) => {
            api.replace(NAME, &PostParams::default(), &merge(current, want))
                .await
        }
        Some(current) => Ok(current),
    }
}

fn labels_cover<K: Resource>(current: &K, want: &K) -> bool {
    let have = current.meta().labels.clone().unwrap_or_default();
    want.meta()
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| have.get(k) == Some(v))
}

fn with_labels<K: Resource>(mut current: K, want: &K) -> K {
    let labels = current.meta_mut().labels.get_or_insert_with(BTreeMap::new);
    labels.extend(want.meta().labels.clone().unwrap_or_default());
    current
}

/// Brings the Service (created if absent, otherwise left as it is), the Endpoints and the
/// EndpointSlice to the wanted state once. Returns false when the Service has a selector and is
/// therefore not ours to serve.
pub async fn reconcile(client: &Client, want: &KubeDns) -> Result<bool, kube::Error> {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let svc = ensure(&services, service(want), |_, _| false, |c, _| c).await?;
    if svc
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some()
    {
        return Ok(false);
    }
    ensure(
        &Api::<Endpoints>::namespaced(client.clone(), NAMESPACE),
        endpoints(want),
        |cur, want| cur.subsets != want.subsets || !labels_cover(cur, want),
        |cur, want| Endpoints {
            subsets: want.subsets.clone(),
            ..with_labels(cur, &want)
        },
    )
    .await?;
    ensure(
        &Api::<EndpointSlice>::namespaced(client.clone(), NAMESPACE),
        slice(want, &svc),
        |cur, want| {
            cur.endpoints != want.endpoints
                || cur.ports != want.ports
                || cur.address_type != want.address_type
                || cur.metadata.owner_references != want.metadata.owner_references
                || !labels_cover(cur, want)
        },
        |cur, want| {
            let mut out = with_labels(cur, &want);
            out.metadata.owner_references = want.metadata.owner_references.clone();
            EndpointSlice {
                metadata: out.metadata,
                ..want
            }
        },
    )
    .await?;
    Ok(true)
}

/// Keeps the `kube-dns` Service and its endpoints until `shutdown`: reconciled at start and
/// after every watch event on any of them; failures (a conflict included) are retried with
/// backoff.
pub async fn keep(client: Client, want: KubeDns, shutdown: impl std::future::Future<Output = ()>) {
    let config = || watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    let services = watcher(
        Api::<Service>::namespaced(client.clone(), NAMESPACE),
        config(),
    )
    .default_backoff()
    .map(|_| ());
    let endpoints = watcher(
        Api::<Endpoints>::namespaced(client.clone(), NAMESPACE),
        config(),
    )
    .default_backoff()
    .map(|_| ());
    let slices = watcher(
        Api::<EndpointSlice>::namespaced(client.clone(), NAMESPACE),
        config(),
    )
    .default_backoff()
    .map(|_| ());
    let mut events = std::pin::pin!(futures::stream::select(
        services,
        futures::stream::select(endpoints, slices)
    ));
    let work = async {
        let mut backoff = Duration::from_millis(200);
        let mut logged_foreign = false;
        loop {
            match reconcile(&client, &want).await {
                Ok(ours) => {
                    backoff = Duration::from_millis(200);
                    if !ours && !logged_foreign {
                        tracing::info!("the kube-dns Service has a selector: leaving it alone");
                    }
                    logged_foreign = !ours;
                    if events.next().await.is_none() {
                        return;
                    }
                    // One pass covers every event already queued (our own writes included).
                    while let Some(Some(())) = events.next().now_or_never() {}
                }
                Err(e) => {
                    tracing::warn!(error = %e, "keeping the kube-dns Service failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = shutdown => {}
    }
}
