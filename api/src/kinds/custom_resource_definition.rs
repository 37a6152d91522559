//! apiextensions.k8s.io CustomResourceDefinitions: their defaults and the structural rules
//! a definition must meet before its resource is served (see `crate::crd`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};

use crate::strategy::Kind;
use crate::validation::{Errors, FieldError, Path, dns1035_label, dns1123_subdomain, immutable};

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
