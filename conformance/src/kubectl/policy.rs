//! The policy kinds as each kubectl writes and prints them: `kubectl create quota`,
//! `create priorityclass` and `create pdb` (the objects kubectl builds and the server's Table
//! columns), `kubectl certificate approve` (then the certificate the signer issues used as a
//! client certificate), `kubectl get rc`, and `kubectl drain` of a node
//! whose pods a PodDisruptionBudget protects; a quota refusing the pod past its count and a
//! LimitRange's defaults, each in a namespace of its own.
//!
//! The drained node is a Node object of the case's own with no kubelet behind it, cordoned
//! and tainted from the start so that nothing else is ever scheduled onto it: the case binds
//! its pods there itself and reports them running and ready as a kubelet would.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Pod, ReplicationController};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Ctx, header, row};
use crate::support::{contains, eventually};

pub async fn create_policy_objects(c: &Ctx) -> anyhow::Result<()> {
    let out = c
        .ok(&["create", "quota", "q", "--hard=count/widgets.example.com=5"])
        .await?;
    contains(&out, "resourcequota/q created")?;
    // The quota controller's count, in the columns of the newest upstream printer. A quota
    // on a kind nothing creates, so the suite's other pods and objects are never held by it.
    eventually(Duration::from_secs(30), "the quota's count", || async {
        let out = c.ok(&["get", "quota", "q"]).await?;
        ensure!(
            header(&out) == ["NAME", "REQUEST", "LIMIT", "AGE"],
            "quota header: {out}"
        );
        let r = row(&out, "q")?;
        ensure!(
            r[1..r.len() - 1] == ["count/widgets.example.com:", "0/5"],
            "quota row: {r:?}"
        );
        Ok(())
    })
    .await?;
    c.ok(&["delete", "quota", "q"]).await?;

    let pc = format!("pc-{}-{}", c.bin.tag, c.env.run);
    let classes: Api<PriorityClass> = Api::all(c.client.clone());
    let _ = classes.delete(&pc, &DeleteParams::default()).await;
    let out = c
        .ok(&[
            "create",
            "priorityclass",
            &pc,
            "--value=1000",
            "--description=conformance",
        ])
        .await?;
    contains(
        &out,
        &format!("priorityclass.scheduling.k8s.io/{pc} created"),
    )?;
    let out = c.ok(&["get", "priorityclass", &pc]).await?;
    ensure!(
        header(&out) == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
        "priorityclass header: {out}"
    );
    let r = row(&out, &pc)?;
    ensure!(
        r[1] == "1000" && r[2] == "false" && r.last() == Some(&"PreemptLowerPriority"),
        "priorityclass row: {r:?}"
    );
    // A pod of that class gets its value.
    c.ok(&[
        "run",
        "prioritized",
        "--image=busybox:1.36",
        "--restart=Never",
        &format!("--overrides={}", json!({"spec": {"priorityClassName": pc}})),
        "--command",
        "--",
        "true",
    ])
    .await?;
    let pod = c.api::<Pod>().get("prioritized").await?;
    let spec = pod.spec.unwrap_or_default();
    ensure!(
        spec.priority == Some(1000),
        "pod priority {:?}",
        spec.priority
    );
    classes.delete(&pc, &DeleteParams::default()).await?;

    let out = c
        .ok(&[
            "create",
            "pdb",
            "budget",
            "--selector=app=budget",
            "--min-available=1",
        ])
        .await?;
    contains(&out, "poddisruptionbudget.policy/budget created")?;
    let out = c.ok(&["get", "pdb", "budget"]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "MIN",
                "AVAILABLE",
                "MAX",
                "UNAVAILABLE",
                "ALLOWED",
                "DISRUPTIONS",
                "AGE"
            ],
        "pdb header: {out}"
    );
    let r = row(&out, "budget")?;
    ensure!(r[1] == "1" && r[2] == "N/A", "pdb row: {r:?}");
    // The disruption controller sees no pod: nothing may be disrupted.
    eventually(Duration::from_secs(30), "the budget's status", || async {
        let b = c.api::<PodDisruptionBudget>().get("budget").await?;
        let s = b.status.unwrap_or_default();
        ensure!(
            s.observed_generation == b.metadata.generation && s.disruptions_allowed == 0,
            "status: {s:?}"
        );
        Ok(())
    })
    .await?;
    c.ok(&["delete", "pdb", "budget"]).await?;
    c.ok(&["delete", "pod", "prioritized", "--wait=false"])
        .await?;
    Ok(())
}

