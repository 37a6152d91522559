//! Claiming dependents against the API: orphans that match are adopted, owned objects that no
//! longer match are released, other controllers' objects are left alone.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use minik8s_api::selector::Selector;
use minik8s_controllers::util::controller_ref::{claim, controller_of, controller_ref};
use testkit::{Backend, InProcess};

fn pod(name: &str, app: &str, owner: Option<&ReplicaSet>) -> Pod {
    let mut p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))
    .unwrap();
    if let Some(o) = owner {
        p.metadata.owner_references = Some(vec![controller_ref(o)]);
    }
    p
}

fn rs(name: &str, app: &str) -> ReplicaSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn claim_adopts_and_releases() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let mine = sets.create(&pp, &rs("mine", "web")).await?;
    let other = sets.create(&pp, &rs("other", "web")).await?;

    let orphan = pods.create(&pp, &pod("orphan", "web", None)).await?;
    let unrelated = pods.create(&pp, &pod("unrelated", "db", None)).await?;
    let owned = pods.create(&pp, &pod("owned", "web", Some(&mine))).await?;
    let relabelled = pods
        .create(&pp, &pod("relabelled", "db", Some(&mine)))
        .await?;
    let theirs = pods
        .create(&pp, &pod("theirs", "web", Some(&other)))
        .await?;

    let selector = Selector::parse("app=web")?;
    let candidates = [&orphan, &unrelated, &owned, &relabelled, &theirs]
        .into_iter()
        .map(|p| Arc::new(p.clone()));
    let claimed = claim(&mine, &sets, &pods, &selector, candidates).await?;
    let mut names: Vec<String> = claimed.iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(names, ["orphan", "owned"]);

    let adopted = pods.get("orphan").await?;
    assert_eq!(controller_of(&adopted).map(|r| r.uid.clone()), mine.uid());
    let released = pods.get("relabelled").await?;
    assert!(controller_of(&released).is_none());
    let untouched = pods.get("theirs").await?;
    assert_eq!(
        controller_of(&untouched).map(|r| r.uid.clone()),
        other.uid()
    );
    assert!(controller_of(&pods.get("unrelated").await?).is_none());

    // An owner replaced by a new object of the same name adopts nothing.
    sets.delete("mine", &Default::default()).await?;
    sets.create(&pp, &rs("mine", "web")).await?;
    let orphan2 = pods.create(&pp, &pod("orphan2", "web", None)).await?;
    let claimed = claim(&mine, &sets, &pods, &selector, [Arc::new(orphan2)]).await?;
    assert!(claimed.is_empty());
    assert!(controller_of(&pods.get("orphan2").await?).is_none());
    Ok(())
}
