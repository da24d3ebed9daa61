//! Wall-time limits as users write them (`2h`, `90m`, `45s`, `1:30:00`).
//!
//! Two habits meet here: unit suffixes (`2h`, `1h30m`, `1d`) and Slurm's
//! clock form (`MM:SS`, `HH:MM:SS`). A bare number is refused rather than
//! guessed: Slurm reads it as minutes, most other tools as seconds, and a
//! limit sixty times too short kills a day's training.

use std::time::Duration;

use thiserror::Error;

/// A limit that could not be read, with the 1-based character column where
/// reading stopped, so callers can point at it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct WallTimeError {
    pub column: usize,
    pub message: String,
}

/// What a limit looks like, in messages.
pub const HINT: &str = "a time such as 2h, 90m, 45s, 1h30m or 1:30:00";

/// The longest duration carma reads anywhere (a limit, a setting): a
/// year. Longer ones are typos, and one too large for the clock would stop
/// the daemon.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// A duration a setting gives in seconds (`settle_s = 5`), checked once,
/// where the configuration is read: a finite number from 0 to a year.
/// What uses it never converts an unchecked `f64` (which could panic in
/// [`Duration::from_secs_f64`]), and no setting repeats the check.
///
/// It keeps its [`Duration`] beside the number: the scheduling core asks
/// for pauses and windows as durations at every placement it weighs, and
/// the conversion was 1.5% of a simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, serde::Deserialize)]
#[serde(try_from = "f64")]
pub struct Seconds {
    seconds: f64,
    duration: Duration,
}

impl TryFrom<f64> for Seconds {
    type Error = String;

    fn try_from(seconds: f64) -> Result<Seconds, String> {
        match (0.0..=MAX_SECONDS).contains(&seconds) {
            true => Ok(Seconds {
                seconds,
                duration: Duration::from_secs_f64(seconds),
            }),
            false => Err(format!(
                "expected seconds from 0 to a year ({MAX_SECONDS}), found {seconds}"
            )),
        }
    }
}

impl Seconds {
    pub const ZERO: Seconds = Seconds {
        seconds: 0.0,
        duration: Duration::ZERO,
    };

    /// Seconds known to be valid (a literal in code or a test).
    pub fn of(seconds: f64) -> Seconds {
        Seconds::try_from(seconds).expect("valid seconds")
    }

    pub fn get(self) -> f64 {
        self.seconds
    }

    pub fn duration(self) -> Duration {
        self.duration
    }

    /// The duration, `None` for 0 (a setting where 0 means "none").
    pub fn nonzero(self) -> Option<Duration> {
        (self.seconds > 0.0).then_some(self.duration)
    }

    /// Refuses 0 for a setting that must be positive (a window, an
    /// interval): the error names the key.
    pub fn positive(self, key: &str) -> Result<Seconds, String> {
        match self.seconds > 0.0 {
            true => Ok(self),
            false => Err(format!("{key} = 0: expected seconds > 0")),
        }
    }
}

/// Reads a limit; zero is refused (a job that may not run at all is a
/// mistake, not a limit).
pub fn parse(text: &str) -> Result<Duration, WallTimeError> {
    let error = |column: usize, message: String| WallTimeError { column, message };
    let seconds = if text.contains(':') {
        clock(text)?
    } else {
        suffixed(text)?
    };
    match seconds {
        0 => Err(error(1, format!("expected {HINT}, found a limit of zero"))),
        s if s as f64 > MAX_SECONDS => Err(error(1, format!("expected {HINT}, at most a year"))),
        s => Ok(Duration::from_secs(s)),
    }
}

