use super::*;

/// Claims, volumes and classes as plain lists.
#[derive(Default)]
struct Fixtures {
    claims: Vec<Arc<PersistentVolumeClaim>>,
    volumes: Vec<Arc<PersistentVolume>>,
    classes: Vec<Arc<StorageClass>>,
}

impl Objects for Fixtures {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims
            .iter()
            .find(|c| c.name_any() == name && c.namespace().as_deref() == Some(namespace))
            .cloned()
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.iter().find(|v| v.name_any() == name).cloned()
    }

    fn volumes_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        self.volumes
            .iter()
            .filter(|v| volume_class(v) == class)
            .cloned()
            .collect()
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.iter().find(|c| c.name_any() == name).cloned()
    }
}

fn claim(name: &str, extra: serde_json::Value) -> Arc<PersistentVolumeClaim> {
    let mut value = serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    merge(&mut value, extra);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn volume(name: &str, extra: serde_json::Value) -> Arc<PersistentVolume> {
    let mut value = serde_json::json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                 "local": {"path": "/data"}},
        "status": {"phase": "Available"},
    });
    merge(&mut value, extra);
    Arc::new(serde_json::from_value(value).unwrap())
}

fn class(name: &str, mode: &str, provisioner: &str) -> Arc<StorageClass> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "provisioner": provisioner,
            "volumeBindingMode": mode,
        }))
        .unwrap(),
    )
}

fn merge(base: &mut serde_json::Value, extra: serde_json::Value) {
    match (base, extra) {
        (serde_json::Value::Object(b), serde_json::Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

fn pod(claims: &[&str]) -> Pod {
    let volumes: Vec<_> = claims
        .iter()
        .map(|c| serde_json::json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "pod-uid"},
        "spec": {"containers": [{"name": "c"}], "volumes": volumes},
    }))
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .unwrap()
}

fn on_node(node: &str) -> serde_json::Value {
    serde_json::json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    ]}}}})
}

fn bound_to(pv: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}},
        "spec": {"volumeName": pv},
        "status": {"phase": "Bound"},
    })
}

fn reasons(r: Result<NodeVolumes, Rejection>) -> Vec<String> {
    r.map(|_| vec![]).unwrap_or_else(|r| r.reasons)
}

#[test]
fn pods_without_claims_are_left_alone() {
    let f = Fixtures::default();
    assert!(prefilter(&pod(&[]), &f).unwrap().is_none());
}

#[test]
fn missing_deleted_or_immediate_unbound_claims_keep_the_pod_off_every_node() {
    let mut f = Fixtures::default();
    assert_eq!(
        prefilter(&pod(&["data"]), &f).unwrap_err(),
        "persistentvolumeclaim \"data\" not found"
    );
    f.claims.push(claim(
        "data",
        serde_json::json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}),
    ));
    assert_eq!(
        prefilter(&pod(&["data"]), &f).unwrap_err(),
        "persistentvolumeclaim \"data\" is being deleted"
    );
    // No class, an Immediate class, a class that does not exist, or pre-bound to a volume:
    // the PV controller binds those first.
    for extra in [
        serde_json::json!({}),
        serde_json::json!({"spec": {"storageClassName": "fast"}}),
        serde_json::json!({"spec": {"storageClassName": "nowhere"}}),
        serde_json::json!({"spec": {"storageClassName": "local", "volumeName": "pv1"}}),
    ] {
        f.claims = vec![claim("data", extra)];
        f.classes = vec![
            class("fast", "Immediate", "example.com/fast"),
            class("local", "WaitForFirstConsumer", "rancher.io/local-path"),
        ];
        assert_eq!(
            prefilter(&pod(&["data"]), &f).unwrap_err(),
            ERR_UNBOUND_IMMEDIATE
        );
    }
}

#[test]
fn generic_ephemeral_claims_must_exist_and_belong_to_the_pod() {
    let mut p = pod(&[]);
    p.spec.as_mut().unwrap().volumes = Some(vec![
        serde_json::from_value(serde_json::json!({
            "name": "scratch",
            "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}},
        }))
        .unwrap(),
    ]);
    let mut f = Fixtures::default();
    assert_eq!(
        prefilter(&p, &f).unwrap_err(),
        "waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\""
    );
    f.claims.push(claim("p-scratch", serde_json::json!({})));
    assert_eq!(
        prefilter(&p, &f).unwrap_err(),
        "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
    );
    f.claims = vec![claim(
        "p-scratch",
        serde_json::json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
            "name": "p", "uid": "pod-uid", "controller": true}]}}),
    )];
    // Owned, but unbound with no class: immediate.
    assert_eq!(prefilter(&p, &f).unwrap_err(), ERR_UNBOUND_IMMEDIATE);
}

