//! kubectl-style tables: UPPERCASE headers, no borders, columns separated by three spaces
//! (kubectl's tabwriter padding), no trailing spaces, laid out by comfy-table (its `NOTHING`
//! preset, a (0, 3) padding, no wrapping, trimmed lines). Cells may carry one of kubectl's eight
//! colours, written as the escape codes `explain` also paints with; comfy-table's
//! `custom_styling` measures them as taking no room, so they never skew the columns. Widths are
//! display widths: a CJK character takes two columns, as a terminal shows it.
use comfy_table::{ColumnConstraint, ContentArrangement, Width, presets};

/// A terminal colour for a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Color {
    Green,
    Yellow,
    Red,
}

impl Color {
    fn code(self) -> &'static str {
        match self {
            Self::Green => "32",
            Self::Yellow => "33",
            Self::Red => "31",
        }
    }
}

/// One cell: its text and an optional colour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cell {
    pub text: String,
    pub color: Option<Color>,
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Self { text, color: None }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            color: None,
        }
    }
}

impl Cell {
    /// A coloured cell.
    pub(crate) fn colored(text: impl Into<String>, color: Option<Color>) -> Self {
        Self {
            text: text.into(),
            color,
        }
    }
}

/// A table being built.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<Cell>>,
    /// Whether the header line prints (kubectl's `--no-headers` turns it off).
    hide_headers: bool,
}

impl Table {
    /// A table with these headers (upper-cased).
    pub(crate) fn new<S: AsRef<str>>(headers: &[S]) -> Self {
        Self {
            headers: headers.iter().map(|h| h.as_ref().to_uppercase()).collect(),
            rows: Vec::new(),
            hide_headers: false,
        }
    }

    /// The same table printed without its header line, its columns as wide as its rows need
    /// (as `kubectl get --no-headers`).
    pub(crate) fn without_headers(mut self) -> Self {
        self.hide_headers = true;
        self
    }

    /// Adds a row; missing cells print empty.
    pub(crate) fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// The widths of each column's content (headers included, unless hidden).
    pub(crate) fn widths(&self) -> Vec<usize> {
        self.layout(false)
            .column_max_content_widths()
            .into_iter()
            .map(usize::from)
            .collect()
    }

    /// Renders the header and rows, a line each; colour only when `color` is set.
    pub(crate) fn render(&self, color: bool) -> String {
        if self.rows.is_empty() && self.hide_headers {
            return String::new();
        }
        let mut out = self.layout(color).trim_fmt();
        out.push('\n');
        out
    }

    /// The comfy-table that lays this table out.
    fn layout(&self, color: bool) -> comfy_table::Table {
        let mut table = kubectl_table();
        if !self.hide_headers {
            table.set_header(self.headers.iter().map(comfy_table::Cell::new));
        }
        for row in &self.rows {
            table.add_row(row.iter().map(|cell| cell.paint(color)));
        }
        pad_columns(&mut table);
        table
    }
}

/// A table without borders or wrapping.
fn kubectl_table() -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    table
}

/// Three spaces after each column, as kubectl's tabwriter pads.
fn pad_columns(table: &mut comfy_table::Table) {
    for column in table.column_iter_mut() {
        column.set_padding((0, 3));
    }
}

impl Cell {
    /// The cell as comfy-table takes it, its colour written in when `color` is set.
    fn paint(&self, color: bool) -> comfy_table::Cell {
        match self.color.filter(|_| color) {
            Some(c) => comfy_table::Cell::new(format!("\x1b[{}m{}\x1b[0m", c.code(), self.text)),
            None => comfy_table::Cell::new(&self.text),
        }
    }
}

/// One row padded to `widths` (as [`Table::widths`] gives them), without trailing spaces: what
/// `status -w` prints a line at a time under the first screen's columns.
pub(crate) fn render_row(row: &[Cell], widths: &[usize], color: bool) -> String {
    let mut table = kubectl_table();
    table.add_row(row.iter().map(|cell| cell.paint(color)));
    pad_columns(&mut table);
    for (column, width) in table.column_iter_mut().zip(widths) {
        // The constraint counts the padding.
        let width = u16::try_from(width + 3).unwrap_or(u16::MAX);
        column.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(width)));
    }
    table.trim_fmt()
}

/// Whether stdout should be coloured: a terminal, and neither `NO_COLOR` nor `TERM=dumb`.
pub(crate) fn color_enabled() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    !no_color && !dumb && std::io::stdout().is_terminal()
}

/// Cuts `text` to its first line and at most `max` characters, marking the cut with `…`.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or_default();
    let cut_line = first.len() < text.trim_end().len();
    if first.chars().count() <= max && !cut_line {
        return first.to_owned();
    }
    let mut out: String = first.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_three_spaces_apart_without_trailing_spaces() {
        let mut table = Table::new(&["name", "age"]);
        table.row(vec!["a-long-name".into(), "5m".into()]);
        table.row(vec!["b".into(), "".into()]);
        assert_eq!(
            table.render(false),
            "NAME          AGE\na-long-name   5m\nb\n"
        );
    }

    #[test]
    fn colour_codes_do_not_shift_the_columns() {
        let mut table = Table::new(&["state", "node"]);
        table.row(vec![
            Cell::colored("Ready", Some(Color::Green)),
            "n1".into(),
        ]);
        assert_eq!(
            table.render(true),
            "STATE   NODE\n\x1b[32mReady\x1b[0m   n1\n"
        );
    }

    #[test]
    fn long_messages_are_cut_to_one_line() {
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("ab\ncd", 10), "ab…");
        assert_eq!(truncate("ab", 10), "ab");
    }
}
