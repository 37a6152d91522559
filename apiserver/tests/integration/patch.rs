//! Strategic merge patch, server-side apply and managedFields through the router, as
//! upstream's API server answers them.

use http::{Method, StatusCode};
use serde_json::{Value, json};
use testkit::{Backend, InProcess, Reply};

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const SMP: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

async fn server() -> InProcess {
    InProcess::start(Backend::Sqlite).await.unwrap()
}

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "web", "image": "nginx:1.25",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80}],
                }]},
            },
        },
    })
}

fn rv(v: &Value) -> &str {
    v["metadata"]["resourceVersion"].as_str().unwrap()
}

fn entries(v: &Value) -> Vec<Value> {
    v["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn entry<'a>(v: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
    v["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

async fn apply(s: &InProcess, path: &str, query: &str, body: &str) -> Reply {
    s.call(
        Method::PATCH,
        &format!("{path}?{query}"),
        Some(APPLY),
        body.to_string(),
    )
    .await
}

#[tokio::test]
async fn strategic_merge_patch() {
    let s = server().await;
    let r = s.post(DEPLOYS, deployment("web")).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let item = format!("{DEPLOYS}/web");

    // Lists with a merge key merge by it; new items come first, as upstream; $patch: delete.
    let r = s
        .patch(
            &item,
            SMP,
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "image": "busybox"},
                {"name": "web", "env": [{"name": "B", "$patch": "delete"}, {"name": "C", "value": "3"}]},
            ]}}}}),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    let containers = &v["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["name"], "sidecar");
    assert_eq!(containers[1]["image"], "nginx:1.25");
    assert_eq!(
        containers[1]["env"],
        json!([{"name": "C", "value": "3"}, {"name": "A", "value": "1"}])
    );
    // The patched object is defaulted like any other write.
    assert_eq!(containers[0]["imagePullPolicy"], "Always");

    // $setElementOrder and a map deleted by null, as kubectl apply sends them.
    let r = s
        .patch(
            &item,
            SMP,
            json!({
                "metadata": {"labels": {"app": null, "tier": "front"}},
                "spec": {"template": {"spec": {
                    "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
                    "containers": [{"name": "web", "image": "nginx:1.26"}],
                }}},
            }),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(v["metadata"]["labels"], json!({"tier": "front"}));
    let names: Vec<&str> = v["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["web", "sidecar"]);

    // $retainKeys: switching the strategy to Recreate drops rollingUpdate.
    let r = s
        .patch(
            &item,
            SMP,
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["spec"]["strategy"], json!({"type": "Recreate"}));

    // Primitive lists with patch strategy merge are sets: finalizers.
    let r = s
        .patch(&item, SMP, json!({"metadata": {"finalizers": ["a/b"]}}))
        .await;
    assert_eq!(r.json()["metadata"]["finalizers"], json!(["a/b"]));
    let r = s
        .patch(
            &item,
            SMP,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/b"]}}),
        )
        .await;
    // (Upstream's Go types drop the emptied list; k8s-openapi's keep it empty.)
    let finalizers = r.json()["metadata"]["finalizers"].clone();
    assert!(
        finalizers.is_null() || finalizers == json!([]),
        "{finalizers}"
    );

    // Malformed directives are 400s; lists of lists 422.
    let r = s
        .patch(
            &item,
            SMP,
            json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["message"], "invalid patch format of retainKeys");
    let r = s
        .patch(&item, SMP, json!({"metadata": {"$setElementOrder": []}}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = s.patch(&item, SMP, json!(["not", "an", "object"])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Unknown fields: a warning, or 400 with fieldValidation=Strict... as for other patches.
    let r = s
        .patch(
            &format!("{item}?fieldValidation=Strict"),
            SMP,
            json!({"spec": {"bogus": 1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Patching the name is refused as upstream does.
    let r = s
        .patch(&item, SMP, json!({"metadata": {"name": "other"}}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "the name of the object (other) does not match the name on the URL (web)"
    );

    // The scale subresource takes strategic merge patches too.
    let r = s
        .patch(
            &format!("{item}/scale"),
            SMP,
            json!({"spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["spec"]["replicas"], 4);
}

#[tokio::test]
async fn patch_options_are_validated() {
    let s = server().await;
    s.post(DEPLOYS, deployment("web")).await;
    let item = format!("{DEPLOYS}/web");
    let r = s
        .patch(
            &format!("{item}?force=true"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    let r = apply(&s, &item, "force=true", "{}").await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let long = "m".repeat(129);
    let r = s
        .patch(
            &format!("{item}?fieldManager={long}"),
            "application/merge-patch+json",
            json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let r = s
        .call(
            Method::POST,
            &format!("{DEPLOYS}?fieldManager={long}"),
            Some("application/json"),
            deployment("x").to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long")
    );
    let r = s.patch(&item, "text/plain", json!({})).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn writes_record_managed_fields() {
    let s = server().await;
    let r = s
        .call(
            Method::POST,
            &format!("{DEPLOYS}?fieldManager=kubectl-client-side-apply"),
            Some("application/json"),
            deployment("web").to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let v = r.json();
    let e = entries(&v);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["manager"], "kubectl-client-side-apply");
    assert_eq!(e[0]["operation"], "Update");
    assert_eq!(e[0]["apiVersion"], "apps/v1");
    assert_eq!(e[0]["fieldsType"], "FieldsV1");
    assert!(e[0]["time"].is_string());
    let f = &e[0]["fieldsV1"];
    // As upstream: no `.` for Go's non-pointer structs, defaulted fields owned too.
    assert_eq!(f["f:metadata"], json!({"f:labels": {".": {}, "f:app": {}}}));
    assert!(f["f:spec"].get(".").is_none());
    assert!(
        f["f:spec"]["f:template"]["f:spec"]
            .get("f:dnsPolicy")
            .is_some()
    );
    let c = &f["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
    assert_eq!(c["."], json!({}));
    assert_eq!(c["f:resources"], json!({}));
    assert!(
        c["f:ports"]
            .get("k:{\"containerPort\":80,\"protocol\":\"TCP\"}")
            .is_some()
    );

    // An update by another manager takes the fields it changes.
    let item = format!("{DEPLOYS}/web");
    let r = s
        .patch(
            &format!("{item}?fieldManager=kubectl-edit"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    let v = r.json();
    assert_eq!(
        entry(&v, "kubectl-edit", "Update").unwrap()["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert!(
        entry(&v, "kubectl-client-side-apply", "Update").unwrap()["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none()
    );

    // A patch that changes nothing is a no-op: same resourceVersion, same times.
    let before = s.get(&item).await.json();
    let r = s
        .patch(
            &format!("{item}?fieldManager=someone-else"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await;
    let after = r.json();
    assert_eq!(rv(&after), rv(&before));
    assert_eq!(
        after["metadata"]["managedFields"],
        before["metadata"]["managedFields"]
    );

    // The status subresource records its own entry.
    let mut status = before.clone();
    status["status"] = json!({"replicas": 3, "observedGeneration": 2});
    let r = s
        .call(
            Method::PUT,
            &format!("{item}/status?fieldManager=kube-controller-manager"),
            Some("application/json"),
            status.to_string(),
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    let e = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["manager"] == "kube-controller-manager")
        .unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(
        e["fieldsV1"],
        json!({"f:status": {"f:observedGeneration": {}, "f:replicas": {}}})
    );

    // Scale: the parent's replicas, owned by the scaler through the scale subresource.
    let r = s
        .patch(
            &format!("{item}/scale?fieldManager=kubectl-scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 5}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = s.get(&item).await.json();
    let e = entry(&v, "kubectl-scale", "Update").unwrap();
    assert_eq!(e["subresource"], "scale");
    assert_eq!(e["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert!(entry(&v, "kubectl-edit", "Update").is_none());

    // managedFields: [] clears them.
    let mut cleared = v.clone();
    cleared["metadata"]["managedFields"] = json!([]);
    cleared["metadata"]["labels"]["x"] = "y".into();
    let r = s.put(&item, cleared).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.json()["metadata"].get("managedFields").is_none());
}

const DEPLOY_YAML: &str = "
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        env:
        - {name: A, value: '1'}
        - {name: B, value: '2'}
";

#[tokio::test]
async fn server_side_apply() {
    let s = server().await;
    let item = format!("{DEPLOYS}/web");
    // Apply to a missing object creates it.
    let r = apply(&s, &item, "fieldManager=kubectl&force=false", DEPLOY_YAML).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(v["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirst");
    let e = entries(&v);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["manager"], "kubectl");
    assert_eq!(e[0]["operation"], "Apply");
    assert_eq!(
        e[0]["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {}, "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:env": {
                            "k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}},
                            "k:{\"name\":\"B\"}": {".": {}, "f:name": {}, "f:value": {}},
                        },
                    }}},
                },
            },
        })
    );
    let created_rv = rv(&v).to_string();

    // Applying the same again is a no-op.
    let r = apply(&s, &item, "fieldManager=kubectl", DEPLOY_YAML).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(rv(&r.json()), created_rv);

    // JSON is YAML: another manager applies the same values and shares the fields.
    let mut other = serde_yaml::from_str::<Value>(DEPLOY_YAML).unwrap();
    let r = apply(&s, &item, "fieldManager=other", &other.to_string()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(entries(&r.json()).len(), 2);

    // A different value owned by someone else is a conflict.
    other["spec"]["replicas"] = 3.into();
    let r = apply(
        &s,
        &item,
        "fieldManager=other&force=false",
        &other.to_string(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let status = r.json();
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
    );
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"kubectl\"", "field": ".spec.replicas"}])
    );

    // Two conflicts, one with an updater.
    let r = s
        .patch(
            &format!("{item}?fieldManager=kubectl-edit"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"team": "a"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    other["metadata"]["labels"]["team"] = "b".into();
    let r = apply(&s, &item, "fieldManager=other", &other.to_string()).await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(
        r.json()["message"],
        "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\nconflicts with \"kubectl-edit\" using apps/v1:\n- .metadata.labels.team"
    );

    // Forced: the fields move to the forcing manager.
    let r = apply(
        &s,
        &item,
        "fieldManager=other&force=true",
        &other.to_string(),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(v["spec"]["replicas"], 3);
    assert!(
        entry(&v, "kubectl", "Apply").unwrap()["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none()
    );
    assert!(entry(&v, "kubectl-edit", "Update").is_none());
    assert!(
        entry(&v, "other", "Apply").unwrap()["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_some()
    );

    // kubectl stops applying env B (and replicas): B stays while "other" still applies it...
    let without_b = DEPLOY_YAML
        .replace("        - {name: B, value: '2'}\n", "")
        .replace("  replicas: 2\n", "");
    let r = apply(&s, &item, "fieldManager=kubectl", &without_b).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let env = &r.json()["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env.as_array().unwrap().len(), 2);
    // ...and goes once nobody applies it.
    other["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "A", "value": "1"}]);
    let r = apply(&s, &item, "fieldManager=other", &other.to_string()).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let env = &r.json()["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env, &json!([{"name": "A", "value": "1"}]));

    // Dry run changes nothing.
    let before = s.get(&item).await.json();
    other["spec"]["replicas"] = 9.into();
    let r = apply(
        &s,
        &item,
        "fieldManager=other&dryRun=All",
        &other.to_string(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["spec"]["replicas"], 9);
    assert_eq!(rv(&r.json()), rv(&before));
    assert_eq!(s.get(&item).await.json(), before);
}

#[tokio::test]
async fn apply_lists_and_maps_by_type() {
    let s = server().await;
    let item = "/api/v1/namespaces/default/pods/p";
    let pod = "
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  nodeSelector: {disk: ssd}
  tolerations: [{key: a, operator: Exists}]
  containers:
  - name: c
    image: busybox
    args: [sleep, '1']
    ports: [{containerPort: 80}]
";
    let r = apply(&s, item, "fieldManager=a", pod).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    let f = &entry(&v, "a", "Apply").unwrap()["fieldsV1"]["f:spec"];
    // Atomic map, atomic lists, and a list keyed by containerPort and protocol (defaulted).
    assert_eq!(f["f:nodeSelector"], json!({}));
    assert_eq!(f["f:tolerations"], json!({}));
    let c = &f["f:containers"]["k:{\"name\":\"c\"}"];
    assert_eq!(c["f:args"], json!({}));
    assert!(
        c["f:ports"]
            .get("k:{\"containerPort\":80,\"protocol\":\"TCP\"}")
            .is_some()
    );
    // Another applier replacing an atomic list conflicts on the whole list.
    let r = apply(
        &s,
        item,
        "fieldManager=b",
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"tolerations\":[]}}",
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    assert_eq!(
        r.json()["message"],
        "Apply failed with 1 conflict: conflict with \"a\": .spec.tolerations"
    );
}

#[tokio::test]
async fn apply_errors() {
    let s = server().await;
    let item = format!("{DEPLOYS}/web");
    let r = apply(
        &s,
        &item,
        "fieldManager=m",
        &DEPLOY_YAML.replace("apps/v1", "apps/v1beta1"),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "invalid object type: apps/v1beta1, Kind=Deployment"
    );
    let r = apply(
        &s,
        &item,
        "fieldManager=m",
        &DEPLOY_YAML.replace("  replicas: 2", "  replicas: 2\n  bogus: 1"),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r.json()["message"],
        "failed to create typed patch object (/web; apps/v1, Kind=Deployment): .spec.bogus: field not declared in schema"
    );
    let r = apply(
        &s,
        &format!("{DEPLOYS}/other"),
        "fieldManager=m",
        DEPLOY_YAML,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "the name of the object (web) does not match the name on the URL (other)"
    );
    let r = apply(&s, &format!("{item}/status"), "fieldManager=m", DEPLOY_YAML).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = apply(&s, &item, "fieldManager=m", "- a\n- b\n").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = apply(&s, &item, "fieldManager=m", "key: [unclosed\n").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Nothing was created by the failures.
    assert_eq!(s.get(&item).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn apply_to_the_status_subresource() {
    let s = server().await;
    let item = format!("{DEPLOYS}/web");
    let r = apply(&s, &item, "fieldManager=kubectl", DEPLOY_YAML).await;
    assert_eq!(r.status, StatusCode::CREATED);
    // Status through the main resource is not owned, and not stored.
    let with_status = format!("{DEPLOY_YAML}status:\n  replicas: 7\n");
    let r = apply(&s, &item, "fieldManager=kubectl", &with_status).await;
    let v = r.json();
    assert!(
        v.get("status")
            .is_none_or(|st| st.get("replicas").is_none())
    );
    assert!(
        entry(&v, "kubectl", "Apply").unwrap()["fieldsV1"]
            .get("f:status")
            .is_none()
    );
    // Through the status subresource: only the status is taken.
    let status = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 9}\nstatus: {replicas: 7}\n";
    let r = apply(
        &s,
        &format!("{item}/status"),
        "fieldManager=controller",
        status,
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(v["status"]["replicas"], 7);
    assert_eq!(v["spec"]["replicas"], 2);
    let e = entry(&v, "controller", "Apply").unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(e["fieldsV1"], json!({"f:status": {"f:replicas": {}}}));
}

#[tokio::test]
async fn apply_to_custom_resources_uses_the_crd_schema() {
    let s = server().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer"},
                        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "required": ["name"], "properties": {
                                "name": {"type": "string"}, "port": {"type": "integer"}}}},
                        "tags": {"type": "array", "x-kubernetes-list-type": "set",
                            "items": {"type": "string"}},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    }},
                }}}}],
        },
    });
    let r = s
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let item = "/apis/example.com/v1/namespaces/default/widgets/w";
    testkit::eventually(
        std::time::Duration::from_secs(5),
        "the CRD to be served",
        || async { (s.get("/apis/example.com/v1").await.status == StatusCode::OK).then_some(()) },
    )
    .await;
    let widget = |ports: &str, tags: &str| {
        format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w}}\nspec:\n  size: 1\n  ports: {ports}\n  tags: {tags}\n  extra: {{free: {{form: 1}}}}\n"
        )
    };
    let r = apply(
        &s,
        item,
        "fieldManager=a",
        &widget("[{name: http, port: 80}]", "[x]"),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(
        entry(&v, "a", "Apply").unwrap()["fieldsV1"],
        json!({"f:spec": {
            "f:size": {},
            "f:ports": {"k:{\"name\":\"http\"}": {".": {}, "f:name": {}, "f:port": {}}},
            "f:tags": {"v:\"x\"": {}},
            // Keys a schema does not declare are members themselves, as upstream.
            "f:extra": {"f:free": {".": {}, "f:form": {}}},
        }})
    );
    // Another manager adds a port and a tag: keyed items merge, sets union.
    let r = apply(
        &s,
        item,
        "fieldManager=b",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec:\n  ports: [{name: https, port: 443}]\n  tags: [y]\n",
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(
        v["spec"]["ports"],
        json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}])
    );
    assert_eq!(v["spec"]["tags"], json!(["x", "y"]));
    // A field the schema does not declare is refused, as upstream does.
    let r = apply(
        &s,
        item,
        "fieldManager=a",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {bogus: 1}\n",
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        r.json()["message"],
        "failed to create typed patch object (/w; example.com/v1, Kind=Widget): .spec.bogus: field not declared in schema"
    );
    // Strategic merge patch is not served for custom resources.
    let r = s.patch(item, SMP, json!({"spec": {"size": 2}})).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}
