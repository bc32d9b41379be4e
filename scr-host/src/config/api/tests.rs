//! Tests of the SCR_Config calls and queries.

use super::*;

#[test]
fn scalar_forms() {
    assert!(
        matches!(parse("SCR_FLUSH=10"), Ok(ApiCall::Set { key, value: Some(Value::UInt(10)) }) if key.name == "flush")
    );
    assert!(
        matches!(parse("flush="), Ok(ApiCall::Set { key, value: None }) if key.name == "flush")
    );
    assert!(matches!(parse(" SCR_FLUSH "), Ok(ApiCall::Query(key)) if key.name == "flush"));
    assert!(
        matches!(parse("SCR_PREFIX=\"/my/dir/with/=/sign\""), Ok(ApiCall::Set { value: Some(Value::Str(s)), .. }) if s == "/my/dir/with/=/sign")
    );
    assert!(parse("SCR_SET_SIZE=1")
        .unwrap_err()
        .to_string()
        .contains("out of range"));
    assert!(parse("SCR_NOPE=1")
        .unwrap_err()
        .to_string()
        .contains("SCR_NOPE"));
    assert!(parse("").is_err());
}

/// SCR's flow-control keys are accepted as SCR spells them, at least 1.
#[test]
fn the_width_keys_are_accepted_from_one_up() {
    for (text, name) in [
        ("SCR_FLUSH_WIDTH=4", "flush_width"),
        ("SCR_FETCH_WIDTH=4", "fetch_width"),
    ] {
        assert!(
            matches!(parse(text), Ok(ApiCall::Set { key, value: Some(Value::UInt(4)) }) if key.name == name),
            "{text}"
        );
        let zero = text.replace('4', "0");
        assert!(
            parse(&zero)
                .unwrap_err()
                .to_string()
                .contains("out of range"),
            "{zero}"
        );
    }
}

