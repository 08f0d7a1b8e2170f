//! The shape of the source tree, checked on every `cargo test`:
//!
//! 1. **Layering.** References between the top-level modules of `src/`
//!    (`use crate::x` and `crate::x::` paths outside comments) follow
//!    `api -> runtime -> {checkpoint, failover} -> plan`: no edge points up
//!    that order, `plan` uses no other module of the crate, and the module
//!    graph has no cycle. Edges known to break this today are listed in
//!    [`KNOWN_BACK_EDGES`], each with its reason; any new one fails.
//! 2. **Files without cycles.** Inside each directory of [`FILE_GRAPHS`]
//!    (`src/runtime/`, `src/cli/`), a file is a node (a subdirectory goes
//!    with the file of its name; `mod.rs`, which declares the files, is
//!    none) and a reference to a sibling (`super::x`, `crate::runtime::x`,
//!    `crate::cli::x`, or a name its `mod.rs` imports from `x`, outside
//!    comments) an edge; the graph has no cycle.
//! 3. **File size.** No `.rs` file under `src/` or `actors/src/` is over
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

/// The directories of `src/` whose files must not use each other in a
/// cycle.
const FILE_GRAPHS: &[&str] = &["runtime", "cli"];

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

/// The paths of the use tree at the start of `s`, each as `stem` and its
/// segments (`a::b`, `a::{b, c::d}`, `{a, b}`); returns the bytes read.
fn use_tree(s: &str, stem: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let skip_ws = |i: usize| i + (s[i..].len() - s[i..].trim_start().len());
    let mut path = stem;
    let mut i = skip_ws(0);
    loop {
        if s[i..].starts_with('{') {
            i += 1;
            loop {
                i = skip_ws(i);
                match s[i..].chars().next() {
                    None => return i,
                    Some('}') => return i + 1,
                    Some(',') => i += 1,
                    Some(c) => match use_tree(&s[i..], path.clone(), out) {
                        0 => i += c.len_utf8(),
                        read => i += read,
                    },
                }
            }
        }
        let id = ident_at(&s[i..]);
        if id.is_empty() {
            // A glob, generics, or the end of the path.
            if !path.is_empty() {
                out.push(path);
            }
            return i;
        }
        path.push(id.to_string());
        i += id.len();
        match s[i..].strip_prefix("::") {
            Some(_) => i += 2,
            None => {
                out.push(path);
                return i;
            }
        }
    }
}

/// Each path in `code` that starts with `root` (`crate`, `super`), as its
/// segments after `root::`, with groups expanded: `crate::{a::X, b}` gives
/// `a::X` and `b`. A path `super::super::x` is one path, `super::x`.
fn paths_from(code: &str, root: &str) -> Vec<Vec<String>> {
    let prefix = format!("{root}::");
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(&prefix) {
        // `floe_actors::…`, `my_crate::…` or the second `super` of
        // `super::super::` are not where a path starts.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let read = use_tree(rest, Vec::new(), &mut found);
        rest = &rest[read..];
    }
    found
}

/// The first path segments after each `crate::` in `code`, including each
/// member of a `crate::{a::X, b}` group.
fn crate_paths(code: &str) -> Vec<String> {
    paths_from(code, "crate")
        .into_iter()
        .filter_map(|p| p.into_iter().next())
        .collect()
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

/// A file of a [`FILE_GRAPHS`] directory: its path there (`deploy.rs`,
/// `window/firing.rs`) and its text.
type SourceFile = (String, String);

/// The files of `src/{dir}/`.
fn files_of(dir: &str) -> Vec<SourceFile> {
    let base = root().join("src").join(dir);
    let mut paths = Vec::new();
    rust_files(&base, &mut paths);
    paths
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&base).expect("under the directory");
            let text = std::fs::read_to_string(&p).expect("readable source");
            (rel.to_string_lossy().replace('\\', "/"), text)
        })
        .collect()
}

/// The node of the file at `rel` (`window` for `window.rs` and
/// `window/firing.rs`; `None` for the directory's `mod.rs`) and the file's
/// module path below the directory (`[window, firing]`).
fn node_of(rel: &str) -> (Option<String>, Vec<String>) {
    let mut module: Vec<String> = rel.split('/').map(str::to_string).collect();
    let name = module.pop().expect("a file name");
    let stem = name.strip_suffix(".rs").unwrap_or(&name);
    if stem != "mod" {
        module.push(stem.to_string());
    }
    (module.first().cloned(), module)
}

