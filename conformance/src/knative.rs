//! knative-lite as its users meet it, on the cluster's real kubelet, once per run: Knative
//! Services that scale to zero and back on the first request, that scale out under a step
//! of load without failing a request, that queue at `containerConcurrency` rather than fail,
//! a revision whose image cannot be pulled, and Functions from source called through every
//! node's gateway: the first call served by a warm pool pod, errors as 500s, an update with
//! calls in flight, the async path, invalid source reported, requirements installed on the
//! node from a wheel directory, source from a ConfigMap, and delete.
//!
//! The suite shortens the autoscaler's windows in `config-autoscaler` (as Knative's own
//! tests do) and removes the ConfigMap when it is done.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Api;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::Env;
use crate::support::{self, CaseFn, eventually};

pub const CASES: &[(&str, CaseFn<Ctx>)] = crate::cases! { Ctx;
    "scale-from-zero" => scale_from_zero,
    "concurrency-target" => concurrency_target,
    "container-concurrency" => container_concurrency,
    "revision-failed" => revision_failed,
    "function-calls" => function_calls,
    "function-update-in-flight" => function_update_in_flight,
    "function-invalid-source" => function_invalid_source,
    "function-scale-to-zero" => function_scale_to_zero,
    "function-requirements" => function_requirements,
    "function-from-config-map" => function_from_config_map,
};

const SYSTEM_NAMESPACE: &str = "knative-serving";
const CONFIG_AUTOSCALER: &str = "config-autoscaler";
const WINDOW: Duration = Duration::from_secs(6);
const GRACE: Duration = Duration::from_secs(2);

pub struct Ctx {
    client: kube::Client,
    ns: String,
}

fn ksvc_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("serving.knative.dev", "v1", "Service"),
        "services",
    )
}

fn function_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("functions.minik8s.io", "v1alpha1", "Function"),
        "functions",
    )
}

pub async fn run(env: &Arc<Env>) {
    let ctx = Ctx {
        client: env.client.clone(),
        ns: format!("conf-knative-{}", env.run),
    };
    let set_up = async {
        support::create_namespace(&ctx.client, &ctx.ns).await?;
        ctx.shorten_windows().await
    };
    if let Err(e) = set_up.await {
        support::fail_set_up("knative", CASES, &env.selection, &env.report, &e);
        return;
    }
    support::run_cases(
        "knative",
        &ctx,
        CASES,
        &env.selection,
        &env.report,
        Duration::from_secs(120),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), SYSTEM_NAMESPACE);
    let _ = cms
        .delete(CONFIG_AUTOSCALER, &DeleteParams::default())
        .await;
    support::remove_namespace(
        &ctx.client,
        &ctx.ns,
        &[ksvc_resource(), function_resource()],
    )
    .await;
}

/// A Python HTTP server for revisions: `/` sleeps `SLEEP` seconds and answers how many
/// requests it had in flight at most so far.
const SLEEPER: &str = r#"
import http.server, os, threading, time
lock = threading.Lock()
state = {"now": 0, "max": 0}
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(float(os.environ.get("SLEEP", "0.2")))
        with lock:
            state["now"] -= 1
            body = str(state["max"]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("", int(os.environ["PORT"])), H).serve_forever()
"#;

