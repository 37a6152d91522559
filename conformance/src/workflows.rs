//! Workflows of Functions as their users meet them, on the cluster's real kubelet and
//! Python functions: the seeds' example (a Task's output picks one of two Tasks) through
//! the gateway's `/workflow/` door, starting its functions from zero; Retry with backoff on
//! a function that fails twice; Catch to a fallback; Parallel and Map outputs in order;
//! Wait and Fail; the Step Functions "Hello World" template unchanged; the controller
//! losing its lease mid-run and resuming it; a running run deleted (Aborted first); 50 runs
//! at once; and a definition that is wrong, said in the Workflow's condition.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};

use crate::Env;
use crate::support::{self, CaseFn, eventually};

pub const CASES: &[(&str, CaseFn<Ctx>)] = crate::cases! { Ctx;
    "seeds-example" => seeds_example,
    "retry-backoff" => retry_backoff,
    "catch-fallback" => catch_fallback,
    "parallel-and-map" => parallel_and_map,
    "wait-and-fail" => wait_and_fail,
    "step-functions-hello-world" => hello_world,
    "invalid-definition" => invalid_definition,
    "delete-aborts" => delete_aborts,
    "resume-after-lease-loss" => resume_after_lease_loss,
    "fifty-concurrent-runs" => fifty_concurrent_runs,
};

pub struct Ctx {
    client: kube::Client,
    ns: String,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("functions.minik8s.io", "v1alpha1", kind),
        plural,
    )
}

/// `classify`: big or small by `$.n`.
const CLASSIFY: &str = r#"
def handle(event):
    return {"kind": "big" if event.get("n", 0) > 10 else "small"}
"#;

/// `tools`: what `$.op` says. `flaky` raises its own error twice per key, then answers.
const TOOLS: &str = r#"
import time
calls = {}

class Flaky(Exception):
    pass

def handle(event):
    op = event.get("op")
    if op == "label":
        return {"label": event["label"], "n": event.get("n")}
    if op == "double":
        return event["n"] * 2
    if op == "boom":
        raise ValueError("bad input")
    if op == "flaky":
        key = event["key"]
        calls[key] = calls.get(key, 0) + 1
        if calls[key] <= 2:
            raise Flaky(f"attempt {calls[key]}")
        return {"attempts": calls[key]}
    if op == "sleep":
        time.sleep(event["seconds"])
        return {"slept": event["seconds"]}
    return {"echo": event}
"#;

pub async fn run(env: &Arc<Env>) {
    let ctx = Ctx {
        client: env.client.clone(),
        ns: format!("conf-workflows-{}", env.run),
    };
    let set_up = async {
        support::create_namespace(&ctx.client, &ctx.ns).await?;
        ctx.function("classify", CLASSIFY).await?;
        ctx.function("tools", TOOLS).await
    };
    if let Err(e) = set_up.await {
        support::fail_set_up("workflows", CASES, &env.selection, &env.report, &e);
        return;
    }
    support::run_cases(
        "workflows",
        &ctx,
        CASES,
        &env.selection,
        &env.report,
        Duration::from_secs(180),
    )
    .await;
    support::remove_namespace(
        &ctx.client,
        &ctx.ns,
        &[
            resource("WorkflowRun", "workflowruns"),
            resource("Workflow", "workflows"),
            resource("Function", "functions"),
        ],
    )
    .await;
}

