//! Services in the API server: cluster IP and node port allocation (create, conflicts,
//! release, type changes, restart, concurrency) and the `kubernetes` Service.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;

use http::StatusCode;
use minik8s_apiserver::ApiServer;
use serde_json::{Value, json};
use testkit::{Backend, InProcess};

const SVCS: &str = "/api/v1/namespaces/default/services";

fn svc(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("ports").is_none() && spec.get("type") != Some(&json!("ExternalName")) {
        spec["ports"] = json!([{"port": 80}]);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

async fn create(api: &InProcess, name: &str, spec: Value) -> (StatusCode, Value) {
    let r = api.post(SVCS, svc(name, spec)).await;
    (r.status, r.json())
}

fn cluster_ip(v: &Value) -> String {
    v["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn node_port(v: &Value) -> i64 {
    v["spec"]["ports"][0]["nodePort"].as_i64().unwrap_or(0)
}

fn small_range(
    cidr: &'static str,
    ports: &'static str,
) -> impl FnOnce(&mut minik8s_apiserver::Config) {
    move |c| {
        c.service_cluster_ip_range = cidr.into();
        c.service_node_port_range = ports.into();
    }
}

/// Another API server over the same store, as after a restart.
async fn restarted(api: &InProcess, cidr: &str, ports: &str) -> InProcess {
    let mut options = testkit::test_serve_options();
    options.service_ranges =
        minik8s_apiserver::registry::services::ServiceRanges::parse(cidr, ports).unwrap();
    let server: Arc<ApiServer> = ApiServer::new(
        api.server.store.clone(),
        Arc::new(minik8s_apiserver::metrics::Metrics::new()),
        minik8s_apiserver::auth::Authenticator::new(),
        options,
        "127.0.0.1:6443".into(),
    );
    server.bootstrap(&[]).await.unwrap();
    InProcess::from_server(server)
}

#[tokio::test]
async fn the_kubernetes_service_points_at_the_api_server() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let s = api.get(&format!("{SVCS}/kubernetes")).await.json();
    assert_eq!(cluster_ip(&s), "10.96.0.1");
    assert_eq!(s["spec"]["clusterIPs"], json!(["10.96.0.1"]));
    assert_eq!(s["spec"]["ports"][0]["port"], 443);
    assert_eq!(s["spec"]["ports"][0]["name"], "https");
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 6443);
    assert_eq!(s["metadata"]["labels"]["provider"], "kubernetes");
    let advertised: std::net::SocketAddr = api.server.address.parse()?;
    let ep = api
        .get("/api/v1/namespaces/default/endpoints/kubernetes")
        .await
        .json();
    assert_eq!(
        ep["subsets"][0]["addresses"][0]["ip"],
        advertised.ip().to_string()
    );
    assert_eq!(ep["subsets"][0]["ports"][0]["port"], 6443);
    let slice = api
        .get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")
        .await
        .json();
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "kubernetes"
    );
    assert_eq!(
        slice["endpoints"][0]["addresses"][0],
        advertised.ip().to_string()
    );
    // The first address is taken: nobody else gets it.
    let (code, body) = create(&api, "x", json!({"clusterIP": "10.96.0.1"})).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    Ok(())
}