impl Ctx {
    fn ksvcs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &ksvc_resource())
    }

    fn functions(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &function_resource())
    }

    async fn shorten_windows(&self) -> anyhow::Result<()> {
        let nss: Api<Namespace> = Api::all(self.client.clone());
        if nss.get_opt(SYSTEM_NAMESPACE).await?.is_none() {
            let ns: Namespace =
                serde_json::from_value(json!({"metadata": {"name": SYSTEM_NAMESPACE}}))?;
            match nss.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), SYSTEM_NAMESPACE);
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIG_AUTOSCALER},
            "data": {
                "stable-window": format!("{}s", WINDOW.as_secs()),
                "scale-to-zero-grace-period": format!("{}s", GRACE.as_secs()),
            },
        });
        cms.patch(
            CONFIG_AUTOSCALER,
            &PatchParams::apply("conformance").force(),
            &Patch::Apply(&cm),
        )
        .await?;
        Ok(())
    }

    /// Creates Knative Service `name` from `spec` and waits until it is Ready.
    async fn ksvc(&self, name: &str, spec: Value) -> anyhow::Result<()> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        self.ksvcs().create(&PostParams::default(), &obj).await?;
        self.ready(&self.ksvcs(), name).await
    }

    /// Waits until `name`'s Ready condition is True.
    async fn ready(&self, api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
        eventually(
            Duration::from_secs(90),
            &format!("{name} Ready"),
            || async {
                let obj = api.get(name).await?;
                let (status, reason, message) = ready_condition(&obj);
                ensure!(status == "True", "Ready {status} {reason}: {message}");
                Ok(())
            },
        )
        .await
    }

    fn host(&self, name: &str) -> String {
        format!("{name}.{}.example.com", self.ns)
    }

    /// The replicas of a revision's Deployment, and its pods that are not stopping.
    async fn scale_of(&self, revision: &str) -> anyhow::Result<(i32, usize)> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        let d = deployments.get(&format!("{revision}-deployment")).await?;
        let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(0);
        Ok((replicas, self.pods_of(revision).await?.len()))
    }

    /// The revision's pods that are not stopping.
    async fn pods_of(&self, revision: &str) -> anyhow::Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let lp = ListParams::default().labels(&format!("serving.knative.dev/revision={revision}"));
        let mut items = pods.list(&lp).await?.items;
        items.retain(|p| p.metadata.deletion_timestamp.is_none());
        Ok(items)
    }

    /// Waits until the revision has no replica and no pod.
    async fn at_zero(&self, revision: &str, limit: Duration) -> anyhow::Result<()> {
        eventually(limit, &format!("{revision} scaled to zero"), || async {
            let (replicas, pods) = self.scale_of(revision).await?;
            ensure!(
                replicas == 0 && pods == 0,
                "{replicas} replicas, {pods} pods"
            );
            Ok(())
        })
        .await
    }

    fn gateway(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8080))
    }

    /// Calls function `name` through the gateway.
    async fn call(&self, name: &str, body: &Value) -> anyhow::Result<(u16, String)> {
        let path = format!("/function/{name}.{}", self.ns);
        support::http(
            self.gateway(),
            "POST",
            "gateway",
            &path,
            Some(&body.to_string()),
            Duration::from_secs(60),
        )
        .await
    }

    /// Creates Function `name` and waits until it is Ready and its namespace's warm pool
    /// has a ready pod (the first Function of a namespace brings the pool).
    async fn function(&self, name: &str, source: &str) -> anyhow::Result<()> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "functions.minik8s.io/v1alpha1", "kind": "Function",
            "metadata": {"name": name}, "spec": {"source": source},
        }))?;
        self.functions()
            .create(&PostParams::default(), &obj)
            .await?;
        self.ready(&self.functions(), name).await?;
        self.pool_ready().await
    }

    async fn pool_ready(&self) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        eventually(
            Duration::from_secs(60),
            "a ready pod in the warm pool",
            || async {
                let lp = ListParams::default().labels("functions.minik8s.io/pool=python3");
                let ready = pods
                    .list(&lp)
                    .await?
                    .items
                    .iter()
                    .filter(|p| pod_ready(p))
                    .count();
                ensure!(ready > 0, "no ready pool pod");
                Ok(())
            },
        )
        .await
    }

    /// Whether a pod of `revision` came from the warm pool.
    async fn served_from_pool(&self, revision: &str) -> anyhow::Result<()> {
        let pods = self.pods_of(revision).await?;
        ensure!(
            pods.iter().any(|p| p
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("functions.minik8s.io/specialized"))),
            "no pod of {revision} came from the pool: {:?}",
            pods.iter()
                .map(|p| p.metadata.name.clone())
                .collect::<Vec<_>>()
        );
        Ok(())
    }
}

fn ready_condition(obj: &DynamicObject) -> (String, String, String) {
    condition(obj, "Ready")
}

