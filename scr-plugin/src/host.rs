//! The plugin-side view of the host services: [`Host`], a safe wrapper that turns every
//! call into a `Result` and checks member numbers and tags before they reach the host.

use abi_stable::{
    sabi_trait::TD_Opaque,
    sabi_types::RRef,
    std_types::{RSlice, RSliceMut, RStr},
};

use crate::abi::{HostRef, HostServices, HostServices_TO, LogLevel, ReduceOp};
use crate::error::{ErrorCode, PluginError, PluginResult};

/// The largest tag a plugin may use (the smallest `MPI_TAG_UB` the MPI standard allows).
pub const MAX_TAG: u32 = 32767;

/// Borrow any [`HostServices`] implementation as the FFI trait object plugins receive.
pub fn host_ref<H: HostServices>(services: &H) -> HostRef<'_> {
    HostServices_TO::from_ptr(RRef::new(services), TD_Opaque)
}

/// The host services as a plugin uses them: the redundancy set's communicator, logging
/// and cancellation, with every failure as a [`PluginError`].
pub struct Host<'a> {
    raw: HostRef<'a>,
}

impl<'a> Host<'a> {
    /// Wrap the trait object a plugin call received.
    pub fn new(raw: HostRef<'a>) -> Self {
        Host { raw }
    }

    /// The underlying FFI object, reborrowed for handing on to another plugin call.
    pub fn raw(&self) -> HostRef<'_> {
        self.raw.sabi_reborrow()
    }

    /// This process's member number in the redundancy set.
    pub fn rank(&self) -> u32 {
        self.raw.rank()
    }

    /// Number of members in the redundancy set.
    pub fn size(&self) -> u32 {
        self.raw.size()
    }

    /// `MPI_COMM_WORLD` rank of a member.
    pub fn world_rank(&self, member: u32) -> PluginResult<u32> {
        self.check_member(member)?;
        Ok(self.raw.world_rank(member))
    }

    /// Failure-group value (e.g. node name) of a member.
    pub fn failure_group(&self, member: u32) -> PluginResult<String> {
        self.check_member(member)?;
        Ok(self.raw.failure_group(member).into_string())
    }

    /// The member `offset` places to the right in the ring (wrapping).
    pub fn right(&self, offset: u32) -> u32 {
        (self.rank() + offset % self.size()) % self.size()
    }

    /// The member `offset` places to the left in the ring (wrapping).
    pub fn left(&self, offset: u32) -> u32 {
        (self.rank() + self.size() - offset % self.size()) % self.size()
    }

    /// Blocking send.
    pub fn send(&self, dest: u32, tag: u32, data: &[u8]) -> PluginResult<()> {
        self.check_member(dest)?;
        check_tag(tag)?;
        self.raw
            .send(dest, tag, RSlice::from_slice(data))
            .into_result()
    }

    /// Blocking receive of exactly `buf.len()` bytes.
    pub fn recv(&self, src: u32, tag: u32, buf: &mut [u8]) -> PluginResult<()> {
        self.check_member(src)?;
        check_tag(tag)?;
        self.raw
            .recv(src, tag, RSliceMut::from_mut_slice(buf))
            .into_result()
    }

    /// Send to `dest` and receive from `src` at once.
    pub fn sendrecv(
        &self,
        dest: u32,
        data: &[u8],
        src: u32,
        buf: &mut [u8],
        tag: u32,
    ) -> PluginResult<()> {
        self.check_member(dest)?;
        self.check_member(src)?;
        check_tag(tag)?;
        self.raw
            .sendrecv(
                dest,
                RSlice::from_slice(data),
                src,
                RSliceMut::from_mut_slice(buf),
                tag,
            )
            .into_result()
    }

    /// Wait for every member.
    pub fn barrier(&self) -> PluginResult<()> {
        self.raw.barrier().into_result()
    }

    /// Combine one value from every member.
    pub fn all_reduce(&self, value: u64, op: ReduceOp) -> PluginResult<u64> {
        self.raw.all_reduce_u64(value, op).into_result()
    }

    /// True on every member when `ok` is true on every member. The way a collective
    /// operation makes all members succeed or fail together.
    pub fn all_agree(&self, ok: bool) -> PluginResult<bool> {
        Ok(self.all_reduce(u64::from(ok), ReduceOp::Min)? == 1)
    }

    /// Copy `root`'s buffer to every member's buffer.
    pub fn broadcast(&self, root: u32, buf: &mut [u8]) -> PluginResult<()> {
        self.check_member(root)?;
        self.raw
            .broadcast(root, RSliceMut::from_mut_slice(buf))
            .into_result()
    }

    /// Log through the host.
    pub fn log(&self, level: LogLevel, message: &str) {
        self.raw.log(level, RStr::from_str(message));
    }

    /// Whether the host asked the current operation to stop.
    pub fn is_cancelled(&self) -> bool {
        self.raw.is_cancelled()
    }

    /// `Err(CANCELLED)` when the host asked to stop; call between pieces of long work.
    pub fn check_cancelled(&self) -> PluginResult<()> {
        if self.is_cancelled() {
            Err(PluginError::new(
                ErrorCode::CANCELLED,
                "operation cancelled by the host",
            ))
        } else {
            Ok(())
        }
    }

    /// `Err` unless this process is member `member` of a set of `members`: a scheme
    /// instance made for one place in a set must be called from that place.
    pub fn check_place(&self, scheme: &str, member: u32, members: u32) -> PluginResult<()> {
        if self.size() == members && self.rank() == member {
            Ok(())
        } else {
            Err(PluginError::communication(format!(
                "{scheme} instance made for member {member} of {members} called as member {} of {}",
                self.rank(),
                self.size()
            )))
        }
    }

    fn check_member(&self, member: u32) -> PluginResult<()> {
        if member < self.size() {
            Ok(())
        } else {
            Err(PluginError::communication(format!(
                "member {member} does not exist in a set of {} members",
                self.size()
            )))
        }
    }
}

fn check_tag(tag: u32) -> PluginResult<()> {
    if tag <= MAX_TAG {
        Ok(())
    } else {
        Err(PluginError::communication(format!(
            "tag {tag} is above the largest plugin tag {MAX_TAG}"
        )))
    }
}
