//! Errors that cross the plugin boundary as values.

use std::fmt;

use abi_stable::{std_types::RString, StableAbi};

/// What kind of failure a [`PluginError`] reports.
///
/// A transparent `u32` rather than an enum so that later ABI versions can add codes
/// without changing the layout that older plugins were checked against; unknown codes
/// display as `code N`.
#[repr(transparent)]
#[derive(StableAbi, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// The plugin names this scheme or transfer type but does not implement it yet.
    pub const NOT_IMPLEMENTED: ErrorCode = ErrorCode(1);
    /// A descriptor parameter or plugin setting is missing, malformed or out of range.
    pub const INVALID_PARAMETER: ErrorCode = ErrorCode(2);
    /// A file could not be read, written, created or removed.
    pub const IO: ErrorCode = ErrorCode(3);
    /// Sending to or receiving from another member of the set failed.
    pub const COMMUNICATION: ErrorCode = ErrorCode(4);
    /// More members lost their files than the scheme tolerates; nothing was rebuilt.
    pub const UNRECOVERABLE: ErrorCode = ErrorCode(5);
    /// A redundancy file or persisted state failed its header or checksum check.
    pub const CORRUPT: ErrorCode = ErrorCode(6);
    /// The host asked the operation to stop.
    pub const CANCELLED: ErrorCode = ErrorCode(7);
    /// The plugin panicked; the panic was caught at the boundary.
    pub const PANIC: ErrorCode = ErrorCode(8);
    /// The library does not provide the requested scheme or transfer type at all.
    pub const UNSUPPORTED: ErrorCode = ErrorCode(9);
    /// A required external resource (vendor library, device) is unavailable.
    pub const UNAVAILABLE: ErrorCode = ErrorCode(10);
    /// Another member of the redundancy set failed in the same collective call (its
    /// plugin returned an error or panicked): a host service that was waiting for it (or
    /// would have) returns this, its message naming the member and its error, e.g.
    /// `member 1 (world rank 3) failed in apply: I/O error: ...`. Propagate it: return
    /// an error from the call. The host then gives every member the same error.
    pub const PEER_FAILED: ErrorCode = ErrorCode(11);
    /// Anything else; the message says what.
    pub const OTHER: ErrorCode = ErrorCode(255);

    /// A short lower-case name for messages and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::NOT_IMPLEMENTED => "not implemented",
            Self::INVALID_PARAMETER => "invalid parameter",
            Self::IO => "I/O error",
            Self::COMMUNICATION => "communication error",
            Self::UNRECOVERABLE => "unrecoverable",
            Self::CORRUPT => "corrupt data",
            Self::CANCELLED => "cancelled",
            Self::PANIC => "panic",
            Self::UNSUPPORTED => "unsupported",
            Self::UNAVAILABLE => "unavailable",
            Self::PEER_FAILED => "set member failed",
            _ => "error",
        }
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ErrorCode({} = {})", self.0, self.name())
    }
}

/// An error returned by a plugin (or by the host services to a plugin).
///
/// Errors cross the boundary as this plain value; panics never do (see
/// [`guard`](crate::guard)). The message should already name what failed and, where it
/// helps, what to do: the host prefixes the plugin's file and the call when it reports it.
#[repr(C)]
#[derive(StableAbi, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// The kind of failure.
    pub code: ErrorCode,
    /// A human-readable, one-line explanation.
    pub message: RString,
}

impl PluginError {
    /// An error with the given code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        PluginError {
            code,
            message: RString::from(message.into()),
        }
    }

    /// `"<what> is not implemented yet"`, the answer of a name that is registered but
    /// whose implementation has not landed: it must never pretend to work.
    pub fn not_implemented(what: impl fmt::Display) -> Self {
        Self::new(
            ErrorCode::NOT_IMPLEMENTED,
            format!("{what} is not implemented yet"),
        )
    }

    /// A parameter error.
    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::INVALID_PARAMETER, message)
    }

    /// An I/O error on `path`.
    pub fn io(path: impl fmt::Display, err: impl fmt::Display) -> Self {
        Self::new(ErrorCode::IO, format!("{path}: {err}"))
    }

    /// A communication error.
    pub fn communication(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::COMMUNICATION, message)
    }

    /// The message as a `&str`.
    pub fn message(&self) -> &str {
        self.message.as_str()
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.message)
    }
}

impl fmt::Debug for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PluginError({:?}, {:?})",
            self.code,
            self.message.as_str()
        )
    }
}

impl std::error::Error for PluginError {}

/// Shorthand for results inside plugin code.
pub type PluginResult<T> = Result<T, PluginError>;
