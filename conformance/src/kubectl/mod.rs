//! The kubectl matrix: every case runs with each kubectl minor (1.27–1.33, the binaries
//! themselves, not the dispatcher), in a namespace of its own per binary and run, through a
//! copy of the admin kubeconfig whose context points at that namespace. Cases check what
//! kubectl printed and what the API holds afterwards, and delete what they created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::Env;
use crate::support::{self, CaseFn, contains, eventually, gone};

mod applets;
mod auth;
mod autoscale;
mod debug;
mod knative;
mod nonresource;
mod policy;
mod scheduling;
mod statefulset;
mod storage;
mod volumes;

/// One kubectl binary of the matrix.
#[derive(Clone)]
pub struct Binary {
    pub path: String,
    /// `kubectl-1.32`: the prefix of its case names.
    pub label: String,
    /// `k132`: part of its namespace and cluster-scoped names.
    pub tag: String,
    /// The minor version its file name promises, checked by the `version` case.
    pub minor: Option<u32>,
}

impl Binary {
    pub fn new(path: &str) -> Self {
        let file = Path::new(path)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.to_string());
        let minor = file
            .strip_prefix("kubectl.1.")
            .and_then(|m| m.parse::<u32>().ok());
        let (label, tag) = match minor {
            Some(m) => (format!("kubectl-1.{m}"), format!("k1{m}")),
            None => {
                let t: String = file
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .take(8)
                    .collect::<String>()
                    .to_ascii_lowercase();
                (file.clone(), t)
            }
        };
        Binary {
            path: path.to_string(),
            label,
            tag,
            minor,
        }
    }
}

pub const CASES: &[(&str, CaseFn<Ctx>)] = crate::cases! { Ctx;
    "version" => version,
    "api-resources" => api_resources,
    "get-namespaces" => get_namespaces,
    "get-table" => get_table,
    "get-wide" => get_wide,
    "get-yaml-json" => get_yaml_json,
    "get-jsonpath" => get_jsonpath,
    "get-custom-columns" => get_custom_columns,
    "get-name" => get_name,
    "describe" => describe,
    "create-f" => create_f,
    "create-configmap" => create_configmap,
    "create-secret" => create_secret,
    "create-deployment" => create_deployment,
    "create-namespace" => create_namespace,
    "apply-client-side" => apply_client_side,
    "apply-server-side" => apply_server_side,
    "apply-server-side-conflict" => apply_server_side_conflict,
    "diff" => diff,
    "edit" => edit,
    "patch-json" => patch_json,
    "patch-merge" => patch_merge,
    "patch-strategic" => patch_strategic,
    "label" => label,
    "annotate" => annotate,
    "scale" => scale,
    "rollout" => rollout,
    "delete-deployment-cascade" => delete_deployment_cascade,
    "delete-f" => delete_f,
    "delete-selector" => delete_selector,
    "delete-wait" => delete_wait,
    "delete-namespace" => delete_namespace,
    "wait-condition" => wait_condition,
    "wait-delete" => wait_delete,
    "get-watch" => get_watch,
    "explain" => explain,
    "apply-kustomize" => apply_kustomize,
    "custom-resources" => custom_resources,
    "pod-lifecycle" => pod_lifecycle,
    "logs" => logs,
    "exec" => exec,
    "cp" => cp,
    "port-forward" => port_forward,
    "attach" => attach,
    "logs-previous" => logs_previous,
    "top-node" => top_node,
    "top-pod" => top_pod,
    "errors" => errors,
    "cluster-dns" => cluster_dns,
    "host-port" => host_port,
    "ingress" => ingress,
    "create-token" => create_token,
    "auth-whoami-as" => auth_whoami_as,
    "auth-can-i" => auth::auth_can_i,
    "auth-whoami" => auth::auth_whoami,
    "auth-reconcile" => auth::auth_reconcile,
    "create-rbac" => auth::create_rbac,
    "create-dry-run-conflict" => create_dry_run_conflict,
    "crd-bad-schema" => crd_bad_schema,
    "raw-paths" => nonresource::raw_paths,
    "node-metrics" => nonresource::node_metrics,
    "componentstatuses" => nonresource::componentstatuses,
    "busybox-applets" => applets::busybox_applets,
    "autoscale" => autoscale::autoscale,
    "create-policy-objects" => policy::create_policy_objects,
    "certificate-approve" => policy::certificate_approve,
    "certificate-deny" => auth::certificate_deny,
    "get-rc" => policy::get_rc,
    "get-apiservices" => policy::get_apiservices,
    "drain" => policy::drain,
    "quota-pods" => policy::quota_pods,
    "limitrange-defaults" => policy::limitrange_defaults,
    "preemption" => scheduling::preemption,
    "runtime-class" => scheduling::runtime_class,
    "statefulset" => statefulset::statefulset,
    "statefulset-rollout" => statefulset::statefulset_rollout,
    "daemonset-rollout" => statefulset::daemonset_rollout,
    "storage-classes" => storage::storage_classes,
    "pv-static-binding" => storage::static_binding,
    "pv-retain" => storage::retain,
    "pvc-protection" => storage::pvc_protection,
    "pvc-expand" => storage::expand,
    "pvc-dynamic-wffc" => storage::dynamic_wffc,
    "persistent-volumes" => volumes::persistent_volumes,
    "debug" => debug::debug,
    "knative-service" => knative::knative_service,
    "kubectl-fn" => knative::kubectl_fn,
};

/// Runs the selected cases with one binary, in a namespace of its own.
pub async fn run(env: &Arc<Env>, bin: Binary) {
    let prefix = bin.label.clone();
    let ctx = match Ctx::setup(env.clone(), bin).await {
        Ok(c) => c,
        Err(e) => {
            support::fail_set_up(&prefix, CASES, &env.selection, &env.report, &e);
            return;
        }
    };
    support::run_cases(
        &prefix,
        &ctx,
        CASES,
        &env.selection,
        &env.report,
        Duration::from_secs(120),
    )
    .await;
    let widgets = ctx.widget_resource();
    support::remove_namespace(&env.client, &ctx.ns, &[widgets]).await;
    support::remove_crd(&env.client, &format!("widgets.{}", ctx.widget_group())).await;
    for ns in [ctx.extra_ns("created"), ctx.extra_ns("deleted")] {
        support::remove_namespace(&env.client, &ns, &[]).await;
    }
}

/// What a kubectl invocation printed.
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub code: Option<i32>,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// A kubectl running in the background (`wait`, `delete --wait`).
struct Background {
    child: tokio::process::Child,
    stderr: tokio::task::JoinHandle<String>,
    watching: Option<tokio::sync::oneshot::Receiver<()>>,
    shown: String,
    limit: Duration,
}

impl Background {
    /// Returns once kubectl's watch request has been answered.
    async fn watching(&mut self) -> anyhow::Result<()> {
        let rx = self
            .watching
            .take()
            .context("already waited for the watch")?;
        match tokio::time::timeout(Duration::from_secs(20), rx).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => bail!("`kubectl {}` ended without opening a watch", self.shown),
            Err(_) => bail!("`kubectl {}` opened no watch within 20 s", self.shown),
        }
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    async fn finish(mut self) -> anyhow::Result<Run> {
        let mut stdout = self.child.stdout.take().expect("piped stdout");
        let mut out = Vec::new();
        let status = tokio::time::timeout(self.limit, async {
            use tokio::io::AsyncReadExt;
            stdout.read_to_end(&mut out).await?;
            self.child.wait().await
        })
        .await
        .map_err(|_| {
            anyhow!(
                "`kubectl {}` did not finish within {} s",
                self.shown,
                self.limit.as_secs()
            )
        })??;
        Ok(Run {
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: self.stderr.await.unwrap_or_default(),
            code: status.code(),
        })
    }
}

/// Reads the stderr of a kubectl run with `-v=6`: the receiver fires when the first watch
/// request has been answered; the task returns what stderr held besides klog's lines.
fn watch_signal(
    stderr: tokio::process::ChildStderr,
) -> (
    tokio::task::JoinHandle<String>,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut tx = Some(tx);
        let mut kept = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("watch=true")
                && line.contains("200 OK")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
            if !is_klog(&line) {
                kept.push(line);
            }
        }
        kept.join("\n")
    });
    (task, rx)
}

/// Whether a line is one of klog's (`I1121 10:01:00.610570 ...`), as `-v=6` prints.
fn is_klog(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 6
        && matches!(b[0], b'I' | b'W' | b'E' | b'F')
        && b[1..5].iter().all(u8::is_ascii_digit)
        && b[5] == b' '
}

/// The context of one kubectl suite.
pub struct Ctx {
    env: Arc<Env>,
    bin: Binary,
    client: kube::Client,
    /// The suite's namespace; the kubeconfig's context points at it.
    ns: String,
    /// Manifests, the editor script, HOME (so kubectl's discovery cache is private).
    dir: PathBuf,
    kubeconfig: PathBuf,
}

/// How long a kubectl command may run: 60 s, or its own `--timeout` and 30 s more, so that a
/// command given a deadline fails with kubectl's own message rather than the suite's.
fn kubectl_limit(args: &[&str]) -> Duration {
    let own = args
        .iter()
        .filter_map(|a| a.strip_prefix("--timeout="))
        .filter_map(|t| t.strip_suffix('s')?.parse::<u64>().ok())
        .max();
    match own {
        Some(secs) => Duration::from_secs(secs + 30).max(Duration::from_secs(60)),
        None => Duration::from_secs(60),
    }
}

impl Ctx {
    async fn setup(env: Arc<Env>, bin: Binary) -> anyhow::Result<Ctx> {
        let ns = format!("conf-{}-{}", bin.tag, env.run);
        let dir = env.tmp.join(&bin.tag);
        std::fs::create_dir_all(dir.join("home"))?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::copy(&env.kubeconfig, &kubeconfig)
            .with_context(|| format!("copying {}", env.kubeconfig.display()))?;
        let ctx = Ctx {
            client: env.client.clone(),
            env,
            bin,
            ns,
            dir,
            kubeconfig,
        };
        support::create_namespace(&ctx.client, &ctx.ns).await?;
        let ns_arg = format!("--namespace={}", ctx.ns);
        ctx.ok(&["config", "set-context", "--current", &ns_arg])
            .await?;
        Ok(ctx)
    }

    fn command(&self, args: &[&str], envs: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(&self.bin.path);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.join("home"))
            .env_remove("KUBE_EDITOR")
            .env_remove("EDITOR")
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .env_remove("KUBECTL_KUBERC")
            .kill_on_drop(true);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs kubectl with `args`, feeding `stdin` if given, killing it after a minute.
    async fn run_with(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        envs: &[(&str, &str)],
    ) -> anyhow::Result<Run> {
        let mut cmd = self.command(args, envs);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("running {}", self.bin.path))?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(input.as_bytes()).await?;
            drop(pipe);
        }
        let limit = kubectl_limit(args);
        let out = tokio::time::timeout(limit, child.wait_with_output())
            .await
            .map_err(|_| {
                anyhow!(
                    "kubectl {} did not finish within {} s",
                    args.join(" "),
                    limit.as_secs()
                )
            })??;
        Ok(Run {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code(),
        })
    }

    async fn run(&self, args: &[&str]) -> anyhow::Result<Run> {
        self.run_with(args, None, &[]).await
    }

    /// Runs kubectl and fails unless it exits 0; returns stdout.
    async fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        self.ok_with(args, None, &[]).await
    }

    async fn ok_with(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        envs: &[(&str, &str)],
    ) -> anyhow::Result<String> {
        let r = self.run_with(args, stdin, envs).await?;
        if !r.ok() {
            bail!(
                "`kubectl {}` exited {}: {}",
                self.show(args),
                r.code.map_or("by a signal".into(), |c| c.to_string()),
                if r.stderr.trim().is_empty() {
                    format!("(stdout: {})", self.gist(&r.stdout))
                } else {
                    self.gist(&r.stderr)
                }
            );
        }
        Ok(r.stdout)
    }

    /// A command line for a message: paths relative to the suite's directory, long
    /// arguments cut.
    fn show(&self, args: &[&str]) -> String {
        let dir = format!("{}/", self.dir.display());
        args.iter()
            .map(|a| {
                let a = a.replace(&dir, "");
                if a.chars().count() > 60 {
                    format!("{}…", a.chars().take(60).collect::<String>())
                } else {
                    a
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// What kubectl printed, as one line: its first and last lines when there are more
    /// (kubectl puts the server's reason last in multi-line errors such as apply's).
    fn gist(&self, out: &str) -> String {
        let dir = format!("{}/", self.dir.display());
        let out = out.replace(&dir, "");
        let lines: Vec<&str> = out
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        match lines.as_slice() {
            [] => String::new(),
            [one] => one.to_string(),
            [first, .., last] if lines.len() > 2 => format!("{first} … {last}"),
            _ => lines.join(" | "),
        }
    }

    /// Runs kubectl and fails unless it exits non-zero; returns stderr.
    async fn fails(&self, args: &[&str]) -> anyhow::Result<String> {
        let r = self.run(args).await?;
        ensure!(
            !r.ok(),
            "`kubectl {}` succeeded but should have failed: {}",
            self.show(args),
            self.gist(&r.stdout)
        );
        Ok(r.stderr)
    }

    /// Starts kubectl in the background with `-v=6`, whose request log tells when its watch
    /// is open, so a case can change the API only once kubectl is watching.
    fn start(&self, args: &[&str]) -> anyhow::Result<Background> {
        let mut all = args.to_vec();
        all.push("-v=6");
        let mut child = self
            .command(&all, &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", self.bin.path))?;
        let (stderr, rx) = watch_signal(child.stderr.take().expect("piped stderr"));
        Ok(Background {
            child,
            stderr,
            watching: Some(rx),
            shown: self.show(args),
            limit: kubectl_limit(args),
        })
    }

    /// Retries a kubectl command that may fail until a just-created resource is served.
    async fn eventually_ok(&self, args: &[&str], limit: Duration) -> anyhow::Result<String> {
        eventually(limit, &format!("kubectl {}", args.join(" ")), || {
            self.ok(args)
        })
        .await
    }

    /// Writes a file into the suite's directory and returns its path as a string.
    /// The API server's URL, as the kubeconfig names it.
    async fn server(&self) -> anyhow::Result<String> {
        let out = self
            .ok(&[
                "config",
                "view",
                "--minify",
                "-o",
                "jsonpath={.clusters[0].cluster.server}",
            ])
            .await?;
        Ok(out.trim().to_string())
    }

    fn write(&self, name: &str, content: &str) -> anyhow::Result<String> {
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, content)?;
        Ok(path.to_string_lossy().into_owned())
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// A namespace name for the namespace cases, unique per binary and run.
    fn extra_ns(&self, what: &str) -> String {
        format!("conf-{}-{}-{what}", self.bin.tag, self.env.run)
    }

    /// The API group of this binary's CustomResourceDefinition, unique per binary and run.
    fn widget_group(&self) -> String {
        format!("{}-{}.conformance.minik8s.io", self.bin.tag, self.env.run)
    }

    fn widget_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.widget_group(), "v1", "Widget"),
            "widgets",
        )
    }

    /// Creates `obj` through the API unless an object of that name exists.
    async fn ensure<K>(&self, obj: Value) -> anyhow::Result<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        let api: Api<K> = self.api();
        let obj: K = serde_json::from_value(obj)?;
        let name = obj.meta().name.clone().unwrap_or_default();
        if let Some(existing) = api.get_opt(&name).await? {
            return Ok(existing);
        }
        api.create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating {name} through the API"))
    }

    /// The shared read-only objects of the `get`/`describe` cases: a ConfigMap and a
    /// Deployment with two containers.
    async fn fixture(&self) -> anyhow::Result<(ConfigMap, Deployment)> {
        let cm = self
            .ensure::<ConfigMap>(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "fx-cm", "labels": {"app": "fx", "tier": "fixture"}},
                "data": {"greeting": "hello", "color": "blue"}
            }))
            .await?;
        let deploy = self
            .ensure::<Deployment>(deployment("fx-deploy", 2, &[("main", "busybox:1.36")]))
            .await?;
        Ok((cm, deploy))
    }
}

