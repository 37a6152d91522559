use super::*;
use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};
use kube::api::ObjectMeta;
use std::process::Command;

const MAC_B: &str = "5a:00:00:00:00:0b";
const MAC_C: &str = "5a:00:00:00:00:0c";

fn node(name: &str, cidr: Option<&str>, ip: Option<&str>, mac: Option<&str>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: mac.map(|m| {
                annotations(m, ip.unwrap_or("0.0.0.0").parse().unwrap())
                    .into_iter()
                    .collect()
            }),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: cidr.map(Into::into),
            pod_cidrs: cidr.map(|c| vec![c.into()]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: ip.map(|ip| {
                vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]
            }),
            ..Default::default()
        }),
    }
}

fn vx(via: &str) -> Hop {
    Hop {
        via: via.parse().unwrap(),
        vxlan: true,
    }
}

#[test]
fn annotations_are_flannels() {
    let a = annotations("5A:00:00:00:00:0B", "172.30.1.2".parse().unwrap());
    assert_eq!(a[BACKEND_TYPE], "vxlan");
    assert_eq!(
        a[BACKEND_DATA],
        r#"{"VNI":1,"VtepMAC":"5A:00:00:00:00:0B"}"#
    );
    assert_eq!(a[PUBLIC_IP], "172.30.1.2");
    assert_eq!(a[KUBE_SUBNET_MANAGER], "true");
    // Flannel's own backend-data reads back, whatever the MAC's case.
    let mut n = node("b", Some("10.244.1.0/24"), Some("172.30.1.2"), None);
    n.metadata.annotations = Some(
        [
            (BACKEND_TYPE.to_string(), "vxlan".to_string()),
            (
                BACKEND_DATA.to_string(),
                r#"{"VNI":1,"VtepMAC":"5A:00:00:00:00:0B"}"#.to_string(),
            ),
        ]
        .into(),
    );
    assert_eq!(vtep_mac(&n).as_deref(), Some(MAC_B));
}

#[test]
fn wish_list_from_nodes() {
    let nodes = [
        node("a", Some("10.244.0.0/24"), Some("172.30.0.1"), Some(MAC_C)),
        node("b", Some("10.244.1.0/24"), Some("172.30.1.2"), Some(MAC_B)),
        node("c", Some("10.244.2.0/24"), Some("172.30.2.2"), Some(MAC_C)),
        // No range yet, no lease yet, no address: left out.
        node("d", None, Some("172.30.3.2"), Some("5a:00:00:00:00:0d")),
        node("e", Some("10.244.4.0/24"), Some("172.30.4.2"), None),
        node("f", Some("10.244.5.0/24"), None, None),
    ];
    let wish = desired(&nodes, "a", |_| false);
    let want_routes: BTreeMap<String, Hop> = [
        ("10.244.1.0/24".to_string(), vx("10.244.1.0")),
        ("10.244.2.0/24".to_string(), vx("10.244.2.0")),
    ]
    .into();
    assert_eq!(wish.routes, want_routes);
    assert_eq!(
        wish.neighbours,
        [
            ("10.244.1.0".parse().unwrap(), MAC_B.to_string()),
            ("10.244.2.0".parse().unwrap(), MAC_C.to_string()),
        ]
        .into()
    );
    assert_eq!(
        wish.fdb,
        [
            (MAC_B.to_string(), "172.30.1.2".parse().unwrap()),
            (MAC_C.to_string(), "172.30.2.2".parse().unwrap()),
        ]
        .into()
    );
}

#[test]
fn public_ip_annotation_wins_and_foreign_backends_are_skipped() {
    let mut b = node("b", Some("10.244.1.0/24"), Some("172.30.1.2"), Some(MAC_B));
    b.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(PUBLIC_IP.into(), "192.0.2.7".into());
    let mut c = node("c", Some("10.244.2.0/24"), Some("172.30.2.2"), Some(MAC_C));
    c.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(BACKEND_TYPE.into(), "host-gw".into());
    let wish = desired(&[b, c], "a", |_| false);
    assert_eq!(wish.fdb[MAC_B].to_string(), "192.0.2.7");
    assert_eq!(wish.routes.len(), 1);
}

#[test]
fn auto_routes_directly_connected_nodes_directly() {
    let nodes = [
        node("a", Some("10.244.0.0/24"), Some("172.30.0.1"), Some(MAC_C)),
        node("b", Some("10.244.1.0/24"), Some("172.30.0.2"), Some(MAC_B)),
        node("c", Some("10.244.2.0/24"), Some("172.30.2.2"), Some(MAC_C)),
        // Not annotated (a host-gw node) but on the same link: still reached.
        node("d", Some("10.244.3.0/24"), Some("172.30.0.4"), None),
    ];
    let local = |ip: Ipv4Addr| ip.octets()[2] == 0;
    let wish = desired(&nodes, "a", local);
    assert_eq!(
        wish.routes["10.244.1.0/24"],
        Hop {
            via: "172.30.0.2".parse().unwrap(),
            vxlan: false
        }
    );
    assert_eq!(wish.routes["10.244.2.0/24"], vx("10.244.2.0"));
    assert!(!wish.routes["10.244.3.0/24"].vxlan);
    assert_eq!(wish.neighbours.len(), 1);
    assert_eq!(wish.fdb.len(), 1);
}

#[test]
fn own_range_claimed_by_another_node_is_not_routed() {
    let nodes = [
        node("a", Some("10.244.0.0/24"), Some("172.30.0.1"), Some(MAC_C)),
        node("b", Some("10.244.0.0/24"), Some("172.30.1.2"), Some(MAC_B)),
    ];
    assert_eq!(desired(&nodes, "a", |_| false), Wish::default());
}

