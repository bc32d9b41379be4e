//! abi_stable's layout refusals, said in words.
//!
//! When a library's root module does not match the host's, abi_stable's own error is a
//! report of thousands of lines in its vocabulary (`field_name:`, `_self`, `param_0`,
//! `__returns`, vtables). [`explain_layouts`] runs the same check and reads the
//! structure of its result ([`AbiInstabilityErrors`]: for each difference, the path of
//! fields and functions from the root module down to it, and what differs) to say what a
//! plugin author changed: which method, parameter, return value, field or type, and how.

use abi_stable::abi_stability::abi_checking::{
    check_layout_compatibility, AbiInstability, AbiInstabilityError, AbiInstabilityErrors,
};
use abi_stable::type_layout::{TLData, TLField, TLFieldOrFunction, TLFunction, TypeLayout};

/// What differs between the host's layout `expected` and the library's `found`, in one
/// line of words, or `None` when abi_stable finds them compatible.
pub fn explain_layouts(
    expected: &'static TypeLayout,
    found: &'static TypeLayout,
) -> Option<String> {
    check_layout_compatibility(expected, found)
        .err()
        .map(|e| explain(&e))
}

/// How much a description says about the cause: a size that changed because a field
/// went away is a consequence, the field is the cause.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Weight {
    Cause,
    Consequence,
}

/// Every difference abi_stable found, in words: the most telling first, then how many
/// other causes there are.
pub(crate) fn explain(errors: &AbiInstabilityErrors) -> String {
    let mut said: Vec<(Weight, usize, String)> = Vec::new();
    for error in errors.errors.iter() {
        let steps = steps(error);
        for what in error.errs.iter() {
            if let Some((weight, s)) = explain_one(errors, &steps, what) {
                if !said.iter().any(|(_, _, x)| *x == s) {
                    said.push((weight, steps.len(), s));
                }
            }
        }
    }
    // causes first, the deepest (the innermost change) first among them
    said.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let causes = said.iter().filter(|s| s.0 == Weight::Cause).count();
    match said.first() {
        None => "the layout of its root module differs from this host's".to_string(),
        Some((_, _, first)) if causes > 1 => format!(
            "{first} (and {} other change{})",
            causes - 1,
            if causes == 2 { "" } else { "s" }
        ),
        Some((_, _, first)) => first.clone(),
    }
}

/// One step of the path from the root module to a difference.
enum Step {
    /// A field: of a struct, a method slot of a trait object's table, or a parameter or
    /// the return value of the function before it.
    Field {
        name: &'static str,
        expected: &'static TypeLayout,
        found: &'static TypeLayout,
    },
    /// The signature held by the field before it.
    Function {
        expected: Box<TLFunction>,
        found: Box<TLFunction>,
    },
}

fn steps(error: &AbiInstabilityError) -> Vec<Step> {
    error
        .stack_trace
        .iter()
        .filter_map(|ef| match (&ef.expected, &ef.found) {
            (TLFieldOrFunction::Function(e), TLFieldOrFunction::Function(f)) => {
                Some(Step::Function {
                    expected: Box::new(*e),
                    found: Box::new(*f),
                })
            }
            (TLFieldOrFunction::Field(e), TLFieldOrFunction::Field(f)) => Some(Step::Field {
                name: e.name(),
                expected: e.layout(),
                found: f.layout(),
            }),
            _ => None,
        })
        .collect()
}

/// A part of a function.
#[derive(Clone, Copy)]
enum Part {
    /// Parameter `n`, counted from 1 as its author does (`self` not counted).
    Parameter(usize),
    Return,
}

/// Where in the contract a difference sits, as a plugin author knows it.
struct Place {
    /// `scheme method `apply``, `root module entry `new_scheme``; `None` outside any
    /// function (the root module itself, or a type reached without one).
    method: Option<String>,
    /// The innermost function on the path and its part the path goes through, with the
    /// layouts of that parameter or return value (host's, library's).
    part: Option<(Part, &'static TypeLayout, &'static TypeLayout)>,
    /// Whether the difference lies deeper than that parameter or return value (in a type
    /// it holds).
    deeper: bool,
    /// The type at the end of the path (host's, library's).
    expected: &'static TypeLayout,
    found: &'static TypeLayout,
    /// The end of the path is a trait object's table of methods, of this trait.
    table_of: Option<&'static str>,
}

