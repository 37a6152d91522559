//! Configurations: every generation of `spec.template` stamps one immutable Revision
//! (`<name>-<generation, 5 digits>`, or the template's own name), as Knative's configuration
//! reconciler does; the status follows the latest created revision and remembers the latest
//! one that became Ready.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use minik8s_controllers::informers::{Cache, Informers};
use minik8s_controllers::util::controller_ref::{controller_ref, is_controlled_by, owners_of};
use minik8s_controllers::util::reconciler::Error;
use minik8s_controllers::util::runtime::Controller;

use crate::conditions::{self, CONFIGURATION, READY};
use crate::serving::{Configuration, Revision, labels};

struct Ctx {
    client: kube::Client,
    revisions: Cache<Revision>,
}

/// The name of the revision that `config`'s current generation stamps.
pub fn revision_name(config: &Configuration) -> String {
    config
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| {
            format!(
                "{}-{:05}",
                config.name_any(),
                config.metadata.generation.unwrap_or(1)
            )
        })
}

/// The Revision of `config`'s current generation.
fn new_revision(config: &Configuration) -> Revision {
    let template = config.spec.template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template.labels.unwrap_or_default();
    labels.insert(labels::CONFIGURATION.into(), config.name_any());
    labels.insert(
        labels::CONFIGURATION_GENERATION.into(),
        config.metadata.generation.unwrap_or(1).to_string(),
    );
    labels.insert(
        labels::CONFIGURATION_UID.into(),
        config.uid().unwrap_or_default(),
    );
    for key in [labels::SERVICE, labels::SERVICE_UID] {
        if let Some(v) = config.labels().get(key) {
            labels.insert(key.into(), v.clone());
        }
    }
    let mut rev = Revision::new(&revision_name(config), config.spec.template.spec.clone());
    rev.metadata = ObjectMeta {
        name: Some(revision_name(config)),
        namespace: config.namespace(),
        labels: Some(labels),
        annotations: template.annotations,
        owner_references: Some(vec![controller_ref(config)]),
        ..Default::default()
    };
    rev
}

async fn reconcile(config: Arc<Configuration>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = config.namespace().unwrap_or_default();
    let name = revision_name(&config);
    let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), &ns);
    let rev = match ctx.revisions.get(&ObjectRef::new(&name).within(&ns)) {
        Some(r) => r,
        None => match revisions
            .create(&PostParams::default(), &new_revision(&config))
            .await
        {
            Ok(r) => Arc::new(r),
            // Created a moment ago and not in the cache yet: the watch brings it back.
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Action::await_change()),
            Err(e) => return Err(e.into()),
        },
    };

    let mut status = config.status.clone().unwrap_or_default();
    let conds = &mut status.status.conditions;
    CONFIGURATION.initialize(conds);
    if !is_controlled_by(rev.as_ref(), config.as_ref()) {
        CONFIGURATION.mark_false(
            conds,
            READY,
            "RevisionFailed",
            &format!("Revision {name:?} already exists and is not owned by this Configuration."),
        );
    } else {
        status.latest_created_revision_name = Some(name.clone());
        let rev_conditions = rev
            .status
            .as_ref()
            .map(|s| s.status.conditions.as_slice())
            .unwrap_or_default();
        match conditions::get(rev_conditions, READY).map(|c| c.status.as_str()) {
            Some("True") => {
                status.latest_ready_revision_name = Some(name.clone());
                CONFIGURATION.mark_true(conds, READY);
            }
            Some("False") => {
                let message = conditions::get(rev_conditions, READY)
                    .and_then(|c| c.message.clone())
                    .unwrap_or_default();
                CONFIGURATION.mark_false(
                    conds,
                    READY,
                    "RevisionFailed",
                    &format!("Revision {name:?} failed with message: {message}."),
                );
            }
            // As Knative's SetLatestCreatedRevisionName: not Ready until the latest created
            // revision is (an older one keeps serving meanwhile).
            _ => CONFIGURATION.mark_unknown(conds, READY, "", ""),
        }
    }
    status.status.observed_generation = config.metadata.generation;
    crate::write_status(&ctx.client, &*config, config.status.as_ref(), &status).await?;
    Ok(Action::await_change())
}

/// Runs the configuration controller until dropped.
pub async fn run(informers: Arc<Informers>) {
    let configs = informers.of::<Configuration>();
    let revisions = informers.of::<Revision>();
    let ctx = Arc::new(Ctx {
        client: informers.client(),
        revisions: revisions.store(),
    });
    let owners = configs.store().kube_store();
    Controller::for_shared_stream(configs.touched(), configs.store().kube_store())
        .watches_shared_stream(revisions.touched(), move |r: Arc<Revision>| {
            owners_of(&owners, r.as_ref(), |_: &Configuration| None)
        })
        .run("knative-configuration", reconcile, ctx)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::ConfigurationSpec;

    #[test]
    fn revisions_are_named_by_generation_or_by_the_template() {
        let mut c = Configuration::new("hello", ConfigurationSpec::default());
        c.metadata.generation = Some(12);
        assert_eq!(revision_name(&c), "hello-00012");
        c.spec.template.metadata = Some(ObjectMeta {
            name: Some("hello-v2".into()),
            ..Default::default()
        });
        assert_eq!(revision_name(&c), "hello-v2");
        let rev = new_revision(&c);
        assert_eq!(rev.labels()[labels::CONFIGURATION_GENERATION], "12");
    }
}
