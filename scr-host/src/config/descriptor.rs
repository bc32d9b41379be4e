//! Descriptor resolution: a checkpoint descriptor with every default filled in (store,
//! failure group, scheme, the parameters every scheme receives), the per-store settings,
//! and the scheme configuration handed to a plugin. The runtime, `scr config check` and
//! `scr config explain` all resolve descriptors here, so what is explained is what runs.

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
        let store_path = ck
            .store
            .clone()
            .unwrap_or_else(|| self.get(settings::CACHE_BASE));
        let mut params = Vec::new();
        for key in [
            settings::SET_SIZE,
            settings::SET_FAILURES,
            settings::REPLICAS,
        ] {
            let name = key.name();
            let value = ck
                .numbers
                .get(name)
                .copied()
                .unwrap_or_else(|| self.get(key));
            params.push((
                name.to_string(),
                value.to_string(),
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
                ck.group
                    .clone()
                    .unwrap_or_else(|| self.get(settings::GROUP)),
                origin_of("group", self.setting_of(settings::GROUP)),
            ),
            scheme: (
                ck.scheme
                    .clone()
                    .unwrap_or_else(|| self.get(settings::COPY_TYPE)),
                origin_of("type", self.setting_of(settings::COPY_TYPE)),
            ),
            params,
            bypass: (
                ck.bypass
                    .unwrap_or_else(|| self.get(settings::CACHE_BYPASS)),
                origin_of("bypass", self.setting_of(settings::CACHE_BYPASS)),
            ),
        }
    }

    /// The failure-group value of world rank `rank` on `node` for group `name`: the node
    /// itself for NODE, the rank alone for WORLD (every rank its own group), else the
    /// `[[group]]` table of the node. Redundancy sets never hold two ranks with one value.
    pub fn failure_group(&self, name: &str, node: &str, rank: u32) -> Result<String, String> {
        match name {
            "NODE" => Ok(node.to_string()),
            "WORLD" => Ok(format!("rank{rank}")),
            custom => self
                .groups
                .iter()
                .find(|g| g.host == node)
                .and_then(|g| g.values.get(custom).cloned())
                .ok_or_else(|| {
                    format!(
                        "node `{node}` has no [[group]] table giving a value for group `{custom}`; add one (host = \"{node}\")"
                    )
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

    /// The group of processes sharing a store's device (its own, else `group`).
    pub fn store_group(&self, store: &Store) -> String {
        store
            .group
            .clone()
            .unwrap_or_else(|| self.get(settings::GROUP))
    }

    /// Datasets a store keeps (its own count, else `cache_size`).
    pub fn store_count(&self, store: &Store) -> u64 {
        store
            .count
            .unwrap_or_else(|| self.get(settings::CACHE_SIZE))
    }

    /// A store's view: its own, else global for group WORLD and node-local otherwise.
    pub fn store_view(&self, store: &Store) -> View {
        store.view.unwrap_or(if self.store_group(store) == "WORLD" {
            View::Global
        } else {
            View::Node
        })
    }

    /// The transfer type used to flush from a store.
    pub fn store_transfer(&self, store: &Store) -> (String, Origin) {
        match &store.transfer {
            Some(t) => (t.clone(), store.origin.clone()),
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
