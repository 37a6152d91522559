//! What the pages are checked against, made with stock kubectl as a user would: the
//! dashboard's ServiceAccount from the manifest the server serves, and a namespace holding
//! one of each kind the dashboard shows.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub struct Kubectl {
    bin: String,
    kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn new(bin: &str, kubeconfig: &Path) -> Kubectl {
        Kubectl {
            bin: bin.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
        }
    }

    /// Runs kubectl with `args` (and `stdin`); its standard output, or its error.
    pub async fn run(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let mut child = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.bin))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().context("kubectl's stdin")?;
            pipe.write_all(input.as_bytes()).await?;
        }
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The API server's address in the kubeconfig's current context.
pub fn server_url(kubeconfig: &Path) -> anyhow::Result<String> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let context = config.current_context.clone().unwrap_or_default();
    let cluster = config
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .context("no current context")?;
    config
        .clusters
        .iter()
        .find(|c| c.name == cluster)
        .and_then(|c| c.cluster.as_ref()?.server.clone())
        .map(|s| s.trim_end_matches('/').to_owned())
        .with_context(|| format!("no server for cluster {cluster}"))
}

/// Applies the manifest `/dashboard/rbac.yaml` serves, as its comment says to; answers
/// whether the binding was not there before (so that the test removes what it added).
pub async fn install_rbac(kubectl: &Kubectl) -> anyhow::Result<bool> {
    let existed = kubectl
        .run(
            &[
                "get",
                "clusterrolebinding",
                "minik8s-dashboard",
                "-o",
                "name",
            ],
            None,
        )
        .await
        .is_ok();
    let manifest = kubectl
        .run(&["get", "--raw", "/dashboard/rbac.yaml"], None)
        .await?;
    kubectl.run(&["apply", "-f", "-"], Some(&manifest)).await?;
    Ok(!existed)
}

pub async fn remove_rbac(kubectl: &Kubectl) {
    for (ns, what) in [
        ("", "clusterrolebinding/minik8s-dashboard"),
        ("", "clusterrole/minik8s-dashboard"),
        ("kube-system", "serviceaccount/minik8s-dashboard"),
    ] {
        let mut args = vec!["delete", what, "--ignore-not-found"];
        if !ns.is_empty() {
            args.extend(["-n", ns]);
        }
        let _ = kubectl.run(&args, None).await;
    }
}

const FIXTURES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: NS}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: NS}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: ticker
        image: busybox:1.36
        imagePullPolicy: Never
        command: [sh, -c, 'i=0; while true; do echo "tick $i"; i=$((i+1)); sleep 1; done']
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: NS}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: NS}
spec:
  serviceName: db
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: db, image: busybox:1.36, imagePullPolicy: Never, command: [sleep, "3600"]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: once, namespace: NS}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: once, image: busybox:1.36, imagePullPolicy: Never, command: [echo, done]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: NS}
spec:
  schedule: "0 3 * * *"
  suspend: true
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: nightly, image: busybox:1.36, imagePullPolicy: Never, command: [echo, nightly]}
---
apiVersion: functions.minik8s.io/v1alpha1
kind: Function
metadata: {name: hello, namespace: NS}
spec:
  source: |
    def handle(body):
        return {"hello": body.get("name", "world")}
---
apiVersion: functions.minik8s.io/v1alpha1
kind: Workflow
metadata: {name: greet, namespace: NS}
spec:
  definition:
    StartAt: Prepare
    States:
      Prepare: {Type: Pass, Result: {name: dashboard, count: 2}, Next: Decide}
      Decide:
        Type: Choice
        Choices: [{Variable: $.count, NumericGreaterThan: 0, Next: Call}]
        Default: Skip
      Call:
        Type: Task
        Resource: hello
        Retry: [{ErrorEquals: [States.TaskFailed], MaxAttempts: 2}]
        Catch: [{ErrorEquals: [States.ALL], Next: Oops}]
        Next: Done
      Skip: {Type: Pass, Next: Done}
      Done: {Type: Succeed}
      Oops: {Type: Fail, Error: HelloFailed}
---
apiVersion: v1
kind: Event
metadata: {name: dashboard-e2e.warning, namespace: NS}
involvedObject: {apiVersion: apps/v1, kind: Deployment, name: web, namespace: NS}
reason: DashboardTest
message: a Warning event recorded by the dashboard's browser test
type: Warning
count: 1
firstTimestamp: NOW
lastTimestamp: NOW
source: {component: dashboard-e2e}
"#;

/// The test's namespace and everything in it.
pub async fn create(kubectl: &Kubectl, ns: &str) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let manifest = FIXTURES.replace("NS", ns).replace("NOW", &now);
    kubectl.run(&["apply", "-f", "-"], Some(&manifest)).await?;
    Ok(())
}

pub async fn function_ready(kubectl: &Kubectl, ns: &str) -> anyhow::Result<()> {
    kubectl
        .run(
            &[
                "-n",
                ns,
                "wait",
                "function/hello",
                "--for=condition=Ready",
                "--timeout=180s",
            ],
            None,
        )
        .await?;
    Ok(())
}

pub struct Run {
    pub name: String,
    /// The states the run exited, from its history.
    pub exited: Vec<String>,
}

/// Runs the Workflow to the end; it must succeed through its Task.
pub async fn run_workflow(kubectl: &Kubectl, ns: &str) -> anyhow::Result<Run> {
    let name = "greet-run";
    let manifest = format!(
        "apiVersion: functions.minik8s.io/v1alpha1\nkind: WorkflowRun\nmetadata: {{name: {name}, namespace: {ns}, labels: {{functions.minik8s.io/workflow: greet}}}}\nspec: {{workflow: greet, input: {{}}}}\n"
    );
    kubectl.run(&["create", "-f", "-"], Some(&manifest)).await?;
    // Until the run ends: a poll with a deadline (kubectl wait cannot wait for "any of").
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    let run = loop {
        let run: Value = serde_json::from_str(
            &kubectl
                .run(&["-n", ns, "get", "workflowrun", name, "-o", "json"], None)
                .await?,
        )?;
        let phase = run["status"]["phase"].as_str().unwrap_or("");
        if matches!(phase, "Succeeded" | "Failed" | "TimedOut" | "Aborted") {
            break run;
        }
        if std::time::Instant::now() > deadline {
            bail!("the run is still {phase:?} after 180 s");
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    if run["status"]["phase"] != "Succeeded" {
        bail!(
            "the run ended {}: {} {}; history: {}",
            run["status"]["phase"],
            run["status"]["error"],
            run["status"]["cause"],
            run["status"]["history"]
        );
    }
    let mut exited = Vec::new();
    for e in run["status"]["history"].as_array().into_iter().flatten() {
        if e["type"] == "StateExited"
            && let Some(s) = e["state"].as_str()
            && !exited.iter().any(|x| x == s)
        {
            exited.push(s.to_owned());
        }
    }
    if !exited.iter().any(|s| s == "Call") {
        bail!("the run never left Call: {:?}", exited);
    }
    Ok(Run {
        name: name.to_owned(),
        exited,
    })
}
