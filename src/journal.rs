//! Log lines for people at a terminal and for journald.
//!
//! Under systemd, stderr is connected to the journal and `JOURNAL_STREAM`
//! names that stream (`device:inode`). Lines then start with a syslog
//! priority (`<3>` error ... `<7>` debug) so that `journalctl -p warning`
//! filters them, and carry no timestamp (the journal adds its own). At a
//! terminal, lines carry a timestamp and the level. Either way every line
//! about a task starts with the task's name, so `journalctl -u carma -g
//! 000042-resnet50` is that task's history.

use std::io::Write;
use std::os::fd::AsFd;

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

/// Sets up `env_logger` (`RUST_LOG` filters; `info` by default) in the
/// journal's format or the terminal's.
pub fn init() {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if stderr_is_journal() {
        builder
            .format(|buf, record| writeln!(buf, "<{}>{}", priority(record.level()), record.args()));
    } else {
        builder.format(|buf, record| {
            writeln!(
                buf,
                "{} {:<5} {}",
                buf.timestamp_seconds(),
                record.level(),
                record.args()
            )
        });
    }
    builder.init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(priority(Level::Error), 3);
        assert_eq!(priority(Level::Warn), 4);
        assert_eq!(priority(Level::Info), 6);
        assert_eq!(priority(Level::Debug), 7);
    }
}
