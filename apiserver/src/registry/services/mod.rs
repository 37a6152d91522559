//! Services' cluster IPs and node ports (upstream's `pkg/registry/core/service/storage/alloc.go`)
//! and the `kubernetes` Service of the API server itself.
//!
//! Allocation happens in the write path of the generic registry through [`WriteHooks`]: a
//! create or update reserves under one lock, so two concurrent creates never get the same
//! address, and the reservation is undone when the write fails. The bitmaps are not stored:
//! they are rebuilt from the stored Services when the server starts, before it serves, so
//! nothing a stored Service holds is handed out again. (Upstream keeps a RangeAllocation
//! snapshot in etcd plus a repair loop because several API servers share one etcd; minik8s
//! runs one API server per store.)

pub mod allocator;
pub mod controlplane;
pub mod endpoint_reconciler;

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use minik8s_api::ApiError;
use minik8s_api::kinds::service::needs_node_port;
use minik8s_api::validation::{FieldError, Path};

use self::allocator::{IpAllocator, PortAllocator};
use crate::registry::generic::{Reservation, WriteHooks};

/// `--service-cluster-ip-range` and `--service-node-port-range`, parsed.
#[derive(Clone, Debug)]
pub struct ServiceRanges {
    pub cluster_ips: IpAllocator,
    pub node_ports: PortAllocator,
}

impl ServiceRanges {
    pub fn parse(cluster_ip_range: &str, node_port_range: &str) -> Result<Self, String> {
        Ok(ServiceRanges {
            cluster_ips: IpAllocator::new(cluster_ip_range).ok_or_else(|| {
                format!("--service-cluster-ip-range {cluster_ip_range:?} is not a valid CIDR of at most 2^20 addresses")
            })?,
            node_ports: PortAllocator::parse(node_port_range).ok_or_else(|| {
                format!("--service-node-port-range {node_port_range:?} is not a valid port range")
            })?,
        })
    }
}

impl Default for ServiceRanges {
    fn default() -> Self {
        ServiceRanges::parse("10.96.0.0/12", "30000-32767").expect("default service ranges")
    }
}

#[derive(Debug)]
struct State {
    ips: IpAllocator,
    ports: PortAllocator,
}

/// What one write took, to give back on failure (or, for what it released, on success).
#[derive(Debug, Default)]
struct Taken {
    ips: Vec<IpAddr>,
    ports: Vec<i32>,
}

impl State {
    fn give_back(&mut self, t: &Taken) {
        for ip in &t.ips {
            self.ips.release(*ip);
        }
        for p in &t.ports {
            self.ports.release(*p);
        }
    }
}

/// The cluster IP and node port allocators of one API server.
#[derive(Debug)]
pub struct ServiceAllocator {
    state: Arc<Mutex<State>>,
    family: &'static str,
}

fn invalid(svc: &Service, errs: &[FieldError]) -> ApiError {
    ApiError::invalid(
        "Service",
        "",
        svc.metadata.name.as_deref().unwrap_or_default(),
        errs,
    )
}

fn is_headless(spec: &ServiceSpec) -> bool {
    spec.cluster_ip.as_deref() == Some("None")
        || spec
            .cluster_ips
            .as_ref()
            .and_then(|i| i.first())
            .is_some_and(|i| i == "None")
}

fn is_external_name(spec: &ServiceSpec) -> bool {
    spec.type_.as_deref() == Some("ExternalName")
}

/// A LoadBalancer with `externalTrafficPolicy: Local` gets a health check node port.
fn needs_health_check(spec: &ServiceSpec) -> bool {
    spec.type_.as_deref() == Some("LoadBalancer")
        && spec.external_traffic_policy.as_deref() == Some("Local")
}

fn should_allocate_node_ports(spec: &ServiceSpec) -> bool {
    spec.type_.as_deref() != Some("LoadBalancer")
        || spec.allocate_load_balancer_node_ports != Some(false)
}

fn all_node_ports(spec: &ServiceSpec) -> Vec<i32> {
    let mut out: Vec<i32> = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| p.node_port.filter(|n| *n != 0))
        .collect();
    out.dedup();
    out
}