impl Ctx {
    fn api(&self, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, &resource(kind, plural))
    }

    fn runs(&self) -> Api<DynamicObject> {
        self.api("WorkflowRun", "workflowruns")
    }

    async fn function(&self, name: &str, source: &str) -> anyhow::Result<()> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "functions.minik8s.io/v1alpha1", "kind": "Function",
            "metadata": {"name": name}, "spec": {"source": source},
        }))?;
        let api = self.api("Function", "functions");
        api.create(&PostParams::default(), &obj).await?;
        eventually(
            Duration::from_secs(120),
            &format!("function {name} Ready"),
            || async {
                let f = api.get(name).await?;
                ensure!(ready(&f).0 == "True", "{:?}", ready(&f));
                Ok(())
            },
        )
        .await
    }

    async fn workflow(&self, name: &str, definition: Value) -> anyhow::Result<()> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "functions.minik8s.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name}, "spec": {"definition": definition},
        }))?;
        self.api("Workflow", "workflows")
            .create(&PostParams::default(), &obj)
            .await?;
        Ok(())
    }

    /// Creates a run of `workflow` with `input`; its name.
    async fn start(&self, workflow: &str, input: Value) -> anyhow::Result<String> {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "functions.minik8s.io/v1alpha1", "kind": "WorkflowRun",
            "metadata": {"generateName": format!("{workflow}-")},
            "spec": {"workflow": workflow, "input": input},
        }))?;
        let run = self.runs().create(&PostParams::default(), &obj).await?;
        run.metadata.name.context("a created run has a name")
    }

    /// Waits (on a watch) for run `name` to end; its status.
    async fn finished(&self, name: &str) -> anyhow::Result<Value> {
        let done = |r: Option<&DynamicObject>| {
            r.is_some_and(|r| {
                matches!(
                    r.data["status"]["phase"].as_str(),
                    Some("Succeeded" | "Failed" | "TimedOut" | "Aborted")
                )
            })
        };
        let run = tokio::time::timeout(
            Duration::from_secs(120),
            await_condition(self.runs(), name, done),
        )
        .await
        .with_context(|| format!("run {name} did not end within 120s"))??
        .context("run gone")?;
        Ok(run.data["status"].clone())
    }

    async fn run_to_end(&self, workflow: &str, input: Value) -> anyhow::Result<Value> {
        let name = self.start(workflow, input).await?;
        self.finished(&name).await
    }
}

fn ready(obj: &DynamicObject) -> (String, String, String) {
    let c = obj.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

fn succeeded(status: &Value) -> anyhow::Result<&Value> {
    ensure!(
        status["phase"] == "Succeeded",
        "phase {} error {} cause {}",
        status["phase"],
        status["error"],
        status["cause"]
    );
    Ok(&status["output"])
}

/// The history's events of `ty` for `state`.
fn events<'a>(status: &'a Value, ty: &str, state: &str) -> Vec<&'a Value> {
    status["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter(|e| e["type"] == ty && e["state"] == state)
                .collect()
        })
        .unwrap_or_default()
}

fn seeds_definition() -> Value {
    json!({
        "Comment": "a Task's output picks the next Task",
        "StartAt": "Classify",
        "States": {
            "Classify": {"Type": "Task", "Resource": "classify", "ResultPath": "$.class", "Next": "Route"},
            "Route": {"Type": "Choice", "Choices": [
                {"Variable": "$.class.kind", "StringEquals": "big", "Next": "Big"}
            ], "Default": "Small"},
            "Big": {"Type": "Task", "Resource": "tools",
                    "Parameters": {"op": "label", "label": "big", "n.$": "$.n"}, "End": true},
            "Small": {"Type": "Task", "Resource": "tools",
                      "Parameters": {"op": "label", "label": "small", "n.$": "$.n"}, "End": true}
        }
    })
}

/// Through the gateway: the run's output is the answer. `classify` has no pod of its own
/// before (a Function starts at zero): the workflow's call brings one.
async fn seeds_example(c: &Ctx) -> anyhow::Result<()> {
    c.workflow("seeds", seeds_definition()).await?;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), &c.ns);
    let own = ListParams::default().labels("serving.knative.dev/service=classify");
    let before = pods.list(&own).await?.items.len();
    ensure!(before == 0, "classify has {before} pods before any call");
    for (n, label) in [(42, "big"), (3, "small")] {
        let path = format!("/workflow/seeds.{}?timeout=60", c.ns);
        let (code, body) = support::http(
            std::net::SocketAddr::from(([127, 0, 0, 1], 8080)),
            "POST",
            "gateway",
            &path,
            Some(&json!({"n": n}).to_string()),
            Duration::from_secs(90),
        )
        .await?;
        ensure!(code == 200, "{code}: {body}");
        let v: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
        ensure!(v == json!({"label": label, "n": n}), "{v}");
    }
    Ok(())
}

