//! One benchmark per policy of the library (`policies/`): the admission of
//! its first mutating case in `conformance/library/` (the case's policies,
//! bindings and cluster objects, in process), so that a regression shows
//! by the policy's name (issue 43).
//!
//! `cargo bench --bench library_policies`; one policy:
//! `cargo bench --bench library_policies -- images-latest-pull-always`.

use criterion::{criterion_group, criterion_main, Criterion};
use kmutate::conformance::{self, Case};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

// As the binary (src/main.rs).
#[global_allocator]
static ALLOCATOR: kmutate::allocator::Mimalloc = kmutate::allocator::Mimalloc;

/// The first case of `file` whose expected object is not the object sent:
/// one where the policy acts.
fn mutating_case(file: &Path) -> Option<Case> {
    conformance::read_cases(&[file.to_path_buf()])
        .into_iter()
        .filter_map(Result::ok)
        .find(|c| {
            let expected = c.doc.pointer("/expect/object");
            expected.is_some() && expected != c.doc.get("object")
        })
}

fn library_policies(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut policies: Vec<_> = std::fs::read_dir(root.join("policies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    policies.sort();
    let mut group = c.benchmark_group("library");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(2));
    for policy in policies {
        let name = policy.file_stem().unwrap().to_string_lossy().into_owned();
        let cases = root
            .join("conformance/library")
            .join(format!("{name}.yaml"));
        let case = mutating_case(&cases)
            .unwrap_or_else(|| panic!("{}: no mutating case", cases.display()));
        let prepared = conformance::prepare(&case).unwrap_or_else(|e| panic!("{name}: {e}"));
        group.bench_function(name, |b| b.iter(|| black_box(prepared.run())));
    }
    group.finish();
}

criterion_group!(benches, library_policies);
criterion_main!(benches);
