//! Configuration: every error class names its file and line (or variable / API call),
//! every source's precedence, locked keys, defaults, and descriptor selection.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use scr_host::config::keys::Value;
use scr_host::config::{settings, Config, ConfigError, ConfigErrors, Loader, Origin};

struct Env {
    dir: tempfile::TempDir,
    vars: BTreeMap<String, String>,
    api: Vec<String>,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
            vars: BTreeMap::new(),
            api: Vec::new(),
        }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn system(mut self, text: &str) -> Env {
        let p = self.file("system.toml", text);
        self.vars
            .insert("SCR_SYSTEM_CONFIG".into(), p.display().to_string());
        self
    }

    fn user(mut self, text: &str) -> Env {
        let p = self.file("user.toml", text);
        self.vars
            .insert("SCR_CONF_FILE".into(), p.display().to_string());
        self
    }

    fn var(mut self, k: &str, v: &str) -> Env {
        self.vars.insert(k.into(), v.into());
        self
    }

    fn api(mut self, text: &str) -> Env {
        self.api.push(text.into());
        self
    }

    fn loader(&self) -> Loader {
        let mut vars = self.vars.clone();
        // never read the machine's own system file
        vars.entry("SCR_SYSTEM_CONFIG".into()).or_insert_with(|| {
            let p = self.dir.path().join("empty-system.toml");
            std::fs::write(&p, "").unwrap();
            p.display().to_string()
        });
        let mut loader = Loader::default();
        loader.env = vars;
        loader.api = self
            .api
            .iter()
            .enumerate()
            .map(|(i, t)| (i + 1, t.clone()))
            .collect();
        loader.cwd = self.dir.path().to_path_buf();
        loader
    }

    fn load(&self) -> Result<Config, ConfigErrors> {
        self.loader().load()
    }

    fn errors(&self) -> Vec<ConfigError> {
        self.load().expect_err("configuration should be invalid").0
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn at(path: &Path, line: usize) -> Origin {
    Origin::File {
        path: path.to_path_buf(),
        line,
    }
}

/// Asserts exactly one error, at `origin`, whose message contains every fragment.
fn one_error(errors: Vec<ConfigError>, origin: Origin, fragments: &[&str]) {
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].origin, origin, "{errors:#?}");
    for f in fragments {
        assert!(
            errors[0].message.contains(f),
            "`{}` lacks `{f}`",
            errors[0].message
        );
    }
}

mod errors {
    use super::*;

    #[test]
    fn toml_syntax_error_names_the_line() {
        let env = Env::new().user("cache_size = 2\n\nset_size = = 3\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 3),
            &["TOML syntax error"],
        );
    }

