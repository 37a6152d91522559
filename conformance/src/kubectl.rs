//! Cases run with a stock kubectl binary. Each works on objects named after the kubectl
//! version so runs with several binaries do not collide, and checks both kubectl's output and
//! what the API holds afterwards.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;

use crate::Outcome;

pub struct Kubectl {
    bin: String,
    kubeconfig: PathBuf,
    /// A short tag for object names: `1-32` for kubectl.1.32, `stock` for the dispatcher.
    pub tag: String,
}

/// What a kubectl invocation printed.
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub ok: bool,
}

impl Kubectl {
    pub fn new(bin: &str, kubeconfig: &Path) -> Self {
        let tag = bin
            .rsplit("kubectl.")
            .next()
            .filter(|t| t.starts_with("1."))
            .map(|t| t.replace('.', "-"))
            .unwrap_or_else(|| "stock".into());
        Kubectl {
            bin: bin.to_string(),
            kubeconfig: kubeconfig.to_path_buf(),
            tag,
        }
    }

    pub fn label(&self) -> String {
        format!("kubectl-{}", self.tag)
    }

    /// Runs kubectl with `args`, feeding `stdin` if given.
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Run> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("running {}", self.bin))?;
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(input.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok(Run {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            ok: out.status.success(),
        })
    }

    /// Runs kubectl and fails unless it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let r = self.run(args, stdin)?;
        if !r.ok {
            bail!(
                "kubectl {} failed: {}{}",
                args.join(" "),
                r.stdout,
                r.stderr
            );
        }
        Ok(r.stdout)
    }
}

fn contains(haystack: &str, needle: &str) -> anyhow::Result<()> {
    ensure!(
        haystack.contains(needle),
        "expected {needle:?} in output:\n{haystack}"
    );
    Ok(())
}

/// Runs every kubectl case with one binary, printing a line per case.
pub async fn run_all(k: &Kubectl, client: &kube::Client, filter: Option<&str>) -> Vec<Outcome> {
    let mut out = Vec::new();
    macro_rules! case {
        ($name:literal, $f:expr) => {
            let name = format!("{}/{}", k.label(), $name);
            if filter.is_none_or(|f| name.contains(f)) {
                let started = Instant::now();
                let result = $f.await;
                match &result {
                    Ok(()) => println!("ok    {name} ({} ms)", started.elapsed().as_millis()),
                    Err(e) => println!("FAIL  {name}: {e:#}"),
                }
                out.push(Outcome { name, result });
            }
        };
    }
    case!("version", version(k));
    case!("get-namespaces", get_namespaces(k));
    case!("configmap-lifecycle", configmap_lifecycle(k, client));
    case!("pod-create-describe-delete", pod_lifecycle(k, client));
    case!("errors-are-clear", errors(k));
    out
}

async fn version(k: &Kubectl) -> anyhow::Result<()> {
    let v: serde_json::Value = serde_json::from_str(&k.ok(&["version", "-o", "json"], None)?)?;
    ensure!(
        v["serverVersion"]["minor"] == "32",
        "server minor: {}",
        v["serverVersion"]
    );
    ensure!(
        v["serverVersion"]["gitVersion"]
            .as_str()
            .is_some_and(|g| g.starts_with("v1.32.")),
        "{}",
        v["serverVersion"]
    );
    Ok(())
}

async fn get_namespaces(k: &Kubectl) -> anyhow::Result<()> {
    let out = k.ok(&["get", "namespaces"], None)?;
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        contains(&out, ns)?;
    }
    let names = k.ok(&["get", "ns", "-o", "name"], None)?;
    contains(&names, "namespace/default")?;
    Ok(())
}

