//! A FUSE file system that never answers: what an unprivileged user can
//! mount with `fusermount` (sshfs to a host that went away), and where
//! every access waits in the kernel until the connection is aborted or the
//! waiting process gets SIGKILL. Root mounts it here, open to all
//! (`allow_other`), for the tests that attack with it.
//!
//! It speaks just enough of the protocol (`linux/fuse.h`) to be mounted:
//! it answers `FUSE_INIT`, and holds every other request unanswered, or
//! ([`SilentFuse::failing`]) answers each with an error, as a user's file
//! system may choose to.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

const FUSE_INIT: u32 = 26;
/// `struct fuse_in_header`: len, opcode, unique, nodeid, uid, gid, pid,
/// total_extlen, padding.
const IN_HEADER: usize = 40;

/// The mounted file system; unmounted and its connection aborted (every
/// waiting access fails) when dropped.
pub struct SilentFuse {
    at: PathBuf,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl SilentFuse {
    /// Mounts it on the directory `at` (made if missing).
    pub fn mount(at: &Path) -> SilentFuse {
        SilentFuse::serving(at, None)
    }

    /// Mounted on `at`, answering every request but `FUSE_INIT` with the
    /// error `errno`.
    pub fn failing(at: &Path, errno: i32) -> SilentFuse {
        SilentFuse::serving(at, Some(errno))
    }

    fn serving(at: &Path, errno: Option<i32>) -> SilentFuse {
        std::fs::create_dir_all(at).unwrap();
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open("/dev/fuse")
            .expect("/dev/fuse (the FUSE module)");
        let options = format!(
            "fd={},rootmode=40755,user_id=0,group_id=0,allow_other",
            dev.as_raw_fd()
        );
        let c = |s: &[u8]| CString::new(s).unwrap();
        let (source, target, kind, data) = (
            c(b"carma-test"),
            c(at.as_os_str().as_bytes()),
            c(b"fuse"),
            c(options.as_bytes()),
        );
        // SAFETY: plain strings that outlive the call.
        let mounted = unsafe {
            nix::libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                kind.as_ptr(),
                nix::libc::MS_NOSUID | nix::libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(
            mounted,
            0,
            "mount -t fuse {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        );
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || serve(dev, &stop, errno))
        };
        SilentFuse {
            at: at.to_owned(),
            stop,
            server: Some(server),
        }
    }
}

/// Answers `FUSE_INIT`, and everything else with `errno` if given, else
/// holds it, until `stop`.
fn serve(mut dev: File, stop: &AtomicBool, errno: Option<i32>) {
    let mut buf = vec![0u8; 1 << 20];
    while !stop.load(Ordering::Relaxed) {
        let n = match dev.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            Err(_) => return,
        };
        if n < IN_HEADER {
            continue;
        }
        let opcode = u32::from_ne_bytes(buf[4..8].try_into().unwrap());
        let unique = u64::from_ne_bytes(buf[8..16].try_into().unwrap());
        if opcode != FUSE_INIT {
            if let Some(errno) = errno {
                // `struct fuse_out_header`: len, error (negative), unique.
                let mut reply = Vec::with_capacity(16);
                reply.extend_from_slice(&16u32.to_ne_bytes());
                reply.extend_from_slice(&(-errno).to_ne_bytes());
                reply.extend_from_slice(&unique.to_ne_bytes());
                let _ = dev.write_all(&reply);
            }
            continue;
        }
        let major = u32::from_ne_bytes(buf[IN_HEADER..IN_HEADER + 4].try_into().unwrap());
        let minor = u32::from_ne_bytes(buf[IN_HEADER + 4..IN_HEADER + 8].try_into().unwrap());
        // `struct fuse_init_out`, 64 bytes: major, minor, max_readahead,
        // flags, max_background, congestion_threshold, max_write, ...
        let mut init = [0u8; 64];
        init[0..4].copy_from_slice(&major.to_ne_bytes());
        init[4..8].copy_from_slice(&minor.min(31).to_ne_bytes());
        init[20..24].copy_from_slice(&4096u32.to_ne_bytes());
        // `struct fuse_out_header`: len, error, unique.
        let mut reply = Vec::with_capacity(16 + init.len());
        reply.extend_from_slice(&(16 + init.len() as u32).to_ne_bytes());
        reply.extend_from_slice(&0i32.to_ne_bytes());
        reply.extend_from_slice(&unique.to_ne_bytes());
        reply.extend_from_slice(&init);
        if dev.write_all(&reply).is_err() {
            return;
        }
    }
}

impl Drop for SilentFuse {
    fn drop(&mut self) {
        // The server's end closed aborts the connection: every access
        // still waiting fails, and the mount can go.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
        let target = CString::new(self.at.as_os_str().as_bytes()).unwrap();
        // SAFETY: a plain string that outlives the call.
        unsafe { nix::libc::umount2(target.as_ptr(), nix::libc::MNT_DETACH) };
    }
}
