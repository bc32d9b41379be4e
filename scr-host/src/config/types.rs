//! The vocabulary of the settings catalog: what a key is ([`Key`]: name, [`Type`] with its
//! bounds, [`Default`], meaning), the [`Value`] it takes, the typed handle [`Param`] code
//! reads it through, and how text becomes a value (environment, API, defaults).
//!
//! It is the bottom of the configuration's modules: the catalog (`catalog.rs`) declares
//! every key in these terms, and the by-name lookups ([`super::keys`]) and typed constants
//! ([`super::settings`]) are built from the catalog, so nothing here depends on them.

use std::fmt;
use std::marker::PhantomData;

use super::Setting;

/// The type (and range) of a key's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Type {
    /// `true`/`false` (also `1`/`0`, `yes`/`no` from the environment).
    Bool,
    /// A whole number in `min..=max`.
    UInt {
        /// Smallest allowed value.
        min: u64,
        /// Largest allowed value.
        max: u64,
    },
    /// A byte count: a whole number or a string with a unit (`64KB`, `1MiB`, `2GB`;
    /// K/M/G/T are powers of 1024 as in SCR).
    Bytes,
    /// A percentage, `0.0..=100.0`.
    Percent,
    /// Free text.
    Str,
    /// A file-system path.
    Path,
    /// One of a fixed set of words (case-insensitive).
    Choice(&'static [&'static str]),
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Bool => f.write_str("a boolean (true or false)"),
            Type::UInt { min, max } if *max == u64::MAX => {
                write!(f, "a whole number >= {min}")
            }
            Type::UInt { min, max } => write!(f, "a whole number in {min}..={max}"),
            Type::Bytes => f.write_str("a byte count (e.g. 1048576 or \"1MiB\")"),
            Type::Percent => f.write_str("a percentage between 0 and 100"),
            Type::Str => f.write_str("a string"),
            Type::Path => f.write_str("a path (string)"),
            Type::Choice(words) => write!(f, "one of {}", words.join(", ")),
        }
    }
}

/// A typed configuration value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// A whole number or byte count.
    UInt(u64),
    /// A percentage.
    Float(f64),
    /// A string, path or choice.
    Str(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::UInt(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "{s:?}"),
        }
    }
}

impl Value {
    /// The value as a plugin parameter string (no quotes).
    pub fn to_param(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// Where a key's default comes from.
#[derive(Clone, Copy, Debug)]
pub enum Default {
    /// No default: the key is unset unless a source sets it.
    None,
    /// A fixed value, written as it would be in the environment.
    Fixed(&'static str),
    /// Computed when loading (current directory, user name).
    Computed(&'static str),
}

/// One scalar key.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// The key, lower case.
    pub name: &'static str,
    /// Its type.
    pub ty: Type,
    /// Its default.
    pub default: Default,
    /// One line on what it means (and why the default, where we differ from SCR).
    pub doc: &'static str,
}

impl Key {
    /// The environment variable that sets this key.
    pub(crate) fn env_var(&self) -> String {
        format!("SCR_{}", self.name.to_ascii_uppercase())
    }
}

/// A scalar setting (an SCR parameter such as `SCR_CACHE_SIZE`), named in code by one of
/// the constants of [`super::settings`]; `T` is the Rust type [`super::Config::get`]
/// returns, fixed by the key's catalog type.
pub struct Param<T> {
    key: &'static Key,
    ty: PhantomData<fn() -> T>,
}

// Derives would require `T: Copy`; a key is only a name whatever its value type.
impl<T> Clone for Param<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Param<T> {}

impl<T> fmt::Debug for Param<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Param({})", self.key.name)
    }
}

impl<T> Param<T> {
    /// The handle of catalog entry `key` (only the catalog makes them, one per key).
    pub(super) const fn new(key: &'static Key) -> Self {
        Param {
            key,
            ty: PhantomData,
        }
    }

    /// The key's name, lower case (`cache_size`).
    pub const fn name(self) -> &'static str {
        self.key.name
    }

    /// The key's catalog entry: type, default and meaning.
    pub const fn key(self) -> &'static Key {
        self.key
    }
}

/// The Rust types a setting's value is read as, each with its value when the key is
/// unset (no default and no source set it): `false`, `0`, `0.0` or an empty string —
/// what the by-name accessors returned before the keys were typed.
pub trait ParamValue: Sized {
    /// The value of `setting` as this type.
    fn from_setting(setting: &Setting) -> Self;

    /// Whether a key of type `ty` is read as this type.
    fn accepts(ty: Type) -> bool;
}

impl ParamValue for bool {
    /// `true` only when set to true.
    fn from_setting(setting: &Setting) -> Self {
        matches!(setting.value, Some(Value::Bool(true)))
    }

    fn accepts(ty: Type) -> bool {
        ty == Type::Bool
    }
}

