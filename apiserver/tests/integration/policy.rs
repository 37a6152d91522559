//! Pod policy that reads other objects, through the REST API: evictions spend a
//! PodDisruptionBudget's `disruptionsAllowed` (429 with upstream's cause when none is left),
//! Priority admission fills a pod's priority from its PriorityClass and refuses what it did
//! not compute, RuntimeClass admission adds its class's overhead and scheduling, LimitRanges
//! default and bound new pods, and a CertificateSigningRequest is approved through its
//! `approval` subresource.

use http::StatusCode;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, Reply};

const PODS: &str = "/api/v1/namespaces/default/pods";
const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
const CLASSES: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";
const RUNTIME_CLASSES: &str = "/apis/node.k8s.io/v1/runtimeclasses";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

fn ok(r: &Reply, code: StatusCode) -> Value {
    assert_eq!(r.status, code, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": labels},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
}

/// A pod as a kubelet reports it running and ready.
async fn running_ready(s: &InProcess, name: &str, labels: Value) {
    let mut p = ok(&s.post(PODS, pod(name, labels)).await, StatusCode::CREATED);
    p["status"] = json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]});
    ok(
        &s.put(&format!("{PODS}/{name}/status"), p).await,
        StatusCode::OK,
    );
}

fn eviction(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction",
           "metadata": {"name": name, "namespace": "default"}})
}

/// Writes the budget's status as the disruption controller would.
async fn budget_status(s: &InProcess, name: &str, allowed: i64, healthy: i64, desired: i64) {
    let mut b = s.get(&format!("{PDBS}/{name}")).await.json();
    b["status"] = json!({"observedGeneration": b["metadata"]["generation"],
        "disruptionsAllowed": allowed, "currentHealthy": healthy,
        "desiredHealthy": desired, "expectedPods": healthy});
    ok(
        &s.put(&format!("{PDBS}/{name}/status"), b).await,
        StatusCode::OK,
    );
}

#[tokio::test]
async fn evictions_spend_the_disruption_budget() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    running_ready(&s, "a", json!({"app": "web"})).await;
    running_ready(&s, "b", json!({"app": "web"})).await;
    running_ready(&s, "other", json!({"app": "db"})).await;
    ok(
        &s.post(
            PDBS,
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "web"},
                   "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await,
        StatusCode::CREATED,
    );
    // Not yet seen by the controller: refused until it has.
    let r = s.post(&format!("{PODS}/a/eviction"), eviction("a")).await;
    let status = ok(&r, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget web is still being processed by the server."
    );

    budget_status(&s, "web", 1, 2, 1).await;
    let r = s.post(&format!("{PODS}/a/eviction"), eviction("a")).await;
    assert_eq!(ok(&r, StatusCode::CREATED)["status"], "Success");
    assert_eq!(
        s.get(&format!("{PODS}/a")).await.status,
        StatusCode::NOT_FOUND
    );
    let budget = s.get(&format!("{PDBS}/web")).await.json();
    assert_eq!(budget["status"]["disruptionsAllowed"], 0);
    assert!(
        budget["status"]["disruptedPods"]["a"].is_string(),
        "{budget}"
    );
    assert_eq!(
        budget["status"]["conditions"][0]["reason"],
        "InsufficientPods"
    );

    // Nothing left to spend.
    let r = s.post(&format!("{PODS}/b/eviction"), eviction("b")).await;
    let status = ok(&r, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        status["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(status["details"]["causes"][0]["reason"], "DisruptionBudget");
    // An eviction spends disruptionsAllowed only: currentHealthy is the controller's to
    // count again (none runs here), so it still says 2, as upstream's would.
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget web needs 1 healthy pods and has 2 currently"
    );
    assert_eq!(s.get(&format!("{PODS}/b")).await.status, StatusCode::OK);

    // A pod no budget covers goes at once; a mismatched name is refused.
    let r = s
        .post(&format!("{PODS}/other/eviction"), eviction("b"))
        .await;
    ok(&r, StatusCode::BAD_REQUEST);
    let r = s
        .post(&format!("{PODS}/other/eviction"), eviction("other"))
        .await;
    ok(&r, StatusCode::CREATED);
    assert_eq!(
        s.get(&format!("{PODS}/other")).await.status,
        StatusCode::NOT_FOUND
    );
    let r = s
        .post(&format!("{PODS}/gone/eviction"), eviction("gone"))
        .await;
    ok(&r, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn pending_pods_are_evicted_whatever_the_budget() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let mut p = ok(
        &s.post(PODS, pod("p", json!({"app": "web"}))).await,
        StatusCode::CREATED,
    );
    p["status"] = json!({"phase": "Pending"});
    ok(&s.put(&format!("{PODS}/p/status"), p).await, StatusCode::OK);
    ok(
        &s.post(
            PDBS,
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "all"}, "spec": {"maxUnavailable": 0, "selector": {}}}),
        )
        .await,
        StatusCode::CREATED,
    );
    ok(
        &s.post(&format!("{PODS}/p/eviction"), eviction("p")).await,
        StatusCode::CREATED,
    );
}

