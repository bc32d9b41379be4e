//! Every message of the library, the `scr` CLI and the plugins goes through [`tracing`].
//!
//! Why tracing and not lines on stderr: an application that already logs through tracing
//! sees our messages in its own output, filtered by its own rules, with the rank, job id and
//! dataset id as structured fields instead of text to parse. When the application installed
//! no subscriber, [`init`] installs ours, which prints one line per message on stderr in one
//! style:
//!
//! ```text
//! scr-rs[rank=3 job=4711 dataset=12]: warning: ckpt.12 stays in cache only: ...
//! scr-rs: warning: environment variable SCR_CACHSIZE names no scr-rs setting ...
//! ```
//!
//! The bracket holds the fields of the spans the message was emitted in (the runtime's span
//! carries `rank` and `job`, a dataset's span `dataset`) and of the message itself, in that
//! order; it is left out when there are none.
//!
//! What is printed: when `RUST_LOG` is set it decides, with tracing's directive syntax
//! (`RUST_LOG=scr_host=debug`, `RUST_LOG=warn,scr_host::runtime::flush=trace`). Otherwise
//! the `SCR_DEBUG` level does: 0 prints errors and warnings, 1 adds info, 2 debug, 3 and
//! more trace. The runtime raises the level with [`set_debug`] once its configuration is
//! read, so `SCR_DEBUG` set in a configuration file works too.
//!
//! Our subscriber never panics: a closed or full stderr drops the line (a library must not
//! take an application down because its stderr went away).

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer};

/// The `SCR_DEBUG` level in force when `RUST_LOG` is not set (see [`set_debug`]).
static DEBUG: AtomicU8 = AtomicU8::new(0);

/// The prefix of every line our subscriber prints: `scr-rs` for the library, `scr` for the
/// CLI. Set once, by the first [`init`] or [`init_cli`].
static PROGRAM: OnceLock<&'static str> = OnceLock::new();

/// Install our subscriber for an application using the library, unless one is installed
/// already (the application's own, or ours from an earlier call). `debug` is the
/// `SCR_DEBUG` level known so far (from the environment); see [`set_debug`].
///
/// Returns, the first time only, why `RUST_LOG` was not used when it is set but is no
/// filter: for the caller to log once (the runtime on rank 0 alone, not once per
/// process).
#[must_use = "a RUST_LOG that is no filter must be reported"]
pub fn init(debug: u64) -> Option<String> {
    install("scr-rs", debug)
}

/// Install our subscriber for the `scr` command: lines start with `scr`, and `SCR_DEBUG`
/// is read from the environment.
pub fn init_cli() {
    if let Some(problem) = install("scr", env_debug()) {
        tracing::warn!("{problem}");
    }
}

/// Raise or lower the `SCR_DEBUG` level used when `RUST_LOG` is not set (the runtime calls
/// it once the configuration is read: a configuration file may set `debug`).
pub fn set_debug(debug: u64) {
    DEBUG.store(debug.min(u8::MAX as u64) as u8, Ordering::Relaxed);
}

/// The most verbose level printed at `SCR_DEBUG` level `debug`.
pub(crate) fn level_for(debug: u64) -> Level {
    match debug {
        0 => Level::WARN,
        1 => Level::INFO,
        2 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

fn install(program: &'static str, debug: u64) -> Option<String> {
    // once per process: later calls (each runtime's init, the C API's error path) change
    // nothing, not even the level a configuration file set since
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let mut problem = None;
    INSTALLED.call_once(|| problem = install_once(program, debug));
    problem
}

/// Install the subscriber; why `RUST_LOG` is not used, when it is set and no filter.
fn install_once(program: &'static str, debug: u64) -> Option<String> {
    let _ = PROGRAM.set(program);
    set_debug(debug);
    let layer = ScrLayer::new(|line: &str| {
        // one write per line: the lines of ranks sharing a pipe do not interleave
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    });
    // `try_init` fails when a global subscriber exists: then the application's (or ours,
    // installed before) stays, which is what we want
    match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(filter) => {
                let _ = tracing_subscriber::registry()
                    .with(layer.with_filter(filter))
                    .try_init();
                None
            }
            Err(e) => {
                let _ = tracing_subscriber::registry()
                    .with(layer.with_filter(debug_filter()))
                    .try_init();
                Some(format!("RUST_LOG={spec:?} is not a valid filter ({e}); SCR_DEBUG decides what is printed"))
            }
        },
        _ => {
            let _ = tracing_subscriber::registry()
                .with(layer.with_filter(debug_filter()))
                .try_init();
            None
        }
    }
}

/// The filter that follows [`set_debug`]: spans always pass (their fields are needed by
/// the messages inside them), events up to the level of the current `SCR_DEBUG`. Asked at
/// every event (`Interest::sometimes`): the level changes after a call site was first seen
/// (a configuration file read at init), which a cached answer would miss.
struct DebugFilter;

