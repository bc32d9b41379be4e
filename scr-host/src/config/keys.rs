//! Scalar keys by name, as they are written at run time: TOML files, `SCR_<KEY>`
//! environment variables, `SCR_Config` strings, queries; with "did you mean" hints for
//! the names that are not keys.
//!
//! Names are SCR's parameter names in lower case (`SCR_CACHE_SIZE` → `cache_size`), so an
//! SCR user finds their way. The keys themselves are declared once, in the catalog
//! (`catalog.rs`); this module re-exports its tables and the vocabulary they are written
//! in (`types.rs`), so that code naming keys at run time has one place to go.

pub use super::catalog::{ALIASES, KEYS, SYSLOG_FACILITIES, SYSLOG_LEVELS};
pub use super::types::{
    check_percent, check_uint, parse_bytes, parse_text, Default, Key, Type, Value, ValueError,
};

/// Look a scalar key up by name or alias (case-insensitive).
pub fn find(name: &str) -> Option<&'static Key> {
    let name = ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map_or(name, |(_, key)| key);
    KEYS.iter().find(|k| k.name.eq_ignore_ascii_case(name))
}

/// The environment variables that set `key`: its own first, then its aliases'.
pub(crate) fn env_vars(key: &Key) -> Vec<String> {
    std::iter::once(key.env_var())
        .chain(
            ALIASES
                .iter()
                .filter(|(_, k)| *k == key.name)
                .map(|(alias, _)| format!("SCR_{}", alias.to_ascii_uppercase())),
        )
        .collect()
}

/// Look a key up as an application may spell it through the API: `cache_size`,
/// `CACHE_SIZE` or `SCR_CACHE_SIZE` (SCR's `SCR_Config` accepts the parameter names).
pub fn find_api(name: &str) -> Option<&'static Key> {
    let n = name.trim();
    find(n).or_else(|| {
        n.get(..4)
            .filter(|p| p.eq_ignore_ascii_case("scr_"))
            .and_then(|_| find(&n[4..]))
    })
}

/// "unknown key `k` (did you mean `x`?)" for a scalar key name.
pub(crate) fn unknown_key(k: &str) -> String {
    let bare = k
        .get(..4)
        .filter(|p| p.eq_ignore_ascii_case("scr_"))
        .map_or(k, |_| &k[4..]);
    let hint = suggest(bare, KEYS.iter().map(|k| k.name))
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    format!("unknown key `{k}`{hint}")
}

/// The closest known word to `word`, for "did you mean" hints.
pub(crate) fn suggest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let w = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (edit_distance(&w, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_values_are_typed_and_range_checked() {
        let size = find("SET_SIZE").unwrap();
        assert_eq!(parse_text(size.ty, "16"), Ok(Value::UInt(16)));
        assert_eq!(
            parse_text(size.ty, "1").unwrap_err().to_string(),
            "1 is out of range: expected a whole number in 2..=4096"
        );
        assert_eq!(parse_text(Type::Bool, "yes"), Ok(Value::Bool(true)));
        assert_eq!(
            parse_text(Type::Bool, "maybe").unwrap_err().to_string(),
            "\"maybe\" is not a boolean (true or false)"
        );
        assert!(parse_text(Type::Percent, "101").is_err());
    }

    #[test]
    fn scr_names_of_keys_are_aliases() {
        assert_eq!(find("user_name").map(|k| k.name), Some("user"));
        assert_eq!(find_api("SCR_USER_NAME").map(|k| k.name), Some("user"));
        assert_eq!(
            env_vars(find("user").unwrap()),
            ["SCR_USER", "SCR_USER_NAME"]
        );
    }

    #[test]
    fn suggestions_catch_typos_only() {
        let names = KEYS.iter().map(|k| k.name);
        assert_eq!(suggest("cache_bse", names.clone()), Some("cache_base"));
        assert_eq!(suggest("zzzzzz", names), None);
    }
}
