//! The layering the guide asks for, checked on the sources: the plain-data
//! stages import nothing from the stages built on them (issue 43).

use std::path::Path;

/// The `crate::STAGE` paths the Rust files under `src/DIR` name (test
/// modules aside: they may build on the stages above).
fn imports_of(dir: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path.to_string_lossy().ends_with("tests.rs")
            {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let mut rest = line;
                    while let Some(at) = rest.find("crate::") {
                        let stage: String = rest[at + 7..]
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        found.push((format!("{}:{}", path.display(), i + 1), stage));
                        rest = &rest[at + 7..];
                    }
                }
            }
        }
    }
    found
}

#[test]
fn plain_data_stages_import_nothing_from_the_stages_above() {
    for (dir, allowed) in [
        // Built-in type schemas and the Go decoding of objects.
        (
            "schema",
            &["schema", "api", "request", "quantity", "gofmt", "parallel"][..],
        ),
        // Resource quantities.
        ("quantity", &["quantity"][..]),
    ] {
        let wrong: Vec<String> = imports_of(dir)
            .into_iter()
            .filter(|(_, stage)| !allowed.contains(&stage.as_str()))
            .map(|(at, stage)| format!("{at}: crate::{stage}"))
            .collect();
        assert!(
            wrong.is_empty(),
            "src/{dir}/ imports from above it:\n{}",
            wrong.join("\n")
        );
    }
}
