//! Making a set's mesh of connections (collective over the set, through its host): a
//! token from member 0, every member's listening address, each member connecting to the
//! members above it and accepting those below, both ends proving the token; agreed.

use std::io::Read as _;
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs as _,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abi_stable::std_types::RSliceMut;
use scr_plugin::ReduceOp;

use super::{greet, read_frames, Inbox, Refused, SocketHost};
use crate::runtime::world::{Members, SetHost};

/// A member's address as broadcast: port (2), the number of interface addresses (1),
/// each as a family byte (4 or 6) and 16 bytes, then the host name's length (1) and the
/// host name.
const ADDRESS: usize = 256;
/// The most interface addresses a member advertises.
const MAX_IPS: usize = 8;
/// The longest host name advertised (Linux's HOST_NAME_MAX).
const MAX_NAME: usize = 64;
/// The longest a member waits for the others' connections once all have their
/// addresses: a site whose nodes drop connections between them learns it at init within
/// this, not after `abort_timeout`.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);
/// The longest an accepting member waits for each step of a connection's greeting (a
/// member answers at once): a connection that says nothing does not hold up the others
/// for long.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(1);
/// How long one write waits before the writer looks whether it should give up (see
/// `SocketHost::put`).
const WRITE_POLL: Duration = Duration::from_millis(100);

/// This host's name, as its peers resolve it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= MAX_NAME)
        .unwrap_or_else(|| "localhost".into())
}

/// 16 fresh bytes from the kernel's random source (a token, a nonce).
fn random16() -> Result<[u8; 16], String> {
    let mut t = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut t))
        .map_err(|e| format!("no random bytes (/dev/urandom: {e})"))?;
    Ok(t)
}

/// A listener on every interface, IPv6 and IPv4 where the kernel has both.
fn listen() -> Result<TcpListener, String> {
    TcpListener::bind("[::]:0")
        .or_else(|_| TcpListener::bind("0.0.0.0:0"))
        .map_err(|e| format!("cannot listen on a TCP port: {e}"))
}

/// A member's address: where it listens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Address {
    port: u16,
    /// Its host's interface addresses.
    ips: Vec<IpAddr>,
    host: String,
}

impl Address {
    /// This member's address, listening on `port`.
    fn mine(port: u16) -> Address {
        let mut ips = super::interfaces::addresses();
        ips.truncate(MAX_IPS);
        Address {
            port,
            ips,
            host: host_name(),
        }
    }

    fn encode(&self) -> [u8; ADDRESS] {
        let mut b = [0u8; ADDRESS];
        b[..2].copy_from_slice(&self.port.to_le_bytes());
        let ips = &self.ips[..self.ips.len().min(MAX_IPS)];
        b[2] = ips.len() as u8;
        let mut at = 3;
        for ip in ips {
            let (family, bytes) = match ip {
                IpAddr::V4(a) => (4, a.to_ipv6_mapped().octets()),
                IpAddr::V6(a) => (6, a.octets()),
            };
            b[at] = family;
            b[at + 1..at + 17].copy_from_slice(&bytes);
            at += 17;
        }
        let name = &self.host.as_bytes()[..self.host.len().min(MAX_NAME)];
        b[at] = name.len() as u8;
        b[at + 1..at + 1 + name.len()].copy_from_slice(name);
        b
    }

    /// The address in `b` (as `encode` wrote it; what does not parse is left out).
    fn decode(b: &[u8; ADDRESS]) -> Address {
        let port = u16::from_le_bytes([b[0], b[1]]);
        let n = usize::from(b[2]).min(MAX_IPS);
        let mut ips = Vec::with_capacity(n);
        let mut at = 3;
        for _ in 0..n {
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(&b[at + 1..at + 17]);
            let v6 = Ipv6Addr::from(bytes);
            match (b[at], v6.to_ipv4_mapped()) {
                (4, Some(v4)) => ips.push(IpAddr::V4(v4)),
                (6, _) => ips.push(IpAddr::V6(v6)),
                _ => {}
            }
            at += 17;
        }
        let len = usize::from(b[at]).min(MAX_NAME);
        let host = String::from_utf8_lossy(&b[at + 1..at + 1 + len]).into_owned();
        Address { port, ips, host }
    }