#[test]
fn bound_volumes_pin_the_pod_to_their_nodes() {
    let f = Fixtures {
        claims: vec![claim("data", bound_to("pv1"))],
        volumes: vec![volume("pv1", on_node("a"))],
        ..Default::default()
    };
    let claims = prefilter(&pod(&["data"]), &f).unwrap().unwrap();
    let fits = filter(&claims, &node("a")).unwrap();
    assert!(fits.all_bound());
    assert_eq!(reasons(filter(&claims, &node("b"))), [ERR_NODE_CONFLICT]);

    // Bound to a volume that is gone.
    let f = Fixtures {
        claims: vec![claim("data", bound_to("gone"))],
        ..Default::default()
    };
    let claims = prefilter(&pod(&["data"]), &f).unwrap().unwrap();
    assert_eq!(reasons(filter(&claims, &node("a"))), [ERR_PV_NOT_EXIST]);
}

#[test]
fn first_consumer_claims_take_the_smallest_static_volume_that_fits_the_node() {
    let local = serde_json::json!({"spec": {"storageClassName": "manual"}});
    let mut f = Fixtures {
        claims: vec![claim("data", local.clone())],
        classes: vec![class(
            "manual",
            "WaitForFirstConsumer",
            NOT_SUPPORTED_PROVISIONER,
        )],
        volumes: vec![
            volume(
                "big-a",
                serde_json::json!({"spec": {"storageClassName": "manual",
                "capacity": {"storage": "10Gi"}, "nodeAffinity": on_node("a")["spec"]["nodeAffinity"]}}),
            ),
            volume(
                "small-a",
                serde_json::json!({"spec": {"storageClassName": "manual",
                "capacity": {"storage": "2Gi"}, "nodeAffinity": on_node("a")["spec"]["nodeAffinity"]}}),
            ),
            volume(
                "tiny-a",
                serde_json::json!({"spec": {"storageClassName": "manual",
                "capacity": {"storage": "500Mi"}, "nodeAffinity": on_node("a")["spec"]["nodeAffinity"]}}),
            ),
            volume(
                "rwx-b",
                serde_json::json!({"spec": {"storageClassName": "manual",
                "accessModes": ["ReadWriteMany"], "nodeAffinity": on_node("b")["spec"]["nodeAffinity"]}}),
            ),
            volume(
                "other-class",
                serde_json::json!({"spec": {"storageClassName": "slow"}}),
            ),
        ],
    };
    let claims = prefilter(&pod(&["data"]), &f).unwrap().unwrap();
    let on_a = filter(&claims, &node("a")).unwrap();
    assert_eq!(on_a.static_bindings.len(), 1);
    let (pv, bound) = &on_a.static_bindings[0];
    assert_eq!(pv.name_any(), "small-a");
    assert_eq!(bound.name_any(), "data");
    let claim_ref = pv.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(claim_ref.name.as_deref(), Some("data"));
    assert_eq!(claim_ref.uid.as_deref(), Some("uid-data"));
    assert_eq!(
        annotation(&pv.metadata, ANN_BOUND_BY_CONTROLLER),
        Some("yes")
    );
    // On b only a volume with other access modes: none to bind and no provisioner.
    assert_eq!(reasons(filter(&claims, &node("b"))), [ERR_BIND_CONFLICT]);

    // A volume already claimed by another claim is not taken; one released to nobody is.
    f.volumes = vec![volume(
        "small-a",
        serde_json::json!({"spec": {"storageClassName": "manual",
            "claimRef": {"name": "other", "namespace": "default", "uid": "x"}},
            "status": {"phase": "Bound"}}),
    )];
    let claims = prefilter(&pod(&["data"]), &f).unwrap().unwrap();
    assert_eq!(reasons(filter(&claims, &node("a"))), [ERR_BIND_CONFLICT]);

    // A volume whose labels miss the claim's selector is not taken.
    f.claims = vec![claim(
        "data",
        serde_json::json!({"spec": {"storageClassName": "manual",
            "selector": {"matchLabels": {"tier": "gold"}}}}),
    )];
    f.volumes = vec![volume(
        "plain",
        serde_json::json!({"spec": {"storageClassName": "manual"}}),
    )];
    let claims = prefilter(&pod(&["data"]), &f).unwrap().unwrap();
    assert_eq!(reasons(filter(&claims, &node("a"))), [ERR_BIND_CONFLICT]);
}

