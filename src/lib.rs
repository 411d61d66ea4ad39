//! kmutate: a Kubernetes MutatingAdmissionPolicy evaluator.
//!
//! The crate follows the admission pipeline, one module per stage:
//!
//! - [`allocator`]: the process's global allocator (mimalloc);
//! - [`api`]: the policy model (every served version, defaults) and loading;
//! - [`request`]: the admission request and the cluster objects it sees;
//! - [`matching`]: matchConstraints and binding matchResources;
//! - [`cel`]: the CEL environment, conversions and Kubernetes types;
//! - [`schema`]: OpenAPI schemas of built-in kinds and CRDs;
//! - [`mutation`]: ApplyConfiguration merge and JSON patch application;
//! - [`dispatch`]: compiled policies, params, variables, reinvocation;
//! - [`engine`]: the compiled, indexed policy set with the cluster objects,
//!   swapped whole when a source changes;
//! - [`explain`]: which policy, binding and mutation changed which fields;
//! - [`conformance`]: the conformance case runner;
//! - [`source`]: where `kmutate serve` reads policies from, kept current;
//! - [`webhook`]: the admission webhook (`kmutate serve`) and its load generator.

pub mod allocator;
pub mod api;
pub mod apply;
pub mod attribution;
pub mod authorizer;
pub mod cel;
pub mod conformance;
pub mod dispatch;
pub mod engine;
pub mod explain;
mod gofmt;
mod json_text;
pub mod matching;
pub mod mutation;
pub mod parallel;
mod quantity;
pub mod registration;
pub mod reports;
pub mod request;
pub mod scan;
pub mod schema;
pub mod source;
pub mod translate;
pub mod validation;
pub mod webhook;
