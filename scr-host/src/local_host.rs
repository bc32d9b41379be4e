//! The host services a transfer plugin receives: a one-member "set" (this process alone)
//! whose log reaches the runtime's log and whose cancellation flag the runtime controls.
//!
//! Why not the MPI host: a transfer moves one rank's own files and must never block on
//! other ranks (a background flush runs on a thread while the application computes and
//! calls MPI itself), so it gets no communicator. Why not a throwaway in-process world:
//! a plugin's warnings (e.g. "bbapi is missing, using the fallback") then went nowhere,
//! and the runtime had no way to tell a running transfer to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use abi_stable::std_types::{RResult, RSlice, RSliceMut, RStr, RString};
use scr_plugin::{HostServices, LogLevel, PluginError, ReduceOp};

/// Host services of one process for transfer calls.
#[derive(Clone, Debug)]
pub(crate) struct LocalHost {
    /// `MPI_COMM_WORLD` rank of this process (member 0's world rank), for log lines.
    world_rank: u32,
    /// This process's node (its failure group).
    node: String,
    /// What the plugin is, for log lines (`transfer pthread`).
    label: String,
    /// Set by the runtime to ask running transfers to stop; shared with every host made
    /// for the same runtime, so setting it once reaches every transfer in flight.
    cancelled: Arc<AtomicBool>,
}

impl LocalHost {
    /// A host for transfers of type `label` on world rank `world_rank`.
    pub(crate) fn new(
        world_rank: u32,
        node: &str,
        label: &str,
        cancelled: Arc<AtomicBool>,
    ) -> Self {
        LocalHost {
            world_rank,
            node: node.to_string(),
            label: label.to_string(),
            cancelled,
        }
    }

    fn alone(&self, what: &str, member: u32) -> PluginError {
        PluginError::communication(format!(
            "{what} with member {member}: a transfer's host has one member (this process); transfers cannot communicate"
        ))
    }
}

impl HostServices for LocalHost {
    fn rank(&self) -> u32 {
        0
    }

    fn size(&self) -> u32 {
        1
    }

    fn world_rank(&self, member: u32) -> u32 {
        if member == 0 {
            self.world_rank
        } else {
            u32::MAX
        }
    }

    fn failure_group(&self, member: u32) -> RString {
        if member == 0 {
            self.node.as_str().into()
        } else {
            RString::new()
        }
    }

    fn send(&self, dest: u32, _tag: u32, _data: RSlice<'_, u8>) -> RResult<(), PluginError> {
        RResult::RErr(self.alone("send", dest))
    }

    fn recv(&self, src: u32, _tag: u32, _buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        RResult::RErr(self.alone("recv", src))
    }

    fn sendrecv(
        &self,
        dest: u32,
        _data: RSlice<'_, u8>,
        _src: u32,
        _buf: RSliceMut<'_, u8>,
        _tag: u32,
    ) -> RResult<(), PluginError> {
        RResult::RErr(self.alone("sendrecv", dest))
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        // every member (this one) has arrived
        RResult::ROk(())
    }

    fn all_reduce_u64(&self, value: u64, _op: ReduceOp) -> RResult<u64, PluginError> {
        // the reduction of one value is that value, whatever the operation
        RResult::ROk(value)
    }

    fn broadcast(&self, root: u32, _buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        if root == 0 {
            RResult::ROk(())
        } else {
            RResult::RErr(self.alone("broadcast", root))
        }
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        // through tracing (filtered by SCR_DEBUG or RUST_LOG there); never `eprintln!`,
        // which panics when stderr is closed
        crate::log::plugin_message(level, self.world_rank, &self.label, message.as_str());
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scr_plugin::{host_ref, Host};

    #[test]
    fn one_member_host_refuses_communication_and_shares_its_cancel_flag() {
        let flag = Arc::new(AtomicBool::new(false));
        let local = LocalHost::new(3, "n1", "transfer sync", Arc::clone(&flag));
        let host = Host::new(host_ref(&local));
        assert_eq!((host.rank(), host.size()), (0, 1));
        assert_eq!(host.world_rank(0).unwrap(), 3);
        assert_eq!(host.failure_group(0).unwrap(), "n1");
        let err = host.send(0, 1, b"x").unwrap_err();
        assert!(err.to_string().contains("one member"), "{err}");
        let mut buf = [0u8; 1];
        assert!(host.recv(0, 1, &mut buf).is_err());
        assert!(host.sendrecv(0, b"x", 0, &mut buf, 1).is_err());
        assert_eq!(host.all_reduce(7, ReduceOp::Sum).unwrap(), 7);
        host.barrier().unwrap();
        assert!(!host.is_cancelled());
        flag.store(true, Ordering::SeqCst);
        assert!(host.is_cancelled());
        assert!(host.check_cancelled().is_err());
    }
}
