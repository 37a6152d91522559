//! The rendered rules work in a real kernel: inside a network namespace made for the test, two
//! tiny TCP servers are the endpoints of a Service; connections to its cluster IP (and to its
//! NodePort on 127.0.0.1) from inside the namespace reach both. Needs root; the host's own
//! namespace is never touched. The namespace is deleted at the end, also on failure. The same
//! checks run for the iptables and the nftables mode.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

mod support;

use minik8s_proxy::iptables::apply::{self, CommandIptables, Iptables};
use minik8s_proxy::iptables::{ProxyConfig, ProxyState, SyncKind, Syncer, render, render_rules};
use minik8s_proxy::nftables::{self, Nft};
use serde_json::json;
use support::{Netns, SERVER, is_root, node_with_bridge, pod_on_bridge, python, run};

const CLIENT: &str = r#"
import socket, sys
seen = set()
for _ in range(int(sys.argv[3])):
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    seen.add(c.recv(100).decode())
    c.close()
print(" ".join(sorted(seen)))
"#;

/// Which backends answered `tries` connections to `ip:port` from inside the namespace.
fn backends_seen(ns: &Netns, ip: &str, port: u16, tries: u32) -> anyhow::Result<BTreeSet<String>> {
    let out = run(&mut ns.exec(&[
        python(),
        "-c",
        CLIENT,
        ip,
        &port.to_string(),
        &tries.to_string(),
    ]))?;
    Ok(out.split_whitespace().map(String::from).collect())
}

fn state() -> ProxyState {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "web"},
        "spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}]}
    }))
    .unwrap();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [
            {"addresses": ["10.244.0.2"], "conditions": {"ready": true}},
            {"addresses": ["10.244.0.3"], "conditions": {"ready": true}},
            {"addresses": ["10.244.0.4"], "conditions": {"ready": false}},
        ]
    }))
    .unwrap();
    ProxyState {
        config: ProxyConfig {
            hostname: "node".into(),
            cluster_cidr: Some("10.244.0.0/16".into()),
            masquerade_all: false,
        },
        services: vec![svc],
        slices: vec![slice],
    }
}

#[test]
fn cluster_ip_and_node_port_reach_both_endpoints_inside_a_netns() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create a network namespace");
        return Ok(());
    }
    let ns = namespace_with_backends(&format!("m8s-proxy-{}", std::process::id()))?;

    let ipt = CommandIptables {
        prefix: ns.prefix(),
    };
    apply::apply(&ipt, &render(&state()))?;

    // Each connection picks an endpoint at random (p = 1/2): 64 tries miss one with
    // probability 2^-63. The not-ready endpoint never answers.
    let want: BTreeSet<String> = ["10.244.0.2", "10.244.0.3"].map(String::from).into();
    assert_eq!(
        backends_seen(&ns, "10.96.0.10", 80, 64)?,
        want,
        "cluster IP"
    );
    assert_eq!(
        backends_seen(&ns, "127.0.0.1", 30080, 64)?,
        want,
        "NodePort on localhost"
    );

    // Applying twice changes nothing (the jumps are not duplicated).
    apply::apply(&ipt, &render(&state()))?;
    let nat = ipt.save("nat")?;
    assert_eq!(
        nat.matches(
            "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        )
        .count(),
        1,
        "{nat}"
    );

    // The service goes away: its chains are deleted and the address stops answering.
    let mut gone = state();
    gone.services.clear();
    apply::apply(&ipt, &render(&gone))?;
    let nat = ipt.save("nat")?;
    assert!(
        !nat.contains("KUBE-SVC-") && !nat.contains("KUBE-SEP-"),
        "{nat}"
    );
    assert!(
        backends_seen(&ns, "10.96.0.10", 80, 1).is_err(),
        "no DNAT any more"
    );

    // --cleanup removes every chain and jump.
    apply::cleanup(&ipt)?;
    let all = format!("{}{}", ipt.save("nat")?, ipt.save("filter")?);
    assert!(!all.contains("KUBE-"), "{all}");
    Ok(())
}

/// The namespace of `state()` with its three backends listening.
fn namespace_with_backends(name: &str) -> anyhow::Result<Netns> {
    let mut ns = Netns::create(name)?;
    run(&mut ns.exec(&["ip", "link", "set", "lo", "up"]))?;
    for ip in ["10.244.0.2", "10.244.0.3", "10.244.0.4"] {
        run(&mut ns.exec(&["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"]))?;
    }
    // As on a node: the service range has a route, so connect() gets to the DNAT rule.
    run(&mut ns.exec(&["ip", "route", "add", "10.96.0.0/12", "dev", "lo"]))?;
    run(&mut ns.exec(&["sysctl", "-q", "-w", "net.ipv4.conf.all.route_localnet=1"]))?;
    for ip in ["10.244.0.2", "10.244.0.3", "10.244.0.4"] {
        let mut child = ns
            .exec(&[python(), "-c", SERVER, ip, "8080"])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
        ns.children.push(child);
        anyhow::ensure!(line.trim() == "ready", "backend {ip} did not start");
    }
    Ok(ns)
}

