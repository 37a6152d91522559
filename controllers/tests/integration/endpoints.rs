//! The EndpointSlice and Endpoints controllers against the in-process API server, with hollow
//! nodes running the pods (so pods have IPs and readiness).

use minik8s_controllers::informers::Informers;
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use minik8s_controllers::hollow::{self, HollowConfig};
use minik8s_controllers::{endpoints, endpointslice};
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);

struct Cluster {
    _api: InProcess,
    client: Client,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn cluster(max_per_slice: usize) -> anyhow::Result<Cluster> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let config = HollowConfig {
        count: 2,
        labels: BTreeMap::from([("topology.kubernetes.io/zone".into(), "zone-a".into())]),
        ..Default::default()
    };
    let c = client.clone();
    let tasks = vec![
        tokio::spawn(async move {
            let _ = hollow::run(c, config).await;
        }),
        tokio::spawn(endpointslice::run_with(
            Informers::new(client.clone()),
            endpointslice::Config {
                max_endpoints_per_slice: max_per_slice,
            },
        )),
        tokio::spawn(endpoints::run(Informers::new(client.clone()))),
    ];
    Ok(Cluster {
        _api: api,
        client,
        tasks,
    })
}

fn pod(name: &str, app: &str, port_name: &str, port: i32, extra: serde_json::Value) -> Pod {
    let mut p = json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "nodeName": "hollow-node-0",
            "containers": [{"name": "c", "image": "busybox:1.36",
                "ports": [{"name": port_name, "containerPort": port}]}],
        },
    });
    json_merge(&mut p, extra);
    serde_json::from_value(p).unwrap()
}

fn json_merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                json_merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

async fn slices_of(client: &Client, svc: &str) -> Vec<EndpointSlice> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// (address, ready, serving, terminating, port) of every endpoint of `svc`'s slices.
async fn endpoint_rows(client: &Client, svc: &str) -> Vec<(String, bool, bool, bool, i32)> {
    let mut rows = Vec::new();
    for s in slices_of(client, svc).await {
        let port = s
            .ports
            .as_ref()
            .and_then(|p| p.first())
            .and_then(|p| p.port)
            .unwrap_or(0);
        for e in &s.endpoints {
            let c = e.conditions.clone().unwrap_or_default();
            rows.push((
                e.target_ref
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default(),
                c.ready.unwrap_or(false),
                c.serving.unwrap_or(false),
                c.terminating.unwrap_or(false),
                port,
            ));
        }
    }
    rows.sort();
    rows
}

fn row(
    name: &str,
    ready: bool,
    serving: bool,
    terminating: bool,
    port: i32,
) -> (String, bool, bool, bool, i32) {
    (name.to_string(), ready, serving, terminating, port)
}

/// (ready addresses' pod names, not-ready pod names, ports) of each subset.
async fn subsets(client: &Client, name: &str) -> Option<Vec<(Vec<String>, Vec<String>, Vec<i32>)>> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = api.get_opt(name).await.ok()??;
    let names = |v: &Option<Vec<k8s_openapi::api::core::v1::EndpointAddress>>| {
        let mut n: Vec<String> = v
            .iter()
            .flatten()
            .filter_map(|a| a.target_ref.as_ref()?.name.clone())
            .collect();
        n.sort();
        n
    };
    let mut out: Vec<_> = ep
        .subsets
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                names(&s.addresses),
                names(&s.not_ready_addresses),
                s.ports.iter().flatten().map(|p| p.port).collect::<Vec<_>>(),
            )
        })
        .collect();
    out.sort();
    Some(out)
}

