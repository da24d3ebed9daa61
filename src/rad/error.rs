//! Parse errors that point at a line and column.
//!
//! A `.rad` is written by hand and may be refused by a daemon the user never
//! looks at, so an error is only useful if an editor can jump to it
//! (`FILE:LINE:COL: message`) and if it says what was expected there, not
//! merely that something failed.

use thiserror::Error;

/// A place in a `.rad` file: 1-based line and 1-based column counted in
/// characters (what editors show), after a UTF-8 byte-order mark, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl Position {
    /// The first character of the file.
    pub const START: Position = Position { line: 1, column: 1 };
}

/// Why a `.rad` text is not a job, and where.
///
/// Prints as `LINE:COL: message`; [`crate::rad::FileError`] puts the file
/// name in front.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{line}:{column}: {message}")]
pub struct RadError {
    /// 1-based line of the offending text.
    pub line: usize,
    /// 1-based column (characters) of the offending text.
    pub column: usize,
    /// What was expected there and what was found.
    pub message: String,
}

impl RadError {
    pub(crate) fn new(at: Position, message: impl Into<String>) -> RadError {
        RadError {
            line: at.line,
            column: at.column,
            message: message.into(),
        }
    }

    /// Adds a parenthesised note that explains how the text was read.
    pub(crate) fn with_note(mut self, note: &str) -> RadError {
        self.message = format!("{} ({note})", self.message);
        self
    }
}

/// Longest stretch of a user's text quoted back in a message: enough to
/// recognise it, short enough that a 10 MB line does not flood a terminal.
const QUOTE_CHARS: usize = 40;

/// The user's `text`, cut to a readable length for a message.
pub(crate) fn clip(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// `found "two"`, `found nothing`: the second half of an "expected ..."
/// message, quoting the text with escapes and [`clip`]ped.
pub(crate) fn found(text: &str) -> String {
    if text.is_empty() {
        "found nothing".to_owned()
    } else {
        format!("found {:?}", clip(text))
    }
}