fn place(errors: &AbiInstabilityErrors, steps: &[Step]) -> Place {
    let func = steps
        .iter()
        .rposition(|s| matches!(s, Step::Function { .. }));
    let mut method = None;
    let mut part = None;
    if let Some(fi) = func {
        let name = match fi.checked_sub(1).map(|i| &steps[i]) {
            Some(Step::Field { name, .. }) => *name,
            _ => "?",
        };
        method = Some(match owning_trait(&steps[..fi]) {
            Some(t) => format!("{} `{name}`", method_kind(t)),
            None => format!("root module entry `{name}`"),
        });
        if let (
            Some(Step::Field {
                name,
                expected,
                found,
            }),
            Step::Function { expected: f, .. },
        ) = (steps.get(fi + 1), &steps[fi])
        {
            part = Some((parameter_or_return(name, f), *expected, *found));
        }
    }
    let (expected, found) = steps
        .iter()
        .rev()
        .find_map(|s| match s {
            Step::Field {
                expected, found, ..
            } => Some((*expected, *found)),
            Step::Function { .. } => None,
        })
        .unwrap_or((errors.interface, errors.implementation));
    let table_of = if expected.name() == "VTable" {
        owning_trait(steps)
    } else {
        None
    };
    Place {
        method,
        part,
        deeper: func.is_some_and(|fi| steps.len() > fi + 2),
        expected,
        found,
        table_of,
    }
}

/// The trait whose object the path last went through (`FfiScheme` for `FfiScheme_TO`).
fn owning_trait(steps: &[Step]) -> Option<&'static str> {
    steps.iter().rev().find_map(|s| match s {
        Step::Field { expected, .. } => expected.name().strip_suffix("_TO"),
        Step::Function { .. } => None,
    })
}

fn method_kind(trait_name: &str) -> String {
    match trait_name {
        "FfiScheme" => "scheme method".into(),
        "FfiTransfer" => "transfer method".into(),
        "HostServices" => "host-services method".into(),
        other => format!("method of `{other}`"),
    }
}

fn object_kind(trait_name: &str) -> String {
    match trait_name {
        "FfiScheme" => "the scheme object".into(),
        "FfiTransfer" => "the transfer object".into(),
        "HostServices" => "the host services".into(),
        other => format!("the trait object `{other}`"),
    }
}

/// Which part of `func` a parameter field is. abi_stable names the parameters
/// `param_<position>` (the first one carries the joined list of names instead).
fn parameter_or_return(name: &str, func: &TLFunction) -> Part {
    if name == "__returns" {
        return Part::Return;
    }
    let position: usize = name
        .strip_prefix("param_")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Part::Parameter(if has_self(func) {
        position
    } else {
        position + 1
    })
}

fn has_self(f: &TLFunction) -> bool {
    f.param_names.as_str().starts_with("_self")
}

/// The parameters of a function as its author counts them (`self` not counted).
fn parameter_count(f: &TLFunction) -> usize {
    f.param_type_layouts.len() - usize::from(has_self(f))
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A type as written in source: `&DatasetFiles`, `RResult<RVec<RString>, PluginError>`.
fn type_name(layout: &TypeLayout) -> String {
    tidy_type(&layout.full_type().to_string())
}

/// Drop lifetimes and abi_stable's spacing from a printed type.
fn tidy_type(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            while chars
                .peek()
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
            {
                chars.next();
            }
            while chars.peek().is_some_and(|c| *c == ',' || *c == ' ') {
                chars.next();
            }
            continue;
        }
        out.push(c);
    }
    let mut out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for (from, to) in [
        ("<>", ""),
        ("< ", "<"),
        (" >", ">"),
        (", >", ">"),
        ("& ", "&"),
    ] {
        out = out.replace(from, to);
    }
    out.trim_end_matches([',', ' ']).to_string()
}

fn host_vs_library(expected: impl std::fmt::Display, found: impl std::fmt::Display) -> String {
    format!("this host's scr-plugin has {expected}, the library {found}")
}

/// ` (in the return value of scheme method `describe`)`, or nothing at the root.
fn located(place: &Place) -> String {
    match (&place.method, &place.part) {
        (Some(m), Some((Part::Parameter(n), ..))) => format!(" (in parameter {n} of {m})"),
        (Some(m), Some((Part::Return, ..))) => format!(" (in the return value of {m})"),
        (Some(m), None) => format!(" (in {m})"),
        (None, _) => String::new(),
    }
}