#[test]
fn descriptor_forms() {
    match parse("CKPT=0 TYPE=XOR SET_SIZE=16").unwrap() {
        ApiCall::Descriptor { kind, name, items } => {
            assert_eq!(kind, DescriptorKind::Checkpoint);
            assert_eq!(name, "0");
            assert_eq!(
                items,
                vec![
                    ("TYPE".into(), Some("XOR".into())),
                    ("SET_SIZE".into(), Some("16".into()))
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse("CKPT=1 type").unwrap(),
        ApiCall::DescriptorQuery { kind: DescriptorKind::Checkpoint, name, item } if name == "1" && item == "TYPE"
    ));
    assert!(parse("CKPT=x TYPE=XOR")
        .unwrap_err()
        .to_string()
        .contains("index"));
    assert!(parse("STORE=/dev/shm COUNT=two")
        .unwrap_err()
        .to_string()
        .contains("COUNT"));
    assert!(parse("CKPT=0")
        .unwrap_err()
        .to_string()
        .contains("sets nothing"));
}

#[test]
fn later_calls_override_items_and_descriptors_keep_index_order() {
    let calls: Vec<(usize, String)> = [
        "CKPT=10 INTERVAL=4 TYPE=PARTNER",
        "CKPT=2 TYPE=XOR SET_SIZE=16",
        "CKPT=2 TYPE=SINGLE",
        "STORE=/dev/shm/ COUNT=2",
        "SCR_FLUSH=3",
        "SCR_FLUSH=",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| (i + 1, t.to_string()))
    .collect();
    let mut errors = Vec::new();
    let l = layer(&calls, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(l.checkpoints.len(), 2);
    assert_eq!(l.checkpoints[0].scheme.as_deref(), Some("SINGLE"));
    assert_eq!(l.checkpoints[0].numbers.get("set_size"), Some(&16));
    assert_eq!(
        l.checkpoints[0].origin,
        Origin::Api(3, "CKPT=2 TYPE=SINGLE".into())
    );
    assert_eq!(l.checkpoints[1].interval, 4);
    assert_eq!(l.stores[0].path, "/dev/shm");
    assert_eq!(l.stores[0].count, Some(2));
    assert!(!l.scalars.contains_key("flush"));
    assert_eq!(l.checkpoints[0].index, Some(2));
    assert_eq!(l.checkpoints[1].index, Some(10));
}

#[test]
fn a_query_answers_what_something_set_and_none_for_a_default() {
    let dir = std::env::temp_dir();
    let mut loader = super::super::Loader::from_process();
    loader.env = [("SCR_CACHE_SIZE".to_string(), "3".to_string())].into();
    loader.system_file = Some(std::path::PathBuf::from("/dev/null"));
    loader.cwd = dir;
    loader.api = vec![
        (1, "SCR_FLUSH=4".to_string()),
        (2, "SCR_HALT_SECONDS=9".into()),
        (4, "SCR_CACHE_BYPASS=yes".into()),
    ];
    loader.api.push((3, "SCR_HALT_SECONDS=".into()));
    let config = loader.load().unwrap();
    let ask = |text: &str| config.query(&parse(text).unwrap()).unwrap();
    assert_eq!(
        ask("SCR_CACHE_SIZE").as_deref(),
        Some("3"),
        "from the environment"
    );
    assert_eq!(ask("SCR_FLUSH").as_deref(), Some("4"), "through the API");
    assert_eq!(ask("SCR_DEBUG"), None, "a built-in default is not reported");
    assert_eq!(ask("SCR_HALT_SECONDS"), None, "set, then unset");
    assert_eq!(
        ask("SCR_CACHE_BYPASS").as_deref(),
        Some("1"),
        "a boolean as SCR answers it, for atoi"
    );
}

#[test]
fn spaces_around_the_equals_sign_are_allowed_as_in_scr() {
    assert!(
        matches!(parse("SCR_FLUSH = 10"), Ok(ApiCall::Set { key, value: Some(Value::UInt(10)) }) if key.name == "flush")
    );
    assert!(
        matches!(parse("SCR_FLUSH ="), Ok(ApiCall::Set { key, value: None }) if key.name == "flush")
    );
    assert!(matches!(
        parse("CKPT = 0 TYPE = PARTNER"),
        Ok(ApiCall::Descriptor { ref name, ref items, .. })
            if name == "0" && items == &[("TYPE".to_string(), Some("PARTNER".to_string()))]
    ));
    // an empty value followed by the next item stays two items
    assert!(matches!(
        parse("CKPT=0 TYPE= SET_SIZE=4"),
        Ok(ApiCall::Descriptor { ref items, .. })
            if items == &[("TYPE".to_string(), None), ("SET_SIZE".to_string(), Some("4".to_string()))]
    ));
    assert!(matches!(
        parse("CKPT = 0 TYPE"),
        Ok(ApiCall::DescriptorQuery { ref name, ref item, .. }) if name == "0" && item == "TYPE"
    ));
}

#[test]
fn bare_kinds_query_the_first_descriptor_set_and_clearing_forgets_the_calls() {
    assert!(matches!(
        parse("STORE"),
        Ok(ApiCall::FirstDescriptor(DescriptorKind::Store))
    ));
    assert!(matches!(
        parse(" ckpt "),
        Ok(ApiCall::FirstDescriptor(DescriptorKind::Checkpoint))
    ));
    assert!(matches!(
        parse("GROUPS="),
        Ok(ApiCall::ClearDescriptors(DescriptorKind::Groups))
    ));
    assert!(parse("STORE=").unwrap().is_set());
    assert!(!parse("STORE").unwrap().is_set());
    // an empty name with items is still an error, naming what is missing
    assert!(parse("STORE= COUNT=2")
        .unwrap_err()
        .to_string()
        .contains("names no store path"));

    let dir = tempfile::tempdir().unwrap();
    let load = |calls: &[&str]| {
        let mut loader = super::super::Loader::from_process();
        loader.env = BTreeMap::new();
        loader.system_file = Some(std::path::PathBuf::from("/dev/null"));
        loader.cwd = dir.path().to_path_buf();
        loader.api = calls
            .iter()
            .enumerate()
            .map(|(i, t)| (i + 1, t.to_string()))
            .collect();
        loader.load().unwrap()
    };
    let ask = |config: &Config, text: &str| config.query(&parse(text).unwrap()).unwrap();
    // nothing set: the implied store and descriptor are not reported, even when
    // the environment or a call set cache_base
    let none = load(&["SCR_CACHE_BASE=/dev/shm/elsewhere"]);
    assert_eq!(ask(&none, "STORE"), None);
    assert_eq!(ask(&none, "CKPT"), None);
    assert_eq!(ask(&none, "GROUPS"), None);
    let some = load(&[
        "STORE=/ssd COUNT=3",
        "STORE=/dev/shm/a COUNT=1",
        "CKPT=4 INTERVAL=4 TYPE=SINGLE STORE=/ssd",
        "CKPT=2 TYPE=XOR STORE=/ssd",
        "GROUPS=host7 POWER=p1",
    ]);
    // the first in the order in force: stores set through the API by path,
    // checkpoint descriptors by index
    assert_eq!(ask(&some, "STORE").as_deref(), Some("/dev/shm/a"));
    assert_eq!(ask(&some, "CKPT").as_deref(), Some("2"), "index order");
    assert_eq!(ask(&some, "GROUPS").as_deref(), Some("host7"));
    let cleared = load(&[
        "STORE=/ssd COUNT=3",
        "CKPT=0 TYPE=SINGLE",
        "GROUPS=host7 POWER=p1",
        "STORE=",
        "CKPT=",
        "GROUPS=",
        "STORE=/dev/shm/b COUNT=1",
    ]);
    assert_eq!(
        ask(&cleared, "STORE").as_deref(),
        Some("/dev/shm/b"),
        "a store set after the clearing stays"
    );
    assert_eq!(ask(&cleared, "CKPT"), None);
    assert_eq!(ask(&cleared, "GROUPS"), None);
    assert!(cleared.stores.iter().all(|s| s.path != "/ssd"));
}

#[test]
fn conf_file_through_the_api_names_the_user_file_and_wins_over_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let api_file = dir.path().join("api.toml");
    let env_file = dir.path().join("env.toml");
    std::fs::write(&api_file, "cache_size = 5\n").unwrap();
    std::fs::write(&env_file, "cache_size = 7\n").unwrap();
    let load = |env: &[(&str, &std::path::Path)], calls: &[String]| {
        let mut loader = super::super::Loader::from_process();
        loader.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.display().to_string()))
            .collect();
        loader.system_file = Some(std::path::PathBuf::from("/dev/null"));
        loader.cwd = dir.path().to_path_buf();
        loader.api = calls.iter().cloned().enumerate().collect();
        loader.load()
    };
    let ask = |config: &Config, text: &str| config.query(&parse(text).unwrap()).unwrap();
    let set_api = vec![format!("SCR_CONF_FILE={}", api_file.display())];
    let env = [("SCR_CONF_FILE", env_file.as_path())];

    let by_env = load(&env, &[]).unwrap();
    assert_eq!(by_env.get(settings::CACHE_SIZE), 7);
    assert_eq!(
        ask(&by_env, "SCR_CONF_FILE").as_deref(),
        Some(env_file.to_str().unwrap())
    );
    let by_api = load(&env, &set_api).unwrap();
    assert_eq!(
        by_api.get(settings::CACHE_SIZE),
        5,
        "the API's file is read"
    );
    assert_eq!(
        ask(&by_api, "SCR_CONF_FILE").as_deref(),
        Some(api_file.to_str().unwrap())
    );
    assert!(matches!(
        by_api.setting_of(settings::CONF_FILE).origin,
        Origin::Api(..)
    ));
    // unset again: the environment's file
    let unset = load(&env, &[set_api[0].clone(), "SCR_CONF_FILE=".into()]).unwrap();
    assert_eq!(unset.get(settings::CACHE_SIZE), 7);
    // a configuration file cannot name the user file
    std::fs::write(&env_file, "conf_file = \"/x.toml\"\n").unwrap();
    let refused = load(&env, &[]).unwrap_err().to_string();
    assert!(
        refused.contains("env.toml:1") && refused.contains("SCR_CONF_FILE"),
        "{refused}"
    );
}