impl Ctx {
    /// A running pod of the suite for the cases that need one (logs, exec, cp,
    /// port-forward), placed on the cluster's first ready node (there is no scheduler): `main`
    /// prints `started`, then `tick N` every second; `web` serves `/index.html` on 8080.
    async fn workload(&self) -> anyhow::Result<Pod> {
        let node = self.ready_node().await?;
        self.ensure::<Pod>(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": WORKLOAD, "labels": {"app": "workload"}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c",
                        "echo started; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]},
                    {"name": "web", "image": "busybox:1.36", "command": ["sh", "-c",
                        "mkdir -p /www && echo hello-from-web > /www/index.html && exec httpd -f -p 8080 -h /www"]}
                ]
            }
        }))
        .await?;
        let api = self.api::<Pod>();
        eventually(
            Duration::from_secs(60),
            "the workload pod to run",
            || async {
                let pod = api.get(WORKLOAD).await?;
                let statuses = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.clone())
                    .unwrap_or_default();
                ensure!(
                    statuses.len() == 2
                        && statuses
                            .iter()
                            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some())),
                    "not running yet: {:?}",
                    pod.status.as_ref().and_then(|s| s.phase.clone())
                );
                Ok(pod)
            },
        )
        .await
    }
}

impl Ctx {
    /// The cluster's first ready node that runs a kubelet (hollow nodes advertise none).
    async fn ready_node(&self) -> anyhow::Result<String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .find(|n| {
                let status = n.status.as_ref();
                status
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                    && status
                        .and_then(|s| s.daemon_endpoints.as_ref())
                        .and_then(|d| d.kubelet_endpoint.as_ref())
                        .is_some_and(|e| e.port > 0)
            })
            .and_then(|n| n.metadata.name)
            .context("no ready node to run a pod on")
    }

    /// Creates the pod `manifest` on the first ready node and waits until `until` holds.
    async fn pod_until(
        &self,
        mut manifest: Value,
        what: &str,
        until: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        manifest["spec"]["nodeName"] = self.ready_node().await?.into();
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.ensure::<Pod>(manifest).await?;
        let api = self.api::<Pod>();
        eventually(Duration::from_secs(90), what, || async {
            let pod = api.get(&name).await?;
            ensure!(until(&pod), "not yet: {:?}", pod.status);
            Ok(pod)
        })
        .await
    }
}

/// The statuses of a pod's containers.
fn container_statuses(pod: &Pod) -> Vec<k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default()
}

fn all_running(pod: &Pod) -> bool {
    let statuses = container_statuses(pod);
    !statuses.is_empty()
        && statuses
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

const WORKLOAD: &str = "workload";

/// A Deployment manifest with `containers` as (name, image) pairs.
fn deployment(name: &str, replicas: i32, containers: &[(&str, &str)]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(n, i)| json!({"name": n, "image": i, "command": ["sleep", "3600"]}))
        .collect();
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": containers}
            }
        }
    })
}

fn yaml(v: &Value) -> String {
    serde_yaml::to_string(v).expect("JSON values serialize to YAML")
}

fn data_of(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The rows of a table kubectl printed, split on whitespace; the header is row 0.
fn rows(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// The row whose first column is `first`.
fn row<'a>(out: &'a str, first: &str) -> anyhow::Result<Vec<&'a str>> {
    rows(out)
        .into_iter()
        .find(|r| r.first() == Some(&first))
        .ok_or_else(|| anyhow!("no row {first:?} in: {}", support::one_line(out, 300)))
}

fn header(out: &str) -> Vec<&str> {
    rows(out).into_iter().next().unwrap_or_default()
}

/// Deletes through the API, ignoring a 404.
async fn cleanup<K>(api: &Api<K>, names: &[&str])
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for n in names {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
}

async fn version(c: &Ctx) -> anyhow::Result<()> {
    let v: Value = serde_json::from_str(&c.ok(&["version", "-o", "json"]).await?)?;
    ensure!(
        v["serverVersion"]["major"] == "1" && v["serverVersion"]["minor"] == "32",
        "server version: {}",
        v["serverVersion"]
    );
    ensure!(
        v["serverVersion"]["gitVersion"]
            .as_str()
            .is_some_and(|g| g.starts_with("v1.32.")),
        "server gitVersion: {}",
        v["serverVersion"]["gitVersion"]
    );
    if let Some(minor) = c.bin.minor {
        ensure!(
            v["clientVersion"]["minor"]
                .as_str()
                .and_then(|m| m.parse::<u32>().ok())
                == Some(minor),
            "client version: {}",
            v["clientVersion"]
        );
    }
    // 1.27 still prints version.Info structs by default; later minors print short lines.
    let plain = c.ok(&["version"]).await?;
    if c.bin.minor.is_some_and(|m| m < 28) {
        contains(&plain, "Client Version: version.Info{Major:\"1\"")?;
        contains(
            &plain,
            "Server Version: version.Info{Major:\"1\", Minor:\"32\"",
        )?;
    } else {
        contains(&plain, "Client Version: v1.")?;
        contains(&plain, "Server Version: v1.32.")?;
    }
    Ok(())
}

async fn api_resources(c: &Ctx) -> anyhow::Result<()> {
    let out = c.ok(&["api-resources"]).await?;
    ensure!(
        header(&out) == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"],
        "header: {:?}",
        header(&out)
    );
    for expected in [
        ["pods", "po", "v1", "true", "Pod"],
        ["configmaps", "cm", "v1", "true", "ConfigMap"],
        ["namespaces", "ns", "v1", "false", "Namespace"],
        ["deployments", "deploy", "apps/v1", "true", "Deployment"],
        [
            "customresourcedefinitions",
            "crd,crds",
            "apiextensions.k8s.io/v1",
            "false",
            "CustomResourceDefinition",
        ],
    ] {
        let r = row(&out, expected[0])?;
        ensure!(r == expected, "row {:?}, expected {expected:?}", r);
    }
    // A resource without short names has an empty column.
    ensure!(
        row(&out, "secrets")? == ["secrets", "v1", "true", "Secret"],
        "secrets row: {:?}",
        row(&out, "secrets")?
    );
    let wide = c.ok(&["api-resources", "-o", "wide"]).await?;
    ensure!(
        header(&wide).contains(&"VERBS"),
        "no VERBS column: {:?}",
        header(&wide)
    );
    // Verbs print as `[create delete ...]` or `create,delete,...` depending on the version.
    let deploy = row(&wide, "deployments")?;
    let verbs: Vec<&str> = deploy
        .iter()
        .flat_map(|w| w.split([',', '[', ']']))
        .collect();
    for verb in ["create", "deletecollection", "patch", "watch"] {
        ensure!(
            verbs.contains(&verb),
            "deployments verbs lack {verb}: {deploy:?}"
        );
    }
    let apps = c
        .ok(&["api-resources", "--api-group=apps", "-o", "name"])
        .await?;
    let apps: Vec<&str> = apps.lines().collect();
    for r in [
        "deployments.apps",
        "replicasets.apps",
        "statefulsets.apps",
        "daemonsets.apps",
    ] {
        ensure!(apps.contains(&r), "--api-group=apps lacks {r}: {apps:?}");
    }
    ensure!(apps.iter().all(|r| r.ends_with(".apps")), "{apps:?}");
    let cluster = c
        .ok(&["api-resources", "--namespaced=false", "-o", "name"])
        .await?;
    let cluster: Vec<&str> = cluster.lines().collect();
    ensure!(
        cluster.contains(&"namespaces")
            && cluster.contains(&"nodes")
            && cluster.contains(&"customresourcedefinitions.apiextensions.k8s.io")
            && !cluster.contains(&"configmaps"),
        "--namespaced=false: {cluster:?}"
    );
    let versions = c.ok(&["api-versions"]).await?;
    let versions: Vec<&str> = versions.lines().collect();
    for gv in ["v1", "apps/v1", "batch/v1", "apiextensions.k8s.io/v1"] {
        ensure!(
            versions.contains(&gv),
            "api-versions lacks {gv}: {versions:?}"
        );
    }
    Ok(())
}

async fn get_namespaces(c: &Ctx) -> anyhow::Result<()> {
    let out = c.ok(&["get", "namespaces"]).await?;
    ensure!(
        header(&out) == ["NAME", "STATUS", "AGE"],
        "header: {:?}",
        header(&out)
    );
    for ns in [
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        &c.ns,
    ] {
        let r = row(&out, ns)?;
        ensure!(r.get(1) == Some(&"Active"), "{ns}: {r:?}");
    }
    let names = c.ok(&["get", "ns", "-o", "name"]).await?;
    contains(&names, "namespace/default\n")?;
    let phase = c
        .ok(&["get", "ns", &c.ns, "-o", "jsonpath={.status.phase}"])
        .await?;
    ensure!(phase == "Active", "phase {phase:?}");
    Ok(())
}

async fn get_table(c: &Ctx) -> anyhow::Result<()> {
    c.fixture().await?;
    let out = c.ok(&["get", "configmaps"]).await?;
    ensure!(
        header(&out) == ["NAME", "DATA", "AGE"],
        "header: {:?}",
        header(&out)
    );
    let r = row(&out, "fx-cm")?;
    ensure!(r.get(1) == Some(&"2"), "fx-cm row: {r:?}");
    let out = c.ok(&["get", "deploy", "fx-deploy"]).await?;
    ensure!(
        header(&out) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "header: {:?}",
        header(&out)
    );
    // READY is readyReplicas/replicas; the real kubelet may have started some pods already.
    let r = row(&out, "fx-deploy")?;
    ensure!(
        r.get(1)
            .and_then(|ready| ready.strip_suffix("/2"))
            .is_some_and(|n| matches!(n, "0" | "1" | "2"))
            && r.get(2).is_some_and(|n| n.parse::<u32>().is_ok())
            && r.get(3).is_some_and(|n| n.parse::<u32>().is_ok()),
        "fx-deploy row: {r:?}"
    );
    let labels = c.ok(&["get", "cm", "fx-cm", "--show-labels"]).await?;
    ensure!(
        header(&labels).last() == Some(&"LABELS"),
        "header: {:?}",
        header(&labels)
    );
    contains(&labels, "app=fx,tier=fixture")?;
    let col = c.ok(&["get", "cm", "fx-cm", "-L", "tier"]).await?;
    ensure!(
        header(&col).last() == Some(&"TIER"),
        "-L: {:?}",
        header(&col)
    );
    ensure!(row(&col, "fx-cm")?.last() == Some(&"fixture"), "-L row");
    let selected = c
        .ok(&["get", "cm", "-l", "tier=fixture", "--no-headers"])
        .await?;
    ensure!(
        rows(&selected).len() == 1 && rows(&selected)[0][0] == "fx-cm",
        "-l tier=fixture: {selected:?}"
    );
    let fields = c
        .ok(&[
            "get",
            "cm",
            "--field-selector",
            "metadata.name=fx-cm",
            "-o",
            "name",
        ])
        .await?;
    ensure!(
        fields == "configmap/fx-cm\n",
        "--field-selector: {fields:?}"
    );
    let all = c.ok(&["get", "all"]).await?;
    contains(&all, "deployment.apps/fx-deploy")?;
    let none = c.run(&["get", "cm", "-l", "tier=nothing"]).await?;
    ensure!(none.ok() && none.stdout.is_empty(), "{}", none.stdout);
    contains(
        &none.stderr,
        &format!("No resources found in {} namespace.", c.ns),
    )?;
    Ok(())
}

async fn get_wide(c: &Ctx) -> anyhow::Result<()> {
    c.fixture().await?;
    let out = c.ok(&["get", "deployments", "-o", "wide"]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ],
        "header: {:?}",
        header(&out)
    );
    let r = row(&out, "fx-deploy")?;
    ensure!(
        r[5..] == ["main", "busybox:1.36", "app=fx-deploy"],
        "fx-deploy row: {r:?}"
    );
    let pods = c.ok(&["get", "pods", "-o", "wide", "-A"]).await;
    pods.context("get pods -o wide -A")?;
    Ok(())
}

async fn get_yaml_json(c: &Ctx) -> anyhow::Result<()> {
    let (cm, _) = c.fixture().await?;
    let y: Value = serde_yaml::from_str(&c.ok(&["get", "cm", "fx-cm", "-o", "yaml"]).await?)
        .context("-o yaml is not YAML")?;
    ensure!(
        y["apiVersion"] == "v1" && y["kind"] == "ConfigMap" && y["data"]["greeting"] == "hello",
        "-o yaml: {y}"
    );
    ensure!(
        y["metadata"]["uid"].as_str() == cm.metadata.uid.as_deref()
            && y["metadata"]["namespace"] == c.ns.as_str()
            && y["metadata"]["resourceVersion"].as_str() == cm.metadata.resource_version.as_deref(),
        "-o yaml metadata: {}",
        y["metadata"]
    );
    let j: Value = serde_json::from_str(&c.ok(&["get", "cm", "fx-cm", "-o", "json"]).await?)
        .context("-o json is not JSON")?;
    ensure!(j == y, "-o json and -o yaml differ");
    let list: Value =
        serde_json::from_str(&c.ok(&["get", "cm", "-l", "app=fx", "-o", "json"]).await?)?;
    ensure!(
        list["kind"] == "List" && list["apiVersion"] == "v1",
        "list: {}",
        support::one_line(&list.to_string(), 200)
    );
    let items = list["items"].as_array().context("items")?;
    ensure!(
        items.len() == 1
            && items[0]["kind"] == "ConfigMap"
            && items[0]["metadata"]["name"] == "fx-cm",
        "items: {}",
        support::one_line(&list["items"].to_string(), 200)
    );
    let ylist: Value = serde_yaml::from_str(
        &c.ok(&["get", "cm,deploy", "-l", "app", "-o", "yaml"])
            .await?,
    )?;
    let kinds: Vec<&str> = ylist["items"]
        .as_array()
        .context("items")?
        .iter()
        .filter_map(|i| i["kind"].as_str())
        .collect();
    ensure!(
        kinds.contains(&"ConfigMap") && kinds.contains(&"Deployment"),
        "{kinds:?}"
    );
    Ok(())
}

