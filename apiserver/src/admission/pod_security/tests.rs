use k8s_openapi::api::core::v1::{Namespace, Pod};
use serde_json::json;

use super::api::{Level, LevelVersion, Version};
use super::*;

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

#[test]
fn only_image_and_container_changes_are_significant() {
    let old = pod(json!({"spec": {
        "containers": [{"name": "a", "image": "nginx:1"}],
        "initContainers": [{"name": "i", "image": "busybox"}],
    }}));
    let mut new = old.clone();
    new.spec.as_mut().unwrap().active_deadline_seconds = Some(5);
    new.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    assert!(!new.significant(&old));
    let mut new = old.clone();
    new.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
    assert!(new.significant(&old));
    let mut new = old.clone();
    new.spec.as_mut().unwrap().init_containers = None;
    assert!(new.significant(&old));
    let mut new = old.clone();
    new.spec.as_mut().unwrap().ephemeral_containers = Some(vec![
        serde_json::from_value(json!({"name": "debug", "image": "busybox"})).unwrap(),
    ]);
    assert!(new.significant(&old));
    assert!(!new.significant(&new.clone()));
}

#[test]
fn templates_name_their_pod_spec() {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }))
    .unwrap();
    let (_, spec) = d.pod().unwrap();
    assert_eq!(spec.containers[0].name, "c");
    let cj: CronJob = serde_json::from_value(json!({
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "j"}]}}}}},
    }))
    .unwrap();
    assert_eq!(cj.pod().unwrap().1.containers[0].name, "j");
    let rc: ReplicationController = serde_json::from_value(json!({"spec": {}})).unwrap();
    assert!(rc.pod().is_none());
}

#[test]
fn exempt_namespaces_are_told_their_labels_are_ignored() {
    let core = PodSecurity::new(
        Configuration {
            exemptions: Exemptions {
                namespaces: vec!["kube-system".into()],
                ..Default::default()
            },
            ..Default::default()
        },
        Some(32),
    );
    let plugin = NamespaceAdmission::new(core);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {
        "name": "kube-system",
        "labels": {
            "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/audit": "privileged",
        },
    }}))
    .unwrap();
    let (policy, errs) = plugin.core.policy(ns.metadata.labels.as_ref());
    assert!(errs.is_empty());
    assert_eq!(
        plugin.exempt_warning(&ns, &policy).as_deref(),
        Some(
            r#"namespace "kube-system" is exempt from Pod Security, and the policy (enforce=baseline:latest) will be ignored"#
        )
    );
    // Warn follows enforce without a label of its own, but is reported only when labelled.
    let ns: Namespace = serde_json::from_value(json!({"metadata": {
        "name": "kube-system",
        "labels": {"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn": "baseline"},
    }}))
    .unwrap();
    let (policy, _) = plugin.core.policy(ns.metadata.labels.as_ref());
    assert!(
        plugin
            .exempt_warning(&ns, &policy)
            .unwrap()
            .contains("(enforce=baseline:latest, warn=baseline:latest)")
    );
    assert_eq!(
        plugin.exempt_warning(&Namespace::default(), &Policy::default()),
        None
    );
}

#[test]
fn errors_aggregate_as_go_prints_them() {
    let (_, errs) = api::policy_to_evaluate(
        Some(
            &[(
                "pod-security.kubernetes.io/enforce".to_string(),
                "x".to_string(),
            )]
            .into(),
        ),
        Policy::default(),
    );
    assert_eq!(
        aggregate(&errs),
        r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "x": must be one of privileged, baseline, restricted"#
    );
    let lv = LevelVersion {
        level: Level::Restricted,
        version: Version::Minor(30),
    };
    assert_eq!(lv.to_string(), "restricted:v1.30");
}
