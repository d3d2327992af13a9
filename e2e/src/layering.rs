//! The module graph of a crate's sources, for the layering guards
//! (issue 42, item 5): `broker/tests/module_layering.rs` and
//! `operator/tests/module_layering.rs` read their `src` with it, so the two
//! crates' guards apply one rule.
//!
//! [`graph_of`] reads every `.rs` file under a source directory as text and
//! takes each `crate::…`, `super::…` and `self::…` path outside
//! `#[cfg(test)]` modules as an edge from the file's module to the deepest
//! module that path names (a path into a module's items counts as an edge
//! to that module; a child naming its own ancestor, or a parent its child,
//! counts like any other); the crate roots (`lib.rs`, `main.rs`) only
//! declare and wire modules and have no edges. [`loops`] finds the strongly
//! connected components of that graph: every component of more than one
//! module is a loop, two modules that import each other directly or around
//! a cycle. Reads text only: it never builds or links the crate it reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path → the modules its code names.
pub type ModuleGraph = BTreeMap<String, BTreeSet<String>>;

/// Module path of a source file: `controller/rpc.rs` → `controller::rpc`,
/// `controller/mod.rs` → `controller`, `lib.rs` → `` (the crate root).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of a file without its `#[cfg(test)]` modules (a `mod … {`
/// right after the attribute, up to the `}` at the same indentation).
fn without_test_modules(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            if let Some(next) = lines.peek() {
                let t = next.trim_start();
                if (t.starts_with("mod ") || t.starts_with("pub mod ")) && t.ends_with('{') {
                    let indent = next.len() - t.len();
                    lines.next();
                    for l in lines.by_ref() {
                        let lt = l.trim_start();
                        if l.len() - lt.len() == indent && lt.starts_with('}') {
                            break;
                        }
                    }
                    continue;
                }
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every `crate::a::b`, `super::a`, `self::a` path in `text` (comments
/// dropped), as the module path it names from `module`.
fn referenced(module: &str, text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            // a whole word: not `some_crate::`
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            // the path's segments, with `{a, b}` groups of one level
            let rest = &code[at..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let path = &rest[..end];
            let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
            let mut base: Vec<String> = match segs.first().copied() {
                Some("crate") => Vec::new(),
                Some("self") => module
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
                Some("super") => {
                    let mut m: Vec<String> = module
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect();
                    m.pop();
                    m
                }
                _ => continue,
            };
            segs.remove(0);
            while segs.first() == Some(&"super") {
                base.pop();
                segs.remove(0);
            }
            let mut targets = vec![segs.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
            if rest[end..].starts_with('{') {
                if let Some(close) = rest[end..].find('}') {
                    targets = rest[end + 1..end + close]
                        .split(',')
                        .map(|item| {
                            let mut t: Vec<String> = segs.iter().map(|s| s.to_string()).collect();
                            let first = item.trim().split("::").next().unwrap_or("").trim();
                            if !first.is_empty() && first != "self" {
                                t.push(first.to_string());
                            }
                            t
                        })
                        .collect();
                }
            }
            for t in targets {
                let mut full = base.clone();
                full.extend(t);
                // the deepest module the path names
                while !full.is_empty() && !modules.contains(&full.join("::")) {
                    full.pop();
                }
                let target = full.join("::");
                if !target.is_empty() && target != module {
                    out.insert(target);
                }
            }
        }
    }
    out
}

/// Strongly connected components of more than one node (Tarjan).
pub fn loops(graph: &ModuleGraph) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        graph: &'a ModuleGraph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let graph = t.graph;
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out.sort();
    t.out
}

/// The module graph of the `.rs` files under `src` (a crate's `src`).
pub fn graph_of(src: &Path) -> ModuleGraph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(src, f)).collect();
    let mut graph = BTreeMap::new();
    for f in &files {
        let module = module_of(src, f);
        if module.is_empty() {
            continue; // lib.rs / main.rs only declare and wire modules
        }
        let text = without_test_modules(&std::fs::read_to_string(f).expect("read"));
        graph
            .entry(module.clone())
            .or_insert_with(BTreeSet::new)
            .extend(referenced(&module, &text, &modules));
    }
    graph
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_reader_finds_crate_super_and_grouped_imports() {
        let modules: BTreeSet<String> = ["a", "a::b", "c", "d"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let text = "use crate::c::Thing;\nuse super::{b::X, Y};\nlet x = crate::d::f(); // crate::a\nmy_crate::c::z();\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n";
        let found = referenced("a::b", &without_test_modules(text), &modules);
        let want: BTreeSet<String> = ["c", "d", "a"].iter().map(|s| s.to_string()).collect();
        assert_eq!(found, want);
        let mut g = BTreeMap::new();
        g.insert("x".to_string(), ["y".to_string()].into());
        g.insert("y".to_string(), ["z".to_string()].into());
        g.insert("z".to_string(), ["x".to_string()].into());
        g.insert("w".to_string(), ["x".to_string()].into());
        assert_eq!(
            loops(&g),
            vec![["x", "y", "z"].iter().map(|s| s.to_string()).collect()]
        );
    }
}
