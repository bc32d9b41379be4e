//! The plugin author's manual: the contracts a scheme or transfer type must keep and how
//! to meet them with the helpers of this crate. Documentation only; no items.

pub mod transfers;
