//! The ClusterRole aggregation controller against the in-process API server: an aggregated
//! role holds the rules of the roles its selectors match, follows their changes, and drops
//! what a deleted role brought; the default `view`, `edit` and `admin` are filled the same way.

use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use minik8s_api::rbac::{Attributes, rule, rules_allow};
use minik8s_controllers::informers::Informers;
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);
const LABEL: &str = "example.com/aggregate-to-team";

fn widgets(verb: &str) -> Attributes {
    Attributes::resource("u", &[], verb, "example.com", "widgets").in_namespace("ns")
}

fn rules(role: &ClusterRole) -> &[PolicyRule] {
    role.rules.as_deref().unwrap_or_default()
}

#[tokio::test]
async fn aggregated_roles_follow_the_roles_they_select() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "team"},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {LABEL: "true"}}]},
            }))?,
        )
        .await?;
    tokio::spawn(minik8s_controllers::clusterroleaggregation::run(
        Informers::new(client.clone()),
    ));

    // The defaults are aggregated too: `admin` holds what `edit` and `view` gather.
    eventually(WAIT, "admin to be aggregated", || async {
        let admin = roles.get("admin").await.unwrap();
        let pods = Attributes::resource("u", &[], "get", "", "pods").in_namespace("ns");
        let bind = Attributes::resource(
            "u",
            &[],
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
        )
        .in_namespace("ns");
        (rules_allow(rules(&admin), &pods) && rules_allow(rules(&admin), &bind)).then_some(())
    })
    .await;

    // A labelled role's rules join; the unlabelled one's do not.
    let labelled = |name: &str, verb: &str| -> ClusterRole {
        let mut r = ClusterRole {
            rules: Some(vec![rule(&[verb], &["example.com"], &["widgets"])]),
            ..Default::default()
        };
        r.metadata.name = Some(name.into());
        r.metadata.labels = Some([(LABEL.to_string(), "true".to_string())].into());
        r
    };
    roles
        .create(&PostParams::default(), &labelled("widget-reader", "get"))
        .await?;
    let mut other = labelled("unrelated", "delete");
    other.metadata.labels = None;
    roles.create(&PostParams::default(), &other).await?;
    let team = eventually(WAIT, "the labelled role's rules", || async {
        let team = roles.get("team").await.unwrap();
        rules_allow(rules(&team), &widgets("get")).then_some(team)
    })
    .await;
    assert!(!rules_allow(rules(&team), &widgets("delete")));

    // A change of a selected role's rules follows; a second selected role adds its own.
    roles
        .patch(
            "widget-reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": [
                {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}
            ]})),
        )
        .await?;
    roles
        .create(&PostParams::default(), &labelled("widget-writer", "update"))
        .await?;
    eventually(WAIT, "the changed and added rules", || async {
        let team = roles.get("team").await.unwrap();
        let r = rules(&team);
        (rules_allow(r, &widgets("list")) && rules_allow(r, &widgets("update"))).then_some(())
    })
    .await;

    // Gone with the role that brought them.
    roles
        .delete("widget-writer", &DeleteParams::default())
        .await?;
    let team = eventually(WAIT, "the deleted role's rules to go", || async {
        let team = roles.get("team").await.unwrap();
        (!rules_allow(rules(&team), &widgets("update"))).then_some(team)
    })
    .await;
    assert!(rules_allow(rules(&team), &widgets("list")));

    // A role labelled for `view` extends view, edit and admin.
    let mut crd_view = labelled("widgets-view", "watch");
    crd_view.metadata.labels = Some(
        [(
            "rbac.authorization.k8s.io/aggregate-to-view".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    roles.create(&PostParams::default(), &crd_view).await?;
    for name in ["view", "edit", "admin"] {
        eventually(WAIT, "view's new rule to reach every user role", || async {
            let role = roles.get(name).await.unwrap();
            rules_allow(rules(&role), &widgets("watch")).then_some(())
        })
        .await;
    }
    Ok(())
}
