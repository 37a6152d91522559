//! What the kernel tests of this crate share: network namespaces made (and removed) by the
//! test, and tiny python TCP servers and clients inside them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub struct Netns {
    pub name: String,
    pub children: Vec<Child>,
}

impl Netns {
    pub fn create(name: &str) -> anyhow::Result<Netns> {
        let _ = Command::new("ip").args(["netns", "del", name]).status();
        run(Command::new("ip").args(["netns", "add", name]))?;
        Ok(Netns {
            name: name.to_string(),
            children: Vec::new(),
        })
    }

    pub fn exec(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(args);
        c
    }

    pub fn prefix(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[1].encode())
    c.close()
"#;

pub fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A node namespace with a bridge `br0` at 10.244.0.1/24, forwarding on (br_netfilter passes
/// the bridged frames through the IPv4 hooks, as on a node).
pub fn node_with_bridge(name: &str) -> anyhow::Result<Netns> {
    let node = Netns::create(name)?;
    for args in [
        &["ip", "link", "set", "lo", "up"][..],
        &["ip", "link", "add", "br0", "type", "bridge"],
        &["ip", "addr", "add", "10.244.0.1/24", "dev", "br0"],
        &["ip", "link", "set", "br0", "up"],
        &["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
    ] {
        run(&mut node.exec(args))?;
    }
    Ok(node)
}

/// A pod namespace `name` behind `node`'s bridge (veth `host_if`, `ip`/24, default route to
/// the bridge) whose server answers its own address on `ip`:8080.
pub fn pod_on_bridge(node: &Netns, name: &str, host_if: &str, ip: &str) -> anyhow::Result<Netns> {
    let mut pod = Netns::create(name)?;
    for args in [
        &[
            "ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns",
            &pod.name,
        ][..],
        &["ip", "link", "set", host_if, "master", "br0", "up"],
        // As the CNI bridge plugin's hairpinMode: with br_netfilter the DNAT happens as the
        // frame crosses the bridge, which must then send it back out of the port it came in.
        &[
            "ip",
            "link",
            "set",
            host_if,
            "type",
            "bridge_slave",
            "hairpin",
            "on",
        ],
    ] {
        run(&mut node.exec(args))?;
    }
    let address = format!("{ip}/24");
    for args in [
        &["ip", "link", "set", "lo", "up"][..],
        &["ip", "addr", "add", &address, "dev", "eth0"],
        &["ip", "link", "set", "eth0", "up"],
        &["ip", "route", "add", "default", "via", "10.244.0.1"],
    ] {
        run(&mut pod.exec(args))?;
    }
    let mut child = pod
        .exec(&[python(), "-c", SERVER, ip, "8080"])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
    pod.children.push(child);
    anyhow::ensure!(line.trim() == "ready", "the server of {name} did not start");
    Ok(pod)
}
