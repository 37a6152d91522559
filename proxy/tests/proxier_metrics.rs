//! kube-proxy's metrics of a running iptables proxier (on the recording fake, against an
//! in-process API server): syncs are timed, a Service's rules are counted, the network
//! programming latency of an EndpointSlice change is observed, and `/metrics` and `/healthz`
//! answer over plain HTTP on a loopback port, as kube-proxy's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::PostParams;
use minik8s_proxy::cache::Caches;
use minik8s_proxy::iptables::{FakeIptables, Periods, ProxyConfig};
use minik8s_proxy::metrics::{Endpoints, Mode, ProxyMetrics};
use serde_json::json;
use testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(20);

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// `GET path` over plain HTTP/1.1: the status line and the body.
async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(String, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).await?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    Ok((
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    ))
}

#[tokio::test]
async fn syncs_rules_and_programming_are_measured_and_served() -> anyhow::Result<()> {
    let api = testkit::InProcess::start(testkit::Backend::Sqlite).await?;
    let client = api.client();
    let informers = minik8s_informers::Informers::new(client.clone());
    let metrics = Arc::new(ProxyMetrics::new(Mode::Iptables, Duration::from_secs(60)));
    let config = ProxyConfig {
        hostname: "n1".into(),
        cluster_cidr: Some("10.244.0.0/16".into()),
        masquerade_all: false,
    };
    let periods = Periods {
        min: Duration::ZERO,
        max: Duration::from_secs(30),
    };
    tokio::spawn(minik8s_proxy::iptables::run(
        Caches::from_informers(&informers),
        config,
        Arc::new(FakeIptables::default()),
        periods,
        metrics.clone(),
        std::future::pending(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(minik8s_proxy::metrics::serve(
        listener,
        metrics.clone(),
        Endpoints::Metrics,
        std::future::pending(),
    ));
    let count = "kubeproxy_sync_proxy_rules_duration_seconds_count";
    eventually(WAIT, "the first sync", || async {
        (sample(&metrics.render(), count)? >= 1.0).then_some(())
    })
    .await;
    let text = metrics.render();
    let nat = "kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\"}";
    let (syncs, nat_rules) = (sample(&text, count).unwrap(), sample(&text, nat).unwrap());
    assert!(sample(&text, "kubeproxy_sync_proxy_rules_last_timestamp_seconds").unwrap() > 1.7e9);
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count"
        ),
        Some(1.0)
    );

    // A Service and its endpoints, the change stamped as the endpoints controller stamps it.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))?;
    services.create(&PostParams::default(), &svc).await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    // RFC 3339 with the nanoseconds: after the proxier started, even within its first second.
    let changed = jiff::Timestamp::now().to_string();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {
            "name": "web-1",
            "labels": {"kubernetes.io/service-name": "web"},
            "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": changed}
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.244.0.9"], "conditions": {"ready": true}}]
    }))?;
    slices.create(&PostParams::default(), &slice).await?;
    let programmed = "kubeproxy_network_programming_duration_seconds_count";
    let text = eventually(WAIT, "the endpoints to be programmed", || async {
        let text = metrics.render();
        (sample(&text, programmed)? >= 1.0).then_some(text)
    })
    .await;
    assert!(sample(&text, count).unwrap() > syncs);
    assert!(sample(&text, nat).unwrap() > nat_rules, "{text}");
    assert!(
        sample(
            &text,
            "kubeproxy_sync_partial_proxy_rules_duration_seconds_count"
        )
        .unwrap()
            >= 1.0
    );
    assert!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
        )
        .unwrap()
            > 1.7e9
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
        ),
        Some(0.0)
    );

    // Served as kube-proxy serves them.
    let (status, body) = http_get(addr, "/metrics").await?;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram\n"));
    let (status, body) = http_get(addr, "/healthz").await?;
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("\"nodeEligible\": true"), "{body}");
    let (status, _) = http_get(addr, "/other").await?;
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    Ok(())
}
