//! The greeting on each of a set's connections: both ends prove that they know the set's
//! token without sending it (HMAC-SHA256 over both ends' fresh nonces, who dials whom
//! and the set's size), so a process that answers on a wrong address learns nothing it
//! could use, and a connection from one that does not know the token is refused.
//!
//! 1. The dialing member sends a hello: magic, its member number, the member it calls,
//!    the set's size, a nonce.
//! 2. The accepting member checks it is the member called, in a set of that size, and
//!    answers with its own hello and its proof (over both nonces).
//! 3. The dialing member checks the answer's proof and sends its own.
//! 4. The accepting member checks that proof and sends one byte: accepted.
//!
//! Crates: `hmac` and `sha2` (RustCrypto), rather than a keyed hash of our own.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// The first bytes of a hello.
const MAGIC: &[u8; 4] = b"SCRs";
/// A hello: magic, from, to, size, nonce.
const HELLO: usize = 4 + 4 + 4 + 4 + 16;
/// A proof: HMAC-SHA256.
const PROOF: usize = 32;

/// A connection's ends and its set: (dialing member, accepting member, set size).
type Ends = (u32, u32, u32);

fn hello((from, to, size): Ends, nonce: &[u8; 16]) -> [u8; HELLO] {
    let mut h = [0u8; HELLO];
    h[..4].copy_from_slice(MAGIC);
    h[4..8].copy_from_slice(&from.to_le_bytes());
    h[8..12].copy_from_slice(&to.to_le_bytes());
    h[12..16].copy_from_slice(&size.to_le_bytes());
    h[16..].copy_from_slice(nonce);
    h
}

/// A hello's (from, to, size) and nonce; `None` when it is not one.
fn parse_hello(h: &[u8; HELLO]) -> Option<(Ends, [u8; 16])> {
    let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&h[16..]);
    (&h[..4] == MAGIC).then(|| ((word(4), word(8), word(12)), nonce))
}

/// The keyed hash one end sends (`role`: b"accept" or b"dial").
fn mac(
    token: &[u8; 16],
    role: &[u8],
    (dialer, acceptor, size): Ends,
    nonces: (&[u8; 16], &[u8; 16]),
) -> Hmac<Sha256> {
    // (a key of any length is accepted: this cannot fail)
    let mut m = <Hmac<Sha256>>::new_from_slice(token).expect("HMAC takes any key length");
    m.update(role);
    for w in [dialer, acceptor, size] {
        m.update(&w.to_le_bytes());
    }
    m.update(nonces.0);
    m.update(nonces.1);
    m
}

fn read<const N: usize>(s: &mut TcpStream, within: Duration) -> Result<[u8; N], &'static str> {
    let mut b = [0u8; N];
    s.set_read_timeout(Some(
        within.clamp(Duration::from_millis(1), Duration::from_secs(10)),
    ))
    .and_then(|()| s.read_exact(&mut b))
    .map_err(|_| "it sent no greeting in time")?;
    Ok(b)
}

/// Greet member `to` as member `from` of a set of `size` over `s` (just connected), each
/// read waiting at most `within`: `Ok` once both ends have proven the token.
pub(super) fn as_dialer(
    s: &mut TcpStream,
    token: &[u8; 16],
    ends: Ends,
    nonce: [u8; 16],
    within: Duration,
) -> Result<(), &'static str> {
    let (from, to, size) = ends;
    s.write_all(&hello(ends, &nonce))
        .map_err(|_| "the greeting could not be sent")?;
    let theirs = read::<HELLO>(s, within)?;
    let proof = read::<PROOF>(s, within)?;
    let Some(((f, t, n), their_nonce)) = parse_hello(&theirs) else {
        return Err("it did not answer with a greeting");
    };
    if (f, t, n) != (to, from, size) {
        return Err("another member answered");
    }
    mac(token, b"accept", ends, (&nonce, &their_nonce))
        .verify_slice(&proof)
        .map_err(|_| "its answer did not prove this set's token")?;
    let mine = mac(token, b"dial", ends, (&nonce, &their_nonce))
        .finalize()
        .into_bytes();
    s.write_all(&mine)
        .map_err(|_| "the proof could not be sent")?;
    match read::<1>(s, within)? {
        [1] => Ok(()),
        _ => Err("it did not accept"),
    }
}