#[tokio::test]
async fn slices_and_endpoints_follow_pods_readiness_and_named_ports() -> anyhow::Result<()> {
    let c = cluster(100).await?;
    let services: Api<Service> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))?;
    let svc = services.create(&pp, &svc).await?;
    pods.create(&pp, &pod("a", "web", "http", 8080, json!({})))
        .await?;
    // The same port name means another number on this pod.
    pods.create(&pp, &pod("b", "web", "http", 9090, json!({})))
        .await?;
    pods.create(
        &pp,
        &pod(
            "c",
            "web",
            "http",
            8080,
            json!({"metadata": {"annotations": {"hollow.minik8s.io/ready": "false"}}}),
        ),
    )
    .await?;
    pods.create(&pp, &pod("other", "db", "http", 8080, json!({})))
        .await?;

    eventually(WAIT, "slices for a, b and unready c", || async {
        let rows = endpoint_rows(&c.client, "web").await;
        (rows
            == vec![
                row("a", true, true, false, 8080),
                row("b", true, true, false, 9090),
                row("c", false, false, false, 8080),
            ])
        .then_some(())
    })
    .await;
    // One slice per resolved port set (the placeholder made before the pods had addresses goes).
    let slices = eventually(WAIT, "two slices", || async {
        let s = slices_of(&c.client, "web").await;
        (s.len() == 2).then_some(s)
    })
    .await;
    for s in &slices {
        let labels = s.labels();
        assert_eq!(
            labels["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        assert_eq!(labels["tier"], "front");
        assert_eq!(s.address_type, "IPv4");
        let owner = &s.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("Service", Some(true))
        );
        assert_eq!(Some(&owner.uid), svc.metadata.uid.as_ref());
        let port = &s.ports.as_ref().unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.protocol.as_deref()),
            (Some("http"), Some("TCP"))
        );
        for e in &s.endpoints {
            assert_eq!(e.node_name.as_deref(), Some("hollow-node-0"));
            assert_eq!(e.zone.as_deref(), Some("zone-a"));
            assert!(e.addresses[0].starts_with("100.64."));
            assert_eq!(e.target_ref.as_ref().unwrap().kind.as_deref(), Some("Pod"));
        }
    }
    let want = vec![
        (vec!["a".to_string()], vec!["c".to_string()], vec![8080]),
        (vec!["b".to_string()], vec![], vec![9090]),
    ];
    eventually(
        WAIT,
        "Endpoints with a ready, c not ready, b on its own port",
        || async { (subsets(&c.client, "web").await? == want).then_some(()) },
    )
    .await;
    let eps: Api<Endpoints> = Api::namespaced(c.client.clone(), "default");
    let ep = eps.get("web").await?;
    assert_eq!(ep.labels()["tier"], "front");

    // c turns Ready.
    pods.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"hollow.minik8s.io/ready": "true"}}})),
    )
    .await?;
    eventually(WAIT, "c ready in its slice", || async {
        endpoint_rows(&c.client, "web")
            .await
            .contains(&row("c", true, true, false, 8080))
            .then_some(())
    })
    .await;
    let want = vec![
        (vec!["a".to_string(), "c".to_string()], vec![], vec![8080]),
        (vec!["b".to_string()], vec![], vec![9090]),
    ];
    eventually(WAIT, "c ready in the Endpoints", || async {
        (subsets(&c.client, "web").await? == want).then_some(())
    })
    .await;
    // a leaves the selector: gone from both.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "moved"}}})),
    )
    .await?;
    let want = vec![
        (vec!["b".to_string()], vec![], vec![9090]),
        (vec!["c".to_string()], vec![], vec![8080]),
    ];
    eventually(WAIT, "a gone from the Endpoints", || async {
        (subsets(&c.client, "web").await? == want).then_some(())
    })
    .await;
    eventually(WAIT, "a gone from the slices", || async {
        let rows = endpoint_rows(&c.client, "web").await;
        (rows.len() == 2 && !rows.iter().any(|r| r.0 == "a")).then_some(())
    })
    .await;

    // A terminating pod (held by a finalizer) stays in the slice as terminating, not ready,
    // and leaves the Endpoints.
    pods.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["test.minik8s.io/hold"]}})),
    )
    .await?;
    pods.delete("b", &DeleteParams::default()).await?;
    eventually(WAIT, "b terminating in its slice", || async {
        endpoint_rows(&c.client, "web")
            .await
            .iter()
            .any(|r| r.0 == "b" && !r.1 && r.3)
            .then_some(())
    })
    .await;
    let want = vec![(vec!["c".to_string()], vec![], vec![8080])];
    eventually(WAIT, "b gone from the Endpoints", || async {
        (subsets(&c.client, "web").await? == want).then_some(())
    })
    .await;
    pods.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    eventually(WAIT, "b gone from the slices", || async {
        let rows = endpoint_rows(&c.client, "web").await;
        (rows == vec![row("c", true, true, false, 8080)]).then_some(())
    })
    .await;
    // An empty slice left behind by b's port set is deleted.
    eventually(WAIT, "one slice left", || async {
        (slices_of(&c.client, "web").await.len() == 1).then_some(())
    })
    .await;

    // The Service goes: so do its Endpoints.
    services.delete("web", &DeleteParams::default()).await?;
    eventually(WAIT, "Endpoints deleted with the Service", || async {
        eps.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn headless_services_publish_not_ready_addresses_and_hostnames() -> anyhow::Result<()> {
    let c = cluster(100).await?;
    let services: Api<Service> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"clusterIP": "None", "selector": {"app": "db"}, "publishNotReadyAddresses": true,
                 "ports": [{"port": 5432}]},
    }))?;
    services.create(&pp, &svc).await?;
    pods.create(
        &pp,
        &pod(
            "db-0",
            "db",
            "pg",
            5432,
            json!({
                "metadata": {"annotations": {"hollow.minik8s.io/ready": "false"}},
                "spec": {"hostname": "db-0", "subdomain": "db"},
            }),
        ),
    )
    .await?;
    eventually(WAIT, "not-ready db-0 published as ready", || async {
        (endpoint_rows(&c.client, "db").await == vec![row("db-0", true, false, false, 5432)])
            .then_some(())
    })
    .await;
    // The placeholder made before db-0 had an address goes.
    let slice = eventually(WAIT, "one slice", || async {
        let s = slices_of(&c.client, "db").await;
        (s.len() == 1).then(|| s[0].clone())
    })
    .await;
    assert_eq!(slice.endpoints[0].hostname.as_deref(), Some("db-0"));
    assert_eq!(slice.labels()["service.kubernetes.io/headless"], "");
    let want = vec![(vec!["db-0".to_string()], vec![], vec![5432])];
    eventually(WAIT, "Endpoints list db-0 as ready", || async {
        (subsets(&c.client, "db").await? == want).then_some(())
    })
    .await;
    let eps: Api<Endpoints> = Api::namespaced(c.client.clone(), "default");
    let ep = eps.get("db").await?;
    let addr = &ep.subsets.unwrap()[0].addresses.clone().unwrap()[0];
    assert_eq!(addr.hostname.as_deref(), Some("db-0"));
    assert_eq!(addr.node_name.as_deref(), Some("hollow-node-0"));
    assert_eq!(
        ep.metadata.labels.unwrap()["service.kubernetes.io/headless"],
        ""
    );
    Ok(())
}

