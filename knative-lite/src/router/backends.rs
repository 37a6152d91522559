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

#[derive(Debug)]
struct Pod {
    addr: SocketAddr,
    in_flight: usize,
}

#[derive(Debug)]
struct Inner {
    pods: Vec<Pod>,
    /// Requests in flight per pod at most; 0: no limit.
    container_concurrency: usize,
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
    addr: Option<SocketAddr>,
}

impl InFlight {
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut inner = self.backends.lock();
        inner.advance(Instant::now());
        inner.in_flight = inner.in_flight.saturating_sub(1);
        match self.addr {
            Some(addr) => {
                if let Some(pod) = inner.pods.iter_mut().find(|p| p.addr == addr) {
                    pod.in_flight = pod.in_flight.saturating_sub(1);
                }
            }
            None => inner.waiting = inner.waiting.saturating_sub(1),
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
                container_concurrency: 0,
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

    /// Sets the ready pods (requests in flight on pods that stay are kept) and the limit.
    pub fn set_pods(&self, addrs: &[SocketAddr], container_concurrency: usize) {
        let mut inner = self.lock();
        inner.container_concurrency = container_concurrency;
        let mut pods: Vec<Pod> = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let in_flight = inner
                .pods
                .iter()
                .find(|p| p.addr == *addr)
                .map_or(0, |p| p.in_flight);
            pods.push(Pod {
                addr: *addr,
                in_flight,
            });
        }
        let changed = pods
            .iter()
            .map(|p| p.addr)
            .ne(inner.pods.iter().map(|p| p.addr));
        inner.pods = pods;
        drop(inner);
        if changed {
            self.changed.notify_waiters();
        }
    }

    /// Adds one pod ahead of the table (the activator's own, known before the watch says).
    pub fn add_pod(&self, addr: SocketAddr) {
        let mut inner = self.lock();
        if !inner.pods.iter().any(|p| p.addr == addr) {
            inner.pods.push(Pod { addr, in_flight: 0 });
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    pub fn has_pods(&self) -> bool {
        !self.lock().pods.is_empty()
    }

    /// Counts a request in: it waits for a pod from here on.
    pub fn arrive(self: &Arc<Self>) -> InFlight {
        let mut inner = self.lock();
        inner.advance(Instant::now());
        inner.in_flight += 1;
        inner.waiting += 1;
        inner.requests += 1;
        InFlight {
            backends: self.clone(),
            addr: None,
        }
    }

    /// Takes a pod with a free slot for `req`, the least loaded one, ties taken in turn.
    fn try_take(&self, req: &mut InFlight) -> Result<SocketAddr, Wait> {
        let mut inner = self.lock();
        if inner.pods.is_empty() {
            return Err(Wait::NoPods);
        }
        let limit = inner.container_concurrency;
        let n = inner.pods.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let best = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| limit == 0 || inner.pods[i].in_flight < limit)
            .min_by_key(|&i| inner.pods[i].in_flight)
            .ok_or(Wait::Busy)?;
        inner.pods[best].in_flight += 1;
        inner.waiting = inner.waiting.saturating_sub(1);
        let addr = inner.pods[best].addr;
        req.addr = Some(addr);
        Ok(addr)
    }

    /// Waits until `req` has a pod, calling `activate` whenever the revision has none (at
    /// once, then every `repoke` while it still has none), until `deadline`.
    pub async fn take(
        &self,
        req: &mut InFlight,
        deadline: Duration,
        repoke: Duration,
        activate: impl Fn(),
    ) -> Result<SocketAddr, Wait> {
        let until = tokio::time::Instant::now() + deadline;
        let mut next_poke = tokio::time::Instant::now();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_take(req) {
                Ok(addr) => return Ok(addr),
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
                        return self.try_take(req);
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

    #[tokio::test]
    async fn container_concurrency_queues_instead_of_failing() {
        let b = Backends::new("default", "r1");
        b.set_pods(&[addr(1)], 1);
        let mut first = b.arrive();
        let got = b.take(
            &mut first,
            Duration::from_secs(1),
            Duration::from_secs(1),
            || {},
        );
        assert_eq!(got.await, Ok(addr(1)));
        // The second request waits for the first one's slot, then gets it.
        let b2 = b.clone();
        let second = tokio::spawn(async move {
            let mut r = b2.arrive();
            let got = b2
                .take(
                    &mut r,
                    Duration::from_secs(10),
                    Duration::from_secs(10),
                    || {},
                )
                .await;
            (got, r)
        });
        tokio::task::yield_now().await;
        assert_eq!(b.stats().waiting, 1);
        drop(first);
        let (got, r) = second.await.unwrap();
        assert_eq!(got, Ok(addr(1)));
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
            let mut r = b2.arrive();
            b2.take(
                &mut r,
                Duration::from_secs(10),
                Duration::from_secs(10),
                || {
                    p.fetch_add(1, Ordering::SeqCst);
                },
            )
            .await
        });
        while pokes.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        b.add_pod(addr(2));
        assert_eq!(held.await.unwrap(), Ok(addr(2)));
        assert_eq!(pokes.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn least_loaded_pod_and_the_deadline() {
        let b = Backends::new("default", "r1");
        b.set_pods(&[addr(1), addr(2)], 0);
        let mut one = b.arrive();
        let a1 = b.try_take(&mut one).unwrap();
        let mut two = b.arrive();
        let a2 = b.try_take(&mut two).unwrap();
        assert_ne!(a1, a2);
        b.set_pods(&[], 0);
        let mut three = b.arrive();
        let got = b
            .take(
                &mut three,
                Duration::from_millis(20),
                Duration::from_secs(5),
                || {},
            )
            .await;
        assert_eq!(got, Err(Wait::NoPods));
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
