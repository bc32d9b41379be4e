//! Test fixture: a plugin whose calls panic, to prove the panic guard turns each panic into
//! an error naming the plugin and the call while the host carries on.

use scr_plugin::{
    DatasetFiles, FileMeta, Host, PluginLibrary, PluginResult, RecoverRequest, Scheme,
    SchemeConfig, SchemeDescription,
};

/// Provides PANIC_NEW (panics when created), PANIC_APPLY (created fine, panics in
/// `apply`) and PANIC_DROP (panics when the instance is dropped).
pub struct PanicLib;

struct PanicsInApply {
    name: String,
    panic_on_drop: bool,
}

impl Drop for PanicsInApply {
    fn drop(&mut self) {
        if self.panic_on_drop {
            panic!("deliberate panic in drop");
        }
    }
}

impl Scheme for PanicsInApply {
    fn describe(&self) -> PluginResult<SchemeDescription> {
        Ok(SchemeDescription {
            name: self.name.as_str().into(),
            tolerated_losses: 0,
            summary: "panics in apply".into(),
        })
    }
    fn apply(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<Vec<String>> {
        panic!("deliberate panic in apply")
    }
    fn recover(&self, _: &Host<'_>, _: &RecoverRequest) -> PluginResult<Vec<FileMeta>> {
        Ok(vec![])
    }
    fn redundancy_files(&self, _: &DatasetFiles) -> PluginResult<Vec<String>> {
        Ok(vec![])
    }
    fn remove(&self, _: &Host<'_>, _: &DatasetFiles) -> PluginResult<()> {
        Ok(())
    }
}

impl PluginLibrary for PanicLib {
    const NAME: &'static str = "scr-fixture-panic";
    const VERSION: &'static str = "0.0.1";
    const SCHEMES: &'static [&'static str] = &["PANIC_NEW", "PANIC_APPLY", "PANIC_DROP"];

    fn new_scheme(config: &SchemeConfig) -> PluginResult<Box<dyn Scheme>> {
        if config.scheme.eq_ignore_ascii_case("PANIC_NEW") {
            panic!("deliberate panic in new_scheme");
        }
        Ok(Box::new(PanicsInApply {
            name: config.scheme.to_ascii_uppercase(),
            panic_on_drop: config.scheme.eq_ignore_ascii_case("PANIC_DROP"),
        }))
    }
}

scr_plugin::export_plugin!(PanicLib);