#[tokio::test]
async fn cluster_ips_are_unique_filled_as_upstream_and_dynamic_ones_come_from_the_upper_range()
-> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let mut seen = BTreeSet::new();
    for i in 0..40 {
        let (code, s) = create(&api, &format!("s{i}"), json!({"selector": {"app": "a"}})).await;
        assert_eq!(code, StatusCode::CREATED, "{s}");
        let ip: Ipv4Addr = cluster_ip(&s).parse()?;
        // 10.96.0.0/12 keeps 10.96.0.1-10.96.1.0 for requested addresses.
        assert!(
            ip > Ipv4Addr::new(10, 96, 1, 0) && ip < Ipv4Addr::new(10, 112, 0, 0),
            "{ip}"
        );
        assert!(seen.insert(ip), "{ip} handed out twice");
        assert_eq!(s["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
    }
    Ok(())
}

#[tokio::test]
async fn requested_ips_conflict_and_are_released_on_delete() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let (code, s) = create(&api, "dns", json!({"clusterIP": "10.96.0.10"})).await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    assert_eq!(s["spec"]["clusterIPs"], json!(["10.96.0.10"]));

    let (code, s) = create(&api, "other", json!({"clusterIP": "10.96.0.10"})).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let msg = s["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.clusterIPs: Invalid value")
            && msg.contains("failed to allocate IP 10.96.0.10: provided IP is already allocated"),
        "{msg}"
    );
    let (code, s) = create(&api, "other", json!({"clusterIP": "192.168.0.5"})).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("is not in the valid range"),
        "{s}"
    );
    // A dry run shows an address but keeps nothing.
    let r = api
        .post(
            &format!("{SVCS}?dryRun=All"),
            svc("dry", json!({"clusterIP": "10.96.0.11"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let (code, _) = create(&api, "wet", json!({"clusterIP": "10.96.0.11"})).await;
    assert_eq!(code, StatusCode::CREATED);

    assert_eq!(
        api.delete(&format!("{SVCS}/dns")).await.status,
        StatusCode::OK
    );
    let (code, s) = create(&api, "again", json!({"clusterIP": "10.96.0.10"})).await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    Ok(())
}

#[tokio::test]
async fn cluster_ips_are_immutable_and_kept_when_an_update_leaves_them_out() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let (_, s) = create(&api, "web", json!({"selector": {"app": "web"}})).await;
    let ip = cluster_ip(&s);
    // A PUT from a manifest without clusterIP keeps the allocated one.
    let r = api
        .put(
            &format!("{SVCS}/web"),
            svc("web", json!({"selector": {"app": "web2"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(cluster_ip(&r.json()), ip);
    assert_eq!(r.json()["spec"]["clusterIPs"], json!([ip.clone()]));
    let r = api
        .put(
            &format!("{SVCS}/web"),
            svc("web", json!({"clusterIP": "10.96.0.99"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("may not change once set"),
        "{}",
        r.json()
    );
    Ok(())
}

#[tokio::test]
async fn headless_and_external_name_services_hold_no_address() -> anyhow::Result<()> {
    let api =
        InProcess::start_with(Backend::Sqlite, small_range("10.0.0.0/29", "30000-30099")).await?;
    // 6 addresses: the kubernetes Service has one.
    let (code, s) = create(
        &api,
        "db",
        json!({"clusterIP": "None", "selector": {"app": "db"}}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    assert_eq!(s["spec"]["clusterIPs"], json!(["None"]));
    assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
    // Headless and selectorless: dual stack unless told otherwise, as upstream.
    let (_, s) = create(&api, "manual", json!({"clusterIP": "None"})).await;
    assert_eq!(s["spec"]["ipFamilyPolicy"], "RequireDualStack");
    assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    let (code, s) = create(
        &api,
        "ext",
        json!({"type": "ExternalName", "externalName": "example.com"}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    assert_eq!(s["spec"].get("clusterIP"), None);
    assert_eq!(s["spec"].get("ipFamilies"), None);
    for i in 0..5 {
        let (code, s) = create(&api, &format!("s{i}"), json!({})).await;
        assert_eq!(code, StatusCode::CREATED, "{s}");
    }
    let (code, s) = create(&api, "full", json!({})).await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("failed to allocate a serviceIP: range is full")
    );

    // ExternalName → ClusterIP allocates; there is no room.
    let r = api
        .patch(
            &format!("{SVCS}/ext"),
            "application/merge-patch+json",
            json!({"spec": {"type": "ClusterIP", "externalName": null, "ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.json());
    // ClusterIP → ExternalName releases the address (the unchanged clusterIP is dropped).
    let r = api
        .patch(
            &format!("{SVCS}/s0"),
            "application/merge-patch+json",
            json!({"spec": {"type": "ExternalName", "externalName": "example.org"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(r.json()["spec"].get("clusterIP"), None);
    let r = api
        .patch(
            &format!("{SVCS}/ext"),
            "application/merge-patch+json",
            json!({"spec": {"type": "ClusterIP", "externalName": null, "ports": [{"port": 80}]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert!(cluster_ip(&r.json()).starts_with("10.0.0."));
    Ok(())
}

#[tokio::test]
async fn node_ports_are_allocated_conflict_and_are_released() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let (code, s) = create(&api, "np", json!({"type": "NodePort"})).await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    let port = node_port(&s);
    assert!((30000..=32767).contains(&port), "{port}");
    assert_eq!(s["spec"]["externalTrafficPolicy"], "Cluster");

    let (code, s) = create(
        &api,
        "fixed",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    let (code, s) = create(
        &api,
        "clash",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let msg = s["message"].as_str().unwrap();
    assert!(
        msg.contains(
            "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
        ),
        "{msg}"
    );
    let (code, s) = create(
        &api,
        "outside",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 40000}]}),
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        s["message"].as_str().unwrap().contains("30000-32767"),
        "{s}"
    );

    // Two service ports of one number (TCP and UDP) share a node port.
    let (code, s) = create(
        &api,
        "dns",
        json!({"type": "NodePort", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    assert_eq!(
        s["spec"]["ports"][0]["nodePort"],
        s["spec"]["ports"][1]["nodePort"]
    );

    // NodePort → ClusterIP drops and releases the port.
    let r = api
        .patch(
            &format!("{SVCS}/fixed"),
            "application/merge-patch+json",
            json!({"spec": {"type": "ClusterIP"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(node_port(&r.json()), 0);
    assert_eq!(r.json()["spec"].get("externalTrafficPolicy"), None);
    let (code, s) = create(
        &api,
        "clash",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");

    // An update that leaves the node port out keeps it; a new port number gets its own.
    let r = api
        .put(
            &format!("{SVCS}/np"),
            svc("np", json!({"type": "NodePort", "ports": [{"port": 80}]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
    assert_eq!(node_port(&r.json()), port);

    // Deleting releases.
    assert_eq!(
        api.delete(&format!("{SVCS}/clash")).await.status,
        StatusCode::OK
    );
    let (code, s) = create(
        &api,
        "clash2",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");

    // LoadBalancer with externalTrafficPolicy Local gets a health check node port.
    let (code, s) = create(
        &api,
        "lb",
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local"}),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    let hc = s["spec"]["healthCheckNodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&hc) && hc != node_port(&s));
    Ok(())
}

#[tokio::test]
async fn allocations_survive_a_restart() -> anyhow::Result<()> {
    const CIDR: &str = "10.0.0.0/28";
    const PORTS: &str = "30000-30003";
    let api = InProcess::start_with(Backend::Sqlite, small_range(CIDR, PORTS)).await?;
    // 14 addresses, one for the kubernetes Service; 4 node ports.
    let mut ips = std::collections::BTreeMap::new();
    for i in 0..13 {
        let ty = if i < 4 { "NodePort" } else { "ClusterIP" };
        let (code, s) = create(&api, &format!("s{i}"), json!({"type": ty})).await;
        assert_eq!(code, StatusCode::CREATED, "{s}");
        ips.insert(format!("s{i}"), (cluster_ip(&s), node_port(&s)));
    }
    let again = restarted(&api, CIDR, PORTS).await;
    assert_eq!(again.server.services.used(), (14, 4));
    let (code, s) = create(&again, "more", json!({})).await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{s}");
    let taken = ips["s5"].0.clone();
    let (code, s) = create(&again, "more", json!({"clusterIP": taken})).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{s}");

    assert_eq!(
        again.delete(&format!("{SVCS}/s7")).await.status,
        StatusCode::OK
    );
    let port = ips["s2"].1;
    let (code, s) = create(
        &again,
        "np",
        json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}),
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{s}");
    let (code, s) = create(&again, "np", json!({"type": "NodePort"})).await;
    assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR, "{s}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("failed to allocate a nodePort: range is full")
    );

    assert_eq!(
        again.delete(&format!("{SVCS}/s1")).await.status,
        StatusCode::OK
    );
    let (code, s) = create(&again, "np", json!({"type": "NodePort"})).await;
    assert_eq!(code, StatusCode::CREATED, "{s}");
    assert!([&ips["s7"].0, &ips["s1"].0].contains(&&cluster_ip(&s)));
    assert_eq!(node_port(&s), ips["s1"].1);
    Ok(())
}

#[tokio::test]
async fn concurrent_creates_never_share_an_address() -> anyhow::Result<()> {
    let api =
        InProcess::start_with(Backend::Sqlite, small_range("10.0.0.0/26", "30000-30019")).await?;
    // 62 addresses, one taken by the kubernetes Service; 20 node ports.
    let api = Arc::new(api);
    let results = futures::future::join_all((0..70).map(|i| {
        let api = api.clone();
        async move { create(&api, &format!("c{i}"), json!({"type": "NodePort"})).await }
    }))
    .await;
    let ok: Vec<&Value> = results
        .iter()
        .filter(|(c, _)| *c == StatusCode::CREATED)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(ok.len(), 20, "as many as there are node ports");
    let ips: BTreeSet<String> = ok.iter().map(|v| cluster_ip(v)).collect();
    let ports: BTreeSet<i64> = ok.iter().map(|v| node_port(v)).collect();
    assert_eq!((ips.len(), ports.len()), (20, 20));
    for (code, v) in &results {
        if *code != StatusCode::CREATED {
            assert_eq!(*code, StatusCode::INTERNAL_SERVER_ERROR, "{v}");
        }
    }
    // Failed creates gave their addresses back: 61 - 20 remain.
    let results = futures::future::join_all((0..45).map(|i| {
        let api = api.clone();
        async move { create(&api, &format!("d{i}"), json!({})).await.0 }
    }))
    .await;
    let created = results
        .iter()
        .filter(|c| **c == StatusCode::CREATED)
        .count();
    assert_eq!(created, 41);
    assert_eq!(api.server.services.used(), (62, 20));
    Ok(())
}
