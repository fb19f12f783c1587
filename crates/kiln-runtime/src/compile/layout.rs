//! The activation layout of each convolution: channels-last (NHWC) where a value passes only
//! between convolutions, NCHW everywhere else.
//!
//! A convolution's output is NHWC when every read of it (aliases and method outputs count as
//! reads) is a convolution's input or residual, and every such reader, and its producer, can
//! run with that layout ([`PackedConv2d::supports`]): a pointwise convolution reads and
//! writes either layout, another one-group convolution reads NCHW and writes either, a
//! depthwise one runs NHWC to NHWC when its channels fill blocks of 16, and a residual is
//! laid out as its reader's output. So a chain of convolutions starts from the NCHW input of
//! its first, and its last writes NCHW for whatever reads it next: no conversion steps.
//! No other step ever sees an NHWC value.

use std::collections::{HashMap, HashSet};

use kiln_kernels::compute::conv2d::{Conv2dGeometry, PackedConv2d};

use super::graph::{Graph, NodeOp};
use super::prepared::conv_geometry;
use super::{ConvNode, Layout, Layouts};

/// Sets [`ConvNode::layouts`] of every convolution of `g`.
pub(crate) fn choose_layouts(g: &mut Graph<'_>) {
    let convs: Vec<(usize, ConvNode, Conv2dGeometry)> = (0..g.nodes.len())
        .filter_map(|n| match &g.nodes[n].op {
            NodeOp::Conv(c) => Some((n, c.clone(), conv_geometry(g, c).ok()?)),
            _ => None,
        })
        .collect();
    let mut conv_reads: HashMap<u32, u32> = HashMap::new();
    for (_, c, _) in &convs {
        for v in std::iter::once(c.input).chain(c.residual) {
            *conv_reads.entry(v).or_default() += 1;
        }
    }
    // Outputs only convolutions read, then demoted until every convolution supports its
    // layouts (each pass only demotes, so this ends).
    let mut nhwc: HashSet<u32> = convs
        .iter()
        .map(|(_, c, _)| c.output)
        .filter(|v| conv_reads.get(v).is_some_and(|&r| r == g.reads(*v)))
        .collect();
    let layout = |nhwc: &HashSet<u32>, v: u32| {
        if nhwc.contains(&v) {
            Layout::Nhwc
        } else {
            Layout::Nchw
        }
    };
    loop {
        let mut changed = false;
        for (_, c, geometry) in &convs {
            let l = Layouts { input: layout(&nhwc, c.input), output: layout(&nhwc, c.output) };
            let residual = c.residual.filter(|&r| layout(&nhwc, r) != l.output);
            if PackedConv2d::supports(geometry, l) && residual.is_none() {
                continue;
            }
            changed = true;
            if l.output == Layout::Nhwc {
                nhwc.remove(&c.output);
            } else if let Some(r) = residual {
                nhwc.remove(&r);
            } else {
                nhwc.remove(&c.input);
            }
        }
        if !changed {
            break;
        }
    }
    for (n, c, _) in convs {
        if let NodeOp::Conv(node) = &mut g.nodes[n].op {
            node.layouts =
                Layouts { input: layout(&nhwc, c.input), output: layout(&nhwc, c.output) };
        }
    }
}
