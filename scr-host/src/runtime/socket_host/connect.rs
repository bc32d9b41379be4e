//! Making a set's mesh of connections (collective over the set, through its host): a
//! token from member 0, every member's listening address, each member connecting to the
//! members above it and accepting those below, both ends proving the token; agreed.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abi_stable::std_types::RSliceMut;
use scr_plugin::ReduceOp;

use super::{read_frames, Inbox, SocketHost};
use crate::runtime::world::{Members, SetHost};

/// The first bytes of a handshake, each way.
const MAGIC: &[u8; 4] = b"SCRs";
/// A handshake: magic, token, from, to, set size.
const HANDSHAKE: usize = 4 + 16 + 4 + 4 + 4;
/// A member's address as broadcast: port (2), host name length (1), host name.
const ADDRESS: usize = 256;

/// A handshake from member `from` to member `to` of a set of `size`.
fn handshake(token: &[u8; 16], from: u32, to: u32, size: u32) -> [u8; HANDSHAKE] {
    let mut h = [0u8; HANDSHAKE];
    h[..4].copy_from_slice(MAGIC);
    h[4..20].copy_from_slice(token);
    h[20..24].copy_from_slice(&from.to_le_bytes());
    h[24..28].copy_from_slice(&to.to_le_bytes());
    h[28..].copy_from_slice(&size.to_le_bytes());
    h
}

/// Read a handshake from `s` (within `within`): the member it comes from, when it
/// carries this set's token and is meant for member `to`; `None` otherwise.
fn read_handshake(
    s: &mut TcpStream,
    token: &[u8; 16],
    to: u32,
    size: u32,
    within: Duration,
) -> Option<u32> {
    // (a connection that says nothing holds up the accepting member at most this long)
    let within = within.clamp(Duration::from_millis(1), Duration::from_secs(10));
    s.set_read_timeout(Some(within)).ok()?;
    let mut h = [0u8; HANDSHAKE];
    s.read_exact(&mut h).ok()?;
    let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let from = word(20);
    (&h[..4] == MAGIC && &h[4..20] == token && word(24) == to && word(28) == size).then_some(from)
}

/// This host's name, as its peers resolve it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && s.len() < ADDRESS - 3)
        .unwrap_or_else(|| "localhost".into())
}

/// A fresh token: 16 bytes from the kernel's random source.
fn new_token() -> Result<[u8; 16], String> {
    let mut t = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut t))
        .map_err(|e| format!("no random token (/dev/urandom: {e})"))?;
    Ok(t)
}

/// A listener on every interface, IPv6 and IPv4 where the kernel has both.
fn listen() -> Result<TcpListener, String> {
    TcpListener::bind("[::]:0")
        .or_else(|_| TcpListener::bind("0.0.0.0:0"))
        .map_err(|e| format!("cannot listen on a TCP port: {e}"))
}

/// Where member `peer` (`host`, `port`) is reached from here: the loopback address when
/// it runs on this host, else what its name resolves to.
fn addresses(host: &str, port: u16, mine: &str) -> Vec<SocketAddr> {
    if host == mine {
        return vec![
            SocketAddr::from(([127, 0, 0, 1], port)),
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)),
        ];
    }
    let mut all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    all.sort_by_key(|a| !a.is_ipv4());
    all
}

/// One member's part of a collective step that may fail: whether every member's part
/// succeeded (agreed), and, when not, the error of the lowest member that failed (its own
/// text on that member, a pointer to its log on the others).
fn agreed(set: &dyn SetHost, mine: Result<(), String>, step: &str) -> Result<(), String> {
    let rank = set.rank();
    let flag = if mine.is_err() {
        u64::from(rank)
    } else {
        u64::MAX
    };
    let first = set
        .all_reduce_u64(flag, ReduceOp::Min)
        .into_result()
        .map_err(|e| format!("{step}: the set could not agree: {e}"))?;
    if first == u64::MAX {
        return Ok(());
    }
    let m = u32::try_from(first).unwrap_or(u32::MAX);
    if let Err(e) = &mine {
        // (the others' errors point here)
        tracing::warn!("rank {}: {step}: {e}", set.world_rank(rank));
    }
    match mine {
        Err(e) if m == rank => Err(format!("{step}: {e}")),
        _ => Err(format!(
            "{step}: member {m} (world rank {}) could not (its log says why)",
            set.world_rank(m)
        )),
    }
}

