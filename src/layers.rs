//! The layer rule, checked by reading the source: every `crate::…` path in library code must
//! point down, and every top-level module has a height here (a module this file does not know
//! fails the test). The heights, and what each layer may not do, are the map of the house that
//! `lib.rs` describes.
//!
//! Test code is exempt (a scheduler test may borrow a provider's catalogue as a fixture): files
//! named `tests.rs` and `#[cfg(test)] mod …` blocks are not read. A module may import its own
//! layer and any lower one, never a higher one or a sibling at its own height.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module with its height; a module may import only lower heights (and itself).
const LAYERS: &[(&str, u8)] = &[
    ("resources", 0),
    ("metrics", 0),
    ("interner", 0),
    ("apis", 1),
    ("client", 1),
    ("scheduling", 2),
    ("convert", 2),
    ("cloud", 3),
    ("state", 4),
    ("disruption", 5),
    ("explain", 6),
    ("simulate", 6),
    ("migrate", 6),
    ("controllers", 7),
    ("setup", 7),
];

/// Text that must not appear in library code, with why: each rule holds in a layer (`apis`)
/// or, given as a path (`src/state/input.rs`), in one file.
const FORBIDDEN: &[(&str, &str, &str)] = &[
    ("apis", "kube::Client", "the API types do no I/O"),
    ("apis", "Api<", "the API types do no I/O"),
    ("apis", ".await", "the API types do no I/O"),
    ("scheduling", "kube::Client", "the scheduler has no client"),
    ("scheduling", "Api<", "the scheduler has no client"),
    ("scheduling", "aws_sdk_", "the scheduler sees no cloud SDK"),
    (
        "scheduling",
        "google_cloud_",
        "the scheduler sees no cloud SDK",
    ),
    ("scheduling", "async fn", "the scheduler is synchronous"),
    ("scheduling", ".await", "the scheduler is synchronous"),
    ("scheduling", "tokio::", "the scheduler is synchronous"),
    ("cloud", "PatchParams", "cloud makes no Kubernetes writes"),
    ("cloud", "PostParams", "cloud makes no Kubernetes writes"),
    ("cloud", "DeleteParams", "cloud makes no Kubernetes writes"),
    ("cloud", "Recorder", "cloud records no Kubernetes Events"),
    (
        "state",
        "PatchParams",
        "state reads the cluster; the controllers write",
    ),
    (
        "state",
        "PostParams",
        "state reads the cluster; the controllers write",
    ),
    (
        "state",
        "DeleteParams",
        "state reads the cluster; the controllers write",
    ),
    (
        "state",
        "Recorder::new",
        "state reads the cluster; the controllers write",
    ),
    (
        "state",
        ".publish(",
        "state reads the cluster; the controllers write",
    ),
    (
        "src/state/input.rs",
        ".await",
        "the step from the stores to the scheduler's input is pure",
    ),
    (
        "src/state/input.rs",
        "Api<",
        "the step from the stores to the scheduler's input is pure",
    ),
    (
        "src/state/usage.rs",
        ".await",
        "what the stores add up to is a pure function of them",
    ),
    (
        "disruption",
        "kube::Client",
        "disruption decides from objects it is given",
    ),
    (
        "disruption",
        "Api<",
        "disruption decides from objects it is given",
    ),
    (
        "disruption",
        ".await",
        "disruption decides from objects it is given",
    ),
    (
        "explain",
        "kube::Client",
        "explain states facts from objects it is given",
    ),
    (
        "explain",
        "Api<",
        "explain states facts from objects it is given",
    ),
    (
        "explain",
        ".await",
        "explain states facts from objects it is given",
    ),
];

/// Where a rule above does not hold, and why.
const EXEMPT: &[(&str, &str)] = &[
    // The kwok provider's cloud *is* the API server: launching an instance creates its Node,
    // as upstream's kwok provider does.
    ("src/cloud/kwok/", "cloud"),
];

fn height(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, h)| *h)
}

fn library_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            library_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The file's code without comments and without its `#[cfg(test)] mod` blocks (which by the
/// house layout run to the end of the file).
fn library_code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut code = String::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines[i + 1..]
                .iter()
                .map(|l| l.trim_start())
                .find(|l| !l.starts_with("#["))
                .is_some_and(|l| l.starts_with("mod ") || l.starts_with("pub mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line.split(" // ").next().unwrap_or(line));
        code.push('\n');
    }
    code
}