#[tokio::test]
async fn priority_comes_from_the_priority_class() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    // The system classes exist from the start.
    let critical = s
        .get(&format!("{CLASSES}/system-node-critical"))
        .await
        .json();
    assert_eq!(critical["value"], 2000001000);

    let mut p = pod("critical", json!({}));
    p["spec"]["priorityClassName"] = json!("system-node-critical");
    let created = ok(&s.post(PODS, p).await, StatusCode::CREATED);
    assert_eq!(created["spec"]["priority"], 2000001000);
    assert_eq!(created["spec"]["preemptionPolicy"], "PreemptLowerPriority");

    // No class and no default class: 0.
    let created = ok(
        &s.post(PODS, pod("plain", json!({}))).await,
        StatusCode::CREATED,
    );
    assert_eq!(created["spec"]["priority"], 0);
    assert!(created["spec"]["priorityClassName"].is_null());

    let mut p = pod("unknown", json!({}));
    p["spec"]["priorityClassName"] = json!("gold");
    let r = ok(&s.post(PODS, p).await, StatusCode::FORBIDDEN);
    assert_eq!(
        r["message"],
        "pods \"unknown\" is forbidden: no PriorityClass with name gold was found"
    );

    let class = |name: &str, value: i64, default: bool| {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": name}, "value": value, "globalDefault": default,
               "preemptionPolicy": "Never"})
    };
    ok(
        &s.post(CLASSES, class("low", 10, true)).await,
        StatusCode::CREATED,
    );
    let r = ok(
        &s.post(CLASSES, class("low2", 5, true)).await,
        StatusCode::FORBIDDEN,
    );
    assert!(
        r["message"].as_str().unwrap().ends_with(
            "PriorityClass low is already marked as default. Only one default can exist"
        ),
        "{r}"
    );
    let created = ok(
        &s.post(PODS, pod("defaulted", json!({}))).await,
        StatusCode::CREATED,
    );
    assert_eq!(created["spec"]["priorityClassName"], "low");
    assert_eq!(created["spec"]["priority"], 10);
    assert_eq!(created["spec"]["preemptionPolicy"], "Never");

    let mut p = pod("claims", json!({}));
    p["spec"]["priority"] = json!(1000);
    let r = ok(&s.post(PODS, p).await, StatusCode::FORBIDDEN);
    assert!(
        r["message"].as_str().unwrap().ends_with(
            "the integer value of priority (1000) must not be provided in pod spec; priority admission controller computed 10 from the given PriorityClass name"
        ),
        "{r}"
    );
}

