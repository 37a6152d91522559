//! kube-proxy's metrics and health, as upstream's `pkg/proxy/metrics` and its proxier health
//! server: the same names, help, buckets and registration per mode (iptables-only families in
//! iptables mode, nftables-only in nftables mode), served as kube-proxy serves them, plain
//! HTTP: `/metrics` on `--metrics-bind-address`, `/healthz` and `/livez` on
//! `--healthz-bind-address` (see [`serve`]). One registry per proxier, so that a process
//! running other components (the all-in-one server) serves only the proxier's here.
//!
//! Upstream 1.33 added an `ip_family` label to most of these; this cluster serves 1.32, whose
//! families have none (the proxier is IPv4 only).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{Either, Full};
use prometheus::proto::MetricFamily;
use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use tokio::net::TcpListener;

use crate::forward::Body;

/// Which proxier the metrics are of: the families each registers differ, as upstream's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Iptables,
    Nftables,
}

/// What one sync did, for the full and partial duration families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncType {
    Full,
    Partial,
}

/// The proxier's health as upstream's ProxierHealthServer tracks it: when rules were last
/// synced, and the oldest change queued since.
#[derive(Debug)]
struct Health {
    last_updated: Option<jiff::Timestamp>,
    oldest_pending: Option<Instant>,
}

fn alpha(help: &str) -> String {
    format!("[ALPHA] {help}")
}

/// `metrics.ExponentialBuckets(0.001, 2, 15)`: 1 ms to about 16 s.
fn sync_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.001, 2.0, 15).expect("buckets")
}

/// Upstream's network programming buckets: 0.25 s and 0.5 s, every second to 59 s, every 5 s
/// to 115 s, every 30 s from 2 to 5 minutes.
fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

/// One proxier's metrics.
pub struct ProxyMetrics {
    registry: Registry,
    mode: Mode,
    sync_duration: Histogram,
    sync_full_duration: Histogram,
    sync_partial_duration: Histogram,
    last_timestamp: Gauge,
    last_queued_timestamp: Gauge,
    network_programming: Histogram,
    iptables_total: IntGaugeVec,
    iptables_last: IntGaugeVec,
    iptables_restore_failures: IntCounter,
    iptables_partial_restore_failures: IntCounter,
    nftables_sync_failures: IntCounter,
    healthz: IntCounterVec,
    livez: IntCounterVec,
    health: Mutex<Health>,
    /// A queued change older than this makes the proxier unhealthy (kube-proxy: twice its
    /// sync period).
    health_timeout: Duration,
}

