//! Small collective helpers built on the host services.

use crate::abi::ReduceOp;
use crate::error::{ErrorCode, PluginError, PluginResult};
use crate::host::Host;

/// The first local failure of a collective operation. A member that fails (a file it
/// cannot read, say) must keep taking part, or the others wait forever for its messages;
/// it notes the failure, goes on with neutral data, and [`Failures::agree`] turns the
/// outcome into the same result on every member at the end.
#[derive(Debug, Default)]
pub struct Failures(Option<PluginError>);

impl Failures {
    /// No failure yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value, or `None` after remembering the error (the first one is kept).
    pub fn note<T>(&mut self, r: PluginResult<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.get_or_insert(e);
                None
            }
        }
    }

    /// Whether nothing failed here.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// `Ok` on every member only if no member failed; a failed member returns its own
    /// error, the others say that `what` failed elsewhere.
    pub fn agree(self, host: &Host<'_>, what: &str) -> PluginResult<()> {
        let ok = host.all_agree(self.0.is_none())?;
        match (ok, self.0) {
            (true, _) => Ok(()),
            (false, Some(e)) => Err(e),
            (false, None) => Err(PluginError::new(
                ErrorCode::IO,
                format!("{what} failed on another member of the set"),
            )),
        }
    }
}

/// Every member's `flag`, indexed by member (one all-reduce per 64 members).
pub fn gather_flags(host: &Host<'_>, flag: bool) -> PluginResult<Vec<bool>> {
    let n = host.size() as usize;
    let me = host.rank() as usize;
    let mut out = Vec::with_capacity(n);
    for word in 0..n.div_ceil(64) {
        let mine = if flag && me / 64 == word {
            1u64 << (me % 64)
        } else {
            0
        };
        let bits = host.all_reduce(mine, ReduceOp::Sum)?;
        for b in 0..64.min(n - word * 64) {
            out.push(bits & (1 << b) != 0);
        }
    }
    Ok(out)
}

/// Largest piece of a byte string in one message. The receiver grows its buffer one
/// piece at a time, as the bytes arrive, so a length prefix a peer sent (damaged, or
/// hostile) can make it allocate at most one piece more than it was really sent.
/// (Small in unit tests, so that several pieces are cheap to exercise.)
pub const PIECE: usize = if cfg!(test) { 1 << 10 } else { 64 << 20 };

/// Number of [`PIECE`]s a byte string of `len` bytes is sent in (one for an empty one).
fn piece_count(len: usize) -> usize {
    len.div_ceil(PIECE).max(1)
}

/// The byte range of piece `i` of a string of `len` bytes.
fn piece(len: usize, i: usize) -> std::ops::Range<usize> {
    let start = (i * PIECE).min(len);
    start..(start + PIECE).min(len)
}

/// A length prefix received from member `src` as a `usize`, or an error.
fn received_len(len: [u8; 8], src: u32) -> PluginResult<usize> {
    let len = u64::from_le_bytes(len);
    usize::try_from(len).map_err(|_| {
        PluginError::communication(format!(
            "member {src} announced {len} bytes, more than this process can address"
        ))
    })
}

/// Make room for piece `i` of a `len`-byte string at the end of `buf`, without aborting
/// the process when the memory is not there.
fn grow(buf: &mut Vec<u8>, len: usize, i: usize, src: u32) -> PluginResult<std::ops::Range<usize>> {
    let range = piece(len, i);
    buf.try_reserve_exact(range.len()).map_err(|e| {
        PluginError::new(
            ErrorCode::IO,
            format!("cannot hold the {len} bytes member {src} is sending: {e}"),
        )
    })?;
    buf.resize(range.end, 0);
    Ok(range)
}

/// Send a byte string of any length to `dest` (length first, then in [`PIECE`]s).
pub fn send_bytes(host: &Host<'_>, dest: u32, tag: u32, data: &[u8]) -> PluginResult<()> {
    host.send(dest, tag, &(data.len() as u64).to_le_bytes())?;
    for i in 0..piece_count(data.len()) {
        host.send(dest, tag, &data[piece(data.len(), i)])?;
    }
    Ok(())
}

/// Receive a byte string sent with [`send_bytes`]. Memory grows with the bytes that
/// arrive, never with the announced length alone.
pub fn recv_bytes(host: &Host<'_>, src: u32, tag: u32) -> PluginResult<Vec<u8>> {
    let mut len = [0u8; 8];
    host.recv(src, tag, &mut len)?;
    let len = received_len(len, src)?;
    let mut buf = Vec::new();
    for i in 0..piece_count(len) {
        let range = grow(&mut buf, len, i, src)?;
        host.recv(src, tag, &mut buf[range])?;
    }
    Ok(buf)
}

