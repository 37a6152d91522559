//! Custom resources served from CustomResourceDefinitions, in-process: the CRD controller
//! (names, conditions, serving within a second, cleanup on delete), and custom resources' REST
//! semantics (schema validation, defaulting, pruning, subresources, Table columns, versions).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use testkit::{Backend, InProcess, Reply, eventually};
use tower::ServiceExt;

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const CTS: &str = "/apis/stable.example.com/v1/namespaces/default/crontabs";

async fn server() -> InProcess {
    InProcess::start(Backend::Sqlite).await.unwrap()
}

fn crontab_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com",
            "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab",
                      "shortNames": ["ct"], "categories": ["all", "crons"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": [
                    {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Image", "type": "string", "jsonPath": ".spec.image", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "selectableFields": [{"jsonPath": ".spec.image"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["cronSpec"],
                            "properties": {
                                "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
                                "image": {"type": "string", "default": "busybox"},
                                "replicas": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                                "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            },
                        },
                        "status": {"type": "object", "properties": {
                            "replicas": {"type": "integer"},
                            "selector": {"type": "string"},
                        }},
                    },
                }},
            }],
        },
    })
}

fn crontab(name: &str) -> Value {
    json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
           "metadata": {"name": name, "labels": {"app": "cron"}},
           "spec": {"cronSpec": "* * * * */5", "replicas": 2}})
}

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// Sends a request with an `Accept` header.
async fn get_as(s: &InProcess, path: &str, accept: &str) -> Reply {
    get_on(&s.router, path, accept).await
}

async fn get_on(router: &axum::Router, path: &str, accept: &str) -> Reply {
    let mut req = http::Request::get(path)
        .header("accept", accept)
        .body(axum::body::Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(minik8s_apiserver::auth::ClientCertIdentity(testkit::admin()));
    let resp = router.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// Creates `crd` and waits (at most a second) until its first version is in discovery.
async fn install(s: &InProcess, crd: Value) -> Value {
    let r = s.post(CRDS, crd.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r));
    let group = crd["spec"]["group"].as_str().unwrap().to_string();
    let version = crd["spec"]["versions"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let plural = crd["spec"]["names"]["plural"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(1), "the CRD to be served", || {
        let path = format!("/apis/{group}/{version}");
        let plural = plural.clone();
        async move {
            let r = s.get(&path).await;
            (r.status == StatusCode::OK
                && r.json()["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["name"] == plural.as_str()))
            .then_some(())
        }
    })
    .await;
    s.get(&format!(
        "{CRDS}/{}",
        crd["metadata"]["name"].as_str().unwrap()
    ))
    .await
    .json()
}

fn condition<'a>(crd: &'a Value, type_: &str) -> &'a Value {
    crd["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn crd_is_served_with_conditions_and_discovery() {
    let s = server().await;
    let crd = install(&s, crontab_crd()).await;
    let names = condition(&crd, "NamesAccepted");
    assert_eq!(
        (&names["status"], &names["reason"], &names["message"]),
        (
            &json!("True"),
            &json!("NoConflicts"),
            &json!("no conflicts found")
        )
    );
    let est = condition(&crd, "Established");
    assert_eq!(
        (&est["status"], &est["reason"], &est["message"]),
        (
            &json!("True"),
            &json!("InitialNamesAccepted"),
            &json!("the initial names have been accepted")
        )
    );
    assert!(est["lastTransitionTime"].is_string());
    assert_eq!(crd["status"]["acceptedNames"]["plural"], "crontabs");
    assert_eq!(crd["status"]["acceptedNames"]["listKind"], "CronTabList");
    assert_eq!(crd["status"]["acceptedNames"]["shortNames"], json!(["ct"]));
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));

    // Legacy discovery: group, group version with subresources.
    let group = s.get("/apis/stable.example.com").await.json();
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "stable.example.com/v1"
    );
    let v1 = s.get("/apis/stable.example.com/v1").await.json();
    let res = v1["resources"].as_array().unwrap();
    let ct = res.iter().find(|r| r["name"] == "crontabs").unwrap();
    assert_eq!(ct["kind"], "CronTab");
    assert_eq!(ct["namespaced"], true);
    assert_eq!(ct["singularName"], "crontab");
    assert_eq!(ct["shortNames"], json!(["ct"]));
    assert_eq!(ct["categories"], json!(["all", "crons"]));
    assert_eq!(
        ct["verbs"],
        json!([
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch"
        ])
    );
    assert!(res.iter().any(|r| r["name"] == "crontabs/status"));
    let scale = res.iter().find(|r| r["name"] == "crontabs/scale").unwrap();
    assert_eq!(
        (&scale["group"], &scale["kind"]),
        (&json!("autoscaling"), &json!("Scale"))
    );
    assert!(
        s.get("/apis").await.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "stable.example.com")
    );

    // Aggregated discovery, as kubectl reads it: short names and categories (`get all`).
    let agg = get_as(&s, "/apis", AGGREGATED).await.json();
    let g = agg["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "stable.example.com")
        .expect("the group in aggregated discovery");
    let r = &g["versions"][0]["resources"][0];
    assert_eq!(r["resource"], "crontabs");
    assert_eq!(r["scope"], "Namespaced");
    assert_eq!(r["shortNames"], json!(["ct"]));
    assert_eq!(r["categories"], json!(["all", "crons"]));
    assert_eq!(r["responseKind"]["kind"], "CronTab");
    let subs: Vec<&str> = r["subresources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subresource"].as_str().unwrap())
        .collect();
    assert_eq!(subs, ["status", "scale"]);

    // OpenAPI v3: the schema, and patch types without strategic merge patch.
    let index = s.get("/openapi/v3").await.json();
    assert!(index["paths"]["apis/stable.example.com/v1"].is_object());
    let doc = s.get("/openapi/v3/apis/stable.example.com/v1").await.json();
    let schema = &doc["components"]["schemas"]["com.example.stable.v1.CronTab"];
    assert_eq!(
        schema["properties"]["spec"]["properties"]["replicas"]["maximum"],
        10
    );
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
    );
    let patch = &doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]
        ["patch"]["requestBody"]["content"];
    assert!(patch["application/merge-patch+json"].is_object());
    assert!(patch["application/strategic-merge-patch+json"].is_null());
}