    /// A file saved in another encoding: the error names the first line that is not
    /// UTF-8 (not just the file), and what to do.
    #[test]
    fn non_utf8_file_names_the_first_bad_line() {
        let env = Env::new().user("cache_size = 2\n");
        std::fs::write(
            env.path("user.toml"),
            b"cache_size = 2\n# caf\xe9 machines\nset_size = 3\n# \xff\n",
        )
        .unwrap();
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &[
                "line 2, column 6: byte 0xe9 is not UTF-8",
                "re-save the file as UTF-8",
            ],
        );
    }

    #[test]
    fn unknown_key_suggests_the_right_one() {
        let env = Env::new().user("# comment\ncache_bse = \"/x\"\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &["unknown key `cache_bse`", "did you mean `cache_base`?"],
        );
    }

    #[test]
    fn scr_style_names_are_explained() {
        let env = Env::new().user("SCR_CACHE_SIZE = 3\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 1),
            &[
                "write `cache_size`",
                "SCR_ prefix is for environment variables",
            ],
        );
    }

    #[test]
    fn wrong_type_names_expected_and_found() {
        let env = Env::new().user("\ncache_size = \"lots\"\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &[
                "`cache_size`",
                "expected a whole number >= 1",
                "found string \"lots\"",
            ],
        );
    }

    #[test]
    fn out_of_range_values_are_refused() {
        let env = Env::new().user("set_size = 1\ncheckpoint_overhead = 150.0\ndebug = -1\n");
        let errors = env.errors();
        assert_eq!(errors.len(), 3, "{errors:#?}");
        assert_eq!(errors[0].origin, at(&env.path("user.toml"), 1));
        assert!(errors[0]
            .message
            .contains("1 is out of range: expected a whole number in 2..=4096"));
        assert_eq!(errors[1].origin, at(&env.path("user.toml"), 2));
        assert!(errors[1].message.contains("150 is out of range"));
        assert_eq!(errors[2].origin, at(&env.path("user.toml"), 3));
        assert!(errors[2].message.contains("-1 is negative"));
    }

    #[test]
    fn checkpoint_naming_an_undefined_store_or_group() {
        let env = Env::new().user(
            "[[checkpoint]]\ninterval = 1\nstore = \"/nvme\"\ngroup = \"RACK\"\ntype = \"XOR\"\n",
        );
        let errors = env.errors();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].origin, at(&env.path("user.toml"), 3));
        assert!(errors[0].message.contains("undefined store `/nvme`"));
        assert!(errors[0]
            .message
            .contains("add a [[store]] with path = \"/nvme\""));
        assert_eq!(errors[1].origin, at(&env.path("user.toml"), 4));
        assert!(errors[1]
            .message
            .contains("undefined group `RACK` (defined: NODE, WORLD)"));
    }

    #[test]
    fn store_naming_an_undefined_group() {
        let env = Env::new().user("[[store]]\npath = \"/ssd\"\ngroup = \"RACK\"\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 1),
            &["store `/ssd` names undefined group `RACK`"],
        );
    }

    #[test]
    fn no_descriptor_with_interval_one() {
        let env = Env::new().user("[[checkpoint]]\ninterval = 4\n\n[[checkpoint]]\ninterval = 8\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 1),
            &["no enabled checkpoint descriptor has interval = 1"],
        );
    }

    #[test]
    fn duplicate_intervals_and_stores() {
        let env = Env::new().user(
            "[[store]]\npath = \"/ssd\"\n[[store]]\npath = \"/ssd/\"\n\
             [[checkpoint]]\ninterval = 1\n[[checkpoint]]\ninterval = 1\n",
        );
        let errors = env.errors();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        let file = env.path("user.toml");
        assert_eq!(errors[0].origin, at(&file, 3));
        assert!(errors[0].message.contains(&format!(
            "duplicate store `/ssd`: already defined at {}:1",
            file.display()
        )));
        assert_eq!(errors[1].origin, at(&file, 8));
        assert!(errors[1].message.contains(&format!(
            "duplicate checkpoint interval 1: already used by the descriptor at {}:5",
            file.display()
        )));
    }

    #[test]
    fn an_output_descriptor_may_share_an_interval_and_bypass_defaults_to_cache_bypass() {
        let env = Env::new().user(
            "cache_bypass = true\n[[checkpoint]]\ninterval = 1\nbypass = false\n\
             [[checkpoint]]\ninterval = 1\noutput = true\n",
        );
        let config = env.load().expect("valid");
        // its own `bypass`, else `cache_bypass`
        assert!(!config.descriptor(0).bypass.0);
        assert!(config.descriptor(1).bypass.0);
        // two descriptors of one interval, neither for output: still refused
        let env = Env::new()
            .user("[[checkpoint]]\ninterval = 1\n[[checkpoint]]\ninterval = 1\nbypass = true\n");
        assert!(env.errors()[0]
            .message
            .contains("duplicate checkpoint interval 1"));
    }

    #[test]
    fn scr_test_api_config_calls_load() {
        // the calls of SCR's test_api --config-api, and SCR_COPY_TYPE=FILE from the
        // environment as SCR's test scripts export it
        let env = Env::new()
            .var("SCR_COPY_TYPE", "FILE")
            .api("STORE=/dev/shm GROUP=NODE COUNT=1")
            .api("SCR_COPY_TYPE=FILE")
            .api("CKPT=0 INTERVAL=1 GROUP=NODE STORE=/dev/shm TYPE=XOR SET_SIZE=16")
            .api("SCR_DEBUG=1");
        let config = env.load().expect("valid");
        assert_eq!(config.checkpoints.len(), 1);
        let d = config.descriptor(0);
        assert_eq!(
            (d.scheme.0.as_str(), d.store_path.as_str()),
            ("XOR", "/dev/shm")
        );
        // FILE alone, with no descriptor defined: the implied one needs a scheme
        let errors = Env::new().api("SCR_COPY_TYPE=FILE").errors();
        assert!(
            errors[0].message.contains("FILE") && errors[0].message.contains("CKPT"),
            "{errors:#?}"
        );
    }

    #[test]
    fn unknown_keys_inside_tables() {
        let env = Env::new().user(
            "[[store]]\npath = \"/ssd\"\ncuont = 2\n[[checkpoint]]\ninterval = 1\nstripe = 4\n",
        );
        let errors = env.errors();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].origin, at(&env.path("user.toml"), 3));
        assert!(errors[0]
            .message
            .contains("unknown key `cuont` in [[store]] (did you mean `count`?)"));
        assert_eq!(errors[1].origin, at(&env.path("user.toml"), 6));
        assert!(errors[1].message.contains("its `params` table"));
    }

    #[test]
    fn host_tables_must_be_complete() {
        let env = Env::new().system(
            "[[group]]\nhost = \"zin1\"\nPOWER = \"psu1\"\n\n[[group]]\nhost = \"zin2\"\n\n[[group]]\nPOWER = \"x\"\n",
        );
        let errors = env.errors();
        let file = env.path("system.toml");
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].origin, at(&file, 8));
        assert!(errors[0].message.contains("needs `host ="));
        assert_eq!(errors[1].origin, at(&file, 5));
        assert!(errors[1]
            .message
            .contains("host `zin2` gives no value for group `POWER`"));
    }

    #[test]
    fn reserved_group_names() {
        let env = Env::new().system("[[group]]\nhost = \"a\"\nNODE = \"x\"\n");
        one_error(
            env.errors(),
            at(&env.path("system.toml"), 3),
            &["`NODE` is reserved"],
        );
    }

    #[test]
    fn environment_errors_name_the_variable() {
        let env = Env::new().var("SCR_FLUSH_ASYNC", "perhaps");
        one_error(
            env.errors(),
            Origin::Env("SCR_FLUSH_ASYNC".into()),
            &["\"perhaps\" is not a boolean"],
        );
    }

    #[test]
    fn api_errors_name_the_call() {
        let env = Env::new()
            .api("cache_size=2")
            .api("set_sise=4")
            .api("nonsense");
        let errors = env.errors();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].origin, Origin::Api(2, "set_sise=4".into()));
        assert!(errors[0].message.contains("did you mean `set_size`?"));
        assert_eq!(errors[1].origin, Origin::Api(3, "nonsense".into()));
        assert!(
            errors[1].message.contains("to set one write `KEY=VALUE`"),
            "{errors:#?}"
        );
    }

    #[test]
    fn missing_named_files_are_errors() {
        let env = Env::new().var("SCR_CONF_FILE", "/nonexistent/user.toml");
        one_error(
            env.errors(),
            at(Path::new("/nonexistent/user.toml"), 0),
            &["cannot read configuration file"],
        );
    }

    #[test]
    fn user_plugins_need_the_admins_permission() {
        let env = Env::new().user("[plugins]\ndirectories = [\"/home/me/plugins\"]\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &[
                "user plugin /home/me/plugins refused",
                "allow_user_plugins = false",
            ],
        );
        let env = Env::new()
            .system("[plugins]\nallow_user_plugins = true\n")
            .user("[plugins]\ndirectories = [\"/home/me/plugins\"]\n");
        let config = env.load().unwrap();
        assert_eq!(config.plugins.user_directories.len(), 1);
        assert_eq!(
            config.search_path().user_directories,
            vec![PathBuf::from("/home/me/plugins")]
        );
        let env = Env::new().user("[plugins]\nallow_user_plugins = true\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &["can only be set in the system configuration"],
        );
    }

    #[test]
    fn params_may_not_shadow_typed_keys() {
        let env = Env::new()
            .user("[[checkpoint]]\ninterval = 1\n[checkpoint.params]\nstripe = 4\nset_size = 0\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 5),
            &["params `set_size`: set it as a key of the descriptor"],
        );
    }

    #[test]
    fn a_disabled_store_is_named_with_its_line() {
        let env = Env::new().user("[[store]]\npath = \"/dev/shm\"\nenabled = false\n");
        let file = env.path("user.toml");
        one_error(
            env.errors(),
            Origin::Default,
            &[
                &format!("which is disabled at {}:1", file.display()),
                "enable the store or point the checkpoint at another one",
            ],
        );
    }

    #[test]
    fn relative_cache_and_control_bases_are_refused() {
        let env = Env::new()
            .var("SCR_CACHE_BASE", "rel")
            .var("SCR_CNTL_BASE", "rel2");
        let errors = env.errors();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].origin, Origin::Env("SCR_CACHE_BASE".into()));
        assert_eq!(
            errors[0].message,
            "`cache_base` = \"rel\" must be an absolute path"
        );
        assert_eq!(errors[1].origin, Origin::Env("SCR_CNTL_BASE".into()));
    }

    #[test]
    fn an_undefined_default_group_is_reported_once() {
        let env = Env::new().var("SCR_GROUP", "rack");
        one_error(
            env.errors(),
            Origin::Env("SCR_GROUP".into()),
            &["undefined group `rack`"],
        );
    }

    /// SCR keys for what scr-rs does not have load only with the value that asks for
    /// nothing; anything else is refused where it was set, saying what happens instead.
    #[test]
    fn keys_for_what_is_not_here_are_refused_unless_off() {
        let off = Env::new()
            .var("SCR_LOG_DB_ENABLE", "0")
            .var("SCR_LOG_DB_DEBUG", "0")
            .user("flush_poststage = false\n");
        off.load().expect("the off values load");
        let env = Env::new().var("SCR_LOG_DB_ENABLE", "1");
        one_error(
            env.errors(),
            Origin::Env("SCR_LOG_DB_ENABLE".into()),
            &[
                "no MySQL event database",
                "event log",
                "scr log",
                "set it to false",
            ],
        );
        let env = Env::new().user("log_db_debug = 0\nlog_db_host = \"db.example\"\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &["`log_db_host`", "remove the key"],
        );
        let env = Env::new().api("SCR_LOG_DB_PASS=secret");
        one_error(
            env.errors(),
            Origin::Api(1, "SCR_LOG_DB_PASS=secret".into()),
            &["`log_db_pass`"],
        );
        let env = Env::new().var("SCR_LOG_DB_DEBUG", "1");
        one_error(
            env.errors(),
            Origin::Env("SCR_LOG_DB_DEBUG".into()),
            &["`log_db_debug`"],
        );
        let env = Env::new().user("cache_size = 2\nflush_poststage = true\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &["`flush_poststage` = true", "finalize completes them"],
        );
    }

    #[test]
    fn every_problem_is_reported_not_just_the_first() {
        let env = Env::new()
            .user("cache_size = 0\nfoo = 1\n")
            .var("SCR_SET_SIZE", "x");
        assert_eq!(env.errors().len(), 3);
    }
}