async fn get_jsonpath(c: &Ctx) -> anyhow::Result<()> {
    let (cm, _) = c.fixture().await?;
    let out = c
        .ok(&["get", "cm", "fx-cm", "-o", "jsonpath={.data.greeting}"])
        .await?;
    ensure!(out == "hello", "{out:?}");
    let out = c
        .ok(&["get", "cm", "fx-cm", "-o", "jsonpath={.metadata.uid}"])
        .await?;
    ensure!(Some(out.as_str()) == cm.metadata.uid.as_deref(), "{out:?}");
    let out = c
        .ok(&[
            "get",
            "cm,deploy",
            "-l",
            "app",
            "-o",
            r#"jsonpath={range .items[*]}{.kind}/{.metadata.name}{"\n"}{end}"#,
        ])
        .await?;
    ensure!(
        out.lines().collect::<Vec<_>>() == ["ConfigMap/fx-cm", "Deployment/fx-deploy"],
        "{out:?}"
    );
    let out = c
        .ok(&[
            "get",
            "deploy",
            "fx-deploy",
            "-o",
            "jsonpath={.spec.template.spec.containers[?(@.name==\"main\")].image}",
        ])
        .await?;
    ensure!(out == "busybox:1.36", "filter expression: {out:?}");
    let out = c
        .ok(&[
            "get",
            "deploy",
            "fx-deploy",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await?;
    ensure!(out == "2", "{out:?}");
    Ok(())
}

async fn get_custom_columns(c: &Ctx) -> anyhow::Result<()> {
    c.fixture().await?;
    let out = c
        .ok(&[
            "get",
            "cm",
            "-l",
            "app=fx",
            "-o",
            "custom-columns=NAME:.metadata.name,GREETING:.data.greeting,MISSING:.data.nope",
        ])
        .await?;
    ensure!(
        rows(&out)
            == [
                vec!["NAME", "GREETING", "MISSING"],
                vec!["fx-cm", "hello", "<none>"]
            ],
        "{out:?}"
    );
    let template = c.write(
        "columns.txt",
        "NAME          IMAGE\nmetadata.name spec.template.spec.containers[0].image\n",
    )?;
    let out = c
        .ok(&[
            "get",
            "deploy",
            "fx-deploy",
            &format!("-o=custom-columns-file={template}"),
        ])
        .await?;
    ensure!(
        rows(&out) == [vec!["NAME", "IMAGE"], vec!["fx-deploy", "busybox:1.36"]],
        "{out:?}"
    );
    Ok(())
}

async fn get_name(c: &Ctx) -> anyhow::Result<()> {
    c.fixture().await?;
    let out = c
        .ok(&["get", "cm,deploy", "-l", "app", "-o", "name"])
        .await?;
    ensure!(
        out == "configmap/fx-cm\ndeployment.apps/fx-deploy\n",
        "{out:?}"
    );
    let out = c.ok(&["get", "deploy/fx-deploy", "-o", "name"]).await?;
    ensure!(out == "deployment.apps/fx-deploy\n", "{out:?}");
    Ok(())
}

async fn describe(c: &Ctx) -> anyhow::Result<()> {
    c.fixture().await?;
    let out = c.ok(&["describe", "deployment", "fx-deploy"]).await?;
    let field = |name: &str| -> anyhow::Result<String> {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| anyhow!("no {name}: line in {}", support::one_line(&out, 300)))
    };
    ensure!(field("Name")? == "fx-deploy", "Name: {}", field("Name")?);
    ensure!(
        field("Namespace")? == c.ns,
        "Namespace: {}",
        field("Namespace")?
    );
    ensure!(
        field("Selector")? == "app=fx-deploy",
        "Selector: {}",
        field("Selector")?
    );
    ensure!(
        field("Replicas")?.starts_with("2 desired"),
        "Replicas: {}",
        field("Replicas")?
    );
    ensure!(field("StrategyType")? == "RollingUpdate", "StrategyType");
    contains(&out, "Pod Template:")?;
    contains(&out, "busybox:1.36")?;
    contains(&out, "Events:")?;
    let out = c.ok(&["describe", "cm", "fx-cm"]).await?;
    contains(&out, "Name:         fx-cm")?;
    contains(&out, "Labels:       app=fx")?;
    contains(&out, "greeting:\n----\nhello")?;
    let selected = c.ok(&["describe", "cm", "-l", "tier=fixture"]).await?;
    contains(&selected, "fx-cm")?;
    let err = c.fails(&["describe", "cm", "nope"]).await?;
    contains(&err, "configmaps \"nope\" not found")?;
    Ok(())
}

async fn create_f(c: &Ctx) -> anyhow::Result<()> {
    let manifest = [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cf-cm"}, "data": {"k": "v"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cf-secret"}, "stringData": {"token": "t0k3n"}}),
        deployment("cf-deploy", 1, &[("main", "busybox:1.36")]),
    ]
    .iter()
    .map(yaml)
    .collect::<Vec<_>>()
    .join("---\n");
    let file = c.write("create-f.yaml", &manifest)?;
    let out = c.ok(&["create", "-f", &file]).await?;
    ensure!(
        out.lines().collect::<Vec<_>>()
            == [
                "configmap/cf-cm created",
                "secret/cf-secret created",
                "deployment.apps/cf-deploy created"
            ],
        "{out:?}"
    );
    let secret = c.api::<Secret>().get("cf-secret").await?;
    ensure!(
        secret.type_.as_deref() == Some("Opaque")
            && secret
                .data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|b| b.0.as_slice())
                == Some(b"t0k3n".as_slice())
            && secret.string_data.is_none(),
        "stringData not folded into data: {:?}",
        secret.data
    );
    let d = c.api::<Deployment>().get("cf-deploy").await?;
    let spec = d.spec.as_ref().context("spec")?;
    ensure!(
        spec.revision_history_limit == Some(10)
            && spec.progress_deadline_seconds == Some(600)
            && spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("RollingUpdate"),
        "deployment defaults not applied: {spec:?}"
    );
    let again = c.fails(&["create", "-f", &file]).await?;
    contains(&again, "Error from server (AlreadyExists)")?;
    contains(&again, "configmaps \"cf-cm\" already exists")?;
    // Dry runs change nothing.
    let dry = c
        .ok_with(
            &["create", "-f", "-", "--dry-run=server", "-o", "name"],
            Some(&yaml(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cf-dry"}}),
            )),
            &[],
        )
        .await?;
    ensure!(dry == "configmap/cf-dry\n", "{dry:?}");
    gone(&c.api::<ConfigMap>(), "cf-dry")
        .await
        .context("--dry-run=server created the object")?;
    let out = c.ok(&["delete", "-f", &file]).await?;
    contains(&out, "configmap \"cf-cm\" deleted")?;
    contains(&out, "secret \"cf-secret\" deleted")?;
    contains(&out, "deployment.apps \"cf-deploy\" deleted")?;
    Ok(())
}

async fn create_configmap(c: &Ctx) -> anyhow::Result<()> {
    let api = c.api::<ConfigMap>();
    cleanup(&api, &["cc-literal"]).await;
    let file = c.write("app.properties", "mode=conformance\n")?;
    let out = c
        .ok(&[
            "create",
            "configmap",
            "cc-literal",
            "--from-literal=a=1",
            "--from-literal=b=two words",
            &format!("--from-file={file}"),
        ])
        .await?;
    ensure!(out == "configmap/cc-literal created\n", "{out:?}");
    let cm = api.get("cc-literal").await?;
    ensure!(
        data_of(&cm)
            == map(&[
                ("a", "1"),
                ("b", "two words"),
                ("app.properties", "mode=conformance\n")
            ]),
        "data: {:?}",
        cm.data
    );
    // Client dry run prints without asking the server to create.
    let dry = c
        .ok(&[
            "create",
            "configmap",
            "cc-dry",
            "--from-literal=x=y",
            "--dry-run=client",
            "-o",
            "yaml",
        ])
        .await?;
    let dry: Value = serde_yaml::from_str(&dry)?;
    ensure!(dry["data"]["x"] == "y", "{dry}");
    gone(&api, "cc-dry").await?;
    let out = c.ok(&["delete", "configmap", "cc-literal"]).await?;
    contains(&out, "configmap \"cc-literal\" deleted")?;
    Ok(())
}

async fn create_secret(c: &Ctx) -> anyhow::Result<()> {
    let api = c.api::<Secret>();
    cleanup(&api, &["cs-generic", "cs-registry"]).await;
    let out = c
        .ok(&[
            "create",
            "secret",
            "generic",
            "cs-generic",
            "--from-literal=username=admin",
            "--from-literal=password=s3cr3t!",
        ])
        .await?;
    ensure!(out == "secret/cs-generic created\n", "{out:?}");
    let s = api.get("cs-generic").await?;
    let data: BTreeMap<String, Vec<u8>> = s
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    ensure!(
        s.type_.as_deref() == Some("Opaque")
            && data.get("username").map(Vec::as_slice) == Some(b"admin".as_slice())
            && data.get("password").map(Vec::as_slice) == Some(b"s3cr3t!".as_slice()),
        "secret: type {:?}, keys {:?}",
        s.type_,
        data.keys().collect::<Vec<_>>()
    );
    let out = c
        .ok(&[
            "create",
            "secret",
            "docker-registry",
            "cs-registry",
            "--docker-server=registry.example.test",
            "--docker-username=robot",
            "--docker-password=pw",
        ])
        .await?;
    ensure!(out == "secret/cs-registry created\n", "{out:?}");
    let s = api.get("cs-registry").await?;
    ensure!(
        s.type_.as_deref() == Some("kubernetes.io/dockerconfigjson"),
        "type {:?}",
        s.type_
    );
    let cfg = s
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .context("no .dockerconfigjson")?;
    let cfg: Value = serde_json::from_slice(&cfg.0)?;
    ensure!(
        cfg["auths"]["registry.example.test"]["username"] == "robot",
        "{cfg}"
    );
    let shown = c
        .ok(&[
            "get",
            "secret",
            "cs-generic",
            "-o",
            "jsonpath={.data.username}",
        ])
        .await?;
    ensure!(shown == "YWRtaW4=", "base64 of data: {shown:?}");
    c.ok(&["delete", "secret", "cs-generic", "cs-registry"])
        .await?;
    gone(&api, "cs-generic").await?;
    Ok(())
}

async fn create_deployment(c: &Ctx) -> anyhow::Result<()> {
    let api = c.api::<Deployment>();
    cleanup(&api, &["cd-web"]).await;
    let out = c
        .ok(&[
            "create",
            "deployment",
            "cd-web",
            "--image=busybox:1.36",
            "--replicas=2",
            "--port=8080",
            "--",
            "sleep",
            "3600",
        ])
        .await?;
    ensure!(out == "deployment.apps/cd-web created\n", "{out:?}");
    let d = api.get("cd-web").await?;
    let spec = d.spec.as_ref().context("spec")?;
    let labels = map(&[("app", "cd-web")]);
    ensure!(spec.replicas == Some(2), "replicas {:?}", spec.replicas);
    ensure!(
        spec.selector.match_labels.as_ref() == Some(&labels)
            && spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref())
                == Some(&labels),
        "selector/template labels: {:?}",
        spec.selector
    );
    let container = &spec.template.spec.as_ref().context("pod spec")?.containers[0];
    ensure!(
        container.name == "busybox"
            && container.image.as_deref() == Some("busybox:1.36")
            && container.command.as_deref() == Some(&["sleep".to_string(), "3600".to_string()][..])
            && container
                .ports
                .as_ref()
                .is_some_and(|p| p[0].container_port == 8080),
        "container: {container:?}"
    );
    c.ok(&["delete", "deployment", "cd-web"]).await?;
    gone(&api, "cd-web").await
}

async fn create_namespace(c: &Ctx) -> anyhow::Result<()> {
    let name = c.extra_ns("created");
    let out = c.ok(&["create", "namespace", &name]).await?;
    ensure!(out == format!("namespace/{name} created\n"), "{out:?}");
    let api: Api<Namespace> = Api::all(c.client.clone());
    let ns = api.get(&name).await?;
    ensure!(
        ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active")
            && ns
                .spec
                .as_ref()
                .and_then(|s| s.finalizers.as_ref())
                .is_some_and(|f| f == &["kubernetes".to_string()]),
        "namespace: {:?} {:?}",
        ns.status,
        ns.spec
    );
    let label = ns
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/metadata.name"));
    ensure!(
        label == Some(&name),
        "kubernetes.io/metadata.name label: {label:?}"
    );
    let out = c
        .ok(&["get", "namespace", &name, "-o", "jsonpath={.status.phase}"])
        .await?;
    ensure!(out == "Active", "{out:?}");
    Ok(())
}

/// `kubectl delete namespace` waits until the namespace controller has emptied and removed it.
async fn delete_namespace(c: &Ctx) -> anyhow::Result<()> {
    let name = c.extra_ns("deleted");
    let api: Api<Namespace> = Api::all(c.client.clone());
    if api.get_opt(&name).await?.is_none() {
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
    }
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), &name);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "content"}}))?,
    )
    .await?;
    let r = c
        .run(&["delete", "namespace", &name, "--timeout=15s"])
        .await?;
    let ns = api.get_opt(&name).await?;
    if !r.ok() {
        let phase = ns
            .as_ref()
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.phase.clone());
        bail!(
            "`kubectl delete namespace` failed ({}); the namespace is {}",
            c.gist(&r.stderr),
            phase.map_or("gone".into(), |p| format!("still there, phase {p}"))
        );
    }
    contains(&r.stdout, &format!("namespace \"{name}\" deleted"))?;
    ensure!(ns.is_none(), "namespace still there after delete returned");
    Ok(())
}

async fn apply_client_side(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    let deploys = c.api::<Deployment>();
    cleanup(&cms, &["ac-cm"]).await;
    cleanup(&deploys, &["ac-deploy"]).await;
    let manifest = |a: &str, extra: Option<(&str, &str)>, replicas: i32, image: &str| {
        let mut data = json!({"a": a});
        if let Some((k, v)) = extra {
            data[k] = json!(v);
        }
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ac-cm", "labels": {"app": "ac"}}, "data": data});
        format!(
            "{}---\n{}",
            yaml(&cm),
            yaml(&deployment(
                "ac-deploy",
                replicas,
                &[("main", image), ("side", "busybox:1.36")]
            ))
        )
    };
    let first = c.write(
        "apply-1.yaml",
        &manifest("one", Some(("b", "two")), 1, "busybox:1.36"),
    )?;
    let out = c.ok(&["apply", "-f", &first]).await?;
    ensure!(
        out == "configmap/ac-cm created\ndeployment.apps/ac-deploy created\n",
        "first apply: {out:?}"
    );
    let cm = cms.get("ac-cm").await?;
    let last: Value = serde_json::from_str(
        cm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubectl.kubernetes.io/last-applied-configuration"))
            .context("no last-applied-configuration annotation")?,
    )?;
    ensure!(
        last["data"] == json!({"a": "one", "b": "two"}),
        "last-applied: {last}"
    );
    let out = c.ok(&["apply", "-f", &first]).await?;
    ensure!(
        out == "configmap/ac-cm unchanged\ndeployment.apps/ac-deploy unchanged\n",
        "second apply: {out:?}"
    );
    // Someone else scales the deployment and adds a label: apply keeps what it does not own.
    deploys
        .patch(
            "ac-deploy",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"owner": "someone"}}})),
        )
        .await?;
    let second = c.write("apply-2.yaml", &manifest("uno", None, 3, "busybox:1.37"))?;
    let out = c.ok(&["apply", "-f", &second]).await?;
    ensure!(
        out == "configmap/ac-cm configured\ndeployment.apps/ac-deploy configured\n",
        "third apply: {out:?}"
    );
    let cm = cms.get("ac-cm").await?;
    ensure!(
        data_of(&cm) == map(&[("a", "uno")]),
        "a key dropped from the manifest must be pruned: {:?}",
        cm.data
    );
    let d = deploys.get("ac-deploy").await?;
    let spec = d.spec.as_ref().context("spec")?;
    let images: Vec<_> = spec
        .template
        .spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    ensure!(
        spec.replicas == Some(3)
            && images
                == [
                    ("main".to_string(), "busybox:1.37".to_string()),
                    ("side".to_string(), "busybox:1.36".to_string())
                ]
            && d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("owner"))
                .map(String::as_str)
                == Some("someone"),
        "deployment after apply: replicas {:?}, containers {images:?}, labels {:?}",
        spec.replicas,
        d.metadata.labels
    );
    let out = c
        .ok(&[
            "apply",
            "view-last-applied",
            "configmap/ac-cm",
            "-o",
            "json",
        ])
        .await?;
    let last: Value = serde_json::from_str(&out)?;
    ensure!(
        last["data"] == json!({"a": "uno"}),
        "view-last-applied: {last}"
    );
    c.ok(&["delete", "-f", &second]).await?;
    gone(&cms, "ac-cm").await
}

