//! The few rtnetlink requests a pod's network needs, written by hand: a netlink library would
//! bring an async runtime into a program that lives for a millisecond, and these five message
//! shapes are the kernel's stable ABI.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send,
    socket,
};

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFLA_PROTINFO: u16 = 12;
const IFLA_BRPORT_MODE: u16 = 4;
const NLA_F_NESTED: u16 = 0x8000;
const AF_BRIDGE: u8 = 7;
const IFF_UP: u32 = 0x1;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_BROADCAST: u16 = 4;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;

const AF_INET: u8 = 2;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RTN_UNICAST: u8 = 1;

/// A kernel refusal: the errno of the request's acknowledgement.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {errno}")]
pub struct NetlinkError {
    pub what: String,
    pub errno: nix::errno::Errno,
}

/// A link as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: i32,
    pub mac: String,
}

/// A request under construction: header, fixed part, then attributes (nested ones through
/// [`Msg::nest`]).
#[derive(Debug, Default)]
pub struct Msg {
    buf: Vec<u8>,
}

impl Msg {
    fn new(kind: u16, flags: u16) -> Msg {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set in `finish`
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
        buf.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel's
        Msg { buf }
    }

    /// `struct ifinfomsg` of family AF_UNSPEC.
    fn ifinfo(self, index: i32, flags: u32, change: u32) -> Msg {
        self.ifinfo_of(0, index, flags, change)
    }

    fn ifinfo_of(mut self, family: u8, index: i32, flags: u32, change: u32) -> Msg {
        self.buf.extend_from_slice(&[family, 0]); // family, pad
        self.buf.extend_from_slice(&0u16.to_ne_bytes()); // type
        self.buf.extend_from_slice(&index.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&change.to_ne_bytes());
        self
    }

    fn attr(mut self, kind: u16, data: &[u8]) -> Msg {
        push_attr(&mut self.buf, kind, data);
        self
    }

    fn attr_str(self, kind: u16, s: &str) -> Msg {
        let mut data = s.as_bytes().to_vec();
        data.push(0);
        self.attr(kind, &data)
    }

    fn nest(mut self, kind: u16, inner: impl FnOnce(&mut Vec<u8>)) -> Msg {
        let mut data = Vec::new();
        inner(&mut data);
        push_attr(&mut self.buf, kind, &data);
        self
    }

