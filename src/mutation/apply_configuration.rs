//! ApplyConfiguration merge (placeholder).