async fn retry_backoff(c: &Ctx) -> anyhow::Result<()> {
    c.workflow(
        "retry",
        json!({"StartAt": "Flaky", "States": {"Flaky": {
            "Type": "Task", "Resource": "tools",
            "Parameters": {"op": "flaky", "key.$": "$$.Execution.Name"},
            "Retry": [{"ErrorEquals": ["Flaky"], "IntervalSeconds": 1, "BackoffRate": 2, "MaxAttempts": 3}],
            "End": true}}}),
    )
    .await?;
    let status = c.run_to_end("retry", json!({})).await?;
    let output = succeeded(&status)?;
    ensure!(*output == json!({"attempts": 3}), "{output}");
    let failed: Vec<(Value, Value)> = events(&status, "TaskFailed", "Flaky")
        .iter()
        .map(|e| (e["attempt"].clone(), e["error"].clone()))
        .collect();
    ensure!(
        failed == [(json!(1), json!("Flaky")), (json!(2), json!("Flaky"))],
        "{failed:?}"
    );
    Ok(())
}

async fn catch_fallback(c: &Ctx) -> anyhow::Result<()> {
    c.workflow(
        "catch",
        json!({"StartAt": "Boom", "States": {
            "Boom": {"Type": "Task", "Resource": "tools", "Parameters": {"op": "boom"},
                     "Catch": [{"ErrorEquals": ["ValueError"], "ResultPath": "$.error", "Next": "Fallback"}],
                     "End": true},
            "Fallback": {"Type": "Task", "Resource": "tools",
                         "Parameters": {"op": "label", "label": "fallback", "n.$": "$.error.Error"}, "End": true}
        }}),
    )
    .await?;
    let status = c.run_to_end("catch", json!({"x": 1})).await?;
    let output = succeeded(&status)?;
    ensure!(
        *output == json!({"label": "fallback", "n": "ValueError"}),
        "{output}"
    );
    ensure!(events(&status, "TaskFailed", "Boom").len() == 1);
    Ok(())
}

async fn parallel_and_map(c: &Ctx) -> anyhow::Result<()> {
    c.workflow(
        "fanout",
        json!({"StartAt": "Both", "States": {
            "Both": {"Type": "Parallel", "Next": "Each", "ResultPath": "$.both", "Branches": [
                {"StartAt": "Slow", "States": {"Slow": {"Type": "Task", "Resource": "tools",
                    "Parameters": {"op": "sleep", "seconds": 1}, "End": true}}},
                {"StartAt": "Fast", "States": {"Fast": {"Type": "Task", "Resource": "classify", "End": true}}}
            ]},
            "Each": {"Type": "Map", "ItemsPath": "$.items", "MaxConcurrency": 2, "ResultPath": "$.doubled",
                     "ItemSelector": {"op": "double", "n.$": "$$.Map.Item.Value"},
                     "ItemProcessor": {"StartAt": "Double", "States": {
                         "Double": {"Type": "Task", "Resource": "tools", "End": true}}},
                     "End": true}
        }}),
    )
    .await?;
    let status = c
        .run_to_end("fanout", json!({"n": 50, "items": [1, 2, 3, 4, 5]}))
        .await?;
    let output = succeeded(&status)?;
    let want = json!({
        "n": 50, "items": [1, 2, 3, 4, 5],
        "both": [{"slept": 1}, {"kind": "big"}],
        "doubled": [2, 4, 6, 8, 10],
    });
    ensure!(*output == want, "{output}");
    Ok(())
}

async fn wait_and_fail(c: &Ctx) -> anyhow::Result<()> {
    c.workflow(
        "refuse",
        json!({"StartAt": "Pause", "States": {
            "Pause": {"Type": "Wait", "Seconds": 1, "Next": "No"},
            "No": {"Type": "Fail", "Error": "Refused", "Cause": "the answer is no"}
        }}),
    )
    .await?;
    let status = c.run_to_end("refuse", json!({})).await?;
    ensure!(status["phase"] == "Failed", "{}", status["phase"]);
    ensure!(
        status["error"] == "Refused" && status["cause"] == "the answer is no",
        "{status}"
    );
    ensure!(
        events(&status, "StateExited", "Pause").len() == 1,
        "{}",
        status["history"]
    );
    Ok(())
}

