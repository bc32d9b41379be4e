//! `scr config import`: translate an SCR configuration file (`KEY=VALUE` lines, `STORE=`,
//! `CKPT=` and `GROUPS=` descriptor lines) into our TOML, so a site can move over without
//! rewriting its files by hand.

use std::fmt::Write as _;

use super::keys::{self, Type};
use super::{toml_key, toml_string as q};

/// One untranslatable line.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportError {
    /// 1-based line number in the SCR file.
    pub line: usize,
    /// What is wrong.
    pub message: LineError,
}

/// What is wrong with a line of an SCR configuration file.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// A token without `=`.
    #[error("`{0}` is not KEY=VALUE")]
    NotKeyValue(String),
    /// Several tokens, and the first is no descriptor's head.
    #[error("{0}= starts no descriptor SCR defines (STORE, CKPT, GROUPS)")]
    NoDescriptor(String),
    /// A `STORE=` line's key SCR does not define.
    #[error("STORE line: unknown key {0}")]
    UnknownStoreKey(String),
    /// A descriptor's count that is not a whole number.
    #[error("{key}={value}: not a whole number")]
    NotWhole {
        /// The key.
        key: String,
        /// Its value.
        value: String,
    },
    /// A parameter's value that does not fit its key.
    #[error("{head}: {error}")]
    Value {
        /// The parameter, as written.
        head: String,
        /// What is wrong with its value.
        error: keys::ValueError,
    },
    /// A parameter no key answers to.
    #[error("{}", keys::unknown_key(.0))]
    UnknownKey(String),
}

/// Translate the text of an SCR configuration file. Every problem is reported with its
/// line; the TOML is produced only when there is none.
pub fn import_scr(text: &str) -> Result<String, Vec<ImportError>> {
    let mut scalars = String::new();
    let mut tables = String::new();
    let mut errors = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut err = |message: LineError| {
            errors.push(ImportError {
                line: n + 1,
                message,
            })
        };
        let pairs = match key_value_pairs(line) {
            Ok(p) => p,
            Err(e) => {
                err(e);
                continue;
            }
        };
        let (head, head_value) = (&pairs[0].0, &pairs[0].1);
        let rest = &pairs[1..];
        match head.as_str() {
            "STORE" => tables.push_str(&store_table(head_value, rest, &mut err)),
            "CKPT" => tables.push_str(&checkpoint_table(rest, &mut err)),
            "GROUPS" => tables.push_str(&group_table(head_value, rest)),
            _ if !rest.is_empty() => err(LineError::NoDescriptor(head.clone())),
            _ => match scalar_line(head, head_value) {
                Ok(text) => scalars.push_str(&text),
                Err(e) => err(e),
            },
        }
    }
    if errors.is_empty() {
        Ok(format!(
            "# translated from an SCR configuration file\n{scalars}{tables}"
        ))
    } else {
        Err(errors)
    }
}

/// The `KEY=VALUE` tokens of one line (keys upper-cased), or the error for the first
/// token that is not one.
fn key_value_pairs(line: &str) -> Result<Vec<(String, String)>, LineError> {
    line.split_whitespace()
        .map(|tok| {
            tok.split_once('=')
                .map(|(k, v)| (k.to_ascii_uppercase(), v.to_string()))
                .ok_or_else(|| LineError::NotKeyValue(tok.to_string()))
        })
        .collect()
}

/// A `STORE=path KEY=VALUE...` line as a `[[store]]` table; each unknown key or bad
/// count goes to `err` (the table is still returned, without it).
fn store_table(path: &str, rest: &[(String, String)], err: &mut dyn FnMut(LineError)) -> String {
    let mut t = format!("\n[[store]]\npath = {}\n", q(path));
    for (k, v) in rest {
        match k.as_str() {
            "GROUP" => writeln!(t, "group = {}", q(v)),
            "COUNT" => match whole(k, v) {
                Ok(n) => writeln!(t, "count = {n}"),
                Err(e) => {
                    err(e);
                    Ok(())
                }
            },
            "TYPE" => writeln!(t, "type = {}", q(v)),
            "VIEW" => writeln!(t, "view = {}", q(&v.to_ascii_lowercase())),
            "ENABLED" => writeln!(t, "enabled = {}", v != "0"),
            "MKDIR" => writeln!(t, "mkdir = {}", v != "0"),
            other => {
                err(LineError::UnknownStoreKey(other.to_string()));
                Ok(())
            }
        }
        .expect("writing to a String");
    }
    t
}