    /// Where this member is tried from a member on host `mine`, in order: loopback when
    /// both run on the same host, its interface addresses, what its host name resolves
    /// to. The token tells the right process from any other reached this way. (Not
    /// loopback for another host: the token would go to whatever listens on that port
    /// here.)
    fn candidates(&self, mine: &str) -> Vec<SocketAddr> {
        let loopback = [
            SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, self.port)),
        ];
        let mut all = Vec::new();
        if self.host == mine {
            all.extend(loopback);
        }
        all.extend(self.ips.iter().map(|ip| SocketAddr::new(*ip, self.port)));
        let mut named: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default();
        named.sort_by_key(|a| !a.is_ipv4());
        all.extend(named);
        let mut seen = Vec::with_capacity(all.len());
        for a in all {
            if !seen.contains(&a) {
                seen.push(a);
            }
        }
        seen
    }
}

/// One member's part of a collective step that may fail: whether every member's part
/// succeeded (agreed), and, when not, the error of the lowest member that failed (its own
/// text on that member, a pointer to its log on the others).
fn agreed(set: &dyn SetHost, mine: Result<(), String>, step: &str) -> Result<(), Refused> {
    let rank = set.rank();
    let flag = if mine.is_err() {
        u64::from(rank)
    } else {
        u64::MAX
    };
    let first = set
        .all_reduce_u64(flag, ReduceOp::Min)
        .into_result()
        .map_err(|e| Refused {
            own: true,
            why: format!("{step}: the set could not agree: {e}"),
        })?;
    if first == u64::MAX {
        return Ok(());
    }
    let m = u32::try_from(first).unwrap_or(u32::MAX);
    if let Err(e) = &mine {
        // (the others' errors point here)
        tracing::warn!("rank {}: {step}: {e}", set.world_rank(rank));
    }
    let own = mine.is_err();
    let why = match mine {
        Err(e) if m == rank => format!("{step}: {e}"),
        _ => format!(
            "{step}: member {m} (world rank {}) could not (its log says why)",
            set.world_rank(m)
        ),
    };
    Err(Refused { own, why })
}