mod precedence {
    use super::*;

    fn cache_size(env: &Env) -> (Value, Origin) {
        let c = env.load().unwrap();
        let s = c.setting_of(settings::CACHE_SIZE);
        (s.value.clone().unwrap(), s.origin.clone())
    }

    #[test]
    fn each_source_overrides_the_ones_below_it() {
        let env = Env::new();
        assert_eq!(cache_size(&env), (Value::UInt(2), Origin::Default));
        let env = env.system("\ncache_size = 3\n");
        assert_eq!(
            cache_size(&env),
            (Value::UInt(3), at(&env.path("system.toml"), 2))
        );
        let env = env.api("cache_size=4");
        assert_eq!(
            cache_size(&env),
            (Value::UInt(4), Origin::Api(1, "cache_size=4".into()))
        );
        let env = env.user("cache_size = 5\n");
        assert_eq!(
            cache_size(&env),
            (Value::UInt(5), at(&env.path("user.toml"), 1))
        );
        let env = env.var("SCR_CACHE_SIZE", "6");
        assert_eq!(
            cache_size(&env),
            (Value::UInt(6), Origin::Env("SCR_CACHE_SIZE".into()))
        );
    }

    #[test]
    fn user_file_is_found_in_the_prefix() {
        let env = Env::new();
        std::fs::create_dir(env.path("run")).unwrap();
        std::fs::write(env.path("run/.scrconf.toml"), "set_size = 4\n").unwrap();
        let env = env.var("SCR_PREFIX", "run");
        let c = env.load().unwrap();
        assert_eq!(c.get(settings::SET_SIZE), 4);
        assert_eq!(
            c.setting_of(settings::SET_SIZE).origin,
            at(&env.path("run/.scrconf.toml"), 1)
        );
        assert_eq!(
            c.get(settings::PREFIX),
            env.path("run").display().to_string()
        );
    }

