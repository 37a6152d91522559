//! Cluster DNS's metrics as CoreDNS's `prometheus` plugin exports them (`plugin/metrics/vars`),
//! so that CoreDNS dashboards and alerts read this server unchanged: every answered query is
//! reported once, as CoreDNS's `vars.Report` does, under the server block `.` (the zone of
//! kubeadm's Corefile) with no view. `plugin` names what answered, as CoreDNS's plugins would:
//! `kubernetes` for the cluster's names, `forward` for relayed answers, empty for a SERVFAIL
//! when no upstream answered. Served on `/metrics` (CoreDNS's `:9153`), see [`serve`].

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{Either, Full};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use tokio::net::TcpListener;

use crate::forward::Body;

/// The transport a query came over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Udp,
    Tcp,
}

/// Who wrote an answer (the `plugin` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    /// The cluster zone.
    Kubernetes,
    /// An upstream resolver.
    Forward,
    /// Nobody: the server's own SERVFAIL.
    Server,
}

impl Answered {
    fn plugin(self) -> &'static str {
        match self {
            Answered::Kubernetes => "kubernetes",
            Answered::Forward => "forward",
            Answered::Server => "",
        }
    }
}

/// One answered query, as CoreDNS reports it.
#[derive(Clone, Copy, Debug)]
pub struct Report {
    pub proto: Proto,
    pub client: SocketAddr,
    pub qtype: u16,
    pub dnssec_ok: bool,
    pub request_size: usize,
    pub response: Option<(usize, u8)>,
    pub answered: Answered,
    pub seconds: f64,
}

/// The zone label: the server block (`.:53`) every query goes through.
const ZONE: &str = ".";
/// The view label: no views.
const VIEW: &str = "";

/// CoreDNS's `plugin.TimeBuckets`: 0.25 ms to about 8 s.
fn time_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.00025, 2.0, 16).expect("buckets")
}

/// CoreDNS's size buckets.
const SIZE_BUCKETS: &[f64] = &[
    0.0, 100.0, 200.0, 300.0, 400.0, 511.0, 1023.0, 2047.0, 4095.0, 8291.0, 16e3, 32e3, 48e3, 64e3,
];

/// The query types CoreDNS counts by name (`monitorType`); others are `other`.
fn qtype_label(qtype: u16) -> &'static str {
    match qtype {
        1 => "A",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        15 => "MX",
        16 => "TXT",
        28 => "AAAA",
        33 => "SRV",
        43 => "DS",
        46 => "RRSIG",
        47 => "NSEC",
        48 => "DNSKEY",
        50 => "NSEC3",
        65 => "HTTPS",
        251 => "IXFR",
        252 => "AXFR",
        255 => "ANY",
        _ => "other",
    }
}

/// miekg/dns's `RcodeToString`, as CoreDNS labels response codes.
fn rcode_label(rcode: u8) -> String {
    match rcode {
        0 => "NOERROR".into(),
        1 => "FORMERR".into(),
        2 => "SERVFAIL".into(),
        3 => "NXDOMAIN".into(),
        4 => "NOTIMP".into(),
        5 => "REFUSED".into(),
        6 => "YXDOMAIN".into(),
        7 => "YXRRSET".into(),
        8 => "NXRRSET".into(),
        9 => "NOTAUTH".into(),
        10 => "NOTZONE".into(),
        n => format!("RCODE{n}"),
    }
}

/// One DNS server's metrics.
pub struct DnsMetrics {
    registry: Registry,
    /// The server label: `dns://` and the address served, as CoreDNS names a server block.
    server: String,
    requests: IntCounterVec,
    duration: HistogramVec,
    request_size: HistogramVec,
    response_size: HistogramVec,
    do_requests: IntCounterVec,
    responses: IntCounterVec,
}

impl DnsMetrics {
    /// Metrics of the server on `bind` (an unspecified address is CoreDNS's `dns://:53`).
    pub fn new(bind: SocketAddr) -> DnsMetrics {
        let server = if bind.ip().is_unspecified() {
            format!("dns://:{}", bind.port())
        } else {
            format!("dns://{bind}")
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("metric")
        };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: Vec<f64>| {
            HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
                .expect("metric")
        };
        let m = DnsMetrics {
            registry: Registry::new(),
            server,
            requests: counter(
                "coredns_dns_requests_total",
                "Counter of DNS requests made per zone, protocol and family.",
                &["server", "zone", "view", "proto", "family", "type"],
            ),
            duration: histogram(
                "coredns_dns_request_duration_seconds",
                "Histogram of the time (in seconds) each request took per zone.",
                &["server", "zone", "view"],
                time_buckets(),
            ),
            request_size: histogram(
                "coredns_dns_request_size_bytes",
                "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.",
                &["server", "zone", "view", "proto"],
                SIZE_BUCKETS.to_vec(),
            ),
            response_size: histogram(
                "coredns_dns_response_size_bytes",
                "Size of the returned response in bytes.",
                &["server", "zone", "view", "proto"],
                SIZE_BUCKETS.to_vec(),
            ),
            do_requests: counter(
                "coredns_dns_do_requests_total",
                "Counter of DNS requests with DO bit set per zone.",
                &["server", "zone", "view"],
            ),
            responses: counter(
                "coredns_dns_responses_total",
                "Counter of response status codes.",
                &["server", "zone", "view", "rcode", "plugin"],
            ),
        };
        for c in [
            Box::new(m.requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.duration.clone()),
            Box::new(m.request_size.clone()),
            Box::new(m.response_size.clone()),
            Box::new(m.do_requests.clone()),
            Box::new(m.responses.clone()),
        ] {
            m.registry.register(c).expect("metric registered once");
        }
        m
    }