/// Exchange byte strings of any length: send `data` to `dest`, receive from `src`. Every
/// member must call it, with `dest`s forming a permutation (a ring, pairs). Memory grows
/// with the bytes that arrive, as in [`recv_bytes`].
pub fn sendrecv_bytes(
    host: &Host<'_>,
    dest: u32,
    data: &[u8],
    src: u32,
    tag: u32,
) -> PluginResult<Vec<u8>> {
    let mut len = [0u8; 8];
    host.sendrecv(dest, &(data.len() as u64).to_le_bytes(), src, &mut len, tag)?;
    let len = received_len(len, src)?;
    let (sends, recvs) = (piece_count(data.len()), piece_count(len));
    let mut buf = Vec::new();
    // Piece i goes out and comes in at step i. A member with nothing left to receive
    // only sends (its destination still receives at that step) and one with nothing left
    // to send only receives, so every chain of waits ends at a member that only receives.
    for i in 0..sends.max(recvs) {
        let out = (i < sends).then(|| &data[piece(data.len(), i)]);
        if i < recvs {
            let range = grow(&mut buf, len, i, src)?;
            match out {
                Some(out) => host.sendrecv(dest, out, src, &mut buf[range], tag)?,
                None => host.recv(src, tag, &mut buf[range])?,
            }
        } else if let Some(out) = out {
            host.send(dest, tag, out)?;
        }
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inproc;

    #[test]
    fn flags_and_variable_length_exchanges() {
        let groups: Vec<String> = (0..70).map(|i| format!("n{i}")).collect();
        let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
        let out = inproc::run(&refs, |host| {
            let flags = gather_flags(host, host.rank() % 3 == 0).unwrap();
            let got = sendrecv_bytes(
                host,
                host.right(1),
                &vec![host.rank() as u8; host.rank() as usize],
                host.left(1),
                5,
            )
            .unwrap();
            (flags, got)
        });
        for (rank, (flags, got)) in out.iter().enumerate() {
            assert_eq!(flags.len(), 70);
            assert!(flags.iter().enumerate().all(|(i, f)| *f == (i % 3 == 0)));
            let left = (rank + 69) % 70;
            assert_eq!(got, &vec![left as u8; left]);
        }
    }

    #[test]
    fn a_huge_length_prefix_is_an_error_not_an_allocation() {
        // member 0 announces 2^62 bytes and sends 5: the receiver must fail on the first
        // piece's size instead of reserving (or zeroing) 4 EiB, which aborts the process
        let world = inproc::World::new(&["a", "b"], std::time::Duration::from_secs(5));
        let out = inproc::run_in(&world, |host| {
            if host.rank() == 0 {
                host.send(1, 3, &(1u64 << 62).to_le_bytes())?;
                host.send(1, 3, b"hello")?;
                Ok(Vec::new())
            } else {
                recv_bytes(host, 0, 3)
            }
        });
        let err = out[1].as_ref().unwrap_err();
        assert_eq!(
            err.message(),
            format!("member 1 expected {PIECE} bytes from member 0 (tag 3) but 5 arrived")
        );
    }

    #[test]
    fn strings_longer_than_a_piece_cross_in_pieces() {
        // members of a ring of 3 send 0, PIECE + 1 and 2 * PIECE + 3 bytes
        let lens = [0, PIECE + 1, 2 * PIECE + 3];
        let out = inproc::run(&["a", "b", "c"], |host| {
            let me = host.rank() as usize;
            let data: Vec<u8> = (0..lens[me]).map(|i| (i % 251) as u8 ^ me as u8).collect();
            let got = sendrecv_bytes(host, host.right(1), &data, host.left(1), 4)?;
            send_bytes(host, host.right(1), 5, &data)?;
            let again = recv_bytes(host, host.left(1), 5)?;
            Ok::<_, PluginError>((
                got == again,
                got.len(),
                got.iter()
                    .enumerate()
                    .all(|(i, &b)| b == (i % 251) as u8 ^ host.left(1) as u8),
            ))
        });
        for (rank, o) in out.into_iter().enumerate() {
            let left = (rank + 2) % 3;
            assert_eq!(o.unwrap(), (true, lens[left], true), "member {rank}");
        }
    }
}
