//! Descriptor resolution: a checkpoint descriptor with every default filled in (store,
//! failure group, scheme, the parameters every scheme receives), the per-store settings,
//! and the scheme configuration handed to a plugin. The runtime, `scr config check` and
//! `scr config explain` all resolve descriptors here, so what is explained is what runs.
//!
//! Each fallback of a descriptor field to the scalar setting of the same meaning (a
//! store's `count`, else `cache_size`; a descriptor's `type`, else `copy_type`; ...) is
//! written once, as one method below; validation, queries through the API, `scr config
//! show`, the runtime and `scr run`'s node check all call it.

use scr_plugin::{Param, SchemeConfig};

use super::{settings, Checkpoint, Config, Origin, Setting, Store, View};

/// A checkpoint descriptor with every default filled in.
#[derive(Clone, Debug)]
pub struct Descriptor<'c> {
    /// Position in the configuration's descriptor list.
    pub index: usize,
    /// The configured descriptor.
    pub checkpoint: &'c Checkpoint,
    /// Its store.
    pub store: Option<&'c Store>,
    /// Store path (even when the store is undefined).
    pub store_path: String,
    /// Failure group, with origin.
    pub group: (String, Origin),
    /// Scheme name, with origin.
    pub scheme: (String, Origin),
    /// Parameters passed to the scheme, with origins.
    pub params: Vec<(String, String, Origin)>,
    /// Whether its datasets bypass the cache (its own `bypass`, else `cache_bypass`),
    /// with origin.
    pub bypass: (bool, Origin),
    /// Whether its scheme is applied in the background after complete_output (its own
    /// `protect_in_background`, else the setting), with origin.
    pub background: (bool, Origin),
    /// Failure groups between neighbours of a set (its own `hop_distance`, else the
    /// setting), with origin: set formation's, so the host's alone (no scheme sees it).
    pub hop_distance: (u64, Origin),
}

/// A node without a value for a failure group the configuration uses.
#[derive(Debug, thiserror::Error)]
#[error("node `{node}` has no [[group]] table giving a value for group `{group}`; add one (host = \"{node}\")")]
pub struct NoGroupValue {
    node: String,
    group: String,
}

/// Why descriptor `index` (of `scheme` over failure group `group`) protects nothing
/// although a full set of `set_size` would tolerate `full` losses: every set has one
/// member. Said at init and by `scr config explain`.
pub fn protects_nothing(
    index: usize,
    scheme: &str,
    group: &str,
    set_size: u32,
    full: u64,
) -> String {
    let why = if group == "WORLD" {
        "group WORLD is one failure group for the whole job (as in SCR), and a set never holds two ranks of one group; set group = \"NODE\" (or a [[group]] of your own) to protect against lost nodes".to_string()
    } else {
        format!("the job spans a single {group} failure group (one node?), and a set never holds two ranks of one group; run on more {group} groups, or choose SINGLE to say so")
    };
    format!(
        "descriptor {index} ({scheme}, group {group}) protects nothing: every redundancy set has one member and tolerates no lost member, where a full set of set_size = {set_size} tolerates {full}; {why}. Its checkpoints survive a lost process but not a lost node until they are flushed"
    )
}

