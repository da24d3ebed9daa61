//! Who answers for a user id: the person behind it, for every per-user
//! limit.
//!
//! A user with subordinate ids (`/etc/subuid`: 65,536 each by default on
//! Debian and Ubuntu) can act as any of them with `newuidmap` (a rootless
//! container does): make files in `pending/` and `cancel/`, connect to
//! the socket and the status page. Counted by the raw id, each of those
//! ids had limits of its own, and one user had 65,536 times the share of
//! the loop, the journal and root's disk that the limits meant to give
//! them. So limits count a subordinate id as its owner, and every id with
//! no account and no owner as one and the same nobody ([`NO_ACCOUNT`]).
//! Only limits: who a request acts as, and who a job runs as, is the very
//! id that made it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The id that every id with neither an account nor an owner counts as:
/// `(uid_t) -1`, which no process can have.
pub const NO_ACCOUNT: u32 = u32::MAX;

/// The id whose limits `uid`'s actions count against: its owner's if it
/// is someone's subordinate id, else its own if it has an account, else
/// [`NO_ACCOUNT`]'s. A range's ids are answered from memory, never one
/// name-service lookup each (a user has 65,536 of them); a directory
/// server's account that falls in someone's range shares their limits.
/// Never root's or carma's own: those have no limits, and a container
/// manager's range under root (LXD's) is anyone's. An account is looked
/// up once a minute at most per id.
pub fn accountable(uid: u32) -> u32 {
    let unlimited = |owner: u32| owner == 0 || owner == nix::unistd::geteuid().as_raw();
    match owner_of(uid) {
        Some(owner) if !unlimited(owner) => owner,
        _ if has_account(uid) => uid,
        _ => NO_ACCOUNT,
    }
}

/// Whether `uid` is one of `owner`'s subordinate ids.
pub fn is_subordinate(owner: u32, uid: u32) -> bool {
    with_ranges(|ranges| ranges.iter().any(|r| r.owner == owner && r.holds(uid)))
}

/// The user whose subordinate id `uid` is, if any.
fn owner_of(uid: u32) -> Option<u32> {
    with_ranges(|ranges| ranges.iter().find(|r| r.holds(uid)).map(|r| r.owner))
}

/// One line of `/etc/subuid`, its user resolved to an id.
#[derive(Debug, PartialEq)]
struct Range {
    owner: u32,
    start: u64,
    count: u64,
}

impl Range {
    fn holds(&self, uid: u32) -> bool {
        (self.start..self.start.saturating_add(self.count)).contains(&u64::from(uid))
    }
}

/// The ranges of `text` (`/etc/subuid`), each user named by name or by
/// number and resolved by `uid_of`; lines that do not read are skipped.
fn parse_ranges(text: &str, uid_of: impl Fn(&str) -> Option<u32>) -> Vec<Range> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let (who, start, count) = (fields.next()?, fields.next()?, fields.next()?);
            Some(Range {
                owner: who.parse().ok().or_else(|| uid_of(who))?,
                start: start.parse().ok()?,
                count: count.parse().ok()?,
            })
        })
        .collect()
}

/// `/etc/subuid`'s ranges, read again whenever the file changed, and a
/// minute after a read where a name did not resolve (a directory server
/// that did not answer): then only names not resolved before are looked
/// up again ([`uid_of_name`]). Read and resolved without the lock held:
/// the loop and the socket's threads ask too.
fn with_ranges<T>(f: impl FnOnce(&[Range]) -> T) -> T {
    struct Read {
        modified: Option<SystemTime>,
        at: Instant,
        complete: bool,
        ranges: Vec<Range>,
    }
    static RANGES: Mutex<Option<Read>> = Mutex::new(None);
    const PATH: &str = "/etc/subuid";
    const RETRY: Duration = Duration::from_secs(60);
    let lock = || RANGES.lock().unwrap_or_else(|e| e.into_inner());
    let modified = std::fs::metadata(PATH).and_then(|m| m.modified()).ok();
    let stale = lock().as_ref().is_none_or(|read| {
        read.modified != modified || (!read.complete && read.at.elapsed() >= RETRY)
    });
    if stale {
        let text = std::fs::read_to_string(PATH).unwrap_or_default();
        let complete = std::cell::Cell::new(true);
        let ranges = parse_ranges(&text, |name| {
            let uid = uid_of_name(name);
            complete.set(complete.get() && uid.is_some());
            uid
        });
        *lock() = Some(Read {
            modified,
            at: Instant::now(),
            complete: complete.get(),
            ranges,
        });
    }
    f(lock().as_ref().map_or(&[], |read| &read.ranges))
}