#[test]
fn the_restart_prefix_and_log_keys_of_scr_are_accepted_and_typed() {
    for (text, key) in [
        ("SCR_CURRENT=ckpt.7", "current"),
        ("SCR_DROP_AFTER_CURRENT=1", "drop_after_current"),
        ("SCR_PREFIX_SIZE=3", "prefix_size"),
        ("SCR_PREFIX_PURGE=1", "prefix_purge"),
        ("SCR_GLOBAL_RESTART=1", "global_restart"),
        ("SCR_LOG_ENABLE=0", "log_enable"),
        ("SCR_LOG_TXT_ENABLE=0", "log_txt_enable"),
        ("SCR_LOG_SYSLOG_ENABLE=1", "log_syslog_enable"),
        ("SCR_LOG_SYSLOG_PREFIX=myapp", "log_syslog_prefix"),
        ("SCR_LOG_SYSLOG_FACILITY=log_local3", "log_syslog_facility"),
        ("SCR_LOG_SYSLOG_LEVEL=LOG_NOTICE", "log_syslog_level"),
        ("SCR_LOG_DB_ENABLE=1", "log_db_enable"),
        ("SCR_LOG_DB_DEBUG=1", "log_db_debug"),
        ("SCR_LOG_DB_HOST=db.example", "log_db_host"),
        ("SCR_LOG_DB_USER=scr", "log_db_user"),
        ("SCR_LOG_DB_PASS=secret", "log_db_pass"),
        ("SCR_LOG_DB_NAME=scrdb", "log_db_name"),
        ("SCR_CONF_FILE=/etc/my.toml", "conf_file"),
    ] {
        assert!(
            matches!(parse(text), Ok(ApiCall::Set { key: k, value: Some(_) }) if k.name == key),
            "{text}"
        );
    }
    assert!(parse("SCR_PREFIX_SIZE=-1")
        .unwrap_err()
        .to_string()
        .contains("prefix_size"));
    assert!(parse("SCR_GLOBAL_RESTART=maybe")
        .unwrap_err()
        .to_string()
        .contains("global_restart"));
    assert!(parse("SCR_LOG_SYSLOG_LEVEL=LOUD")
        .unwrap_err()
        .to_string()
        .contains("LOG_INFO"));
}

