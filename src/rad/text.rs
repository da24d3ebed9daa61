//! From bytes to lines, refusing whatever is not a small text file.
//!
//! Both syntaxes work line by line, so this is the one place that decides
//! what a line is: `\n` or `\r\n` ends it (Windows editors are common among
//! users, and a CRLF file must mean exactly what its LF twin means), a UTF-8
//! byte-order mark is dropped, and a missing final newline is fine. Binary
//! data, text in another encoding and absurd sizes are refused here with a
//! position, before any parser sees them. Every check is a single linear
//! pass: a spool is fed by users, and a 10 MB line must cost milliseconds,
//! not minutes.

use super::error::{Position, RadError};

/// Longest line accepted, in bytes. A line holds one command or one
/// `key: value`; anything longer is a mistake (or an attack), and refusing
/// it bounds the work of every per-line step.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Most lines accepted. A job file is a handful of lines; the bound keeps a
/// file of nothing but newlines from costing memory in proportion.
pub const MAX_LINES: usize = 10_000;

const BOM: &str = "\u{feff}";

/// One line of a `.rad`, without its line ending.
#[derive(Debug, Clone, Copy)]
pub(super) struct Line<'a> {
    /// 1-based line number.
    pub number: usize,
    /// The line's text without `\n` / `\r\n`.
    pub text: &'a str,
}

impl Line<'_> {
    /// The position of byte `offset` of this line.
    pub fn at(&self, offset: usize) -> Position {
        Position {
            line: self.number,
            column: self.text[..offset].chars().count() + 1,
        }
    }

    /// Empty or only whitespace.
    pub fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }

    /// A full-line comment (`#` after optional indentation).
    pub fn is_comment(&self) -> bool {
        self.text.trim_start().starts_with('#')
    }
}

/// Drops a UTF-8 byte-order mark: editors hide it, so columns must too.
pub(super) fn strip_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// [`strip_bom`] for raw bytes.
pub(super) fn strip_bom_bytes(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(BOM.as_bytes()).unwrap_or(bytes)
}

/// Refuses control characters: NUL and friends mean a binary file, and a
/// carriage return not followed by a line feed would silently glue lines
/// together. Tabs, line feeds and CRLF pairs (or a final CR) are text.
pub(super) fn refuse_binary(bytes: &[u8]) -> Result<(), RadError> {
    let bad = bytes.iter().enumerate().find(|&(i, &b)| match b {
        b'\t' | b'\n' => false,
        b'\r' => bytes.get(i + 1).is_some_and(|&next| next != b'\n'),
        0x00..=0x1f | 0x7f => true,
        _ => false,
    });
    let Some((offset, &byte)) = bad else {
        return Ok(());
    };
    let message = match byte {
        0 => "binary data: found a NUL byte; a .rad file is text".to_owned(),
        b'\r' => "stray carriage return: expected lines ending in LF or CRLF".to_owned(),
        _ => format!("binary data: found control byte 0x{byte:02X}; a .rad file is text"),
    };
    Err(RadError::new(position_of_byte(bytes, offset), message))
}

/// The bytes as UTF-8 text, or where the first byte that is not UTF-8 is.
pub(super) fn utf8(bytes: &[u8]) -> Result<&str, RadError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let offset = e.valid_up_to();
        RadError::new(
            position_of_byte(bytes, offset),
            format!(
                "not UTF-8 text: found byte 0x{:02X}; save the file as UTF-8",
                bytes[offset]
            ),
        )
    })
}

/// Splits text into lines, refusing over-long lines and too many lines.
/// There is always at least one line (an empty text is one empty line).
pub(super) fn lines(text: &str) -> Result<Vec<Line<'_>>, RadError> {
    let mut lines = Vec::new();
    for (index, raw) in text.split('\n').enumerate() {
        let number = index + 1;
        if number > MAX_LINES {
            return Err(RadError::new(
                Position {
                    line: number,
                    column: 1,
                },
                format!("too many lines: a .rad file has at most {MAX_LINES}"),
            ));
        }
        let text = raw.strip_suffix('\r').unwrap_or(raw);
        if text.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let line = Line { number, text };
            return Err(RadError::new(
                line.at(cut),
                format!(
                    "line too long: expected at most {MAX_LINE_BYTES} bytes \
                     (one command or one `key: value`), found {} bytes",
                    text.len()
                ),
            ));
        }
        lines.push(Line { number, text });
    }
    Ok(lines)
}

/// The position just after the last character: where "found end of file"
/// errors point.
pub(super) fn end(lines: &[Line<'_>]) -> Position {
    match lines.last() {
        Some(last) => last.at(last.text.len()),
        None => Position::START,
    }
}

/// Line and column of byte `offset`, counting characters by their leading
/// bytes so that it works on text that is not (yet) known to be UTF-8.
fn position_of_byte(bytes: &[u8], offset: usize) -> Position {
    let before = &bytes[..offset];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |newline| newline + 1);
    Position {
        line: before.iter().filter(|&&b| b == b'\n').count() + 1,
        column: before[line_start..]
            .iter()
            .filter(|&&b| b & 0xC0 != 0x80)
            .count()
            + 1,
    }
}
