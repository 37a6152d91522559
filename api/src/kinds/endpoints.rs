//! core/v1 Endpoints, written by the endpoints controller (and by users for selector-less
//! Services).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Endpoints;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, string, text};
use crate::validation::{Errors, FieldError, Path};

impl Kind for Endpoints {
    const COLUMNS: &'static [Column] = ENDPOINTS_COLUMNS;
    const CREATE_ON_UPDATE: bool = true;

    fn default_fields(&mut self) {
        for s in self.subsets.iter_mut().flatten() {
            for p in s.ports.iter_mut().flatten() {
                p.protocol.get_or_insert_with(|| "TCP".into());
            }
        }
    }

    fn validate(&self, errs: &mut Errors) {
        for (i, s) in self.subsets.iter().flatten().enumerate() {
            let sp = Path::new("subsets").index(i);
            for (j, a) in s
                .addresses
                .iter()
                .flatten()
                .chain(s.not_ready_addresses.iter().flatten())
                .enumerate()
            {
                if a.ip.parse::<std::net::IpAddr>().is_err() {
                    errs.push(FieldError::invalid(
                        &sp.child("addresses").index(j).child("ip"),
                        &a.ip,
                        "must be a valid IP address",
                    ));
                }
            }
            for (j, p) in s.ports.iter().flatten().enumerate() {
                if !(1..=65535).contains(&p.port) {
                    errs.push(FieldError::invalid(
                        &sp.child("ports").index(j).child("port"),
                        p.port,
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(endpoints_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const ENDPOINTS_COLUMNS: &[Column] = &[NAME, string("Endpoints", doc::ENDPOINTS_SUBSETS), AGE];

fn endpoints_cells(ep: &Endpoints, now: Timestamp) -> Vec<Value> {
    vec![
        name(&ep.metadata),
        text(format_endpoints(ep)),
        age(&ep.metadata, now),
    ]
}

/// Up to three `ip:port` pairs (bare IPs for port-less subsets) and `+ N more...`.
fn format_endpoints(ep: &Endpoints) -> String {
    let subsets = ep.subsets.as_deref().unwrap_or(&[]);
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0;
    for ss in subsets {
        let addresses = ss.addresses.as_deref().unwrap_or(&[]);
        let ports = ss.ports.as_deref().unwrap_or(&[]);
        if ports.is_empty() {
            // A headless service may have no ports.
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(a.ip.clone());
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(&a.ip, port.port));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

/// `net.JoinHostPort`: IPv6 hosts are bracketed.
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

mod doc {
    pub const ENDPOINTS_SUBSETS: &str = "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service.";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn endpoints_rows() {
        let ep = |subsets: Value| {
            row_of::<Endpoints>(json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web"}, "subsets": subsets}),
            )[1]
                .clone()
        };
        assert_eq!(ep(json!([])), "<none>");
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}], "ports": [{"port": 8080}]}])
            ),
            "10.0.0.1:8080,[fd00::1]:8080"
        );
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}], "ports": [{"port": 80}, {"port": 443}]}])
            ),
            "1.1.1.1:80,2.2.2.2:80,1.1.1.1:443 + 1 more..."
        );
        assert_eq!(ep(json!([{"addresses": [{"ip": "1.1.1.1"}]}])), "1.1.1.1");
    }
}