/// The top-level modules `code` reaches through `crate::…` or a `super::` chain that climbs
/// out of its own top-level module (`depth` is how deep the file's module sits below the root).
fn imported_modules(code: &str, depth: usize) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `karpenter_crate::`, `$crate::` and the like
        }
        found.push(ident(&code[at + "crate::".len()..]));
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue; // counted from the chain's first `super::`
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = r;
        }
        if climbs >= depth {
            found.push(ident(rest));
        }
    }
    found
}

/// Every wrong-way import and forbidden text in the library, one line each.
fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    library_files(src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap_or(&file);
        let shown = format!("src/{}", relative.display());
        let parts: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
            .collect();
        let Some(top) = parts.first().cloned() else {
            continue;
        };
        let Some(own) = height(&top) else {
            if !["lib", "layers"].contains(&top.as_str()) {
                problems.push(format!(
                    "{shown}: module `{top}` has no height in `LAYERS` (src/layers.rs)"
                ));
            }
            continue;
        };
        // `src/a/b/mod.rs` and `src/a/b.rs` both sit at depth 2.
        let depth = parts.len() - usize::from(parts.last().is_some_and(|p| p == "mod"));
        let Ok(text) = std::fs::read_to_string(&file) else {
            problems.push(format!("{shown}: unreadable"));
            continue;
        };
        let code = library_code(&text);
        let exempt = |layer: &str| {
            EXEMPT
                .iter()
                .any(|(prefix, l)| *l == layer && shown.starts_with(prefix))
        };
        let mut wrong: BTreeMap<String, u8> = BTreeMap::new();
        for module in imported_modules(&code, depth) {
            if let Some(h) = height(&module)
                && module != top
                && h >= own
            {
                wrong.insert(module, h);
            }
        }
        for (module, h) in wrong {
            problems.push(format!(
                "{shown}: `{top}` (height {own}) imports `{module}` (height {h})"
            ));
        }
        for (scope, text, why) in FORBIDDEN {
            let applies = *scope == top || shown.as_str() == *scope;
            if applies && !exempt(&top) && code.contains(text) {
                problems.push(format!("{shown}: `{text}` in `{scope}`: {why}"));
            }
        }
    }
    problems
}

#[test]
fn library_modules_only_import_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = violations(&src);
    assert!(
        problems.is_empty(),
        "layer rule broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn each_binary_writes_with_one_field_manager() {
    // The agent writes as `controllers::FIELD_MANAGER`, `init` as `setup`'s: a third constant
    // elsewhere would let one binary's writes show up under two managers.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    library_files(&src, &mut files);
    // Spelt in two pieces so this file does not match itself.
    let needle = concat!("const FIELD_", "MANAGER: &str");
    let mut declared: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| library_code(&t).contains(needle)))
        .filter_map(|f| f.strip_prefix(&src).ok())
        .map(|f| f.iter().next().map(|p| p.to_string_lossy().into_owned()))
        .map(Option::unwrap_or_default)
        .collect();
    declared.sort();
    assert_eq!(declared, ["controllers", "setup"]);
}

#[test]
fn the_checker_sees_a_wrong_way_import_and_skips_tests_and_comments() {
    let code = library_code(
        "// use crate::controllers::X;\nuse crate::apis::NodePool;\nuse super::super::cloud::Y;\n\
         #[cfg(test)]\nmod tests {\n    use crate::controllers::Z;\n}\n",
    );
    assert_eq!(imported_modules(&code, 2), ["apis", "cloud"]);
    assert_eq!(imported_modules(&code, 3), ["apis"]);
}

#[test]
fn every_module_lib_rs_declares_has_a_height_and_every_height_a_module() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("src/lib.rs");
    // Read whole: `lib.rs` declares `#[cfg(test)] mod layers;` among the others.
    let mut declared: Vec<&str> = lib
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))?;
            rest.strip_suffix(';')
        })
        .filter(|module| *module != "layers")
        .collect();
    declared.sort_unstable();
    let mut known: Vec<&str> = LAYERS.iter().map(|(module, _)| *module).collect();
    known.sort_unstable();
    assert_eq!(
        declared, known,
        "src/lib.rs and LAYERS name different modules"
    );
}