/// The "Hello world" template of the Step Functions console, as it is.
async fn hello_world(c: &Ctx) -> anyhow::Result<()> {
    let definition: Value = serde_json::from_str(HELLO_WORLD)?;
    c.workflow("hello-world", definition).await?;
    let input = json!({"IsHelloWorldExample": true});
    let status = c.run_to_end("hello-world", input.clone()).await?;
    let output = succeeded(&status)?;
    ensure!(*output == json!([input, input]), "{output}");
    let status = c
        .run_to_end("hello-world", json!({"IsHelloWorldExample": false}))
        .await?;
    ensure!(
        status["phase"] == "Failed" && status["cause"] == "Not Hello World",
        "{status}"
    );
    Ok(())
}

const HELLO_WORLD: &str = r#"{
  "Comment": "A Hello World example demonstrating various state types of the Amazon States Language",
  "StartAt": "Pass",
  "States": {
    "Pass": {
      "Comment": "A Pass state passes its input to its output, without performing work. Pass states are useful when constructing and debugging state machines.",
      "Type": "Pass",
      "Next": "Hello World example?"
    },
    "Hello World example?": {
      "Comment": "A Choice state adds branching logic to a state machine. Choice rules can implement 16 different comparison operators, and can be combined using And, Or, and Not",
      "Type": "Choice",
      "Choices": [
        {"Variable": "$.IsHelloWorldExample", "BooleanEquals": true, "Next": "Yes"},
        {"Variable": "$.IsHelloWorldExample", "BooleanEquals": false, "Next": "No"}
      ],
      "Default": "Yes"
    },
    "Yes": {"Type": "Pass", "Next": "Wait 3 sec"},
    "No": {"Type": "Fail", "Cause": "Not Hello World"},
    "Wait 3 sec": {
      "Comment": "A Wait state delays the state machine from continuing for a specified time.",
      "Type": "Wait",
      "Seconds": 3,
      "Next": "Parallel State"
    },
    "Parallel State": {
      "Comment": "A Parallel state can be used to create parallel branches of execution in your state machine.",
      "Type": "Parallel",
      "Next": "Hello World",
      "Branches": [
        {"StartAt": "Hello", "States": {"Hello": {"Type": "Pass", "End": true}}},
        {"StartAt": "World", "States": {"World": {"Type": "Pass", "End": true}}}
      ]
    },
    "Hello World": {"Type": "Pass", "End": true}
  }
}"#;

