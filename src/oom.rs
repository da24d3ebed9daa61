//! Telling a GPU out-of-memory crash from any other failure, by the
//! messages frameworks print on stderr when an allocation fails.

use std::io;
use std::path::Path;

use serde::Deserialize;

/// `[oom]` in the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OomRules {
    pub signatures: Vec<String>,
    pub stderr_tail_bytes: u64,
}

impl OomRules {
    /// The first signature found in the tail of the file at `stderr`,
    /// searched as bytes: on the daemon's loop, at every failed run, and
    /// a job's stderr may be megabytes of anything (made text first, 4 MiB
    /// of invalid UTF-8 grew to 12 MiB and took 25-30 ms to search).
    pub fn find_in(&self, stderr: &Path) -> io::Result<Option<&str>> {
        let tail = crate::supervisor::tail_bytes(stderr, self.stderr_tail_bytes)?;
        Ok(self.find(&tail))
    }

    /// The first signature that occurs in `text`.
    pub fn find(&self, text: &[u8]) -> Option<&str> {
        self.signatures
            .iter()
            .map(String::as_str)
            .find(|s| !s.is_empty() && memchr::memmem::find(text, s.as_bytes()).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> OomRules {
        crate::config::Config::load(None).unwrap().oom
    }

    #[test]
    fn real_messages_are_recognised() {
        let rules = rules();
        for message in [
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 39.39 GiB of which 1.06 GiB is free.",
            "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[32,64,112,112]",
            "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
        ] {
            assert!(rules.find(message.as_bytes()).is_some(), "{message}");
        }
        for message in [
            "Traceback (most recent call last):\nValueError: bad input",
            "MemoryError",
            "Killed",
        ] {
            assert_eq!(rules.find(message.as_bytes()), None, "{message}");
        }
    }

    #[test]
    fn only_the_tail_of_stderr_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stderr");
        let mut text = String::from("CUDA out of memory\n");
        text.push_str(&"x".repeat(1000));
        std::fs::write(&path, &text).unwrap();
        let mut rules = rules();
        assert!(rules.find_in(&path).unwrap().is_some());
        rules.stderr_tail_bytes = 100;
        assert_eq!(rules.find_in(&path).unwrap(), None);
    }
}
