//! The ephemeral volume controller against the in-process API server: a pod's generic
//! ephemeral volume gets its claim, owned by the pod; a claim of that name the pod does not own
//! is left alone and reported; a deleted claim comes back while the pod is there.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use minik8s_controllers::informers::Informers;
use testkit::{Backend, InProcess, eventually};

use crate::common::{WAIT, event_reasons};

fn pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], "volumes": [{
            "name": "scratch",
            "ephemeral": {"volumeClaimTemplate": {
                "metadata": {"labels": {"kind": "scratch"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                         "resources": {"requests": {"storage": "1Gi"}}},
            }},
        }]},
    }))
    .unwrap()
}

#[tokio::test]
async fn ephemeral_volumes_get_claims_owned_by_their_pod() -> anyhow::Result<()> {
    let api = InProcess::start(Backend::Sqlite).await?;
    let client = api.client();
    let _controller = tokio::spawn(minik8s_controllers::ephemeral::run(Informers::new(
        client.clone(),
    )));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();

    let web = pods.create(&pp, &pod("web")).await?;
    let claim = eventually(WAIT, "claim web-scratch", || async {
        claims.get_opt("web-scratch").await.ok().flatten()
    })
    .await;
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Pod", "web"));
    assert_eq!(Some(&owner.uid), web.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));
    assert_eq!(
        claim
            .metadata
            .labels
            .unwrap()
            .get("kind")
            .map(String::as_str),
        Some("scratch")
    );
    assert_eq!(
        claim.spec.unwrap().storage_class_name.as_deref(),
        Some("local-path")
    );

    // Deleted while the pod is there: made again.
    claims
        .delete("web-scratch", &DeleteParams::default())
        .await?;
    // What the pvc-protection controller (not run here) does once no running pod uses it.
    claims
        .patch(
            "web-scratch",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    eventually(WAIT, "claim web-scratch made again", || async {
        let c = claims.get_opt("web-scratch").await.ok().flatten()?;
        (c.metadata.uid != claim.metadata.uid).then_some(())
    })
    .await;

    // A claim of the name that another made is not the pod's: reported, never taken over.
    let foreign: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "other-scratch"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))?;
    claims.create(&pp, &foreign).await?;
    pods.create(&pp, &pod("other")).await?;
    eventually(WAIT, "FailedBinding on pod other", || async {
        event_reasons(&client, "default", "other", "ephemeral_volume")
            .await
            .into_iter()
            .find(|r| r == "FailedBinding")
    })
    .await;
    let kept = claims.get("other-scratch").await?;
    assert!(kept.metadata.owner_references.is_none());
    Ok(())
}
