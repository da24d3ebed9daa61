//! Log lines for people at a terminal and for journald.
//!
//! Under systemd, stderr is connected to the journal and `JOURNAL_STREAM`
//! names that stream (`device:inode`). Lines then start with a syslog
//! priority (`<3>` error ... `<7>` debug) so that `journalctl -p warning`
//! filters them, and carry no timestamp (the journal adds its own). At a
//! terminal, lines carry a timestamp and the level. Either way every line
//! about a task starts with the task's name, so `journalctl -u carma -g
//! 000042-resnet50` is that task's history.
//!
//! A message often quotes what a user wrote (a file name, a parse error):
//! control characters in it are escaped, so no user can end a line early
//! and forge a line of the daemon's, or color a terminal.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use log::Level;

/// The syslog priority journald reads from a line's `<N>` prefix.
pub fn priority(level: Level) -> u8 {
    match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

/// Whether stderr is the journal stream systemd told us about.
pub fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(stat) = nix::sys::stat::fstat(std::io::stderr().as_fd()) else {
        return false;
    };
    dev.parse::<u64>().is_ok_and(|d| d == stat.st_dev)
        && ino.parse::<u64>().is_ok_and(|i| i == stat.st_ino)
}

/// The longest line logged, bytes: journald splits a longer line (its
/// `LineMax`, 48 KiB by default) and reads the rest as a line of its own,
/// `<N>` priority prefix and all, so a user's text past it could forge a
/// line. Every user's text is clipped well below this already; this holds
/// whatever a message quotes.
const LINE_MAX: usize = 8 * 1024;

/// A message as logged: [`one_line`], clipped to [`LINE_MAX`].
fn logged(message: &str) -> String {
    let mut line = one_line(message);
    if line.len() > LINE_MAX {
        let mut end = LINE_MAX;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push_str(" [clipped]");
    }
    line
}

/// Sets up `env_logger` (`RUST_LOG` filters; `info` by default) in the
/// journal's format or the terminal's.
pub fn init() {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if stderr_is_journal() {
        builder.format(|buf, record| {
            writeln!(
                buf,
                "<{}>{}",
                priority(record.level()),
                logged(&record.args().to_string())
            )
        });
    } else {
        builder.format(|buf, record| {
            writeln!(
                buf,
                "{} {:<5} {}",
                buf.timestamp_seconds(),
                record.level(),
                logged(&record.args().to_string())
            )
        });
    }
    builder.init();
}

/// A message as one line: newlines, carriage returns, escapes and other
/// control characters written as Rust escapes, and so are the characters
/// that reorder or break what a terminal shows (bidirectional overrides
/// and isolates like U+202E, line and paragraph separators): a job's
/// text must not make a log line or `carma status` read as something else.
pub fn one_line(message: &str) -> String {
    if !message.chars().any(misleads) {
        return message.to_string();
    }
    message
        .chars()
        .map(|c| match c {
            c if misleads(c) => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// Text of several lines as a terminal may show it: each line as
/// [`one_line`] writes it, the line breaks kept. For what carma prints that
/// quotes users' text (a job's script in `carma check`, an error naming a
/// user's file): escapes and bidirectional controls could otherwise
/// rewrite an administrator's terminal.
pub fn shown(text: &str) -> String {
    if !text.chars().any(misleads) {
        return text.to_string();
    }
    text.split('\n')
        .map(one_line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether showing `c` as it is could change how the rest of a line
/// reads.
fn misleads(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

/// Lines that users' actions make, held to a rate: journald keeps at
/// most 10,000 lines a unit in 30 s and then drops every line, other
/// users' and the daemon's own among them. Of each kind of line and each
/// user, [`Hush::PER_MINUTE`] pass in a minute; the rest are counted, and
/// the next line that passes says how many were left out.
#[derive(Debug, Default)]
pub struct Hush {
    kinds: HashMap<(&'static str, Option<u32>), Window>,
}

#[derive(Debug)]
struct Window {
    since: Instant,
    passed: u32,
    held: u64,
}

impl Hush {
    pub const PER_MINUTE: u32 = 100;

    /// Whether a line of `kind` about user `uid` (if known) may be logged
    /// now: `Some` with how many were left out since the last, else
    /// `None` (counted).
    pub fn allow(&mut self, kind: &'static str, uid: Option<u32>, now: Instant) -> Option<u64> {
        let window = self.kinds.entry((kind, uid)).or_insert(Window {
            since: now,
            passed: 0,
            held: 0,
        });
        if now.saturating_duration_since(window.since) >= Duration::from_secs(60) {
            window.since = now;
            window.passed = 0;
        }
        if window.passed >= Self::PER_MINUTE {
            window.held += 1;
            return None;
        }
        window.passed += 1;
        Some(std::mem::take(&mut window.held))
    }
}

/// ` (and N more like it, left out)`, or nothing: what a line that passed
/// [`Hush::allow`] adds.
pub fn left_out(held: u64) -> String {
    match held {
        0 => String::new(),
        n => format!(" (and {n} more like it, left out of the log)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_past_journalds_limit_is_clipped_not_split() {
        let forged = format!("{}\u{e9}<3>forged", "x".repeat(LINE_MAX - 1));
        let line = logged(&forged);
        assert!(
            line.len() <= LINE_MAX + " [clipped]".len(),
            "{}",
            line.len()
        );
        assert!(line.ends_with(" [clipped]") && !line.contains("forged"));
        assert_eq!(logged("short"), "short");
    }

    #[test]
    fn shown_text_keeps_its_lines_and_loses_its_escapes() {
        assert_eq!(shown("plain\ntext"), "plain\ntext");
        assert_eq!(
            shown("a\n\u{1b}]0;x\u{7}b\r\u{202e}c"),
            "a\n\\u{1b}]0;x\\u{7}b\\r\\u{202e}c"
        );
    }

    #[test]
    fn a_users_flood_of_lines_is_held_to_a_rate_and_counted() {
        let mut hush = Hush::default();
        let t0 = Instant::now();
        for _ in 0..Hush::PER_MINUTE {
            assert_eq!(hush.allow("gone", Some(7), t0), Some(0));
        }
        assert_eq!(hush.allow("gone", Some(7), t0), None);
        assert_eq!(hush.allow("gone", Some(7), t0), None);
        // Another user, another kind: their own rate.
        assert_eq!(hush.allow("gone", Some(8), t0), Some(0));
        assert_eq!(hush.allow("refused", Some(7), t0), Some(0));
        // A minute on, the next line says what was left out.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(hush.allow("gone", Some(7), later), Some(2));
        assert_eq!(left_out(2), " (and 2 more like it, left out of the log)");
        assert_eq!(left_out(0), "");
    }

    #[test]
    fn a_user_name_cannot_forge_a_log_line() {
        let forged = "pending/x.rad\n<3>000001-x: failed: forged\x1b[31m";
        let line = one_line(forged);
        assert!(!line.contains('\n') && !line.contains('\x1b'), "{line}");
        assert!(line.contains("x.rad\\n<3>"), "{line}");
        assert_eq!(one_line("plain: ok"), "plain: ok");
        let reversed = one_line("job \u{202E}dab.rad\u{2066}x\u{2069}");
        assert_eq!(reversed, "job \\u{202e}dab.rad\\u{2066}x\\u{2069}");
        assert_eq!(one_line("naïve 日本"), "naïve 日本", "other text is kept");
    }

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(priority(Level::Error), 3);
        assert_eq!(priority(Level::Warn), 4);
        assert_eq!(priority(Level::Info), 6);
        assert_eq!(priority(Level::Debug), 7);
    }
}
