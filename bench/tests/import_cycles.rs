//! The guard of bench/'s Python layering (issue 42): `bench/check_imports.py`
//! (stdlib `ast`, nothing imported or run) must find no import cycle among
//! bench/*.py, and must find one where there is one. Runs with the unit
//! stage's `cargo test --workspace`; needs only `python3`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn check(dir: &Path) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("check_imports.py");
    Command::new("python3")
        .arg(&script)
        .arg(dir)
        .output()
        .expect("python3 runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn no_import_cycle_among_bench_modules() {
    let out = check(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn the_check_finds_a_cycle_through_a_deferred_import() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("moldau-bench-import-cycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.py"), "import b\nimport json\n").unwrap();
    std::fs::write(
        dir.join("b.py"),
        "def f():\n    from c import x\n    return x\n",
    )
    .unwrap();
    std::fs::write(dir.join("c.py"), "import a as _a\nx = 1\n").unwrap();
    std::fs::write(dir.join("d.py"), "import a\n").unwrap();
    let out = check(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("  a b c: a -> b, b -> c, c -> a"),
        "{}",
        text(&out)
    );
}