    #[test]
    fn checkpoint_lists_replace_stores_and_hosts_merge() {
        let env = Env::new()
            .system(
                "[[store]]\npath = \"/ssd\"\ncount = 3\n[[store]]\npath = \"/tmp\"\n\
                 [[checkpoint]]\ninterval = 1\ntype = \"XOR\"\n[[checkpoint]]\ninterval = 2\n\
                 [[group]]\nhost = \"a\"\nPOWER = \"1\"\n",
            )
            .user(
                "[[store]]\npath = \"/ssd\"\ncount = 7\n[[checkpoint]]\ninterval = 1\ntype = \"PARTNER\"\n\
                 [[group]]\nhost = \"b\"\nPOWER = \"2\"\n",
            );
        let c = env.load().unwrap();
        assert_eq!(c.checkpoints.len(), 1);
        assert_eq!(c.checkpoints[0].scheme.as_deref(), Some("PARTNER"));
        assert_eq!(c.store("/ssd").unwrap().count, Some(7));
        assert!(c.store("/tmp").is_some());
        assert_eq!(c.groups.len(), 2);
    }

    #[test]
    fn trailing_slashes_do_not_make_a_store_undefined() {
        let env = Env::new()
            .var("SCR_CACHE_BASE", "/dev/shm/")
            .user("[[checkpoint]]\ninterval = 1\ntype = \"XOR\"\n");
        let c = env.load().unwrap();
        assert_eq!(c.descriptor(0).store_path, "/dev/shm");
        assert!(c.descriptor(0).store.is_some());
    }

