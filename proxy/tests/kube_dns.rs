//! The `kube-dns` Service against an in-process API server: created with its fixed cluster IP
//! and selector-less, its Endpoints and EndpointSlice point at the DNS server, and whatever
//! happens to them (deleted, edited) is put back; a `kube-dns` Service with a selector is left
//! to its owner. The IngressClass the server creates is the default class and stays as its
//! owner edits it.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use minik8s_proxy::dns::service::{self, KubeDns};
use serde_json::json;
use testkit::eventually;

const WAIT: Duration = Duration::from_secs(20);

fn want() -> KubeDns {
    KubeDns {
        cluster_ip: "10.96.0.10".parse().unwrap(),
        endpoint: "192.0.2.7:5353".parse::<SocketAddr>().unwrap(),
    }
}

/// The slice's address and port, once it is as wanted.
fn slice_target(s: &EndpointSlice) -> Option<(String, i32)> {
    let addr = s.endpoints.first()?.addresses.first()?.clone();
    let port = s.ports.as_ref()?.first()?.port?;
    Some((addr, port))
}

#[tokio::test]
async fn kube_dns_is_created_and_kept() -> anyhow::Result<()> {
    let api = testkit::InProcess::start(testkit::Backend::Sqlite).await?;
    let client = api.client();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let keeper = tokio::spawn(service::keep(client.clone(), want(), async {
        let _ = stopped.await;
    }));

    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "kube-system");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");

    let svc = eventually(WAIT, "the kube-dns Service", || async {
        services.get_opt("kube-dns").await.ok()?
    })
    .await;
    let spec = svc.spec.clone().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.10"));
    assert!(spec.selector.is_none());
    let ports: Vec<(String, String, i32)> = spec
        .ports
        .unwrap()
        .into_iter()
        .map(|p| (p.name.unwrap(), p.protocol.unwrap(), p.port))
        .collect();
    assert_eq!(
        ports,
        [
            ("dns".into(), "UDP".into(), 53),
            ("dns-tcp".into(), "TCP".into(), 53)
        ]
    );

    let ep = eventually(WAIT, "the kube-dns Endpoints", || async {
        endpoints.get_opt("kube-dns").await.ok()?
    })
    .await;
    let subset = &ep.subsets.as_ref().unwrap()[0];
    assert_eq!(subset.addresses.as_ref().unwrap()[0].ip, "192.0.2.7");
    assert!(
        subset
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .all(|p| p.port == 5353)
    );

    let slice = eventually(WAIT, "the kube-dns EndpointSlice", || async {
        slices.get_opt("kube-dns").await.ok()?
    })
    .await;
    assert_eq!(slice_target(&slice), Some(("192.0.2.7".to_string(), 5353)));
    let labels = slice.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/service-name"], "kube-dns");
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Service", svc.metadata.uid.as_deref().unwrap())
    );

    // Deleted Endpoints come back; an edited slice is put back.
    endpoints
        .delete("kube-dns", &DeleteParams::default())
        .await?;
    slices
        .patch(
            "kube-dns",
            &PatchParams::default(),
            &Patch::Merge(json!({"endpoints": [{"addresses": ["192.0.2.99"]}]})),
        )
        .await?;
    eventually(WAIT, "the Endpoints to come back", || async {
        endpoints.get_opt("kube-dns").await.ok()?
    })
    .await;
    eventually(WAIT, "the slice to be restored", || async {
        let s = slices.get_opt("kube-dns").await.ok()??;
        (slice_target(&s)? == ("192.0.2.7".to_string(), 5353)).then_some(())
    })
    .await;

    let _ = stop.send(());
    keeper.await?;
    Ok(())
}

#[tokio::test]
async fn a_kube_dns_service_with_a_selector_is_not_ours() -> anyhow::Result<()> {
    let api = testkit::InProcess::start(testkit::Backend::Sqlite).await?;
    let client = api.client();
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "kube-dns"},
                "spec": {"selector": {"k8s-app": "coredns"},
                         "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}
            }))?,
        )
        .await?;
    assert!(!service::reconcile(&client, &want()).await?);
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "kube-system");
    assert!(endpoints.get_opt("kube-dns").await?.is_none());
    let slices: Api<EndpointSlice> = Api::namespaced(client, "kube-system");
    assert!(slices.get_opt("kube-dns").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn the_ingress_class_is_the_default_and_left_to_its_owner() -> anyhow::Result<()> {
    let api = testkit::InProcess::start(testkit::Backend::Sqlite).await?;
    let client = api.client();
    minik8s_proxy::ingress::ensure_class(&client).await?;
    let classes: Api<IngressClass> = Api::all(client.clone());
    let class = classes.get("minik8s").await?;
    assert_eq!(
        class.spec.as_ref().unwrap().controller.as_deref(),
        Some("minik8s.io/ingress")
    );
    assert_eq!(
        class.metadata.annotations.as_ref().unwrap()["ingressclass.kubernetes.io/is-default-class"],
        "true"
    );
    // An Ingress without a class is ours through the default.
    let ing: Ingress = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}
    }))?;
    assert!(minik8s_proxy::ingress::routes::is_ours(
        &ing,
        std::slice::from_ref(&class)
    ));

    // The owner's edits survive another start.
    classes
        .patch(
            "minik8s",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"ingressclass.kubernetes.io/is-default-class": "false"}}}),
            ),
        )
        .await?;
    minik8s_proxy::ingress::ensure_class(&client).await?;
    let class = classes.get("minik8s").await?;
    assert_eq!(
        class.metadata.annotations.as_ref().unwrap()["ingressclass.kubernetes.io/is-default-class"],
        "false"
    );
    assert!(!minik8s_proxy::ingress::routes::is_ours(&ing, &[class]));
    Ok(())
}
