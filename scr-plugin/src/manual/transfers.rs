//! Transfer types: see the `axl-transfer` plugin and `templates/transfer-plugin`.