#[test]
fn parses_kernel_listings() {
    let routes = parse_routes(
        "10.244.1.0/24 via 10.244.1.0 dev flannel.1 proto 211 onlink \n\
         10.244.2.0/24 via 172.30.0.3 dev eth0 proto 211 \n\
         10.244.3.0/24 dev cni0 proto 211 scope link \n",
    );
    assert_eq!(routes.len(), 2);
    assert_eq!(routes["10.244.1.0/24"], vx("10.244.1.0"));
    assert!(!routes["10.244.2.0/24"].vxlan);
    let neigh =
        parse_neighbours("10.244.1.0 lladdr 5A:00:00:00:00:0B PERMANENT\n10.244.2.0 FAILED\n");
    assert_eq!(neigh.len(), 1);
    assert_eq!(neigh[&"10.244.1.0".parse::<Ipv4Addr>().unwrap()], MAC_B);
    let fdb = parse_fdb(
        "5a:00:00:00:00:0b dst 172.30.1.2 self permanent\n\
         00:00:00:00:00:00 dst 172.30.9.9 self\n\
         33:33:00:00:00:01 self permanent\n",
    );
    assert_eq!(fdb.len(), 1);
    assert_eq!(fdb[MAC_B].to_string(), "172.30.1.2");
}

/// Network namespaces of the test's own: two "nodes" on different subnets joined by a
/// router namespace, deleted on drop.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ok(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

/// Two nodes on separate subnets (so host-gw could not work), their vxlan devices made and
/// their entries synced from Nodes as the agent would: a pod-range address on one answers
/// pings from the other's, through the overlay; removing a Node removes its entries.
#[test]
fn overlay_between_two_network_namespaces() {
    if !is_root() {
        eprintln!("skipped: needs root to create network namespaces");
        return;
    }
    let id = std::process::id();
    let (r, a, b) = (
        format!("mk8s-vx{id}-r"),
        format!("mk8s-vx{id}-a"),
        format!("mk8s-vx{id}-b"),
    );
    let mut made = Namespaces(Vec::new());
    for ns in [&r, &a, &b] {
        assert!(ok(&["netns", "add", ns]), "ip netns add {ns}");
        made.0.push(ns.clone());
    }
    // a: 172.31.251.2/24 — r — b: 172.31.252.2/24; pod addresses on a bridge
    // of each (this kernel has no dummy links).
    for (ns, peer, net, pod) in [
        (&a, "ra", "172.31.251", "10.250.1.1/24"),
        (&b, "rb", "172.31.252", "10.250.2.1/24"),
    ] {
        for args in [
            &[
                "-n", &r, "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ][..],
            &["-n", &r, "addr", "add", &format!("{net}.1/24"), "dev", peer],
            &["-n", &r, "link", "set", peer, "up"],
            &[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{net}.2/24"),
                "dev",
                "eth0",
            ],
            &["-n", ns, "link", "set", "eth0", "up"],
            &["-n", ns, "link", "set", "lo", "up"],
            &[
                "-n",
                ns,
                "route",
                "add",
                "172.31.0.0/16",
                "via",
                &format!("{net}.1"),
            ],
            &["-n", ns, "link", "add", "pods", "type", "bridge"],
            &["-n", ns, "addr", "add", pod, "dev", "pods"],
            &["-n", ns, "link", "set", "pods", "up"],
        ] {
            assert!(ok(args), "ip {args:?}");
        }
    }
    assert!(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &r,
                "sysctl",
                "-qw",
                "net.ipv4.ip_forward=1"
            ])
            .status()
            .unwrap()
            .success()
    );
    let kernel = |ns: &str| Kernel {
        table: RouteTable {
            protocol: super::super::DEFAULT_PROTOCOL,
            netns: Some(ns.to_string()),
        },
    };
    let (ka, kb) = (kernel(&a), kernel(&b));
    let da = ka
        .ensure_device("172.31.251.2".parse().unwrap(), "10.250.1.0/24")
        .unwrap();
    let db = kb
        .ensure_device("172.31.252.2".parse().unwrap(), "10.250.2.0/24")
        .unwrap();
    assert_eq!(da.mtu, 1450);
    // Made again unchanged: the same device, the same MAC.
    assert_eq!(
        ka.ensure_device("172.31.251.2".parse().unwrap(), "10.250.1.0/24")
            .unwrap(),
        da
    );
    assert!(!ka.directly_connected("172.31.252.2".parse().unwrap()));
    assert!(ka.directly_connected("172.31.251.1".parse().unwrap()));
    let nodes = [
        node(
            "a",
            Some("10.250.1.0/24"),
            Some("172.31.251.2"),
            Some(&da.mac),
        ),
        node(
            "b",
            Some("10.250.2.0/24"),
            Some("172.31.252.2"),
            Some(&db.mac),
        ),
    ];
    for (k, me) in [(&ka, "a"), (&kb, "b")] {
        let wish = desired(&nodes, me, |_| false);
        let (changed, errors) = k.sync(&wish).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(changed, 3);
        assert_eq!(k.owned().unwrap(), wish);
        assert_eq!(k.sync(&wish).unwrap().0, 0);
    }
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &a,
            "busybox",
            "ping",
            "-c",
            "1",
            "-W",
            "3",
            "-I",
            "10.250.1.1",
            "10.250.2.1",
        ])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "ping over the overlay: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // b's Node goes: a's route, neighbour and FDB entry go with it.
    let wish = desired(&nodes[..1], "a", |_| false);
    assert_eq!(ka.sync(&wish).unwrap().0, 3);
    assert_eq!(ka.owned().unwrap(), Wish::default());
}
