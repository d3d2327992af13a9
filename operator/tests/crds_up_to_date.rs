//! `crds/` must be exactly what `crdgen` generates from the Rust types.
//! Regenerate with `cargo run -p moldau-operator --bin crdgen -- --out crds`.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn crds_directory_matches_generator() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
    let files = moldau_operator::crd::crd_files().expect("CRDs render");
    for (name, yaml) in &files {
        let on_disk = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        assert!(
            on_disk == *yaml,
            "crds/{name} is out of date; run `cargo run -p moldau-operator --bin crdgen -- --out crds`"
        );
    }
    let expected: BTreeSet<String> = files.into_iter().map(|(n, _)| n).collect();
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("crds/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    assert_eq!(
        present, expected,
        "crds/ holds files crdgen does not generate"
    );
}
