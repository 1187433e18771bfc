//! In every crate of the workspace, modules use each other without a
//! circle: a module may use its parent's items (and a parent re-export its
//! children's), but of any two others, at most one uses the other, through
//! any chain. So each crate reads from the bottom up.
//!
//! A module's uses are the `crate::` and `super::` paths in its code
//! (comments left out), each followed to the module that defines the item,
//! through the `pub use` re-exports of lib.rs and of `mod.rs` files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each crate's source directory, from the workspace root, with uses the
/// parse must find in it (or this test checks nothing).
const CRATES: &[(&str, &[(&str, &str)])] = &[
    ("common/src", &[("queue::jobs", "job"), ("queue::batches", "queue::jobs"), ("config", "sign")]),
    ("process/src", &[]),
    ("api/src", &[("jobs", "pipeline"), ("pipeline", "state"), ("openapi", "requests"), ("requests::job", "config")]),
    ("worker/src", &[("service", "worker"), ("sandbox::pool", "sandbox::shared")]),
    ("cli/src", &[]),
    ("clients/rust/src", &[("jobs", "client")]),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// Every module's file, by path (`""` for the crate root, `queue::jobs`).
fn module_files(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_stem().expect("a name").to_string_lossy().into_owned();
        let join = |name: &str| if prefix.is_empty() { name.to_owned() } else { format!("{prefix}::{name}") };
        if path.is_dir() {
            module_files(&path, &join(&name), out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let module = if name == "lib" || name == "mod" { prefix.to_owned() } else { join(&name) };
            out.insert(module, code(&std::fs::read_to_string(&path).expect("readable")));
        }
    }
}

/// `text` without its comments (line comments, doc comments included).
fn code(text: &str) -> String {
    text.lines().map(|line| line.split_once("//").map_or(line, |(code, _)| code)).collect::<Vec<_>>().join("\n")
}

fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(parent, _)| parent)
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of the use tree at the start of `text`, as segment lists:
/// `{a, b::{c, d}}` is `[a]`, `[b, c]`, `[b, d]`; `x::y` is `[x, y]`.
fn use_tree(text: &str) -> Vec<Vec<String>> {
    fn tree(text: &str, at: &mut usize) -> Vec<Vec<String>> {
        let bytes = text.as_bytes();
        let skip_space = |at: &mut usize| {
            while *at < bytes.len() && (bytes[*at] as char).is_whitespace() {
                *at += 1;
            }
        };
        skip_space(at);
        if bytes.get(*at) == Some(&b'{') {
            *at += 1;
            let mut paths = Vec::new();
            loop {
                skip_space(at);
                match bytes.get(*at) {
                    Some(b'}') | None => {
                        *at += 1;
                        return paths;
                    }
                    Some(b',') => *at += 1,
                    _ => {
                        let before = *at;
                        paths.extend(tree(text, at));
                        if *at == before {
                            *at += 1;
                        }
                    }
                }
            }
        }
        let start = *at;
        while *at < bytes.len() && is_ident(bytes[*at] as char) {
            *at += 1;
        }
        let ident = text[start..*at].to_owned();
        if ident.is_empty() {
            return Vec::new();
        }
        if text[*at..].starts_with("::") {
            *at += 2;
            let rest = tree(text, at);
            if rest.is_empty() {
                return vec![vec![ident]];
            }
            return rest.into_iter().map(|p| std::iter::once(ident.clone()).chain(p).collect()).collect();
        }
        vec![vec![ident]]
    }
    tree(text, &mut 0)
}

/// Where `name`, used as an item of `module`, is defined: into a child
/// module when `module` re-exports it from one (`pub use child::...`).
fn defining(modules: &BTreeMap<String, String>, module: &str, path: &[String]) -> String {
    let Some((first, rest)) = path.split_first() else { return module.to_owned() };
    let child = if module.is_empty() { first.clone() } else { format!("{module}::{first}") };
    if modules.contains_key(&child) {
        return defining(modules, &child, rest);
    }
    let text = &modules[module];
    for part in text.split("pub use ").skip(1) {
        for re_export in use_tree(part) {
            if re_export.last() == Some(first) && re_export.len() > 1 {
                let source =
                    if module.is_empty() { re_export[0].clone() } else { format!("{module}::{}", re_export[0]) };
                if modules.contains_key(&source) {
                    return defining(modules, &source, &re_export[1..]);
                }
            }
        }
    }
    module.to_owned()
}

/// What each module uses of the others, ancestors and descendants left out.
fn uses(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (module, text) in modules {
        let mut used = BTreeSet::new();
        for (anchor, base) in [("crate::", String::new()), ("super::", parent(module).to_owned())] {
            for (i, _) in text.match_indices(anchor) {
                if text[..i].chars().next_back().is_some_and(is_ident) {
                    continue;
                }
                for path in use_tree(&text[i + anchor.len()..]) {
                    used.insert(defining(modules, &base, &path));
                }
            }
        }
        let related = |other: &String| {
            let (a, b) = (format!("{module}::"), format!("{other}::"));
            other == module || other.is_empty() || module.is_empty() || other.starts_with(&a) || module.starts_with(&b)
        };
        used.retain(|other| !related(other));
        graph.insert(module.clone(), used);
    }
    graph
}

/// A circle of `graph` through `from`, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn walk(graph: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, seen: &mut BTreeSet<String>) -> bool {
        let last = path.last().expect("a path").clone();
        for next in graph.get(&last).into_iter().flatten() {
            if *next == path[0] {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.to_owned()];
    walk(graph, &mut path, &mut BTreeSet::new()).then_some(path)
}

#[test]
fn no_two_modules_use_each_other() {
    for (dir, expected) in CRATES {
        let mut modules = BTreeMap::new();
        module_files(&workspace().join(dir), "", &mut modules);
        let graph = uses(&modules);
        for (module, used) in *expected {
            assert!(graph[*module].contains(*used), "{dir}: the parse lost {module} -> {used}: {graph:#?}");
        }
        for module in graph.keys() {
            if let Some(circle) = circle(&graph, module) {
                panic!("{dir}: modules use each other in a circle: {}\n{graph:#?}", circle.join(" -> "));
            }
        }
    }
}
