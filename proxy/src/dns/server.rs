//! DNS over UDP and TCP on one address. Questions about the cluster are answered from the
//! current zone; anything else is relayed byte for byte to an upstream resolver, so clients
//! see the upstream's own answer (id, flags, EDNS and all).

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::metrics::{Answered, DnsMetrics, Proto, Report};
use super::zone::Zone;
use crate::cache::Caches;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// Where the server listens, what it is authoritative for and whom it asks for the rest.
#[derive(Clone, Debug)]
pub struct DnsConfig {
    pub bind: SocketAddr,
    /// The cluster domain, `cluster.local`.
    pub domain: String,
    pub upstreams: Vec<SocketAddr>,
    /// Where `/metrics` is served (CoreDNS's `prometheus :9153`); `None`: nowhere.
    pub metrics_bind: Option<SocketAddr>,
}

/// `nameserver` lines of a resolv.conf, on port 53.
pub fn upstreams_from_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver"))
                .then(|| words.next())
                .flatten()
                .and_then(|ip| ip.parse().ok())
                .map(|ip| SocketAddr::new(ip, 53))
        })
        .collect()
}

const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// The current zone and the upstreams; shared by every connection.
pub struct Server {
    zone: RwLock<Arc<Zone>>,
    upstreams: Vec<SocketAddr>,
    metrics: Arc<DnsMetrics>,
}

impl Server {
    /// A server whose metrics name it as CoreDNS's `.:53`.
    pub fn new(zone: Zone, upstreams: Vec<SocketAddr>) -> Arc<Server> {
        let metrics = DnsMetrics::new(SocketAddr::from(([0, 0, 0, 0], 53)));
        Server::with_metrics(zone, upstreams, Arc::new(metrics))
    }

    pub fn with_metrics(
        zone: Zone,
        upstreams: Vec<SocketAddr>,
        metrics: Arc<DnsMetrics>,
    ) -> Arc<Server> {
        Arc::new(Server {
            zone: RwLock::new(Arc::new(zone)),
            upstreams,
            metrics,
        })
    }

    pub fn metrics(&self) -> &Arc<DnsMetrics> {
        &self.metrics
    }

    pub fn set_zone(&self, zone: Zone) {
        *self.zone.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(zone);
    }

    fn zone(&self) -> Arc<Zone> {
        self.zone.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The reply to one DNS message from `client` (`None`: drop it, as for garbage), each
    /// query reported in the metrics.
    pub async fn handle(&self, packet: &[u8], proto: Proto, client: SocketAddr) -> Option<Vec<u8>> {
        let started = std::time::Instant::now();
        let query = Message::from_vec(packet).ok()?;
        if query.message_type() != MessageType::Query {
            return None;
        }
        let answer = self.answer(&query, packet, proto == Proto::Tcp).await;
        self.metrics.report(&Report {
            proto,
            client,
            qtype: query
                .queries()
                .first()
                .map_or(0, |q| u16::from(q.query_type())),
            dnssec_ok: query
                .extensions()
                .as_ref()
                .is_some_and(|e| e.flags().dnssec_ok),
            request_size: packet.len(),
            // The response code is the low bits of the header's fourth byte.
            response: answer
                .as_ref()
                .map(|(bytes, _)| (bytes.len(), bytes.get(3).map_or(2, |b| b & 0x0f))),
            answered: answer.as_ref().map_or(Answered::Server, |(_, by)| *by),
            seconds: started.elapsed().as_secs_f64(),
        });
        answer.map(|(bytes, _)| bytes)
    }

    /// The reply to `query` and who wrote it.
    async fn answer(
        &self,
        query: &Message,
        packet: &[u8],
        over_tcp: bool,
    ) -> Option<(Vec<u8>, Answered)> {
        let Some(resp) = self.zone().respond(query) else {
            return match self.forward(packet, over_tcp).await {
                Some(r) => Some((r, Answered::Forward)),
                None => {
                    let mut fail = Message::new();
                    fail.set_id(query.id())
                        .set_message_type(MessageType::Response)
                        .set_recursion_desired(query.recursion_desired())
                        .set_recursion_available(true)
                        .set_response_code(ResponseCode::ServFail)
                        .add_queries(query.queries().to_vec());
                    fail.to_vec().ok().map(|b| (b, Answered::Server))
                }
            };
        };
        Some((fit(query, &resp, over_tcp)?, Answered::Kubernetes))
    }

    async fn forward(&self, packet: &[u8], over_tcp: bool) -> Option<Vec<u8>> {
        for upstream in &self.upstreams {
            let result = if over_tcp {
                tokio::time::timeout(UPSTREAM_TIMEOUT, forward_tcp(*upstream, packet)).await
            } else {
                tokio::time::timeout(UPSTREAM_TIMEOUT, forward_udp(*upstream, packet)).await
            };
            match result {
                Ok(Ok(answer)) => return Some(answer),
                Ok(Err(e)) => tracing::debug!(%upstream, error = %e, "upstream failed"),
                Err(_) => tracing::debug!(%upstream, "upstream timed out"),
            }
        }
        None
    }

    /// Serves UDP and TCP until `shutdown`.
    pub async fn serve(
        self: Arc<Self>,
        udp: UdpSocket,
        tcp: TcpListener,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let udp = Arc::new(udp);
        let udp_task = {
            let server = self.clone();
            let udp = udp.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65535];
                loop {
                    let Ok((n, peer)) = udp.recv_from(&mut buf).await else {
                        continue;
                    };
                    let packet = buf[..n].to_vec();
                    let server = server.clone();
                    let udp = udp.clone();
                    tokio::spawn(async move {
                        if let Some(reply) = server.handle(&packet, Proto::Udp, peer).await {
                            let _ = udp.send_to(&reply, peer).await;
                        }
                    });
                }
            })
        };
        let tcp_task = {
            let server = self.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((stream, peer)) = tcp.accept().await else {
                        continue;
                    };
                    let server = server.clone();
                    tokio::spawn(async move {
                        let _ = serve_tcp(server, stream, peer).await;
                    });
                }
            })
        };
        shutdown.await;
        udp_task.abort();
        tcp_task.abort();
    }
}