#[tokio::test]
async fn runtime_classes_bring_overhead_and_scheduling() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let class = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "sandboxed"}, "handler": "runc",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
        "scheduling": {"nodeSelector": {"sandbox": "yes"},
                       "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]}});
    ok(&s.post(RUNTIME_CLASSES, class).await, StatusCode::CREATED);
    let with_class = |name: &str, class: &str| {
        let mut p = pod(name, json!({}));
        p["spec"]["runtimeClassName"] = json!(class);
        p
    };

    let created = ok(
        &s.post(PODS, with_class("a", "sandboxed")).await,
        StatusCode::CREATED,
    );
    assert_eq!(
        created["spec"]["overhead"],
        json!({"cpu": "250m", "memory": "64Mi"})
    );
    assert_eq!(created["spec"]["nodeSelector"], json!({"sandbox": "yes"}));
    let tolerations = created["spec"]["tolerations"].as_array().unwrap();
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "sandbox" && t["effect"] == "NoSchedule"),
        "{tolerations:?}"
    );

    let refused = |r: &Reply| {
        ok(r, StatusCode::FORBIDDEN)["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        refused(&s.post(PODS, with_class("b", "missing")).await),
        "pods \"b\" is forbidden: pod rejected: RuntimeClass \"missing\" not found"
    );
    let mut p = with_class("c", "sandboxed");
    p["spec"]["nodeSelector"] = json!({"sandbox": "no"});
    assert_eq!(
        refused(&s.post(PODS, p).await),
        "pods \"c\" is forbidden: conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"
    );
    let mut p = with_class("d", "sandboxed");
    p["spec"]["overhead"] = json!({"cpu": "1"});
    assert_eq!(
        refused(&s.post(PODS, p).await),
        "pods \"d\" is forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
    );
    // The class's own overhead, written differently, is the same overhead.
    let mut p = with_class("e", "sandboxed");
    p["spec"]["overhead"] = json!({"cpu": "0.25", "memory": "64Mi"});
    ok(&s.post(PODS, p).await, StatusCode::CREATED);
    let mut p = pod("f", json!({}));
    p["spec"]["overhead"] = json!({"cpu": "1"});
    assert_eq!(
        refused(&s.post(PODS, p).await),
        "pods \"f\" is forbidden: pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    );
}

/// A CSR for CN=alice, O=dev.
const CSR_PEM_BASE64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIWU1JR0FBZ0VBTUI0eERqQU1CZ05WQkFNTUJXRnNhV05sTVF3d0NnWURWUVFLREFOa1pYWXdXVEFUQmdjcQpoa2pPUFFJQkJnZ3Foa2pPUFFNQkJ3TkNBQVJzNm81ODNBcUFYb3hDb013Ukk3Y3B1QkJIRnE4YzRKajNSR1UrCnNmZEpPOHZDM1orcFp2VTd5a1cvSzc4Uko2V2dIeXNWd0Z2aUdIMmpuMndIRGFYL29BQXdDZ1lJS29aSXpqMEUKQXdJRFJ3QXdSQUlnZjQzUjB5SzJzcmJubU15SytPdk1QS1htangwalpRbmV6cjAyRnVWOGt1d0NJR09MdVJtZgpaeFV0M3JsSWtqUWJRcFFWaldKM2FsREtBMDg4T3liMW9qOWwKLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==";

#[tokio::test]
async fn csr_approval_takes_only_the_decision() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let created = ok(
        &s.post(
            CSRS,
            json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                   "metadata": {"name": "alice"},
                   "spec": {"request": CSR_PEM_BASE64,
                            "signerName": "kubernetes.io/kube-apiserver-client",
                            "usages": ["client auth"]}}),
        )
        .await,
        StatusCode::CREATED,
    );
    let mut approval = created.clone();
    approval["status"] = json!({"conditions": [{"type": "Approved", "status": "True",
        "reason": "KubectlApprove", "message": "This CSR was approved by kubectl certificate approve."}],
        "certificate": "bm90IGEgY2VydA=="});
    approval["spec"]["usages"] = json!(["server auth"]);
    let approved = ok(
        &s.put(&format!("{CSRS}/alice/approval"), approval).await,
        StatusCode::OK,
    );
    assert_eq!(approved["status"]["conditions"][0]["type"], "Approved");
    assert_eq!(approved["spec"]["usages"], json!(["client auth"]));
    assert!(approved["status"]["certificate"].is_null(), "{approved}");
    let table = s
        .get_accepting(CSRS, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .await
        .json();
    let row = &table["rows"][0]["cells"];
    assert_eq!(row[0], "alice");
    assert!(
        row.as_array().unwrap().iter().any(|c| c == "Approved"),
        "{row}"
    );
}