/// The files of `src/{dir}/` as a graph: node -> (used node -> the first
/// file using it). See the module's documentation for what is an edge. A
/// `super::` inside an inline module (`mod tests`) is read as the file's
/// own: `super::*` and names of the file's items add no edge.
fn file_graph(dir: &str, files: &[SourceFile]) -> BTreeMap<String, BTreeMap<String, String>> {
    let nodes: BTreeSet<String> = files.iter().filter_map(|(rel, _)| node_of(rel).0).collect();
    // Names `mod.rs` imports from a file: `super::Name` reaches that file.
    let mut imported: BTreeMap<String, String> = BTreeMap::new();
    for (_, text) in files.iter().filter(|(rel, _)| rel == "mod.rs") {
        let code = code_of(text);
        let mut rest = code.as_str();
        while let Some(i) = rest.find("use ") {
            let before = rest[..i].chars().next_back();
            rest = &rest[i + "use ".len()..];
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let mut paths = Vec::new();
            rest = &rest[use_tree(rest, Vec::new(), &mut paths)..];
            for path in paths {
                if let (Some(from), Some(name), true) = (path.first(), path.last(), path.len() > 1)
                    && nodes.contains(from)
                {
                    imported.insert(name.clone(), from.clone());
                }
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (rel, text) in files {
        let (Some(node), module) = node_of(rel) else {
            continue;
        };
        let code = code_of(text);
        // Each reference as a path below the directory.
        let mut used: Vec<Vec<String>> = paths_from(&code, "crate")
            .into_iter()
            .filter(|p| p.first().is_some_and(|p| p == dir))
            .map(|p| p[1..].to_vec())
            .collect();
        for path in paths_from(&code, "super") {
            let ups = 1 + path.iter().take_while(|p| *p == "super").count();
            if ups > module.len() {
                continue; // above the directory
            }
            let mut full = module[..module.len() - ups].to_vec();
            full.extend(path.into_iter().skip(ups - 1));
            used.push(full);
        }
        for full in used {
            let Some(first) = full.first() else {
                continue;
            };
            let target = match nodes.contains(first) {
                true => Some(first),
                false => imported.get(first),
            };
            if let Some(target) = target
                && *target != node
            {
                graph
                    .entry(node.clone())
                    .or_default()
                    .entry(target.clone())
                    .or_insert_with(|| format!("src/{dir}/{rel}"));
            }
        }
    }
    graph
}

/// One shortest cycle through the first node of `component` (a strongly
/// connected component of `graph`), that node first and last.
fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>, component: &[String]) -> Vec<String> {
    let start = component[0].as_str();
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flatten() {
            if w == start {
                let mut back = vec![v];
                let mut at = v;
                while at != start {
                    at = parent[at];
                    back.push(at);
                }
                back.reverse();
                back.push(start);
                return back.into_iter().map(str::to_string).collect();
            }
            if component.contains(w) && !parent.contains_key(w.as_str()) {
                parent.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    component.to_vec()
}

/// One message per cycle among the files of `src/{dir}/`: a cycle through
/// its first file, then every edge between the files of its component.
fn file_cycles(dir: &str, graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    let plain: BTreeMap<String, BTreeSet<String>> = graph
        .iter()
        .map(|(from, uses)| (from.clone(), uses.keys().cloned().collect()))
        .collect();
    cycles(&plain)
        .into_iter()
        .map(|component| {
            let edges: Vec<String> = component
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|(b, _)| component.contains(b))
                        .map(move |(b, file)| format!("{a} -> {b} ({file})"))
                })
                .collect();
            format!(
                "file cycle in src/{dir}/: {} (edges: {})",
                a_cycle(&plain, &component).join(" -> "),
                edges.join(", ")
            )
        })
        .collect()
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
fn files_of_a_module_directory_use_each_other_without_cycles() {
    let problems: Vec<String> = FILE_GRAPHS
        .iter()
        .flat_map(|dir| file_cycles(dir, &file_graph(dir, &files_of(dir))))
        .collect();
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

#[test]
fn the_file_graph_resolves_references_and_names_a_cycle() {
    let files = |c_uses_a: bool| -> Vec<SourceFile> {
        let c = match c_uses_a {
            true => "pub fn f() { super::a::g(); }",
            false => "pub fn f() {}",
        };
        let c = format!("{c}\n#[cfg(test)]\nmod tests {{ use super::*; }}\n");
        [
            (
                "mod.rs",
                "mod a;\nmod b;\nmod c;\nmod d;\npub use d::Thing;\n",
            ),
            // `Thing` comes from `d` through `mod.rs`; a comment is no edge.
            ("a.rs", "use super::b::X;\nuse super::Thing; // super::c\n"),
            (
                "b.rs",
                "use crate::area::{c::Y, self};\npub(in crate::area) fn h() {}\n",
            ),
            ("c.rs", c.as_str()),
            // A file below `c/` belongs to `c`.
            (
                "c/e.rs",
                "use super::super::d::Z;\nuse super::*;\nfn k() { super::f() }\n",
            ),
            ("d.rs", "/// [`T`](super::a::T)\npub struct Thing;\n"),
        ]
        .into_iter()
        .map(|(rel, text)| (rel.to_string(), text.to_string()))
        .collect()
    };
    let edges = |graph: &BTreeMap<String, BTreeMap<String, String>>| -> Vec<String> {
        graph
            .iter()
            .flat_map(|(a, uses)| uses.iter().map(move |(b, file)| format!("{a}>{b}:{file}")))
            .collect()
    };
    let acyclic = file_graph("area", &files(false));
    assert_eq!(
        edges(&acyclic),
        vec![
            "a>b:src/area/a.rs",
            "a>d:src/area/a.rs",
            "b>c:src/area/b.rs",
            "c>d:src/area/c/e.rs",
        ]
    );
    assert!(file_cycles("area", &acyclic).is_empty());
    let cyclic = file_graph("area", &files(true));
    assert_eq!(
        file_cycles("area", &cyclic),
        vec![
            "file cycle in src/area/: a -> b -> c -> a (edges: a -> b (src/area/a.rs), \
             b -> c (src/area/b.rs), c -> a (src/area/c.rs))"
                .to_string()
        ]
    );
}