#[test]
fn the_map_in_lib_rs_gives_each_module_the_height_it_has_here() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("src/lib.rs");
    let mut mapped: Vec<(String, u8)> = Vec::new();
    for row in lib.lines().filter_map(|l| l.strip_prefix("//! | ")) {
        let mut cells = row.split(" | ");
        let (Some(height), Some(modules)) = (cells.next(), cells.next()) else {
            continue;
        };
        let Ok(height) = height.trim().parse::<u8>() else {
            continue; // the header
        };
        for module in modules.split(", ") {
            let name = module
                .trim()
                .trim_start_matches("[`")
                .trim_end_matches("`]");
            mapped.push((name.to_owned(), height));
        }
    }
    mapped.sort();
    let mut layers: Vec<(String, u8)> = LAYERS.iter().map(|(m, h)| ((*m).to_owned(), *h)).collect();
    layers.sort();
    assert_eq!(
        mapped, layers,
        "the table in src/lib.rs and LAYERS disagree"
    );
}

/// The module path of a library file (`src/a/b.rs` and `src/a/b/mod.rs` are both `a::b`).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The absolute module paths `code` (in module `module`) names through `crate::`, `super::`
/// and `use super::{…}` groups, as far as their leading identifiers go.
fn referenced_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    // The identifiers of a path, up to the first that does not run on into `::`.
    let idents = |s: &str| -> Vec<String> {
        let mut out = Vec::new();
        for segment in s.split("::") {
            let ident: String = segment
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let whole = ident.len() == segment.len();
            if !ident.is_empty() {
                out.push(ident);
            }
            if !whole {
                break;
            }
        }
        out
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$')
        {
            continue;
        }
        found.push(idents(&code[at + "crate::".len()..]));
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &code[at..];
        let mut base = module.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            for item in group.split(',') {
                let mut path = base.clone();
                path.extend(idents(item.trim()));
                found.push(path);
            }
        } else {
            let mut path = base;
            path.extend(idents(rest));
            found.push(path);
        }
    }
    found
}

/// Each cycle of imports between sibling files (modules with one parent), one line each.
fn sibling_cycles(src: &Path) -> Vec<String> {
    use std::collections::{BTreeSet, HashSet};
    let mut files = Vec::new();
    library_files(src, &mut files);
    let modules: HashSet<Vec<String>> = files
        .iter()
        .filter_map(|f| f.strip_prefix(src).ok())
        .map(module_path)
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let Ok(relative) = file.strip_prefix(src) else {
            continue;
        };
        let module = module_path(relative);
        let Some((_, parent)) = module.split_last() else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for path in referenced_paths(&library_code(&text), &module) {
            if path.len() < module.len() || path[..parent.len()] != *parent {
                continue;
            }
            let sibling = path[..module.len()].to_vec();
            if sibling != module && modules.contains(&sibling) {
                edges.entry(module.clone()).or_default().insert(sibling);
            }
        }
    }
    let reaches = |from: &Vec<String>, to: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(at) = stack.pop() {
            if &at == to {
                return true;
            }
            if seen.insert(at.clone()) {
                stack.extend(edges.get(&at).into_iter().flatten().cloned());
            }
        }
        false
    };
    let mut cycles = BTreeSet::new();
    for (from, tos) in &edges {
        for to in tos {
            if reaches(to, from) {
                let (a, b) = if from < to { (from, to) } else { (to, from) };
                cycles.insert(format!("{} <-> {}", a.join("::"), b.join("::")));
            }
        }
    }
    cycles.into_iter().collect()
}

#[test]
fn no_two_sibling_files_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycles = sibling_cycles(&src);
    assert!(
        cycles.is_empty(),
        "sibling files that import each other (move what both need into a file of its own):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_check_sees_two_siblings_that_import_each_other() {
    let module = ["a".to_owned(), "b".to_owned()];
    let paths = referenced_paths(
        "use super::{c::X, d};\nuse crate::a::e::Y;\nuse super::super::f;\n",
        &module,
    );
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(shown, ["a::e::Y", "a::c::X", "a::d", "f"]);
}
