//! The process's global allocator: mimalloc, asked through its plain entry
//! points whenever the requested alignment allows.
//!
//! The `mimalloc` crate's allocator passes every request to
//! `mi_malloc_aligned`. mimalloc 3 serves that from its fast path only while
//! the size class's current page has a free block; when the page runs out,
//! a block size that is not a power of two (24, 40, 48 … bytes, most of a
//! JSON or CEL tree) is over-allocated and re-aligned by hand. Every mimalloc
//! block is word aligned, so `mi_malloc` is already correct for any
//! alignment up to a word, and it refills the page as usual.
//!
//! ```
//! #[global_allocator]
//! static ALLOCATOR: kmutate::allocator::Mimalloc = kmutate::allocator::Mimalloc;
//! # fn main() { let v = vec![1u8; 3]; assert_eq!(v.len(), 3); }
//! ```

use libmimalloc_sys as ffi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment every mimalloc block has, whatever its size.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as the global allocator (see the module documentation).
pub struct Mimalloc;

// SAFETY: every path hands out blocks from mimalloc with at least the
// layout's alignment (a word at most through the plain entry points, which
// mimalloc always gives; the aligned entry points otherwise), and frees and
// resizes them with mimalloc's own calls.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; mimalloc accepts any size.
        unsafe {
            if layout.align() <= WORD {
                ffi::mi_malloc(layout.size()) as *mut u8
            } else {
                ffi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if layout.align() <= WORD {
                ffi::mi_zalloc(layout.size()) as *mut u8
            } else {
                ffi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { ffi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`'s alignment,
        // which the matching resize keeps.
        unsafe {
            if layout.align() <= WORD {
                ffi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            } else {
                ffi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_have_the_alignment_their_layout_asks_for() {
        let mut held = Vec::new();
        // Sizes that are not powers of two, many of them, so pages run out
        // and refill; alignments from a byte to a page.
        for size in [1usize, 8, 24, 40, 48, 72, 200, 1000, 5000, 70_000] {
            for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                for zeroed in [false, true] {
                    for _ in 0..64 {
                        // SAFETY: non-zero size; freed below with its layout.
                        let p = unsafe {
                            if zeroed {
                                Mimalloc.alloc_zeroed(layout)
                            } else {
                                Mimalloc.alloc(layout)
                            }
                        };
                        assert!(!p.is_null(), "{size} bytes aligned to {align}");
                        assert_eq!(p as usize % align, 0, "{size} bytes aligned to {align}");
                        if zeroed {
                            // SAFETY: `p` holds `size` initialised bytes.
                            let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                            assert!(bytes.iter().all(|&b| b == 0), "{size} zeroed bytes");
                        }
                        held.push((p, layout));
                    }
                }
            }
        }
        for (p, layout) in held {
            // SAFETY: allocated above with this layout.
            unsafe { Mimalloc.dealloc(p, layout) }
        }
    }

    #[test]
    fn resizing_keeps_contents_and_alignment() {
        for align in [1usize, 8, 16, 64] {
            let layout = Layout::from_size_align(24, align).unwrap();
            // SAFETY: non-zero size; resized and freed with matching layouts.
            unsafe {
                let p = Mimalloc.alloc(layout);
                for i in 0..24 {
                    *p.add(i) = i as u8;
                }
                let q = Mimalloc.realloc(p, layout, 10_000);
                assert_eq!(q as usize % align, 0, "aligned to {align} after growing");
                let kept = std::slice::from_raw_parts(q, 24);
                assert!(kept.iter().enumerate().all(|(i, &b)| b == i as u8));
                Mimalloc.dealloc(q, Layout::from_size_align(10_000, align).unwrap());
            }
        }
    }
}
