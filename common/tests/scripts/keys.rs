//! The key names the Lua scripts spell themselves (`PREFIX .. 'name'`)
//! against the ones `common/src/keys.rs` defines, so that renaming a key
//! on one side only fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.lua` file under `src/lua/`, with its text.
pub fn lua_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(src().join("lua"))
        .expect("src/lua")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "lua"))
        .map(|path| {
            let name = path.file_name().expect("a name").to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).expect("readable"))
        })
        .collect();
    files.sort();
    files
}

/// Every `.rs` file under `src/`, at any depth.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// Every file an `include_str!("...")` under `src/` names, resolved, as
/// the compiler does, against the directory of the file that names it.
fn included_files() -> BTreeSet<PathBuf> {
    let mut included = BTreeSet::new();
    for file in rust_files(&src()) {
        let text = std::fs::read_to_string(&file).expect("readable");
        let dir = file.parent().expect("a directory");
        for part in text.split("include_str!(\"").skip(1) {
            let Some((relative, _)) = part.split_once('"') else { continue };
            if let Ok(path) = dir.join(relative).canonicalize() {
                included.insert(path);
            }
        }
    }
    included
}

/// The part of a key name before its first `{placeholder}`.
fn stem(name: &str) -> &str {
    name.split('{').next().unwrap_or(name)
}

/// What follows the queue prefix in each key keys.rs builds from it:
/// `format!("{}name...", self.prefix)`.
fn keys_rs_names(keys_rs: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for part in keys_rs.split("format!(\"{}").skip(1) {
        let Some((literal, rest)) = part.split_once('"') else { continue };
        if rest.trim_start().starts_with(", self.prefix)") && !stem(literal).is_empty() {
            names.insert(stem(literal).to_owned());
        }
    }
    names
}

/// The names keys.rs says only Lua scripts spell, in backticks in its
/// `// Spelled by Lua scripts` comment.
fn keys_rs_lua_only(keys_rs: &str) -> BTreeSet<String> {
    let start = keys_rs.find("// Spelled by Lua scripts").expect("keys.rs's comment on the keys only Lua spells");
    let comment: Vec<&str> = keys_rs[start..].lines().take_while(|l| l.starts_with("//")).collect();
    let comment = comment.join(" ");
    comment
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| span.contains(':') && !span.contains(' '))
        .map(|span| stem(span).to_owned())
        .collect()
}

/// Every `PREFIX .. 'name'` literal in the Lua files, with its file.
fn lua_names() -> Vec<(String, String)> {
    let mut names = Vec::new();
    for (file, text) in lua_files() {
        for part in text.split("PREFIX .. '").skip(1) {
            let literal = part.split('\'').next().unwrap_or("");
            names.push((file.clone(), literal.to_owned()));
        }
    }
    names
}

#[test]
fn every_key_a_script_spells_is_one_keys_rs_defines() {
    let keys_rs = std::fs::read_to_string(src().join("keys.rs")).expect("src/keys.rs");
    let defined: BTreeSet<String> = keys_rs_names(&keys_rs).into_iter().chain(keys_rs_lua_only(&keys_rs)).collect();
    // The parse itself must find what it looks for, or this test checks nothing.
    for known in ["jobs:", "job:", "batch:", "callbacks", "session:", "checkpoint:", "active:", "submissions:"] {
        assert!(defined.contains(known), "keys.rs parse lost {known:?}: {defined:?}");
    }
    let spelled = lua_names();
    assert!(spelled.len() >= 5, "no PREFIX .. 'name' found in the Lua files: {spelled:?}");
    for (file, name) in &spelled {
        assert!(defined.contains(name), "{file} spells key {name:?}, which keys.rs does not define ({defined:?})");
    }
}

#[test]
fn every_key_keys_rs_leaves_to_the_scripts_is_spelled_by_one() {
    let keys_rs = std::fs::read_to_string(src().join("keys.rs")).expect("src/keys.rs");
    let spelled: BTreeSet<String> = lua_names().into_iter().map(|(_, name)| name).collect();
    let lua_only = keys_rs_lua_only(&keys_rs);
    assert!(!lua_only.is_empty());
    for name in lua_only {
        assert!(spelled.contains(&name), "keys.rs says a script spells {name:?}, but none does");
    }
}