impl ServiceAllocator {
    pub fn new(ranges: &ServiceRanges) -> Self {
        ServiceAllocator {
            state: Arc::new(Mutex::new(State {
                ips: ranges.cluster_ips.clone(),
                ports: ranges.node_ports.clone(),
            })),
            family: if ranges.cluster_ips.is_v6() {
                "IPv6"
            } else {
                "IPv4"
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first address of the range, the `kubernetes` Service's.
    pub fn first_ip(&self) -> IpAddr {
        self.lock().ips.first()
    }

    /// How many cluster IPs and node ports are taken.
    pub fn used(&self) -> (usize, usize) {
        let s = self.lock();
        (s.ips.used(), s.ports.used())
    }

    /// Marks what stored Services hold (at startup, before serving).
    pub fn restore(&self, services: &[Service]) {
        let mut s = self.lock();
        for svc in services {
            let Some(spec) = &svc.spec else { continue };
            let name = format!(
                "{}/{}",
                svc.metadata.namespace.as_deref().unwrap_or_default(),
                svc.metadata.name.as_deref().unwrap_or_default()
            );
            if !is_external_name(spec) && !is_headless(spec) {
                for ip in spec.cluster_ips.iter().flatten().chain(&spec.cluster_ip) {
                    let Ok(ip) = ip.parse::<IpAddr>() else {
                        continue;
                    };
                    if !s.ips.has(ip)
                        && let Err(e) = s.ips.allocate(ip)
                    {
                        tracing::warn!(service = %name, %ip, error = %e, "stored cluster IP is outside the range");
                    }
                }
            }
            let mut ports = all_node_ports(spec);
            ports.extend(spec.health_check_node_port.filter(|p| *p != 0));
            for p in ports {
                if !s.ports.has(p)
                    && let Err(e) = s.ports.allocate(p)
                {
                    tracing::warn!(service = %name, port = p, error = %e, "stored node port is outside the range");
                }
            }
        }
    }

    /// Upstream's initIPFamilyFields for a single-stack cluster.
    fn init_ip_families(&self, svc: &mut Service, old: Option<&Service>) -> Result<(), ApiError> {
        let family = self.family;
        let snapshot = svc.clone();
        let Some(spec) = svc.spec.as_mut() else {
            return Ok(());
        };
        if is_external_name(spec) {
            return Ok(());
        }
        let headless = is_headless(spec);
        let selectorless = spec.selector.as_ref().is_none_or(|s| s.is_empty());
        if spec.ip_family_policy.is_none() {
            spec.ip_family_policy = Some(
                match old.and_then(|o| o.spec.as_ref()?.ip_family_policy.clone()) {
                    Some(p) => p,
                    None if headless && selectorless => "RequireDualStack".into(),
                    None => "SingleStack".into(),
                },
            );
        }
        let policy = spec.ip_family_policy.clone().unwrap_or_default();
        let families = spec.ip_families.get_or_insert_with(Vec::new);
        let mut errs = Vec::new();
        for (i, ip) in spec.cluster_ips.iter().flatten().enumerate() {
            let Ok(addr) = ip.parse::<IpAddr>() else {
                break;
            };
            let fam = if addr.is_ipv6() { "IPv6" } else { "IPv4" };
            if i >= families.len() {
                if fam == family {
                    families.push(fam.to_string());
                } else {
                    errs.push(FieldError::invalid(
                        &Path::new("spec").child("clusterIPs").index(i),
                        spec.cluster_ips.clone().unwrap_or_default(),
                        format!("{fam} is not configured on this cluster"),
                    ));
                }
            } else if families[i] != fam {
                errs.push(FieldError::invalid(
                    &Path::new("spec").child("clusterIPs").index(i),
                    ip,
                    format!(
                        "expected an {} value as indicated by `ipFamilies[{i}]`",
                        families[i]
                    ),
                ));
            }
        }
        if !errs.is_empty() {
            return Err(invalid(&snapshot, &errs));
        }
        if headless && selectorless {
            // Headless and selectorless: any families, dual unless SingleStack.
            if families.is_empty() {
                families.push(family.to_string());
            }
            if families.len() < 2 && policy != "SingleStack" {
                let other = if families[0] == "IPv4" {
                    "IPv6"
                } else {
                    "IPv4"
                };
                families.push(other.to_string());
            }
            return Ok(());
        }
        if policy == "RequireDualStack" {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("ipFamilyPolicy"),
                &policy,
                "this cluster is not configured for dual-stack services",
            ));
        }
        for (i, f) in families.iter().enumerate() {
            if f != family {
                errs.push(FieldError::invalid(
                    &Path::new("spec").child("ipFamilies").index(i),
                    f,
                    "not configured on this cluster",
                ));
            }
        }
        if !errs.is_empty() {
            return Err(invalid(&snapshot, &errs));
        }
        if families.is_empty() {
            families.push(family.to_string());
        }
        Ok(())
    }

    /// Allocates the primary cluster IP: the requested one, or the next free one.
    fn alloc_cluster_ip(
        &self,
        s: &mut State,
        svc: &mut Service,
        taken: &mut Taken,
    ) -> Result<(), ApiError> {
        let snapshot = svc.clone();
        let Some(spec) = svc.spec.as_mut() else {
            return Ok(());
        };
        if is_external_name(spec) || is_headless(spec) {
            return Ok(());
        }
        let requested = spec.cluster_ip.clone().unwrap_or_default();
        let ip = if requested.is_empty() {
            s.ips
                .allocate_next()
                .map_err(|e| ApiError::internal(format!("failed to allocate a serviceIP: {e}")))?
        } else {
            let ip: IpAddr = requested
                .parse()
                .map_err(|_| ApiError::internal(format!("invalid cluster IP {requested}")))?;
            s.ips.allocate(ip).map_err(|e| {
                let ips = snapshot
                    .spec
                    .as_ref()
                    .and_then(|s| s.cluster_ips.clone())
                    .unwrap_or_else(|| vec![requested.clone()]);
                invalid(
                    &snapshot,
                    &[FieldError::invalid(
                        &Path::new("spec").child("clusterIPs"),
                        ips,
                        format!("failed to allocate IP {requested}: {e}"),
                    )],
                )
            })?;
            ip
        };
        taken.ips.push(ip);
        spec.cluster_ip = Some(ip.to_string());
        spec.cluster_ips = Some(vec![ip.to_string()]);
        Ok(())
    }

    /// Node ports of a NodePort/LoadBalancer service: requested ones are checked, missing ones
    /// allocated; service ports with the same number share one node port, as upstream.
    /// `keep` are ports the service already holds (on update).
    fn alloc_node_ports(
        &self,
        s: &mut State,
        svc: &mut Service,
        keep: &[i32],
        taken: &mut Taken,
    ) -> Result<(), ApiError> {
        let snapshot = svc.clone();
        let Some(spec) = svc.spec.as_mut() else {
            return Ok(());
        };
        if !needs_node_port(spec) {
            return Ok(());
        }
        let allocate = should_allocate_node_ports(spec);
        let mut by_port: Vec<(i32, i32)> = Vec::new();
        let ports = spec.ports.as_deref_mut().unwrap_or_default();
        for i in 0..ports.len() {
            let requested = ports[i].node_port.unwrap_or(0);
            if requested == 0 && !allocate {
                continue;
            }
            let service_port = ports[i].port;
            let shared = by_port
                .iter()
                .find(|(p, _)| *p == service_port)
                .map(|(_, n)| *n);
            let want = match (requested, shared) {
                (0, Some(n)) => {
                    ports[i].node_port = Some(n);
                    continue;
                }
                (r, Some(n)) if r == n => continue,
                // A later port of the same number may carry the request (upstream's
                // findRequestedNodePort).
                (0, None) => ports[i..]
                    .iter()
                    .filter(|p| p.port == service_port)
                    .find_map(|p| p.node_port.filter(|n| *n != 0))
                    .unwrap_or(0),
                (r, _) => r,
            };
            let port = if want == 0 {
                let n = s.ports.allocate_next().map_err(|e| {
                    ApiError::internal(format!("failed to allocate a nodePort: {e}"))
                })?;
                taken.ports.push(n);
                n
            } else {
                if !keep.contains(&want) && !taken.ports.contains(&want) {
                    s.ports.allocate(want).map_err(|e| {
                        invalid(
                            &snapshot,
                            &[FieldError::invalid(
                                &Path::new("spec").child("ports").index(i).child("nodePort"),
                                want,
                                e.to_string(),
                            )],
                        )
                    })?;
                    taken.ports.push(want);
                }
                want
            };
            ports[i].node_port = Some(port);
            by_port.push((service_port, port));
        }
        Ok(())
    }

    fn alloc_health_check_port(
        &self,
        s: &mut State,
        spec: &mut ServiceSpec,
        keep: Option<i32>,
        taken: &mut Taken,
    ) -> Result<(), ApiError> {
        if !needs_health_check(spec) {
            return Ok(());
        }
        match spec.health_check_node_port.unwrap_or(0) {
            0 => {
                if let Some(k) = keep {
                    spec.health_check_node_port = Some(k);
                    return Ok(());
                }
                let n = s.ports.allocate_next().map_err(|e| {
                    ApiError::internal(format!("failed to allocate a HealthCheck NodePort: {e}"))
                })?;
                taken.ports.push(n);
                spec.health_check_node_port = Some(n);
            }
            n if Some(n) == keep => {}
            n => {
                s.ports.allocate(n).map_err(|e| {
                    ApiError::internal(format!(
                        "failed to allocate requested HealthCheck NodePort {n}: {e}"
                    ))
                })?;
                taken.ports.push(n);
            }
        }
        Ok(())
    }

    /// A reservation that gives back `taken` unless committed, and on commit releases
    /// `released`. A dry run gives back everything either way.
    fn reservation(&self, taken: Taken, released: Taken, dry_run: bool) -> Reservation {
        let on_commit = self.state.clone();
        let on_revert = self.state.clone();
        let taken = Arc::new(taken);
        let taken2 = taken.clone();
        Reservation::new(
            move || {
                let mut s = on_commit.lock().unwrap_or_else(|e| e.into_inner());
                if dry_run {
                    s.give_back(&taken2);
                } else {
                    s.give_back(&released);
                }
            },
            move || {
                on_revert
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .give_back(&taken)
            },
        )
    }
}

impl WriteHooks<Service> for ServiceAllocator {
    fn begin_create(&self, svc: &mut Service, dry_run: bool) -> Result<Reservation, ApiError> {
        self.init_ip_families(svc, None)?;
        let mut s = self.lock();
        let mut taken = Taken::default();
        let result = (|| {
            self.alloc_cluster_ip(&mut s, svc, &mut taken)?;
            self.alloc_node_ports(&mut s, svc, &[], &mut taken)?;
            if let Some(spec) = svc.spec.as_mut() {
                self.alloc_health_check_port(&mut s, spec, None, &mut taken)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            s.give_back(&taken);
            return Err(e);
        }
        drop(s);
        Ok(self.reservation(taken, Taken::default(), dry_run))
    }

    fn begin_update(
        &self,
        svc: &mut Service,
        old: &Service,
        dry_run: bool,
    ) -> Result<Reservation, ApiError> {
        let (Some(new_spec), Some(old_spec)) = (svc.spec.as_ref(), old.spec.as_ref()) else {
            return Ok(Reservation::default());
        };
        if new_spec == old_spec {
            return Ok(Reservation::default());
        }
        let old_spec = old_spec.clone();
        self.init_ip_families(svc, Some(old))?;
        let mut s = self.lock();
        let mut taken = Taken::default();
        let mut released = Taken::default();
        let result = (|| {
            let new_external = svc.spec.as_ref().is_some_and(is_external_name);
            if is_external_name(&old_spec) && !new_external {
                self.alloc_cluster_ip(&mut s, svc, &mut taken)?;
            } else if !is_external_name(&old_spec) && new_external && !is_headless(&old_spec) {
                released.ips.extend(
                    old_spec
                        .cluster_ip
                        .iter()
                        .filter_map(|ip| ip.parse::<IpAddr>().ok()),
                );
            }
            let old_ports = if needs_node_port(&old_spec) {
                all_node_ports(&old_spec)
            } else {
                Vec::new()
            };
            self.alloc_node_ports(&mut s, svc, &old_ports, &mut taken)?;
            let spec = svc.spec.as_mut().expect("checked above");
            let new_ports = if needs_node_port(spec) {
                all_node_ports(spec)
            } else {
                Vec::new()
            };
            released
                .ports
                .extend(old_ports.iter().filter(|p| !new_ports.contains(p)));
            let old_hc = old_spec
                .health_check_node_port
                .filter(|p| *p != 0 && needs_health_check(&old_spec));
            self.alloc_health_check_port(&mut s, spec, old_hc, &mut taken)?;
            if let Some(old_hc) = old_hc
                && (!needs_health_check(spec) || spec.health_check_node_port != Some(old_hc))
            {
                if !needs_health_check(spec) && spec.health_check_node_port == Some(old_hc) {
                    spec.health_check_node_port = None;
                }
                released.ports.push(old_hc);
            }
            Ok(())
        })();
        if let Err(e) = result {
            s.give_back(&taken);
            return Err(e);
        }
        drop(s);
        Ok(self.reservation(taken, released, dry_run))
    }

    fn removed(&self, svc: &Service) {
        let Some(spec) = &svc.spec else { return };
        let mut t = Taken::default();
        if !is_external_name(spec) && !is_headless(spec) {
            t.ips.extend(
                spec.cluster_ip
                    .iter()
                    .filter_map(|ip| ip.parse::<IpAddr>().ok()),
            );
        }
        if needs_node_port(spec) {
            t.ports.extend(all_node_ports(spec));
        }
        if needs_health_check(spec) {
            t.ports
                .extend(spec.health_check_node_port.filter(|p| *p != 0));
        }
        self.lock().give_back(&t);
    }
}
