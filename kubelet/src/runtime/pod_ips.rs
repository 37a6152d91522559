//! Pod addresses for a runtime with no network of its own (the hollow nodes' fake): handed out
//! from the node's pod range the way host-local IPAM does, so that the addresses a hollow
//! cluster reports are unique and inside the ranges the controllers expect. They exist only as
//! strings; nothing is ever configured or sent to them.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodIpError {
    #[error("pod CIDR {0:?} is not an IPv4 range a.b.c.d/n with n at most 30")]
    Cidr(String),
    #[error("pod CIDR {0} has no free address")]
    Exhausted(String),
}

/// The addresses of one pod range, by owner (a sandbox ID).
#[derive(Debug, Clone)]
pub struct PodIps {
    cidr: String,
    /// First and last assignable address (network + 2 .. broadcast - 1, as host-local leaves
    /// the first host address to the gateway).
    first: u32,
    last: u32,
    used: BTreeMap<u32, String>,
    /// Where the next search starts: addresses are not reused at once, as host-local.
    next: u32,
}

impl PodIps {
    pub fn new(cidr: &str) -> Result<PodIps, PodIpError> {
        let bad = || PodIpError::Cidr(cidr.to_string());
        let (addr, len) = cidr.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let len: u32 = len.parse().map_err(|_| bad())?;
        if len > 30 {
            return Err(bad());
        }
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        let network = u32::from(addr) & mask;
        let broadcast = network | !mask;
        Ok(PodIps {
            cidr: cidr.to_string(),
            first: network + 2,
            last: broadcast - 1,
            used: BTreeMap::new(),
            next: network + 2,
        })
    }

    pub fn cidr(&self) -> &str {
        &self.cidr
    }

    /// A free address for `owner` (the one it holds already, if any).
    pub fn allocate(&mut self, owner: &str) -> Result<Ipv4Addr, PodIpError> {
        if let Some((ip, _)) = self.used.iter().find(|(_, o)| *o == owner) {
            return Ok(Ipv4Addr::from(*ip));
        }
        let size = u64::from(self.last - self.first) + 1;
        let after = |ip: u32| if ip == self.last { self.first } else { ip + 1 };
        let mut candidate = self.next;
        for _ in 0..size {
            if let std::collections::btree_map::Entry::Vacant(free) = self.used.entry(candidate) {
                free.insert(owner.to_string());
                self.next = after(candidate);
                return Ok(Ipv4Addr::from(candidate));
            }
            candidate = after(candidate);
        }
        Err(PodIpError::Exhausted(self.cidr.clone()))
    }

    pub fn release(&mut self, owner: &str) {
        self.used.retain(|_, o| o != owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_in_the_range_and_are_unique() {
        let mut ips = PodIps::new("100.64.3.0/30").unwrap();
        assert_eq!(ips.allocate("a").unwrap(), Ipv4Addr::new(100, 64, 3, 2));
        assert_eq!(
            ips.allocate("a").unwrap(),
            Ipv4Addr::new(100, 64, 3, 2),
            "an owner keeps its address"
        );
        assert_eq!(
            ips.allocate("b"),
            Err(PodIpError::Exhausted("100.64.3.0/30".into()))
        );
        ips.release("a");
        assert_eq!(ips.allocate("b").unwrap(), Ipv4Addr::new(100, 64, 3, 2));
    }

    #[test]
    fn released_addresses_are_not_reused_at_once() {
        let mut ips = PodIps::new("10.244.1.0/24").unwrap();
        let a = ips.allocate("a").unwrap();
        ips.release("a");
        let b = ips.allocate("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(b, Ipv4Addr::new(10, 244, 1, 3));
    }

    #[test]
    fn bad_ranges() {
        for bad in ["10.0.0.0", "10.0.0.0/31", "fd00::/64", "x/24"] {
            assert!(PodIps::new(bad).is_err(), "{bad}");
        }
        let ips = PodIps::new("10.0.0.77/24").unwrap();
        assert_eq!(ips.cidr(), "10.0.0.77/24");
    }
}
