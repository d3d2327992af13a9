//! The guard of the operator's layering (issue 42, item 5): no two modules
//! of `operator/src` import each other, directly or around a loop. The
//! module graph is `moldau_e2e::layering`'s, the one the broker's guard
//! (`broker/tests/module_layering.rs`) reads `broker/src` with: every
//! `crate::`/`super::`/`self::` path outside `#[cfg(test)]` modules is an
//! edge, and any strongly connected component of more than one module
//! fails the test. No baseline: the operator has no loop to allow.

use std::path::Path;

use moldau_e2e::layering::{graph_of, loops};

#[test]
fn no_module_loop_in_operator_src() {
    let graph = graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // the reader found the operator's modules and their imports
    assert!(
        graph
            .get("cluster::controller")
            .is_some_and(|to| to.contains("cluster::rollout") && to.contains("context")),
        "module graph of operator/src: {graph:#?}"
    );
    let found = loops(&graph);
    assert!(
        found.is_empty(),
        "module loops in operator/src (a module imports, directly or around a loop, one that \
         imports it; move what they share to the lower module or a small module of its own): \
         {found:#?}"
    );
}