#[tokio::test]
async fn crud_list_and_watch() {
    let s = server().await;
    install(&s, crontab_crd()).await;
    let r = s.post(CTS, crontab("a")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r));
    let a = r.json();
    assert_eq!(a["apiVersion"], "stable.example.com/v1");
    assert_eq!(a["kind"], "CronTab");
    assert_eq!(a["metadata"]["generation"], 1);
    assert_eq!(a["metadata"]["namespace"], "default");
    assert!(a["metadata"]["uid"].is_string());
    // Defaulted from the schema.
    assert_eq!(a["spec"]["image"], "busybox");
    assert_eq!(s.get(&format!("{CTS}/a")).await.json(), a);
    // Already exists, worded as upstream.
    let dup = s.post(CTS, crontab("a")).await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    assert_eq!(
        dup.json()["message"],
        "crontabs.stable.example.com \"a\" already exists"
    );
    let mut b = crontab("b");
    b["metadata"]["labels"]["app"] = json!("other");
    b["spec"]["image"] = json!("nginx");
    assert_eq!(s.post(CTS, b).await.status, StatusCode::CREATED);

    // Lists with label and field selectors, across namespaces too.
    let list = s.get(CTS).await.json();
    assert_eq!(list["kind"], "CronTabList");
    assert_eq!(list["apiVersion"], "stable.example.com/v1");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let names = |v: Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(
            s.get(&format!("{CTS}?labelSelector=app%3Dcron"))
                .await
                .json()
        ),
        ["a"]
    );
    assert_eq!(
        names(
            s.get(&format!("{CTS}?fieldSelector=metadata.name%3Db"))
                .await
                .json()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            s.get(
                "/apis/stable.example.com/v1/crontabs?fieldSelector=metadata.namespace%3Ddefault"
            )
            .await
            .json()
        ),
        ["a", "b"]
    );
    // selectableFields of the version.
    assert_eq!(
        names(
            s.get(&format!("{CTS}?fieldSelector=spec.image%3Dnginx"))
                .await
                .json()
        ),
        ["b"]
    );
    let bad = s
        .get(&format!("{CTS}?fieldSelector=spec.cronSpec%3Dx"))
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);

    // PUT needs a resourceVersion, as upstream.
    let mut upd = s.get(&format!("{CTS}/a")).await.json();
    upd["metadata"]["resourceVersion"] = Value::Null;
    let r = s.put(&format!("{CTS}/a"), upd).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", text(&r));
    assert_eq!(
        r.json()["details"]["causes"][0]["message"],
        "Invalid value: 0x0: must be specified for an update"
    );
    // A spec change bumps generation; a label change does not.
    let mut upd = s.get(&format!("{CTS}/a")).await.json();
    upd["spec"]["replicas"] = json!(3);
    let r = s.put(&format!("{CTS}/a"), upd).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = s
        .patch(
            &format!("{CTS}/a"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    assert_eq!(r.json()["metadata"]["generation"], 2);
    let r = s
        .patch(
            &format!("{CTS}/a"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    assert_eq!(r.json()["metadata"]["generation"], 3);
    // Strategic merge patch is not for custom resources.
    let r = s
        .patch(
            &format!("{CTS}/a"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        r.json()["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    // Bodies need their kind.
    let r = s
        .post(
            CTS,
            json!({"metadata": {"name": "nokind"}, "spec": {"cronSpec": "* * * * *"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        text(&r).contains("Object 'Kind' is missing"),
        "{}",
        text(&r)
    );
    // Names are DNS subdomains.
    let r = s.post(CTS, crontab("Bad_Name")).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json()["details"]["causes"][0]["field"], "metadata.name");

    // kube-rs: list, then watch from the list's resourceVersion.
    let gvk = GroupVersionKind::gvk("stable.example.com", "v1", "CronTab");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "crontabs");
    let api: Api<DynamicObject> = Api::namespaced_with(s.client(), "default", &ar);
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 2);
    let rv = listed.metadata.resource_version.clone().unwrap();
    let mut events = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let r = s.delete(&format!("{CTS}/b")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["status"], "Success");
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("b")),
        other => panic!("expected DELETED, got {other:?}"),
    }
    assert_eq!(s.post(CTS, crontab("c")).await.status, StatusCode::CREATED);
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("c"));
            assert_eq!(o.data["spec"]["image"], "busybox");
        }
        other => panic!("expected ADDED, got {other:?}"),
    }
    // A custom resource in a namespace that does not exist is refused.
    let r = s
        .post(
            "/apis/stable.example.com/v1/namespaces/nope/crontabs",
            crontab("x"),
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn schema_validation_defaulting_and_pruning() {
    let s = server().await;
    install(&s, crontab_crd()).await;
    let mut bad = crontab("bad");
    bad["spec"] = json!({"cronSpec": "never", "replicas": "many", "mode": "Turbo"});
    let r = s.post(CTS, bad).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", text(&r));
    let st = r.json();
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(st["details"]["kind"], "CronTab");
    assert_eq!(st["details"]["group"], "stable.example.com");
    let causes: Vec<(String, String, String)> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        causes,
        vec![
            (
                "spec.cronSpec".into(),
                "FieldValueInvalid".into(),
                "Invalid value: \"never\": spec.cronSpec in body should match '^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$'".into()
            ),
            (
                "spec.mode".into(),
                "FieldValueNotSupported".into(),
                "Unsupported value: \"Turbo\": supported values: \"Fast\", \"Slow\"".into()
            ),
            (
                "spec.replicas".into(),
                "FieldValueTypeInvalid".into(),
                "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".into()
            ),
            // The scale subresource's own check of its path, as upstream's.
            (
                ".spec.replicas".into(),
                "FieldValueInvalid".into(),
                "Invalid value: 0: .spec.replicas accessor error: many is of the type string, expected int64".into()
            ),
        ]
    );
    assert!(
        st["message"].as_str().unwrap().starts_with(
            "CronTab.stable.example.com \"bad\" is invalid: [spec.cronSpec: Invalid value: \"never\""
        ),
        "{}",
        st["message"]
    );
    let mut high = crontab("high");
    high["spec"]["replicas"] = json!(11);
    let r = s.post(CTS, high).await;
    assert_eq!(
        r.json()["details"]["causes"][0]["message"],
        "Invalid value: 11: spec.replicas in body should be less than or equal to 10"
    );
    let r = s
        .post(
            CTS,
            json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
                               "metadata": {"name": "nospec"}, "spec": {}}),
        )
        .await;
    assert_eq!(r.json()["details"]["causes"][0]["field"], "spec.cronSpec");
    assert_eq!(
        r.json()["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );

    // Unknown fields are pruned (a warning each); preserve-unknown-fields keeps them.
    let mut extra = crontab("extra");
    extra["spec"]["bogus"] = json!(1);
    extra["spec"]["extra"] = json!({"anything": {"goes": [1, 2]}});
    extra["topLevel"] = json!("x");
    extra["metadata"]["junk"] = json!(true);
    let r = s.post(CTS, extra.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r));
    let warnings: Vec<String> = r
        .headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        warnings,
        [
            "299 - \"unknown field \\\"metadata.junk\\\"\"",
            "299 - \"unknown field \\\"spec.bogus\\\"\"",
            "299 - \"unknown field \\\"topLevel\\\"\"",
        ]
    );
    let created = r.json();
    assert!(created["spec"].get("bogus").is_none());
    assert!(created.get("topLevel").is_none());
    assert_eq!(
        created["spec"]["extra"],
        json!({"anything": {"goes": [1, 2]}})
    );
    // fieldValidation=Strict (what kubectl sends) refuses them.
    extra["metadata"]["name"] = json!("extra2");
    let r = s
        .call(
            Method::POST,
            &format!("{CTS}?fieldValidation=Strict"),
            Some("application/json"),
            extra.to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "CronTab in version \"v1\" cannot be handled as a CronTab: strict decoding error: unknown field \"metadata.junk\", unknown field \"spec.bogus\", unknown field \"topLevel\""
    );
    // Patches are pruned too, and defaults fill what a patch removes.
    let r = s
        .patch(
            &format!("{CTS}/extra"),
            "application/merge-patch+json",
            json!({"spec": {"image": null, "junk": 1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let patched = r.json();
    assert_eq!(patched["spec"]["image"], "busybox");
    assert!(patched["spec"].get("junk").is_none());
    // A value that may not be null is dropped, then defaulted.
    let mut nulls = crontab("nulls");
    nulls["spec"]["replicas"] = Value::Null;
    let r = s.post(CTS, nulls).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r));
    assert_eq!(r.json()["spec"]["replicas"], 1);
    // YAML bodies work; protobuf is not for custom resources.
    let yaml = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: fromyaml\nspec:\n  cronSpec: '* * * * *'\n";
    let r = s
        .call(Method::POST, CTS, Some("application/yaml"), yaml)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r));
    let r = s
        .call(
            Method::POST,
            CTS,
            Some("application/vnd.kubernetes.protobuf"),
            Bytes::from_static(b"k8s\0"),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn status_and_scale_subresources() {
    let s = server().await;
    install(&s, crontab_crd()).await;
    let mut body = crontab("a");
    body["status"] = json!({"replicas": 7});
    let created = s.post(CTS, body).await.json();
    // Status is dropped on create and ignored by updates of the main resource.
    assert!(created.get("status").is_none(), "{created}");
    let mut upd = created.clone();
    upd["status"] = json!({"replicas": 5});
    let r = s.put(&format!("{CTS}/a"), upd).await.json();
    assert!(r.get("status").is_none());
    assert_eq!(r["metadata"]["generation"], 1);
    // The status subresource changes status only.
    let mut st = s.get(&format!("{CTS}/a")).await.json();
    st["status"] = json!({"replicas": 2, "selector": "app=cron"});
    st["spec"]["replicas"] = json!(9);
    st["metadata"]["labels"] = json!({"changed": "yes"});
    let r = s.put(&format!("{CTS}/a/status"), st).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let r = r.json();
    assert_eq!(r["status"]["replicas"], 2);
    assert_eq!(r["spec"]["replicas"], 2);
    assert_eq!(r["metadata"]["labels"], json!({"app": "cron"}));
    assert_eq!(r["metadata"]["generation"], 1);
    let r = s
        .patch(
            &format!("{CTS}/a/status"),
            "application/merge-patch+json",
            json!({"status": {"replicas": "x"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json()["details"]["causes"][0]["field"], "status.replicas");
    assert_eq!(
        s.get(&format!("{CTS}/a/status")).await.json()["status"]["replicas"],
        2
    );

    // Scale reads and writes the declared paths.
    let scale = s.get(&format!("{CTS}/a/scale")).await.json();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=cron");
    let r = s
        .patch(
            &format!("{CTS}/a/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    assert_eq!(r.json()["spec"]["replicas"], 4);
    let a = s.get(&format!("{CTS}/a")).await.json();
    assert_eq!(a["spec"]["replicas"], 4);
    assert_eq!(a["metadata"]["generation"], 2);
    let mut sc = s.get(&format!("{CTS}/a/scale")).await.json();
    sc["spec"]["replicas"] = json!(6);
    let r = s.put(&format!("{CTS}/a/scale"), sc).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    assert_eq!(
        s.get(&format!("{CTS}/a")).await.json()["spec"]["replicas"],
        6
    );
    // The schema still applies to what scale writes.
    let r = s
        .patch(
            &format!("{CTS}/a/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 50}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", text(&r));
}

#[tokio::test]
async fn printer_columns_in_tables() {
    let s = server().await;
    install(&s, crontab_crd()).await;
    s.post(CTS, crontab("a")).await;
    let t = get_as(&s, CTS, TABLE).await;
    assert_eq!(t.headers["content-type"], TABLE);
    let t = t.json();
    assert_eq!(t["kind"], "Table");
    let cols: Vec<(&str, &str, i64)> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cols,
        [
            ("Name", "string", 0),
            ("Spec", "string", 0),
            ("Replicas", "integer", 0),
            ("Image", "string", 1),
            ("Age", "date", 0)
        ]
    );
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[0], "a");
    assert_eq!(cells[1], "* * * * */5");
    assert_eq!(cells[2], 2);
    assert_eq!(cells[3], "busybox");
    assert!(cells[4].as_str().unwrap().ends_with('s'), "{cells}");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    // One object as a Table too.
    let one = get_as(&s, &format!("{CTS}/a"), TABLE).await.json();
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn cluster_scoped_crd_and_two_versions() {
    let s = server().await;
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string", "default": "blue"}}}}}});
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {"group": "example.org", "scope": "Cluster",
                 "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [
                     {"name": "v1beta1", "served": true, "storage": false, "schema": schema},
                     {"name": "v1", "served": true, "storage": true, "schema": schema},
                 ]},
    });
    let crd = install(&s, crd).await;
    assert_eq!(crd["status"]["acceptedNames"]["singular"], "widget");
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    // v1 is preferred over v1beta1.
    let g = s.get("/apis/example.org").await.json();
    assert_eq!(g["preferredVersion"]["version"], "v1");
    assert_eq!(
        g["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["v1", "v1beta1"]
    );
    let agg = get_as(&s, "/apis", AGGREGATED).await.json();
    let grp = agg["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "example.org")
        .unwrap();
    assert_eq!(grp["versions"][0]["version"], "v1");
    assert_eq!(grp["versions"][0]["resources"][0]["scope"], "Cluster");

    // Created through v1beta1, stored as v1, read through either.
    let r = s
        .post(
            "/apis/example.org/v1beta1/widgets",
            json!({"apiVersion": "example.org/v1beta1", "kind": "Widget",
              "metadata": {"name": "w"}, "spec": {"size": 3}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r));
    assert_eq!(r.json()["apiVersion"], "example.org/v1beta1");
    let stored = s
        .server
        .store
        .get("/registry/example.org/widgets/w")
        .await
        .unwrap()
        .expect("stored under the group and plural");
    let stored: Value = serde_json::from_slice(&stored.value).unwrap();
    assert_eq!(stored["apiVersion"], "example.org/v1");
    let v1 = s.get("/apis/example.org/v1/widgets/w").await.json();
    assert_eq!(v1["apiVersion"], "example.org/v1");
    assert_eq!(v1["spec"], json!({"size": 3, "color": "blue"}));
    let list = s.get("/apis/example.org/v1beta1/widgets").await.json();
    assert_eq!(list["apiVersion"], "example.org/v1beta1");
    assert_eq!(list["items"][0]["apiVersion"], "example.org/v1beta1");
    // A body of the other version is refused, as upstream does.
    let r = s
        .post("/apis/example.org/v1/widgets", json!({"apiVersion": "example.org/v1beta1", "kind": "Widget", "metadata": {"name": "x"}}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Cluster-scoped: no namespaced paths.
    assert_eq!(
        s.get("/apis/example.org/v1/namespaces/default/widgets")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Dropping a version from serving stops serving it.
    let mut crd = s.get(&format!("{CRDS}/widgets.example.org")).await.json();
    crd["spec"]["versions"][0]["served"] = json!(false);
    let r = s.put(&format!("{CRDS}/widgets.example.org"), crd).await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    eventually(Duration::from_secs(5), "v1beta1 to go", || async {
        (s.get("/apis/example.org/v1beta1/widgets").await.status == StatusCode::NOT_FOUND)
            .then_some(())
    })
    .await;
    assert_eq!(
        s.get("/apis/example.org/v1/widgets/w").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn name_conflicts_are_not_accepted() {
    let s = server().await;
    install(&s, crontab_crd()).await;
    // Same group, another plural, the same kind: refused with upstream's condition.
    let mut other = crontab_crd();
    other["metadata"]["name"] = json!("crontabz.stable.example.com");
    other["spec"]["names"] =
        json!({"plural": "crontabz", "kind": "CronTab", "listKind": "OtherList"});
    assert_eq!(s.post(CRDS, other).await.status, StatusCode::CREATED);
    let crd = eventually(
        Duration::from_secs(1),
        "a NamesAccepted condition",
        || async {
            let c = s
                .get(&format!("{CRDS}/crontabz.stable.example.com"))
                .await
                .json();
            (!condition(&c, "NamesAccepted").is_null()).then_some(c)
        },
    )
    .await;
    let na = condition(&crd, "NamesAccepted");
    assert_eq!(
        (&na["status"], &na["reason"], &na["message"]),
        (
            &json!("False"),
            &json!("KindConflict"),
            &json!("\"CronTab\" is already in use")
        )
    );
    let est = condition(&crd, "Established");
    assert_eq!(
        (&est["status"], &est["reason"]),
        (&json!("False"), &json!("NotAccepted"))
    );
    assert_eq!(
        s.get("/apis/stable.example.com/v1/crontabz").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn crd_delete_removes_objects_and_stops_serving() {
    let s = server().await;
    install(&s, crontab_crd()).await;
    s.post(CTS, crontab("a")).await;
    let mut held = crontab("held");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    assert_eq!(s.post(CTS, held).await.status, StatusCode::CREATED);

    // A watch open across the deletion sees the objects go, then ends with the serving.
    let gvk = GroupVersionKind::gvk("stable.example.com", "v1", "CronTab");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "crontabs");
    let api: Api<DynamicObject> = Api::namespaced_with(s.client(), "default", &ar);
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = api
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .unwrap()
        .boxed();

    let r = s
        .delete(&format!("{CRDS}/crontabs.stable.example.com"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    let crd = r.json();
    assert!(crd["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        crd["metadata"]["finalizers"],
        json!(["customresourcecleanup.apiextensions.k8s.io"])
    );
    assert_eq!(condition(&crd, "Terminating")["status"], "True");
    // The object without finalizers goes; the held one waits for its finalizer.
    eventually(Duration::from_secs(2), "the plain object to go", || async {
        (s.get(&format!("{CTS}/a")).await.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(1),
        "the held object to be deleting",
        || async {
            let held = s.get(&format!("{CTS}/held")).await.json();
            held["metadata"]["deletionTimestamp"]
                .is_string()
                .then_some(())
        },
    )
    .await;
    let crd = s
        .get(&format!("{CRDS}/crontabs.stable.example.com"))
        .await
        .json();
    let term = condition(&crd, "Terminating");
    assert_eq!(term["reason"], "InstanceDeletionInProgress");
    // Still served while terminating, but creates are forbidden.
    let r = s.post(CTS, crontab("late")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", text(&r));
    assert_eq!(
        r.json()["message"],
        "crontabs.stable.example.com \"late\" is forbidden: create not allowed while custom resource definition is terminating"
    );
    let v1 = s.get("/apis/stable.example.com/v1").await.json();
    assert_eq!(
        v1["resources"][0]["verbs"],
        json!(["delete", "deletecollection", "get", "list", "watch"])
    );
    // Releasing the finalizer lets the object, then the CRD, go; serving stops.
    let r = s
        .patch(
            &format!("{CTS}/held"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    eventually(Duration::from_secs(3), "the CRD to go", || async {
        (s.get(&format!("{CRDS}/crontabs.stable.example.com"))
            .await
            .status
            == StatusCode::NOT_FOUND)
            .then_some(())
    })
    .await;
    eventually(Duration::from_secs(1), "serving to stop", || async {
        (s.get("/apis/stable.example.com/v1").await.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
    assert_eq!(s.get(CTS).await.status, StatusCode::NOT_FOUND);
    let mut seen = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(e) = events.next().await {
            seen.push(e.unwrap());
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch did not end with the CRD");
    let deleted: Vec<String> = seen
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Deleted(o) => o.metadata.name.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, ["a", "held"], "{seen:?}");
    assert!(
        !s.get("/apis").await.json()["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "stable.example.com")
    );
    assert!(s.get("/openapi/v3").await.json()["paths"]["apis/stable.example.com/v1"].is_null());
    // Nothing is left in storage, and the CRD can be created afresh, empty.
    let left = s
        .server
        .store
        .list(minik8s_apiserver::storage::ListOptions {
            prefix: "/registry/stable.example.com/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(left.kvs.is_empty());
    install(&s, crontab_crd()).await;
    assert_eq!(s.get(CTS).await.json()["items"], json!([]));
}

#[tokio::test]
async fn a_new_server_serves_stored_crds_at_once() {
    let s = server().await;
    install(&s, crontab_crd()).await;
    assert_eq!(s.post(CTS, crontab("a")).await.status, StatusCode::CREATED);
    // Another server over the same store (as after a restart): its CRD controller serves the
    // stored CRDs before start returns.
    let other = minik8s_apiserver::ApiServer::new(
        s.server.store.clone(),
        std::sync::Arc::new(minik8s_apiserver::metrics::Metrics::new()),
        minik8s_apiserver::auth::Authenticator::new(),
        testkit::test_serve_options(),
        "127.0.0.1:6443".into(),
    );
    minik8s_apiserver::crds::start(&other).await.unwrap();
    let router = minik8s_apiserver::router(other);
    let r = get_on(&router, &format!("{CTS}/a"), "application/json").await;
    assert_eq!(r.status, StatusCode::OK, "{}", text(&r));
    assert_eq!(r.json()["spec"]["image"], "busybox");
}

/// A custom resource as kube-rs users declare it.
#[derive(
    kube::CustomResource,
    Clone,
    Debug,
    PartialEq,
    serde::Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[kube(
    group = "kube.example.com",
    version = "v1",
    kind = "Foo",
    namespaced,
    status = "FooStatus",
    shortname = "fo",
    category = "all",
    scale = r#"{"specReplicasPath":".spec.replicas", "statusReplicasPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Info", "type":"string", "jsonPath":".spec.info"}"#
)]
struct FooSpec {
    info: String,
    replicas: i32,
}

#[derive(
    Clone, Debug, Default, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
struct FooStatus {
    replicas: i32,
}

#[tokio::test]
async fn kube_rs_over_tls() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams, PostParams};
    use kube::runtime::wait::{await_condition, conditions};
    use kube::{CustomResourceExt, ResourceExt};

    let server = testkit::TestServer::start(Backend::Sqlite).await.unwrap();
    let client = server.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Foo::crd())
        .await
        .unwrap();
    let established = tokio::time::timeout(
        Duration::from_secs(1),
        await_condition(
            crds.clone(),
            "foos.kube.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("established within a second")
    .unwrap();
    let uid = established.expect("the CRD").uid().unwrap();

    // Discovery (aggregated, as kube-rs reads it) finds the kind by group.
    let discovery = kube::Discovery::new(client.clone())
        .filter(&["kube.example.com"])
        .run()
        .await
        .unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "Foo")
        .expect("Foo is discovered");
    assert_eq!(ar.plural, "foos");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);

    let foos: Api<Foo> = Api::namespaced(client.clone(), "default");
    let created = foos
        .create(
            &PostParams::default(),
            &Foo::new(
                "one",
                FooSpec {
                    info: "hello".into(),
                    replicas: 1,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.spec.info, "hello");
    assert_eq!(created.metadata.generation, Some(1));
    let patched = foos
        .patch_status(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status, Some(FooStatus { replicas: 1 }));
    let scale = foos
        .patch_scale(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    let got = foos.get("one").await.unwrap();
    assert_eq!((got.spec.replicas, got.metadata.generation), (3, Some(2)));
    assert_eq!(got.labels().len(), 0);

    // A watcher sees the changes and the delete.
    let stream = kube::runtime::watcher(foos.clone(), kube::runtime::watcher::Config::default());
    let mut stream = Box::pin(kube::runtime::WatchStreamExt::applied_objects(stream));
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.name_any(), "one");
    foos.patch(
        "one",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"info": "changed"}})),
    )
    .await
    .unwrap();
    let next = stream.next().await.unwrap().unwrap();
    assert_eq!(next.spec.info, "changed");

    // Deleting the CRD deletes the Foos.
    crds.delete("foos.kube.example.com", &Default::default())
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(3),
        await_condition(
            crds.clone(),
            "foos.kube.example.com",
            conditions::is_deleted(&uid),
        ),
    )
    .await
    .expect("CRD gone within 3s")
    .unwrap();
    // Served no more: the Foos are gone with their CRD.
    assert!(matches!(foos.get_opt("one").await, Ok(None) | Err(_)));
    eventually(
        Duration::from_secs(1),
        "the group to leave discovery",
        || async {
            let groups = client.list_api_groups().await.unwrap();
            (!groups.groups.iter().any(|g| g.name == "kube.example.com")).then_some(())
        },
    )
    .await;
    let left = server
        .server
        .store
        .list(minik8s_apiserver::storage::ListOptions {
            prefix: "/registry/kube.example.com/".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(left.kvs.is_empty());
}

#[tokio::test]
async fn served_on_etcd() {
    let s = InProcess::start(Backend::Etcd).await.unwrap();
    install(&s, crontab_crd()).await;
    let r = s.post(CTS, crontab("a")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", text(&r));
    assert_eq!(r.json()["spec"]["image"], "busybox");
    let r = s
        .delete(&format!("{CRDS}/crontabs.stable.example.com"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    eventually(Duration::from_secs(3), "the CRD to go", || async {
        (s.get(&format!("{CRDS}/crontabs.stable.example.com"))
            .await
            .status
            == StatusCode::NOT_FOUND)
            .then_some(())
    })
    .await;
    eventually(Duration::from_secs(1), "serving to stop", || async {
        (s.get(CTS).await.status == StatusCode::NOT_FOUND).then_some(())
    })
    .await;
}
