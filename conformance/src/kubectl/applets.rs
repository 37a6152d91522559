//! The busybox applets tutorials run in a pod (`kubectl exec POD -- wget -qO- -T 5 http://web/`
//! and the like), against a Service in front of the workload pod's web server: the image
//! must behave as `busybox:1.36` does (Debian 12's busybox crashed on `wget -T`).

use std::time::Duration;

use anyhow::ensure;
use serde_json::json;

use super::{Ctx, WORKLOAD};
use crate::support::{contains, eventually};

pub async fn busybox_applets(c: &Ctx) -> anyhow::Result<()> {
    let pod = c.workload().await?;
    let ip = pod.status.and_then(|s| s.pod_ip).unwrap_or_default();
    c.ensure::<k8s_openapi::api::core::v1::Service>(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "workload"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .await?;
    let sh = |script: &str| {
        let script = script.to_string();
        async move {
            c.run(&["exec", WORKLOAD, "-c", "main", "--", "sh", "-c", &script])
                .await
        }
    };
    // The Service's rules may take a moment to be programmed.
    eventually(
        Duration::from_secs(30),
        "wget -T through the Service",
        || async {
            let r = sh("wget -qO- -T 5 http://web/").await?;
            ensure!(
                r.code == Some(0) && r.stdout == "hello-from-web\n",
                "exit {:?}: {:?} {:?}",
                r.code,
                r.stdout,
                r.stderr
            );
            Ok(())
        },
    )
    .await?;
    // A refused connection is an error, not a crash (Debian 12's busybox: exit 139).
    let r = sh("wget -qO- -T 2 http://127.0.0.1:1/").await?;
    ensure!(
        r.code == Some(1),
        "wget to a closed port: exit {:?}",
        r.code
    );
    let out = c
        .ok(&["exec", WORKLOAD, "-c", "main", "--", "nslookup", "web"])
        .await;
    // busybox's nslookup walks the search list and exits 1 when any name of it fails, as
    // with upstream's DNS; the answer for the Service's own name is what counts.
    let out = match out {
        Ok(o) => o,
        Err(_) => sh("nslookup web").await?.stdout,
    };
    contains(&out, &format!("Name:\tweb.{}.svc.cluster.local", c.ns))?;
    let out = sh("nslookup kubernetes.default.svc.cluster.local").await?;
    ensure!(out.code == Some(0), "nslookup: {:?}", out.stdout);
    contains(&out.stdout, "Name:\tkubernetes.default.svc.cluster.local")?;
    let r = sh("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 web 80").await?;
    contains(&r.stdout, "hello-from-web")?;
    let r = sh(&format!("ping -c 1 -W 5 {ip}")).await?;
    ensure!(r.code == Some(0), "ping {ip}: {:?}", r.stdout);
    contains(&r.stdout, "1 packets received")?;
    // The kubelet's /etc/hosts names the pod.
    let r = sh("hostname -i").await?;
    ensure!(
        r.stdout.trim() == ip,
        "hostname -i: {:?} {:?}",
        r.stdout,
        r.stderr
    );
    let out = c
        .ok(&[
            "exec",
            WORKLOAD,
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            "id; date -u -d @0 +%Y; echo aGVsbG8= | base64 -d; echo; busybox | head -n 1",
        ])
        .await?;
    let lines: Vec<&str> = out.lines().collect();
    ensure!(
        lines.len() == 4
            && lines[0].starts_with("uid=0(root) gid=0(root)")
            && lines[1] == "1970"
            && lines[2] == "hello"
            && lines[3].starts_with("BusyBox v1.3"),
        "id, date, base64, version: {lines:?}"
    );
    Ok(())
}
