//! discovery.k8s.io EndpointSlices, written by the EndpointSlice controller.

use jiff::Timestamp;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, string, text};
use crate::validation::{Errors, FieldError, Path, dns1123_subdomain, immutable};

impl Kind for EndpointSlice {
    const COLUMNS: &'static [Column] = ENDPOINT_SLICE_COLUMNS;

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(
            self.endpoints != old.endpoints
                || self.ports != old.ports
                || self.address_type != old.address_type
                || self.metadata.labels != old.metadata.labels,
        )
    }

    fn default_fields(&mut self) {
        for p in self.ports.iter_mut().flatten() {
            p.name.get_or_insert_with(String::new);
            p.protocol.get_or_insert_with(|| "TCP".into());
        }
    }

    fn validate(&self, errs: &mut Errors) {
        if !["FQDN", "IPv4", "IPv6"].contains(&self.address_type.as_str()) {
            errs.push(FieldError::not_supported(
                &Path::new("addressType"),
                &self.address_type,
                &["FQDN", "IPv4", "IPv6"],
            ));
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            let p = Path::new("endpoints").index(i).child("addresses");
            if e.addresses.is_empty() {
                errs.push(FieldError::required(&p, "must contain at least 1 address"));
            }
            for (j, a) in e.addresses.iter().enumerate() {
                let valid = match self.address_type.as_str() {
                    "IPv4" => a.parse::<std::net::Ipv4Addr>().is_ok(),
                    "IPv6" => a.parse::<std::net::Ipv6Addr>().is_ok(),
                    _ => dns1123_subdomain(a).is_empty(),
                };
                if !valid {
                    errs.push(FieldError::invalid(
                        &p.index(j),
                        a,
                        format!("must be a valid {} address", self.address_type),
                    ));
                }
            }
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        immutable(
            &self.address_type,
            &old.address_type,
            &Path::new("addressType"),
            errs,
        );
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(endpoint_slice_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    string("AddressType", doc::ENDPOINT_SLICE_ADDRESS_TYPE),
    string("Ports", doc::ENDPOINT_SLICE_PORTS),
    string("Endpoints", doc::ENDPOINT_SLICE_ENDPOINTS),
    AGE,
];

fn endpoint_slice_cells(slice: &EndpointSlice, now: Timestamp) -> Vec<Value> {
    let ports = slice
        .ports
        .iter()
        .flatten()
        .map(|p| match (p.port, &p.name) {
            (Some(port), _) => port.to_string(),
            (None, Some(name)) => name.clone(),
            (None, None) => "*".to_string(),
        });
    let addresses = slice
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter().cloned());
    vec![
        name(&slice.metadata),
        text(slice.address_type.clone()),
        text(list_with_more(ports, 3)),
        text(list_with_more(addresses, 3)),
        age(&slice.metadata, now),
    ]
}

/// A list shortened to its first `max` items and `+ N more...`; `<unset>` when empty.
fn list_with_more(items: impl IntoIterator<Item = String>, max: usize) -> String {
    let mut list = Vec::new();
    let mut count = 0;
    for item in items {
        if list.len() < max {
            list.push(item);
        }
        count += 1;
    }
    let joined = list.join(",");
    if count > max {
        format!("{joined} + {} more...", count - max)
    } else if joined.is_empty() {
        "<unset>".to_string()
    } else {
        joined
    }
}

mod doc {
    pub const ENDPOINT_SLICE_ADDRESS_TYPE: &str = "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name.";
    pub const ENDPOINT_SLICE_PORTS: &str = "ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates \"all ports\". Each slice may include a maximum of 100 ports.";
    pub const ENDPOINT_SLICE_ENDPOINTS: &str = "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn endpoint_slice_rows() {
        let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "web-x"},
            "addressType": "IPv4",
            "ports": [{"port": 80}, {"name": "metrics"}, {}, {"port": 443}],
            "endpoints": [{"addresses": ["10.0.0.1", "10.0.0.2"]}, {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]});
        assert_eq!(
            row_of::<EndpointSlice>(slice)[1..4],
            [
                json!("IPv4"),
                json!("80,metrics,* + 1 more..."),
                json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...")
            ]
        );
        let empty = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "e"},
            "addressType": "IPv4", "endpoints": []});
        assert_eq!(
            row_of::<EndpointSlice>(empty)[2..4],
            [json!("<unset>"), json!("<unset>")]
        );
    }
}
