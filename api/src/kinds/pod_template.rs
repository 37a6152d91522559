//! PodTemplates: stored pod templates that other objects or tools copy pods from. They hold
//! nothing but a template, so they get the same defaults and validation as a workload's, and
//! their generation counts template changes.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use serde_json::Value;

use crate::kinds::pod::default_template;
use crate::kinds::pod::validation::validate_template;
use crate::strategy::Kind;
use crate::table::{
    Column, NAME, Row, format_labels, layout_containers, name, string, template_containers, text,
};
use crate::validation::{Errors, FieldError, Path};

impl Kind for PodTemplate {
    const COLUMNS: &'static [Column] = POD_TEMPLATE_COLUMNS;

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.template != old.template)
    }

    fn default_fields(&mut self) {
        if let Some(t) = self.template.as_mut() {
            default_template(t);
        }
    }

    fn validate(&self, errs: &mut Errors) {
        // The template and its pod spec are structs upstream, never missing: absent is empty.
        let template = self.template.clone().unwrap_or_default();
        let full = PodTemplateSpec {
            metadata: template.metadata,
            spec: Some(template.spec.unwrap_or_default()),
        };
        let path = Path::new("template");
        validate_template(&full, &path, errs);
        if full
            .spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .is_some_and(|e| !e.is_empty())
        {
            errs.push(FieldError::forbidden(
                &path.child("spec").child("ephemeralContainers"),
                "ephemeral containers not allowed in pod template",
            ));
        }
    }

    fn row(&self, _now: Timestamp) -> Row {
        Row::new(pod_template_cells(self))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

/// Unlike a workload's, a PodTemplate's containers and images are not wide-only columns.
const POD_TEMPLATE_COLUMNS: &[Column] = &[
    NAME,
    string("Containers", "Names of each container in the template."),
    string(
        "Images",
        "Images referenced by each container in the template.",
    ),
    string("Pod Labels", "The labels for the pod template."),
];

fn pod_template_cells(pt: &PodTemplate) -> Vec<Value> {
    let template = pt.template.clone().unwrap_or_default();
    let (containers, images) = layout_containers(template_containers(&template));
    vec![
        name(&pt.metadata),
        containers,
        images,
        text(format_labels(
            template.metadata.as_ref().and_then(|m| m.labels.as_ref()),
        )),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn pod_template(template: Value) -> PodTemplate {
        let mut pt: PodTemplate = serde_json::from_value(json!({
            "metadata": {"name": "t", "namespace": "default"},
            "template": template
        }))
        .unwrap();
        pt.default_fields();
        pt
    }

    fn errors(pt: &PodTemplate) -> Vec<String> {
        let mut errs = Vec::new();
        pt.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn validation() {
        let ok = pod_template(json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}));
        assert_eq!(errors(&ok), Vec::<String>::new());
        assert_eq!(
            ok.template.unwrap().spec.unwrap().restart_policy.as_deref(),
            Some("Always")
        );
        assert_eq!(
            errors(&pod_template(json!(null))),
            vec!["template.spec.containers: Required value"]
        );
        assert_eq!(
            errors(&pod_template(
                json!({"spec": {"containers": [{"name": "c", "image": "i"}],
                "ephemeralContainers": [{"name": "debug", "image": "busybox"}]}})
            )),
            vec![
                "template.spec.ephemeralContainers: Forbidden: ephemeral containers not allowed in pod template"
            ]
        );
    }

    #[test]
    fn generation_follows_the_template() {
        let old = pod_template(json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}));
        let mut new = old.clone();
        assert_eq!(new.spec_changed(&old), Some(false));
        new.metadata.labels = Some([("a".into(), "b".into())].into());
        assert_eq!(new.spec_changed(&old), Some(false));
        new.template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("j".into());
        assert_eq!(new.spec_changed(&old), Some(true));
    }

    #[test]
    fn pod_template_row() {
        let pt = json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "nginx"},
            "template": {"metadata": {"labels": {"run": "nginx", "app": "web"}},
                         "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"},
                                                 {"name": "log", "image": "busybox"}]}}});
        assert_eq!(
            row_of::<PodTemplate>(pt),
            vec![
                json!("nginx"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,run=nginx")
            ]
        );
        let empty = json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "e"}});
        assert_eq!(
            narrow::<PodTemplate>(empty),
            vec![json!("e"), json!(""), json!(""), json!("<none>")]
        );
    }
}
