//! Paths outside the resource API, read with `kubectl get --raw` as users (and the probes of
//! load balancers) read them: discovery and `/version` with a trailing slash, and the health
//! endpoints' per-check listing, exclusions and per-check paths; the kubelet's Prometheus
//! endpoints through the node proxy; and `kubectl get componentstatuses`.

use anyhow::ensure;
use serde_json::Value;

use super::{Ctx, header, row};
use crate::support::contains;

pub async fn raw_paths(c: &Ctx) -> anyhow::Result<()> {
    for path in ["/api", "/api/"] {
        let v: Value = serde_json::from_str(&c.ok(&["get", "--raw", path]).await?)?;
        ensure!(v["kind"] == "APIVersions", "{path}: {v}");
    }
    for path in ["/apis", "/apis/"] {
        let v: Value = serde_json::from_str(&c.ok(&["get", "--raw", path]).await?)?;
        ensure!(v["kind"] == "APIGroupList", "{path}: {v}");
    }
    for path in ["/version", "/version/"] {
        let v: Value = serde_json::from_str(&c.ok(&["get", "--raw", path]).await?)?;
        ensure!(v["major"] == "1", "{path}: {v}");
    }
    for path in ["/apis/apps/", "/apis/apps/v1/", "/api/v1/"] {
        let v: Value = serde_json::from_str(&c.ok(&["get", "--raw", path]).await?)?;
        ensure!(
            matches!(v["kind"].as_str(), Some("APIGroup" | "APIResourceList")),
            "{path}: {v}"
        );
    }
    ensure!(c.ok(&["get", "--raw", "/readyz"]).await? == "ok");
    let verbose = c.ok(&["get", "--raw", "/readyz?verbose"]).await?;
    for line in [
        "[+]ping ok",
        "[+]etcd ok",
        "[+]informer-sync ok",
        "[+]shutdown ok",
    ] {
        contains(&verbose, line)?;
    }
    ensure!(
        verbose.ends_with("readyz check passed\n"),
        "/readyz?verbose: {verbose:?}"
    );
    let excluded = c
        .ok(&["get", "--raw", "/readyz?verbose&exclude=etcd&exclude=nope"])
        .await?;
    contains(&excluded, "[+]etcd excluded: ok")?;
    contains(
        &excluded,
        "warn: some health checks cannot be excluded: no matches for \"nope\"",
    )?;
    for (path, last) in [
        ("/livez?verbose", "livez check passed\n"),
        ("/healthz?verbose", "healthz check passed\n"),
    ] {
        let out = c.ok(&["get", "--raw", path]).await?;
        contains(&out, "[+]log ok")?;
        ensure!(out.ends_with(last), "{path}: {out:?}");
    }
    ensure!(c.ok(&["get", "--raw", "/readyz/etcd"]).await? == "ok");
    ensure!(c.ok(&["get", "--raw", "/livez/ping"]).await? == "ok");
    let err = c.fails(&["get", "--raw", "/readyz/nope"]).await?;
    contains(&err, "NotFound")?;
    Ok(())
}

/// What suites and Prometheus read off every node: `/metrics` and `/metrics/cadvisor`
/// through `nodes/NAME/proxy`.
pub async fn node_metrics(c: &Ctx) -> anyhow::Result<()> {
    // A node with a kubelet (other cases add nodes without one, such as drain's).
    let name = c.ready_node().await?;
    let own = c
        .ok(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{name}/proxy/metrics"),
        ])
        .await?;
    contains(&own, &format!("kubelet_node_name{{node=\"{name}\"}} 1\n"))?;
    contains(&own, "# TYPE kubelet_running_pods gauge\n")?;
    let cadvisor = c
        .ok(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{name}/proxy/metrics/cadvisor"),
        ])
        .await?;
    contains(
        &cadvisor,
        "# TYPE container_cpu_usage_seconds_total counter\n",
    )?;
    contains(&cadvisor, "machine_cpu_cores ")?;
    Ok(())
}

/// The control plane's health as `kubectl get cs` prints it: every component healthy on a
/// running cluster.
pub async fn componentstatuses(c: &Ctx) -> anyhow::Result<()> {
    let out = c.ok(&["get", "componentstatuses"]).await?;
    ensure!(
        header(&out) == ["NAME", "STATUS", "MESSAGE", "ERROR"],
        "header: {out}"
    );
    for component in ["controller-manager", "scheduler", "etcd-0"] {
        let r = row(&out, component)?;
        ensure!(r[1..] == ["Healthy", "ok"], "{component}: {r:?}");
    }
    Ok(())
}
