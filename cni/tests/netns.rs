//! The plugin in a real kernel, as containerd drives it, but with a "node" network namespace
//! made for the test standing in for the host (the host's own namespace is never touched):
//! ADD of the loopback and bridge networks, a TCP connection from the node to a server in
//! the pod, hairpin on the bridge port, hostPorts handed to the stock portmap plugin, and DEL
//! (twice: the spec wants it idempotent) leaving neither interface, address nor rule behind.
//! Needs root.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use minik8s_cni::{Invocation, Verb, run};
use serde_json::{Value, json};

struct Netns(String);

impl Netns {
    fn create(name: &str) -> Netns {
        let _ = Command::new("ip")
            .args(["netns", "del", name])
            .stderr(std::process::Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", name])
            .status()
            .unwrap();
        assert!(ok.success(), "ip netns add {name}");
        Netns(name.to_string())
    }

    fn path(&self) -> String {
        format!("/var/run/netns/{}", self.0)
    }

    /// `cmd` run inside this namespace; its stdout.
    fn sh(&self, cmd: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(cmd)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `f` on a thread of its own that has entered this namespace.
    fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = self.path();
        std::thread::scope(|s| {
            s.spawn(move || {
                let ns = std::fs::File::open(&path).unwrap();
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                f()
            })
            .join()
            .unwrap()
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn invocation(verb: Verb, id: &str, netns: &str, ifname: &str) -> Invocation {
    Invocation {
        verb,
        container_id: id.into(),
        netns: netns.into(),
        ifname: ifname.into(),
        path: vec![PathBuf::from("/usr/lib/cni")],
    }
}

fn bridge_conf(data_dir: &Path, port_mappings: Value) -> Vec<u8> {
    let list = minik8s_cni::conflist("cnitest", "m8scnit0", "10.250.77.0/24", data_dir);
    let mut c = list["plugins"][0].clone();
    c["cniVersion"] = list["cniVersion"].clone();
    c["name"] = list["name"].clone();
    c["runtimeConfig"] = json!({ "portMappings": port_mappings });
    c.to_string().into_bytes()
}

#[test]
fn pods_get_an_address_on_the_bridge_and_lose_it_on_delete() {
    let node = Netns::create("m8s-cnit-node");
    let pod = Netns::create("m8s-cnit-pod");
    let store = tempfile::tempdir().unwrap();
    let mappings = json!([{"hostPort": 18080, "containerPort": 8080, "protocol": "tcp"}]);
    let conf = bridge_conf(store.path(), mappings);

    // containerd's loopback network (0.3.1) and the pod's network.
    let lo = r#"{"cniVersion":"0.3.1","name":"cni-loopback","type":"loopback"}"#;
    let lo_result: Value = node.enter(|| {
        let out = run(
            &invocation(Verb::Add, "c1", &pod.path(), "lo"),
            lo.as_bytes(),
        )
        .unwrap();
        serde_json::from_str(&out).unwrap()
    });
    assert_eq!(lo_result["ips"][0]["version"], "4");
    assert!(pod.sh(&["ip", "-br", "link", "show", "lo"]).contains("UP"));

    let result: Value = node.enter(|| {
        let out = run(&invocation(Verb::Add, "c1", &pod.path(), "eth0"), &conf)
            .unwrap_or_else(|e| panic!("ADD: {e}"));
        serde_json::from_str(&out).unwrap()
    });
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(result["ips"][0]["address"], "10.250.77.2/24");
    assert_eq!(result["ips"][0]["gateway"], "10.250.77.1");
    assert_eq!(result["ips"][0]["interface"], 2);
    assert_eq!(result["interfaces"][2]["name"], "eth0");
    assert_eq!(result["interfaces"][2]["sandbox"], pod.path());
    let veth = result["interfaces"][1]["name"]
        .as_str()
        .unwrap()
        .to_string();

    // The pod side: address, up, default route through the bridge.
    let addr = pod.sh(&["ip", "-br", "addr", "show", "eth0"]);
    assert!(
        addr.contains("10.250.77.2/24") && addr.contains("UP"),
        "{addr}"
    );
    let routes = pod.sh(&["ip", "route"]);
    assert!(
        routes.contains("default via 10.250.77.1 dev eth0"),
        "{routes}"
    );
    // The node side: the bridge with the gateway address, the veth on it with hairpin on.
    let bridge = node.sh(&["ip", "-br", "addr", "show", "m8scnit0"]);
    assert!(bridge.contains("10.250.77.1/24"), "{bridge}");
    let port = node.sh(&["ip", "-d", "link", "show", &veth]);
    assert!(port.contains("master m8scnit0"), "{port}");
    assert!(port.contains("hairpin on"), "{port}");
    // host-local's layout.
    let owner = std::fs::read_to_string(store.path().join("cnitest/10.250.77.2")).unwrap();
    assert_eq!(owner, "c1\r\neth0");
    // portmap ran for the hostPort.
    let nat = node.sh(&["iptables", "-t", "nat", "-S"]);
    assert!(nat.contains("--dport 18080"), "no hostPort rule in\n{nat}");

    // Traffic: the node connects to a server in the pod.
    let listener = pod.enter(|| {
        TcpListener::bind(SocketAddr::from((Ipv4Addr::new(10, 250, 77, 2), 8080))).unwrap()
    });
    let server = std::thread::spawn(move || {
        let (mut conn, from) = listener.accept().unwrap();
        conn.write_all(b"hello from the pod").unwrap();
        from
    });
    let got = node.enter(|| {
        let mut c = TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::new(10, 250, 77, 2), 8080)),
            Duration::from_secs(5),
        )
        .unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    });
    assert_eq!(got, "hello from the pod");
    assert_eq!(server.join().unwrap().ip(), Ipv4Addr::new(10, 250, 77, 1));

    // A second pod gets the next address.
    let pod2 = Netns::create("m8s-cnit-pod2");
    let r2: Value = node.enter(|| {
        let conf = bridge_conf(store.path(), json!([]));
        serde_json::from_str(
            &run(&invocation(Verb::Add, "c2", &pod2.path(), "eth0"), &conf).unwrap(),
        )
        .unwrap()
    });
    assert_eq!(r2["ips"][0]["address"], "10.250.77.3/24");

    // CHECK passes while set up.
    node.enter(|| run(&invocation(Verb::Check, "c1", &pod.path(), "eth0"), &conf))
        .unwrap();

    // DEL, twice.
    for _ in 0..2 {
        node.enter(|| run(&invocation(Verb::Del, "c1", &pod.path(), "eth0"), &conf))
            .unwrap_or_else(|e| panic!("DEL: {e}"));
    }
    assert!(!pod.sh(&["ip", "-br", "link"]).contains("eth0"));
    assert!(!node.sh(&["ip", "-br", "link"]).contains(&veth));
    assert!(!store.path().join("cnitest/10.250.77.2").exists());
    let nat = node.sh(&["iptables", "-t", "nat", "-S"]);
    assert!(
        !nat.contains("--dport 18080"),
        "hostPort rule left in\n{nat}"
    );
    // CHECK now fails: nothing is allocated.
    let e = node
        .enter(|| run(&invocation(Verb::Check, "c1", &pod.path(), "eth0"), &conf))
        .unwrap_err();
    assert!(e.to_string().contains("no address"), "{e}");
    // DEL of a sandbox whose namespace is already gone.
    drop(pod2);
    node.enter(|| {
        let conf = bridge_conf(store.path(), json!([]));
        run(
            &invocation(Verb::Del, "c2", "/var/run/netns/m8s-cnit-pod2", "eth0"),
            &conf,
        )
    })
    .unwrap();
    assert!(!store.path().join("cnitest/10.250.77.3").exists());
}
