//! Test fixture: a scheme named LIAR that claims to tolerate one lost member per set but
//! keeps no redundancy data, so the conformance harness must catch it: its "recovery"
//! returns success with no files for the lost member.

use scr_plugin::{
    DatasetFiles, FileMeta, Host, PluginLibrary, PluginResult, RecoverRequest, Scheme,
    SchemeConfig, SchemeDescription,
};

/// Provides LIAR.
pub struct LiarLib;

struct Liar;

impl Scheme for Liar {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: "LIAR".into(),
            tolerated_losses: 1,
            summary: "claims one loss, keeps nothing".into(),
        })
    }
    fn apply(&self, host: &Host<'_>, _: &DatasetFiles) -> PluginResult<Vec<String>> {
        host.barrier()?;
        Ok(vec![])
    }
    fn recover(&self, host: &Host<'_>, req: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        host.barrier()?;
        Ok(req
            .files
            .clone()
            .into_option()
            .unwrap_or_default()
            .into_vec())
    }
    fn redundancy_files(&self, _: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(vec![])
    }
    fn remove(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<()> {
        Ok(())
    }
}

impl PluginLibrary for LiarLib {
    const NAME: &'static str = "scr-fixture-liar";
    const VERSION: &'static str = "0.0.1";
    const SCHEMES: &'static [&'static str] = &["LIAR"];

    fn new_scheme(_: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        Ok(Box::new(Liar))
    }
}

scr_plugin::export_plugin!(LiarLib);