impl Config {
    /// Fill in the defaults of descriptor `index`.
    pub fn descriptor(&self, index: usize) -> Descriptor<'_> {
        let ck = &self.checkpoints[index];
        // a table field's origin, else that of the setting it falls back to
        let origin_of = |table_key: &str, scalar: &Setting| {
            ck.origins
                .get(table_key)
                .cloned()
                .unwrap_or_else(|| scalar.origin.clone())
        };
        let store_path = self.checkpoint_store(ck);
        let mut params = Vec::new();
        for key in [
            settings::SET_SIZE,
            settings::SET_FAILURES,
            settings::REPLICAS,
        ] {
            let name = key.name();
            params.push((
                name.to_string(),
                self.checkpoint_number(ck, key).to_string(),
                origin_of(name, self.setting_of(key)),
            ));
        }
        params.push((
            "buffer_size".to_string(),
            self.get(settings::MPI_BUF_SIZE).to_string(),
            self.setting_of(settings::MPI_BUF_SIZE).origin.clone(),
        ));
        params.extend(ck.params.iter().cloned());
        Descriptor {
            index,
            checkpoint: ck,
            store: self.store(&store_path),
            store_path,
            group: (
                self.checkpoint_group(ck),
                origin_of("group", self.setting_of(settings::GROUP)),
            ),
            scheme: (
                self.checkpoint_scheme(ck),
                origin_of("type", self.setting_of(settings::COPY_TYPE)),
            ),
            params,
            bypass: (
                self.checkpoint_bypass(ck),
                origin_of("bypass", self.setting_of(settings::CACHE_BYPASS)),
            ),
            background: (
                ck.protect_in_background
                    .unwrap_or_else(|| self.get(settings::PROTECT_IN_BACKGROUND)),
                origin_of(
                    "protect_in_background",
                    self.setting_of(settings::PROTECT_IN_BACKGROUND),
                ),
            ),
            hop_distance: (
                self.checkpoint_number(ck, settings::HOP_DISTANCE),
                origin_of("hop_distance", self.setting_of(settings::HOP_DISTANCE)),
            ),
        }
    }

    /// The store a descriptor writes to: its own `store`, else `cache_base`.
    pub(crate) fn checkpoint_store(&self, ck: &Checkpoint) -> String {
        ck.store
            .clone()
            .unwrap_or_else(|| self.get(settings::CACHE_BASE))
    }

    /// A descriptor's failure group: its own `group`, else `group`.
    pub(crate) fn checkpoint_group(&self, ck: &Checkpoint) -> String {
        ck.group
            .clone()
            .unwrap_or_else(|| self.get(settings::GROUP))
    }

    /// A descriptor's redundancy scheme: its own `type`, else `copy_type`.
    pub(crate) fn checkpoint_scheme(&self, ck: &Checkpoint) -> String {
        ck.scheme
            .clone()
            .unwrap_or_else(|| self.get(settings::COPY_TYPE))
    }

    /// Whether a descriptor's datasets bypass the cache: its own `bypass`, else
    /// `cache_bypass`.
    pub(crate) fn checkpoint_bypass(&self, ck: &Checkpoint) -> bool {
        ck.bypass
            .unwrap_or_else(|| self.get(settings::CACHE_BYPASS))
    }

    /// A set parameter of a descriptor (`set_size`, `set_failures`, `replicas` or
    /// `hop_distance`): its
    /// own, else the setting `key`.
    pub(crate) fn checkpoint_number(&self, ck: &Checkpoint, key: settings::Param<u64>) -> u64 {
        ck.numbers
            .get(key.name())
            .copied()
            .unwrap_or_else(|| self.get(key))
    }

    /// The failure-group value of a rank on `node` for group `name`: the node
    /// itself for NODE, one value for every rank for WORLD (SCR's meaning: the whole job
    /// fails together, so no set can hold two of its ranks and every set has one member),
    /// else the `[[group]]` table of the node. Redundancy sets never hold two ranks with
    /// one value.
    pub(crate) fn failure_group(&self, name: &str, node: &str) -> Result<String, NoGroupValue> {
        match name {
            "NODE" => Ok(node.to_string()),
            "WORLD" => Ok("WORLD".to_string()),
            custom => self
                .groups
                .iter()
                .find(|g| g.host == node)
                .and_then(|g| g.values.get(custom).cloned())
                .ok_or_else(|| NoGroupValue {
                    node: node.to_string(),
                    group: custom.to_string(),
                }),
        }
    }

    /// The `[plugins.<name>]` settings for a scheme or transfer type.
    pub fn plugin_settings(&self, name: &str) -> Vec<Param> {
        self.plugins
            .settings
            .get(&name.to_ascii_lowercase())
            .map(|t| {
                t.iter()
                    .map(|(k, (v, _))| Param {
                        key: k.as_str().into(),
                        value: v.as_str().into(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The group of processes sharing a store's device: its own, else NODE (SCR's
    /// default: a store is node-local unless it says otherwise; the scalar `group` is the
    /// implied checkpoint descriptor's failure group, not a store's).
    pub(crate) fn store_group(&self, store: &Store) -> String {
        store.group.clone().unwrap_or_else(|| "NODE".to_string())
    }

    /// Datasets a store keeps (its own count, else `cache_size`).
    pub(crate) fn store_count(&self, store: &Store) -> u64 {
        self.count_of(Some(store))
    }

    /// Datasets the store at `path` keeps: its own count, else (for a store that names
    /// none, or that is not defined) `cache_size`.
    pub(crate) fn store_count_at(&self, path: &str) -> u64 {
        self.count_of(self.store(path))
    }

    /// The one "a store's count, else `cache_size`" rule of the two above.
    fn count_of(&self, store: Option<&Store>) -> u64 {
        store
            .and_then(|s| s.count)
            .unwrap_or_else(|| self.get(settings::CACHE_SIZE))
    }

    /// A store's view: its own, else global for group WORLD and node-local otherwise.
    pub(crate) fn store_view(&self, store: &Store) -> View {
        store.view.unwrap_or(if self.store_group(store) == "WORLD" {
            View::Global
        } else {
            View::Node
        })
    }

    /// The transfer type used to flush from a store (its own `type`, else `flush_type`),
    /// with where it was set.
    pub(crate) fn store_transfer(&self, store: &Store) -> (String, Origin) {
        self.transfer_of(Some(store))
    }

    /// The transfer type used to flush from the store at `path`: its own `type`, else
    /// (for a store that names none, or that is not defined) `flush_type`.
    pub(crate) fn store_transfer_at(&self, path: &str) -> String {
        self.transfer_of(self.store(path)).0
    }

    /// The one "a store's `type`, else `flush_type`" rule of the two above.
    fn transfer_of(&self, store: Option<&Store>) -> (String, Origin) {
        match store.and_then(|s| s.transfer.as_ref().map(|t| (t, &s.origin))) {
            Some((t, origin)) => (t.clone(), origin.clone()),
            None => (
                self.get(settings::FLUSH_TYPE),
                self.setting_of(settings::FLUSH_TYPE).origin.clone(),
            ),
        }
    }
}

impl Descriptor<'_> {
    /// The scheme configuration handed to the plugin, for a set of `members`.
    /// `member` and `world_rank` place this process in its set (0 when checking a
    /// configuration outside a job).
    pub fn scheme_config(
        &self,
        config: &Config,
        members: u32,
        member: u32,
        world_rank: u32,
    ) -> SchemeConfig {
        SchemeConfig {
            scheme: self.scheme.0.as_str().into(),
            params: self
                .params
                .iter()
                .map(|(k, v, _)| Param {
                    key: k.as_str().into(),
                    value: v.as_str().into(),
                })
                .collect(),
            settings: config.plugin_settings(&self.scheme.0).into(),
            members,
            member,
            world_rank,
        }
    }

    /// The configured set size (members per redundancy set at most).
    pub fn set_size(&self) -> u32 {
        self.params
            .iter()
            .find(|(k, _, _)| k == "set_size")
            .and_then(|(_, v, _)| v.parse().ok())
            .unwrap_or(8)
    }
}

impl Config {
    /// The scheme configuration that rebuilds a dataset protected with the recorded
    /// descriptor `record`, for its member `member` (world rank `world_rank`): the
    /// recorded scheme, parameters and set size, with the plugin settings of this
    /// configuration.
    pub(crate) fn recorded_scheme_config(
        &self,
        record: &crate::state::filemap::DescriptorRecord,
        member: u32,
        world_rank: u32,
    ) -> scr_plugin::SchemeConfig {
        scr_plugin::SchemeConfig {
            scheme: record.scheme.as_str().into(),
            params: record
                .params
                .iter()
                .map(|(k, v)| scr_plugin::Param {
                    key: k.as_str().into(),
                    value: v.as_str().into(),
                })
                .collect(),
            settings: self.plugin_settings(&record.scheme).into(),
            members: record.members.len() as u32,
            member,
            world_rank,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{api, Loader};
    use super::*;

    /// The configuration of a system file with two stores, `/scratch/counted` (count 3,
    /// transfer type `sync`) and `/scratch/plain` (neither), and `cache_size` as `cache_size` says (unset:
    /// the catalog's default, 2).
    fn two_stores(cache_size: Option<u64>) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let system = dir.path().join("scr.toml");
        let mut text = String::new();
        if let Some(n) = cache_size {
            text.push_str(&format!("cache_size = {n}\n"));
        }
        text.push_str(
            "[[store]]\npath = \"/scratch/counted\"\ncount = 3\ntype = \"sync\"\n\n\
             [[store]]\npath = \"/scratch/plain\"\n",
        );
        std::fs::write(&system, text).unwrap();
        let mut loader = Loader::from_process();
        loader.env = Default::default();
        loader.system_file = Some(system);
        loader.cwd = dir.path().to_path_buf();
        loader.load().unwrap()
    }

    #[test]
    fn a_store_keeps_its_own_count_else_cache_size() {
        for (cache_size, fallback) in [(Some(5), 5), (None, 2)] {
            let c = two_stores(cache_size);
            let counted = c.store("/scratch/counted").unwrap();
            let plain = c.store("/scratch/plain").unwrap();
            assert_eq!(c.store_count(counted), 3, "cache_size {cache_size:?}");
            assert_eq!(c.store_count(plain), fallback, "cache_size {cache_size:?}");
            // by path: the same rule, and cache_size for a store that is not defined
            assert_eq!(c.store_count_at("/scratch/counted/"), 3);
            assert_eq!(c.store_count_at("/scratch/plain"), fallback);
            assert_eq!(c.store_count_at("/scratch/undefined"), fallback);
            // what SCR_Config("STORE=... COUNT") answers is the same count
            let ask = |text: &str| c.query(&api::parse(text).unwrap()).unwrap();
            assert_eq!(ask("STORE=/scratch/counted COUNT").as_deref(), Some("3"));
            let fallback_text = fallback.to_string();
            assert_eq!(
                ask("STORE=/scratch/plain COUNT").as_deref(),
                Some(fallback_text.as_str())
            );
        }
    }

    #[test]
    fn a_store_flushes_with_its_own_type_else_flush_type() {
        let c = two_stores(None);
        let counted = c.store("/scratch/counted").unwrap();
        let plain = c.store("/scratch/plain").unwrap();
        assert_eq!(c.store_transfer(counted).0, "sync");
        assert_eq!(c.store_transfer(plain).0, "pthread");
        assert_eq!(c.store_transfer_at("/scratch/counted"), "sync");
        assert_eq!(c.store_transfer_at("/scratch/undefined"), "pthread");
    }
}