/// Status, reason and message of condition `ty`.
fn condition(obj: &DynamicObject, ty: &str) -> (String, String, String) {
    let cond = obj.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == ty))
        .cloned()
        .unwrap_or_default();
    let s = |k: &str| cond[k].as_str().unwrap_or_default().to_string();
    (
        if cond.is_null() {
            "Unknown".into()
        } else {
            s("status")
        },
        s("reason"),
        s("message"),
    )
}

fn busybox(text: &str) -> Value {
    json!({"image": "busybox:1.36", "command": ["sh", "-c",
        format!("echo {text} > /tmp/index.html && exec httpd -f -p $PORT -h /tmp")]})
}

fn sleeper(sleep: &str) -> Value {
    json!({"image": "python:3", "command": ["python3", "-u", "-c", SLEEPER],
           "env": [{"name": "SLEEP", "value": sleep}]})
}

/// Scaled to zero after the (shortened) window and grace period; the first request is held
/// by the activator until a pod is up and answered; then back to zero.
async fn scale_from_zero(c: &Ctx) -> anyhow::Result<()> {
    c.ksvc(
        "kn-zero",
        json!({"template": {"spec": {"containers": [busybox("hello")]}}}),
    )
    .await?;
    c.at_zero("kn-zero-00001", Duration::from_secs(60)).await?;
    let host = c.host("kn-zero");
    let addr = crate::kubectl::ingress_address();
    let got = support::http(addr, "GET", &host, "/", None, Duration::from_secs(60)).await?;
    ensure!(
        got == (200, "hello".into()),
        "the first request from zero: {got:?}"
    );
    let (replicas, pods) = c.scale_of("kn-zero-00001").await?;
    ensure!(
        replicas == 1 && pods == 1,
        "after the request: {replicas} replicas, {pods} pods"
    );
    c.at_zero("kn-zero-00001", Duration::from_secs(60)).await
}

