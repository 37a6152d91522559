//! networking.k8s.io Ingresses and IngressClasses.

use jiff::Timestamp;
use k8s_openapi::api::networking::v1::IngressLoadBalancerStatus;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};
use serde_json::Value;

use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{
    AGE, Column, NAME, Row, age, load_balancer_points, name, or_empty, string, text,
};
use crate::validation::{Errors, FieldError, Path, dns1035_label, dns1123_subdomain, immutable};

const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];

fn validate_backend(b: &IngressBackend, p: &Path, errs: &mut Errors) {
    match (&b.service, &b.resource) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            p,
            "",
            "cannot set both resource and service backends",
        )),
        (None, None) => errs.push(FieldError::invalid(
            p,
            "",
            "resource or service backend is required",
        )),
        (Some(svc), None) => {
            let sp = p.child("service");
            if svc.name.is_empty() {
                errs.push(FieldError::required(&sp.child("name"), ""));
            } else {
                for e in dns1035_label(&svc.name) {
                    errs.push(FieldError::invalid(&sp.child("name"), &svc.name, e));
                }
            }
            match &svc.port {
                None => errs.push(FieldError::required(
                    &sp.child("port"),
                    "port name or number is required",
                )),
                Some(port) => match (&port.name, port.number) {
                    (Some(n), Some(_)) if !n.is_empty() => errs.push(FieldError::invalid(
                        &sp.child("port"),
                        "",
                        "cannot set both port name & port number",
                    )),
                    (None, None) => errs.push(FieldError::required(
                        &sp.child("port"),
                        "port name or number is required",
                    )),
                    (_, Some(n)) if !(1..=65535).contains(&n) => errs.push(FieldError::invalid(
                        &sp.child("port").child("number"),
                        n,
                        "must be between 1 and 65535, inclusive",
                    )),
                    _ => {}
                },
            }
        }
        (None, Some(r)) => {
            if r.kind.is_empty() {
                errs.push(FieldError::required(
                    &p.child("resource").child("kind"),
                    "kind is required",
                ));
            }
            if r.name.is_empty() {
                errs.push(FieldError::required(
                    &p.child("resource").child("name"),
                    "name is required",
                ));
            }
        }
    }
}

impl Kind for Ingress {
    const COLUMNS: &'static [Column] = INGRESS_COLUMNS;

    spec_and_status!(generation);

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&sp, ""));
            return;
        };
        if spec.default_backend.is_none() && spec.rules.as_ref().is_none_or(|r| r.is_empty()) {
            errs.push(FieldError::invalid(
                &sp,
                "",
                "either `defaultBackend` or `rules` must be specified",
            ));
        }
        if let Some(b) = &spec.default_backend {
            validate_backend(b, &sp.child("defaultBackend"), errs);
        }
        for (i, rule) in spec.rules.iter().flatten().enumerate() {
            let rp = sp.child("rules").index(i);
            if let Some(host) = rule.host.as_deref().filter(|h| !h.is_empty()) {
                if host.parse::<std::net::IpAddr>().is_ok() {
                    errs.push(FieldError::invalid(
                        &rp.child("host"),
                        host,
                        "must be a DNS name, not an IP address",
                    ));
                } else {
                    for e in dns1123_subdomain(host.strip_prefix("*.").unwrap_or(host)) {
                        errs.push(FieldError::invalid(&rp.child("host"), host, e));
                    }
                }
            }
            let Some(http) = &rule.http else { continue };
            if http.paths.is_empty() {
                errs.push(FieldError::required(&rp.child("http").child("paths"), ""));
            }
            for (j, p) in http.paths.iter().enumerate() {
                let pp = rp.child("http").child("paths").index(j);
                let path = p.path.as_deref().unwrap_or("");
                if p.path_type.is_empty() {
                    errs.push(FieldError::required(
                        &pp.child("pathType"),
                        "pathType must be specified",
                    ));
                } else if !PATH_TYPES.contains(&p.path_type.as_str()) {
                    errs.push(FieldError::not_supported(
                        &pp.child("pathType"),
                        &p.path_type,
                        PATH_TYPES,
                    ));
                } else if p.path_type != "ImplementationSpecific" || !path.is_empty() {
                    if !path.starts_with('/') {
                        errs.push(FieldError::invalid(
                            &pp.child("path"),
                            path,
                            "must be an absolute path",
                        ));
                    }
                    for bad in ["//", "/./", "/../", "%2f", "%2F"] {
                        if p.path_type != "ImplementationSpecific" && path.contains(bad) {
                            errs.push(FieldError::invalid(
                                &pp.child("path"),
                                path,
                                format!("must not contain '{bad}'"),
                            ));
                        }
                    }
                }
                validate_backend(&p.backend, &pp.child("backend"), errs);
            }
        }
        if let Some(class) = &spec.ingress_class_name {
            for e in dns1123_subdomain(class) {
                errs.push(FieldError::invalid(&sp.child("ingressClassName"), class, e));
            }
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(ingress_cells(self, now))
    }
}