/// create -f, get (json, name, label selector), label, annotate, describe, delete.
async fn configmap_lifecycle(k: &Kubectl, client: &kube::Client) -> anyhow::Result<()> {
    let name = format!("conf-cm-{}", k.tag);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let _ = api.delete(&name, &Default::default()).await;
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  greeting: hello\n"
    );
    let out = k.ok(&["create", "-f", "-"], Some(&manifest))?;
    contains(&out, &format!("configmap/{name} created"))?;
    let stored = api
        .get(&name)
        .await
        .context("created configmap is in the API")?;
    ensure!(
        stored
            .data
            .as_ref()
            .and_then(|d| d.get("greeting"))
            .map(String::as_str)
            == Some("hello")
    );

    let json: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "configmap", &name, "-o", "json"], None)?)?;
    ensure!(
        json["data"]["greeting"] == "hello"
            && json["metadata"]["uid"] == stored.metadata.uid.clone().unwrap_or_default()
    );

    contains(
        &k.ok(&["label", "configmap", &name, "tier=conformance"], None)?,
        "labeled",
    )?;
    // kubectl 1.27 prints "annotate", later versions "annotated".
    contains(
        &k.ok(&["annotate", "configmap", &name, "note=checked"], None)?,
        "annotate",
    )?;
    let labeled = api.get(&name).await?;
    ensure!(
        labeled
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("tier"))
            .map(String::as_str)
            == Some("conformance"),
        "label not stored"
    );
    ensure!(
        labeled
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("note"))
            .map(String::as_str)
            == Some("checked"),
        "annotation not stored"
    );
    // Overwriting a label needs --overwrite, as upstream.
    let r = k.run(&["label", "configmap", &name, "tier=other"], None)?;
    ensure!(
        !r.ok && r.stderr.contains("already has a value"),
        "label without --overwrite: {}",
        r.stderr
    );
    k.ok(&["label", "configmap", &name, "tier-"], None)?;
    ensure!(
        !api.get(&name)
            .await?
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("tier"),
        "label not removed"
    );
    k.ok(&["label", "configmap", &name, "tier=conformance"], None)?;

    let listed = k.ok(
        &["get", "configmaps", "-l", "tier=conformance", "-o", "name"],
        None,
    )?;
    contains(&listed, &format!("configmap/{name}"))?;
    let described = k.ok(&["describe", "configmap", &name], None)?;
    contains(&described, &format!("Name:         {name}"))?;
    contains(&described, "tier=conformance")?;
    contains(&described, "greeting")?;

    contains(
        &k.ok(&["delete", "configmap", &name], None)?,
        &format!("configmap \"{name}\" deleted"),
    )?;
    match api.get(&name).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => Err(anyhow!(
            "configmap still there after delete: {:?}",
            other.map(|c| c.metadata.name)
        )),
    }
}

async fn pod_lifecycle(k: &Kubectl, client: &kube::Client) -> anyhow::Result<()> {
    let name = format!("conf-pod-{}", k.tag);
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let _ = api.delete(&name, &Default::default()).await;
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    app: conformance\nspec:\n  containers:\n  - name: main\n    image: busybox:1.36\n    command: [\"sleep\", \"3600\"]\n"
    );
    contains(
        &k.ok(&["create", "-f", "-"], Some(&manifest))?,
        &format!("pod/{name} created"),
    )?;
    let pod = api.get(&name).await?;
    let spec = pod.spec.as_ref().context("pod spec")?;
    ensure!(
        spec.restart_policy.as_deref() == Some("Always"),
        "defaults applied"
    );
    ensure!(pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"));
    let described = k.ok(&["describe", "pod", &name], None)?;
    contains(&described, "busybox:1.36")?;
    contains(&described, "app=conformance")?;
    contains(&k.ok(&["get", "pods", "-o", "wide"], None)?, &name)?;
    contains(
        &k.ok(&["delete", "-f", "-"], Some(&manifest))?,
        &format!("pod \"{name}\" deleted"),
    )?;
    ensure!(api.get_opt(&name).await?.is_none(), "pod still there");
    Ok(())
}

/// Bad input fails with the server's message, not a crash or a hang.
async fn errors(k: &Kubectl) -> anyhow::Result<()> {
    let r = k.run(&["get", "configmap", "does-not-exist"], None)?;
    ensure!(!r.ok);
    contains(&r.stderr, "configmaps \"does-not-exist\" not found")?;
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\n";
    let r = k.run(&["create", "-f", "-"], Some(bad))?;
    ensure!(!r.ok);
    contains(&r.stderr, "is invalid")?;
    contains(&r.stderr, "metadata.name")?;
    let r = k.run(&["get", "nosuchkind"], None)?;
    ensure!(!r.ok);
    contains(
        &r.stderr,
        "the server doesn't have a resource type \"nosuchkind\"",
    )?;
    Ok(())
}
