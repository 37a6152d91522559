//! NetworkPolicies enforced by a real kernel, from the API objects to connections: three pods
//! behind one node's bridge (namespaces made by the test), policies worked out by
//! `netpol::pod_rules` and written by the enforcer, then connections between the pods that
//! must pass or die. Both backends. Needs root; the host's own namespace is never touched.

mod support;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use minik8s_proxy::iptables::CommandIptables;
use minik8s_proxy::netpol::{self, Backend, Enforcer, pod_rules};
use minik8s_proxy::nftables::CommandNft;
use serde_json::json;
use support::{Netns, is_root, node_with_bridge, pod_on_bridge, python, run};

const WEB: &str = "10.244.0.2";
const CLIENT: &str = "10.244.0.3";
const OTHER: &str = "10.244.0.4";

/// Whether a TCP connection from `from` to `ip`:8080 is answered within a second.
fn reaches(from: &Netns, ip: &str) -> bool {
    const CONNECT: &str = r#"
import socket, sys
try:
    socket.create_connection((sys.argv[1], 8080), timeout=1).recv(100)
    print("yes")
except OSError:
    print("no")
"#;
    let out = run(&mut from.exec(&[python(), "-c", CONNECT, ip])).expect("the client ran");
    out.trim() == "yes"
}

fn pod(name: &str, ip: &str, labels: serde_json::Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": name, "labels": labels},
            "spec": {"nodeName": "node", "containers": [{"name": "c", "image": "i",
                "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip},
        }))
        .unwrap(),
    )
}

fn policy(name: &str, spec: serde_json::Value) -> Arc<NetworkPolicy> {
    Arc::new(
        serde_json::from_value(
            json!({"metadata": {"namespace": "default", "name": name}, "spec": spec}),
        )
        .unwrap(),
    )
}

/// Web admits labelled clients on its named port only.
fn web_admits_clients() -> Arc<NetworkPolicy> {
    policy(
        "web",
        json!({"podSelector": {"matchLabels": {"app": "web"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                            "ports": [{"port": "http"}]}]}),
    )
}

/// Clients may reach nothing.
fn clients_reach_nothing() -> Arc<NetworkPolicy> {
    policy(
        "client",
        json!({"podSelector": {"matchLabels": {"role": "client"}}, "policyTypes": ["Egress"]}),
    )
}

fn check_backend(tag: &str, backend: impl Fn(&Netns) -> Backend) -> anyhow::Result<()> {
    let id = std::process::id();
    let node = node_with_bridge(&format!("m8s-np-node-{tag}-{id}"))?;
    let web = pod_on_bridge(&node, &format!("m8s-np-web-{tag}-{id}"), "vweb", WEB)?;
    let client = pod_on_bridge(&node, &format!("m8s-np-cli-{tag}-{id}"), "vcli", CLIENT)?;
    let other = pod_on_bridge(&node, &format!("m8s-np-oth-{tag}-{id}"), "voth", OTHER)?;
    let pods = vec![
        pod("web", WEB, json!({"app": "web"})),
        pod("client", CLIENT, json!({"role": "client"})),
        pod("other", OTHER, json!({})),
    ];
    let namespaces: Vec<Arc<Namespace>> = Vec::new();
    let mut enforcer = Enforcer::new(backend(&node));
    let mut enforce = |policies: &[Arc<NetworkPolicy>]| {
        enforcer.sync(&pod_rules("node", &pods, &namespaces, policies))
    };

    enforce(&[])?;
    assert!(
        reaches(&other, WEB),
        "{tag}: no policy, every pod reaches web"
    );

    enforce(&[web_admits_clients()])?;
    assert!(
        reaches(&client, WEB),
        "{tag}: the labelled client reaches web"
    );
    assert!(
        !reaches(&other, WEB),
        "{tag}: an unlabelled pod is kept out"
    );
    assert!(
        reaches(&web, OTHER),
        "{tag}: web's own egress is not isolated"
    );

    enforce(&[web_admits_clients(), clients_reach_nothing()])?;
    assert!(
        !reaches(&client, WEB),
        "{tag}: the client's egress is denied"
    );
    assert!(!reaches(&client, OTHER), "{tag}: to any pod");
    assert!(reaches(&other, CLIENT), "{tag}: the client still answers");

    enforce(&[])?;
    assert!(
        reaches(&other, WEB),
        "{tag}: policies removed, traffic flows again"
    );
    assert!(
        reaches(&client, OTHER),
        "{tag}: policies removed, traffic flows again"
    );
    Ok(())
}

#[test]
fn policies_isolate_and_admit_pods_with_iptables() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create network namespaces");
        return Ok(());
    }
    check_backend("ipt", |node| {
        Backend::Iptables(Arc::new(CommandIptables {
            prefix: node.prefix(),
        }))
    })
}

#[test]
fn policies_isolate_and_admit_pods_with_nftables() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create network namespaces");
        return Ok(());
    }
    check_backend("nft", |node| {
        Backend::Nftables(Arc::new(CommandNft {
            prefix: node.prefix(),
        }))
    })
}

/// `cleanup` leaves nothing of either backend behind.
#[test]
fn cleanup_removes_both_backends_rules() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create network namespaces");
        return Ok(());
    }
    let node = node_with_bridge(&format!("m8s-np-clean-{}", std::process::id()))?;
    let ipt = CommandIptables {
        prefix: node.prefix(),
    };
    let nft = CommandNft {
        prefix: node.prefix(),
    };
    let pods = vec![pod("web", WEB, json!({"app": "web"}))];
    let rules = pod_rules("node", &pods, &[], &[web_admits_clients()]);
    Enforcer::new(Backend::Iptables(Arc::new(ipt.clone()))).sync(&rules)?;
    Enforcer::new(Backend::Nftables(Arc::new(nft.clone()))).sync(&rules)?;
    assert!(run(&mut node.exec(&["iptables-save", "-t", "filter"]))?.contains("MK8S-NPI-"));
    assert!(run(&mut node.exec(&["nft", "list", "tables"]))?.contains("minik8s-netpol"));
    netpol::cleanup(&ipt, &nft)?;
    assert!(!run(&mut node.exec(&["iptables-save", "-t", "filter"]))?.contains("MK8S"));
    assert!(!run(&mut node.exec(&["nft", "list", "tables"]))?.contains("minik8s-netpol"));
    Ok(())
}