    pub fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

fn push_attr(buf: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(data);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

fn ifname(name: &str) -> Vec<u8> {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    v
}

/// `ip link add <host> master <bridge> up type veth peer name <peer> netns <netns>`, the peer
/// created directly inside the pod's namespace.
pub fn veth_request(host: &str, bridge: i32, peer: &str, netns: i32) -> Vec<u8> {
    Msg::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL)
        .ifinfo(0, IFF_UP, IFF_UP)
        .attr_str(IFLA_IFNAME, host)
        .attr(IFLA_MASTER, &bridge.to_ne_bytes())
        .nest(IFLA_LINKINFO, |info| {
            push_attr(info, IFLA_INFO_KIND, b"veth");
            let mut data = Vec::new();
            let mut peer_msg = Vec::new();
            // The peer's own `struct ifinfomsg`, then its attributes.
            peer_msg.extend_from_slice(&[0u8; 16]);
            push_attr(&mut peer_msg, IFLA_IFNAME, &ifname(peer));
            push_attr(&mut peer_msg, IFLA_NET_NS_FD, &netns.to_ne_bytes());
            push_attr(&mut data, VETH_INFO_PEER, &peer_msg);
            push_attr(info, IFLA_INFO_DATA, &data);
        })
        .finish()
}

/// `ip link add <name> up type bridge`.
pub fn bridge_request(name: &str) -> Vec<u8> {
    Msg::new(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL)
        .ifinfo(0, IFF_UP, IFF_UP)
        .attr_str(IFLA_IFNAME, name)
        .nest(IFLA_LINKINFO, |info| {
            push_attr(info, IFLA_INFO_KIND, b"bridge")
        })
        .finish()
}

/// `ip link set <index> mtu <mtu>`.
pub fn mtu_request(index: i32, mtu: u32) -> Vec<u8> {
    Msg::new(RTM_NEWLINK, 0)
        .ifinfo(index, 0, 0)
        .attr(IFLA_MTU, &mtu.to_ne_bytes())
        .finish()
}

/// `ip link set <index> up`.
pub fn up_request(index: i32) -> Vec<u8> {
    Msg::new(RTM_NEWLINK, 0)
        .ifinfo(index, IFF_UP, IFF_UP)
        .finish()
}

/// `ip link set <index> type bridge_slave hairpin on`: the bridge sends a pod's frames back
/// out the port they came in, so a pod reaches its own Service address.
pub fn hairpin_request(index: i32) -> Vec<u8> {
    Msg::new(RTM_SETLINK, 0)
        .ifinfo_of(AF_BRIDGE, index, 0, 0)
        .nest(IFLA_PROTINFO | NLA_F_NESTED, |p| {
            push_attr(p, IFLA_BRPORT_MODE, &[1])
        })
        .finish()
}

/// `ip link show <name>`.
pub fn get_link_request(name: &str) -> Vec<u8> {
    Msg::new(RTM_GETLINK, 0)
        .ifinfo(0, 0, 0)
        .attr_str(IFLA_IFNAME, name)
        .finish()
}

/// `ip link del <name>`.
pub fn del_link_request(name: &str) -> Vec<u8> {
    Msg::new(RTM_DELLINK, 0)
        .ifinfo(0, 0, 0)
        .attr_str(IFLA_IFNAME, name)
        .finish()
}

/// `ip addr add <ip>/<prefix> brd + dev <index>`.
pub fn addr_request(index: i32, ip: Ipv4Addr, prefix: u8) -> Vec<u8> {
    let mut m = Msg::new(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
    m.buf.extend_from_slice(&[AF_INET, prefix, 0, 0]); // family, prefix, flags, scope
    m.buf.extend_from_slice(&(index as u32).to_ne_bytes());
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    };
    let broadcast = Ipv4Addr::from(u32::from(ip) | !mask);
    m.attr(IFA_LOCAL, &ip.octets())
        .attr(IFA_ADDRESS, &ip.octets())
        .attr(IFA_BROADCAST, &broadcast.octets())
        .finish()
}

/// `ip route replace <dst>/<len> via <gateway> dev <index>`.
pub fn route_request(index: i32, dst: Ipv4Addr, len: u8, gateway: Ipv4Addr) -> Vec<u8> {
    let mut m = Msg::new(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
    // family, dst_len, src_len, tos, table, protocol, scope (universe), type, flags
    m.buf.extend_from_slice(&[
        AF_INET,
        len,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_BOOT,
        0,
        RTN_UNICAST,
    ]);
    m.buf.extend_from_slice(&0u32.to_ne_bytes());
    if len > 0 {
        m = m.attr(RTA_DST, &dst.octets());
    }
    m.attr(RTA_GATEWAY, &gateway.octets())
        .attr(RTA_OIF, &(index as u32).to_ne_bytes())
        .finish()
}

/// A netlink socket in the network namespace of the thread that opened it.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
}

impl Socket {
    pub fn open() -> Result<Socket, NetlinkError> {
        let err = |errno| NetlinkError {
            what: "opening a netlink socket".into(),
            errno,
        };
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )
        .map_err(err)?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0)).map_err(err)?;
        Ok(Socket { fd })
    }

    /// Sends one request and reads until its acknowledgement; returns the payload of the last
    /// non-error message (a GETLINK's answer), if any.
    fn call(&self, what: &str, request: &[u8]) -> Result<Option<Vec<u8>>, NetlinkError> {
        let err = |errno| NetlinkError {
            what: what.to_string(),
            errno,
        };
        send(self.fd.as_raw_fd(), request, MsgFlags::empty()).map_err(err)?;
        let mut answer = None;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty()).map_err(err)?;
            let mut at = 0;
            while at + 16 <= n {
                let len = u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4")) as usize;
                let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().expect("2"));
                if len < 16 || at + len > n {
                    return Err(err(nix::errno::Errno::EBADMSG));
                }
                let payload = &buf[at + 16..at + len];
                if kind == NLMSG_ERROR {
                    let code = i32::from_ne_bytes(payload[..4].try_into().expect("4"));
                    if code == 0 {
                        return Ok(answer);
                    }
                    return Err(err(nix::errno::Errno::from_raw(-code)));
                }
                answer = Some(payload.to_vec());
                at += len.next_multiple_of(4);
            }
        }
    }

    pub fn link(&self, name: &str) -> Result<Link, NetlinkError> {
        let payload = self
            .call(&format!("finding link {name}"), &get_link_request(name))?
            .ok_or_else(|| NetlinkError {
                what: format!("finding link {name}"),
                errno: nix::errno::Errno::ENODEV,
            })?;
        parse_link(&payload).ok_or_else(|| NetlinkError {
            what: format!("reading link {name}"),
            errno: nix::errno::Errno::EBADMSG,
        })
    }

    pub fn add_veth(
        &self,
        host: &str,
        bridge: i32,
        peer: &str,
        netns: BorrowedFd<'_>,
    ) -> Result<(), NetlinkError> {
        self.call(
            &format!("creating veth {host} (peer {peer})"),
            &veth_request(host, bridge, peer, netns.as_raw_fd()),
        )
        .map(drop)
    }

    pub fn add_bridge(&self, name: &str) -> Result<(), NetlinkError> {
        self.call(&format!("creating bridge {name}"), &bridge_request(name))
            .map(drop)
    }

    pub fn set_up(&self, index: i32) -> Result<(), NetlinkError> {
        self.call(&format!("setting link {index} up"), &up_request(index))
            .map(drop)
    }

    pub fn set_mtu(&self, index: i32, mtu: u32) -> Result<(), NetlinkError> {
        self.call(
            &format!("setting the MTU of link {index} to {mtu}"),
            &mtu_request(index, mtu),
        )
        .map(drop)
    }

    pub fn set_hairpin(&self, index: i32) -> Result<(), NetlinkError> {
        self.call(
            &format!("turning hairpin on for link {index}"),
            &hairpin_request(index),
        )
        .map(drop)
    }

    pub fn del_link(&self, name: &str) -> Result<(), NetlinkError> {
        self.call(&format!("deleting link {name}"), &del_link_request(name))
            .map(drop)
    }

    pub fn add_addr(&self, index: i32, ip: Ipv4Addr, prefix: u8) -> Result<(), NetlinkError> {
        self.call(
            &format!("adding {ip}/{prefix} to link {index}"),
            &addr_request(index, ip, prefix),
        )
        .map(drop)
    }

    pub fn replace_route(
        &self,
        index: i32,
        dst: Ipv4Addr,
        len: u8,
        gateway: Ipv4Addr,
    ) -> Result<(), NetlinkError> {
        self.call(
            &format!("routing {dst}/{len} via {gateway}"),
            &route_request(index, dst, len, gateway),
        )
        .map(drop)
    }
}

