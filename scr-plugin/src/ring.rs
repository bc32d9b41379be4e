//! Streaming bytes around the ring of a redundancy set, one piece at a time.
//!
//! Every shipped scheme moves a member's logical file (see [`lofi`](crate::lofi)) to
//! other members of its set in pieces of `buffer_size` bytes, so that memory stays
//! bounded whatever the checkpoint's size. The bookkeeping is the same each time and easy
//! to get wrong: both sides of every message must agree on its length (a zero-length
//! piece still has to be sent when one side has fewer bytes, or the other waits forever),
//! every member must take the same number of steps, and a member whose disk fails must
//! keep taking part with neutral bytes (zeros) and report at the end through
//! [`Failures`], or the others hang. [`Ring`] does that bookkeeping; the scheme writes
//! only the per-piece arithmetic, as closures:
//!
//! - `read(offset, buf)` (or `read(slot, offset, buf)`): fill `buf` with this member's
//!   bytes at `offset`. An error is noted in the [`Failures`] and the piece is sent as
//!   zeros; a closure with nothing to read fills `buf` with zeros itself.
//! - `combine(acc, incoming)`: fold a received piece into this member's own (XOR parity:
//!   a byte-wise XOR; a Galois-field code: a multiply-add).
//! - `write(offset, bytes)` (or `deliver(slot, offset, bytes)`): store received bytes.
//!   An error is noted; later pieces are still received (and offered to `write`).
//!
//! The patterns:
//!
//! - [`Ring::shift`]: every member streams its bytes to the member `d` places to its
//!   right and receives those of the member `d` places to its left (PARTNER's copies).
//!   Lengths may differ; they are exchanged first.
//! - [`Ring::send`] / [`Ring::recv`]: one member streams a known length to another
//!   (giving a lost member its files back).
//! - [`Ring::reduce_scatter`]: each member's `n` slots are combined across the set and
//!   member `j` ends with the combination of every member's slot `j` (XOR's parity).
//! - [`Ring::reduce_to`]: the combination of every other member's slot `j`, for every
//!   `j`, delivered to one member (XOR's rebuild of a lost member).
//! - [`Ring::exchange`] and [`pieces`]: the building blocks, for patterns the above do
//!   not cover (RS's shifts of `s + j` places with optional sides).
//!
//! [`Ring::largest`], [`Ring::shift`], [`Ring::reduce_scatter`] and [`Ring::reduce_to`]
//! are collective over the set; [`Ring::send`]/[`Ring::recv`] and [`Ring::exchange`]
//! pair up two members. One `Ring` uses one message tag; members call its methods in
//! the same order with the arguments each method says must agree. Messages are the host's point-to-point
//! services, so the pattern is the same under MPI and [`inproc`](crate::inproc).
//!
//! ```
//! use scr_plugin::{collect::Failures, inproc, ring::Ring};
//!
//! // each of 3 members streams (rank + 1) * 5 bytes to its right neighbour, 4 at a time
//! let got = inproc::run(&["a", "b", "c"], |host| {
//!     let mine: Vec<u8> = vec![host.rank() as u8; (host.rank() as usize + 1) * 5];
//!     let mut failures = Failures::new();
//!     let mut ring = Ring::new(host, 9, 4);
//!     let largest = ring.largest(mine.len() as u64).unwrap();
//!     let mut theirs = Vec::new();
//!     let len = ring
//!         .shift(1, mine.len() as u64, largest, &mut failures,
//!             |at, buf| { buf.copy_from_slice(&mine[at as usize..][..buf.len()]); Ok(()) },
//!             |_, bytes| { theirs.extend_from_slice(bytes); Ok(()) })
//!         .unwrap();
//!     failures.agree(host, "copy").unwrap();
//!     (len, theirs)
//! });
//! assert_eq!(got[0], (15, vec![2; 15])); // member 0 received member 2's bytes
//! assert_eq!(got[1], (5, vec![0; 5]));
//! ```

use crate::collect::Failures;
use crate::error::PluginResult;
use crate::host::Host;
use crate::lofi::{restore_metadata, LogicalFile};
use crate::verify::verify_files;
use crate::{FileMeta, ReduceOp};