#[tokio::test]
async fn limit_ranges_default_and_bound_pods() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    ok(
        &s.post(
            "/api/v1/namespaces/default/limitranges",
            json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "cpu"},
                   "spec": {"limits": [{"type": "Container",
                       "max": {"cpu": "1"}, "defaultRequest": {"cpu": "200m"}}]}}),
        )
        .await,
        StatusCode::CREATED,
    );
    // The max is the default limit (the range's own defaulting), the request its default.
    let p = ok(
        &s.post(PODS, pod("plain", json!({}))).await,
        StatusCode::CREATED,
    );
    let res = &p["spec"]["containers"][0]["resources"];
    assert_eq!(res["limits"]["cpu"], "1");
    assert_eq!(res["requests"]["cpu"], "200m");
    assert_eq!(
        p["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: cpu request for container c; cpu limit for container c"
    );

    let mut big = pod("big", json!({}));
    big["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "2"}});
    let status = ok(&s.post(PODS, big).await, StatusCode::FORBIDDEN);
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
    );
    // Other namespaces are not bounded by it.
    ok(
        &s.post("/api/v1/namespaces", json!({"metadata": {"name": "free"}}))
            .await,
        StatusCode::CREATED,
    );
    // The account pods run as, unless a controller made it first.
    let r = s
        .post(
            "/api/v1/namespaces/free/serviceaccounts",
            json!({"metadata": {"name": "default"}}),
        )
        .await;
    assert!(
        [StatusCode::CREATED, StatusCode::CONFLICT].contains(&r.status),
        "{r:?}"
    );
    let mut free = pod("big", json!({}));
    free["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "2"}});
    ok(
        &s.post("/api/v1/namespaces/free/pods", free).await,
        StatusCode::CREATED,
    );
}

#[tokio::test]
async fn quotas_charge_new_pods_and_refuse_past_hard() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    const QUOTAS: &str = "/api/v1/namespaces/default/resourcequotas";
    ok(
        &s.post(
            QUOTAS,
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"},
                   "spec": {"hard": {"pods": "2", "configmaps": "10"}}}),
        )
        .await,
        StatusCode::CREATED,
    );
    // Not yet counted by the controller: not enforced, as upstream.
    ok(
        &s.post(PODS, pod("early", json!({}))).await,
        StatusCode::CREATED,
    );
    // The controller's count: the one pod.
    let mut q = s.get(&format!("{QUOTAS}/q")).await.json();
    q["status"] = json!({"hard": {"pods": "2", "configmaps": "10"},
                         "used": {"pods": "1", "configmaps": "0"}});
    ok(
        &s.put(&format!("{QUOTAS}/q/status"), q).await,
        StatusCode::OK,
    );

    ok(
        &s.post(PODS, pod("second", json!({}))).await,
        StatusCode::CREATED,
    );
    let q = s.get(&format!("{QUOTAS}/q")).await.json();
    assert_eq!(q["status"]["used"]["pods"], "2");
    let status = ok(
        &s.post(PODS, pod("third", json!({}))).await,
        StatusCode::FORBIDDEN,
    );
    assert_eq!(
        status["message"],
        "pods \"third\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
    );
    // A dry run is checked but charges nothing; other kinds are charged their own resource.
    ok(
        &s.post(
            "/api/v1/namespaces/default/configmaps?dryRun=All",
            json!({"metadata": {"name": "cm"}}),
        )
        .await,
        StatusCode::CREATED,
    );
    ok(
        &s.post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "cm"}}),
        )
        .await,
        StatusCode::CREATED,
    );
    let q = s.get(&format!("{QUOTAS}/q")).await.json();
    assert_eq!(q["status"]["used"]["configmaps"], "1");
    assert_eq!(q["status"]["used"]["pods"], "2");
}

