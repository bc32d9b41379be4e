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

/// Send a byte string of any length to `dest` (length first).
pub fn send_bytes(host: &Host<'_>, dest: u32, tag: u32, data: &[u8]) -> PluginResult<()> {
    host.send(dest, tag, &(data.len() as u64).to_le_bytes())?;
    host.send(dest, tag, data)
}

/// Receive a byte string sent with [`send_bytes`].
pub fn recv_bytes(host: &Host<'_>, src: u32, tag: u32) -> PluginResult<Vec<u8>> {
    let mut len = [0u8; 8];
    host.recv(src, tag, &mut len)?;
    let mut buf = vec![0u8; u64::from_le_bytes(len) as usize];
    host.recv(src, tag, &mut buf)?;
    Ok(buf)
}

/// Exchange byte strings of any length: send `data` to `dest`, receive from `src`.
pub fn sendrecv_bytes(
    host: &Host<'_>,
    dest: u32,
    data: &[u8],
    src: u32,
    tag: u32,
) -> PluginResult<Vec<u8>> {
    let mut len = [0u8; 8];
    host.sendrecv(dest, &(data.len() as u64).to_le_bytes(), src, &mut len, tag)?;
    let mut buf = vec![0u8; u64::from_le_bytes(len) as usize];
    host.sendrecv(dest, data, src, &mut buf, tag)?;
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
}