/// The pieces of `len` bytes, `piece` bytes at a time: `(offset, length)`, the last one
/// shorter; none for `len == 0`.
pub fn pieces(len: u64, piece: usize) -> impl Iterator<Item = (u64, usize)> {
    let piece = piece.max(1) as u64;
    (0..len.div_ceil(piece)).map(move |i| {
        let at = i * piece;
        (at, piece.min(len - at) as usize)
    })
}

/// Fill `buf` with zeros: what a `read` closure with nothing to read there returns (a
/// zero slot, or a file that failed to open, its error already noted).
pub fn zeros(buf: &mut [u8]) -> PluginResult<()> {
    buf.fill(0);
    Ok(())
}

/// Length of piece `step` of a `len`-byte stream cut in `piece`-byte pieces: 0 past its
/// end (a stream shorter than its peer's still takes every step, with empty pieces).
fn piece_len(len: u64, step: u64, piece: usize) -> usize {
    len.saturating_sub(step * piece as u64).min(piece as u64) as usize
}

/// Run `read` into `buf`; on an error note it and send zeros instead.
fn read_or_zero(
    failures: &mut Failures,
    buf: &mut [u8],
    read: impl FnOnce(&mut [u8]) -> PluginResult<()>,
) {
    if failures.note(read(buf)).is_none() {
        buf.fill(0);
    }
}

/// One member's side of the streams over its set: the host, the message tag and two
/// buffers of one piece each (allocated at the first stream, reused for every piece;
/// [`Ring::exchange`] alone allocates nothing).
pub struct Ring<'a, 'h> {
    host: &'a Host<'h>,
    tag: u32,
    piece: usize,
    out: Vec<u8>,
    inc: Vec<u8>,
}

impl<'a, 'h> Ring<'a, 'h> {
    /// Streams over `host`'s set with message tag `tag`, `piece` bytes (at least 1) at a
    /// time: the scheme's `buffer_size`, which bounds the memory a stream takes.
    pub fn new(host: &'a Host<'h>, tag: u32, piece: usize) -> Self {
        let piece = piece.max(1);
        Ring {
            host,
            tag,
            piece,
            out: Vec::new(),
            inc: Vec::new(),
        }
    }

    /// Allocate the two piece buffers if a stream has not yet.
    fn buffers(&mut self) {
        if self.out.len() < self.piece {
            self.out = vec![0u8; self.piece];
            self.inc = vec![0u8; self.piece];
        }
    }

    /// The piece size.
    pub fn piece(&self) -> usize {
        self.piece
    }

    /// The largest `len` in the set (one all-reduce): what [`Ring::shift`] needs, so that
    /// every member takes the same number of steps. Compute it once for several shifts.
    pub fn largest(&self, len: u64) -> PluginResult<u64> {
        self.host.all_reduce(len, ReduceOp::Max)
    }

    /// Stream this member's `len` bytes (from `read`) to the member `d` places to its
    /// right, and hand the bytes of the member `d` places to its left to `write`, in
    /// pieces; returns the left member's length. Collective: every member calls it with
    /// the same `d` and `largest` ([`Ring::largest`] of the lengths), so every member
    /// takes the same `ceil(largest / piece)` steps; the lengths are exchanged first (one
    /// 8-byte message), so each receive knows its size.
    pub fn shift(
        &mut self,
        d: u32,
        len: u64,
        largest: u64,
        failures: &mut Failures,
        mut read: impl FnMut(u64, &mut [u8]) -> PluginResult<()>,
        mut write: impl FnMut(u64, &[u8]) -> PluginResult<()>,
    ) -> PluginResult<u64> {
        self.buffers();
        let (host, tag, piece) = (self.host, self.tag, self.piece);
        let (to, from) = (host.right(d), host.left(d));
        let mut theirs = [0u8; 8];
        host.sendrecv(to, &len.to_le_bytes(), from, &mut theirs, tag)?;
        let their_len = u64::from_le_bytes(theirs);
        for step in 0..largest.div_ceil(piece as u64) {
            let at = step * piece as u64;
            let s = piece_len(len, step, piece);
            let r = piece_len(their_len, step, piece);
            if s > 0 {
                read_or_zero(failures, &mut self.out[..s], |b| read(at, b));
            }
            host.sendrecv(to, &self.out[..s], from, &mut self.inc[..r], tag)?;
            if r > 0 {
                failures.note(write(at, &self.inc[..r]));
            }
        }
        Ok(their_len)
    }

