//! CPU kernels for kiln.
//!
//! Two layers: `ops` implements operator semantics (argument decoding, broadcasting, type
//! promotion, dtype dispatch, output resizing), one module per op family; `compute` holds the
//! raw loops and SIMD microkernels the ops call, each with a portable reference implementation
//! that tests compare against.
