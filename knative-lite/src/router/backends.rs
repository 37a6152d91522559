//! One revision's pods as the router sees them, kept across rebuilds of the routing table:
//! the requests each pod has in flight (so `containerConcurrency` is a hard limit and the
//! rest wait their turn here, never failing), the requests held while the revision has no
//! pod (the activator's queue), and the counters the autoscaler reads: requests served and
//! the time integral of requests in flight, from which it takes average concurrency.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// Where requests for a revision can go: one of its pods, or (for a revision with a
/// `containerConcurrency`) the router of another node, which holds the limit of the pods
/// there, so that every pod's limit is counted in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: SocketAddr,
    /// Requests in flight here at most; 0: no limit.
    pub limit: usize,
    /// `addr` is another node's router.
    pub via_router: bool,
}

impl Endpoint {
    pub fn pod(addr: SocketAddr, limit: usize) -> Endpoint {
        Endpoint {
            addr,
            limit,
            via_router: false,
        }
    }
}

#[derive(Debug)]
struct Pod {
    endpoint: Endpoint,
    in_flight: usize,
}

#[derive(Debug)]
struct Inner {
    pods: Vec<Pod>,
    /// Requests received and not yet answered, held ones included.
    in_flight: usize,
    /// Requests waiting for a pod or a free slot.
    waiting: usize,
    requests: u64,
    /// ∫ in_flight dt up to `since`.
    concurrency_seconds: f64,
    since: Instant,
}

impl Inner {
    fn advance(&mut self, now: Instant) {
        self.concurrency_seconds +=
            self.in_flight as f64 * now.saturating_duration_since(self.since).as_secs_f64();
        self.since = now;
    }
}

/// What a router has seen of one revision, for the autoscaler.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub namespace: String,
    pub name: String,
    /// Requests received since the router started.
    pub requests: u64,
    /// ∫ requests in flight dt, in seconds, since the router started.
    pub concurrency_seconds: f64,
    pub in_flight: u64,
    /// Of `in_flight`, those held for a pod.
    pub waiting: u64,
}

/// A revision's pods and requests.
#[derive(Debug)]
pub struct Backends {
    pub namespace: String,
    pub name: String,
    inner: Mutex<Inner>,
    changed: Notify,
    next: AtomicUsize,
}

/// Why no pod was found in time.
#[derive(Debug, PartialEq)]
pub enum Wait {
    /// The revision has no pod: the activator should bring one.
    NoPods,
    /// It has pods, all at their `containerConcurrency`.
    Busy,
}

/// A request in flight on a pod; dropped when the response ends.
#[derive(Debug)]
pub struct InFlight {
    backends: Arc<Backends>,
    endpoint: Option<Endpoint>,
    /// In the autoscaler's counters: false for a request another node's router sent here
    /// (that router counts it).
    counted: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut inner = self.backends.lock();
        if self.counted {
            inner.advance(Instant::now());
            inner.in_flight = inner.in_flight.saturating_sub(1);
        }
        match self.endpoint {
            Some(endpoint) => {
                if let Some(pod) = inner.pods.iter_mut().find(|p| p.endpoint == endpoint) {
                    pod.in_flight = pod.in_flight.saturating_sub(1);
                }
            }
            None if self.counted => inner.waiting = inner.waiting.saturating_sub(1),
            None => {}
        }
        drop(inner);
        self.backends.changed.notify_waiters();
    }
}