/// What the difference is about when it is a type's own property (size, alignment):
/// the parameter or return value itself, else the type and where it sits.
fn subject(place: &Place) -> String {
    match (&place.method, &place.part, place.deeper) {
        (Some(m), Some((Part::Parameter(n), ..)), false) => format!("parameter {n} of {m}"),
        (Some(m), Some((Part::Return, ..)), false) => format!("the return value of {m}"),
        (None, _, _) if place.expected.name() == "PluginMod" => "its root module".into(),
        _ => format!("`{}`{}", type_name(place.expected), located(place)),
    }
}

fn explain_one(
    errors: &AbiInstabilityErrors,
    steps: &[Step],
    what: &AbiInstability,
) -> Option<(Weight, String)> {
    use AbiInstability as AI;
    use Weight::{Cause, Consequence};
    let place = place(errors, steps);
    let method = place.method.clone().unwrap_or_default();
    // a difference in a function's signature itself: its parameter list
    if let Some(Step::Function {
        expected: fe,
        found: ff,
    }) = steps.last()
    {
        let (e, f) = (parameter_count(fe), parameter_count(ff));
        return match what {
            AI::FieldCountMismatch(_) | AI::UnexpectedField(_) if e != f => {
                let n = e.abs_diff(f);
                let changed = match (n, f > e) {
                    (1, true) => "a parameter was added to".to_string(),
                    (1, false) => "a parameter was removed from".to_string(),
                    (n, true) => format!("{n} parameters were added to"),
                    (n, false) => format!("{n} parameters were removed from"),
                };
                Some((
                    Cause,
                    format!(
                        "{changed} {method} ({})",
                        host_vs_library(
                            plural(e, "parameter", "parameters"),
                            plural(f, "parameter", "parameters")
                        )
                    ),
                ))
            }
            // parameter names only say where the list went out of step
            AI::FieldCountMismatch(_) | AI::UnexpectedField(_) => None,
            AI::FnQualifierMismatch(_) => {
                Some((Cause, format!("{method} changed between safe and unsafe")))
            }
            // follows from a parameter whose type changed to or from a reference
            AI::FnLifetimeMismatch(_) => Some((
                Consequence,
                format!("the lifetimes in the signature of {method} changed"),
            )),
            _ => Some((Cause, format!("the signature of {method} changed"))),
        };
    }
    let (expected, found) = (place.expected, place.found);
    Some(match what {
        AI::Name(_) | AI::MismatchedPrimitive(_) | AI::GenericParamCount(_) => {
            let text = match (&place.method, place.part) {
                (Some(m), Some((Part::Parameter(n), pe, pf))) => format!(
                    "the type of parameter {n} of {m} changed ({})",
                    host_vs_library(
                        format!("`{}`", type_name(pe)),
                        format!("`{}`", type_name(pf))
                    )
                ),
                (Some(m), Some((Part::Return, pe, pf))) if type_name(pe) != type_name(pf) => {
                    format!(
                        "the return type of {m} changed ({})",
                        host_vs_library(
                            format!("`{}`", type_name(pe)),
                            format!("`{}`", type_name(pf))
                        )
                    )
                }
                // the same outer type (`RResult`): name the types inside that differ
                (Some(m), Some((part, pe, _))) => format!(
                    "the {} of {m} changed: inside its `{}`, {}",
                    match part {
                        Part::Parameter(n) => format!("type of parameter {n}"),
                        Part::Return => "return type".to_string(),
                    },
                    type_name(pe),
                    host_vs_library(
                        format!("`{}`", type_name(expected)),
                        format!("`{}`", type_name(found))
                    )
                ),
                _ => format!(
                    "a type changed{} ({})",
                    located(&place),
                    host_vs_library(
                        format!("`{}`", type_name(expected)),
                        format!("`{}`", type_name(found))
                    )
                ),
            };
            (Cause, text)
        }
        AI::FieldCountMismatch(_) | AI::UnexpectedField(_) => (Cause, fields_changed(&place)),
        AI::TooManyVariants(ef) => (
            Cause,
            format!(
                "the enum `{}`{} {} {} ({})",
                type_name(expected),
                located(&place),
                if ef.found > ef.expected {
                    "gained"
                } else {
                    "lost"
                },
                plural(ef.found.abs_diff(ef.expected), "variant", "variants"),
                host_vs_library(
                    plural(ef.expected, "variant", "variants"),
                    plural(ef.found, "variant", "variants")
                )
            ),
        ),
        AI::UnexpectedVariant(ef) => (
            Cause,
            format!(
                "variant `{}` of the enum `{}`{} was renamed to `{}`",
                ef.expected,
                type_name(expected),
                located(&place),
                ef.found
            ),
        ),
        AI::EnumDiscriminant(_) => (
            Cause,
            format!(
                "the values of the variants of the enum `{}`{} changed",
                type_name(expected),
                located(&place)
            ),
        ),
        AI::Size(ef) => (
            Consequence,
            format!(
                "the size of {} changed ({})",
                subject(&place),
                host_vs_library(
                    plural(ef.expected, "byte", "bytes"),
                    plural(ef.found, "byte", "bytes")
                )
            ),
        ),
        AI::Alignment(ef) => (
            Consequence,
            format!(
                "the alignment of {} changed ({})",
                subject(&place),
                host_vs_library(
                    plural(ef.expected, "byte", "bytes"),
                    plural(ef.found, "byte", "bytes")
                )
            ),
        ),
        AI::Package(ef) => (
            Cause,
            format!(
                "{} comes from package `{}`, not from `{}`: the library was not built with scr_plugin::export_plugin! against scr-plugin",
                subject(&place),
                ef.found,
                ef.expected
            ),
        ),
        AI::PackageVersion(ef) => (
            Cause,
            format!(
                "the library was built against scr-plugin {}, incompatible with this host's scr-plugin {}",
                ef.found, ef.expected
            ),
        ),
        AI::MismatchedPrefixSize(ef) => (
            Cause,
            format!(
                "{} has another number of mandatory members ({})",
                match place.table_of {
                    Some(t) => object_kind(t),
                    None => subject(&place),
                },
                host_vs_library(ef.expected, ef.found)
            ),
        ),
        AI::ReprAttr(_) => (
            Cause,
            format!("the representation (#[repr]) of {} changed", subject(&place)),
        ),
        AI::MismatchedExhaustiveness(_) => (
            Cause,
            format!(
                "the enum `{}`{} changed between exhaustive and non-exhaustive",
                type_name(expected),
                located(&place)
            ),
        ),
        AI::FieldLifetimeMismatch(_) => (
            Consequence,
            format!(
                "the lifetimes of the fields of `{}`{} changed",
                type_name(expected),
                located(&place)
            ),
        ),
        _ => (
            Consequence,
            format!("the layout of {} changed", subject(&place)),
        ),
    })
}

