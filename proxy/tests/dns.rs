//! Cluster DNS over real sockets on 127.0.0.1: answers from the zone over UDP and TCP,
//! forwarding of other names to a fake upstream, truncation, and a zone kept current by
//! watches of an in-process API server.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use minik8s_proxy::dns::{DnsConfig, Server, Zone};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

fn query(name: &str, t: RecordType) -> Message {
    let mut m = Message::new();
    m.set_id(4242).set_recursion_desired(true);
    m.add_query(Query::query(Name::from_str(name).unwrap(), t));
    m
}

async fn ask_udp(server: SocketAddr, q: &Message) -> anyhow::Result<Message> {
    let s = UdpSocket::bind("127.0.0.1:0").await?;
    s.send_to(&q.to_vec()?, server).await?;
    let mut buf = vec![0u8; 65535];
    let n = tokio::time::timeout(Duration::from_secs(5), s.recv(&mut buf)).await??;
    Ok(Message::from_vec(&buf[..n])?)
}

async fn ask_tcp(server: SocketAddr, q: &Message) -> anyhow::Result<Message> {
    let mut s = TcpStream::connect(server).await?;
    let bytes = q.to_vec()?;
    s.write_u16(bytes.len() as u16).await?;
    s.write_all(&bytes).await?;
    let len = s.read_u16().await? as usize;
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await?;
    Ok(Message::from_vec(&buf)?)
}

fn ips(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m.answers().iter().map(|r| r.data().to_string()).collect();
    v.sort();
    v
}

/// A fake upstream resolver: answers every question with 192.0.2.1.
async fn fake_upstream() -> anyhow::Result<SocketAddr> {
    let s = UdpSocket::bind("127.0.0.1:0").await?;
    let addr = s.local_addr()?;
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((n, peer)) = s.recv_from(&mut buf).await {
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut r = Message::new();
            r.set_id(q.id()).set_message_type(MessageType::Response);
            for question in q.queries() {
                r.add_query(question.clone());
                r.add_answer(Record::from_rdata(
                    question.name().clone(),
                    60,
                    RData::A(A::new(192, 0, 2, 1)),
                ));
            }
            let _ = s.send_to(&r.to_vec().unwrap(), peer).await;
        }
    });
    Ok(addr)
}

async fn start(server: std::sync::Arc<Server>) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let udp = UdpSocket::bind("127.0.0.1:0").await?;
    let tcp = TcpListener::bind("127.0.0.1:0").await?;
    let addrs = (udp.local_addr()?, tcp.local_addr()?);
    tokio::spawn(server.serve(udp, tcp, std::future::pending()));
    Ok(addrs)
}

fn headless(n: usize) -> (Service, EndpointSlice) {
    let svc = serde_json::from_value(json!({
        "metadata": {"namespace": "db", "name": "big"},
        "spec": {"clusterIP": "None", "ports": [{"name": "sql", "port": 5432}]}
    }))
    .unwrap();
    let eps: Vec<_> = (0..n)
        .map(|i| json!({"addresses": [format!("10.244.{}.{}", i / 250, i % 250 + 1)]}))
        .collect();
    let slice = serde_json::from_value(json!({
        "metadata": {"namespace": "db", "name": "big-1", "labels": {"kubernetes.io/service-name": "big"}},
        "addressType": "IPv4",
        "ports": [{"name": "sql", "port": 5432}],
        "endpoints": eps,
    }))
    .unwrap();
    (svc, slice)
}

#[tokio::test]
async fn answers_over_udp_and_tcp_and_forwards_the_rest() -> anyhow::Result<()> {
    let web: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "web"},
        "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80}]}
    }))?;
    let (big, big_slice) = headless(100);
    let zone = Zone::build("cluster.local", &[web, big], &[big_slice]);
    let server = Server::new(zone, vec![fake_upstream().await?]);
    let (udp, tcp) = start(server.clone()).await?;

    let r = ask_udp(udp, &query("web.default.svc.cluster.local.", RecordType::A)).await?;
    assert_eq!(r.id(), 4242);
    assert!(r.authoritative());
    assert_eq!(ips(&r), ["10.96.0.20"]);
    let r = ask_tcp(tcp, &query("web.default.svc.cluster.local.", RecordType::A)).await?;
    assert_eq!(ips(&r), ["10.96.0.20"]);

    let r = ask_udp(
        udp,
        &query("missing.default.svc.cluster.local.", RecordType::A),
    )
    .await?;
    assert_eq!(r.response_code(), ResponseCode::NXDomain);
    assert_eq!(r.name_servers().len(), 1, "SOA in the authority section");

    // Not ours: the fake upstream's answer comes back.
    let r = ask_udp(udp, &query("example.com.", RecordType::A)).await?;
    assert_eq!(ips(&r), ["192.0.2.1"]);
    assert!(!r.authoritative());

    // 100 A records do not fit in 512 bytes: truncated over UDP, complete over TCP.
    let q = query("big.db.svc.cluster.local.", RecordType::A);
    let r = ask_udp(udp, &q).await?;
    assert!(r.truncated());
    let r = ask_tcp(tcp, &q).await?;
    assert_eq!(r.answers().len(), 100);

    // Every query reported as CoreDNS reports it: by transport, family and type, and by
    // response code and the plugin that answered.
    let text = server.metrics().render();
    let server = "server=\"dns://:53\",view=\"\",zone=\".\"";
    for (series, want) in [
        (
            "coredns_dns_requests_total{family=\"1\",proto=\"udp\",server=\"dns://:53\",type=\"A\",view=\"\",zone=\".\"}",
            4.0,
        ),
        (
            "coredns_dns_requests_total{family=\"1\",proto=\"tcp\",server=\"dns://:53\",type=\"A\",view=\"\",zone=\".\"}",
            2.0,
        ),
        (
            &format!("coredns_dns_request_duration_seconds_count{{{server}}}"),
            6.0,
        ),
        (
            &format!(
                "coredns_dns_responses_total{{plugin=\"kubernetes\",rcode=\"NOERROR\",{server}}}"
            ),
            4.0,
        ),
        (
            &format!(
                "coredns_dns_responses_total{{plugin=\"kubernetes\",rcode=\"NXDOMAIN\",{server}}}"
            ),
            1.0,
        ),
        (
            &format!(
                "coredns_dns_responses_total{{plugin=\"forward\",rcode=\"NOERROR\",{server}}}"
            ),
            1.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series}\n{text}");
    }
    Ok(())
}

