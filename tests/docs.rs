//! The examples of `docs/case-format.md` run as written: the first case
//! passes `kmutate conformance`, and so would a reader's copy of it.

use std::path::Path;
use std::process::Command;

/// The first `yaml` block after `heading` in the document.
fn yaml_after(doc: &str, heading: &str) -> String {
    let from = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let rest = &doc[from..];
    let start = rest.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let end = rest[start..].find("```").expect("its end");
    rest[start..start + end].to_string()
}

#[test]
fn the_first_case_of_the_format_document_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/case-format.md")).unwrap();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("first-case.yaml");
    std::fs::write(&file, yaml_after(&doc, "## A first case")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kmutate"))
        .arg("conformance")
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("ok team-label-from-namespace"), "{stdout}");
    assert!(stdout.ends_with("1 passed, 0 failed\n"), "{stdout}");
}