/// Connect this member with every other of `set`'s (collective over the set, on a
/// thread that may use `set`'s services: the application's). `me` is this process's
/// world rank; `timeout` bounds how long a member waits for another to connect;
/// `injected` (the fault suite's) makes this member fail to listen, with that reason.
pub(crate) fn connect(
    set: &dyn SetHost,
    me: u32,
    timeout: Duration,
    injected: Option<&str>,
) -> Result<SocketHost, String> {
    let (rank, size) = (set.rank(), set.size());
    let n = size as usize;
    let members = Members::new(
        (0..size).map(|m| set.world_rank(m)).collect(),
        (0..size)
            .map(|m| set.failure_group(m).into_string())
            .collect(),
    );
    let coll = |e: scr_plugin::PluginError| format!("the set's exchange failed: {e}");
    // the token: member 0's, to every member
    let mut token = [0u8; 16];
    let made = match rank {
        0 => new_token().map(|t| token = t),
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
    let name = host_name();
    let mut mine = [0u8; ADDRESS];
    if let Ok(l) = &listener {
        let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
        mine[..2].copy_from_slice(&port.to_le_bytes());
        mine[2] = name.len() as u8;
        mine[3..3 + name.len()].copy_from_slice(name.as_bytes());
    }
    let mut hosts = Vec::with_capacity(n);
    for m in 0..size {
        let mut buf = if m == rank { mine } else { [0u8; ADDRESS] };
        set.broadcast(m, RSliceMut::from_mut_slice(&mut buf))
            .into_result()
            .map_err(coll)?;
        let port = u16::from_le_bytes([buf[0], buf[1]]);
        let len = usize::from(buf[2]).min(ADDRESS - 3);
        hosts.push((String::from_utf8_lossy(&buf[3..3 + len]).into_owned(), port));
    }
    let listener = listener.and_then(|l| {
        l.set_nonblocking(true)
            .map_err(|e| format!("cannot poll the listening socket: {e}"))?;
        Ok(l)
    });
    let listening = listener.as_ref().map(|_| ()).map_err(Clone::clone);
    agreed(set, listening, "listening for the set's connections")?;
    let Ok(listener) = listener else {
        return Err("not listening".into());
    };
    // members above connect to those below; each end proves the token
    let deadline = Instant::now() + timeout;
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let made = std::thread::scope(|scope| {
        let dialed = scope.spawn(|| {
            let mut out = Vec::new();
            for m in (rank + 1)..size {
                let (host, port) = &hosts[m as usize];
                out.push((
                    m,
                    dial(m, host, *port, &name, &token, (rank, size), deadline)?,
                ));
            }
            Ok::<_, String>(out)
        });
        let accepted = accept_lower(&listener, &token, (rank, size), deadline, me);
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
            return Err(e);
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
            Err(e) => inbox.deliver(|mail| {
                mail.closed[m] = Some(format!("no thread to read its connection ({e})"))
            }),
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

/// Connect to member `m` at `host`:`port` and prove the token both ways.
fn dial(
    m: u32,
    host: &str,
    port: u16,
    mine: &str,
    token: &[u8; 16],
    (rank, size): (u32, u32),
    deadline: Instant,
) -> Result<TcpStream, String> {
    let to = addresses(host, port, mine);
    let mut last = format!("{host} does not resolve");
    loop {
        for a in &to {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = TcpStream::connect_timeout(a, left.max(Duration::from_millis(1)))
                .and_then(|mut s| {
                    s.write_all(&handshake(token, rank, m, size))?;
                    Ok(s)
                });
            match attempt {
                Ok(mut s) => {
                    return match read_handshake(&mut s, token, rank, size, left) {
                        Some(from) if from == m => Ok(s),
                        _ => Err(format!(
                            "member {m} at {a} did not answer with the set's token"
                        )),
                    }
                }
                Err(e) => last = format!("{a}: {e}"),
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "cannot connect to member {m} at {host}:{port} ({last})"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Accept the members below `rank`, each proving the token; anything else that connects
/// is refused and said.
fn accept_lower(
    listener: &TcpListener,
    token: &[u8; 16],
    (rank, size): (u32, u32),
    deadline: Instant,
    me: u32,
) -> Result<Vec<(u32, TcpStream)>, String> {
    let mut got: Vec<(u32, TcpStream)> = Vec::new();
    while got.len() < rank as usize {
        match listener.accept() {
            Ok((mut s, addr)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let from = s
                    .set_nonblocking(false)
                    .ok()
                    .and_then(|()| read_handshake(&mut s, token, rank, size, left))
                    .filter(|&f| f < rank && got.iter().all(|(m, _)| *m != f));
                match from {
                    Some(f) if s.write_all(&handshake(token, rank, f, size)).is_ok() => {
                        got.push((f, s))
                    }
                    _ => tracing::warn!(
                        "rank {me}: refused a connection from {addr} to the background protection's socket: it did not present this set's token"
                    ),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<String> = (0..rank)
                        .filter(|f| got.iter().all(|(m, _)| m != f))
                        .map(|f| f.to_string())
                        .collect();
                    return Err(format!(
                        "member(s) {} did not connect in time (abort_timeout)",
                        missing.join(", ")
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(format!("cannot accept connections: {e}")),
        }
    }
    Ok(got)
}

/// A handshake, for the tests.
#[cfg(test)]
pub(super) fn tests_handshake(token: &[u8; 16], from: u32, to: u32, size: u32) -> [u8; HANDSHAKE] {
    handshake(token, from, to, size)
}

/// [`accept_lower`] for the tests: the members accepted.
#[cfg(test)]
pub(super) fn tests_accept(
    listener: &TcpListener,
    token: &[u8; 16],
    (rank, size): (u32, u32),
    within: Duration,
) -> Result<Vec<u32>, String> {
    accept_lower(listener, token, (rank, size), Instant::now() + within, 0)
        .map(|got| got.into_iter().map(|(m, _)| m).collect())
}