    /// One query, answered (or dropped: `response` is `None`, counted as CoreDNS counts a
    /// query no plugin wrote to, SERVFAIL).
    pub fn report(&self, r: &Report) {
        let server = self.server.as_str();
        let proto = match r.proto {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        };
        let family = if r.client.is_ipv4() { "1" } else { "2" };
        if r.dnssec_ok {
            self.do_requests
                .with_label_values(&[server, ZONE, VIEW])
                .inc();
        }
        self.requests
            .with_label_values(&[server, ZONE, VIEW, proto, family, qtype_label(r.qtype)])
            .inc();
        self.duration
            .with_label_values(&[server, ZONE, VIEW])
            .observe(r.seconds);
        let (size, rcode) = r.response.unwrap_or((0, 2));
        self.response_size
            .with_label_values(&[server, ZONE, VIEW, proto])
            .observe(size as f64);
        self.request_size
            .with_label_values(&[server, ZONE, VIEW, proto])
            .observe(r.request_size as f64);
        self.responses
            .with_label_values(&[server, ZONE, VIEW, &rcode_label(rcode), r.answered.plugin()])
            .inc();
    }

    /// The text exposition of `/metrics`: the server's metrics and the process's.
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        families.extend(
            prometheus::gather()
                .into_iter()
                .filter(|f| f.name().starts_with("process_")),
        );
        crate::metrics::encode(&families)
    }
}

fn respond(metrics: &DnsMetrics, path: &str) -> Response<Body> {
    let (status, content_type, body) = if path == "/metrics" {
        (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        )
    } else {
        (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n".to_string(),
        )
    };
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// Serves `/metrics` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<DnsMetrics>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let handle = move |req: http::Request<hyper::body::Incoming>, _peer| {
        let response = respond(&metrics, req.uri().path());
        async move { response }
    };
    crate::forward::serve(listener, handle, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_under_corednss_names_and_labels() {
        let m = DnsMetrics::new("0.0.0.0:53".parse().unwrap());
        let report = Report {
            proto: Proto::Udp,
            client: "10.244.0.5:40000".parse().unwrap(),
            qtype: 1,
            dnssec_ok: false,
            request_size: 40,
            response: Some((120, 0)),
            answered: Answered::Kubernetes,
            seconds: 0.0002,
        };
        m.report(&report);
        m.report(&Report {
            proto: Proto::Tcp,
            client: "[fd00::5]:40000".parse().unwrap(),
            qtype: 99,
            dnssec_ok: true,
            response: None,
            answered: Answered::Server,
            ..report
        });
        let text = m.render();
        for line in [
            "coredns_dns_requests_total{family=\"1\",proto=\"udp\",server=\"dns://:53\",type=\"A\",view=\"\",zone=\".\"} 1",
            "coredns_dns_requests_total{family=\"2\",proto=\"tcp\",server=\"dns://:53\",type=\"other\",view=\"\",zone=\".\"} 1",
            "coredns_dns_request_duration_seconds_bucket{server=\"dns://:53\",view=\"\",zone=\".\",le=\"0.00025\"} 2",
            "coredns_dns_request_duration_seconds_count{server=\"dns://:53\",view=\"\",zone=\".\"} 2",
            "coredns_dns_responses_total{plugin=\"kubernetes\",rcode=\"NOERROR\",server=\"dns://:53\",view=\"\",zone=\".\"} 1",
            "coredns_dns_responses_total{plugin=\"\",rcode=\"SERVFAIL\",server=\"dns://:53\",view=\"\",zone=\".\"} 1",
            "coredns_dns_do_requests_total{server=\"dns://:53\",view=\"\",zone=\".\"} 1",
            "coredns_dns_response_size_bytes_bucket{proto=\"udp\",server=\"dns://:53\",view=\"\",zone=\".\",le=\"200\"} 1",
            "# HELP coredns_dns_requests_total Counter of DNS requests made per zone, protocol and family.",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line}\n{text}");
        }
        assert!(text.contains("le=\"8.192\""), "{text}");
        assert_eq!(
            DnsMetrics::new("10.0.0.10:53".parse().unwrap()).server,
            "dns://10.0.0.10:53"
        );
        assert_eq!(respond(&m, "/").status(), StatusCode::NOT_FOUND);
    }
}