pub async fn certificate_approve(c: &Ctx) -> anyhow::Result<()> {
    let name = format!("csr-{}-{}", c.bin.tag, c.env.run);
    let user = format!("alice-{}", c.bin.tag);
    let csrs: Api<CertificateSigningRequest> = Api::all(c.client.clone());
    let _ = csrs.delete(&name, &DeleteParams::default()).await;
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user.as_str());
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "dev");
    let request = params.serialize_request(&key)?.pem()?;
    let manifest = c.write(
        "csr.yaml",
        &json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
                "metadata": {"name": name},
                "spec": {"request": k8s_openapi::ByteString(request.into_bytes()),
                         "signerName": "kubernetes.io/kube-apiserver-client",
                         "expirationSeconds": 86400,
                         "usages": ["client auth"]}})
        .to_string(),
    )?;
    c.ok(&["create", "-f", &manifest]).await?;
    let out = c.ok(&["get", "csr", &name]).await?;
    ensure!(
        header(&out)
            == [
                "NAME",
                "AGE",
                "SIGNERNAME",
                "REQUESTOR",
                "REQUESTEDDURATION",
                "CONDITION"
            ],
        "csr header: {out}"
    );
    ensure!(row(&out, &name)?.last() == Some(&"Pending"), "{out}");
    let out = c.ok(&["certificate", "approve", &name]).await?;
    contains(
        &out,
        &format!("certificatesigningrequest.certificates.k8s.io/{name} approved"),
    )?;
    // The controller-manager's signer issues the certificate.
    eventually(
        Duration::from_secs(30),
        "the certificate issued",
        || async {
            let out = c.ok(&["get", "csr", &name]).await?;
            let r = row(&out, &name)?;
            ensure!(
                r.contains(&"24h") && r.last() == Some(&"Approved,Issued"),
                "{r:?}"
            );
            Ok(())
        },
    )
    .await?;
    let csr = csrs.get(&name).await?;
    let status = csr.status.unwrap_or_default();
    let approved = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Approved" && c.reason.as_deref() == Some("KubectlApprove"));
    ensure!(approved, "no Approved condition from kubectl");
    // The certificate authenticates its subject to this API server.
    let cert = String::from_utf8(status.certificate.unwrap_or_default().0)?;
    let cert_file = c.write("alice.crt", &cert)?;
    let key_file = c.write("alice.key", &key.serialize_pem())?;
    if c.bin.minor.is_none_or(|m| m >= 28) {
        let server = c.server().await?;
        let out = c
            .ok(&[
                "--kubeconfig=/dev/null",
                &format!("--server={server}"),
                "--insecure-skip-tls-verify",
                &format!("--client-certificate={cert_file}"),
                &format!("--client-key={key_file}"),
                "auth",
                "whoami",
                "-o",
                "json",
            ])
            .await?;
        let review: serde_json::Value = serde_json::from_str(&out)?;
        let info = &review["status"]["userInfo"];
        ensure!(info["username"] == user.as_str(), "whoami: {out}");
        contains(&info["groups"].to_string(), "\"dev\"")?;
    }
    csrs.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}