/// The value of `series` in a text exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// `GET path` over plain HTTP/1.1, the body.
async fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).await?;
    anyhow::ensure!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    Ok(reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

#[tokio::test]
async fn forwarding_to_a_dead_upstream_is_servfail() -> anyhow::Result<()> {
    // Nothing listens there: the query fails rather than hanging forever.
    let dead = UdpSocket::bind("127.0.0.1:0").await?.local_addr()?;
    let server = Server::new(Zone::build("cluster.local", &[], &[]), vec![dead]);
    let (udp, _) = start(server.clone()).await?;
    let r = ask_udp(udp, &query("example.com.", RecordType::A)).await?;
    assert_eq!(r.response_code(), ResponseCode::ServFail);
    // No plugin wrote it: CoreDNS's empty `plugin`.
    let text = server.metrics().render();
    let series = "coredns_dns_responses_total{plugin=\"\",rcode=\"SERVFAIL\",server=\"dns://:53\",view=\"\",zone=\".\"}";
    assert_eq!(sample(&text, series), Some(1.0), "{text}");
    Ok(())
}

#[tokio::test]
async fn the_zone_follows_the_api() -> anyhow::Result<()> {
    let api = testkit::InProcess::start(testkit::Backend::Sqlite).await?;
    let client = api.client();
    let bind: SocketAddr = format!("127.0.0.1:{}", testkit::free_port()).parse()?;
    let metrics: SocketAddr = format!("127.0.0.1:{}", testkit::free_port()).parse()?;
    let config = DnsConfig {
        bind,
        domain: "cluster.local".into(),
        upstreams: vec![],
        metrics_bind: Some(metrics),
    };
    let informers = minik8s_informers::Informers::new(client.clone());
    tokio::spawn(async move {
        minik8s_proxy::dns::run(&informers, config, std::future::pending()).await
    });

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "db"},
                "spec": {"clusterIP": "None", "ports": [{"name": "sql", "port": 5432}]}
            }))?,
        )
        .await?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    slices
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
                "addressType": "IPv4",
                "ports": [{"name": "sql", "port": 5432, "protocol": "TCP"}],
                "endpoints": [{"addresses": ["10.244.0.7"], "hostname": "db-0", "conditions": {"ready": true}}]
            }))?,
        )
        .await?;
    let q = query("db-0.db.default.svc.cluster.local.", RecordType::A);
    testkit::eventually(Duration::from_secs(20), "the endpoint resolves", || async {
        let r = ask_udp(bind, &q).await.ok()?;
        (ips(&r) == ["10.244.0.7"]).then_some(())
    })
    .await;

    // Served as CoreDNS's prometheus plugin serves them: one more query moves the request
    // counter and the duration histogram by one.
    let requests = format!(
        "coredns_dns_requests_total{{family=\"1\",proto=\"udp\",server=\"dns://{bind}\",type=\"A\",view=\"\",zone=\".\"}}"
    );
    let durations = format!(
        "coredns_dns_request_duration_seconds_count{{server=\"dns://{bind}\",view=\"\",zone=\".\"}}"
    );
    let before = http_get(metrics, "/metrics").await?;
    ask_udp(bind, &q).await?;
    let after = http_get(metrics, "/metrics").await?;
    for series in [&requests, &durations] {
        let (b, a) = (sample(&before, series), sample(&after, series));
        assert!(
            b.is_some_and(|b| a == Some(b + 1.0)),
            "{series}: {b:?} -> {a:?}\n{after}"
        );
    }

    services.delete("db", &DeleteParams::default()).await?;
    let q = query("db.default.svc.cluster.local.", RecordType::A);
    testkit::eventually(
        Duration::from_secs(20),
        "the deleted service is gone",
        || async {
            let r = ask_udp(bind, &q).await.ok()?;
            (r.response_code() == ResponseCode::NXDomain).then_some(())
        },
    )
    .await;
    Ok(())
}