impl Kind for IngressClass {
    const COLUMNS: &'static [Column] = INGRESS_CLASS_COLUMNS;

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.spec != old.spec)
    }

    fn default_fields(&mut self) {
        if let Some(p) = self.spec.as_mut().and_then(|s| s.parameters.as_mut()) {
            p.scope.get_or_insert_with(|| "Cluster".into());
        }
    }

    fn validate(&self, errs: &mut Errors) {
        if let Some(c) = self.spec.as_ref().and_then(|s| s.controller.as_ref()) {
            let ok = c.len() <= 250
                && c.split_once('/')
                    .is_some_and(|(d, p)| dns1123_subdomain(d).is_empty() && !p.is_empty());
            if !ok {
                errs.push(FieldError::invalid(
                    &Path::new("spec").child("controller"),
                    c,
                    "must be a domain-prefixed path (such as \"acme.io/foo\")",
                ));
            }
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        immutable(
            &self.spec.as_ref().and_then(|s| s.controller.clone()),
            &old.spec.as_ref().and_then(|s| s.controller.clone()),
            &Path::new("spec").child("controller"),
            errs,
        );
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(ingress_class_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const INGRESS_COLUMNS: &[Column] = &[
    NAME,
    string(
        "Class",
        "The name of the IngressClass resource that should be used for additional configuration",
    ),
    string(
        "Hosts",
        "Hosts that incoming requests are matched against before the ingress rule",
    ),
    string(
        "Address",
        "Address is a list containing ingress points for the load-balancer",
    ),
    string("Ports", "Ports of TLS configurations that open"),
    AGE,
];

const INGRESS_CLASS_COLUMNS: &[Column] = &[
    NAME,
    string(
        "Controller",
        "Controller that is responsible for handling this class",
    ),
    string(
        "Parameters",
        "A reference to a resource with additional parameters",
    ),
    AGE,
];

fn ingress_cells(ing: &Ingress, now: Timestamp) -> Vec<Value> {
    let spec = ing.spec.clone().unwrap_or_default();
    let class = spec.ingress_class_name.as_deref().unwrap_or("<none>");
    let rules = spec.rules.as_deref().unwrap_or(&[]);
    // Upstream lists the first three hosts; any rule seen after that makes the list "more",
    // and every rule past the third is counted, host or not.
    const MAX: usize = 3;
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if hosts.len() == MAX {
            more = true;
        }
        if let Some(host) = rule.host.as_deref().filter(|h| !more && !h.is_empty()) {
            hosts.push(host);
        }
    }
    let hosts = if hosts.is_empty() {
        "*".to_string()
    } else if more {
        format!("{} + {} more...", hosts.join(","), rules.len() - MAX)
    } else {
        hosts.join(",")
    };
    let address = ingress_points(ing.status.as_ref().and_then(|s| s.load_balancer.as_ref()));
    let ports = if spec.tls.as_ref().is_some_and(|t| !t.is_empty()) {
        "80, 443"
    } else {
        "80"
    };
    vec![
        name(&ing.metadata),
        text(class),
        text(hosts),
        text(address),
        text(ports),
        age(&ing.metadata, now),
    ]
}

fn ingress_points(lb: Option<&IngressLoadBalancerStatus>) -> String {
    let ingress = lb.and_then(|lb| lb.ingress.as_deref()).unwrap_or(&[]);
    load_balancer_points(ingress.iter().map(|i| (i.ip.as_ref(), i.hostname.as_ref())))
}

fn ingress_class_cells(ic: &IngressClass, now: Timestamp) -> Vec<Value> {
    let spec = ic.spec.clone().unwrap_or_default();
    let parameters = spec.parameters.as_ref().map_or_else(
        || "<none>".to_string(),
        |p| match &p.api_group {
            Some(group) => format!("{}.{group}/{}", p.kind, p.name),
            None => format!("{}/{}", p.kind, p.name),
        },
    );
    vec![
        name(&ic.metadata),
        text(or_empty(spec.controller.as_ref())),
        text(parameters),
        age(&ic.metadata, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn ingress_rows() {
        let ing = |rules: Value, tls: Value, lb: Value| {
            row_of::<Ingress>(
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                       "metadata": {"name": "test1"},
                       "spec": {"ingressClassName": "nginx", "rules": rules, "tls": tls},
                       "status": {"loadBalancer": lb}}),
            )
        };
        assert_eq!(
            ing(
                json!([{"host": "a.example.com"}, {"host": "b.example.com"}]),
                json!([{"hosts": ["a.example.com"]}]),
                json!({"ingress": [{"ip": "2.3.4.5", "hostname": "localhost"}, {"hostname": "lb.example.com"}]})
            ),
            vec![
                json!("test1"),
                json!("nginx"),
                json!("a.example.com,b.example.com"),
                json!("2.3.4.5,lb.example.com"),
                json!("80, 443"),
                json!("<unknown>")
            ]
        );
        let hosts = |rules: Value| ing(rules, json!([]), json!({}))[2].clone();
        assert_eq!(hosts(json!([])), "*");
        assert_eq!(hosts(json!([{}])), "*");
        assert_eq!(
            hosts(json!([{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}, {}])),
            "a,b,c + 3 more..."
        );
        assert_eq!(
            hosts(json!([{"host": "a"}, {"host": "b"}, {"host": "c"}])),
            "a,b,c"
        );
        let plain = ing(json!([]), json!([]), json!({}));
        assert_eq!(plain[3..5], [json!(""), json!("80")]);

        let ic = |params: Value| {
            row_of::<IngressClass>(json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nginx"},
                       "spec": {"controller": "example.com/controller", "parameters": params}}),
            )[2]
                .clone()
        };
        assert_eq!(ic(json!(null)), "<none>");
        assert_eq!(
            ic(json!({"kind": "customgroup", "name": "example"})),
            "customgroup/example"
        );
        assert_eq!(
            ic(json!({"apiGroup": "example.com", "kind": "customgroup", "name": "example"})),
            "customgroup.example.com/example"
        );
    }
}
