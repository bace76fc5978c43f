//! The library's modules depend on each other one way: each top-level module of `src/` may use
//! only the modules below it in [`LAYERS`]. Read from the `crate::` paths in the code (tests
//! inside the files are left out: they may build settings the module itself never sees).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// From the bottom up: a module may use the ones before it.
const LAYERS: &[&str] = &[
    "time",
    "settings",
    "mysql",
    "id",
    "kafka",
    "telemetry",
    "store",
    "transform",
    "relay",
    "ingest",
    "serve",
    "config",
];

/// The top-level modules each module of `src/` (not the binary's `cli/`) uses.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).unwrap();
            let first = relative.components().next().unwrap().as_os_str();
            let module = first.to_str().unwrap().trim_end_matches(".rs").to_string();
            if matches!(module.as_str(), "cli" | "main" | "lib") || relative.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let used = uses.entry(module.clone()).or_default();
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    used.insert(name);
                }
            }
        }
    }
    uses
}

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|m| *m == module)
        .unwrap_or_else(|| panic!("module {module} is not placed in LAYERS"))
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let uses = uses();
    let mut upward = BTreeSet::new();
    for (module, used) in &uses {
        for other in used {
            if layer(other) > layer(module) {
                upward.insert((module.as_str(), other.as_str()));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "modules using a layer above them: {upward:?} (LAYERS lists the order)"
    );
}

#[test]
fn every_module_has_a_layer() {
    for module in uses().keys() {
        layer(module);
    }
}
