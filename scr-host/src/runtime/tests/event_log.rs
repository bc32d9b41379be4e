//! The SCR_LOG_* keys: where the runtime's events go.

use super::*;

/// The SCR_LOG_* keys: by default rank 0 writes the event log in the prefix; with
/// `log_enable` or `log_txt_enable` off there is none; syslog may be on beside it.
/// (`log_db_enable` is refused by the configuration: see the config tests.)
#[test]
fn the_log_keys_choose_where_events_go() {
    for (env, text_log) in [
        (vec![], true),
        (vec![("SCR_LOG_ENABLE", "0")], false),
        (vec![("SCR_LOG_TXT_ENABLE", "0")], false),
        (
            vec![
                ("SCR_LOG_SYSLOG_ENABLE", "1"),
                ("SCR_LOG_SYSLOG_PREFIX", "scr-rs-test"),
            ],
            true,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let nodes = ["n0", "n1"];
        let prefix = dir.path().join("prefix");
        let mut env = env.clone();
        env.push(("SCR_FLUSH", "1"));
        let out = job_with(dir.path(), &nodes, &env, InitOptions::default(), |rt, r| {
            write_range(rt, dir.path(), r, 1..=1)
        });
        let case = format!("{env:?}");
        assert!(out.iter().all(|(_, end, _)| end.is_ok()), "{case}");
        let log = crate::events::path(&prefix);
        assert_eq!(log.exists(), text_log, "{case}");
        if text_log {
            let (records, _) = crate::events::read(&prefix).unwrap();
            let kinds: Vec<String> = records
                .iter()
                .map(|r| serde_json::to_value(&r.event).unwrap()["event"].to_string())
                .collect();
            assert_eq!(
                kinds,
                ["\"init\"", "\"checkpoint\"", "\"flush\"", "\"finalize\""],
                "{case}"
            );
        }
    }
}