    /// Stream `len` bytes (from `read`) to member `dest`, which calls [`Ring::recv`]
    /// with the same `len`. Read errors are noted and zeros sent in their place.
    pub fn send(
        &mut self,
        dest: u32,
        len: u64,
        failures: &mut Failures,
        mut read: impl FnMut(u64, &mut [u8]) -> PluginResult<()>,
    ) -> PluginResult<()> {
        self.buffers();
        for (at, n) in pieces(len, self.piece) {
            read_or_zero(failures, &mut self.out[..n], |b| read(at, b));
            self.host.send(dest, self.tag, &self.out[..n])?;
        }
        Ok(())
    }

    /// Receive the `len` bytes member `src` streams with [`Ring::send`], handing them to
    /// `write` piece by piece. Write errors are noted; every piece is still received.
    pub fn recv(
        &mut self,
        src: u32,
        len: u64,
        failures: &mut Failures,
        mut write: impl FnMut(u64, &[u8]) -> PluginResult<()>,
    ) -> PluginResult<()> {
        self.buffers();
        for (at, n) in pieces(len, self.piece) {
            self.host.recv(src, self.tag, &mut self.inc[..n])?;
            failures.note(write(at, &self.inc[..n]));
        }
        Ok(())
    }

    /// A pipelined ring reduce-scatter over `n` slots of `chunk` bytes: member `j` ends
    /// with the combination of every member's slot `j`. For each piece, in steps
    /// `1..n`, a member reads its slot `me - step`, combines what its left neighbour
    /// sent (from step 2 on) and sends it right; what arrives in the last step is its
    /// own slot's result, handed to `write(offset, bytes)`. Every data byte is read once
    /// and every result byte written once. Collective, with the same `chunk` everywhere.
    pub fn reduce_scatter(
        &mut self,
        chunk: u64,
        failures: &mut Failures,
        mut read: impl FnMut(u32, u64, &mut [u8]) -> PluginResult<()>,
        mut combine: impl FnMut(&mut [u8], &[u8]),
        mut write: impl FnMut(u64, &[u8]) -> PluginResult<()>,
    ) -> PluginResult<()> {
        self.buffers();
        let host = self.host;
        let (n, me) = (host.size(), host.rank());
        if n < 2 {
            return Ok(());
        }
        for (at, p) in pieces(chunk, self.piece) {
            for step in 1..n {
                let slot = (me + n - step) % n;
                let buf = &mut self.out[..p];
                read_or_zero(failures, buf, |b| read(slot, at, b));
                if step > 1 {
                    combine(buf, &self.inc[..p]);
                }
                host.sendrecv(
                    host.right(1),
                    buf,
                    host.left(1),
                    &mut self.inc[..p],
                    self.tag,
                )?;
            }
            failures.note(write(at, &self.inc[..p]));
        }
        Ok(())
    }

    /// A pipelined reduction along the ring to member `root`: for each piece and each
    /// slot `0..n`, the members from `root + 1` round to `root - 1` each read their slot
    /// (`read(slot, offset, buf)`), combine what their left neighbour sent and pass it
    /// right, and `root` receives the combination of everyone else's slot, handed to
    /// `deliver(slot, offset, bytes)`. `root` reads nothing (it lost its data: XOR
    /// rebuilds it from the others). Collective, with the same `root` and `chunk`.
    pub fn reduce_to(
        &mut self,
        root: u32,
        chunk: u64,
        failures: &mut Failures,
        mut read: impl FnMut(u32, u64, &mut [u8]) -> PluginResult<()>,
        mut combine: impl FnMut(&mut [u8], &[u8]),
        mut deliver: impl FnMut(u32, u64, &[u8]) -> PluginResult<()>,
    ) -> PluginResult<()> {
        self.buffers();
        let host = self.host;
        let (n, me) = (host.size(), host.rank());
        let k = (me + n - root) % n; // position along the chain root+1 .. root-1, root
        for (at, p) in pieces(chunk, self.piece) {
            for slot in 0..n {
                if me == root {
                    host.recv(host.left(1), self.tag, &mut self.inc[..p])?;
                    failures.note(deliver(slot, at, &self.inc[..p]));
                    continue;
                }
                let out = &mut self.out[..p];
                read_or_zero(failures, out, |b| read(slot, at, b));
                if k > 1 {
                    host.recv(host.left(1), self.tag, &mut self.inc[..p])?;
                    combine(out, &self.inc[..p]);
                }
                host.send(host.right(1), self.tag, out)?;
            }
        }
        Ok(())
    }

