//! Values instead of bytes over a [`World`]: [`Exchange`], which every `World` (a
//! `dyn World` too) has.
//!
//! Why: the runtime's exchanges of structured values (filemaps, index entries, lists of
//! names or paths, outcomes) each wrote the same round trip by hand — serialize, call the
//! byte-level method, parse what arrived — with the encoding and the failure's wording
//! repeated at every call. Here each byte-level exchange has a typed counterpart making
//! exactly the same call with exactly the same bytes (serde_json, as before), and a value
//! that does not parse is an [`ExchangeError`] naming the rank that sent it and what was
//! exchanged; the caller decides what an unreadable value means (every call site keeps
//! its own fallback).
//!
//! The values are serialized only where the byte-level method reads them (a broadcast's
//! root, a gather's members, a scatter's root), and parsed wherever they arrive (a
//! broadcast's root too, from its own bytes, as every rank must reach the same outcome).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::World;

/// A value another rank sent that does not parse as what was expected.
#[derive(Debug, thiserror::Error)]
#[error("{what} from rank {rank} is unreadable: {source}")]
pub(crate) struct ExchangeError {
    /// What was exchanged (as the caller named it: "filemap moved", "outcome", ...).
    pub(crate) what: &'static str,
    /// The rank that sent it (for a broadcast, its root).
    pub(crate) rank: u32,
    /// Why it does not parse.
    #[source]
    pub(crate) source: serde_json::Error,
}

/// Values received from other ranks, each with its sender (and parsed or not).
pub(crate) type Received<R> = Vec<(u32, Result<R, ExchangeError>)>;

/// The wire form of a value (serde_json; a value of the runtime's own types always
/// serializes).
fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("an exchanged value serializes")
}

/// `bytes` from `rank` as an `R`, or the typed error naming `rank` and `what`.
fn decode<R: DeserializeOwned>(
    bytes: &[u8],
    rank: u32,
    what: &'static str,
) -> Result<R, ExchangeError> {
    serde_json::from_slice(bytes).map_err(|source| ExchangeError { what, rank, source })
}

/// The typed exchanges of a [`World`]: each is the byte-level method of the same name
/// stem, with values serialized on the way out and parsed on the way in. `what` names
/// the exchanged value in an [`ExchangeError`].
///
/// Where two type parameters appear, what is sent may be a borrowed form of what is
/// received (`Vec<&str>` sent, `Vec<String>` received).
pub(crate) trait Exchange {
    /// Rank `root`'s `mine` on every rank ([`World::broadcast_from`]; `mine` is read on
    /// `root` only, and `None` there sends nothing readable, an error on every rank).
    fn broadcast_value<T>(
        &self,
        root: u32,
        mine: Option<&T>,
        what: &'static str,
    ) -> Result<T, ExchangeError>
    where
        T: Serialize + DeserializeOwned;

    /// Send `value` to `dest` on `tag` ([`World::send`]).
    fn send_value<S>(&self, dest: u32, tag: i32, value: &S)
    where
        S: Serialize + ?Sized;

    /// The next value from `src` on `tag` ([`World::recv`]).
    fn recv_value<R>(&self, src: u32, tag: i32, what: &'static str) -> Result<R, ExchangeError>
    where
        R: DeserializeOwned;

    /// Each of `members`' `mine` on `root`, in the order of `members`; `None` elsewhere
    /// ([`World::gather_from`]).
    fn gather_values<S, R>(
        &self,
        root: u32,
        members: &[u32],
        mine: &S,
        tag: i32,
        what: &'static str,
    ) -> Option<Vec<Result<R, ExchangeError>>>
    where
        S: Serialize + ?Sized,
        R: DeserializeOwned;

    /// `root`'s `parts[i]` on `members[i]` ([`World::scatter_to`]; `parts` is read on
    /// `root` only).
    fn scatter_values<T>(
        &self,
        root: u32,
        members: &[u32],
        parts: &[T],
        tag: i32,
        what: &'static str,
    ) -> Result<T, ExchangeError>
    where
        T: Serialize + DeserializeOwned;

    /// The values of the ranks that have one, on rank 0 (the first
    /// [`REPORT_LIMIT`](super::REPORT_LIMIT) in rank order, with their senders), and the
    /// count of all on every rank ([`World::gather_some`]).
    fn gather_some_values<S, R>(&self, mine: Option<&S>, what: &'static str) -> (Received<R>, u64)
    where
        S: Serialize + ?Sized,
        R: DeserializeOwned;

    /// Send each (destination, value) of `sends` and receive what the others sent this
    /// rank, ordered by sender ([`World::sparse_exchange`]).
    fn sparse_exchange_values<S, R>(
        &self,
        sends: &[(u32, S)],
        tag: i32,
        what: &'static str,
    ) -> Received<R>
    where
        S: Serialize,
        R: DeserializeOwned;
}

impl<W: World + ?Sized> Exchange for W {
    fn broadcast_value<T>(
        &self,
        root: u32,
        mine: Option<&T>,
        what: &'static str,
    ) -> Result<T, ExchangeError>
    where
        T: Serialize + DeserializeOwned,
    {
        let bytes = match mine {
            Some(v) if self.rank() == root => encode(v),
            _ => Vec::new(),
        };
        decode(&self.broadcast_from(root, &bytes), root, what)
    }

    fn send_value<S>(&self, dest: u32, tag: i32, value: &S)
    where
        S: Serialize + ?Sized,
    {
        self.send(dest, tag, &encode(value));
    }

    fn recv_value<R>(&self, src: u32, tag: i32, what: &'static str) -> Result<R, ExchangeError>
    where
        R: DeserializeOwned,
    {
        decode(&self.recv(src, tag), src, what)
    }

    fn gather_values<S, R>(
        &self,
        root: u32,
        members: &[u32],
        mine: &S,
        tag: i32,
        what: &'static str,
    ) -> Option<Vec<Result<R, ExchangeError>>>
    where
        S: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let all = self.gather_from(root, members, &encode(mine), tag)?;
        Some(
            members
                .iter()
                .zip(all)
                .map(|(&m, bytes)| decode(&bytes, m, what))
                .collect(),
        )
    }

    fn scatter_values<T>(
        &self,
        root: u32,
        members: &[u32],
        parts: &[T],
        tag: i32,
        what: &'static str,
    ) -> Result<T, ExchangeError>
    where
        T: Serialize + DeserializeOwned,
    {
        let parts: Vec<Vec<u8>> = if self.rank() == root {
            parts.iter().map(|p| encode(p)).collect()
        } else {
            Vec::new()
        };
        decode(&self.scatter_to(root, members, &parts, tag), root, what)
    }

    fn gather_some_values<S, R>(&self, mine: Option<&S>, what: &'static str) -> (Received<R>, u64)
    where
        S: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let mine = mine.map(|v| encode(v));
        let (got, total) = self.gather_some(mine.as_deref());
        let got = got
            .into_iter()
            .map(|(from, bytes)| (from, decode(&bytes, from, what)))
            .collect();
        (got, total)
    }

    fn sparse_exchange_values<S, R>(
        &self,
        sends: &[(u32, S)],
        tag: i32,
        what: &'static str,
    ) -> Received<R>
    where
        S: Serialize,
        R: DeserializeOwned,
    {
        let sends: Vec<(u32, Vec<u8>)> = sends.iter().map(|(to, v)| (*to, encode(v))).collect();
        self.sparse_exchange(&sends, tag)
            .into_iter()
            .map(|(from, bytes)| (from, decode(&bytes, from, what)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
