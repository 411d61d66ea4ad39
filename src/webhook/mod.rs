//! The admission webhook: `kmutate serve` and its load generator.
//!
//! kube-apiserver (or anything speaking `admission.k8s.io/v1`) POSTs an
//! AdmissionReview to `/mutate`; the review's request runs through the
//! [`PolicySet`](crate::dispatch::PolicySet) and the answer carries the RFC 6902
//! patch from the original to the mutated object.
//!
//! - [`engine`]: the loaded policies, bindings and cluster objects;
//! - [`review`]: decoding AdmissionReviews and encoding the answers;
//! - [`server`]: the TLS listener, the routes, timeouts, draining;
//! - [`tls`]: certificates (files re-read when they change, or self-signed);
//! - [`metrics`]: the Prometheus metrics;
//! - [`reinvocation`]: telling kube-apiserver's reinvocation from a new request;
//! - [`peers`]: handing what a stopping replica remembers to the others;
//! - [`validate`]: `POST /validate`, refusing invalid `kmutate.dev` policies;
//! - [`client`]: a small HTTPS client, used by [`loadtest`] and the tests;
//! - [`loadtest`]: `kmutate loadtest`;
//! - [`cli`]: the `serve` and `loadtest` subcommands.

pub mod cli;
pub mod client;
#[cfg(test)]
mod engine_tests;
pub mod loadtest;
pub mod metrics;
pub mod peers;
pub mod reinvocation;
pub mod review;
pub mod server;
pub mod tls;
pub mod validate;

pub use crate::engine::Engine;
pub use server::{
    start, AdmissionMode, ManagedWebhook, ServeConfig, Server, TlsSource, WarningsMode,
};

use std::time::Duration;

/// Largest request body accepted (3 MiB, kube-apiserver's own limit for a
/// request object); larger ones get 413.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Deepest JSON nesting accepted in a request body (serde_json's fixed
/// recursion limit); deeper ones get 400. An AdmissionReview puts the
/// object two levels down, so an object may nest 125 levels.
pub const MAX_NESTING: usize = 127;

/// Parses a duration such as `10s`, `500ms`, `1m30s`, `250us` or `2` (seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = text.parse::<f64>() {
        return duration_from_secs(secs, text);
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: missing unit (ns, us, ms, s, m or h)"))?;
        if number_end == 0 {
            return Err(format!("{text:?}: expected a number"));
        }
        let value: f64 = rest[..number_end]
            .parse()
            .map_err(|_| format!("{text:?}: bad number {:?}", &rest[..number_end]))?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => return Err(format!("{text:?}: unknown unit {unit:?}")),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    duration_from_secs(total, text)
}

fn duration_from_secs(secs: f64, text: &str) -> Result<Duration, String> {
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{text:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Formats a duration as `parse_duration` reads it (`10s`, `1.5s`, `250ms`).
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) && d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1").is_err());
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }
}
