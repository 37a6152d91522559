//! The answer logic, without I/O: a zone built from Services and EndpointSlices, and the
//! answer to one question.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, CNAME, PTR, SOA, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::endpoints::{Endpoint, address_endpoints, port_endpoints, service_key, slices_of};

/// CoreDNS's default TTL for cluster records.
pub const TTL: u32 = 5;

/// What to do with a question.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// Authoritative answer (possibly empty: the name exists without records of that type).
    Records(Vec<Record>),
    /// The name does not exist in the cluster domain.
    NxDomain,
    /// Not ours: ask the upstream resolvers.
    Forward,
}

/// Every cluster name and its records, keyed by lowercase FQDN (`web.default.svc.cluster.local.`).
#[derive(Clone, Debug)]
pub struct Zone {
    domain: Name,
    records: BTreeMap<String, Vec<RData>>,
    /// Names that exist, including the empty ones between records and the domain.
    names: BTreeSet<String>,
}

fn key(name: &Name) -> String {
    let mut n = name.to_lowercase();
    n.set_fqdn(true);
    n.to_ascii()
}

fn name(s: &str) -> Name {
    let mut n = Name::from_ascii(s).unwrap_or_else(|_| Name::root());
    n.set_fqdn(true);
    n
}

impl Zone {
    /// Builds the zone for `domain` (e.g. `cluster.local`).
    pub fn build(domain: &str, services: &[Service], slices: &[EndpointSlice]) -> Zone {
        let mut zone = Zone {
            domain: name(domain),
            records: BTreeMap::new(),
            names: BTreeSet::new(),
        };
        let domain = domain.trim_end_matches('.');
        for svc in services {
            let (ns, svc_name) = service_key(svc);
            let Some(spec) = &svc.spec else { continue };
            let base = format!("{svc_name}.{ns}.svc.{domain}.");
            let own = slices_of(slices, &ns, &svc_name);
            if spec.type_.as_deref() == Some("ExternalName") {
                if let Some(target) = &spec.external_name {
                    zone.add(&base, RData::CNAME(CNAME(name(target))));
                }
                continue;
            }
            let cluster_ip = spec.cluster_ip.as_deref().unwrap_or("");
            let headless = cluster_ip == "None" || cluster_ip.is_empty();
            if !headless {
                let Ok(ip) = cluster_ip.parse::<Ipv4Addr>() else {
                    continue;
                };
                zone.add(&base, RData::A(A(ip)));
                zone.add(&key(&Name::from(ip)), RData::PTR(PTR(name(&base))));
                for port in spec.ports.iter().flatten() {
                    let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) else {
                        continue;
                    };
                    let proto = port.protocol.as_deref().unwrap_or("TCP").to_lowercase();
                    let srv = SRV::new(0, 100, port.port as u16, name(&base));
                    zone.add(&format!("_{port_name}._{proto}.{base}"), RData::SRV(srv));
                }
                continue;
            }
            // Headless: the ready endpoints themselves, each also under its own name (a
            // StatefulSet pod's hostname). A Service without ports still has addresses.
            let mut seen = BTreeSet::new();
            let ports: Vec<(&str, &str, Vec<Endpoint>)> = match spec.ports.as_deref() {
                None | Some([]) => vec![("", "TCP", address_endpoints(&own))],
                Some(ports) => ports
                    .iter()
                    .map(|port| {
                        let port_name = port.name.as_deref().unwrap_or("");
                        let protocol = port.protocol.as_deref().unwrap_or("TCP");
                        (
                            port_name,
                            protocol,
                            port_endpoints(&own, port_name, protocol),
                        )
                    })
                    .collect(),
            };
            for (port_name, protocol, endpoints) in ports {
                for ep in endpoints {
                    let Ok(ip) = ep.ip.parse::<Ipv4Addr>() else {
                        continue;
                    };
                    let host = ep
                        .hostname
                        .clone()
                        .unwrap_or_else(|| ep.ip.replace('.', "-"));
                    let host_name = format!("{host}.{base}");
                    if seen.insert(ep.ip.clone()) {
                        zone.add(&base, RData::A(A(ip)));
                        zone.add(&host_name, RData::A(A(ip)));
                        if ep.hostname.is_some() {
                            zone.add(&key(&Name::from(ip)), RData::PTR(PTR(name(&host_name))));
                        }
                    }
                    if !port_name.is_empty() {
                        let proto = protocol.to_lowercase();
                        let srv = SRV::new(0, 100, ep.port as u16, name(&host_name));
                        zone.add(&format!("_{port_name}._{proto}.{base}"), RData::SRV(srv));
                    }
                }
            }
            // A headless service without ready endpoints still exists.
            zone.mark(&base);
        }
        zone
    }

    fn add(&mut self, owner: &str, rdata: RData) {
        let owner = key(&name(owner));
        let list = self.records.entry(owner.clone()).or_default();
        if !list.contains(&rdata) {
            list.push(rdata);
        }
        self.mark(&owner);
    }

    /// Records that `owner` and its ancestors inside the domain exist.
    fn mark(&mut self, owner: &str) {
        let mut n = name(owner);
        while n.num_labels() > self.domain.num_labels() && self.domain.zone_of(&n) {
            self.names.insert(key(&n));
            n = n.base_name();
        }
    }

    /// The start of authority sent with negative answers.
    fn soa(&self) -> Record {
        let soa = SOA::new(
            name(&format!("ns.dns.{}", self.domain.to_ascii())),
            name(&format!("hostmaster.{}", self.domain.to_ascii())),
            1,
            7200,
            1800,
            86400,
            TTL,
        );
        Record::from_rdata(self.domain.clone(), TTL, RData::SOA(soa))
    }

    /// The answer to one question.
    pub fn answer(&self, qname: &Name, qtype: RecordType) -> Answer {
        let k = key(qname);
        let in_domain = self.domain.zone_of(&qname.to_lowercase());
        if !in_domain && !self.records.contains_key(&k) {
            return Answer::Forward;
        }
        if let Some(ip) = self.pod_address(qname) {
            return Answer::Records(match qtype {
                RecordType::A | RecordType::ANY => {
                    vec![Record::from_rdata(qname.clone(), TTL, RData::A(A(ip)))]
                }
                _ => Vec::new(),
            });
        }
        let Some(rdatas) = self.records.get(&k) else {
            if self.names.contains(&k) || k == key(&self.domain) {
                return Answer::Records(Vec::new());
            }
            return Answer::NxDomain;
        };
        let mut out = Vec::new();
        for rdata in rdatas {
            let t = rdata.record_type();
            if t == qtype || qtype == RecordType::ANY || t == RecordType::CNAME {
                out.push(Record::from_rdata(qname.clone(), TTL, rdata.clone()));
            }
        }
        Answer::Records(out)
    }

    /// `1-2-3-4.<ns>.pod.<domain>` names 1.2.3.4 (CoreDNS's `pods insecure`).
    fn pod_address(&self, qname: &Name) -> Option<Ipv4Addr> {
        let labels: Vec<String> = qname
            .to_lowercase()
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect();
        let extra = labels
            .len()
            .checked_sub(self.domain.num_labels() as usize)?;
        if extra != 3 || labels[2] != "pod" {
            return None;
        }
        labels[0].replace('-', ".").parse().ok()
    }

    /// The response to a query message, or `None` when it must be forwarded.
    pub fn respond(&self, query: &Message) -> Option<Message> {
        let mut resp = Message::new();
        resp.set_id(query.id())
            .set_message_type(MessageType::Response)
            .set_op_code(query.op_code())
            .set_recursion_desired(query.recursion_desired())
            .set_recursion_available(true);
        let Some(q) = query.queries().first() else {
            resp.set_response_code(ResponseCode::FormErr);
            return Some(resp);
        };
        resp.add_query(q.clone());
        if query.op_code() != OpCode::Query {
            resp.set_response_code(ResponseCode::NotImp);
            return Some(resp);
        }
        match self.answer(q.name(), q.query_type()) {
            Answer::Forward => return None,
            Answer::NxDomain => {
                resp.set_authoritative(true)
                    .set_response_code(ResponseCode::NXDomain)
                    .add_name_server(self.soa());
            }
            Answer::Records(records) => {
                resp.set_authoritative(true);
                if records.is_empty() {
                    resp.add_name_server(self.soa());
                }
                resp.add_answers(records);
            }
        }
        Some(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, n: &str, ip: &str, ports: &[(&str, i32, &str)]) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": n},
            "spec": {
                "clusterIP": ip,
                "ports": ports.iter().map(|(pn, p, proto)| serde_json::json!({"name": pn, "port": p, "protocol": proto})).collect::<Vec<_>>(),
            }
        }))
        .unwrap()
    }

    fn slice(
        ns: &str,
        svc: &str,
        port: (&str, i32),
        eps: &[(&str, Option<&str>, bool)],
    ) -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": ns, "name": format!("{svc}-x"), "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4",
            "ports": [{"name": port.0, "port": port.1, "protocol": "TCP"}],
            "endpoints": eps.iter().map(|(ip, host, ready)| serde_json::json!({
                "addresses": [ip], "hostname": host, "conditions": {"ready": ready}
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    fn zone() -> Zone {
        let mut external: Service = svc("default", "ext", "", &[]);
        external.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        external.spec.as_mut().unwrap().external_name = Some("example.com".into());
        Zone::build(
            "cluster.local",
            &[
                svc(
                    "default",
                    "web",
                    "10.96.0.20",
                    &[("http", 80, "TCP"), ("", 81, "TCP")],
                ),
                svc("db", "pg", "None", &[("sql", 5432, "TCP")]),
                svc("db", "empty", "None", &[("sql", 5432, "TCP")]),
                external,
            ],
            &[slice(
                "db",
                "pg",
                ("sql", 5432),
                &[
                    ("10.244.0.7", Some("pg-0"), true),
                    ("10.244.0.8", None, true),
                    ("10.244.0.9", None, false),
                ],
            )],
        )
    }

    fn rdatas(a: Answer) -> Vec<String> {
        match a {
            Answer::Records(r) => r.iter().map(|r| r.data().to_string()).collect(),
            other => panic!("expected records, got {other:?}"),
        }
    }

    #[test]
    fn cluster_ip_services_answer_a_srv_and_ptr() {
        let z = zone();
        assert_eq!(
            rdatas(z.answer(&name("web.default.svc.cluster.local"), RecordType::A)),
            ["10.96.0.20"]
        );
        // Case does not matter.
        assert_eq!(
            rdatas(z.answer(&name("WEB.Default.svc.cluster.local."), RecordType::A)),
            ["10.96.0.20"]
        );
        assert_eq!(
            rdatas(z.answer(
                &name("_http._tcp.web.default.svc.cluster.local"),
                RecordType::SRV
            )),
            ["0 100 80 web.default.svc.cluster.local."]
        );
        assert_eq!(
            rdatas(z.answer(&name("20.0.96.10.in-addr.arpa"), RecordType::PTR)),
            ["web.default.svc.cluster.local."]
        );
        // The name exists but has no AAAA: empty answer, not NXDOMAIN.
        assert!(
            rdatas(z.answer(&name("web.default.svc.cluster.local"), RecordType::AAAA)).is_empty()
        );
        assert!(rdatas(z.answer(&name("default.svc.cluster.local"), RecordType::A)).is_empty());
    }

    #[test]
    fn headless_services_answer_ready_endpoints() {
        let z = zone();
        let mut ips = rdatas(z.answer(&name("pg.db.svc.cluster.local"), RecordType::A));
        ips.sort();
        assert_eq!(ips, ["10.244.0.7", "10.244.0.8"]);
        assert_eq!(
            rdatas(z.answer(&name("pg-0.pg.db.svc.cluster.local"), RecordType::A)),
            ["10.244.0.7"]
        );
        let mut srv = rdatas(z.answer(&name("_sql._tcp.pg.db.svc.cluster.local"), RecordType::SRV));
        srv.sort();
        assert_eq!(
            srv,
            [
                "0 100 5432 10-244-0-8.pg.db.svc.cluster.local.",
                "0 100 5432 pg-0.pg.db.svc.cluster.local."
            ]
        );
        assert_eq!(
            rdatas(z.answer(&name("7.0.244.10.in-addr.arpa"), RecordType::PTR)),
            ["pg-0.pg.db.svc.cluster.local."]
        );
        assert!(rdatas(z.answer(&name("empty.db.svc.cluster.local"), RecordType::A)).is_empty());
    }

    #[test]
    fn a_headless_service_without_ports_answers_its_pods_by_hostname() {
        let mut portless = slice(
            "db",
            "sts",
            ("", 0),
            &[("10.244.0.11", Some("sts-0"), true)],
        );
        portless.ports = Some(Vec::new());
        let z = Zone::build(
            "cluster.local",
            &[svc("db", "sts", "None", &[])],
            &[portless],
        );
        assert_eq!(
            rdatas(z.answer(&name("sts-0.sts.db.svc.cluster.local"), RecordType::A)),
            ["10.244.0.11"]
        );
        assert_eq!(
            rdatas(z.answer(&name("sts.db.svc.cluster.local"), RecordType::A)),
            ["10.244.0.11"]
        );
    }

    #[test]
    fn pods_external_names_unknown_names_and_forwarding() {
        let z = zone();
        assert_eq!(
            rdatas(z.answer(&name("10-244-1-5.default.pod.cluster.local"), RecordType::A)),
            ["10.244.1.5"]
        );
        assert_eq!(
            rdatas(z.answer(&name("ext.default.svc.cluster.local"), RecordType::A)),
            ["example.com."]
        );
        assert_eq!(
            z.answer(&name("nope.default.svc.cluster.local"), RecordType::A),
            Answer::NxDomain
        );
        assert_eq!(
            z.answer(
                &name("_x._tcp.web.default.svc.cluster.local"),
                RecordType::SRV
            ),
            Answer::NxDomain
        );
        assert_eq!(
            z.answer(&name("example.com"), RecordType::A),
            Answer::Forward
        );
        assert_eq!(
            z.answer(&name("1.1.168.192.in-addr.arpa"), RecordType::PTR),
            Answer::Forward
        );
    }
}