/// A step from idle to 8 clients on a revision whose pods take 2 requests each (70 %
/// utilization): the autoscaler scales out to max-scale; then down to one client, and back
/// to one pod, the others drained before they stop: not one request fails.
async fn concurrency_target(c: &Ctx) -> anyhow::Result<()> {
    c.ksvc(
        "kn-load",
        json!({"template": {
            "metadata": {"annotations": {
                "autoscaling.knative.dev/target": "2",
                "autoscaling.knative.dev/max-scale": "3"}},
            "spec": {"containers": [sleeper("0.2")]}}}),
    )
    .await?;
    let host = c.host("kn-load");
    let addr = crate::kubectl::ingress_address();
    // Client 0 goes on after the step; the other seven stop with `step_over`.
    let (step_over, all_over) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..8 {
        let stop = if i == 0 {
            all_over.clone()
        } else {
            step_over.clone()
        };
        let (ok, failed, host) = (ok.clone(), failed.clone(), host.clone());
        clients.spawn(async move {
            let mut last = String::new();
            while !stop.load(Ordering::Relaxed) {
                match support::http(addr, "GET", &host, "/", None, Duration::from_secs(30)).await {
                    Ok((200, _)) => ok.fetch_add(1, Ordering::Relaxed),
                    other => {
                        last = format!("{other:?}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
            last
        });
    }
    let ready_pods = |want: usize| async move {
        let ready = c
            .pods_of("kn-load-00001")
            .await?
            .iter()
            .filter(|p| pod_ready(p))
            .count();
        ensure!(ready == want, "{ready} ready pods");
        Ok(())
    };
    let scaled = eventually(Duration::from_secs(60), "kn-load at 3 ready pods", || {
        ready_pods(3)
    })
    .await;
    // Then one client: the pods beyond one are drained and stopped under its load.
    step_over.store(true, Ordering::Relaxed);
    let drained = match scaled {
        Ok(()) => {
            eventually(Duration::from_secs(60), "kn-load back at 1 pod", || async {
                let (replicas, pods) = c.scale_of("kn-load-00001").await?;
                ensure!(
                    replicas == 1 && pods == 1,
                    "{replicas} replicas, {pods} pods"
                );
                Ok(())
            })
            .await
        }
        Err(e) => Err(e),
    };
    all_over.store(true, Ordering::Relaxed);
    let mut last = String::new();
    while let Some(r) = clients.join_next().await {
        let l = r?;
        if !l.is_empty() {
            last = l;
        }
    }
    drained?;
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    ensure!(
        failed == 0,
        "{failed} of {} requests failed, the last: {last}",
        ok + failed
    );
    c.ksvcs()
        .delete("kn-load", &DeleteParams::default())
        .await?;
    Ok(())
}

fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// containerConcurrency 1 on one pod: six requests at once all succeed, one at a time.
async fn container_concurrency(c: &Ctx) -> anyhow::Result<()> {
    c.ksvc(
        "kn-cc",
        json!({"template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/max-scale": "1",
                                         "autoscaling.knative.dev/min-scale": "1"}},
            "spec": {"containerConcurrency": 1, "containers": [sleeper("0.3")]}}}),
    )
    .await?;
    let host = c.host("kn-cc");
    let addr = crate::kubectl::ingress_address();
    let calls =
        (0..6).map(|_| support::http(addr, "GET", &host, "/", None, Duration::from_secs(30)));
    let answers = futures::future::join_all(calls).await;
    for a in answers {
        let (code, body) = a?;
        ensure!(code == 200, "a queued request got {code}: {body}");
        ensure!(body == "1", "the pod had {body} requests in flight at once");
    }
    c.ksvcs().delete("kn-cc", &DeleteParams::default()).await?;
    Ok(())
}

/// An image that cannot be pulled: `ConfigurationsReady` says RevisionFailed with the pull
/// error, and the Service is not Ready, as in Knative.
async fn revision_failed(c: &Ctx) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"name": "kn-broken"},
        "spec": {"template": {"spec": {"containers": [{"image": "minik8s.invalid/nothing:1"}]}}},
    }))?;
    c.ksvcs().create(&PostParams::default(), &obj).await?;
    eventually(
        Duration::from_secs(60),
        "kn-broken RevisionFailed",
        || async {
            let obj = c.ksvcs().get("kn-broken").await?;
            let (status, reason, message) = condition(&obj, "ConfigurationsReady");
            ensure!(
                status == "False" && reason == "RevisionFailed",
                "ConfigurationsReady {status} {reason}: {message}"
            );
            support::contains(&message, "Revision \"kn-broken-00001\" failed with message")?;
            let (status, reason, _) = ready_condition(&obj);
            ensure!(status == "False", "Ready {status} {reason}");
            Ok(())
        },
    )
    .await?;
    c.ksvcs()
        .delete("kn-broken", &DeleteParams::default())
        .await?;
    Ok(())
}

const ECHO: &str = r#"import time

VERSION = 1


def handle(body):
    if body.get("fail"):
        return 1 / 0
    time.sleep(body.get("sleep", 0))
    return {"version": VERSION, "echo": body}
"#;

/// A Function from source: the first call is served by a pod taken from the warm pool;
/// an exception is a 500 and the function goes on serving; the async path answers 202;
/// deleted, it answers 404.
async fn function_calls(c: &Ctx) -> anyhow::Result<()> {
    c.function("fn-echo", ECHO).await?;
    let (code, body) = c.call("fn-echo", &json!({"x": 1})).await?;
    ensure!(code == 200, "{code}: {body}");
    let v: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
    ensure!(v == json!({"version": 1, "echo": {"x": 1}}), "{v}");
    c.served_from_pool("fn-echo-00001").await?;
    let (code, body) = c.call("fn-echo", &json!({"fail": true})).await?;
    ensure!(
        code == 500 && body.contains("ZeroDivisionError"),
        "{code}: {body}"
    );
    let (code, _) = c.call("fn-echo", &json!({"x": 2})).await?;
    ensure!(code == 200, "after the exception: {code}");
    let path = format!("/async-function/fn-echo.{}", c.ns);
    let (code, body) = support::http(
        c.gateway(),
        "POST",
        "gateway",
        &path,
        Some("{}"),
        Duration::from_secs(10),
    )
    .await?;
    ensure!(code == 202, "async: {code} {body}");
    c.functions()
        .delete("fn-echo", &DeleteParams::default())
        .await?;
    eventually(Duration::from_secs(30), "fn-echo answers 404", || async {
        let (code, body) = c.call("fn-echo", &json!({})).await?;
        ensure!(code == 404, "{code}: {body}");
        Ok(())
    })
    .await?;
    eventually(Duration::from_secs(60), "fn-echo's pods gone", || async {
        let pods = c.pods_of("fn-echo-00001").await?;
        ensure!(pods.is_empty(), "{} pods left", pods.len());
        Ok(())
    })
    .await
}

