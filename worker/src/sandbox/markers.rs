//! The frame markers and caps are written by the harness (`protocol.mjs`)
//! and read here: these tests hold the two spellings to each other, so
//! neither side can change one alone.

use std::collections::BTreeMap;

const PROTOCOL: &str = include_str!("../../runtime/harness/protocol.mjs");

/// Every `const NAME = "..."` in protocol.mjs whose value starts with the
/// marker byte (U+0006), by name, unescaped.
fn harness_markers() -> BTreeMap<String, String> {
    PROTOCOL
        .lines()
        .filter_map(|line| {
            let rest = line.trim().trim_start_matches("export ").strip_prefix("const ")?;
            let (name, value) = rest.split_once(" = \"")?;
            let value = value.strip_suffix("\";")?;
            value
                .starts_with("\\u0006")
                .then(|| (name.to_owned(), value.replace("\\u0006", "\u{6}").replace("\\n", "\n")))
        })
        .collect()
}

#[test]
fn the_harness_writes_the_markers_the_runner_reads() {
    let runner = BTreeMap::from([
        ("READY", String::from_utf8(super::child::READY.to_vec()).expect("READY is UTF-8")),
        ("END_MARKER", super::shared::END_MARKER.to_owned()),
        ("FILES_MARKER", super::child::FILES_MARKER.to_owned()),
        ("MEMORY_MARKER", super::child::MEMORY_MARKER.to_owned()),
    ]);
    let harness = harness_markers();
    let names = |m: &BTreeMap<_, _>| m.keys().map(|k: &String| k.to_string()).collect::<Vec<_>>();
    assert_eq!(
        names(&harness),
        runner.keys().map(|k| k.to_string()).collect::<Vec<_>>(),
        "protocol.mjs and the runner know different markers"
    );
    for (name, value) in &runner {
        assert_eq!(harness[*name], *value, "{name} differs between protocol.mjs and the runner");
    }
}

#[test]
fn the_harness_cuts_a_reason_where_the_runner_caps_it() {
    let harness = PROTOCOL
        .lines()
        .find_map(|line| line.trim().strip_prefix("const MAX_REASON_BYTES = ")?.strip_suffix(';'))
        .expect("protocol.mjs defines MAX_REASON_BYTES");
    assert_eq!(harness.parse::<usize>().ok(), Some(super::channel::MAX_REASON_BYTES));
}