async fn apply_server_side(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["as-cm"]).await;
    let cm = |v: &str| {
        yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "as-cm"}, "data": {"greeting": v, "keep": "kept"}}))
    };
    let v1 = c.write("ssa-1.yaml", &cm("hello"))?;
    let v2 = c.write("ssa-2.yaml", &cm("hi"))?;
    let out = c.ok(&["apply", "-f", &v1]).await?;
    ensure!(
        out == "configmap/as-cm created\n",
        "client-side apply: {out:?}"
    );
    let out = c.ok(&["apply", "-f", &v2]).await?;
    ensure!(
        out == "configmap/as-cm configured\n",
        "client-side apply: {out:?}"
    );
    let out = c.ok(&["apply", "--server-side", "-f", &v2]).await?;
    ensure!(
        out == "configmap/as-cm serverside-applied\n",
        "server-side apply: {out:?}"
    );
    let stored = cms.get("as-cm").await?;
    let managers: Vec<(String, String)> = stored
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    ensure!(
        managers.contains(&("kubectl".into(), "Apply".into())),
        "managedFields lack kubectl/Apply: {managers:?}"
    );
    ensure!(
        data_of(&cms.get("as-cm").await?) == map(&[("greeting", "hi"), ("keep", "kept")]),
        "data changed"
    );
    let v3 = c.write("ssa-3.yaml", &cm("bonjour"))?;
    let out = c.ok(&["apply", "--server-side", "-f", &v3]).await?;
    ensure!(out == "configmap/as-cm serverside-applied\n", "{out:?}");
    ensure!(
        data_of(&cms.get("as-cm").await?)
            .get("greeting")
            .map(String::as_str)
            == Some("bonjour"),
        "server-side apply did not change data"
    );
    c.ok(&["delete", "cm", "as-cm"]).await?;
    Ok(())
}

async fn apply_server_side_conflict(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["asc-cm"]).await;
    let cm = |v: &str| {
        yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "asc-cm"}, "data": {"owner": v}}))
    };
    let mine = c.write("ssac-1.yaml", &cm("kubectl"))?;
    let theirs = c.write("ssac-2.yaml", &cm("other"))?;
    c.ok(&["apply", "--server-side", "-f", &mine]).await?;
    let err = c
        .fails(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "-f",
            &theirs,
        ])
        .await?;
    contains(&err, "conflict with \"kubectl\"")?;
    contains(&err, ".data.owner")?;
    ensure!(
        data_of(&cms.get("asc-cm").await?)
            .get("owner")
            .map(String::as_str)
            == Some("kubectl"),
        "a conflicting apply changed the object"
    );
    let out = c
        .ok(&[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            &theirs,
        ])
        .await?;
    ensure!(out == "configmap/asc-cm serverside-applied\n", "{out:?}");
    let stored = cms.get("asc-cm").await?;
    ensure!(
        data_of(&stored).get("owner").map(String::as_str) == Some("other"),
        "--force-conflicts did not take the field"
    );
    let managers: Vec<String> = stored
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:data/f:owner").is_some())
        })
        .filter_map(|m| m.manager)
        .collect();
    ensure!(managers == ["other"], "owners of .data.owner: {managers:?}");
    c.ok(&["delete", "cm", "asc-cm"]).await?;
    Ok(())
}

async fn diff(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["df-cm"]).await;
    let cm = |v: &str| {
        yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "df-cm"}, "data": {"greeting": v}}))
    };
    let v1 = c.write("diff-1.yaml", &cm("hello"))?;
    let v2 = c.write("diff-2.yaml", &cm("world"))?;
    // Against nothing: the whole object is new; the server is asked with dryRun=All.
    let r = c.run(&["diff", "-f", &v1]).await?;
    ensure!(
        r.code == Some(1),
        "diff of a new object exited {:?}: {}",
        r.code,
        c.gist(&r.stderr)
    );
    contains(&r.stdout, "+  greeting: hello")?;
    contains(&r.stdout, "+  name: df-cm")?;
    gone(&cms, "df-cm")
        .await
        .context("diff created the object")?;
    c.ok(&["apply", "-f", &v1]).await?;
    let r = c.run(&["diff", "-f", &v1]).await?;
    ensure!(
        r.code == Some(0) && r.stdout.is_empty(),
        "diff of an unchanged object exited {:?}: {}{}",
        r.code,
        c.gist(&r.stdout),
        c.gist(&r.stderr)
    );
    // Server-side, the fields belong to kubectl-client-side-apply: diff must force.
    for flags in [&[][..], &["--server-side", "--force-conflicts"][..]] {
        let mut args = vec!["diff", "-f", &v2];
        args.extend_from_slice(flags);
        let r = c.run(&args).await?;
        ensure!(
            r.code == Some(1),
            "`kubectl {}` exited {:?}: {}",
            c.show(&args),
            r.code,
            c.gist(&r.stderr)
        );
        contains(&r.stdout, "-  greeting: hello")?;
        contains(&r.stdout, "+  greeting: world")?;
    }
    ensure!(
        data_of(&cms.get("df-cm").await?)
            .get("greeting")
            .map(String::as_str)
            == Some("hello"),
        "diff changed the object"
    );
    c.ok(&["delete", "-f", &v1]).await?;
    Ok(())
}

async fn edit(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["ed-cm"]).await;
    c.ensure::<ConfigMap>(json!({"metadata": {"name": "ed-cm"}, "data": {"greeting": "hello"}}))
        .await?;
    let script = c.write(
        "editor.sh",
        "#!/bin/sh\nsed -i 's/greeting: hello/greeting: edited/' \"$1\"\n",
    )?;
    let noop = c.write("noop-editor.sh", "#!/bin/sh\nexit 0\n")?;
    for s in [&script, &noop] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(s, std::fs::Permissions::from_mode(0o755))?;
    }
    let out = c
        .ok_with(
            &["edit", "configmap", "ed-cm"],
            None,
            &[("EDITOR", &script)],
        )
        .await?;
    ensure!(out == "configmap/ed-cm edited\n", "{out:?}");
    ensure!(
        data_of(&cms.get("ed-cm").await?)
            .get("greeting")
            .map(String::as_str)
            == Some("edited"),
        "edit not stored"
    );
    let r = c
        .run_with(&["edit", "configmap", "ed-cm"], None, &[("EDITOR", &noop)])
        .await?;
    ensure!(r.ok(), "no-op edit failed: {}", r.stderr);
    contains(
        &format!("{}{}", r.stdout, r.stderr),
        "Edit cancelled, no changes made.",
    )?;
    // KUBE_EDITOR wins over EDITOR; -o json edits JSON.
    let json_script = c.write(
        "json-editor.sh",
        "#!/bin/sh\nsed -i 's/\"greeting\": \"edited\"/\"greeting\": \"json\"/' \"$1\"\n",
    )?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&json_script, std::fs::Permissions::from_mode(0o755))?;
    }
    c.ok_with(
        &["edit", "cm/ed-cm", "-o", "json"],
        None,
        &[("KUBE_EDITOR", &json_script), ("EDITOR", &noop)],
    )
    .await?;
    ensure!(
        data_of(&cms.get("ed-cm").await?)
            .get("greeting")
            .map(String::as_str)
            == Some("json"),
        "edit -o json not stored"
    );
    c.ok(&["delete", "cm", "ed-cm"]).await?;
    Ok(())
}

async fn patch_json(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["pj-cm"]).await;
    c.ensure::<ConfigMap>(json!({"metadata": {"name": "pj-cm"}, "data": {"a": "1", "b": "2"}}))
        .await?;
    let out = c
        .ok(&[
            "patch",
            "cm",
            "pj-cm",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/a","value":"1"},{"op":"replace","path":"/data/a","value":"10"},{"op":"remove","path":"/data/b"},{"op":"add","path":"/data/c","value":"3"}]"#,
        ])
        .await?;
    ensure!(out == "configmap/pj-cm patched\n", "{out:?}");
    ensure!(
        data_of(&cms.get("pj-cm").await?) == map(&[("a", "10"), ("c", "3")]),
        "data after JSON patch"
    );
    let before = cms.get("pj-cm").await?.metadata.resource_version;
    let err = c
        .fails(&[
            "patch",
            "cm",
            "pj-cm",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/a","value":"1"},{"op":"remove","path":"/data/a"}]"#,
        ])
        .await?;
    ensure!(!err.trim().is_empty(), "a failed test op printed nothing");
    ensure!(
        cms.get("pj-cm").await?.metadata.resource_version == before,
        "a failed test op changed the object"
    );
    c.ok(&["delete", "cm", "pj-cm"]).await?;
    Ok(())
}

async fn patch_merge(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    let deploys = c.api::<Deployment>();
    cleanup(&cms, &["pm-cm"]).await;
    cleanup(&deploys, &["pm-deploy"]).await;
    c.ensure::<ConfigMap>(json!({"metadata": {"name": "pm-cm"}, "data": {"a": "1", "b": "2"}}))
        .await?;
    let out = c
        .ok(&[
            "patch",
            "cm",
            "pm-cm",
            "--type=merge",
            "-p",
            r#"{"data":{"a":null,"c":"3"}}"#,
        ])
        .await?;
    ensure!(out == "configmap/pm-cm patched\n", "{out:?}");
    ensure!(
        data_of(&cms.get("pm-cm").await?) == map(&[("b", "2"), ("c", "3")]),
        "data after merge patch"
    );
    let out = c
        .ok(&[
            "patch",
            "cm",
            "pm-cm",
            "--type=merge",
            "-p",
            r#"{"data":{"c":"3"}}"#,
        ])
        .await?;
    ensure!(
        out == "configmap/pm-cm patched (no change)\n",
        "no-op patch: {out:?}"
    );
    // A merge patch replaces lists whole.
    c.ensure::<Deployment>(deployment(
        "pm-deploy",
        1,
        &[("main", "busybox:1.36"), ("side", "busybox:1.36")],
    ))
    .await?;
    c.ok(&[
        "patch",
        "deploy",
        "pm-deploy",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"busybox:1.37"}]}}}}"#,
    ])
    .await?;
    let d = deploys.get("pm-deploy").await?;
    let names: Vec<String> = d
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers.into_iter().map(|c| c.name).collect())
        .unwrap_or_default();
    ensure!(names == ["side"], "containers after merge patch: {names:?}");
    c.ok(&["delete", "cm/pm-cm", "deploy/pm-deploy"]).await?;
    Ok(())
}

async fn patch_strategic(c: &Ctx) -> anyhow::Result<()> {
    let deploys = c.api::<Deployment>();
    cleanup(&deploys, &["ps-deploy"]).await;
    c.ensure::<Deployment>(deployment(
        "ps-deploy",
        1,
        &[("main", "busybox:1.36"), ("side", "busybox:1.36")],
    ))
    .await?;
    let containers = |d: Deployment| -> Vec<(String, String)> {
        d.spec
            .and_then(|s| s.template.spec)
            .map(|s| {
                s.containers
                    .into_iter()
                    .map(|c| (c.name, c.image.unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default()
    };
    // The default type is strategic: containers merge by name.
    let out = c
        .ok(&[
            "patch",
            "deploy",
            "ps-deploy",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"busybox:1.37"}]}}}}"#,
        ])
        .await?;
    ensure!(out == "deployment.apps/ps-deploy patched\n", "{out:?}");
    let got = containers(deploys.get("ps-deploy").await?);
    ensure!(
        got == [
            ("main".to_string(), "busybox:1.36".to_string()),
            ("side".to_string(), "busybox:1.37".to_string())
        ],
        "containers after strategic patch: {got:?}"
    );
    c.ok(&[
        "patch",
        "deploy",
        "ps-deploy",
        "--type=strategic",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","$patch":"delete"}]}}}}"#,
    ])
    .await?;
    let got = containers(deploys.get("ps-deploy").await?);
    ensure!(
        got == [("main".to_string(), "busybox:1.36".to_string())],
        "containers after $patch: delete: {got:?}"
    );
    // kubectl reports "no change" by comparing the object it read with the patch's result, so
    // a status write by the deployment controller in between shows as "patched": retry until
    // the controller is quiet, as a user would.
    eventually(Duration::from_secs(30), "a no-op patch", || async {
        let out = c
            .ok(&[
                "patch",
                "deploy",
                "ps-deploy",
                "--type=strategic",
                "-p",
                r#"{"spec":{"replicas":1}}"#,
            ])
            .await?;
        ensure!(
            out == "deployment.apps/ps-deploy patched (no change)\n",
            "{out:?}"
        );
        Ok(())
    })
    .await?;
    c.ok(&["delete", "deploy", "ps-deploy"]).await?;
    Ok(())
}

fn labels_of(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.metadata.labels.clone().unwrap_or_default()
}

fn annotations_of(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.metadata.annotations.clone().unwrap_or_default()
}

async fn label(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["lb-1", "lb-2"]).await;
    for n in ["lb-1", "lb-2"] {
        c.ensure::<ConfigMap>(json!({"metadata": {"name": n, "labels": {"group": "lb"}}}))
            .await?;
    }
    let out = c.ok(&["label", "cm", "lb-1", "tier=one"]).await?;
    ensure!(out == "configmap/lb-1 labeled\n", "{out:?}");
    ensure!(
        labels_of(&cms.get("lb-1").await?)
            .get("tier")
            .map(String::as_str)
            == Some("one")
    );
    let err = c.fails(&["label", "cm", "lb-1", "tier=two"]).await?;
    contains(
        &err,
        "'tier' already has a value (one), and --overwrite is false",
    )?;
    c.ok(&["label", "cm", "lb-1", "tier=two", "--overwrite"])
        .await?;
    ensure!(
        labels_of(&cms.get("lb-1").await?)
            .get("tier")
            .map(String::as_str)
            == Some("two")
    );
    let out = c.ok(&["label", "cm", "lb-1", "--list"]).await?;
    let mut listed: Vec<&str> = out.lines().collect();
    listed.sort();
    ensure!(listed == ["group=lb", "tier=two"], "--list: {listed:?}");
    let out = c.ok(&["label", "cm", "lb-1", "tier-"]).await?;
    ensure!(out == "configmap/lb-1 unlabeled\n", "{out:?}");
    ensure!(
        !labels_of(&cms.get("lb-1").await?).contains_key("tier"),
        "label not removed"
    );
    let out = c
        .ok(&["label", "cm", "-l", "group=lb", "batch=yes"])
        .await?;
    ensure!(
        out == "configmap/lb-1 labeled\nconfigmap/lb-2 labeled\n",
        "label -l: {out:?}"
    );
    for n in ["lb-1", "lb-2"] {
        ensure!(
            labels_of(&cms.get(n).await?)
                .get("batch")
                .map(String::as_str)
                == Some("yes")
        );
    }
    // A stale --resource-version is a conflict.
    let err = c
        .fails(&["label", "cm", "lb-2", "stale=yes", "--resource-version=1"])
        .await?;
    contains(&err, "the object has been modified")?;
    let err = c.fails(&["label", "cm", "lb-2", "Bad Key=x"]).await?;
    ensure!(!err.is_empty());
    c.ok(&["delete", "cm", "-l", "group=lb"]).await?;
    Ok(())
}

