//! The official Python client (pip `kubernetes`, pinned to the release for Kubernetes 1.32)
//! and kr8s, installed into a venv from PyPI on first use and reused after. The cases live in
//! `conformance/python/suite.py`; this runner starts it and turns its `CASE` lines into the
//! suite's lines.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

use crate::Env;
use crate::support;

/// The Python client release that matches Kubernetes 1.32.
pub const CLIENT_VERSION: &str = "32.0.1";
/// kr8s, another Python client people use (it asks for `/version/` and `/api/`).
pub const KR8S_VERSION: &str = "0.20.15";

/// The cases of `suite.py`, in the order it runs them.
pub const CASES: &[&str] = &[
    "crud",
    "errors",
    "watch-resume",
    "patch-json",
    "patch-merge",
    "patch-strategic",
    "patch-apply",
    "custom-objects",
    "discovery",
    "kr8s-version",
    "dry-run-invalid",
    "zero-values",
    "in-cluster",
];

const SCRIPT: &str = include_str!("../python/suite.py");

pub async fn run(env: &Arc<Env>) {
    let selected: Vec<&str> = CASES
        .iter()
        .copied()
        .filter(|c| env.selection.wants(&format!("python/{c}")))
        .collect();
    let fail_all = |why: &str| {
        for c in &selected {
            env.report.fail(&format!("python/{c}"), why);
        }
    };
    let python = match venv(env).await {
        Ok(p) => p,
        Err(e) => return fail_all(&format!("set-up: {e:#}")),
    };
    let ns = format!("conf-py-{}", env.run);
    if let Err(e) = support::create_namespace(&env.client, &ns).await {
        return fail_all(&format!("suite set-up: {e:#}"));
    }
    let result = drive(env, &python, &ns, &selected).await;
    support::remove_namespace(&env.client, &ns, &[]).await;
    if let Err(e) = result {
        fail_all(&format!("{e:#}"));
    }
}

/// Runs suite.py and reports its lines as they come; any selected case it did not report
/// fails with the end of its stderr.
async fn drive(env: &Env, python: &Path, ns: &str, selected: &[&str]) -> anyhow::Result<()> {
    let dir = env.tmp.join("python");
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("suite.py");
    std::fs::write(&script, SCRIPT)?;
    let mut child = Command::new(python)
        .arg(&script)
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .arg("--namespace")
        .arg(ns)
        .arg("--run")
        .arg(&env.run)
        .arg("--tmp")
        .arg(&dir)
        .args(selected)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", python.display()))?;
    let mut stderr = child.stderr.take().expect("piped");
    let stderr_task = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut done: Vec<String> = Vec::new();
    let mut other: Vec<String> = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await? {
            let parts: Vec<&str> = line.splitn(4, '\t').collect();
            match parts.as_slice() {
                ["CASE", name, "ok", ms] => {
                    let ms = ms.parse().unwrap_or(0);
                    env.report
                        .pass(&format!("python/{name}"), Duration::from_millis(ms));
                    done.push(name.to_string());
                }
                ["CASE", name, "FAIL", reason] => {
                    env.report.fail(&format!("python/{name}"), reason);
                    done.push(name.to_string());
                }
                _ => other.push(line),
            }
        }
        anyhow::Ok(())
    };
    let limit = Duration::from_secs(60 * selected.len().max(1) as u64);
    let timed_out = tokio::time::timeout(limit, read).await.is_err();
    if timed_out {
        let _ = child.kill().await;
    }
    let status = child.wait().await?;
    let stderr = stderr_task.await.unwrap_or_default();
    let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    for c in selected {
        if !done.iter().any(|d| d == c) {
            let why = if timed_out {
                format!("suite.py did not finish within {} s", limit.as_secs())
            } else {
                format!(
                    "suite.py exited ({status}) without reporting it: {}{}",
                    tail.join(" | "),
                    if other.is_empty() {
                        String::new()
                    } else {
                        format!(" (stdout: {})", other.join(" | "))
                    }
                )
            };
            env.report.fail(&format!("python/{c}"), &why);
        }
    }
    Ok(())
}

/// Returns the venv's interpreter, creating the venv and installing the client first if
/// needed. A venv is built beside its final place and renamed into it, so an interrupted
/// install is never mistaken for a finished one.
async fn venv(env: &Env) -> anyhow::Result<PathBuf> {
    let dir = match &env.python_venv {
        Some(d) => d.clone(),
        None => cache_dir().join(format!(
            "python-kubernetes-{CLIENT_VERSION}-kr8s-{KR8S_VERSION}"
        )),
    };
    let python = dir.join("bin").join("python");
    if has_client(&python).await {
        return Ok(python);
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let building = dir.with_extension(format!("building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    run_quiet(
        Command::new(&env.python)
            .arg("-m")
            .arg("venv")
            .arg(&building),
        "creating a venv",
    )
    .await?;
    run_quiet(
        Command::new(building.join("bin").join("python"))
            .args(["-m", "pip", "install", "--disable-pip-version-check", "-q"])
            .arg(format!("kubernetes=={CLIENT_VERSION}"))
            .arg(format!("kr8s=={KR8S_VERSION}")),
        &format!("pip install kubernetes=={CLIENT_VERSION} kr8s=={KR8S_VERSION}"),
    )
    .await?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&building, &dir)
        .with_context(|| format!("moving the venv to {}", dir.display()))?;
    if !has_client(&python).await {
        bail!(
            "the venv at {} cannot import kubernetes and kr8s",
            dir.display()
        );
    }
    Ok(python)
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("minik8s-conformance")
}

async fn has_client(python: &Path) -> bool {
    if !python.exists() {
        return false;
    }
    Command::new(python)
        .args([
            "-c",
            &format!(
                "import sys, kubernetes, kr8s; sys.exit(kubernetes.__version__ != {CLIENT_VERSION:?} or kr8s.__version__ != {KR8S_VERSION:?})"
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

async fn run_quiet(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        cmd.stdin(Stdio::null()).kill_on_drop(true).output(),
    )
    .await
    .with_context(|| format!("{what}: no answer within 300 s"))?
    .with_context(|| format!("{what}: could not start"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            support::one_line(&String::from_utf8_lossy(&out.stderr), 300)
        );
    }
    Ok(())
}