    #[test]
    fn relative_plugin_paths_are_relative_to_their_file() {
        let env = Env::new().system("[plugins]\ndirectories = [\"plugins\", \"/abs\"]\n");
        let c = env.load().unwrap();
        assert_eq!(
            c.search_path().site_directories,
            vec![env.path("plugins"), PathBuf::from("/abs")]
        );
    }

    #[test]
    fn plugin_settings_are_passed_through_with_overrides() {
        let env = Env::new()
            .system("[plugins.bbapi]\nlibrary = \"/opt/ibm/libbbAPI.so\"\nretries = 3\n")
            .user("[plugins.BBAPI]\nretries = 5\n");
        let c = env.load().unwrap();
        let s: Vec<(String, String)> = c
            .plugin_settings("bbapi")
            .into_iter()
            .map(|p| (p.key.into_string(), p.value.into_string()))
            .collect();
        assert_eq!(
            s,
            vec![
                ("library".into(), "/opt/ibm/libbbAPI.so".into()),
                ("retries".into(), "5".into())
            ]
        );
    }
}

mod locks {
    use super::*;

    #[test]
    fn locked_keys_refuse_every_higher_source() {
        let base = || Env::new().system("cache_size = 3\nlocked = [\"cache_size\", \"store\"]\n");
        let lock_at = |env: &Env| format!("{}:2", env.path("system.toml").display());

        let env = base().var("SCR_CACHE_SIZE", "9");
        let errors = env.errors();
        one_error(
            errors,
            Origin::Env("SCR_CACHE_SIZE".into()),
            &[
                "`cache_size` is locked by the system configuration",
                &lock_at(&env),
            ],
        );

        let env = base().user("\ncache_size = 9\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 2),
            &["is locked", &lock_at(&env)],
        );

        let env = base().api("cache_size=9");
        one_error(
            env.errors(),
            Origin::Api(1, "cache_size=9".into()),
            &["is locked"],
        );

        let env = base().user("[[store]]\npath = \"/x\"\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 1),
            &["`store` is locked"],
        );

        let env = base();
        let c = env.load().unwrap();
        assert_eq!(c.get(settings::CACHE_SIZE), 3);
        assert!(c.locked.contains_key("cache_size"));
    }

