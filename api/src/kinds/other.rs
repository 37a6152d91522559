//! The smaller groups: autoscaling, networking, discovery, coordination, storage, RBAC,
//! events.k8s.io and apiextensions. Each gets upstream's defaults and the rules users hit.

use k8s_openapi::api::autoscaling::v2::{
    HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};

use crate::spec_and_status;
use crate::strategy::{GcPolicy, Kind};
use crate::validation::{
    Errors, FieldError, Path, dns1035_label, dns1123_subdomain, immutable, path_segment_name,
    qualified_name,
};

impl Kind for HorizontalPodAutoscaler {
    spec_and_status!();

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        spec.min_replicas.get_or_insert(1);
        if spec.metrics.as_ref().is_none_or(|m| m.is_empty()) {
            spec.metrics = Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(80),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]);
        }
        if let Some(b) = spec.behavior.as_mut() {
            let up = b.scale_up.get_or_insert_with(HPAScalingRules::default);
            up.stabilization_window_seconds.get_or_insert(0);
            up.select_policy.get_or_insert_with(|| "Max".into());
            up.policies.get_or_insert_with(|| {
                vec![
                    HPAScalingPolicy {
                        type_: "Pods".into(),
                        value: 4,
                        period_seconds: 15,
                    },
                    HPAScalingPolicy {
                        type_: "Percent".into(),
                        value: 100,
                        period_seconds: 15,
                    },
                ]
            });
            let down = b.scale_down.get_or_insert_with(HPAScalingRules::default);
            down.select_policy.get_or_insert_with(|| "Max".into());
            down.policies.get_or_insert_with(|| {
                vec![HPAScalingPolicy {
                    type_: "Percent".into(),
                    value: 100,
                    period_seconds: 15,
                }]
            });
        }
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&sp, ""));
            return;
        };
        let min = spec.min_replicas.unwrap_or(1);
        if min < 1 {
            errs.push(FieldError::invalid(
                &sp.child("minReplicas"),
                min,
                "must be greater than or equal to 1",
            ));
        }
        if spec.max_replicas < 1 {
            errs.push(FieldError::invalid(
                &sp.child("maxReplicas"),
                spec.max_replicas,
                "must be greater than 0",
            ));
        } else if spec.max_replicas < min {
            errs.push(FieldError::invalid(
                &sp.child("maxReplicas"),
                spec.max_replicas,
                "must be greater than or equal to `minReplicas`",
            ));
        }
        let target = sp.child("scaleTargetRef");
        if spec.scale_target_ref.kind.is_empty() {
            errs.push(FieldError::required(&target.child("kind"), ""));
        }
        if spec.scale_target_ref.name.is_empty() {
            errs.push(FieldError::required(&target.child("name"), ""));
        }
        const TYPES: &[&str] = &[
            "ContainerResource",
            "External",
            "Object",
            "Pods",
            "Resource",
        ];
        for (i, m) in spec.metrics.iter().flatten().enumerate() {
            let mp = sp.child("metrics").index(i);
            if !TYPES.contains(&m.type_.as_str()) {
                errs.push(FieldError::not_supported(
                    &mp.child("type"),
                    &m.type_,
                    TYPES,
                ));
                continue;
            }
            if m.type_ == "Resource" {
                match &m.resource {
                    None => errs.push(FieldError::required(
                        &mp.child("resource"),
                        "must populate information for the given metric source",
                    )),
                    Some(r) => {
                        let t = &r.target;
                        match (t.average_utilization, &t.average_value) {
                            (None, None) => errs.push(FieldError::required(
                                &mp.child("resource").child("target"),
                                "must set either a target raw value or a target utilization",
                            )),
                            (Some(u), _) if u < 1 => errs.push(FieldError::invalid(
                                &mp.child("resource")
                                    .child("target")
                                    .child("averageUtilization"),
                                u,
                                "must be greater than 0",
                            )),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

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
}

impl Kind for IngressClass {
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
}

impl Kind for EndpointSlice {
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
}

impl Kind for Lease {
    const CREATE_ON_UPDATE: bool = true;
    const UNCONDITIONAL_UPDATE: bool = false;

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else { return };
        if let Some(d) = spec.lease_duration_seconds
            && d <= 0
        {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("leaseDurationSeconds"),
                d,
                "must be greater than 0",
            ));
        }
        if let Some(t) = spec.lease_transitions
            && t < 0
        {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("leaseTransitions"),
                t,
                "must be greater than or equal to 0",
            ));
        }
    }
}

impl Kind for StorageClass {
    fn default_fields(&mut self) {
        self.reclaim_policy.get_or_insert_with(|| "Delete".into());
        self.volume_binding_mode
            .get_or_insert_with(|| "Immediate".into());
    }