/// `resp` as bytes that fit the client's UDP buffer.
fn fit(query: &Message, resp: &Message, over_tcp: bool) -> Option<Vec<u8>> {
    let bytes = resp.to_vec().ok()?;
    let limit = query
        .extensions()
        .as_ref()
        .map(|e| e.max_payload().max(512) as usize)
        .unwrap_or(512);
    if over_tcp || bytes.len() <= limit {
        return Some(bytes);
    }
    // Too big for this UDP client: an empty truncated answer makes it retry over TCP.
    let mut truncated = resp.clone();
    truncated.take_answers();
    truncated.take_additionals();
    truncated.set_truncated(true);
    truncated.to_vec().ok()
}

async fn serve_tcp(
    server: Arc<Server>,
    mut stream: TcpStream,
    peer: SocketAddr,
) -> std::io::Result<()> {
    loop {
        let len = match tokio::time::timeout(Duration::from_secs(10), stream.read_u16()).await {
            Ok(Ok(len)) => len as usize,
            _ => return Ok(()),
        };
        let mut packet = vec![0u8; len];
        stream.read_exact(&mut packet).await?;
        if let Some(reply) = server.handle(&packet, Proto::Tcp, peer).await {
            stream.write_u16(reply.len() as u16).await?;
            stream.write_all(&reply).await?;
        }
    }
}

async fn forward_udp(upstream: SocketAddr, packet: &[u8]) -> std::io::Result<Vec<u8>> {
    let local: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse().expect("address")
    } else {
        "[::]:0".parse().expect("address")
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(upstream).await?;
    socket.send(packet).await?;
    let mut buf = vec![0u8; 65535];
    let id = &packet[..2.min(packet.len())];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Ignore stray datagrams that do not answer this query.
        if buf[..n].starts_with(id) {
            return Ok(buf[..n].to_vec());
        }
    }
}

async fn forward_tcp(upstream: SocketAddr, packet: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(upstream).await?;
    stream.write_u16(packet.len() as u16).await?;
    stream.write_all(packet).await?;
    let len = stream.read_u16().await? as usize;
    let mut answer = vec![0u8; len];
    stream.read_exact(&mut answer).await?;
    Ok(answer)
}

/// Runs cluster DNS until `shutdown`: binds, then keeps the zone current from the Service and
/// EndpointSlice caches of `informers`.
pub async fn run(
    informers: &minik8s_informers::Informers,
    config: DnsConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let udp = UdpSocket::bind(config.bind)
        .await
        .map_err(|e| Error::Bind(config.bind, e))?;
    let tcp = TcpListener::bind(config.bind)
        .await
        .map_err(|e| Error::Bind(config.bind, e))?;
    tracing::info!(bind = %config.bind, upstreams = ?config.upstreams, "serving cluster DNS");
    let caches = Caches::from_informers(informers);
    let metrics = Arc::new(DnsMetrics::new(config.bind));
    let server = Server::with_metrics(
        Zone::build(&config.domain, &[], &[]),
        config.upstreams.clone(),
        metrics.clone(),
    );
    let metrics_server = match config.metrics_bind {
        Some(addr) => match TcpListener::bind(addr).await {
            Ok(listener) => {
                tracing::info!(bind = %addr, "serving cluster DNS metrics");
                Some(tokio::spawn(super::metrics::serve(
                    listener,
                    metrics,
                    std::future::pending(),
                )))
            }
            // DNS answers all the same: metrics are not worth failing it for.
            Err(e) => {
                tracing::warn!(bind = %addr, error = %e, "not serving cluster DNS metrics");
                None
            }
        },
        None => None,
    };
    let updater = {
        let server = server.clone();
        let domain = config.domain.clone();
        tokio::spawn(async move {
            if caches.ready().await.is_err() {
                return;
            }
            loop {
                server.set_zone(Zone::build(&domain, &caches.services(), &caches.slices()));
                caches.changed.notified().await;
            }
        })
    };
    server.serve(udp, tcp, shutdown).await;
    updater.abort();
    if let Some(task) = metrics_server {
        task.abort();
    }
    Ok(())
}
