//! Bitmaps of service cluster IPs and node ports, as upstream's ipallocator and portallocator.
//!
//! Both split their range in two: dynamic picks start at a random slot of the upper part and
//! only fall back to the lower part when it is full, which keeps the lower part free for
//! addresses and ports users ask for by value (upstream KEP-3070 and KEP-3668). The state lives
//! in memory only: the server rebuilds it from the stored Services at startup.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rand::Rng;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("range is full")]
    Full,
    #[error("provided IP is already allocated")]
    IpAllocated,
    #[error("the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}")]
    IpNotInRange { ip: IpAddr, range: String },
    #[error("provided port is already allocated")]
    PortAllocated,
    #[error("provided port is not in the valid range. The range of valid ports is {range}")]
    PortNotInRange { range: String },
}

/// `size` slots, of which `[offset, size)` is where dynamic picks look first.
#[derive(Debug, Clone)]
struct Bitmap {
    words: Vec<u64>,
    size: usize,
    offset: usize,
    used: usize,
}

impl Bitmap {
    fn new(size: usize, offset: usize) -> Bitmap {
        Bitmap {
            words: vec![0; size.div_ceil(64)],
            size,
            offset: offset.min(size),
            used: 0,
        }
    }

    fn has(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Marks `i`; `false` when it was taken already.
    fn set(&mut self, i: usize) -> bool {
        if self.has(i) {
            return false;
        }
        self.words[i / 64] |= 1 << (i % 64);
        self.used += 1;
        true
    }

    fn clear(&mut self, i: usize) {
        if self.has(i) {
            self.words[i / 64] &= !(1 << (i % 64));
            self.used -= 1;
        }
    }

    /// A free slot: random in the upper part first, then random in the lower part.
    fn next(&mut self) -> Option<usize> {
        if self.used >= self.size {
            return None;
        }
        let mut rng = rand::rng();
        for (lo, hi) in [(self.offset, self.size), (0, self.offset)] {
            let len = hi - lo;
            if len == 0 {
                continue;
            }
            let start = rng.random_range(0..len);
            if let Some(i) = (0..len)
                .map(|k| lo + (start + k) % len)
                .find(|i| !self.has(*i))
            {
                self.set(i);
                return Some(i);
            }
        }
        None
    }
}

/// Upstream's calculateRangeOffset: the size of the part kept for static picks.
fn range_offset(size: u128, min: u128, max: u128, step: u128) -> usize {
    if size < min {
        return 0;
    }
    (size / step).clamp(min, max) as usize
}

/// The service cluster IP range (`--service-cluster-ip-range`).
#[derive(Debug, Clone)]
pub struct IpAllocator {
    cidr: String,
    /// The address of slot 0 (the network address + 1).
    base: u128,
    v6: bool,
    map: Bitmap,
}

impl IpAllocator {
    /// Serves `cidr` without its network address (and, for IPv4, its broadcast address).
    pub fn new(cidr: &str) -> Option<IpAllocator> {
        let (ip, bits) = cidr.split_once('/')?;
        let ip: IpAddr = ip.parse().ok()?;
        let bits: u32 = bits.parse().ok()?;
        let (v6, width, addr) = match ip {
            IpAddr::V4(v4) => (false, 32, u128::from(u32::from(v4))),
            IpAddr::V6(v6) => (true, 128, u128::from(v6)),
        };
        // Upstream's limit: a mask of at least /12 (IPv4) or /108 (IPv6), 2^20 addresses.
        if bits > width || width - bits > 20 {
            return None;
        }
        let host_bits = width - bits;
        let network = addr & !((1u128 << host_bits) - 1);
        let range_size = 1u128 << host_bits;
        // IPv6 has no broadcast address to leave out.
        let usable = if v6 {
            range_size - 1
        } else {
            range_size.saturating_sub(2)
        };
        let size = usize::try_from(usable).ok()?;
        Some(IpAllocator {
            cidr: format!("{}/{bits}", to_ip(network, v6)),
            base: network + 1,
            v6,
            map: Bitmap::new(size, range_offset(range_size, 16, 256, 16)),
        })
    }

    pub fn cidr(&self) -> &str {
        &self.cidr
    }

    pub fn is_v6(&self) -> bool {
        self.v6
    }

    /// The first address of the range (the `kubernetes` service's).
    pub fn first(&self) -> IpAddr {
        to_ip(self.base, self.v6)
    }

    fn slot(&self, ip: IpAddr) -> Result<usize, AllocError> {
        let value = match ip {
            IpAddr::V4(v4) if !self.v6 => u128::from(u32::from(v4)),
            IpAddr::V6(v6) if self.v6 => u128::from(v6),
            _ => return Err(self.not_in_range(ip)),
        };
        value
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
            .filter(|i| *i < self.map.size)
            .ok_or_else(|| self.not_in_range(ip))
    }

    fn not_in_range(&self, ip: IpAddr) -> AllocError {
        AllocError::IpNotInRange {
            ip,
            range: self.cidr.clone(),
        }
    }

    pub fn allocate(&mut self, ip: IpAddr) -> Result<(), AllocError> {
        let i = self.slot(ip)?;
        if self.map.set(i) {
            Ok(())
        } else {
            Err(AllocError::IpAllocated)
        }
    }