/// `1h30m`, `2h`, `90m`, `45s`, `1d`: numbers each followed by a unit.
fn suffixed(text: &str) -> Result<u64, WallTimeError> {
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for (column, c) in text.chars().enumerate().map(|(i, c)| (i + 1, c)) {
        if let Some(digit) = c.to_digit(10) {
            let n = number.unwrap_or(0);
            number = Some(n.saturating_mul(10).saturating_add(u64::from(digit)));
            continue;
        }
        let unit = match c.to_ascii_lowercase() {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => {
                return Err(WallTimeError {
                    column,
                    message: format!("expected {HINT}: `{c}` is not a unit (s, m, h or d)"),
                });
            }
        };
        let Some(n) = number.take() else {
            return Err(WallTimeError {
                column,
                message: format!("expected {HINT}: a number before `{c}`"),
            });
        };
        total = total.saturating_add(n.saturating_mul(unit));
    }
    match number {
        None if text.is_empty() => Err(WallTimeError {
            column: 1,
            message: format!("expected {HINT}"),
        }),
        None => Ok(total),
        Some(_) => Err(WallTimeError {
            column: text.chars().count() + 1,
            message: format!("expected {HINT}: a unit after the number (90m, not 90)"),
        }),
    }
}

/// `MM:SS` or `HH:MM:SS`; minutes and seconds below 60 after the first
/// field.
fn clock(text: &str) -> Result<u64, WallTimeError> {
    let fields: Vec<&str> = text.split(':').collect();
    if fields.len() > 3 {
        return Err(WallTimeError {
            column: 1,
            message: format!("expected {HINT}: at most HH:MM:SS"),
        });
    }
    let mut total: u64 = 0;
    let mut column = 1;
    for (i, field) in fields.iter().enumerate() {
        let valid = !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit());
        let value: Option<u64> = valid.then(|| field.parse().unwrap_or(u64::MAX));
        match value {
            Some(v) if i == 0 || v < 60 => total = total.saturating_mul(60).saturating_add(v),
            _ => {
                return Err(WallTimeError {
                    column,
                    message: format!("expected {HINT}: minutes and seconds are 00 to 59"),
                });
            }
        }
        column += field.chars().count() + 1;
    }
    Ok(total)
}

/// Formats a limit for people, in the suffix form [`parse`] reads back:
/// `2h`, `1h30m`, `45s`.
pub fn format(limit: Duration) -> String {
    let mut s = limit.as_secs();
    if s == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if s >= size {
            out.push_str(&format!("{}{unit}", s / size));
            s %= size;
        }
    }
    out
}

/// Seconds as people read a job's length: `42 s`, `12 min 5 s`, `3 h 20 min`.
pub fn length(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// Unix seconds as a UTC date and time, `2025-01-31 23:59:59 UTC`: the
/// same on every machine and in every log, whatever its time zone.
pub fn utc(unix: f64) -> String {
    let secs = unix.max(0.0) as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_dates_and_lengths() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_735_689_599.5), "2024-12-31 23:59:59 UTC");
        assert_eq!(length(42.4), "42 s");
        assert_eq!(length(725.0), "12 min 5 s");
        assert_eq!(length(12_000.0), "3 h 20 min");
    }

    fn secs(text: &str) -> u64 {
        parse(text).unwrap().as_secs()
    }

    #[test]
    fn suffixes_and_clocks_mean_the_same() {
        assert_eq!(secs("2h"), 7200);
        assert_eq!(secs("90m"), 5400);
        assert_eq!(secs("1h30m"), 5400);
        assert_eq!(secs("1:30:00"), 5400);
        assert_eq!(secs("90:00"), 5400);
        assert_eq!(secs("45s"), 45);
        assert_eq!(secs("1D"), 86_400);
    }

    #[test]
    fn mistakes_point_at_their_column() {
        let e = parse("90").unwrap_err();
        assert_eq!(e.column, 3);
        assert!(e.message.contains("90m, not 90"), "{}", e.message);
        let e = parse("2x").unwrap_err();
        assert_eq!(e.column, 2);
        assert!(e.message.contains("`x`"), "{}", e.message);
        assert_eq!(parse("1:75:00").unwrap_err().column, 3);
        assert!(parse("0m").unwrap_err().message.contains("zero"));
        assert!(parse("1:2:3:4").is_err());
        assert!(parse("h").is_err());
        assert!(parse("").is_err());
        assert!(
            parse("99999999999999999999d")
                .unwrap_err()
                .message
                .contains("year")
        );
    }

    #[test]
    fn formats_read_back() {
        for s in [45, 60, 5400, 7200, 90_061] {
            let d = Duration::from_secs(s);
            assert_eq!(parse(&format(d)), Ok(d));
        }
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
    }
}