#[test]
fn partial_syncs_change_the_kernel_rules_in_place() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create a network namespace");
        return Ok(());
    }
    let ns = namespace_with_backends(&format!("m8s-proxy-partial-{}", std::process::id()))?;
    let ipt = Arc::new(CommandIptables {
        prefix: ns.prefix(),
    });
    let mut syncer = Syncer::new(ipt.clone(), Duration::from_secs(3600));
    assert_eq!(syncer.sync(render_rules(&state()))?, SyncKind::Full);
    let two: BTreeSet<String> = ["10.244.0.2", "10.244.0.3"].map(String::from).into();
    assert_eq!(backends_seen(&ns, "10.96.0.10", 80, 64)?, two);

    // The third endpoint becomes ready: only the Service's chain and the new endpoint's chain
    // are restored, and connections reach all three (p = 1/3 each; 96 tries miss one with
    // probability below 1e-16).
    let mut three = state();
    three.slices[0].endpoints[2].conditions = Some(Default::default());
    assert_eq!(syncer.sync(render_rules(&three))?, SyncKind::Partial);
    let all: BTreeSet<String> = ["10.244.0.2", "10.244.0.3", "10.244.0.4"]
        .map(String::from)
        .into();
    assert_eq!(backends_seen(&ns, "10.96.0.10", 80, 96)?, all);
    assert_eq!(backends_seen(&ns, "127.0.0.1", 30080, 96)?, all, "NodePort");

    // The Service goes: a partial sync deletes its chains.
    let mut gone = three.clone();
    gone.services.clear();
    assert_eq!(syncer.sync(render_rules(&gone))?, SyncKind::Partial);
    let nat = ipt.save("nat")?;
    assert!(
        !nat.contains("KUBE-SVC-") && !nat.contains("KUBE-SEP-") && !nat.contains("KUBE-EXT-"),
        "{nat}"
    );
    assert!(
        backends_seen(&ns, "10.96.0.10", 80, 1).is_err(),
        "no DNAT any more"
    );
    apply::cleanup(ipt.as_ref())?;
    Ok(())
}

fn nft_state() -> ProxyState {
    let mut state = state();
    let extra: Vec<Service> = serde_json::from_value(json!([
        {"metadata": {"namespace": "default", "name": "empty"},
         "spec": {"clusterIP": "10.96.0.20", "ports": [{"name": "http", "port": 80}]}},
        {"metadata": {"namespace": "default", "name": "sticky"},
         "spec": {"clusterIP": "10.96.0.30", "sessionAffinity": "ClientIP",
                  "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
    ]))
    .unwrap();
    state.services.extend(extra);
    let mut sticky = state.slices[0].clone();
    sticky.metadata.name = Some("sticky-1".into());
    sticky
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/service-name".into(), "sticky".into());
    state.slices.push(sticky);
    state
}

#[test]
fn nftables_full_and_partial_syncs_inside_a_netns() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create a network namespace");
        return Ok(());
    }
    let ns = namespace_with_backends(&format!("m8s-nft-{}", std::process::id()))?;
    let nft = Arc::new(nftables::CommandNft {
        prefix: ns.prefix(),
    });
    let mut syncer = nftables::Syncer::new(nft.clone(), Duration::from_secs(3600));
    assert_eq!(syncer.sync_state(&nft_state())?, nftables::SyncKind::Full);
    let table = nft.list(&["list", "table", "ip", "kube-proxy"])?;
    for want in [
        "10.96.0.10 . tcp . 80 : goto service-",
        "10.96.0.30 . tcp . 80 : goto service-",
        "tcp . 30080 : goto external-",
        "10.96.0.20 . tcp . 80 : goto reject-chain",
        "numgen random mod 2 ",
        "dnat to 10.244.0.3:8080",
        // Hairpin traffic is recognised after DNAT instead of in a chain per endpoint.
        "ct status dnat ip saddr . ip daddr @hairpin jump mark-for-masquerade",
        "10.244.0.2 . 10.244.0.2",
    ] {
        assert!(table.contains(want), "{want} missing:\n{table}");
    }
    assert!(!table.contains("10.244.0.4"), "not ready: {table}");

    // p = 1/2 per endpoint: 64 tries miss one with probability 2^-63.
    let two: BTreeSet<String> = ["10.244.0.2", "10.244.0.3"].map(String::from).into();
    assert_eq!(backends_seen(&ns, "10.96.0.10", 80, 64)?, two, "cluster IP");
    assert_eq!(
        backends_seen(&ns, "127.0.0.1", 30080, 64)?,
        two,
        "NodePort on localhost"
    );
    // ClientIP affinity: every connection from this client goes where the first went.
    assert_eq!(backends_seen(&ns, "10.96.0.30", 80, 32)?.len(), 1, "sticky");
    assert!(
        backends_seen(&ns, "10.96.0.20", 80, 1).is_err(),
        "no endpoints: rejected"
    );

    // The third endpoint becomes ready: a partial sync, and all three answer.
    let mut three = nft_state();
    three.slices[0].endpoints[2].conditions = Some(Default::default());
    assert_eq!(syncer.sync_state(&three)?, nftables::SyncKind::Partial);
    let table = nft.list(&["list", "table", "ip", "kube-proxy"])?;
    assert!(table.contains("numgen random mod 3 "), "{table}");
    assert!(table.contains("dnat to 10.244.0.4:8080"), "{table}");
    assert!(table.contains("10.244.0.4 . 10.244.0.4"), "{table}");
    let all: BTreeSet<String> = ["10.244.0.2", "10.244.0.3", "10.244.0.4"]
        .map(String::from)
        .into();
    assert_eq!(backends_seen(&ns, "10.96.0.10", 80, 96)?, all);

    // The Services go: a partial sync removes their elements, chains and affinity sets.
    let mut gone = three.clone();
    gone.services.clear();
    assert_eq!(syncer.sync_state(&gone)?, nftables::SyncKind::Partial);
    let table = nft.list(&["list", "table", "ip", "kube-proxy"])?;
    for stale in [
        "chain service-",
        "chain endpoint-",
        "chain external-",
        "set affinity-",
        "10.96.0.",
    ] {
        assert!(!table.contains(stale), "{stale} left:\n{table}");
    }
    assert!(
        backends_seen(&ns, "10.96.0.10", 80, 1).is_err(),
        "no DNAT any more"
    );

    // --cleanup removes the table, and is fine when there is none.
    nftables::apply::cleanup(nft.as_ref())?;
    nftables::apply::cleanup(nft.as_ref())?;
    let tables = nft.list(&["list", "tables"])?;
    assert!(!tables.contains("kube-proxy"), "{tables}");
    Ok(())
}