    /// Send `out` to its member, receive `into` from its member, either, both or neither
    /// (one `sendrecv` when both): the two sides of each message must agree that it goes,
    /// so every send meets its receive.
    pub fn exchange(
        &self,
        out: Option<(u32, &[u8])>,
        into: Option<(u32, &mut [u8])>,
    ) -> PluginResult<()> {
        let (host, tag) = (self.host, self.tag);
        match (out, into) {
            (Some((d, out)), Some((s, into))) => host.sendrecv(d, out, s, into, tag),
            (Some((d, out)), None) => host.send(d, tag, out),
            (None, Some((s, into))) => host.recv(s, tag, into),
            (None, None) => Ok(()),
        }
    }
}

/// The end of a rebuild of this member's files (`metas`) written through `lofi`: flush
/// them, then check them against the size and CRC32 the metadata records. Rebuilt bytes
/// that differ (or any failure noted so far) must never look recovered, so on a mismatch
/// the files are deleted; on success their mode and times are restored. Failures are
/// noted, for [`Failures::agree`] to turn into the same outcome on every member.
///
/// The check uses the CRC32 of the bytes `lofi` wrote, computed as they passed
/// ([`LogicalFile::check_written`]): a file written once through `lofi` is not read
/// back. A file it did not write whole exactly once is read.
pub fn finish_rebuild(lofi: Option<LogicalFile>, metas: &[FileMeta], failures: &mut Failures) {
    let Some(mut l) = lofi else {
        // nothing was written through a logical file: check by reading
        if failures.is_empty() && failures.note(verify_files(metas)).is_none() {
            remove_all(metas);
        }
        for m in metas {
            if failures.is_empty() {
                failures.note(restore_metadata(m));
            }
        }
        return;
    };
    failures.note(l.sync());
    if failures.is_empty() && failures.note(l.check_written(metas)).is_none() {
        remove_all(metas);
    }
    if failures.is_empty() {
        failures.note(l.restore_metadata(metas));
    }
}