#[tokio::test]
async fn slices_hold_at_most_max_endpoints_and_an_empty_service_keeps_a_placeholder()
-> anyhow::Result<()> {
    let c = cluster(3).await?;
    let services: Api<Service> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "many"},
        "spec": {"selector": {"app": "many"}, "ports": [{"port": 80}]},
    }))?;
    let svc = services.create(&pp, &svc).await?;
    eventually(WAIT, "a placeholder slice", || async {
        let s = slices_of(&c.client, "many").await;
        (s.len() == 1 && s[0].endpoints.is_empty()).then_some(())
    })
    .await;
    let eps: Api<Endpoints> = Api::namespaced(c.client.clone(), "default");
    let ep = eventually(WAIT, "Endpoints without subsets", || async {
        let ep = eps.get_opt("many").await.ok()??;
        ep.subsets.is_none().then_some(ep)
    })
    .await;
    // Made by the first sync of the Service: the change that caused them is its creation.
    let created = serde_json::to_value(svc.metadata.creation_timestamp.clone().unwrap())?;
    let trigger = |a: &BTreeMap<String, String>| {
        json!(a.get("endpoints.kubernetes.io/last-change-trigger-time"))
    };
    assert_eq!(trigger(ep.annotations()), created);
    assert_eq!(
        trigger(slices_of(&c.client, "many").await[0].annotations()),
        created
    );
    for i in 0..7 {
        pods.create(&pp, &pod(&format!("p{i}"), "many", "http", 80, json!({})))
            .await?;
    }
    let sizes = eventually(WAIT, "7 endpoints in slices of at most 3", || async {
        let s = slices_of(&c.client, "many").await;
        let mut sizes: Vec<usize> = s.iter().map(|s| s.endpoints.len()).collect();
        sizes.sort();
        (sizes.iter().sum::<usize>() == 7 && sizes.iter().all(|n| *n > 0)).then_some(sizes)
    })
    .await;
    assert!(sizes.iter().all(|n| *n <= 3), "{sizes:?}");
    assert_eq!(sizes.len(), 3, "{sizes:?}");
    // Everything goes: back to the placeholder alone.
    for i in 0..7 {
        pods.delete(&format!("p{i}"), &DeleteParams::default())
            .await?;
    }
    eventually(WAIT, "only the placeholder again", || async {
        let s = slices_of(&c.client, "many").await;
        (s.len() == 1 && s[0].endpoints.is_empty()).then_some(())
    })
    .await;
    Ok(())
}