async fn invalid_definition(c: &Ctx) -> anyhow::Result<()> {
    c.workflow(
        "broken",
        json!({"StartAt": "A", "States": {"A": {"Type": "Pass", "Next": "Missing"}, "B": {"Type": "Succeed"}}}),
    )
    .await?;
    c.workflow(
        "ghost",
        json!({"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "nobody", "End": true}}}),
    )
    .await?;
    let api = c.api("Workflow", "workflows");
    for (name, reason, says) in [
        (
            "broken",
            "InvalidDefinition",
            "missing 'Next' target: Missing at /States/A/Next",
        ),
        (
            "broken",
            "InvalidDefinition",
            "state \"B\" is not reachable at /States/B",
        ),
        (
            "ghost",
            "FunctionNotFound",
            "function(s) not found: nobody.",
        ),
    ] {
        eventually(
            Duration::from_secs(30),
            &format!("{name} says {reason}"),
            || async {
                let (status, r, message) = ready(&api.get(name).await?);
                ensure!(
                    status == "False" && r == reason && message.contains(says),
                    "{status} {r} {message}"
                );
                Ok(())
            },
        )
        .await?;
    }
    // A run of a broken workflow fails at once, saying why.
    let status = c.run_to_end("broken", json!({})).await?;
    ensure!(
        status["phase"] == "Failed" && status["error"] == "InvalidDefinition",
        "{status}"
    );
    Ok(())
}

/// A run deleted while its Task runs: its phase becomes Aborted (a watcher sees it), the
/// next Task is never called, and the run goes.
async fn delete_aborts(c: &Ctx) -> anyhow::Result<()> {
    c.workflow(
        "abortable",
        json!({"StartAt": "Sleep", "States": {
            "Sleep": {"Type": "Task", "Resource": "tools",
                      "Parameters": {"op": "sleep", "seconds": 5}, "Next": "After"},
            "After": {"Type": "Pass", "End": true}
        }}),
    )
    .await?;
    let name = c.start("abortable", json!({})).await?;
    let in_sleep = |r: Option<&DynamicObject>| {
        r.is_some_and(|r| !events(&r.data["status"], "StateEntered", "Sleep").is_empty())
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(c.runs(), &name, in_sleep),
    )
    .await
    .context("the run never entered Sleep")??;
    c.runs().delete(&name, &Default::default()).await?;
    let status = c.finished(&name).await?;
    ensure!(status["phase"] == "Aborted", "{status}");
    ensure!(
        events(&status, "StateEntered", "After").is_empty(),
        "{}",
        status["history"]
    );
    let gone = |r: Option<&DynamicObject>| r.is_none();
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(c.runs(), &name, gone),
    )
    .await
    .context("the aborted run was not removed")??;
    Ok(())
}

/// The lease of the knative-lite controllers is taken from their process while a Task is
/// in flight: the controllers stop, take the lease back when it expires, and the run
/// carries on from its stored status to the right output, the Task before not run again.
async fn resume_after_lease_loss(c: &Ctx) -> anyhow::Result<()> {
    c.workflow(
        "resumable",
        json!({"StartAt": "First", "States": {
            "First": {"Type": "Task", "Resource": "classify", "ResultPath": "$.class", "Next": "Sleep"},
            "Sleep": {"Type": "Task", "Resource": "tools", "ResultPath": "$.slept",
                      "Parameters": {"op": "sleep", "seconds": 3}, "Next": "Last"},
            "Last": {"Type": "Task", "Resource": "tools",
                     "Parameters": {"op": "label", "label.$": "$.class.kind", "n.$": "$.n"}, "End": true}
        }}),
    )
    .await?;
    let name = c.start("resumable", json!({"n": 7})).await?;
    let runs = c.runs();
    let in_sleep = |r: Option<&DynamicObject>| {
        r.is_some_and(|r| !events(&r.data["status"], "StateEntered", "Sleep").is_empty())
    };
    tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(runs, &name, in_sleep),
    )
    .await
    .context("the run never entered Sleep")??;
    let leases: Api<Lease> = Api::namespaced(c.client.clone(), "kube-system");
    let mut lease = leases.get("knative-serving-controller").await?;
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some("conformance-thief".into());
    spec.lease_duration_seconds = Some(3);
    spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    leases
        .replace("knative-serving-controller", &PostParams::default(), &lease)
        .await?;
    let status = c.finished(&name).await?;
    let output = succeeded(&status)?;
    ensure!(*output == json!({"label": "small", "n": 7}), "{output}");
    ensure!(
        events(&status, "StateEntered", "First").len() == 1,
        "First entered more than once: {}",
        status["history"]
    );
    let now_held = leases
        .get("knative-serving-controller")
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    ensure!(
        now_held.is_some() && now_held.as_deref() != Some("conformance-thief"),
        "lease held by {now_held:?} (was {holder:?})"
    );
    Ok(())
}

async fn fifty_concurrent_runs(c: &Ctx) -> anyhow::Result<()> {
    c.workflow("many", seeds_definition()).await?;
    let mut names = Vec::new();
    for n in 0..50 {
        names.push((n, c.start("many", json!({"n": n})).await?));
    }
    for (n, name) in names {
        let status = c.finished(&name).await?;
        let output = succeeded(&status).with_context(|| name.clone())?;
        let label = if n > 10 { "big" } else { "small" };
        ensure!(
            *output == json!({"label": label, "n": n}),
            "{name}: {output}"
        );
    }
    Ok(())
}
