//! JSON patch application (placeholder).
