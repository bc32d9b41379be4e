//! The plugin-side view of the host services: [`Host`], a safe wrapper that turns every
//! call into a `Result` and checks member numbers and tags before they reach the host.

use std::io::Write as _;

use abi_stable::{
    sabi_trait::TD_Opaque,
    sabi_types::RRef,
    std_types::{RResult, RSlice, RSliceMut, RStr, RString},
};

use crate::abi::{HostRef, HostServices, HostServices_TO, LogLevel, ReduceOp};
use crate::error::{ErrorCode, PluginError, PluginResult};

/// The largest tag a plugin may use (the smallest `MPI_TAG_UB` the MPI standard allows).
pub const MAX_TAG: u32 = 32767;

/// Borrow any [`HostServices`] implementation as the FFI trait object plugins receive.
///
/// The object dispatches through [`Guarded`], so a panic inside one of `services`'
/// methods comes back to the plugin as an error (or a safe value, see [`Guarded`]) instead
/// of unwinding into the plugin's frames through an `extern "C"` function, which
/// abi_stable turns into an abort of the whole MPI job.
pub fn host_ref<H: HostServices>(services: &H) -> HostRef<'_> {
    HostServices_TO::from_ptr(RRef::new(Guarded::wrap(services)), TD_Opaque)
}

/// The host services as [`host_ref`] hands them to plugins: every call of `H` under
/// `catch_unwind`. A host's own implementation must not panic (bounded lengths, checked
/// conversions, logging that cannot fail); this is the last line of defence.
///
/// A call that returns a `Result` gets a [`PluginError`] with code
/// [`PANIC`](ErrorCode::PANIC) naming the call. The others get a value that makes the
/// plugin fail rather than go on with a wrong answer: `rank` `u32::MAX` and `size` 0 (so
/// [`Host::check_place`] refuses), `world_rank` `u32::MAX`, an empty `failure_group`,
/// `is_cancelled` true; a `log` that panicked is dropped.
#[repr(transparent)]
pub struct Guarded<H>(H);

impl<H> Guarded<H> {
    /// View `services` as guarded without moving it.
    pub fn wrap(services: &H) -> &Guarded<H> {
        let ptr: *const H = services;
        // SAFETY: `Guarded<H>` is `#[repr(transparent)]` over `H`, so both have the same
        // layout and alignment; the returned reference borrows `services` for the same
        // lifetime and allows only shared access, exactly as the original did.
        unsafe { &*ptr.cast::<Guarded<H>>() }
    }
}

/// Run `f`, turning a panic into `fallback` and telling stderr (without a write that
/// could itself panic).
fn caught<T>(call: &str, fallback: impl FnOnce() -> T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(non-string panic payload)");
            let _ = writeln!(
                std::io::stderr().lock(),
                "scr-rs: host services panicked in {call}: {what}"
            );
            fallback()
        }
    }
}

/// [`caught`] for calls that return a result: a panic is an error naming the call.
fn caught_result<T>(
    call: &str,
    f: impl FnOnce() -> RResult<T, PluginError>,
) -> RResult<T, PluginError> {
    caught(
        call,
        || {
            RResult::RErr(PluginError::new(
                ErrorCode::PANIC,
                format!("the host services panicked in {call} (a bug in the host; the call did not complete)"),
            ))
        },
        f,
    )
}

impl<H: HostServices> HostServices for Guarded<H> {
    fn rank(&self) -> u32 {
        caught("rank", || u32::MAX, || self.0.rank())
    }

    fn size(&self) -> u32 {
        caught("size", || 0, || self.0.size())
    }

    fn world_rank(&self, member: u32) -> u32 {
        caught("world_rank", || u32::MAX, || self.0.world_rank(member))
    }

    fn failure_group(&self, member: u32) -> RString {
        caught("failure_group", RString::new, || {
            self.0.failure_group(member)
        })
    }

    fn send(&self, dest: u32, tag: u32, data: RSlice<'_, u8>) -> RResult<(), PluginError> {
        caught_result("send", || self.0.send(dest, tag, data))
    }

    fn recv(&self, src: u32, tag: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        caught_result("recv", || self.0.recv(src, tag, buf))
    }