impl Backends {
    pub fn new(namespace: &str, name: &str) -> Arc<Backends> {
        Arc::new(Backends {
            namespace: namespace.to_string(),
            name: name.to_string(),
            inner: Mutex::new(Inner {
                pods: Vec::new(),
                in_flight: 0,
                waiting: 0,
                requests: 0,
                concurrency_seconds: 0.0,
                since: Instant::now(),
            }),
            changed: Notify::new(),
            next: AtomicUsize::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets where requests go (requests in flight on endpoints that stay are kept).
    pub fn set_pods(&self, endpoints: &[Endpoint]) {
        let mut inner = self.lock();
        let mut pods: Vec<Pod> = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let in_flight = inner
                .pods
                .iter()
                .find(|p| p.endpoint.addr == endpoint.addr)
                .map_or(0, |p| p.in_flight);
            pods.push(Pod {
                endpoint: *endpoint,
                in_flight,
            });
        }
        let changed = pods
            .iter()
            .map(|p| p.endpoint)
            .ne(inner.pods.iter().map(|p| p.endpoint));
        inner.pods = pods;
        drop(inner);
        if changed {
            self.changed.notify_waiters();
        }
    }

    /// Adds one pod ahead of the table (the activator's own, known before the watch says).
    pub fn add_pod(&self, addr: SocketAddr) {
        let mut inner = self.lock();
        if !inner.pods.iter().any(|p| p.endpoint.addr == addr) {
            let limit = inner
                .pods
                .iter()
                .find(|p| !p.endpoint.via_router)
                .map_or(0, |p| p.endpoint.limit);
            inner.pods.push(Pod {
                endpoint: Endpoint::pod(addr, limit),
                in_flight: 0,
            });
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Counts a request in: it waits for a pod from here on. `counted`: in the autoscaler's
    /// counters (not for a request another node's router sent, which that router counts).
    pub fn arrive(self: &Arc<Self>, counted: bool) -> InFlight {
        let mut inner = self.lock();
        if counted {
            inner.advance(Instant::now());
            inner.in_flight += 1;
            inner.waiting += 1;
            inner.requests += 1;
        }
        InFlight {
            backends: self.clone(),
            endpoint: None,
            counted,
        }
    }

    /// Takes an endpoint with a free slot for `req`, the least loaded one, ties taken in
    /// turn; with `local_only`, only this node's pods.
    fn try_take(&self, req: &mut InFlight, local_only: bool) -> Result<Endpoint, Wait> {
        let mut inner = self.lock();
        let n = inner.pods.len();
        let usable = |p: &Pod| !(local_only && p.endpoint.via_router);
        if !inner.pods.iter().any(usable) {
            return Err(Wait::NoPods);
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n.max(1);
        let best = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| {
                let p = &inner.pods[i];
                usable(p) && (p.endpoint.limit == 0 || p.in_flight < p.endpoint.limit)
            })
            .min_by_key(|&i| inner.pods[i].in_flight)
            .ok_or(Wait::Busy)?;
        inner.pods[best].in_flight += 1;
        if req.counted {
            inner.waiting = inner.waiting.saturating_sub(1);
        }
        let endpoint = inner.pods[best].endpoint;
        req.endpoint = Some(endpoint);
        Ok(endpoint)
    }

    /// Waits until `req` has a pod, calling `activate` whenever the revision has none (at
    /// once, then every `repoke` while it still has none), until `deadline`.
    pub async fn take(
        &self,
        req: &mut InFlight,
        deadline: Duration,
        repoke: Duration,
        local_only: bool,
        activate: impl Fn(),
    ) -> Result<Endpoint, Wait> {
        let until = tokio::time::Instant::now() + deadline;
        let mut next_poke = tokio::time::Instant::now();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_take(req, local_only) {
                Ok(endpoint) => return Ok(endpoint),
                Err(Wait::NoPods) if tokio::time::Instant::now() >= next_poke => {
                    activate();
                    next_poke = tokio::time::Instant::now() + repoke;
                }
                Err(_) => {}
            }
            let wake = until.min(next_poke.max(tokio::time::Instant::now() + repoke));
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(wake) => {
                    if tokio::time::Instant::now() >= until {
                        return self.try_take(req, local_only);
                    }
                }
            }
        }
    }

    pub fn stats(&self) -> Stats {
        let mut inner = self.lock();
        inner.advance(Instant::now());
        Stats {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            requests: inner.requests,
            concurrency_seconds: inner.concurrency_seconds,
            in_flight: inner.in_flight as u64,
            waiting: inner.waiting as u64,
        }
    }

    /// Nothing in flight: safe to forget once its revision is gone.
    pub fn idle(&self) -> bool {
        self.lock().in_flight == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, i], 8080))
    }

    const LONG: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn container_concurrency_queues_instead_of_failing() {
        let b = Backends::new("default", "r1");
        b.set_pods(&[Endpoint::pod(addr(1), 1)]);
        let mut first = b.arrive(true);
        let got = b.take(&mut first, LONG, LONG, false, || {}).await;
        assert_eq!(got.map(|e| e.addr), Ok(addr(1)));
        // The second request waits for the first one's slot, then gets it.
        let b2 = b.clone();
        let second = tokio::spawn(async move {
            let mut r = b2.arrive(true);
            let got = b2.take(&mut r, LONG, LONG, false, || {}).await;
            (got, r)
        });
        tokio::task::yield_now().await;
        assert_eq!(b.stats().waiting, 1);
        drop(first);
        let (got, r) = second.await.unwrap();
        assert_eq!(got.map(|e| e.addr), Ok(addr(1)));
        assert_eq!(b.stats().in_flight, 1);
        drop(r);
        let s = b.stats();
        assert_eq!((s.in_flight, s.waiting, s.requests), (0, 0, 2));
    }

    #[tokio::test]
    async fn held_until_a_pod_appears_and_the_activator_is_called() {
        let b = Backends::new("default", "r1");
        let pokes = Arc::new(AtomicUsize::new(0));
        let b2 = b.clone();
        let p = pokes.clone();
        let held = tokio::spawn(async move {
            let mut r = b2.arrive(true);
            b2.take(&mut r, LONG, LONG, false, || {
                p.fetch_add(1, Ordering::SeqCst);
            })
            .await
        });
        while pokes.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        b.add_pod(addr(2));
        assert_eq!(held.await.unwrap().map(|e| e.addr), Ok(addr(2)));
        assert_eq!(pokes.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn least_loaded_pod_and_the_deadline() {
        let b = Backends::new("default", "r1");
        b.set_pods(&[Endpoint::pod(addr(1), 0), Endpoint::pod(addr(2), 0)]);
        let mut one = b.arrive(true);
        let a1 = b.try_take(&mut one, false).unwrap();
        let mut two = b.arrive(true);
        let a2 = b.try_take(&mut two, false).unwrap();
        assert_ne!(a1, a2);
        b.set_pods(&[]);
        let mut three = b.arrive(true);
        let got = b
            .take(&mut three, Duration::from_millis(20), LONG, false, || {})
            .await;
        assert_eq!(got, Err(Wait::NoPods));
    }

    /// Another node's router holds the limit of the pods there: a request it sends is
    /// served from local pods only, and is not counted twice.
    #[tokio::test]
    async fn limits_of_other_nodes_pods_are_their_routers() {
        let b = Backends::new("default", "r1");
        let remote = Endpoint {
            addr: SocketAddr::from(([172, 30, 0, 2], 8080)),
            limit: 2,
            via_router: true,
        };
        b.set_pods(&[Endpoint::pod(addr(1), 1), remote]);
        let mut taken = Vec::new();
        for _ in 0..3 {
            let mut r = b.arrive(true);
            let e = b.try_take(&mut r, false).unwrap();
            taken.push((e, r));
        }
        let via = taken.iter().filter(|(e, _)| e.via_router).count();
        assert_eq!(via, 2, "{taken:?}");
        let mut full = b.arrive(true);
        assert_eq!(b.try_take(&mut full, false), Err(Wait::Busy));
        let mut forwarded = b.arrive(false);
        assert_eq!(b.try_take(&mut forwarded, true), Err(Wait::Busy));
        taken.retain(|(e, _)| e.via_router);
        let mut forwarded = b.arrive(false);
        assert_eq!(
            b.try_take(&mut forwarded, true).map(|e| e.addr),
            Ok(addr(1))
        );
        assert_eq!(b.stats().requests, 4);
    }

    #[test]
    fn concurrency_integral() {
        let b = Backends::new("default", "r1");
        {
            let mut inner = b.lock();
            inner.since -= Duration::from_secs(2);
            inner.in_flight = 3;
        }
        let s = b.stats();
        assert!((s.concurrency_seconds - 6.0).abs() < 0.1, "{s:?}");
    }
}
