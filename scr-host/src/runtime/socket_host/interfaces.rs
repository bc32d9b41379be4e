//! This host's interface addresses (`getifaddrs`), which a set's members tell each other
//! for the background protection's connections, as MPI's TCP transport does: hosts
//! whose names do not resolve to each other (no DNS for compute nodes, a test bed of
//! namespaces) still connect. The one `unsafe` of the socket host: reading the C list.
#![allow(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The addresses of this host's interfaces that are up, except loopback and link-local
/// ones (the same on many hosts, or reached only through a named interface): what
/// another host may reach this one at. Empty when the kernel does not say.
pub(super) fn addresses() -> Vec<IpAddr> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes into `head` the head of a list it allocates, freed below
    // with freeifaddrs; on failure it returns -1 and nothing is to be freed.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut node = head;
    while !node.is_null() {
        // SAFETY: `node` is a node of the list getifaddrs returned, valid until
        // freeifaddrs below; nothing read from it is kept by reference.
        let ifa = unsafe { &*node };
        node = ifa.ifa_next;
        if ifa.ifa_flags & libc::IFF_UP as u32 == 0 || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null `ifa_addr` points to a socket address whose family field
        // says which structure it is; each is read only as the structure its family names.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))))
                }
                libc::AF_INET6 => {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                }
                _ => None,
            }
        };
        let reachable = match ip {
            Some(IpAddr::V4(a)) => !a.is_loopback() && !a.is_unspecified() && !a.is_link_local(),
            Some(IpAddr::V6(a)) => {
                !a.is_loopback() && !a.is_unspecified() && (a.segments()[0] & 0xffc0) != 0xfe80
            }
            None => false,
        };
        if let (true, Some(ip)) = (reachable, ip) {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed exactly once; no reference into
    // the list outlives this point.
    unsafe { libc::freeifaddrs(head) };
    // (IPv4 first: where both exist, the network MPI's jobs use)
    out.sort_by_key(|a| !a.is_ipv4());
    out
}

#[cfg(test)]
mod tests {
    /// The list holds no loopback, unspecified or link-local address and no duplicate.
    #[test]
    fn only_addresses_another_host_may_reach() {
        let all = super::addresses();
        for a in &all {
            assert!(!a.is_loopback() && !a.is_unspecified(), "{a}");
            if let std::net::IpAddr::V4(v4) = a {
                assert!(!v4.is_link_local(), "{a}");
            }
            if let std::net::IpAddr::V6(v6) = a {
                assert_ne!(v6.segments()[0] & 0xffc0, 0xfe80, "{a}");
            }
        }
        let mut unique = all.clone();
        unique.dedup();
        assert_eq!(unique.len(), all.len());
        // each is this host's own: a listener binds to it
        for a in &all {
            std::net::TcpListener::bind((*a, 0)).unwrap_or_else(|e| panic!("{a}: {e}"));
        }
    }
}