    fn sendrecv(
        &self,
        dest: u32,
        data: RSlice<'_, u8>,
        src: u32,
        buf: RSliceMut<'_, u8>,
        tag: u32,
    ) -> RResult<(), PluginError> {
        caught_result("sendrecv", || self.0.sendrecv(dest, data, src, buf, tag))
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        caught_result("barrier", || self.0.barrier())
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        caught_result("all_reduce_u64", || self.0.all_reduce_u64(value, op))
    }

    fn broadcast(&self, root: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        caught_result("broadcast", || self.0.broadcast(root, buf))
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        caught("log", || (), || self.0.log(level, message))
    }

    fn is_cancelled(&self) -> bool {
        caught("is_cancelled", || true, || self.0.is_cancelled())
    }

    fn survivors_verified(&self) -> bool {
        // a panic answers "not verified": the scheme then checks survivors itself
        caught(
            "survivors_verified",
            || false,
            || self.0.survivors_verified(),
        )
    }
}

/// Host services that say the host verified the survivors of the `recover` call they
/// serve ([`HostServices::survivors_verified`]), forwarding everything else to `inner`.
///
/// Why: the host reads every member's files for its own check before `recover` (with
/// `crc_on_restart`), and a scheme that verifies survivors itself
/// ([`SurvivorCheck::Scheme`](crate::SurvivorCheck::Scheme)) would read them all a second
/// time. A host that has just verified them hands the scheme these services instead of
/// its own, and the scheme skips its second read
/// ([`Host::survivors_verified`]). Wrap the services of one call only, and only when
/// the check really covered every member's files (size and the recorded CRC32).
pub struct SurvivorsVerified<'a> {
    inner: HostRef<'a>,
}

impl<'a> SurvivorsVerified<'a> {
    /// `inner`, saying that the survivors were verified.
    pub fn new(inner: HostRef<'a>) -> Self {
        SurvivorsVerified { inner }
    }
}