#[tokio::test]
async fn updates_are_charged_and_bounded_too() {
    // The claim grows while unbound: PersistentVolumeClaimResize (tested in `storage`) would
    // refuse it before the quota is asked.
    let s = InProcess::start_with(Backend::Sqlite, |c| {
        c.serve
            .admission
            .disabled
            .push("PersistentVolumeClaimResize".into())
    })
    .await
    .unwrap();
    const QUOTAS: &str = "/api/v1/namespaces/default/resourcequotas";
    const CLAIMS: &str = "/api/v1/namespaces/default/persistentvolumeclaims";
    const SERVICES: &str = "/api/v1/namespaces/default/services";
    let hard = json!({"requests.storage": "5Gi", "services.nodeports": "0"});
    ok(
        &s.post(
            QUOTAS,
            json!({"metadata": {"name": "q"}, "spec": {"hard": hard}}),
        )
        .await,
        StatusCode::CREATED,
    );
    let mut q = s.get(&format!("{QUOTAS}/q")).await.json();
    q["status"] =
        json!({"hard": hard, "used": {"requests.storage": "0", "services.nodeports": "0"}});
    ok(
        &s.put(&format!("{QUOTAS}/q/status"), q).await,
        StatusCode::OK,
    );
    ok(
        &s.post(
            "/api/v1/namespaces/default/limitranges",
            json!({"metadata": {"name": "claims"}, "spec": {"limits": [
                {"type": "PersistentVolumeClaim", "max": {"storage": "4Gi"}}]}}),
        )
        .await,
        StatusCode::CREATED,
    );
    let claim = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}}});
    ok(&s.post(CLAIMS, claim).await, StatusCode::CREATED);
    let grow = |size: &str| json!({"spec": {"resources": {"requests": {"storage": size}}}});
    let patch = |path: String, body: Value| {
        let s = &s;
        async move { s.patch(&path, "application/merge-patch+json", body).await }
    };
    // Grown by 2Gi: charged 2Gi.
    ok(
        &patch(format!("{CLAIMS}/data"), grow("3Gi")).await,
        StatusCode::OK,
    );
    let q = s.get(&format!("{QUOTAS}/q")).await.json();
    assert_eq!(q["status"]["used"]["requests.storage"], "3Gi");
    // Past the LimitRange's max, then past the quota.
    let refused = ok(
        &patch(format!("{CLAIMS}/data"), grow("6Gi")).await,
        StatusCode::FORBIDDEN,
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("maximum storage usage per PersistentVolumeClaim is 4Gi, but request is 6Gi"),
        "{refused}"
    );
    ok(
        &s.delete("/api/v1/namespaces/default/limitranges/claims")
            .await,
        StatusCode::OK,
    );
    let refused = ok(
        &patch(format!("{CLAIMS}/data"), grow("6Gi")).await,
        StatusCode::FORBIDDEN,
    );
    assert_eq!(
        refused["message"],
        "persistentvolumeclaims \"data\" is forbidden: exceeded quota: q, requested: requests.storage=3Gi, used: requests.storage=3Gi, limited: requests.storage=5Gi"
    );
    // A Service turned NodePort asks for a node port the quota does not have.
    let svc = json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}});
    ok(&s.post(SERVICES, svc).await, StatusCode::CREATED);
    let refused = ok(
        &patch(
            format!("{SERVICES}/web"),
            json!({"spec": {"type": "NodePort"}}),
        )
        .await,
        StatusCode::FORBIDDEN,
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .ends_with("exceeded quota: q, requested: services.nodeports=1, used: services.nodeports=0, limited: services.nodeports=0"),
        "{refused}"
    );
}
