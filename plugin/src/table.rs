//! kubectl-style tables: UPPERCASE headers, no borders, columns separated by three spaces
//! (kubectl's tabwriter padding), no trailing spaces. Cells may carry a colour, applied after
//! alignment so escape codes never skew the columns.
//!
//! Why not `comfy-table`: its `NOTHING` preset with a (0, 3) padding, no content arrangement and
//! trimmed lines gives this layout byte for byte, but not its colours. comfy-table colours cells
//! through crossterm, which writes `ESC[38;5;2m … ESC[39m` where terminals (and the CLI tests on
//! a pty) get `ESC[32m … ESC[0m` here, the codes `explain` also paints its answers with; and it
//! measures cells containing escape codes correctly only with its `custom_styling` feature, whose
//! `ansi-str` dependency is not in this build. It also measures display width (a CJK character is
//! two columns) where kubectl's tabwriter, and this table, count characters, and it turns a `\n`
//! in a cell into a second line. `watch` prints one row at a time at fixed widths
//! ([`render_row`]), which comfy-table can only do as a one-row table per line.

use std::fmt::Write as _;

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
}

impl Table {
    /// A table with these headers (upper-cased).
    pub(crate) fn new<S: AsRef<str>>(headers: &[S]) -> Self {
        Self {
            headers: headers.iter().map(|h| h.as_ref().to_uppercase()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty.
    pub(crate) fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// The widths of each column (headers included).
    pub(crate) fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                let w = cell.text.chars().count();
                match widths.get_mut(i) {
                    Some(existing) => *existing = (*existing).max(w),
                    None => widths.push(w),
                }
            }
        }
        widths
    }

    /// Renders the header and rows; colour only when `color` is set.
    pub(crate) fn render(&self, color: bool) -> String {
        let widths = self.widths();
        let mut out = String::new();
        let header: Vec<Cell> = self
            .headers
            .iter()
            .map(|h| Cell::from(h.as_str()))
            .collect();
        for row in std::iter::once(&header).chain(self.rows.iter()) {
            out.push_str(&render_row(row, &widths, color));
            out.push('\n');
        }
        out
    }
}

/// One row padded to `widths`, without trailing spaces.
pub(crate) fn render_row(row: &[Cell], widths: &[usize], color: bool) -> String {
    let mut line = String::new();
    let last = row.iter().rposition(|c| !c.text.is_empty()).unwrap_or(0);
    for (i, cell) in row.iter().enumerate().take(last + 1) {
        let width = widths.get(i).copied().unwrap_or(0);
        match cell.color.filter(|_| color) {
            Some(c) => {
                let _ = write!(line, "\x1b[{}m{}\x1b[0m", c.code(), cell.text);
            }
            None => line.push_str(&cell.text),
        }
        if i < last {
            let pad = width.saturating_sub(cell.text.chars().count()) + 3;
            line.extend(std::iter::repeat_n(' ', pad));
        }
    }
    line
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
