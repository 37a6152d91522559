//! apiregistration.k8s.io APIServices: which server answers for one group version. An
//! APIService without a service is served by this server itself (`Local`, always available);
//! one with a service names the Service in front of an extension API server, and how to trust
//! it. Its name is the group version it claims, `<version>.<group>` (`v1.` for the legacy core
//! group), so that two registrations of one group version cannot exist. The status belongs to
//! the availability controller: updates of the main resource never touch it.
//!
//! Upstream: k8s.io/kube-aggregator, pkg/apis/apiregistration (defaults, validation) and
//! pkg/registry/apiservice (strategy, Table).

use jiff::Timestamp;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceCondition, APIServiceSpec, APIServiceStatus,
};
use serde_json::Value;

use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, string, text};
use crate::validation::{
    Errors, FieldError, Path, dns1035_label, dns1123_subdomain, path_segment_name,
};

/// `SetDefaults_ServiceReference`: the port an extension server's Service is called on.
const DEFAULT_SERVICE_PORT: i32 = 443;
const MAX_GROUP_PRIORITY_MINIMUM: i32 = 20000;
const MAX_VERSION_PRIORITY: i32 = 1000;
/// In upstream's order (ConditionTrue, ConditionFalse, ConditionUnknown).
const CONDITION_STATUSES: &[&str] = &["True", "False", "Unknown"];
/// The condition the availability controller keeps.
const AVAILABLE: &str = "Available";

/// `NewLocalAvailableAPIServiceCondition`: a local APIService is available from its creation.
fn local_available() -> APIServiceCondition {
    APIServiceCondition {
        type_: AVAILABLE.into(),
        status: "True".into(),
        last_transition_time: Some(crate::meta::now()),
        reason: Some("Local".into()),
        message: Some("Local APIServices are always available".into()),
    }
}

impl Kind for APIService {
    const COLUMNS: &'static [Column] = API_SERVICE_COLUMNS;
    /// Both of upstream's strategies refuse updates without a resourceVersion.
    const UNCONDITIONAL_UPDATE: bool = false;

    // Upstream's status strategy also keeps labels, annotations, finalizers and owner
    // references, as the generic registry does for every status update.
    spec_and_status!();

    fn default_fields(&mut self) {
        if let Some(service) = self.spec.as_mut().and_then(|s| s.service.as_mut()) {
            service.port.get_or_insert(DEFAULT_SERVICE_PORT);
        }
    }

    /// The status starts empty, but for local APIServices, available at once.
    fn prepare_create(&mut self) {
        let local = self.spec.as_ref().is_none_or(|s| s.service.is_none());
        self.status = Some(APIServiceStatus {
            conditions: local.then(|| vec![local_available()]),
        });
    }

    /// `ValidateAPIService`.
    fn validate(&self, errs: &mut Errors) {
        let spec = self.spec.clone().unwrap_or_default();
        let group = spec.group.as_deref().unwrap_or("");
        let version = spec.version.as_deref().unwrap_or("");
        // Upstream's name rule: a path segment (the registry's), that must be `version.group`.
        if let Some(name) = self.metadata.name.as_deref().filter(|n| !n.is_empty()) {
            let required = format!("{version}.{group}");
            if path_segment_name(name).is_empty() && name != required {
                errs.push(FieldError::invalid(
                    &Path::new("metadata").child("name"),
                    name,
                    format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
                ));
            }
        }
        validate_spec(&spec, &Path::new("spec"), errs);
    }

