//! Work spread over the machine's cores: compiling thousands of policies
//! and reading thousands of policy files at start.

use std::sync::OnceLock;

/// The threads this process may run at once, read once: Linux's answer
/// reads cgroup files each time, which cost more than compiling the policy
/// of a small file.
pub fn available_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// `items` mapped by `f`, in order, on as many threads as the machine has
/// but with at least `per_thread` items each (fewer run on this thread: a
/// thread costs more than a few small items).
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
    let chunk = items.len().div_ceil(threads);
    let mut chunks = Vec::with_capacity(threads);
    let mut rest = items;
    while rest.len() > chunk {
        let tail = rest.split_off(chunk);
        chunks.push(rest);
        rest = tail;
    }
    chunks.push(rest);
    let f = &f;
    std::thread::scope(|scope| {
        let workers: Vec<_> = chunks
            .into_iter()
            .map(|chunk| scope.spawn(move || chunk.into_iter().map(f).collect::<Vec<_>>()))
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_order_of_the_items() {
        for (count, per_thread) in [(0, 4), (1, 4), (7, 1), (1000, 3), (1001, 1000)] {
            let items: Vec<usize> = (0..count).collect();
            let expected: Vec<usize> = items.iter().map(|i| i * 2).collect();
            assert_eq!(map_in_order(items, per_thread, |i| i * 2), expected);
        }
    }
}