    #[test]
    fn locked_keys_also_lock_the_table_fields_that_stand_for_them() {
        let env = Env::new()
            .system("locked = [\"copy_type\", \"set_size\"]\n")
            .user("[[checkpoint]]\ninterval = 1\ntype = \"SINGLE\"\nset_size = 4\n");
        let errors = env.errors();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].origin, at(&env.path("user.toml"), 3));
        assert!(errors[0].message.contains("`copy_type` is locked"));
        assert_eq!(errors[1].origin, at(&env.path("user.toml"), 4));
        assert!(errors[1].message.contains("`set_size` is locked"));

        let env = Env::new()
            .system("locked = [\"cache_size\", \"flush_type\"]\n")
            .user("[[store]]\npath = \"/ssd\"\ncount = 9\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 1),
            &["`cache_size` is locked"],
        );
    }

    #[test]
    fn a_locked_store_list_cannot_grow_through_cache_base() {
        let env = Env::new()
            .system("locked = [\"store\"]\n[[store]]\npath = \"/dev/shm\"\n")
            .user("cache_base = \"/home/me/cache\"\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 1),
            &["`store` is locked"],
        );
        // a cache_base naming a store the admin defined is fine
        let env = Env::new()
            .system("locked = [\"store\"]\n[[store]]\npath = \"/ssd\"\n")
            .var("SCR_CACHE_BASE", "/ssd/");
        assert_eq!(env.load().unwrap().descriptor(0).store_path, "/ssd");
    }

    #[test]
    fn only_the_system_file_may_lock() {
        let env = Env::new().user("locked = [\"debug\"]\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 1),
            &["only the system configuration may lock keys"],
        );
        let env = Env::new().system("locked = [\"nosuchkey\"]\n");
        one_error(
            env.errors(),
            at(&env.path("system.toml"), 1),
            &["unknown key `nosuchkey`"],
        );
    }
}

mod defaults {
    use super::*;

    #[test]
    fn no_file_at_all_gives_one_xor_descriptor_on_a_node_local_store() {
        let env = Env::new();
        let c = env.load().unwrap();
        assert_eq!(c.checkpoints.len(), 1);
        let d = c.descriptor(0);
        assert_eq!(d.scheme.0, "XOR");
        assert_eq!(d.group.0, "NODE");
        assert_eq!(d.store_path, "/dev/shm");
        assert_eq!(d.set_size(), 8);
        let store = d.store.expect("implied store");
        assert!(store.enabled && store.mkdir);
        assert_eq!(c.get(settings::CACHE_SIZE), 2);
        assert_eq!(c.get(settings::JOB_ID), "0");
        assert_eq!(
            c.get(settings::PREFIX),
            env.path("").display().to_string().trim_end_matches('/')
        );
        for id in 1..20 {
            assert_eq!(c.checkpoint_for(id).unwrap().interval, 1);
        }
    }

    #[test]
    fn implied_descriptor_follows_the_scalar_keys() {
        let env = Env::new()
            .var("SCR_COPY_TYPE", "PARTNER")
            .var("SCR_CACHE_BASE", "/tmp/")
            .var("SLURM_JOBID", "4242");
        let c = env.load().unwrap();
        let d = c.descriptor(0);
        assert_eq!(
            d.scheme,
            ("PARTNER".into(), Origin::Env("SCR_COPY_TYPE".into()))
        );
        assert_eq!(d.store_path, "/tmp");
        assert_eq!(c.get(settings::JOB_ID), "4242");
    }

    #[test]
    fn byte_sizes_accept_units_from_every_source() {
        let env = Env::new()
            .user("mpi_buf_size = \"256KB\"\n")
            .var("SCR_FILE_BUF_SIZE", "8MiB");
        let c = env.load().unwrap();
        assert_eq!(c.get(settings::MPI_BUF_SIZE), 256 << 10);
        assert_eq!(c.get(settings::FILE_BUF_SIZE), 8 << 20);
        assert!(c
            .descriptor(0)
            .params
            .iter()
            .any(|(k, v, _)| k == "buffer_size" && v == "262144"));
    }
}

mod selection {
    use super::*;