#[test]
fn first_consumer_claims_of_a_provisioner_are_provisioned_on_the_node() {
    let f = Fixtures {
        claims: vec![claim(
            "data",
            serde_json::json!({"spec": {"storageClassName": "local-path"}}),
        )],
        classes: vec![class(
            "local-path",
            "WaitForFirstConsumer",
            "rancher.io/local-path",
        )],
        ..Default::default()
    };
    let claims = prefilter(&pod(&["data"]), &f).unwrap().unwrap();
    let on_b = filter(&claims, &node("b")).unwrap();
    assert!(on_b.static_bindings.is_empty());
    assert_eq!(on_b.provisions.len(), 1);
    assert_eq!(
        annotation(&on_b.provisions[0].metadata, ANN_SELECTED_NODE),
        Some("b")
    );

    // Once a node is selected, only that node fits.
    let selected = Fixtures {
        claims: vec![claim(
            "data",
            serde_json::json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "b"}},
                "spec": {"storageClassName": "local-path"}}),
        )],
        classes: f.classes.clone(),
        ..Default::default()
    };
    let claims = prefilter(&pod(&["data"]), &selected).unwrap().unwrap();
    assert!(filter(&claims, &node("b")).is_ok());
    assert_eq!(reasons(filter(&claims, &node("a"))), [ERR_BIND_CONFLICT]);
}

#[test]
fn allowed_topologies_limit_where_a_class_provisions() {
    let mut sc = (*class("zonal", "WaitForFirstConsumer", "example.com/zonal")).clone();
    sc.allowed_topologies = Some(vec![
        serde_json::from_value(serde_json::json!({"matchLabelExpressions": [
            {"key": "kubernetes.io/hostname", "values": ["a"]}]}))
        .unwrap(),
    ]);
    let f = Fixtures {
        claims: vec![claim(
            "data",
            serde_json::json!({"spec": {"storageClassName": "zonal"}}),
        )],
        classes: vec![Arc::new(sc)],
        ..Default::default()
    };
    let claims = prefilter(&pod(&["data"]), &f).unwrap().unwrap();
    assert!(filter(&claims, &node("a")).is_ok());
    assert_eq!(reasons(filter(&claims, &node("b"))), [ERR_BIND_CONFLICT]);
}

#[test]
fn assumed_bindings_hide_a_volume_from_the_next_pod() {
    let f = Fixtures {
        claims: vec![
            claim(
                "one",
                serde_json::json!({"spec": {"storageClassName": "manual"}}),
            ),
            claim(
                "two",
                serde_json::json!({"spec": {"storageClassName": "manual"}}),
            ),
        ],
        classes: vec![class(
            "manual",
            "WaitForFirstConsumer",
            NOT_SUPPORTED_PROVISIONER,
        )],
        volumes: vec![volume(
            "only",
            serde_json::json!({"spec": {"storageClassName": "manual"}}),
        )],
    };
    let first = prefilter(&pod(&["one"]), &f).unwrap().unwrap();
    let taken = filter(&first, &node("a")).unwrap();
    let mut assumed = Assumed::default();
    assumed.assume("pod-one", taken);
    // The second pod sees the volume claimed through the assumption.
    let overlay = Overlay {
        base: &f,
        assumed: &assumed,
    };
    let second = prefilter(&pod(&["two"]), &overlay).unwrap().unwrap();
    assert_eq!(reasons(filter(&second, &node("a"))), [ERR_BIND_CONFLICT]);
    assumed.forget("pod-one");
    let overlay = Overlay {
        base: &f,
        assumed: &assumed,
    };
    let second = prefilter(&pod(&["two"]), &overlay).unwrap().unwrap();
    assert!(filter(&second, &node("a")).is_ok());
}

/// [`View`] over fixtures instead of caches.
struct Overlay<'a> {
    base: &'a Fixtures,
    assumed: &'a Assumed,
}

impl Objects for Overlay<'_> {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.assumed
            .claim(namespace, name)
            .map(|c| Arc::new(c.clone()))
            .or_else(|| self.base.claim(namespace, name))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.assumed
            .volume(name)
            .map(|v| Arc::new(v.clone()))
            .or_else(|| self.base.volume(name))
    }

    fn volumes_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        self.base
            .volumes_of_class(class)
            .into_iter()
            .map(|v| match self.assumed.volume(&v.name_any()) {
                Some(a) => Arc::new(a.clone()),
                None => v,
            })
            .collect()
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.base.class(name)
    }
}
