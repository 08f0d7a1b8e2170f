//! A boundary around redb calls on a checkpoint database that may be damaged.
//!
//! redb returns errors for most damage, but asserts on some: opening a
//! truncated `checkpoints.redb` (`truncate -s 4096`) panics inside redb's page
//! manager. A damaged file must end in one error naming it, never a panic
//! trace, so every redb call of the store runs inside [`guarded`], which
//! catches such a panic, keeps the panic hook from printing it, and returns
//! [`CheckpointError::Database`] naming the file (redb's own text goes to
//! the debug log only).
//!
//! Silencing works per thread: a panic hook, installed once and chaining to
//! the hook that was in place, prints nothing for a panic raised while the
//! current thread is inside [`guarded`]; every other panic is reported as
//! before.

use super::error::CheckpointError;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Once;

thread_local! {
    /// How many [`guarded`] calls the current thread is inside.
    static GUARDED: Cell<u32> = const { Cell::new(0) };
}

/// Installs the hook that keeps guarded panics quiet (once per process).
fn install_quiet_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // `try_with`: a panic while the thread-local is being destroyed
            // is reported as usual.
            let quiet = GUARDED.try_with(|g| g.get() > 0).unwrap_or(false);
            if !quiet {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, a sequence of redb calls on the database file `path`, turning
/// a panic inside it into [`CheckpointError::Database`] naming `path`.
pub(crate) fn guarded<R>(
    path: &Path,
    f: impl FnOnce() -> Result<R, CheckpointError>,
) -> Result<R, CheckpointError> {
    install_quiet_hook();
    GUARDED.with(|g| g.set(g.get() + 1));
    // The store's state is redb's: after a panic the error is returned and
    // the caller drops what it had open, so nothing half-updated is reused.
    let result = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(g.get() - 1));
    result.unwrap_or_else(|panic| {
        // redb's assertion text says nothing a user can act on: the line
        // names the file; the text goes to the debug log.
        tracing::debug!(file = %path.display(), panic = %crate::error::panic_message(&*panic), "redb panicked on a damaged database");
        Err(CheckpointError::Database {
            path: path.to_path_buf(),
            message: "damaged database (truncated or corrupt)".into(),
            source: None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_naming_the_file() {
        let r: Result<(), _> = guarded(Path::new("x/checkpoints.redb"), || {
            panic!("assertion failed: storage too short")
        });
        let e = r.expect_err("the panic is an error").to_string();
        assert!(e.contains("x/checkpoints.redb"), "{e}");
        assert!(e.contains("damaged database"), "{e}");
        assert!(!e.contains("assertion"), "redb's text stays out: {e}");
        // Outside the guard the counter is back to zero.
        assert_eq!(GUARDED.with(Cell::get), 0);
    }

    #[test]
    fn results_pass_through() {
        assert_eq!(guarded(Path::new("db"), || Ok(7)).ok(), Some(7));
    }
}
