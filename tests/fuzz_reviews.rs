//! Structure-aware fuzzing of what `kmutate serve` takes from the network
//! and from its policy folders (issue 42): AdmissionReviews mutated at every
//! depth, policy and binding documents, and YAML text. Every input must be
//! answered or refused cleanly: a panic, even one the server would catch,
//! fails the run.
//!
//! `cargo test` runs a short deterministic pass. `.ci/run` and longer runs
//! use the ignored test, bounded by time or count:
//!
//! ```sh
//! KMUTATE_FUZZ_SECONDS=180 cargo test --release --test fuzz_reviews -- --ignored --nocapture
//! KMUTATE_FUZZ_INPUTS=10000000 KMUTATE_FUZZ_SECONDS=3600 cargo test --release --test fuzz_reviews -- --ignored --nocapture
//! ```
//!
//! Inputs that panicked are written to `target/fuzz-findings/` (the input
//! and the panic message), so each can become a regression test.

mod support;

use support::fuzz::{FuzzRun, Rng};

/// The short pass of `cargo test`: deterministic, a few seconds in a debug
/// build.
#[test]
fn short_pass_finds_no_panic() {
    let run = FuzzRun::new(0x6b6d_7574_6174_6532, 1);
    let report = run.run(Some(3_000), std::time::Duration::from_secs(120));
    report.assert_clean();
}

/// The long pass: `KMUTATE_FUZZ_SECONDS` (default 180) or
/// `KMUTATE_FUZZ_INPUTS`, whichever ends first, on every core; the seed
/// from `KMUTATE_FUZZ_SEED` or the clock (printed, so a run can be
/// repeated).
#[test]
#[ignore = "long: run by .ci/run and by hand"]
fn long_pass_finds_no_panic() {
    let seconds: u64 = env_number("KMUTATE_FUZZ_SECONDS").unwrap_or(180);
    let inputs = env_number("KMUTATE_FUZZ_INPUTS");
    let seed = env_number("KMUTATE_FUZZ_SEED").unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Rng::new(now.as_nanos() as u64).next()
    });
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    println!("fuzz seed {seed:#x}, {threads} threads, {seconds} s");
    let run = FuzzRun::new(seed, threads);
    let report = run.run(inputs, std::time::Duration::from_secs(seconds));
    report.assert_clean();
}

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.replace('_', "").parse().ok(),
    }
}