/// A `CKPT=N KEY=VALUE...` line as a `[[checkpoint]]` table: the keys SCR defines as
/// fields, any other key as a scheme parameter under `[checkpoint.params]`; a bad whole
/// number goes to `err`.
fn checkpoint_table(rest: &[(String, String)], err: &mut dyn FnMut(LineError)) -> String {
    let mut t = String::from("\n[[checkpoint]]\n");
    let mut params = String::new();
    for (k, v) in rest {
        match k.as_str() {
            "INTERVAL" | "SET_SIZE" | "SET_FAILURES" | "REPLICAS" | "HOP_DISTANCE" => {
                match whole(k, v) {
                    Ok(n) => writeln!(t, "{} = {n}", k.to_ascii_lowercase()),
                    Err(e) => {
                        err(e);
                        Ok(())
                    }
                }
            }
            "GROUP" | "STORE" => {
                writeln!(t, "{} = {}", k.to_ascii_lowercase(), q(v))
            }
            "TYPE" => writeln!(t, "type = {}", q(v)),
            "OUTPUT" | "BYPASS" | "ENABLED" | "PROTECT_IN_BACKGROUND" => {
                writeln!(t, "{} = {}", k.to_ascii_lowercase(), v != "0")
            }
            other => writeln!(
                params,
                "{} = {}",
                toml_key(&other.to_ascii_lowercase()),
                q(v)
            ),
        }
        .expect("writing to a String");
    }
    if !params.is_empty() {
        t.push_str("[checkpoint.params]\n");
        t.push_str(&params);
    }
    t
}

/// A `GROUPS=host NAME=VALUE...` line as a `[[group]]` table.
fn group_table(host: &str, rest: &[(String, String)]) -> String {
    let mut t = format!("\n[[group]]\nhost = {}\n", q(host));
    for (k, v) in rest {
        writeln!(t, "{} = {}", toml_key(k), q(v)).expect("writing to a String");
    }
    t
}

/// A `SCR_KEY=VALUE` line as our scalar line (empty for `SCR_COPY_TYPE=FILE`, which
/// `[[checkpoint]]` tables imply), or why it cannot be translated.
fn scalar_line(head: &str, value: &str) -> Result<String, LineError> {
    match keys::find_api(head) {
        _ if head == "SCR_COPY_TYPE" && value.eq_ignore_ascii_case("FILE") => {
            // SCR's switch to CKPT descriptors: implied by [[checkpoint]] tables.
            Ok(String::new())
        }
        Some(key) => match keys::parse_text(key.ty, value) {
            Ok(v) => {
                let text = match key.ty {
                    Type::Str | Type::Path | Type::Choice(_) => format!("{:?}", v.to_param()),
                    _ => v.to_string(),
                };
                Ok(format!("{} = {text}\n", key.name))
            }
            Err(error) => Err(LineError::Value {
                head: head.to_string(),
                error,
            }),
        },
        None => Err(LineError::UnknownKey(head.to_string())),
    }
}

/// A whole-number descriptor value, or the error for its line.
fn whole(key: &str, value: &str) -> Result<u64, LineError> {
    value.parse::<u64>().map_err(|_| LineError::NotWhole {
        key: key.to_string(),
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_descriptor_lines_translate_to_tables() {
        let scr = "# SCR config\nSCR_COPY_TYPE=FILE\nSCR_CACHE_SIZE=3\nSCR_FLUSH=20\n\
                   STORE=/ssd GROUP=NODE COUNT=3 TYPE=bbapi MKDIR=0\n\
                   CKPT=0 INTERVAL=1 GROUP=NODE STORE=/ssd TYPE=XOR SET_SIZE=16\n\
                   CKPT=1 INTERVAL=8 GROUP=SWITCH STORE=/ssd TYPE=PARTNER HOP=2\n\
                   GROUPS=zin1 POWER=psu1 SWITCH=0\n";
        let toml = import_scr(scr).unwrap();
        assert_eq!(
            toml,
            "# translated from an SCR configuration file\ncache_size = 3\nflush = 20\n\
             \n[[store]]\npath = \"/ssd\"\ngroup = \"NODE\"\ncount = 3\ntype = \"bbapi\"\nmkdir = false\n\
             \n[[checkpoint]]\ninterval = 1\ngroup = \"NODE\"\nstore = \"/ssd\"\ntype = \"XOR\"\nset_size = 16\n\
             \n[[checkpoint]]\ninterval = 8\ngroup = \"SWITCH\"\nstore = \"/ssd\"\ntype = \"PARTNER\"\n\
             [checkpoint.params]\nhop = \"2\"\n\
             \n[[group]]\nhost = \"zin1\"\nPOWER = \"psu1\"\nSWITCH = \"0\"\n"
        );
    }

    #[test]
    fn bad_lines_are_reported_with_their_numbers() {
        let errors = import_scr(
            "SCR_CACHE_SIZE=x\n\nSCR_CAHCE_BASE=/tmp\nSTORE=/x FOO=1\njunk\nSTORE=/y COUNT=two\nCKPT=0 INTERVAL=1;x=1\n",
        )
        .unwrap_err();
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, [1, 3, 4, 5, 6, 7]);
        let message = |i: usize| errors[i].message.to_string();
        assert_eq!(message(4), "COUNT=two: not a whole number");
        assert_eq!(message(5), "INTERVAL=1;x=1: not a whole number");
        assert!(
            message(1).contains("did you mean `cache_base`?"),
            "{:?}",
            errors[1]
        );
        assert_eq!(message(2), "STORE line: unknown key FOO");
        assert_eq!(message(3), "`junk` is not KEY=VALUE");
    }
}