/// Fields (or, in a trait object's table, methods) added, removed or renamed, found by
/// comparing the two types' field names.
fn fields_changed(place: &Place) -> String {
    let names = |l: &TypeLayout| -> Vec<&'static str> {
        match l.data() {
            TLData::Struct { fields } | TLData::Union { fields } => {
                fields.iter().map(|f: TLField| f.name()).collect()
            }
            TLData::PrefixType(p) => p.fields.iter().map(|f: TLField| f.name()).collect(),
            TLData::Enum(e) => e.fields.iter().map(|f: TLField| f.name()).collect(),
            TLData::Primitive(_) | TLData::Opaque => Vec::new(),
        }
    };
    let (e, f) = (names(place.expected), names(place.found));
    let (one, many, holder) = match place.table_of {
        Some(t) => ("method", "methods", object_kind(t)),
        None => (
            "field",
            "fields",
            format!("`{}`", type_name(place.expected)),
        ),
    };
    let added: Vec<&str> = f.iter().filter(|n| !e.contains(n)).copied().collect();
    let removed: Vec<&str> = e.iter().filter(|n| !f.contains(n)).copied().collect();
    let list = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let (Some(_), true, false) = (place.table_of, added.is_empty(), removed.is_empty()) {
        // a library built before methods were appended to the contract
        return format!(
            "{holder} lacks {} {}: the library was built against an older scr-plugin (its source compiles unchanged against this one)",
            if removed.len() == 1 { one } else { many },
            list(&removed)
        );
    }
    let mut parts = Vec::new();
    if !added.is_empty() && added.len() == removed.len() {
        for (r, a) in removed.iter().zip(&added) {
            parts.push(format!("{one} `{r}` of {holder} was renamed to `{a}`"));
        }
    } else {
        for (names, how) in [(&removed, "removed from"), (&added, "added to")] {
            if !names.is_empty() {
                parts.push(format!(
                    "{} {} {} {how} {holder}",
                    if names.len() == 1 { one } else { many },
                    list(names),
                    if names.len() == 1 { "was" } else { "were" }
                ));
            }
        }
    }
    if parts.is_empty() {
        parts.push(if e.len() == f.len() {
            format!("the {many} of {holder} were reordered")
        } else {
            format!("the {many} of {holder} changed")
        });
    }
    let tail = match place.table_of {
        Some(_) => String::new(),
        None => located(place),
    };
    format!("{}{tail}", parts.join(", "))
}