/// The uid of the user named `name` in `/etc/subuid`: a name resolved
/// once is kept (a range's owner does not change its uid), one that did
/// not resolve is asked again after a minute.
fn uid_of_name(name: &str) -> Option<u32> {
    type Names = HashMap<String, (Option<u32>, Instant)>;
    static NAMES: Mutex<Option<Names>> = Mutex::new(None);
    let lock = || NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let cached = lock().as_ref().and_then(|names| names.get(name).copied());
    match cached {
        Some((Some(uid), _)) => return Some(uid),
        Some((None, at)) if at.elapsed() < FRESH => return None,
        _ => {}
    }
    let uid = nix::unistd::User::from_name(name)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw());
    remember(
        lock().get_or_insert_with(HashMap::new),
        name.to_string(),
        (uid, Instant::now()),
    );
    uid
}

/// How long a name-service answer is kept.
const FRESH: Duration = Duration::from_secs(60);

/// Keeps `value` under `key` in `cache`, which holds at most 10,000: the
/// ids and names asked for are a machine's users, and some that are not
/// (a process of a deleted user's); bounded all the same, by forgetting
/// what was asked longest ago.
fn remember<K: std::hash::Hash + Eq, V: Copy>(
    cache: &mut HashMap<K, (V, Instant)>,
    key: K,
    value: (V, Instant),
) {
    const MOST: usize = 10_000;
    if cache.len() >= MOST {
        let mut ages: Vec<Instant> = cache.values().map(|&(_, at)| at).collect();
        ages.sort_unstable();
        let cut = ages[MOST / 2];
        cache.retain(|_, &mut (_, at)| at > cut);
    }
    cache.insert(key, value);
}

/// Whether `uid` has an account (a `passwd` entry), as looked up at most
/// a minute ago.
fn has_account(uid: u32) -> bool {
    static KNOWN: Mutex<Option<HashMap<u32, (bool, Instant)>>> = Mutex::new(None);
    let now = Instant::now();
    let lock = || KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let cached = lock().as_ref().and_then(|known| known.get(&uid).copied());
    if let Some((has, at)) = cached
        && now.saturating_duration_since(at) < FRESH
    {
        return has;
    }
    // Looked up without the lock held (NSS may be a directory server).
    let has = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .is_some();
    remember(lock().get_or_insert_with(HashMap::new), uid, (has, now));
    has
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subordinate_ranges_name_their_user_by_name_or_number() {
        let ranges = parse_ranges(
            "alice:100000:65536\n1001:300000:10\nbad line\nnobody-known:1:2\n",
            |name| (name == "alice").then_some(1000),
        );
        assert_eq!(ranges.len(), 2);
        let owner = |uid| ranges.iter().find(|r| r.holds(uid)).map(|r| r.owner);
        assert_eq!(owner(100_000), Some(1000));
        assert_eq!(owner(165_535), Some(1000));
        assert_eq!(owner(165_536), None);
        assert_eq!(owner(300_009), Some(1001), "by number");
        assert_eq!(owner(99_999), None);
    }

    #[test]
    fn a_full_cache_forgets_what_was_asked_longest_ago() {
        let mut cache = HashMap::new();
        let t0 = Instant::now();
        for i in 0..10_000u32 {
            remember(
                &mut cache,
                i,
                (true, t0 + Duration::from_millis(u64::from(i))),
            );
        }
        let later = t0 + Duration::from_secs(60);
        remember(&mut cache, 99_999, (true, later));
        assert!(cache.len() < 5_001, "{}", cache.len());
        assert!(cache.contains_key(&99_999) && cache.contains_key(&9_999));
        assert!(!cache.contains_key(&0));
    }

    #[test]
    fn an_id_with_an_account_answers_for_itself_and_one_without_is_nobody() {
        let me = nix::unistd::getuid().as_raw();
        // Root, or whoever runs the tests, has an account everywhere; no
        // range is root's own or the tests' user's.
        if owner_of(me).is_none() {
            assert_eq!(accountable(me), me);
        }
        // An id no system gives out.
        if owner_of(NO_ACCOUNT - 7).is_none() {
            assert_eq!(accountable(NO_ACCOUNT - 7), NO_ACCOUNT);
        }
    }
}
