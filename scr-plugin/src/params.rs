//! Typed lookups over the string parameters a plugin receives.

use crate::abi::Param;
use crate::error::{PluginError, PluginResult};

/// A read-only view of descriptor parameters or plugin settings with typed getters whose
/// errors name the parameter and the offending value.
#[derive(Clone, Copy, Debug)]
pub struct Params<'a> {
    what: &'a str,
    items: &'a [Param],
}

impl<'a> Params<'a> {
    /// `what` names the owner in error messages, e.g. `scheme XOR`.
    pub fn new(what: &'a str, items: &'a [Param]) -> Self {
        Params { what, items }
    }

    /// The raw value of `key` (case-insensitive), if present.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.items
            .iter()
            .find(|p| p.key.as_str().eq_ignore_ascii_case(key))
            .map(|p| p.value.as_str())
    }

    /// A whole number, or `default` when absent.
    pub fn u64_or(&self, key: &str, default: u64) -> PluginResult<u64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.trim().parse::<u64>().map_err(|_| {
                PluginError::invalid_parameter(format!(
                    "{}: parameter `{key}` = \"{v}\" is not a whole number",
                    self.what
                ))
            }),
        }
    }

    /// A whole number within `range`, or `default` when absent.
    pub fn u64_in(
        &self,
        key: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> PluginResult<u64> {
        let v = self.u64_or(key, default)?;
        if range.contains(&v) {
            Ok(v)
        } else {
            Err(PluginError::invalid_parameter(format!(
                "{}: parameter `{key}` = {v} is out of range {}..={}",
                self.what,
                range.start(),
                range.end()
            )))
        }
    }

    /// A boolean (`true`/`false`/`1`/`0`), or `default` when absent.
    pub fn bool_or(&self, key: &str, default: bool) -> PluginResult<bool> {
        match self.get(key).map(str::trim) {
            None => Ok(default),
            Some("true" | "1") => Ok(true),
            Some("false" | "0") => Ok(false),
            Some(v) => Err(PluginError::invalid_parameter(format!(
                "{}: parameter `{key}` = \"{v}\" is not true or false",
                self.what
            ))),
        }
    }

    /// Refuse any key not in `known`, so a misspelt parameter is not silently ignored.
    pub fn only(&self, known: &[&str]) -> PluginResult<()> {
        for p in self.items {
            if !known.iter().any(|k| k.eq_ignore_ascii_case(p.key.as_str())) {
                return Err(PluginError::invalid_parameter(format!(
                    "{}: unknown parameter `{}` (known: {})",
                    self.what,
                    p.key,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(k: &str, v: &str) -> Param {
        Param {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn typed_lookups_name_the_parameter_and_value() {
        let items = [p("set_size", "8"), p("REPLICAS", "two"), p("crc", "1")];
        let params = Params::new("scheme XOR", &items);
        assert_eq!(params.u64_or("SET_SIZE", 4).unwrap(), 8);
        assert_eq!(params.u64_or("absent", 4).unwrap(), 4);
        assert!(params.bool_or("crc", false).unwrap());
        let err = params.u64_or("replicas", 1).unwrap_err();
        assert_eq!(
            err.message(),
            "scheme XOR: parameter `replicas` = \"two\" is not a whole number"
        );
        let err = params.u64_in("set_size", 8, 2..=4).unwrap_err();
        assert_eq!(
            err.message(),
            "scheme XOR: parameter `set_size` = 8 is out of range 2..=4"
        );
        let err = params.only(&["set_size", "crc"]).unwrap_err();
        assert_eq!(
            err.message(),
            "scheme XOR: unknown parameter `REPLICAS` (known: set_size, crc)"
        );
    }
}
