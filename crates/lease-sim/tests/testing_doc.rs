//! docs/testing-with-lease-sim.md builds a crate file by file: its ```toml
//! block is the crate's `Cargo.toml`, and each ```rust block starts with a
//! comment naming the file it goes to (`// src/lib.rs`, `// tests/x.rs`).
//! This test writes exactly that crate to a directory under the target
//! directory, with the published lease crates it names turned into path
//! dependencies on this workspace, and runs its tests with `cargo test`: a
//! block that does not compile, or a test of the page that fails, fails
//! here.
//!
//! The crate and its build directory are reused from one run to the next
//! (files are rewritten only when the page changed), so only the first run
//! builds the dependencies. The workspace's `Cargo.lock` is the crate's
//! starting lock file, so it builds the versions the workspace tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The crates a reader can depend on: the published ones.
const PUBLISHED: [&str; 8] = [
    "lease-core",
    "lease-driver",
    "lease-history",
    "lease-sim",
    "lease-redis",
    "lease-fred",
    "lease-smol",
    "lease-tls",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced blocks of `page` with the given info string, in order.
fn blocks<'a>(page: &'a str, lang: &str) -> Vec<&'a str> {
    let open = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find(&open) {
        let body = &rest[start + open.len()..];
        let end = body.find("\n```").expect("an unclosed code block");
        out.push(&body[..end + 1]);
        rest = &body[end + 4..];
    }
    out
}

/// The page's `Cargo.toml` with every lease crate as a path dependency.
fn manifest(toml: &str, root: &Path) -> String {
    let mut out = String::new();
    for line in toml.lines() {
        let name = line.split([' ', '=']).next().unwrap_or("");
        if !name.starts_with("lease-") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        assert!(
            PUBLISHED.contains(&name),
            "the page depends on {name}, which is not published"
        );
        let path = root.join("crates").join(name);
        let path = format!("path = {:?}", path.display().to_string());
        let (dep, comment) = line.split_once('#').unwrap_or((line, ""));
        let dep = dep.trim_end();
        let spec = dep[name.len()..]
            .trim_start()
            .trim_start_matches('=')
            .trim();
        let spec = if spec.starts_with('{') {
            assert!(spec.contains("version = \"0.1\""), "{line}");
            spec.replacen("version = \"0.1\"", &path, 1)
        } else {
            assert_eq!(spec, "\"0.1\"", "{line}");
            format!("{{ {path} }}")
        };
        out.push_str(&format!("{name} = {spec}"));
        if !comment.is_empty() {
            out.push_str(&format!(" #{comment}"));
        }
        out.push('\n');
    }
    // A crate of its own, outside this workspace, built without debug info
    // to keep the build directory small.
    out.push_str("\n[workspace]\n\n[profile.dev]\ndebug = false\n");
    out
}

/// Writes `text` to `path` unless it already holds exactly that, so that
/// an unchanged page rebuilds nothing.
fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() == Some(text) {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("create a directory");
    std::fs::write(path, text).expect("write a file");
}

/// Removes the source files of an earlier version of the page.
fn remove_others(dir: &Path, files: &BTreeMap<String, String>) {
    for sub in ["src", "tests", "examples"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let relative = format!("{sub}/{}", path.file_name().unwrap().to_string_lossy());
            if !files.contains_key(&relative) {
                std::fs::remove_file(&path).expect("remove a stale file");
            }
        }
    }
}

#[test]
fn every_code_block_of_the_testing_guide_builds_and_its_tests_pass() {
    let root = workspace().canonicalize().expect("the workspace");
    let page = std::fs::read_to_string(root.join("docs/testing-with-lease-sim.md"))
        .expect("docs/testing-with-lease-sim.md");

    let tomls = blocks(&page, "toml");
    assert_eq!(tomls.len(), 1, "one ```toml block: the crate's Cargo.toml");
    let mut files = BTreeMap::new();
    for block in blocks(&page, "rust") {
        let first = block.lines().next().unwrap_or("");
        let path = first
            .strip_prefix("// ")
            .filter(|p| {
                (p.starts_with("src/") || p.starts_with("tests/") || p.starts_with("examples/"))
                    && p.ends_with(".rs")
                    && !p.contains(' ')
            })
            .unwrap_or_else(|| {
                panic!("a ```rust block must start with the file it goes to, not {first:?}")
            });
        let previous = files.insert(path.to_owned(), block.to_owned());
        assert!(previous.is_none(), "two blocks for {path}");
    }
    assert!(
        files.contains_key("src/lib.rs"),
        "the page has no src/lib.rs"
    );

    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        root.join(target)
    };
    let dir = target.join("testing-doc").join("invoices");
    write_if_changed(&dir.join("Cargo.toml"), &manifest(tomls[0], &root));
    for (path, text) in &files {
        write_if_changed(&dir.join(path), text);
    }
    remove_others(&dir, &files);
    // The workspace's lock file, as it was when last copied: cargo prunes
    // the copy to the crate's own dependencies.
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).expect("Cargo.lock");
    let source = dir.join("Cargo.lock.workspace");
    if std::fs::read_to_string(&source).ok().as_deref() != Some(lock.as_str()) {
        write_if_changed(&dir.join("Cargo.lock"), &lock);
        write_if_changed(&source, &lock);
    }

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["test", "--quiet"])
        .current_dir(&dir)
        .env(
            "CARGO_TARGET_DIR",
            target.join("testing-doc").join("target"),
        )
        // The page's code is shown to readers: it builds without a warning.
        .env("RUSTFLAGS", "-D warnings")
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the crate of docs/testing-with-lease-sim.md (in {}) does not build or its tests fail:\n{stderr}\n{stdout}",
        dir.display()
    );
    // Every test file of the page holds at least one test, and they ran.
    let passed: usize = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<usize>().ok())
        .sum();
    let tests = files.keys().filter(|p| p.starts_with("tests/")).count();
    assert!(
        passed >= tests,
        "{passed} tests passed for {tests} test files:\n{stdout}"
    );
}