pub async fn get_rc(c: &Ctx) -> anyhow::Result<()> {
    let manifest = c.write(
        "rc.yaml",
        &json!({"apiVersion": "v1", "kind": "ReplicationController",
                "metadata": {"name": "rc"},
                "spec": {"replicas": 1, "selector": {"app": "rc"},
                         "template": {"metadata": {"labels": {"app": "rc"}},
                                      "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                                               "command": ["sleep", "1000000"]}]}}}})
        .to_string(),
    )?;
    c.ok(&["apply", "-f", &manifest]).await?;
    let out = c.ok(&["get", "rc"]).await?;
    ensure!(
        header(&out) == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        "rc header: {out}"
    );
    ensure!(row(&out, "rc")?[1] == "1", "{out}");
    let out = c.ok(&["scale", "rc", "rc", "--replicas=2"]).await?;
    contains(&out, "replicationcontroller/rc scaled")?;
    let rc = c.api::<ReplicationController>().get("rc").await?;
    ensure!(
        rc.spec.and_then(|s| s.replicas) == Some(2),
        "replicas after scale"
    );
    let out = c.ok(&["get", "rc", "rc", "-o", "wide"]).await?;
    ensure!(
        header(&out).ends_with(&["CONTAINERS", "IMAGES", "SELECTOR"]),
        "{out}"
    );
    contains(&out, "app=rc")?;
    c.ok(&["delete", "rc", "rc", "--cascade=orphan"]).await?;
    Ok(())
}

pub async fn drain(c: &Ctx) -> anyhow::Result<()> {
    let node = format!("drain-{}-{}", c.bin.tag, c.env.run);
    let nodes: Api<Node> = Api::all(c.client.clone());
    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "labels": {"conformance.minik8s.io/fake": "true"}},
                "spec": {"unschedulable": true,
                         "taints": [{"key": "conformance.minik8s.io/fake", "effect": "NoSchedule"}]}
            }))?,
        )
        .await?;
    // Ready as a kubelet reports it, so the node lifecycle controller leaves its pods ready
    // for its grace period, longer than the case takes.
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "lastHeartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
    nodes
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(&ready))
        .await?;
    let result = drain_node(c, &node).await;
    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    result
}

async fn drain_node(c: &Ctx, node: &str) -> anyhow::Result<()> {
    let pods = c.api::<Pod>();
    for name in ["drained-a", "drained-b"] {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "drained"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "busybox:1.36"}]}
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
        let status = json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    c.ok(&[
        "create",
        "pdb",
        "drained",
        "--selector=app=drained",
        "--min-available=1",
    ])
    .await?;
    eventually(
        Duration::from_secs(30),
        "the budget to allow one disruption",
        || async {
            let b = c.api::<PodDisruptionBudget>().get("drained").await?;
            let s = b.status.unwrap_or_default();
            ensure!(
                s.disruptions_allowed == 1 && s.current_healthy == 2,
                "status: {s:?}"
            );
            Ok(())
        },
    )
    .await?;
    // One pod may go; the other is held by the budget until the drain gives up.
    let err = c
        .fails(&[
            "drain",
            node,
            "--force",
            "--ignore-daemonsets",
            "--timeout=6s",
        ])
        .await?;
    contains(
        &err,
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )?;
    let left: Vec<String> = pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str)
                == Some("drained")
        })
        .filter_map(|p| p.metadata.name)
        .collect();
    ensure!(
        left.len() == 1,
        "pods left after the refused drain: {left:?}"
    );
    // Without the budget the drain completes.
    c.ok(&["delete", "pdb", "drained"]).await?;
    let out = c
        .ok(&[
            "drain",
            node,
            "--force",
            "--ignore-daemonsets",
            "--timeout=30s",
        ])
        .await?;
    contains(&out, &format!("node/{node} drained"))?;
    for name in ["drained-a", "drained-b"] {
        ensure!(
            pods.get_opt(name).await?.is_none(),
            "{name} is still there after the drain"
        );
    }
    Ok(())
}

/// A namespace of the case's own, so its quota or range holds nothing else of the suite.
async fn own_namespace(c: &Ctx, what: &str) -> anyhow::Result<String> {
    let ns = c.extra_ns(what);
    c.ok(&["create", "namespace", &ns]).await?;
    // Pods wait for their namespace's default service account.
    eventually(
        Duration::from_secs(30),
        "the default service account",
        || async {
            c.ok(&["get", "serviceaccount", "default", "-n", &ns])
                .await?;
            Ok(())
        },
    )
    .await?;
    Ok(ns)
}

fn sleeper<'a>(ns: &'a str, name: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        name,
        "-n",
        ns,
        "--image=busybox:1.36",
        "--restart=Never",
        "--command",
        "--",
        "sleep",
        "3600",
    ]
}