impl ProxyMetrics {
    pub fn new(mode: Mode, health_timeout: Duration) -> ProxyMetrics {
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            Histogram::with_opts(HistogramOpts::new(name, alpha(help)).buckets(buckets))
                .expect("metric")
        };
        let counter = |name: &str, help: &str| IntCounter::new(name, alpha(help)).expect("metric");
        let by = |name: &str, help: &str, label: &str| {
            IntCounterVec::new(Opts::new(name, alpha(help)), &[label]).expect("metric")
        };
        let tables = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(name, alpha(help)), &["table"]).expect("metric")
        };
        let m = ProxyMetrics {
            registry: Registry::new(),
            mode,
            sync_duration: histogram(
                "kubeproxy_sync_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds",
                sync_buckets(),
            ),
            sync_full_duration: histogram(
                "kubeproxy_sync_full_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for full resyncs",
                sync_buckets(),
            ),
            sync_partial_duration: histogram(
                "kubeproxy_sync_partial_proxy_rules_duration_seconds",
                "SyncProxyRules latency in seconds for partial resyncs",
                sync_buckets(),
            ),
            last_timestamp: Gauge::new(
                "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                alpha("The last time proxy rules were successfully synced"),
            )
            .expect("metric"),
            last_queued_timestamp: Gauge::new(
                "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
                alpha("The last time a sync of proxy rules was queued"),
            )
            .expect("metric"),
            network_programming: histogram(
                "kubeproxy_network_programming_duration_seconds",
                "In Cluster Network Programming Latency in seconds",
                programming_buckets(),
            ),
            iptables_total: tables(
                "kubeproxy_sync_proxy_rules_iptables_total",
                "Total number of iptables rules owned by kube-proxy",
            ),
            iptables_last: tables(
                "kubeproxy_sync_proxy_rules_iptables_last",
                "Number of iptables rules written by kube-proxy in last sync",
            ),
            iptables_restore_failures: counter(
                "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
                "Cumulative proxy iptables restore failures",
            ),
            iptables_partial_restore_failures: counter(
                "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
                "Cumulative proxy iptables partial restore failures",
            ),
            nftables_sync_failures: counter(
                "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
                "Cumulative proxy nftables sync failures",
            ),
            healthz: by(
                "kubeproxy_proxy_healthz_total",
                "Cumulative proxy healthz HTTP status",
                "code",
            ),
            livez: by(
                "kubeproxy_proxy_livez_total",
                "Cumulative proxy livez HTTP status",
                "code",
            ),
            health: Mutex::new(Health {
                last_updated: None,
                oldest_pending: None,
            }),
            health_timeout,
        };
        let mut collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.sync_duration.clone()),
            Box::new(m.sync_full_duration.clone()),
            Box::new(m.sync_partial_duration.clone()),
            Box::new(m.last_timestamp.clone()),
            Box::new(m.last_queued_timestamp.clone()),
            Box::new(m.network_programming.clone()),
            Box::new(m.healthz.clone()),
            Box::new(m.livez.clone()),
        ];
        match mode {
            Mode::Iptables => collectors.extend([
                Box::new(m.iptables_total.clone()) as Box<dyn prometheus::core::Collector>,
                Box::new(m.iptables_last.clone()),
                Box::new(m.iptables_restore_failures.clone()),
                Box::new(m.iptables_partial_restore_failures.clone()),
            ]),
            Mode::Nftables => collectors.push(Box::new(m.nftables_sync_failures.clone())),
        }
        for c in collectors {
            m.registry.register(c).expect("metric registered once");
        }
        m
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// A change was queued for the next sync.
    pub fn queued(&self) {
        self.last_queued_timestamp.set(now_seconds());
        let mut h = self.health.lock().expect("proxy health");
        h.oldest_pending.get_or_insert_with(Instant::now);
    }

    /// One sync attempt of `took`; `synced` is what a successful one did.
    pub fn sync_ended(&self, took: Duration, synced: Option<SyncType>) {
        self.sync_duration.observe(took.as_secs_f64());
        let Some(kind) = synced else { return };
        match kind {
            SyncType::Full => self.sync_full_duration.observe(took.as_secs_f64()),
            SyncType::Partial => self.sync_partial_duration.observe(took.as_secs_f64()),
        }
        self.last_timestamp.set(now_seconds());
        let mut h = self.health.lock().expect("proxy health");
        h.last_updated = Some(jiff::Timestamp::now());
        h.oldest_pending = None;
    }

    /// A change the last sync put in place became known to the cluster `ago` before.
    pub fn programmed(&self, ago: Duration) {
        self.network_programming.observe(ago.as_secs_f64());
    }

    /// The iptables rules the proxier owns, and those the last sync wrote, by table.
    pub fn iptables_rules(
        &self,
        total: &BTreeMap<String, usize>,
        written: &BTreeMap<String, usize>,
    ) {
        for (table, n) in total {
            self.iptables_total
                .with_label_values(&[table])
                .set(*n as i64);
            let w = written.get(table).copied().unwrap_or(0);
            self.iptables_last.with_label_values(&[table]).set(w as i64);
        }
    }

    /// An iptables-restore failed (`partial`: of only the changed chains).
    pub fn iptables_restore_failed(&self, partial: bool) {
        self.iptables_restore_failures.inc();
        if partial {
            self.iptables_partial_restore_failures.inc();
        }
    }

    pub fn nftables_sync_failed(&self) {
        self.nftables_sync_failures.inc();
    }

    /// The text exposition of `/metrics`: the proxier's metrics and the process's.
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        families.extend(
            prometheus::gather()
                .into_iter()
                .filter(|f| f.name().starts_with("process_")),
        );
        encode(&families)
    }

    /// `/healthz` (and `/livez`), upstream's answer: 200 while no queued change has waited
    /// longer than the health timeout, else 503; the body says when rules were last synced.
    pub fn health(&self, livez: bool) -> (StatusCode, String) {
        let h = self.health.lock().expect("proxy health");
        let healthy = h
            .oldest_pending
            .is_none_or(|queued| queued.elapsed() < self.health_timeout);
        let status = if healthy {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let counter = if livez { &self.livez } else { &self.healthz };
        counter.with_label_values(&[status.as_str()]).inc();
        let time = |t: Option<jiff::Timestamp>| {
            t.map(|t| t.strftime("%Y-%m-%d %H:%M:%S%.f %z UTC").to_string())
                .unwrap_or_else(|| "0001-01-01 00:00:00 +0000 UTC".into())
        };
        let mut body = format!(
            "{{\"lastUpdated\": {:?},\"currentTime\": {:?}",
            time(h.last_updated),
            time(Some(jiff::Timestamp::now()))
        );
        if !livez {
            body.push_str(", \"nodeEligible\": true");
        }
        body.push('}');
        (status, body)
    }
}

