//! Applying a mutation's result to the object: ApplyConfiguration merges
//! (server-side-apply semantics) and JSON patches (RFC 6902 as
//! evanphx/json-patch v4 applies them); and the patch from the original
//! object to the mutated one.

pub mod apply_configuration;
pub mod diff;
pub mod json_patch;
