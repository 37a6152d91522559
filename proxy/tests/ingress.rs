//! The Ingress proxy against an in-process API server, with backends on 127.0.0.1 and
//! 127.0.0.2: requests reach both endpoints in turn, unmatched requests get 404, a backend
//! without endpoints 503, changes apply without a restart, and the status lists our address.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use minik8s_proxy::ingress::IngressConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A backend that answers every request with its own address.
async fn backend(listener: TcpListener) {
    let name = listener.local_addr().unwrap().ip().to_string();
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            continue;
        };
        let name = name.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut req = Vec::new();
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&req);
            let fwd = head
                .lines()
                .find_map(|l| l.strip_prefix("x-forwarded-host: "))
                .unwrap_or("-")
                .to_string();
            let body = format!("{name} {fwd}");
            let resp = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        });
    }
}

/// One HTTP/1.1 request; the status code and body.
async fn get(proxy: SocketAddr, host: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(proxy).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.ok()?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

/// An in-process API server with our IngressClass as the default class.
async fn api_with_class() -> anyhow::Result<(testkit::InProcess, kube::Client)> {
    let api = testkit::InProcess::start(testkit::Backend::Sqlite).await?;
    let client = api.client();
    Api::<IngressClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "minik8s", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
                "spec": {"controller": "minik8s.io/ingress"}
            }))?,
        )
        .await?;
    Ok((api, client))
}

#[tokio::test]
async fn routes_requests_to_ready_endpoints() -> anyhow::Result<()> {
    let first = TcpListener::bind("127.0.0.1:0").await?;
    let port = first.local_addr()?.port();
    let second = TcpListener::bind(("127.0.0.2", port)).await?;
    tokio::spawn(backend(first));
    tokio::spawn(backend(second));

    let (_api, client) = api_with_class().await?;
    let pp = PostParams::default();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    for (name, ip) in [("web", "10.96.0.30"), ("empty", "10.96.0.31")] {
        services
            .create(
                &pp,
                &serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": port}]}
                }))?,
            )
            .await?;
    }
    Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": ["127.0.0.1"], "conditions": {"ready": true}},
                    {"addresses": ["127.0.0.2"], "conditions": {"ready": true}},
                ]
            }))?,
        )
        .await?;
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), "default");
    ingresses
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "main"},
                "spec": {"rules": [{"host": "foo.example", "http": {"paths": [
                    {"path": "/app", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                    {"path": "/empty", "pathType": "Exact", "backend": {"service": {"name": "empty", "port": {"name": "http"}}}},
                ]}}]}
            }))?,
        )
        .await?;

    let bind: SocketAddr = format!("127.0.0.1:{}", testkit::free_port()).parse()?;
    let config = IngressConfig {
        bind,
        addresses: vec!["127.0.0.1".parse()?],
        publish_node_addresses: false,
        hosts: None,
    };
    let informers = minik8s_informers::Informers::new(client.clone());
    let ingress_client = client.clone();
    tokio::spawn(async move {
        minik8s_proxy::ingress::run(ingress_client, &informers, config, std::future::pending())
            .await
    });

    testkit::eventually(Duration::from_secs(20), "the route is served", || async {
        let (code, _) = get(bind, "foo.example", "/app/x").await?;
        (code == 200).then_some(())
    })
    .await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (code, body) = get(bind, "foo.example", "/app/x").await.expect("answer");
        assert_eq!(code, 200);
        seen.push(body);
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "127.0.0.1 foo.example",
            "127.0.0.1 foo.example",
            "127.0.0.2 foo.example",
            "127.0.0.2 foo.example"
        ],
        "round-robin over both endpoints, Host passed on"
    );
    assert_eq!(
        get(bind, "foo.example", "/application").await.unwrap().0,
        404
    );
    assert_eq!(get(bind, "bar.example", "/app").await.unwrap().0, 404);
    assert_eq!(get(bind, "foo.example", "/empty").await.unwrap().0, 503);

    // A new rule applies without a restart.
    let patch =
        json!({"spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}});
    ingresses
        .patch("main", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    testkit::eventually(
        Duration::from_secs(20),
        "the default backend serves",
        || async {
            let (code, _) = get(bind, "bar.example", "/anything").await?;
            (code == 200).then_some(())
        },
    )
    .await;

    testkit::eventually(
        Duration::from_secs(20),
        "the status lists our address",
        || async {
            let ips = status_ips(&ingresses, "main").await?;
            (ips == ["127.0.0.1"]).then_some(())
        },
    )
    .await;
    Ok(())
}

/// The InternalIPs in an Ingress's status.
async fn status_ips(ingresses: &Api<Ingress>, name: &str) -> Option<Vec<String>> {
    let ing = ingresses.get(name).await.ok()?;
    Some(
        ing.status?
            .load_balancer?
            .ingress?
            .into_iter()
            .filter_map(|i| i.ip)
            .collect(),
    )
}

/// Two proxies (two nodes) that publish node addresses agree on the status: the sorted
/// InternalIPs of the real nodes, hollow ones left out; a new node joins the list.
#[tokio::test]
async fn every_node_publishes_all_node_addresses() -> anyhow::Result<()> {
    let (_api, client) = api_with_class().await?;
    let pp = PostParams::default();
    let nodes: Api<Node> = Api::all(client.clone());
    let add_node = |name: &'static str, ip: &'static str, hollow: bool| {
        let nodes = nodes.clone();
        async move {
            let labels = if hollow {
                json!({"minik8s.io/hollow": "x"})
            } else {
                json!({})
            };
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
            }))?;
            nodes.create(&PostParams::default(), &node).await?;
            let status = json!({"status": {"addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ]}});
            nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await?;
            anyhow::Ok(())
        }
    };
    add_node("node-b", "192.0.2.20", false).await?;
    add_node("node-a", "192.0.2.10", false).await?;
    add_node("hollow-0", "192.0.2.99", true).await?;
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), "default");
    ingresses
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "main"},
                "spec": {"rules": [{"host": "foo.example", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}},
                ]}}]}
            }))?,
        )
        .await?;
    for own in ["192.0.2.10", "192.0.2.20"] {
        let config = IngressConfig {
            bind: format!("127.0.0.1:{}", testkit::free_port()).parse()?,
            addresses: vec![own.parse()?],
            publish_node_addresses: true,
            hosts: None,
        };
        // Two nodes: each with the informers of its own process.
        let informers = minik8s_informers::Informers::new(client.clone());
        let node_client = client.clone();
        tokio::spawn(async move {
            minik8s_proxy::ingress::run(node_client, &informers, config, std::future::pending())
                .await
        });
    }
    testkit::eventually(
        Duration::from_secs(20),
        "the status lists both nodes",
        || async {
            let ips = status_ips(&ingresses, "main").await?;
            (ips == ["192.0.2.10", "192.0.2.20"]).then_some(())
        },
    )
    .await;
    add_node("node-c", "192.0.2.15", false).await?;
    testkit::eventually(
        Duration::from_secs(20),
        "the status lists the new node too",
        || async {
            let ips = status_ips(&ingresses, "main").await?;
            (ips == ["192.0.2.10", "192.0.2.15", "192.0.2.20"]).then_some(())
        },
    )
    .await;
    Ok(())
}