/// Remove the files of a rebuild that must not look recovered.
fn remove_all(metas: &[FileMeta]) {
    for m in metas {
        let _ = std::fs::remove_file(m.path.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, PluginError};
    use crate::inproc;

    fn bytes(member: u32, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i * 7 + member as usize * 31) as u8)
            .collect()
    }

    #[test]
    fn pieces_cover_the_length_once_and_none_for_empty() {
        assert_eq!(pieces(0, 4).count(), 0);
        assert_eq!(pieces(10, 4).collect::<Vec<_>>(), [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(pieces(8, 4).collect::<Vec<_>>(), [(0, 4), (4, 4)]);
        assert_eq!(pieces(3, 0).collect::<Vec<_>>(), [(0, 1), (1, 1), (2, 1)]);
    }

    #[test]
    fn shift_streams_unequal_and_empty_lengths_at_every_distance() {
        // 4 members with 0, 9, 3 and 17 bytes, pieces of 4: short streams take the same
        // 5 steps as the longest with empty pieces
        let lens = [0usize, 9, 3, 17];
        let out = inproc::run(&["a", "b", "c", "d"], |host| {
            let me = host.rank();
            let mine = bytes(me, lens[me as usize]);
            let mut failures = Failures::new();
            let mut ring = Ring::new(host, 3, 4);
            let largest = ring.largest(mine.len() as u64)?;
            let mut got = Vec::new();
            for d in 1..4 {
                let mut theirs = Vec::new();
                let len = ring.shift(
                    d,
                    mine.len() as u64,
                    largest,
                    &mut failures,
                    |at, b| {
                        b.copy_from_slice(&mine[at as usize..][..b.len()]);
                        Ok(())
                    },
                    |at, b| {
                        assert_eq!(at as usize, theirs.len());
                        theirs.extend_from_slice(b);
                        Ok(())
                    },
                )?;
                got.push((len, theirs));
            }
            failures.agree(host, "shift")?;
            Ok::<_, PluginError>(got)
        });
        for (me, got) in out.into_iter().enumerate() {
            let got = got.unwrap();
            for (i, (len, theirs)) in got.into_iter().enumerate() {
                let from = (me + 4 - (i + 1)) % 4;
                assert_eq!(len, lens[from] as u64, "member {me} d {}", i + 1);
                assert_eq!(theirs, bytes(from as u32, lens[from]));
            }
        }
    }

    #[test]
    fn a_failed_read_sends_zeros_and_every_member_learns_it_failed() {
        let out = inproc::run(&["a", "b", "c"], |host| {
            let me = host.rank();
            let mut failures = Failures::new();
            let mut ring = Ring::new(host, 3, 4);
            let mut theirs = Vec::new();
            ring.shift(
                1,
                6,
                6,
                &mut failures,
                |at, b| {
                    if me == 1 && at == 4 {
                        b.fill(0xff);
                        Err(PluginError::new(ErrorCode::IO, "disk gone"))
                    } else {
                        b.fill(me as u8 + 1);
                        Ok(())
                    }
                },
                |_, b| {
                    theirs.extend_from_slice(b);
                    Ok(())
                },
            )?;
            let outcome = failures
                .agree(host, "copy")
                .map_err(|e| e.message().to_string());
            Ok::<_, PluginError>((theirs, outcome))
        });
        let out: Vec<_> = out.into_iter().map(Result::unwrap).collect();
        assert_eq!(out[2].0, [2, 2, 2, 2, 0, 0]);
        assert_eq!(out[1].1, Err("disk gone".to_string()));
        assert_eq!(
            out[0].1,
            Err("copy failed on another member of the set".to_string())
        );
    }

    #[test]
    fn send_and_recv_pair_up_and_reduce_scatter_and_reduce_to_combine_every_slot() {
        let n = 5u32;
        let chunk = 11u64;
        // member m's slot s: bytes(m * n + s); slot m is zero (XOR's layout)
        let slot = |m: u32, s: u32, at: u64, b: &mut [u8]| {
            if m == s {
                b.fill(0);
            } else {
                b.copy_from_slice(&bytes(m * n + s, chunk as usize)[at as usize..][..b.len()]);
            }
        };
        let xor = |a: &mut [u8], b: &[u8]| a.iter_mut().zip(b).for_each(|(x, y)| *x ^= y);
        let groups = ["a", "b", "c", "d", "e"];
        let out = inproc::run(&groups, |host| {
            let me = host.rank();
            let mut failures = Failures::new();
            let mut ring = Ring::new(host, 5, 3);
            let mut parity = Vec::new();
            ring.reduce_scatter(
                chunk,
                &mut failures,
                |s, at, b| {
                    slot(me, s, at, b);
                    Ok(())
                },
                xor,
                |_, b| {
                    parity.extend_from_slice(b);
                    Ok(())
                },
            )?;
            let mut delivered = vec![vec![]; n as usize];
            ring.reduce_to(
                2,
                chunk,
                &mut failures,
                |s, at, b| {
                    slot(me, s, at, b);
                    Ok(())
                },
                xor,
                |s, _, b| {
                    delivered[s as usize].extend_from_slice(b);
                    Ok(())
                },
            )?;
            let mut copy = Vec::new();
            if me == 0 {
                ring.send(4, 7, &mut failures, |at, b| {
                    b.copy_from_slice(&bytes(99, 7)[at as usize..][..b.len()]);
                    Ok(())
                })?;
            } else if me == 4 {
                ring.recv(0, 7, &mut failures, |_, b| {
                    copy.extend_from_slice(b);
                    Ok(())
                })?;
            }
            failures.agree(host, "ring")?;
            Ok::<_, PluginError>((parity, delivered, copy))
        });
        let out: Vec<_> = out.into_iter().map(Result::unwrap).collect();
        let combined = |s: u32, skip: Option<u32>| {
            let mut acc = vec![0u8; chunk as usize];
            for m in (0..n).filter(|&m| Some(m) != skip) {
                let mut b = vec![0u8; chunk as usize];
                slot(m, s, 0, &mut b);
                xor(&mut acc, &b);
            }
            acc
        };
        for (me, (parity, delivered, copy)) in out.iter().enumerate() {
            assert_eq!(parity, &combined(me as u32, None), "member {me}");
            if me == 2 {
                for (s, got) in delivered.iter().enumerate() {
                    assert_eq!(got, &combined(s as u32, Some(2)), "slot {s}");
                }
            } else {
                assert!(delivered.iter().all(Vec::is_empty));
            }
            assert_eq!(copy, &if me == 4 { bytes(99, 7) } else { vec![] });
        }
    }
}
