//! `kubectl debug` on the real kubelet: an ephemeral container added to a running pod,
//! sharing its target container's process namespace (its `ps` sees the target's process),
//! with its own logs and status.

use std::time::Duration;

use anyhow::ensure;
use serde_json::json;

use super::{Ctx, yaml};
use crate::support::{contains, eventually};

pub async fn debug(c: &Ctx) -> anyhow::Result<()> {
    let file = c.write(
        "debuggee.yaml",
        &yaml(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "debuggee"},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": "busybox:1.36", "imagePullPolicy": "Never",
                                "command": ["sleep", "3601"]}],
            },
        })),
    )?;
    c.ok(&["apply", "-f", &file]).await?;
    c.ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/debuggee",
        "--timeout=60s",
    ])
    .await?;
    c.ok(&[
        "debug",
        "debuggee",
        "--image=busybox:1.36",
        "--image-pull-policy=Never",
        "--target=app",
        "-c",
        "debugger",
        "--",
        "sh",
        "-c",
        "echo from-debugger; ps; exec sleep 600",
    ])
    .await?;
    eventually(Duration::from_secs(60), "the debugger's logs", || async {
        let out = c.ok(&["logs", "debuggee", "-c", "debugger"]).await?;
        contains(&out, "from-debugger")?;
        // The target's process, seen from the debugger's shared PID namespace.
        contains(&out, "sleep 3601")?;
        Ok(())
    })
    .await?;
    let running = c
        .ok(&[
            "get",
            "pod",
            "debuggee",
            "-o",
            "jsonpath={.status.ephemeralContainerStatuses[0].name} {.status.ephemeralContainerStatuses[0].state.running.startedAt}",
        ])
        .await?;
    let fields: Vec<&str> = running.split_whitespace().collect();
    ensure!(
        fields.len() == 2 && fields[0] == "debugger",
        "ephemeral container status: {running:?}"
    );
    c.ok(&["delete", "pod", "debuggee", "--wait=false"]).await?;
    Ok(())
}
