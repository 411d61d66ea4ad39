//! Work spread over the machine's cores: compiling thousands of policies
//! and reading thousands of policy files at start; and the large stacks
//! that compiling CEL needs.

use std::cell::Cell;
use std::sync::OnceLock;

/// Stack of the threads started here: room for the CEL parser, which
/// recurses deeply per nesting level (much more in debug builds). Only the
/// pages used become resident.
pub const LARGE_STACK_BYTES: usize = 256 * 1024 * 1024;

thread_local! {
    static ON_LARGE_STACK: Cell<bool> = const { Cell::new(false) };
}

/// Why [`with_large_stack`] has no result.
#[derive(Debug, thiserror::Error)]
pub enum LargeStackError {
    /// No thread could be started.
    #[error("cannot start a thread: {0}")]
    Spawn(std::io::Error),
    /// The work panicked.
    #[error("the work panicked")]
    Panicked,
}

/// Runs `f` with [`LARGE_STACK_BYTES`] of stack: on this thread when it has
/// them (a thread of [`map_in_order`]), else on a new one. Starting a
/// thread for each of thousands of expressions cost more than compiling
/// them (a 256 MiB mapping made and unmade each time).
pub fn with_large_stack<R: Send>(f: impl FnOnce() -> R + Send) -> Result<R, LargeStackError> {
    if ON_LARGE_STACK.with(Cell::get) {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .map_err(|_| LargeStackError::Panicked);
    }
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("large-stack".into())
            .stack_size(LARGE_STACK_BYTES)
            .spawn_scoped(scope, || {
                ON_LARGE_STACK.with(|c| c.set(true));
                f()
            })
            .map_err(LargeStackError::Spawn)?
            .join()
            .map_err(|_| LargeStackError::Panicked)
    })
}

/// The threads this process may run at once, read once: Linux's answer
/// reads cgroup files each time, which cost more than compiling the policy
/// of a small file.
pub fn available_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// `items` mapped by `f`, in order, on as many threads as the machine has
/// but with at least `per_thread` items each (fewer run on this thread: a
/// thread costs more than a few small items). Items are dealt to the
/// threads in turn, not in runs: costly items come in runs (a folder's
/// policies, which compile, before its bindings), and a run would leave one
/// thread all the work.
pub fn map_in_order<T: Send, R: Send>(
    items: Vec<T>,
    per_thread: usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let threads = available_threads()
        .min(items.len() / per_thread.max(1))
        .max(1);
    if threads == 1 {
        return items.into_iter().map(f).collect();
    }
    let total = items.len();
    let mut hands: Vec<Vec<T>> = (0..threads)
        .map(|_| Vec::with_capacity(total.div_ceil(threads)))
        .collect();
    for (i, item) in items.into_iter().enumerate() {
        hands[i % threads].push(item);
    }
    let f = &f;
    let results: Vec<Vec<R>> = std::thread::scope(|scope| {
        let workers: Vec<_> = hands
            .into_iter()
            .map(|hand| {
                std::thread::Builder::new()
                    .stack_size(LARGE_STACK_BYTES)
                    .spawn_scoped(scope, move || {
                        ON_LARGE_STACK.with(|c| c.set(true));
                        hand.into_iter().map(f).collect::<Vec<_>>()
                    })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| match w {
                Ok(w) => w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                // No thread: the hand is lost with the closure, so fail as
                // a panic would rather than return fewer results.
                Err(e) => panic!("cannot start a thread: {e}"),
            })
            .collect()
    });
    // Item i is the (i / threads)-th result of thread i % threads.
    let mut streams: Vec<_> = results.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::with_capacity(total);
    for i in 0..total {
        if let Some(r) = streams[i % threads].next() {
            out.push(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_on_a_large_stack_runs_there_and_survives_a_panic() {
        assert!(!ON_LARGE_STACK.with(Cell::get));
        assert!(with_large_stack(|| ON_LARGE_STACK.with(Cell::get)).unwrap());
        let nested = with_large_stack(|| {
            let here = std::thread::current().id();
            with_large_stack(|| std::thread::current().id() == here).unwrap()
        });
        assert!(nested.unwrap(), "a large stack runs nested work itself");
        let panicked = with_large_stack(|| with_large_stack(|| panic!("boom")).is_err());
        assert!(panicked.unwrap());
        let on_workers = map_in_order(vec![(); 64], 1, |_| ON_LARGE_STACK.with(Cell::get));
        assert!(on_workers.iter().all(|x| *x) || available_threads() == 1);
    }

    #[test]
    fn results_keep_the_order_of_the_items() {
        for (count, per_thread) in [(0, 4), (1, 4), (7, 1), (1000, 3), (1001, 1000), (2003, 1)] {
            let items: Vec<usize> = (0..count).collect();
            let expected: Vec<usize> = items.iter().map(|i| i * 2).collect();
            assert_eq!(map_in_order(items, per_thread, |i| i * 2), expected);
        }
    }
}
