//! Knative Serving's API as its users drive it with kubectl: a Service from a manifest, `kubectl
//! wait ksvc/NAME --for=condition=Ready`, `kubectl get ksvc` / `revisions` with Knative's
//! columns, its host on the node's port 80, and a tagged second revision taking 20 % of the
//! traffic. The Service runs busybox's web server on `$PORT`, on the cluster's real kubelet.

use anyhow::ensure;

use super::Ctx;

const SERVICE: &str = r#"apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: kn-hello
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: "1"
    spec:
      containers:
        - image: busybox:1.36
          command: ["sh", "-c", "echo hello > /tmp/index.html && exec httpd -f -p $PORT -h /tmp"]
"#;

pub async fn knative_service(c: &Ctx) -> anyhow::Result<()> {
    let _ = c
        .run(&["delete", "ksvc", "kn-hello", "--ignore-not-found", "--wait"])
        .await;
    let file = c.write("kn-hello.yaml", SERVICE)?;
    let out = c.ok(&["apply", "-f", &file]).await?;
    ensure!(
        out == "service.serving.knative.dev/kn-hello created\n",
        "{out:?}"
    );
    let out = c
        .ok(&[
            "wait",
            "ksvc/kn-hello",
            "--for=condition=Ready",
            "--timeout=90s",
        ])
        .await?;
    ensure!(
        out == "service.serving.knative.dev/kn-hello condition met\n",
        "{out:?}"
    );
    let out = c.ok(&["get", "ksvc", "kn-hello"]).await?;
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header
            == [
                "NAME",
                "URL",
                "LATESTCREATED",
                "LATESTREADY",
                "READY",
                "REASON"
            ],
        "{out}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        row.len() >= 5
            && row[0] == "kn-hello"
            && row[1] == format!("http://kn-hello.{}.example.com", c.ns)
            && row[2] == "kn-hello-00001"
            && row[3] == "kn-hello-00001"
            && row[4] == "True",
        "{out}"
    );
    let out = c.ok(&["get", "revisions"]).await?;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header
            == [
                "NAME",
                "CONFIG",
                "NAME",
                "GENERATION",
                "READY",
                "REASON",
                "ACTUAL",
                "REPLICAS",
                "DESIRED",
                "REPLICAS"
            ],
        "{out}"
    );
    ensure!(
        out.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells[..] == ["kn-hello-00001", "kn-hello", "1", "True", "1", "1"]
        }),
        "{out}"
    );
    // The Route's host answers on the node's port 80, as any Knative ingress would.
    super::ingress_answers(&format!("kn-hello.{}.example.com", c.ns), "/", 200, "hello").await?;
    // A second revision under a tag, and 80/20 between the two: within ±10 % over 500.
    let patch = r#"{"spec": {"template": {
        "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
        "spec": {"containers": [{"image": "busybox:1.36",
        "command": ["sh", "-c", "echo v2 > /tmp/index.html && exec httpd -f -p $PORT -h /tmp"]}]}},
        "traffic": [{"revisionName": "kn-hello-00001", "percent": 80},
                    {"latestRevision": true, "percent": 20, "tag": "latest"}]}}"#;
    c.ok(&["patch", "ksvc", "kn-hello", "--type", "merge", "-p", patch])
        .await?;
    let host = format!("kn-hello.{}.example.com", c.ns);
    super::ingress_answers(&format!("latest-{host}"), "/", 200, "v2").await?;
    let (mut first, mut second) = (0, 0);
    for _ in 0..500 {
        match super::ingress_get(&host, "/").await? {
            (200, body) if body == "hello" => first += 1,
            (200, body) if body == "v2" => second += 1,
            other => anyhow::bail!("GET {host}: {other:?}"),
        }
    }
    ensure!(
        (350..=450).contains(&first) && first + second == 500,
        "80/20 split over 500 requests gave {first}/{second}"
    );
    // Revision pods carry Knative's labels, so selectors written for Knative work.
    let out = c
        .ok(&[
            "get",
            "pods",
            "-l",
            "serving.knative.dev/service=kn-hello",
            "-o",
            "jsonpath={.items[*].metadata.labels.serving\\.knative\\.dev/revision}",
        ])
        .await?;
    ensure!(out == "kn-hello-00001 kn-hello-00002", "{out:?}");
    c.ok(&["delete", "ksvc", "kn-hello", "--wait"]).await?;
    Ok(())
}

const ADDER: &str = "def handle(body):\n    print(\"called with\", body)\n    return {\"sum\": body[\"a\"] + body[\"b\"]}\n";

/// `kubectl fn`, the plugin for functions from source: deploy a handler from a file, call
/// it, list, read its logs, update it, delete it.
pub async fn kubectl_fn(c: &Ctx) -> anyhow::Result<()> {
    let _ = c.run(&["fn", "delete", "kfn-add"]).await;
    let file = c.write("handler.py", ADDER)?;
    let out = c
        .ok(&["fn", "deploy", "kfn-add", "--from-file", &file])
        .await?;
    ensure!(
        out == "function.functions.minik8s.io/kfn-add created\n",
        "{out:?}"
    );
    let out = c
        .ok(&["fn", "invoke", "kfn-add", "--data", r#"{"a": 2, "b": 3}"#])
        .await?;
    ensure!(out.trim() == r#"{"sum": 5}"#, "{out:?}");
    let out = c.ok(&["fn", "list"]).await?;
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header == ["NAME", "URL", "REVISION", "READY", "AGE"],
        "{out}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        row.len() == 5
            && row[..4]
                == [
                    "kfn-add",
                    &format!("http://kfn-add.{}.example.com", c.ns),
                    "kfn-add-00001",
                    "True"
                ],
        "{out}"
    );
    let out = c.ok(&["get", "fn", "kfn-add"]).await?;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header == ["NAME", "URL", "REVISION", "READY", "REASON"],
        "{out}"
    );
    let out = c.ok(&["fn", "logs", "kfn-add"]).await?;
    super::contains(&out, "called with {'a': 2, 'b': 3}")?;
    // An update is a new revision; calls go to it once it is ready.
    let v2 = c.write("handler.py", &ADDER.replace("\"sum\"", "\"total\""))?;
    let out = c
        .ok(&["fn", "deploy", "kfn-add", "--from-file", &v2])
        .await?;
    ensure!(
        out == "function.functions.minik8s.io/kfn-add configured\n",
        "{out:?}"
    );
    // Every node's router learns of the new revision through its watch: a moment later.
    crate::support::eventually(
        std::time::Duration::from_secs(10),
        "kfn-add's second revision answering",
        || async {
            let out = c
                .ok(&["fn", "invoke", "kfn-add", "--data", r#"{"a": 1, "b": 1}"#])
                .await?;
            ensure!(out.trim() == r#"{"total": 2}"#, "{out:?}");
            Ok(())
        },
    )
    .await?;
    let out = c.ok(&["fn", "delete", "kfn-add"]).await?;
    ensure!(
        out == "function.functions.minik8s.io \"kfn-add\" deleted\n",
        "{out:?}"
    );
    crate::support::eventually(
        std::time::Duration::from_secs(30),
        "kfn-add answering 404",
        || async {
            let r = c.run(&["fn", "invoke", "kfn-add"]).await?;
            ensure!(
                !r.ok() && r.stderr.contains("404"),
                "{} {}",
                r.stdout,
                r.stderr
            );
            Ok(())
        },
    )
    .await
}