/// A database password given through the API (refused at load: there is no database)
/// is not left readable in the prefix's record of the calls: it says it was set.
#[test]
fn a_password_is_recorded_as_set_not_as_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let calls = [
        (1, "SCR_LOG_DB_PASS=hunter2".to_string()),
        (2, "SCR_FLUSH=1".to_string()),
    ];
    record(dir.path(), &calls).unwrap();
    let text = std::fs::read_to_string(record_path(dir.path())).unwrap();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        text.contains("1\tSCR_LOG_DB_PASS=(set, not recorded)\n"),
        "{text}"
    );
    assert!(text.contains("2\tSCR_FLUSH=1\n"), "{text}");
}

/// `PROTECT_IN_BACKGROUND` is a descriptor key of `SCR_Config` as `BYPASS` is: set on the
/// descriptor, and answered by a query of it (the setting when the descriptor names none).
#[test]
fn protect_in_background_is_a_descriptor_key() {
    let calls: Vec<(usize, String)> = vec![
        (1, "CKPT=0 TYPE=XOR PROTECT_IN_BACKGROUND=1".into()),
        (2, "CKPT=1 INTERVAL=2 TYPE=RS".into()),
    ];
    let mut errors = Vec::new();
    let l = layer(&calls, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(l.checkpoints[0].protect_in_background, Some(true));
    assert_eq!(l.checkpoints[1].protect_in_background, None);
    let mut loader = super::super::Loader::from_process();
    loader.env = Default::default();
    loader.system_file = Some(std::path::PathBuf::from("/dev/null"));
    loader.cwd = std::env::temp_dir();
    loader.api = calls;
    let config = loader.load().expect("loads");
    let ask = |text: &str| config.query(&parse(text).unwrap()).unwrap();
    assert_eq!(ask("CKPT=0 PROTECT_IN_BACKGROUND").as_deref(), Some("1"));
    assert_eq!(ask("CKPT=1 PROTECT_IN_BACKGROUND").as_deref(), Some("0"));
}