    fn validate(&self, errs: &mut Errors) {
        if self.provisioner.is_empty() {
            errs.push(FieldError::required(&Path::new("provisioner"), ""));
        } else {
            for e in qualified_name(&self.provisioner.to_lowercase()) {
                errs.push(FieldError::invalid(
                    &Path::new("provisioner"),
                    &self.provisioner,
                    e,
                ));
            }
        }
        if let Some(p) = &self.reclaim_policy
            && !["Delete", "Retain"].contains(&p.as_str())
        {
            errs.push(FieldError::not_supported(
                &Path::new("reclaimPolicy"),
                p,
                &["Delete", "Retain"],
            ));
        }
        if let Some(m) = &self.volume_binding_mode
            && !["Immediate", "WaitForFirstConsumer"].contains(&m.as_str())
        {
            errs.push(FieldError::not_supported(
                &Path::new("volumeBindingMode"),
                m,
                &["Immediate", "WaitForFirstConsumer"],
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if self.parameters != old.parameters {
            errs.push(FieldError::forbidden(
                &Path::new("parameters"),
                "updates to parameters are forbidden.",
            ));
        }
        if self.provisioner != old.provisioner {
            errs.push(FieldError::forbidden(
                &Path::new("provisioner"),
                "updates to provisioner are forbidden.",
            ));
        }
        if self.reclaim_policy != old.reclaim_policy {
            errs.push(FieldError::forbidden(
                &Path::new("reclaimPolicy"),
                "updates to reclaimPolicy are forbidden.",
            ));
        }
        immutable(
            &self.volume_binding_mode,
            &old.volume_binding_mode,
            &Path::new("volumeBindingMode"),
            errs,
        );
    }
}

fn validate_rules(rules: &[PolicyRule], namespaced: bool, errs: &mut Errors) {
    for (i, r) in rules.iter().enumerate() {
        let p = Path::new("rules").index(i);
        if r.verbs.is_empty() {
            errs.push(FieldError::required(
                &p.child("verbs"),
                "verbs must contain at least one value",
            ));
        }
        let has_urls = r.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty());
        let has_resources = r.resources.as_ref().is_some_and(|u| !u.is_empty());
        if has_urls {
            if namespaced {
                errs.push(FieldError::invalid(
                    &p.child("nonResourceURLs"),
                    "",
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if has_resources || r.api_groups.as_ref().is_some_and(|g| !g.is_empty()) {
                errs.push(FieldError::invalid(
                    &p.child("nonResourceURLs"),
                    "",
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if r.api_groups.as_ref().is_none_or(|g| g.is_empty()) {
            errs.push(FieldError::required(
                &p.child("apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if !has_resources {
            errs.push(FieldError::required(
                &p.child("resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

impl Kind for Role {
    const CREATE_ON_UPDATE: bool = true;

    fn validate(&self, errs: &mut Errors) {
        validate_rules(self.rules.as_deref().unwrap_or_default(), true, errs);
    }
}

impl Kind for ClusterRole {
    const CREATE_ON_UPDATE: bool = true;

    fn validate(&self, errs: &mut Errors) {
        validate_rules(self.rules.as_deref().unwrap_or_default(), false, errs);
    }
}

fn default_role_ref(r: &mut RoleRef) {
    if r.api_group.is_empty() {
        r.api_group = "rbac.authorization.k8s.io".into();
    }
}

fn default_subjects(subjects: &mut [Subject]) {
    for s in subjects {
        if s.api_group.is_none() {
            s.api_group = Some(if s.kind == "ServiceAccount" {
                String::new()
            } else {
                "rbac.authorization.k8s.io".into()
            });
        }
    }
}

fn validate_binding(role_ref: &RoleRef, subjects: &[Subject], cluster: bool, errs: &mut Errors) {
    let rp = Path::new("roleRef");
    if role_ref.api_group != "rbac.authorization.k8s.io" {
        errs.push(FieldError::not_supported(
            &rp.child("apiGroup"),
            &role_ref.api_group,
            &["rbac.authorization.k8s.io"],
        ));
    }
    let kinds: &[&str] = if cluster {
        &["ClusterRole"]
    } else {
        &["ClusterRole", "Role"]
    };
    if !kinds.contains(&role_ref.kind.as_str()) {
        errs.push(FieldError::not_supported(
            &rp.child("kind"),
            &role_ref.kind,
            kinds,
        ));
    }
    if role_ref.name.is_empty() {
        errs.push(FieldError::required(&rp.child("name"), ""));
    } else {
        for e in path_segment_name(&role_ref.name) {
            errs.push(FieldError::invalid(&rp.child("name"), &role_ref.name, e));
        }
    }
    for (i, s) in subjects.iter().enumerate() {
        let sp = Path::new("subjects").index(i);
        if s.name.is_empty() {
            errs.push(FieldError::required(&sp.child("name"), ""));
        }
        match s.kind.as_str() {
            "ServiceAccount" => {
                if s.api_group.as_deref().is_some_and(|g| !g.is_empty()) {
                    errs.push(FieldError::not_supported(
                        &sp.child("apiGroup"),
                        s.api_group.as_deref().unwrap_or(""),
                        &[""],
                    ));
                }
                if cluster && s.namespace.as_deref().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(&sp.child("namespace"), ""));
                }
            }
            "User" | "Group" => {
                if s.api_group.as_deref() != Some("rbac.authorization.k8s.io") {
                    errs.push(FieldError::not_supported(
                        &sp.child("apiGroup"),
                        s.api_group.as_deref().unwrap_or(""),
                        &["rbac.authorization.k8s.io"],
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &sp.child("kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

fn role_ref_unchanged(new: &RoleRef, old: &RoleRef, errs: &mut Errors) {
    if new != old {
        errs.push(FieldError::invalid(
            &Path::new("roleRef"),
            format!("{new:?}"),
            "cannot change roleRef",
        ));
    }
}

impl Kind for RoleBinding {
    const CREATE_ON_UPDATE: bool = true;

    fn default_fields(&mut self) {
        default_role_ref(&mut self.role_ref);
        default_subjects(self.subjects.as_deref_mut().unwrap_or_default());
    }

    fn validate(&self, errs: &mut Errors) {
        validate_binding(
            &self.role_ref,
            self.subjects.as_deref().unwrap_or_default(),
            false,
            errs,
        );
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        role_ref_unchanged(&self.role_ref, &old.role_ref, errs);
    }
}

impl Kind for ClusterRoleBinding {
    const CREATE_ON_UPDATE: bool = true;

    fn default_fields(&mut self) {
        default_role_ref(&mut self.role_ref);
        default_subjects(self.subjects.as_deref_mut().unwrap_or_default());
    }

    fn validate(&self, errs: &mut Errors) {
        validate_binding(
            &self.role_ref,
            self.subjects.as_deref().unwrap_or_default(),
            true,
            errs,
        );
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        role_ref_unchanged(&self.role_ref, &old.role_ref, errs);
    }
}

impl Kind for EventV1 {
    const GC_POLICY: GcPolicy = GcPolicy::Unsupported;

    fn from_storage(bytes: &[u8]) -> Result<Self, String> {
        let core: k8s_openapi::api::core::v1::Event =
            serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        Ok(crate::kinds::events::from_core(core))
    }

    fn to_storage(&self) -> Result<Vec<u8>, String> {
        serde_json::to_vec(&crate::kinds::events::to_core(self)).map_err(|e| e.to_string())
    }

    fn validate(&self, errs: &mut Errors) {
        if self.event_time.is_none() {
            errs.push(FieldError::required(&Path::new("eventTime"), ""));
        }
        match self.type_.as_deref() {
            Some("Normal") | Some("Warning") => {}
            t => errs.push(FieldError::invalid(
                &Path::new("type"),
                t.unwrap_or(""),
                format!("has invalid value: {}", t.unwrap_or("")),
            )),
        }
        for (name, v) in [
            ("reportingController", &self.reporting_controller),
            ("reportingInstance", &self.reporting_instance),
            ("action", &self.action),
            ("reason", &self.reason),
        ] {
            if v.as_deref().is_none_or(str::is_empty) {
                errs.push(FieldError::required(&Path::new(name), ""));
            }
        }
        if let Some(s) = &self.series
            && s.count < 2
        {
            errs.push(FieldError::invalid(
                &Path::new("series").child("count"),
                s.count,
                "should be at least 2",
            ));
        }
    }
}

impl Kind for CustomResourceDefinition {
    fn keep_spec(&mut self, old: &Self) {
        self.spec = old.spec.clone();
    }

    /// Upstream's CRD delete: the CRD stays, Terminating, with the cleanup finalizer until the
    /// CRD controller has deleted its custom resources.
    fn begin_delete(&mut self) -> bool {
        use crate::crd::names::{CLEANUP_FINALIZER, TERMINATING, condition, set_condition};
        let finalizers = self.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            finalizers.push(CLEANUP_FINALIZER.to_string());
        }
        set_condition(
            self.status.get_or_insert_with(Default::default),
            condition(
                TERMINATING,
                "True",
                "InstanceDeletionPending",
                "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
            ),
            &crate::meta::now(),
        );
        true
    }

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.spec != old.spec)
    }

    fn default_fields(&mut self) {
        let names = &mut self.spec.names;
        if names.singular.as_deref().is_none_or(str::is_empty) {
            names.singular = Some(names.kind.to_lowercase());
        }
        if names.list_kind.as_deref().is_none_or(str::is_empty) {
            names.list_kind = Some(format!("{}List", names.kind));
        }
        self.spec
            .conversion
            .get_or_insert_with(|| CustomResourceConversion {
                strategy: "None".into(),
                webhook: None,
            });
    }

    fn prepare_create(&mut self) {
        let storage = self
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone());
        self.status = Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionStatus {
            stored_versions: storage.map(|s| vec![s]),
            ..Default::default()
        });
    }

    fn keep_status(&mut self, old: &Self) {
        self.status = old.status.clone();
        // A new storage version joins storedVersions.
        if let Some(storage) = self
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
        {
            let status = self.status.get_or_insert_with(Default::default);
            let stored = status.stored_versions.get_or_insert_with(Vec::new);
            if !stored.contains(&storage) {
                stored.push(storage);
            }
        }
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let spec = &self.spec;
        let names = &spec.names;
        let expected = format!("{}.{}", names.plural, spec.group);
        if self.metadata.name.as_deref() != Some(expected.as_str()) {
            errs.push(FieldError::invalid(
                &Path::new("metadata").child("name"),
                self.metadata.name.clone().unwrap_or_default(),
                "must be spec.names.plural+\".\"+spec.group",
            ));
        }
        if spec.group.is_empty() {
            errs.push(FieldError::required(&sp.child("group"), ""));
        } else if !spec.group.contains('.') {
            errs.push(FieldError::invalid(
                &sp.child("group"),
                &spec.group,
                "should be a domain with at least one dot",
            ));
        } else {
            for e in dns1123_subdomain(&spec.group) {
                errs.push(FieldError::invalid(&sp.child("group"), &spec.group, e));
            }
        }
        if spec.scope != "Cluster" && spec.scope != "Namespaced" {
            errs.push(FieldError::not_supported(
                &sp.child("scope"),
                &spec.scope,
                &["Cluster", "Namespaced"],
            ));
        }
        let np = sp.child("names");
        for (field, value) in [
            ("plural", Some(names.plural.as_str())),
            ("singular", names.singular.as_deref()),
        ] {
            match value {
                None | Some("") => errs.push(FieldError::required(&np.child(field), "")),
                Some(v) => {
                    for e in dns1035_label(v) {
                        errs.push(FieldError::invalid(&np.child(field), v, e));
                    }
                }
            }
        }
        if names.kind.is_empty() {
            errs.push(FieldError::required(&np.child("kind"), ""));
        }
        if names.list_kind.as_deref() == Some(names.kind.as_str()) {
            errs.push(FieldError::invalid(
                &np.child("listKind"),
                names.kind.clone(),
                "kind and listKind may not be the same",
            ));
        }
        for (i, s) in names.short_names.iter().flatten().enumerate() {
            for e in dns1035_label(s) {
                errs.push(FieldError::invalid(&np.child("shortNames").index(i), s, e));
            }
        }
        if spec.versions.is_empty() {
            errs.push(FieldError::required(
                &sp.child("versions"),
                "must have exactly one version marked as storage version",
            ));
        }
        let storage = spec.versions.iter().filter(|v| v.storage).count();
        if !spec.versions.is_empty() && storage != 1 {
            errs.push(FieldError::invalid(
                &sp.child("versions"),
                "",
                "must have exactly one version marked as storage version",
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, v) in spec.versions.iter().enumerate() {
            let vp = sp.child("versions").index(i);
            for e in dns1035_label(&v.name) {
                errs.push(FieldError::invalid(&vp.child("name"), &v.name, e));
            }
            if !seen.insert(v.name.clone()) {
                errs.push(FieldError::invalid(
                    &sp.child("versions"),
                    "",
                    "must contain unique version names",
                ));
            }
            match v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
            {
                None => errs.push(FieldError::required(
                    &vp.child("schema").child("openAPIV3Schema"),
                    "schemas are required",
                )),
                Some(schema) => {
                    let value = serde_json::to_value(schema).unwrap_or_default();
                    errs.extend(crate::crd::structural::validate_schema(
                        &value,
                        &vp.child("schema").child("openAPIV3Schema"),
                    ));
                }
            }
        }
        if let Some(c) = &spec.conversion
            && c.strategy != "None"
            && c.strategy != "Webhook"
        {
            errs.push(FieldError::not_supported(
                &sp.child("conversion").child("strategy"),
                &c.strategy,
                &["None", "Webhook"],
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        immutable(
            &self.spec.group,
            &old.spec.group,
            &Path::new("spec").child("group"),
            errs,
        );
        immutable(
            &self.spec.names.plural,
            &old.spec.names.plural,
            &Path::new("spec").child("names").child("plural"),
            errs,
        );
    }
}
