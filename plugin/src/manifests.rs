//! Reading manifests the way `kubectl apply -f` takes them: files, directories (their `.yaml`,
//! `.yml` and `.json` files, `-R` for subdirectories) and `-` for stdin; multi-document YAML,
//! JSON objects and arrays, and `kind: List`. Each object keeps where it came from
//! (`FILE, document N`) for the errors of whoever reads it; a document that does not parse is an
//! error naming the file, the document and the line it starts on.

use anyhow::{Context as _, bail};
use serde_json::Value;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Every object in `paths`, with where it came from.
pub(crate) fn read(paths: &[PathBuf], recursive: bool) -> anyhow::Result<Vec<(String, Value)>> {
    let mut objects = Vec::new();
    for path in paths {
        if path == Path::new("-") {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading stdin")?;
            objects.extend(parse("stdin", &text)?);
        } else {
            for file in files(path, recursive)? {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                objects.extend(parse(&file.display().to_string(), &text)?);
            }
        }
    }
    Ok(objects)
}

/// The manifest files at `path`: the file itself, or a directory's, sorted.
fn files(path: &Path, recursive: bool) -> anyhow::Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut found = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            if recursive {
                found.extend(files(&entry, true)?);
            }
        } else if entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["yaml", "yml", "json"].contains(&e))
        {
            found.push(entry);
        }
    }
    Ok(found)
}

/// The objects of one file: JSON (an object, an array, a `kind: List`) or YAML documents, each
/// named `FILE, document N` for errors. A document that does not parse fails naming the file,
/// the document and its first line.
fn parse(name: &str, text: &str) -> anyhow::Result<Vec<(String, Value)>> {
    let trimmed = text.trim_start();
    let mut objects = Vec::new();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let value: Value =
            serde_json::from_str(text).with_context(|| format!("{name}: not valid JSON"))?;
        push(&mut objects, &format!("{name}, document 1"), value);
        return Ok(objects);
    }
    for (index, (line, document)) in documents(text).into_iter().enumerate() {
        let source = format!("{name}, document {}", index + 1);
        let value: Value = match serde_saphyr::from_str(&document) {
            Ok(value) => value,
            Err(e) => bail!("{source} (from line {line}): not valid YAML: {e}"),
        };
        push(&mut objects, &source, value);
    }
    Ok(objects)
}

/// Adds an object, or the items of a `List` (or JSON array); empty documents add nothing.
fn push(objects: &mut Vec<(String, Value)>, source: &str, value: Value) {
    match value {
        Value::Null => {}
        Value::Array(items) => {
            for item in items {
                push(objects, source, item);
            }
        }
        Value::Object(map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
            if let Some(Value::Array(items)) = map.get("items") {
                for item in items {
                    push(objects, source, item.clone());
                }
            }
        }
        object => objects.push((source.to_owned(), object)),
    }
}

/// YAML documents split at `---` lines, each with the line it starts on.
fn documents(text: &str) -> Vec<(usize, String)> {
    let mut documents = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (number, line) in text.lines().enumerate() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            if !current.trim().is_empty() {
                documents.push((start, std::mem::take(&mut current)));
            }
            current.clear();
            start = number + 2;
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.trim().is_empty() {
        documents.push((start, current));
    }
    documents
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_split_at_separator_lines_and_keep_where_they_start() {
        let text = "a: 1\n---\n# only a comment\n---\nb: 2\nc: 3\n";
        let docs = documents(text);
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[2], (5, "b: 2\nc: 3\n".to_owned()));
    }

    #[test]
    fn a_document_that_does_not_parse_names_the_file_the_document_and_its_line() {
        let error = parse("pools.yaml", "kind: A\n---\nkind: [unclosed\n").unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("pools.yaml, document 2 (from line 3): not valid YAML"),
            "{text}"
        );
    }

    #[test]
    fn lists_and_arrays_give_their_items() {
        let objects = parse(
            "x.json",
            r#"{"kind": "List", "items": [{"kind": "A"}, {"kind": "B"}]}"#,
        )
        .unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1].0, "x.json, document 1");
    }
}
