//! A fake Kubernetes API server (placeholder).