/// Greet a connection just accepted by member `to` of a set of `size`, each read waiting
/// at most `within`: the member it comes from (one below `to`), once both ends have
/// proven the token; why it is refused otherwise.
pub(super) fn as_acceptor(
    s: &mut TcpStream,
    token: &[u8; 16],
    (to, size): (u32, u32),
    nonce: [u8; 16],
    within: Duration,
) -> Result<u32, &'static str> {
    let theirs = read::<HELLO>(s, within)?;
    let Some(((from, t, n), their_nonce)) = parse_hello(&theirs) else {
        return Err("it sent no greeting of this library");
    };
    if t != to || n != size {
        return Err("it called another member or set");
    }
    if from >= to {
        return Err("it claimed a member that this one connects to, not the other way");
    }
    let ends = (from, to, size);
    let mut answer = hello((to, from, size), &nonce).to_vec();
    answer.extend_from_slice(
        &mac(token, b"accept", ends, (&their_nonce, &nonce))
            .finalize()
            .into_bytes(),
    );
    s.write_all(&answer)
        .map_err(|_| "the answer to it could not be written")?;
    let proof = read::<PROOF>(s, within)?;
    mac(token, b"dial", ends, (&their_nonce, &nonce))
        .verify_slice(&proof)
        .map_err(|_| "it did not prove this set's token")?;
    s.write_all(&[1])
        .map_err(|_| "the answer to it could not be written")?;
    Ok(from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const WITHIN: Duration = Duration::from_secs(5);

    /// A dialer greeting with `dial` against an acceptor of member 1 of 3 with `accept`:
    /// what each end returns.
    fn greet(
        dial: impl FnOnce(&mut TcpStream) -> Result<(), &'static str> + Send + 'static,
        accept: [u8; 16],
    ) -> (Result<(), &'static str>, Result<u32, &'static str>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let d = std::thread::spawn(move || dial(&mut TcpStream::connect(at).unwrap()));
        let (mut s, _) = l.accept().unwrap();
        let a = as_acceptor(&mut s, &accept, (1, 3), [9u8; 16], WITHIN);
        drop(s);
        (d.join().unwrap(), a)
    }

    /// The same token on both ends: both accept, the acceptor learns who called.
    #[test]
    fn the_same_token_on_both_ends_connects() {
        let (d, a) = greet(
            |s| as_dialer(s, &[5; 16], (0, 1, 3), [1; 16], WITHIN),
            [5; 16],
        );
        assert_eq!((d, a), (Ok(()), Ok(0)));
    }

    /// Another token, another member or set called, or a proof replayed from an earlier
    /// greeting (other nonces): refused on both ends, with the reason.
    #[test]
    fn a_wrong_token_a_wrong_call_or_a_replayed_proof_is_refused() {
        let (d, a) = greet(
            |s| as_dialer(s, &[6; 16], (0, 1, 3), [1; 16], WITHIN),
            [5; 16],
        );
        assert_eq!(d, Err("its answer did not prove this set's token"));
        assert_eq!(a, Err("it sent no greeting in time"));
        let (d, a) = greet(
            |s| as_dialer(s, &[5; 16], (0, 2, 3), [1; 16], WITHIN),
            [5; 16],
        );
        assert_eq!(a, Err("it called another member or set"));
        assert!(d.is_err());
        // a proof made for the acceptor's nonce [8; 16] does not pass for its [9; 16]
        let (d, a) = greet(
            |s| {
                s.write_all(&hello((0, 1, 3), &[1; 16])).unwrap();
                let _ = read::<HELLO>(s, WITHIN)?;
                let _ = read::<PROOF>(s, WITHIN)?;
                let stale = mac(&[5; 16], b"dial", (0, 1, 3), (&[1; 16], &[8; 16]));
                s.write_all(&stale.finalize().into_bytes()).unwrap();
                read::<1>(s, WITHIN).map(|_| ())
            },
            [5; 16],
        );
        assert_eq!(a, Err("it did not prove this set's token"));
        assert!(d.is_err());
    }
}