    pub fn allocate_next(&mut self) -> Result<IpAddr, AllocError> {
        let i = self.map.next().ok_or(AllocError::Full)?;
        Ok(to_ip(self.base + i as u128, self.v6))
    }

    pub fn release(&mut self, ip: IpAddr) {
        if let Ok(i) = self.slot(ip) {
            self.map.clear(i);
        }
    }

    pub fn has(&self, ip: IpAddr) -> bool {
        self.slot(ip).is_ok_and(|i| self.map.has(i))
    }

    pub fn used(&self) -> usize {
        self.map.used
    }
}

fn to_ip(value: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(value))
    } else {
        IpAddr::V4(Ipv4Addr::from(value as u32))
    }
}

/// The node port range (`--service-node-port-range`).
#[derive(Debug, Clone)]
pub struct PortAllocator {
    first: u16,
    last: u16,
    map: Bitmap,
}

impl PortAllocator {
    /// `first-last` (both included), as upstream's flag; a single port is also accepted.
    pub fn parse(range: &str) -> Option<PortAllocator> {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let first: u16 = a.trim().parse().ok()?;
        let last: u16 = b.trim().parse().ok()?;
        (first <= last).then(|| PortAllocator::new(first, last))
    }

    pub fn new(first: u16, last: u16) -> PortAllocator {
        let size = usize::from(last - first) + 1;
        PortAllocator {
            first,
            last,
            map: Bitmap::new(size, range_offset(size as u128, 16, 128, 32)),
        }
    }

    pub fn range(&self) -> String {
        format!("{}-{}", self.first, self.last)
    }

    fn slot(&self, port: i32) -> Result<usize, AllocError> {
        if port < i32::from(self.first) || port > i32::from(self.last) {
            return Err(AllocError::PortNotInRange {
                range: self.range(),
            });
        }
        Ok((port - i32::from(self.first)) as usize)
    }

    pub fn allocate(&mut self, port: i32) -> Result<(), AllocError> {
        let i = self.slot(port)?;
        if self.map.set(i) {
            Ok(())
        } else {
            Err(AllocError::PortAllocated)
        }
    }

    pub fn allocate_next(&mut self) -> Result<i32, AllocError> {
        let i = self.map.next().ok_or(AllocError::Full)?;
        Ok(i32::from(self.first) + i as i32)
    }

    pub fn release(&mut self, port: i32) {
        if let Ok(i) = self.slot(port) {
            self.map.clear(i);
        }
    }

    pub fn has(&self, port: i32) -> bool {
        self.slot(port).is_ok_and(|i| self.map.has(i))
    }

    pub fn used(&self) -> usize {
        self.map.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_range_skips_network_and_broadcast() {
        let mut a = IpAllocator::new("10.96.0.0/28").unwrap();
        assert_eq!(a.first(), "10.96.0.1".parse::<IpAddr>().unwrap());
        let mut got: Vec<IpAddr> = (0..14).map(|_| a.allocate_next().unwrap()).collect();
        got.sort();
        assert_eq!(got.first().unwrap().to_string(), "10.96.0.1");
        assert_eq!(got.last().unwrap().to_string(), "10.96.0.14");
        assert_eq!(a.allocate_next(), Err(AllocError::Full));
        assert!(matches!(
            a.allocate("10.96.0.15".parse().unwrap()),
            Err(AllocError::IpNotInRange { .. })
        ));
        a.release("10.96.0.7".parse().unwrap());
        assert_eq!(a.allocate_next().unwrap().to_string(), "10.96.0.7");
    }

    #[test]
    fn dynamic_ips_come_from_the_upper_part_first() {
        // A /12 keeps its first 256 slots (10.96.0.1-10.96.1.0) for static picks.
        let mut a = IpAllocator::new("10.96.0.0/12").unwrap();
        let low = u32::from("10.96.1.0".parse::<Ipv4Addr>().unwrap());
        for _ in 0..200 {
            let IpAddr::V4(ip) = a.allocate_next().unwrap() else {
                panic!("v4")
            };
            assert!(u32::from(ip) > low, "{ip} is in the static part");
        }
        a.allocate("10.96.0.10".parse().unwrap()).unwrap();
        assert_eq!(
            a.allocate("10.96.0.10".parse().unwrap()),
            Err(AllocError::IpAllocated)
        );
    }

    #[test]
    fn small_ranges_fall_back_to_the_lower_part() {
        let mut p = PortAllocator::new(30000, 30099);
        // 100 ports: the lower 16 are kept for static picks.
        for _ in 0..84 {
            assert!(p.allocate_next().unwrap() >= 30016);
        }
        assert!(p.allocate_next().unwrap() < 30016);
        assert_eq!(
            p.allocate(29999),
            Err(AllocError::PortNotInRange {
                range: "30000-30099".into()
            })
        );
    }

    #[test]
    fn port_range_parses_as_upstream_flag() {
        let p = PortAllocator::parse("30000-32767").unwrap();
        assert_eq!(p.range(), "30000-32767");
        assert_eq!(p.map.offset, 86);
        assert!(PortAllocator::parse("32767-30000").is_none());
    }
}
