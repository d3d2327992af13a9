//! The guard of the broker's layering (issue 42, item 5): modules of
//! `broker/src` form floors, and a module imports only from floors below
//! it, so no two modules import each other, directly or around a loop.
//!
//! The test reads every `.rs` file of `broker/src` as text, takes each
//! `crate::…`, `super::…` and `self::…` path outside `#[cfg(test)]` modules
//! as an edge from the file's module to the deepest module that path names
//! (a path into a module's items counts as an edge to that module; a child
//! naming its own ancestor, or a parent its child, counts like any other),
//! and finds the strongly connected components of that graph. Every
//! component of more than one module is a loop. The graph and its loops are
//! `moldau_e2e::layering`'s, which the operator's guard
//! (`operator/tests/module_layering.rs`) reads `operator/src` with.
//!
//! Loops still allowed are listed in `module_layering.baseline` (one loop
//! a line, its modules sorted, space-separated): the debt issue 42 paid
//! down, to none. The test fails when a loop appears that is not inside a
//! listed one (new debt), and when a listed loop is gone or has shrunk (so
//! the baseline only ever shrinks: rewrite it with
//! `MOLDAU_LAYERING_BLESS=1 cargo test -p moldau-broker --test
//! module_layering`, which refuses to add anything once the baseline
//! exists).

use std::collections::BTreeSet;
use std::path::Path;

use moldau_e2e::layering::{graph_of, loops};

#[test]
fn no_new_module_loop_in_broker_src() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = loops(&graph_of(&root.join("src")));
    let baseline_path = root.join("tests/module_layering.baseline");
    let bless = std::env::var_os("MOLDAU_LAYERING_BLESS").is_some();
    let first = !baseline_path.exists();
    let baseline: Vec<BTreeSet<String>> = std::fs::read_to_string(&baseline_path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    let new: Vec<&BTreeSet<String>> = found
        .iter()
        .filter(|l| !baseline.iter().any(|b| l.is_subset(b)))
        .collect();
    assert!(
        new.is_empty() || (bless && first),
        "new module loops in broker/src (a module imports, directly or around a loop, one that imports it): {new:#?}"
    );
    let render = |ls: &[BTreeSet<String>]| {
        ls.iter()
            .map(|l| l.iter().cloned().collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
    };
    if bless {
        let mut text = String::from(
            "# Module loops of broker/src still allowed, one a line (modules sorted). None\n# since issue 42 broke the last: tests/module_layering.rs fails on any loop\n# not listed here, and this list only ever shrinks (MOLDAU_LAYERING_BLESS=1).\n",
        );
        for l in render(&found) {
            text.push_str(&l);
            text.push('\n');
        }
        std::fs::write(&baseline_path, text).expect("write baseline");
        return;
    }
    assert_eq!(
        render(&found),
        render(&baseline),
        "a listed loop shrank or is gone: rewrite the baseline with MOLDAU_LAYERING_BLESS=1"
    );
}
