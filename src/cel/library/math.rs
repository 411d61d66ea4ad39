//! cel-go's `ext.Math()` library: not part of the Kubernetes 1.36 base
//! environment.
//!
//! `k8s.io/apiserver/pkg/cel/environment/base.go` (1.36) enables
//! `ext.Strings(ext.StringsVersion(2))`, `ext.Sets()`,
//! `ext.TwoVarComprehensions()` and `ext.Lists(ext.ListsVersion(3))` from
//! cel-go, but not `ext.Math`: `math.greatest(1, 2)` and the like do not
//! compile in a MutatingAdmissionPolicy. Nothing is registered here, so such
//! calls fail as calls to undeclared functions.

use cel::{DeclarationError, Env};

/// Registers nothing: see the module documentation.
pub fn register(_env: &mut Env) -> Result<(), DeclarationError> {
    Ok(())
}
