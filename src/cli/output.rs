//! Writing results to stdout: one JSON object per line, and a closed pipe (`| head`) is not an
//! error.

use std::io::{self, BufWriter, Stdout, Write};

use serde::Serialize;

pub struct Output {
    out: BufWriter<Stdout>,
}

impl Output {
    pub fn new() -> Output {
        Output {
            out: BufWriter::new(io::stdout()),
        }
    }

    pub fn json(&mut self, value: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")
    }

    /// [`Output::json`], written out at once: a line of progress.
    pub fn progress(&mut self, value: &impl Serialize) -> io::Result<()> {
        self.json(value)?;
        self.out.flush()
    }

    /// With `store.shards`: a line saying that the lines after it are of this database, the
    /// coordination database (`mysql.url`) or a shard.
    pub fn database(&mut self, database: &impl std::fmt::Display, role: &str) -> io::Result<()> {
        self.json(&serde_json::json!({
            "action": "database",
            "database": database.to_string(),
            "role": role,
        }))
    }

    pub fn line(&mut self, text: &str) -> io::Result<()> {
        self.out.write_all(text.as_bytes())?;
        self.out.write_all(b"\n")
    }

    /// Sends what is buffered now, for output that comes slowly (benchmarks).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes, treating a reader that went away as the end of the output.
    pub fn finish(mut self) -> io::Result<()> {
        ignore_closed_pipe(self.out.flush())
    }
}

/// A reader that stopped reading (`logstamp id gen --count 1000000 | head`) is fine.
pub fn ignore_closed_pipe(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `--format`: JSON lines for programs, an aligned table for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Table,
}

/// Rows as text columns padded to the widest cell, under a header.
pub fn aligned(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    std::iter::once(line(header.to_vec()))
        .chain(
            rows.iter()
                .map(|row| line(row.iter().map(String::as_str).collect())),
        )
        .collect()
}
