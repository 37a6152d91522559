//! Liveness, readiness and startup probes: one task per probed running container, running
//! exec, httpGet and tcpSocket checks on the probe's period with upstream's thresholds, and
//! telling the pod's worker when a result flips.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::pod::status::ProbeState;
use crate::pod::worker::Shared;
use crate::runtime::Runtime;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }
}

/// The outcome of one check, with what to say when it failed.
pub type Check = Result<(), String>;

fn port_number(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("couldn't find port {name} in container")),
    }
}

/// Runs one check of `probe` against a container.
pub async fn check(
    runtime: &dyn Runtime,
    kind: Kind,
    probe: &Probe,
    c: &Container,
    container_id: &str,
    pod_ip: &str,
) -> Check {
    if let Some(answer) = runtime.simulated_probe(container_id, kind).await {
        return answer;
    }
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Some(exec) = &probe.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        return match runtime
            .exec_sync(container_id, cmd, timeout.as_secs() as i64)
            .await
        {
            Ok(r) if r.exit_code == 0 => Ok(()),
            Ok(r) => {
                let out = String::from_utf8_lossy(&r.stdout).to_string()
                    + &String::from_utf8_lossy(&r.stderr);
                Err(if out.trim().is_empty() {
                    format!("command exited with {}", r.exit_code)
                } else {
                    out.trim().to_string()
                })
            }
            Err(e) => Err(e.message),
        };
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = port_number(&tcp.port, c)?;
        let host = tcp.host.clone().unwrap_or_else(|| pod_ip.to_string());
        return match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: {e}")),
            Err(_) => Err(format!("dial tcp {host}:{port}: i/o timeout")),
        };
    }
    if let Some(get) = &probe.http_get {
        let port = port_number(&get.port, c)?;
        let host = get.host.clone().unwrap_or_else(|| pod_ip.to_string());
        if get.scheme.as_deref() == Some("HTTPS") {
            return Err("HTTPS probes are not supported yet".into());
        }
        let path = get.path.clone().unwrap_or_else(|| "/".into());
        let url = format!("http://{host}:{port}{path}");
        let mut request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.32\r\nAccept: */*\r\nConnection: close\r\n"
        );
        for h in get.http_headers.iter().flatten() {
            request.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        request.push_str("\r\n");
        let attempt = async {
            let mut s = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| format!("Get \"{url}\": dial tcp {host}:{port}: {e}"))?;
            s.write_all(request.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut head = vec![0u8; 1024];
            let n = s.read(&mut head).await.map_err(|e| e.to_string())?;
            let line = String::from_utf8_lossy(&head[..n])
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            let code: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| format!("malformed HTTP response {line:?}"))?;
            if (200..400).contains(&code) {
                Ok(())
            } else {
                Err(format!("HTTP probe failed with statuscode: {code}"))
            }
        };
        return match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )),
        };
    }
    Err("no probe handler (grpc probes are not supported)".into())
}

/// Probe tasks of running containers, by container ID.
#[derive(Default)]
pub struct Prober {
    tasks: Mutex<HashMap<String, tokio::task::JoinHandle<()>>>,
}

impl Prober {
    /// Starts probing the running containers of `pod` that have probes and are not probed
    /// yet; stops probing containers that are no longer running.
    pub fn sync(
        &self,
        shared: &Arc<Shared>,
        pod: &Pod,
        running: &[(String, String)],
        pod_ip: &str,
        wake: &mpsc::UnboundedSender<String>,
    ) {
        let spec = pod.spec.as_ref().expect("pod spec");
        let mut tasks = self.tasks.lock().expect("probe tasks");
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let prefix = format!("{pod_uid}/");
        let live: Vec<String> = running
            .iter()
            .map(|(id, _)| format!("{prefix}{id}"))
            .collect();
        tasks.retain(|key, handle| {
            let keep = live.contains(key) || !key.starts_with(&prefix);
            if !keep {
                handle.abort();
            }
            keep
        });
        for (id, name) in running {
            let key = format!("{pod_uid}/{id}");
            if tasks.contains_key(&key) {
                continue;
            }
            let Some(c) = spec.containers.iter().find(|c| &c.name == name).cloned() else {
                continue;
            };
            if c.liveness_probe.is_none()
                && c.readiness_probe.is_none()
                && c.startup_probe.is_none()
            {
                continue;
            }
            let task = ProbeTask {
                shared: shared.clone(),
                pod: pod.clone(),
                container: c,
                id: id.clone(),
                pod_ip: pod_ip.to_string(),
                wake: wake.clone(),
            };
            tasks.insert(key, tokio::spawn(task.run()));
        }
    }

    /// Stops every probe of a pod.
    pub fn forget_pod(&self, pod_uid: &str) {
        self.tasks.lock().expect("probe tasks").retain(|k, h| {
            let keep = !k.starts_with(&format!("{pod_uid}/"));
            if !keep {
                h.abort();
            }
            keep
        });
    }
}

struct ProbeTask {
    shared: Arc<Shared>,
    pod: Pod,
    container: Container,
    id: String,
    pod_ip: String,
    wake: mpsc::UnboundedSender<String>,
}

/// Consecutive results of one probe against its thresholds.
struct Counter {
    successes: i32,
    failures: i32,
    result: Option<bool>,
}

impl Counter {
    fn record(&mut self, ok: bool, probe: &Probe) -> Option<bool> {
        if ok {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= probe.success_threshold.unwrap_or(1) && self.result != Some(true) {
                self.result = Some(true);
                return self.result;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= probe.failure_threshold.unwrap_or(3) && self.result != Some(false) {
                self.result = Some(false);
                return self.result;
            }
        }
        None
    }
}

impl ProbeTask {
    fn update(&self, f: impl FnOnce(&mut ProbeState)) {
        let mut m = self.shared.memory.lock().expect("kubelet memory");
        let state = m.probes.entry(self.id.clone()).or_default();
        f(state);
    }

    fn mark_unhealthy(&self) {
        self.shared
            .memory
            .lock()
            .expect("kubelet memory")
            .unhealthy
            .insert(self.id.clone());
    }

    async fn run(self) {
        let c = self.container.clone();
        let pod_uid = self.pod.metadata.uid.clone().unwrap_or_default();
        let started = c.startup_probe.is_none();
        self.update(|s| {
            s.started = started;
            s.ready = c.readiness_probe.is_none() && started;
        });
        let _ = self.wake.send(pod_uid.clone());
        let probes: Vec<(Kind, Probe)> = [
            (Kind::Startup, c.startup_probe.clone()),
            (Kind::Liveness, c.liveness_probe.clone()),
            (Kind::Readiness, c.readiness_probe.clone()),
        ]
        .into_iter()
        .filter_map(|(k, p)| p.map(|p| (k, p)))
        .collect();
        let mut counters: HashMap<&'static str, Counter> = HashMap::new();
        let mut next_due: HashMap<&'static str, tokio::time::Instant> = HashMap::new();
        let start = tokio::time::Instant::now();
        for (k, p) in &probes {
            next_due.insert(
                k.label(),
                start + Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            );
            counters.insert(
                k.label(),
                Counter {
                    successes: 0,
                    failures: 0,
                    result: None,
                },
            );
        }
        let mut startup_done = started;
        loop {
            let due = probes
                .iter()
                .filter(|(k, _)| startup_done || *k == Kind::Startup)
                .filter(|(k, _)| !(startup_done && *k == Kind::Startup))
                .map(|(k, _)| next_due[k.label()])
                .min();
            let Some(due) = due else { return };
            tokio::time::sleep_until(due).await;
            let now = tokio::time::Instant::now();
            for (kind, probe) in &probes {
                let active = if *kind == Kind::Startup {
                    !startup_done
                } else {
                    startup_done
                };
                if !active || next_due[kind.label()] > now {
                    continue;
                }
                next_due.insert(
                    kind.label(),
                    now + Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64),
                );
                let result = check(
                    self.shared.runtime.as_ref(),
                    *kind,
                    probe,
                    &c,
                    &self.id,
                    &self.pod_ip,
                )
                .await;
                if let Err(msg) = &result {
                    self.shared
                        .event_about(
                            &self.pod,
                            &c.name,
                            "Unhealthy",
                            format!("{} probe failed: {msg}", kind.label()),
                        )
                        .await;
                }
                let counter = counters.get_mut(kind.label()).expect("counter");
                let Some(flipped) = counter.record(result.is_ok(), probe) else {
                    continue;
                };
                match (kind, flipped) {
                    (Kind::Startup, true) => {
                        startup_done = true;
                        let ready_without_probe = c.readiness_probe.is_none();
                        self.update(|s| {
                            s.started = true;
                            if ready_without_probe {
                                s.ready = true;
                            }
                        });
                        let now = tokio::time::Instant::now();
                        for (k, p) in &probes {
                            if *k != Kind::Startup {
                                next_due.insert(
                                    k.label(),
                                    now + Duration::from_secs(
                                        p.initial_delay_seconds.unwrap_or(0).max(0) as u64,
                                    ),
                                );
                            }
                        }
                    }
                    (Kind::Startup, false) | (Kind::Liveness, false) => {
                        self.mark_unhealthy();
                        let _ = self.wake.send(pod_uid.clone());
                        return;
                    }
                    (Kind::Liveness, true) => continue,
                    (Kind::Readiness, ready) => self.update(|s| s.ready = ready),
                }
                let _ = self.wake.send(pod_uid.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(success: i32, failure: i32) -> Probe {
        Probe {
            success_threshold: Some(success),
            failure_threshold: Some(failure),
            ..Default::default()
        }
    }

    #[test]
    fn thresholds() {
        let p = probe(2, 3);
        let mut c = Counter {
            successes: 0,
            failures: 0,
            result: None,
        };
        assert_eq!(c.record(true, &p), None);
        assert_eq!(c.record(true, &p), Some(true));
        assert_eq!(c.record(true, &p), None, "no flip while it stays true");
        assert_eq!(c.record(false, &p), None);
        assert_eq!(c.record(false, &p), None);
        assert_eq!(c.record(true, &p), None, "a success resets the failures");
        for _ in 0..2 {
            assert_eq!(c.record(false, &p), None);
        }
        assert_eq!(c.record(false, &p), Some(false));
    }

    #[test]
    fn named_ports() {
        let c: Container = serde_json::from_value(
            serde_json::json!({"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}),
        )
        .unwrap();
        assert_eq!(
            port_number(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert_eq!(port_number(&IntOrString::Int(81), &c), Ok(81));
        assert!(port_number(&IntOrString::String("nope".into()), &c).is_err());
    }

    #[tokio::test]
    async fn tcp_and_http_checks_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let reply = if String::from_utf8_lossy(&buf[..n]).starts_with("GET /ok ") {
                    "HTTP/1.1 200 OK\r\n\r\n"
                } else {
                    "HTTP/1.1 503 Unavailable\r\n\r\n"
                };
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        let c: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        let fake = crate::runtime::fake::FakeRuntime::default();
        let http = |path: &str| -> Probe {
            serde_json::from_value(serde_json::json!({"httpGet": {"path": path, "port": port}}))
                .unwrap()
        };
        assert_eq!(
            check(&fake, Kind::Readiness, &http("/ok"), &c, "x", "127.0.0.1").await,
            Ok(())
        );
        assert_eq!(
            check(&fake, Kind::Readiness, &http("/bad"), &c, "x", "127.0.0.1").await,
            Err("HTTP probe failed with statuscode: 503".into())
        );
        let tcp: Probe =
            serde_json::from_value(serde_json::json!({"tcpSocket": {"port": port}})).unwrap();
        assert_eq!(
            check(&fake, Kind::Readiness, &tcp, &c, "x", "127.0.0.1").await,
            Ok(())
        );
    }
}