/// Connect this member with every other of `set`'s (collective over the set, on a
/// thread that may use `set`'s services: the application's). `me` is this process's
/// world rank; `timeout` (at most `CONNECT_WITHIN`) bounds how long a member waits for
/// another to connect;
/// `injected` (the fault suite's) makes this member fail to listen, with that reason.
pub(crate) fn connect(
    set: &dyn SetHost,
    me: u32,
    timeout: Duration,
    injected: Option<&str>,
) -> Result<SocketHost, Refused> {
    let (rank, size) = (set.rank(), set.size());
    let n = size as usize;
    let members = Members::new(
        (0..size).map(|m| set.world_rank(m)).collect(),
        (0..size)
            .map(|m| set.failure_group(m).into_string())
            .collect(),
    );
    let coll = |e: scr_plugin::PluginError| Refused {
        own: true,
        why: format!("the set's exchange failed: {e}"),
    };
    // the token: member 0's, to every member
    let mut token = [0u8; 16];
    let made = match rank {
        0 => random16().map(|t| token = t),
        _ => Ok(()),
    };
    set.broadcast(0, RSliceMut::from_mut_slice(&mut token))
        .into_result()
        .map_err(coll)?;
    agreed(set, made, "a token for the set's connections")?;
    // every member's address
    let listener = match injected {
        Some(spec) => Err(format!(
            "cannot listen on a TCP port: injected failure ({spec})"
        )),
        None => listen(),
    };
    let mine = match &listener {
        Ok(l) => Address::mine(l.local_addr().map(|a| a.port()).unwrap_or(0)),
        Err(_) => Address::default(),
    };
    let mut addresses = Vec::with_capacity(n);
    for m in 0..size {
        let mut buf = if m == rank {
            mine.encode()
        } else {
            [0u8; ADDRESS]
        };
        set.broadcast(m, RSliceMut::from_mut_slice(&mut buf))
            .into_result()
            .map_err(coll)?;
        addresses.push(Address::decode(&buf));
    }
    let listener = listener.and_then(|l| {
        l.set_nonblocking(true)
            .map_err(|e| format!("cannot poll the listening socket: {e}"))?;
        Ok(l)
    });
    let listening = listener.as_ref().map(|_| ()).map_err(Clone::clone);
    agreed(set, listening, "listening for the set's connections")?;
    let Ok(listener) = listener else {
        // (not reached: the agreement above refused)
        return Err(Refused {
            own: true,
            why: "not listening".into(),
        });
    };
    // members above connect to those below; each end proves the token. Every member is
    // here by now: a connection that takes longer will not come. (The names are
    // resolved first: a resolver that takes its time does not use up the window.)
    let targets: Vec<(u32, Vec<SocketAddr>)> = ((rank + 1)..size)
        .map(|m| (m, addresses[m as usize].candidates(&mine.host)))
        .collect();
    let window = timeout.min(CONNECT_WITHIN);
    let deadline = Instant::now() + window;
    let world: Vec<u32> = (0..size).map(|m| set.world_rank(m)).collect();
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let made = std::thread::scope(|scope| {
        let dialed = scope.spawn(|| {
            let mut out = Vec::new();
            for (m, to) in &targets {
                let host = &addresses[*m as usize].host;
                let peer = (*m, world[*m as usize], host.as_str());
                out.push((*m, dial(peer, to, &token, (rank, size), deadline)?));
            }
            Ok::<_, String>(out)
        });
        let accepted = accept_lower(&listener, &token, (rank, size), (deadline, window), &world);
        let dialed = dialed
            .join()
            .unwrap_or_else(|_| Err("connecting ended in a panic".into()));
        for (m, s) in accepted?.into_iter().chain(dialed?) {
            streams[m as usize] = Some(s);
        }
        Ok::<_, String>(())
    });
    // each connection's reading side, for its reader
    let made = made.and_then(|()| {
        streams
            .iter()
            .enumerate()
            .filter_map(|(m, s)| s.as_ref().map(|s| (m, s)))
            .map(|(m, s)| {
                s.set_read_timeout(None)
                    .and_then(|()| s.set_write_timeout(Some(WRITE_POLL)))
                    .and_then(|()| s.set_nodelay(true))
                    .and_then(|()| s.try_clone())
                    .map(|r| (m, r))
                    .map_err(|e| format!("member {m}'s connection: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()
    });
    let reading = match made {
        Ok(r) => {
            agreed(set, Ok(()), "connecting the set's members")?;
            r
        }
        Err(e) => {
            agreed(set, Err(e.clone()), "connecting the set's members")?;
            // (not reached: the agreement refused)
            return Err(Refused { own: true, why: e });
        }
    };
    let inbox = Arc::new(Inbox::new(n));
    let mut readers = Vec::with_capacity(reading.len());
    for (m, r) in reading {
        let ib = Arc::clone(&inbox);
        let spawned = std::thread::Builder::new()
            .name("scr-protect-rx".into())
            .spawn(move || read_frames(r, m, &ib));
        match spawned {
            Ok(h) => readers.push(h),
            // (the member's connection then counts as closed: its services fail, and
            // the set settles that as a failure of the call)
            Err(e) => {
                // (closed both ways, so that the peer's writes fail rather than fill it)
                if let Some(s) = &streams[m] {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                inbox.deliver(|mail| {
                    mail.closed[m] = Some(format!("no thread to read its connection ({e})"))
                })
            }
        }
    }
    Ok(SocketHost {
        rank,
        size,
        members,
        me,
        peers: streams.into_iter().map(|s| s.map(Mutex::new)).collect(),
        inbox,
        readers,
        timeout,
    })
}

/// Connect to member `m` (world rank `w`, on `host`) at the addresses `to` and prove the
/// token both ways: each address in turn (at most `ATTEMPT` each, so that one that
/// drops connections does not use up the time), again until `deadline`.
fn dial(
    (m, w, host): (u32, u32, &str),
    to: &[SocketAddr],
    token: &[u8; 16],
    (rank, size): (u32, u32),
    deadline: Instant,
) -> Result<TcpStream, String> {
    const ATTEMPT: Duration = Duration::from_secs(2);
    let mut tried: Vec<String> = Vec::new();
    loop {
        for a in to {
            let left = deadline.saturating_duration_since(Instant::now());
            let within = left.clamp(Duration::from_millis(1), ATTEMPT);
            let why = match TcpStream::connect_timeout(a, within) {
                Ok(mut s) => {
                    let nonce = random16()?;
                    match greet::as_dialer(&mut s, token, (rank, m, size), nonce, within) {
                        Ok(()) => return Ok(s),
                        // (another process on that address and port: try the next)
                        Err(why) => why.to_string(),
                    }
                }
                Err(e) => e.to_string(),
            };
            let said = format!("{a}: {why}");
            if !tried.contains(&said) {
                tried.push(said);
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "cannot connect to member {m} (world rank {w}) on host {host} ({})",
                match tried.is_empty() {
                    true => "no address to try".to_string(),
                    false => tried.join("; "),
                }
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Accept the members below `rank` (`world`: each member's world rank), each proving
/// the token within [`HANDSHAKE_WITHIN`]; anything else that connects is refused and
/// said. A member's later connection replaces its earlier one: it gave that one up.
fn accept_lower(
    listener: &TcpListener,
    token: &[u8; 16],
    (rank, size): (u32, u32),
    (deadline, window): (Instant, Duration),
    world: &[u32],
) -> Result<Vec<(u32, TcpStream)>, String> {
    let me = world.get(rank as usize).copied().unwrap_or(u32::MAX);
    let mut got: Vec<(u32, TcpStream)> = Vec::new();
    let refused = |addr: &SocketAddr, why: &str| {
        tracing::warn!(
            "rank {me}: refused a connection from {addr} to the background protection's socket: {why}"
        )
    };
    while got.len() < rank as usize {
        match listener.accept() {
            Ok((mut s, addr)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let within = left.min(HANDSHAKE_WITHIN);
                let nonce = random16()?;
                let from = s
                    .set_nonblocking(false)
                    .map_err(|_| "it could not be read")
                    .and_then(|()| greet::as_acceptor(&mut s, token, (rank, size), nonce, within));
                match from {
                    Ok(f) => {
                        got.retain(|(m, _)| *m != f);
                        got.push((f, s));
                    }
                    Err(why) => refused(&addr, why),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (0..rank)
                        .filter(|f| got.iter().all(|(m, _)| m != f))
                        .map(|f| {
                            let w = world.get(f as usize).copied().unwrap_or(u32::MAX);
                            format!("{f} (world rank {w})")
                        })
                        .collect();
                    return Err(format!(
                        "member(s) {} did not connect within {} s",
                        missing.join(", "),
                        window.as_secs_f64()
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(format!("cannot accept connections: {e}")),
        }
    }
    Ok(got)
}

/// [`greet::as_dialer`] for the tests.
#[cfg(test)]
pub(super) fn tests_greet(
    s: &mut TcpStream,
    token: &[u8; 16],
    ends: (u32, u32, u32),
) -> Result<(), &'static str> {
    greet::as_dialer(s, token, ends, [3u8; 16], Duration::from_secs(5))
}

/// [`accept_lower`] for the tests: the members accepted.
#[cfg(test)]
pub(super) fn tests_accept(
    listener: &TcpListener,
    token: &[u8; 16],
    (rank, size): (u32, u32),
    within: Duration,
) -> Result<Vec<u32>, String> {
    let world: Vec<u32> = (0..size).collect();
    accept_lower(
        listener,
        token,
        (rank, size),
        (Instant::now() + within, within),
        &world,
    )
    .map(|got| got.into_iter().map(|(m, _)| m).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address reads back as written (at most `MAX_IPS` interfaces and `MAX_NAME`
    /// bytes of name), and its candidates come in the order that reaches a peer
    /// soonest: loopback on the same host only, the interfaces, the name.
    #[test]
    fn addresses_round_trip_and_are_tried_in_order() {
        let a = Address {
            port: 4711,
            ips: vec![
                IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
                IpAddr::V6("2001:db8::7".parse().unwrap()),
            ],
            host: "node-17.invalid".into(),
        };
        assert_eq!(Address::decode(&a.encode()), a);
        let long = Address {
            ips: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)); 20],
            host: "h".repeat(200),
            ..a.clone()
        };
        let back = Address::decode(&long.encode());
        assert_eq!((back.ips.len(), back.host.len()), (MAX_IPS, MAX_NAME));
        let show = |v: Vec<SocketAddr>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            show(a.candidates("elsewhere")),
            ["10.1.2.3:4711", "[2001:db8::7]:4711"]
        );
        assert_eq!(
            show(a.candidates("node-17.invalid")),
            [
                "127.0.0.1:4711",
                "[::1]:4711",
                "10.1.2.3:4711",
                "[2001:db8::7]:4711"
            ]
        );
    }
}