impl HostServices for SurvivorsVerified<'_> {
    fn rank(&self) -> u32 {
        self.inner.rank()
    }

    fn size(&self) -> u32 {
        self.inner.size()
    }

    fn world_rank(&self, member: u32) -> u32 {
        self.inner.world_rank(member)
    }

    fn failure_group(&self, member: u32) -> RString {
        self.inner.failure_group(member)
    }

    fn send(&self, dest: u32, tag: u32, data: RSlice<'_, u8>) -> RResult<(), PluginError> {
        self.inner.send(dest, tag, data)
    }

    fn recv(&self, src: u32, tag: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        self.inner.recv(src, tag, buf)
    }

    fn sendrecv(
        &self,
        dest: u32,
        data: RSlice<'_, u8>,
        src: u32,
        buf: RSliceMut<'_, u8>,
        tag: u32,
    ) -> RResult<(), PluginError> {
        self.inner.sendrecv(dest, data, src, buf, tag)
    }

    fn barrier(&self) -> RResult<(), PluginError> {
        self.inner.barrier()
    }

    fn all_reduce_u64(&self, value: u64, op: ReduceOp) -> RResult<u64, PluginError> {
        self.inner.all_reduce_u64(value, op)
    }

    fn broadcast(&self, root: u32, buf: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
        self.inner.broadcast(root, buf)
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        self.inner.log(level, message)
    }

    fn is_cancelled(&self) -> bool {
        self.inner.is_cancelled()
    }

    fn survivors_verified(&self) -> bool {
        true
    }
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

    /// Whether the host verified every member's files passed as intact to the current
    /// `recover` (size and recorded CRC32) just before the call
    /// ([`HostServices::survivors_verified`]). A scheme that verifies survivors itself
    /// ([`SurvivorCheck::Scheme`](crate::SurvivorCheck::Scheme)) skips that second read
    /// when this is `true`: the files it was given as intact are, as of the call. `false`
    /// for a host that does not say so (an older one, a transfer's, the offline rebuild
    /// of `scr postrun`).
    pub fn survivors_verified(&self) -> bool {
        self.raw.survivors_verified()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Host services whose every call panics (a host bug), to prove none of those panics
    /// unwinds through the `extern "C"` functions plugins call (abi_stable aborts the
    /// process when one does, so without the guard this test binary dies).
    struct Panicking;

    impl HostServices for Panicking {
        fn rank(&self) -> u32 {
            panic!("rank")
        }
        fn size(&self) -> u32 {
            panic!("size")
        }
        fn world_rank(&self, _: u32) -> u32 {
            panic!("world_rank")
        }
        fn failure_group(&self, _: u32) -> RString {
            panic!("failure_group")
        }
        fn send(&self, _: u32, _: u32, _: RSlice<'_, u8>) -> RResult<(), PluginError> {
            panic!("send")
        }
        fn recv(&self, _: u32, _: u32, _: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
            panic!("recv")
        }
        fn sendrecv(
            &self,
            _: u32,
            _: RSlice<'_, u8>,
            _: u32,
            _: RSliceMut<'_, u8>,
            _: u32,
        ) -> RResult<(), PluginError> {
            panic!("sendrecv")
        }
        fn barrier(&self) -> RResult<(), PluginError> {
            panic!("barrier")
        }
        fn all_reduce_u64(&self, _: u64, _: ReduceOp) -> RResult<u64, PluginError> {
            panic!("all_reduce_u64")
        }
        fn broadcast(&self, _: u32, _: RSliceMut<'_, u8>) -> RResult<(), PluginError> {
            panic!("broadcast")
        }
        fn log(&self, _: LogLevel, _: RStr<'_>) {
            panic!("log")
        }
        fn is_cancelled(&self) -> bool {
            panic!("is_cancelled")
        }
        fn survivors_verified(&self) -> bool {
            panic!("survivors_verified")
        }
    }

    #[test]
    fn a_panic_in_the_host_services_comes_back_as_an_error_not_an_abort() {
        let services = Panicking;
        let raw = host_ref(&services);
        // the raw FFI calls, as a plugin makes them
        let err = raw
            .send(0, 1, RSlice::from_slice(b"x"))
            .into_result()
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::PANIC);
        assert_eq!(
            err.message(),
            "the host services panicked in send (a bug in the host; the call did not complete)"
        );
        let mut buf = [0u8; 1];
        for (call, r) in [
            (
                "recv",
                raw.recv(0, 1, RSliceMut::from_mut_slice(&mut buf))
                    .into_result(),
            ),
            ("barrier", raw.barrier().into_result()),
            (
                "broadcast",
                raw.broadcast(0, RSliceMut::from_mut_slice(&mut buf))
                    .into_result(),
            ),
        ] {
            let e = r.unwrap_err();
            assert_eq!(e.code, ErrorCode::PANIC, "{call}");
            assert!(e.message().contains(&format!("panicked in {call} ")), "{e}");
        }
        assert_eq!(
            raw.all_reduce_u64(1, ReduceOp::Sum)
                .into_result()
                .unwrap_err()
                .code,
            ErrorCode::PANIC
        );
        assert!(raw
            .sendrecv(
                0,
                RSlice::from_slice(b"x"),
                0,
                RSliceMut::from_mut_slice(&mut buf),
                1
            )
            .into_result()
            .is_err());
        assert_eq!((raw.rank(), raw.size()), (u32::MAX, 0));
        assert_eq!(raw.world_rank(0), u32::MAX);
        assert_eq!(raw.failure_group(0).as_str(), "");
        assert!(raw.is_cancelled());
        raw.log(LogLevel::Error, RStr::from_str("dropped"));
        // a panicking verdict is "not verified": the scheme then checks for itself
        assert!(!raw.survivors_verified());
        // and a plugin checking its place in the set fails instead of going on
        let host = Host::new(host_ref(&services));
        assert!(host.check_place("XOR", 0, 4).is_err());
    }

    #[test]
    fn the_verdict_on_survivors_crosses_the_boundary_and_defaults_to_not_verified() {
        let plain = crate::inproc::run(&["a"], |host| {
            let told = SurvivorsVerified::new(host.raw());
            let told = Host::new(host_ref(&told));
            // everything else is forwarded
            (
                host.survivors_verified(),
                told.survivors_verified(),
                told.rank(),
                told.size(),
                told.all_agree(true).unwrap(),
            )
        });
        assert_eq!(plain, [(false, true, 0, 1, true)]);
    }
}
