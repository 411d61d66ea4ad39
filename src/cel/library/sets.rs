//! Kubernetes CEL library: sets (not yet implemented).

use cel::{DeclarationError, Env};

/// Registers the library's functions on `env`.
pub fn register(_env: &mut Env) -> Result<(), DeclarationError> {
    Ok(())
}