async fn annotate(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["an-cm"]).await;
    c.ensure::<ConfigMap>(json!({"metadata": {"name": "an-cm"}}))
        .await?;
    // kubectl 1.27 prints "annotate", later versions "annotated".
    contains(
        &c.ok(&["annotate", "cm", "an-cm", "note=first line"])
            .await?,
        "configmap/an-cm annotate",
    )?;
    ensure!(
        annotations_of(&cms.get("an-cm").await?)
            .get("note")
            .map(String::as_str)
            == Some("first line")
    );
    let err = c.fails(&["annotate", "cm", "an-cm", "note=second"]).await?;
    contains(&err, "--overwrite is false")?;
    c.ok(&["annotate", "cm", "an-cm", "note=second", "--overwrite"])
        .await?;
    ensure!(
        annotations_of(&cms.get("an-cm").await?)
            .get("note")
            .map(String::as_str)
            == Some("second")
    );
    c.ok(&["annotate", "cm", "an-cm", "note-"]).await?;
    ensure!(!annotations_of(&cms.get("an-cm").await?).contains_key("note"));
    c.ok(&["annotate", "cm", "--all", "sweep=yes"]).await?;
    ensure!(
        annotations_of(&cms.get("an-cm").await?)
            .get("sweep")
            .map(String::as_str)
            == Some("yes")
    );
    c.ok(&["delete", "cm", "an-cm"]).await?;
    Ok(())
}

/// Waits for `kubectl rollout status` to report success.
async fn rolled_out(c: &Ctx, name: &str) -> anyhow::Result<()> {
    let out = c
        .ok(&[
            "rollout",
            "status",
            &format!("deployment/{name}"),
            "--timeout=90s",
        ])
        .await?;
    contains(
        &out,
        &format!("deployment \"{name}\" successfully rolled out"),
    )
}

/// The ReplicaSets a Deployment owns, by revision.
async fn revisions(c: &Ctx, d: &Deployment) -> anyhow::Result<BTreeMap<i64, ReplicaSet>> {
    let list = c.api::<ReplicaSet>().list(&Default::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(&o.uid) == d.metadata.uid.as_ref())
        })
        .map(|rs| {
            let rev = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("deployment.kubernetes.io/revision"))
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            (rev, rs)
        })
        .collect())
}

fn env_of(d: &Deployment) -> Vec<(String, String)> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers[0].env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

/// Live (not terminating) pods with `app=<name>`.
async fn live_pods(c: &Ctx, name: &str) -> anyhow::Result<usize> {
    let list = c
        .api::<Pod>()
        .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .count())
}

/// The Deployment and ReplicaSet controllers through kubectl's rollout commands.
async fn rollout(c: &Ctx) -> anyhow::Result<()> {
    let api = c.api::<Deployment>();
    cleanup(&api, &["ro-web"]).await;
    let out = c
        .ok(&[
            "create",
            "deployment",
            "ro-web",
            "--image=busybox:1.36",
            "--replicas=3",
            "--",
            "sleep",
            "3600",
        ])
        .await?;
    ensure!(out == "deployment.apps/ro-web created\n", "{out:?}");
    rolled_out(c, "ro-web").await?;
    ensure!(live_pods(c, "ro-web").await? == 3, "not 3 pods");

    let out = c.ok(&["set", "env", "deploy/ro-web", "A=1"]).await?;
    ensure!(out == "deployment.apps/ro-web env updated\n", "{out:?}");
    rolled_out(c, "ro-web").await?;
    let out = c.ok(&["rollout", "history", "deploy/ro-web"]).await?;
    contains(&out, "REVISION")?;
    let revs: Vec<&str> = rows(&out)
        .iter()
        .map(|r| r[0])
        .filter(|r| r.parse::<u32>().is_ok())
        .collect();
    ensure!(revs == ["1", "2"], "history: {out:?}");

    let out = c.ok(&["rollout", "undo", "deploy/ro-web"]).await?;
    ensure!(out == "deployment.apps/ro-web rolled back\n", "{out:?}");
    rolled_out(c, "ro-web").await?;
    let d = api.get("ro-web").await?;
    ensure!(env_of(&d).is_empty(), "env after undo: {:?}", env_of(&d));
    let by_rev = revisions(c, &d).await?;
    ensure!(
        by_rev.keys().copied().collect::<Vec<_>>() == [2, 3],
        "revisions after undo: {:?}",
        by_rev.keys()
    );

    let out = c.ok(&["rollout", "restart", "deploy/ro-web"]).await?;
    ensure!(out == "deployment.apps/ro-web restarted\n", "{out:?}");
    rolled_out(c, "ro-web").await?;
    let d = api.get("ro-web").await?;
    let restarted = d
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .is_some_and(|a| a.contains_key("kubectl.kubernetes.io/restartedAt"));
    ensure!(restarted, "no restartedAt annotation on the template");

    let out = c.ok(&["rollout", "pause", "deploy/ro-web"]).await?;
    ensure!(out == "deployment.apps/ro-web paused\n", "{out:?}");
    c.ok(&["set", "env", "deploy/ro-web", "B=2"]).await?;
    let d = eventually(
        Duration::from_secs(30),
        "paused deployment observed",
        || async {
            let d = api.get("ro-web").await?;
            let observed = d.status.as_ref().and_then(|s| s.observed_generation);
            ensure!(observed == d.metadata.generation, "not observed yet");
            Ok(d)
        },
    )
    .await?;
    let count = revisions(c, &d).await?.len();
    ensure!(
        count == 3,
        "a paused deployment rolled out: {count} ReplicaSets"
    );
    let out = c.ok(&["rollout", "resume", "deploy/ro-web"]).await?;
    ensure!(out == "deployment.apps/ro-web resumed\n", "{out:?}");
    rolled_out(c, "ro-web").await?;
    let d = api.get("ro-web").await?;
    ensure!(
        env_of(&d) == [("B".to_string(), "2".to_string())],
        "env: {:?}",
        env_of(&d)
    );

    let out = c.ok(&["scale", "deploy/ro-web", "--replicas=1"]).await?;
    ensure!(out == "deployment.apps/ro-web scaled\n", "{out:?}");
    rolled_out(c, "ro-web").await?;
    eventually(Duration::from_secs(30), "one live pod", || async {
        let n = live_pods(c, "ro-web").await?;
        ensure!(n == 1, "{n} live pods");
        Ok(())
    })
    .await?;
    c.ok(&["delete", "deployment", "ro-web"]).await?;
    gone(&api, "ro-web").await
}

/// Deleting a Deployment takes its ReplicaSets and pods with it (the garbage collector).
async fn delete_deployment_cascade(c: &Ctx) -> anyhow::Result<()> {
    let api = c.api::<Deployment>();
    cleanup(&api, &["dc-web"]).await;
    c.ok(&[
        "create",
        "deployment",
        "dc-web",
        "--image=busybox:1.36",
        "--replicas=2",
        "--",
        "sleep",
        "3600",
    ])
    .await?;
    rolled_out(c, "dc-web").await?;
    let out = c.ok(&["delete", "deploy", "dc-web"]).await?;
    contains(&out, "deployment.apps \"dc-web\" deleted")?;
    eventually(
        Duration::from_secs(60),
        "pods and ReplicaSets gone",
        || async {
            let n = live_pods(c, "dc-web").await?;
            let sets = c
                .api::<ReplicaSet>()
                .list(&kube::api::ListParams::default().labels("app=dc-web"))
                .await?
                .items
                .len();
            ensure!(n == 0 && sets == 0, "{n} live pods, {sets} ReplicaSets");
            Ok(())
        },
    )
    .await
}

async fn scale(c: &Ctx) -> anyhow::Result<()> {
    let deploys = c.api::<Deployment>();
    cleanup(&deploys, &["sc-deploy"]).await;
    c.ensure::<Deployment>(deployment("sc-deploy", 2, &[("main", "busybox:1.36")]))
        .await?;
    let out = c
        .ok(&["scale", "deployment", "sc-deploy", "--replicas=3"])
        .await?;
    ensure!(out == "deployment.apps/sc-deploy scaled\n", "{out:?}");
    let replicas = |d: Deployment| d.spec.and_then(|s| s.replicas);
    ensure!(
        replicas(deploys.get("sc-deploy").await?) == Some(3),
        "replicas not 3"
    );
    let err = c
        .fails(&[
            "scale",
            "deploy/sc-deploy",
            "--current-replicas=2",
            "--replicas=5",
        ])
        .await?;
    contains(&err, "Expected replicas to be 2, was 3")?;
    ensure!(
        replicas(deploys.get("sc-deploy").await?) == Some(3),
        "precondition ignored"
    );
    c.ok(&[
        "scale",
        "deploy/sc-deploy",
        "--current-replicas=3",
        "--replicas=0",
    ])
    .await?;
    ensure!(
        replicas(deploys.get("sc-deploy").await?) == Some(0),
        "replicas not 0"
    );
    let out = c
        .ok(&[
            "get",
            "deploy",
            "sc-deploy",
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await?;
    ensure!(out == "0", "{out:?}");
    c.ok(&["delete", "deploy", "sc-deploy"]).await?;
    Ok(())
}

async fn delete_f(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    let manifest = ["del-f-1", "del-f-2"]
        .iter()
        .map(|n| yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}})))
        .collect::<Vec<_>>()
        .join("---\n");
    let file = c.write("delete-f.yaml", &manifest)?;
    c.ok(&["apply", "-f", &file]).await?;
    let out = c.ok(&["delete", "-f", &file]).await?;
    let lines: Vec<&str> = out.lines().collect();
    ensure!(
        lines.len() == 2
            && lines[0].starts_with("configmap \"del-f-1\" deleted")
            && lines[1].starts_with("configmap \"del-f-2\" deleted"),
        "{out:?}"
    );
    gone(&cms, "del-f-1").await?;
    gone(&cms, "del-f-2").await?;
    let err = c.fails(&["delete", "-f", &file]).await?;
    contains(&err, "Error from server (NotFound)")?;
    contains(&err, "configmaps \"del-f-1\" not found")?;
    let r = c
        .run(&["delete", "-f", &file, "--ignore-not-found"])
        .await?;
    ensure!(
        r.ok() && r.stdout.is_empty(),
        "--ignore-not-found: {:?} {}",
        r.code,
        r.stderr
    );
    Ok(())
}

async fn delete_selector(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    for (n, group) in [("ds-1", "del"), ("ds-2", "del"), ("ds-keep", "keep")] {
        c.ensure::<ConfigMap>(json!({"metadata": {"name": n, "labels": {"ds": group}}}))
            .await?;
    }
    let out = c.ok(&["delete", "cm", "-l", "ds=del"]).await?;
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    ensure!(
        lines.len() == 2
            && lines[0].starts_with("configmap \"ds-1\" deleted")
            && lines[1].starts_with("configmap \"ds-2\" deleted"),
        "{out:?}"
    );
    gone(&cms, "ds-1").await?;
    gone(&cms, "ds-2").await?;
    ensure!(
        cms.get_opt("ds-keep").await?.is_some(),
        "delete -l deleted an unselected object"
    );
    let r = c.run(&["delete", "cm", "-l", "ds=del"]).await?;
    ensure!(r.ok(), "{}", r.stderr);
    contains(&format!("{}{}", r.stdout, r.stderr), "No resources found")?;
    c.ok(&["delete", "cm", "-l", "ds in (keep)"]).await?;
    gone(&cms, "ds-keep").await
}

/// `delete` waits until a finalizer is gone; `--wait=false` does not.
async fn delete_wait(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    let hold = "conformance.minik8s.io/hold";
    for n in ["dw-wait", "dw-nowait"] {
        c.ensure::<ConfigMap>(json!({"metadata": {"name": n, "finalizers": [hold]}}))
            .await?;
    }
    let release = |name: &'static str| {
        let cms = cms.clone();
        async move {
            cms.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
        }
    };
    let out = c.ok(&["delete", "cm", "dw-nowait", "--wait=false"]).await?;
    contains(&out, "configmap \"dw-nowait\" deleted")?;
    let held = cms.get("dw-nowait").await?;
    ensure!(
        held.metadata.deletion_timestamp.is_some(),
        "a ConfigMap with a finalizer has no deletionTimestamp after delete"
    );
    release("dw-nowait").await?;
    eventually(
        Duration::from_secs(5),
        "dw-nowait removed once its finalizer is",
        || gone(&cms, "dw-nowait"),
    )
    .await?;

    // With --wait (the default) kubectl deletes, then watches until the object is gone.
    let mut bg = c.start(&["delete", "cm", "dw-wait", "--timeout=30s"])?;
    bg.watching().await?;
    let held = cms.get("dw-wait").await?;
    ensure!(
        held.metadata.deletion_timestamp.is_some(),
        "dw-wait has no deletionTimestamp while kubectl waits"
    );
    ensure!(
        bg.running(),
        "kubectl delete returned before the finalizer was removed"
    );
    release("dw-wait").await?;
    let r = bg.finish().await?;
    ensure!(r.ok(), "delete --wait failed: {}", c.gist(&r.stderr));
    contains(&r.stdout, "configmap \"dw-wait\" deleted")?;
    gone(&cms, "dw-wait").await
}