fn now_seconds() -> f64 {
    jiff::Timestamp::now().as_millisecond() as f64 / 1000.0
}

/// Prometheus text exposition of `families`, leaving out the empty ones (the encoder refuses
/// them).
pub fn encode(families: &[MetricFamily]) -> String {
    let families: Vec<MetricFamily> = families
        .iter()
        .filter(|f| !f.get_metric().is_empty())
        .cloned()
        .collect();
    TextEncoder::new()
        .encode_to_string(&families)
        .expect("text encoding")
}

/// `-A` rules of an iptables-restore input, by table.
pub fn rules_by_table(restore: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut table = None;
    for line in restore.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = Some(t.to_string());
            out.entry(t.to_string()).or_insert(0);
        } else if line.starts_with("-A ")
            && let Some(t) = &table
        {
            *out.entry(t.clone()).or_insert(0) += 1;
        }
    }
    out
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// What one of the proxier's plain-HTTP servers answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// `--metrics-bind-address`: `/metrics` (and, as kube-proxy's, `/healthz` too).
    Metrics,
    /// `--healthz-bind-address`: `/healthz` and `/livez`.
    Health,
}

/// The answer to `path` on one of the servers.
pub fn respond(metrics: &ProxyMetrics, which: Endpoints, path: &str) -> Response<Body> {
    match (which, path) {
        (Endpoints::Metrics, "/metrics") => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        (_, "/healthz") | (Endpoints::Health, "/livez") => {
            let (status, body) = metrics.health(path == "/livez");
            reply(status, "application/json", body)
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "404 page not found\n".into(),
        ),
    }
}

/// Serves `which` on `addr` in the background (a failure to bind is logged: the proxier runs
/// without it, as a second cluster on one machine would otherwise not start).
pub fn spawn_server(
    metrics: Arc<ProxyMetrics>,
    which: Endpoints,
    addr: SocketAddr,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    tokio::spawn(async move {
        let listener = match TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(%addr, error = %e, "not serving kube-proxy {which:?}");
                return;
            }
        };
        tracing::info!(%addr, "serving kube-proxy {which:?}");
        serve(listener, metrics, which, shutdown).await;
    });
}