/// `kubectl create quota` with `pods=2`: two pods run, the third is refused at admission with
/// upstream's message, and the quota's status counts them.
pub async fn quota_pods(c: &Ctx) -> anyhow::Result<()> {
    let ns = own_namespace(c, "quota").await?;
    c.ok(&["create", "quota", "two", "--hard=pods=2", "-n", &ns])
        .await?;
    // Enforced once the controller has counted it (upstream's rule too).
    eventually(Duration::from_secs(30), "the quota counted", || async {
        let out = c
            .ok(&[
                "get",
                "quota",
                "two",
                "-n",
                &ns,
                "-o",
                "jsonpath={.status.used.pods}",
            ])
            .await?;
        ensure!(out == "0", "used pods: {out:?}");
        Ok(())
    })
    .await?;
    c.ok(&sleeper(&ns, "one")).await?;
    c.ok(&sleeper(&ns, "two")).await?;
    let err = c.fails(&sleeper(&ns, "three")).await?;
    contains(
        &err,
        "pods \"three\" is forbidden: exceeded quota: two, requested: pods=1, used: pods=2, limited: pods=2",
    )?;
    let out = c.ok(&["get", "quota", "two", "-n", &ns]).await?;
    ensure!(row(&out, "two")?[1..3] == ["pods:", "2/2"], "{out}");
    c.ok(&["delete", "namespace", &ns, "--wait=false"]).await?;
    Ok(())
}

/// A LimitRange's defaults land on a pod that states no resources, with the annotation that
/// says so, and a container past its max is refused.
pub async fn limitrange_defaults(c: &Ctx) -> anyhow::Result<()> {
    let ns = own_namespace(c, "limits").await?;
    let manifest = c.write(
        "limitrange.yaml",
        &json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"},
                "spec": {"limits": [{"type": "Container",
                    "default": {"memory": "64Mi"}, "defaultRequest": {"memory": "32Mi"},
                    "max": {"memory": "128Mi"}}]}})
        .to_string(),
    )?;
    c.ok(&["apply", "-f", &manifest, "-n", &ns]).await?;
    c.ok(&sleeper(&ns, "defaulted")).await?;
    let out = c
        .ok(&[
            "get",
            "pod",
            "defaulted",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.containers[0].resources.requests.memory} {.spec.containers[0].resources.limits.memory} {.metadata.annotations.kubernetes\\.io/limit-ranger}",
        ])
        .await?;
    ensure!(
        out == "32Mi 64Mi LimitRanger plugin set: memory request for container defaulted; memory limit for container defaulted",
        "{out:?}"
    );
    let mut big = sleeper(&ns, "big");
    big.insert(1, "--overrides={\"spec\":{\"containers\":[{\"name\":\"big\",\"image\":\"busybox:1.36\",\"command\":[\"sleep\",\"3600\"],\"resources\":{\"limits\":{\"memory\":\"256Mi\"}}}]}}");
    let err = c.fails(&big).await?;
    contains(
        &err,
        "maximum memory usage per Container is 128Mi, but limit is 256Mi",
    )?;
    c.ok(&["delete", "namespace", &ns, "--wait=false"]).await?;
    Ok(())
}

/// `kubectl get apiservices` and `validatingwebhookconfigurations`: the Local APIServices of
/// built-in group versions, and upstream's columns for webhook configurations.
pub async fn get_apiservices(c: &Ctx) -> anyhow::Result<()> {
    let out = c.ok(&["get", "apiservices", "v1.apps", "v1."]).await?;
    ensure!(
        header(&out) == ["NAME", "SERVICE", "AVAILABLE", "AGE"],
        "apiservices header: {out}"
    );
    let apps = row(&out, "v1.apps")?;
    ensure!(apps[1] == "Local" && apps[2] == "True", "{out}");
    let out = c.run(&["get", "validatingwebhookconfigurations"]).await?;
    ensure!(
        out.ok(),
        "get validatingwebhookconfigurations: {}",
        out.stderr
    );
    let out = c
        .ok(&[
            "api-resources",
            "--api-group=admissionregistration.k8s.io",
            "-o",
            "name",
        ])
        .await?;
    for r in [
        "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io",
        "validatingwebhookconfigurations.admissionregistration.k8s.io",
    ] {
        contains(&out, r)?;
    }
    Ok(())
}