/// An update while calls are in flight: they finish on the old revision; later calls get
/// the new one.
async fn function_update_in_flight(c: &Ctx) -> anyhow::Result<()> {
    c.function("fn-up", ECHO).await?;
    let (code, body) = c.call("fn-up", &json!({})).await?;
    ensure!(code == 200, "{code}: {body}");
    let sleep = json!({"sleep": 3});
    let slow = (0..4).map(|_| c.call("fn-up", &sleep));
    let in_flight = futures::future::join_all(slow);
    let update = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let patch = json!({"spec": {"source": ECHO.replace("VERSION = 1", "VERSION = 2")}});
        c.functions()
            .patch("fn-up", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        anyhow::Ok(())
    };
    let (answers, updated) = tokio::join!(in_flight, update);
    updated?;
    for a in answers {
        let (code, body) = a?;
        ensure!(
            code == 200 && body.contains("\"version\": 1"),
            "in flight: {code} {body}"
        );
    }
    eventually(Duration::from_secs(60), "fn-up at version 2", || async {
        let (code, body) = c.call("fn-up", &json!({})).await?;
        ensure!(
            code == 200 && body.contains("\"version\": 2"),
            "{code}: {body}"
        );
        Ok(())
    })
    .await?;
    c.functions()
        .delete("fn-up", &DeleteParams::default())
        .await?;
    Ok(())
}

/// Source that does not parse: the Function says why, with Python's line.
async fn function_invalid_source(c: &Ctx) -> anyhow::Result<()> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "functions.minik8s.io/v1alpha1", "kind": "Function",
        "metadata": {"name": "fn-bad"},
        "spec": {"source": "def handle(body):\n    return body +\n"},
    }))?;
    c.functions().create(&PostParams::default(), &obj).await?;
    eventually(Duration::from_secs(30), "fn-bad InvalidSource", || async {
        let obj = c.functions().get("fn-bad").await?;
        let (status, reason, message) = ready_condition(&obj);
        ensure!(
            status == "False" && reason == "InvalidSource",
            "Ready {status} {reason}: {message}"
        );
        ensure!(
            message.starts_with("SyntaxError") && message.contains("line 2"),
            "{message}"
        );
        Ok(())
    })
    .await?;
    let (code, _) = c.call("fn-bad", &json!({})).await?;
    ensure!(
        code == 404,
        "a function that never deployed answered {code}"
    );
    c.functions()
        .delete("fn-bad", &DeleteParams::default())
        .await?;
    Ok(())
}

/// Idle for the window and grace period, the Function's pods go; the next call is served
/// again, from the pool.
async fn function_scale_to_zero(c: &Ctx) -> anyhow::Result<()> {
    c.function("fn-idle", ECHO).await?;
    let (code, body) = c.call("fn-idle", &json!({})).await?;
    ensure!(code == 200, "{code}: {body}");
    eventually(
        Duration::from_secs(60),
        "fn-idle scaled to zero",
        || async {
            let pods = c.pods_of("fn-idle-00001").await?;
            ensure!(pods.is_empty(), "{} pods", pods.len());
            Ok(())
        },
    )
    .await?;
    c.pool_ready().await?;
    let (code, body) = c.call("fn-idle", &json!({"again": true})).await?;
    ensure!(code == 200 && body.contains("again"), "{code}: {body}");
    c.served_from_pool("fn-idle-00001").await?;
    c.functions()
        .delete("fn-idle", &DeleteParams::default())
        .await?;
    Ok(())
}