impl ParamValue for u64 {
    /// The number, 0 when unset.
    fn from_setting(setting: &Setting) -> Self {
        match setting.value {
            Some(Value::UInt(n)) => n,
            _ => 0,
        }
    }

    fn accepts(ty: Type) -> bool {
        matches!(ty, Type::UInt { .. } | Type::Bytes)
    }
}

impl ParamValue for f64 {
    /// The percentage, 0 when unset.
    fn from_setting(setting: &Setting) -> Self {
        match setting.value {
            Some(Value::Float(x)) => x,
            _ => 0.0,
        }
    }

    fn accepts(ty: Type) -> bool {
        ty == Type::Percent
    }
}

impl ParamValue for String {
    /// The text, empty when unset.
    fn from_setting(setting: &Setting) -> Self {
        setting
            .value
            .as_ref()
            .map(Value::to_param)
            .unwrap_or_default()
    }

    fn accepts(ty: Type) -> bool {
        matches!(ty, Type::Str | Type::Path | Type::Choice(_))
    }
}

/// Why a value does not fit its key's type (the message after the key's name).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Text that does not parse as the type.
    #[error("\"{text}\" is not {ty}")]
    NotA {
        /// The text, as written.
        text: String,
        /// The type it must have.
        ty: Type,
    },
    /// An empty string where text is required.
    #[error("an empty value is not {0}")]
    Empty(Type),
    /// A whole number outside the type's range.
    #[error("{n} is out of range: expected {ty}")]
    OutOfRange {
        /// The number.
        n: u64,
        /// The type, with its range.
        ty: Type,
    },
    /// A percentage outside `0..=100`.
    #[error("{0} is out of range: expected {percent}", percent = Type::Percent)]
    PercentOutOfRange(f64),
    /// A configuration file's value of another TOML type.
    #[error("expected {ty}, found {found}")]
    Expected {
        /// The type it must have.
        ty: Type,
        /// What was found (`string "x"`, `integer 3`, ...).
        found: String,
    },
    /// A negative integer in a configuration file.
    #[error("{n} is negative: expected {ty}")]
    Negative {
        /// The number.
        n: i64,
        /// The type it must have.
        ty: Type,
    },
}

/// Parse a value written as text (environment, API, defaults) for `ty`.
pub fn parse_text(ty: Type, text: &str) -> Result<Value, ValueError> {
    let t = text.trim();
    let bad = || ValueError::NotA {
        text: text.to_string(),
        ty,
    };
    match ty {
        Type::Bool => match t.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Value::Bool(true)),
            "0" | "false" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err(bad()),
        },
        Type::UInt { .. } => t
            .parse::<u64>()
            .map_err(|_| bad())
            .and_then(|n| check_uint(ty, n)),
        Type::Bytes => parse_bytes(t).map(Value::UInt).ok_or_else(bad),
        Type::Percent => t.parse::<f64>().map_err(|_| bad()).and_then(check_percent),
        Type::Str | Type::Path => {
            if t.is_empty() {
                Err(ValueError::Empty(ty))
            } else {
                Ok(Value::Str(t.to_string()))
            }
        }
        Type::Choice(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(t))
            .map(|w| Value::Str(w.to_string()))
            .ok_or_else(bad),
    }
}

/// Range-check a whole number.
pub fn check_uint(ty: Type, n: u64) -> Result<Value, ValueError> {
    match ty {
        Type::UInt { min, max } if n < min || n > max => Err(ValueError::OutOfRange { n, ty }),
        _ => Ok(Value::UInt(n)),
    }
}

/// Range-check a percentage.
pub fn check_percent(x: f64) -> Result<Value, ValueError> {
    if (0.0..=100.0).contains(&x) {
        Ok(Value::Float(x))
    } else {
        Err(ValueError::PercentOutOfRange(x))
    }
}

/// `123`, `64KB`, `64K`, `1MiB`, `2 GB`, `1.5GB`: K/M/G/T/P are powers of 1024 (SCR's
/// convention), an optional `B`/`iB` suffix is accepted.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return None,
    };
    if num.contains('.') {
        let x: f64 = num.parse().ok()?;
        let v = x * (1u64 << shift) as f64;
        (v.is_finite() && v >= 0.0 && v < u64::MAX as f64).then_some(v as u64)
    } else {
        num.parse::<u64>().ok()?.checked_mul(1u64 << shift)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_use_powers_of_1024() {
        assert_eq!(parse_bytes("131072"), Some(131072));
        assert_eq!(parse_bytes("128KB"), Some(128 << 10));
        assert_eq!(parse_bytes("1MiB"), Some(1 << 20));
        assert_eq!(parse_bytes("2 gb"), Some(2 << 30));
        assert_eq!(parse_bytes("1.5K"), Some(1536));
        assert_eq!(parse_bytes("12XB"), None);
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("99999999999P"), None);
    }
}