fn debug_filter() -> DebugFilter {
    DebugFilter
}

impl<S> tracing_subscriber::layer::Filter<S> for DebugFilter {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        meta.is_span() || *meta.level() <= level_for(DEBUG.load(Ordering::Relaxed) as u64)
    }

    fn callsite_enabled(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
}

/// The fields recorded on a span, kept in its extensions for the lines printed inside it.
struct SpanFields(Vec<(&'static str, String)>);

/// Collects `key=value` pairs and the message of a span or event.
#[derive(Default)]
struct Fields {
    pairs: Vec<(&'static str, String)>,
    message: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.pairs.push((field.name(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.pairs.push((field.name(), format!("{value:?}")));
        }
    }
}

/// Set `key` to `value` in `pairs`, in place when present (an inner span or the event
/// overrides an outer span's value), else at the end.
fn put(pairs: &mut Vec<(&'static str, String)>, key: &'static str, value: String) {
    match pairs.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => pairs.push((key, value)),
    }
}

/// The word a line names its level with.
fn level_word(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// Format one line: `PROGRAM[fields]: level: message\n`.
fn format_line(
    program: &str,
    pairs: &[(&'static str, String)],
    level: &Level,
    message: &str,
) -> String {
    let mut line = String::with_capacity(64 + message.len());
    line.push_str(program);
    if !pairs.is_empty() {
        line.push('[');
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            let _ = write!(line, "{k}={v}");
        }
        line.push(']');
    }
    let _ = writeln!(line, ": {}: {message}", level_word(level));
    line
}

/// Our layer: formats each event as one line and hands it to `out`.
pub(crate) struct ScrLayer<W> {
    out: W,
}

impl<W: Fn(&str) + Send + Sync + 'static> ScrLayer<W> {
    /// A layer that passes each formatted line (newline included) to `out`; tests collect
    /// lines with it.
    pub(crate) fn new(out: W) -> Self {
        ScrLayer { out }
    }
}

impl<S, W> Layer<S> for ScrLayer<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: Fn(&str) + Send + Sync + 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.pairs));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            if let Some(SpanFields(pairs)) = ext.get_mut::<SpanFields>() {
                for (k, v) in fields.pairs {
                    put(pairs, k, v);
                }
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut pairs = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(SpanFields(fields)) = span.extensions().get::<SpanFields>() {
                    for (k, v) in fields {
                        put(&mut pairs, k, v.clone());
                    }
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        for (k, v) in fields.pairs {
            put(&mut pairs, k, v);
        }
        let program = PROGRAM.get().copied().unwrap_or("scr-rs");
        (self.out)(&format_line(
            program,
            &pairs,
            event.metadata().level(),
            &fields.message,
        ));
    }
}

/// The span a runtime enters in each of its calls: every message inside carries the rank
/// and, once the configuration is read, the job id (record it with
/// `span.record("job", id)`). Created at the error level so no filter drops it (a dropped
/// span would take its fields with it).
pub(crate) fn runtime_span(rank: u32) -> tracing::Span {
    tracing::error_span!("scr", rank = rank, job = tracing::field::Empty)
}

/// The `SCR_DEBUG` level set in the environment (0 when unset or not a number): what
/// decides the messages printed before a configuration is read.
pub fn env_debug() -> u64 {
    std::env::var("SCR_DEBUG")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The span of work on one dataset: messages inside carry its id.
pub(crate) fn dataset_span(id: u64) -> tracing::Span {
    tracing::error_span!("dataset", dataset = id)
}

/// A plugin's message (through [`scr_plugin::HostServices::log`]) as a tracing event at
/// its level, with the world rank and what the plugin is (`transfer pthread`, `scheme
/// XOR`) as fields. The rank is a field of the event, not only of the runtime's span: a
/// transfer plugin may log from a thread of its own, outside any span.
///
/// The text is the plugin's, not ours: control characters (a newline, a terminal escape)
/// are shown escaped, so a plugin's message stays one line and cannot pass for another
/// rank's or the runtime's line.
pub(crate) fn plugin_message(level: scr_plugin::LogLevel, rank: u32, plugin: &str, message: &str) {
    use scr_plugin::LogLevel;
    let message = one_line(message);
    let plugin = one_line(plugin);
    let plugin = plugin.as_ref();
    match level {
        LogLevel::Error => tracing::error!(rank, plugin, "{message}"),
        LogLevel::Warn => tracing::warn!(rank, plugin, "{message}"),
        LogLevel::Info => tracing::info!(rank, plugin, "{message}"),
        LogLevel::Debug => tracing::debug!(rank, plugin, "{message}"),
    }
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`), borrowed when it has none.
fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Run `f` under a subscriber with our layer at `level`; the lines it printed.
    fn lines(level: Level, f: impl FnOnce()) -> Vec<String> {
        let filter =
            tracing_subscriber::filter::filter_fn(move |m| m.is_span() || *m.level() <= level);
        lines_through(filter, f)
    }

    /// Run `f` under a subscriber with our layer behind `filter`; the lines it printed.
    fn lines_through<F>(filter: F, f: impl FnOnce()) -> Vec<String>
    where
        F: tracing_subscriber::layer::Filter<tracing_subscriber::Registry> + Send + Sync + 'static,
    {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let layer = ScrLayer::new(move |l: &str| sink.lock().unwrap().push(l.to_string()));
        let subscriber = tracing_subscriber::registry().with(layer.with_filter(filter));
        tracing::subscriber::with_default(subscriber, f);
        let out = got.lock().unwrap().clone();
        out
    }

    #[test]
    fn a_message_outside_any_span_has_no_bracket() {
        let got = lines(Level::WARN, || {
            tracing::warn!("the halt file is damaged; ignored")
        });
        assert_eq!(
            got,
            ["scr-rs: warning: the halt file is damaged; ignored\n"]
        );
    }

    #[test]
    fn rank_job_and_dataset_come_from_the_spans_in_order() {
        let got = lines(Level::WARN, || {
            let rt = runtime_span(3);
            rt.record("job", "4711");
            let _rt = rt.entered();
            let _ds = dataset_span(12).entered();
            tracing::error!(plugin = "XOR", "apply failed");
        });
        assert_eq!(
            got,
            ["scr-rs[rank=3 job=4711 dataset=12 plugin=XOR]: error: apply failed\n"]
        );
    }

    #[test]
    fn an_event_field_overrides_a_span_field_in_place() {
        let got = lines(Level::WARN, || {
            let rt = runtime_span(0);
            rt.record("job", 1);
            let _rt = rt.entered();
            tracing::warn!(rank = 5u32, "from the C API");
        });
        assert_eq!(got, ["scr-rs[rank=5 job=1]: warning: from the C API\n"]);
    }

    #[test]
    fn a_plugin_message_names_the_rank_and_the_plugin_at_its_level() {
        let got = lines(level_for(1), || {
            plugin_message(
                scr_plugin::LogLevel::Info,
                2,
                "transfer pthread",
                "copied 3 files",
            );
            plugin_message(
                scr_plugin::LogLevel::Debug,
                2,
                "transfer pthread",
                "not shown at 1",
            );
        });
        assert_eq!(
            got,
            ["scr-rs[rank=2 plugin=transfer pthread]: info: copied 3 files\n"]
        );
    }

    #[test]
    fn the_debug_filter_follows_set_debug_after_a_callsite_was_seen() {
        // (the only test that changes the process-wide level)
        let say = |n: u32| tracing::info!("info {n}");
        let got = lines_through(debug_filter(), || {
            set_debug(0);
            say(1);
            // a configuration file raising the level after the first call at that site
            set_debug(1);
            say(2);
            set_debug(0);
            say(3);
        });
        assert_eq!(got, ["scr-rs: info: info 2\n"]);
    }

    #[test]
    fn a_plugin_message_stays_one_line_of_its_own() {
        let got = lines(Level::WARN, || {
            plugin_message(
                scr_plugin::LogLevel::Warn,
                1,
                "scheme",
                "lost\nscr-rs[rank=0]: error: forged\u{1b}[2J",
            );
        });
        assert_eq!(
            got,
            ["scr-rs[rank=1 plugin=scheme]: warning: lost\\nscr-rs[rank=0]: error: forged\\u{1b}[2J\n"]
        );
    }

    #[test]
    fn levels_follow_scr_debug() {
        let emit = || {
            tracing::warn!("w");
            tracing::info!("i");
            tracing::debug!("d");
            tracing::trace!("t");
        };
        assert_eq!(lines(level_for(0), emit).len(), 1);
        assert_eq!(
            lines(level_for(1), emit),
            ["scr-rs: warning: w\n", "scr-rs: info: i\n"]
        );
        assert_eq!(lines(level_for(2), emit).len(), 3);
        assert_eq!(lines(level_for(3), emit).len(), 4);
        assert_eq!(lines(level_for(9), emit).len(), 4);
    }

    #[test]
    fn a_field_recorded_later_appears_in_later_lines() {
        let got = lines(Level::WARN, || {
            let span = tracing::error_span!("scr", rank = 1u32, dataset = tracing::field::Empty);
            let _e = span.clone().entered();
            tracing::warn!("before");
            span.record("dataset", 7u64);
            tracing::warn!("after");
        });
        assert_eq!(
            got,
            [
                "scr-rs[rank=1]: warning: before\n",
                "scr-rs[rank=1 dataset=7]: warning: after\n"
            ]
        );
    }
}
