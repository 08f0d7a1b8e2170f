//! The shape of the source tree, checked on every `cargo test`:
//!
//! 1. **Layering.** References between the top-level modules of `src/`
//!    (`use crate::x` and `crate::x::` paths outside comments) follow
//!    `api -> runtime -> {checkpoint, failover} -> plan`: no edge points up
//!    that order, `plan` uses no other module of the crate, and the module
//!    graph has no cycle. Edges known to break this today are listed in
//!    [`KNOWN_BACK_EDGES`], each with its reason; any new one fails.
//! 2. **File size.** No `.rs` file under `src/` or `actors/src/` is over
//!    [`MAX_LINES`] lines, except the files of [`LARGE_FILES`], which are
//!    being split (the list only shrinks).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The stated order, highest first: a module may use modules of a lower
/// rank only (modules outside the list are unconstrained but for cycles).
const LAYERS: &[(&str, u32)] = &[
    ("api", 4),
    ("runtime", 3),
    ("checkpoint", 2),
    ("failover", 2),
    ("plan", 1),
];

/// Edges that close a cycle or point up the order today, and why each is
/// still there. Removing the reason removes the entry; nothing is added.
const KNOWN_BACK_EDGES: &[(&str, &str, &str)] = &[];

/// The longest a source file may be.
const MAX_LINES: usize = 800;

/// Files allowed over [`MAX_LINES`]: none today, and the list stays empty;
/// a file that grows past the limit is split into a directory module.
const LARGE_FILES: &[&str] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules of `src/` (not `lib.rs`, `main.rs`).
fn top_modules(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("src/")
        .map(|e| e.expect("entry").path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            if p.is_dir() {
                Some(name)
            } else {
                let stem = name.strip_suffix(".rs")?;
                (stem != "lib" && stem != "main").then(|| stem.to_string())
            }
        })
        .collect()
}

/// The code of a file without its comments (line comments, doc comments
/// and their intra-doc links, block comments).
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut block = 0usize;
    for line in text.lines() {
        let mut rest = line;
        let mut kept = String::new();
        loop {
            if block > 0 {
                match rest.find("*/") {
                    Some(i) => {
                        block -= 1;
                        rest = &rest[i + 2..];
                    }
                    None => break,
                }
            } else {
                let line_comment = rest.find("//");
                let block_start = rest.find("/*");
                match (line_comment, block_start) {
                    (Some(l), Some(b)) if b < l => {
                        kept.push_str(&rest[..b]);
                        block += 1;
                        rest = &rest[b + 2..];
                    }
                    (Some(l), _) => {
                        kept.push_str(&rest[..l]);
                        break;
                    }
                    (None, Some(b)) => {
                        kept.push_str(&rest[..b]);
                        block += 1;
                        rest = &rest[b + 2..];
                    }
                    (None, None) => {
                        kept.push_str(rest);
                        break;
                    }
                }
            }
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segments after each `crate::` in `code`, including each
/// member of a `crate::{a::X, b}` group.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        // `floe_actors::…` or `my_crate::…` are other paths.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => {
                        depth += 1;
                        start = false;
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => start = true,
                    c if c.is_whitespace() => {}
                    _ => {
                        if start && depth == 1 {
                            found.push(ident_at(&group[k..]).to_string());
                        }
                        start = false;
                    }
                }
            }
        } else {
            found.push(ident_at(rest).to_string());
        }
    }
    found
}

/// Module -> (used module -> first file using it).
fn module_graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let src = root().join("src");
    let modules = top_modules(&src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let first = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .expect("a path");
        let module = first.strip_suffix(".rs").unwrap_or(first);
        if !modules.contains(module) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        for used in crate_paths(&code_of(&text)) {
            if used != module && modules.contains(&used) {
                graph
                    .entry(module.to_string())
                    .or_default()
                    .entry(used)
                    .or_insert_with(|| format!("src/{}", rel.display()));
            }
        }
    }
    graph
}

fn known(from: &str, to: &str) -> bool {
    KNOWN_BACK_EDGES
        .iter()
        .any(|(f, t, _)| *f == from && *t == to)
}

fn rank(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, r)| *r)
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(out) = s.graph.get(v) {
            for w in out {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.on_stack.contains(w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().expect("on the stack");
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v.as_str());
        }
    }
    s.found
}

#[test]
fn modules_follow_the_layering_without_cycles() {
    let graph = module_graph();
    let mut problems = Vec::new();
    for (from, uses) in &graph {
        for (to, file) in uses {
            if known(from, to) {
                continue;
            }
            if from == "plan" {
                problems.push(format!(
                    "plan is pure but {file} uses crate::{to} (plan may use no other module)"
                ));
            }
            if let (Some(a), Some(b)) = (rank(from), rank(to))
                && a < b
            {
                problems.push(format!(
                    "{file} uses crate::{to}: {from} is below {to} in api -> runtime -> \
                     {{checkpoint, failover}} -> plan"
                ));
            }
        }
    }
    let kept: BTreeMap<String, BTreeSet<String>> = graph
        .iter()
        .map(|(from, uses)| {
            let to = uses.keys().filter(|to| !known(from, to)).cloned().collect();
            (from.clone(), to)
        })
        .collect();
    for cycle in cycles(&kept) {
        let edges: Vec<String> = cycle
            .iter()
            .flat_map(|a| {
                graph[a]
                    .iter()
                    .filter(|(b, _)| cycle.contains(b) && !known(a, b))
                    .map(move |(b, file)| format!("{a} -> {b} ({file})"))
            })
            .collect();
        problems.push(format!("module cycle: {}", edges.join(", ")));
    }
    for (from, to, _) in KNOWN_BACK_EDGES {
        if !graph.get(*from).is_some_and(|u| u.contains_key(*to)) {
            eprintln!("note: known back edge {from} -> {to} is gone; remove it from the list");
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_new_source_file_over_the_line_limit() {
    let root = root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("actors/src"), &mut files);
    let mut over = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&root)
            .expect("under the workspace")
            .to_string_lossy()
            .replace('\\', "/");
        let lines = std::fs::read_to_string(&file)
            .expect("readable source")
            .lines()
            .count();
        if lines > MAX_LINES && !LARGE_FILES.contains(&rel.as_str()) {
            over.push(format!("{rel}: {lines} lines (limit {MAX_LINES})"));
        }
    }
    assert!(over.is_empty(), "{}", over.join("\n"));
}

#[test]
fn the_scanner_reads_paths_and_groups_and_skips_comments() {
    let code = code_of(
        "use crate::api::X; // crate::plan\n\
         /// [`Y`](crate::window::Y)\n\
         use crate::{runtime::Z, checkpoint};\n\
         let f = floe_actors::crate_like::f; /* crate::time */ crate::failover::g();\n",
    );
    assert_eq!(
        crate_paths(&code),
        vec!["api", "runtime", "checkpoint", "failover"]
    );
    // A cycle is found; an acyclic graph is not.
    let g = |edges: &[(&str, &str)]| {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            m.entry(a.to_string()).or_default().insert(b.to_string());
            m.entry(b.to_string()).or_default();
        }
        m
    };
    assert_eq!(
        cycles(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
    assert!(cycles(&g(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
}
