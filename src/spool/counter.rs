//! The task-number counter, `next-id`, without a flush per number.
//!
//! Every number handed out must stay unique across a power loss, yet a
//! flush per submission was one of the costliest steps of `carma submit`.
//! So the counter reserves ahead: the file holds the next number, the end
//! of a reservation that is flushed only when it runs out (every
//! [`RESERVE`] numbers), and the boot the file was written in. Within one
//! boot the page cache is the truth for every process, flushed or not.
//! A boot that differs says the machine went down since (a power loss
//! among the possibilities), and the count resumes at the reservation's
//! end, which the disk holds and no number handed out has reached. The
//! cost is a gap of at most [`RESERVE`] numbers per boot.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Numbers reserved by one flush.
pub const RESERVE: u64 = 1024;

/// What `next-id` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// The next number to hand out.
    pub next: u64,
    /// No number at or above this has been handed out; on disk.
    pub reserved: u64,
    /// The boot the file was written in (`None`: unknown, so every write
    /// was flushed).
    pub boot: Option<String>,
}

/// One allocation: the first number, the counter to write, and whether it
/// must be flushed before the numbers are used.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken {
    pub first: u64,
    pub counter: Counter,
    pub flush: bool,
}

/// The counter's text: one line, fixed width, so a rewrite in place never
/// leaves a longer old line's tail behind. The old format (one number,
/// flushed at every write) reads as a counter of no known boot.
pub fn parse(text: &str) -> Option<Counter> {
    let mut words = text.split_whitespace();
    let next = words.next()?.parse().ok()?;
    let Some(reserved) = words.next() else {
        return Some(Counter {
            next,
            reserved: next,
            boot: None,
        });
    };
    let reserved = reserved.parse().ok()?;
    let boot = words.next().filter(|&b| b != "-").map(str::to_owned);
    (words.next().is_none() && next <= reserved).then_some(Counter {
        next,
        reserved,
        boot,
    })
}

/// The line [`parse`] reads.
pub fn format(counter: &Counter) -> String {
    format!(
        "{:020} {:020} {:36}\n",
        counter.next,
        counter.reserved,
        counter.boot.as_deref().unwrap_or("-")
    )
}

/// A counter for a file that is missing or damaged: `next` comes from the
/// highest number in the tree, and nothing says which boot wrote it.
pub fn rebuilt(next: u64) -> Counter {
    Counter {
        next,
        reserved: next,
        boot: None,
    }
}

/// Takes `count` numbers from `stored` in boot `boot`; `None` when they
/// would run past the last number (a damaged counter: rebuild it).
pub fn take(stored: Counter, boot: Option<&str>, count: u64) -> Option<Taken> {
    let next = match stored.boot.as_deref() == boot {
        // Same boot, or a counter that was always flushed: as it says.
        true => stored.next,
        // A boot since: resume past anything that may have been handed
        // out, unflushed.
        false => stored.next.max(stored.reserved),
    };
    let reserved = match stored.boot.as_deref() == boot {
        true => stored.reserved,
        false => next,
    };
    let end = next.checked_add(count)?;
    let flush = boot.is_none() || end > reserved;
    let reserved = match (flush, boot) {
        (false, _) => reserved,
        (true, None) => end,
        (true, Some(_)) => end.saturating_add(RESERVE),
    };
    Some(Taken {
        first: next,
        counter: Counter {
            next: end,
            reserved,
            boot: boot.map(str::to_owned),
        },
        flush,
    })
}

/// This boot's identity, from the kernel; read once per process, as a
/// boot cannot change under it.
pub fn this_boot() -> Option<String> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        (!id.is_empty() && !id.contains(char::is_whitespace)).then(|| id.to_owned())
    })
    .clone()
}

/// Reads the counter from the locked `file`.
pub fn read(file: &mut File) -> io::Result<Option<Counter>> {
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(parse(&text))
}

/// Writes `taken`'s counter over the locked `file`, flushed if it must be.
pub fn write(file: &File, taken: &Taken) -> io::Result<()> {
    let line = format(&taken.counter);
    file.write_all_at(line.as_bytes(), 0)?;
    if file.metadata()?.len() != line.len() as u64 {
        file.set_len(line.len() as u64)?;
    }
    match taken.flush {
        true => file.sync_data(),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(next: u64, reserved: u64, boot: Option<&str>) -> Counter {
        Counter {
            next,
            reserved,
            boot: boot.map(str::to_owned),
        }
    }

    #[test]
    fn numbers_within_a_reservation_in_the_same_boot_need_no_flush() {
        let taken = take(counter(10, 100, Some("a")), Some("a"), 5).unwrap();
        assert_eq!(taken.first, 10);
        assert_eq!(taken.counter, counter(15, 100, Some("a")));
        assert!(!taken.flush);
    }

    #[test]
    fn running_past_the_reservation_reserves_ahead_and_flushes() {
        let taken = take(counter(98, 100, Some("a")), Some("a"), 5).unwrap();
        assert_eq!(taken.first, 98);
        assert_eq!(taken.counter, counter(103, 103 + RESERVE, Some("a")));
        assert!(taken.flush);
    }

    #[test]
    fn after_another_boot_the_count_resumes_past_the_reservation() {
        // Numbers up to 99 may have been handed out, unflushed, before the
        // machine went down; the disk may still say 10.
        let taken = take(counter(10, 100, Some("a")), Some("b"), 1).unwrap();
        assert_eq!(taken.first, 100);
        assert_eq!(taken.counter, counter(101, 101 + RESERVE, Some("b")));
        assert!(taken.flush);
    }

    #[test]
    fn without_a_known_boot_every_number_is_flushed_and_none_is_skipped() {
        let taken = take(counter(10, 10, None), None, 2).unwrap();
        assert_eq!((taken.first, taken.flush), (10, true));
        assert_eq!(taken.counter, counter(12, 12, None));
    }

    #[test]
    fn the_old_one_number_format_is_read_as_flushed() {
        let old = parse("42\n").unwrap();
        assert_eq!(old, counter(42, 42, None));
        let taken = take(old, Some("a"), 1).unwrap();
        assert_eq!(taken.first, 42);
        assert!(taken.flush);
    }

    #[test]
    fn a_damaged_counter_is_rebuilt_and_flushed() {
        for text in ["", "x", "5 4 a", "1 2 a b", "1 x a"] {
            assert_eq!(parse(text), None, "{text:?}");
        }
        let taken = take(rebuilt(7), Some("a"), 1).unwrap();
        assert_eq!(taken.first, 7);
        assert!(taken.flush);
    }

    #[test]
    fn the_line_reads_back_at_one_width() {
        let c = counter(3, 1027, Some("0b5e3f0c-6f7e-4d55-9d8c-2f3a4b5c6d7e"));
        assert_eq!(parse(&format(&c)), Some(c.clone()));
        let unknown = counter(3, 3, None);
        assert_eq!(parse(&format(&unknown)), Some(unknown));
        assert_eq!(
            format(&c).len(),
            format(&counter(u64::MAX, u64::MAX, None)).len()
        );
    }

    #[test]
    fn numbers_never_wrap() {
        assert_eq!(
            take(counter(u64::MAX, u64::MAX, Some("a")), Some("a"), 1),
            None
        );
    }
}