async fn wait_condition(c: &Ctx) -> anyhow::Result<()> {
    let pods = c.api::<Pod>();
    cleanup(&pods, &["wt-pod"]).await;
    c.ensure::<Pod>(json!({
        "metadata": {"name": "wt-pod"},
        "spec": {
            "schedulingGates": [{"name": "conformance.minik8s.io/never"}],
            "containers": [{"name": "main", "image": "busybox:1.36"}]
        }
    }))
    .await?;
    let set_status = |status: Value| {
        let pods = pods.clone();
        async move {
            pods.patch_status(
                "wt-pod",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        }
    };
    let mut bg = c.start(&[
        "wait",
        "--for=condition=Ready",
        "pod/wt-pod",
        "--timeout=20s",
    ])?;
    bg.watching().await?;
    ensure!(
        bg.running(),
        "kubectl wait returned before the condition was set"
    );
    set_status(json!({"conditions": [{"type": "Ready", "status": "True"}]}))
        .await
        .context("setting the Ready condition through pods/status")?;
    let r = bg.finish().await?;
    ensure!(r.ok(), "wait --for=condition=Ready: {}", c.gist(&r.stderr));
    ensure!(r.stdout == "pod/wt-pod condition met\n", "{:?}", r.stdout);
    // Already true: returns at once.
    let out = c
        .ok(&[
            "wait",
            "--for=condition=Ready=true",
            "pod/wt-pod",
            "--timeout=5s",
        ])
        .await?;
    ensure!(out == "pod/wt-pod condition met\n", "{out:?}");
    let mut bg = c.start(&[
        "wait",
        "--for=jsonpath={.status.phase}=Running",
        "pod/wt-pod",
        "--timeout=20s",
    ])?;
    bg.watching().await?;
    ensure!(bg.running(), "kubectl wait --for=jsonpath returned early");
    set_status(json!({"phase": "Running"})).await?;
    let r = bg.finish().await?;
    ensure!(r.ok(), "wait --for=jsonpath: {}", c.gist(&r.stderr));
    contains(&r.stdout, "pod/wt-pod condition met")?;
    let err = c
        .fails(&["wait", "--for=condition=Nope", "pod/wt-pod", "--timeout=1s"])
        .await?;
    contains(&err, "timed out waiting for the condition on pods/wt-pod")?;
    pods.delete("wt-pod", &DeleteParams::default().grace_period(0))
        .await?;
    Ok(())
}

async fn wait_delete(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    c.ensure::<ConfigMap>(json!({"metadata": {"name": "wd-cm"}}))
        .await?;
    let mut bg = c.start(&["wait", "--for=delete", "cm/wd-cm", "--timeout=20s"])?;
    bg.watching().await?;
    ensure!(
        bg.running(),
        "kubectl wait --for=delete returned before the delete"
    );
    cms.delete("wd-cm", &DeleteParams::default()).await?;
    let r = bg.finish().await?;
    ensure!(r.ok(), "wait --for=delete: {}", c.gist(&r.stderr));
    ensure!(
        r.stdout == "configmap/wd-cm condition met\n",
        "{:?}",
        r.stdout
    );
    Ok(())
}

/// The rows a `kubectl get -w` prints, read as they come.
struct Rows {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: Vec<String>,
    watching: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Rows {
    /// Starts `kubectl get -w` with `-v=6`, whose request log tells when its watch is open.
    fn start(c: &Ctx, args: &[&str]) -> anyhow::Result<Rows> {
        let mut all = args.to_vec();
        all.push("-v=6");
        let mut child = c
            .command(&all, &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let (_, watching) = watch_signal(child.stderr.take().expect("piped stderr"));
        Ok(Rows {
            child,
            lines,
            seen: Vec::new(),
            watching: Some(watching),
        })
    }

    /// Returns once kubectl's watch request has been answered. kubectl drops the first
    /// event of a watch on one named object (the state it printed already), so a change made
    /// before the watch is open would never print.
    async fn watching(&mut self) -> anyhow::Result<()> {
        let rx = self
            .watching
            .take()
            .context("already waited for the watch")?;
        match tokio::time::timeout(Duration::from_secs(20), rx).await {
            Ok(Ok(())) => Ok(()),
            _ => bail!(
                "kubectl get -w opened no watch within 20 s; rows {:?}",
                self.seen
            ),
        }
    }

    /// Reads rows until one starts with the columns `want`.
    async fn expect(&mut self, want: &[&str]) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, self.lines.next_line())
                .await
                .map_err(|_| anyhow!("no row {want:?} within 15 s; rows {:?}", self.seen))??
                .ok_or_else(|| anyhow!("kubectl get -w ended; rows {:?}", self.seen))?;
            let cols: Vec<&str> = line.split_whitespace().collect();
            let hit = cols.len() >= want.len() && cols[..want.len()] == *want;
            self.seen.push(line);
            if hit {
                return Ok(());
            }
        }
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// `get -w` prints a row per watch event, with the event type when asked.
async fn get_watch(c: &Ctx) -> anyhow::Result<()> {
    let cms = c.api::<ConfigMap>();
    cleanup(&cms, &["gw-a", "gw-b"]).await;
    c.ensure::<ConfigMap>(
        json!({"metadata": {"name": "gw-a", "labels": {"gw": "yes"}}, "data": {"k": "v"}}),
    )
    .await?;
    let relabel = |name: &'static str, value: &'static str| {
        let cms = cms.clone();
        async move {
            cms.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"gw": value}}})),
            )
            .await
        }
    };
    let mut rows = Rows::start(
        c,
        &[
            "get",
            "configmaps",
            "-l",
            "gw=yes",
            "-w",
            "--output-watch-events",
        ],
    )?;
    let result = async {
        rows.expect(&["EVENT", "NAME", "DATA", "AGE"]).await?;
        rows.expect(&["ADDED", "gw-a", "1"]).await?;
        rows.watching().await?;
        cms.patch(
            "gw-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k2": "v2"}})),
        )
        .await?;
        rows.expect(&["MODIFIED", "gw-a", "2"]).await?;
        c.ensure::<ConfigMap>(json!({"metadata": {"name": "gw-b", "labels": {"gw": "yes"}}}))
            .await?;
        rows.expect(&["ADDED", "gw-b", "0"]).await?;
        cms.delete("gw-a", &DeleteParams::default()).await?;
        rows.expect(&["DELETED", "gw-a", "2"]).await?;
        // Leaving the selector is a DELETED event; coming back, an ADDED one.
        relabel("gw-b", "no").await?;
        rows.expect(&["DELETED", "gw-b", "0"]).await?;
        relabel("gw-b", "yes").await?;
        rows.expect(&["ADDED", "gw-b", "0"]).await?;
        anyhow::Ok(())
    }
    .await;
    rows.stop().await;
    result?;
    // Plain `-w` prints the table rows without the event column.
    let mut rows = Rows::start(c, &["get", "cm", "gw-b", "-w"])?;
    let result = async {
        rows.expect(&["NAME", "DATA", "AGE"]).await?;
        rows.expect(&["gw-b", "0"]).await?;
        rows.watching().await?;
        cms.patch(
            "gw-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "y"}})),
        )
        .await?;
        rows.expect(&["gw-b", "1"]).await?;
        ensure!(rows.seen.len() == 3, "plain -w printed {:?}", rows.seen);
        anyhow::Ok(())
    }
    .await;
    rows.stop().await;
    result?;
    cleanup(&cms, &["gw-b"]).await;
    Ok(())
}

async fn explain(c: &Ctx) -> anyhow::Result<()> {
    let out = c.ok(&["explain", "deployment.spec.replicas"]).await?;
    contains(&out, "KIND:")?;
    contains(&out, "Deployment")?;
    contains(&out, "replicas <integer>")?;
    contains(&out, "Number of desired pods")?;
    let out = c.ok(&["explain", "pods.spec.containers"]).await?;
    contains(&out, "FIELDS:")?;
    ensure!(
        out.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w == ["image", "<string>"]
        }),
        "no `image <string>` field in: {}",
        support::one_line(&out, 300)
    );
    let out = c.ok(&["explain", "configmap", "--recursive"]).await?;
    contains(&out, "map[string]string")?;
    let out = c
        .ok(&[
            "explain",
            "cronjobs.spec.schedule",
            "--api-version=batch/v1",
        ])
        .await?;
    contains(&out, "schedule <string>")?;
    let err = c.fails(&["explain", "deployment.spec.nosuchfield"]).await?;
    contains(&err, "nosuchfield")?;
    Ok(())
}

async fn apply_kustomize(c: &Ctx) -> anyhow::Result<()> {
    let deploy = deployment("web", 1, &[("main", "busybox:1.36")]);
    let mut deploy = deploy;
    deploy["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
        json!([{"configMapRef": {"name": "settings"}}]);
    c.write("kustomize/deployment.yaml", &yaml(&deploy))?;
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n\
         kind: Kustomization\n\
         namespace: {ns}\n\
         namePrefix: kz-\n\
         labels:\n\
         - pairs:\n    app.kubernetes.io/part-of: conformance\n\
         resources:\n\
         - deployment.yaml\n\
         configMapGenerator:\n\
         - name: settings\n  literals:\n  - mode=conformance\n",
        ns = c.ns
    );
    let dir = PathBuf::from(c.write("kustomize/kustomization.yaml", &kustomization)?)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .context("dir")?;
    let built = c.ok(&["kustomize", &dir]).await?;
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&built)
        .map(Value::deserialize)
        .collect::<Result<_, _>>()?;
    let cm_name = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .and_then(|d| d["metadata"]["name"].as_str())
        .context("kustomize built no ConfigMap")?
        .to_string();
    ensure!(
        cm_name.starts_with("kz-settings-") && cm_name.len() > "kz-settings-".len(),
        "generated name {cm_name:?} has no hash suffix"
    );
    let out = c.ok(&["apply", "-k", &dir]).await?;
    ensure!(
        out == format!("configmap/{cm_name} created\ndeployment.apps/kz-web created\n"),
        "{out:?}"
    );
    let d = c.api::<Deployment>().get("kz-web").await?;
    ensure!(
        d.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/part-of"))
            .map(String::as_str)
            == Some("conformance"),
        "labels: {:?}",
        d.metadata.labels
    );
    let env_from = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers[0].env_from.clone())
        .unwrap_or_default();
    ensure!(
        env_from
            .first()
            .and_then(|e| e.config_map_ref.as_ref())
            .map(|r| r.name.as_str())
            == Some(cm_name.as_str()),
        "envFrom not rewritten to {cm_name}: {env_from:?}"
    );
    let cm = c.api::<ConfigMap>().get(&cm_name).await?;
    ensure!(
        data_of(&cm) == map(&[("mode", "conformance")]),
        "{:?}",
        cm.data
    );
    let out = c.ok(&["apply", "-k", &dir]).await?;
    ensure!(
        out == format!("configmap/{cm_name} unchanged\ndeployment.apps/kz-web unchanged\n"),
        "re-apply: {out:?}"
    );
    let out = c.ok(&["delete", "-k", &dir]).await?;
    contains(&out, &format!("configmap \"{cm_name}\" deleted"))?;
    contains(&out, "deployment.apps \"kz-web\" deleted")?;
    gone(&c.api::<Deployment>(), "kz-web").await
}

/// A CustomResourceDefinition of this binary's own group: install, Established, create,
/// printer columns, validation, merge patch, apply, explain, delete.
async fn custom_resources(c: &Ctx) -> anyhow::Result<()> {
    let group = c.widget_group();
    let crd_name = format!("widgets.{group}");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer", "description": "How big the widget is."},
                            "color": {"type": "string"}
                        }},
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
                    }
                }}
            }]
        }
    });
    let crd_file = c.write("crd.yaml", &yaml(&crd))?;
    let out = c.ok(&["apply", "-f", &crd_file]).await?;
    ensure!(
        out == format!("customresourcedefinition.apiextensions.k8s.io/{crd_name} created\n"),
        "{out:?}"
    );
    let out = c
        .ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd_name}"),
            "--timeout=10s",
        ])
        .await?;
    ensure!(
        out == format!("customresourcedefinition.apiextensions.k8s.io/{crd_name} condition met\n"),
        "{out:?}"
    );
    let resource = format!("widgets.{group}");
    let widget = |size: i64, color: &str| {
        yaml(
            &json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": "w1"}, "spec": {"size": size, "color": color}}),
        )
    };
    let w1 = c.write("widget-1.yaml", &widget(3, "blue"))?;
    let out = c
        .eventually_ok(&["create", "-f", &w1], Duration::from_secs(10))
        .await?;
    ensure!(out == format!("widget.{group}/w1 created\n"), "{out:?}");
    let out = c.ok(&["get", &resource]).await?;
    // With additionalPrinterColumns the table is NAME and those columns (AGE only when the
    // CRD lists none).
    ensure!(
        header(&out) == ["NAME", "SIZE", "COLOR"],
        "printer columns: {:?}",
        header(&out)
    );
    let r = row(&out, "w1")?;
    ensure!(r[1..3] == ["3", "blue"], "row {r:?}");
    let out = c
        .ok(&[
            "patch",
            &resource,
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"size":5}}"#,
        ])
        .await?;
    ensure!(out == format!("widget.{group}/w1 patched\n"), "{out:?}");
    let api: Api<DynamicObject> =
        Api::namespaced_with(c.client.clone(), &c.ns, &c.widget_resource());
    ensure!(
        api.get("w1").await?.data["spec"]["size"] == 5,
        "merge patch not stored"
    );
    // Custom resources take no strategic merge patch, kubectl's default.
    let err = c
        .fails(&["patch", &resource, "w1", "-p", r#"{"spec":{"size":6}}"#])
        .await?;
    contains(&err, "application/merge-patch+json")?;
    let out = c
        .ok(&["apply", "-f", &c.write("widget-2.yaml", &widget(7, "red"))?])
        .await?;
    ensure!(out == format!("widget.{group}/w1 configured\n"), "{out:?}");
    let stored = api.get("w1").await?;
    ensure!(
        stored.data["spec"] == json!({"size": 7, "color": "red"}),
        "apply: {}",
        stored.data["spec"]
    );
    let bad = c.write(
        "widget-bad.yaml",
        &widget(0, "x")
            .replace("size: 0", "size: big")
            .replace("name: w1", "name: bad"),
    )?;
    let err = c.fails(&["create", "-f", &bad]).await?;
    contains(&err, "is invalid")?;
    contains(&err, "spec.size")?;
    let out = c.ok(&["explain", &format!("{resource}.spec")]).await?;
    contains(&out, "size")?;
    contains(&out, "<integer>")?;
    let out = c.ok(&["delete", "-f", &w1]).await?;
    contains(&out, &format!("widget.{group} \"w1\" deleted"))?;
    let out = c.ok(&["delete", "-f", &crd_file, "--timeout=20s"]).await?;
    contains(
        &out,
        &format!("customresourcedefinition.apiextensions.k8s.io \"{crd_name}\" deleted"),
    )?;
    Ok(())
}

async fn pod_lifecycle(c: &Ctx) -> anyhow::Result<()> {
    let name = "pl-pod";
    let api = c.api::<Pod>();
    cleanup(&api, &[name]).await;
    let manifest = yaml(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "conformance"}},
        "spec": {
            "schedulingGates": [{"name": "conformance.minik8s.io/never"}],
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]
        }
    }));
    let out = c
        .ok_with(&["create", "-f", "-"], Some(&manifest), &[])
        .await?;
    ensure!(out == format!("pod/{name} created\n"), "{out:?}");
    let pod = api.get(name).await?;
    let spec = pod.spec.as_ref().context("pod spec")?;
    ensure!(
        spec.restart_policy.as_deref() == Some("Always")
            && spec.dns_policy.as_deref() == Some("ClusterFirst")
            && spec.containers[0].termination_message_path.as_deref()
                == Some("/dev/termination-log")
            && spec.containers[0].image_pull_policy.as_deref() == Some("IfNotPresent"),
        "pod defaults not applied: {spec:?}"
    );
    ensure!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"),
        "phase: {:?}",
        pod.status
    );
    let out = c.ok(&["get", "pods", "-o", "wide"]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "READY",
                "STATUS",
                "RESTARTS",
                "AGE",
                "IP",
                "NODE",
                "NOMINATED",
                "NODE",
                "READINESS",
                "GATES"
            ],
        "header: {:?}",
        header(&out)
    );
    let r = row(&out, name)?;
    ensure!(
        r[1..3] == ["0/1", "SchedulingGated"],
        "STATUS should be SchedulingGated (the PodScheduled=False condition with reason \
         SchedulingGated that creating a gated pod sets); row: {r:?}"
    );
    let described = c.ok(&["describe", "pod", name]).await?;
    contains(&described, "busybox:1.36")?;
    contains(&described, "app=conformance")?;
    let out = c
        .ok_with(&["delete", "-f", "-"], Some(&manifest), &[])
        .await?;
    contains(&out, &format!("pod \"{name}\" deleted"))?;
    gone(&api, name).await
}