/// Every golden nftables script is one transaction the kernel accepts (`nft -c`: checked, not
/// committed).
#[test]
fn golden_nft_scripts_are_accepted_by_the_kernel() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create a network namespace");
        return Ok(());
    }
    let ns = Netns::create(&format!("m8s-nft-golden-{}", std::process::id()))?;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("nft") {
            continue;
        }
        let path = path.to_string_lossy().into_owned();
        run(&mut ns.exec(&["nft", "-c", "-f", &path]))?;
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} golden scripts");
    Ok(())
}

/// A node namespace with a bridge at 10.244.0.1/24 and a pod namespace behind it (veth,
/// 10.244.0.2, default route to the bridge) whose server listens on 10.244.0.2:8080.
fn node_with_one_pod(tag: &str) -> anyhow::Result<(Netns, Netns)> {
    let node = node_with_bridge(&format!("m8s-hp-node-{tag}-{}", std::process::id()))?;
    let pod = pod_on_bridge(
        &node,
        &format!("m8s-hp-pod-{tag}-{}", std::process::id()),
        "vp0",
        "10.244.0.2",
    )?;
    Ok((node, pod))
}

/// `state()` with the pod of [`node_with_one_pod`] as the only endpoint.
fn hairpin_state() -> ProxyState {
    let mut state = state();
    state.slices[0].endpoints.truncate(1);
    state
}

/// A pod reaching itself through its own Service's cluster IP: DNAT sends the packet back to
/// where it came from, and without the hairpin masquerade the pod would drop it as coming from
/// its own address (a martian source). Both modes.
#[test]
fn a_pod_reaches_itself_through_its_service_in_both_modes() -> anyhow::Result<()> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to create network namespaces");
        return Ok(());
    }
    let me: BTreeSet<String> = ["10.244.0.2".to_string()].into();

    let (node, pod) = node_with_one_pod("ipt")?;
    let ipt = Arc::new(CommandIptables {
        prefix: node.prefix(),
    });
    let mut syncer = Syncer::new(ipt.clone(), Duration::from_secs(3600));
    assert!(
        backends_seen(&pod, "10.96.0.10", 80, 1).is_err(),
        "no Service rules yet"
    );
    assert_eq!(syncer.sync(render_rules(&hairpin_state()))?, SyncKind::Full);
    assert_eq!(backends_seen(&pod, "10.96.0.10", 80, 4)?, me, "iptables");
    drop((node, pod));

    let (node, pod) = node_with_one_pod("nft")?;
    let nft = Arc::new(nftables::CommandNft {
        prefix: node.prefix(),
    });
    let mut syncer = nftables::Syncer::new(nft.clone(), Duration::from_secs(3600));
    assert_eq!(
        syncer.sync_state(&hairpin_state())?,
        nftables::SyncKind::Full
    );
    assert_eq!(backends_seen(&pod, "10.96.0.10", 80, 4)?, me, "nftables");
    Ok(())
}
