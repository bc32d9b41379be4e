//! Each kind of change, made to a pair of types of the same name compiled into this
//! test, as abi_stable compares them when a library is loaded. The changes the
//! fixture libraries make (a parameter added, a parameter's or the return type
//! changed, a field removed) are tested through real loads in
//! `scr-host/tests/registry.rs`.
#![allow(non_local_definitions, missing_docs, dead_code, unused_braces)]

use abi_stable::StableAbi;
use scr_host::registry::explain_layouts;

mod host {
    use abi_stable::{sabi_trait, std_types::RBox, StableAbi};

    #[repr(C)]
    #[derive(StableAbi)]
    pub struct Desc {
        pub name: u32,
        pub losses: u32,
    }

    #[repr(u8)]
    #[derive(StableAbi)]
    pub enum Level {
        Error,
        Warn,
    }

    #[repr(C)]
    #[derive(StableAbi)]
    pub struct Aligned {
        pub value: u32,
    }

    #[sabi_trait]
    pub trait FfiScheme: Send + Sync {
        fn apply(&self, level: Level, id: u64) -> u32;
        #[sabi(last_prefix_field)]
        fn remove(&self) -> u32;
        fn extra(&self) -> bool {
            false
        }
    }

    #[repr(C)]
    #[derive(StableAbi)]
    pub struct Root {
        pub scheme: FfiScheme_TO<'static, RBox<()>>,
        pub desc: extern "C" fn() -> Desc,
        pub aligned: Aligned,
    }
}

/// Each `lib_*` module is host's with one change.
macro_rules! library_side {
    ($name:ident, desc { $($desc:tt)* }, level { $($level:tt)* }, aligned { $($aligned:tt)* }, scheme { $($scheme:tt)* }) => {
        mod $name {
            use abi_stable::{sabi_trait, std_types::RBox, StableAbi};

            #[repr(C)]
            #[derive(StableAbi)]
            pub struct Desc { $($desc)* }

            #[repr(u8)]
            #[derive(StableAbi)]
            pub enum Level { $($level)* }

            $($aligned)*

            #[sabi_trait]
            pub trait FfiScheme: Send + Sync { $($scheme)* }

            #[repr(C)]
            #[derive(StableAbi)]
            pub struct Root {
                pub scheme: FfiScheme_TO<'static, RBox<()>>,
                pub desc: extern "C" fn() -> Desc,
                pub aligned: Aligned,
            }
        }
    };
}

library_side!(field_added,
desc { pub name: u32, pub losses: u32, pub summary: u32, },
level { Error, Warn, },
aligned { #[repr(C)] #[derive(StableAbi)] pub struct Aligned { pub value: u32 } },
scheme {
    fn apply(&self, level: Level, id: u64) -> u32;
    #[sabi(last_prefix_field)]
    fn remove(&self) -> u32;
    fn extra(&self) -> bool { false }
});
library_side!(field_renamed,
desc { pub name: u32, pub tolerated: u32, },
level { Error, Warn, },
aligned { #[repr(C)] #[derive(StableAbi)] pub struct Aligned { pub value: u32 } },
scheme {
    fn apply(&self, level: Level, id: u64) -> u32;
    #[sabi(last_prefix_field)]
    fn remove(&self) -> u32;
    fn extra(&self) -> bool { false }
});
library_side!(param_removed,
desc { pub name: u32, pub losses: u32, },
level { Error, Warn, },
aligned { #[repr(C)] #[derive(StableAbi)] pub struct Aligned { pub value: u32 } },
scheme {
    fn apply(&self, level: Level) -> u32;
    #[sabi(last_prefix_field)]
    fn remove(&self) -> u32;
    fn extra(&self) -> bool { false }
});
library_side!(variant_added,
desc { pub name: u32, pub losses: u32, },
level { Error, Warn, Info, },
aligned { #[repr(C)] #[derive(StableAbi)] pub struct Aligned { pub value: u32 } },
scheme {
    fn apply(&self, level: Level, id: u64) -> u32;
    #[sabi(last_prefix_field)]
    fn remove(&self) -> u32;
    fn extra(&self) -> bool { false }
});
library_side!(aligned,
desc { pub name: u32, pub losses: u32, },
level { Error, Warn, },
aligned { #[repr(C, align(16))] #[derive(StableAbi)] pub struct Aligned { pub value: u32 } },
scheme {
    fn apply(&self, level: Level, id: u64) -> u32;
    #[sabi(last_prefix_field)]
    fn remove(&self) -> u32;
    fn extra(&self) -> bool { false }
});
library_side!(older,
desc { pub name: u32, pub losses: u32, },
level { Error, Warn, },
aligned { #[repr(C)] #[derive(StableAbi)] pub struct Aligned { pub value: u32 } },
scheme {
    fn apply(&self, level: Level, id: u64) -> u32;
    #[sabi(last_prefix_field)]
    fn remove(&self) -> u32;
});

fn said<T: StableAbi>() -> String {
    explain_layouts(host::Root::LAYOUT, T::LAYOUT).expect("a difference")
}

#[test]
fn identical_layouts_have_nothing_to_say() {
    assert_eq!(
        explain_layouts(host::Root::LAYOUT, host::Root::LAYOUT),
        None
    );
}

#[test]
fn a_field_added() {
    assert_eq!(
        said::<field_added::Root>(),
        "field `summary` was added to `Desc` (in the return value of root module entry `desc`)"
    );
}

#[test]
fn a_field_renamed() {
    assert_eq!(
        said::<field_renamed::Root>(),
        "field `losses` of `Desc` was renamed to `tolerated` (in the return value of root module entry `desc`)"
    );
}

#[test]
fn a_parameter_removed() {
    assert_eq!(
        said::<param_removed::Root>(),
        "a parameter was removed from scheme method `apply` (this host's scr-plugin has 2 parameters, the library 1 parameter)"
    );
}

#[test]
fn an_enum_variant_added() {
    assert_eq!(
        said::<variant_added::Root>(),
        "the enum `Level` (in parameter 1 of scheme method `apply`) gained 1 variant (this host's scr-plugin has 2 variants, the library 3 variants)"
    );
}

#[test]
fn a_size_and_alignment_changed() {
    assert_eq!(
        said::<aligned::Root>(),
        "the size of `Aligned` changed (this host's scr-plugin has 4 bytes, the library 16 bytes)"
    );
}

/// A library built before a defaulted method was appended to the contract (as
/// `crc32_in_apply` was): refused by the newer host, which says its source still compiles.
#[test]
fn a_method_appended_since_the_library_was_built() {
    assert_eq!(
        said::<older::Root>(),
        "the scheme object lacks method `extra`: the library was built against an older scr-plugin (its source compiles unchanged against this one)"
    );
}
