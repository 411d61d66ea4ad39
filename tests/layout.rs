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

/// The sibling modules of `src/cel/` each file names (`super::m` or
/// `crate::cel::m`), test modules aside; `mod.rs`, which assembles them,
/// is left out.
fn cel_module_imports() -> Vec<(String, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cel");
    let mut modules: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = if path.is_dir() {
            // A module folder (`check/`, `library/`): its files together.
            let mut text = String::new();
            for file in std::fs::read_dir(&path).unwrap() {
                text += &std::fs::read_to_string(file.unwrap().path()).unwrap_or_default();
            }
            let own = root.join(format!("{name}.rs"));
            text + &std::fs::read_to_string(own).unwrap_or_default()
        } else if name != "mod" && path.extension().is_some_and(|e| e == "rs") {
            std::fs::read_to_string(&path).unwrap()
        } else {
            continue;
        };
        if let Some(existing) = modules.iter_mut().find(|(n, _)| *n == name) {
            existing.1 += &text;
        } else {
            modules.push((name, text));
        }
    }
    let names: Vec<String> = modules.iter().map(|(n, _)| n.clone()).collect();
    modules
        .iter()
        .map(|(name, text)| {
            // Test modules sit at the end of a file.
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
            let mut used: Vec<String> = names
                .iter()
                .filter(|other| *other != name)
                .filter(|other| {
                    [
                        format!("super::{other}::"),
                        format!("super::{other}::{{"),
                        format!("crate::cel::{other}::"),
                    ]
                    .iter()
                    .any(|p| code.contains(p.as_str()))
                })
                .cloned()
                .collect();
            used.sort();
            (name.clone(), used)
        })
        .collect()
}

#[test]
fn the_cel_modules_import_each_other_without_a_circle() {
    let graph = cel_module_imports();
    assert!(
        graph
            .iter()
            .any(|(n, used)| n == "cost" && used.contains(&"ast".to_string())),
        "the import scan finds nothing: {graph:?}"
    );
    // Modules are removed once everything they import is removed; what is
    // left lies on a circle.
    let mut left = graph.clone();
    loop {
        let ready: Vec<String> = left
            .iter()
            .filter(|(_, used)| used.iter().all(|u| !left.iter().any(|(n, _)| n == u)))
            .map(|(n, _)| n.clone())
            .collect();
        if ready.is_empty() {
            break;
        }
        left.retain(|(n, _)| !ready.contains(n));
    }
    assert!(
        left.is_empty(),
        "src/cel/ modules on an import circle: {left:?}"
    );
}