    fn three_level() -> Config {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../config/examples/three-level.toml"
        );
        let env = Env::new();
        let mut loader = env.loader();
        loader.extra_user_files.push(PathBuf::from(path));
        loader.load().unwrap()
    }

    #[test]
    fn largest_dividing_interval_wins_in_the_seed_example() {
        let c = three_level();
        for id in 1..=64u64 {
            let ck = c.checkpoint_for(id).unwrap();
            let index = c
                .checkpoints
                .iter()
                .position(|x| std::ptr::eq(x, ck))
                .unwrap();
            let d = c.descriptor(index);
            let (scheme, store, group, set_size) = if id % 8 == 0 {
                ("PARTNER", "/ssd", "SWITCH", None)
            } else if id % 4 == 0 {
                ("XOR", "/ssd", "NODE", Some(8))
            } else {
                ("XOR", "/tmp", "NODE", Some(16))
            };
            assert_eq!(d.scheme.0, scheme, "checkpoint {id}");
            assert_eq!(d.store_path, store, "checkpoint {id}");
            assert_eq!(d.group.0, group, "checkpoint {id}");
            if let Some(n) = set_size {
                assert_eq!(d.set_size(), n, "checkpoint {id}");
            }
        }
    }

    /// `hop_distance`: a descriptor's own (with its line), else `SCR_HOP_DISTANCE`, else
    /// 1; SCR's `CKPT=... HOP_DISTANCE=2` imports as the key; queries answer it; no
    /// scheme receives it (it is set formation's).
    #[test]
    fn hop_distance_is_a_descriptor_key_with_a_default() {
        let env = Env::new()
            .var("SCR_HOP_DISTANCE", "3")
            .user("[[checkpoint]]\ninterval = 1\n[[checkpoint]]\ninterval = 2\nhop_distance = 2\n");
        let c = env.load().unwrap();
        let (d0, d1) = (c.descriptor(0), c.descriptor(1));
        assert_eq!(d0.hop_distance, (3, Origin::Env("SCR_HOP_DISTANCE".into())));
        assert_eq!(d1.hop_distance, (2, at(&env.path("user.toml"), 5)));
        assert!(d1.params.iter().all(|(k, _, _)| k != "hop_distance"));
        assert_eq!(Env::new().load().unwrap().descriptor(0).hop_distance.0, 1);
        let toml =
            scr_host::config::import::import_scr("CKPT=0 INTERVAL=1 TYPE=PARTNER HOP_DISTANCE=2\n")
                .unwrap();
        assert!(toml.contains("hop_distance = 2"), "{toml}");
        let env = Env::new().user("[[checkpoint]]\ninterval = 1\nhop_distance = 0\n");
        one_error(
            env.errors(),
            at(&env.path("user.toml"), 3),
            &["hop_distance"],
        );
    }

    #[test]
    fn disabled_descriptors_are_never_chosen() {
        let env = Env::new()
            .user("[[checkpoint]]\ninterval = 1\n[[checkpoint]]\ninterval = 2\nenabled = false\n");
        let c = env.load().unwrap();
        assert_eq!(c.checkpoint_for(2).unwrap().interval, 1);
    }
}

mod explain {
    use super::*;
    use scr_host::explain::explain_checkpoint;
    use scr_host::registry::Registry;

    #[test]
    fn explanation_lists_candidates_in_interval_order_and_names_missing_plugins() {
        let env = Env::new().user(
            "[[checkpoint]]\ninterval = 16\ntype = \"RS\"\n\n[[checkpoint]]\ninterval = 1\n\n\
             [[checkpoint]]\ninterval = 4\nset_size = 4\n",
        );
        let c = env.load().unwrap();
        let text = explain_checkpoint(&c, &Registry::default(), 32, None);
        let file = env.path("user.toml").display().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("checkpoint 32 uses descriptor 0 (interval 16, {file}:1)")
        );
        assert_eq!(
            lines[1],
            format!(
                "  why:     the largest interval dividing 32 is 16; candidates: \
                 interval 1 (divides; {file}:5), interval 4 (divides; {file}:8), \
                 interval 16 (divides; {file}:1)"
            )
        );
        assert_eq!(lines[2], format!("  scheme:  RS ({file}:3)"));
        assert_eq!(
            *lines.last().unwrap(),
            "  plugin:  unknown scheme \"RS\": no loaded plugin provides it \
             (known: none; no plugin directory was searched)"
        );
        let text = explain_checkpoint(&c, &Registry::default(), 6, None);
        assert!(text.contains("param:   set_size = 8 (default)"), "{text}");
    }
}

/// A misspelt `SCR_*` variable is ignored by the loader (the environment may hold
/// anything) but named in a warning with the key it probably meant; variables read
/// elsewhere (SCR_CONF_FILE, ...) and real keys are not reported.
#[test]
fn unknown_scr_environment_variables_are_warned_about_with_a_suggestion() {
    let mut loader = Loader::default();
    for (k, v) in [
        ("SCR_CACHSIZE", "3"),
        ("SCR_CACHE_SIZE", "2"),
        ("SCR_CONF_FILE", "/nonexistent"),
        ("SCR_ZZZZZZZZ", "1"),
        ("PATH", "/bin"),
    ] {
        loader.env.insert(k.into(), v.into());
    }
    let warnings = loader.unknown_env();
    assert_eq!(
        warnings,
        [
            "environment variable SCR_CACHSIZE names no scr-rs setting and is ignored; did you mean SCR_CACHE_SIZE?",
            "environment variable SCR_ZZZZZZZZ names no scr-rs setting and is ignored",
        ]
    );
}