/// `kubectl logs`: all of it, the tail with timestamps, following, the default container,
/// and the server's errors.
async fn logs(c: &Ctx) -> anyhow::Result<()> {
    c.workload().await?;
    let all = c
        .eventually_ok(&["logs", WORKLOAD, "-c", "main"], Duration::from_secs(20))
        .await?;
    ensure!(all.starts_with("started\n"), "logs: {all:?}");
    let tail = c
        .ok(&["logs", WORKLOAD, "-c", "main", "--tail=1", "--timestamps"])
        .await?;
    ensure!(tail.lines().count() == 1, "--tail=1: {tail:?}");
    let (ts, line) = tail
        .trim_end()
        .split_once(' ')
        .with_context(|| format!("no timestamp in {tail:?}"))?;
    ensure!(
        ts.len() >= 20 && ts.as_bytes()[4] == b'-' && ts.contains('T'),
        "not an RFC 3339 timestamp: {tail:?}"
    );
    ensure!(line.starts_with("tick ") || line == "started", "{tail:?}");
    // Without -c, kubectl picks the first container and says so.
    let r = c.run(&["logs", WORKLOAD]).await?;
    ensure!(r.ok(), "kubectl logs without -c: {}", r.stderr);
    contains(&r.stdout, "started\n")?;
    contains(&r.stderr, "Defaulted container \"main\"")?;
    // -f keeps printing what the container writes.
    let mut child = c
        .command(&["logs", "-f", WORKLOAD, "-c", "main", "--tail=0"], &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut ticks = Vec::new();
    let followed = tokio::time::timeout(Duration::from_secs(15), async {
        while ticks.len() < 2 {
            match lines.next_line().await? {
                Some(l) => ticks.push(l),
                None => bail!("kubectl logs -f ended early"),
            }
        }
        Ok(())
    })
    .await;
    let _ = child.kill().await;
    followed.context("kubectl logs -f printed no new lines in 15 s")??;
    ensure!(
        ticks.iter().all(|t| t.starts_with("tick ")),
        "followed: {ticks:?}"
    );
    let err = c.fails(&["logs", WORKLOAD, "-c", "nope"]).await?;
    contains(&err, "container nope is not valid for pod workload")?;
    let err = c
        .fails(&["logs", WORKLOAD, "-c", "main", "--previous"])
        .await?;
    contains(
        &err,
        "previous terminated container \"main\" in pod \"workload\" not found",
    )?;
    Ok(())
}

/// `kubectl exec`: output, exit codes and stdin.
async fn exec(c: &Ctx) -> anyhow::Result<()> {
    c.workload().await?;
    let out = c
        .ok(&["exec", WORKLOAD, "-c", "main", "--", "echo", "hi"])
        .await?;
    ensure!(out == "hi\n", "exec echo: {out:?}");
    let r = c
        .run(&[
            "exec",
            WORKLOAD,
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ])
        .await?;
    ensure!(r.code == Some(7), "exit code {:?}: {}", r.code, r.stderr);
    ensure!(r.stdout == "out\n", "stdout: {:?}", r.stdout);
    contains(&r.stderr, "err")?;
    let out = c
        .ok_with(
            &[
                "exec", "-i", WORKLOAD, "-c", "main", "--", "tr", "a-z", "A-Z",
            ],
            Some("from stdin\n"),
            &[],
        )
        .await?;
    ensure!(out == "FROM STDIN\n", "exec -i: {out:?}");
    let err = c
        .fails(&["exec", WORKLOAD, "-c", "nope", "--", "true"])
        .await?;
    contains(&err, "container nope is not valid for pod workload")?;
    Ok(())
}

/// `kubectl cp` into the pod and back out (tar over exec).
async fn cp(c: &Ctx) -> anyhow::Result<()> {
    c.workload().await?;
    let content: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    let local = c.write("cp/in.txt", &content)?;
    c.ok(&[
        "cp",
        &local,
        &format!("{WORKLOAD}:/tmp/in.txt"),
        "-c",
        "main",
    ])
    .await?;
    let wc = c
        .ok(&[
            "exec",
            WORKLOAD,
            "-c",
            "main",
            "--",
            "wc",
            "-c",
            "/tmp/in.txt",
        ])
        .await?;
    ensure!(
        wc.split_whitespace().next() == Some(&content.len().to_string()),
        "size in the pod: {wc:?}, want {}",
        content.len()
    );
    let back = c.dir.join("cp").join("back.txt");
    c.ok(&[
        "cp",
        &format!("{WORKLOAD}:/tmp/in.txt"),
        &back.to_string_lossy(),
        "-c",
        "main",
    ])
    .await?;
    let got = std::fs::read_to_string(&back)?;
    ensure!(
        got == content,
        "copied back {} bytes, want {}",
        got.len(),
        content.len()
    );
    Ok(())
}

/// `kubectl port-forward`, then an HTTP request through the forwarded port.
async fn port_forward(c: &Ctx) -> anyhow::Result<()> {
    c.workload().await?;
    let mut child = c
        .command(
            &[
                "port-forward",
                &format!("pod/{WORKLOAD}"),
                ":8080",
                "--address",
                "127.0.0.1",
            ],
            &[],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
    let port = match first {
        Ok(Ok(Some(line))) => line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse::<u16>().ok())
            .with_context(|| format!("unexpected first line {line:?}")),
        other => {
            let _ = child.kill().await;
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ = e.read_to_string(&mut err).await;
            }
            bail!("kubectl port-forward did not start ({other:?}): {err}");
        }
    };
    let result = async {
        let port = port?;
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10"])
            .arg(format!("http://127.0.0.1:{port}/index.html"))
            .output()
            .await
            .context("running curl")?;
        ensure!(
            out.status.success(),
            "curl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let body = String::from_utf8_lossy(&out.stdout);
        ensure!(body == "hello-from-web\n", "through the forward: {body:?}");
        Ok(())
    }
    .await;
    let _ = child.kill().await;
    result
}

/// Reads `stdout` lines until `done` holds for the lines seen, for at most `limit`.
async fn read_until(
    stdout: tokio::process::ChildStdout,
    limit: Duration,
    done: impl Fn(&[String]) -> bool,
) -> anyhow::Result<Vec<String>> {
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let read = tokio::time::timeout(limit, async {
        while !done(&seen) {
            match lines.next_line().await? {
                Some(l) => seen.push(l),
                None => bail!("the output ended"),
            }
        }
        Ok(())
    })
    .await;
    match read {
        Ok(Ok(())) => Ok(seen),
        Ok(Err(e)) => Err(e.context(format!("after {seen:?}"))),
        Err(_) => bail!("not within {limit:?}; seen {seen:?}"),
    }
}

/// `kubectl attach`: what a running container prints from then on, and with `-i` what it
/// echoes of the attached stdin.
async fn attach(c: &Ctx) -> anyhow::Result<()> {
    c.workload().await?;
    let mut child = c
        .command(&["attach", WORKLOAD, "-c", "main"], &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let ticks = read_until(
        child.stdout.take().context("stdout")?,
        Duration::from_secs(20),
        |seen| seen.len() >= 2,
    )
    .await;
    let _ = child.kill().await;
    let ticks = ticks.context("kubectl attach")?;
    ensure!(
        ticks.iter().all(|t| t.starts_with("tick ")),
        "attached: {ticks:?}"
    );
    c.pod_until(
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "attach-cat"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "cat", "image": "busybox:1.36", "command": ["cat"],
                    "stdin": true}]
            }
        }),
        "attach-cat to run",
        all_running,
    )
    .await?;
    let mut child = c
        .command(&["attach", "-i", "attach-cat", "-c", "cat"], &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let stdout = child.stdout.take().context("stdout")?;
    // Sent until the echo shows: kubectl may not have attached when the first line goes.
    let echoed = async {
        let reading = read_until(stdout, Duration::from_secs(30), |seen| {
            seen.iter().any(|l| l == "from-stdin")
        });
        let writing = async {
            for _ in 0..30 {
                stdin.write_all(b"from-stdin\n").await?;
                stdin.flush().await?;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            anyhow::Ok(())
        };
        tokio::select! {
            r = reading => r,
            w = writing => Err(anyhow!("kubectl attach -i echoed nothing: {w:?}")),
        }
    }
    .await;
    let _ = child.kill().await;
    echoed.context("kubectl attach -i")?;
    cleanup(&c.api::<Pod>(), &["attach-cat"]).await;
    Ok(())
}

/// `kubectl logs --previous` after a restart: the container counts its runs in an emptyDir,
/// fails the first and stays up in the second, so the previous instance printed `run 1`.
async fn logs_previous(c: &Ctx) -> anyhow::Result<()> {
    c.pod_until(
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "restarter"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "restartPolicy": "Always",
                "volumes": [{"name": "state", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "busybox:1.36",
                    "volumeMounts": [{"name": "state", "mountPath": "/state"}],
                    "command": ["sh", "-c",
                        "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; echo run $n; if [ $n -ge 2 ]; then exec sleep 3600; fi; exit 1"]}]
            }
        }),
        "restarter to restart once and run",
        |p| all_running(p) && container_statuses(p).iter().all(|s| s.restart_count >= 1),
    )
    .await?;
    let previous = c
        .eventually_ok(
            &["logs", "restarter", "--previous"],
            Duration::from_secs(20),
        )
        .await?;
    ensure!(previous == "run 1\n", "logs --previous: {previous:?}");
    let current = c
        .eventually_ok(&["logs", "restarter"], Duration::from_secs(20))
        .await?;
    ensure!(current == "run 2\n", "logs: {current:?}");
    cleanup(&c.api::<Pod>(), &["restarter"]).await;
    Ok(())
}

/// Whether `s` is a quantity as kubectl top prints it: digits then `unit`.
fn top_value(s: &str, unit: &str) -> bool {
    s.strip_suffix(unit)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `kubectl top node`: the metrics.k8s.io API the API server serves, with kubectl's columns.
async fn top_node(c: &Ctx) -> anyhow::Result<()> {
    let node = c.ready_node().await?;
    let out = c
        .eventually_ok(&["top", "node"], Duration::from_secs(30))
        .await?;
    let h = header(&out);
    ensure!(
        h.len() == 5
            && h[0] == "NAME"
            && h[1] == "CPU(cores)"
            && matches!(h[2], "CPU%" | "CPU(%)")
            && h[3] == "MEMORY(bytes)"
            && matches!(h[4], "MEMORY%" | "MEMORY(%)"),
        "header: {out}"
    );
    let r = row(&out, &node)?;
    ensure!(
        r.len() == 5
            && top_value(r[1], "m")
            && top_value(r[2], "%")
            && top_value(r[3], "Mi")
            && top_value(r[4], "%"),
        "row: {r:?}"
    );
    let one = c.ok(&["top", "node", &node, "--no-headers"]).await?;
    ensure!(one.lines().count() == 1 && one.starts_with(&node), "{one}");
    let err = c.fails(&["top", "node", "no-such-node"]).await?;
    contains(&err, "NotFound")?;
    contains(&err, "no-such-node")?;
    Ok(())
}

/// `kubectl top pod`: one pod, its containers, by label, and across namespaces.
async fn top_pod(c: &Ctx) -> anyhow::Result<()> {
    c.workload().await?;
    let out = c
        .eventually_ok(&["top", "pod", WORKLOAD], Duration::from_secs(30))
        .await?;
    ensure!(
        header(&out) == ["NAME", "CPU(cores)", "MEMORY(bytes)"],
        "header: {out}"
    );
    let r = row(&out, WORKLOAD)?;
    ensure!(
        r.len() == 3 && top_value(r[1], "m") && top_value(r[2], "Mi"),
        "row: {r:?}"
    );
    let out = c
        .ok(&["top", "pod", "-l", "app=workload", "--containers"])
        .await?;
    ensure!(
        header(&out) == ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "header: {out}"
    );
    let mut containers: Vec<&str> = rows(&out)
        .iter()
        .skip(1)
        .filter(|r| r.first() == Some(&WORKLOAD))
        .filter_map(|r| r.get(1).copied())
        .collect();
    containers.sort();
    ensure!(containers == ["main", "web"], "containers: {out}");
    let all = c.ok(&["top", "pod", "-A"]).await?;
    ensure!(
        header(&all) == ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "header: {all}"
    );
    ensure!(
        rows(&all)
            .iter()
            .any(|r| r.first() == Some(&c.ns.as_str()) && r.get(1) == Some(&WORKLOAD)),
        "-A: {all}"
    );
    let err = c.fails(&["top", "pod", "no-such-pod"]).await?;
    contains(&err, "NotFound")?;
    contains(&err, "no-such-pod")?;
    Ok(())
}

/// Bad input fails with the server's message, not a crash or a hang.
async fn errors(c: &Ctx) -> anyhow::Result<()> {
    let err = c.fails(&["get", "configmap", "does-not-exist"]).await?;
    contains(
        &err,
        "Error from server (NotFound): configmaps \"does-not-exist\" not found",
    )?;
    let bad =
        yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_Valid"}}));
    let r = c.run_with(&["create", "-f", "-"], Some(&bad), &[]).await?;
    ensure!(!r.ok());
    contains(&r.stderr, "is invalid")?;
    contains(&r.stderr, "metadata.name")?;
    let err = c.fails(&["get", "nosuchkind"]).await?;
    contains(
        &err,
        "the server doesn't have a resource type \"nosuchkind\"",
    )?;
    let unknown = yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "unknown-field"}, "bogus": 1}));
    let r = c
        .run_with(&["create", "-f", "-"], Some(&unknown), &[])
        .await?;
    ensure!(!r.ok(), "an unknown field passed strict validation");
    contains(&r.stderr, "unknown field \"bogus\"")?;
    Ok(())
}

/// The cluster IP of a Service.
async fn cluster_ip(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let svc: k8s_openapi::api::core::v1::Service = Api::namespaced(client.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("getting Service {ns}/{name}"))?;
    svc.spec
        .and_then(|s| s.cluster_ip)
        .with_context(|| format!("Service {ns}/{name} has no cluster IP"))
}