/// A wheel for `function_requirements`, made with Python's zipfile: a package `minik8s_greeting`.
const MAKE_WHEEL: &str = r#"
import base64, hashlib, os, sys, zipfile
files = {
    "minik8s_greeting/__init__.py": "def greet(name):\n    return 'hello ' + name\n",
    "minik8s_greeting-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: minik8s-greeting\nVersion: 1.0\n",
    "minik8s_greeting-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: minik8s\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
def digest(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = [f"{p},sha256={digest(c.encode())},{len(c.encode())}" for p, c in files.items()]
record.append("minik8s_greeting-1.0.dist-info/RECORD,,")
files["minik8s_greeting-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
os.makedirs(sys.argv[1], exist_ok=True)
with zipfile.ZipFile(os.path.join(sys.argv[1], "minik8s_greeting-1.0-py3-none-any.whl"), "w") as z:
    for p, c in files.items():
        z.writestr(p, c)
"#;

/// A Function with a requirements.txt: the node installs the package from its wheel
/// directory (no network), and the function imports it.
async fn function_requirements(c: &Ctx) -> anyhow::Result<()> {
    let wheels = "/var/lib/minik8s/wheels";
    let made = tokio::process::Command::new("python3")
        .args(["-c", MAKE_WHEEL, wheels])
        .output()
        .await?;
    ensure!(
        made.status.success(),
        "making the wheel: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "functions.minik8s.io/v1alpha1", "kind": "Function",
        "metadata": {"name": "fn-req"},
        "spec": {
            "source": "import minik8s_greeting\n\ndef handle(body):\n    return {\"greeting\": minik8s_greeting.greet(body[\"name\"])}\n",
            "requirements": "minik8s-greeting==1.0\n",
        },
    }))?;
    c.functions().create(&PostParams::default(), &obj).await?;
    c.ready(&c.functions(), "fn-req").await?;
    c.pool_ready().await?;
    let (code, body) = c.call("fn-req", &json!({"name": "you"})).await?;
    ensure!(code == 200 && body.contains("hello you"), "{code}: {body}");
    c.functions()
        .delete("fn-req", &DeleteParams::default())
        .await?;
    Ok(())
}

/// Source from a ConfigMap: an edit of the ConfigMap is a new revision of the Function.
async fn function_from_config_map(c: &Ctx) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), &c.ns);
    let cm = |answer: &str| -> anyhow::Result<ConfigMap> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": "fn-cm-source"},
            "data": {"handler.py": format!("def handle(body):\n    return {{\"answer\": {answer}}}\n")},
        }))?)
    };
    cms.create(&PostParams::default(), &cm("1")?).await?;
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "functions.minik8s.io/v1alpha1", "kind": "Function",
        "metadata": {"name": "fn-cm"},
        "spec": {"sourceFrom": {"configMapKeyRef": {"name": "fn-cm-source", "key": "handler.py"}}},
    }))?;
    c.functions().create(&PostParams::default(), &obj).await?;
    c.ready(&c.functions(), "fn-cm").await?;
    c.pool_ready().await?;
    let (code, body) = c.call("fn-cm", &json!({})).await?;
    ensure!(code == 200 && body == r#"{"answer": 1}"#, "{code}: {body}");
    cms.replace("fn-cm-source", &PostParams::default(), &{
        let mut next = cm("2")?;
        next.metadata.resource_version = cms.get("fn-cm-source").await?.metadata.resource_version;
        next
    })
    .await?;
    eventually(
        Duration::from_secs(60),
        "fn-cm answering from the edited ConfigMap",
        || async {
            let (code, body) = c.call("fn-cm", &json!({})).await?;
            ensure!(code == 200 && body == r#"{"answer": 2}"#, "{code}: {body}");
            Ok(())
        },
    )
    .await?;
    c.functions()
        .delete("fn-cm", &DeleteParams::default())
        .await?;
    Ok(())
}