/// Serves `which` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<ProxyMetrics>,
    which: Endpoints,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let handle = move |req: http::Request<hyper::body::Incoming>, _peer| {
        let response = respond(&metrics, which, req.uri().path());
        async move { response }
    };
    crate::forward::serve(listener, handle, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn families_per_mode_and_upstreams_buckets() {
        let ipt = ProxyMetrics::new(Mode::Iptables, Duration::from_secs(60));
        ipt.sync_ended(Duration::from_millis(3), Some(SyncType::Full));
        ipt.iptables_rules(
            &BTreeMap::from([("filter".into(), 10), ("nat".into(), 40)]),
            &BTreeMap::from([("nat".into(), 4)]),
        );
        let text = ipt.render();
        assert_eq!(
            sample(
                &text,
                "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.004\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.002\"}"
            ),
            Some(0.0)
        );
        assert!(text.contains("le=\"16.384\""), "{text}");
        assert_eq!(
            sample(
                &text,
                "kubeproxy_sync_full_proxy_rules_duration_seconds_count"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "kubeproxy_sync_proxy_rules_iptables_total{table=\"nat\"}"
            ),
            Some(40.0)
        );
        assert_eq!(
            sample(
                &text,
                "kubeproxy_sync_proxy_rules_iptables_last{table=\"filter\"}"
            ),
            Some(0.0)
        );
        assert!(text.contains(
            "# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds\n"
        ));
        assert!(
            sample(&text, "kubeproxy_sync_proxy_rules_last_timestamp_seconds").unwrap() > 1.7e9
        );
        assert_eq!(
            sample(
                &text,
                "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
            ),
            Some(0.0)
        );
        assert!(!text.contains("nftables"));
        let nft = ProxyMetrics::new(Mode::Nftables, Duration::from_secs(60));
        nft.nftables_sync_failed();
        let text = nft.render();
        assert_eq!(
            sample(
                &text,
                "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
            ),
            Some(1.0)
        );
        assert!(!text.contains("iptables"));
        let buckets = programming_buckets();
        assert_eq!(buckets.len(), 80);
        assert_eq!(
            (
                buckets[0],
                buckets[2],
                buckets[60],
                buckets[61],
                buckets[73],
                buckets[79]
            ),
            (0.25, 1.0, 59.0, 60.0, 120.0, 300.0)
        );
    }

    #[test]
    fn health_follows_queued_changes() {
        let m = ProxyMetrics::new(Mode::Iptables, Duration::ZERO);
        // Nothing queued: healthy, never synced.
        let (status, body) = m.health(false);
        assert_eq!(status, StatusCode::OK);
        assert!(body.starts_with(
            "{\"lastUpdated\": \"0001-01-01 00:00:00 +0000 UTC\",\"currentTime\": \""
        ));
        assert!(body.ends_with(", \"nodeEligible\": true}"), "{body}");
        // A change waits longer than the timeout: unhealthy until a sync.
        m.queued();
        assert_eq!(m.health(false).0, StatusCode::SERVICE_UNAVAILABLE);
        m.sync_ended(Duration::from_millis(1), None);
        assert_eq!(m.health(false).0, StatusCode::SERVICE_UNAVAILABLE);
        m.sync_ended(Duration::from_millis(1), Some(SyncType::Partial));
        let (status, body) = m.health(true);
        assert_eq!(status, StatusCode::OK);
        assert!(!body.contains("nodeEligible"));
        let text = m.render();
        assert_eq!(
            sample(&text, "kubeproxy_proxy_healthz_total{code=\"503\"}"),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, "kubeproxy_proxy_livez_total{code=\"200\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "kubeproxy_sync_proxy_rules_duration_seconds_count"),
            Some(2.0)
        );
        let r = respond(&m, Endpoints::Metrics, "/nope");
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            respond(&m, Endpoints::Health, "/metrics").status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn rules_are_counted_per_table() {
        let restore = "*filter\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j ACCEPT\nCOMMIT\n*nat\n-A A -j B\n-A B -j C\n-X OLD\nCOMMIT\n";
        assert_eq!(
            rules_by_table(restore),
            BTreeMap::from([("filter".to_string(), 1), ("nat".to_string(), 2)])
        );
    }
}