/// Index and MAC address out of a RTM_NEWLINK payload.
fn parse_link(payload: &[u8]) -> Option<Link> {
    let index = i32::from_ne_bytes(payload.get(4..8)?.try_into().ok()?);
    let mut at = 16;
    let mut mac = String::new();
    while at + 4 <= payload.len() {
        let len = u16::from_ne_bytes(payload[at..at + 2].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(payload[at + 2..at + 4].try_into().ok()?) & 0x3fff;
        if len < 4 || at + len > payload.len() {
            break;
        }
        if kind == IFLA_ADDRESS {
            mac = payload[at + 4..at + len]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":");
        }
        at += len.next_multiple_of(4);
    }
    Some(Link { index, mac })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(mut b: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        while b.len() >= 4 {
            let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
            out.push((u16::from_ne_bytes([b[2], b[3]]), b[4..len].to_vec()));
            b = &b[len.next_multiple_of(4).min(b.len())..];
        }
        out
    }

    #[test]
    fn veth_request_nests_the_peer_with_its_namespace() {
        let m = veth_request("veth0123abcd", 7, "eth0", 42);
        assert_eq!(
            u32::from_ne_bytes(m[..4].try_into().unwrap()) as usize,
            m.len()
        );
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), RTM_NEWLINK);
        let flags = u16::from_ne_bytes([m[6], m[7]]);
        assert_eq!(flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL);
        // ifinfomsg: up
        assert_eq!(u32::from_ne_bytes(m[24..28].try_into().unwrap()), IFF_UP);
        let top = attrs(&m[32..]);
        assert_eq!(top[0], (IFLA_IFNAME, b"veth0123abcd\0".to_vec()));
        assert_eq!(top[1], (IFLA_MASTER, 7i32.to_ne_bytes().to_vec()));
        assert_eq!(top[2].0, IFLA_LINKINFO);
        let info = attrs(&top[2].1);
        assert_eq!(info[0], (IFLA_INFO_KIND, b"veth".to_vec()));
        let data = attrs(&info[1].1);
        assert_eq!(data[0].0, VETH_INFO_PEER);
        let peer = attrs(&data[0].1[16..]);
        assert_eq!(peer[0], (IFLA_IFNAME, b"eth0\0".to_vec()));
        assert_eq!(peer[1], (IFLA_NET_NS_FD, 42i32.to_ne_bytes().to_vec()));
    }

    #[test]
    fn hairpin_is_a_bridge_port_attribute() {
        let m = hairpin_request(5);
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), RTM_SETLINK);
        assert_eq!(m[16], AF_BRIDGE);
        assert_eq!(i32::from_ne_bytes(m[20..24].try_into().unwrap()), 5);
        let a = attrs(&m[32..]);
        assert_eq!(a[0].0, IFLA_PROTINFO | NLA_F_NESTED);
        assert_eq!(attrs(&a[0].1), vec![(IFLA_BRPORT_MODE, vec![1])]);
    }

    #[test]
    fn address_request_carries_the_broadcast() {
        let m = addr_request(3, Ipv4Addr::new(10, 244, 1, 5), 24);
        let a = attrs(&m[24..]);
        assert_eq!(a[0], (IFA_LOCAL, vec![10, 244, 1, 5]));
        assert_eq!(a[2], (IFA_BROADCAST, vec![10, 244, 1, 255]));
        assert_eq!(m[16], AF_INET);
        assert_eq!(m[17], 24);
    }

    #[test]
    fn default_route_has_no_destination() {
        let m = route_request(2, Ipv4Addr::UNSPECIFIED, 0, Ipv4Addr::new(10, 244, 1, 1));
        let a = attrs(&m[28..]);
        assert_eq!(a[0], (RTA_GATEWAY, vec![10, 244, 1, 1]));
        assert_eq!(a[1], (RTA_OIF, 2u32.to_ne_bytes().to_vec()));
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn links_parse_index_and_mac() {
        let mut p = vec![0u8; 16];
        p[4..8].copy_from_slice(&9i32.to_ne_bytes());
        push_attr(&mut p, IFLA_IFNAME, b"eth0\0");
        push_attr(&mut p, IFLA_ADDRESS, &[0x0a, 0x58, 0, 1, 2, 0xff]);
        assert_eq!(
            parse_link(&p),
            Some(Link {
                index: 9,
                mac: "0a:58:00:01:02:ff".into()
            })
        );
    }
}