    /// `ValidateAPIServiceUpdate` (the whole object again) and, as a status update keeps the
    /// spec, `ValidateAPIServiceStatus` for the status subresource.
    fn validate_update(&self, _old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let Some(status) = &self.status {
            validate_status(status, &Path::new("status"), errs);
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(api_service_cells(self, now))
    }
}

fn validate_spec(spec: &APIServiceSpec, path: &Path, errs: &mut Errors) {
    let group = spec.group.as_deref().unwrap_or("");
    let version = spec.version.as_deref().unwrap_or("");
    // Only the legacy core group's APIService has no group.
    if group.is_empty() && version != "v1" {
        errs.push(FieldError::required(
            &path.child("group"),
            "only v1 may have an empty group and it better be legacy kube",
        ));
    }
    if !group.is_empty() {
        for msg in dns1123_subdomain(group) {
            errs.push(FieldError::invalid(&path.child("group"), group, msg));
        }
    }
    for msg in dns1035_label(version) {
        errs.push(FieldError::invalid(&path.child("version"), version, msg));
    }
    if !(1..=MAX_GROUP_PRIORITY_MINIMUM).contains(&spec.group_priority_minimum) {
        errs.push(FieldError::invalid(
            &path.child("groupPriorityMinimum"),
            spec.group_priority_minimum,
            "must be positive and less than 20000",
        ));
    }
    if !(1..=MAX_VERSION_PRIORITY).contains(&spec.version_priority) {
        errs.push(FieldError::invalid(
            &path.child("versionPriority"),
            spec.version_priority,
            "must be positive and less than 1000",
        ));
    }
    let ca_bundle = spec.ca_bundle.as_ref().map_or(0, |b| b.0.len());
    let insecure = spec.insecure_skip_tls_verify.unwrap_or(false);
    let Some(service) = &spec.service else {
        if ca_bundle != 0 {
            errs.push(FieldError::invalid(
                &path.child("caBundle"),
                format!("{ca_bundle} bytes"),
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            errs.push(FieldError::invalid(
                &path.child("insecureSkipTLSVerify"),
                insecure,
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return;
    };
    let service_path = path.child("service");
    if service.namespace.as_deref().unwrap_or("").is_empty() {
        errs.push(FieldError::required(&service_path.child("namespace"), ""));
    }
    if service.name.as_deref().unwrap_or("").is_empty() {
        errs.push(FieldError::required(&service_path.child("name"), ""));
    }
    let port = service.port.unwrap_or(0);
    if !(1..=65535).contains(&port) {
        errs.push(FieldError::invalid(
            &service_path.child("port"),
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    if insecure && ca_bundle > 0 {
        errs.push(FieldError::invalid(
            &path.child("insecureSkipTLSVerify"),
            insecure,
            "may not be true if caBundle is present",
        ));
    }
}

/// `ValidateAPIServiceStatus`: each condition's status is True, False or Unknown.
fn validate_status(status: &APIServiceStatus, path: &Path, errs: &mut Errors) {
    for (i, c) in status.conditions.iter().flatten().enumerate() {
        if !CONDITION_STATUSES.contains(&c.status.as_str()) {
            errs.push(FieldError::not_supported(
                &path.child("conditions").index(i).child("status"),
                &c.status,
                CONDITION_STATUSES,
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (kube-aggregator's own table convertor, pkg/registry/apiservice/etcd).

const API_SERVICE_COLUMNS: &[Column] = &[
    NAME,
    string(
        "Service",
        "The reference to the service that hosts this API endpoint.",
    ),
    string("Available", "Whether this service is available."),
    AGE,
];

fn api_service_cells(svc: &APIService, now: Timestamp) -> Vec<Value> {
    let service = match svc.spec.as_ref().and_then(|s| s.service.as_ref()) {
        Some(s) => format!(
            "{}/{}",
            s.namespace.as_deref().unwrap_or(""),
            s.name.as_deref().unwrap_or("")
        ),
        None => "Local".to_string(),
    };
    let available = svc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == AVAILABLE));
    // The status, with the reason unless it is True.
    let available = match available {
        None => "Unknown".to_string(),
        Some(c) => match c.reason.as_deref() {
            Some(reason) if c.status != "True" && !reason.is_empty() => {
                format!("{} ({reason})", c.status)
            }
            _ => c.status.clone(),
        },
    };
    vec![
        name(&svc.metadata),
        text(service),
        text(available),
        age(&svc.metadata, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn api_service(body: Value) -> APIService {
        let mut a: APIService = serde_json::from_value(body).unwrap();
        a.default_fields();
        a
    }

    fn errors(a: &APIService) -> Vec<String> {
        let mut errs = Vec::new();
        a.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn remote(name: &str, spec: Value) -> APIService {
        let mut body = json!({"metadata": {"name": name}, "spec": {
            "group": "metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100,
            "service": {"namespace": "kube-system", "name": "metrics-server"},
            "insecureSkipTLSVerify": true}});
        for (k, v) in spec.as_object().unwrap() {
            body["spec"][k] = v.clone();
        }
        api_service(body)
    }

    #[test]
    fn defaults() {
        let a = remote("v1beta1.metrics.k8s.io", json!({}));
        assert_eq!(a.spec.unwrap().service.unwrap().port, Some(443));
        let a = remote(
            "v1beta1.metrics.k8s.io",
            json!({"service": {"namespace": "ns", "name": "svc", "port": 8443}}),
        );
        assert_eq!(a.spec.unwrap().service.unwrap().port, Some(8443));
        let local = api_service(json!({"metadata": {"name": "v1.apps"}, "spec": {
            "group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15}}));
        assert!(local.spec.unwrap().service.is_none());
    }

    #[test]
    fn valid() {
        assert_eq!(
            errors(&remote("v1beta1.metrics.k8s.io", json!({}))),
            Vec::<String>::new()
        );
        let core = api_service(json!({"metadata": {"name": "v1."}, "spec": {
            "version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}}));
        assert_eq!(errors(&core), Vec::<String>::new());
        let ca = remote(
            "v1beta1.metrics.k8s.io",
            json!({"insecureSkipTLSVerify": false, "caBundle": "Y2VydA=="}),
        );
        assert_eq!(errors(&ca), Vec::<String>::new());
    }

    #[test]
    fn validation() {
        assert_eq!(
            errors(&remote("v1.metrics.k8s.io", json!({}))),
            vec![
                "metadata.name: Invalid value: \"v1.metrics.k8s.io\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.k8s.io\""
            ]
        );
        // A name that is no path segment is the registry's error alone.
        assert_eq!(errors(&remote("a/b", json!({}))), Vec::<String>::new());
        assert_eq!(
            errors(&remote(
                "v1beta1.",
                json!({"group": "", "groupPriorityMinimum": 0, "versionPriority": 1001})
            )),
            vec![
                "spec.group: Required value: only v1 may have an empty group and it better be legacy kube",
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
            ]
        );
        assert_eq!(
            errors(&remote(
                "V1.Example_com",
                json!({"group": "Example_com", "version": "V1", "groupPriorityMinimum": 20001, "versionPriority": -1})
            )),
            vec![
                "spec.group: Invalid value: \"Example_com\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.version: Invalid value: \"V1\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
                "spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: -1: must be positive and less than 1000",
            ]
        );
        assert_eq!(
            errors(&remote(
                "v1beta1.metrics.k8s.io",
                json!({"service": {"port": 0}, "caBundle": "Y2VydA=="})
            )),
            vec![
                "spec.service.namespace: Required value",
                "spec.service.name: Required value",
                "spec.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
            ]
        );
        let local = api_service(json!({"metadata": {"name": "v1.example.com"}, "spec": {
            "group": "example.com", "version": "v1", "groupPriorityMinimum": 1000,
            "versionPriority": 15, "caBundle": "Y2VydA==", "insecureSkipTLSVerify": true}}));
        assert_eq!(
            errors(&local),
            vec![
                "spec.caBundle: Invalid value: \"4 bytes\": local APIServices may not have a caBundle",
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
            ]
        );
    }

    #[test]
    fn status() {
        let mut local = api_service(json!({"metadata": {"name": "v1.apps"}, "spec": {
            "group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15},
            "status": {"conditions": [{"type": "Available", "status": "False"}]}}));
        local.prepare_create();
        let conditions = local.status.clone().unwrap().conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Available", "True")
        );
        assert_eq!(conditions[0].reason.as_deref(), Some("Local"));
        assert_eq!(
            conditions[0].message.as_deref(),
            Some("Local APIServices are always available")
        );
        assert!(conditions[0].last_transition_time.is_some());

        let mut remote = remote("v1beta1.metrics.k8s.io", json!({}));
        remote.status = Some(APIServiceStatus {
            conditions: Some(vec![local_available()]),
        });
        remote.prepare_create();
        assert_eq!(remote.status, Some(APIServiceStatus::default()));

        // The main resource keeps the stored status, the status subresource the stored spec.
        let mut update = local.clone();
        update.status = None;
        update.spec.as_mut().unwrap().version_priority = 20;
        update.keep_status(&local);
        assert_eq!(update.status, local.status);
        let mut status_update = update.clone();
        status_update.spec.as_mut().unwrap().version_priority = 30;
        status_update
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .status = "Maybe".into();
        status_update.keep_spec(&update);
        assert_eq!(status_update.spec, update.spec);
        let mut errs = Vec::new();
        status_update.validate_update(&update, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\""
            ]
        );
    }

    #[test]
    fn api_service_rows() {
        let row = |spec: Value, status: Value| {
            row_of::<APIService>(json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": "v1beta1.metrics.k8s.io", "creationTimestamp": ago(90)},
                "spec": spec, "status": status}))
        };
        let svc = json!({"service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
            "group": "metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100});
        let condition = |status: &str, reason: Option<&str>| {
            let mut c = json!({"type": "Available", "status": status});
            if let Some(r) = reason {
                c["reason"] = json!(r);
            }
            json!({"conditions": [{"type": "Other", "status": "True"}, c]})
        };
        assert_eq!(
            row(svc.clone(), condition("False", Some("MissingEndpoints"))),
            vec![
                json!("v1beta1.metrics.k8s.io"),
                json!("kube-system/metrics-server"),
                json!("False (MissingEndpoints)"),
                json!("90s"),
            ]
        );
        assert_eq!(
            row(svc.clone(), condition("True", Some("Passed")))[2],
            json!("True")
        );
        assert_eq!(
            row(svc.clone(), condition("False", None))[2],
            json!("False")
        );
        assert_eq!(
            row(svc.clone(), condition("Unknown", Some("")))[2],
            json!("Unknown")
        );
        assert_eq!(row(svc, json!({}))[2], json!("Unknown"));
        let local = json!({"group": "apps", "version": "v1",
            "groupPriorityMinimum": 17800, "versionPriority": 15});
        assert_eq!(
            row(local, condition("True", Some("Local")))[1..3],
            [json!("Local"), json!("True")]
        );
    }
}
