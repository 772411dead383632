//! Every Rust snippet in the workspace README is one of the adapters'
//! `examples/<adapter>_quickstart.rs` (the part between `// README begin` and
//! `// README end`), which CI compiles: a snippet cannot drift from code that
//! builds.

use std::path::Path;

fn snippet(example: &Path) -> String {
    let text = std::fs::read_to_string(example).expect("example");
    let begin = text.find("// README begin\n").expect("begin marker") + "// README begin\n".len();
    let end = text.find("// README end").expect("end marker");
    text[begin..end].to_owned()
}

#[test]
fn readme_snippets_are_the_compiled_examples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let blocks: Vec<&str> = readme
        .split("```rust\n")
        .skip(1)
        .map(|b| b.split("```").next().expect("closed block"))
        .collect();
    let examples = ["redis", "fred", "smol"].map(|c| {
        let path = format!("crates/lease-{c}/examples/{c}_quickstart.rs");
        snippet(&root.join(path))
    });
    assert_eq!(blocks.len(), examples.len(), "one Rust block per adapter");
    for (block, example) in blocks.iter().zip(&examples) {
        assert_eq!(*block, example, "a README snippet differs from its example");
    }
}