/// Cluster DNS from inside a pod: its resolv.conf is the kubelet's ClusterFirst one and
/// busybox's `nslookup` resolves the API server's Service (full and short names) and a
/// Service created by the case through the `kube-dns` Service.
async fn cluster_dns(c: &Ctx) -> anyhow::Result<()> {
    c.workload().await?;
    let dns_ip = cluster_ip(&c.client, "kube-system", "kube-dns").await?;
    let conf = c
        .ok(&[
            "exec",
            WORKLOAD,
            "-c",
            "main",
            "--",
            "cat",
            "/etc/resolv.conf",
        ])
        .await?;
    contains(&conf, &format!("nameserver {dns_ip}"))?;
    contains(
        &conf,
        &format!(
            "search {}.svc.cluster.local svc.cluster.local cluster.local",
            c.ns
        ),
    )?;
    contains(&conf, "options ndots:5")?;

    let dns_ip = dns_ip.as_str();
    // busybox's nslookup asks for a name with dots as it is; its libc resolver (here through
    // ping, whose first line names the address) walks the search list as every program does.
    let nslookup = |name: String, want: String| async move {
        eventually(
            Duration::from_secs(30),
            &format!("nslookup {name}"),
            || async {
                let out = c
                    .ok(&["exec", WORKLOAD, "-c", "main", "--", "nslookup", &name])
                    .await?;
                ensure!(
                    out.lines()
                        .any(|l| l.starts_with("Server:") && l.contains(dns_ip)),
                    "not answered by {dns_ip}: {out:?}"
                );
                contains(&out, &format!("Address: {want}"))?;
                Ok(())
            },
        )
        .await
    };
    let resolve = |name: String, want: String| async move {
        eventually(
            Duration::from_secs(30),
            &format!("resolving {name}"),
            || async {
                let script = format!("ping -c1 -W1 {name} | head -n1");
                let r = c
                    .run(&["exec", WORKLOAD, "-c", "main", "--", "sh", "-c", &script])
                    .await?;
                contains(&r.stdout, &format!("PING {name} ({want})"))
            },
        )
        .await
    };
    let api_ip = cluster_ip(&c.client, "default", "kubernetes").await?;
    nslookup(
        "kubernetes.default.svc.cluster.local".into(),
        api_ip.clone(),
    )
    .await?;
    resolve("kubernetes.default".into(), api_ip).await?;

    c.ensure::<k8s_openapi::api::core::v1::Service>(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "dns-probe"},
        "spec": {"selector": {"app": "workload"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .await?;
    let probe_ip = cluster_ip(&c.client, &c.ns, "dns-probe").await?;
    nslookup(
        format!("dns-probe.{}.svc.cluster.local", c.ns),
        probe_ip.clone(),
    )
    .await?;
    resolve("dns-probe".into(), probe_ip).await?;
    Ok(())
}

/// A container port published on the node with hostPort (the CNI portmap plugin's DNAT,
/// fed by the kubelet's CRI port mappings) answers on 127.0.0.1, and stops with its pod. Each
/// kubectl binary uses its own port: the cases of all binaries share the one node.
async fn host_port(c: &Ctx) -> anyhow::Result<()> {
    let port = 18000 + c.bin.minor.unwrap_or(99);
    let node = c.ready_node().await?;
    let manifest = yaml(&json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "host-port"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "web", "image": "busybox:1.36", "imagePullPolicy": "Never",
                "command": ["sh", "-c", "mkdir -p /www && echo hello-from-host-port > /www/index.html && exec httpd -f -p 8080 -h /www"],
                "ports": [{"containerPort": 8080, "hostPort": port}]}]
        }
    }));
    let file = c.write("host-port.yaml", &manifest)?;
    c.ok(&["create", "-f", &file]).await?;
    c.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/host-port",
        "--timeout=60s",
    ])
    .await?;
    let url = format!("http://127.0.0.1:{port}/index.html");
    let get = |url: String| async move {
        Command::new("curl")
            .args(["-sS", "--max-time", "5"])
            .arg(url)
            .output()
            .await
            .context("running curl")
    };
    eventually(
        Duration::from_secs(20),
        "the host port to answer",
        || async {
            let out = get(url.clone()).await?;
            let body = String::from_utf8_lossy(&out.stdout);
            ensure!(
                out.status.success() && body == "hello-from-host-port\n",
                "curl {url}: {body:?} {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(())
        },
    )
    .await?;
    c.ok(&["delete", "-f", &file, "--wait=true", "--timeout=60s"])
        .await?;
    eventually(
        Duration::from_secs(20),
        "the host port to close",
        || async {
            let out = get(url.clone()).await?;
            ensure!(!out.status.success(), "still answers after the pod went");
            Ok(())
        },
    )
    .await
}

/// Where the cluster serves Ingresses on this machine: port 80 unless the server was started
/// with another `MINIK8S_INGRESS_BIND_ADDRESS`.
pub fn ingress_address() -> std::net::SocketAddr {
    let port = std::env::var("MINIK8S_INGRESS_BIND_ADDRESS")
        .ok()
        .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
        .map_or(80, |a| a.port());
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}

/// One HTTP/1.1 GET through the Ingress proxy: status code and body.
async fn ingress_get(host: &str, path: &str) -> anyhow::Result<(u16, String)> {
    support::http(
        ingress_address(),
        "GET",
        host,
        path,
        None,
        Duration::from_secs(10),
    )
    .await
}

/// Waits until `host` + `path` answers `code` with `body` through the Ingress proxy.
async fn ingress_answers(host: &str, path: &str, code: u16, body: &str) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(60),
        &format!("GET http://{host}{path} through the Ingress"),
        || async {
            let got = ingress_get(host, path).await?;
            ensure!(
                got == (code, body.to_string()),
                "got {got:?}, want ({code}, {body:?})"
            );
            Ok(())
        },
    )
    .await
}

/// An Ingress of the default class with two hosts, an Exact and a Prefix path, to two
/// Services backed by busybox httpd pods: requests are routed by Host and path through the
/// node's Ingress port, the status carries the node's address, and an edit of the rules
/// applies without a restart.
async fn ingress(c: &Ctx) -> anyhow::Result<()> {
    for (name, index, exact) in [
        ("ing-a", "from-a", "exact-from-a"),
        ("ing-b", "from-b", "exact-from-b"),
    ] {
        c.ensure::<Pod>(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "web", "image": "busybox:1.36", "command": ["sh", "-c",
                    format!("mkdir -p /www && echo {index} > /www/index.html && echo {exact} > /www/exact && exec httpd -f -p 8080 -h /www")],
                    "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]
            }
        }))
        .await?;
        c.ensure::<k8s_openapi::api::core::v1::Service>(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}
        }))
        .await?;
    }
    let (a, b) = (format!("a.{}.example", c.ns), format!("b.{}.example", c.ns));
    let backend = |svc: &str| json!({"service": {"name": svc, "port": {"number": 80}}});
    let manifest = |a_backend: &str| {
        yaml(&json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web"},
            "spec": {"rules": [
                {"host": a, "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": backend(a_backend)}]}},
                {"host": b, "http": {"paths": [
                    {"path": "/exact", "pathType": "Exact", "backend": backend("ing-b")},
                    {"path": "/", "pathType": "Prefix", "backend": backend("ing-a")}]}}
            ]}
        }))
    };
    let file = c.write("ingress/web.yaml", &manifest("ing-a"))?;
    c.ok(&["apply", "-f", &file]).await?;

    ingress_answers(&a, "/", 200, "from-a").await?;
    ingress_answers(&a, "/exact", 200, "exact-from-a").await?;
    ingress_answers(&b, "/exact", 200, "exact-from-b").await?;
    ingress_answers(&b, "/", 200, "from-a").await?;
    // Exact means exact: `/exact/` is only matched by the Prefix `/` rule (to ing-a, where
    // httpd has no such directory).
    ensure!(
        ingress_get(&b, "/exact/").await?.0 == 404,
        "/exact/ reached the Exact rule"
    );
    let (code, body) = ingress_get(&format!("c.{}.example", c.ns), "/").await?;
    ensure!(
        code == 404 && body == "default backend - 404",
        "an unknown host: {code} {body:?}"
    );

    // The status carries the node's InternalIP.
    let nodes: Api<Node> = Api::all(c.client.clone());
    let node_ips: Vec<String> = nodes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .flat_map(|n| n.status.and_then(|s| s.addresses).unwrap_or_default())
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address)
        .collect();
    let lb = c
        .eventually_ok(
            &[
                "get",
                "ingress",
                "web",
                "-o",
                "jsonpath={.status.loadBalancer.ingress[*].ip}",
            ],
            Duration::from_secs(30),
        )
        .await?;
    ensure!(
        !lb.is_empty()
            && node_ips
                .iter()
                .any(|ip| lb.split_whitespace().any(|l| l == ip)),
        "status.loadBalancer {lb:?}, node addresses {node_ips:?}"
    );

    // A changed rule applies without a restart.
    let file = c.write("ingress/web.yaml", &manifest("ing-b"))?;
    c.ok(&["apply", "-f", &file]).await?;
    ingress_answers(&a, "/", 200, "from-b").await?;
    c.ok(&["delete", "ingress", "web"]).await?;
    ingress_answers(&a, "/", 404, "default backend - 404").await?;
    Ok(())
}

/// The part of a JWT that holds its claims.
fn jwt_claims(token: &str) -> anyhow::Result<Value> {
    use base64::Engine;
    let body = token
        .split('.')
        .nth(1)
        .ok_or_else(|| anyhow!("not a JWT: {token}"))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body)?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// `kubectl create token`: a signed token for the service account that the server then
/// takes as that service account, until the service account is deleted.
async fn create_token(c: &Ctx) -> anyhow::Result<()> {
    let sa = "conf-token-sa";
    let _ = c
        .run(&["delete", "serviceaccount", sa, "--ignore-not-found"])
        .await?;
    c.ok(&["create", "serviceaccount", sa]).await?;
    let token = c.ok(&["create", "token", sa, "--duration=20m"]).await?;
    let token = token.trim();
    let claims = jwt_claims(token)?;
    let user = format!("system:serviceaccount:{}:{sa}", c.ns);
    ensure!(claims["sub"] == user.as_str(), "claims: {claims}");
    ensure!(
        claims["kubernetes.io"]["serviceaccount"]["name"] == sa,
        "claims: {claims}"
    );
    let lifetime = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
    ensure!(lifetime == 1200, "token lives {lifetime} s, asked for 20m");
    let err = c.fails(&["create", "token", sa, "--duration=1m"]).await?;
    contains(&err, "may not specify a duration less than 10 minutes")?;
    let err = c.fails(&["create", "token", "no-such-sa"]).await?;
    contains(&err, "serviceaccounts \"no-such-sa\" not found")?;
    let token_arg = format!("--token={token}");
    let server = c.server().await?;
    // The token authenticates by itself (the admin's client certificate is left out).
    let as_token = |args: &[&str]| {
        let mut all = vec![
            "--kubeconfig=/dev/null".to_string(),
            format!("--server={server}"),
            "--insecure-skip-tls-verify".into(),
            token_arg.clone(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        all
    };
    if c.bin.minor.is_none_or(|m| m >= 28) {
        let args = as_token(&["auth", "whoami", "-o", "json"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = c.ok(&args).await?;
        let review: Value = serde_json::from_str(&out)?;
        let info = &review["status"]["userInfo"];
        ensure!(info["username"] == user.as_str(), "whoami: {out}");
        let groups = info["groups"].to_string();
        contains(&groups, "system:serviceaccounts")?;
        contains(&groups, &format!("system:serviceaccounts:{}", c.ns))?;
        contains(&groups, "system:authenticated")?;
    }
    let args = as_token(&["get", "serviceaccount", sa, "-n", &c.ns, "-o", "name"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Authenticated, but RBAC grants a new service account nothing yet.
    let err = c.fails(&args).await?;
    contains(
        &err,
        &format!(
            "serviceaccounts \"{sa}\" is forbidden: User \"{user}\" cannot get resource \"serviceaccounts\" in API group \"\" in the namespace \"{}\"",
            c.ns
        ),
    )?;
    let subject = format!("--serviceaccount={}:{sa}", c.ns);
    c.ok(&[
        "create",
        "rolebinding",
        "conf-token-view",
        "--clusterrole=view",
        &subject,
    ])
    .await?;
    let out = crate::support::eventually(
        std::time::Duration::from_secs(20),
        "the token's user to read its namespace",
        || async { c.ok(&args).await },
    )
    .await?;
    contains(&out, &format!("serviceaccount/{sa}"))?;
    // Only admins may impersonate.
    let imp = as_token(&["get", "configmaps", "-n", &c.ns, "--as=jane"]);
    let imp: Vec<&str> = imp.iter().map(String::as_str).collect();
    let err = c.fails(&imp).await?;
    contains(
        &err,
        &format!(
            "users \"jane\" is forbidden: User \"{user}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        ),
    )?;
    // Deleting the service account revokes its tokens.
    c.ok(&["delete", "serviceaccount", sa]).await?;
    let r = c.run(&args).await?;
    ensure!(!r.ok(), "a token outlived its service account");
    contains(&r.stderr, "Unauthorized")?;
    Ok(())
}

/// `kubectl auth whoami --as`: impersonation as upstream's filter does it for an admin.
async fn auth_whoami_as(c: &Ctx) -> anyhow::Result<()> {
    if c.bin.minor.is_some_and(|m| m < 28) {
        return Ok(());
    }
    let out = c
        .ok(&[
            "auth",
            "whoami",
            "--as=jane",
            "--as-group=dev",
            "-o",
            "json",
        ])
        .await?;
    let review: Value = serde_json::from_str(&out)?;
    let info = &review["status"]["userInfo"];
    ensure!(info["username"] == "jane", "whoami: {out}");
    ensure!(
        info["groups"] == json!(["dev", "system:authenticated"]),
        "whoami: {out}"
    );
    let table = c.ok(&["auth", "whoami", "--as=jane"]).await?;
    contains(&table, "jane")?;
    Ok(())
}

/// `--dry-run=server` answers as a real write would: AlreadyExists for a taken name,
/// NotFound for an update of a missing object, and nothing is stored.
async fn create_dry_run_conflict(c: &Ctx) -> anyhow::Result<()> {
    let name = "dry-run-conflict";
    let _ = c
        .run(&["delete", "configmap", name, "--ignore-not-found"])
        .await?;
    c.ok(&["create", "configmap", name, "--from-literal=a=1"])
        .await?;
    let err = c
        .fails(&[
            "create",
            "configmap",
            name,
            "--from-literal=a=2",
            "--dry-run=server",
        ])
        .await?;
    // kubectl ≤ 1.29 words it "error: failed to create configmap: ...", later ones
    // "Error from server (AlreadyExists): ..."; the server's message is the same.
    contains(&err, &format!("configmaps \"{name}\" already exists"))?;
    let out = c
        .ok(&[
            "create",
            "configmap",
            "dry-run-new",
            "--from-literal=a=1",
            "--dry-run=server",
        ])
        .await?;
    contains(&out, "configmap/dry-run-new created (server dry run)")?;
    let r = c.run(&["get", "configmap", "dry-run-new"]).await?;
    ensure!(!r.ok(), "a dry-run create was stored");
    let missing = yaml(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dry-run-missing"}, "data": {"a": "1"}}));
    let r = c
        .run_with(
            &["replace", "--dry-run=server", "-f", "-"],
            Some(&missing),
            &[],
        )
        .await?;
    ensure!(!r.ok(), "a dry-run replace of a missing object succeeded");
    contains(&r.stderr, "configmaps \"dry-run-missing\" not found")?;
    c.ok(&["delete", "configmap", name]).await?;
    Ok(())
}

/// A CRD whose schema is not structural is refused with upstream's causes.
async fn crd_bad_schema(c: &Ctx) -> anyhow::Result<()> {
    let group = c.widget_group();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"properties": {"size": {"type": "integer"}},
                                 "x-kubernetes-validations": [{"rule": "self.size <"}]},
                        "status": {"type": "object",
                                   "properties": {"a": {"type": "string"}},
                                   "additionalProperties": {"type": "string"}}
                    }
                }}
            }]
        }
    });
    let r = c
        .run_with(&["create", "-f", "-"], Some(&yaml(&crd)), &[])
        .await?;
    ensure!(!r.ok(), "a CRD with a bad schema was accepted");
    contains(&r.stderr, "is invalid")?;
    contains(
        &r.stderr,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
    )?;
    contains(
        &r.stderr,
        "spec.versions[0].schema.openAPIV3Schema.properties[status].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
    )?;
    contains(
        &r.stderr,
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.size <\": compilation failed",
    )?;
    Ok(())
}