#[test]
fn every_lua_file_opens_with_what_it_does_its_keys_and_its_argv_and_is_used() {
    let included = included_files();
    assert!(!included.is_empty(), "no include_str! found under src/");
    let files = lua_files();
    assert!(files.len() >= 20, "{} Lua files", files.len());
    for (file, text) in files {
        let mut lines = text.lines();
        let stem = file.trim_end_matches(".lua");
        assert!(lines.next().is_some_and(|l| l.starts_with(&format!("-- {stem}: "))), "{file}: first line");
        assert!(lines.next().is_some_and(|l| l.starts_with("-- KEYS: ")), "{file}: second line");
        assert!(lines.next().is_some_and(|l| l.starts_with("-- ARGV: ")), "{file}: third line");
        assert!(text.ends_with('\n'), "{file} must end in a newline: scripts are joined at compile time");
        let path = src().join("lua").join(&file).canonicalize().expect("a Lua file");
        assert!(included.contains(&path), "{file} is included by no script");
    }
}

/// The scripts that take their arguments as one table in ARGV[1].
const TABLE_SCRIPTS: [&str; 8] = [
    "cancel.lua",
    "enqueue.lua",
    "enqueue_batch.lua",
    "finish.lua",
    "session_create.lua",
    "session_recover.lua",
    "session_send.lua",
    "session_start.lua",
];

/// The fields a script reads of its table `a`: each `a.name` outside comments.
fn fields_read(text: &str) -> BTreeSet<String> {
    let mut fields = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
        let bytes = line.as_bytes();
        for (at, _) in line.match_indices("a.") {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.') {
                continue;
            }
            let name: String = line[at + 2..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                fields.insert(name);
            }
        }
    }
    fields
}

/// The fields an `-- ARGV: 1 the table {name (note, more), name, ...}` line
/// names: the first word of each item between its braces.
fn fields_named(argv_line: &str) -> Option<BTreeSet<String>> {
    let inside = argv_line.split_once('{')?.1.split_once('}')?.0;
    let (mut items, mut item, mut depth) = (Vec::new(), String::new(), 0);
    for c in inside.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    let names = items.iter().map(|item| {
        let item = item.trim_start_matches(',').trim();
        item.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>()
    });
    Some(names.collect())
}

#[test]
fn a_script_that_takes_a_table_names_every_field_it_reads_and_reads_every_field_it_names() {
    let files = lua_files();
    for script in TABLE_SCRIPTS {
        let (_, text) = files.iter().find(|(file, _)| file == script).expect("a table script's file");
        assert!(text.contains("local a = cjson.decode(ARGV[1])\n"), "{script} does not decode its table");
        let argv = text.lines().nth(2).expect("an ARGV line");
        assert!(argv.starts_with("-- ARGV: 1 the table {"), "{script}: {argv}");
        let named = fields_named(argv).expect("the table's fields in braces");
        let read = fields_read(text);
        assert!(read.len() >= 2, "{script}: the parse found {read:?}");
        // prefix.lua reads `prefix` for the scripts that open with it.
        let needs_prefix = text.contains("Needs prefix.lua");
        assert_eq!(named.contains("prefix"), needs_prefix, "{script} names a prefix it does not use, or misses it");
        let named: BTreeSet<String> = named.into_iter().filter(|n| n != "prefix").collect();
        assert_eq!(named, read, "{script}: the fields its header names, and those it reads");
    }
    let prefix = files.iter().find(|(file, _)| file == "prefix.lua").expect("prefix.lua");
    assert!(prefix.1.contains("cjson.decode(ARGV[1]).prefix"), "prefix.lua reads the table's prefix");
    for (file, text) in &files {
        if text.contains("Needs prefix.lua") {
            assert!(TABLE_SCRIPTS.contains(&file.as_str()), "{file} opens with prefix.lua, so must take a table");
        }
    }
}
